#!/bin/sh
# Bad links between two network namespaces joined by a veth pair:
#  1. netem with 5% loss, 20 ms delay and reordering: every coll_perf result still exact
#     (kernels without sch_netem: 5% random loss with nftables instead, no delay);
#  2. four ranks, two per namespace: the auto transport joins each pair with shm and the
#     pairs with tcp, in one communicator, and every result is exact;
#  3. the link goes down in the middle of a long all-reduce: both ranks fail within the
#     timeout instead of hanging; and again with a 10-minute operation timeout: the
#     heartbeat finds the lost peer within the peer timeout (COLL_TIMEOUT_MS);
#  4. a receive from a peer whose namespace leaves the network, operation timeout 10
#     min: the heartbeat (a receive judges the rank it waits on) or the idle link's
#     keepalive must end it within about the peer timeout (TCP_USER_TIMEOUT, where set,
#     overrides keepalive's count of probes).
# Needs root and iproute2 (tc); skips (77) where namespaces cannot be made.
set -u
perf=$1 lost=$2
a=ctA$$ b=ctB$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT INT TERM
if ! ip netns add "$a" 2>/dev/null || ! ip netns add "$b"; then
    echo "cannot create network namespaces: skipped"
    exit 77
fi
ip link add va$$ netns "$a" type veth peer name vb$$ netns "$b" || exit 77
ip -n "$a" addr add 10.98.0.1/24 dev va$$
ip -n "$b" addr add 10.98.0.2/24 dev vb$$
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set va$$ up
ip -n "$b" link set vb$$ up
shaping=netem
for side in "$a va$$" "$b vb$$"; do
    set -- $side
    ip netns exec "$1" tc qdisc add dev "$2" root netem loss 5% delay 20ms 10ms reorder 25% 50% \
        2>/dev/null || shaping=nft
done
if [ $shaping = nft ]; then
    for ns in "$a" "$b"; do
        ip netns exec "$ns" nft add table inet lossy &&
        ip netns exec "$ns" nft 'add chain inet lossy out { type filter hook output priority 0; }' &&
        ip netns exec "$ns" nft add rule inet lossy out numgen random mod 100 '<' 5 drop ||
            { echo "neither tc netem nor nftables works here: skipped"; exit 77; }
    done
fi

# rank r (of $world) in namespace ns; extra arguments go to coll_perf
world=2
rank() {
    r=$1 ns=$2 port=$3 timeout=$4
    shift 4
    ip netns exec "$ns" env RANK="$r" WORLD_SIZE=$world MASTER_ADDR=10.98.0.1 MASTER_PORT="$port" \
        COLL_SOCKET_IFNAME=v COLL_TIMEOUT_MS="$timeout" COLL_DEBUG=info "$perf" "$@"
}

port=$((20000 + $$ % 10000))
if [ $shaping = netem ]; then
    echo "== lossy link: 5% loss, 20 ms +- 10 ms delay, 25% reordering (netem)"
else
    echo "== lossy link: 5% of packets dropped each way (nftables; this kernel has no netem)"
fi
rank 0 "$a" "$port" 60000 -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 > /tmp/netem.$$.0 2>&1 &
p0=$!
rank 1 "$b" "$port" 60000 -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 > /tmp/netem.$$.1 2>&1 &
p1=$!
wait $p0; s0=$?
wait $p1; s1=$?
cat /tmp/netem.$$.0
if [ $s0 -ne 0 ] || [ $s1 -ne 0 ] || ! grep -q "Out of bounds values : 0 OK" /tmp/netem.$$.0; then
    echo "FAIL: results over a lossy link (exit $s0 $s1)"; cat /tmp/netem.$$.1; exit 1
fi
# One host, two network namespaces: the auto transport must take tcp, not shm.
grep "transport auto" /tmp/netem.$$.0 | grep -q "to 1 via tcp " ||
    { echo "FAIL: ranks in two namespaces did not pick tcp"; grep ring /tmp/netem.$$.0; exit 1; }

for side in "$a va$$" "$b vb$$"; do
    set -- $side
    ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null
    ip netns exec "$1" nft delete table inet lossy 2>/dev/null
done

