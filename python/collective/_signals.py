"""Ctrl-C inside a blocking call. ctypes lets the GIL go while the library waits, but
Python runs a signal's handler on the main thread only once that thread is back in the
interpreter: a KeyboardInterrupt waited for the call to end, and for good while a peer
never came (until the operation timeout, 30 min by default).

The main thread marks the communicator it calls into (enter, leave: a compare and a
store per call; waiting on a non-blocking request in slices instead would cost every
small collective a hand-off to the library's thread and back). A thread of this module
reads the interpreter's wakeup fd (signal.set_wakeup_fd: the signal's C handler writes
its number there, on whichever thread it lands) and, for a SIGINT whose handler is
Python's default (it raises KeyboardInterrupt), aborts the marked communicator where its
call has not returned 0.1 s later (GRACE_S; one that did keeps its communicator): the
call returns COLL_EABORTED, the handler raises as it returns, and the communicator
stays aborted (its links close, so the peers fail at once rather than at their timeout;
a later call here raises, saying why). Another handler runs as before, once the call
ends: it may not mean to stop the job. A SIGINT that came before the call began is left
alone (its KeyboardInterrupt was raised already, and the caller may have caught it to run
a last collective): the thread can take the GIL milliseconds after the signal, by which
time the main thread may be inside a later call, so the wakeup fd is a datagram socket
that stamps each signal's byte with the kernel's time, set against the call's start.

The wakeup fd is taken at the main thread's first call; one set before (asyncio's) is
handed every signal byte this module reads. One set after replaces this one, and Ctrl-C
inside a call then waits for its end, as before."""
import _thread
import os
import signal
import socket
import struct
import threading
import time

_main = [threading.main_thread().ident]
_blocked = [None]  # the communicator the main thread is inside a call on
_watch = [None]  # this process's _Watch; False: the wakeup fd could not be taken
_since = [0]  # time.time_ns() as the main thread entered the call marked in _blocked
_held = [None]  # hold's SIGINT handler while it stands for Python's default
_now = time.time_ns  # the clock of SO_TIMESTAMPNS's stamps (CLOCK_REALTIME)
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's number, not in 3.11
_STAMP = struct.Struct("@ll")  # the stamp's struct timespec


OTHER = object()  # enter's answer on a thread other than the main one
GRACE_S = 0.1  # how long a call inside which SIGINT came may take to return by itself


def enter(comm):
    """Marks comm as the one the main thread calls into, and returns the one marked before
    (a collector's pass can run a Request's __del__ between a call's enter and its C
    call), for leave; OTHER on any other thread."""
    if _thread.get_ident() != _main[0]:
        return OTHER
    if _watch[0] is None:
        _install()
    before, _blocked[0] = _blocked[0], comm
    _since[0] = _now()
    return before


def leave(before):
    """The call enter marked returned (or never began): before, enter's answer, again."""
    if before is not OTHER:
        _blocked[0] = before


def hold(interrupt):
    """On the main thread under Python's default SIGINT handler: until release, a SIGINT
    calls interrupt() instead of raising, and this module's thread treats it as the
    default's. For a call during which Python code of others runs on the main thread (a
    store's callbacks in an init): a KeyboardInterrupt raised there would leave a ctypes
    callback, which prints it and loses it. Returns what release takes."""
    if (_thread.get_ident() != _main[0] or
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return None
    handler = lambda signum, frame: interrupt()
    signal.signal(signal.SIGINT, handler)
    _held[0] = handler
    return handler


def release(held):
    """hold's handler goes; Python's default is SIGINT's again."""
    if held is not None:
        _held[0] = None
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Watch:
    """The socket pair the wakeup fd writes into (a datagram a signal, stamped with its
    time where the kernel can), and the fd set before it (None: none)."""

    def __init__(self):
        # Not inherited by exec'd children. It holds 278 signals unread here (a datagram
        # each; a pipe held 64 Ki), whose bytes a burst beyond loses, as a full pipe's:
        # the thread reads each once it has the GIL (a switch interval, 5 ms, while the
        # main thread runs Python).
        self.r, self.w = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.w.setblocking(False)  # as set_wakeup_fd asks: a full socket never blocks
        try:
            self.r.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # no stamps: every SIGINT aborts the call marked as it is read
        self.forward = None

    def close(self):
        self.r.close()
        self.w.close()


def _install():
    w = _Watch()
    try:
        old = signal.set_wakeup_fd(w.w.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread after all (an embedded interpreter)
        w.close()
        _watch[0] = False
        return
    w.forward = None if old == -1 else old
    _watch[0] = w
    threading.Thread(target=_run, args=(w,), daemon=True, name="collective-signals").start()


def _run(w):
    space = socket.CMSG_SPACE(_STAMP.size)
    while True:
        try:
            data, ancillary, _, _ = w.r.recvmsg(64, space)
        except OSError:  # closed: a forked child let the parent's socket go
            return
        if w.forward is not None:
            try:
                os.write(w.forward, data)
            except OSError:
                pass  # the owner's fd is full or gone: as the interpreter's own write
        handler = signal.getsignal(signal.SIGINT)
        held = _held[0]
        if signal.SIGINT in data and (handler is signal.default_int_handler or
                                      (held is not None and handler is held)):
            comm, since, sent = _blocked[0], _since[0], _sent(ancillary)
            if comm is not None and (sent is None or sent >= since) and _stays(comm, since):
                comm._interrupt()


def _stays(comm, since):
    """Whether the main thread is still inside the call on comm it began at since, GRACE_S
    after the signal was read. One that returns meanwhile (most do: a signal lands inside
    whichever short call runs) gets its KeyboardInterrupt from Python as it returns, its
    communicator usable, as a Gloo group stays: a caller may catch it to run a last
    collective. Only a call still waiting then is aborted."""
    deadline = time.monotonic() + GRACE_S
    while _blocked[0] is comm and _since[0] == since:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.002)
    return False


def _sent(ancillary):
    """The kernel's time (ns) the signal's byte was written at; None where not stamped."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _STAMP.size:
            s, ns = _STAMP.unpack_from(data)
            return s * 1_000_000_000 + ns
    return None


def _after_fork():
    """A forked child: its signals must not wake the parent's thread (the socket is the
    parent's too); the wakeup fd goes back to the one set before where it is still this
    module's, and the child's first call takes one of its own. Where another has
    replaced it since (asyncio's loop ending sets none, and its socket's number may have
    gone to any file), the child keeps what the parent had."""
    _main[0], _blocked[0] = _thread.get_ident(), None
    held, _held[0] = _held[0], None
    try:  # forked while the main thread held SIGINT for an init: the child's is Python's
        if held is not None and signal.getsignal(signal.SIGINT) is held:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # forked from a thread other than the main one
        pass
    w, _watch[0] = _watch[0], None
    if w:
        try:
            now = signal.set_wakeup_fd(-1)
            back = w.forward if now == w.w.fileno() else now
            if back not in (None, -1):
                signal.set_wakeup_fd(back)
        except (ValueError, OSError):
            pass
        w.close()


os.register_at_fork(after_in_child=_after_fork)
