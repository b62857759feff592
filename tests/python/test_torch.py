"""The torch.distributed backend "collective", op by op against Gloo in the same
processes (every dtype and reduce op, uneven all-to-all, non-contiguous tensors, async
work, subgroups, p2p), DDP against Gloo (also through torch's communication hooks), and a
dead rank as an exception everywhere; what Gloo refuses is refused before anything is sent,
a failing result copy fails only its work, and get_future() does not wait. Also AVG,
PREMUL_SUM, BAND/BOR/BXOR, the coalesced forms, batch_isend_irecv, receives by tag in any
order, bool tensors, the binding's bare and keyword forms, sequence numbers,
monitored_barrier, an async barrier, Ctrl-C inside an operation and, on torch 2.x, the
functional collectives and DTensor tensor parallelism. The same file
runs on torch 1.13 (suite python) and 2.6 (suite torch2); TORCH2 marks what 1.13 lacks."""
import functools
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

import collective.torch  # noqa: F401  registers the backend
import ranks

FLOATS = (torch.float16, torch.bfloat16)
# torch 2.x's APIs that 1.13 lacks (the functional collectives, DTensor, PREMUL_SUM's
# factor, _coalescing_manager for tensors): their tests run on 2.x only.
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
# torch's own words, on every call: torch.distributed.checkpoint's file writer, the
# helper FSDP's sharded state dicts ask the device of (Gloo's group has two devices).
for _words in ("TypedStorage is deprecated", "`_get_pg_default_device` will be deprecated",
               "Multiple backends are registered"):
    warnings.filterwarnings("ignore", message=_words)


# Every Gloo reference group, kept until the rank's os._exit: torch 2.6's ProcessGroupGloo
# destructor joins its worker threads holding the GIL, and a worker freeing the last
# reference to a tensor Python has seen waits for the GIL (gdb: ~ProcessGroupGloo in
# thread::join; runLoop in ~TensorImpl, take_gil). A test's frame ending freed its group
# so, and the rank hung once in about 20 runs of torch_hooks.
_GLOO = []


def init(r, n, where, timeout_s=30):
    import datetime
    dist.init_process_group("collective", init_method="file://" + where + "/store", rank=r,
                            world_size=n, timeout=datetime.timedelta(seconds=timeout_s))
    _GLOO.append(dist.new_group(backend="gloo"))
    return _GLOO[-1]


def ops(r, n, where):
    g = init(r, n, where)
    assert dist.get_backend() == "collective"
    for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
               torch.uint8, torch.int32, torch.int64]:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]:
            a = (torch.arange(12) % 3 + r + 1).to(dt)
            b = a.to(torch.float64) if dt in FLOATS else a.clone()  # Gloo lacks some halves
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=g)
            assert torch.equal(a, b.to(dt)), (dt, op, a, b)
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4).t()  # not contiguous
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, group=g)
    assert torch.equal(x, y)
    outs = [torch.zeros(3) for _ in range(n)]
    dist.all_gather(outs, torch.full((3,), float(r)))
    assert all(torch.equal(o, torch.full((3,), float(p))) for p, o in enumerate(outs))
    big = torch.zeros(3 * n)  # Gloo has no _allgather_base to compare with
    dist._all_gather_base(big, torch.full((3,), float(r)))
    assert torch.equal(big, torch.arange(n).repeat_interleave(3).float())
    o = torch.zeros(2)
    dist.reduce_scatter(o, [torch.full((2,), float(r + p)) for p in range(n)])
    assert torch.equal(o, torch.full((2,), float(sum(q + r for q in range(n)))))
    o2 = torch.zeros(2)
    dist._reduce_scatter_base(o2, torch.arange(2 * n, dtype=torch.float32))
    assert torch.equal(o2, (torch.arange(2 * r, 2 * r + 2) * n).float())
    ins = torch.arange(n * 2, dtype=torch.float32) + 10 * r
    out, ref = torch.zeros(n * 2), torch.zeros(n * 2)
    dist.all_to_all_single(out, ins)
    dist.all_to_all_single(ref, ins, group=g)
    assert torch.equal(out, ref)
    insz, outsz = [p + 1 for p in range(n)], [r + 1] * n
    ins = torch.full((sum(insz), 2), float(r))
    out, ref = torch.zeros(sum(outsz), 2), torch.zeros(sum(outsz), 2)
    dist.all_to_all_single(out, ins, outsz, insz)
    dist.all_to_all_single(ref, ins, outsz, insz, group=g)
    assert torch.equal(out, ref)
    lo = [torch.zeros(p + 1) for p in range(n)]
    dist.all_to_all(lo, [torch.full((r + 1,), float(r * 10 + p)) for p in range(n)])
    assert all(torch.equal(t, torch.full((p + 1,), float(p * 10 + r))) for p, t in enumerate(lo))
    t = torch.full((4,), float(r))
    dist.broadcast(t, n - 1)
    assert torch.equal(t, torch.full((4,), float(n - 1)))
    t = torch.full((4,), float(r + 1))
    dist.reduce(t, 0)
    if r == 0:
        assert torch.equal(t, torch.full((4,), float(n * (n + 1) / 2)))
    gl = [torch.zeros(2) for _ in range(n)] if r == 0 else None
    dist.gather(torch.full((2,), float(r)), gl, 0)
    if r == 0:
        assert all(torch.equal(x, torch.full((2,), float(p))) for p, x in enumerate(gl))
    so = torch.zeros(2)
    dist.scatter(so, [torch.full((2,), float(p)) for p in range(n)] if r == 0 else None, 0)
    assert torch.equal(so, torch.full((2,), float(r)))
    if n > 1:
        if r == 0:
            dist.send(torch.ones(5), 1)
            w = dist.isend(torch.full((5,), 2.0), 1)
            w.wait()
        if r == 1:
            z = torch.zeros(5)
            dist.recv(z, 0)
            w = dist.irecv(z, 0)
            w.wait()
            assert z.sum() == 10
    w = dist.all_reduce(torch.ones(100), async_op=True)
    w.wait()
    assert w.is_completed()
    # A blocking call (the caller's thread) behind a non-blocking one still in flight.
    big, small = torch.ones(1 << 20), torch.ones(3)
    w = dist.all_reduce(big, async_op=True)
    dist.all_reduce(small)
    w.wait()
    assert torch.equal(small, torch.full((3,), float(n))) and big[-1] == n
    fut = dist.all_reduce(torch.ones(10), async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.full((10,), float(n)))
    dist.barrier()
    sub = dist.new_group([p for p in range(n) if p % 2 == 0])
    if r % 2 == 0:
        t = torch.ones(3)
        dist.all_reduce(t, group=sub)
        assert t.sum() == 3 * len(range(0, n, 2))
    for bad in [lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
                lambda: dist._all_gather_base(torch.zeros(1), torch.ones(3))]:
        try:
            bad()
        except RuntimeError as e:
            assert "collective" in str(e), e
        else:
            raise AssertionError("bad input passed")
    dist.destroy_process_group()


def train(r, group, hook=None):
    """10 SGD steps of a small MLP under DDP over `group`; the final parameters."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    m = DDP(model, process_group=group, bucket_cap_mb=0.001)
    if hook:
        m.register_comm_hook(*hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + r)
    for _ in range(10):
        x, y = torch.randn(16, 20, generator=gen), torch.randint(0, 4, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def same_everywhere(params, n):
    flat = torch.cat([p.reshape(-1) for p in params])
    every = [torch.zeros_like(flat) for _ in range(n)]
    dist.all_gather(every, flat)
    assert all(torch.equal(e, flat) for e in every), "replicas differ"


def ddp(r, n, where):
    g = init(r, n, where)
    ours, gloo = train(r, None), train(r, g)
    for a, b in zip(ours, gloo):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    same_everywhere(ours, n)
    dist.destroy_process_group()


def ddp_variants(r, n, where):
    """DDP's options and uses over our group end as over Gloo's: gradient_as_bucket_view,
    static_graph, find_unused_parameters (a layer left out), no_sync (accumulation every
    other step), and torch's Python fp16_compress_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    g = init(r, n, where)

    def run(pg, how):
        torch.manual_seed(0)
        model = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 8), "b": torch.nn.Linear(8, 4),
                                     "unused": torch.nn.Linear(3, 3)})
        model.forward = lambda x: model["b"](torch.relu(model["a"](x)))
        model["unused"].requires_grad_(how == "find_unused_parameters")
        kw = {how: True} if how not in ("no_sync", "fp16_compress_hook") else {}
        m = DDP(model, process_group=pg, **kw)
        if how == "fp16_compress_hook":
            m.register_comm_hook(pg, default_hooks.fp16_compress_hook)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(4):
            x = torch.randn(6, 8, generator=torch.Generator().manual_seed(100 * r + i))
            if how == "no_sync" and i % 2 == 0:
                with m.no_sync():
                    m(x).pow(2).mean().backward()
                continue
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in model.parameters()]
    for how in ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "no_sync",
                "fp16_compress_hook"):
        ours, gloo = run(None, how), run(g, how)
        worst = max((a - b).abs().max().item() for a, b in zip(ours, gloo))
        assert worst < 1e-5, (how, worst)
        same_everywhere(ours, n)


def codecs(r, n, where):
    """set_codec: float32 sums move through int8 (close to Gloo's, not equal), other
    dtypes stay exact, "none" is exact again; DDP through ef_hook (int8 with error
    feedback) ends near Gloo's float32 run with identical replicas."""
    g = init(r, n, where)
    x = torch.randn(10000, generator=torch.Generator().manual_seed(r))
    a, ref, i = x.clone(), x.clone(), torch.arange(100, dtype=torch.int32) * (r + 1)
    collective.torch.set_codec("int8")
    dist.all_reduce(a)
    dist.all_reduce(i)
    dist.all_reduce(ref, group=g)
    err = (a - ref).abs().max().item()
    assert 0 < err < 0.02 * ref.abs().max().item(), err
    assert torch.equal(i, torch.arange(100, dtype=torch.int32) * (n * (n + 1) // 2))
    collective.torch.set_codec("none")
    a = x.clone()
    dist.all_reduce(a)
    assert torch.equal(a, ref)
    state = collective.torch.ErrorFeedback("int8")
    ours, gloo = train(r, None, (state, collective.torch.ef_hook)), train(r, g)
    assert any(e.abs().max() > 0 for e in state.residuals.values()), "the hook lost nothing"
    worst = max((p - q).abs().max().item() for p, q in zip(ours, gloo))
    assert worst < 5e-3, worst  # seen: 1.6e-4 (2 ranks), 2.2e-4 (3)
    same_everywhere(ours, n)
    for bad in [lambda: collective.torch.set_codec("int4"),
                lambda: collective.torch.ErrorFeedback("int4"),
                lambda: collective.torch.set_codec("int8", group=g)]:
        try:
            bad()
        except (ValueError, RuntimeError):
            pass
        else:
            raise AssertionError("a bad codec call passed")
    dist.destroy_process_group()


def refused(fn):
    try:
        fn()
    except RuntimeError as e:
        assert "collective" in str(e) or "COLL_E" in str(e), e
        return str(e)
    raise AssertionError("bad input passed")


def bad_input(r, n, where):
    """Each a RuntimeError with the library's words, never a crash or a hang: a tensor
    on another device, a dtype the library lacks, splits that do not cover the tensor,
    a send to or a receive from this rank (the group goes on: the library's EINVAL
    failed it), and (last: it leaves the ranks out of step, so the group fails) sizes
    that differ across ranks."""
    init(r, n, where, timeout_s=10)
    refused(lambda: dist.all_reduce(torch.ones(3, device="meta")))
    refused(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)))
    refused(lambda: dist.isend(torch.ones(3), r).wait())
    refused(lambda: dist.irecv(torch.ones(3), r).wait())
    refused(lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4), [1] * n, [5] * n))
    refused(lambda: dist.all_to_all_single(torch.zeros(2 * n + 1), torch.ones(2 * n + 1)))
    dist.barrier()
    said = refused(lambda: dist.all_reduce(torch.ones(3 + r)))
    assert "COLL_EMISMATCH" in said, said


