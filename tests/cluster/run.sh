#!/bin/sh
# The emulated cluster (perf/cluster.sh: hosts in network namespaces on a bridge, links
# shaped by tc) in CI: coll_perf's checked all-reduces at small sizes, every all-reduce
# algorithm that fits, on even hosts numbered round-robin and uneven hosts numbered at
# random (hier's folds too: 3+2+2, 4+2, 2+1+1; Rabenseifner's inside hosts on 3+2+2 and
# across them on 1+3+1+1); reduce-scatter, all-gather and broadcast
# (host order, hier's rounds with small segments, on even and uneven hosts) the same way. Needs root and
# namespaces (skips 77 without).
# Usage: run.sh CLUSTER_SH BUILD_DIR
set -u
cluster=$1 build=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ip netns add probe$$ 2>/dev/null || { echo "SKIP: no network namespaces"; exit 77; }
ip netns del probe$$
export ROUNDS=1 RATE=1gbit
fail=0
run() { # hosts order algo max-bytes [collective [more environment]]
    echo "== hosts '$1', $2 numbering, COLL_ALGO=${3:-chosen} ${5:-all_reduce} ${6:-}"
    HOSTS=$1 ORDER=$2 ENVS="${3:+COLL_ALGO=$3} ${6:-}" \
        ARGS="-C ${5:-all_reduce} -b 4 -e $4 -f 16 -n 2 -w 1 -d float -o all" sh "$cluster" "$build"
    rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || { echo "FAILED: hosts '$1' $2 ${3:-chosen}"; fail=1; }
}
run "2 2 2 2" rr "" 256K
run "2 2 2 2" rr ring 256K
run "2 2 2 2" rr hier 256K
run "2 2 2 2" rr doubling 64K
run "3 2 2" random "" 256K
run "3 2 2" random ring 256K
run "3 2 2" random tree 256K
run "3 2 2" random hier 256K
run "3 2 2" random rabenseifner 256K
run "1 3 1 1" rr rabenseifner 256K
run "4 2" blocked hier 256K
run "2 1 1" rr hier 256K
for c in reduce_scatter all_gather; do
    run "2 2 2 2" rr "" 256K $c
    run "2 2 2 2" random hier 1M $c COLL_SEGMENT_BYTES=4096
    run "3 2 2" random ring 256K $c
    run "3 2 2" random hier 256K $c COLL_SEGMENT_BYTES=4096
done
run "3 2 2" random "" 1M broadcast
exit $fail
