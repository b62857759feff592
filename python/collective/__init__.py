"""libcollective from Python: a Communicator over numpy arrays and anything with the
buffer protocol (no copies: the library reads and writes the caller's memory).

    import collective, numpy as np
    comm = collective.Communicator("env://")        # or tcp://, file://, or a store
    x = np.ones(1024, np.float32)
    comm.allreduce(x)                                # in place, sum
    req = comm.iallreduce(x, op="avg"); req.wait()

Errors are CollectiveError (a RuntimeError) carrying the COLL_E* code and the library's
sentence. Every collective has a non-blocking form named i<name> returning a Request.
Arguments the library cannot take as given (a buffer shorter than its counts say, a
read-only buffer to write, a byte order other than the machine's, an integer the C type
cannot hold) are a ValueError or TypeError naming the argument, on the ranks where they
are, before anything is sent. Ctrl-C while the main thread is inside a call (a blocking
collective, a Request's wait) raises KeyboardInterrupt at once and aborts the
communicator (_signals): its peers fail at once, later calls raise saying why.
"""
import ctypes
import operator
import os
import threading
import weakref

import numpy as np

from . import _lib, _signals
from ._lib import lib

__all__ = ["Communicator", "Request", "CollectiveError", "DTYPES", "OPS"]

# COLL_E* codes by name, and back.
CODES = {"OK": 0, "INPROGRESS": 1, "EINVAL": -1, "ENOMEM": -2, "ENOTSUP": -3, "ESYS": -4,
         "ETIMEDOUT": -5, "EPEER": -6, "EMISMATCH": -7, "EABORTED": -8, "ESTATE": -9,
         "EPROTO": -10}
_NAMES = {v: k for k, v in CODES.items()}
DTYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int8": 4, "uint8": 5,
          "int32": 6, "int64": 7}
# band, bor, bxor: bitwise, on the integer dtypes only (a float dtype: ValueError)
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4, "band": 5, "bor": 6, "bxor": 7}
CODECS = {"none": 0, "fp16": 1, "bf16": 2, "int8": 3}


class CollectiveError(RuntimeError):
    """A COLL_E* status: .code (negative int), .name ("EPEER"), and the library's text."""

    def __init__(self, code, text):
        self.code, self.name = code, "COLL_" + _NAMES.get(code, str(code))
        super().__init__(f"{self.name}: {text}")


def _check(rc, comm=None, what=""):
    if rc != 0:
        text = lib.coll_last_error(comm).decode(errors="replace")
        raise CollectiveError(rc, f"{what}{lib.coll_strerror(rc).decode()}: {text}")
    return rc


def dtype_code(dtype):
    """The library's dtype for a numpy dtype (or its name)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise TypeError(f"dtype {name} is not one the library reduces or moves "
                        f"({', '.join(DTYPES)})")
    return DTYPES[name]


_BITWISE, _FLOATS = (5, 6, 7), (0, 1, 2, 3)


def op_code(op, dtype=None):
    """The library's op for a name (or code), reducing dtype (its code): a bitwise op on
    a float dtype is a ValueError here, where the library would fail the communicator."""
    code = op if isinstance(op, int) and op in OPS.values() else None
    if isinstance(op, str) and op.lower() in OPS:
        code = OPS[op.lower()]
    if code is None:
        raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")
    if code in _BITWISE and dtype in _FLOATS:
        name = next(k for k, v in DTYPES.items() if v == dtype)
        raise ValueError(f"op {op!r} is bitwise: integer dtypes only, not {name}")
    return code


def _reduction(dtype, op):
    """The library's (dtype, op) for reducing an array of dtype with op."""
    code = dtype_code(dtype)
    return code, op_code(op, code)


def codec_code(codec):
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
    return CODECS[codec]


def _array(x, writable, what):
    """x as a contiguous numpy array over the same memory (never a copy), in this
    machine's byte order (the library reads native numbers only)."""
    a = x if isinstance(x, np.ndarray) else np.asarray(memoryview(x))
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} must be contiguous (a copy would lose the result)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what} is read-only")
    if not a.dtype.isnative:
        raise ValueError(f"{what} is {a.dtype.str}, not in this machine's byte order "
                         f"(convert it with astype({a.dtype.newbyteorder('=').str!r}))")
    return a


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data) if a is not None else None


