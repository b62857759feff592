#!/usr/bin/python3
"""The encoder labs on torch 2.x: a small BERT-style encoder written here (no downloads)
on a synthetic task, over the "collective" backend and Gloo side by side.

    python3 examples/encoder_lab.py pipeline [--stages 2,4] [--micro 4,8,16,32,64]
    python3 examples/encoder_lab.py fsdp [--np 2] [--batch 64,16]
    python3 examples/encoder_lab.py recompute [--stages 2,4] [--micro 8]
    (common: [--backends collective,gloo] [--steps 4] [--json FILE])

The model: token and position embeddings, 4 pre-LayerNorm encoder layers (4-head
self-attention, GELU MLP), mean pooling and a 2-way classifier; --dim 32 (the default)
makes 52 k parameters, --dim 128 0.8 M. The task, said plainly: sequences of 16 tokens drawn uniformly
from 32; the label is 1 when the sequence holds more tokens from 0-7 than from 8-15.

pipeline: torch.distributed.pipelining stages (2: embeddings + 2 layers | 2 layers + head;
4: one layer each, the embeddings on the first and the head on the last), ScheduleGPipe
and Schedule1F1B, global batch 64 in each micro-batch count; then the "slow stage" run,
the last stage's forward sleeping --slow-ms per micro-batch sample. fsdp: DDP against
FSDP1 (FULL_SHARD, device_id cpu), Adam, at each global batch. recompute: the pipeline's
stages with each encoder layer under torch.utils.checkpoint (reentrant) and without.

Per rank: samples/s of the whole job (the slowest rank's time), "saved", the peak bytes of
tensors autograd kept for backward at once (torch.autograd.graph.saved_tensors_hooks,
counted once per storage, parameters left out: the activations), and "maxrss", the
process's peak resident set (getrusage ru_maxrss: torch itself is most of it, and it never
goes down, so it is read after each run in fresh processes). fsdp also counts the bytes of
parameters, gradients and Adam state each rank holds against the formula. Last stage:
each run's first and last losses. Each run starts fresh processes (torch_ddp.py's
launch); rank 0 prints the tables."""
import argparse
import datetime
import json
import math
import os
import resource
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_ddp

VOCAB, SEQ, LAYERS, CLASSES = 32, 16, 4, 2


class Layer(nn.Module):
    """One pre-LayerNorm encoder layer (BERT's, with the norms first)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2))
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Part(nn.Module):
    """Layers [lo, hi) of the encoder, with the embeddings when lo == 0 and the head when
    hi == LAYERS; with recompute, each layer's forward runs again in its backward."""

    def __init__(self, full, lo, hi, recompute=False, slow_s=0.0):
        super().__init__()
        self.embed = full["embed"] if lo == 0 else None
        self.pos = full["pos"] if lo == 0 else None
        self.layers = nn.ModuleList(full["layers"][lo:hi])
        self.norm = full["norm"] if hi == LAYERS else None
        self.head = full["head"] if hi == LAYERS else None
        self.recompute, self.slow_s = recompute, slow_s

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x) + self.pos
        for layer in self.layers:
            x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=True) \
                if self.recompute else layer(x)
        if self.slow_s:
            time.sleep(self.slow_s * x.shape[0])
        return x if self.head is None else self.head(self.norm(x).mean(1))


def encoder(d, heads=4):
    """The whole model's parts, the same numbers on every rank (seed 0)."""
    torch.manual_seed(0)
    return {"embed": nn.Embedding(VOCAB, d), "pos": nn.Parameter(torch.randn(SEQ, d) * 0.02),
            "layers": [Layer(d, heads) for _ in range(LAYERS)], "norm": nn.LayerNorm(d),
            "head": nn.Linear(d, CLASSES)}


def params_of(full):
    return sum(p.numel() for p in Part(full, 0, LAYERS).parameters())


def batches(batch, steps):
    """The task: tokens uniform over VOCAB; label 1 when tokens 0-7 outnumber 8-15."""
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
        low, high = (x < 8).sum(1), ((x >= 8) & (x < 16)).sum(1)
        yield x, (low > high).long()


class SavedPeak:
    """The peak bytes of tensors autograd saved for backward at once: each storage once,
    the parameters' (which linear layers save) left out."""

    def __init__(self, model):
        self.skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live, self.now, self.peak = {}, 0, 0

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda held: held.tensor)

    def pack(self, t):
        key = t.untyped_storage().data_ptr()
        if key in self.skip:
            return _Held(t, None, None)
        count, size = self.live.get(key, (0, t.untyped_storage().nbytes()))
        self.live[key] = (count + 1, size)
        if count == 0:
            self.now += size
            self.peak = max(self.peak, self.now)
        return _Held(t, self, key)

    def release(self, key):
        count, size = self.live[key]
        if count > 1:
            self.live[key] = (count - 1, size)
        else:
            del self.live[key]
            self.now -= size


