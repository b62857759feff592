#!/usr/bin/env python3
"""Draws one all-reduce of merged COLL_TRACE files (tools/coll_trace_merge.py) as an SVG,
one panel per file side by side: for each rank its passes (coloured, step boundaries
marked) and below them its transfers to and from each peer, a bar per step. The
all-reduce drawn is each file's last of the largest on the first communicator (the
warm-up and a benchmark's small checks left out); times from its earliest start on any rank. A summary of
each panel (per-rank time, per-pass time, bytes to each peer) goes to stderr.

    perf/trace_picture.py TITLE=MERGED.json [TITLE=MERGED.json ...] > picture.svg
"""
import json
import sys
from collections import defaultdict

PALETTE = {"reduce-scatter": "#6baed6", "all-gather": "#74c476",
           "host reduce-scatter": "#9ecae1", "across hosts reduce-scatter": "#fd8d3c",
           "across hosts all-gather": "#e6550d", "host all-gather": "#a1d99b"}


def pass_name(args):
    return (args["scope"] + " " + args["phase"]).strip()


def last_allreduce(events):
    """The last all-reduce's span on each rank (one seq on every rank), and its children."""
    ops = [e for e in events if e.get("cat") == "collective" and e["name"] == "allreduce"
           and e["tid"] == 0]
    big = max(e["args"]["count"] for e in ops)  # not a benchmark's own small checks
    seq = max(e["args"]["seq"] for e in ops if e["args"]["count"] == big)
    spans = {e["pid"]: e for e in ops if e["args"]["seq"] == seq}
    kids = defaultdict(list)
    for e in events:
        if e.get("cat") in ("phase", "step", "transfer") and e["args"]["seq"] == seq \
                and (e["tid"] == 0 or e["tid"] // 1000000 == 1):  # communicator 0's
            kids[e["pid"]].append(e)
    return seq, spans, kids


def hosts(events):
    """Each rank's host, from its process name ("rank R (HOST, pid P)"), as "host K"
    (K in the order of their lowest ranks: the emulated hosts' names change by run)."""
    named = {e["pid"]: e["args"]["name"].split("(")[1].split(",")[0]
             for e in events if e.get("name") == "process_name"}
    order = sorted(set(named.values()), key=lambda h: min(r for r in named if named[r] == h))
    return {r: "host %d" % order.index(h) for r, h in named.items()}


def rows(spans, kids, where):
    """(label, [(t0, t1, colour, tooltip)], is_pass_row) rows, rank by rank."""
    out = []
    for r in sorted(spans):
        phases = [k for k in kids[r] if k["cat"] == "phase"]
        bars = [(p["ts"], p["ts"] + p["dur"], PALETTE.get(pass_name(p["args"]), "#bdbdbd"),
                 "%s: %.0f us" % (pass_name(p["args"]), p["dur"])) for p in phases]
        ends = [k["ts"] + k["dur"] for k in kids[r] if k["cat"] == "step"]
        out.append(("rank %d (%s)" % (r, where.get(r, "?")), bars, ends))
        lanes = defaultdict(list)
        for k in kids[r]:
            if k["cat"] == "transfer":
                a = k["args"]
                lanes[(a["peer"], a["direction"])].append(
                    (k["ts"], k["ts"] + k["dur"], PALETTE.get(pass_name(a), "#bdbdbd"),
                     "%s step %d %s rank %d: %d bytes, %.0f us" % (
                         pass_name(a), a["step"], "to" if a["direction"] == "send" else "from",
                         a["peer"], a["bytes"], k["dur"])))
        for (peer, d), bars in sorted(lanes.items()):
            out.append(("  %s rank %d" % ("to" if d == "send" else "from", peer), bars, None))
    return out


def panel(o, x0, width, title, rows_, t0, t1, top, row_h):
    left = 130
    scale = (width - left - 10) / (t1 - t0)
    x = lambda t: x0 + left + (t - t0) * scale
    o.append(f'<text x="{x0 + left}" y="{top - 22}" font-size="13">{title}</text>')
    for i, (label, bars, ends) in enumerate(rows_):
        y = top + i * row_h
        weight = ' font-weight="bold"' if ends is not None else ""
        o.append(f'<text x="{x0 + left - 6}" y="{y + row_h - 4}" text-anchor="end"{weight}>'
                 f'{label}</text>')
        for a, b, colour, tip in bars:
            o.append(f'<rect x="{x(a):.1f}" y="{y + 2}" width="{max(x(b) - x(a), 0.8):.1f}" '
                     f'height="{row_h - 4}" fill="{colour}" stroke="white" stroke-width="0.5">'
                     f'<title>{tip}</title></rect>')
        for t in ends or []:
            o.append(f'<line x1="{x(t):.1f}" y1="{y + 1}" x2="{x(t):.1f}" y2="{y + row_h - 1}" '
                     'stroke="black" stroke-width="1"/>')
    axis = top + row_h * len(rows_) + 4
    o.append(f'<line x1="{x(t0):.1f}" y1="{axis}" x2="{x(t1):.1f}" y2="{axis}" stroke="black"/>')
    span_ms = (t1 - t0) / 1000
    tick = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 1e9) if span_ms / s <= 8)
    k = 0
    while k * tick <= span_ms + 1e-9:
        tx = x(t0 + k * tick * 1000)
        o.append(f'<line x1="{tx:.1f}" y1="{axis}" x2="{tx:.1f}" y2="{axis + 4}" stroke="black"/>'
                 f'<text x="{tx:.1f}" y="{axis + 16}" text-anchor="middle">{k * tick:g}</text>')
        k += 1
    o.append(f'<text x="{x0 + left + (width - left) / 2:.0f}" y="{axis + 30}" '
             'text-anchor="middle">ms from the all-reduce\'s first start</text>')
    return axis + 30


