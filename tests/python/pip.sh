#!/bin/sh
# `pip install` of the source tree ($1) into a fresh venv of Debian's Python (numpy and
# torch from Debian's site directory), then a 2-rank all-reduce, from another directory,
# with the library the wheel carries. Skips (77) without python3-venv, pip, meson-python
# or numpy. The tree is copied first: pip builds in the source directory.
set -eu
src="$1"
py=/usr/bin/python3
$py -c "import numpy" 2>/dev/null || { echo "numpy is not installed: skipped"; exit 77; }
$py -c "import mesonpy" 2>/dev/null || { echo "meson-python (python3-mesonpy) is not installed: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/coll_pip.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
$py -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1 ||
    { cat "$tmp/venv.log"; echo "no venv with pip (python3-venv): skipped"; exit 77; }
"$tmp/venv/bin/python" -m pip --version >/dev/null 2>&1 || { echo "pip is not in the venv: skipped"; exit 77; }
mkdir "$tmp/src" "$tmp/run"
tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$tmp/src" -xf -
start=$(date +%s)
"$tmp/venv/bin/python" -m pip install --no-build-isolation --no-deps -q "$tmp/src"
echo "pip install: $(($(date +%s) - start)) s"
rm -rf "$tmp/src"  # the package must not lean on the tree it was built from
cd "$tmp/run"
env -u COLL_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH "$tmp/venv/bin/python" - "$tmp/run" <<'PY'
import importlib.metadata, multiprocessing as mp, os, sys
import numpy as np
import collective, collective._lib as L

where = sys.argv[1]
pkg = os.path.dirname(collective.__file__)
assert pkg.startswith(os.path.dirname(os.path.dirname(sys.executable))), pkg
assert L.lib._name == os.path.join(pkg, "libcollective.so"), L.lib._name
# A wheel that carries a native library is tagged for its platform, not py3-none-any.
wheel = importlib.metadata.distribution("libcollective").read_text("WHEEL")
assert "Root-Is-Purelib: false" in wheel and "-none-any" not in wheel, wheel


def rank(r):
    c = collective.Communicator(f"file://{where}/rdzv", r, 2, timeout_ms=10000)
    x = np.full(1000, r + 1, np.float32)
    c.allreduce(x)
    assert (x == 3).all(), x[:4]
    c.close()


ps = [mp.get_context("fork").Process(target=rank, args=(r,)) for r in range(2)]
for p in ps:
    p.start()
for p in ps:
    p.join(60)
assert [p.exitcode for p in ps] == [0, 0], [p.exitcode for p in ps]
print("2-rank allreduce with", L.lib._name)
try:
    import torch  # noqa: F401
except ImportError:
    print("torch is not installed: collective.torch not tried")
else:
    import collective.torch  # noqa: F401
    print("collective.torch imported, torch", torch.__version__)
PY