class _Held:
    def __init__(self, tensor, owner, key):
        self.tensor, self.owner, self.key = tensor, owner, key

    def __del__(self):
        if self.owner is not None:
            self.owner.release(self.key)


def bounds(stages):
    per = LAYERS // stages
    return [(k * per, (k + 1) * per) for k in range(stages)]


def start(args, rank, size):
    if args.backend == "collective":
        import collective.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=300))
    torch.set_num_threads(1)  # 2 shared cores: one thread a rank


def finish(args, rank, size, me):
    every = [None] * size
    dist.all_gather_object(every, me)
    if rank == 0:
        with open(args.points, "a") as f:
            f.write(json.dumps({"backend": args.backend, "ranks": size, **args.point,
                                "per_rank": every}) + "\n")
    # Leave without tearing down: about one run in 20 (Gloo's among them) had a rank stay
    # forever in destroy_process_group or at exit after its numbers were in, on torch 2.6.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def pipeline_rank(args, rank, size):
    """One pipeline run on this rank: warm-up, then --steps timed steps."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    start(args, rank, size)
    p = args.point
    lo, hi = bounds(size)[rank]
    slow = args.slow_ms / 1e3 if p.get("slow") and rank == size - 1 else 0.0
    part = Part(encoder(args.dim), lo, hi, p.get("recompute", False), slow)
    stage = PipelineStage(part, rank, size, torch.device("cpu"))
    kind = Schedule1F1B if p["schedule"] == "1f1b" else ScheduleGPipe
    # each micro-batch's mean over 1/M of the batch: the gradients add up to the batch's mean
    sched = kind(stage, p["micro"], loss_fn=lambda out, y: F.cross_entropy(out, y) / p["micro"])
    opt = torch.optim.SGD(part.parameters(), lr=args.lr)
    saved, losses, t0 = SavedPeak(part), [], 0.0
    for k, (x, y) in enumerate(batches(args.batch, args.warmup + args.steps)):
        if k == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        mine = []
        with saved.hooks():
            if rank == 0:
                sched.step(x)
            elif rank == size - 1:
                sched.step(target=y, losses=mine)
            else:
                sched.step()
        opt.step()
        if mine:
            losses.append(torch.stack(mine).sum().item())
    took = time.perf_counter() - t0
    finish(args, rank, size, {"s": took, "saved": saved.peak, "losses": losses,
                              "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def state_bytes(model, opt):
    """Bytes this rank holds: parameters, gradients, optimizer state (FSDP1's flat shards)."""
    ps = list(model.parameters())
    return {"params": sum(q.numel() * q.element_size() for q in ps),
            "grads": sum(q.grad.numel() * q.grad.element_size() for q in ps if q.grad is not None),
            "optimizer": sum(t.numel() * t.element_size() for s in opt.state.values()
                             for t in s.values() if torch.is_tensor(t) and t.dim() > 0)}


def fsdp_rank(args, rank, size):
    """DDP or FSDP1 on this rank, the global batch split over the ranks."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    start(args, rank, size)
    p = args.point
    net = Part(encoder(args.dim), 0, LAYERS)
    if p["strategy"] == "ddp":
        model = nn.parallel.DistributedDataParallel(net)
    else:
        model = FSDP(net, sharding_strategy=ShardingStrategy.FULL_SHARD,
                     device_id=torch.device("cpu"))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr / 10)
    saved, losses, t0, share = SavedPeak(model), [], 0.0, p["batch"] // size
    for k, (x, y) in enumerate(batches(p["batch"], args.warmup + args.steps)):
        if k == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        with saved.hooks():
            loss = F.cross_entropy(model(x[rank * share:(rank + 1) * share]),
                                   y[rank * share:(rank + 1) * share])
            loss.backward()
        opt.step()
        losses.append(loss.item())
    took = time.perf_counter() - t0
    me = {"s": took, "saved": saved.peak, "losses": losses, **state_bytes(model, opt),
          "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    del model, opt  # a DDP freed after its Gloo group spins forever at exit (torch_ddp.py)
    finish(args, rank, size, me)


def points(args):
    """(target, ranks, point) of every run of the lab, in order."""
    if args.lab == "fsdp":
        for batch in args.batch_list:
            for strategy in ("ddp", "fsdp"):
                yield fsdp_rank, args.np, {"strategy": strategy, "batch": batch}
        return
    for stages in args.stages:
        if args.lab == "recompute":
            for recompute in (False, True):
                for schedule in args.schedules:
                    yield pipeline_rank, stages, {"schedule": schedule, "micro": args.micro[0],
                                                  "recompute": recompute}
            continue
        for schedule in args.schedules:
            for micro in args.micro:
                yield pipeline_rank, stages, {"schedule": schedule, "micro": micro}
        for schedule in args.schedules:
            yield pipeline_rank, stages, {"schedule": schedule, "micro": args.micro_slow,
                                          "slow": True}


def mib(b):
    return f"{b / 2**20:.1f}"


def table(args, rows):
    """One line per run: the job's samples/s, per rank saved and maxrss (MiB), losses."""
    key = [k for k in ("strategy", "batch", "schedule", "micro", "slow", "recompute")
           if any(k in r for r in rows)]
    print(f"{'backend':<10} {'ranks':>5} " + " ".join(f"{k:>9}" for k in key) +
          f" {'samples/s':>9}  {'saved MiB per rank':<24} {'maxrss MiB per rank':<28} "
          f"{'loss first->last'}")
    for r in rows:
        per = r["per_rank"]
        took = max(q["s"] for q in per)
        batch = r.get("batch", args.batch)
        losses = next(q["losses"] for q in reversed(per) if q["losses"])
        print(f"{r['backend']:<10} {r['ranks']:>5} " +
              " ".join(f"{str(r.get(k, '-')):>9}" for k in key) +
              f" {batch * args.steps / took:>9.0f}  "
              f"{' '.join(mib(q['saved']) for q in per):<24} "
              f"{' '.join(mib(q['maxrss']) for q in per):<28} "
              f"{losses[0]:.4f}->{losses[-1]:.4f}", flush=True)


def formula(args, rows):
    """FSDP's saving: the bytes of params, grads and Adam state per rank against
    (P + G + 2P) / N and DDP's whole 4P."""
    full = 4 * params_of(encoder(args.dim))
    kib = lambda b: f"{b / 1024:.1f}"  # noqa: E731
    print(f"\n# state per rank (params + grads + Adam's two moments, KiB): measured, "
          f"formula; P = {full // 4} parameters x 4 B")
    for r in rows:
        n, me = r["ranks"], r["per_rank"][0]
        held = me["params"] + me["grads"] + me["optimizer"]
        want = 4 * full / (n if r["strategy"] == "fsdp" else 1)
        print(f"{r['backend']:<10} {r['strategy']:<5} batch {r['batch']:>3}: {kib(held)} "
              f"(params {kib(me['params'])}, grads {kib(me['grads'])}, optimizer "
              f"{kib(me['optimizer'])}); formula {kib(want)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lab", choices=["pipeline", "fsdp", "recompute"])
    ap.add_argument("--backends", default="collective,gloo")
    ap.add_argument("--stages", default="2,4")
    ap.add_argument("--micro", default="4,8,16,32,64")
    ap.add_argument("--micro-slow", type=int, default=8, help="micro-batches of the slow run")
    ap.add_argument("--slow-ms", type=float, default=0.5,
                    help="the slow stage's extra forward time per sample, ms")
    ap.add_argument("--np", type=int, default=2, help="fsdp: ranks")
    ap.add_argument("--batch", default="64", help="global batch (fsdp: a list)")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--schedules", default="gpipe,1f1b",
                    help="pipeline schedules (Gloo hangs in torch 2.6's 1F1B here: docs/examples.md)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=4, help="timed steps a run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", help="write every run's per-rank record")
    args = ap.parse_args()
    args.stages = [int(k) for k in args.stages.split(",")]
    args.schedules = args.schedules.split(",")
    args.micro = [int(k) for k in args.micro.split(",")]
    args.batch_list = [int(k) for k in args.batch.split(",")]
    args.batch = args.batch_list[0]
    if any(LAYERS % k for k in args.stages):
        ap.error(f"--stages must divide {LAYERS}")
    print(f"# {args.lab}: encoder of {params_of(encoder(args.dim))} parameters (dim "
          f"{args.dim}, {LAYERS} layers, {SEQ} tokens), global batch "
          f"{args.batch if args.lab != 'fsdp' else args.batch_list}, {args.steps} timed steps "
          f"after {args.warmup}; torch {torch.__version__}", flush=True)
    fd, args.points = tempfile.mkstemp(prefix="encoder_lab.", suffix=".jsonl")
    os.close(fd)
    failed = None
    try:
        for backend in args.backends.split(","):
            args.backend = backend
            for target, ranks, point in points(args):
                args.point = point
                if not failed and torch_ddp.launch(target, args, ranks):
                    failed = f"FAIL: {backend} {ranks} ranks {point}"
        rows = [json.loads(line) for line in open(args.points)]
    finally:
        os.unlink(args.points)
    if not failed:  # ours and Gloo side by side: both ran the same runs in the same order
        nb = len(args.backends.split(","))
        n = len(rows) // nb
        rows = [rows[b * n + i] for i in range(n) for b in range(nb)]
    table(args, rows)
    if args.lab == "fsdp":
        formula(args, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    if failed:  # the runs before it are printed above
        print(failed, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
