#!/usr/bin/env python3
"""coll_analyze: merges the flight recorder's per-rank files (COLL_RECORDER_DIR, or
coll_recorder_dump) and says where a job went wrong, as a sentence per finding:

    rank 3 never issued allreduce #88 (its last: allreduce #87, done)
    rank 1 issued broadcast #88 where the others issued allreduce #88
    rank 2 is in allreduce #12 but has moved no byte for 30 s (stopped?)
    rank 3 has been in recv from rank 2 #41 for 31 s

usage: coll_analyze [--stall SECONDS] [--json] FILE_OR_DIR...

Files of several communicators or jobs are told apart by their job and communicator
fields and analysed each on its own. Exit status: 0 when nothing differs, 1 when
something does, 2 when no file could be read. It never guesses: a rank without a file
is named as such, not judged."""

import argparse
import glob
import json
import os
import sys
from collections import Counter


def load(paths):
    """Every readable recorder file under paths, and complaints about the others."""
    files, bad = [], []
    for p in paths:
        names = sorted(glob.glob(os.path.join(p, "coll-recorder-*.json"))) if os.path.isdir(p) else [p]
        for name in names:
            try:
                with open(name) as f:
                    d = json.load(f)
                if not all(k in d for k in ("rank", "size", "ops", "issued", "now_us")):
                    raise ValueError("not a flight recorder file")
                d["_file"] = name
                files.append(d)
            except (OSError, ValueError) as e:
                bad.append("%s: %s" % (name, e))
    return files, bad


P2P = ("send", "recv")


def collectives(d):
    """A rank's records of collectives (its sends and receives aside)."""
    return [o for o in d["ops"] if o["kind"] not in P2P]


def shape(op):
    """What every rank must agree on for one collective."""
    return (op["kind"], op["count"], op["dtype"], op["op"], op["root"])


def describe(op):
    if op["kind"] in P2P:
        return "%s %s rank %d #%d" % (op["kind"], "to" if op["kind"] == "send" else "from",
                                      op["root"], op["seq"])
    return "%s #%d" % (op["kind"], op["seq"])


def differs(a, b):
    """Which of the agreed fields of b differ from a, in words."""
    names = ("kind", "count", "dtype", "op", "root")
    return ", ".join("%s %s" % (n, b[n]) for n in names if a[n] != b[n])


def mismatches(ranks):
    """The first sequence number at which some rank's collective differs from the
    majority's: one sentence per rank that differs."""
    by_seq = {}
    for r, d in ranks.items():
        for op in collectives(d):
            by_seq.setdefault(op["seq"], {})[r] = op
    for seq in sorted(by_seq):
        ops = by_seq[seq]
        if len(ops) < 2:
            continue
        common, _ = Counter(shape(o) for o in ops.values()).most_common(1)[0]
        odd = [r for r in sorted(ops) if shape(ops[r]) != common]
        if odd:
            model = next(o for o in ops.values() if shape(o) == common)
            out = []
            for r in odd:
                o = ops[r]
                if o["kind"] != model["kind"]:
                    out.append("rank %d issued %s where the others issued %s"
                               % (r, describe(o), describe(model)))
                else:
                    out.append("rank %d issued %s with %s where the others have %s"
                               % (r, describe(o), differs(model, o), differs(o, model)))
            return out
    return []


def last_op(d):
    """Its last record of any kind: the files list them in issue order."""
    return d["ops"][-1] if d["ops"] else None


def laggards(ranks):
    """Ranks that never issued a collective the others did."""
    head = max(d["issued"] for d in ranks.values())
    if head == 0:
        return []
    model = None
    for d in ranks.values():
        model = next((o for o in collectives(d) if o["seq"] == head), model)
    out = []
    for r in sorted(ranks):
        d = ranks[r]
        if d["issued"] >= head:
            continue
        last = last_op(d)
        its = "it issued none"
        if last:
            its = "its last: %s, %s" % (describe(last), last["state"])
            if last["state"] == "running":
                its += " for %.0f s" % ((d["now_us"] - last["issued_us"]) / 1e6)
        what = describe(model) if model else "#%d" % head
        out.append("rank %d never issued %s (%s)" % (r, what, its))
    return out


