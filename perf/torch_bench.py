#!/usr/bin/python3
"""torch.distributed with backend "collective" against "gloo" in the same processes: the
two groups take turns (which one goes first alternates each round), and the table gives
each one's median time per call over the rounds, and Gloo's time over ours.

    /usr/bin/python3 perf/torch_bench.py --np 2 [--rounds 5] [--coll-perf build/perf/coll_perf]
(PYTHONPATH=python COLL_LIBRARY=build/libcollective.so.0 from a build tree.)

Rows: all_reduce (float32) at 64 KiB, 1 MiB and 16 MiB; reduce_scatter_tensor and
all_gather_into_tensor at 1, 4 and 16 MiB (bytes of the larger buffer, the reduce-scatter
input and the all-gather output, as coll_perf counts them). Where Gloo has no such call
(torch 1.13's Gloo has neither; torch 2.6's has both) its column times what a Gloo user
writes instead, named in the gloo-form column: an all_reduce of the whole input then
a copy of this rank's block, or all_gather into a list then torch.cat. --ops picks rows
(comma-separated), among them, on torch 2.x, fc.all_gather_tensor and
fc.reduce_scatter_tensor: the functional collectives (what DTensor and FSDP2 call; torch
reaches the backend's coalesced forms from C++), ended in wait_tensor. With --coll-perf,
each reduce_scatter_tensor and all_gather_into_tensor row also times coll_perf's
out-of-place reduce_scatter or all_gather of that size and rank count (rank 0 runs it
while the others wait), in turn with the torch calls: what the torch layer adds. With
--old FILE, an "old" column times the same calls on another version of
collective/torch.py (registered as "collective_old", see below), in turn with the rest.

With --coll-perf, the overhead rows: all_reduce at 8 B and 64 KiB through torch
(async_op=False), through the package's own API (collective.Communicator) and in C
(coll_perf, the same rank count, run by rank 0 between the others' rounds while every
rank waits), all in place as torch's all_reduce is (coll_perf's out-of-place time
beside), the three taking turns round by round; medians; and torch's cost per call over
C. --overhead-only: those rows alone.

With --cpp DIR (coll_ext built by perf/torch_ext/build.sh into DIR, torch 2.x), the binding
rows: dist.all_reduce (async_op=False) at 8 B, 64 KiB and 1 MiB through this package's
Python backend, through the C++ c10d::Backend prototype (its non-blocking form ended in
wait(), and its blocking form, COLL_EXT_BLOCKING), through Gloo, and through
collective.Communicator (blocking, and non-blocking then wait), interleaved round by
round (the order turns each round), medians; coll_perf's C time beside them with
--coll-perf. --old FILE adds a column for another version of collective/torch.py (an
older commit's), registered as backend "collective_old" in the same processes."""
import argparse
import datetime
import multiprocessing as mp
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist

import collective
import collective.torch  # noqa: F401

MiB = 1 << 20
SIZES = {"all_reduce": [64 << 10, MiB, 16 * MiB],
         "reduce_scatter_tensor": [MiB, 4 * MiB, 16 * MiB],
         "all_gather_into_tensor": [MiB, 4 * MiB, 16 * MiB]}
FC_ROWS = {"fc.all_gather_tensor": "all_gather_into_tensor",
           "fc.reduce_scatter_tensor": "reduce_scatter_tensor"}
C_NAMES = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
OVERHEAD_SIZES = [8, 64 << 10]
BINDING_SIZES = [8, 64 << 10, MiB]


