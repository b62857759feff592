#!/bin/sh
# compare_strategies.py end to end on 2 ranks: six strategies, one row each, every run's
# JSON passing its own byte-formula check, one trace per strategy; where Debian's python3
# has torch, also torch_ddp.py on one rank and on two (its bytes against DDP's formula),
# but not with a sanitized library (COLL_SANITIZED=1: python cannot load it).
# Usage: compare.sh SCRIPT BINDIR. Skips (77) without Fashion-MNIST.
set -u
script=$1 bin=$2
check=$(dirname "$0")/check.py
out=${TMPDIR:-/tmp}/compare.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
want=6 torch=--no-torch
if [ "${COLL_SANITIZED:-0}" = 0 ] && /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
    want=8 torch=
fi
table=$(python3 "$script" --bin "$bin" --ranks 2 --steps 5 --out "$out" $torch) ||
    { echo "$table"; echo "FAIL: compare_strategies exited non-zero"; exit 1; }
echo "$table"
rows=$(echo "$table" | grep -cE '^(serial|dp|fsdp|tp|pp-1f1b|hybrid|torch-1|torch-dp) +2 ')
[ "$rows" -eq $want ] || { echo "FAIL: $rows rows, want $want"; exit 1; }
for j in "$out"/*_2.json; do python3 "$check" json "$j" || exit 1; done
traces=$(ls "$out"/*_2.trace.json | wc -l)
rm -rf "$out"
[ "$traces" -eq $want ] || { echo "FAIL: $traces traces, want $want"; exit 1; }
echo "compare_strategies: $want runs compared"
