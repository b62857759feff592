#!/usr/bin/env python3
"""Side-by-side all-reduce comparison: libcollective's coll_perf against Gloo and MPI.

  compare.py --coll-perf PATH --bench-dir DIR [--coll allreduce|pingpong|alltoall] [--ranks 2,4]
             [--rounds 3] [--min 8] [--max 268435456] [--iters 20] [--out DIR]
  compare.py --from DIR/results.json [--out DIR]     (tables and plot of an earlier run)

--coll pingpong compares point-to-point latency instead (OSU-style: ranks 2k and 2k+1
bounce a message with blocking send and receive, time = half the round trip), ours
against the MPIs (Gloo has no such benchmark), every size's ratio by time. --coll
alltoall compares all-to-all (MPI_Alltoall; the size is a rank's whole buffer of n
blocks, busbw = algbw x (n-1)/n), ours against the MPIs.

Contenders: coll_perf over tcp and with its default transport (auto: shm between local
ranks); Gloo ring_chunked and halving_doubling (tcp); Open MPI forced to
tcp and with its default shared memory; MPICH on UCX forced to tcp and by default.
Every round runs every contender once per rank count over the same sizes (float sum,
out of place), one after another, so a noisy machine hurts all of them alike; sizes
below 64 KiB in a run with five times the iterations, sizes from 8 MiB on in another with
a tenth of the iterations and one warm-up call. A
contender that hangs past --timeout is left out from then on, at every rank count (its
rows from earlier runs stay). Each run checks its results (#wrong must be 0). Prints, per
rank count, the median over rounds of the time per call and busbw of each contender, and
ours/theirs ratios of busbw (of time for sizes under 64 KiB, where latency is what
matters) of our tcp against the best TCP peer and of our default against the best
shared-memory MPI (>= 1.0: we lead); writes busbw.png (gnuplot) and results.json
(rewritten after every run, so an interrupted run keeps what it measured) into --out.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


# Below LATENCY a call takes tens of microseconds, and the mean of --iters calls moved by
# whole context switches (13 us here): one run's 8-byte row could be 12 or 16 us for the
# same code. Those sizes run five times the iterations after 10 warm-up calls (a few
# milliseconds per size, but for Gloo and MPICH on 4 ranks). From LARGE on a contender
# runs a tenth of --iters (at least 2) after one warm-up call: the MPIs move 256 MiB at
# about 0.2 GB/s here, 1-2 s a call, and the large sizes, steady from call to call, took
# most of a round's time (a default run with 3 calls there took 15.4 minutes).
LATENCY = 64 << 10
LARGE = 8 << 20


def pieces(args):
    """(min, max, iterations, warm-up calls) per run of each contender: latency sizes,
    middle sizes, large sizes."""
    sizes, s = [], args.min
    while s <= args.max:
        sizes.append(s)
        s *= 2
    runs = [([x for x in sizes if x < LATENCY], args.iters * 5, 10),
            ([x for x in sizes if LATENCY <= x < LARGE], args.iters, 3),
            ([x for x in sizes if x >= LARGE], max(2, args.iters // 10), 1)]
    return [(got[0], got[-1], iters, warmup) for got, iters, warmup in runs if got]


def contenders(args, n, lo, hi, iters, warmup):
    """(name, command) for n ranks over sizes lo..hi, iters calls each after warmup."""
    sizes = ["-b", str(lo), "-e", str(hi), "-f", "2", "-n", str(iters), "-w", str(warmup)]
    ompi = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]
    gloo = [sys.executable, os.path.abspath(__file__), "--gloo-ranks", str(n),
            os.path.join(args.bench_dir, "gloo_bench")]
    gloo_sizes = [str(lo), str(hi), str(iters), str(warmup)]
    sizes = ["-C", args.coll, *sizes]
    ours = [args.coll_perf, "--np", str(n), "-I", "0", *sizes]  # out of place, as the others
    yield "libcollective-tcp", ["env", "COLL_TRANSPORT=tcp", *ours]
    yield "libcollective-auto", ours
    if args.coll == "allreduce":
        yield "gloo-ring-chunked", [*gloo, "ring_chunked", *gloo_sizes]
        yield "gloo-halving-doubling", [*gloo, "halving_doubling", *gloo_sizes]
    yield "ompi-tcp", [*ompi, "--mca", "btl", "tcp,self", os.path.join(args.bench_dir, "mpi_bench_ompi"), *sizes]
    yield "ompi-sm", [*ompi, os.path.join(args.bench_dir, "mpi_bench_ompi"), *sizes]
    mpich = ["mpirun.mpich", "-np", str(n)]
    bench = os.path.join(args.bench_dir, "mpi_bench_mpich")
    yield "mpich-ucx-tcp", [*mpich, "-genv", "UCX_TLS", "tcp,self", "-genv", "MPIR_CVAR_NOLOCAL",
                            "1", bench, *sizes]
    yield "mpich-default", [*mpich, bench, *sizes]


# Who is compared with whom: our tcp transport with the TCP peers, our default (auto:
# shared memory between local ranks) with the MPIs' default shared-memory paths.
TCP_PEERS = ("gloo-ring-chunked", "gloo-halving-doubling", "ompi-tcp", "mpich-ucx-tcp")
SHM_PEERS = ("ompi-sm", "mpich-default")


def parse(text):
    """size -> (time us, busbw GB/s, wrong) from coll_perf-style rows."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 9 and not line.startswith("#") and f[0].isdigit() and f[2] == "float":
            rows[int(f[0])] = (float(f[5]), float(f[7]), int(f[8]))
    return rows


