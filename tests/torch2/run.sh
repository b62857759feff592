#!/bin/sh
# meson test torch2: the Python package's tests (test_collective.py, test_torch.py) on
# Debian 13's PyTorch 2.6, in a Debian 13 root built once per machine under
# /var/cache/libcollective-torch2 (TORCH2_ROOT moves it) by chroot.sh beside this file,
# against this build's library. The same test files run on Debian 12's torch 1.13 in
# suite python. Skips (77) as root.sh says.
# Usage: run.sh LIBCOLLECTIVE PYTHON_SOURCE PYTHON_TESTS
set -eu
lib=$1 pysrc=$2 tests=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/root.sh"

# What the root sees at /src: the library, the package and the tests, copied.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$lib" "$stage/libcollective.so.0"
mkdir "$stage/python" "$stage/tests"
cp -R "$pysrc/collective" "$stage/python/"
cp "$tests"/*.py "$stage/tests/"
# coll_status, built beside the library, for test_torch.py's status test.
cp "$(dirname "$lib")/tools/coll_status" "$stage/coll_status"

cd "$stage"
# Gloo (the reference in test_torch.py) binds to the root's unresolvable host name
# otherwise, with a warning per rank; torch 2.6 on Python 3.13 warns of its own partials.
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::FutureWarning}
sh "$here/chroot.sh" "$root" python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
status=0
for t in test_collective.py test_torch.py; do
    echo "== $t"
    COLL_LIBRARY=/src/libcollective.so.0 COLL_STATUS=/src/coll_status \
        PYTHONPATH=/src/python:/src/tests \
        sh "$here/chroot.sh" "$root" python3 "tests/$t" || { echo "FAIL $t"; status=1; }
done
exit $status
