"""libcollective from Python: a Communicator over numpy arrays and anything with the
buffer protocol (no copies: the library reads and writes the caller's memory).

    import collective, numpy as np
    comm = collective.Communicator("env://")        # or tcp://, file://, or a store
    x = np.ones(1024, np.float32)
    comm.allreduce(x)                                # in place, sum
    req = comm.iallreduce(x, op="avg"); req.wait()

Errors are CollectiveError (a RuntimeError) carrying the COLL_E* code and the library's
sentence. Every collective has a non-blocking form named i<name> returning a Request.
"""
import ctypes
import weakref

import numpy as np

from . import _lib
from ._lib import lib

__all__ = ["Communicator", "Request", "CollectiveError", "DTYPES", "OPS"]

# COLL_E* codes by name, and back.
CODES = {"OK": 0, "INPROGRESS": 1, "EINVAL": -1, "ENOMEM": -2, "ENOTSUP": -3, "ESYS": -4,
         "ETIMEDOUT": -5, "EPEER": -6, "EMISMATCH": -7, "EABORTED": -8, "ESTATE": -9,
         "EPROTO": -10}
_NAMES = {v: k for k, v in CODES.items()}
DTYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int8": 4, "uint8": 5,
          "int32": 6, "int64": 7}
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
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


def op_code(op):
    if isinstance(op, int) and op in OPS.values():
        return op
    if isinstance(op, str) and op.lower() in OPS:
        return OPS[op.lower()]
    raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")


def codec_code(codec):
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
    return CODECS[codec]


def _array(x, writable, what):
    """x as a contiguous numpy array over the same memory (never a copy)."""
    a = x if isinstance(x, np.ndarray) else np.asarray(memoryview(x))
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} must be contiguous (a copy would lose the result)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what} is read-only")
    return a


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data) if a is not None else None


def _sizes(values, n, what):
    if values is None or len(values) != n:
        raise ValueError(f"{what} needs one entry per rank ({n})")
    return (ctypes.c_size_t * n)(*[int(v) for v in values])


def _displs(counts):
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += int(c)
    return out


class Request:
    """A running operation. wait() returns once it is done (raising its error); test()
    says whether it is done without blocking. Keeps the buffers alive until then."""

    def __init__(self, comm, handle, keep):
        self._comm, self._h, self._keep, self._status = comm, handle, keep, None
        comm._reqs.add(self)

    def _orphan(self):
        """Its communicator closed first: the handle went with it, never touch it again."""
        if self._status is None:
            self._status, self._h, self._keep = CODES["ESTATE"], None, None

    def wait(self):
        if self._status is None:
            self._status = lib.coll_wait(self._h)
            self._h, self._keep = None, None
        _check(self._status, self._comm._h if self._comm._h else None)

    def test(self):
        if self._status is not None:
            return True
        done = ctypes.c_int(0)
        lib.coll_test(self._h, ctypes.byref(done))
        if done.value:
            self.wait()
        return bool(done.value)

    def __del__(self):
        if self._status is None and self._h:
            lib.coll_wait(self._h)


