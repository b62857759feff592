#!/bin/sh
# examples/torch_ddp.py launched by torchrun and by coll_run (issue 56), 2 ranks, one
# short epoch (6000 images) on the library's backend: each run ends with status 0 and
# test_accuracy above 0.6. Debian 12's torchrun (torch 1.13 on Python 3.11) crashes
# before any worker starts unless its output is redirected (--redirects 1 --tee 1:
# Std.from_str returns None otherwise); the lines then come as "[default0]:...".
# Skips (77) without torch, torchrun or the dataset.
# usage: torchrun.sh EXAMPLE LIBRARY PYTHON_SRC COLL_RUN
ex=$1 lib=$2 src=$3 run=$4
py=/usr/bin/python3
$py -c "import torch, numpy" 2>/dev/null && command -v torchrun >/dev/null ||
    { echo "torch or torchrun is not installed: skipped"; exit 77; }
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist is not installed: skipped"; exit 77; }
export COLL_LIBRARY="$lib" PYTHONPATH="$src"
status=0
check() { # LABEL STATUS OUTPUT
    echo "$3" | grep -v 'coll \|^\*\|OMP_NUM_THREADS\|^WARNING'
    [ "$2" -eq 0 ] || { echo "FAIL: $1: exit status $2 (124: it did not end)"; status=1; }
    acc=$(echo "$3" | sed -n 's/^\(\[default0\]:\)\{0,1\}test_accuracy //p' | head -n 1)
    if [ -z "$acc" ] || ! $py -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)"; then
        echo "FAIL: $1: test_accuracy '$acc'"
        status=1
    fi
}
out=$(timeout 200 torchrun --nproc_per_node 2 --redirects 1 --tee 1 "$ex" --epochs 1 --limit 6000 2>&1)
check torchrun $? "$out"
out=$(timeout 200 "$run" --np 2 $py "$ex" --epochs 1 --limit 6000 2>&1)
check coll_run $? "$out"
exit $status
