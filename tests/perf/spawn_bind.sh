#!/bin/sh
# The local spawn binds rank r to the (r mod k)-th of the k CPUs it may use (COLL_BIND
# unset or core), leaves placement alone with COLL_BIND=none, and refuses other values.
# Usage: spawn_bind.sh SPAWN_PROBE
set -u
probe=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }
allowed=$(COLL_BIND=none timeout 60 "$probe" 1 | sed -n 's/^rank 0 cpus //p')
[ -n "$allowed" ] || fail "the probe printed no CPUs"
k=$(echo $allowed | wc -w)

COLL_BIND=socket timeout 60 "$probe" 5 > "$out" 2>&1 && fail "COLL_BIND=socket was accepted"
grep -q "COLL_BIND must be core or none, not .socket." "$out" || fail "no reason given"

for how in unset "" core none; do
    if [ "$how" = unset ]; then
        (unset COLL_BIND; timeout 60 "$probe" 5) > "$out" 2>&1 || fail "$how: exit status $?"
    else
        COLL_BIND=$how timeout 60 "$probe" 5 > "$out" 2>&1 || fail "'$how': exit status $?"
    fi
    for r in 0 1 2 3 4; do
        want=$allowed
        [ "$how" != none ] && [ $k -ge 2 ] &&
            want=$(echo $allowed | awk -v i=$((r % k + 1)) '{ print $i }')
        grep -qx "rank $r cpus $want" "$out" || fail "'$how': rank $r should run on: $want"
    done
done
echo "ok: $k CPUs ($allowed); 5 ranks bound round robin, COLL_BIND=none unbound, bad values refused"
