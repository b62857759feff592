"""The Python API on 1-4 processes against numpy references: every collective blocking
and non-blocking, uneven forms, p2p, split, the store-backed init, errors, Ctrl-C inside
a blocking call."""
import asyncio
import collections
import ctypes
import functools
import mmap
import os
import signal
import socket
import sys
import tempfile
import threading
import time

import numpy as np

import collective
import ranks


def url(where):
    return "file://" + where


def collectives(r, n, where):
    c = collective.Communicator(url(where), r, n, timeout_ms=10000)
    assert (c.rank, c.size) == (r, n)
    for dt in ["float32", "float64", "int32", "int64", "int8", "uint8"]:
        for op, ref in [("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)]:
            vals = [(np.arange(7) % 3 + p + 1).astype(dt) for p in range(n)]
            x = vals[r].copy()
            c.allreduce(x, op=op)
            assert np.array_equal(x, ref(np.stack(vals), axis=0).astype(dt)), (dt, op, x)
    for dt in ["int32", "int64", "int8", "uint8"]:  # bitwise: integers only, every bit
        info = np.iinfo(dt)
        for op, ref in [("band", np.bitwise_and), ("bor", np.bitwise_or),
                        ("bxor", np.bitwise_xor)]:
            vals = [np.random.default_rng(p).integers(info.min, info.max, 9, dt, True)
                    for p in range(n)]
            x = vals[r].copy()
            c.allreduce(x, op=op)
            assert np.array_equal(x, ref.reduce(np.stack(vals), axis=0)), (dt, op, x)
            y = vals[r].copy()
            c.reduce(y, op=op.upper(), root=n - 1)
            assert r != n - 1 or np.array_equal(x, y), (dt, op, y)
    x = np.full(1000, r + 1.0, np.float32)
    y = np.zeros_like(x)
    c.iallreduce(x, y, op="avg").wait()
    assert np.allclose(y, (n + 1) / 2)
    g = np.zeros(3 * n, np.int64)
    c.allgather(np.full(3, r, np.int64), g)
    assert np.array_equal(g, np.repeat(np.arange(n), 3))
    counts = [p + 1 for p in range(n)]
    gv = np.zeros(sum(counts), np.float64)
    c.allgatherv(np.full(r + 1, float(r)), gv, counts)
    assert np.array_equal(gv, np.concatenate([np.full(p + 1, float(p)) for p in range(n)]))
    rs = np.zeros(2, np.float32)
    c.reduce_scatter(np.arange(2 * n, dtype=np.float32) + r, rs)
    assert np.array_equal(rs, np.arange(2 * r, 2 * r + 2, dtype=np.float32) * n + sum(range(n)))
    rsv = np.zeros(r + 1, np.float32)
    c.reduce_scatterv(np.ones(sum(counts), np.float32), rsv, counts)
    assert np.array_equal(rsv, np.full(r + 1, float(n)))
    b = np.full(5, float(r))
    c.broadcast(b, root=n - 1)
    assert np.array_equal(b, np.full(5, float(n - 1)))
    red = np.full(4, r + 1, np.int32)
    c.reduce(red, op="sum", root=0)
    if r == 0:
        assert np.array_equal(red, np.full(4, n * (n + 1) // 2))
    gat = np.zeros(2 * n, np.int32) if r == 0 else None
    c.gather(np.full(2, r, np.int32), gat, root=0)
    if r == 0:
        assert np.array_equal(gat, np.repeat(np.arange(n, dtype=np.int32), 2))
    sc = np.zeros(2, np.int32)
    c.scatter(np.repeat(np.arange(n, dtype=np.int32), 2) if r == 0 else None, sc, root=0)
    assert np.array_equal(sc, np.full(2, r))
    a2a = np.zeros(2 * n, np.int32)
    c.ialltoall(np.arange(2 * n, dtype=np.int32) + 100 * r, a2a).wait()
    assert np.array_equal(a2a, np.array([100 * p + 2 * r + k for p in range(n) for k in range(2)]))
    sendc = [p + 1 for p in range(n)]
    recvc = [r + 1] * n
    av = np.zeros(sum(recvc), np.float32)
    c.alltoallv(np.full(sum(sendc), float(r), np.float32), sendc, av, recvc)
    assert np.array_equal(av, np.repeat(np.arange(n, dtype=np.float32), r + 1))
    if n > 1:
        to, frm = (r + 1) % n, (r - 1) % n
        got = np.zeros(3)
        c.sendrecv(np.full(3, float(r)), to, got, frm, tag=5)
        assert np.array_equal(got, np.full(3, float(frm)))
        rq = c.irecv(got, frm, tag=6)
        c.send(np.full(3, float(r) * 2), to, tag=6)
        while not rq.test():
            time.sleep(0.001)
        assert np.array_equal(got, np.full(3, 2.0 * frm))
    c.allreduce(bytearray(16))  # the buffer protocol, uint8
    sub = c.split(r % 2, key=-r)
    assert sub.size == len(range(r % 2, n, 2)) and sub.rank == (sub.size - 1 - r // 2)
    sub.close()
    assert c.stats()["ops"] > 20
    c.barrier()
    c.close()


def errors(r, n, where):
    c = collective.Communicator(url(where), r, n, timeout_ms=5000)
    for bad, exc in [(lambda: c.allreduce(np.ones(3, np.complex64)), TypeError),
                     (lambda: c.allreduce(np.ones(4)[::2]), ValueError),
                     (lambda: c.allgather(np.ones(3), np.ones(2)), ValueError),
                     (lambda: c.allreduce(np.ones(3), op="xor"), ValueError),
                     # bitwise on floats: on every rank alike, so refused before sending
                     (lambda: c.allreduce(np.ones(3, np.float32), op="bxor"), ValueError),
                     (lambda: c.reduce(np.ones(3, np.float16), op="band"), ValueError),
                     (lambda: c.reduce_scatterv(np.ones(n), np.ones(1), [1] * n, op="bor"),
                      ValueError)]:
        try:
            bad()
        except exc:
            pass
        else:
            raise AssertionError(f"{bad} did not raise {exc}")
    c.barrier()  # refused before the library saw them: still usable
    # One the library refuses (COLL_EINVAL) fails that communicator: on a split of its own.
    for bad in [lambda s: s.allreduce(a[0:8], a[4:12])]:  # overlapping
        s, a = c.split(0), np.ones(12, np.float32)
        for call, name in [(lambda: bad(s), "COLL_EINVAL"), (s.barrier, "COLL_ESTATE")]:
            try:
                call()
            except collective.CollectiveError as e:
                assert e.name == name, e
            else:
                raise AssertionError(f"{call} did not raise {name}")
        s.close()
    c.barrier()
    # A count that differs between ranks: COLL_EMISMATCH on every rank.
    try:
        c.allreduce(np.ones(4 + r, np.float32))
    except collective.CollectiveError as e:
        assert e.name == "COLL_EMISMATCH" and "allreduce" in str(e), e
    else:
        raise AssertionError("a count mismatch passed")
    c.close()
    # A request close() cut short is an error when waited (COLL_EABORTED, or COLL_EPEER
    # where the peer's close came first), never freed memory.
    d = collective.Communicator(url(where) + "/again", r, n, timeout_ms=5000)
    req = d.irecv(np.zeros(4), 1 - r, tag=3)
    d.close()
    try:
        req.wait()
    except collective.CollectiveError as e:
        assert e.name in ("COLL_EABORTED", "COLL_EPEER") and "closed" in str(e), e
    else:
        raise AssertionError("a request outlived its communicator")


class DictStore:
    """A store in a directory, as a caller's store would be (set, get with timeout)."""

    def __init__(self, where):
        self.where = where

    def set(self, key, value):
        path = os.path.join(self.where, key.replace("/", "_"))
        with open(path + ".tmp", "wb") as f:
            f.write(value)
        os.rename(path + ".tmp", path)

    def get(self, key, timeout_ms):
        path = os.path.join(self.where, key.replace("/", "_"))
        end = time.time() + timeout_ms / 1000
        while True:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    return f.read()
            if time.time() >= end:
                return None
            time.sleep(0.005)


def shared_split(r, n, where):
    # Splits on the world's links (split_share): evens and odds, then the world, in turn.
    c = collective.Communicator(url(where), r, n, timeout_ms=10000, split_share=True)
    s = c.split(r % 2, r)
    for k in range(3):
        x = np.full(5, r + k, np.int64)
        s.allreduce(x)
        assert np.array_equal(x, np.full(5, sum(p + k for p in range(r % 2, n, 2)))), x
        y = np.full(3, r, np.int64)
        c.allreduce(y)
        assert np.array_equal(y, np.full(3, n * (n - 1) // 2)), y
    s.close()
    c.close()


def store_init(r, n, where):
    c = collective.Communicator(DictStore(where), r, n, timeout_ms=5000)
    x = np.ones(10, np.float32)
    c.allreduce(x)
    assert np.array_equal(x, np.full(10, float(n)))
    c.close()


def dead_rank(r, n, where):
    c = collective.Communicator(url(where), r, n, timeout_ms=3000)
    c.barrier()
    if r == n - 1:
        os._exit(9)
    t0 = time.time()
    try:
        for _ in range(1000):
            c.allreduce(np.ones(1000, np.float32))
    except collective.CollectiveError as e:
        assert e.name in ("COLL_EPEER", "COLL_ETIMEDOUT"), e
        assert time.time() - t0 < 7, time.time() - t0
        s = c.shrink()
        x = np.ones(3, np.float32)
        s.allreduce(x)
        assert np.array_equal(x, np.full(3, float(n - 1))) and c.failed_ranks() == [n - 1]
        return
    raise AssertionError("nobody noticed the dead rank")


def error_feedback(r, n, where):
    """int8 with error feedback: one call is off by the codec's error, the mean of many
    calls converges to the exact average (the residual carries what each call lost), and
    every rank gets the same bits."""
    c = collective.Communicator(url(where), r, n, timeout_ms=10000)
    rng = np.random.default_rng(7 + r)
    g = rng.standard_normal(5000).astype(np.float32)
    exact = np.mean([np.random.default_rng(7 + p).standard_normal(5000).astype(np.float32)
                     for p in range(n)], axis=0)
    e, out, total, calls = np.zeros_like(g), np.zeros_like(g), np.zeros_like(g), 40
    for k in range(calls):
        req = c.iallreduce_ef(g, out, e, op="avg", codec="int8")
        req.wait()
        if k == 0:
            first = np.abs(out - exact).max()
            assert np.abs(e).max() > 0, "the codec lost nothing: nothing to feed back"
        total += out
    mean_err = np.abs(total / calls - exact).max()
    assert 0 < first < 0.1 and mean_err < first / 8, (first, mean_err)
    every = np.zeros(n * g.size, np.float32)
    c.allgather(out, every)
    assert all(np.array_equal(every[p * g.size:(p + 1) * g.size], out) for p in range(n))
    for bad in [lambda: c.allreduce_ef(g.astype(np.float64), None, e.astype(np.float64)),
                lambda: c.allreduce_ef(g, out, e[:10]),
                lambda: c.allreduce_ef(g, out, e, codec="int4")]:
        try:
            bad()
        except ValueError:
            pass
        else:
            raise AssertionError("bad allreduce_ef arguments passed")
    c.close()


def raises(exc, call, *names):
    """call() raises exc whose message names every one of names."""
    try:
        call()
    except exc as e:
        assert all(name in str(e) for name in names), (names, e)
        return
    raise AssertionError(f"no {exc.__name__} naming {names}")


class Tracker:
    """Stands between the package and the library's coll_test and coll_wait: records
    every C request handle that coll_wait freed, and refuses (recording it) a second
    coll_wait or a coll_test on a handle already being waited, so a double free shows as
    an assertion instead of heap corruption. delay_s holds each coll_wait back, which
    widens the window a racing thread needs."""

    def __init__(self, delay_s=0.0):
        self.delay_s, self.mu = delay_s, threading.Lock()
        self.waited, self.bad = collections.Counter(), []
        self.real_wait, self.real_test = collective.lib.coll_wait, collective.lib.coll_test
        collective.lib.coll_wait, collective.lib.coll_test = self.wait, self.test

    @staticmethod
    def key(h):
        return h.value if isinstance(h, ctypes.c_void_p) else h

    def reset(self):
        """A new round: handles freed before may come back from malloc."""
        with self.mu:
            self.waited.clear()

    def wait(self, h):
        with self.mu:
            self.waited[self.key(h)] += 1
            if self.waited[self.key(h)] > 1:
                self.bad.append(("coll_wait twice", self.key(h)))
                return collective.CODES["ESTATE"]
        time.sleep(self.delay_s)
        return self.real_wait(h)

    def test(self, h, done):
        with self.mu:
            if self.waited[self.key(h)]:
                self.bad.append(("coll_test after coll_wait", self.key(h)))
                return collective.CODES["ESTATE"]
        return self.real_test(h, done)


def handle(req):
    return Tracker.key(req._h)


def close_in_flight(r, n, where):
    """close() with a 64 MiB all-reduce in flight whose array only the request holds: the
    engine must never touch freed memory, and the C request is freed exactly once."""
    tracker = Tracker()
    for k in range(3):
        tracker.reset()
        c = collective.Communicator(url(where) + f"/{k}", r, n, timeout_ms=5000)
        req = c.iallreduce(np.ones(1 << 24, np.float32))
        h = handle(req)
        c.close()
        assert tracker.waited[h] == 1, f"close() freed the C request {tracker.waited[h]} times"
        try:
            req.wait()
        except collective.CollectiveError as e:  # cut short here, or by the peer's close
            assert e.name in ("COLL_EABORTED", "COLL_EPEER"), e
        assert tracker.waited[h] == 1 and not tracker.bad, tracker.bad[:2]


def close_races_calls(r, n, where):
    """close() while another thread is inside a call on the communicator (held there by a
    slow coll_get_stats): close() must wait for it; destroying first made the call read
    freed memory. Calls after close() raise, a root out of range is a ValueError here."""
    c = collective.Communicator(url(where), r, n, timeout_ms=5000)
    raises(ValueError, lambda: c.broadcast(np.ones(2, np.float32), root=n), "root")
    order, real_stats, real_destroy = [], collective.lib.coll_get_stats, collective.lib.coll_destroy

    def slow_stats(h, out):
        order.append("stats in")
        time.sleep(0.3)
        order.append("stats reads")
        return real_stats(h, out)

    def destroy(h):
        order.append("destroy")
        return real_destroy(h)

    collective.lib.coll_get_stats, collective.lib.coll_destroy = slow_stats, destroy
    try:
        t = threading.Thread(target=c.stats)
        t.start()
        while not order:
            time.sleep(0.01)
        c.close()
        t.join()
    finally:
        collective.lib.coll_get_stats, collective.lib.coll_destroy = real_stats, real_destroy
    assert order == ["stats in", "stats reads", "destroy"], order
    raises(collective.CollectiveError, c.stats, "closed")


def short_buffers(r, n, where):
    """Every buffer shorter than its counts and displacements say is a ValueError naming
    it, raised before anything is sent: the ranks that did not call (their input was
    right, they know another's was not) then still agree on the next collective."""
    c = collective.Communicator(url(where), r, n, timeout_ms=3000)
    f32 = lambda k: np.zeros(k, np.float32)  # noqa: E731
    root = n - 1
    cases = [  # (ranks with the bad input, the call, the argument named)
        ([root], lambda: c.gather(f32(4), f32(4 * n - 1), root=root), "recvbuf"),
        ([root], lambda: c.gather(f32(4), None, root=root), "recvbuf"),
        ([root], lambda: c.scatter(f32(4 * n - 1), f32(4), root=root), "sendbuf"),
        ([root], lambda: c.scatter(None, f32(4), root=root), "sendbuf"),
        ([root], lambda: c.reduce(f32(4), f32(3), root=root), "recvbuf"),
        (range(n), lambda: c.allgatherv(f32(r + 1), f32(n * (n + 1) // 2 - 1),
                                        [p + 1 for p in range(n)]), "recvbuf"),
        (range(n), lambda: c.allgatherv(f32(r + 1), f32(n * (n + 1) // 2),
                                        [p + 1 for p in range(n)],
                                        [n * (n + 1) // 2 - p for p in range(n)]), "recvbuf"),
        (range(n), lambda: c.allgatherv(f32(r + 2), f32(n * (n + 2)), [p + 1 for p in range(n)]),
         "sendbuf"),
        (range(n), lambda: c.alltoallv(f32(2 * n - 1), [2] * n, f32(2 * n), [2] * n), "sendbuf"),
        (range(n), lambda: c.alltoallv(f32(2 * n), [2] * n, f32(2 * n), [2] * n, None,
                                       [2 * n - 1] * n), "recvbuf"),
        (range(n), lambda: c.reduce_scatterv(f32(3 * n - 1), f32(3), [3] * n), "sendbuf"),
        (range(n), lambda: c.reduce_scatterv(f32(3 * n), f32(2), [3] * n), "recvbuf"),
        (range(n), lambda: c.allgatherv(f32(1), f32(n), [1] * (n + 1)), "counts"),
    ]
    for k, (bad, call, name) in enumerate(cases):
        if r in bad:
            try:
                raises(ValueError, call, name)
            except AssertionError as e:
                raise AssertionError(f"case {k}: {e}") from None
        x = np.full(3, float(k + r))
        c.allreduce(x)
        assert np.array_equal(x, np.full(3, float(k * n + n * (n - 1) // 2))), (k, x)
    c.close()


def read_only(r, n, where):
    """An in-place call (recvbuf omitted) and any explicit recvbuf must be writable: bytes,
    a read-only array and an array over a read-only mmap are refused, never written."""
    c = collective.Communicator(url(where), r, n, timeout_ms=3000)
    fd, path = tempfile.mkstemp(dir=where)
    os.write(fd, np.full(16, r + 1, np.float32).tobytes())
    with open(path, "rb") as f:
        ro_map = mmap.mmap(f.fileno(), 64, access=mmap.ACCESS_READ)
    os.close(fd)
    frozen = np.full(16, r + 1, np.float32)
    frozen.flags.writeable = False
    data = bytes(np.full(16, r + 1, np.float32).tobytes())
    for buf in (data, frozen, np.frombuffer(ro_map, np.float32)):
        before = bytes(memoryview(buf).cast("B"))
        raises(ValueError, lambda: c.allreduce(buf), "sendbuf")
        raises(ValueError, lambda: c.alltoall(buf), "sendbuf")
        raises(ValueError, lambda: c.reduce(buf, root=r), "sendbuf")
        raises(ValueError, lambda: c.broadcast(buf, root=0), "buf")
        raises(ValueError, lambda: c.allreduce(np.zeros(16, np.float32), buf), "recvbuf")
        raises(ValueError, lambda: c.recv(buf, (r + 1) % n), "buf")
        assert bytes(memoryview(buf).cast("B")) == before, "a read-only buffer changed"
    x = np.full(4, r + 1, np.float32)
    c.allreduce(x)  # nothing was sent: the next collective pairs as it should
    assert np.array_equal(x, np.full(4, n * (n + 1) / 2)), x
    c.close()


def request_races(r, n, where):
    """Several threads testing and waiting one request, and close() against a request's
    __del__: each C request is freed exactly once and never touched after."""
    tracker = Tracker(delay_s=0.005)
    c = collective.Communicator(url(where), r, n, timeout_ms=5000)
    for k in range(20):
        tracker.reset()
        x = np.full(8, float(r))
        req = c.iallreduce(x)
        h, seen = handle(req), []

        def poll():
            while not req.test():
                pass
            seen.append(True)
        pollers = [threading.Thread(target=poll) for _ in range(3)]
        for t in pollers:
            t.start()
        req.wait()
        for t in pollers:
            t.join(10)
        assert len(seen) == 3 and not tracker.bad, (k, seen, tracker.bad[:2])
        assert tracker.waited[h] == 1 and np.array_equal(x, np.full(8, n * (n - 1) / 2))
    c.close()
    for k in range(5):  # a request dropped in one thread while another closes
        tracker.reset()
        d = collective.Communicator(url(where) + f"/d{k}", r, n, timeout_ms=5000)
        box = [d.irecv(np.zeros(4), (r + 1) % n, tag=9)]  # its only reference
        h = handle(box[0])
        dropper = threading.Thread(target=box.clear)
        dropper.start()
        d.close()
        dropper.join(10)
        assert tracker.waited[h] == 1 and not tracker.bad, (k, tracker.waited[h], tracker.bad[:2])


def widths(r, n, where):
    """What a C int, a uint32 tag or a size_t cannot hold, and a byte order the library
    does not read, are ValueErrors naming the argument, never wrapped or misread."""
    c = collective.Communicator(url(where), r, n, timeout_ms=3000)
    big = np.full(4, 1.5, ">f4")
    raises(ValueError, lambda: c.allreduce(big), "sendbuf")
    raises(ValueError, lambda: c.allreduce(np.ones(4, np.float32), big), "recvbuf")
    raises(ValueError, lambda: c.broadcast(np.ones(4), root=2**32 + (n - 1)), "root")
    raises(ValueError, lambda: c.reduce(np.ones(4), root=-2**32), "root")
    raises(ValueError, lambda: c.gather(np.ones(4), np.ones(4 * n), root=2**32), "root")
    raises(ValueError, lambda: c.scatter(np.ones(4 * n), np.ones(4), root=2**40), "root")
    raises(ValueError, lambda: c.split(2**32 + 7), "color")
    raises(ValueError, lambda: c.split(1, key=2**31), "key")
    raises(ValueError, lambda: c.send(np.ones(2), 2**32 + (r + 1) % n), "peer")
    raises(ValueError, lambda: c.recv(np.ones(2), (r + 1) % n, tag=-1), "tag")
    raises(ValueError, lambda: c.send(np.ones(2), (r + 1) % n, tag=2**32), "tag")
    raises(ValueError, lambda: c.sendrecv(np.ones(2), 2**32, np.ones(2), 0), "dst")
    raises(ValueError, lambda: c.allgatherv(np.ones(1), np.ones(n), [2**64 + 1] * n), "counts")
    raises(ValueError, lambda: c.allgatherv(np.ones(1), np.ones(n), [1] * n, [-1] * n),
           "displs")
    raises(TypeError, lambda: c.broadcast(np.ones(4), root=1.0), "root")
    # What fits still goes through: colors 7 and 2**31 - 1 are two groups, not one.
    sub = c.split(7 if r % 2 else 2**31 - 1, key=-2**31 + r)
    assert sub.size == len(range(r % 2, n, 2)), sub.size
    sub.close()
    x = np.full(4, 1.5, "=f4")
    c.allreduce(x)
    assert np.array_equal(x, np.full(4, 1.5 * n)), x
    c.close()


def grow_back(r, n, where):
    """Ranks 0..n-2 meet, then grow to n with rank n-1 as the newcomer, which reads the id
    rank 0 wrote to a file (the out-of-band hand-over)."""
    idfile = os.path.join(where, "grow-id")
    if r == n - 1:
        deadline = time.time() + 20
        while not os.path.exists(idfile):
            assert time.time() < deadline, "no id came"
            time.sleep(0.02)
        with open(idfile) as f:
            g = collective.Communicator(grow=f.read(), timeout_ms=5000)
    else:
        c = collective.Communicator(url(where), r, n - 1, timeout_ms=5000)
        if r == 0:
            with whole_file(idfile) as f:
                f.write(c.grow_id(n))
        g = c.grow()
        assert g.rank == r
        c.barrier()  # the old communicator stays as it was
    x = np.full(3, float(g.rank + 1), np.float32)
    g.allreduce(x)
    assert g.size == n and np.array_equal(x, np.full(3, n * (n + 1) / 2)), (g.size, x)
    try:
        collective.Communicator(grow="grow1/nothing")
        raise AssertionError("a malformed id was taken")
    except collective.CollectiveError as e:
        assert e.name == "COLL_EINVAL", e


class whole_file:
    """Writes a file whole: another process never reads half of it."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.f = open(self.path + ".tmp", "w")
        return self.f

    def __exit__(self, *exc):
        self.f.close()
        os.rename(self.path + ".tmp", self.path)


def interrupted(r, n, where, how):
    """Ctrl-C while rank 0 is blocked in a call that rank 1 never joins (ranks.interrupted):
    a blocking all-reduce, a request's wait(), a blocking receive, a barrier. Before, the
    signal waited for the call to end: at rank 1's exit, or the 30 s timeout."""
    c = collective.Communicator(url(where), r, n, timeout_ms=30000)
    x = np.ones(4, np.float32)
    stuck = {"allreduce": lambda: c.allreduce(x), "wait": lambda: c.iallreduce(x).wait(),
             "recv": lambda: c.recv(x, 1), "barrier": c.barrier}[how]
    ranks.interrupted(r, where, stuck, lambda: c.allreduce(x), lambda: c.allreduce(x))
    c.close()


def interrupted_before(r, n, where):
    """SIGINT while rank 0 runs Python, between calls: its KeyboardInterrupt is raised
    there, and the caller catches it to run a last all-reduce with rank 1, which must
    succeed (as on Gloo). Before, _signals' thread, taking the GIL milliseconds after the
    signal, found rank 0 inside that all-reduce and aborted it."""
    c = collective.Communicator(url(where), r, n, timeout_ms=20000)
    x = np.ones(4, np.float32)
    c.allreduce(x)  # the first call takes the wakeup fd
    pid, spinning = os.path.join(where, "pid"), os.path.join(where, "spinning")
    if r == 0:
        ranks._put(pid, str(os.getpid()))
        try:
            deadline = time.time() + 10
            ranks._put(spinning, "")
            while time.time() < deadline:  # in Python, no call
                pass
            raise AssertionError("no SIGINT in 10 s")
        except KeyboardInterrupt:
            pass
    else:
        target = int(ranks._get(pid, 30))
        ranks._get(spinning, 30)
        time.sleep(0.2)
        os.kill(target, signal.SIGINT)
        time.sleep(0.3)  # rank 0 waits inside its last all-reduce meanwhile
    y = np.ones(4, np.float32)
    c.allreduce(y)
    assert (y == 2).all(), y
    c.close()


def interrupted_in_short_calls(r, n, where):
    """SIGINT while rank 0 runs a tight loop of small all-reduces (it lands inside one, most
    often, or between two): its KeyboardInterrupt comes, and a last all-reduce with rank 1
    succeeds, the communicator usable as a Gloo group stays. Before, a signal read while
    any call ran aborted that call's communicator, however short the call."""
    c = collective.Communicator(url(where), r, n, timeout_ms=20000)
    ranks.short_calls(r, np.zeros(4, np.float32), c.allreduce)
    c.close()


def _interrupted_meeting(r, meet, what):
    """Rank 1 gets SIGINT a second into meet(), a meeting whose third rank never comes: it
    must raise KeyboardInterrupt within 3 s, and rank 0's meet() must fail within 10 s
    saying rank 1's was interrupted, not at the 30 s timeout."""
    t0 = time.time()
    if r == 1:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            meet()
        except KeyboardInterrupt:
            took = time.time() - t0 - 1.0
            assert took < 3, f"KeyboardInterrupt {took:.1f} s after the signal"
            return
        raise AssertionError(f"{what} returned")
    try:
        meet()
    except collective.CollectiveError as e:
        assert "rank 1 failed at init" in str(e) and "interrupted" in str(e), e
        assert time.time() - t0 < 10, f"{time.time() - t0:.1f} s to fail"
        return
    raise AssertionError(f"rank 0's {what} returned")


def interrupted_init(r, n, where, store):
    """Ctrl-C in init (_interrupted_meeting), through a url and through a store of
    Python's (its get runs on the main thread, where the KeyboardInterrupt is raised: it
    must not be lost leaving the store's callback). Before, the signal waited for the
    init's timeout."""
    where_to = DictStore(where) if store else url(where)
    _interrupted_meeting(r, lambda: collective.Communicator(where_to, r, 3, timeout_ms=30000),
                         "init")


def interrupted_grow(r, n, where):
    """Ctrl-C in grow() (_interrupted_meeting): ranks 0 and 1 grow to 3 and no newcomer
    comes. Before, the signal aborted the old communicator, which the grow's meeting does
    not watch."""
    c = collective.Communicator(url(where), r, n, timeout_ms=30000)
    if r == 0:
        c.grow_id(3)
    c.barrier()  # the id is made before anyone grows
    _interrupted_meeting(r, c.grow, "grow")


def fork_during_init(r, n, where):
    """A thread forks while the main thread waits in an init (which holds SIGINT with a
    handler of its own, _signals.hold): the child's SIGINT must be Python's default again.
    Before, the child kept the held handler and swallowed Ctrl-C for good. Then the init
    is interrupted, as a check that it was waiting."""
    def fork_and_look():
        time.sleep(0.5)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 1)
        child.append(os.waitpid(pid, 0)[1])
        os.kill(os.getpid(), signal.SIGINT)

    child = []
    threading.Thread(target=fork_and_look).start()
    try:
        collective.Communicator(url(where), 0, 2, timeout_ms=20000)
        raise AssertionError("init returned")
    except KeyboardInterrupt:
        pass
    assert child == [0], f"the child's SIGINT handler was not Python's ({child})"


def fork_after_asyncio(r, n, where):
    """asyncio's loop sets the wakeup fd, the first call takes it over (handing bytes on
    to asyncio's), the loop ends (it sets none and closes its socket) and the program's
    sockets take the numbers freed: a forked child's signals must not be written into
    them. Before, the child set asyncio's old number back, and its SIGUSR2 wrote b'\\x0c'
    into one of them."""
    async def calls():
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, lambda: None)
        c = collective.Communicator(url(where), r, n, timeout_ms=5000)
        c.allreduce(np.ones(1, np.float32))
        c.close()

    asyncio.run(calls())
    pairs = [socket.socketpair() for _ in range(4)]
    for s in (s for pair in pairs for s in pair):
        s.setblocking(False)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGUSR2, lambda *_: None)
        os.kill(os.getpid(), signal.SIGUSR2)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    got = b""
    for s in (s for pair in pairs for s in pair):
        try:
            got += s.recv(64)
        except BlockingIOError:
            pass
    assert got == b"", f"the child wrote {got!r} into the program's sockets"


def main():
    bad = 0
    for n in (1, 2, 4):
        bad += ranks.check(collectives, n, "collectives")
    bad += ranks.check(errors, 2, "errors")
    for n in (1, 3):
        bad += ranks.check(error_feedback, n, "all-reduce with error feedback")
    bad += ranks.check(shared_split, 4, "splits sharing their links")
    bad += ranks.check(store_init, 3, "store init")
    bad += ranks.check(dead_rank, 3, "dead rank and shrink", {2: 9})
    bad += ranks.check(grow_back, 3, "a newcomer grows a communicator")
    bad += ranks.check(close_in_flight, 2, "close with 64 MiB in flight")
    bad += ranks.check(close_races_calls, 2, "close against a call in another thread")
    for n in (1, 3):
        bad += ranks.check(short_buffers, n, "short buffers refused before sending")
        bad += ranks.check(widths, n, "integer widths and byte order")
    bad += ranks.check(read_only, 2, "read-only buffers refused")
    bad += ranks.check(request_races, 2, "request races")
    for how in ("allreduce", "wait", "recv", "barrier"):
        bad += ranks.check(functools.partial(interrupted, how=how), 2,
                           f"Ctrl-C while blocked in {how}")
    bad += ranks.check(interrupted_before, 2, "Ctrl-C between calls, caught, then a call")
    bad += ranks.check(interrupted_in_short_calls, 2, "Ctrl-C in a loop of short calls")
    bad += ranks.check(interrupted_grow, 2, "Ctrl-C in grow")
    for store in (False, True):
        bad += ranks.check(functools.partial(interrupted_init, store=store), 2,
                           "Ctrl-C in init" + (" through a caller's store" if store else ""))
    bad += ranks.check(fork_during_init, 1, "a child forked during an init")
    bad += ranks.check(fork_after_asyncio, 1, "a forked child's signals after asyncio's loop")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
