#!/bin/sh
# Where libibverbs.so.1 cannot be loaded, asking for the ibverbs transport is a clear
# COLL_ENOTSUP at coll_init on every rank, not a crash or a hang. A library that is not
# an ELF file stands in for a missing or broken rdma-core.
# Usage: no_verbs.sh COLL_PERF
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "not a library" > "$dir/libibverbs.so.1"
# Each rank started on its own, as mpirun would: --np ends the other ranks when one
# fails, and this asks what every rank says.
for r in 0 1; do
    LD_LIBRARY_PATH=$dir COLL_TRANSPORT=ibverbs RANK=$r WORLD_SIZE=2 MASTER_PORT=1 \
        timeout 60 "$1" -b 8 -e 8 -n 1 -w 0 > "$dir/out.$r" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$dir/out.$r"; echo "FAIL: rank $r: exit status $rc"; exit 1; }
done
cat "$dir"/out.* > "$dir/out"
cat "$dir/out"
for r in 0 1; do
    grep -q "rank $r: coll_init: .*not supported" "$dir/out" ||
        { echo "FAIL: rank $r did not report COLL_ENOTSUP"; exit 1; }
done
grep -q "cannot load libibverbs.so.1" "$dir/out" || { echo "FAIL: no reason given"; exit 1; }
echo "ok: both ranks COLL_ENOTSUP, reason logged"
