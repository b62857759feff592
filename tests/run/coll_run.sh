#!/bin/sh
# coll_run (issue 56): each rank's variables; a real program meeting through env://; a
# failed rank's status returned and every other rank ended (SIGTERM, then SIGKILL after
# the grace); SIGINT, SIGTERM and SIGHUP passed on; --tag-output; restarts counted, and
# a rank killed by pid from outside (ranks are coll_run's children) restarted; the ssh
# path through COLL_RUN_SSH (a stand-in that runs the command here with an empty
# environment, as a remote shell would); COLL_BIND refused by coll_run and by coll_init.
# Usage: coll_run.sh COLL_RUN MPI_RANK
set -u
run=$1 prog=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
no() { echo "FAIL: $*"; fail=1; }
# Lines of $tmp/out matching a pattern.
count() { grep -c "$1" "$tmp/out"; }

# Every rank's variables: its own, and the job's the same on all.
"$run" --np 3 sh -c 'echo "v $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $COLL_JOB_ID ${COLL_SECRET:-none} ${COLL_RESTART:-none}"' > "$tmp/out" 2>&1 ||
    no "env: exit status $?"
for r in 0 1 2; do
    grep -Eq "^v $r 3 $r 3 127\.0\.0\.1 [0-9]+ run-[0-9a-f]{16} none none$" "$tmp/out" ||
        no "rank $r's variables: $(cat "$tmp/out")"
done
[ "$(cut -d' ' -f7,8 "$tmp/out" | sort -u | wc -l)" -eq 1 ] || no "ranks differ in port or job: $(cat "$tmp/out")"
first=$(cut -d' ' -f8 "$tmp/out" | head -n 1)
"$run" --np 1 sh -c 'echo "$COLL_JOB_ID"' > "$tmp/out" 2>&1
[ "$(cat "$tmp/out")" != "$first" ] || no "the job id is not fresh: $first twice"
COLL_JOB_ID=mine MASTER_PORT=23456 "$run" --np 2 --secret sh -c 'echo "$COLL_JOB_ID $MASTER_PORT $COLL_SECRET"' > "$tmp/out" 2>&1
[ "$(count "^mine 23456 [0-9a-f]\{64\}$")" -eq 2 ] && [ "$(sort -u "$tmp/out" | wc -l)" -eq 1 ] ||
    no "the caller's id and port, one generated secret: $(cat "$tmp/out")"
COLL_SECRET=given "$run" --np 2 --secret sh -c 'echo "s $COLL_SECRET"' > "$tmp/out" 2>&1
[ "$(count "^s given$")" -eq 2 ] || no "the caller's secret is not kept: $(cat "$tmp/out")"

# A program of the library's, meeting through env:// (with and without a secret).
for secret in "" --secret; do
    timeout 60 "$run" --np 3 $secret "$prog" > "$tmp/out" 2>&1 || no "mpi_rank $secret: exit status $?"
    [ "$(count "^rank [012] of 3: success, 0 wrong$")" -eq 3 ] || no "mpi_rank $secret: $(cat "$tmp/out")"
done

# A failed rank: its status (128+signal for a signal death), the others ended at once; a
# rank that ignores SIGTERM is killed after the grace.
for how in "exit 3:3" "kill -SEGV \$\$:139"; do
    rm -f "$tmp"/pid.*
    t0=$(date +%s%N)
    timeout 60 "$run" --np 3 --grace 1 sh -c "echo \$\$ > $tmp/pid.\$RANK; if [ \$RANK = 1 ]; then sleep 0.3; ${how%:*}; fi; exec sleep 30" > "$tmp/out" 2>&1
    rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
    [ $rc -eq "${how#*:}" ] || no "'${how%:*}': exit status $rc, want ${how#*:}: $(cat "$tmp/out")"
    [ $ms -lt 5000 ] || no "'${how%:*}': the others ended after $ms ms"
    grep -q "rank 1 (pid [0-9]*) .*: ending the other ranks" "$tmp/out" || no "'${how%:*}': no reason: $(cat "$tmp/out")"
    for f in "$tmp"/pid.*; do kill -0 "$(cat "$f")" 2>/dev/null && no "'${how%:*}': rank ${f##*.} still runs"; done
done
t0=$(date +%s%N)
timeout 60 "$run" --np 2 --grace 1 sh -c 'trap "" TERM; [ $RANK = 1 ] && sleep 0.3 && exit 4; while :; do sleep 0.1; done' > "$tmp/out" 2>&1
rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc -eq 4 ] && [ $ms -ge 1200 ] && [ $ms -lt 5000 ] ||
    no "a rank deaf to SIGTERM: exit status $rc after $ms ms, want 4 after 0.3 s and the 1 s grace"