def run_bounded(cmd, timeout):
    """The finished process, or None after killing its whole process group at timeout."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def run_one(args, n, name, cmd, results, stuck):
    """One run of one contender; its rows go into results."""
    t0 = time.monotonic()
    done = run_bounded(cmd, args.timeout)
    print(f"#   {name} n={n}: {time.monotonic() - t0:.0f} s", flush=True)
    if done is None:
        # Seen with MPICH here (its default path and UCX over tcp): a rank spinning for
        # good at some size. One stuck contender must not void everyone's round, nor
        # cost the timeout again in every later round.
        print(f"# {name} n={n}: no result within {args.timeout} s, left out from now on",
              flush=True)
        stuck.add(name)
        return
    rows = parse(done.stdout)
    if done.returncode != 0 or not rows:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    for size, (t, bw, wrong) in rows.items():
        if wrong:
            sys.exit(f"{name} n={n} size {size}: {wrong} wrong values")
        results.setdefault(name, {}).setdefault(size, []).append((t, bw))


def table(n, res, latency):
    """latency: every size's ratio by time (pingpong), not only those below 64 KiB."""
    names = list(res)
    print(f"\n## n = {n}: median time (us) | busbw (GB/s); ratio = ours/best peer "
          f"(busbw, or their time/our time {'at every size' if latency else 'below 64 KiB'})")
    print(f"{'size':>10} " + " ".join(f"{m:>24}" for m in names) +
          f" {'tcp vs best tcp':>16} {'auto vs best shm':>17}")
    for size in sorted(set().union(*res.values())):
        # A contender left out after a hang has no rows for the sizes it did not reach.
        med = {m: (statistics.median(t for t, _ in res[m][size]),
                   statistics.median(b for _, b in res[m][size])) for m in names if size in res[m]}
        cells = " ".join(f"{med[m][0]:>12.1f} | {med[m][1]:>7.3f}" if m in med else
                         f"{'-':>24}" for m in names)

        def lead(ours, peers):
            if ours not in med:
                return float("nan")
            o = med[ours]
            return min((med[m][0] / o[0] if size < 65536 or latency else
                        (o[1] / med[m][1] if med[m][1] else float("inf")) for m in peers if m in med),
                       default=float("nan"))
        print(f"{size:>10} {cells} {lead('libcollective-tcp', TCP_PEERS):>16.2f} "
              f"{lead('libcollective-auto', SHM_PEERS):>17.2f}")


