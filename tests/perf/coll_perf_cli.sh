#!/bin/sh
# coll_perf's command line as an nccl-tests user types it (issue 24, item 12): --help on
# stdout with status 0, a bad size refused, collective names with or without '_', the
# codec's dtype names, N/A in #wrong without checking, headings over the codec columns;
# and the collective set (issue 18): reduce, gather, scatter, alltoall, checked; and the
# ping-pong latency test (issue 22), 3 ranks (the third sits out); the header (issue 56);
# -o all, and -d all with one bitwise op (issue 50).
# Usage: coll_perf_cli.sh COLL_PERF
set -u
p=$1 fail=0
no() { echo "FAIL: $*"; fail=1; }
out=$("$p" --help 2>/dev/null) || no "--help exits $?"
echo "$out" | grep -q "^usage: coll_perf" || no "--help prints no usage on stdout"
"$p" --np 2 -b 1X >/dev/null 2>&1; [ $? -eq 2 ] || no "-b 1X is not refused"
"$p" --np 2 -e 4Q >/dev/null 2>&1; [ $? -eq 2 ] || no "-e 4Q is not refused"
out=$("$p" --np 2 -C allreduce -b 8 -e 8 -n 2 -w 1 -d fp16 -c 0 -I 0 2>&1) ||
    no "-C allreduce -d fp16 fails: $out"
echo "$out" | grep -q "half .* N/A" || no "-c 0 does not print N/A: $out"
out=$("$p" --np 2 -C all_gather -b 64 -e 64 -n 2 -w 1 -d bf16 -I 0 2>&1) || no "-C all_gather -d bf16"
for C in reduce gather scatter alltoall pingpong; do
    out=$("$p" --np 3 -C $C -b 1K -e 64K -f 8 -n 2 -w 1 -d all 2>&1) || no "-C $C fails: $out"
    echo "$out" | grep -q "Out of bounds values : 0 OK" || no "-C $C: wrong results"
done
# -o all (issue 50): the bitwise ops on the integer dtypes, checked, and on no float one;
# a bitwise op named with a float dtype is the library's refusal, not a hang.
out=$("$p" --np 3 -C reduce_scatter -b 64 -e 64 -n 2 -w 1 -d all -o all 2>&1) || no "-o all fails: $out"
echo "$out" | grep -q "Out of bounds values : 0 OK" || no "-o all: wrong results: $out"
[ "$(echo "$out" | grep -cE " (int8|uint8|int32|int64) +(band|bor|bxor) ")" -eq 12 ] ||
    no "-o all: not a row for each of 4 integer dtypes x 3 bitwise ops: $out"
echo "$out" | grep -qE " (float|double|half|bfloat16) +(band|bor|bxor) " && no "-o all: bitwise on floats: $out"
# -d all with one bitwise op: its integer dtypes, checked, as -o all's (it failed at float)
out=$(timeout 60 "$p" --np 3 -C all_reduce -b 64 -e 64 -n 2 -w 1 -d all -o bxor 2>&1) ||
    no "-d all -o bxor fails: $out"
echo "$out" | grep -q "Out of bounds values : 0 OK" || no "-d all -o bxor: wrong results: $out"
[ "$(echo "$out" | grep -cE " (int8|uint8|int32|int64) +bxor ")" -eq 4 ] ||
    no "-d all -o bxor: not a row for each of the 4 integer dtypes: $out"
out=$(timeout 60 "$p" --np 2 -b 64 -e 64 -n 1 -w 0 -d float -o bxor 2>&1) && no "-d float -o bxor passes"
echo "$out" | grep -q "op bxor is bitwise: integer dtypes only, not float" || no "no refusal: $out"
out=$("$p" --np 2 -b 1K -e 1K -n 2 -w 1 -z int8 -I 0 2>&1) || no "-z int8 fails"
echo "$out" | grep -q "#wrong.*wire bytes" || no "no heading over the codec columns"
# The header names what ran (issue 56): the transport of rank 0's ring links (auto picks
# shm here, tcp when told), the algorithms at the end with the rows they served, the unit
# of the average; a sweep that stops short of -e says so, one that reaches it does not.
out=$("$p" --np 2 -b 8 -e 1K -f 8 -n 2 -w 1 2>&1) || no "-e 1K -f 8 fails: $out"
echo "$out" | grep -q "^# transport auto: rank 0's ring links over shm;" || no "no transport line: $out"
echo "$out" | grep -Eq "^# Algorithms \(rank 0\) : allreduce (ring|doubling|rabenseifner|tree|hier) 8-" ||
    no "no algorithms line: $out"
echo "$out" | grep -Eq "^# Avg bus bandwidth +: [0-9.]+ GB/s$" || no "no unit on the average: $out"
echo "$out" | grep -q "^# sizes: .* stop at 512, short of maxBytes" || no "no note of the short sweep: $out"
out=$(COLL_TRANSPORT=tcp COLL_DEBUG=info "$p" --np 2 -b 16 -e 1K -f 8 -n 2 -w 1 2>&1) ||
    no "tcp -b 16 -e 1K fails: $out"
echo "$out" | grep -q "^# transport tcp: rank 0's ring links over tcp;" || no "tcp not named: $out"
echo "$out" | grep -q "^# sizes:" && no "a note although 16 x 8^2 is 1K: $out"
echo "$out" | grep -q "^ *1024 .* 0 *$" || no "the sweep does not reach 1024: $out"
echo "$out" | grep -q "^coll INFO: " || no "COLL_DEBUG=info shows no log lines: $out"
[ $fail -eq 0 ] && echo "coll_perf's command line: all checks passed"
exit $fail