# Signals passed on to every rank (a test's background job ignores SIGINT, and a runner
# may ignore SIGHUP as nohup does: reset every signal).
for sig in INT TERM HUP; do
    : > "$tmp/out" # emptied here: the job's own redirection may come after the look below
    env --default-signal "$run" --np 2 sh -c "trap 'echo got $sig \$RANK; exit 0' $sig; echo ready \$RANK; while :; do sleep 0.1; done" > "$tmp/out" 2>&1 &
    pid=$!
    for i in $(seq 600); do [ "$(count "^ready")" -eq 2 ] && break; sleep 0.05; done
    kill -s $sig $pid
    wait $pid
    rc=$?
    [ "$(count "^got $sig [01]$")" -eq 2 ] && [ $rc -eq 0 ] ||
        no "SIG$sig: exit status $rc: $(cat "$tmp/out")"
done

# A signal ignored at start (nohup) is not passed on: the job lives on, and ends on SIGTERM.
: > "$tmp/out"
env --default-signal --ignore-signal=HUP "$run" --np 2 sh -c "trap 'echo got TERM \$RANK; exit 0' TERM; echo ready \$RANK; while :; do sleep 0.1; done" > "$tmp/out" 2>&1 &
pid=$!
for i in $(seq 600); do [ "$(count "^ready")" -eq 2 ] && break; sleep 0.05; done
kill -s HUP $pid
sleep 0.5
kill -0 $pid 2> /dev/null || no "nohup: the job ended on SIGHUP: $(cat "$tmp/out")"
kill -s TERM $pid
wait $pid
rc=$?
[ "$(count "^got TERM [01]$")" -eq 2 ] && [ $rc -eq 0 ] && [ "$(count "Hangup")" -eq 0 ] ||
    no "nohup: exit status $rc: $(cat "$tmp/out")"

# --tag-output: every line of stdout and stderr with its rank, the unfinished last too.
"$run" --np 2 --tag-output sh -c 'echo "a $RANK"; echo "b $RANK" >&2; printf "c $RANK"' > "$tmp/out" 2> "$tmp/err"
for r in 0 1; do
    grep -qx "\[$r\] a $r" "$tmp/out" && grep -qx "\[$r\] c $r" "$tmp/out" && grep -qx "\[$r\] b $r" "$tmp/err" ||
        no "--tag-output, rank $r: $(cat "$tmp/out" "$tmp/err")"
done
[ "$(grep -vc '^\[[01]\] ' "$tmp/out")" -eq 0 ] || no "untagged lines: $(cat "$tmp/out")"

# Restarts: COLL_RESTART counts them; past the last, the failure ends the job.
"$run" --np 2 --max-restarts 2 sh -c 'echo "start $RANK ${COLL_RESTART:-0}"; [ $RANK = 1 ] && [ ${COLL_RESTART:-0} -lt 2 ] && exit 5; exit 0' > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(count "^start 1 [012]$")" -eq 3 ] && [ "$(count "^start 0 0$")" -eq 1 ] ||
    no "--max-restarts 2, two failures: exit status $rc: $(cat "$tmp/out")"
"$run" --np 2 --max-restarts 1 sh -c 'echo "start $RANK ${COLL_RESTART:-0}"; [ $RANK = 1 ] && exit 5; sleep 30' > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 5 ] && [ "$(count "^start 1")" -eq 2 ] && grep -q "restart 1 of 1" "$tmp/out" ||
    no "--max-restarts 1, always failing: exit status $rc: $(cat "$tmp/out")"
# A rank killed from outside by its pid (a child of coll_run's) comes back once.
"$run" --np 2 --max-restarts 1 sh -c 'echo "pid $RANK ${COLL_RESTART:-0} $$"; exec sleep 30' > "$tmp/out" 2>&1 &
parent=$!
victim=
for i in $(seq 100); do
    victim=$(sed -n 's/^pid 1 0 //p' "$tmp/out")
    [ -n "$victim" ] && break
    sleep 0.05
done
pgrep -P $parent | grep -qx "$victim" || no "rank 1 ($victim) is not a child of coll_run ($parent)"
kill -9 "$victim"
for i in $(seq 100); do again=$(sed -n 's/^pid 1 1 //p' "$tmp/out"); [ -n "$again" ] && break; sleep 0.05; done
[ -n "$again" ] || no "rank 1 was not restarted after kill -9: $(cat "$tmp/out")"
kill -9 "$again" 2>/dev/null
wait $parent
rc=$?
[ $rc -eq 137 ] || no "rank 1 killed again past its restart: exit status $rc, want 137: $(cat "$tmp/out")"

# Other hosts through COLL_RUN_SSH: round robin, or by slots; the command carries here's
# directory, the variables and arguments with spaces and quotes.
cat > "$tmp/ssh" <<EOF
#!/bin/sh
echo "\$1" >> "$tmp/hosts"
shift
exec env -i PATH="\$PATH" sh -c "\$*"
EOF
chmod +x "$tmp/ssh"
COLL_RUN_SSH="$tmp/ssh" COLL_TIMEOUT_MS=7777 "$run" --np 4 --host nodeA,nodeB sh -c 'echo "h $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $COLL_TIMEOUT_MS $PWD [$1]"' x "it's a b" > "$tmp/out" 2>&1 ||
    no "ssh: exit status $?: $(cat "$tmp/out")"
