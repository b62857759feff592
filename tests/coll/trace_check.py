#!/usr/bin/env python3
"""Checks what test_trace's ranks wrote with COLL_TRACE (tests/coll/test_trace.c):
usage: trace_check.py MERGE_TOOL DIR RANKS ROUNDS SKEW_US FLOATS ALGO (ring or hier, the
all-reduce's: hier with ranks 0 and 1 on one host, 2 and 3 on the other). Says what is
wrong and exits 1, or exits 0."""

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict

merge_tool, d = sys.argv[1], sys.argv[2]
ranks, rounds, skew = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
floats, algo = int(sys.argv[6]), sys.argv[7]
size = 4 * floats  # the all-reduce's bytes
HEADER = 32  # bytes of header each message carries (wire/wire.h)
bad = []


def spans(events):
    return [e for e in events if e.get("ph") == "X"]


def ops(events):
    """The operations: collectives, sends and receives."""
    return [e for e in spans(events) if e["cat"] in ("collective", "p2p")]


def ns(x):
    """Microseconds as whole nanoseconds, as Perfetto's importer keeps them."""
    return round(x * 1000)


def expected(r):
    """The all-reduce's passes on rank r in order, each with its steps, and the peer it
    sends to and receives from in each, and the payload it sends (and receives)."""
    n = ranks
    if algo == "ring":
        steps = list(range(n - 1))
        return ([("reduce-scatter", steps, (r + 1) % n, (r - 1) % n),
                 ("all-gather", steps, (r + 1) % n, (r - 1) % n)], 2 * (n - 1) * size // n)
    here, there = r ^ 1, r ^ 2  # two hosts of two ranks: a ring of 2 in each, and across
    return ([("host reduce-scatter", [0], here, here),
             ("across hosts reduce-scatter", [0], there, there),
             ("across hosts all-gather", [0], there, there),
             ("host all-gather", [0], here, here)], size // 2 + size // 4 + size // 4 + size // 2)


def check_children(r, op, kids, dump_peers):
    """The all-reduce op's children: nested in its span, its passes and their steps in
    order, transfers only to and from the algorithm's peers, adding up to its bytes, and
    the recorder's bytes by peer (in the trace's args and in the dump) agreeing."""
    a, where = op["args"], "rank %d allreduce #%d" % (r, op["args"]["seq"])
    lo, hi = ns(op["ts"]), ns(op["ts"]) + ns(op["dur"])
    for k in kids:
        if not lo <= ns(k["ts"]) <= ns(k["ts"]) + ns(k["dur"]) <= hi:
            return ["%s: child %s outside its span [%d, %d] ns" % (where, k, lo, hi)]
    phases = sorted((k for k in kids if k["cat"] == "phase"), key=lambda k: k["ts"])
    want, payload = expected(r)
    if [p["name"] for p in phases] != [w[0] for w in want]:
        return ["%s: passes %s, expected %s" % (where, [p["name"] for p in phases],
                                                [w[0] for w in want])]
    sent, got = Counter(), Counter()
    for p, (name, steps, to, frm) in zip(phases, want):
        mine = [k for k in kids if k is not p and k["args"]["phase"] == p["args"]["phase"]
                and k["args"]["scope"] == p["args"]["scope"]
                and p["ts"] <= k["ts"] <= p["ts"] + p["dur"]]
        st = sorted(k["args"]["step"] for k in mine if k["cat"] == "step")
        if st != steps:
            return ["%s %s: steps %s, expected %s" % (where, name, st, steps)]
        for k in mine:
            if k["cat"] != "transfer":
                continue
            ka = k["args"]
            peer, recv = ka["peer"], ka["direction"] == "recv"
            if peer != (frm if recv else to):
                return ["%s %s: a transfer %s rank %d; the algorithm's peer is %d"
                        % (where, name, "from" if recv else "to", peer, frm if recv else to)]
            (got if recv else sent)[peer] += ka["bytes"]
            (got if recv else sent)["payload"] += ka["bytes"] - HEADER * ka["messages"]
    if sent["payload"] != payload or got["payload"] != payload:
        return ["%s: transfers carried %d bytes out and %d in, expected %d each way"
                % (where, sent["payload"], got["payload"], payload)]
    peers = {p["rank"]: (p["tx"], p["rx"]) for p in a["peers"]}
    mine = {p: (sent[p], got[p]) for p in set(sent) | set(got) if p != "payload"}
    if peers != mine or a["others_tx"] or a["others_rx"]:
        return ["%s: the recorder's bytes by peer %s, the transfers' %s" % (where, peers, mine)]
    if sum(tx + rx for tx, rx in peers.values()) != a["bytes"]:
        return ["%s: bytes by peer %s do not add up to its %d" % (where, peers, a["bytes"])]
    if dump_peers is not None and dump_peers != a["peers"]:
        return ["%s: the dump says peers %s, the trace %s" % (where, dump_peers, a["peers"])]
    return []


for r in range(ranks):
    with open(os.path.join(d, "coll-trace-tracetest-%d.json" % r)) as f:
        t = json.load(f)
    with open(os.path.join(d, "recorder-%d.json" % r)) as f:
        dumped = {o["seq"]: o["peers"] for o in json.load(f)["ops"] if o["kind"] == "allreduce"}
    other, xs = t["otherData"], ops(t["traceEvents"])
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
        if e["name"] == "allreduce" and not (a["count"] == floats and a["dtype"] == "float"
                                             and a["op"] == "sum" and a["algorithm"] == algo
                                             and a["bytes"] > 4 * floats):
            bad.append("rank %d: allreduce args %s" % (r, a))
            break
        if e["name"] == p2p and not (a["peer"] == r ^ 1 and a["tag"] == 5):
            bad.append("rank %d: %s args %s" % (r, p2p, a))
            break
    seqs = sorted(e["args"]["seq"] for e in xs if e["cat"] == "collective")
    if not seqs or seqs != list(range(seqs[0], seqs[0] + 2 * rounds)):
        bad.append("rank %d: collective numbers %s" % (r, seqs))
    kids = defaultdict(list)
    for k in spans(t["traceEvents"]):
        if k["cat"] in ("phase", "step", "transfer"):
            kids[k["args"]["seq"]].append(k)
    checked = 0
    for e in xs:
        if e["name"] == "allreduce" and not bad:
            bad += check_children(r, e, kids[e["args"]["seq"]], dumped.get(e["args"]["seq"]))
            checked += 1
    if checked != rounds and not bad:
        bad.append("rank %d: %d all-reduces' children checked of %d" % (r, checked, rounds))
    # its clock was set off by r * skew: the offset measured at init takes it back
    if abs(other["clock_offset_us"] + r * skew) > 2000:
        bad.append("rank %d: clock offset %.1f us, its clock is off by %.1f us"
                   % (r, other["clock_offset_us"], r * skew))
    with open(os.path.join(d, "measured-%d.txt" % r)) as f:
        measured = float(f.read())
    total = sum(e["dur"] for e in xs)
    # The spans lie inside the calls, so they never add up to more; and they are most of
    # them. How close they come (the 5%, printed below) is a measurement: on a
    # loaded machine a rank descheduled between entering a call and its operation
    # starting loses 20 ms outside every span (seen at load 19), which fails no check.
    if total > 1.01 * measured + 100 or total < 0.5 * measured:
        bad.append("rank %d: spans add up to %.0f us, the calls took %.0f us" % (r, total, measured))
    print("rank %d: %d operations, %d children, spans %.0f us of %.0f us measured (%.1f%%), "
          "offset %.1f us" % (r, len(xs), other["children"], total, measured,
                              100 * (total - measured) / measured, other["clock_offset_us"]))

merged_path = os.path.join(d, "merged.json")
subprocess.run([sys.executable, merge_tool, d, "-o", merged_path], check=True)
with open(merged_path) as f:
    merged = json.load(f)
# The trace-event fields Perfetto's JSON importer reads.
num = (int, float)
for e in merged["traceEvents"]:
    ok = (isinstance(e.get("name"), str) and e.get("ph") in ("X", "M")
          and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int)
          and isinstance(e.get("args"), dict))
    if ok and e["ph"] == "X":
        ok = (isinstance(e.get("ts"), num) and isinstance(e.get("dur"), num)
              and e["ts"] >= 0 <= e["dur"] and isinstance(e.get("cat"), str))
    if not ok:
        bad.append("merged: not a trace event: %s" % e)
        break
# Complete events on one track must nest (Perfetto drops a slice that ends after the one
# it began in): each either inside the one open before it, or after it ended.
tracks = defaultdict(list)
for e in spans(merged["traceEvents"]):
    tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), -ns(e["dur"]), e["name"]))
for (pid, tid), es in sorted(tracks.items()):
    open_ = []
    for ts, mdur, name in sorted(es):
        while open_ and open_[-1][0] <= ts:
            open_.pop()
        if open_ and ts - mdur > open_[-1][0]:
            bad.append("merged: rank %d track %d: %s [%d, %d] ns ends after %s it began in "
                       "(ends %d)" % (pid, tid, name, ts, ts - mdur, open_[-1][1], open_[-1][0]))
            break
        open_.append((ts - mdur, name))
named = {(e["pid"], e["tid"]) for e in merged["traceEvents"] if e.get("name") == "thread_name"}
if set(tracks) - named:
    bad.append("merged: tracks without a name: %s" % sorted(set(tracks) - named))
xs = ops(merged["traceEvents"])
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
