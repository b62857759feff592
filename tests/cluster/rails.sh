#!/bin/sh
# Two rails (issue 55) on the emulated cluster (perf/cluster.sh with RAILS=2: each host
# eth0 and eth1 on two bridges): checked all-reduces, reduce-scatters and all-gathers
# over the rails transport, and all-reduces over the default (auto, no configuration:
# it stripes over both NICs too), 2 hosts x 2 ranks, large enough to be striped (128
# KiB and up), and every host sent a fair share on each rail (eth1 at least a quarter
# of eth0's bytes: the rails are alike, so their measured speeds cut about equally, and
# rail 0 alone carries the small messages and headers).
# Needs root and namespaces (skips 77 without).
# Usage: rails.sh CLUSTER_SH BUILD_DIR
set -u
cluster=$1 build=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ip netns add probe$$ 2>/dev/null || { echo "SKIP: no network namespaces"; exit 77; }
ip netns del probe$$
export ROUNDS=1 RATE=1gbit RAILS=2 HOSTS="2 2"
fail=0
# run COLLECTIVE WHAT [VAR=VALUE...]: a checked run (VARs for cluster.sh); the rail bytes
# then must show eth1 carrying a fair share (WHAT "both") or next to nothing ("eth0").
run() {
    c=$1 want=$2
    shift 2
    echo "== $c, $want: $*"
    out=$(env "$@" ARGS="-C $c -b 4 -e 4M -f 16 -n 2 -w 1 -d float -o all" sh "$cluster" "$build" 2>&1)
    rc=$?
    echo "$out" | grep -v "^sysctl\|cannot set"
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || { echo "FAILED: $c (a run failed or a result was wrong)"; fail=1; }
    echo "$out" | awk -v want="$want" '/^# rail bytes:/ { n++
            if (want == "both" ? $9 * 4 < $7 : $9 * 50 > $7) { bad = 1; print "FAILED: host " $5 " sent " $9 " bytes on eth1, " $7 " on eth0" } }
        END { if (n != 2) { print "FAILED: " n " hosts reported rail bytes"; bad = 1 } exit bad }' || fail=1
}
for c in all_reduce reduce_scatter all_gather; do
    run $c both ENVS=COLL_TRANSPORT=rails
done
# The default, unconfigured: auto stripes over both NICs; not over an eth1 that is on
# another network on each host (it reaches no peer), and nothing fails for it.
run all_reduce both IFNAME=
run all_reduce eth0 IFNAME= SPLIT_B=1
exit $fail
