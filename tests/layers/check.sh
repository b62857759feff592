#!/bin/sh
# The layers point one way (DESIGN.md, section 11): lib/base depends on nothing of ours;
# transports/ on base; lib/wire (the handshake and header formats) on transports;
# lib/rdzv and lib/kernels on base; lib/algo on those; lib/core on everything below it. Every include is by module path, none climbs with "../".
# Prints each include that points up or climbs, and fails if there is one.
# usage: check.sh REPO_ROOT
cd "${1:-.}" || exit 1

# The module folders (or files) a layer's includes may name.
allowed() {
    case $1 in
    lib/base/*) echo "base" ;;
    transports/*) echo "base transports" ;;
    lib/rdzv/*) echo "base rdzv" ;;
    lib/kernels/*) echo "base kernels" ;;
    lib/wire/*) echo "base transports wire" ;;
    lib/algo/*) echo "base transports wire kernels algo" ;;
    lib/core/*) echo "base transports wire rdzv kernels algo core" ;;
    esac
}

bad=$(grep -Ho '#include "[^"]*"' $(find lib transports -name '*.[ch]') | sed 's/#include "\(.*\)"/\1/' |
    while IFS=: read -r file inc; do
        [ "$inc" = collective.h ] && continue
        [ "$inc" = collective_net.h ] && continue
        ok=$(allowed "$file")
        fine=0
        for a in $ok; do
            case $inc in "$a" | "$a"/*) fine=1 ;; esac
        done
        [ $fine = 1 ] || echo "$file includes $inc (allowed: $ok)"
    done)
climbs=$(grep -rl '#include "\.\./' lib transports perf examples tests)
[ -n "$bad" ] && echo "includes that point up:" && echo "$bad"
[ -n "$climbs" ] && echo "includes that climb with ../ (use the module path):" && echo "$climbs"
[ -z "$bad$climbs" ] || exit 1
echo "layers: every include points down, by module path"