echo "== four ranks, two per namespace: shm within, tcp across"
world=4 port=$((port + 1))
for r in 0 1 2 3; do
    ns=$a; [ $r -ge 2 ] && ns=$b
    rank $r "$ns" "$port" 20000 -b 8 -e 16M -f 64 -n 3 -w 1 -c 1 > /tmp/netem.$$.m$r 2>&1 &
done
wait
cat /tmp/netem.$$.m0
grep -h "transport auto" /tmp/netem.$$.m*
ok=1
grep -q "Out of bounds values : 0 OK" /tmp/netem.$$.m0 || ok=0
grep -q "rank 0/4 .*to 1 via shm " /tmp/netem.$$.m0 || ok=0 # same namespace
grep -q "rank 1/4 .*to 2 via tcp " /tmp/netem.$$.m1 || ok=0 # across
rm -f /tmp/netem.$$.m*
[ $ok = 1 ] || { echo "FAIL: mixed shm/tcp communicator"; exit 1; }
world=2

# A 64 MiB all-reduce loop whose link goes down 3 s in: both ranks must fail within
# LIMIT seconds in all (COLL_TIMEOUT_MS 3 s; COLL_OP_TIMEOUT_MS as the caller exported).
link_down() {
    limit=$1
    ip -n "$a" link set va$$ up
    port=$((port + 1))
    start=$(date +%s)
    rank 0 "$a" "$port" 3000 -b 64M -e 64M -n 200 -w 1 -c 0 > /tmp/netem.$$.0 2>&1 &
    p0=$!
    rank 1 "$b" "$port" 3000 -b 64M -e 64M -n 200 -w 1 -c 0 > /tmp/netem.$$.1 2>&1 &
    p1=$!
    sleep 3
    ip -n "$a" link set va$$ down
    wait $p0; s0=$?
    wait $p1; s1=$?
    took=$(( $(date +%s) - start ))
    tail -n 2 /tmp/netem.$$.0 /tmp/netem.$$.1
    rm -f /tmp/netem.$$.0 /tmp/netem.$$.1
    if [ $s0 -eq 0 ] || [ $s1 -eq 0 ] || [ $took -gt "$limit" ]; then
        echo "FAIL: link down: exits $s0 $s1 after $took s (want both non-zero within $limit s)"
        exit 1
    fi
    echo "both ranks failed after the link went down ($took s in all)"
}

echo "== link down in the middle of a 64 MiB all-reduce loop (timeout 3 s)"
link_down 20
# Operations allowed 10 minutes without progress: the heartbeat (bound by
# COLL_TIMEOUT_MS, 3 s) finds the lost peer, not the operation.
echo "== link down, operation timeout 10 min, peer timeout 3 s"
COLL_OP_TIMEOUT_MS=600000 && export COLL_OP_TIMEOUT_MS
link_down 30

echo "== a receive from a peer that left the network, operation timeout 10 min, peer timeout 3 s"
port=$((port + 1)) perf=$lost # COLL_OP_TIMEOUT_MS=600000 still exported
ip -n "$a" link set va$$ up
rank 0 "$a" "$port" 3000 > /tmp/netem.$$.0 2>&1 &
p0=$!
rank 1 "$b" "$port" 3000 > /tmp/netem.$$.1 2>&1 &
p1=$!
ready=0
for i in $(seq 1 100); do
    grep -q ready /tmp/netem.$$.0 && { ready=1; break; }
    sleep 0.1
done
ip netns exec "$b" nft add table inet gone
ip netns exec "$b" nft 'add chain inet gone in { type filter hook input priority 0; policy drop; }'
ip netns exec "$b" nft 'add chain inet gone out { type filter hook output priority 0; policy drop; }'
start=$(date +%s)
ended=0
for i in $(seq 1 150); do # 15 s: five peer timeouts
    kill -0 $p0 2>/dev/null || { ended=1; break; }
    sleep 0.1
done
took=$(( $(date +%s) - start ))
[ $ended = 1 ] || kill $p0
wait $p0; s0=$?
kill $p1; wait $p1
cat /tmp/netem.$$.0
rm -f /tmp/netem.$$.0 /tmp/netem.$$.1
if [ $ready = 0 ] || [ $ended = 0 ] || [ $s0 -ne 0 ]; then
    echo "FAIL: a receive from a lost peer: ready $ready, ended $ended (exit $s0) after $took s"
    exit 1
fi
echo "the receive failed $took s after the peer left"
