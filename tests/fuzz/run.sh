#!/bin/sh
# Builds the wire-format fuzz target with clang's libFuzzer (ASan + UBSan) and runs it
# for SECONDS (default 30). Skips (77) where clang or libFuzzer is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$here/../..
seconds=${1:-30}
out=${TMPDIR:-/tmp}/fuzz_wire.$$
command -v clang >/dev/null 2>&1 || { echo "clang not installed: skipped"; exit 77; }
# Only a missing libFuzzer skips: a target that no longer compiles is a failure.
printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return (int)(d[0] & n & 0); }\n' \
    > "$out.probe.c"
clang -fsanitize=fuzzer "$out.probe.c" -o "$out.probe" >/dev/null 2>&1 ||
    { rm -f "$out.probe.c"; echo "no libFuzzer: skipped"; exit 77; }
rm -f "$out.probe.c" "$out.probe"
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$top/include" -I"$top/lib" -I"$top" \
    "$here/fuzz_wire.c" "$top/lib/wire/wire.c" -o "$out" || { echo "the fuzz target does not build"; exit 1; }
mkdir -p "$out.corpus"
"$out" -max_total_time="$seconds" -use_value_profile=1 -print_final_stats=1 \
    -artifact_prefix="$out." "$out.corpus" > "$out.log" 2>&1
status=$?
tail -n 12 "$out.log"
rm -f "$out.log"
rm -rf "$out" "$out.corpus"
exit $status
