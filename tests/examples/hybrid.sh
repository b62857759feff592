#!/bin/sh
# hybrid_1f1b, short runs on real data: replicas bit-identical after every epoch (the
# program exits 2 otherwise); weights within 1e-5 relative L2 of one process after 5 steps
# (exit 3 otherwise); 2x2 and 3x2 layouts, and int8 gradients in the stage groups; the
# stage groups' wire bytes match 2P(D-1)/D; the trace has every rank's F, B and A; and
# 3x2 again with splits that share the world's links.
# Skips (77) without the Fashion-MNIST files.
set -u
hy=$1
check=$(dirname "$0")/check.py
tmp=${TMPDIR:-/tmp}/hybrid_test.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
for args in "--np 4 --stages 2 --check-serial 5 --trace $tmp.trace" \
            "--np 6 --stages 3 --batch 48 --check-serial 5" \
            "--np 4 --stages 2 --schedule gpipe --codec int8"; do
    echo "== hybrid_1f1b $args"
    out=$("$hy" $args --epochs 2 --steps 20 --json "$tmp.json") ||
        { echo "$out"; echo "FAIL: hybrid_1f1b $args"; exit 1; }
    echo "$out"
    echo "$out" | tail -n 1 | grep -q '^test_accuracy 0\.[0-9]*$' ||
        { echo "FAIL: no final test_accuracy line"; exit 1; }
    python3 "$check" json "$tmp.json" || exit 1
done
# The same with the stage groups and pipelines sharing the world's links (COLL_SPLIT_SHARE):
# their collectives take turns, their sends share links; the checks are the same.
echo "== COLL_SPLIT_SHARE=1 hybrid_1f1b --np 6 --stages 3"
out=$(COLL_SPLIT_SHARE=1 "$hy" --np 6 --stages 3 --batch 48 --check-serial 5 --epochs 2 \
      --steps 20 --json "$tmp.shared.json") ||
    { echo "$out"; echo "FAIL: hybrid_1f1b with COLL_SPLIT_SHARE=1"; exit 1; }
python3 "$check" json "$tmp.shared.json" || exit 1
rm -f "$tmp.shared.json"
# 4 ranks x (4 micro-batches x F and B + one all-reduce)
python3 "$check" trace "$tmp.trace" 36 4 || exit 1
rm -f "$tmp.json" "$tmp.trace"
"$hy" --np 4 --stages 3 2>&1 | grep -q "do not make 3 stages" ||
    { echo "FAIL: 4 ranks cannot make 3 stages"; exit 1; }
echo "hybrid_1f1b: replicas identical, serial within 1e-5, bytes match the formula"
