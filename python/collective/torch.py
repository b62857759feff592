"""A torch.distributed backend named "collective" (import collective.torch registers it):

    import collective.torch
    torch.distributed.init_process_group("collective")   # torchrun, env:// or any init_method

The backend meets through the store torch hands it (coll_init_store: no second port). The
backend is never told async_op: a collective is held back for a moment (_Slot), and a
wait() that comes first (torch's async_op=False waits at once, from Python or C++) runs
the library's blocking form on the waiting thread; anything else (the next operation,
get_future, is_completed, or the moment passing) starts its non-blocking form, and
get_future() hands it to a thread that settles the future when it ends. CPU tensors of
float32/64, float16, bfloat16, int8/32/64, uint8 and bool (as Gloo: a sum is an or, a
product an and); non-contiguous tensors go through a contiguous copy. On torch 2.x, its
C++ side (the functional collectives, DTensor) reaches the group through torch's Python
trampoline: the group keeps the name torch gives it, and implements the coalesced forms
those call. Each operation checks what Gloo checks (roots, list lengths, each tensor's
size and dtype) on the calling rank before anything is sent; a work's get_future()
returns at once. The group's methods take what torch's binding takes, keywords included
(_as_binding). Each send carries a header (tag, size) ahead of its tensor, so that a
receive learns its sender and takes the first message with its tag, as Gloo's: the
library matches messages in order per peer (see _Inbox). COLL_CODEC (or COLL_* variables
in general) reach the library as for C programs; set_codec(codec, group) switches a
group's wire codec, and ef_hook is a DDP communication hook that averages gradients
through a codec with error feedback. Ctrl-C on the main thread inside an operation or a
wait raises KeyboardInterrupt within 0.1 s; an operation it leaves running is aborted
with the group's communicator, one that returned by itself meanwhile fails alone
(collective's _signals; _PyWork.wait).
"""
import ctypes
import datetime
import functools
import inspect
import numbers
import os
import re
import threading
import time

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

import collective
from collective import _signals, _torchcompat

_torchcompat.store_without_libuv()  # torchrun's workers on a torch without libuv

# bool as its bytes (0 or 1; reduced as _reduction says), as Gloo takes it: DDP broadcasts
# a model's buffers, and a causal mask is often one. Ahead of uint8, which _BY_CODE names.
_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.bfloat16: "bfloat16", torch.int8: "int8", torch.bool: "uint8",
           torch.uint8: "uint8", torch.int32: "int32", torch.int64: "int64"}
_OPS = [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.PRODUCT, "prod"), (dist.ReduceOp.MIN, "min"),
        (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.BAND, "band"), (dist.ReduceOp.BOR, "bor"),
        (dist.ReduceOp.BXOR, "bxor")]
_BITWISE = {collective.OPS[name]: name.upper() for name in ("band", "bor", "bxor")}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS.append((dist.ReduceOp.AVG, "avg"))


def _dtype(t):
    if t.device.type != "cpu":
        raise RuntimeError(f"collective: tensors must be on the CPU, not {t.device}")
    if t.layout != torch.strided:
        raise RuntimeError(f"collective: only dense tensors are supported, not {t.layout}")
    if t.dtype not in _DTYPES:
        raise RuntimeError(f"collective: dtype {t.dtype} is not supported "
                           f"({', '.join(str(d) for d in _DTYPES)})")
    return collective.DTYPES[_DTYPES[t.dtype]]


def _op(op):
    for known, name in _OPS:
        if op == known:
            return collective.OPS[name]
    raise RuntimeError(f"collective: reduce op {getattr(op, 'op', op)} is not supported")


def _reduction(opts, t):
    """The library's op for opts.reduceOp (default SUM) on tensors of t's dtype, and the
    factor PREMUL_SUM multiplies each rank's input by before its SUM (None for any other
    op). torch 2.x pickles the factor with the op (__getstate__: (PREMUL_SUM, factor));
    1.13 does not."""
    # torch's binding also takes the op alone (allreduce(tensor, op))
    op = getattr(opts, "reduceOp", opts) if opts is not None else dist.ReduceOp.SUM
    if isinstance(op, int):  # torch 2.x's ops compare equal to ints: 1 would be AVG
        raise TypeError(f"collective: {op!r} is not a reduce op or reduce options")
    if hasattr(dist.ReduceOp, "PREMUL_SUM") and op == dist.ReduceOp.PREMUL_SUM:
        state = op.__getstate__()
        if not isinstance(state, tuple):
            raise RuntimeError("collective: PREMUL_SUM's factor cannot be read on torch "
                               f"{torch.__version__}")
        code, factor = collective.OPS["sum"], state[1]
    else:
        code, factor = _op(op), None
    if code in _BITWISE and t.dtype.is_floating_point:
        # refused here, on every rank, as Gloo does, not by the library: its refusal
        # (COLL_EINVAL) would fail the communicator, and with it the group
        raise RuntimeError(f"collective: Cannot use ReduceOp.{_BITWISE[code]} with "
                           f"non-integral dtype {t.dtype}: BAND, BOR and BXOR take "
                           "integer or bool tensors")
    return (_on_bool(code, factor), None) if t.dtype == torch.bool else (code, factor)


# bool's reductions as Gloo's (C++'s bool arithmetic): a sum is an or, a product an and,
# which on a bool tensor's bytes (0 or 1, reduced as uint8) are max and min; the bitwise
# ops on those bytes are bool's own and, or and xor.
_ON_BOOL = {collective.OPS[a]: collective.OPS[b]
            for a, b in (("sum", "max"), ("prod", "min"), ("min", "min"), ("max", "max"),
                         ("band", "band"), ("bor", "bor"), ("bxor", "bxor"))}


def _on_bool(code, factor):
    if factor is not None or code not in _ON_BOOL:
        raise RuntimeError("collective: bool tensors reduce by SUM, PRODUCT, MIN, MAX, BAND, "
                           "BOR or BXOR only")
    return _ON_BOOL[code]


