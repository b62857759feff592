#!/bin/sh
# Many ranks on one machine (issue 26): 128 shared-memory ranks (past the 66 where a
# dial-everything-first init hung for good) init and all-reduce with the machine's shared
# memory growing by under 2 GiB, and 260 tcp ranks (rank 0 publishes their cards in three
# store values) init and all-reduce with fewer than 128 descriptors each (links open as
# they are used: a full mesh needed over 1024). Skips (77) on a machine without the memory.
# Usage: scale.sh PATH_TO_SCALE_INIT
set -u
scale_init=$1
avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
[ "$avail" -ge 6144 ] || { echo "SKIP: ${avail} MiB available, 6144 needed"; exit 77; }
export COLL_BIND=none
# ranks tr init_ms rss_mib fds shm_mib wrong
line=$(COLL_TRANSPORT=auto "$scale_init" 128 10) || { echo "128 shm ranks failed"; exit 1; }
echo "$line"
echo "$line" | awk '$1 != 128 || $7 != 0 || $6 >= 2048 { exit 1 }' ||
    { echo "FAIL: 128 shm ranks: expected no wrong results and under 2048 MiB of Shmem"; exit 1; }
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 4096 ] ||
    { echo "SKIP: hard descriptor limit $(ulimit -Hn) below 4096"; exit 77; }
line=$(ulimit -Sn 1024 && COLL_TRANSPORT=tcp "$scale_init" 260 10) ||
    { echo "260 tcp ranks failed"; exit 1; }
echo "$line"
echo "$line" | awk '$1 != 260 || $7 != 0 || $5 >= 128 { exit 1 }' ||
    { echo "FAIL: 260 tcp ranks: expected no wrong results and under 128 descriptors"; exit 1; }
