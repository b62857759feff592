#!/bin/sh
# dp_train, short runs on real data: the program itself fails (non-zero) when replicas
# differ after an epoch, or when its weights after 5 steps are further than 1e-5
# (relative L2) from one process training on the whole global batch. Its JSON report's
# wire bytes per step match 2P(N-1)/N (f32 and int8), and its trace has F, B and A on
# every rank. Skips (77) without the Fashion-MNIST files.
set -u
dp=$1
check=$(dirname "$0")/check.py
tmp=${TMPDIR:-/tmp}/dp_test.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
for args in "--np 2 --check-serial 5" "--np 4 --check-serial 5 --trace $tmp.trace" \
            "--np 3 --batch 63 --codec int8"; do
    echo "== dp_train $args"
    out=$("$dp" $args --epochs 2 --steps 40 --json "$tmp.json") ||
        { echo "$out"; echo "FAIL: dp_train $args"; exit 1; }
    echo "$out"
    echo "$out" | tail -n 1 | grep -q '^test_accuracy 0\.[0-9]*$' ||
        { echo "FAIL: no final test_accuracy line"; exit 1; }
    python3 "$check" json "$tmp.json" || exit 1
done
python3 "$check" trace "$tmp.trace" 12 4 || exit 1
rm -f "$tmp.json" "$tmp.trace"
"$dp" --np 2 --data /nonexistent 2>&1 | grep -q "cannot open" ||
    { echo "FAIL: a missing dataset must be a clear error"; exit 1; }
echo "dp_train: replicas identical, serial match, bytes match the formula, clear error without data"