def _scaled(t, factor):
    """t times factor in a new tensor (t itself when factor is None)."""
    return t if factor is None else t * factor


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def _flat(t):
    """t itself when contiguous, else a contiguous copy and how to copy the result back."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, lambda: t.copy_(c)


class _Store:
    """torch's c10d store as the library's: get waits up to timeout_ms. A look (0) is a
    compare_set that cannot match: c10d reads a zero wait as no limit at all, this
    torch's Python stores have no check(), and with a 1 ms wait instead, later gets
    failed here with "Socket Timeout"."""

    def __init__(self, store):
        self.store = store

    def set(self, key, value):
        self.store.set(key, value)

    _ABSENT = b"\x00collective: absent\x00"

    def get(self, key, timeout_ms):
        if timeout_ms <= 0:
            v = self.store.compare_set(key, self._ABSENT, self._ABSENT)
            return None if v == self._ABSENT else v
        try:
            self.store.wait([key], datetime.timedelta(milliseconds=timeout_ms))
        except RuntimeError:
            return None
        return self.store.get(key)


class _Completer:
    """Ends each operation handed off on a thread of its own and settles its future:
    torch's C++ side (DDP's reducer, parameter checks) waits on work objects without
    calling back into Python, so a work must be a future that completes by itself.
    coll_wait releases the GIL while it waits. A thread per operation, not one for all:
    a then-callback runs on the thread that settles, and one that waits for another
    operation's future (torch's PowerSGD hook does) would wait on that same thread for
    good."""

    def __init__(self):
        self.mu, self.threads = threading.Lock(), set()
        # The group's last work whose tensors let it go (_PyWork._unlink), kept until the
        # group's next operation: C++ may still ask it once more right after the waits
        # counted (DDP's reducer, under Join, waits on the forward pass's work and then
        # takes its future for the value).
        self.last = None
        # Works C++ may still ask for (not ended, or waited fewer times than it may), by
        # id, oldest first, at most _PENDING (the oldest leave first): held here, not only
        # by their result tensors, so that a collector's pass cannot free one that C++
        # holds while nothing in Python does (DDP's reducer under Join: its forward pass's
        # work, whose tensor only C++ keeps, waited in the backward pass; freed, C++'s own
        # wait waited for good). One waited at least once but fewer times than counted (a
        # coalesced call from Python, waited once for all its outputs) leaves at the
        # group's next operation (asked), kept then by its tensors only, and is freed by
        # the collector as before.
        # A work nobody waits on or asks (a Python caller's async_op=True work, dropped)
        # leaves only when _PENDING newer such works push it out or the group aborts
        # (destroy_process_group): till then the group holds its result tensors, its
        # temporaries (a list-form all_gather's or gather's size x input, a coalesced
        # call's concatenation) and its request, and a list form's outputs stay unfilled
        # (the copy back runs at a wait; Gloo's are filled as the operation ends). After
        # the abort its result tensors keep it (_KEPT), temporaries too, until the caller
        # lets them go and the collector runs. Not released sooner: whether C++ still
        # holds a work cannot be told from here, and a lock-free settle at abort would
        # race _take. (torch 1.13 and 2.6: a dropped 4 MiB all_gather stayed through 70
        # later operations, its outputs zeros.) The last work waited (last) holds only its
        # tensors, until the next operation or the abort (last_before_destroy).
        # Plain dict and list operations, atomic under the GIL: no lock that a collector's
        # pass (a group's __del__ joining a completer) could wait on.
        self.pending, self.asked = {}, []

    def keep(self, work):
        p = self.pending
        p[id(work)] = work
        while len(p) > _PENDING:
            try:
                p.pop(next(iter(p)), None)
            except (StopIteration, RuntimeError):  # emptied or changed meanwhile
                break

    def release(self, work):
        self.pending.pop(id(work), None)

    def next_operation(self):
        """The group starts an operation: the works waited at least once leave pending,
        and the last one let go (last) is freed if nobody holds it."""
        asked, self.asked, self.last = self.asked, [], None
        for w in asked:
            self.pending.pop(id(w), None)

    def add(self, req, after, result):
        """A future that settles when req ends (after `after` ran) with result."""
        fut = torch.futures.Future()
        t = threading.Thread(target=self._run, args=(req, after, result, fut), daemon=True,
                             name="collective-completer")
        with self.mu:
            self.threads.add(t)
        t.start()
        return fut

    def _run(self, *item):
        try:
            _settle(*item)
        finally:
            with self.mu:
                self.threads.discard(threading.current_thread())

    def stop(self):
        """Waits for the completers, but the calling one (a collector's pass there freed
        the group)."""
        with self.mu:
            running = list(self.threads - {threading.current_thread()})
        for t in running:
            t.join()


def _settle(req, after, result, fut):
    """Ends req, runs after, and settles fut whatever either raises: the completer thread
    and every later work depend on it surviving (a copy into a bad output fails the work
    it belongs to, nothing else)."""
    try:
        if req is not None:
            req.wait()
        if after:
            after()
    except collective.CollectiveError as e:
        fut.set_exception(RuntimeError(str(e)))
        return
    except Exception as e:  # noqa: BLE001  the work fails with it, as torch's own works do
        fut.set_exception(e)
        return
    except BaseException:
        # A KeyboardInterrupt in the wait (Ctrl-C, collective._signals): raised on, the
        # work failed so that a later wait on it (C++'s too) does not wait for good.
        fut.set_exception(RuntimeError(_INTERRUPTED))
        raise
    fut.set_result(result)


_INTERRUPTED = "collective: the operation was interrupted on this rank (KeyboardInterrupt)"


def _op_over(req):
    """Whether req's operation is over in the library though a KeyboardInterrupt came out
    of its wait: Python raised it as the blocking call or coll_wait returned (the signal
    landed inside a short one, collective._signals), so the group may stay usable, as a
    Gloo group does. False where it may run on (a wait cut short in Python: on another
    thread's coll_wait, a receive's match): the group's abort must end it."""
    if req is None:
        return True
    if isinstance(req, _Launch):
        if req.ran or req.error is not None:
            return True
        req = req.req
    return isinstance(req, collective.Request) and req._status is not None


_HEADER = 3  # int64s ahead of each message sent: its tag, elements and dtype
_HEADER_TAG = 0  # the library's tag for headers (the tensor goes with the caller's)
_BY_CODE = {collective.DTYPES[name]: dt for dt, name in _DTYPES.items()}


def _header(tag, t):
    return torch.tensor([tag, t.numel(), _dtype(t)], dtype=torch.int64)


def _head_args(head, peer):
    return (_ptr(head), _HEADER, collective.DTYPES["int64"], peer, _HEADER_TAG)


def _misfit(t, n, code):
    """Why t cannot take a message of n elements of dtype code (None: it can)."""
    if code == _dtype(t) and n == t.numel():
        return None
    got = f"{n} x {_BY_CODE[code]}" if code in _BY_CODE else f"dtype code {code}"
    return f"collective: recv: the message holds {got}, the tensor {t.numel()} x {t.dtype}"


class _Ask:
    """A receive the inbox matches: from src (None: any rank) with tag, into t; once
    matched, the sender and the request its tensor arrives by (into t, or into buf, a
    message that came before it was asked for)."""

    def __init__(self, inbox, src, tag, t):
        self.inbox, self.src, self.tag, self.t = inbox, src, tag, t
        self.came = threading.Event()
        self.source, self.req, self.buf, self.error = -1, None, None, None
        self.driven = False  # a thread waits on it, taking its rank's headers (drive)

    def wants(self, peer, tag):
        return self.src in (None, peer) and self.tag == tag

    def found(self, source, req, buf=None, error=None):
        self.source, self.req, self.buf, self.error = source, req, buf, error
        self.came.set()

    def test(self):
        return self.came.is_set() and (self.req is None or self.req.test())

    def wait(self):
        """Waits for a message, within the group's timeout (as Gloo), then its tensor. A
        receive from one rank waits in the library (drive), whose timeout then fails the
        group, as a Gloo pair's does; a receive from any source is withdrawn alone."""
        if self.src is not None:
            self.inbox.drive(self)
        ms = self.inbox.ms
        if not self.came.wait(ms / 1000 if ms else None) and self.inbox.withdraw(self):
            whom = "any source" if self.src is None else f"rank {self.src}"
            raise RuntimeError(f"collective: recv from {whom} (tag {self.tag}): no message "
                               f"came in {ms} ms")
        self.came.wait()
        if self.req is not None:
            self.req.wait()
        if self.error:
            raise RuntimeError(self.error)
        if self.buf is not None:
            self.t.copy_(self.buf)
            self.buf = None


