#!/bin/sh
# The traces' picture in the docs: 4 ranks on 2 emulated hosts (perf/cluster.sh: network
# namespaces, veth links shaped to RATE), coll_perf all-reduces of SIZE with COLL_TRACE
# on, once with COLL_ALGO=ring and once with COLL_ALGO=hier; each run's files merged
# (tools/coll_trace_merge.py) and the last all-reduce of each drawn side by side
# (perf/trace_picture.py), its numbers printed.
#   perf/trace_picture.sh [BUILD]      (default: build)
# Environment: SIZE=4M  RATE=200mbit (slow enough that the links, not a small machine's
# scheduler, set the times)  OUT=docs/trace-allreduce.svg  KEEP=DIR (the traces)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
size=${SIZE:-4M}
out=${OUT:-$here/../docs/trace-allreduce.svg}
dir=${KEEP:-$(mktemp -d /tmp/trace_picture.XXXXXX)}
mkdir -p "$dir"
for algo in ring hier; do
    rm -rf "${dir:?}/$algo"
    HOSTS="2 2" ORDER=blocked ROUNDS=1 RATE=${RATE:-200mbit} \
        ENVS="COLL_ALGO=$algo COLL_TRACE=$dir/$algo COLL_JOB_ID=$algo" \
        ARGS="-b $size -e $size -n 3 -w 1" "$here/cluster.sh" "$build"
    python3 "$here/../tools/coll_trace_merge.py" "$dir/$algo" -o "$dir/$algo.json"
done
python3 "$here/trace_picture.py" "ring=$dir/ring.json" "hierarchical=$dir/hier.json" > "$out"
echo "# drawn to $out; traces in $dir"