def iters_for(size):
    """About 32 MiB of buffer per timed batch: long enough to swamp the clock, short
    enough that 5 rounds of every row take seconds. The same on every rank."""
    return max(4, min(1000, (32 * MiB) // size))


def timed(fn, iters):
    fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def gloo_has(call):
    """Whether Gloo runs call itself (it raises at once where it has no such operation)."""
    try:
        call()
        return True
    except (RuntimeError, NotImplementedError):
        return False


def calls(op, size, n, ours, gloo):
    """(ours, gloo, the form Gloo ran, native) for one row: zero-argument callables, and
    native(group), the row's call on another group."""
    count = max(size // 4, 1)
    if op == "all_reduce":
        t = torch.ones(count)
        native = lambda g: lambda: dist.all_reduce(t, group=g)  # noqa: E731
        return native(ours), native(gloo), "all_reduce", native
    big, small = torch.ones(count), torch.ones(count // n)
    if op in FC_ROWS:
        import torch.distributed._functional_collectives as fc
        if op == "fc.all_gather_tensor":
            native = lambda g: lambda: fc.wait_tensor(  # noqa: E731
                fc.all_gather_tensor(small, 0, g))
        else:
            native = lambda g: lambda: fc.wait_tensor(  # noqa: E731
                fc.reduce_scatter_tensor(big, "sum", 0, g))
        if gloo_has(native(gloo)):
            return native(ours), native(gloo), op, native
        _, instead, form, _ = calls(FC_ROWS[op], size, n, ours, gloo)  # Gloo's unfunctional
        return native(ours), instead, form, native
    if op == "reduce_scatter_tensor":
        native = lambda g: lambda: dist.reduce_scatter_tensor(small, big, group=g)  # noqa: E731
        r = dist.get_rank()

        def instead():
            work = big.clone()
            dist.all_reduce(work, group=gloo)
            small.copy_(work[r * small.numel():(r + 1) * small.numel()])
        form = "all_reduce+copy"
    else:
        native = lambda g: lambda: dist.all_gather_into_tensor(big, small, group=g)  # noqa: E731
        parts = [torch.empty_like(small) for _ in range(n)]

        def instead():
            dist.all_gather(parts, small, group=gloo)
            torch.cat(parts, out=big)
        form = "all_gather+cat"
    if gloo_has(native(gloo)):
        return native(ours), native(gloo), op, native
    return native(ours), instead, form, native


def cpp_groups(ext_dir):
    """Two groups of the C++ prototype: non-blocking (ended in wait()) and blocking."""
    sys.path.insert(0, ext_dir)
    import coll_ext
    dist.Backend.register_backend("collective_cpp", coll_ext.create, devices=["cpu"])
    nb = dist.new_group(backend="collective_cpp")
    os.environ["COLL_EXT_BLOCKING"] = "1"  # read when the group is made
    blocking = dist.new_group(backend="collective_cpp")
    del os.environ["COLL_EXT_BLOCKING"]
    return nb, blocking


def old_group(path):
    """A group of collective.torch as the file at path has it (another version),
    registered as backend "collective_old"."""
    import types
    src = open(path).read().replace('register_backend("collective"',
                                    'register_backend("collective_old"')
    mod = types.ModuleType("collective_old_torch")
    mod.__file__ = path
    exec(compile(src, path, "exec"), mod.__dict__)
    return dist.new_group(backend="collective_old")


def binding_rows(r, n, where, rounds, ours, gloo, ext_dir, old=None):
    """(size, {way: median us}) for each of BINDING_SIZES: every way of an all-reduce."""
    nb, blocking = cpp_groups(ext_dir)
    before = old_group(old) if old else None
    plain = collective.Communicator("file://" + where + "/binding", r, n)
    rows = []
    for size in BINDING_SIZES:
        count = max(size // 4, 1)
        t, a = torch.ones(count), np.ones(count, np.float32)
        ways = [("python", lambda: dist.all_reduce(t, group=ours)),
                ("cpp", lambda: dist.all_reduce(t, group=nb)),
                ("cpp-blocking", lambda: dist.all_reduce(t, group=blocking)),
                ("gloo", lambda: dist.all_reduce(t, group=gloo)),
                ("comm", lambda: plain.allreduce(a)),
                ("comm-nb", lambda: plain.allreduce(a, async_op=True).wait())]
        if before is not None:
            ways.insert(1, ("python-old", lambda: dist.all_reduce(t, group=before)))
        iters = iters_for(size)
        runs = {name: [] for name, _ in ways}
        for k in range(rounds):
            turn = ways[k % len(ways):] + ways[:k % len(ways)]
            for name, fn in turn if k % 2 == 0 else turn[::-1]:
                dist.barrier(group=gloo)
                runs[name].append(timed(fn, iters))
        rows.append((size, {name: statistics.median(v) for name, v in runs.items()}))
    plain.close()
    return rows


def rank_main(r, n, where, rounds, overhead, out, ext_dir=None, only_binding=False, old=None,
              only_overhead=False, ops=tuple(SIZES), c_perf=None):
    """overhead: coll_perf's path for the overhead rows (None: none); c_perf: for the
    reduce_scatter_tensor and all_gather_into_tensor rows' C column."""
    dist.init_process_group("collective", init_method="file://" + where + "/s", rank=r,
                            world_size=n, timeout=datetime.timedelta(seconds=120))
    ours = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    binding = binding_rows(r, n, where, rounds, ours, gloo, ext_dir, old) if ext_dir else []
    rows = []
    if only_binding:
        leave(r, out, (rows, [], binding))
    before = old_group(old) if old and not ext_dir else None
    for op in ([] if only_overhead else ops):
        for size in SIZES[FC_ROWS.get(op, op)]:
            mine, theirs, form, native = calls(op, size, n, ours, gloo)
            iters = iters_for(size)
            ways = [("ours", mine), ("gloo", theirs)]
            if before is not None:
                ways.append(("old", native(before)))
            if c_perf and op in C_NAMES:
                ways.append(("C", lambda: r == 0 and runs["C"].append(
                    coll_perf_once(c_perf, n, size, C_NAMES[op])[1])))
            runs = {name: [] for name, _ in ways}
            for k in range(rounds):  # the order turns each round, and reverses every other
                turn = ways[k % len(ways):] + ways[:k % len(ways)]
                for name, fn in turn if k % 2 == 0 else turn[::-1]:
                    dist.barrier(group=gloo)
                    if name == "C":
                        fn()
                    else:
                        runs[name].append(timed(fn, iters))
            rows.append((op, size, form, *(statistics.median(runs[w]) if runs.get(w) else
                                           float("nan") for w in ("ours", "gloo", "old", "C"))))
    over = []
    if overhead:
        plain = collective.Communicator("file://" + where + "/plain", r, n)
        for size in OVERHEAD_SIZES:
            count = max(size // 4, 1)
            t, a = torch.ones(count), np.ones(count, np.float32)
            iters = iters_for(size)
            runs = {"torch": [], "python": [], "C": [], "C-out": []}

            def c_run():  # rank 0 runs coll_perf (its own n ranks) while the others wait
                if r == 0:
                    inp, outp = coll_perf_once(overhead, n, size)
                    runs["C"].append(inp)
                    runs["C-out"].append(outp)
            ways = [("torch", lambda: runs["torch"].append(
                        timed(lambda: dist.all_reduce(t, group=ours), iters))),
                    ("python", lambda: runs["python"].append(
                        timed(lambda: plain.allreduce(a), iters))),
                    ("C", c_run)]
            for k in range(rounds):  # the order turns each round
                for _, way in ways[k % 3:] + ways[:k % 3]:
                    dist.barrier(group=gloo)
                    way()
            over.append((size, *(statistics.median(runs[w]) if runs[w] else float("nan")
                                 for w in ("torch", "python", "C", "C-out"))))
        plain.close()
    leave(r, out, (rows, over, binding))


def leave(r, out, result):
    """Rank 0 hands in the tables; every rank then exits without tearing torch down. On
    torch 2.6 a rank stayed forever (1 run in 2 on 4 ranks) in ProcessGroupGloo's
    destructor, run when rank_main's frame freed the gloo group: it joins Gloo's worker
    thread holding the GIL while that thread frees a tensor and waits for the GIL."""
    if r == 0:
        out.put(result)
        out.close()
        out.join_thread()
    dist.barrier()
    os._exit(0)


def coll_perf_once(path, n, size, coll="all_reduce"):
    """coll_perf's time (us) for coll at size on n ranks, in place (as torch's all_reduce
    runs) and out of place: one run, as many calls as a torch round makes."""
    text = subprocess.run([path, "--np", str(n), "-C", coll, "-b", str(size),
                           "-e", str(size), "-n", str(iters_for(size)), "-w", "20", "-c", "0"],
                          check=True, capture_output=True, text=True).stdout
    for line in text.splitlines():
        f = line.split()
        if f and not line.startswith("#") and re.fullmatch(r"\d+", f[0]) and int(f[0]) == size:
            return float(f[9]), float(f[5])
    raise RuntimeError(f"coll_perf printed no row for {size} B:\n{text}")


def coll_perf_times(path, n, rounds, sizes=OVERHEAD_SIZES):
    """coll_perf's in-place all_reduce time (us) at each of sizes, the median of rounds
    runs (torch's all_reduce is in place)."""
    times = {s: [] for s in sizes}
    for _ in range(rounds):
        for s in sizes:
            times[s].append(coll_perf_once(path, n, s)[0])
    return {s: statistics.median(v) for s, v in times.items() if v}


def human(size):
    return f"{size >> 20} MiB" if size >= MiB else f"{size >> 10} KiB" if size >= 1024 \
        else f"{size} B"


def tables(q, ps):
    """Rank 0's tables; exits (status 1) when a rank died first, instead of waiting."""
    while True:
        try:
            return q.get(timeout=1)
        except queue.Empty:
            dead = [r for r, p in enumerate(ps) if p.exitcode not in (None, 0)]
            if dead:
                for p in ps:
                    p.kill()
                sys.exit(f"torch_bench: rank(s) {dead} failed (see above)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--coll-perf", help="coll_perf binary for the overhead rows")
    ap.add_argument("--overhead-only", action="store_true",
                    help="the overhead rows only (with --coll-perf)")
    ap.add_argument("--cpp", metavar="DIR", help="coll_ext's folder, for the binding rows")
    ap.add_argument("--binding-only", action="store_true",
                    help="the binding rows only (with --cpp)")
    ap.add_argument("--old", metavar="FILE", help="another collective/torch.py, for a "
                    "column of the binding rows (with --cpp) or else of the rows")
    ap.add_argument("--ops", default=",".join(SIZES),
                    help=f"rows, comma-separated, of {', '.join([*SIZES, *FC_ROWS])}")
    a = ap.parse_args()
    ops = a.ops.split(",")
    for op in ops:
        if op not in SIZES and op not in FC_ROWS:
            ap.error(f"--ops: no row {op}")
    where = tempfile.mkdtemp(prefix="coll_tb.")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=rank_main, args=(r, a.np, where, a.rounds,
                                              None if a.binding_only else a.coll_perf,
                                              q, a.cpp, a.binding_only, a.old,
                                              a.overhead_only, ops, a.coll_perf))
          for r in range(a.np)]
    for p in ps:
        p.start()
    rows, over, binding = tables(q, ps)
    for p in ps:
        p.join()
    print(f"# torch {torch.__version__}, {a.np} ranks, float32, median of {a.rounds} "
          "interleaved rounds (us/call)")
    if binding:
        print_binding(binding, a)
    if not rows and not over:
        return
    if rows:
        print(f"{'op':<24} {'size':>7} {'ranks':>5} {'ours us':>10} {'gloo us':>10} "
              f"{'gloo/ours':>9} {'old us':>10} {'old/ours':>8} {'C us':>9}  gloo-form")
    for op, size, form, c, g, o, cc in rows:
        print(f"{op:<24} {human(size):>7} {a.np:>5} {c:>10.1f} {g:>10.1f} {g / c:>8.2f}x "
              f"{o:>10.1f} {o / c:>7.2f}x {cc:>9.1f}  {form}")
    if over:
        print(f"# all_reduce overhead: torch (async_op=False, in place) and "
              f"collective.Communicator (in place) against coll_perf (C, in place; C-out: out "
              f"of place), {a.np} ranks, the three interleaved round by round, medians")
        print(f"{'size':>7} {'ranks':>5} {'torch us':>10} {'python us':>10} "
              f"{'C us':>10} {'C-out us':>10} {'torch-C us':>10} {'python-C us':>11}")
        for size, t, p, c, co in over:
            print(f"{human(size):>7} {a.np:>5} {t:>10.1f} {p:>10.1f} {c:>10.1f} {co:>10.1f} "
                  f"{t - c:>10.1f} {p - c:>11.1f}")


def print_binding(binding, a):
    cp = coll_perf_times(a.coll_perf, a.np, a.rounds, BINDING_SIZES) if a.coll_perf else {}
    names = list(binding[0][1])
    print(f"# all_reduce per call (us) by binding, async_op=False: python = this package's "
          f"backend (python-old: --old), cpp = the C++ prototype (perf/torch_ext), comm = "
          f"collective.Communicator (-nb: non-blocking then wait), C = coll_perf")
    print(f"{'size':>7} {'ranks':>5} " + " ".join(f"{x:>12}" for x in names) + f" {'C':>8}")
    for size, t in binding:
        print(f"{human(size):>7} {a.np:>5} " + " ".join(f"{t[x]:>12.1f}" for x in names)
              + f" {cp.get(size, float('nan')):>8.1f}")


if __name__ == "__main__":
    main()
