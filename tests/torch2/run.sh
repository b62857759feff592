#!/bin/sh
# meson test torch2: the Python package's tests (test_collective.py, test_torch.py) on
# Debian 13's PyTorch 2.6, in a Debian 13 root built once per machine under
# /var/cache/libcollective-torch2 (TORCH2_ROOT moves it) by chroot.sh beside this file,
# against this build's library. The same test files run on Debian 12's torch 1.13 in
# suite python. Skips (77) without root, or, while the root is not built yet, without
# debootstrap (.ci/deps installs it) or Debian's package registry.
# Usage: run.sh LIBCOLLECTIVE PYTHON_SOURCE PYTHON_TESTS
set -eu
lib=$1 pysrc=$2 tests=$3
here=$(cd "$(dirname "$0")" && pwd)
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

# What the root sees at /src: the library, the package and the tests, copied.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$lib" "$stage/libcollective.so.0"
mkdir "$stage/python" "$stage/tests"
cp -R "$pysrc/collective" "$stage/python/"
cp "$tests"/*.py "$stage/tests/"

cd "$stage"
# Gloo (the reference in test_torch.py) binds to the root's unresolvable host name
# otherwise, with a warning per rank; torch 2.6 on Python 3.13 warns of its own partials.
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::FutureWarning}
sh "$here/chroot.sh" "$root" python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
status=0
for t in test_collective.py test_torch.py; do
    echo "== $t"
    COLL_LIBRARY=/src/libcollective.so.0 PYTHONPATH=/src/python:/src/tests \
        sh "$here/chroot.sh" "$root" python3 "tests/$t" || { echo "FAIL $t"; status=1; }
done
exit $status
