#!/bin/sh
# An emulated cluster on this machine (root, iproute2, util-linux's unshare): each host a
# network namespace with its own address, joined to a bridge by a veth pair shaped to
# RATE each way with tc tbf, its ranks in a UTS namespace with their own hostname; the
# ranks run coll_perf (env:// rendezvous at host 0) over ROUNDS interleaved rounds for
# each build directory given, and the script prints the median time per size and build.
#   perf/cluster.sh [BUILD...]        (default: build)
# A BUILD named `ompi` runs Open MPI instead, side by side: perf/compare/mpi_bench with
# the same -C -b -e -f -n -w, launched by mpirun in rank 0's host, its daemons started in
# the other hosts' namespaces by an agent in ssh's place; tcp between hosts, shared
# memory inside one (btl tcp,vader,self); ORDER rr or blocked (--map-by node or slot).
# Environment:
#   HOSTS="2 2 2 2"  ranks per host (uneven allowed: "3 2 2")
#   ORDER=rr         rank numbering: rr (rank r on the (r mod H)-th host with room),
#                    blocked (host 0's ranks first), random
#   RATE=1gbit       each host link, each way
#   BURST=256kb      tbf's bucket: a transfer up to this size passes at the veth's speed,
#                    so times of messages near it say little about the rate
#   GSO=             the largest packet TCP may hand each veth (gso_max_size; default:
#                    the kernel's 64 KiB). tbf cuts a packet over its bucket into
#                    segments, which costs CPU; GSO=1500 with a small BURST (4kb) shapes
#                    small transfers too, at some CPU per packet
#   CC=cubic         each host's TCP congestion control (Linux's default; some images
#                    default to bbr, which restarts a connection idle for a step slowly)
#   IDLE_RESTART=0   each host's net.ipv4.tcp_slow_start_after_idle. Linux's default (1)
#                    drops an idle connection back to slow start; behind tbf's 50 ms
#                    queue that costs tens of ms each time, which a datacenter's shallow
#                    switch buffers do not (algorithms that change peers every step,
#                    Rabenseifner's, paid 1.2-1.5x at 16 MiB here). 1 keeps the default.
#   ARGS="-b 64K -e 4M -f 4 -n 5 -w 1"   coll_perf's arguments (-I 0 -c 1 added)
#   RAILS=1          interfaces per host: RAILS=2 adds eth1 on a second bridge (10.78.0.0/24),
#                    shaped alike; ranks then filter "eth" (both), and the script prints
#                    each host's bytes sent per interface ("# rail bytes: ...")
#   FAMILY=4         the hosts' addresses: 4 (10.77.0.k), 6 (IPv6 only, fd77::k; RAILS=2's
#                    eth1 fd78::k), dual (both), ll (IPv6 link-local only, fe80::k, the
#                    rendezvous at fe80::1%eth0). Hosts skip IPv6's duplicate address
#                    detection (accept_dad=0): it holds a new address back a second or
#                    two, the kernel's own link-local one too. DAD=1 keeps it (the
#                    kernel's default): ranks start while their addresses are tentative.
#                    The script prints each host's IP bytes sent per family ("# family
#                    bytes: ...", lo's included)
#   MASTER=          MASTER_ADDR: 4 or 6 (rank 0's host's address of that family; by
#                    default 6 under FAMILY 6 or ll, else 4), 6b (that IPv6 address in
#                    brackets, as torchrun users write it: [fd77::1], [fe80::1%eth0]), or
#                    name: "master", which every rank's /etc/hosts (bound over it in the
#                    mount namespace of ip netns exec) gives as rank 0's host's addresses
#                    of FAMILY (not ll's)
#   RATE_B=$RATE     eth1's rate with RAILS=2, each way (rails of unequal speeds)
#   SPLIT_B=0        1: host k's eth1 on a subnet of its own (10.(78+k).0.0/24): a second
#                    NIC that reaches no other host (a management network, say)
#   IFNAME=          COLL_SOCKET_IFNAME for every rank: eth0, or eth with RAILS=2; set
#                    empty, none (the defaults choose)
#   ROUNDS=3         ENVS="COLL_ALGO=ring"  (extra variables for every rank)
#   ENVS_AT="R VAR=VALUE ..."  extra variables for rank R alone (after ENVS: they win), to
#                    make one rank differ (tests/cluster/family.sh's disagreeing family)
#   KEEP=DIR         keep every rank's output of every run there (rankR.ROUND.BUILD.txt)
# Exit status 1 if a run failed or a result was wrong. Skips (77) where namespaces
# cannot be made.
set -eu
[ $# -gt 0 ] || set -- build
hosts=${HOSTS:-2 2 2 2}
order=${ORDER:-rr}
rate=${RATE:-1gbit}
burst=${BURST:-256kb}
gso=${GSO:-}
cc=${CC:-cubic}
idle_restart=${IDLE_RESTART:-0}
args=${ARGS:--b 64K -e 4M -f 4 -n 5 -w 1}
rounds=${ROUNDS:-3}
rails=${RAILS:-1}
rate_b=${RATE_B:-$rate}
split_b=${SPLIT_B:-0}
envs=${ENVS:-}
family=${FAMILY:-4}
case $family in 4 | 6 | dual | ll) ;; *) echo "FAMILY must be 4, 6, dual or ll" >&2; exit 2 ;; esac
master_by=${MASTER:-4}
case $family in 6 | ll) master_by=${MASTER:-6} ;; esac
# glibc's /etc/hosts takes no "%eth0" (it skips the line), and fe80::1 without is unreachable
[ "$family$master_by" != llname ] || { echo "MASTER=name: not with FAMILY=ll" >&2; exit 2; }
envs_at=${ENVS_AT:-}
tag=c$$
br=br$tag
out=$(mktemp -d /tmp/cluster.XXXXXX)
H=$(echo $hosts | wc -w)

