#!/bin/sh
# Builds a fuzz target with clang's libFuzzer (ASan + UBSan) and runs it for SECONDS
# (default 30): run.sh SECONDS [TARGET], TARGET wire (the handshake and segment headers,
# default), store (the tcp store server through a real socket), shm (a stranger's shm
# hello and the ring it then writes) or life (the lifeline's gate and the shrink
# agreement's words through a real socket). Skips (77) where clang or libFuzzer is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$here/../..
seconds=${1:-30}
target=${2:-wire}
case $target in
wire) srcs="$top/lib/wire/wire.c"; opts="" ;;
store) srcs="$top/lib/rdzv/tcp_server.c $top/lib/base/util.c $top/lib/base/log.c"
       opts="-max_len=512" ;;
shm) t=$top/transports
     srcs="$t/shm/shm.c $t/conn.c $t/accept.c $t/progress.c $t/reqq.c $top/lib/base/util.c
           $top/lib/base/log.c $top/lib/base/notifier.c $top/lib/base/lock.c $top/lib/base/names.c"
     opts="-max_len=4096" ;;
life) srcs="$top/lib/core/life.c $top/lib/base/auth.c $top/lib/base/util.c $top/lib/base/log.c
      $top/lib/base/addr.c $top/transports/iface.c -lcrypto"
      opts="-max_len=4096" ;;
*) echo "unknown fuzz target '$target'"; exit 1 ;;
esac
out=${TMPDIR:-/tmp}/fuzz_$target.$$
command -v clang >/dev/null 2>&1 || { echo "clang not installed: skipped"; exit 77; }
# Only a missing libFuzzer skips: a target that no longer compiles is a failure.
printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return (int)(d[0] & n & 0); }\n' \
    > "$out.probe.c"
clang -fsanitize=fuzzer "$out.probe.c" -o "$out.probe" >/dev/null 2>&1 ||
    { rm -f "$out.probe.c"; echo "no libFuzzer: skipped"; exit 77; }
rm -f "$out.probe.c" "$out.probe"
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$top/include" -I"$top/lib" -I"$top" \
    "$here/fuzz_$target.c" $srcs -lpthread -o "$out" ||
    { echo "the fuzz target does not build"; exit 1; }
mkdir -p "$out.corpus"
# Seeds (a well-formed input or two) let the fuzzer start from what the code accepts.
[ -d "$here/seeds/$target" ] && cp "$here/seeds/$target"/* "$out.corpus/"
# A finding exits 1: libFuzzer's own code for it is 77, which meson reads as a skip.
"$out" -max_total_time="$seconds" -use_value_profile=1 -print_final_stats=1 -error_exitcode=1 $opts \
    -artifact_prefix="$out." "$out.corpus" > "$out.log" 2>&1
status=$?
tail -n 12 "$out.log"
rm -f "$out.log"
rm -rf "$out" "$out.corpus"
exit $status
