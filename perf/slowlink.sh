#!/bin/sh
# All-reduce over a real slow link: two network namespaces joined by a veth pair shaped
# to RATE (default 1gbit) with tc, one rank in each, coll_perf at SIZE (default 64M) with
# no codec, fp16, bf16 and int8, rounds interleaved; prints median busbw and the ratio
# to uncompressed. Needs root and iproute2.
#   perf/slowlink.sh [build-dir]    env: RATE=1gbit SIZE=64M ROUNDS=3
set -eu
build=${1:-build}
perf=$(cd "$build" && pwd)/perf/coll_perf
rate=${RATE:-1gbit}
size=${SIZE:-64M}
rounds=${ROUNDS:-3}
a=collA$$ b=collB$$
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "$a"
ip netns add "$b"
ip link add vA$$ netns "$a" type veth peer name vB$$ netns "$b"
ip -n "$a" addr add 10.99.0.1/24 dev vA$$
ip -n "$b" addr add 10.99.0.2/24 dev vB$$
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set vA$$ up
ip -n "$b" link set vB$$ up
ip netns exec "$a" tc qdisc add dev vA$$ root tbf rate "$rate" burst 512kb latency 100ms
ip netns exec "$b" tc qdisc add dev vB$$ root tbf rate "$rate" burst 512kb latency 100ms

run() { # codec port -> busbw (out of place) on stdout
    for r in 0 1; do
        ns=$a; [ $r -eq 1 ] && ns=$b
        ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.99.0.1 MASTER_PORT="$2" \
            COLL_SOCKET_IFNAME=v COLL_TIMEOUT_MS=120000 \
            "$perf" -b "$size" -e "$size" -n 3 -w 1 -c 1 -z "$1" > "/tmp/slowlink.$$.$r" &
    done
    wait
    awk '/^ +[0-9]/ { print $8; exit }' "/tmp/slowlink.$$.0"
    grep -q "0 OK" "/tmp/slowlink.$$.0" || echo "WRONG RESULTS with $1" >&2
    rm -f /tmp/slowlink.$$.0 /tmp/slowlink.$$.1
}

port=$((20000 + $$ % 10000))
results=""
for round in $(seq "$rounds"); do
    for codec in none fp16 bf16 int8; do
        port=$((port + 1))
        results="$results$codec $(run "$codec" "$port")
"
    done
done
echo "# all-reduce of $size between 2 namespaces over veth shaped to $rate, $rounds rounds"
echo "# codec   median busbw (GB/s)   ratio to none"
base=$(printf "%s" "$results" | awk '$1=="none"{print $2}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
for codec in none fp16 bf16 int8; do
    med=$(printf "%s" "$results" | awk -v c="$codec" '$1==c{print $2}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    awk -v c="$codec" -v m="$med" -v b="$base" 'BEGIN { printf "  %-6s  %10.3f            %5.2fx\n", c, m, m / b }'
done