cleanup() {
    for k in $(seq 0 $((H - 1))); do ip netns del "$tag-h$k" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
    ip link del "${br}b" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT INT TERM

ip link add "$br" type bridge 2>/dev/null || { echo "SKIP: cannot create a bridge"; exit 77; }
ip link set "$br" up
[ "$rails" = 1 ] || { ip link add "${br}b" type bridge; ip link set "${br}b" up; }

# shape DEV [NS] [RATE]: RATE (default $rate) out of DEV (run in NS when given)
shape() {
    ${2:+ip netns exec "$2"} tc qdisc add dev "$1" root tbf rate "${3:-$rate}" burst "$burst" latency 50ms
}
# addrs NS DEV K NET: host K's addresses on DEV, of FAMILY's kinds, in subnet NET (77, 78)
addrs() {
    case $family in 4 | dual) ip -n "$1" addr add "10.$4.0.$(($3 + 1))/24" dev "$2" ;; esac
    case $family in 6 | dual) ip -n "$1" addr add "fd$4::$(($3 + 1))/64" dev "$2" ;; esac
    [ "$family" != ll ] || ip -n "$1" addr add "fe80::$(($3 + 1))/64" dev "$2"
}
k=0
for r in $hosts; do
    ns=$tag-h$k
    ip netns add "$ns"
    [ "${DAD:-0}" = 1 ] ||
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 ||
        echo "# $ns: cannot turn IPv6's duplicate address detection off" >&2
    ip link add "v$tag$k" type veth peer name eth0 netns "$ns"
    ip link set "v$tag$k" master "$br" up
    addrs "$ns" eth0 $k 77
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle="$idle_restart" ||
        echo "# $ns: cannot set tcp_slow_start_after_idle" >&2
    # A congestion control not loaded yet is refused once while the kernel loads it.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc" 2>/dev/null ||
        { sleep 1; ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"; } ||
        echo "# $ns: cannot set tcp congestion control $cc" >&2
    ip -n "$ns" link set eth0 up
    if [ -n "$gso" ]; then
        ip -n "$ns" link set eth0 gso_max_size "$gso" gso_max_segs 1
        ip link set "v$tag$k" gso_max_size "$gso" gso_max_segs 1
    fi
    # Each way: out of the host (its eth0), into it (the bridge's port).
    shape eth0 "$ns"
    shape "v$tag$k"
    if [ "$rails" != 1 ]; then # the second rail, on its own bridge and subnet
        ip link add "w$tag$k" type veth peer name eth1 netns "$ns"
        ip link set "w$tag$k" master "${br}b" up
        addrs "$ns" eth1 $k $((78 + split_b * k))
        ip -n "$ns" link set eth1 up
        shape eth1 "$ns" "$rate_b"
        shape "w$tag$k" "" "$rate_b"
    fi
    k=$((k + 1))
done

# host_of: one line per rank, its host.
echo $hosts | awk -v order="$order" -v seed=$$ '{
    H = NF; n = 0
    for (k = 1; k <= H; k++) { room[k - 1] = $k; n += $k }
    if (order == "blocked") {
        for (k = 0; k < H; k++) for (i = 0; i < room[k]; i++) print k
    } else {
        k = 0
        for (r = 0; r < n; r++) {
            while (room[k % H] == 0) k++
            host[r] = k % H; room[k % H]--; k++
        }
        if (order == "random") {
            srand(seed)
            for (r = n - 1; r > 0; r--) { j = int(rand() * (r + 1)); t = host[r]; host[r] = host[j]; host[j] = t }
        }
        for (r = 0; r < n; r++) print host[r]
    }
}' > "$out/host_of"
n=$(wc -l < "$out/host_of")
echo "# $H hosts ($hosts ranks), $order numbering: hosts by rank $(tr '\n' ' ' < "$out/host_of")"
echo "# links $rate each way (burst $burst${gso:+, gso $gso}, tcp $(ip netns exec "$tag-h0" sysctl -n net.ipv4.tcp_congestion_control), \
slow start after idle $idle_restart); coll_perf $args; $rounds rounds"
[ "$rails" = 1 ] || echo "# second rails (eth1) $rate_b each way"