class _Inbox:
    """Receives matched by the senders' headers: the library matches messages in order
    per peer, and a receive takes the first message with its tag, as Gloo's do, whatever
    came before it with other tags (a tensor received blindly after its header failed the
    group at the first message of another tag). A header receive is posted to each rank
    a receive waits for; a thread polls them while any are posted (coll_test: a receive
    never waited for does not time out, so one posted to a rank that sends nothing more
    is harmless), and a receive from one rank waited on takes its rank's headers itself
    (drive). A message no receive has asked for yet is taken into a buffer of its own."""

    def __init__(self, comm, timeout_ms):
        self.comm, self.ms = comm, timeout_ms
        self.rank = comm.rank  # read once: each read is a call into the library (a lock)
        self.mu = threading.Lock()
        self.wake = threading.Condition(self.mu)
        self.heads = {}  # peer -> (header tensor, its request), posted
        self.early = []  # (peer, tag, buffer, request): came before a receive asked
        self.asks = []  # _Ask, in the order asked
        self.thread, self.closed, self.resting = None, False, False

    def receive(self, src, tag, t):
        """An _Ask for the message from src (None: any rank) with tag, into t."""
        with self.mu:
            if self.closed:
                raise RuntimeError(_SHUT)
            ask = _Ask(self, src, tag, t)
            for e in self.early:
                if ask.wants(e[0], e[1]):
                    self.early.remove(e)
                    ask.found(e[0], e[3], e[2], _misfit(t, e[2].numel(), _dtype(e[2])))
                    return ask
            self.asks.append(ask)
            self._listen(range(self.comm.size) if src is None else [src], src is None)
            return ask

    def drive(self, ask):
        """Takes the headers of ask's rank on the waiting thread until ask is matched (or
        failed): a blocking receive waits for its message, not for the poller's next look."""
        ask.driven = True
        while not ask.came.is_set():
            with self.mu:
                posted = self.heads.get(ask.src)
            if posted is None:  # closed: the ask fails
                return
            try:
                posted[1].wait()
            except collective.CollectiveError:
                pass  # _look hands it to the asks
            with self.mu:
                if self.heads.get(ask.src) is posted:  # the poller has not taken it
                    self._look(ask.src)

    def withdraw(self, ask):
        """Takes back an ask nothing matched yet; False if something did."""
        with self.mu:
            if ask in self.asks:
                self.asks.remove(ask)
                return True
            return False

    def close(self):
        """Fails the asks still waiting; the group's close aborts the posted receives."""
        with self.mu:
            self.closed = True
            for ask in self.asks:
                ask.found(-1, None, error=_SHUT)
            self.asks = []
            self.wake.notify_all()

    def _listen(self, peers, look=True):
        """Posts a header receive to each of peers that has none; the poller looks at once
        if look (a receive from one rank is mostly waited on at once, and drive takes its
        headers: the poller's wake-up cost more than the receive) or if it rests."""
        for p in peers:
            if p != self.rank and p not in self.heads:
                head = torch.empty(_HEADER, dtype=torch.int64)
                self.heads[p] = head, self.comm._run("recv", True, _head_args(head, p), (head,))
        if self.thread is None:
            self.thread = threading.Thread(target=self._poll, daemon=True,
                                           name="collective-inbox")
            self.thread.start()
        elif look or self.resting:
            self.wake.notify_all()

    def _poll(self):
        pause = _PAUSE[0]
        with self.mu:
            while not self.closed:
                # Kept a while for the next receive: a thread started per receive cost
                # more than the receive.
                if not self.heads:
                    self.resting = True
                    self.wake.wait(_PAUSE[3])
                    self.resting = False
                    if not self.heads:
                        break
                came = [p for p in list(self.heads) if self._look(p)]
                # Quick while receives wait (but those a waiting thread drives itself),
                # slower while only leftover headers are posted.
                idle = all(a.driven for a in self.asks)
                pause = _PAUSE[0] if came else min(2 * pause, _PAUSE[2 if idle else 1])
                self.wake.wait(pause)
            self.thread = None

    def _look(self, p):
        """Whether p's header came (then it is dealt with)."""
        head, req = self.heads[p]
        try:
            if not req.test():
                return False
            req.wait()  # its error, whichever thread collected it (drive or test)
            del self.heads[p]
            self._arrived(p, *head.tolist())
        except (collective.CollectiveError, RuntimeError) as e:
            self.heads.pop(p, None)
            for ask in [a for a in self.asks if a.src in (None, p)]:
                self.asks.remove(ask)
                ask.found(p, None, error=str(e))
        return True

    def _arrived(self, p, tag, n, code):
        """p's header: its tensor goes to the first ask that wants it, or to a buffer."""
        if code not in _BY_CODE or n < 0:
            raise RuntimeError(f"collective: recv: rank {p} sent a header this backend "
                               f"did not write: {[tag, n, code]}")
        ask = next((a for a in self.asks if a.wants(p, tag)), None)
        misfit = _misfit(ask.t, n, code) if ask else None
        into = ask.t if ask and not misfit else torch.empty(n, dtype=_BY_CODE[code])
        req = self.comm._run("recv", True, (_ptr(into), n, code, p, tag), (into,))
        if ask:
            self.asks.remove(ask)
            ask.found(p, req, error=misfit)
        else:
            self.early.append((p, tag, into, req))
        if any(a.src in (None, p) for a in self.asks):
            self._listen([p])


_SHUT = "COLL_EABORTED: aborted: collective: recv: the process group was shut down"
_PAUSE = (20e-6, 1e-3, 20e-3, 1.0)  # seconds between looks: after an arrival, longest
#                                     while receives wait, longest otherwise; and how
#                                     long the poller waits for a header to look at


class _Launch:
    """A collective handed to the group's _Slot, with wait() and test() as a request's:
    wait() runs it on the calling thread while the slot still holds it, else waits for
    the request it was started as."""

    def __init__(self, slot, name, args, keep):
        self.slot, self.name, self.args, self.keep = slot, name, args, keep
        self.req, self.error = None, None
        self.ran = False  # run on a waiting thread: it returned, or never will (_op_over)

    def start(self):
        """The non-blocking form (the slot's lock held: one start at a time, in order)."""
        try:
            self.req = self.slot.comm._run(self.name, True, self.args, self.keep)
        except collective.CollectiveError as e:
            self.error = e

    def run(self):
        self.ran = True
        self.slot.comm._run(self.name, False, self.args, self.keep)

    def wait(self):
        if self.slot.take(self):
            self.run()
            return
        if self.error:
            raise self.error
        self.req.wait()

    def test(self):
        self.slot.release(self)
        if self.error:
            raise self.error
        return self.req.test()


class _Slot:
    """The group's last collective, not started yet: torch waits for a call with
    async_op=False at once and tells the backend nothing, so each one is held for one
    to two _HOLD; a wait() within that runs the blocking form on its own thread (8 B on 2 ranks of
    the 2-core test machine: 17 us through collective.Communicator, against 50 for the
    non-blocking form's hand-off to the library's thread and back; docs/benchmarks.md).
    The next operation, a look at the work, or the time passing (a thread of the
    slot's, awake only while collectives come) starts it as non-blocking instead, so an
    async_op=True call goes on while its caller does something else. Ordered: a held
    collective starts before anything issued after it."""

    def __init__(self, comm):
        self.comm, self.held, self.closed = comm, None, False
        self.cond = threading.Condition()
        self.thread, self.idle, self.came = None, False, False

    def hold(self, launch):
        """Holds launch, starting the one held before (its thread wakes only from idle)."""
        with self.cond:
            self._start_held()
            if self.closed:
                launch.start()  # fails as the closed communicator says
                return
            self.held, self.came = launch, True
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, daemon=True,
                                               name="collective-slot")
                self.thread.start()
            elif self.idle:
                self.cond.notify()

    def take(self, launch):
        """Whether launch was still held (then it is the caller's to run)."""
        with self.cond:
            if self.held is launch:
                self.held = None
                return True
            return False

    def release(self, launch=None):
        """Starts the held collective (if it is launch, or any with None)."""
        with self.cond:
            if launch is None or self.held is launch:
                self._start_held()

    def close(self):
        """Starts what is held (to fail with the communicator's close) and ends the thread."""
        with self.cond:
            self._start_held()
            self.closed = True
            self.cond.notify()

    def _start_held(self):
        if self.held is not None:
            self.held.start()
            self.held = None

    def _watch(self):
        """Starts a collective still held one _HOLD after it was first seen held. Looks
        every _HOLD while collectives come, and sleeps until the next one after _QUIET
        looks without any: woken for each one, it cost a switch of threads per call."""
        quiet = 0
        with self.cond:
            while not self.closed:
                if self.held is None and quiet >= _QUIET:
                    self.idle = True
                    self.cond.wait()
                    self.idle, quiet = False, 0
                    continue
                seen, self.came = self.held, False
                self.cond.wait(_HOLD)
                if seen is not None and self.held is seen:
                    self._start_held()
                quiet = 0 if self.came else quiet + 1


