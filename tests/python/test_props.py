"""Properties of the Python API, drawn by hypothesis and checked on 1-3 processes against
numpy: random shapes, dtypes in both byte orders, strides, read-only flags, counts,
displacements, roots and colors. A call whose arguments the library cannot take as
given raises ValueError (or TypeError) naming the argument on every rank that holds the
bad argument, before anything is sent: the ranks then still agree on the next
collective. Every other call gives numpy's answer.

Hypothesis draws in this process; each example runs on forked ranks (ranks.py), which
all rebuild the same buffers from the example, so each knows which ranks will refuse
(and does not call where another rank refuses). Derandomized, no database: every run
draws the same examples."""
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collective
import ranks

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64"]
OPS = {"sum": np.sum, "max": np.max, "min": np.min}
# A rank's fault of one buffer: what the rank passes instead of the right buffer.
FAULTS = ["short", "long", "readonly", "swapped", "strided"]
ROOTED = ["broadcast", "reduce", "gather", "scatter"]
COUNTED = ["allgatherv", "reduce_scatterv", "alltoallv"]
KINDS = ["allreduce", "allreduce_in_place"] + ROOTED + COUNTED + ["split"]
# A whole-call fault, on every rank: an integer the C type cannot hold (+2**32 on a C
# int, +2**64 on a size_t) or a negative count; the kinds that take such an argument.
WIDE = {"root": ROOTED, "color": ["split"], "key": ["split"], "counts": COUNTED,
        "negative": COUNTED}
SWAPPED = ">" if sys.byteorder == "little" else "<"


@st.composite
def calls(draw, n):
    """One call as data, the same for every rank, with at most one fault per rank or
    one for the whole call."""
    c = {"kind": draw(st.sampled_from(KINDS)), "dtype": draw(st.sampled_from(DTYPES)),
         "op": draw(st.sampled_from(sorted(OPS))), "root": draw(st.integers(0, n - 1)),
         "count": draw(st.integers(0, 6)), "rows": draw(st.sampled_from([1, 2, 3])),
         "counts": draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)),
         "gaps": draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
         "matrix": draw(st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                 min_size=n, max_size=n)),
         "colors": draw(st.lists(st.sampled_from([None, 0, 1, 7, 2**31 - 1]),
                                 min_size=n, max_size=n)),
         "keys": draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=n, max_size=n)),
         "wide": None, "faults": [None] * n}
    how = draw(st.sampled_from(["none", "rank", "rank", "call"]))
    if how == "rank":
        fault = st.tuples(st.sampled_from(FAULTS), st.sampled_from(["send", "recv"]))
        c["faults"] = draw(st.lists(st.none() | fault, min_size=n, max_size=n))
    elif how == "call":
        c["wide"] = draw(st.sampled_from(sorted(WIDE)))
    return c


def values(seed, rank, size, dtype):
    """Rank `rank`'s data: small integers, so every sum, max and min is exact."""
    return np.random.default_rng([seed, rank]).integers(0, 4, size).astype(dtype)


def packed(counts, gaps):
    """Displacements: the blocks in rank order, gaps[i] elements before block i."""
    out, at = [], 0
    for c, g in zip(counts, gaps):
        out.append(at + g)
        at += g + c
    return out


def extent(counts, displs):
    return max([d + c for c, d in zip(counts, displs) if c], default=0)


