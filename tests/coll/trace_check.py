#!/usr/bin/env python3
"""Checks what test_trace's ranks wrote with COLL_TRACE (tests/coll/test_trace.c):
usage: trace_check.py MERGE_TOOL DIR RANKS ROUNDS SKEW_US. Says what is wrong and exits
1, or exits 0."""

import json
import os
import subprocess
import sys
from collections import Counter

merge_tool, d = sys.argv[1], sys.argv[2]
ranks, rounds, skew = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
bad = []


def spans(events):
    return [e for e in events if e.get("ph") == "X"]


for r in range(ranks):
    with open(os.path.join(d, "coll-trace-tracetest-%d.json" % r)) as f:
        t = json.load(f)
    other, xs = t["otherData"], spans(t["traceEvents"])
    p2p = "send" if r % 2 == 0 else "recv"
    want = Counter({"allreduce": rounds, "broadcast": rounds, p2p: rounds})
    got = Counter(e["name"] for e in xs)
    if got != want:
        bad.append("rank %d: events %s, expected %s" % (r, dict(got), dict(want)))
    for e in xs:
        if not (e["pid"] == r and e["tid"] == 0 and e["dur"] >= 0 and e["args"]["status"] == "ok"):
            bad.append("rank %d: event %s" % (r, e))
            break
        a = e["args"]
        if e["name"] == "allreduce" and not (a["count"] == 1 << 18 and a["dtype"] == "float"
                                             and a["op"] == "sum" and a["algorithm"]
                                             and a["bytes"] > 4 << 18):
            bad.append("rank %d: allreduce args %s" % (r, a))
            break
        if e["name"] == p2p and not (a["peer"] == r ^ 1 and a["tag"] == 5):
            bad.append("rank %d: %s args %s" % (r, p2p, a))
            break
    seqs = sorted(e["args"]["seq"] for e in xs if e["cat"] == "collective")
    if not seqs or seqs != list(range(seqs[0], seqs[0] + 2 * rounds)):
        bad.append("rank %d: collective numbers %s" % (r, seqs))
    # its clock was set off by r * skew: the offset measured at init takes it back
    if abs(other["clock_offset_us"] + r * skew) > 2000:
        bad.append("rank %d: clock offset %.1f us, its clock is off by %.1f us"
                   % (r, other["clock_offset_us"], r * skew))
    with open(os.path.join(d, "measured-%d.txt" % r)) as f:
        measured = float(f.read())
    total = sum(e["dur"] for e in xs)
    if abs(total - measured) > 0.05 * measured:
        bad.append("rank %d: spans add up to %.0f us, the calls took %.0f us" % (r, total, measured))
    print("rank %d: %d events, spans %.0f us of %.0f us measured (%.1f%%), offset %.1f us"
          % (r, len(xs), total, measured, 100 * (total - measured) / measured,
             other["clock_offset_us"]))

merged_path = os.path.join(d, "merged.json")
subprocess.run([sys.executable, merge_tool, d, "-o", merged_path], check=True)
with open(merged_path) as f:
    merged = json.load(f)
# The trace-event format's fields, as Perfetto's JSON importer reads them.
num = (int, float)
for e in merged["traceEvents"]:
    ok = (isinstance(e.get("name"), str) and e.get("ph") in ("X", "M")
          and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int)
          and isinstance(e.get("args"), dict))
    if ok and e["ph"] == "X":
        ok = isinstance(e.get("ts"), num) and isinstance(e.get("dur"), num) and e["ts"] >= 0 <= e["dur"]
    if not ok:
        bad.append("merged: not a trace event: %s" % e)
        break
xs = spans(merged["traceEvents"])
if len(xs) != ranks * 3 * rounds or sorted({e["pid"] for e in xs}) != list(range(ranks)):
    bad.append("merged: %d events of pids %s" % (len(xs), sorted({e["pid"] for e in xs})))
# One all-reduce's spans intersect across the ranks: none ends before every rank began
# (a broadcast's root may finish before the others begin).
by_op = {}
for e in xs:
    if e["name"] == "allreduce":
        by_op.setdefault((e["name"], e["args"]["seq"]), []).append(e)
for (name, seq), es in sorted(by_op.items()):
    first_end = min(e["ts"] + e["dur"] for e in es)
    last_start = max(e["ts"] for e in es)
    if len(es) != ranks or last_start > first_end:
        bad.append("merged %s #%d: %d ranks, the last began %.1f us after the first ended"
                   % (name, seq, len(es), last_start - first_end))
for b in bad:
    print("trace_check: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
