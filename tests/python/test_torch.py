"""The torch.distributed backend "collective", op by op against Gloo in the same
processes (every dtype and reduce op, uneven all-to-all, non-contiguous tensors, async
work, subgroups, p2p), DDP against Gloo, and a dead rank as an exception everywhere."""
import os
import sys
import time

import torch
import torch.distributed as dist

import collective.torch  # noqa: F401  registers the backend
import ranks

FLOATS = (torch.float16, torch.bfloat16)


def init(r, n, where, timeout_s=30):
    import datetime
    dist.init_process_group("collective", init_method="file://" + where + "/store", rank=r,
                            world_size=n, timeout=datetime.timedelta(seconds=timeout_s))
    return dist.new_group(backend="gloo")


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
    for bad in [lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool)),
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
    on another device, splits that do not cover the tensor, and (last: it leaves the
    ranks out of step, so the group fails) sizes that differ across ranks."""
    init(r, n, where, timeout_s=10)
    refused(lambda: dist.all_reduce(torch.ones(3, device="meta")))
    refused(lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4), [1] * n, [5] * n))
    refused(lambda: dist.all_to_all_single(torch.zeros(2 * n + 1), torch.ones(2 * n + 1)))
    dist.barrier()
    said = refused(lambda: dist.all_reduce(torch.ones(3 + r)))
    assert "COLL_EMISMATCH" in said, said


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


def main():
    bad = 0
    for n in (1, 2, 3):
        bad += ranks.check(ops, n, "torch ops against gloo")
    bad += ranks.check(ddp, 2, "DDP against gloo")
    bad += ranks.check(codecs, 3, "codecs and the error-feedback DDP hook")
    bad += ranks.check(bad_input, 2, "bad input")
    bad += ranks.check(dead, 3, "a dead rank", {2: 9})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