def summary(title, spans, kids):
    print("# %s" % title, file=sys.stderr)
    for r in sorted(spans):
        parts = ", ".join("%s %.0f us" % (pass_name(k["args"]), k["dur"])
                          for k in sorted(kids[r], key=lambda k: k["ts"]) if k["cat"] == "phase")
        moved = defaultdict(int)
        for k in kids[r]:
            if k["cat"] == "transfer" and k["args"]["direction"] == "send":
                moved[k["args"]["peer"]] += k["args"]["bytes"]
        print("rank %d: %.0f us (%s); sent %s" % (
            r, spans[r]["dur"], parts,
            ", ".join("%d B to rank %d" % (b, p) for p, b in sorted(moved.items()))),
            file=sys.stderr)


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    panels = []
    for arg in sys.argv[1:]:
        title, path = arg.split("=", 1)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        seq, spans, kids = last_allreduce(events)
        t0 = min(e["ts"] for e in spans.values())
        t1 = max(e["ts"] + e["dur"] for e in spans.values())
        summary("%s (all-reduce #%d)" % (title, seq), spans, kids)
        panels.append(("%s: all-reduce #%d, %.1f ms" % (title, seq, (t1 - t0) / 1000),
                       rows(spans, kids, hosts(events)), t0, t1))
    width, row_h, top = 560, 15, 50
    height = top + row_h * max(len(p[1]) for p in panels) + 90
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" '
         f'height="{height}" font-family="sans-serif" font-size="11">',
         f'<rect width="100%" height="100%" fill="white"/>']
    bottom = 0
    for i, (title, rows_, t0, t1) in enumerate(panels):
        bottom = max(bottom, panel(o, i * width, width, title, rows_, t0, t1, top, row_h))
    colours = {c for p in panels for _, bars, _ in p[1] for _, _, c, _ in bars}
    used = [n for n in PALETTE if PALETTE[n] in colours]
    for i, name in enumerate(used):
        lx, ly = 130 + (i % 3) * 200, bottom + 14 + (i // 3) * 16
        o.append(f'<rect x="{lx}" y="{ly}" width="11" height="11" fill="{PALETTE[name]}"/>'
                 f'<text x="{lx + 15}" y="{ly + 10}">{name}</text>')
    o.append(f'<text x="{width * len(panels) - 10}" y="{bottom + 24}" text-anchor="end">'
             'black ticks: the end of each step</text>')
    o[0] = o[0].replace(f'height="{height}"', f'height="{bottom + 20 + 16 * ((len(used) + 2) // 3) + 10}"')
    o.append("</svg>")
    print("\n".join(o))


if __name__ == "__main__":
    main()
