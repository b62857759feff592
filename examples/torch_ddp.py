#!/usr/bin/python3
"""A small CNN on Fashion-MNIST, data parallel with torch's DistributedDataParallel over
the "collective" backend (or Gloo, to compare). Reads Debian's dataset-fashion-mnist
(no downloads). Launch with torchrun --nproc_per_node N, with RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT per rank, or with --np N (local processes):

    /usr/bin/python3 examples/torch_ddp.py --np 2 [--backend collective|gloo] [--epochs 4]
        [--codec int8]   # gradients averaged through int8 with error feedback (a DDP hook)

Per epoch: mean loss, training accuracy, samples/s (all ranks); then `test_accuracy A`.
"""
import argparse
import datetime
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def load(kind, limit):
    def read(name):
        with gzip.open(os.path.join(DATA, name), "rb") as f:
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


def train(args, rank, size):
    if args.backend == "collective":
        import collective.torch  # registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    model = nn.parallel.DistributedDataParallel(Net())
    if args.codec != "none":
        model.register_comm_hook(collective.torch.ErrorFeedback(args.codec),
                                 collective.torch.ef_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    xs, ys = load("train", args.limit)
    xt, yt = load("t10k", args.limit and args.limit // 6)
    per_rank = args.batch // size
    for epoch in range(args.epochs):
        if epoch == args.epochs - 1 and args.epochs > 1:  # a last, gentler epoch settles
            for group in opt.param_groups:
                group["lr"] = args.lr / 10
        order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(epoch))
        steps = len(xs) // args.batch
        t0, loss_sum, right = time.time(), 0.0, 0
        for s in range(steps):
            idx = order[s * args.batch + rank * per_rank:s * args.batch + (rank + 1) * per_rank]
            out = model(xs[idx])
            loss = F.cross_entropy(out, ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            right += (out.argmax(1) == ys[idx]).sum().item()
        took = time.time() - t0
        stats = torch.tensor([loss_sum / steps, right, steps * per_rank], dtype=torch.float64)
        dist.all_reduce(stats)
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {stats[0] / size:.4f} accuracy "
                  f"{stats[1] / stats[2]:.4f} samples/s {stats[2] / took:.0f}", flush=True)
    model.eval()
    with torch.no_grad():
        part = torch.arange(rank, len(xt), size)
        right = (model(xt[part]).argmax(1) == yt[part]).sum()
    counts = torch.tensor([right.item(), len(part)], dtype=torch.float64)
    dist.all_reduce(counts)
    if rank == 0:
        print(f"test_accuracy {counts[0] / counts[1]:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="collective", choices=["collective", "gloo"])
    ap.add_argument("--codec", default="none", choices=["none", "fp16", "bf16", "int8"],
                    help="gradients on the wire (backend collective): error feedback keeps "
                         "what the codec loses for the next step")
    ap.add_argument("--np", type=int, default=0, help="start this many local ranks")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--limit", type=int, default=0, help="use the first N training images")
    args = ap.parse_args()
    if args.codec != "none" and args.backend != "collective":
        ap.error("--codec needs --backend collective")
    if not args.np:
        train(args, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return 0
    import multiprocessing as mp
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    s.close()
    ps = [mp.get_context("fork").Process(target=train, args=(args, r, args.np))
          for r in range(args.np)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return max(abs(p.exitcode) for p in ps)


if __name__ == "__main__":
    sys.exit(main())
