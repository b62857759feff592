"""Runs a function on n ranks (processes, forked) meeting at a fresh file:// rendezvous;
returns their exit codes. A rank fails by raising (printed) or by not finishing in time.
Also the Ctrl-C check both test files share (interrupted)."""
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
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


def _put(path, text):
    """Writes text to path whole (renamed into place: a reader never sees half of it)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def _get(path, seconds):
    """path's text once it exists (waiting up to seconds, else an AssertionError)."""
    deadline = time.time() + seconds
    while not os.path.exists(path):
        assert time.time() < deadline, f"{os.path.basename(path)} did not come in {seconds} s"
        time.sleep(0.01)
    with open(path) as f:
        return f.read()


def interrupted(r, where, stuck, after, peer, within_s=3):
    """Ctrl-C in a blocking call, on 2 ranks: rank 0 blocks in stuck() (a collective rank 1
    never enters) and rank 1 sends it SIGINT a second later. Rank 0 must raise
    KeyboardInterrupt within within_s of the signal, then after() (a call on the same
    communicator) a RuntimeError saying "KeyboardInterrupt"; then rank 1's peer() (a
    collective with rank 0) must fail with a COLL_E* error within 10 s, not at its
    timeout (30 s)."""
    pid, sent, left = (os.path.join(where, f) for f in ("pid", "sent", "left"))
    if r == 0:
        _put(pid, str(os.getpid()))
        try:
            stuck()
        except KeyboardInterrupt:
            came = time.time()
        else:
            raise AssertionError("stuck() returned")
        took = came - float(_get(sent, 1))
        _put(left, "")
        assert took < within_s, f"KeyboardInterrupt {took:.1f} s after the signal"
        _raises(after, "KeyboardInterrupt", 10)
        return
    target = int(_get(pid, 30))
    time.sleep(1.0)  # rank 0 is inside stuck() by then
    _put(sent, repr(time.time()))
    os.kill(target, signal.SIGINT)
    _get(left, 20)
    _raises(peer, "COLL_E", 10)


def _raises(fn, words, seconds):
    """fn() raises a RuntimeError saying words, within seconds."""
    t0 = time.time()
    try:
        fn()
    except RuntimeError as e:
        assert words in str(e), f"wanted {words!r}, got {e}"
        assert time.time() - t0 < seconds, f"{time.time() - t0:.1f} s to raise {e}"
        return
    raise AssertionError(f"no error, wanted {words!r}")


def short_calls(r, x, allreduce):
    """Ctrl-C in a loop of short calls, on 2 ranks: rank 0 loops allreduce(zeros like x)
    and gets SIGINT 0.5 s in (it lands inside a call, most often); it must raise
    KeyboardInterrupt, and a last allreduce(x) with rank 1 (x filled with 100: rank 1
    all-reduces zeros until that comes) must agree: the communicator stayed usable."""
    stop = 100.0
    x[:] = 0
    allreduce(x)
    if r == 0:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.time()
        try:
            while time.time() - t0 < 10:
                x[:] = 0
                allreduce(x)
            raise AssertionError("no SIGINT in 10 s")
        except KeyboardInterrupt:
            pass
        x[:] = stop  # the last one: rank 1 stops with it
    while True:
        allreduce(x)
        if x[0] >= stop:
            break
        x[:] = 0
    assert (x == stop).all(), x