_HOLD = 1e-3  # seconds between the watcher's looks: a collective starts within 2 of them
_QUIET = 50  # looks without a collective before the watcher sleeps


class _PyWork(dist._Work):
    """Every operation's work, for Python and C++ callers alike: wait() ends the operation
    on the caller's thread (no hand-off) and raises its error, every time (the C++
    future-wrapping work's wait() returns True even then). get_future() returns at once a
    future the completer settles, so a communication hook
    (`all_reduce(async_op=True).get_future().then(...)`) overlaps the backward pass.
    C++ callers (DDP's reducer, the functional collectives) reach wait() and get_future()
    (the only two torch's trampoline passes on) only while the Python object lives, else
    C++'s own Work::wait waits for good: the group (_Completer.pending) and each result
    tensor (_KEPT, every work that wrote it) keep a work alive until the operation has
    ended and the work was waited or its future taken as many times as C++ may ask
    (`waits`: one, or one per output for the coalesced calls, whose outputs the
    functional collectives register and wait one by one). Then they let the work go
    (_unlink), the group keeping it until its next operation (_Completer.last): the work
    keeps its result (result() and get_future() give it, as
    Gloo's, after the caller let the tensors go), and a result tensor no longer keeping
    the work that keeps it is freed once the caller lets it go and the group's next
    operation starts, not at Python's next collection (a loop of functional all-gathers
    held every output until then). A work never waited enough (a functional output
    never waited) stays in that cycle, for the collector. Once the operation has ended
    the work lets its torch Future go (_end) and makes one anew when asked: the Future is
    C++, holding the result where Python's collector cannot see, so through it no result
    tensor was ever freed."""

    def __init__(self, completer, req, after, result, source=-1, comm=None, recorder_dir=None,
                 waits=1):
        super().__init__()
        for t in _tensors(result):
            t.__dict__.setdefault(_KEPT, {})[id(self)] = self
        self._waits = waits  # waits or futures taken C++ may still ask for
        self._completer, self._lock = completer, threading.Lock()
        completer.keep(self)
        # Not the group: a work kept must not keep its group from being collected (and so
        # aborted) once torch lets it go.
        self._comm, self._recorder_dir = comm, recorder_dir
        self._req, self._after, self._result, self._fut = req, after, result, None
        self._source = source
        self._ended, self._error = False, None  # once ended: its error (None: none)
        self._ran_here = None  # (req,): the operation a wait ended on its own thread

    def _take(self, hand_off):
        """The operation's future. The first call hands the operation to the completer
        (hand_off) or ends it on this thread, outside the lock so that polls do not
        wait."""
        with self._lock:
            if self._ended:
                return self._remade()
            if self._fut is not None:
                return self._fut
            req, after, self._req, self._after = self._req, self._after, None, None
            if hand_off:
                if isinstance(req, _Launch):  # started here, in order: never run blocking
                    req.slot.release(req)     # on the completer's thread (library: EINVAL)
                self._fut = fut = self._completer.add(req, after, self._result)
            else:
                self._fut = fut = torch.futures.Future()
                self._ran_here = (req,)
        if hand_off:  # outside the lock: a future settled already calls back at once
            fut.add_done_callback(self._end)
        else:
            try:
                _settle(req, after, self._result, fut)
            finally:  # _settle raises only what is no Exception (a KeyboardInterrupt)
                self._end(fut)
        return fut

    def _end(self, fut):
        """The operation ended (fut settled): keep its error, let fut go."""
        try:
            fut.wait()
            error = None
        except Exception as e:  # noqa: BLE001  whatever the operation raised
            error = e
        with self._lock:
            self._error, self._ended, self._fut = error, True, None
            done = self._waits <= 0
        if done:
            self._unlink()

    def _waited(self):
        """A wait returned (or raised the operation's error) or a future was taken."""
        with self._lock:
            self._waits -= 1
            done, more = self._ended and self._waits <= 0, self._waits > 0
        if done:
            self._unlink()
        elif more:  # a Python caller waits once for all outputs of a coalesced call
            self._completer.asked.append(self)

    def _unlink(self):
        """No call from C++ can come any more: the result tensors and the group let this
        work go (a tensor keeps the other works that wrote it: two functional in-place
        operations into one tensor, both registered with torch)."""
        for t in _tensors(self._result):
            kept = t.__dict__.get(_KEPT)
            if kept is not None:
                kept.pop(id(self), None)
        self._completer.release(self)
        self._completer.last = self

    def _remade(self):
        """A settled future as the ended operation's was (the lock held)."""
        fut = torch.futures.Future()
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(self._result)
        return fut

    def wait(self, timeout=None):
        """Ends the operation and raises its error. With a timeout (a timedelta; zero or
        None: none) that passes first, a RuntimeError as Gloo's ("timed out"), the
        operation going on: it is handed to the completer, and a later wait sees it end.
        A KeyboardInterrupt in it (Ctrl-C; collective._signals) that leaves the operation
        running (_over_after_signal) aborts the group's communicator: the operation fails
        here and at the peers, later ones raise. Where the operation ended by itself
        (within _signals.GRACE_S), it fails this work only; the group stays usable."""
        limit = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        try:
            if limit and not _ended_within(self._take(True), limit):
                raise RuntimeError(f"collective: wait: the operation timed out after "
                                   f"{int(limit * 1000)} ms (it goes on){self._dumped()}")
            try:
                fut = self._take(False)
                if not self._ended:  # the completer's: waited for where Ctrl-C comes
                    _ended_within(fut, None)
                fut.wait()
            finally:
                self._waited()
        except KeyboardInterrupt:  # an abandoned operation (a receive) must not take data
            if self._comm is not None and not self._over_after_signal():
                self._comm._interrupt()
            raise
        return True

    def _over_after_signal(self):
        """After a KeyboardInterrupt in wait(): whether the operation ended by itself, so
        that the group stays usable. One this thread ran is over where its call returned
        (_op_over); one the completer runs, or still held, gets _signals.GRACE_S to end,
        as a library call does; one still running then (a receive not matched, a peer
        that never came) is ended by the group's abort."""
        if self._ran_here is not None:
            return _op_over(self._ran_here[0])
        return _ended_within(self._take(True), _signals.GRACE_S)

    def _dumped(self):
        """A timeout torch's caller saw: with COLL_RECORDER_DIR set, the flight recorder
        goes there (as the library's own timeouts do; coll_analyze merges the ranks'
        files), and the sentence says so."""
        where = self._recorder_dir
        if not where or self._comm is None:
            return ""
        try:
            self._comm.recorder_dump()
        except collective.CollectiveError as e:
            return f"; the flight recorder could not be written: {e}"
        return f"; the flight recorder is in {where}"

    def is_completed(self):
        with self._lock:
            if self._ended:
                return True
            if self._fut is not None:
                return self._fut.done()
            try:
                if not self._req.test():
                    return False
            except collective.CollectiveError:  # ended in failure: _take settles it so
                pass
        self._take(False)
        return True

    def is_success(self):
        try:
            return self.is_completed() and self.wait()
        except Exception:  # noqa: BLE001  whatever the operation raised
            return False

    def result(self):
        return self._take(False).wait()

    def get_future(self):
        fut = self._take(True)
        self._waited()
        return fut

    def source_rank(self):
        """A receive's sender (from any source: -1 until its message came), as Gloo's."""
        return self._source if isinstance(self._source, int) else self._source.source

    _source_rank = source_rank  # what torch's dist.recv asks


