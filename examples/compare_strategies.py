#!/usr/bin/env python3
"""Runs one model under every parallel strategy and prints one table.

  compare_strategies.py [--bin DIR] [--ranks 2,4] [--batch 64] [--steps 60] [--out DIR]
                        [--no-torch]

For each rank count it runs serial (dp_train on one rank), DP, FSDP, TP, PP (1F1B) and
hybrid PP x DP on the same global batch, each for --steps steps of one epoch, and reads
their --json reports. Columns: samples/s and speedup over the serial run of this script;
bytes each rank put on the wire per step next to the strategy's formula (DP 2P(N-1)/N,
FSDP 3P'(N-1)/N, TP the all-reduces of B x 256 + B x 10 + B x 256, PP activations and
gradients B x width per boundary, hybrid the stage-group all-reduce 2P_stage(D-1)/D,
activations left out); the largest memory any rank holds (params, grads, optimizer
state, activations, KiB); test accuracy. Chrome traces of one step of each go to
DIR/<strategy>_<N>.trace.json (open them in Perfetto). Where torch is installed, two more
rows: examples/torch_ddp.py (PyTorch DDP over this library, a small CNN) on one rank and
on N, its speedup over its own one-rank run.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's, which has torch


def strategies(n, torch_rows):
    """(name, program, arguments) for n ranks."""
    yield "serial", "dp_train", ["--np", "1"]
    yield "dp", "dp_train", ["--np", str(n)]
    yield "fsdp", "fsdp_train", ["--np", str(n)]
    yield "tp", "tp_train", ["--np", str(n)]
    yield "pp-1f1b", "pp_train", ["--np", str(n), "--schedule", "1f1b", "--microbatches", "4"]
    if n % 2 == 0:
        yield "hybrid", "hybrid_1f1b", ["--np", str(n), "--stages", "2", "--microbatches", "4"]
    # PyTorch's DDP over this library: another model (a CNN), so its own one-rank base.
    if torch_rows and has_torch():
        yield "torch-1", "torch_ddp.py", ["--np", "1"]
        yield "torch-dp", "torch_ddp.py", ["--np", str(n)]


def has_torch():
    probe = subprocess.run([PYTHON, "-c", "import torch, numpy"], capture_output=True)
    return probe.returncode == 0


def records(doc):
    """Per-rank records of the last epoch: (measured bytes, formula, memory)."""
    last = doc["epochs"][-1]
    rows = last.get("stages") or last.get("ranks") or [last]
    return [(r.get("wire_bytes_per_step", r.get("sent_bytes_per_step")),
             r["formula_bytes_per_step"], r["memory"]) for r in rows]


def run(args, name, prog, extra, n):
    base = os.path.join(args.out, f"{name}_{n}")
    env = dict(os.environ)
    if prog.endswith(".py"):  # the package and library of this tree unless told otherwise
        cmd = [PYTHON, os.path.join(HERE, prog)]
        env.setdefault("PYTHONPATH", os.path.join(HERE, "..", "python"))
        env.setdefault("COLL_LIBRARY", os.path.join(args.bin, "..", "libcollective.so.0"))
    else:
        cmd = [os.path.join(args.bin, prog)]
    cmd += [*extra, "--epochs", "1", "--steps", str(args.steps), "--batch", str(args.batch),
            "--json", base + ".json", "--trace", base + ".trace.json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return json.load(open(base + ".json"))


def row(name, n, doc, serial_sps):
    last = doc["epochs"][-1]
    recs = records(doc)
    wire = max(r[0] for r in recs)
    formula = max(r[1] for r in recs)
    mem = max(recs, key=lambda r: sum(r[2].values()))[2]
    sps = last["samples_per_s"]
    kib = [mem.get(k, 0) / 1024
           for k in ("params", "grads", "optimizer", "activations", "gathered")]
    return (f"{name:<8} {n:>2} {sps:>10.0f} {sps / serial_sps:>7.2f}x {wire:>12.0f} "
            f"{formula:>12.0f} {kib[0]:>9.0f} {kib[1]:>9.0f} {kib[2]:>9.0f} {kib[3]:>9.0f} "
            f"{kib[4]:>9.0f} {doc['test_accuracy']:>8.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "examples"))
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default="compare_out")
    ap.add_argument("--no-torch", action="store_true", help="leave out the torch rows")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"# global batch {args.batch}, {args.steps} steps each; bytes per rank per step; "
          f"memory of the fullest rank in KiB")
    print(f"{'strategy':<8} {'N':>2} {'samples/s':>10} {'speedup':>8} {'wire B':>12} "
          f"{'formula B':>12} {'params':>9} {'grads':>9} {'optim':>9} {'activ':>9} "
          f"{'gathered':>9} "
          f"{'test_acc':>8}")
    for n in (int(x) for x in args.ranks.split(",")):
        base = {}  # each model's one-rank throughput: the C trainers' MLP, torch's CNN
        for name, prog, extra in strategies(n, not args.no_torch):
            doc = run(args, name, prog, extra, n)
            sps = base.setdefault(prog.endswith(".py"), doc["epochs"][-1]["samples_per_s"])
            print(row(name, n, doc, sps), flush=True)
    print(f"# traces: {args.out}/<strategy>_<N>.trace.json; hybrid's bytes are its stage "
          f"group's all-reduce only")


if __name__ == "__main__":
    main()
