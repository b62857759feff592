#!/bin/sh
# Rails of unequal speeds (issue 55): perf/cluster.sh RAILS=2 with eth0 at 400 Mbit/s and
# eth1 at 100 Mbit/s, 2 hosts x 2 ranks, checked 16 MiB all-reduces over the rails
# transport. Passes when every result is right and each host sent 10-33% of its bytes on
# eth1: the cut follows the rails' measured speeds (a fifth), not equal halves (which
# the slow rail would set the pace of). Needs root and namespaces (skips 77 without).
# Usage: rails_weighted.sh CLUSTER_SH BUILD_DIR
set -u
cluster=$1 build=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ip netns add probe$$ 2>/dev/null || { echo "SKIP: no network namespaces"; exit 77; }
ip netns del probe$$
out=$(ROUNDS=1 RATE=400mbit RATE_B=100mbit RAILS=2 HOSTS="2 2" ENVS=COLL_TRANSPORT=rails \
    ARGS="-C all_reduce -b 16M -e 16M -n 5 -w 1 -d float -o all" sh "$cluster" "$build" 2>&1)
rc=$?
echo "$out" | grep -v "^sysctl\|cannot set"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAILED: a run failed or a result was wrong"; exit 1; }
echo "$out" | awk '/^# rail bytes:/ { n++; f = $9 / ($7 + $9)
        if (f < 0.10 || f > 0.33) { bad = 1; printf "FAILED: host %s sent %.2f of its bytes on eth1\n", $5, f } }
    END { if (n != 2) { print "FAILED: " n " hosts reported rail bytes"; bad = 1 } exit bad }'
