"""Ctrl-C inside a blocking call. ctypes lets the GIL go while the library waits, but
Python runs a signal's handler on the main thread only once that thread is back in the
interpreter: a KeyboardInterrupt waited for the call to end, and for good while a peer
never came (until the operation timeout, 30 min by default).

The main thread marks the communicator it calls into (enter, leave: a compare and a
store per call; waiting on a non-blocking request in slices instead would cost every
small collective a hand-off to the library's thread and back). A thread of this module
reads the interpreter's wakeup fd (signal.set_wakeup_fd: the signal's C handler writes
its number there, on whichever thread it lands) and, for a SIGINT whose handler is
Python's default (it raises KeyboardInterrupt), aborts the marked communicator: its
call returns COLL_EABORTED, the handler raises as it returns, and the communicator
stays aborted (its links close, so the peers fail at once rather than at their timeout;
a later call here raises, saying why). Another handler runs as before, once the call
ends: it may not mean to stop the job.

The wakeup fd is taken at the main thread's first call; one set before (asyncio's) is
handed every signal byte this module reads. One set after replaces this one, and Ctrl-C
inside a call then waits for its end, as before."""
import _thread
import os
import signal
import threading

_main = [threading.main_thread().ident]
_blocked = [None]  # the communicator the main thread is inside a call on
_watch = [None]  # this process's _Watch; False: the wakeup fd could not be taken


OTHER = object()  # enter's answer on a thread other than the main one


def enter(comm):
    """Marks comm as the one the main thread calls into, and returns the one marked before
    (a collector's pass can run a Request's __del__ between a call's enter and its C
    call), for leave; OTHER on any other thread."""
    if _thread.get_ident() != _main[0]:
        return OTHER
    if _watch[0] is None:
        _install()
    before, _blocked[0] = _blocked[0], comm
    return before


def leave(before):
    """The call enter marked returned (or never began): before, enter's answer, again."""
    if before is not OTHER:
        _blocked[0] = before


class _Watch:
    """The pipe the wakeup fd writes into, and the fd set before it (None: none)."""

    def __init__(self):
        self.r, self.w = os.pipe()  # not inherited by exec'd children
        os.set_blocking(self.w, False)  # as set_wakeup_fd asks: a full pipe never blocks
        self.forward = None

    def close(self):
        os.close(self.r)
        os.close(self.w)


def _install():
    w = _Watch()
    try:
        old = signal.set_wakeup_fd(w.w, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread after all (an embedded interpreter)
        w.close()
        _watch[0] = False
        return
    w.forward = None if old == -1 else old
    _watch[0] = w
    threading.Thread(target=_run, args=(w,), daemon=True, name="collective-signals").start()


def _run(w):
    while True:
        try:
            data = os.read(w.r, 64)
        except OSError:  # closed: a forked child let the parent's pipe go
            return
        if not data:
            return
        if w.forward is not None:
            try:
                os.write(w.forward, data)
            except OSError:
                pass  # the owner's fd is full or gone: as the interpreter's own write
        if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            comm = _blocked[0]
            if comm is not None:
                comm._interrupt()


def _after_fork():
    """A forked child: its signals must not wake the parent's thread (the pipe is the
    parent's too); the wakeup fd goes back to the one set before, and the child's first
    call takes one of its own."""
    _main[0], _blocked[0] = _thread.get_ident(), None
    w, _watch[0] = _watch[0], None
    if w:
        try:
            signal.set_wakeup_fd(-1 if w.forward is None else w.forward)
        except (ValueError, OSError):
            pass
        w.close()


os.register_at_fork(after_in_child=_after_fork)