def within(fn, seconds=10):
    """fn's result, or its exception; an AssertionError if it has not returned in time
    (a hang becomes a failure; the thread is left behind, the rank exits anyway)."""
    import threading
    out = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001  handed to the caller
            out["error"] = e
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise AssertionError(f"still waiting after {seconds} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def raises(fn, words, seconds=10):
    """fn raises a RuntimeError saying words, within seconds."""
    try:
        within(fn, seconds)
    except RuntimeError as e:
        assert words in str(e), f"wanted {words!r}, got {e}"
        return
    raise AssertionError(f"no error, wanted {words!r}")


def fail_once(real):
    """A result copy (_unpack) that fails the first time."""
    calls = []

    def copy(flat, outs):
        if not calls:
            calls.append(1)
            raise RuntimeError("the copy failed")
        real(flat, outs)
    return copy


def copy_fails(r, n, where):
    """A failing result copy fails its own work, every time it is waited for, and
    nothing else: the completer settles the works started after it (C++ callers' path:
    the process group called directly), and a Python work's second wait raises again."""
    init(r, n, where, timeout_s=10)
    pg = dist.distributed_c10d._get_default_group()
    collective.torch._unpack = fail_once(collective.torch._unpack)
    first = pg.allgather([[torch.zeros(3) for _ in range(n)]], [torch.ones(3)])
    t = torch.ones(4)
    later = pg.allreduce([t])
    try:  # torch 1.13 hands a C++ work's future the exception as its value
        got = within(first.get_future().wait)
    except RuntimeError as e:
        got = e
    assert "the copy failed" in str(got), got
    within(later.get_future().wait)
    assert torch.equal(t, torch.full((4,), float(n))), t
    collective.torch._unpack = fail_once(collective.torch._unpack)
    w = dist.all_gather([torch.zeros(3) for _ in range(n)], torch.ones(3), async_op=True)
    for _ in range(3):
        raises(w.wait, "the copy failed")
    assert w.is_completed() and not w.is_success()
    outs = [torch.zeros(3) for _ in range(n)]
    dist.all_gather(outs, torch.full((3,), float(r)))
    assert all(torch.equal(o, torch.full((3,), float(p))) for p, o in enumerate(outs)), outs


def future_at_once(r, n, where):
    """get_future() returns before the operation ends (rank 1 comes 1.5 s late) and its
    callbacks run when it does: a communication hook overlaps the backward pass."""
    init(r, n, where)
    dist.barrier()
    if r == 1:
        time.sleep(1.5)
    t0 = time.time()
    fut = dist.all_reduce(torch.full((4,), float(r + 1)), async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    took = time.time() - t0
    if r == 0:
        assert took < 0.5 and not doubled.done(), f"get_future() took {took:.3f} s"
    assert torch.equal(within(doubled.wait), torch.full((4,), float(n * (n + 1)))), doubled
    assert torch.equal(fut.wait()[0], torch.full((4,), float(n * (n + 1) / 2)))


def callback_waits_earlier(r, n, where):
    """A then-callback of one operation's future waits for the future of an operation
    started before (as a hook may): both settle (one completer thread for every future
    never reached the second: it was running the callback). Tags outside a uint32 are
    refused (they wrapped: tag 2**32 met tag 0)."""
    init(r, n, where, timeout_s=10)
    a, b = torch.ones(4), torch.full((4,), 2.0)
    f1 = dist.all_reduce(a, async_op=True).get_future()
    f2 = dist.all_reduce(b, async_op=True).get_future()
    got = within(f1.then(lambda f: f2.wait()[0] + f.value()[0]).wait)
    assert torch.equal(got, torch.full((4,), 3.0 * n)), got
    peer = (r + 1) % n
    for tag in (2**32, -1):
        try:
            dist.send(torch.ones(2), peer, tag=tag)
        except ValueError as e:
            assert "tag" in str(e), e
        else:
            raise AssertionError(f"tag {tag} was taken")


def torch_hooks(r, n, where):
    """DDP with torch's own communication hooks (all-reduce; PowerSGD, whose callbacks
    wait for further futures from inside a callback) ends as with Gloo."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    g = init(r, n, where)

    def powersgd(group):
        return (psgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2), psgd.powerSGD_hook)
    for hook in [lambda group: (group, default_hooks.allreduce_hook), powersgd]:
        ours = within(lambda: train(r, None, hook(None)), 60)
        gloo = train(r, g, hook(g))
        worst = max((p - q).abs().max().item() for p, q in zip(ours, gloo))
        assert worst < 1e-4, worst
        same_everywhere(ours, n)
    dist.destroy_process_group()


def sizes_checked(r, n, where):
    """What Gloo checks, refused on the calling rank with Gloo's kind of sentence before
    anything is sent: every rank passes the same bad input (a gather or scatter of its
    own as the root), and the group is still in step after all of them."""
    init(r, n, where, timeout_s=10)
    one, five, x = torch.ones(10), torch.zeros(5), torch.zeros(10)
    wide, ints = torch.zeros(10 * n), torch.zeros(10, dtype=torch.int32)
    expected = "invalid tensor size at index 0 (expected (10), got (5))"
    cases = [
        (lambda: dist.all_gather([five.clone() for _ in range(n)], one), expected),
        (lambda: dist.all_gather([torch.zeros(2, 5) for _ in range(n)], one),
         "(expected (10), got (2, 5))"),
        (lambda: dist.all_gather([x.clone() for _ in range(n + 1)], one),
         f"invalid output tensor list size {n + 1} (expected {n}"),
        (lambda: dist.all_gather_into_tensor(five, one), "holds 5 elements"),
        (lambda: dist.all_gather_into_tensor(wide.double(), one), "invalid tensor type"),
        (lambda: dist.gather(one, [five.clone() for _ in range(n)], dst=r), expected),
        (lambda: dist.gather(one, [x.clone() for _ in range(n + 1)], dst=r),
         f"invalid output tensor list size {n + 1}"),
        (lambda: dist.gather(one, None, dst=n + 3), f"invalid root rank: {n + 3}"),
        (lambda: dist.scatter(x, [five.clone() for _ in range(n)], src=r), expected),
        (lambda: dist.scatter(x, [x.clone() for _ in range(n + 1)], src=r),
         f"invalid input tensor list size {n + 1}"),
        (lambda: dist.scatter(x, None, src=-1), "invalid root rank: -1"),
        (lambda: dist.broadcast(x, n), f"invalid root rank: {n}"),
        (lambda: dist.reduce(x, n + 1), f"invalid root rank: {n + 1}"),
        (lambda: dist.reduce_scatter(x, [five.clone() for _ in range(n)]), expected),
        (lambda: dist.reduce_scatter(x, [x.clone() for _ in range(n + 2)]),
         f"invalid input tensor list size {n + 2}"),
        (lambda: dist.reduce_scatter_tensor(x, torch.zeros(10 * n + 1)), "holds"),
        (lambda: dist.reduce_scatter_tensor(x, wide.to(torch.int32)), "invalid tensor type"),
        (lambda: dist.all_to_all([x.clone() for _ in range(n + 1)], [x.clone() for _ in range(n)]),
         f"invalid output tensor list size {n + 1}"),
        (lambda: dist.all_to_all_single(wide, torch.zeros(20 * n)), "elements"),
        (lambda: dist.all_to_all_single(wide, wide.clone(), [10] * n,
                                        [10 * n + 10, -10] + [0] * (n - 2)), "split sizes"),
        (lambda: dist.send(x, n + 2), f"invalid destination rank: {n + 2}"),
        (lambda: dist.recv(x, n + 2), f"invalid source rank: {n + 2}"),
    ]
    pg = dist.distributed_c10d._get_default_group()
    cases += [(lambda: pg.allgather([[ints.clone() for _ in range(n)]], [one]),
               "invalid tensor type at index 0 (expected torch.float32, got torch.int32)"),
              (lambda: pg.alltoall([ints.clone() for _ in range(n)],
                                   [one.clone() for _ in range(n)]), "invalid tensor type"),
              (lambda: pg.allreduce([one, one.clone()]), "requires a single-element tensor list")]
    for fn, words in cases:
        raises(fn, "collective: ")
        raises(fn, words)
    t = torch.full((3,), float(r))
    within(lambda: dist.all_reduce(t))
    assert torch.equal(t, torch.full((3,), float(n * (n - 1) / 2))), t


def short_scatter(r, n, where):
    """A root whose scatter list is short refuses it before sending (Gloo does too;
    before, the others got the root's heap); the others, waiting for a root that never
    sends, fail when the group's timeout (3 s) ends, their output untouched."""
    init(r, n, where, timeout_s=3)
    out = torch.full((10,), -1.0)
    if r == 0:
        raises(lambda: dist.scatter(out, [torch.zeros(5)] * n, src=0),
               "collective: scatter: invalid tensor size at index 0 (expected (10), got (5))")
        time.sleep(6)  # alive: the others must give up on the timeout, not on an exit
    else:
        t0 = time.time()
        raises(lambda: dist.scatter(out, None, src=0), "COLL_ETIMEDOUT", 15)
        assert time.time() - t0 < 6, time.time() - t0
    assert torch.equal(out, torch.full((10,), -1.0)), out


def no_warning(r, n, where):
    """Registering the backend warns of nothing (torch 2.x warns without devices=)."""
    import subprocess
    subprocess.run([sys.executable, "-W", "error", "-c", "import collective.torch"], check=True)


def reductions(r, n, where):
    """AVG as Gloo's SUM / n; PREMUL_SUM (torch 2.x) as Gloo's SUM of the scaled tensors;
    the coalesced all-reduce, all-gather and reduce-scatter as Gloo's one by one."""
    g = init(r, n, where)
    for dt in [torch.float32, torch.float64, torch.bfloat16]:
        a = (torch.arange(12) % 5 + 2 * r + 1).to(dt)
        b = a.to(torch.float64, copy=True)
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        dist.all_reduce(b, group=g)
        assert torch.allclose(a.double(), b / n, rtol=1e-2), (dt, a, b)
    if TORCH2:
        for f in (2.5, torch.tensor([0.5])):
            a = torch.arange(6, dtype=torch.float32) + r
            b = a * f
            dist.all_reduce(a, op=dist._make_nccl_premul_sum(f))
            dist.all_reduce(b, group=g)
            assert torch.equal(a, b), (f, a, b)
        i = torch.arange(2 * n, dtype=torch.float64) + r
        o, ref = torch.zeros(2, dtype=torch.float64), torch.zeros(2 * n, dtype=torch.float64)
        dist.reduce_scatter_tensor(o, i, op=dist._make_nccl_premul_sum(3.0))
        dist.all_reduce(ref.copy_(i * 3), group=g)
        assert torch.equal(o, ref[2 * r:2 * r + 2]) and torch.equal(i, torch.arange(2 * n) + r)
        a = torch.arange(4, dtype=torch.float32) + r  # the root's the sum, the others' kept
        dist.reduce(a, n - 1, op=dist._make_nccl_premul_sum(2.0))
        want = (torch.arange(4) * n + n * (n - 1) // 2) * 2.0 if r == n - 1 else torch.arange(4) + r
        assert torch.equal(a, want.float()), a
    ts = [torch.arange(5, dtype=torch.float32) + r, torch.full((2, 3), float(r))]
    refs = [t.clone() for t in ts]
    with warnings.catch_warnings():  # "will be deprecated"
        warnings.simplefilter("ignore")
        dist.all_reduce_coalesced(ts, op=dist.ReduceOp.MAX)
        dist.all_reduce_coalesced(refs, op=dist.ReduceOp.MAX, group=g)
    assert all(torch.equal(a, b) for a, b in zip(ts, refs)), (ts, refs)
    if not TORCH2:
        return
    from torch.distributed.distributed_c10d import _coalescing_manager
    ins = [torch.arange(3, dtype=torch.float32) + r, torch.full((1, 2), float(r))]
    outs = [torch.zeros(3 * n), torch.zeros(n, 2)]
    with _coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    for o, i in zip(outs, ins):
        ref = torch.zeros_like(o)
        dist.all_gather_into_tensor(ref, i, group=g)
        assert torch.equal(o, ref), (o, ref)
    ins = [torch.arange(2 * n, dtype=torch.float32) * (r + 1), torch.full((n, 3), r + 1.0)]
    outs = [torch.zeros(2), torch.zeros(1, 3)]
    with _coalescing_manager():
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    for o, i in zip(outs, ins):
        whole = i.clone()
        dist.all_reduce(whole, group=g)
        assert torch.equal(o.reshape(-1), whole.reshape(n, -1)[r]), (o, whole)


def functional(r, n, where):
    """torch 2.x's functional collectives (called from C++, by group and by group name)
    against Gloo's: each group has a name torch finds it by."""
    import torch.distributed._functional_collectives as fc
    g = init(r, n, where)
    w = dist.group.WORLD
    assert w.group_name and w.group_name != g.group_name, (w.group_name, g.group_name)
    assert torch._C._distributed_c10d._resolve_process_group(w.group_name) is w

    def both(fn):
        a, b = fc.wait_tensor(fn(w)), fc.wait_tensor(fn(g))
        assert torch.equal(a, b), (a, b)
        a = fc.wait_tensor(fn(w.group_name))
        assert torch.equal(a, b), (a, b)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + r
    both(lambda pg: fc.all_reduce(x, "sum", pg))
    both(lambda pg: fc.all_reduce(x, "max", pg))
    both(lambda pg: fc.all_gather_tensor(x, 0, pg))
    both(lambda pg: fc.all_gather_tensor(x, 1, pg))
    y = torch.arange(4.0 * n).reshape(2 * n, 2) * (r + 1)
    both(lambda pg: fc.reduce_scatter_tensor(y, "sum", 0, pg))
    both(lambda pg: fc.broadcast(x, n - 1, pg))
    both(lambda pg: fc.all_to_all_single(y, None, None, pg))
    ins = [p + 1 for p in range(n)]  # uneven: rank p gets p + 1 rows from each
    outs = [r + 1] * n
    z = torch.full((sum(ins), 2), float(r))
    both(lambda pg: fc.all_to_all_single(z, outs, ins, pg))
    for name in ("all_reduce_coalesced", "all_gather_into_tensor_coalesced",
                 "reduce_scatter_tensor_coalesced"):
        ts = [y, x.reshape(-1).repeat(n)]
        args = {"all_reduce_coalesced": (ts, "sum"), "all_gather_into_tensor_coalesced": (ts,),
                "reduce_scatter_tensor_coalesced": (ts, "sum", [0, 0])}[name]
        a = [fc.wait_tensor(t) for t in getattr(fc, name)(*args, w)]
        if name == "reduce_scatter_tensor_coalesced":  # Gloo has none: its all-reduce, split
            b = [fc.wait_tensor(fc.all_reduce(t, "sum", g)).chunk(n)[r] for t in ts]
        else:
            b = [fc.wait_tensor(t) for t in getattr(fc, name)(*args, g)]
        assert all(torch.equal(p, q) for p, q in zip(a, b)), (name, a, b)

def dtensor(r, n, where):
    """torch 2.x's DTensor: tensor parallelism (ColwiseParallel then RowwiseParallel) and
    redistributions on a mesh of ours, as on one of Gloo's and as the unsplit model."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    g = init(r, n, where)
    meshes = [init_device_mesh("cpu", (n,)), DeviceMesh.from_group(g, "cpu")]
    assert meshes[0].get_group().group_name == dist.group.WORLD.group_name
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 4 * n), torch.nn.ReLU(), torch.nn.Linear(4 * n, 8))
    x = torch.randn(5, 8)
    ref(x).square().sum().backward()
    results = []
    for mesh in meshes:
        m = torch.nn.Sequential(torch.nn.Linear(8, 4 * n), torch.nn.ReLU(),
                                torch.nn.Linear(4 * n, 8))
        m.load_state_dict(ref.state_dict())
        parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        out = m(x)
        out.square().sum().backward()
        grads = [p.grad.full_tensor() for p in m.parameters()]
        results.append((out, grads))
        assert torch.allclose(out, ref(x), atol=1e-5)
        assert all(torch.allclose(a, p.grad, atol=1e-5) for a, p in zip(grads, ref.parameters()))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))
    full = torch.arange(8.0 * n).reshape(2 * n, 4)
    for mesh in meshes:
        d = distribute_tensor(full, mesh, [Shard(0)])
        assert torch.equal(d.to_local(), full[2 * r:2 * r + 2])
        assert torch.equal(d.redistribute(mesh, [Shard(1)]).full_tensor(), full)
        p = DTensor.from_local(full * (r + 1), mesh, [Partial()])
        total = full * (n * (n + 1) // 2)
        s = p.redistribute(mesh, [Shard(0)]).to_local()
        assert torch.equal(s, total[2 * r:2 * r + 2]), s
        assert torch.equal(p.redistribute(mesh, [Replicate()]).to_local(), total)


def p2p_batch(r, n, where):
    """batch_isend_irecv around a ring, both ways at once, as Gloo does it."""
    g = init(r, n, where)
    for pg in (None, g):
        right, left = (r + 1) % n, (r - 1) % n
        got = [torch.zeros(3), torch.zeros(2, dtype=torch.int64)]
        ops_ = [dist.P2POp(dist.isend, torch.full((3,), float(r)), right, group=pg),
                dist.P2POp(dist.irecv, got[0], left, group=pg),
                dist.P2POp(dist.isend, torch.full((2,), r, dtype=torch.int64), left, group=pg),
                dist.P2POp(dist.irecv, got[1], right, group=pg)]
        for w in dist.batch_isend_irecv(ops_):
            w.wait()
        assert torch.equal(got[0], torch.full((3,), float(left))), got
        assert torch.equal(got[1], torch.full((2,), right, dtype=torch.int64)), got


def any_source(r, n, where):
    """Receives from any source (dist.recv without src, irecv's work.source_rank()) as
    Gloo's: rank 0 takes each rank's tag-7 messages in whatever order they come, with a
    tag-5 message from each one sent before them, read after them by source; a receive
    from any source that nothing matches fails within the group's timeout."""
    g = init(r, n, where, timeout_s=3)
    got = {}
    for name, pg in (("ours", None), ("gloo", g)):
        if r > 0:  # Gloo's send waits for its receive: isend, or the tag 5 would block
            sent = [dist.isend(torch.full((2,), 10.0 * r), 0, group=pg, tag=5),
                    dist.isend(torch.full((3,), float(r)), 0, group=pg, tag=7),
                    dist.isend(torch.full((3,), 100.0 + r), 0, group=pg, tag=7)]
            for w in sent:
                w.wait()
        else:
            seen = []
            for _ in range(n - 1):
                t = torch.zeros(3)
                src = dist.recv(t, group=pg, tag=7)
                seen.append((src, t.tolist()))
            for p in range(1, n):
                t = torch.zeros(2)
                assert dist.recv(t, p, group=pg, tag=5) == p and t.tolist() == [10.0 * p] * 2, t
            for _ in range(n - 1):
                t = torch.zeros(3)
                w = dist.irecv(t, group=pg, tag=7)
                w.wait()
                seen.append((w._source_rank(), t.tolist()))
            got[name] = sorted(seen)
        dist.barrier(group=pg)
    if r == 0:
        want = sorted([(p, [float(p)] * 3) for p in range(1, n)] +
                      [(p, [100.0 + p] * 3) for p in range(1, n)])
        assert got["ours"] == got["gloo"] == want, got
    t0 = time.time()  # every rank at once: a barrier would wait out a late rank's timeout
    raises(lambda: dist.recv(torch.zeros(1), tag=9), "no message came in 3000 ms")
    assert time.time() - t0 < 5, time.time() - t0
    dist.barrier()
    t = torch.zeros(4)
    dist.all_reduce(t.fill_(1.0))
    assert torch.equal(t, torch.full((4,), float(n))), t


def tags_any_order(r, n, where):
    """A receive from a rank takes the first message with its tag, whatever came before
    it with other tags, as Gloo's (ours failed the group: the library matches in order):
    each rank sends the next three messages, tags 1, 2 and 3, each of its own size and
    dtype, and takes the previous rank's in the order 3 (blocking), 2, 1 (not); the
    group goes on after."""
    g = init(r, n, where)
    kinds = {1: torch.float32, 2: torch.int64, 3: torch.float64}
    got = {}
    for name, pg in (("ours", None), ("gloo", g)):
        sent = [dist.isend(torch.full((k + 1,), 10 * r + k, dtype=dt), (r + 1) % n, group=pg,
                           tag=k) for k, dt in kinds.items()]
        outs = {k: torch.zeros(k + 1, dtype=dt) for k, dt in kinds.items()}
        within(lambda: dist.recv(outs[3], (r - 1) % n, group=pg, tag=3))
        late = [dist.irecv(outs[k], (r - 1) % n, group=pg, tag=k) for k in (2, 1)]
        for w in late + sent:
            within(w.wait)
        got[name] = outs
    for k, dt in kinds.items():
        want = torch.full((k + 1,), 10 * ((r - 1) % n) + k, dtype=dt)
        assert torch.equal(got["ours"][k], want) and torch.equal(got["gloo"][k], want), got
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(n))), t


def bare_forms(r, n, where):
    """The process group's methods called as torch's binding also takes them (a tensor
    where the list form has a list of one; a root or an op alone, or by keyword) give
    what Gloo's give."""
    g = init(r, n, where)
    R = dist.ReduceOp
    gather_at_0, scatter_at_0 = dist.GatherOptions(), dist.ScatterOptions()
    gather_at_0.rootRank = scatter_at_0.rootRank = 0
    x = lambda: torch.arange(6, dtype=torch.float32) + 10 * r  # noqa: E731
    calls = {
        "allreduce(t)": lambda pg, t: pg.allreduce(t),
        "allreduce(t, op)": lambda pg, t: pg.allreduce(t, R.MAX),
        "allreduce(t, op=)": lambda pg, t: pg.allreduce(t, op=R.MIN),
        "allreduce([t], op=)": lambda pg, t: pg.allreduce([t], op=R.MAX),
        "broadcast(t, root)": lambda pg, t: pg.broadcast(t, n - 1),
        "broadcast(t, root=)": lambda pg, t: pg.broadcast(t, root=n - 1),
        "reduce(t, root)": lambda pg, t: pg.reduce(t, n - 1),
        "reduce(t, root, op)": lambda pg, t: pg.reduce(t, n - 1, R.MAX),
        "reduce(t, root=, op=)": lambda pg, t: pg.reduce(t, root=0, op=R.MIN),
        "allgather(outs, t)": lambda pg, t: pg.allgather(outs(pg), t),
        "gather(outs, t, root) at the root": lambda pg, t: (
            pg.gather(outs(pg), t, 0) if r == 0 else pg.gather([], [t], gather_at_0)),
        "scatter(o, ins, root) at the root": lambda pg, t: (
            pg.scatter(t, [t * (p + 1) for p in range(n)], 0) if r == 0
            else pg.scatter([t], [], scatter_at_0)),
    }
    got = {}

    def outs(pg):
        got.setdefault(id(pg), [torch.zeros(6) for _ in range(n)])
        return got[id(pg)]
    for name, call in calls.items():
        seen = []
        for pg in (dist.group.WORLD, g):
            got.clear()
            t = x()
            call(pg, t).wait()
            seen.append([t] + got.get(id(pg), []))
        root = {"reduce(t, root)": n - 1, "reduce(t, root, op)": n - 1,
                "reduce(t, root=, op=)": 0,  # Gloo's other ranks hold scratch
                "gather(outs, t, root) at the root": 0}.get(name, r)
        assert r != root or all(torch.equal(a, b) for a, b in zip(*seen)), (name, seen)
    ours = dist.group.WORLD
    wrongs = (lambda: ours.reduce([x()], 1), lambda: ours.allreduce([x()], 1),
              lambda: ours.reduce(x(), 1, 1), lambda: ours.reduce(x(), 1, root=0),
              lambda: ours.reduce(x(), R.MAX), lambda: ours.broadcast(x(), 1, root=0),
              lambda: ours.allreduce([x()], R.MAX, op=R.MIN))
    for i, wrong in enumerate(wrongs):  # as Gloo's: a TypeError, before anything is sent
        try:  # (torch 2.x's ops equal ints: 1 is AVG)
            wrong()
            raise AssertionError(f"case {i}: no TypeError")
        except TypeError:
            pass
    both = dist.ReduceOptions()
    both.rootRank, both.reduceOp = n - 1, R.MAX
    t = x()
    ours.reduce(t, both).wait()  # a bare tensor with options: both honoured
    assert r != n - 1 or torch.equal(t, torch.arange(6.0) + 10 * (n - 1)), t
    o = torch.zeros(2)  # Gloo has no reduce_scatter on torch 1.13: against the sum
    dist.group.WORLD.reduce_scatter(o, [torch.full((2,), float(p + r)) for p in range(n)]).wait()
    assert torch.equal(o, torch.full((2,), float(n * r + n * (n - 1) // 2))), o
    dist.barrier()


def keyword_forms(r, n, where):
    """Every form of torch's binding called by its keywords (this torch's names: alltoall's
    and reduce_scatter's differ between 1.13 and 2.x) gives what Gloo's gives (where Gloo
    lacks the operation, what Gloo's all_reduce or alltoall_base make of it); what the
    binding refuses by name (a keyword no form has, one given by position too, two forms
    mixed, a required one missing) is a TypeError on both, before anything is sent."""
    import datetime
    g = init(r, n, where)
    R, ours = dist.ReduceOp, dist.group.WORLD
    x = lambda k=1: torch.arange(k * n * 2, dtype=torch.float32) + 10 * r  # noqa: E731
    zeros = lambda: [torch.zeros(2 * n) for _ in range(n)]  # noqa: E731
    root = n - 1

    def opts(kind, **fields):
        o = getattr(torch._C._distributed_c10d, kind)()
        for k, v in fields.items():
            setattr(o, k, v)
        return o

    def at(kind):  # the options of a collective rooted at root
        return opts(kind, rootRank=root)

    def done(work, *tensors):
        if work is not None:
            work.wait()
        return list(tensors)

    def summed(pg, t):  # Gloo's reference for a reduce-scatter: the sum's block r
        pg.allreduce([t]).wait()
        return [t.view(n, -1)[r].clone()]

    def a2a(pg, o, i):  # Gloo's reference for alltoall: alltoall_base of the same
        return done(pg.alltoall_base(o, i, [], []), o)
    # alltoall's and reduce_scatter's bare form's names on this torch, and the other's
    a2a_names, a2a_other = ("output_tensors", "input_tensors"), ("output", "input")
    rs_names, rs_other = ("output", "input"), ("output_tensors", "input_tensor")
    if not TORCH2:
        a2a_names, a2a_other = ("output_tensor", "input_tensor"), a2a_names
        rs_names, rs_other = rs_other, rs_names
    at_root = r == root
    cases = {  # name: (call(pg) -> tensors to compare, Gloo's reference or None: the same)
        "allreduce(tensors=, opts=)": lambda pg: done(pg.allreduce(
            tensors=[t], opts=opts("AllreduceOptions", reduceOp=R.MAX)), t),
        "allreduce(tensors=, op=)": lambda pg: done(pg.allreduce(tensors=[t], op=R.MIN), t),
        "allreduce(tensor=, op=)": lambda pg: done(pg.allreduce(tensor=t, op=R.MAX), t),
        "allreduce_coalesced(tensors=, opts=)": lambda pg: done(pg.allreduce_coalesced(
            tensors=[t, i], opts=opts("AllreduceCoalescedOptions")), t, i),
        "broadcast(tensors=, opts=)": lambda pg: done(pg.broadcast(
            tensors=[t], opts=opts("BroadcastOptions", rootRank=root)), t),
        "broadcast(tensor=, root=)": lambda pg: done(pg.broadcast(tensor=t, root=root), t),
        "reduce(tensors=, opts=)": lambda pg: done(pg.reduce(
            tensors=[t], opts=opts("ReduceOptions", rootRank=root, reduceOp=R.MAX)),
            *[t][:at_root]),  # Gloo's other ranks hold scratch
        "reduce(tensor=, root=, op=)": lambda pg: done(pg.reduce(tensor=t, root=root, op=R.MIN),
                                                       *[t][:at_root]),
        "allgather(output_tensors=, input_tensors=, opts=)": lambda pg: done(pg.allgather(
            output_tensors=[outs], input_tensors=[t], opts=opts("AllgatherOptions")), *outs),
        "allgather(output_tensors=, input_tensor=)": lambda pg: done(pg.allgather(
            output_tensors=outs, input_tensor=t), *outs),
        "_allgather_base(output=, input=, opts=)": (
            lambda pg: done(pg._allgather_base(output=big, input=t, opts=opts("AllgatherOptions")),
                            big),
            lambda pg: [torch.cat(done(pg.allgather([outs], [t]), *outs))]),
        "gather(output_tensors=, input_tensors=, opts=)": lambda pg: done(pg.gather(
            output_tensors=[outs] if at_root else [], input_tensors=[t],
            opts=at("GatherOptions")), *outs),
        "gather(output_tensors=, input_tensor=, root=) at the root": lambda pg: done(
            pg.gather(output_tensors=outs, input_tensor=t, root=root) if at_root else
            pg.gather(output_tensors=[], input_tensors=[t], opts=at("GatherOptions")), *outs),
        "scatter(output_tensors=, input_tensors=, opts=)": lambda pg: done(pg.scatter(
            output_tensors=[o], input_tensors=[ins] if at_root else [],
            opts=at("ScatterOptions")), o),
        "scatter(output_tensor=, input_tensors=, root=) at the root": lambda pg: done(
            pg.scatter(output_tensor=o, input_tensors=ins, root=root) if at_root else
            pg.scatter(output_tensors=[o], input_tensors=[], opts=at("ScatterOptions")), o),
        "reduce_scatter(output_tensors=, input_tensors=, opts=)": (
            lambda pg: done(pg.reduce_scatter(output_tensors=[o], input_tensors=[ins],
                                              opts=opts("ReduceScatterOptions")), o),
            lambda pg: summed(pg, torch.cat(ins))),
        f"reduce_scatter({rs_names[0]}=, {rs_names[1]}=, op=)": (
            lambda pg: done(pg.reduce_scatter(**{rs_names[0]: o, rs_names[1]: ins},
                                              op=R.SUM), o),
            lambda pg: summed(pg, torch.cat(ins))),
        "_reduce_scatter_base(outputTensor=, inputTensor=, opts=)": (
            lambda pg: done(pg._reduce_scatter_base(outputTensor=o, inputTensor=wide,
                                                    opts=opts("ReduceScatterOptions")), o),
            lambda pg: summed(pg, wide)),
        "alltoall_base(output=, input=, output_split_sizes=, input_split_sizes=)":
            lambda pg: done(pg.alltoall_base(output=o, input=t, output_split_sizes=[],
                                             input_split_sizes=[]), o),
        f"alltoall({a2a_names[0]}=, {a2a_names[1]}=, opts=)": (
            lambda pg: done(pg.alltoall(**{a2a_names[0]: list(o.view(n, -1)),
                                           a2a_names[1]: list(t.view(n, -1))},
                                        opts=opts("AllToAllOptions")), o),
            lambda pg: a2a(pg, o, t)),
        "barrier(opts=)": lambda pg: done(pg.barrier(opts=opts("BarrierOptions"))),
        "monitored_barrier(timeout=, wait_all_ranks=)": lambda pg: done(pg.monitored_barrier(
            timeout=datetime.timedelta(seconds=20), wait_all_ranks=True)),
        "send(tensors=, dstRank=, tag=), recv(tensors=, srcRank=, tag=)": lambda pg: done(
            [w.wait() for w in (pg.send(tensors=[t], dstRank=(r + 1) % n, tag=3),
                                pg.recv(tensors=[o], srcRank=(r - 1) % n, tag=3))] and None, o),
    }
    if not TORCH2:  # 1.13's second forms of alltoall and alltoall_base
        cases["alltoall(output=, input=)"] = (
            lambda pg: done(pg.alltoall(output=list(o.view(n, -1)), input=list(t.view(n, -1))),
                            o),
            lambda pg: a2a(pg, o, t))
        cases["alltoall_base(output_tensor=, input_tensor=, ..., opts=)"] = (
            lambda pg: done(pg.alltoall_base(output_tensor=o, input_tensor=t,
                                             output_split_sizes=[], input_split_sizes=[],
                                             opts=opts("AllToAllOptions")), o))
    for name, case in cases.items():  # each call's tensors made anew for each group
        ours_call, gloo_call = case if isinstance(case, tuple) else (case, case)
        seen = []
        for pg, call in ((ours, ours_call), (g, gloo_call)):
            t, o, i, wide, outs = x(), torch.zeros(2 * n), x(), x(n), zeros()
            big, ins = torch.zeros(2 * n * n), [x() * (p + 1) for p in range(n)]
            seen.append(call(pg))
        assert all(torch.equal(a, b) for a, b in zip(*seen)) and len(seen[0]) == len(seen[1]), \
            (name, seen)
    wrongs = {
        "unknown keyword": lambda pg: pg.allreduce([x()], bogus=1),
        "our old name": lambda pg: pg.send(tensors=[x()], dst=(r + 1) % n, tag=0),
        "tensors twice": lambda pg: pg.allreduce([x()], tensors=[x()]),
        "two forms mixed": lambda pg: pg.allreduce(tensors=[x()], opts=opts("AllreduceOptions"),
                                                   op=R.MAX),
        "gather's forms mixed": lambda pg: pg.gather(output_tensors=zeros(),
                                                     input_tensors=x(), root=0),
        "reduce without its root": lambda pg: pg.reduce(tensor=x(), op=R.MAX),
        "broadcast without its root": lambda pg: pg.broadcast(tensor=x()),
        "recv_anysource's tag by keyword": lambda pg: pg.recv_anysource([x()], arg1=0),
        "the other torch's alltoall": lambda pg: pg.alltoall(
            **dict(zip(a2a_other, ([torch.zeros(2)] * n, list(x().view(n, -1)))))),
        "the other torch's reduce_scatter": lambda pg: pg.reduce_scatter(
            **dict(zip(rs_other, (torch.zeros(2 * n), [x()] * n)))),
        "wait_all": lambda pg: pg.monitored_barrier(wait_all=True),
    }
    for name, wrong in wrongs.items():
        for pg in (ours, g):
            try:
                wrong(pg)
                raise AssertionError(f"{name}: no TypeError from {pg.getBackendName()}")
            except TypeError:
                pass
    dist.barrier()


def work_objects(r, n, where):
    """An async work's methods as Gloo's: with rank 1 a second late, rank 0's work is not
    completed, wait(timeout) raises after the timeout (the operation going on: ours
    ignored it and waited for the end), and then wait(), is_completed, is_success,
    result() and get_future() give the same as Gloo's."""
    import datetime
    g = init(r, n, where)
    seen = {}
    for name, pg in (("ours", None), ("gloo", g)):
        dist.barrier(group=pg)
        if r == 1:
            time.sleep(1.0)
        w = dist.all_reduce(torch.full((3,), r + 1.0), group=pg, async_op=True)
        if r == 0:
            assert not w.is_completed(), name
            t0 = time.time()
            raises(lambda: w.wait(datetime.timedelta(milliseconds=200)), "timed out")
            assert time.time() - t0 < 0.7, (name, time.time() - t0)
        assert w.wait() is True and w.is_completed() and w.is_success(), name
        seen[name] = [w.result()[0].tolist(), w.get_future().wait()[0].tolist()]
        assert w.wait(datetime.timedelta(seconds=5)) is True, name
    want = [float(n * (n + 1) // 2)] * 3
    assert seen["ours"] == seen["gloo"] == [want, want], seen


def async_barrier(r, n, where):
    """dist.barrier(async_op=True) returns at once a pending work, as Gloo's: with the
    last rank a second late, the others' work is not completed and its future not done,
    and wait() returns once the last rank came; async_op=False still waits there. Before,
    the call itself waited for every rank."""
    g = init(r, n, where)
    seen, late = {}, r == n - 1
    for name, pg in (("ours", None), ("gloo", g)):
        for async_op in (True, False):
            dist.barrier(group=pg)
            if late:
                time.sleep(1.0)
            t0 = time.time()
            w = dist.barrier(group=pg, async_op=async_op)
            issued = time.time() - t0
            if not late and async_op:
                assert issued < 0.5, (name, issued)
                assert not w.is_completed(), name
                fut = w.get_future()
                assert not fut.done(), name
                assert w.wait() is True and fut.wait() == [], name
                assert time.time() - t0 > 0.5, (name, time.time() - t0)
            elif not late:
                assert issued > 0.5, (name, issued)
            if async_op:
                assert w.wait() is True and w.is_completed() and w.is_success(), name
                seen[name] = [w.result(), w.get_future().wait()]
    assert seen["ours"] == seen["gloo"] == [[], []], seen


def _started(work):
    """work, its operation started (not held for a wait that may come at once)."""
    work.is_completed()
    return work


def interrupted(r, n, where, how):
    """Ctrl-C while rank 0 is blocked in an operation rank 1 never joins
    (ranks.interrupted): a blocking all-reduce, a started work's wait(), the wait of one
    whose future was taken (a completer thread waits in the library), a receive from rank
    1 and from any rank, a barrier; then destroy_process_group returns. Before, the signal
    waited for the call to end (at rank 1's exit, or the 30 s timeout), and a receive from
    any rank, interrupted, stayed posted for a later message."""
    init(r, n, where)
    t = torch.ones(3)

    def future():
        w = dist.all_reduce(t, async_op=True)
        w.get_future()
        w.wait()
    stuck = {"all_reduce": lambda: dist.all_reduce(t),
             "wait": lambda: _started(dist.all_reduce(t, async_op=True)).wait(),
             "future": future, "recv": lambda: dist.recv(t, 1), "recv_any": lambda: dist.recv(t),
             "barrier": dist.barrier}[how]
    ranks.interrupted(r, where, stuck, lambda: dist.all_reduce(t), lambda: dist.all_reduce(t))
    within(dist.destroy_process_group, 10)


def interrupted_in_short_calls(r, n, where):
    """SIGINT while rank 0 runs a tight loop of small blocking all-reduces (it lands inside
    one, most often, or between two): its KeyboardInterrupt comes, and a last all-reduce
    with rank 1 succeeds, the group usable as a Gloo group stays (test_collective's case of
    the name, through torch). Before, work.wait() aborted the group's communicator on any
    KeyboardInterrupt, though the operation had returned by itself: 5 of 5 runs failed."""
    init(r, n, where, timeout_s=20)
    ranks.short_calls(r, torch.zeros(4), dist.all_reduce)
    within(dist.destroy_process_group, 10)


def held_then_elsewhere(r, n, where):
    """A collective nobody waits for yet still starts: rank 0 issues it with
    async_op=True, then waits in a Gloo barrier that the others reach only once that
    collective has ended (the backend holds each one back for a wait() that may come
    at once, never for good)."""
    g = init(r, n, where, timeout_s=20)
    t = torch.full((3,), r + 1.0)
    if r == 0:
        w = dist.all_reduce(t, async_op=True)
        within(lambda: dist.barrier(group=g))
        w.wait()
    else:
        dist.all_reduce(t)
        dist.barrier(group=g)
    assert torch.equal(t, torch.full((3,), n * (n + 1) / 2)), t


def recorder_on_timeout(r, n, where):
    """A wait(timeout) that passes with COLL_RECORDER_DIR set writes the flight recorder
    there and says so (as the library's own timeouts do): rank 0's file holds the
    all-reduce still running, waiting for rank 1, which comes a second late."""
    import datetime
    import glob
    import json
    rec = os.path.join(where, "recorder")
    os.makedirs(rec, exist_ok=True)
    os.environ["COLL_RECORDER_DIR"] = rec  # read at init
    init(r, n, where)
    dist.barrier()
    if r == 1:
        time.sleep(1.0)
    w = dist.all_reduce(torch.ones(3), async_op=True)
    if r == 0:
        raises(lambda: w.wait(datetime.timedelta(milliseconds=200)),
               "the flight recorder is in " + rec)
        files = glob.glob(os.path.join(rec, "*"))
        assert len(files) == 1, files
        ops = json.load(open(files[0]))["ops"]
        assert ops[-1]["kind"] == "allreduce" and ops[-1]["state"] in ("queued", "running"), ops
    assert w.wait() is True


def destroy_in_flight(r, n, where):
    """destroy_process_group with operations in flight on rank 0 (an all-reduce whose
    future a completer thread waits on, a receive from any source) returns at once, and
    those operations fail; the other ranks stay alive meanwhile (before, destroy waited
    until they exited; Gloo's waits so too). Then abort() on a group of rank 0's: a
    rank 1 blocked in an all-reduce on it fails at once, not at its 30 s timeout."""
    import gc
    init(r, n, where)
    done = os.path.join(where, "destroyed")
    dist.barrier()
    if r == 0:
        w = dist.all_reduce(torch.ones(3), async_op=True)
        fut = w.get_future()
        got = dist.irecv(torch.zeros(2))
        t0 = time.time()
        within(lambda: (dist.destroy_process_group(), gc.collect()), 5)
        assert time.time() - t0 < 2, time.time() - t0
        for wait in (w.wait, fut.wait, got.wait):
            raises(wait, "COLL_EABORTED")
        open(done, "w").close()
    else:
        deadline = time.time() + 15
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(done), "rank 0 did not come back from destroy"
        dist.destroy_process_group()
    again = os.path.join(where, "again")
    os.makedirs(again, exist_ok=True)
    init(r, n, again)
    dist.barrier()
    pg = dist.group.WORLD
    if r == 0:
        time.sleep(0.5)
        pg.abort()
        raises(lambda: dist.all_reduce(torch.ones(3)), "closed")
    else:
        t0 = time.time()
        raises(lambda: dist.all_reduce(torch.ones(3)), "COLL_E")
        assert time.time() - t0 < 5, time.time() - t0


def subgroups(r, n, where):
    """Groups of ours made by new_subgroups and new_subgroups_by_enumeration (new_group on
    torch 1.13) as Gloo's
    (all-reduce, all-gather, broadcast from a group rank, a receive from any source in
    the group answering the sender's global rank, functional collectives by group name)
    and, on torch 2.x, a 2-D device mesh (its rows and columns are such groups) with
    DTensor redistributions. torch 2.6's split_group takes NCCL only (it refuses Gloo too)."""
    g = init(r, n, where)
    found = {}
    for backend in ("collective", "gloo"):
        if TORCH2:
            half, _ = dist.new_subgroups(n // 2, backend=backend)
            pair, _ = dist.new_subgroups_by_enumeration(
                [list(range(p, n, n // 2)) for p in range(n // 2)], backend=backend)
        else:  # torch 1.13's new_subgroups asks for CUDA: new_group, group by group
            groups = [dist.new_group(list(range(p, p + n // 2)), backend=backend)
                      for p in range(0, n, n // 2)]
            half = groups[r // (n // 2)]
            groups = [dist.new_group(list(range(p, n, n // 2)), backend=backend)
                      for p in range(n // 2)]
            pair = groups[r % (n // 2)]
        x = torch.full((3,), r + 1.0)
        dist.all_reduce(x, group=half)
        gathered = [torch.zeros(2) for _ in range(dist.get_world_size(half))]
        dist.all_gather(gathered, torch.tensor([r, 10.0 * r]), group=half)
        gathered = torch.cat(gathered)
        b = torch.full((2,), float(r))
        dist.broadcast(b, dist.get_global_rank(half, 1), group=half)
        partner = [p for p in dist.get_process_group_ranks(pair) if p != r][0]
        got = torch.zeros(2)
        if r < partner:
            dist.send(torch.full((2,), 7.0 * r), partner, group=pair)
            src = -1
        else:
            src = dist.recv(got, group=pair)
        found[backend] = [x.tolist(), gathered.tolist(), b.tolist(), src, got.tolist()]
        if TORCH2:
            import torch.distributed._functional_collectives as fc
            y = fc.wait_tensor(fc.all_reduce(torch.full((2,), r + 1.0), "max", half.group_name))
            found[backend].append(y.tolist())
    assert found["collective"] == found["gloo"], found
    first = r // (n // 2) * (n // 2)
    assert found["gloo"][0] == [float(sum(range(first + 1, first + n // 2 + 1)))] * 3, found
    if TORCH2 and n == 4:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        assert mesh["tp"].get_group().getBackendName() == "collective"
        full = torch.arange(32.0).reshape(4, 8)
        d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        assert torch.equal(d.to_local(), full[r // 2 * 2:r // 2 * 2 + 2, r % 2 * 4:r % 2 * 4 + 4])
        assert torch.equal(d.redistribute(mesh, [Replicate(), Shard(0)]).to_local(),
                           full[r % 2 * 2:r % 2 * 2 + 2])
        assert torch.equal(d.full_tensor(), full)


def _mlp():
    torch.manual_seed(0)
    return [torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
            torch.nn.Linear(32, 4)]


def pipeline(r, n, where):
    """torch 2.x's torch.distributed.pipelining on CPU, a 5-layer MLP in 2 stages (rank r
    runs stage r), 3 SGD steps of 4 micro-batches: ScheduleGPipe over our group gives
    Gloo's losses and weights exactly, and ScheduleGPipe and Schedule1F1B over ours those
    of the whole model trained here micro-batch by micro-batch. (Gloo's 1F1B hung here on
    torch 2.6: both stages waiting in the fused batch_isend_irecv, schedules.py 724/747.)"""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    g = init(r, n, where)
    gen = torch.Generator().manual_seed(7)
    data = [(torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen))] * 3
    mse = torch.nn.functional.mse_loss
    whole = torch.nn.Sequential(*_mlp())
    opt = torch.optim.SGD(whole.parameters(), lr=0.05)
    ref = []
    for x, y in data:
        opt.zero_grad()
        step = [mse(whole(xm), ym) for xm, ym in zip(x.chunk(4), y.chunk(4))]
        for loss in step:
            loss.backward()
        opt.step()
        ref.append(torch.stack(step).mean().item())
    mine = list(whole.parameters())[:2] if r == 0 else list(whole.parameters())[2:]
    runs = {}
    for schedule, name, pg in ((ScheduleGPipe, "ours", None), (ScheduleGPipe, "gloo", g),
                               (Schedule1F1B, "ours", None)):
        layers = _mlp()
        part = torch.nn.Sequential(*(layers[:2] if r == 0 else layers[2:]))
        stage = PipelineStage(part, r, n, torch.device("cpu"), group=pg)
        sched = schedule(stage, n_microbatches=4, loss_fn=mse)
        opt = torch.optim.SGD(part.parameters(), lr=0.05)
        losses = []
        for x, y in data:
            opt.zero_grad()
            if r == 0:
                sched.step(x)
            else:
                step = []
                sched.step(target=y, losses=step)
                losses.append(torch.stack(step).mean().item())
            opt.step()
        params = [p.detach().clone() for p in part.parameters()]
        runs[(schedule.__name__, name)] = losses, params
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(params, mine))
        if r == n - 1:
            assert all(abs(a - b) < 1e-6 for a, b in zip(losses, ref)), (losses, ref)
    (la, pa), (lb, pb) = runs[("ScheduleGPipe", "ours")], runs[("ScheduleGPipe", "gloo")]
    assert la == lb and all(torch.equal(a, b) for a, b in zip(pa, pb)), (la, lb)
    if r == n - 1:
        assert ref[-1] < ref[0], ref


def fsdp_checkpoint(r, n, where):
    """An FSDP1 model and its optimizer saved and loaded through torch.distributed.checkpoint
    with sharded state dicts (torch 2.x), over our group as over Gloo's: torch asks the
    group its default device (_get_pg_default_device) for the shards, which raised
    "Default device not found" for a group made in Python. The weights come back."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    g = init(r, n, where)
    assert dist.distributed_c10d._get_pg_default_device() == torch.device("cpu")
    assert dist.distributed_c10d._device_capability() == ["cpu"]
    for name, pg in (("ours", None), ("gloo", g)):
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        m = FSDP(mlp, process_group=pg, device_id=torch.device("cpu"), use_orig_params=True)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        for i in range(3):
            torch.manual_seed(r * 10 + i)
            opt.zero_grad()
            m(torch.randn(5, 8)).pow(2).sum().backward()
            opt.step()
        model, optim = get_state_dict(m, opt)
        path = os.path.join(where, "checkpoint-" + name)
        dcp.save({"model": model, "optim": optim}, checkpoint_id=path, process_group=pg)
        with FSDP.summon_full_params(m):
            before = [p.detach().clone() for p in m.parameters()]
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
        model, optim = get_state_dict(m, opt)
        loaded = {"model": model, "optim": optim}
        dcp.load(loaded, checkpoint_id=path, process_group=pg)
        set_state_dict(m, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
        with FSDP.summon_full_params(m):
            assert all(torch.equal(a, b.detach()) for a, b in zip(before, m.parameters())), name
    dist.barrier()


def fsdp(r, n, where):
    """FSDP1 on CPU (torch 2.x): 3 SGD steps of an MLP, each rank its own data, fully
    sharded over our group and over Gloo's, and (4 ranks) hybrid-sharded over a 2-D mesh
    of ours against the same on Gloo's groups: the same losses and whole weights within
    float rounding, as those of DDP's averaging done by hand (the whole model, gradients
    all-reduced), and the same on every rank."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    g = init(r, n, where)
    gen = torch.Generator().manual_seed(100 + r)
    x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
    mse = torch.nn.functional.mse_loss

    def train(wrap):
        model = wrap(torch.nn.Sequential(*_mlp()))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with FSDP.summon_full_params(model):
            return losses, [p.detach().clone() for p in model.parameters()]

    def by_hand(m):  # every rank's gradient averaged before the step, as DDP
        for p in m.parameters():
            p.register_hook(lambda grad: (dist.all_reduce(grad, group=g), grad / n)[1])
        return m
    cpu = torch.device("cpu")
    runs = {"hand": train(by_hand)}
    for name, pg in (("ours", dist.group.WORLD), ("gloo", g)):
        runs[name] = train(lambda m: FSDP(m, process_group=pg, device_id=cpu))
    if n == 4:
        rows = [[0, 1], [2, 3]]
        meshes = {"ours hybrid": DeviceMesh("cpu", rows, mesh_dim_names=("replicate", "shard"))}
        groups = [[dist.new_group(ranks_, backend="gloo") for ranks_ in side]
                  for side in (rows, [[0, 2], [1, 3]])]
        mine = (groups[0][r // 2], groups[1][r % 2])  # (shard within a row, replicate)
        for name, pgs in (("ours hybrid", None), ("gloo hybrid", mine)):
            kw = {"device_mesh": meshes[name]} if pgs is None else {"process_group": pgs}
            runs[name] = train(lambda m: FSDP(m, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                              device_id=cpu, **kw))
    for name, (losses, params) in runs.items():
        if name.startswith("ours"):
            other = runs["gloo hybrid" if "hybrid" in name else "gloo"]
            # within float rounding: the two reduce-scatters add in different orders
            assert torch.allclose(torch.tensor(losses), torch.tensor(other[0])), name
            assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6)
                       for a, b in zip(params, other[1])), name
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6)
                   for a, b in zip(params, runs["hand"][1])), name
    same_everywhere(runs["ours"][1], n)


def sequence_numbers(r, n, where):
    """Each group counts the operations issued on it as torch 2.x's Gloo does."""
    g = init(r, n, where)
    counts = []
    for pg in (dist.group.WORLD, g):
        before = pg._get_sequence_number_for_group()
        dist.all_reduce(torch.ones(2), group=pg)
        dist.broadcast(torch.ones(2), 0, group=pg)
        dist.barrier(group=pg)
        dist.all_reduce(torch.ones(2), group=pg, async_op=True).wait()
        if n == 2:
            (dist.send if r == 0 else dist.recv)(torch.ones(1), 1 - r, group=pg)
        counts.append(pg._get_sequence_number_for_group() - before)
    # torch 1.13's Gloo counts collectives only; 2.x's, as this backend, sends and receives too.
    p2p = n == 2
    assert counts == [4 + p2p, 4 + (p2p and TORCH2)], counts


def monitored(r, n, where):
    """monitored_barrier on the group (torch's dist.monitored_barrier takes Gloo groups
    only): it passes when every rank comes; with ranks late, every rank raises rank 0's
    sentence naming them, all of them (wait_all_ranks) or the first, and the next one
    passes again."""
    import datetime
    init(r, n, where)
    pg = dist.group.WORLD
    half = datetime.timedelta(milliseconds=500)
    pg.monitored_barrier(datetime.timedelta(seconds=10))
    for late, wait_all in ([1, 2], True), ([1, 2], False), ([2], True):
        if r in late:
            time.sleep(1.5)
        t0 = time.time()
        raises(lambda: pg.monitored_barrier(half, wait_all_ranks=wait_all),
               f"Rank{'s' if wait_all and len(late) > 1 else ''} "
               f"{', '.join(map(str, late if wait_all else late[:1]))} "
               "failed to pass monitoredBarrier in 500 ms")
        assert time.time() - t0 < 1.5, time.time() - t0
        dist.barrier()
    pg.monitored_barrier(datetime.timedelta(seconds=10))


def bools(r, n, where):
    """bool tensors as torch 2.x's Gloo takes them: all_reduce (a sum is an or, a product
    an and, as C++'s bool arithmetic), reduce, broadcast, all_gather, send and recv give
    Gloo's results (on 1.13, whose Gloo refuses bool, Gloo's on int64 tested against 0),
    AVG is refused, and DDP over a model with a bool buffer (a causal mask, broadcast at
    construction) trains as over Gloo (ours refused bool before)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    g = init(r, n, where)
    R = dist.ReduceOp
    x = lambda: torch.tensor([r == 0, False, True, r % 2 == 1, r == n - 1])  # noqa: E731
    calls = [("all_reduce", op, lambda t, pg, op=op: dist.all_reduce(t, op=op, group=pg))
             for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX)]
    calls += [("reduce", R.MAX, lambda t, pg: dist.reduce(t, n - 1, group=pg)),
              ("broadcast", None, lambda t, pg: dist.broadcast(t, n - 1, group=pg)),
              ("all_gather", None, lambda t, pg: t.copy_(all_gathered(t, pg)[(r + 1) % n])),
              ("send and recv", None, lambda t, pg: [w.wait() for w in (
                  dist.isend(t.clone(), (r + 1) % n, group=pg),
                  dist.irecv(t, (r - 1) % n, group=pg))])]

    def all_gathered(t, pg):
        outs = [torch.zeros_like(t) for _ in range(n)]
        dist.all_gather(outs, t, group=pg)
        return outs
    for name, op, call in calls:
        seen = []
        for pg, t in ((None, x()), (g, x() if TORCH2 else x().long())):
            call(t, pg)
            seen.append(t != 0)
        assert (name == "reduce" and r != n - 1) or torch.equal(*seen), (name, op, seen)
    raises(lambda: dist.all_reduce(x(), op=R.AVG), "bool tensors reduce by SUM")

    class Masked(torch.nn.Module):
        def __init__(self, dtype):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("mask", torch.tril(torch.ones(4, 4)).to(dtype))

        def forward(self, x):
            return self.lin(x).masked_fill(self.mask[1] == 0, 0)
    trained = []
    for pg, dtype in ((None, torch.bool), (g, torch.bool if TORCH2 else torch.float32)):
        torch.manual_seed(0)
        m = DDP(Masked(dtype), process_group=pg)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(3):
            data = torch.randn(3, 4, generator=torch.Generator().manual_seed(10 * r + i))
            m(data).pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
        trained.append([p.detach().clone() for p in m.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*trained)), trained


def bitwise(r, n, where):
    """BAND, BOR and BXOR as Gloo's on every integer dtype (random bits, sign bits
    included) and on bool (on 1.13, whose Gloo refuses bool, Gloo's on uint8 of the same
    bytes): all_reduce, reduce, reduce_scatter (list and tensor forms, against Gloo's
    all_reduce of the whole), all_reduce_coalesced. A float tensor with a bitwise op is
    refused on every rank, as by Gloo, and the group still works after."""
    g = init(r, n, where)
    R = dist.ReduceOp
    k = 7  # elements in each rank's block: odd, so vector loops have a tail
    limits = {torch.int8: (-2 ** 7, 2 ** 7), torch.uint8: (0, 2 ** 8),
              torch.int32: (-2 ** 31, 2 ** 31), torch.int64: (-2 ** 63, 2 ** 63 - 1),
              torch.bool: (0, 2)}

    def scatter(out, x, op):
        with warnings.catch_warnings():  # 1.13: _reduce_scatter_base "will be deprecated"
            warnings.simplefilter("ignore")
            (dist.reduce_scatter_tensor if TORCH2 else dist._reduce_scatter_base)(out, x, op=op)
    for i, (dt, (lo, hi)) in enumerate(limits.items()):
        for op in (R.BAND, R.BOR, R.BXOR):
            gen = torch.Generator().manual_seed(100 * r + i)
            drawn = torch.int64 if dt == torch.bool else dt  # randint draws no bools
            x = torch.randint(lo, hi, (k * n,), generator=gen, dtype=drawn).to(dt)
            ref = x.clone() if TORCH2 or dt != torch.bool else x.to(torch.uint8)
            dist.all_reduce(ref, op=op, group=g)
            ref = ref.to(dt)
            a = x.clone()
            dist.all_reduce(a, op=op)
            assert torch.equal(a, ref), ("all_reduce", dt, op, a, ref)
            a = x.clone()
            dist.reduce(a, n - 1, op=op)
            assert torch.equal(a, ref if r == n - 1 else x), ("reduce", dt, op, a, ref)
            o = torch.zeros(k, dtype=dt)
            dist.reduce_scatter(o, list(x.chunk(n)), op=op)
            assert torch.equal(o, ref[k * r:k * (r + 1)]), ("reduce_scatter", dt, op, o)
            o = torch.zeros(k, dtype=dt)
            scatter(o, x, op=op)
            assert torch.equal(o, ref[k * r:k * (r + 1)]), ("reduce_scatter_tensor", dt, op)
            ts = [x[:k].clone(), x[k:].clone().reshape(-1, k)]
            with warnings.catch_warnings():  # "will be deprecated"
                warnings.simplefilter("ignore")
                dist.all_reduce_coalesced(ts, op=op)
            assert torch.equal(torch.cat([t.reshape(-1) for t in ts]), ref), ("coalesced", dt, op)
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for op in (R.BAND, R.BOR, R.BXOR):
            raises(lambda: dist.all_reduce(torch.ones(4, dtype=dt), op=op), "non-integral")
            raises(lambda: dist.reduce(torch.ones(4, dtype=dt), 0, op=op), "non-integral")
            raises(lambda: scatter(torch.ones(1, dtype=dt), torch.ones(n, dtype=dt), op=op),
                   "non-integral")
        if dt not in FLOATS:  # Gloo's own refusal (1.13's Gloo lacks some halves)
            raises(lambda: dist.all_reduce(torch.ones(4, dtype=dt), op=R.BXOR, group=g),
                   "non-integral")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(n))), t


def non_contiguous(r, n, where):
    """Transposed (non-contiguous) inputs and outputs give Gloo's results: all_gather,
    broadcast, all_reduce, scatter; gather and all_to_all_single against the rows by hand
    (Gloo's write the rows into such an output's storage in memory order, wrongly)."""
    g = init(r, n, where)

    def t32():  # (3, 2), not contiguous
        return torch.zeros(2, 3).t()
    got = {}
    for name, pg in (("ours", None), ("gloo", g)):
        src = (torch.arange(6.0).reshape(2, 3) + 10 * r).t()
        outs = [t32() for _ in range(n)]
        dist.all_gather(outs, src, group=pg)
        b, a = src.clone().t().contiguous().t(), src.clone().t().contiguous().t()
        dist.broadcast(b, n - 1, group=pg)
        dist.all_reduce(a, group=pg)
        sc = t32()
        dist.scatter(sc, [src + p for p in range(n)] if r == 0 else None, src=0, group=pg)
        got[name] = outs + [b, a, sc]
    assert all(torch.equal(x, y) for x, y in zip(*got.values())), got
    gathered = [t32() for _ in range(n)] if r == 0 else None
    dist.gather(src, gathered, dst=0)
    assert r != 0 or all(torch.equal(x, y) for x, y in zip(gathered, outs)), gathered
    o = torch.zeros(2, n).t()
    dist.all_to_all_single(o, torch.arange(2.0 * n).reshape(n, 2) + r)
    assert torch.equal(o, torch.tensor([[2.0 * r + q, 2.0 * r + 1 + q] for q in range(n)])), o


def autograd_collectives(r, n, where):
    """torch.distributed.nn's collectives with autograd (contrastive losses gather
    embeddings so): all_gather's backward is a reduce-scatter, which Gloo has not (so no
    comparison with it), all_reduce's an all-reduce; the gradients are the sums by hand."""
    import torch.distributed.nn.functional as F
    init(r, n, where)
    x = (torch.arange(4.0) + r).requires_grad_()
    outs = F.all_gather(x)
    assert all(torch.equal(o.detach(), torch.arange(4.0) + q) for q, o in enumerate(outs))
    loss = sum((o * (q + 1)).sum() for q, o in enumerate(outs))
    y = (torch.arange(3.0) * (r + 1)).requires_grad_()
    z = F.all_reduce(y)
    (loss + (z * z).sum()).backward()
    assert torch.equal(x.grad, torch.full((4,), float(n * (r + 1)))), x.grad
    total = torch.arange(3.0) * sum(q + 1 for q in range(n))
    assert torch.allclose(y.grad, 2 * n * total), (y.grad, total)


def init_again(r, n, where):
    """init_process_group with env:// on one MASTER_PORT again after destroy_process_group
    (pytest fixtures do): the library lets torch's store go when its init returns. Its
    store callbacks held it in a cycle that only the collector freed, so rank 0's TCPStore
    still served the port after destroy, and the next init met the last job's keys there
    ("another job is using this rendezvous"); Gloo's passed."""
    import datetime
    import socket
    if r == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(os.path.join(where, "port.tmp"), "w") as f:
            f.write(str(port))
        os.rename(os.path.join(where, "port.tmp"), os.path.join(where, "port"))
    while not os.path.exists(os.path.join(where, "port")):
        time.sleep(0.01)
    port = open(os.path.join(where, "port")).read()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r), WORLD_SIZE=str(n))
    for i in range(3):
        dist.init_process_group("collective", timeout=datetime.timedelta(seconds=20))
        t = torch.full((2,), float(r + i))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((2,), float(sum(range(n)) + n * i))), (i, t)
        dist.barrier()
        dist.destroy_process_group()
        # torch's own race, Gloo's too: a rank back before rank 0 let its store go would
        # meet the old one
        time.sleep(0.5)


def dead(r, n, where):
    init(r, n, where, timeout_s=3)
    dist.barrier()
    if r == n - 1:
        os._exit(9)
    t0 = time.time()
    try:
        for _ in range(1000):
            dist.all_reduce(torch.ones(1000))
    except RuntimeError as e:
        assert "COLL_EPEER" in str(e) or "COLL_ETIMEDOUT" in str(e), e
        assert time.time() - t0 < 7
        return
    raise AssertionError("nobody noticed the dead rank")


def dead_before_link(r, n, where, peer_timeout):
    """A receive from a rank that died after init, before any link to it formed, torch's
    timeout 10 minutes: a RuntimeError naming it within 10 s. With COLL_TIMEOUT_MS=3000 the
    heartbeat's bound may find it (before: torch's timeout was the peer timeout too, and
    the bound its half, 5 minutes); without (peer_timeout None) only the look at its
    ports does (on one host, shm: before, the 5 minutes)."""
    if peer_timeout:
        os.environ["COLL_TIMEOUT_MS"] = str(peer_timeout)
    init(r, n, where, timeout_s=600)
    dist.barrier()
    if r == 1:
        os._exit(9)
    t0 = time.time()
    try:
        dist.recv(torch.zeros(4), 1)
    except RuntimeError as e:
        named = "rank 1 has not answered" in str(e) or "rank 1 is gone" in str(e)
        assert named and "COLL_EPEER" in str(e), e
        assert time.time() - t0 < 10, time.time() - t0
        return
    raise AssertionError("a receive from a dead rank returned")


def main():
    bad = 0
    for n in (1, 2, 3, 4):
        bad += ranks.check(ops, n, "torch ops against gloo")
    bad += ranks.check(ddp, 2, "DDP against gloo")
    bad += ranks.check(ddp_variants, 2, "DDP's options (bucket views, static graph, no_sync ...)")
    bad += ranks.check(codecs, 3, "codecs and the error-feedback DDP hook")
    bad += ranks.check(bad_input, 2, "bad input")
    bad += ranks.check(copy_fails, 2, "a failing result copy fails its work only")
    bad += ranks.check(future_at_once, 2, "get_future() at once")
    bad += ranks.check(torch_hooks, 2, "torch's DDP communication hooks")
    bad += ranks.check(callback_waits_earlier, 2, "a callback waiting for an earlier future")
    for n in (1, 2, 3, 4):
        bad += ranks.check(sizes_checked, n, "sizes checked as Gloo does")
    bad += ranks.check(short_scatter, 3, "a short scatter refused by its root")
    bad += ranks.check(no_warning, 1, "registered without a warning")
    for n in (2, 3, 4):
        bad += ranks.check(reductions, n, "AVG, PREMUL_SUM and the coalesced forms")
        bad += ranks.check(p2p_batch, n, "batch_isend_irecv around a ring")
        bad += ranks.check(any_source, n, "receives from any source against gloo")
        bad += ranks.check(tags_any_order, n, "receives by tag in any order against gloo")
        bad += ranks.check(work_objects, n, "work objects' methods against gloo")
        bad += ranks.check(bare_forms, n, "the binding's bare forms against gloo")
        bad += ranks.check(keyword_forms, n, "the binding's keyword forms against gloo")
        bad += ranks.check(held_then_elsewhere, n, "an async collective starts unwaited")
        bad += ranks.check(async_barrier, n, "barrier(async_op=True) against gloo")
        bad += ranks.check(sequence_numbers, n, "sequence numbers as Gloo's")
        if TORCH2:
            bad += ranks.check(functional, n, "functional collectives against gloo")
            bad += ranks.check(dtensor, n, "DTensor tensor parallel against gloo")
    for n in (2, 3):
        bad += ranks.check(results_freed, n, "result tensors freed once let go")
    bad += ranks.check(last_before_destroy, 2, "the last result freed by destroy")
    bad += ranks.check(join_uneven, 2, "DDP under Join, uneven inputs, a collection between")
    if TORCH2:
        bad += ranks.check(functional_into_one_tensor, 2, "two functional ops into one tensor")
    bad += ranks.check(monitored, 3, "monitored_barrier naming the late ranks")
    bad += ranks.check(destroy_in_flight, 3, "destroy and abort with operations in flight")
    bad += ranks.check(recorder_on_timeout, 2, "a torch wait's timeout dumps the recorder")
    bad += ranks.check(subgroups, 4, "new_subgroups, by enumeration, a 2-D mesh against gloo")
    if TORCH2:
        bad += ranks.check(pipeline, 2, "pipelining (GPipe, 1F1B) against gloo")
        for n in (2, 4):
            bad += ranks.check(fsdp, n, "FSDP1 (full, hybrid on 4) against gloo")
        bad += ranks.check(fsdp_checkpoint, 2, "FSDP1 sharded checkpoints saved and loaded")
    bad += ranks.check(objects, 3, "object collectives (and ZeRO, checkpoints on 2.x)")
    bad += ranks.check(status_names_torch_ranks, 2, "coll_status names a stopped torch rank")
    bad += ranks.check(non_contiguous, 3, "non-contiguous inputs and outputs against gloo")
    for n in (2, 3):
        bad += ranks.check(bools, n, "bool tensors (and DDP with a bool buffer) against gloo")
    for n in (1, 2, 3, 4):
        bad += ranks.check(bitwise, n, "BAND, BOR, BXOR on integers and bool against gloo")
    bad += ranks.check(autograd_collectives, 3, "torch.distributed.nn's collectives, backward")
    bad += ranks.check(init_again, 3, "init on one MASTER_PORT again after destroy")
    for how in ("all_reduce", "wait", "future", "recv", "recv_any", "barrier"):
        bad += ranks.check(functools.partial(interrupted, how=how), 2,
                           f"Ctrl-C while blocked in {how}")
    bad += ranks.check(interrupted_in_short_calls, 2, "Ctrl-C in a loop of short all-reduces")
    bad += ranks.check(dead, 3, "a dead rank", {2: 9})
    for peer_timeout in (3000, None):
        bad += ranks.check(functools.partial(dead_before_link, peer_timeout=peer_timeout), 2,
                           f"a receive from a rank dead before its link (peer timeout "
                           f"{peer_timeout or 'torch'})", {1: 9})
    return 1 if bad else 0



def results_freed(r, n, where):
    """A result tensor is freed once its caller lets it go (by the group's next
    operation), with Python's collector off: whichever way its work was ended (blocking,
    wait(), get_future()), a list of outputs, and on torch 2.x the functional collectives'
    outputs (waited by wait_tensor, one by one for the coalesced form, C++ holding the
    work). The tensor kept its work and the work its result, a cycle only the collector
    freed: a loop of functional all-gathers held every output until it ran. A work the
    caller keeps still gives its result after the caller let the tensor go (result(),
    get_future()), as Gloo's."""
    import gc
    import weakref
    init(r, n, where)
    want = torch.arange(n).repeat_interleave(4).float()
    gc.disable()
    try:
        for way in ("blocking", "wait", "future"):
            o, i = torch.empty(4 * n), torch.full((4,), float(r))
            w = dist.all_gather_into_tensor(o, i, async_op=way != "blocking")
            if way == "future":
                assert w.get_future().wait()[0].data_ptr() == o.data_ptr()
            elif way == "wait":
                w.wait()
            assert torch.equal(o, want), (way, o)
            ref = weakref.ref(o)
            del o, w
            _freed(ref, way)
        outs = [torch.empty(4) for _ in range(n)]
        dist.all_gather(outs, torch.full((4,), float(r)))
        ref = weakref.ref(outs[0])
        del outs
        _freed(ref, "a list of outputs")
        o = torch.empty(4 * n)
        w = dist.all_gather_into_tensor(o, torch.full((4,), float(r)), async_op=True)
        w.wait()
        ref = weakref.ref(o)
        del o
        assert ref() is not None, "the work let its result go"
        assert torch.equal(w.result()[0], want) and torch.equal(w.get_future().value()[0], want)
        del w
        _freed(ref, "the result of a work let go")
        if TORCH2:
            _functional_dropped(r, n, want)
    finally:
        gc.enable()


def last_before_destroy(r, n, where):
    """The result of a job's last operation (async, waited, let go), which the group keeps
    for C++ until its next operation (_Completer.last), is freed by destroy_process_group,
    with Python's collector off."""
    import gc
    import weakref
    init(r, n, where)
    gc.disable()
    try:
        t = torch.ones(1 << 20)
        dist.all_reduce(t, async_op=True).wait()
        ref = weakref.ref(t)
        del t
        dist.destroy_process_group()
        assert ref() is None, "the last result stays allocated after destroy_process_group"
    finally:
        gc.enable()


def _freed(ref, what):
    """The tensor ref refers to, just let go, is freed by its group's next operation (every
    rank calls this as often): its work lets it go once waited enough (get_future()'s on
    the completer's thread, just after settling), the group keeps that work until then."""
    deadline = time.time() + 5
    while getattr(ref(), "_collective_work", None) and time.time() < deadline:
        time.sleep(0.01)
    dist.all_reduce(torch.zeros(1))
    while ref() is not None and time.time() < deadline:  # the completer's thread lets go
        time.sleep(0.01)
    assert ref() is None, f"{what}: a result tensor let go stays allocated"


def _functional_dropped(r, n, want):
    import weakref
    import torch.distributed._functional_collectives as fc
    world = dist.group.WORLD
    for _ in range(2):  # the second: after a work the group kept (_Completer.last)
        x = fc.wait_tensor(fc.all_gather_tensor(torch.full((4,), float(r)), 0, world))
        assert torch.equal(x, want), x
        ref = weakref.ref(x)
        del x
        _freed(ref, "functional all_gather_tensor")
    ins = [torch.full((4,), float(r)), torch.full((2,), float(r))]
    xs = [fc.wait_tensor(t) for t in fc.all_gather_into_tensor_coalesced(ins, world)]
    assert torch.equal(xs[0], want), xs
    refs = [weakref.ref(x) for x in xs]
    del xs
    for k, ref in enumerate(refs):
        _freed(ref, f"functional all_gather_into_tensor_coalesced, output {k}")
    y = fc.wait_tensor(fc.reduce_scatter_tensor(torch.ones(2 * n), "sum", 0, world))
    assert torch.equal(y, torch.full((2,), float(n))), y
    ref = weakref.ref(y)
    del y
    _freed(ref, "functional reduce_scatter_tensor")


def join_uneven(r, n, where):
    """DDP under Join with divide_by_initial_world_size=False, uneven inputs, Python's
    collector off but for a pass between forward and backward: DDP's reducer waits (C++) on the forward pass's all-reduce and then
    takes its future for the count of ranks still training, the Python work reached only
    while alive. Ends with the same parameters on every rank."""
    import gc
    from torch.distributed.algorithms.join import Join
    init(r, n, where)
    for unused in (False, True):
        torch.manual_seed(0)
        # find_unused_parameters: the joined rank's hook calls process_group.allreduce
        # with one tensor, not a list (it failed: "requires a single-element list")
        m = torch.nn.parallel.DistributedDataParallel(
            _HalfUsed() if unused else torch.nn.Linear(4, 4), find_unused_parameters=unused)
        gc.disable()
        try:
            with Join([m], divide_by_initial_world_size=False):
                for step in range(3 + r):
                    out = m(torch.full((2, 4), float(step))).sum()
                    # A collector's pass between forward and backward (any allocation
                    # may make one) freed the forward pass's work, which only C++ held
                    # through its tensor: the backward's wait then waited for good.
                    gc.collect()
                    out.backward()
        finally:
            gc.enable()
        w = next(m.module.parameters()).detach().clone()
        outs = [torch.empty_like(w) for _ in range(n)]
        dist.all_gather(outs, w)
        assert all(torch.equal(o, outs[0]) for o in outs), (unused, outs)


class _HalfUsed(torch.nn.Module):
    """Two layers, the second never used (DDP's find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.used, self.spare = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


def functional_into_one_tensor(r, n, where):
    """Two in-flight functional in-place all-reduces into one tensor, waited after both
    (torch 2.x registers both works for its storage): the first work stays reachable, as
    Gloo's does (it was freed when the second replaced its link, and wait_tensor waited
    for good). Collector off, so nothing but the links keeps the works."""
    import gc
    init(r, n, where)
    name = dist.group.WORLD.group_name
    gc.disable()
    try:
        t = torch.ones(4)
        torch.ops._c10d_functional.all_reduce_(t, "sum", name)
        torch.ops._c10d_functional.all_reduce_(t, "sum", name)
        torch.ops._c10d_functional.wait_tensor(t)
    finally:
        gc.enable()
    assert torch.equal(t, torch.full((4,), float(n * n))), t


def objects(r, n, where):
    """torch's object collectives (pickles in byte tensors, sizes first) give what Gloo's
    give; on torch 2.x ZeroRedundancyOptimizer (broadcasts, consolidate_state_dict) and
    torch.distributed.checkpoint (gathers a plan, saves and loads) work over the group."""
    g = init(r, n, where)
    for pg in (None, g):
        out = [None] * n
        dist.all_gather_object(out, {"rank": r, "x": list(range(r))}, group=pg)
        assert out == [{"rank": p, "x": list(range(p))} for p in range(n)], out
        sent = ["hello", 0] if r == 0 else [None, None]
        dist.broadcast_object_list(sent, src=0, group=pg)
        assert sent == ["hello", 0], sent
        got = [None] * n if r == 0 else None
        dist.gather_object(("g", r), got, dst=0, group=pg)
        assert r != 0 or got == [("g", p) for p in range(n)], got
        one = [None]
        dist.scatter_object_list(one, [("s", p) for p in range(n)] if r == 0 else None, src=0,
                                 group=pg)
        assert one == [("s", r)], one
    if TORCH2:
        _zero_and_checkpoint(r, n, where)
    dist.barrier()


def _zero_and_checkpoint(r, n, where):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    m = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
    opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    for i in range(3):
        torch.manual_seed(r * 10 + i)
        opt.zero_grad()
        m(torch.randn(5, 8)).pow(2).sum().backward()
        opt.step()
    opt.consolidate_state_dict(to=0)
    path = os.path.join(where, "checkpoint")
    dcp.save({"model": m.state_dict()}, checkpoint_id=path)
    before = [p.detach().clone() for p in m.parameters()]
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    loaded = {"model": m.state_dict()}
    dcp.load(loaded, checkpoint_id=path)
    m.load_state_dict(loaded["model"])
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    same_everywhere([p.detach() for p in m.parameters()], n)


def status_names_torch_ranks(r, n, where):
    """coll_status at MASTER_ADDR:MASTER_PORT (torch's TCPStore's, env://) while rank 1 is
    stopped (SIGSTOP) and rank 0 waits in an all-reduce of a subgroup: the default group
    ("0") and the subgroup (torch's name) each name rank 1, by its global rank, as the one
    that does not answer. The tool is $COLL_STATUS, else tools/coll_status beside the
    library (the build's)."""
    import json
    import signal
    import subprocess
    tool = os.environ.get("COLL_STATUS") or os.path.join(
        os.path.dirname(os.environ["COLL_LIBRARY"]), "tools", "coll_status")
    port_file = os.path.join(where, "port")
    if r == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(port_file + ".tmp", port_file)
    while not os.path.exists(port_file):
        time.sleep(0.01)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=open(port_file).read())
    import datetime
    dist.init_process_group("collective", init_method="env://", rank=r, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    g = dist.new_group([0, 1])
    c10d = dist.distributed_c10d
    name = (getattr(c10d, "_pg_names", None) or c10d._world.pg_names)[g]
    t, u = torch.ones(4), torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t, group=g)
    pid_file = os.path.join(where, "pid1")
    if r == 1:
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        dist.all_reduce(t, group=g)  # stopped in it, before or after by rank 0
        dist.all_reduce(u, group=g)
    else:
        while not os.path.exists(pid_file):
            time.sleep(0.01)
        victim = int(open(pid_file).read())
        os.kill(victim, signal.SIGSTOP)
        try:
            # #4 may end (rank 1 may have sent its part); #5 waits for rank 1
            works = [dist.all_reduce(x, group=g, async_op=True) for x in (t, u)]
            time.sleep(0.3)
            out = subprocess.run([tool, "--json", "env://"], capture_output=True, text=True,
                                 timeout=30)
        finally:
            os.kill(victim, signal.SIGCONT)
        for w in works:
            w.wait()
        assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
        d = json.loads(out.stdout)
        assert d["label"] == "0" and d["stragglers"] == [1], out.stdout
        assert d["ranks"][1]["straggler"] == "no answer (stopped?)", out.stdout
        sub = [x for x in d["communicators"] if x["label"] == name]
        assert len(sub) == 1 and sub[0]["size"] == 2 and sub[0]["stragglers"] == [1], out.stdout
        waiting, stopped = sub[0]["ranks"]
        assert (stopped["answered"], stopped["global"], stopped["straggler"]) == \
            (False, 1, "no answer (stopped?)"), out.stdout
        op = waiting["op"]
        assert waiting["global"] == 0 and (op["kind"], op["seq"]) == ("allreduce", 5) and \
            op["state"] in ("queued", "running"), out.stdout
    dist.all_reduce(t, group=g)
    assert torch.equal(t, torch.full((4,), 2.0 ** 5)) and torch.equal(u, torch.full((4,), 2.0)), t
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
