#!/usr/bin/env python3
"""Old library against new, the same coll_perf binary: coll_perf finds libcollective.so.0
through its RUNPATH ($ORIGIN/..), which LD_LIBRARY_PATH overrides, so each run loads the
library of the folder it is given and nothing else differs.

    perf/old_new.py OLD_LIBDIR NEW_LIBDIR [--coll-perf build/perf/coll_perf] [--rounds 5]
                    [--np 2,4] [--transports tcp,shm] [--colls all_reduce,sendrecv]

Every round runs every (transport, ranks, collective, size band) once with each library,
the library that goes first turning each round, so a noisy machine hurts both alike. Prints
the median out-of-place time per call (us) of each over the rounds and new/old (below 1:
new is faster). Sizes 8 B-64 MiB in three bands (8 B-32 KiB x8 with 500 calls,
256 KiB-2 MiB x8 with 50, 16-64 MiB x4 with 10); results are checked (#wrong 0)."""
import argparse
import collections
import os
import statistics
import subprocess
import sys

BANDS = [("8", "32K", "8", "500", "20"), ("256K", "2M", "8", "50", "5"),
         ("16M", "64M", "4", "10", "1")]


def run(coll_perf, libdir, transport, n, coll, band):
    lo, hi, f, iters, warm = band
    env = dict(os.environ, LD_LIBRARY_PATH=libdir, COLL_TRANSPORT=transport)
    out = subprocess.run([coll_perf, "--np", str(n), "-C", coll, "-b", lo, "-e", hi, "-f", f,
                          "-n", iters, "-w", warm, "-I", "0"], env=env, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    rows = {}
    for line in out.splitlines():
        col = line.split()
        if not col or line.startswith("#") or not col[0].isdigit():
            continue
        if col[8] not in ("0", "N/A"):
            sys.exit(f"old_new: {libdir} {transport} {n} ranks {coll} {col[0]} B: "
                     f"#wrong {col[8]}")
        rows[int(col[0])] = float(col[5])
    if not rows:
        sys.exit(f"old_new: coll_perf printed no rows ({libdir}, {transport}):\n{out}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--coll-perf", default="build/perf/coll_perf")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--colls", default="all_reduce,sendrecv")
    a = ap.parse_args()
    libs = [("old", os.path.abspath(a.old)), ("new", os.path.abspath(a.new))]
    times = collections.defaultdict(list)  # (transport, n, coll, size, lib) -> [us]
    cases = [(t, int(n), c) for t in a.transports.split(",") for n in a.np.split(",")
             for c in a.colls.split(",")]
    for k in range(a.rounds):
        for t, n, c in cases:
            for band in BANDS:
                for name, libdir in libs[k % 2:] + libs[:k % 2]:
                    for size, us in run(a.coll_perf, libdir, t, n, c, band).items():
                        times[(t, n, c, size, name)].append(us)
        print(f"# round {k + 1}/{a.rounds} done", file=sys.stderr)
    print(f"# median out-of-place us per call over {a.rounds} interleaved rounds; "
          f"old {libs[0][1]}, new {libs[1][1]}")
    print(f"{'transport':<9} {'ranks':>5} {'coll':<10} {'size':>10} {'old us':>10} "
          f"{'new us':>10} {'new/old':>8}")
    for (t, n, c, size, name) in sorted(k for k in times if k[4] == "old"):
        old = statistics.median(times[(t, n, c, size, "old")])
        new = statistics.median(times[(t, n, c, size, "new")])
        print(f"{t:<9} {n:>5} {c:<10} {size:>10} {old:>10.1f} {new:>10.1f} {new / old:>8.2f}")


if __name__ == "__main__":
    main()
