#!/bin/sh
# meson test torch2-lab: examples/encoder_lab.py on torch 2.6 in the Debian 13 root, a few
# steps on 2 ranks: a 2-stage GPipe pipeline with 4 micro-batches (and its slow-stage run),
# and DDP against FSDP1 at global batch 16,
# over "collective" and Gloo. Checks: each run's loss falls; ours and Gloo's losses agree
# within 1e-4 (the same arithmetic, only the transport differs); every rank reports its
# saved activations and peak RSS; FSDP holds less parameter, gradient and Adam state per
# rank than DDP. With more arguments, runs the lab with them instead (the tables in
# docs/examples.md): lab.sh LIB PYSRC EXAMPLES pipeline --stages 2,4 ...
# Skips (77) as root.sh says.
set -eu
lib=$1 pysrc=$2 examples=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/root.sh"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$lib" "$stage/libcollective.so.0"
mkdir "$stage/examples"
cp -R "$pysrc/collective" "$stage/"
cp "$examples/encoder_lab.py" "$examples/torch_ddp.py" "$examples/torch_lab.py" "$stage/examples/"
cd "$stage"
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
export COLL_LIBRARY=/src/libcollective.so.0 PYTHONPATH=/src
lab() { sh "$here/chroot.sh" "$root" python3 examples/encoder_lab.py "$@"; }
if [ $# -gt 0 ]; then
    lab "$@"
    exit
fi
lab pipeline --stages 2 --micro 4 --steps 4 --warmup 1 --lr 0.1 --json pipe.json --schedules gpipe \
    --micro-slow 4 --slow-ms 0.2
lab fsdp --np 2 --batch 16 --steps 4 --warmup 1 --lr 0.1 --json fsdp.json
python3 - <<'PY'
import json, sys
bad = []
for name in ("pipe.json", "fsdp.json"):
    rows = json.load(open(name))
    runs = {}
    for r in rows:
        what = json.dumps({k: v for k, v in r.items() if k not in ("backend", "per_rank")})
        runs.setdefault(what, {})[r["backend"]] = r
        for q in r["per_rank"]:
            if not (q["saved"] > 0 and q["maxrss"] > 0):
                bad.append(f"{what} {r['backend']}: a rank reports no memory: {q}")
        losses = next(q["losses"] for q in reversed(r["per_rank"]) if q["losses"])
        if not losses[-1] < losses[0]:
            bad.append(f"{what} {r['backend']}: loss did not fall: {losses}")
    for what, by in runs.items():
        ours, gloo = (next(q["losses"] for q in reversed(by[b]["per_rank"]) if q["losses"])
                      for b in ("collective", "gloo"))
        if len(ours) != len(gloo) or max(abs(a - b) for a, b in zip(ours, gloo)) > 1e-4:
            bad.append(f"{what}: ours {ours} against Gloo {gloo}")
    print(f"{name}: {len(runs)} runs, both backends")
held = {(r["backend"], r["strategy"]): sum(r["per_rank"][0][k] for k in ("params", "grads",
        "optimizer")) for r in json.load(open("fsdp.json"))}
for b in ("collective", "gloo"):
    if not held[b, "fsdp"] < held[b, "ddp"]:
        bad.append(f"{b}: FSDP holds {held[b, 'fsdp']} B of state, DDP {held[b, 'ddp']}")
print("\n".join(bad) or "encoder lab: losses fall, ours matches Gloo, FSDP holds less")
sys.exit(1 if bad else 0)
PY
