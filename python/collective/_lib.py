"""The C library through ctypes: where it is found, and the signatures used."""
import ctypes
import ctypes.util
import os

try:
    from . import _config  # written by meson install: where the library went
    _INSTALLED = _config.LIBDIR
except ImportError:
    _INSTALLED = None
# Where `pip install` put it: inside the package (meson.build's wheel option).
_WHEEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcollective.so")


def _load():
    tried = []
    names = []
    if os.environ.get("COLL_LIBRARY"):
        names.append(os.environ["COLL_LIBRARY"])
    if os.path.exists(_WHEEL):
        names.append(_WHEEL)
    if _INSTALLED:
        names.append(os.path.join(_INSTALLED, "libcollective.so.0"))
    names += ["libcollective.so.0", ctypes.util.find_library("collective")]
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError("libcollective not found (set COLL_LIBRARY to its path): " + "; ".join(tried))


lib = _load()

c_size_p = ctypes.POINTER(ctypes.c_size_t)
comm_p = ctypes.c_void_p
req_p = ctypes.c_void_p


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("transport", ctypes.c_char_p),
                ("device", ctypes.c_char_p), ("timeout_ms", ctypes.c_int),
                ("codec", ctypes.c_int), ("segment_bytes", ctypes.c_size_t),
                ("op_timeout_ms", ctypes.c_int), ("split_share", ctypes.c_int)]


class Stats(ctypes.Structure):
    _fields_ = [("ops", ctypes.c_uint64), ("bytes_in", ctypes.c_uint64),
                ("wire_tx", ctypes.c_uint64), ("wire_rx", ctypes.c_uint64),
                ("errors", ctypes.c_uint64)]


STORE_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                             ctypes.c_size_t)
STORE_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.POINTER(ctypes.c_void_p), c_size_p, ctypes.c_int)


class StoreOps(ctypes.Structure):
    _fields_ = [("set", STORE_SET), ("get", STORE_GET)]


_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_I = ctypes.c_int
_SIGS = {
    "coll_strerror": (ctypes.c_char_p, [_I]),
    "coll_last_error": (ctypes.c_char_p, [comm_p]),
    "coll_init": (_I, [ctypes.POINTER(comm_p), ctypes.c_char_p, _I, _I, ctypes.POINTER(Config)]),
    "coll_init_store": (_I, [ctypes.POINTER(comm_p), ctypes.POINTER(StoreOps), _P, _I, _I,
                             ctypes.POINTER(Config)]),
    "coll_split": (_I, [comm_p, _I, _I, ctypes.POINTER(comm_p)]),
    "coll_shrink": (_I, [comm_p, ctypes.POINTER(comm_p)]),
    "coll_grow_id": (_I, [comm_p, _I, ctypes.c_char_p, _SZ]),
    "coll_grow": (_I, [comm_p, ctypes.POINTER(comm_p)]),
    "coll_init_grow": (_I, [ctypes.POINTER(comm_p), ctypes.c_char_p, ctypes.POINTER(Config)]),
    "coll_init_interrupt": (_I, []),
    "coll_failed_ranks": (_I, [comm_p, ctypes.POINTER(_I), _I]),
    "coll_recorder_dump": (_I, [comm_p, ctypes.c_char_p]),
    "coll_comm_set_label": (_I, [comm_p, ctypes.c_char_p, ctypes.c_int]),
    "coll_abort": (_I, [comm_p]),
    "coll_destroy": (_I, [comm_p]),
    "coll_rank": (_I, [comm_p]),
    "coll_size": (_I, [comm_p]),
    "coll_set_codec": (_I, [comm_p, _I]),
    "coll_get_stats": (_I, [comm_p, ctypes.POINTER(Stats)]),
    "coll_test": (_I, [req_p, ctypes.POINTER(_I)]),
    "coll_wait": (_I, [req_p]),
    "coll_sendrecv": (_I, [comm_p, _P, _SZ, _I, _P, _SZ, _I, _I, ctypes.c_uint32]),
}
_RQ = ctypes.POINTER(req_p)
# Operations with a non-blocking form: (name, argument types before the request).
_OPS = {
    "allreduce": [comm_p, _P, _P, _SZ, _I, _I],
    "reduce_scatter": [comm_p, _P, _P, _SZ, _I, _I],
    "allgather": [comm_p, _P, _P, _SZ, _I],
    "broadcast": [comm_p, _P, _SZ, _I, _I],
    "reduce": [comm_p, _P, _P, _SZ, _I, _I, _I],
    "gather": [comm_p, _P, _P, _SZ, _I, _I],
    "scatter": [comm_p, _P, _P, _SZ, _I, _I],
    "alltoall": [comm_p, _P, _P, _SZ, _I],
    "alltoallv": [comm_p, _P, c_size_p, c_size_p, _P, c_size_p, c_size_p, _I],
    "allgatherv": [comm_p, _P, _SZ, _P, c_size_p, c_size_p, _I],
    "reduce_scatterv": [comm_p, _P, _P, c_size_p, _I, _I],
    "allreduce_ef": [comm_p, _P, _P, _SZ, _I, _I, _P],
    "send": [comm_p, _P, _SZ, _I, _I, ctypes.c_uint32],
    "recv": [comm_p, _P, _SZ, _I, _I, ctypes.c_uint32],
    "barrier": [comm_p],
}
for name, (res, args) in _SIGS.items():
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = res, args
for name, args in _OPS.items():
    for fname, extra in ((f"coll_{name}", []), (f"coll_i{name}", [_RQ])):
        fn = getattr(lib, fname)
        fn.restype, fn.argtypes = _I, args + extra

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