# Open MPI: its "ssh" enters the host's namespace, named as the host.
ompi_setup() {
    [ -n "${ompi_ready:-}" ] && return 0
    [ "$order" != random ] || { echo "ompi: ORDER rr or blocked only" >&2; exit 2; }
    [ "$family" = 4 ] || { echo "ompi: FAMILY=4 only" >&2; exit 2; }
    here=$(cd "$(dirname "$0")" && pwd)
    mpicc.openmpi -O2 -o "$out/mpi_bench" "$here/compare/mpi_bench.c" || exit 2
    printf '#!/bin/sh\nh=$1; shift\nexec ip netns exec "$h" unshare --uts sh -c "hostname $h; $*"\n' \
        > "$out/agent"
    chmod +x "$out/agent"
    k=0
    for r in $hosts; do echo "$tag-h$k slots=$r"; k=$((k + 1)); done > "$out/hostfile"
    ompi_ready=1
}

run_ompi() { # round build_index
    ompi_setup
    map=node
    [ "$order" = rr ] || map=slot
    h0=$tag-h$(head -1 "$out/host_of")
    ip netns exec "$h0" unshare --uts sh -c "hostname $h0; exec env OMPI_ALLOW_RUN_AS_ROOT=1 \
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np $n --hostfile $out/hostfile \
        --map-by $map --mca plm_rsh_agent $out/agent --mca btl tcp,vader,self \
        --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca mpi_yield_when_idle 1 \
        $out/mpi_bench $(echo "$args" | sed 's/-[dozcIT] [^ ]*//g')" > "$out/$1.$2.0" 2>&1
    [ -z "${KEEP:-}" ] || cp "$out/$1.$2.0" "$KEEP/rank0.$1.$2.txt"
    awk '/^ +[0-9]/ { lines++; bad += $9 } END { exit !(lines && !bad) }' "$out/$1.$2.0" ||
        { cat "$out/$1.$2.0"; return 1; }
}

