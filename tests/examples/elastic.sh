#!/bin/sh
# dp_train --elastic on 4 ranks: one rank, chosen at random, is killed (SIGKILL, from
# outside) at a random moment of its training; the survivors shrink, split the global
# batch over the three left and finish the run. The last line is still "test_accuracy
# A", within 0.01 of the same run undisturbed, and the run says whom it lost.
# Usage: elastic.sh DP_TRAIN. Skips (77) without the Fashion-MNIST files.
set -u
dp=$1
tmp=${TMPDIR:-/tmp}/elastic.$$
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
args="--np 4 --epochs 2 --steps 120 --batch 60 --lr-schedule const"
export COLL_TIMEOUT_MS=3000
t0=$(date +%s%N)
"$dp" $args > "$tmp.base" 2>&1 || { cat "$tmp.base"; echo "FAIL: undisturbed run"; exit 1; }
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
base=$(tail -n 1 "$tmp.base" | sed -n 's/^test_accuracy //p')
[ -n "$base" ] || { cat "$tmp.base"; echo "FAIL: no test_accuracy undisturbed"; exit 1; }
# Between a fifth and a half of the undisturbed run's time: after the data is loaded,
# well before the end even when this run goes faster than that one.
at_ms=$(( took_ms / 5 + $(od -An -N2 -tu2 /dev/urandom) % (took_ms * 3 / 10) ))
"$dp" $args --elastic > "$tmp.out" 2>&1 &
parent=$!
sleep "$(awk -v ms="$at_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
ranks=$(pgrep -P "$parent" | sort -n)
pick=$(( $(od -An -N2 -tu2 /dev/urandom) % 4 + 1 ))
victim=$(echo "$ranks" | sed -n "${pick}p")
[ -n "$victim" ] || { cat "$tmp.out"; echo "FAIL: no rank processes to kill"; exit 1; }
kill -9 "$victim"
wait "$parent"
cat "$tmp.out"
grep -q "^elastic: lost rank(s) $((pick - 1)) " "$tmp.out" ||
    { echo "FAIL: the run did not say it lost rank $((pick - 1)) (killed at $at_ms ms)"; exit 1; }
got=$(sed -n "s/^test_accuracy //p" "$tmp.out" | tail -n 1)
[ -n "$got" ] || { echo "FAIL: no test_accuracy after the loss"; exit 1; }
awk -v a="$got" -v b="$base" 'BEGIN { d = a - b; exit !(d <= 0.01 && d >= -0.01) }' ||
    { echo "FAIL: test_accuracy $got, undisturbed $base"; exit 1; }
rm -f "$tmp.base" "$tmp.out"
echo "dp_train --elastic: lost rank $((pick - 1)) at $at_ms ms of $took_ms, test_accuracy $got (undisturbed $base)"
