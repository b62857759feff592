/* Rabenseifner's all-reduce: a recursive-halving reduce-scatter, then a recursive-
 * doubling all-gather: 2 log2(p) steps where the ring takes 2(n-1), and 2(p-1)/p of the
 * data per rank, as the ring's. Any n: with p the largest power of two <= n and r = n - p,
 * the first 2r positions fold in pairs first (the even one sends its vector to the odd
 * one, which reduces it, and gets the result back at the end). Partners are taken
 * nearest first (distance 1, 2, 4...), so in host order the halves that cross hosts are
 * the small ones: each host link carries 2(H-1)/H of the data, as hier's. Each chunk's
 * final value is reduced once, by its owner, and copied everywhere: bit-identical. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <string.h>

enum { MAX_STEPS = 32 };

/* The power of two p <= n, and this position's rank among the p (-1: folded away). */
static int fold(int n, int v, int *p)
{
    *p = 1;
    while (*p * 2 <= n)
        *p *= 2;
    int r = n - *p;
    return v < 2 * r ? (v % 2 ? v / 2 : -1) : v - r;
}

static int position_of(int vr, int n, int p)
{
    int r = n - p;
    return vr < r ? 2 * vr + 1 : vr + r;
}

/* Chunk c of p (count elements): its first element. */
static size_t chunk_at(size_t count, int p, int c)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    return (size_t)c * base + CL_MIN((size_t)c, rem);
}

/* The chunk ranges this rank keeps through the halving: lo[k], hi[k] before step k. */
static int halving(int vr, int p, int lo[MAX_STEPS + 1], int hi[MAX_STEPS + 1])
{
    int k = 0;
    lo[0] = 0, hi[0] = p;
    for (int d = 1; d < p; d <<= 1, k++) {
        int mid = (lo[k] + hi[k]) / 2, upper = (vr & d) != 0;
        lo[k + 1] = upper ? mid : lo[k];
        hi[k + 1] = upper ? hi[k] : mid;
    }
    return k;
}

/* Level k of the halving with `peer`: of [lo[k], hi[k]) this rank keeps one half (the
 * range at k + 1) and gives the other. The reduce-scatter sends the given half and
 * reduces into the kept one; the all-gather sends the kept half and receives the given. */
static int level(const cl_algo_ctx *x, const cl_op *op, char *buf, int peer, int p, const int *lo,
                 const int *hi, int k, int reduce)
{
    size_t count = op->count;
    int g_lo = lo[k + 1] == lo[k] ? hi[k + 1] : lo[k], g_hi = g_lo == lo[k] ? lo[k + 1] : hi[k];
    size_t ko = chunk_at(count, p, lo[k + 1]), kn = chunk_at(count, p, hi[k + 1]) - ko;
    size_t go = chunk_at(count, p, g_lo), gn = chunk_at(count, p, g_hi) - go;
    return reduce ? cl_exchange(x, op, buf, peer, peer, go, gn, ko, kn, 1)
                  : cl_exchange(x, op, buf, peer, peer, ko, kn, go, gn, 0);
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    int n = x->size, v = x->rank, p, vr = fold(n, v, &p), lo[MAX_STEPS + 1], hi[MAX_STEPS + 1];
    size_t es = cl_dtype_size(op->dtype), count = op->count;
    char *buf = op->rbuf;
    cl_op sum = *op; /* an average divides once, by the owner of each chunk */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    if (op->sbuf != op->rbuf && count)
        memcpy(buf, op->sbuf, count * es);
    int rc = COLL_OK, folded = v < 2 * (n - p);
    if (folded) /* the even one hands its vector over and waits for the result */
        rc = vr < 0 ? cl_exchange(x, &sum, buf, v + 1, -1, 0, count, 0, 0, 0)
                    : cl_exchange(x, &sum, buf, -1, v - 1, 0, 0, 0, count, 1);
    if (rc == COLL_OK && vr >= 0) {
        int steps = halving(vr, p, lo, hi);
        for (int k = 0; rc == COLL_OK && k < steps; k++)
            rc = level(x, &sum, buf, position_of(vr ^ (1 << k), n, p), p, lo, hi, k, 1);
        size_t mine = chunk_at(count, p, lo[steps]);
        if (rc == COLL_OK && op->op == COLL_AVG)
            cl_divide(buf + mine * es, chunk_at(count, p, hi[steps]) - mine, op->dtype, n);
        for (int k = steps - 1; rc == COLL_OK && k >= 0; k--)
            rc = level(x, &sum, buf, position_of(vr ^ (1 << k), n, p), p, lo, hi, k, 0);
    }
    if (rc == COLL_OK && folded) /* the result back to the even one */
        rc = vr < 0 ? cl_exchange(x, &sum, buf, -1, v + 1, 0, 0, 0, count, 0)
                    : cl_exchange(x, &sum, buf, v - 1, -1, 0, count, 0, 0, 0);
    return rc;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->size > 1 && op->codec == COLL_CODEC_NONE;
}

/* Across hosts (positions in host order): the fold pairs that straddle two hosts (the
 * even one's vector in, the result back) and, per level, the busiest host's ranks whose
 * partner is elsewhere, each with its half (count / 2^(level+1)), in the halving and
 * again in the doubling. Each step waits for its busiest link. */
static void across(const cl_algo_ctx *x, size_t count, size_t es, int p, int steps, cl_cost *k)
{
    int n = x->size, fold = 0, run = 0, host = -1;
    for (int v = 0; v + 1 < 2 * (n - p); v += 2) {
        if (x->host_at[v] != host)
            host = x->host_at[v], run = 0;
        run += x->host_at[v + 1] != host;
        fold = CL_MAX(fold, run);
    }
    if (fold)
        k->xsteps += 2, k->xbytes += 2.0 * fold * (double)(count * es);
    for (int s = 0; s < steps; s++) {
        int c = cl_pairs_crossing(x, p, 1 << s, position_of);
        if (c)
            k->xsteps += 2, k->xbytes += 2.0 * c * (double)((count >> (s + 1)) * es);
    }
}

/* This rank's sends, step by step, as run() makes them, and what crosses hosts. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size, v = x->rank, p, vr = fold(n, v, &p), lo[MAX_STEPS + 1], hi[MAX_STEPS + 1];
    size_t es = cl_dtype_size(op->dtype), count = op->count, bytes = 0;
    int folded = v < 2 * (n - p), steps = halving(vr < 0 ? 0 : vr, p, lo, hi);
    cl_cost k = {.steps = 2.0 * steps + (n > p ? 2 : 0)};
    if (vr < 0)
        bytes = count;
    else
        for (int s = 0; s < steps; s++) /* the half sent, then the half kept */
            bytes += (chunk_at(count, p, hi[s]) - chunk_at(count, p, lo[s]));
    bytes += vr >= 0 && folded ? count : 0;
    k.bytes = bytes * es;
    /* The halving reduces about the data once, a step at a time. */
    k.serial = (double)(count - count / (size_t)p) * (double)es;
    if (x->hosts > 1 && x->host_at)
        across(x, count, es, p, steps, &k);
    return k;
}

const cl_algo cl_algo_rabenseifner = {
    .name = "rabenseifner",
    .serves = CL_SERVES(CL_ALLREDUCE),
    .fits = fits,
    .cost = cost,
    .run = run,
};