class Rank:
    """One rank's view of a call: makes its buffers (this rank's fault applied to the
    one it names) and knows which argument a refusal must name, or None."""

    def __init__(self, c, r, n, seed):
        self.c, self.r, self.n, self.seed = c, r, n, seed
        self.fault, self.named = c["faults"][r], None
        wide = c["wide"] if c["kind"] in WIDE.get(c["wide"], []) else None
        self.root = c["root"] + 2**32 if wide == "root" else c["root"]
        self.colors = [2**32 + 7] * n if wide == "color" else c["colors"]
        self.keys = [k + 2**32 for k in c["keys"]] if wide == "key" else c["keys"]
        self.wide = wide

    def counts(self, counts, name):
        """counts as passed: with the whole-call count fault, if any."""
        out = list(counts)
        if self.wide == "counts":
            out[0] += 2**64
        elif self.wide == "negative":
            out[-1] = -1
        if self.wide in ("counts", "negative"):
            self.named = name
        return out

    def data(self, rank, size):
        return values(self.seed, rank, size, self.c["dtype"])

    def make(self, role, data, arg, checked=True, exact=True, written=False):
        """data as the buffer for argument arg, playing role "send" or "recv" in the
        faults. checked: its size is checked against counts or the other buffer (not
        where the size is the count); exact: checked for equality, else at least;
        written: the call writes it."""
        a = data.copy()
        if self.fault is not None and self.fault[1] == role:
            a = self.spoil(a, arg, checked, exact, written)
        rows = self.c["rows"]
        if a.flags.c_contiguous and a.size and a.size % rows == 0:
            a = a.reshape(rows, -1)  # the library sees the size only
        return a

    def spoil(self, a, arg, checked, exact, written):
        what, named = self.fault[0], arg
        if what == "short" and checked and a.size:
            a = a[:-1].copy()
        elif what == "long" and checked and exact:
            a = np.concatenate([a, np.zeros(1, a.dtype)])
        elif what == "readonly" and written:
            a.flags.writeable = False
        elif what == "swapped" and a.dtype.itemsize > 1:
            a = a.astype(a.dtype.newbyteorder(SWAPPED))
        elif what == "strided" and a.size > 1:
            a = np.repeat(a, 2)[::2]
        elif what == "long" and checked:
            a, named = np.concatenate([a, np.zeros(1, a.dtype)]), None  # room to spare
        elif what == "readonly":
            a.flags.writeable, named = False, None  # only read: fine
        else:
            named = None  # where the size is the count, or nothing to spoil
        self.named = self.named or named
        return a

    def call(self, comm):
        """(the call, (buffer, numpy's answer) or a split's check or None)."""
        return getattr(self, self.c["kind"])(comm)

    def reduced(self, size):
        return OPS[self.c["op"]](np.stack([self.data(p, size) for p in range(self.n)]), axis=0)

    def allreduce(self, comm):
        k = self.c["count"]
        s = self.make("send", self.data(self.r, k), "sendbuf")
        rv = self.make("recv", np.zeros(k, self.c["dtype"]), "recvbuf", written=True)
        return lambda: comm.allreduce(s, rv, op=self.c["op"]), (rv, self.reduced(k))

    def allreduce_in_place(self, comm):
        k = self.c["count"]
        s = self.make("send", self.data(self.r, k), "sendbuf", checked=False, written=True)
        return lambda: comm.allreduce(s, op=self.c["op"]), (s, self.reduced(k))

    def broadcast(self, comm):
        k = self.c["count"]
        b = self.make("send", self.data(self.r, k), "buf", checked=False, written=True)
        return lambda: comm.broadcast(b, root=self.root), (b, self.data(self.c["root"], k))

    def reduce(self, comm):
        k, at_root = self.c["count"], self.r == self.c["root"]
        s = self.make("send", self.data(self.r, k), "sendbuf", checked=at_root)
        rv = self.make("recv", np.zeros(k, self.c["dtype"]), "recvbuf", written=True) \
            if at_root else None
        return (lambda: comm.reduce(s, rv, op=self.c["op"], root=self.root),
                (rv, self.reduced(k)) if at_root else None)

    def gather(self, comm):
        k, n, at_root = self.c["count"], self.n, self.r == self.c["root"]
        s = self.make("send", self.data(self.r, k), "sendbuf", checked=at_root)
        rv = self.make("recv", np.zeros(n * k, self.c["dtype"]), "recvbuf", written=True) \
            if at_root else None
        want = np.concatenate([self.data(p, k) for p in range(n)])
        return lambda: comm.gather(s, rv, root=self.root), (rv, want) if at_root else None

    def scatter(self, comm):
        k, n, at_root = self.c["count"], self.n, self.r == self.c["root"]
        whole = np.concatenate([self.data(p, k) for p in range(n)])
        s = self.make("send", whole, "sendbuf") if at_root else None
        rv = self.make("recv", np.zeros(k, self.c["dtype"]), "recvbuf", checked=at_root,
                       written=True)
        return lambda: comm.scatter(s, rv, root=self.root), (rv, whole[self.r * k:][:k])

    def allgatherv(self, comm):
        cs, n = self.c["counts"], self.n
        d = packed(cs, self.c["gaps"])
        counts = self.counts(cs, "counts")
        s = self.make("send", self.data(self.r, cs[self.r]), "sendbuf")
        want = np.zeros(extent(cs, d), self.c["dtype"])
        for p in range(n):
            want[d[p]:d[p] + cs[p]] = self.data(p, cs[p])
        rv = self.make("recv", np.zeros_like(want), "recvbuf", exact=False, written=True)
        return lambda: comm.allgatherv(s, rv, counts, d), (rv, want)

    def reduce_scatterv(self, comm):
        cs, r = self.c["counts"], self.r
        counts = self.counts(cs, "counts")
        s = self.make("send", self.data(r, sum(cs)), "sendbuf")
        rv = self.make("recv", np.zeros(cs[r], self.c["dtype"]), "recvbuf", exact=False,
                       written=True)
        want = self.reduced(sum(cs))[sum(cs[:r]):][:cs[r]]
        return lambda: comm.reduce_scatterv(s, rv, counts, op=self.c["op"]), (rv, want)

    def alltoallv(self, comm):
        m, r, n, gaps = self.c["matrix"], self.r, self.n, self.c["gaps"]  # m[i][j]: i to j
        sent = [self.data(i, sum(m[i]) + sum(gaps)) for i in range(n)]
        sd, rc = packed(m[r], gaps), [m[i][r] for i in range(n)]
        rd = packed(rc, gaps[::-1])
        sc = self.counts(m[r], "sendcounts")
        s = self.make("send", sent[r][:extent(m[r], sd)], "sendbuf", exact=False)
        want = np.zeros(extent(rc, rd), self.c["dtype"])
        for i in range(n):
            at = packed(m[i], gaps)[r]
            want[rd[i]:rd[i] + rc[i]] = sent[i][at:at + m[i][r]]
        rv = self.make("recv", np.zeros_like(want), "recvbuf", exact=False, written=True)
        return lambda: comm.alltoallv(s, sc, rv, rc, sd, rd), (rv, want)

    def split(self, comm):
        r = self.r
        return lambda: comm.split(self.colors[r], self.keys[r]), "split"

    def refusal(self):
        """The argument this rank's call must be refused for, or None."""
        return self.named or self.wide


