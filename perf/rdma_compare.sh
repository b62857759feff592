#!/bin/sh
# rdma_compare.sh [BUILD_DIR] [ROUNDS]: coll_perf over the ibverbs transport next to
# perftest's ib_write_bw on the same SoftRoCE device, in one qemu boot (tests/rdma/vm.sh),
# interleaved round by round; prints the medians in MB/s and our share of ib_write_bw.
# One direction: a 2-rank broadcast (busbw = algbw) against ib_write_bw; both directions:
# 2-rank sendrecv against ib_write_bw -b.
set -eu
build=$(cd "${1:-build}" && pwd)
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$build/perf/coll_perf" "$stage/"
cp -L "$build/libcollective.so.0" "$stage/"
cat > "$stage/bw.sh" <<'IN'
export COLL_IB_HCA=$RDMA_DEV COLL_IB_GID_INDEX=$RDMA_GID_INDEX COLL_TRANSPORT=ibverbs
ours() { # ours OP BYTES -> MB/s (coll_perf's out-of-place time, payload bytes per rank)
  ./coll_perf --np 2 -C "$1" -b "$2" -e "$2" -n 5 -w 1 $EXTRA |
    awk -v b="$2" '$1 == b { printf "%.1f\n", b / $6 }'
}
perftest() { # perftest BYTES [-b] -> MB/s (average; -b: both directions together)
  ib_write_bw -d "$RDMA_DEV" -x "$RDMA_GID_INDEX" $2 -s "$1" -n 50 > /tmp/s.log 2>&1 &
  sleep 2
  ib_write_bw -d "$RDMA_DEV" -x "$RDMA_GID_INDEX" $2 -s "$1" -n 50 127.0.0.1 |
    awk -v b="$1" '$1 == b { print $4 }'
  wait
}
for r in $(seq "$ROUNDS"); do
  for s in 1048576 8388608; do
    echo "round $r size $s broadcast $(EXTRA= ours broadcast $s)"
    echo "round $r size $s broadcast-regcache $(COLL_IB_REG_CACHE=1 EXTRA= ours broadcast $s)"
    echo "round $r size $s ib_write_bw $(perftest $s)"
    # sendrecv: each rank sends and receives s bytes: twice s cross the device
    echo "round $r size $s sendrecv-both-ways $(EXTRA= ours sendrecv $s | awk '{print 2 * $1}')"
    echo "round $r size $s ib_write_bw-b $(perftest $s -b)"
  done
done
IN
sed -i "s/\$ROUNDS/$rounds/" "$stage/bw.sh"
bash "$here/../tests/rdma/vm.sh" "$stage" 'bash bw.sh' | tee "$stage/out.txt" | grep '^round' >&2 || true
python3 - "$stage/out.txt" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and f[0] == 'round':
        try: v[(int(f[3]), f[4])].append(float(f[5]))
        except ValueError: pass
med = {k: statistics.median(x) for k, x in v.items()}
print("| size | contender | median MB/s | rounds | share of ib_write_bw |")
print("|---|---|---|---|---|")
for (size, who), m in sorted(med.items()):
    ref = med.get((size, 'ib_write_bw-b' if who.startswith('sendrecv') or who.endswith('-b') else 'ib_write_bw'))
    share = f"{100 * m / ref:.0f}%" if ref else "-"
    print(f"| {size >> 20} MiB | {who} | {m:.1f} | {len(v[(size, who)])} | {share} |")
PY
