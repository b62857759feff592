#!/usr/bin/env python3
"""Checks what the trainers write.

  check.py json FILE        every record with measured bytes per step and a formula
                            agrees: formula <= measured <= formula x 1.01 + 4 KiB
                            (segment headers); the run has epochs and a final accuracy
  check.py trace FILE N T   a Chrome trace with N complete events on T named tracks
  check.py fsdp FSDP DP N PREFETCH
                            FSDP's parameter memory per rank is its shards (DP's over N,
                            up to the padding of each layer); its gathered layers are
                            1 + PREFETCH parameter buffers and one gradient buffer, each
                            the size of the largest layer
"""
import json
import sys

MEASURED = ("wire_bytes_per_step", "sent_bytes_per_step")


def records(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from records(v)
    elif isinstance(node, list):
        for v in node:
            yield from records(v)


def check_json(path):
    doc = json.load(open(path))
    assert doc.get("epochs"), "no epochs"
    assert 0 < doc["test_accuracy"] <= 1, "bad test_accuracy"
    pairs = 0
    for r in records(doc):
        for key in MEASURED:
            if key in r and "formula_bytes_per_step" in r:
                got, want = r[key], r["formula_bytes_per_step"]
                assert want <= got <= want * 1.01 + 4096, f"{key} {got} vs formula {want}"
                pairs += 1
    assert pairs, "no byte counts next to a formula"
    print(f"{path}: {len(doc['epochs'])} epochs, {pairs} byte counts match their formula")


def check_trace(path, events, tracks):
    doc = json.load(open(path))["traceEvents"]
    got = sum(e["ph"] == "X" for e in doc)
    names = sum(e["ph"] == "M" for e in doc)
    assert got == events, f"{got} complete events, want {events}"
    assert names == tracks, f"{names} tracks, want {tracks}"
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in doc if e["ph"] == "X")
    print(f"{path}: {got} events on {names} tracks")


SIZES = (784, 512, 256, 128, 10)


def check_fsdp(path, dp_path, n, prefetch):
    mem = json.load(open(path))["epochs"][-1]["memory"]
    fsdp = mem["params"]
    dp = json.load(open(dp_path))["epochs"][-1]["memory"]["params"]
    counts = [SIZES[l] * SIZES[l + 1] + SIZES[l + 1] for l in range(len(SIZES) - 1)]
    shards = [-(-c // n) for c in counts]
    gathered = 4 * (2 + prefetch) * n * max(shards)
    assert fsdp == 4 * sum(shards), f"params {fsdp} B, want {4 * sum(shards)}"
    assert mem["gathered"] == gathered, f"gathered {mem['gathered']} B, want {gathered}"
    assert abs(fsdp - dp / n) <= 4 * len(counts) * (n - 1), f"shards {fsdp} B vs DP {dp} B / {n}"
    print(f"{path}: {fsdp:.0f} B of shards = DP's {dp:.0f} B / {n}, "
          f"plus {gathered} B of gathered layers")


if __name__ == "__main__":
    try:
        if sys.argv[1] == "json":
            check_json(sys.argv[2])
        elif sys.argv[1] == "fsdp":
            check_fsdp(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        else:
            check_trace(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    except (AssertionError, KeyError, ValueError, OSError) as e:
        print(f"FAIL: {sys.argv[1]} {sys.argv[2]}: {e}")
        sys.exit(1)
