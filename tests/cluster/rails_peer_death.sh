#!/bin/sh
# A peer that dies under rails (issue 55's review): 2 ranks of rails_loop on loopback
# (COLL_TRANSPORT=rails, two rails on lo: COLL_RAILS_REPEAT=2), 4 MiB all-reduces, rank 1
# killed (SIGKILL) KILL_AFTER (1.5) seconds in. Passes when rank 0's call fails naming
# peer 1 within 60 s, and rank 0 printed no rails warning: every connection of a dead
# peer ends at once, so no rail "failed" and nothing fails over; the error is the
# connection's own. Also fails on any sanitizer report (run it from an ASan build).
# Usage: rails_peer_death.sh RAILS_LOOP
set -u
loop=$1
tmp=$(mktemp -d /tmp/rails_peer_death.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# A port free now (the kernel's pick), not one derived from a pid: other jobs run here.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export COLL_TRANSPORT=rails COLL_RAILS_REPEAT=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    WORLD_SIZE=2 ITERS=100000 COUNT=1048576
RANK=0 timeout 60 "$loop" > "$tmp/rank0" 2>&1 &
p0=$!
RANK=1 "$loop" > "$tmp/rank1" 2>&1 &
p1=$!
sleep "${KILL_AFTER:-1.5}"
kill -9 $p1
wait $p0
rc=$?
wait $p1 2>/dev/null
grep -v "^call " "$tmp/rank0"
fail=0
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAILED: rank 0 exit $rc (0: no failure seen, 124: hung)"; fail=1; }
grep -q "peer 1 (" "$tmp/rank0" || { echo "FAILED: rank 0's error does not name peer 1"; fail=1; }
! grep -q "WARN: rails:" "$tmp/rank0" || { echo "FAILED: rank 0 warned of a rail"; fail=1; }
! grep -q "Sanitizer\|runtime error" "$tmp/rank0" || { echo "FAILED: a sanitizer report"; fail=1; }
exit $fail
