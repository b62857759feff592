#!/usr/bin/env python3
"""Draws one healing run as an SVG timeline (ranks over time), from the log that
perf/heal_time.sh keeps with HEAL_KEEP=DIR: the trainer's "heal:" lines (every
survivor's phases, the replacement's start, grow and state times, all wall-clock) and the
script's "killed T rank R" line.

    perf/heal_timeline.py RUN.log > heal.svg
"""
import re
import sys

COLORS = {"training": "#9ecae1", "detect": "#fdae6b", "shrink": "#e6550d",
          "grow": "#31a354", "state": "#756bb1", "start": "#bdbdbd"}
LABELS = {"training": "training", "detect": "until the loss is seen",
          "shrink": "shrink (agree, undo)", "grow": "grow (waits for the replacement)",
          "state": "state from rank 0",
          "start": "process start, data load, join"}


def parse(text):
    killed = re.search(r"^killed ([0-9.]+) rank (\d+)", text, re.M)
    if not killed:
        sys.exit("no 'killed T rank R' line: keep the log with heal_time.sh's HEAL_KEEP")
    phases = {int(m[0]): [float(x) for x in m[1:]] for m in re.findall(
        r"^heal: rank (\d+) phases: seen ([0-9.]+) shrunk ([0-9.]+) grown ([0-9.]+) "
        r"done ([0-9.]+)", text, re.M)}
    join = re.search(r"^heal: rank (\d+) joined .*process started at ([0-9.]+), in the grow "
                     r"at ([0-9.]+), state at ([0-9.]+)", text, re.M)
    if not phases or not join:
        sys.exit("no heal in this log")
    return float(killed[1]), int(killed[2]), phases, (int(join[1]), *map(float, join.groups()[1:]))


def rows(kill, victim, phases, join):
    """(label, [(kind, t0, t1)]) per row, times in seconds from the kill; survivors
    by their numbers once healed (dp_train: the grown communicator's; hybrid_1f1b: their
    roles, the replacement's the lost rank's)."""
    end = max(max(p[3] for p in phases.values()), join[3]) - kill + 0.15
    out = [(f"old rank {victim} (killed)", [("training", -0.15, 0.0)])]
    for r, (seen, shrunk, grown, done) in sorted(phases.items()):
        s = [x - kill for x in (seen, shrunk, grown, done)]
        out.append((f"rank {r}", [("training", -0.15, 0.0), ("detect", 0.0, s[0]),
                                  ("shrink", s[0], s[1]), ("grow", s[1], s[2]),
                                  ("state", s[2], s[3]), ("training", s[3], end)]))
    r, began, joined, state = join
    b, j, st = began - kill, joined - kill, state - kill
    out.append((f"rank {r} (replacement)", [("start", b, j), ("state", j, st),
                                            ("training", st, end)]))
    return out, end


def svg(title, rows_, end):
    left, width, row_h, top = 170, 760, 26, 40
    x = lambda t: left + (t + 0.15) / (end + 0.15) * width
    h = top + row_h * len(rows_) + 110
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" height="{h}" '
         'font-family="sans-serif" font-size="12">',
         f'<text x="{left}" y="20" font-size="14">{title}</text>']
    for i, (label, segs) in enumerate(rows_):
        y = top + i * row_h
        o.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{label}</text>')
        for kind, t0, t1 in segs:
            if t1 > t0:
                o.append(f'<rect x="{x(t0):.1f}" y="{y + 3}" width="{x(t1) - x(t0):.1f}" '
                         f'height="{row_h - 6}" fill="{COLORS[kind]}"><title>{LABELS[kind]}: '
                         f'{t0 * 1e3:.0f} to {t1 * 1e3:.0f} ms</title></rect>')
    axis = top + row_h * len(rows_) + 6
    o.append(f'<line x1="{x(0):.1f}" y1="{top - 6}" x2="{x(0):.1f}" y2="{axis}" '
             'stroke="black" stroke-dasharray="4,3"/>')
    o.append(f'<text x="{x(0) + 3:.1f}" y="{top - 8}">kill</text>')
    step = 0.1 if end < 1.5 else 0.25 if end < 4 else 1.0
    t = 0.0
    while t <= end:
        o.append(f'<line x1="{x(t):.1f}" y1="{axis}" x2="{x(t):.1f}" y2="{axis + 4}" '
                 'stroke="black"/>')
        o.append(f'<text x="{x(t):.1f}" y="{axis + 16}" text-anchor="middle">{t * 1e3:.0f}'
                 '</text>')
        t += step
    o.append(f'<text x="{left + width / 2}" y="{axis + 32}" text-anchor="middle">ms after '
             'the kill</text>')
    for i, kind in enumerate(("training", "detect", "shrink", "grow", "state", "start")):
        lx, ly = left + (i % 4) * 190 if i < 4 else left + (i - 4) * 300, axis + 44 + (i >= 4) * 20
        o.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{COLORS[kind]}"/>'
                 f'<text x="{lx + 16}" y="{ly + 10}">{LABELS[kind]}</text>')
    o.append("</svg>")
    return "\n".join(o)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    text = open(sys.argv[1]).read()
    kill, victim, phases, join = parse(text)
    head = re.search(r"^# (dp_train|hybrid_1f1b):[^\n]*", text, re.M)
    rows_, end = rows(kill, victim, phases, join)
    title = (head[0][2:] if head else "a healing run") + f": rank {victim} killed"
    print(svg(title, rows_, end))


if __name__ == "__main__":
    main()
