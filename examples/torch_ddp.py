#!/usr/bin/python3
"""A small CNN on Fashion-MNIST, data parallel with torch's DistributedDataParallel over
the "collective" backend (or Gloo, to compare). Reads Debian's dataset-fashion-mnist
(no downloads). Launch with torchrun --nproc_per_node N, with RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT per rank, or with --np N (local processes):

    /usr/bin/python3 examples/torch_ddp.py --np 2 [--backend collective|gloo] [--epochs 4]
        [--codec int8]   # gradients averaged through int8 with error feedback (a DDP hook)

Per epoch: mean loss, training accuracy, samples/s (all ranks); then `test_accuracy A`.
--json/--trace write the run's report and a Chrome trace of each rank's last step.
The DDP scaling lab (torch_lab.py) instead of training:

    /usr/bin/python3 examples/torch_ddp.py --model resnet18 --sweep 32,128,512 --np 1,2,4
"""
import argparse
import datetime
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_lab

HERE = os.path.dirname(os.path.abspath(__file__))


def load(kind, limit, data):
    def read(name):
        with gzip.open(os.path.join(data, name), "rb") as f:
            return f.read()
    img = read(f"{kind}-images-idx3-ubyte.gz")
    lab = read(f"{kind}-labels-idx1-ubyte.gz")
    n = struct.unpack(">I", img[4:8])[0]
    x = np.frombuffer(img, np.uint8, offset=16).reshape(n, 1, 28, 28)
    y = np.frombuffer(lab, np.uint8, offset=8)
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0)
    return (x - 0.2860) / 0.3530, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 7 * 7, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


MODELS = {"cnn": Net, "resnet18": torch_lab.ResNet18}


def ddp_model(args, clock):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model = nn.parallel.DistributedDataParallel(MODELS[args.model]())
    if args.codec != "none":
        import collective.torch
        state, inner = collective.torch.ErrorFeedback(args.codec), collective.torch.ef_hook
    else:
        state, inner = None, default_hooks.allreduce_hook  # DDP's own: sum of grads / N
    model.register_comm_hook(state, clock.hook(inner))
    return model


def activation_bytes(model, x):
    """Bytes of every layer's output for one batch: what backward keeps."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.numel() * o.element_size()))
             for m in model.modules() if not list(m.children())]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return sum(seen)


def wire_tx():
    """Bytes this rank has put on the wire (backend collective), else None."""
    pg = dist.distributed_c10d._get_default_group()
    return pg.comm.stats()["wire_tx"] if hasattr(pg, "comm") else None


def epoch(args, e, model, opt, clock, data, rank, size):
    """One epoch (at most --steps steps): steps, loss sum, right answers, seconds, and
    the bytes each step put on the wire."""
    xs, ys = data
    order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(e))
    per_rank = args.batch // size
    steps = len(xs) // args.batch
    steps = min(steps, args.steps) if args.steps else steps
    t0, loss_sum, right, sent = time.time(), 0.0, 0, None
    for s in range(steps):
        idx = order[s * args.batch + rank * per_rank:s * args.batch + (rank + 1) * per_rank]
        clock.restart()  # the last step's spans are kept
        start = time.perf_counter()
        out = model(xs[idx])
        loss = F.cross_entropy(out, ys[idx])
        clock.span("forward", start)
        opt.zero_grad()
        start = time.perf_counter()
        loss.backward()
        clock.span("backward", start)
        start = time.perf_counter()
        opt.step()
        clock.span("optimizer", start)
        loss_sum += loss.item()
        right += (out.argmax(1) == ys[idx]).sum().item()
        if s == 0:  # DDP's first step also rebuilds its buckets: bytes count from here
            sent = wire_tx()
    took = time.time() - t0
    per_step = (wire_tx() - sent) / (steps - 1) if sent is not None and steps > 1 else None
    return steps, loss_sum, right, took, per_step


def report(args, model, opt, clock, x, rank, size, epochs, accuracy, per_step):
    """The --json record (rank 0 writes it) and the --trace timeline of the last step."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    optim = sum(t.numel() * t.element_size() for st in opt.state.values()
                for t in st.values() if torch.is_tensor(t))
    me = {"rank": rank, "comm_s": clock.comm_s,
          "memory": {"params": params, "grads": params, "optimizer": optim,
                     "activations": activation_bytes(model.module, x), "gathered": 0}}
    if per_step is not None:
        me["sent_bytes_per_step"] = per_step
        if args.codec == "none":  # ring all-reduce of every gradient, float32
            me["formula_bytes_per_step"] = 2 * params * (size - 1) / size
    ranks, timelines = [None] * size, [None] * size
    dist.all_gather_object(ranks, me)
    dist.all_gather_object(timelines, clock.spans)
    if rank != 0:
        return
    epochs[-1]["ranks"] = ranks
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"strategy": "torch-ddp", "backend": args.backend, "codec": args.codec,
                       "epochs": epochs, "test_accuracy": accuracy}, f)
    if args.trace:
        events = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": r,
                   "args": {"name": f"rank {r}"}} for r in range(size)]
        t0 = min(start for spans in timelines for _, start, _ in spans)
        events += [{"ph": "X", "name": name, "pid": 0, "tid": r, "ts": (start - t0) * 1e6,
                    "dur": (end - start) * 1e6} for r, spans in enumerate(timelines)
                   for name, start, end in spans]
        with open(args.trace, "w") as f:
            json.dump({"traceEvents": events}, f)