def _ended_within(fut, limit):
    """Whether fut settled within limit seconds (None: no limit), waited for in Python:
    a torch future's own wait blocks in C++, where Ctrl-C never reaches the main thread."""
    if fut.done():
        return True
    ended = threading.Event()
    fut.add_done_callback(lambda _: ended.set())
    return ended.wait(limit)


_KEPT = "_collective_work"  # a result tensor's attribute: the works C++ may ask, by id
_PENDING = 64  # works a group keeps for C++ (_Completer.pending)


def _tensors(result):
    """The tensors of an operation's result: a list of tensors or of lists of them."""
    for x in result:
        if isinstance(x, torch.Tensor):
            yield x
        else:
            yield from x


def _done(result):
    """A work object for an operation that already ended."""
    fut = torch.futures.Future()
    fut.set_result(result)
    return _c10d._create_work_from_future(fut)


def _forms(name):
    """torch's binding's forms of ProcessGroup.<name>, read from its docstring (pybind
    writes each as `name(self: T, a: T, b: T = default) -> R`), so that each torch's own
    names hold: they differ between versions (alltoall's output_tensors on 2.x, output on
    1.13). Per form, its parameters' names in order (None for one pybind takes by
    position only: argN) and how many lead without a default (required). None where
    torch has no such method."""
    doc = getattr(getattr(dist.ProcessGroup, name, None), "__doc__", None)
    if not doc:
        return None
    forms = []
    for m in re.finditer(rf"^(?:\d+\. )?{name}\(self: (.*)\) -> ", doc, re.M):
        params = [p.partition(": ") for p in _outside_brackets(m.group(1))[1:]]
        names = tuple(None if re.fullmatch(r"arg\d+", n) else n for n, _, _ in params)
        forms.append((names, sum(" = " not in rest for _, _, rest in params)))
    return forms or None


def _outside_brackets(text):
    """text cut at its commas that no bracket encloses (a default's repr has some)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c in "([{<") - (c in ")]}>")
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return parts + [text[start:].strip()]


def _as_binding(method):
    """method taking its arguments as torch's binding of the same name does: by position,
    or by the keywords of one of its forms (gather(output_tensors=, input_tensor=, root=)),
    which reach method by position: all forms of a method put their names at the same
    places. A TypeError where the binding raises one for the names: a keyword no form
    has, one given by position too (_either), a form's required keyword missing. What
    each value may be stays method's to check, and a call by position alone goes to
    method as it is: torch's own callers (its C++ trampoline, distributed_c10d) call by
    position, and a form the docstrings' parse missed must not refuse them."""
    forms = _forms(method.__name__)
    if forms is None:  # a method this torch's binding lacks: Python's own signature
        return method

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not kwargs:
            return method(self, *args)
        return method(self, *_positions(method.__name__, forms, args, kwargs))
    return call


def _positions(op, forms, args, kwargs):
    """args and kwargs by position, as the first form they fit places them (trailing
    ones not given left out, for method's defaults)."""
    for names, required in forms:
        if len(args) > len(names) or not kwargs.keys() <= set(names) or \
                any(n not in kwargs for n in names[len(args):required]):
            continue
        values = [_either(op, args[i] if i < len(args) else None, kwargs.get(n), n)
                  for i, n in enumerate(names)]
        while values and values[-1] is None:
            values.pop()
        return values
    words = "; ".join(", ".join(n or "_" for n in names) for names, _ in forms)
    raise TypeError(f"collective: {op}: no form of torch's binding takes {len(args)} "
                    f"positional argument(s) and keywords {sorted(kwargs)} (its forms: "
                    f"{words})")


def _timeouts(ms):
    """The library's timeouts for a group of torch's timeout ms: both torch's (so ranks may
    come to the group minutes apart, and a stopped rank, one in a debugger, is waited for
    as long as Gloo waits), but where COLL_TIMEOUT_MS or COLL_OP_TIMEOUT_MS is set: that
    one is the library's. So COLL_TIMEOUT_MS=30000 finds a rank that is gone or stopped
    (a receive from a rank that died before their link formed: rendezvous, keepalive, the
    heartbeat) within 30 s, while operations keep torch's timeout."""
    env = os.environ.get
    return {"timeout_ms": 0 if env("COLL_TIMEOUT_MS") else ms,
            "op_timeout_ms": 0 if env("COLL_OP_TIMEOUT_MS") else ms}


