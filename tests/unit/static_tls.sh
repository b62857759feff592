#!/bin/sh
# The library's static TLS (its PT_TLS segment's size in memory) stays under the room
# glibc keeps for a dlopen()ed library's (about 1.3 KB after Python's own): past it,
# `import collective` fails "cannot allocate memory in static TLS block" (da31368: a
# thread-local buffer of 2 KiB). A thread-local buffer belongs on the stack or in a
# pointer; this names the size so the commit that grows it says so.
# usage: static_tls.sh LIBRARY [LIMIT_BYTES]
lib=$1
limit=${2:-1280}
command -v readelf >/dev/null 2>&1 || { echo "no readelf: skipped"; exit 77; }
hex=$(readelf -lW "$lib" | awk '$1 == "TLS" { print $6 }')
size=$(printf '%d' "${hex:-0}")
echo "static TLS of $lib: $size bytes (limit $limit)"
[ "$size" -le "$limit" ]
