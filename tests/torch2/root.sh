# Sourced by this folder's tests: skips (77) without root, or, while the Debian 13 root
# is not built yet, without debootstrap (.ci/deps installs it) or Debian's package
# registry; otherwise builds the root once per machine (chroot.sh) and sets $root and
# $here (this folder).
root=${TORCH2_ROOT:-/var/cache/libcollective-torch2/root}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
export MIRROR

skip() { echo "$1: skipped"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (the root needs chroot and mount namespaces)"
for c in unshare chroot flock; do command -v $c >/dev/null || skip "no $c"; done
if [ ! -x "$root/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null || skip "no debootstrap to build $root"
    python3 -c "import urllib.request as u; u.urlopen('$MIRROR/dists/trixie/Release', timeout=20)" \
        2>/dev/null || skip "$MIRROR unreachable: $root cannot be built"
    echo "building $root (once per machine: debootstrap and torch, a few minutes)"
fi
sh "$here/chroot.sh" "$root"
