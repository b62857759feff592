#!/bin/sh
# examples/torch_ddp.py on 2 local ranks, one short epoch (6000 images) on each backend,
# and on ours with int8 gradients through the error-feedback hook: each must finish and
# print test_accuracy above 0.6 (a net that learned; a full run of 4 epochs reaches 0.90,
# see the notes of issue 19). Then the scaling lab, tiny: ResNet-18, 4 images per rank,
# 1 and 2 ranks, ours and Gloo: four rows, each with a time, a speedup and comm times, and
# on 2 ranks a bandwidth and coll_perf's. Skips (77) without torch.
# usage: torch_ddp.sh EXAMPLE LIBRARY PYTHON_SRC COLL_PERF
ex=$1 lib=$2 src=$3 perf=$4
py=/usr/bin/python3
$py -c "import torch, numpy" 2>/dev/null || { echo "torch is not installed: skipped"; exit 77; }
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "dataset-fashion-mnist is not installed: skipped"; exit 77; }
status=0
for how in "--backend collective" "--backend gloo" "--codec int8"; do
    out=$(COLL_LIBRARY="$lib" PYTHONPATH="$src" timeout 120 $py "$ex" --np 2 --epochs 1 \
          --limit 6000 $how 2>&1)
    rc=$?
    echo "$out" | grep -v '^coll '
    [ $rc -eq 0 ] || { echo "FAIL: $how: exit status $rc (124: it did not end)"; status=1; }
    acc=$(echo "$out" | sed -n 's/^test_accuracy //p')
    if [ -z "$acc" ] || ! $py -c "import sys; sys.exit(0 if float('$acc') > 0.6 else 1)"; then
        echo "FAIL: $how: test_accuracy '${acc}'"
        status=1
    fi
done
out=$(COLL_LIBRARY="$lib" PYTHONPATH="$src" timeout 300 $py "$ex" --model resnet18 --sweep 4 \
      --np 1,2 --steps 1 --coll-perf "$perf" 2>&1)
rc=$?
echo "$out" | grep -v '^coll '
[ $rc -eq 0 ] || { echo "FAIL: scaling lab: exit status $rc"; status=1; }
# rows: ranks batch step samples/s speedup compute comm exposed buckets GB/s coll_perf
rows=$(echo "$out" | awk '$1 ~ /^[12]$/ && $2 == 4 && $3 > 0 && $5 ~ /x$/ && $7 ~ /-/ &&
       $8 ~ /-/ && ($1 == 1 || ($10 > 0 && $11 > 0))' | wc -l)
[ "$rows" -eq 4 ] || { echo "FAIL: scaling lab: $rows good rows, want 4"; status=1; }
exit $status
