#!/bin/sh
# What a communicator costs as local ranks grow (issue 26): for each transport and rank
# count, perf/scale_init's line: the slowest rank's init, the largest RSS and descriptor
# count of any rank, the machine's Shmem growth while the communicator lived, and wrong
# all-reduce results (must be 0), the slowest split into evens and odds with its first
# all-reduce, and the most descriptors and Shmem after it (COLL_SPLIT_SHARE=1: splits use the
# world's links). A benchmark: run it on a quiet machine.
#   perf/scale.sh [BUILD_DIR] [RANKS...]     e.g. perf/scale.sh build 8 32 128
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
ranks=${*:-8 32 128 256}
: "${SCALE_TRANSPORTS:=tcp auto}"
# Many ranks on a few CPUs: every rank polls, so let them yield; a collective that talks
# to every peer would need descriptors in proportion to the ranks.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
printf '%6s %-5s %9s %9s %6s %9s %6s %9s %6s %9s\n' ranks tr init_ms rss_mib fds shm_mib \
  wrong split_ms sp_fds sp_shm
for t in $SCALE_TRANSPORTS; do
  for n in $ranks; do
    COLL_TRANSPORT=$t COLL_BIND=none "$build/perf/scale_init" "$n" 10 ||
      echo "$n $t: failed (exit $?)"
  done
done