run() { # build round -> "$out/$round.$build_index.txt" from rank 0
    [ "$1" != ompi ] || { run_ompi "$3" "$2"; return; }
    perf=$(cd "$1" && pwd)/perf/coll_perf
    port=$((20000 + ($$ + $3 * 7 + $2) % 20000))
    r=0
    master=$(master_addr)
    for h in $(cat "$out/host_of"); do
        mine=
        [ "${envs_at%% *}" != "$r" ] || mine=${envs_at#* }
        # MASTER_ADDR quoted: 6b's brackets are a shell pattern
        ip netns exec "$tag-h$h" unshare --uts sh -c "hostname $tag-h$h; $bind exec env RANK=$r \
            WORLD_SIZE=$n MASTER_ADDR='$master' MASTER_PORT=$port COLL_TIMEOUT_MS=120000 \
            ${ifname:+COLL_SOCKET_IFNAME=$ifname} COLL_BIND=none $envs $mine $perf $args -I 0 -c 1" \
            > "$out/$3.$2.$r" 2>&1 &
        r=$((r + 1))
    done
    wait
    [ -z "${KEEP:-}" ] || for f in "$out/$3.$2".*; do cp "$f" "$KEEP/rank${f##*.}.$3.$2.txt"; done
    grep -q "Out of bounds values : 0 OK" "$out/$3.$2.0" || { cat "$out/$3.$2.0"; return 1; }
}

# master_addr: MASTER_ADDR, an address of rank 0's host (it serves the store) or a name
# that $out/hosts (every rank's /etc/hosts, through $bind) gives it.
master_addr() {
    h=$(($(head -1 "$out/host_of") + 1))
    case $master_by in
    4) echo "10.77.0.$h" ;;
    6) if [ "$family" = ll ]; then echo "fe80::$h%eth0"; else echo "fd77::$h"; fi ;;
    6b) if [ "$family" = ll ]; then echo "[fe80::$h%eth0]"; else echo "[fd77::$h]"; fi ;;
    *) { cat /etc/hosts
         case $family in 4 | dual) echo "10.77.0.$h master" ;; esac
         case $family in 6 | dual) echo "fd77::$h master" ;; esac; } > "$out/hosts"
       echo master ;;
    esac
}
bind=
[ "$master_by" != name ] || bind="mount --bind $out/hosts /etc/hosts;"
ifname=eth0
[ "$rails" = 1 ] || ifname=eth
ifname=${IFNAME-$ifname}
status=0
for round in $(seq "$rounds"); do
    b=0
    for build in "$@"; do
        run "$build" "$b" "$round" || status=1
        b=$((b + 1))
    done
done

if [ "$rails" != 1 ]; then
    for k in $(seq 0 $((H - 1))); do
        echo "# rail bytes: host $k eth0 $(ip netns exec "$tag-h$k" cat /sys/class/net/eth0/statistics/tx_bytes)" \
            "eth1 $(ip netns exec "$tag-h$k" cat /sys/class/net/eth1/statistics/tx_bytes)"
    done
fi
# IP bytes each host sent, per family (every interface's, lo's too): the traffic's family.
for k in $(seq 0 $((H - 1))); do
    echo "# family bytes: host $k IPv4 $(ip netns exec "$tag-h$k" awk '/^IpExt:/ { if (c) print $c;
            else for (i = 1; i <= NF; i++) if ($i == "OutOctets") c = i }' /proc/net/netstat)" \
        "IPv6 $(ip netns exec "$tag-h$k" awk '$1 == "Ip6OutOctets" { print $2 }' /proc/net/snmp6)"
done
echo "# median time (us) per size; build: $*"
b=0
for build in "$@"; do
    cat "$out"/*."$b".0 | awk '/^ +[0-9]/ { print $1, $6 }' | sort -k1,1n -k2,2g |
        awk -v b="$build" 'function out() { if (m) printf "%12d %-24s %10.1f\n", s, b, v[int((m + 1) / 2)] }
            $1 != s { out(); s = $1; m = 0 } { v[++m] = $2 } END { out() }'
    b=$((b + 1))
done
exit $status
