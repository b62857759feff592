"""Runs a function on n ranks (processes, forked) meeting at a fresh file:// rendezvous;
returns their exit codes. A rank fails by raising (printed) or by not finishing in time."""
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import traceback


def _main(fn, r, n, where):
    try:
        fn(r, n, where)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    os._exit(0)


def run(fn, n, deadline_s=60):
    where = tempfile.mkdtemp(prefix="coll_py.")
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_main, args=(fn, r, n, where)) for r in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(deadline_s)
        if p.is_alive():
            p.kill()
            p.join()
    shutil.rmtree(where, ignore_errors=True)
    return [p.exitcode for p in ps]


def check(fn, n, what, allowed=None):
    codes = run(fn, n)
    bad = [r for r, c in enumerate(codes) if c != (allowed or {}).get(r, 0)]
    if bad:
        print(f"FAIL {what} on {n} ranks: exit codes {codes}")
        return 1
    print(f"ok   {what} on {n} ranks")
    return 0
