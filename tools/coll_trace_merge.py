#!/usr/bin/env python3
"""coll_trace_merge: merges the per-rank trace files a job wrote with COLL_TRACE=DIR
(DIR/coll-trace-<job>-<rank>.json, Chrome trace-event JSON) into one file that Perfetto
(ui.perfetto.dev) or chrome://tracing opens as one timeline: a process per rank, a
thread per communicator, a complete event per collective, send and receive, with a
collective's passes and steps inside it on its thread and its transfers on a thread per
peer and direction ("comm 0 to rank 2").

usage: coll_trace_merge [--job NAME] [-o OUT] DIR_OR_FILE...

The ranks' times are in rank 0's clock already (each rank measured its offset at init),
so merging is putting the events side by side; the merged file's times start at 0 (the
earliest event). Without -o it goes to stdout. With files of several jobs, --job picks
one (else the tool says which there are and stops). Exit status 0, or 2 when no file
could be read or the jobs are ambiguous."""

import argparse
import glob
import json
import os
import sys


def load(paths):
    """Every readable trace file under paths, and complaints about the others."""
    files, bad = [], []
    for p in paths:
        names = sorted(glob.glob(os.path.join(p, "coll-trace-*.json"))) if os.path.isdir(p) else [p]
        for name in names:
            try:
                with open(name) as f:
                    d = json.load(f)
                if not isinstance(d.get("traceEvents"), list) or "rank" not in d.get("otherData", {}):
                    raise ValueError("not a COLL_TRACE file")
                d["_file"] = name
                files.append(d)
            except (OSError, ValueError) as e:
                bad.append("%s: %s" % (name, e))
    return files, bad


def merge(files):
    """One trace of the files: their events, times from the earliest one."""
    events = [e for d in files for e in d["traceEvents"]]
    timed = [e["ts"] for e in events if "ts" in e]
    start = min(timed) if timed else 0
    for e in events:
        if "ts" in e:
            e["ts"] = round(e["ts"] - start, 3)
    ranks = sorted(d["otherData"]["rank"] for d in files)
    other = {"job": files[0]["otherData"].get("job", ""), "ranks": ranks,
             "start_us": start,
             "clock_offsets_us": {str(d["otherData"]["rank"]): d["otherData"].get("clock_offset_us")
                                  for d in files},
             "dropped": sum(d["otherData"].get("dropped", 0) for d in files)}
    size = max((d["otherData"].get("size", 0) for d in files), default=0)
    missing = sorted(set(range(size)) - set(ranks))
    if missing:
        other["missing_ranks"] = missing
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}, missing


def main(argv):
    ap = argparse.ArgumentParser(prog="coll_trace_merge", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="DIR_OR_FILE")
    ap.add_argument("--job", help="the job whose files to merge (when DIR holds several)")
    ap.add_argument("-o", "--output", help="the merged file (default: stdout)")
    a = ap.parse_args(argv)
    files, bad = load(a.paths)
    for b in bad:
        print("coll_trace_merge: " + b, file=sys.stderr)
    if a.job is not None:
        files = [d for d in files if d["otherData"].get("job") == a.job]
    jobs = sorted({d["otherData"].get("job", "") for d in files})
    if not files:
        print("coll_trace_merge: no trace file", file=sys.stderr)
        return 2
    if len(jobs) > 1:
        print("coll_trace_merge: files of several jobs (%s): pick one with --job" % ", ".join(jobs),
              file=sys.stderr)
        return 2
    merged, missing = merge(files)
    if missing:
        print("coll_trace_merge: no file from rank%s %s" % ("s" if len(missing) > 1 else "",
              ", ".join(map(str, missing))), file=sys.stderr)
    out = open(a.output, "w") if a.output else sys.stdout
    json.dump(merged, out)
    out.write("\n")
    if a.output:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