class ProcessGroupCollective(dist.ProcessGroup):
    """The process group torch.distributed builds for backend "collective"."""

    def __init__(self, store, rank, size, timeout, name=""):
        super().__init__(rank, size)
        ms = int(timeout.total_seconds() * 1000) if timeout else 0
        self.store, self.timeout_ms = _Store(store), ms
        self.comm = collective.Communicator(self.store, rank, size, **_timeouts(ms))
        self.recorder_dir = os.environ.get("COLL_RECORDER_DIR")  # as the library read it
        self.completer, self.slot = _Completer(), _Slot(self.comm)
        self.inbox, self._sending = _Inbox(self.comm, ms), threading.Lock()
        self._name, self._desc, self._seq, self._monitored = name, "", 0, 0

    def __del__(self):
        if hasattr(self, "inbox"):  # the last made: an init that failed made no more
            self.abort()

    def abort(self):
        """Ends the group at once: operations in flight fail with COLL_EABORTED (their
        peers learn it and fail too, not at their timeout), later ones raise. Torch 2.6
        calls abort and shutdown for NCCL only: destroy_process_group reaches this when
        it lets the group go (__del__). The completers end after the close: they wait on
        the operations it ends (before it, destroy waited for peers that never came)."""
        self.slot.close()  # a held collective starts, to fail with the rest
        self.inbox.close()
        self.comm.close()
        self.completer.stop()
        self.completer.last, self.completer.pending, self.completer.asked = None, {}, []

    shutdown = abort  # the library's close ends what is in flight either way

    def getBackendName(self):
        return "collective"

    # torch 2.x returns a ProcessGroup subclass as the group itself, with no backend
    # registered per device: _get_pg_default_device (FSDP's and torch.distributed.
    # checkpoint's sharded state dicts) then raised "Default device not found", and
    # _get_backend(cpu) (_set_pg_timeout) would raise too. The group is its own CPU one.
    @property
    def _device_types(self):
        return [torch.device("cpu")]

    def _get_backend(self, device):
        if torch.device(device).type != "cpu":
            raise RuntimeError(f"collective: the group has no backend for {device}")
        return self

    # torch 2.x's C++ side reaches these through its Python trampoline (a ProcessGroup made
    # in Python has no C++ backend to keep them): the functional collectives and DTensor
    # find a group by its name ("ProcessGroup name not set" without them).
    def getGroupName(self):
        return self._name

    def setGroupName(self, name):
        self._name = name

    def getGroupDesc(self):
        return self._desc

    def setGroupDesc(self, desc):
        self._desc = desc

    def _get_sequence_number_for_group(self):
        """Operations issued on this group so far, the same on every rank (Gloo's count)."""
        return self._seq

    def _set_sequence_number_for_group(self):
        """Every rank's count starts at 0 (as Gloo's): nothing to agree on."""

    def _start(self, name, args, keep, after=None, result=None, waits=1):
        result = result if result is not None else []
        self._seq += 1
        launch = _Launch(self.slot, name, args, keep)
        self.slot.hold(launch)
        return self._work(launch, after, result, waits=waits)

    def _work(self, req, after, result, source=-1, waits=1):
        """The work over req (a library request, or anything with wait() and test()).
        source: a receive's sender (an _Ask's while it is not known yet). waits: how many
        times C++ may wait on it (_PyWork)."""
        self.completer.next_operation()
        return _PyWork(self.completer, req, after, result, source, self.comm,
                       self.recorder_dir, waits)

    @_as_binding
    def allreduce(self, tensors, opts=None):
        """Also the binding's allreduce(tensors, op) and allreduce(tensor, op)."""
        tensors = _listed(tensors)
        t, back = _flat(_one("allreduce", tensors, "tensor"))
        op, factor = _reduction(opts, t)
        if factor is not None:
            t.mul_(factor)
        return self._start("allreduce", (_ptr(t), _ptr(t), t.numel(), _dtype(t), op), (t,),
                           back, tensors)

    @_as_binding
    def allreduce_coalesced(self, tensors, opts=None):
        """One all-reduce of the tensors laid end to end (one dtype, as Gloo asks)."""
        if not tensors:
            _invalid("allreduce_coalesced", "requires non-empty tensor list")
        _like("allreduce_coalesced", tensors, tensors[0], None)
        op, factor = _reduction(opts, tensors[0])
        flat = _scaled(torch.cat([t.reshape(-1) for t in tensors]), factor)
        return self._start("allreduce", (_ptr(flat), _ptr(flat), flat.numel(), _dtype(flat),
                                         op), (flat,), lambda: _unpack(flat, tensors), tensors,
                           len(tensors))

    def allreduce_ef(self, tensor, residual, codec):
        """Averages a float32 tensor across the group through `codec` with error feedback
        (coll_iallreduce_ef; residual: float32, as many elements, zeroed before the first
        call): a future of the tensor, for a DDP communication hook (ef_hook)."""
        if tensor.dtype != torch.float32 or not tensor.is_contiguous():
            raise RuntimeError("collective: allreduce_ef takes a contiguous float32 tensor, "
                               f"not {tensor.dtype}")
        _dtype(tensor)
        if residual.dtype != torch.float32 or residual.numel() != tensor.numel():
            raise RuntimeError("collective: the residual must be float32 with as many "
                               "elements as the tensor")
        args = (_ptr(tensor), _ptr(tensor), tensor.numel(), collective.OPS["avg"],
                collective.codec_code(codec), _ptr(residual))
        self.slot.release()
        req = self.comm._run("allreduce_ef", True, args, (tensor, residual))
        return self.completer.add(req, None, tensor)

    @_as_binding
    def broadcast(self, tensors, opts=None):
        """Also the binding's broadcast(tensor, root)."""
        tensors = _listed(tensors)
        root = self._root("broadcast", opts)
        t, back = _flat(_one("broadcast", tensors, "tensor"))
        return self._start("broadcast", (_ptr(t), t.numel(), _dtype(t), root), (t,), back, tensors)

    @_as_binding
    def reduce(self, tensors, opts=None, op=None):
        """Also the binding's reduce(tensor, root, op=SUM): opts is then the root."""
        bare = isinstance(tensors, torch.Tensor) and not hasattr(opts, "rootRank")
        tensors = _listed(tensors)
        root = self._root("reduce", opts)
        t, back = _flat(_one("reduce", tensors, "tensor"))
        op, factor = _reduction(_either("reduce", None if bare else opts, op, "op"), t)
        i = _scaled(t, factor)  # a copy: a rank other than the root keeps its tensor
        out = t if self.comm.rank == root else None
        return self._start("reduce", (_ptr(i), _ptr(out), t.numel(), _dtype(t), op, root),
                           (i, t), back, tensors)

    @_as_binding
    def _allgather_base(self, output, input, opts=None):
        _blocks("_allgather_base", output, input, self.comm.size, "output", "input")
        i, _ = _flat(input)
        o, back = _flat(output)
        return self._start("allgather", (_ptr(i), _ptr(o), i.numel(), _dtype(i)), (i, o), back,
                           [output])

    @_as_binding
    def allgather(self, output_lists, inputs, opts=None):
        if isinstance(inputs, torch.Tensor):  # the bare form: allgather(outputs, input)
            output_lists, inputs = [output_lists], [inputs]
        i = _one("allgather", inputs, "input tensor")
        outs = _one("allgather", output_lists, "output tensor")
        self._per_rank("allgather", outs, "output")
        _like("allgather", outs, i, _shape)
        i, _ = _flat(i)
        tmp = torch.empty(self.comm.size * i.numel(), dtype=i.dtype)
        return self._start("allgather", (_ptr(i), _ptr(tmp), i.numel(), _dtype(i)), (i, tmp),
                           lambda: _unpack(tmp, outs), output_lists)

    @_as_binding
    def _reduce_scatter_base(self, output, input, opts=None):
        _blocks("_reduce_scatter_base", input, output, self.comm.size, "input", "output")
        op, factor = _reduction(opts, input)
        i, _ = _flat(_scaled(input, factor))
        o, back = _flat(output)
        return self._start("reduce_scatter", (_ptr(i), _ptr(o), o.numel(), _dtype(i), op),
                           (i, o), back, [output])

    # torch 2.x's functional collectives call these two (one pair of tensors or several)
    # for all_gather_into_tensor and reduce_scatter_tensor, as _coalescing_manager does.
    @_as_binding
    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """One all-gather of the inputs laid end to end, each output its columns. One pair
        (the functional all_gather_into_tensor's, DTensor's) is _allgather_base's layout:
        straight into the output, not through a concatenated input and a copy back."""
        n = self.comm.size
        self._pairs("allgather_into_tensor_coalesced", outputs, inputs, "output", "input")
        if len(inputs) == 1:
            return self._allgather_base(outputs[0], inputs[0], opts)
        i = torch.cat([t.reshape(-1) for t in inputs])
        tmp = torch.empty(n * i.numel(), dtype=i.dtype)
        return self._start("allgather", (_ptr(i), _ptr(tmp), i.numel(), _dtype(i)), (i, tmp),
                           lambda: _from_rows(tmp, n, outputs), outputs, len(outputs))

    @_as_binding
    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """One reduce-scatter of the inputs' blocks laid side by side, rank by rank. One
        pair is _reduce_scatter_base's layout: no copy of the input, none back."""
        n = self.comm.size
        self._pairs("reduce_scatter_tensor_coalesced", inputs, outputs, "input", "output")
        if len(inputs) == 1:
            return self._reduce_scatter_base(outputs[0], inputs[0], opts)
        op, factor = _reduction(opts, inputs[0])
        i = _scaled(_rows(inputs, n), factor)
        o = torch.empty(i.numel() // n, dtype=i.dtype)
        return self._start("reduce_scatter", (_ptr(i), _ptr(o), o.numel(), _dtype(i), op),
                           (i, o), lambda: _unpack(o, outputs), outputs, len(outputs))

    @_as_binding
    def reduce_scatter(self, outputs, input_lists, opts=None):
        if isinstance(outputs, torch.Tensor):  # the bare form: reduce_scatter(output, inputs)
            outputs, input_lists = [outputs], [input_lists]
        o = _one("reduce_scatter", outputs, "output tensor")
        ins = _one("reduce_scatter", input_lists, "input tensor")
        self._per_rank("reduce_scatter", ins, "input")
        _like("reduce_scatter", ins, o, torch.Tensor.numel)  # as NCCL: shapes may differ
        tmp = torch.cat([t.reshape(-1) for t in ins])
        return self._reduce_scatter_base(o, tmp, opts)

    @_as_binding
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _like("alltoall_base", [output], input, None)
        if not output_split_sizes and not input_split_sizes and output.numel() != input.numel():
            _invalid("alltoall_base", f"output holds {output.numel()} elements, input "
                     f"{input.numel()}")
        sc = self._counts(input_split_sizes, input, "input")
        rc = self._counts(output_split_sizes, output, "output")
        i, _ = _flat(input)
        o, back = _flat(output)
        return self._alltoallv(i, sc, o, rc, back, [output])

    @_as_binding
    def alltoall(self, output_tensors, input_tensors, opts=None):
        self._per_rank("alltoall", input_tensors, "input")
        self._per_rank("alltoall", output_tensors, "output")
        _like("alltoall", input_tensors, input_tensors[0], None)
        _like("alltoall", output_tensors, input_tensors[0], None)
        i = torch.cat([t.reshape(-1) for t in input_tensors])
        o = torch.empty(sum(t.numel() for t in output_tensors), dtype=i.dtype)
        return self._alltoallv(i, [t.numel() for t in input_tensors], o,
                               [t.numel() for t in output_tensors],
                               lambda: _unpack(o, output_tensors), output_tensors)

    def _alltoallv(self, i, sc, o, rc, back, result):
        n = self.comm.size
        s = collective._sizes(sc, n, "input splits")
        r = collective._sizes(rc, n, "output splits")
        sd = collective._sizes(collective._displs(sc), n, "input splits")
        rd = collective._sizes(collective._displs(rc), n, "output splits")
        return self._start("alltoallv", (_ptr(i), s, sd, _ptr(o), r, rd, _dtype(i)),
                           (i, o, s, r, sd, rd), back, result)

    @_as_binding
    def gather(self, output_lists, inputs, opts=None):
        if isinstance(inputs, torch.Tensor):  # the bare form: gather(outputs, input, root)
            output_lists, inputs = [output_lists], [inputs]
        root = self._root("gather", opts)
        i, _ = _flat(_one("gather", inputs, "input tensor"))
        tmp, after = None, None
        if self.comm.rank == root:
            outs = _one("gather", output_lists, "output tensor")
            self._per_rank("gather", outs, "output")
            _like("gather", outs, inputs[0], _shape)
            tmp = torch.empty(self.comm.size * i.numel(), dtype=i.dtype)
            after = functools.partial(_unpack, tmp, outs)
        elif output_lists:
            _invalid("gather", "requires empty output on non-root")
        return self._start("gather", (_ptr(i), _ptr(tmp), i.numel(), _dtype(i), root), (i, tmp),
                           after, output_lists)

    @_as_binding
    def scatter(self, outputs, input_lists, opts=None):
        if isinstance(outputs, torch.Tensor):  # the bare form: scatter(output, inputs, root)
            outputs, input_lists = [outputs], [input_lists]
        root = self._root("scatter", opts)
        out = _one("scatter", outputs, "output tensor")
        tmp = None
        if self.comm.rank == root:
            ins = _one("scatter", input_lists, "input tensor")
            self._per_rank("scatter", ins, "input")
            _like("scatter", ins, out, _shape)
            tmp = torch.cat([t.reshape(-1) for t in ins])
        elif input_lists:
            _invalid("scatter", "requires empty input on non-root")
        o, back = _flat(out)
        return self._start("scatter", (_ptr(tmp), _ptr(o), o.numel(), _dtype(o), root), (tmp, o),
                           back, outputs)

    @_as_binding
    def barrier(self, opts=None):
        """A work as any collective's (coll_ibarrier, held as _Slot says): torch's
        async_op=False waits on it at once, async_op=True goes on at once, as Gloo's."""
        return self._start("barrier", (), ())

    @_as_binding
    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """Gloo's monitored barrier, through the store: every rank checks in, rank 0 looks
        for each one until the timeout (default: the group's) and names the ranks that
        did not come (the first, or all with wait_all_ranks); every rank raises rank 0's
        sentence. dist.monitored_barrier takes Gloo groups only: call it on the group.
        The store is polled, not waited on: a c10d store wait that times out leaves the
        connection out of step."""
        ms = int(timeout.total_seconds() * 1000) if timeout is not None else self.timeout_ms
        self._monitored += 1
        key = f"collective/monitored_barrier/{self._monitored}/"
        r, n = self.comm.rank, self.comm.size
        self.store.set(key + str(r), b"")
        if r == 0:
            late = self._absent(key, range(1, n), ms, wait_all_ranks)
            verdict = _late(late, ms) if late else ""
            self.store.set(key + "verdict", verdict.encode())
        else:
            verdict = self._verdict(key, ms)
        if verdict:
            raise RuntimeError(verdict)
        return _done([])

    def _verdict(self, key, ms):
        """Rank 0's sentence, seen from another rank ("": every rank came)."""
        if self._absent(key, ["verdict"], ms) and self._absent(key, ["0"], 0):
            return _late([0], ms)
        self._absent(key, ["verdict"], ms)  # rank 0 came: it decides within its timeout
        v = self.store.get(key + "verdict", 0)
        return _late([0], ms) if v is None else v.decode()

    def _absent(self, prefix, names, ms, all_of_them=True):
        """Which of the keys prefix + name have not appeared within ms (looking every
        10 ms): the first one, or all of them."""
        deadline, absent = time.monotonic() + ms / 1000, list(names)
        while absent:
            absent = [a for a in absent if self.store.get(f"{prefix}{a}", 0) is None]
            if not absent or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        return absent if all_of_them else absent[:1]

    # Each send is a header (_HEADER: its tag, elements and dtype) then the tensor, so a
    # receive learns from the header who sent what with which tag: the library matches
    # messages in order per peer and has no receive from any source.
    @_as_binding
    def send(self, tensors, dst, tag=0):
        self._peer("send", dst, "destination")
        t, _ = _flat(_one("send", tensors, "tensor"))
        tag = collective._int(tag, "tag", collective.TAG_RANGE)
        head = _header(tag, t)
        with self._sending:  # one send's header and tensor side by side on the link
            h = self.comm._run("send", True, _head_args(head, dst), (head,))
            req = self.comm._run("send", True, (_ptr(t), t.numel(), _dtype(t), dst, tag), (t,))
        return self._p2p(req, h.wait, tensors, dst)

    @_as_binding
    def recv(self, tensors, src, tag=0):
        self._peer("recv", src, "source")
        return self._receive(tensors, src, tag)

    @_as_binding
    def recv_anysource(self, tensors, tag=0):
        """The first message with this tag from any rank, as Gloo's: the work's
        source_rank() says whose (dist.recv(t) returns it)."""
        return self._receive(tensors, None, tag)

    def _receive(self, tensors, src, tag):
        t, back = _flat(_one("recv", tensors, "tensor"))
        _dtype(t)
        tag = collective._int(tag, "tag", collective.TAG_RANGE)
        ask = self.inbox.receive(src, tag, t)
        return self._p2p(ask, back, tensors, ask if src is None else src)

    def _p2p(self, req, after, result, source):
        self._seq += 1
        return self._work(req, after, result, source)

    # What Gloo checks before it sends anything (ProcessGroupGloo.cpp, torch 1.13), checked
    # here on the calling rank before anything is sent, with the same kind of sentence:
    # a wrong size must never become another rank's data or a short copy.
    def _root(self, op, opts):
        # torch's binding also takes the root alone (broadcast(tensor, root))
        if opts is None or hasattr(opts, "rootRank"):
            root = opts.rootRank if opts is not None else 0
        elif isinstance(opts, numbers.Integral):  # numpy's too; not torch 2.x's ops
            root = int(opts)
        else:
            raise TypeError(f"collective: {op}: {opts!r} is not a root rank or options")
        if not 0 <= root < self.comm.size:
            _invalid(op, f"invalid root rank: {root}")
        if getattr(opts, "rootTensor", 0) != 0:  # gather's and scatter's options have none
            _invalid(op, f"invalid root tensor: {opts.rootTensor}")
        return root

    def _peer(self, op, peer, what):
        """A rank other than this one (the library's EINVAL for this one failed the group;
        Gloo's group goes on)."""
        if peer == self.inbox.rank:
            _invalid(op, f"invalid {what} rank: {peer} (this rank)")
        if not 0 <= peer < self.comm.size:
            _invalid(op, f"invalid {what} rank: {peer}")

    def _pairs(self, op, wholes, blocks, whole_name, block_name):
        """As many wholes as blocks, at least one, each whole n of its block, one dtype."""
        if not blocks or len(wholes) != len(blocks):
            _invalid(op, f"requires as many {whole_name} as {block_name} tensors, at least "
                     f"one (got {len(wholes)} and {len(blocks)})")
        for w, b in zip(wholes, blocks):
            _blocks(op, w, b, self.comm.size, whole_name, block_name)
        _like(op, blocks, blocks[0], None)

    def _per_rank(self, op, tensors, what):
        if len(tensors) != self.comm.size:
            _invalid(op, f"invalid {what} tensor list size {len(tensors)} (expected "
                     f"{self.comm.size}, the size of the process group)")

    def _counts(self, splits, t, what):
        """Elements per rank of t, split along dim 0 by splits (none: evenly)."""
        n = self.comm.size
        rows = t.shape[0] if t.dim() else 1
        if not splits:
            if rows % n:
                _invalid("alltoall_base", f"{what} tensor's dim 0 ({rows}) does not divide "
                         f"equally across group size {n}")
            splits = [rows // n] * n
        elif len(splits) != n or min(splits) < 0 or sum(splits) != rows:
            _invalid("alltoall_base", f"{what} split sizes {list(splits)} do not cover its "
                     f"dim 0 ({rows}) in {n} parts")
        return [s * (t.numel() // max(rows, 1)) for s in splits]


def _late(ranks, ms):
    return (f"collective: monitored_barrier: Rank{'s' if len(ranks) > 1 else ''} "
            f"{', '.join(map(str, ranks))} failed to pass monitoredBarrier in {ms} ms")


def _invalid(op, what):
    raise RuntimeError(f"collective: {op}: {what}")


def _either(op, positional, keyword, name):
    """The one of an argument given by position (options, or the bare form's value) or
    by keyword; both is torch's binding's TypeError, not a silent choice."""
    if positional is not None and keyword is not None:
        raise TypeError(f"collective: {op} got its {name} twice")
    return keyword if positional is None else positional


def _listed(tensors):
    """A list of tensors, from one as torch's binding also takes it: torch's own DDP
    under Join with find_unused_parameters calls process_group.allreduce(tensor)."""
    return [tensors] if isinstance(tensors, torch.Tensor) else tensors


def _one(op, tensors, what):
    """The one tensor of a list: a rank holds one device (Gloo's lists of several are
    several tensors of one rank, which this backend does not take)."""
    if len(tensors) != 1:
        _invalid(op, f"requires a single-element {what} list (got {len(tensors)})")
    return tensors[0]


def _shape(t):
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


def _like(op, tensors, ref, size):
    """Every tensor a CPU tensor of ref's dtype and, unless size is None, of ref's size
    as size(tensor) measures it (its shape, or its number of elements)."""
    for at, t in enumerate(tensors):
        _dtype(t)
        if t.dtype != ref.dtype:
            _invalid(op, f"invalid tensor type at index {at} (expected {ref.dtype}, got "
                     f"{t.dtype})")
        if size is not None and size(t) != size(ref):
            _invalid(op, f"invalid tensor size at index {at} (expected {_shape(ref)}, got "
                     f"{_shape(t)})")


def _blocks(op, whole, block, n, whole_name, block_name):
    """whole must be n blocks of block's size and dtype."""
    _like(op, [whole], block, None)
    if whole.numel() != n * block.numel():
        _invalid(op, f"the {whole_name} holds {whole.numel()} elements, not {n} x the "
                 f"{block_name}'s {block.numel()}")


def _unpack(flat, outs):
    at = 0
    for t in outs:
        t.copy_(flat[at:at + t.numel()].view_as(t))
        at += t.numel()


def _rows(ts, n):
    """The tensors ts, each n blocks, as one flat tensor of n rows: row r holds each
    one's block r, one after another."""
    return torch.cat([t.reshape(n, -1) for t in ts], 1).reshape(-1)


def _from_rows(flat, n, ts):
    """Each tensor of ts (n blocks) from its columns of flat seen as n rows (_rows undone)."""
    rows, at = flat.view(n, -1), 0
    for t in ts:
        w = t.numel() // n
        t.copy_(rows[:, at:at + w].reshape(t.shape))
        at += w


def _group(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupCollective):
        raise RuntimeError(f"collective: {pg} is not a process group of backend 'collective'")
    return pg


def set_codec(codec, group=None):
    """Collective over the group (default: the world): its later float32 SUM and AVG
    all-reduces and reduce-scatters move through the wire codec "fp16", "bf16" or "int8"
    ("none": exact again), as COLL_CODEC does at init. Every rank must pass the same."""
    pg = _group(group)
    pg.slot.release()  # a held collective goes with the codec it was issued under
    pg.comm.set_codec(codec)


class ErrorFeedback:
    """State of ef_hook: the codec, the group, and each gradient bucket's residual (what
    the codec lost from it last time, added back before the next encoding)."""

    def __init__(self, codec="int8", group=None):
        collective.codec_code(codec)
        self.codec, self.group, self.residuals = codec, group, {}


def ef_hook(state, bucket):
    """A DDP communication hook: each gradient bucket averaged through state.codec with
    error feedback, so an int8 wire (a quarter of the bytes) trains like float32:

        model.register_comm_hook(collective.torch.ErrorFeedback("int8"),
                                 collective.torch.ef_hook)
    """
    t = bucket.buffer()
    e = state.residuals.get(bucket.index())
    if e is None or e.numel() != t.numel():  # DDP rebuilds its buckets after a first step
        e = state.residuals[bucket.index()] = torch.zeros_like(t)
    return _group(state.group).allreduce_ef(t, e, state.codec)


def _create(opts, _options):
    """The extended API's creator: torch hands the group's name along (group_id), which
    labels the communicator for coll_status with this rank's global rank (torch 1.13
    names the default group "", 2.x "0"; its global ranks are [], the world's)."""
    pg = ProcessGroupCollective(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                opts.group_id)
    ranks = list(opts.global_ranks_in_group)
    pg.comm.set_label(opts.group_id or "0", ranks[opts.group_rank] if ranks else opts.group_rank)
    return pg


# devices=["cpu"] where torch takes it (2.x, which without it warns and assumes CUDA too).
_DEVICES = ({"devices": ["cpu"]}
            if "devices" in inspect.signature(dist.Backend.register_backend).parameters else {})
dist.Backend.register_backend("collective", _create, extended_api=True, **_DEVICES)
