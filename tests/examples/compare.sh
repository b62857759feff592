#!/bin/sh
# compare_strategies.py end to end on 2 ranks: six strategies, one row each, every run's
# JSON passing its own byte-formula check, one trace per strategy.
# Usage: compare.sh SCRIPT BINDIR. Skips (77) without Fashion-MNIST.
set -u
script=$1 bin=$2
check=$(dirname "$0")/check.py
out=${TMPDIR:-/tmp}/compare.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
table=$(python3 "$script" --bin "$bin" --ranks 2 --steps 5 --out "$out") ||
    { echo "$table"; echo "FAIL: compare_strategies exited non-zero"; exit 1; }
echo "$table"
rows=$(echo "$table" | grep -cE '^(serial|dp|fsdp|tp|pp-1f1b|hybrid) +2 ')
[ "$rows" -eq 6 ] || { echo "FAIL: $rows rows, want 6"; exit 1; }
for j in "$out"/*_2.json; do python3 "$check" json "$j" || exit 1; done
traces=$(ls "$out"/*_2.trace.json | wc -l)
rm -rf "$out"
[ "$traces" -eq 6 ] || { echo "FAIL: $traces traces, want 6"; exit 1; }
echo "compare_strategies: 6 strategies compared"