def stalls(ranks, stall_s):
    """Collectives running (or failed) with no byte moved for stall_s or more."""
    out = []
    for r in sorted(ranks):
        d = ranks[r]
        for op in d["ops"]:
            if op["state"] == "running" and op["kind"] in P2P:
                quiet = (d["now_us"] - op["issued_us"]) / 1e6
                if quiet >= stall_s:
                    out.append("rank %d has been in %s for %.0f s" % (r, describe(op), quiet))
            elif op["state"] == "running" and op["progress_us"]:
                quiet = (d["now_us"] - op["progress_us"]) / 1e6
                if quiet >= stall_s:
                    out.append("rank %d is in %s but has moved no byte for %.0f s (stopped?)"
                               % (r, describe(op), quiet))
            elif op["state"] == "queued" and d["now_us"] - op["issued_us"] >= stall_s * 1e6:
                out.append("rank %d has %s queued for %.0f s behind an unfinished collective"
                           % (r, describe(op), (d["now_us"] - op["issued_us"]) / 1e6))
    return out


def failures(ranks):
    """The first failed collective of each rank that recorded one, with its error."""
    out = []
    for r in sorted(ranks):
        d = ranks[r]
        op = next((o for o in d["ops"] if o["state"] == "failed"), None)
        if op:
            quiet = ""
            if op["progress_us"] and op["ended_us"] - op["progress_us"] >= 1e6:
                quiet = " after %.0f s without a byte" % ((op["ended_us"] - op["progress_us"]) / 1e6)
            err = d.get("error") or op["status"]
            out.append("rank %d failed %s%s: %s" % (r, describe(op), quiet, err))
    return out


def analyse(group, stall_s):
    """Findings for one communicator's files (rank -> file), most telling first."""
    size = max(d["size"] for d in group.values())
    missing = [r for r in range(size) if r not in group]
    found = mismatches(group) + laggards(group) + stalls(group, stall_s)
    notes = failures(group)
    if missing:
        notes.append("no file from rank%s %s" % ("s" if len(missing) > 1 else "",
                                                 ", ".join(map(str, missing))))
    return found, notes


def main(argv):
    ap = argparse.ArgumentParser(prog="coll_analyze", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    ap.add_argument("--stall", type=float, default=10.0,
                    help="seconds without a byte that make a running collective stuck (10)")
    ap.add_argument("--json", action="store_true", help="findings as JSON")
    a = ap.parse_args(argv)
    files, bad = load(a.paths)
    for b in bad:
        print("coll_analyze: skipped %s" % b, file=sys.stderr)
    if not files:
        print("coll_analyze: no flight recorder file read", file=sys.stderr)
        return 2
    groups = {}
    for d in files:
        groups.setdefault((d.get("job", ""), d.get("comm", "")), {})[d["rank"]] = d
    report, any_found = [], False
    for (job, comm), group in sorted(groups.items()):
        found, notes = analyse(group, a.stall)
        any_found |= bool(found)
        head = max(d["issued"] for d in group.values())
        report.append({"job": job, "comm": comm, "ranks": sorted(group), "issued": head,
                       "findings": found, "notes": notes})
    if a.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        for g in report:
            print("job %s, communicator %s: %d rank file%s, up to #%d"
                  % (g["job"], g["comm"], len(g["ranks"]), "" if len(g["ranks"]) == 1 else "s",
                     g["issued"]))
            for line in g["findings"] or ["every rank issued the same collectives; none is stuck"]:
                print("  " + line)
            for line in g["notes"]:
                print("  (" + line + ")")
    return 1 if any_found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