class _StoreBridge:
    """A caller's store behind coll_store_ops: store.set(key, bytes) and
    store.get(key, timeout_ms) -> bytes, or None when the key did not come in time."""

    def __init__(self, store):
        self.store, self.error = store, None
        self.ops = _lib.StoreOps(_lib.STORE_SET(self._set), _lib.STORE_GET(self._get))

    def _set(self, ctx, key, value, length):
        try:
            self.store.set(key.decode(), ctypes.string_at(value, length) if length else b"")
            return 0
        except Exception as e:  # the library gets a status; the reason is kept
            self.error = e
            return CODES["ESYS"]

    def _get(self, ctx, key, value, length, timeout_ms):
        try:
            data = self.store.get(key.decode(), timeout_ms)
        except Exception as e:
            self.error = e
            return CODES["ESYS"]
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
                 split_share=False, _handle=None):
        self._h = None
        self._reqs = weakref.WeakSet()  # requests not yet waited, orphaned by close()
        if _handle is not None:
            self._h = _handle
            return
        cfg = _lib.Config(ctypes.sizeof(_lib.Config), transport.encode() if transport else None,
                          device.encode() if device else None, int(timeout_ms),
                          codec_code(codec), int(segment_bytes), int(op_timeout_ms),
                          int(bool(split_share)))
        h = _lib.comm_p()
        if isinstance(url_or_store, str):
            rc = lib.coll_init(ctypes.byref(h), url_or_store.encode(), rank, size,
                               ctypes.byref(cfg))
        else:
            bridge = _StoreBridge(url_or_store)
            rc = lib.coll_init_store(ctypes.byref(h), ctypes.byref(bridge.ops), None, rank, size,
                                     ctypes.byref(cfg))
            if rc != 0 and bridge.error is not None:
                raise CollectiveError(rc, f"the store failed: {bridge.error!r}") from bridge.error
        _check(rc, None, "init: ")
        self._h = h.value

    # -- life cycle --------------------------------------------------------------------
    @property
    def rank(self):
        return lib.coll_rank(self._live())

    @property
    def size(self):
        return lib.coll_size(self._live())

    def _live(self):
        if not self._h:
            raise CollectiveError(CODES["ESTATE"], "the communicator is closed")
        return self._h

    def close(self):
        """Destroys the communicator; requests not yet waited then raise COLL_ESTATE."""
        if self._h:
            for req in list(self._reqs):
                req._orphan()
            lib.coll_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def abort(self):
        _check(lib.coll_abort(self._live()), self._h)

    def split(self, color, key=0):
        """A communicator of the ranks that gave the same color (None: this rank joins
        none and gets None), ordered by key then rank."""
        out = _lib.comm_p()
        _check(lib.coll_split(self._live(), -1 if color is None else int(color), int(key),
                              ctypes.byref(out)), self._h)
        return Communicator(_handle=out.value) if out.value else None

    def shrink(self):
        """After a failure: a communicator of the survivors (every survivor calls it)."""
        out = _lib.comm_p()
        _check(lib.coll_shrink(self._live(), ctypes.byref(out)), None, "shrink: ")
        return Communicator(_handle=out.value)

    def failed_ranks(self):
        ranks = (ctypes.c_int * self.size)()
        n = lib.coll_failed_ranks(self._live(), ranks, self.size)
        return list(ranks[:n])

    def set_codec(self, codec):
        _check(lib.coll_set_codec(self._live(), codec_code(codec)), self._h)

    def stats(self):
        s = _lib.Stats()
        _check(lib.coll_get_stats(self._live(), ctypes.byref(s)), self._h)
        return {f: getattr(s, f) for f, _ in _lib.Stats._fields_}

    def barrier(self):
        _check(lib.coll_barrier(self._live()), self._h)

    # -- operations --------------------------------------------------------------------
    def _run(self, name, async_op, args, keep):
        if async_op:
            req = _lib.req_p()
            _check(getattr(lib, f"coll_i{name}")(self._live(), *args, ctypes.byref(req)),
                   self._h)
            return Request(self, req, keep)
        _check(getattr(lib, f"coll_{name}")(self._live(), *args), self._h)
        return None

    def _pair(self, sendbuf, recvbuf):
        s = _array(sendbuf, False, "sendbuf")
        r = s if recvbuf is None else _array(recvbuf, True, "recvbuf")
        if r.dtype != s.dtype:
            raise TypeError(f"sendbuf is {s.dtype}, recvbuf {r.dtype}")
        return s, r

    def allreduce(self, sendbuf, recvbuf=None, op="sum", async_op=False):
        """Reduces every rank's sendbuf into recvbuf (None: in place)."""
        s, r = self._pair(sendbuf, recvbuf)
        if r.size != s.size:
            raise ValueError(f"recvbuf holds {r.size} elements, sendbuf {s.size}")
        return self._run("allreduce", async_op,
                         (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype), op_code(op)), (s, r))

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
                         (_ptr(s), _ptr(r), s.size, op_code(op), codec_code(codec), _ptr(e)),
                         (s, r, e))

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        if s.size != r.size * self.size:
            raise ValueError(f"sendbuf must hold size x {r.size} elements, not {s.size}")
        return self._run("reduce_scatter", async_op,
                         (_ptr(s), _ptr(r), r.size, dtype_code(s.dtype), op_code(op)), (s, r))

    def allgather(self, sendbuf, recvbuf, async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        if r.size != s.size * self.size:
            raise ValueError(f"recvbuf must hold size x {s.size} elements, not {r.size}")
        return self._run("allgather", async_op, (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype)),
                         (s, r))

    def allgatherv(self, sendbuf, recvbuf, counts, displs=None, async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        n = self.size
        c, d = _sizes(counts, n, "counts"), _sizes(displs or _displs(counts), n, "displs")
        return self._run("allgatherv", async_op,
                         (_ptr(s), s.size, _ptr(r), c, d, dtype_code(s.dtype)), (s, r, c, d))

    def reduce_scatterv(self, sendbuf, recvbuf, counts, op="sum", async_op=False):
        s, r = self._pair(sendbuf, recvbuf)
        c = _sizes(counts, self.size, "counts")
        return self._run("reduce_scatterv", async_op,
                         (_ptr(s), _ptr(r), c, dtype_code(s.dtype), op_code(op)), (s, r, c))

    def broadcast(self, buf, root=0, async_op=False):
        b = _array(buf, True, "buf")
        return self._run("broadcast", async_op, (_ptr(b), b.size, dtype_code(b.dtype), root), (b,))

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, async_op=False):
        """recvbuf matters at root only (None there: in place)."""
        s = _array(sendbuf, False, "sendbuf")
        r = None if recvbuf is None else _array(recvbuf, True, "recvbuf")
        if r is None and self.rank == root:
            r = s
        return self._run("reduce", async_op,
                         (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype), op_code(op), root),
                         (s, r))

    def gather(self, sendbuf, recvbuf=None, root=0, async_op=False):
        s = _array(sendbuf, False, "sendbuf")
        r = None if recvbuf is None else _array(recvbuf, True, "recvbuf")
        return self._run("gather", async_op,
                         (_ptr(s), _ptr(r), s.size, dtype_code(s.dtype), root), (s, r))

    def scatter(self, sendbuf, recvbuf, root=0, async_op=False):
        r = _array(recvbuf, True, "recvbuf")
        s = None if sendbuf is None else _array(sendbuf, False, "sendbuf")
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
        s, r = self._pair(sendbuf, recvbuf)
        n = self.size
        sc, rc = _sizes(sendcounts, n, "sendcounts"), _sizes(recvcounts, n, "recvcounts")
        sd = _sizes(sdispls or _displs(sendcounts), n, "sdispls")
        rd = _sizes(rdispls or _displs(recvcounts), n, "rdispls")
        return self._run("alltoallv", async_op,
                         (_ptr(s), sc, sd, _ptr(r), rc, rd, dtype_code(s.dtype)),
                         (s, r, sc, sd, rc, rd))

    def send(self, buf, peer, tag=0, async_op=False):
        b = _array(buf, False, "buf")
        return self._run("send", async_op, (_ptr(b), b.size, dtype_code(b.dtype), peer, tag), (b,))

    def recv(self, buf, peer, tag=0, async_op=False):
        b = _array(buf, True, "buf")
        return self._run("recv", async_op, (_ptr(b), b.size, dtype_code(b.dtype), peer, tag), (b,))

    def sendrecv(self, sendbuf, dst, recvbuf, src, tag=0):
        s, r = self._pair(sendbuf, recvbuf)
        _check(lib.coll_sendrecv(self._live(), _ptr(s), s.size, dst, _ptr(r), r.size, src,
                                 dtype_code(s.dtype), tag), self._h)


def _nonblocking(name):
    def method(self, *args, **kwargs):
        return getattr(self, name)(*args, async_op=True, **kwargs)
    method.__name__ = "i" + name
    method.__doc__ = f"{name}, returning a Request."
    return method


for _name in ("allreduce", "allreduce_ef", "reduce_scatter", "allgather", "allgatherv",
              "reduce_scatterv", "broadcast", "reduce", "gather", "scatter", "alltoall",
              "alltoallv", "send", "recv"):
    setattr(Communicator, "i" + _name, _nonblocking(_name))