def sweep(args, rank, size):
    """The scaling lab's measurements on this process group (torch_lab.py)."""
    if args.backend == "collective":
        import collective.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=600))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    data = load("train", max(args.sweep) * size, args.data)
    torch_lab.sweep_rank(args, rank, size, data, MODELS[args.model], args.points)
    dist.destroy_process_group()


def train(args, rank, size):
    if args.backend == "collective":
        import collective.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    clock = torch_lab.Timeline()
    model = ddp_model(args, clock)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = load("train", args.limit, args.data)
    xt, yt = load("t10k", args.limit and args.limit // 6, args.data)
    epochs = []
    for e in range(args.epochs):
        if e == args.epochs - 1 and args.epochs > 1:  # a last, gentler epoch settles
            for group in opt.param_groups:
                group["lr"] = args.lr / 10
        steps, loss_sum, right, took, per_step = epoch(args, e, model, opt, clock, data, rank,
                                                       size)
        stats = torch.tensor([loss_sum / steps, right, steps * (args.batch // size)],
                             dtype=torch.float64)
        dist.all_reduce(stats)
        epochs.append({"epoch": e + 1, "loss": stats[0].item() / size,
                       "accuracy": (stats[1] / stats[2]).item(),
                       "samples_per_s": stats[2].item() / took})
        if rank == 0:
            print(f"epoch {e + 1}: loss {stats[0] / size:.4f} accuracy "
                  f"{stats[1] / stats[2]:.4f} samples/s {stats[2] / took:.0f}", flush=True)
    model.eval()
    with torch.no_grad():
        part = torch.arange(rank, len(xt), size)
        right = (model(xt[part]).argmax(1) == yt[part]).sum()
    counts = torch.tensor([right.item(), len(part)], dtype=torch.float64)
    dist.all_reduce(counts)
    accuracy = (counts[0] / counts[1]).item()
    if rank == 0:
        print(f"test_accuracy {accuracy:.4f}", flush=True)
    report(args, model, opt, clock, data[0][:args.batch // size], rank, size, epochs, accuracy,
           per_step)
    del model  # DDP with a comm hook freed after its Gloo group spins forever at exit
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="collective", choices=["collective", "gloo"])
    ap.add_argument("--codec", default="none", choices=["none", "fp16", "bf16", "int8"],
                    help="gradients on the wire (backend collective): error feedback keeps "
                         "what the codec loses for the next step")
    ap.add_argument("--np", default="", help="start this many local ranks (with --sweep: "
                    "a list, e.g. 1,2,4)")
    ap.add_argument("--model", default="cnn", choices=sorted(MODELS))
    ap.add_argument("--sweep", help="batch sizes per rank, e.g. 32,128,512: the scaling lab "
                    "(torch_lab.py) instead of training")
    ap.add_argument("--no-gloo", action="store_true",
                    help="--sweep: leave out the Gloo table measured beside ours")
    ap.add_argument("--coll-perf", default=os.path.join(HERE, "..", "build", "perf", "coll_perf"),
                    help="--sweep: coll_perf, for its busbw at the bucket size")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                    help="the directory of Fashion-MNIST's four .gz files")
    ap.add_argument("--batch", type=int, default=128, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--limit", type=int, default=0, help="use the first N training images")
    ap.add_argument("--steps", type=int, default=0, help="at most N steps an epoch")
    ap.add_argument("--json", help="write the run's report (compare_strategies.py reads it)")
    ap.add_argument("--trace", help="write a Chrome trace of each rank's last step")
    args = ap.parse_args()
    if args.codec != "none" and args.backend != "collective":
        ap.error("--codec needs --backend collective")
    if args.sweep:
        return run_sweep(args)
    if not args.np:
        train(args, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return 0
    return launch(train, args, int(args.np))


def launch(target, args, n):
    """target(args, rank, n) in n local processes meeting at a free local port."""
    import multiprocessing as mp
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    s.close()
    ps = [mp.get_context("fork").Process(target=target, args=(args, r, n)) for r in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return max(abs(p.exitcode) for p in ps)


def run_sweep(args):
    """Every rank count of --np (or torchrun's one), then the tables (rank 0, or here)."""
    import tempfile
    args.sweep = [int(b) for b in args.sweep.split(",")]
    fd, args.points = tempfile.mkstemp(prefix="torch_lab.", suffix=".jsonl")
    os.close(fd)
    try:
        if args.np:
            for n in (int(k) for k in args.np.split(",")):
                if launch(sweep, args, n):
                    return 1
        else:
            rank = int(os.environ["RANK"])
            sweep(args, rank, int(os.environ["WORLD_SIZE"]))
            if rank:
                return 0
        points = [json.loads(line) for line in open(args.points)]
    finally:
        os.unlink(args.points)
    points = torch_lab.tables(points, args.coll_perf)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "points": points}, f)
    return 0

if __name__ == "__main__":
    sys.exit(main())
