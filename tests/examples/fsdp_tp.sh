#!/bin/sh
# fsdp_train and tp_train, short runs on real data: after 5 steps both are within 1e-5
# (relative L2) of one process on the whole batch (the programs exit 3 otherwise); their
# wire bytes per step equal the formulas (FSDP 3P'(N-1)/N, TP the all-reduces of B x 256,
# B x 10 and B x 256); FSDP's parameter memory per rank is DP's over N plus the gathered
# layer buffers; FSDP without prefetch ends with the same weights (same test accuracy);
# TP refuses a rank count that does not divide the layer widths.
# Usage: fsdp_tp.sh FSDP_TRAIN TP_TRAIN DP_TRAIN. Skips (77) without Fashion-MNIST.
set -u
fsdp=$1 tp=$2 dp=$3
check=$(dirname "$0")/check.py
tmp=${TMPDIR:-/tmp}/fsdp_tp.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
run() { # name program args...
    name=$1; shift
    echo "== $name $*"
    out=$("$@" --epochs 1 --steps 30 --check-serial 5 --json "$tmp.$name.json") ||
        { echo "$out"; echo "FAIL: $name exited non-zero"; exit 1; }
    echo "$out"
    echo "$out" | grep -q "differ from one process by" || { echo "FAIL: $name: no check"; exit 1; }
    python3 "$check" json "$tmp.$name.json" || exit 1
}
for n in 2 4; do
    run dp$n "$dp" --np $n
    run fsdp$n "$fsdp" --np $n --trace "$tmp.trace"
    python3 "$check" trace "$tmp.trace" $((20 * n)) $n || exit 1
    python3 "$check" fsdp "$tmp.fsdp$n.json" "$tmp.dp$n.json" $n 1 || exit 1
    run tp$n "$tp" --np $n --trace "$tmp.trace"
    python3 "$check" trace "$tmp.trace" $((11 * n)) $n || exit 1
done
run fsdp_noprefetch "$fsdp" --np 2 --prefetch 0
python3 "$check" fsdp "$tmp.fsdp_noprefetch.json" "$tmp.dp2.json" 2 0 || exit 1
a=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['test_accuracy'])" "$tmp.fsdp2.json")
b=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['test_accuracy'])" "$tmp.fsdp_noprefetch.json")
[ "$a" = "$b" ] || { echo "FAIL: prefetch changed the result ($a vs $b)"; exit 1; }
rm -f "$tmp".*
"$tp" --np 3 2>&1 | grep -q "do not divide the layer widths" ||
    { echo "FAIL: tp_train must refuse 3 ranks"; exit 1; }
echo "fsdp_train, tp_train: serial within 1e-5, bytes and memory match the formulas"
