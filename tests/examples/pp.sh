#!/bin/sh
# pp_train, short runs on real data: after 5 steps every stage's weights are bit-identical
# to one process on the whole batch (both schedules); the 1F1B order per stage is the
# textbook one (K-1-s warm-up forwards, then alternate, then cool-down); no stage stashes
# more than K-s micro-batches under 1F1B, while GPipe stashes all M; bytes sent per step
# match the formula; the micro-batch sweep shows 1F1B holding less activation memory than
# GPipe at every M > K. Skips (77) without the Fashion-MNIST files.
set -u
pp=$1
check=$(dirname "$0")/check.py
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
fail() { echo "$out"; echo "FAIL: $1"; exit 1; }

trace=${TMPDIR:-/tmp}/pp_trace.$$.json
json=${TMPDIR:-/tmp}/pp_json.$$.json
out=$("$pp" --np 3 --schedule 1f1b --microbatches 4 --epochs 1 --steps 20 --check-serial 5 \
    --trace "$trace" --json "$json") || fail "pp_train 1f1b exited non-zero"
echo "$out"
echo "$out" | grep -qx "order stage 0: F0 F1 F2 B0 F3 B1 B2 B3" || fail "stage 0 order"
echo "$out" | grep -qx "order stage 1: F0 F1 B0 F2 B1 F3 B2 B3" || fail "stage 1 order"
echo "$out" | grep -qx "order stage 2: F0 B0 F1 B1 F2 B2 F3 B3" || fail "stage 2 order"
echo "$out" | grep -q "bit-identical" || fail "1f1b weights differ from one process"
echo "$out" | grep -q "^  stage 2 |[FB.]*|$" || fail "no ASCII timeline"
python3 "$check" trace "$trace" 24 3 || fail "trace: want 3 stages x 8 kernels"
python3 "$check" json "$json" || fail "bytes per step"
rm -f "$trace" "$json"
for s in 0 1 2; do
    peak=$(echo "$out" | sed -n "s/.*stage $s: .*peak stash \([0-9]*\) .*/\1/p")
    [ -n "$peak" ] && [ "$peak" -le $((3 - s)) ] || fail "stage $s stashed $peak > K-s"
done

out=$("$pp" --np 2 --schedule gpipe --microbatches 8 --epochs 1 --steps 20 --check-serial 5) ||
    fail "pp_train gpipe exited non-zero"
echo "$out"
echo "$out" | grep -qx "order stage 0: F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7" ||
    fail "gpipe order"
echo "$out" | grep -q "bit-identical" || fail "gpipe weights differ from one process"
echo "$out" | grep -q "stage 0: .*peak stash 8 " || fail "gpipe should stash all 8"
echo "$out" | tail -n 1 | grep -q '^test_accuracy 0\.[0-9]*$' || fail "no test_accuracy line"
out=$("$pp" --np 2 --sweep 2,4,8 --steps 3) || fail "sweep exited non-zero"
echo "$out"
for m in 4 8; do
    g=$(echo "$out" | awk -v m=$m '$1 == m && $2 == "gpipe" { print $7 }')
    f=$(echo "$out" | awk -v m=$m '$1 == m && $2 == "1f1b" { print $7 }')
    [ -n "$g" ] && [ -n "$f" ] || fail "sweep row for M=$m missing"
    python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$f" "$g" ||
        fail "M=$m: 1F1B holds $f KiB, GPipe $g KiB"
done
echo "pp_train: schedules, stash bounds, bytes and serial equivalence hold"
