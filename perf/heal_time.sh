#!/bin/sh
# Issue 53's target, measured: a dp_train --heal run (HEAL_TRAINER=hybrid_1f1b, with its
# --stages among the trainer's arguments, for the other) of NP ranks under coll_run
# --max-restarts 1 loses one rank (SIGKILL from outside, at a random moment of its
# training; rank i mod NP in run i, so every rank dies once in NP runs) and grows back.
# Per run: the time from the kill to the job back at NP ranks with the state handed over
# (the replacement has it), and its parts: the loss seen (kill to the survivors' failed
# collective), the shrink, the replacement's process start (kill to its main()), the grow
# (the replacement loads its data, then joins), the state; the bound the issue sets,
# failure timeout (COLL_TIMEOUT_MS) + process start + state bytes / broadcast bandwidth
# (coll_perf at 4 MiB, same ranks) + 1 s; and whether the run ended with the undisturbed
# run's weights, bit for bit. A benchmark, not a test: the last
# line says how many runs met the bound with the right weights. HEAL_KEEP=DIR keeps each
# run's log (perf/heal_timeline.py draws one).
#   perf/heal_time.sh [BUILD_DIR] [NP] [RUNS] [TRAINER ARGS...]  (COLL_TRANSPORT as usual)
set -u
build=${1:-build}
np=${2:-4}
runs=${3:-20}
[ $# -gt 3 ] && shift 3 || set --
dp=$build/examples/${HEAL_TRAINER:-dp_train}
run=$build/tools/coll_run
tmp=${TMPDIR:-/tmp}/heal_time.$$
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $data"; exit 77; }
: "${COLL_TIMEOUT_MS:=5000}"
export COLL_TIMEOUT_MS
args="--epochs 2 --steps 120 --lr-schedule const --batch $((np * 16)) --data $data $*"
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
# The launcher's children (its rank processes), oldest first, from /proc (no procps needed).
children() {
    for s in /proc/[0-9]*/stat; do
        { read -r pid _ _ ppid _ < "$s"; } 2>/dev/null && [ "$ppid" = "$1" ] && echo "$pid"
    done | sort -n
}
# A run in the background (pid in $parent); returns once its second step's timeline is out.
start() {
    $run --np "$np" --max-restarts 1 "$dp" $args "$@" > "$out" 2>&1 &
    parent=$!
    for w in $(seq 600); do
        grep -q "^timeline of one step" "$out" && return
        sleep 0.05
    done
}
out=$tmp.base
start
t0=$(now)
wait "$parent" || { cat "$out"; echo "undisturbed run failed"; exit 1; }
took_ms=$(ms "$t0" "$(now)")
want=$(grep "^weights " "$out")
bw=$("$build/perf/coll_perf" --np "$np" -C broadcast -b 4M -e 4M -n 20 2>&1 |
     awk '$1 ~ /^[0-9]+$/ { print $7; exit }')
echo "# $(basename "$dp") --heal, $np ranks, transport ${COLL_TRANSPORT:-auto}," \
     "${COLL_TIMEOUT_MS} ms failure timeout, 4 MiB broadcast $bw GB/s; undisturbed: $want," \
     "$took_ms ms"
printf '%4s %4s %7s %7s %7s %7s %7s %7s %7s %7s %s\n' run rank at_ms full_ms seen_ms \
    shrink start_ms grow_ms state bound weights
ok=0
i=0
while [ $i -lt "$runs" ]; do
    out=$tmp.out
    start --heal
    at_ms=$(( $(od -An -N2 -tu2 /dev/urandom) % (took_ms / 2 + 1) ))
    sleep "$(awk -v ms="$at_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
    rank=$(( i % np ))
    victim=$(children "$parent" | sed -n "$((rank + 1))p")
    killed=$(now)
    [ -n "$victim" ] && kill -9 "$victim"
    wait "$parent"
    if [ -n "${HEAL_KEEP:-}" ]; then # the log and the kill, for perf/heal_timeline.py
        mkdir -p "$HEAL_KEEP" && { cat "$out"; echo "killed $killed rank $rank"; } \
            > "$HEAL_KEEP/run$i.log"
    fi
    back=$(grep "^heal: back at $np ranks" "$out" | tail -n 1)
    join=$(grep "^heal: rank [0-9]* joined" "$out" | tail -n 1)
    seen=$(echo "$back" | sed -n 's/.*seen at \([0-9.]*\).*/\1/p')
    began=$(echo "$join" | sed -n 's/.*process started at \([0-9.]*\).*/\1/p')
    full=$(echo "$join" | sed -n 's/.*state at \([0-9.]*\).*/\1/p') # the last to have it
    if [ -z "$seen" ] || [ -z "$began" ]; then
        echo "run $i: no heal seen (rank $rank killed $at_ms ms in):"
        tail -n 20 "$out"
        i=$((i + 1))
        continue
    fi
    part() { echo "$back" | sed -n "s/.*$1 \([0-9]*\) ms.*/\1/p"; }
    bytes=$(echo "$back" | sed -n 's/.* for \([0-9]*\) bytes.*/\1/p')
    start_ms=$(ms "$killed" "$began")
    bound=$(awk -v t="$COLL_TIMEOUT_MS" -v s="$start_ms" -v b="$bytes" -v bw="$bw" \
        'BEGIN { printf "%.0f", t + s + b / (bw * 1e6) + 1000 }')
    full_ms=$(ms "$killed" "$full")
    got=$(grep "^weights " "$out")
    same=differ
    [ -n "$want" ] && [ "$got" = "$want" ] && same=same
    [ "$same" = same ] && [ "$full_ms" -le "$bound" ] && ok=$((ok + 1))
    printf '%4d %4d %7d %7d %7s %7s %7s %7s %7s %7s %s\n' "$i" "$rank" "$at_ms" "$full_ms" \
        "$(ms "$killed" "$seen")" "$(part shrink)" "$start_ms" "$(part grow)" "$(part state)" \
        "$bound" "$same"
    i=$((i + 1))
done
rm -f "$tmp.base" "$tmp.out"
echo "$ok of $runs runs back at $np ranks within the bound with the undisturbed weights"
[ "$ok" -eq "$runs" ]
