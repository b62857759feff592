#!/bin/sh
# A rail that fails (issue 55): 2 hosts x 1 rank on the emulated cluster with two rails
# (perf/cluster.sh RAILS=2, 200 Mbit/s each), rails_loop's all-reduces over the rails
# transport (each result checked) and host 1's eth1 set down DOWN_AFTER (2) seconds into
# them (MODE=drop: every packet in or out of it dropped by nftables instead). Passes when every result is right, no rank fails, and rank 0 printed a warning
# naming the rail. Needs root and namespaces (skips 77 without).
# Usage: rails_down.sh CLUSTER_SH RAILS_LOOP
set -u
cluster=$1 loop=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ip netns add probe$$ 2>/dev/null || { echo "SKIP: no network namespaces"; exit 77; }
ip netns del probe$$
tmp=$(mktemp -d /tmp/rails_down.XXXXXX)
trap '[ -z "${KEEP_DIR:-}" ] || cp -r "$tmp" "$KEEP_DIR"; rm -rf "$tmp"' EXIT
# cluster.sh runs BUILD/perf/coll_perf on every host: here that is rails_loop.
mkdir -p "$tmp/build/perf" "$tmp/keep"
printf '#!/bin/sh\nexec "%s"\n' "$loop" > "$tmp/build/perf/coll_perf"
chmod +x "$tmp/build/perf/coll_perf"
export ROUNDS=1 RATE=200mbit RAILS=2 HOSTS="1 1" KEEP="$tmp/keep" \
    ENVS="COLL_TRANSPORT=rails ITERS=${ITERS:-60} ${ENVS:-}"
sh "$cluster" "$tmp/build" > "$tmp/out" 2>&1 &
pid=$!
ns=c$pid-h1 # cluster.sh's (its tag is its pid); there once it prints its links
for i in $(seq 200); do
    grep -q "^# links" "$tmp/out" && break
    sleep 0.1
done
sleep "${DOWN_AFTER:-2}"
if [ "${MODE:-down}" = drop ]; then
    ip netns exec "$ns" nft -f - <<NFT && echo "# $ns eth1 drops everything"
table inet railsdown {
    chain in { type filter hook input priority 0; iifname "eth1" drop; }
    chain out { type filter hook output priority 0; oifname "eth1" drop; }
}
NFT
else
    ip -n "$ns" link set eth1 down && echo "# $ns eth1 down"
fi
wait $pid
rc=$?
grep -v "^sysctl\|cannot set" "$tmp/out"
[ $rc -eq 77 ] && exit 77
fail=0
cat "$tmp"/keep/rank0.*
[ $rc -eq 0 ] || { echo "FAILED: a call failed or a result was wrong (exit $rc)"; fail=1; }
grep -q "rails: rail 1 (eth1) to .* failed" "$tmp"/keep/rank0.* ||
    { echo "FAILED: rank 0 printed no warning naming the rail"; fail=1; }
exit $fail
