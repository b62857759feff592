#!/bin/sh
# Builds the wire-format fuzz target with clang's libFuzzer (ASan + UBSan) and runs it
# for SECONDS (default 30). Skips (77) where clang or libFuzzer is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$here/../..
seconds=${1:-30}
out=${TMPDIR:-/tmp}/fuzz_wire.$$
command -v clang >/dev/null 2>&1 || { echo "clang not installed: skipped"; exit 77; }
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$top/include" -I"$top/lib" -I"$top" \
    "$here/fuzz_wire.c" "$top/lib/core/wire.c" -o "$out" || { echo "no libFuzzer: skipped"; exit 77; }
mkdir -p "$out.corpus"
"$out" -max_total_time="$seconds" -use_value_profile=1 -print_final_stats=1 \
    -artifact_prefix="$out." "$out.corpus" > "$out.log" 2>&1
status=$?
tail -n 12 "$out.log"
rm -f "$out.log"
rm -rf "$out" "$out.corpus"
exit $status
