#!/bin/sh
# The example plugin built as a plugin author builds it: with make, from the header and
# pkg-config file an install puts in a prefix (collective_net.h alone, without
# collective.h: the ABI header stands by itself), then loaded by NAME from the library
# path (COLL_NET_PLUGIN=example) under coll_perf --np 2 and 4: all-reduces, checked.
# Usage: outside.sh SOURCE_ROOT BUILD_ROOT COLL_PERF
set -u
src=$1 build=$2 perf=$3 fail=0
no() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d /tmp/net-plugin.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include" "$tmp/pkgconfig" "$tmp/lib"
cp "$src/include/collective_net.h" "$tmp/include/"
sed "s|^prefix=.*|prefix=$tmp|" "$build/meson-private/libcollective-net.pc" >"$tmp/pkgconfig/libcollective-net.pc"
PKG_CONFIG_PATH="$tmp/pkgconfig" make -s -C "$src/examples/net_plugin" OUT="$tmp/lib" \
    CFLAGS="-O2 -Wall -Wextra -Werror" || { echo "FAIL: make"; exit 1; }
for np in 2 4; do
    out=$(COLL_NET_PLUGIN=example COLL_TRANSPORT=example LD_LIBRARY_PATH="$tmp/lib" \
        "$perf" --np $np -C all_reduce -b 8 -e 4M -f 16 -n 3 -w 1 2>&1) ||
        no "coll_perf --np $np over the plugin: $out"
    echo "$out" | grep -q "Out of bounds values : 0 OK" || no "--np $np: wrong results: $out"
done
[ $fail = 0 ] && echo "the example plugin built outside the tree carried all-reduces on 2 and 4 ranks"
exit $fail
