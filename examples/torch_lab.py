"""The DDP scaling lab of examples/torch_ddp.py (--model resnet18 --sweep 32,128,512):
a ResNet-18 written here (no downloads), and per (ranks, batch per rank) the time of a
step, the speedup over one rank, compute against communication per rank, and the
gradient all-reduce's bandwidth beside coll_perf's busbw at the same bucket size.

Compute is a step under DDP's no_sync() (nothing communicated); communication is each
bucket's all-reduce from the hook's issue until its work's future completed, summed
over the step's buckets (it overlaps backward, so compute + comm can exceed a step);
exposed is what communication added to the step (step - compute)."""
import functools
import json
import math
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    """torchvision's resnet18 (11.2 M parameters) for one-channel 28 x 28 images."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


class Timeline:
    """What this rank did in its step: spans timed on this thread (forward, backward, the
    optimizer) and each gradient bucket's all-reduce, from the hook's issue until its
    work's future completed (timed from the work objects, on whichever thread ends them),
    their sum and the buckets' sizes. torch_ddp.py's trainer and the lab both use it."""

    def __init__(self):
        self.restart()

    def restart(self):
        self.spans, self.comm_s, self.buckets = [], 0.0, []

    def span(self, name, start, end=None):
        """Times on the host's monotonic clock (perf_counter), which every local rank shares."""
        self.spans.append((name, start, end or time.perf_counter()))

    def hook(self, inner):
        """inner, a DDP communication hook, with every bucket timed."""
        def timed(state, bucket):
            start = time.perf_counter()
            self.buckets.append(bucket.buffer().numel())

            def done(fut):
                self.comm_s += time.perf_counter() - start
                self.span(f"all-reduce bucket {bucket.index()}", start)
                return fut.value()
            return inner(state, bucket).then(done)
        return timed


def measure(model_fn, group, batch, data, rank, steps):
    """One point on this rank: median step, compute (no_sync) and comm seconds, and the
    bucket sizes of a step."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    torch.manual_seed(0)
    clock = Timeline()
    model = nn.parallel.DistributedDataParallel(model_fn(), process_group=group)
    model.register_comm_hook(group, clock.hook(default_hooks.allreduce_hook))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xs, ys = data
    x, y = xs[rank * batch:(rank + 1) * batch], ys[rank * batch:(rank + 1) * batch]

    def step():
        clock.restart()
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        return time.perf_counter() - start, clock.comm_s

    for _ in range(3):  # warm-up; DDP rebuilds its buckets after the first step
        step()
    timed = [step() for _ in range(steps)]
    buckets = list(clock.buckets)
    with model.no_sync():
        compute = [step()[0] for _ in range(max(2, steps // 2))]
    return {"step_s": statistics.median(t for t, _ in timed),
            "comm_s": statistics.median(c for _, c in timed),
            "compute_s": statistics.median(compute), "buckets": buckets,
            "params": sum(p.numel() for p in model.parameters())}


def sweep_rank(args, rank, size, data, model_fn, out):
    """Every batch size on every backend this process group measures; rank 0 writes the
    points (JSON lines, each rank's comm and compute) to `out`."""
    groups = [(args.backend, None)]
    if args.backend == "collective" and not args.no_gloo:
        groups.append(("gloo", dist.new_group(backend="gloo")))
    points = []
    for name, group in groups:
        for batch in args.sweep:
            me = measure(model_fn, group, batch, data, rank, args.steps or 4)
            every = [None] * size
            dist.all_gather_object(every, me)
            points.append({"backend": name, "ranks": size, "batch": batch, "per_rank": every})
    if rank == 0:
        with open(out, "a") as f:
            for p in points:
                f.write(json.dumps(p) + "\n")


@functools.lru_cache(maxsize=None)
def coll_perf_busbw(path, n, nbytes):
    """coll_perf's all-reduce busbw (GB/s) at nbytes on n local ranks; None without it."""
    if n < 2 or not path or not os.access(path, os.X_OK):
        return None
    size = max(4, nbytes // 4 * 4)
    done = subprocess.run([path, "--np", str(n), "-b", str(size), "-e", str(size), "-n", "10",
                           "-w", "2", "-c", "0"], capture_output=True, text=True)
    rows = [line.split() for line in done.stdout.splitlines()
            if line.strip() and not line.startswith("#")]
    return float(rows[-1][7]) if done.returncode == 0 and rows else None


def tables(points, coll_perf):
    """The lab's table per backend, and the points with the derived columns (for --json)."""
    one = {(p["backend"], p["batch"]): p for p in points if p["ranks"] == 1}
    for backend in dict.fromkeys(p["backend"] for p in points):
        print(f"\n# backend {backend}: ms per step (median), samples/s of all ranks, speedup "
              f"over 1 rank at that batch, compute (no_sync) and comm (bucket all-reduces, "
              f"from the work objects) and exposed (step - compute) per rank, ms; comm "
              f"bandwidth = "
              f"ceil(2(N-1)/N X) x 4 B / comm")
        print(f"{'ranks':>5} {'batch':>5} {'step':>8} {'samples/s':>9} {'speedup':>7} "
              f"{'compute':>15} {'comm':>15} {'exposed':>15} {'buckets':>7} {'GB/s':>6} "
              f"{'coll_perf':>9}")
        for p in (q for q in points if q["backend"] == backend):
            row(p, one.get((backend, p["batch"])), coll_perf)
    return points


def row(p, base, coll_perf):
    per, n = p["per_rank"], p["ranks"]
    step = max(r["step_s"] for r in per)
    p["samples_per_s"] = n * p["batch"] / step
    speedup = p["samples_per_s"] / base["samples_per_s"] if base and "samples_per_s" in base \
        else float("nan")
    comm = [r["comm_s"] for r in per]
    compute = [r["compute_s"] for r in per]
    exposed = [max(0.0, r["step_s"] - r["compute_s"]) for r in per]
    x, buckets = per[0]["params"], per[0]["buckets"]
    moved = math.ceil(2 * (n - 1) / n * x) * 4
    p["gbps"] = moved / max(comm) / 1e9 if n > 1 and max(comm) > 0 else None
    if "coll_perf_busbw" not in p:
        p["coll_perf_busbw"] = coll_perf_busbw(coll_perf, n, 4 * x // max(1, len(buckets)))
    span = lambda v: f"{min(v) * 1e3:.1f}-{max(v) * 1e3:.1f}"  # noqa: E731
    gb = f"{p['gbps']:.2f}" if p["gbps"] else "-"
    cp = f"{p['coll_perf_busbw']:.2f}" if p["coll_perf_busbw"] else "-"
    print(f"{n:>5} {p['batch']:>5} {step * 1e3:>8.1f} {p['samples_per_s']:>9.0f} "
          f"{speedup:>6.2f}x {span(compute):>15} {span(comm):>15} {span(exposed):>15} "
          f"{len(buckets):>7} {gb:>6} "
          f"{cp:>9}", flush=True)
