#!/bin/sh
# meson test torch2-torchrun: tests/examples/torchrun.sh (the DDP example started by
# `python3 -m collective.torchrun` and by coll_run) on Debian 13's torch 2.6, in the root
# of root.sh, against this build's library and launcher. Skips (77) as root.sh says.
# Usage: torchrun.sh EXAMPLES LIBCOLLECTIVE PYTHON_SOURCE COLL_RUN TORCHRUN_TEST
set -eu
examples=$1 lib=$2 pysrc=$3 run=$4 test=$5
here=$(cd "$(dirname "$0")" && pwd)
. "$here/root.sh"

# What the root sees at /src: the library, launcher, package, example, test and data.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$lib" "$stage/libcollective.so.0"
cp -L "$run" "$stage/coll_run"
mkdir "$stage/python" "$stage/examples" "$stage/data"
cp -R "$pysrc/collective" "$stage/python/"
cp "$examples/torch_ddp.py" "$examples/torch_lab.py" "$stage/examples/"
cp "$test" "$stage/torchrun.sh"
cp "${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"/*-ubyte.gz "$stage/data/" 2>/dev/null ||
    skip "dataset-fashion-mnist is not installed"

cd "$stage"
PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::FutureWarning} FASHION_MNIST=/src/data PLAIN_TORCHRUN=0 sh "$here/chroot.sh" "$root" \
    sh torchrun.sh examples/torch_ddp.py /src/libcollective.so.0 /src/python /src/coll_run
