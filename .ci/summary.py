#!/usr/bin/env python3
"""Prints the slowest tests of each build (what to work on when CI grows long), then each
failed test's name and the tail of its output (CI keeps only the end of what it prints, where
meson's own error logs have long scrolled away), then 'N passed, N failed' from meson's
testlog.json files (one or more builds) as the last line."""
import json
import sys

SLOWEST = 8
TAIL_LINES = 25

passed = failed = skipped = 0
failures = []
for path in sys.argv[1:]:
    try:
        runs = [json.loads(line) for line in open(path).read().splitlines()]
    except OSError:
        failed += 1
        print(f"{path}: missing (the build or the test run did not finish)")
        continue
    for r in runs:
        result = r.get("result")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            failures.append((path, r))
    slow = sorted(runs, key=lambda r: -r.get("duration", 0))[:SLOWEST]
    total = sum(r.get("duration", 0) for r in runs)
    print(f"{path}: {len(runs)} tests, {total:.0f} s of test time; slowest: " +
          ", ".join(f"{r['name']} {r.get('duration', 0):.0f} s" for r in slow))
for path, r in failures:
    out = (r.get("stdout") or "") + (r.get("stderr") or "")
    tail = out.rstrip().splitlines()[-TAIL_LINES:]
    print(f"FAILED {r['name']} ({path}): {r.get('result')} after {r.get('duration', 0):.0f} s")
    print("\n".join("  | " + line for line in tail))
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)