for want in "h 0 0 2" "h 1 0 2" "h 2 1 2" "h 3 1 2"; do
    grep -qx "$want nodeA 7777 $PWD \[it's a b\]" "$tmp/out" || no "ssh, round robin: no '$want': $(cat "$tmp/out")"
done
[ "$(sort "$tmp/hosts" | uniq -c | awk '{ print $1 $2 }' | tr '\n' ' ')" = "2nodeA 2nodeB " ] ||
    no "ssh: hosts $(cat "$tmp/hosts")"
printf 'nodeA slots=3  # three\n\nnodeB slots=1\n' > "$tmp/hostfile"
COLL_RUN_SSH="$tmp/ssh" "$run" --np 4 --hostfile "$tmp/hostfile" sh -c 'echo "f $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE"' > "$tmp/out" 2>&1
[ "$(sort "$tmp/out" | tr '\n' ' ')" = "f 0 0 3 f 1 1 3 f 2 2 3 f 3 0 1 " ] || no "hostfile slots: $(cat "$tmp/out")"
MASTER_ADDR=127.0.0.1 COLL_RUN_SSH="$tmp/ssh" timeout 60 "$run" --np 2 --host nodeA,nodeB --secret "$prog" > "$tmp/out" 2>&1 ||
    no "mpi_rank over the ssh path: exit status $?"
[ "$(count "^rank [01] of 2: success, 0 wrong$")" -eq 2 ] || no "mpi_rank over ssh: $(cat "$tmp/out")"
# An IPv6 literal with slots: its brackets off for ssh, the job meeting at it.
: > "$tmp/hosts"
COLL_RUN_SSH="$tmp/ssh" timeout 60 "$run" --np 2 --host "[::1]:2" "$prog" > "$tmp/out" 2>&1 ||
    no "mpi_rank on [::1]:2: exit status $?: $(cat "$tmp/out")"
[ "$(count "^rank [01] of 2: success, 0 wrong$")" -eq 2 ] && [ "$(sort -u "$tmp/hosts")" = "::1" ] ||
    no "[::1]:2: $(cat "$tmp/out") hosts: $(cat "$tmp/hosts")"
for bad in "fe80::1%lo,[::2" "[::1]x"; do
    COLL_RUN_SSH="$tmp/ssh" "$run" --np 3 --host "$bad" true > "$tmp/out" 2>&1
    [ $? -eq 2 ] || no "--host $bad was taken: $(cat "$tmp/out")"
done
printf '[::1] slots=3\nnodeB slots=1\n' > "$tmp/hostfile"
COLL_RUN_SSH="$tmp/ssh" "$run" --np 4 --hostfile "$tmp/hostfile" sh -c 'echo "f $RANK $LOCAL_RANK $LOCAL_WORLD_SIZE"' > "$tmp/out" 2>&1
[ "$(sort "$tmp/out" | tr '\n' ' ')" = "f 0 0 3 f 1 1 3 f 2 2 3 f 3 0 1 " ] || no "hostfile [::1] slots=3: $(cat "$tmp/out")"
COLL_RUN_SSH="$tmp/ssh" "$run" --np 2 --host "fe80::1%lo,nodeB" sh -c 'echo "v6 $RANK $LOCAL_WORLD_SIZE"' > "$tmp/out" 2>&1
[ "$(sort "$tmp/out" | tr '\n' ' ')" = "v6 0 1 v6 1 1 " ] && grep -qx "fe80::1%lo" "$tmp/hosts" ||
    no "a bare IPv6 literal as a host: $(cat "$tmp/out") hosts: $(cat "$tmp/hosts")"

# COLL_BIND: one parser, in coll_run and in coll_init.
COLL_BIND=yes "$run" --np 2 true > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "COLL_BIND must be core or none, not 'yes'" "$tmp/out" || no "coll_run took COLL_BIND=yes ($rc)"
COLL_BIND=yes RANK=0 WORLD_SIZE=1 MASTER_PORT=1 timeout 60 "$prog" > "$tmp/out" 2>&1 && no "coll_init took COLL_BIND=yes"
grep -q "COLL_BIND must be core or none, not 'yes'" "$tmp/out" || no "coll_init's reason: $(cat "$tmp/out")"
"$run" --np 2 /nonexistent/prog > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 127 ] || no "a program that is not there: exit status $rc, want 127"

[ $fail -eq 0 ] && echo "coll_run: variables, failures, signals, tags, restarts, ssh path, COLL_BIND: all passed"
exit $fail