def check_split(sub, c, r, n):
    colors, keys = c["colors"], c["keys"]
    if colors[r] is None:
        assert sub is None, "a rank without a color got a communicator"
        return
    members = sorted((keys[p], p) for p in range(n) if colors[p] == colors[r])
    assert (sub.size, sub.rank) == (len(members), members.index((keys[r], r))), members
    x = np.array([r], np.int64)
    sub.allreduce(x)  # exactly the members meet
    assert x[0] == sum(p for _, p in members), (x, members)
    sub.close()


def check(c, out, ref, r, n):
    if ref == "split":
        check_split(out, c, r, n)
    elif ref is not None:
        got, want = ref[0].reshape(-1), ref[1]
        assert np.array_equal(got[:want.size], want) and not got[want.size:].any(), \
            (c, got, want)


def play(scenario, r, n, where):
    seed, cs = scenario[1:]
    comm = collective.Communicator("file://" + where, r, n, timeout_ms=5000)
    for k, c in enumerate(cs):
        views = [Rank(c, p, n, seed) for p in range(n)]
        call, ref = views[r].call(comm)
        refused = [v.call(comm) and v.refusal() for v in views]
        if refused[r]:
            try:
                call()
            except (ValueError, TypeError) as e:
                # "counts" also stands for "counts[0]", "sendcounts[2]" ...
                assert refused[r] in str(e), (k, c, refused[r], str(e))
            else:
                raise AssertionError(f"call {k} {c}: no refusal naming {refused[r]}")
        elif not any(refused):
            check(c, call(), ref, r, n)
        # A refused call sent nothing: the next collective pairs as it should.
        x = np.array([k + r], np.int64)
        comm.allreduce(x)
        assert x[0] == k * n + n * (n - 1) // 2, (k, c, x)
    comm.close()


scenarios = st.integers(1, 3).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, 2**16), st.lists(calls(n), min_size=1, max_size=8)))


@settings(max_examples=120, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios)
def test_api(scenario):
    n = scenario[0]
    codes = ranks.run(lambda r, n_, where: play(scenario, r, n_, where), n)
    assert codes == [0] * n, f"exit codes {codes} for {scenario}"


if __name__ == "__main__":
    test_api()
    print("python api properties: 1 passed, 0 failed")
