#!/bin/sh
# A second rail that never reaches the peer (issue 55): 2 ranks of rails_loop in a network
# namespace of their own with two veth interfaces (rl0 10.81.0.1, rl1 10.82.0.1) taken
# as rails (COLL_TRANSPORT=rails, COLL_SOCKET_IFNAME=rl), nftables dropping every packet
# to rl1's address from the start: each rank's dial of rail 1 never completes (its SYNs
# are lost), as with a NIC cabled to another switch or a firewall on it. Passes when
# every all-reduce (4 MiB, striped) is right, the job ends within BOUND (20) s, well
# under the init timeout (COLL_TIMEOUT_MS 60000, where it failed before), and a rank
# warned naming rail 1. Needs root and namespaces (skips 77 without).
# Usage: rails_absent.sh RAILS_LOOP
set -u
loop=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ns=railsabs$$
ip netns add "$ns" 2>/dev/null || { echo "SKIP: no network namespaces"; exit 77; }
tmp=$(mktemp -d /tmp/rails_absent.XXXXXX)
trap 'ip netns del "$ns"; rm -rf "$tmp"' EXIT
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up
for k in 0 1; do
    in_ns ip link add "rl$k" type veth peer name "peer$k" &&
        in_ns ip addr add "10.8$((k + 1)).0.1/24" dev "rl$k" &&
        in_ns ip link set "rl$k" up && in_ns ip link set "peer$k" up ||
        { echo "SKIP: no veth interfaces"; exit 77; }
done
in_ns nft -f - <<NFT || { echo "SKIP: no nftables"; exit 77; }
table inet railsabsent {
    chain out { type filter hook output priority 0; ip daddr 10.82.0.1 drop; }
}
NFT
export COLL_TRANSPORT=rails COLL_SOCKET_IFNAME=rl MASTER_ADDR=10.81.0.1 MASTER_PORT=29500 \
    WORLD_SIZE=2 ITERS=${ITERS:-20} COUNT=1048576 COLL_TIMEOUT_MS=60000
start=$(date +%s%N)
RANK=0 in_ns timeout 90 "$loop" > "$tmp/rank0" 2>&1 &
p0=$!
RANK=1 in_ns timeout 90 "$loop" > "$tmp/rank1" 2>&1 &
p1=$!
wait $p0
rc0=$?
wait $p1
rc1=$?
ms=$((($(date +%s%N) - start) / 1000000))
grep -v "^call " "$tmp/rank0" "$tmp/rank1"
echo "# the job took $ms ms (rank exits $rc0 $rc1)"
fail=0
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAILED: a rank failed or a result was wrong"; fail=1; }
grep -q "Out of bounds values : 0 OK" "$tmp/rank0" || { echo "FAILED: no checked results"; fail=1; }
[ "$ms" -le "${BOUND:-20}000" ] || { echo "FAILED: over ${BOUND:-20} s"; fail=1; }
grep -q "rails: rail 1 (rl1) .*has not come in" "$tmp/rank0" "$tmp/rank1" ||
    { echo "FAILED: no warning naming rail 1"; fail=1; }
exit $fail
