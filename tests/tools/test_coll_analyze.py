#!/usr/bin/env python3
"""coll_analyze on crafted flight recorder files: each case writes the files a job of 4
ranks would have left, runs the tool, and checks its verdict and exit status.
usage: test_coll_analyze.py PATH/TO/coll_analyze.py"""

import json
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
NOW = 1_000_000_000


def op(seq, kind="allreduce", state="done", count=1024, root=-1, progress=None, ended=None):
    ended = ended if ended is not None else (NOW - 1000 if state in ("done", "failed") else 0)
    return {"seq": seq, "kind": kind, "count": count, "dtype": "float", "op": "sum", "root": root,
            "algo": "ring", "codec": "none", "state": state,
            "status": "ok" if state != "failed" else "a peer failed", "issued_us": NOW - 5000,
            "started_us": NOW - 4000, "ended_us": ended, "bytes": 4096,
            "progress_us": progress if progress is not None else ended}


def rank_file(rank, ops, size=4, error="", comm="00000000000000aa"):
    return {"version": 1, "job": "j", "comm": comm, "rank": rank, "size": size, "pid": 1,
            "host": "h", "reason": "test", "error": error,
            "issued": max((o["seq"] for o in ops), default=0), "kept": 64, "now_us": NOW,
            "wall_s": 1.0, "ops": ops}


def run(files, *extra):
    with tempfile.TemporaryDirectory() as d:
        for f in files:
            with open(os.path.join(d, "coll-recorder-j-%s-%d.json" % (f["comm"], f["rank"])),
                      "w") as out:
                json.dump(f, out)
        p = subprocess.run([sys.executable, TOOL, *extra, d], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


failed = 0


def expect(name, files, want, status, *extra):
    global failed
    rc, out = run(files, *extra)
    missing = [w for w in want if w not in out]
    if missing or rc != status:
        failed += 1
        print("FAIL %s: expected %r and exit %d, got exit %d:\n%s" % (name, missing, status, rc, out))
    else:
        print("ok   %s" % name)


done = [op(s) for s in range(85, 89)]
expect("agreeing ranks", [rank_file(r, done) for r in range(4)],
       ["every rank issued the same collectives; none is stuck", "up to #88"], 0)

expect("a rank that never issued",
       [rank_file(r, done if r != 3 else done[:-1]) for r in range(4)],
       ["rank 3 never issued allreduce #88 (its last: allreduce #87, done)"], 1)

recv = dict(op(41, kind="recv", root=2, state="running"), issued_us=NOW - 31_000_000)
expect("a rank waiting in a receive",
       [rank_file(r, done if r != 3 else done[:-1] + [recv]) for r in range(4)],
       ["rank 3 never issued allreduce #88 (its last: recv from rank 2 #41, running for 31 s)",
        "rank 3 has been in recv from rank 2 #41 for 31 s"], 1)

odd = done[:-1] + [op(88, kind="broadcast", root=0)]
expect("a rank that issued another collective",
       [rank_file(r, done if r != 1 else odd) for r in range(4)],
       ["rank 1 issued broadcast #88 where the others issued allreduce #88"], 1)

short = done[:-1] + [op(88, count=512)]
expect("a rank that issued another count",
       [rank_file(r, done if r != 2 else short) for r in range(4)],
       ["rank 2 issued allreduce #88 with count 512 where the others have count 1024"], 1)

stuck = [op(s) for s in range(1, 12)] + [op(12, state="running", progress=NOW - 30_000_000)]
moving = [op(s) for s in range(1, 12)] + [op(12, state="running", progress=NOW - 1000)]
expect("a rank that moved no byte",
       [rank_file(r, stuck if r == 2 else moving) for r in range(4)],
       ["rank 2 is in allreduce #12 but has moved no byte for 30 s (stopped?)"], 1)
expect("a shorter stall than asked for",
       [rank_file(r, stuck if r == 2 else moving) for r in range(4)],
       ["none is stuck"], 0, "--stall", "60")

failed_op = [op(s) for s in range(1, 5)] + [op(5, state="failed", progress=NOW - 31_000_000)]
expect("a failure and a missing file",
       [rank_file(r, failed_op, error="rank %d allreduce #5: peer 3 closed" % r) for r in range(3)],
       ["rank 0 failed allreduce #5 after 31 s without a byte: rank 0 allreduce #5: peer 3 closed",
        "no file from rank 3"], 0)

expect("two communicators apart",
       [rank_file(r, done, size=2) for r in range(2)] +
       [rank_file(r, done if r else done[:-1], size=2, comm="00000000000000bb") for r in range(2)],
       ["communicator 00000000000000aa", "communicator 00000000000000bb",
        "rank 0 never issued allreduce #88"], 1)

rc, out = run([rank_file(r, done if r != 3 else done[:-1]) for r in range(4)], "--json")
try:
    report = json.loads(out)
    assert rc == 1 and report[0]["findings"] == [
        "rank 3 never issued allreduce #88 (its last: allreduce #87, done)"], report
    assert report[0]["ranks"] == [0, 1, 2, 3] and report[0]["issued"] == 88, report
    print("ok   --json")
except (ValueError, AssertionError) as e:
    failed += 1
    print("FAIL --json: exit %d, %s:\n%s" % (rc, e, out))

rc, out = run([])
if rc != 2 or "no flight recorder file read" not in out:
    failed += 1
    print("FAIL no files: exit %d: %s" % (rc, out))
else:
    print("ok   no files")

sys.exit(1 if failed else 0)
