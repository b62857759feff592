#!/bin/sh
# The README's C example, copied out of README.md as written, compiled against the
# library just built and run on 3 ranks launched as its text says (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT): every rank must exit 0. A README whose example stops
# compiling or working fails this test.
# usage: run.sh README.md INCLUDE_DIR LIBRARY
readme=$1 inc=$2 lib=$3
command -v cc >/dev/null 2>&1 || { echo "no C compiler: skipped"; exit 77; }
out=${TMPDIR:-/tmp}/readme_example.$$
trap 'rm -rf "$out"' EXIT
mkdir -p "$out"
sed -n '/^```c$/,/^```$/p' "$readme" | sed '1d;$d' > "$out/prog.c"
[ -s "$out/prog.c" ] || { echo "no C example in $readme"; exit 1; }
libdir=$(dirname "$lib")
# A sanitized library (CI's second pass) needs its runtime in the program too.
san=""
ldd "$lib" 2>/dev/null | grep -q libasan && san="-fsanitize=address,undefined"
cc $san -Wall -Werror -I"$inc" "$out/prog.c" -L"$libdir" -lcollective -Wl,-rpath,"$libdir" \
    -o "$out/prog" || { echo "the README's example does not compile"; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
n=3 pids=""
for r in $(seq 0 $((n - 1))); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port COLL_TIMEOUT_MS=20000 \
        timeout 60 "$out/prog" &
    pids="$pids $!"
done
status=0 r=0
for p in $pids; do
    wait "$p" || { echo "rank $r exited with status $? (port $port)"; status=1; }
    r=$((r + 1))
done
[ $status = 0 ] && echo "the README's example ran on $n ranks" || echo "a rank of the README's example failed"
exit $status
