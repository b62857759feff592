#!/bin/sh
# chroot.sh DIR [COMMAND...]: a Debian 13 (trixie) root in DIR with Debian's PyTorch 2.6
# (python3-torch 2.6.0, CPU build, Python 3.13), built once per machine and reused; with
# a COMMAND, runs it inside with /proc and /dev mounted and the current directory
# bind-mounted at /src (cwd /src), in a mount namespace of the run's own: runs side by
# side (one per rank) do not see each other's mounts, and nothing stays mounted.
# Environment variables pass through; USE_LIBUV=0 is set (Debian's torch 2.6 TCPStore
# has no libuv). TORCH2_PKGS adds packages to the root (installed once, when missing).
# Needs root, and debootstrap and Debian's package registry (MIRROR) while the root is
# built. Exit 2 when the root cannot be built (see DIR.log).
set -eu
DIR=$1; shift
MIRROR=${MIRROR:-http://deb.debian.org/debian}
# libssl3t64: the library's libcrypto; libuv1: its event loop.
PKGS="python3-torch python3-numpy libuv1 libssl3t64 ca-certificates ${TORCH2_PKGS:-}"

inside() {  # inside CMD: CMD run by sh in the root, /proc mounted, in a namespace of its own
    unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" &&
        exec chroot "$1" sh -c "$2"' sh "$DIR" "$1"
}

missing() {  # the packages of PKGS not installed in the root, on one line
    inside "for p in $PKGS; do dpkg-query -W -f='\${Status}' \$p 2>/dev/null |
        grep -q 'install ok installed' || printf '%s ' \$p; done"
}

build() {
    if [ ! -x "$DIR/usr/bin/apt-get" ]; then
        # Built aside and moved in whole: a debootstrap cut short never leaves a root
        # that looks finished.
        rm -rf "$DIR.new"
        rmdir "$DIR" 2>/dev/null || true
        [ ! -e "$DIR" ] || { echo "chroot.sh: $DIR is not a root; remove it" >&2; return 2; }
        debootstrap --variant=minbase trixie "$DIR.new" "$MIRROR" >"$DIR.log" 2>&1 ||
            { echo "chroot.sh: debootstrap failed, see $DIR.log" >&2; return 2; }
        mv "$DIR.new" "$DIR"
    fi
    need=$(missing)
    [ -z "$need" ] && return 0
    inside "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $need" >>"$DIR.log" 2>&1 ||
        { echo "chroot.sh: installing $need failed, see $DIR.log" >&2; return 2; }
}

mkdir -p "$(dirname "$DIR")"
# One build at a time: ranks or test runs started side by side wait for the first one's.
( flock 9; build ) 9>"$DIR.lock" || exit 2
[ $# -gt 0 ] || exit 0
mkdir -p "$DIR/src"
exec unshare --mount --propagation private sh -c '
    DIR=$1; shift
    mount -t proc proc "$DIR/proc" && mount --rbind /dev "$DIR/dev" &&
    mount --bind "$(pwd)" "$DIR/src" &&
    exec chroot "$DIR" env USE_LIBUV=0 sh -c "cd /src && exec \"\$@\"" sh "$@"' sh "$DIR" "$@"
