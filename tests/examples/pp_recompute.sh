#!/bin/sh
# pp_train --recompute: each stage stashes only its input (and the output it sends) and runs
# its forward again in the backward. The same kernels on the same inputs in the same order:
# every epoch's loss and accuracies, the final weights' hash and the test accuracy must be
# the same text as without it (and the 5-step check against one process bit-identical),
# under both schedules on 2 and 3 stages; each stage's peak stash no larger and the sum
# over stages smaller. Skips (77) without the Fashion-MNIST files.
set -u
pp=$1
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist not installed: skipped"; exit 77; }
export EX_TEST_SAMPLES=1000
fail() { echo "$1"; exit 1; }
# The lines that must match: epochs up to their timings, the hash, the accuracy.
result() { echo "$1" | sed -n 's/^\(epoch [0-9]*: [^|]*\)|.*/\1/p; /^weights_hash /p; /^test_accuracy /p'; }
# "stage k KiB" for each stage's peak stash (the last epoch's).
stash() { echo "$1" | sed -n 's/^  stage \([0-9]\): .*peak stash [0-9]* micro-batches = \([0-9]*\) KiB.*/\1 \2/p' | tail -n "$2"; }

for run in "2 gpipe 8" "3 1f1b 4" "3 gpipe 16"; do
    set -- $run
    args="--np $1 --schedule $2 --microbatches $3 --epochs 2 --steps 12 --check-serial 5"
    plain=$("$pp" $args) || fail "pp_train $args exited non-zero"
    redo=$("$pp" $args --recompute) || fail "pp_train $args --recompute exited non-zero"
    echo "$redo"
    echo "$redo" | grep -q "recompute (stashing" || fail "$args: --recompute not in effect"
    echo "$redo" | grep -q "bit-identical" || fail "$args --recompute: differs from one process"
    [ "$(result "$plain" | wc -l)" -eq 4 ] || fail "$args: want 2 epoch lines, hash, accuracy"
    [ "$(result "$plain")" = "$(result "$redo")" ] ||
        fail "$args: results differ:
$(result "$plain")
--- with --recompute:
$(result "$redo")"
    stash "$plain" "$1" > /tmp/pp_recompute_a.$$
    stash "$redo" "$1" > /tmp/pp_recompute_b.$$
    verdict=$(join /tmp/pp_recompute_a.$$ /tmp/pp_recompute_b.$$ | awk -v K="$1" '
        { n++; a += $2; b += $3; if ($3 > $2) worse = worse " stage " $1 }
        END { if (n != K) print "want " K " stages, got " n
              else if (worse != "") print "stash grew on" worse
              else if (b >= a) print "stash sum " b " KiB not below " a " KiB"
              else print "ok " a " KiB -> " b " KiB" }')
    rm -f /tmp/pp_recompute_a.$$ /tmp/pp_recompute_b.$$
    case $verdict in ok*) echo "$args: same results, stash ${verdict#ok }" ;; *) fail "$args: $verdict" ;; esac
done
echo "pp_train --recompute: same weights, less stash"