def plot(out, results, coll):
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no plot")
        return
    script = [f"set terminal png size 1000,{420 * len(results)}", f"set output '{out}/busbw.png'",
              f"set multiplot layout {len(results)},1", "set logscale x 2", "set key left top",
              "set xlabel 'bytes'", "set format x '%.0b %BB'",
              "set ylabel 'busbw GB/s (median)'"]
    for n, res in results.items():
        plots = []
        for m in res:
            path = f"{out}/busbw_{n}_{m}.dat"
            with open(path, "w") as f:
                for size in sorted(res[m]):
                    f.write(f"{size} {statistics.median(b for _, b in res[m][size])}\n")
            plots.append(f"'{path}' using 1:2 with linespoints title '{m}'")
        what = {"allreduce": "all-reduce float sum", "pingpong": "ping-pong, one way",
                "alltoall": "all-to-all float"}[coll]
        script += [f"set title '{what}, {n} ranks, loopback'", "plot " + ", ".join(plots)]
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    print(f"\nplot: {out}/busbw.png")


def gloo_ranks(argv):
    """--gloo-ranks N BENCH ALGO MIN MAX ITERS WARMUP: N processes of gloo_bench sharing a
    fresh FileStore directory; rank 0's output on stdout."""
    n, bench, rest = int(argv[0]), argv[1], argv[2:]
    with tempfile.TemporaryDirectory() as store:
        procs = [subprocess.Popen([bench, str(r), str(n), store, *rest],
                                  stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                                  text=True) for r in range(n)]
        out = procs[0].communicate()[0]
        codes = [p.wait() for p in procs]
    sys.stdout.write(out)
    sys.exit(max(codes))


def measure(args):
    """Rounds of every contender over every piece of the sizes, per rank count."""
    results, stuck = {}, set()
    for r in range(args.rounds):
        for n in [int(x) for x in args.ranks.split(",")]:
            print(f"# round {r + 1}/{args.rounds}, {n} ranks", flush=True)
            for lo, hi, iters, warmup in pieces(args):
                for name, cmd in contenders(args, n, lo, hi, iters, warmup):
                    if name not in stuck:
                        run_one(args, n, name, cmd, results.setdefault(n, {}), stuck)
                        save(args.out, results)
    return results


def save(out, results):
    """results.json, replaced whole: a run stopped while writing keeps the previous one."""
    tmp = f"{out}/results.json.tmp"
    with open(tmp, "w") as f:
        json.dump({str(n): res for n, res in results.items()}, f)
    os.replace(tmp, f"{out}/results.json")


def load(path):
    with open(path) as f:
        raw = json.load(f)
    return {int(n): {m: {int(size): [tuple(x) for x in rows] for size, rows in sizes.items()}
                     for m, sizes in res.items()} for n, res in raw.items()}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--gloo-ranks":
        gloo_ranks(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--coll-perf")
    ap.add_argument("--bench-dir")
    ap.add_argument("--from", dest="prior", help="results.json of an earlier run: report it")
    ap.add_argument("--coll", choices=("allreduce", "pingpong", "alltoall"), default="allreduce",
                    help="what is timed; with --from, what the earlier run timed")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min", type=int, default=8)
    ap.add_argument("--max", type=int, default=256 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="compare_out")
    ap.add_argument("--timeout", type=int, default=60,
                    help="seconds per contender and round; a stuck one is left out from then on")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.prior:
        results = load(args.prior)
    elif not (args.coll_perf and args.bench_dir):
        ap.error("--coll-perf and --bench-dir are needed to run (or --from to report)")
    else:
        results = measure(args)
    for n in results:
        table(n, results[n], args.coll == "pingpong")
    plot(args.out, results, args.coll)


if __name__ == "__main__":
    main()
