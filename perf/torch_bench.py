#!/usr/bin/python3
"""torch.distributed all_reduce (float32) with backend "collective" against "gloo" in the
same processes, interleaved rounds, median time per call; and the same sizes through the
plain Python API (collective.Communicator) to show the layers' cost.

    /usr/bin/python3 perf/torch_bench.py --np 2 [--sizes 8,65536,1048576,16777216]
(PYTHONPATH=python COLL_LIBRARY=build/libcollective.so.0 from a build tree.)"""
import argparse
import datetime
import multiprocessing as mp
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist

import collective
import collective.torch  # noqa: F401


def timed(fn, iters):
    fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def rank_main(r, n, where, sizes, rounds, out):
    dist.init_process_group("collective", init_method="file://" + where + "/s", rank=r,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    plain = collective.Communicator("file://" + where + "/plain", r, n)
    res = {}
    for size in sizes:
        count = max(size // 4, 1)
        t = torch.ones(count)
        a = np.ones(count, np.float32)
        iters = max(10, min(2000, (64 << 20) // max(size, 1) // 4))
        runs = {"collective": [], "gloo": [], "python": []}
        for _ in range(rounds):
            dist.barrier()
            runs["collective"].append(timed(lambda: dist.all_reduce(t), iters))
            dist.barrier()
            runs["gloo"].append(timed(lambda: dist.all_reduce(t, group=gloo), iters))
            dist.barrier()
            runs["python"].append(timed(lambda: plain.allreduce(a), iters))
        res[size] = {k: statistics.median(v) for k, v in runs.items()}
    if r == 0:
        out.put(res)
    plain.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--sizes", default="8,65536,1048576,16777216")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    where = tempfile.mkdtemp(prefix="coll_tb.")
    q = mp.get_context("fork").Queue()
    ps = [mp.get_context("fork").Process(target=rank_main,
                                         args=(r, a.np, where, sizes, a.rounds, q))
          for r in range(a.np)]
    for p in ps:
        p.start()
    res = q.get()
    for p in ps:
        p.join()
    print(f"# all_reduce float32, {a.np} ranks, median of {a.rounds} interleaved rounds (us/call)")
    print(f"{'bytes':>10} {'collective':>11} {'gloo':>11} {'gloo/coll':>10} {'python API':>11}")
    for size in sizes:
        c, g, p = res[size]["collective"], res[size]["gloo"], res[size]["python"]
        print(f"{size:>10} {c:>11.1f} {g:>11.1f} {g / c:>9.1f}x {p:>11.1f}")


if __name__ == "__main__":
    main()
