#!/bin/sh
# examples/torch_ddp.py started three ways (issue 56), 2 ranks, one short epoch (6000
# images) on the library's backend: `python3 -m collective.torchrun` (torchrun with the
# mends of collective/_torchcompat.py), plain torchrun as the README shows it for Debian
# 12 (`--redirects 1 --tee 1`, which dodges torch 1.13's Std.from_str on Python 3.11; the
# lines then come as "[default0]:..."), and coll_run. Each run ends with status 0 and
# test_accuracy above 0.6. tests/torch2/torchrun.sh runs this file in the Debian 13 root
# with PLAIN_TORCHRUN=0: Debian 13's own torchrun fails there for any backend (its torch
# has no libuv). FASHION_MNIST names the dataset's folder (default: Debian's package).
# Skips (77) without torch, torchrun or the dataset.
# usage: torchrun.sh EXAMPLE LIBRARY PYTHON_SRC COLL_RUN
ex=$1 lib=$2 src=$3 run=$4
py=/usr/bin/python3
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
$py -c "import torch, numpy" 2>/dev/null && command -v torchrun >/dev/null ||
    { echo "torch or torchrun is not installed: skipped"; exit 77; }
[ -r "$data/train-images-idx3-ubyte.gz" ] ||
    { echo "dataset-fashion-mnist is not installed: skipped"; exit 77; }
export COLL_LIBRARY="$lib" PYTHONPATH="$src"
status=0
check() { # LABEL STATUS OUTPUT
    echo "$3" | grep -v 'coll \|^\*\|OMP_NUM_THREADS\|^W[0-9 ]\|^WARNING'
    [ "$2" -eq 0 ] || { echo "FAIL: $1: exit status $2 (124: it did not end)"; status=1; }
    acc=$(echo "$3" | sed -n 's/^\(\[default0\]:\)\{0,1\}test_accuracy //p' | head -n 1)
    if [ -z "$acc" ] || ! $py -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)"; then
        echo "FAIL: $1: test_accuracy '$acc'"
        status=1
    fi
}
args="$ex --epochs 1 --limit 6000 --data $data"
out=$(timeout 200 $py -m collective.torchrun --nproc_per_node 2 $args 2>&1)
check collective.torchrun $? "$out"
if [ "${PLAIN_TORCHRUN:-1}" != 0 ]; then
    out=$(timeout 200 torchrun --nproc_per_node 2 --redirects 1 --tee 1 $args 2>&1)
    check torchrun $? "$out"
fi
out=$(timeout 200 "$run" --np 2 $py $args 2>&1)
check coll_run $? "$out"
exit $status