INT_RANGE = (-2**31, 2**31 - 1)           # a C int: root, peer, color, key, rank
TAG_RANGE = (0, 2**32 - 1)                # uint32_t
SIZE_RANGE = (0, 2**(8 * ctypes.sizeof(ctypes.c_size_t)) - 1)
GROW_ID_BYTES = 160                       # COLL_GROW_ID_BYTES


def _int(value, what, bounds=INT_RANGE):
    """value as an int within bounds (a C int by default), else a ValueError naming it:
    ctypes would silently keep only the low bits (root 2**32 + 1 would be root 1)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError(f"{what}={v} does not fit the library's range "
                         f"{bounds[0]}..{bounds[1]}")
    return v


def _counts(values, n, what):
    """values, one per rank, as ints a size_t holds, else a ValueError naming them."""
    if values is None or len(values) != n:
        raise ValueError(f"{what} needs one entry per rank ({n})")
    return [_int(v, f"{what}[{i}]", SIZE_RANGE) for i, v in enumerate(values)]


def _size_array(values):
    return (ctypes.c_size_t * len(values))(*values)


def _sizes(values, n, what):
    return _size_array(_counts(values, n, what))


def _displs(counts):
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += int(c)
    return out


def _within(buf, counts, displs, what):
    """Every block (counts[i] elements at displs[i]) lies inside buf, else a ValueError
    naming it: the library would read or write past its end."""
    for i, (c, d) in enumerate(zip(counts, displs)):
        if c and d + c > buf.size:
            raise ValueError(f"{what} holds {buf.size} elements, but block {i} ({c} at {d}) "
                             f"ends at {d + c}")


def _same_dtype(s, r):
    if r.dtype != s.dtype:
        raise TypeError(f"sendbuf is {s.dtype}, recvbuf {r.dtype}")


class Request:
    """A running operation. wait() returns once it is done (raising its error); test()
    says whether it is done without blocking. Keeps the buffers alive until then. Any
    thread may test or wait, several at once: the C request is freed exactly once (by
    the first coll_wait), and its buffers are let go only after that."""

    def __init__(self, comm, handle, keep):
        self._mu = threading.Lock()
        self._settled = threading.Condition(self._mu)
        # _h: the C request until a thread takes it to coll_wait; _status: the op's
        # status once that coll_wait returned. _h None with _status None: being waited.
        self._comm, self._h, self._keep, self._status = comm, handle, keep, None
        comm._reqs.add(self)

    def _collect(self):
        """The op's status: the first caller frees the C request in coll_wait (the GIL
        released), every other waits for it."""
        with self._mu:
            while self._status is None and self._h is None:
                self._settled.wait()
            if self._status is not None:
                return self._status
            h, self._h = self._h, None
        status, marked = None, _signals.OTHER
        try:
            marked = _signals.enter(self._comm)
            status = lib.coll_wait(h)
        finally:
            _signals.leave(marked)
            with self._mu:
                # Interrupted (a KeyboardInterrupt raised as coll_wait returned, which
                # freed h): aborted as far as any other waiter is concerned, the
                # buffers kept in case it had not begun.
                self._status = CODES["EABORTED"] if status is None else status
                if status is not None:
                    self._keep = None
                self._settled.notify_all()
        return status

    def wait(self):
        self._comm._check(self._collect())

    def test(self):
        with self._mu:  # coll_test never blocks; the lock keeps coll_wait from freeing h
            if self._status is not None:
                return True
            if self._h is None:
                return False  # another thread is in coll_wait on it
            done = ctypes.c_int(0)
            lib.coll_test(self._h, ctypes.byref(done))
        if done.value:
            self.wait()
        return bool(done.value)

    def __del__(self):
        # Dropped unwaited: wait, so the library never writes into a freed buffer.
        self._collect()


class _Init:
    """What _signals marks while the main thread is inside an init: a Ctrl-C interrupts
    it (coll_init_interrupt) instead of waiting out the ranks that may never come."""

    def __init__(self, then=None):
        self.interrupted, self.then = False, then

    def _interrupt(self):
        self.interrupted = True
        lib.coll_init_interrupt()
        if self.then is not None:  # a grow: its communicator's broadcast may wait too
            self.then()


def _meet(init, h, *args, then=None):
    """init(&h, *args), one of the library's inits, which Ctrl-C interrupts:
    _signals' thread sees the signal while the library waits, and Python's handler (held
    for the call: it does not raise) while a store's callback runs. KeyboardInterrupt is
    raised once the init has returned; a communicator it formed meanwhile is destroyed."""
    mark = _Init(then)
    marked, held = _signals.OTHER, _signals.hold(mark._interrupt)
    try:
        marked = _signals.enter(mark)
        rc = init(ctypes.byref(h), *args)
    finally:
        _signals.leave(marked)
        _signals.release(held)
    if mark.interrupted:
        if rc == 0:
            lib.coll_destroy(h.value)
        raise KeyboardInterrupt
    return rc


class _StoreBridge:
    """A caller's store behind coll_store_ops: store.set(key, bytes) and
    store.get(key, timeout_ms) -> bytes, or None when the key did not come in time."""

    def __init__(self, store):
        self.store, self.error = store, None
        self.ops = _lib.StoreOps(_lib.STORE_SET(self._set), _lib.STORE_GET(self._get))

    def _failed(self, e):
        self.error = e
        return CODES["ESYS"] if isinstance(e, Exception) else CODES["EABORTED"]

    def _set(self, ctx, key, value, length):
        try:
            self.store.set(key.decode(), ctypes.string_at(value, length) if length else b"")
            return 0
        except BaseException as e:  # the library gets a status; the reason is kept (a
            # Ctrl-C's too: an exception leaving a ctypes callback is printed and lost)
            return self._failed(e)

    def _get(self, ctx, key, value, length, timeout_ms):
        try:
            data = self.store.get(key.decode(), timeout_ms)
        except BaseException as e:
            return self._failed(e)
        if data is None:
            return CODES["ETIMEDOUT"]
        buf = _lib.libc.malloc(max(len(data), 1))
        ctypes.memmove(buf, data, len(data))
        value[0], length[0] = buf, len(data)
        return 0


class Communicator:
    """A group of ranks. Communicator(url, rank=-1, size=-1) meets at a rendezvous URL
    (env://, tcp://host:port, file:///dir, mem://name; rank and size -1: from the
    launcher's environment), or Communicator(store, rank, size) through a store with
    set(key, bytes) and get(key, timeout_ms) -> bytes or None. Keywords: transport,
    device, timeout_ms (a peer that does not answer), op_timeout_ms (an operation without
    progress), codec ("none", "fp16", "bf16", "int8"), segment_bytes, split_share (True:
    splits use this communicator's links; their collectives must then be issued in the
    same order on every rank, and one's failure fails them all)."""

    def __init__(self, url_or_store="env://", rank=-1, size=-1, *, transport=None, device=None,
                 timeout_ms=0, codec="none", segment_bytes=0, op_timeout_ms=0,
                 split_share=False, grow=None, _handle=None):
        self._h = None
        self._mu = threading.Lock()  # close() against the calls that hold the handle
        self._idle = threading.Condition(self._mu)  # the last call holding it returned
        self._inside, self._closing, self._interrupted = 0, False, False
        self._reqs = weakref.WeakSet()  # requests not yet waited, collected by close()
        if _handle is not None:
            self._h = _handle
            return
        rank, size = _int(rank, "rank"), _int(size, "size")
        cfg = _lib.Config(ctypes.sizeof(_lib.Config), transport.encode() if transport else None,
                          device.encode() if device else None, _int(timeout_ms, "timeout_ms"),
                          codec_code(codec), _int(segment_bytes, "segment_bytes", SIZE_RANGE),
                          _int(op_timeout_ms, "op_timeout_ms"), int(bool(split_share)))
        h = _lib.comm_p()
        if grow is not None:  # a newcomer: rank and size come from the grow
            rc = _meet(lib.coll_init_grow, h, str(grow).encode(), ctypes.byref(cfg))
        elif isinstance(url_or_store, str):
            rc = _meet(lib.coll_init, h, url_or_store.encode(), rank, size, ctypes.byref(cfg))
        else:
            bridge = _StoreBridge(url_or_store)
            try:
                rc = _meet(lib.coll_init_store, h, ctypes.byref(bridge.ops), None, rank, size,
                           ctypes.byref(cfg))
            finally:
                # The library is done with the store once init returns. The callbacks hold
                # the bridge (a cycle, freed only by the collector): a torch TCPStore kept
                # serving its port after destroy_process_group, and an init on the same
                # MASTER_PORT then met the last job's keys ("another job is using this
                # rendezvous").
                bridge.store, bridge.ops = None, None
            if rc != 0 and isinstance(bridge.error, Exception):
                raise CollectiveError(rc, f"the store failed: {bridge.error!r}") from bridge.error
            if rc != 0 and bridge.error is not None:
                raise bridge.error  # a KeyboardInterrupt inside the store's call
        _check(rc, None, "init: ")
        self._h = h.value

    # -- life cycle --------------------------------------------------------------------
    @property
    def rank(self):
        return self._call(lib.coll_rank)

    @property
    def size(self):
        return self._call(lib.coll_size)

    def _live(self):
        if not self._h or self._closing:
            raise CollectiveError(CODES["ESTATE"], "the communicator is closed")
        return self._h

    def _root(self, root):
        """A root within 0..size-1, else a ValueError here: the library would fail the
        communicator for it."""
        return _int(root, "root", (0, self.size - 1))

    def _call(self, fn, *args):
        """fn(handle, *args), the handle held: close() waits until every call holding it
        has returned (a call begun on a destroyed communicator reads freed memory)."""
        with self._mu:
            h = self._live()
            self._inside += 1
        marked = _signals.OTHER
        try:
            marked = _signals.enter(self)  # Ctrl-C aborts the call (_signals)
            return fn(h, *args)
        finally:
            _signals.leave(marked)
            with self._mu:
                self._inside -= 1
                if not self._inside:
                    self._idle.notify_all()

    def _check(self, rc, what=""):
        """Raises rc with this communicator's explanation; never reads a freed one."""
        if rc == 0:
            return
        if self._interrupted:
            what = f"{what}the communicator was aborted by a KeyboardInterrupt on this rank: "
        with self._mu:
            if not self._h:
                raise CollectiveError(rc, f"{what}{lib.coll_strerror(rc).decode()}: the "
                                          "communicator was closed")
            _check(rc, self._h, what)

    def _interrupt(self):
        """A KeyboardInterrupt ended a wait on this communicator, or SIGINT came while the
        main thread is inside a call on it and its handler raises one as the call returns
        (_signals' thread calls this): aborted, so that the call returns now, the peers
        fail at once, and later calls raise saying why."""
        with self._mu:
            if self._h and not self._closing:
                self._interrupted = True
                lib.coll_abort(self._h)

    def close(self):
        """Destroys the communicator: operations still running are aborted (the library
        stops touching their buffers), then every request not yet waited is collected;
        its wait() raises its own status (COLL_EABORTED where close cut it short)."""
        with self._mu:
            if not self._h or self._closing:
                return
            self._closing = True  # no call takes the handle from now on
            if self._inside:  # calls blocked inside return once aborted
                lib.coll_abort(self._h)
            while self._inside:
                self._idle.wait()
            rc = lib.coll_destroy(self._h)
            if rc != 0:  # a thread stayed inside: the communicator and its buffers live on
                self._closing = False
                raise CollectiveError(rc, "close: a thread stayed inside an operation; the "
                                          "communicator was not freed")
            self._h = None
        for req in list(self._reqs):
            req._collect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def abort(self):
        self._check(self._call(lib.coll_abort))

    def split(self, color, key=0):
        """A communicator of the ranks that gave the same color (None: this rank joins
        none and gets None), ordered by key then rank."""
        out = _lib.comm_p()
        color = -1 if color is None else _int(color, "color")
        self._check(self._call(lib.coll_split, color, _int(key, "key"), ctypes.byref(out)))
        return Communicator(_handle=out.value) if out.value else None

    def shrink(self):
        """After a failure: a communicator of the survivors (every survivor calls it)."""
        out = _lib.comm_p()
        _check(self._call(lib.coll_shrink, ctypes.byref(out)), None, "shrink: ")
        return Communicator(_handle=out.value)

    def grow_id(self, size):
        """Rank 0: the id of a grow of this communicator to size ranks, to hand to each
        newcomer, which joins with Communicator(grow=id, ...) while every rank here calls
        grow()."""
        buf = ctypes.create_string_buffer(GROW_ID_BYTES)
        self._check(self._call(lib.coll_grow_id, _int(size, "size"), buf, len(buf)), "grow_id: ")
        return buf.value.decode()

    def grow(self):
        """Every rank: the grown communicator (this one stays as it was). Ctrl-C in it
        interrupts the grow's meeting, and aborts this communicator, as in any call."""
        out = _lib.comm_p()
        rc = self._call(lambda h: _meet(lambda at: lib.coll_grow(h, at), out,
                                        then=self._interrupt))
        _check(rc, None, "grow: ")
        return Communicator(_handle=out.value)

    def failed_ranks(self):
        ranks = (ctypes.c_int * self.size)()
        n = self._call(lib.coll_failed_ranks, ranks, self.size)
        return list(ranks[:n])

    def recorder_dump(self, path=None):
        """Writes the flight recorder's records as JSON to path (None: this rank's file in
        $COLL_RECORDER_DIR, else in the current directory; coll_recorder_dump)."""
        where = None if path is None else os.fsencode(path)
        self._check(self._call(lib.coll_recorder_dump, where), "recorder_dump: ")

    def set_label(self, label, global_rank=-1):
        """Names this communicator for coll_status, which lists every communicator of the
        processes it asks: label (cut to 31 bytes) and this rank's global number
        (-1: none; coll_comm_set_label)."""
        self._check(self._call(lib.coll_comm_set_label, os.fsencode(label), global_rank),
                    "set_label: ")

    def set_codec(self, codec):
        self._check(self._call(lib.coll_set_codec, codec_code(codec)))

    def stats(self):
        s = _lib.Stats()
        self._check(self._call(lib.coll_get_stats, ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in _lib.Stats._fields_}

    def barrier(self, async_op=False):
        """Returns once every rank has entered it (async_op: a Request done then)."""
        return self._run("barrier", async_op, (), ())

    # -- operations --------------------------------------------------------------------
    def _run(self, name, async_op, args, keep):
        if async_op:
            req = _lib.req_p()
            self._check(self._call(getattr(lib, f"coll_i{name}"), *args, ctypes.byref(req)))
            return Request(self, req.value, keep)
        self._check(self._call(getattr(lib, f"coll_{name}"), *args))
        return None

    def _pair(self, sendbuf, recvbuf):
        if recvbuf is None:  # in place: the result is written over sendbuf
            s = _array(sendbuf, True, "sendbuf (in place: no recvbuf)")
            return s, s
        s, r = _array(sendbuf, False, "sendbuf"), _array(recvbuf, True, "recvbuf")
        _same_dtype(s, r)
        return s, r

    def allreduce(self, sendbuf, recvbuf=None, op="sum", async_op=False):
        """Reduces every rank's sendbuf into recvbuf (None: in place). op: one of OPS
        (band, bor and bxor on integer arrays only)."""
        s, r = self._pair(sendbuf, recvbuf)
        if r.size != s.size:
            raise ValueError(f"recvbuf holds {r.size} elements, sendbuf {s.size}")
        return self._run("allreduce", async_op,
                         (_ptr(s), _ptr(r), s.size, *_reduction(s.dtype, op)), (s, r))

    def allreduce_ef(self, sendbuf, recvbuf=None, residual=None, op="sum", codec="int8",
                     async_op=False):
        """All-reduce of float32 through a wire codec with error feedback: residual is a
        float32 array of the same length, zeroed before the first call and passed again
        with every later call on this buffer; it keeps what the codec lost, so the error
        of repeated all-reduces averages out (coll_allreduce_ef). op: "sum" or "avg"."""
        s, r = self._pair(sendbuf, recvbuf)
        e = _array(residual, True, "residual") if residual is not None else None
        if s.dtype != np.float32 or e is None or e.dtype != np.float32 or e.size != s.size:
            raise ValueError("allreduce_ef takes float32 buffers and a float32 residual of "
                             f"the same length ({s.size})")
        if r.size != s.size:
            raise ValueError(f"recvbuf holds {r.size} elements, sendbuf {s.size}")
        return self._run("allreduce_ef", async_op,
                         (_ptr(s), _ptr(r), s.size, op_code(op, DTYPES["float32"]),
                          codec_code(codec), _ptr(e)),
                         (s, r, e))

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        if s.size != r.size * self.size:
            raise ValueError(f"sendbuf must hold size x {r.size} elements, not {s.size}")
        return self._run("reduce_scatter", async_op,
                         (_ptr(s), _ptr(r), r.size, *_reduction(s.dtype, op)), (s, r))

    def allgather(self, sendbuf, recvbuf, async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        if r.size != s.size * self.size:
            raise ValueError(f"recvbuf must hold size x {s.size} elements, not {r.size}")
        return self._run("allgather", async_op, (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype)),
                         (s, r))

    def allgatherv(self, sendbuf, recvbuf, counts, displs=None, async_op=False):
        """Rank r's sendbuf (counts[r] elements) lands at displs[r] (default: the counts
        packed in rank order) of every rank's recvbuf."""
        s, r = self._pair(sendbuf, recvbuf)
        n = self.size
        c = _counts(counts, n, "counts")
        d = _counts(_displs(c) if displs is None else displs, n, "displs")
        if s.size != c[self.rank]:
            raise ValueError(f"sendbuf holds {s.size} elements, counts[{self.rank}] is "
                             f"{c[self.rank]}")
        _within(r, c, d, "recvbuf")
        c, d = _size_array(c), _size_array(d)
        return self._run("allgatherv", async_op,
                         (_ptr(s), s.size, _ptr(r), c, d, dtype_code(s.dtype)), (s, r, c, d))

    def reduce_scatterv(self, sendbuf, recvbuf, counts, op="sum", async_op=False):
        """sendbuf holds sum(counts) elements; rank r gets the reduction of its block,
        counts[r] elements, at the start of recvbuf."""
        s, r = self._pair(sendbuf, recvbuf)
        c = _counts(counts, self.size, "counts")
        if s.size != sum(c):
            raise ValueError(f"sendbuf holds {s.size} elements, counts sum to {sum(c)}")
        if r.size < c[self.rank]:
            raise ValueError(f"recvbuf holds {r.size} elements, counts[{self.rank}] is "
                             f"{c[self.rank]}")
        c = _size_array(c)
        return self._run("reduce_scatterv", async_op,
                         (_ptr(s), _ptr(r), c, *_reduction(s.dtype, op)), (s, r, c))

    def broadcast(self, buf, root=0, async_op=False):
        b, root = _array(buf, True, "buf"), self._root(root)
        return self._run("broadcast", async_op, (_ptr(b), b.size, dtype_code(b.dtype), root), (b,))

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, async_op=False):
        """recvbuf (as many elements as sendbuf) matters at root only (None there: in
        place); elsewhere it is ignored."""
        root = self._root(root)
        if self.rank == root:
            s, r = self._pair(sendbuf, recvbuf)
            if r.size != s.size:
                raise ValueError(f"recvbuf holds {r.size} elements, sendbuf {s.size}")
        else:
            s, r = _array(sendbuf, False, "sendbuf"), None
        return self._run("reduce", async_op,
                         (_ptr(s), _ptr(r), s.size, *_reduction(s.dtype, op), root),
                         (s, r))

    def _at_root(self, root, buf, what, block, block_what):
        """The root's side of a gather or scatter: buf (named what) holds size x block's
        elements there; elsewhere it is ignored (None)."""
        if self.rank != root:
            return None
        if buf is None:
            raise ValueError(f"{what} is needed at the root")
        b = _array(buf, what == "recvbuf", what)
        if b.dtype != block.dtype:
            raise TypeError(f"{what} is {b.dtype}, {block_what} {block.dtype}")
        if b.size != block.size * self.size:
            raise ValueError(f"{what} holds {b.size} elements, not size x {block_what}'s "
                             f"{block.size}")
        return b

    def gather(self, sendbuf, recvbuf=None, root=0, async_op=False):
        """root's recvbuf holds size x sendbuf's elements; elsewhere it is ignored."""
        s, root = _array(sendbuf, False, "sendbuf"), self._root(root)
        r = self._at_root(root, recvbuf, "recvbuf", s, "sendbuf")
        return self._run("gather", async_op,
                         (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype), root), (s, r))

    def scatter(self, sendbuf, recvbuf, root=0, async_op=False):
        """root's sendbuf holds size x recvbuf's elements; elsewhere it is ignored."""
        r, root = _array(recvbuf, True, "recvbuf"), self._root(root)
        s = self._at_root(root, sendbuf, "sendbuf", r, "recvbuf")
        return self._run("scatter", async_op,
                         (_ptr(s), _ptr(r), r.size, dtype_code(r.dtype), root), (s, r))

    def alltoall(self, sendbuf, recvbuf=None, async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        if s.size % self.size or r.size != s.size:
            raise ValueError(f"sendbuf and recvbuf must hold size x count elements "
                             f"({s.size}, {r.size})")
        return self._run("alltoall", async_op,
                         (_ptr(s), _ptr(r), s.size // self.size, dtype_code(s.dtype)), (s, r))

    def alltoallv(self, sendbuf, sendcounts, recvbuf, recvcounts, sdispls=None, rdispls=None,
                  async_op=False):
        """sendcounts[j] elements at sdispls[j] go to rank j; recvcounts[i] elements from
        rank i land at rdispls[i] (displacements default to the counts packed)."""
        s, r = self._pair(sendbuf, recvbuf)
        n = self.size
        sc, rc = _counts(sendcounts, n, "sendcounts"), _counts(recvcounts, n, "recvcounts")
        sd = _counts(_displs(sc) if sdispls is None else sdispls, n, "sdispls")
        rd = _counts(_displs(rc) if rdispls is None else rdispls, n, "rdispls")
        _within(s, sc, sd, "sendbuf")
        _within(r, rc, rd, "recvbuf")
        sc, sd, rc, rd = (_size_array(v) for v in (sc, sd, rc, rd))
        return self._run("alltoallv", async_op,
                         (_ptr(s), sc, sd, _ptr(r), rc, rd, dtype_code(s.dtype)),
                         (s, r, sc, sd, rc, rd))

    def send(self, buf, peer, tag=0, async_op=False):
        b, peer, tag = _array(buf, False, "buf"), _int(peer, "peer"), _int(tag, "tag", TAG_RANGE)
        return self._run("send", async_op, (_ptr(b), b.size, dtype_code(b.dtype), peer, tag), (b,))

    def recv(self, buf, peer, tag=0, async_op=False):
        b, peer, tag = _array(buf, True, "buf"), _int(peer, "peer"), _int(tag, "tag", TAG_RANGE)
        return self._run("recv", async_op, (_ptr(b), b.size, dtype_code(b.dtype), peer, tag), (b,))

    def sendrecv(self, sendbuf, dst, recvbuf, src, tag=0):
        s, r = self._pair(sendbuf, recvbuf)
        dst, src, tag = _int(dst, "dst"), _int(src, "src"), _int(tag, "tag", TAG_RANGE)
        self._check(self._call(lib.coll_sendrecv, _ptr(s), s.size, dst, _ptr(r), r.size, src,
                                      dtype_code(s.dtype), tag))


def _nonblocking(name):
    def method(self, *args, **kwargs):
        return getattr(self, name)(*args, async_op=True, **kwargs)
    method.__name__ = "i" + name
    method.__doc__ = f"{name}, returning a Request."
    return method


for _name in ("allreduce", "allreduce_ef", "reduce_scatter", "allgather", "allgatherv",
              "reduce_scatterv", "broadcast", "reduce", "gather", "scatter", "alltoall",
              "alltoallv", "send", "recv", "barrier"):
    setattr(Communicator, "i" + _name, _nonblocking(_name))
