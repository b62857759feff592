"""Two distributions' torch bugs that stop torchrun before any worker starts, mended
where collective.torch or collective.torchrun is imported (each a no-op where torch has no
such bug).

TCPStore: torch asks for its libuv server unless told otherwise (use_libuv=True, the
default since torch 2.4), and a torch built without libuv (Debian 13's 2.6) refuses that
at once ("use_libuv was requested but PyTorch was build without libuv support").
torchrun's agent and its workers' env:// rendezvous build stores that way and never read
USE_LIBUV, so torchrun fails there whatever the backend.

Std.from_str: torch 1.13 (Debian 12) finds an enum member by iterating over Std, and
Python 3.11 no longer yields its zero member, so torchrun's default "--redirects 0"
parses to None and the agent fails ("'NoneType' object has no attribute 'get'")."""
import sys

import torch.distributed as dist

_REFUSAL = "without libuv support"
_USE_LIBUV_POS = 8  # use_libuv's place among TCPStore's positional parameters


def _store_fallback(base):
    class TCPStore(base):
        __doc__ = base.__doc__
        _collective_fallback = True

        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            except RuntimeError as e:
                asked = "use_libuv" in kwargs or len(args) > _USE_LIBUV_POS
                if asked or _REFUSAL not in str(e):
                    raise
                super().__init__(*args, use_libuv=False, **kwargs)
    TCPStore.__name__ = TCPStore.__qualname__ = base.__name__
    TCPStore.__module__ = base.__module__
    return TCPStore


def store_without_libuv():
    """A TCPStore that did not ask for libuv by name falls back to the classic server where
    torch has no libuv. Modules of torch.distributed already loaded that hold TCPStore by
    name (rendezvous.py does) get the fallback too; idempotent."""
    base = dist.TCPStore
    if getattr(base, "_collective_fallback", False):
        return
    store = _store_fallback(base)
    for name, mod in list(sys.modules.items()):
        if (name == "torch.distributed" or name.startswith("torch.distributed.")) and \
                getattr(mod, "TCPStore", None) is base:
            mod.TCPStore = store


def std_parse():
    """torchrun's --redirects/--tee values parse to Std members again ("0" is Std.NONE)."""
    from torch.distributed.elastic.multiprocessing import api
    std = api.Std
    if std.from_str("0") is not None:
        return
    parse = std.from_str.__func__

    def from_str(cls, vm):
        parse(cls, vm)  # refuses what torchrun would refuse
        if ":" not in vm:
            return cls(int(vm))
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    std.from_str = classmethod(from_str)
