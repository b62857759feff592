/* Rabenseifner's all-reduce: a recursive-halving reduce-scatter, then a recursive-
 * doubling all-gather: 2 log2(p) steps where the ring takes 2(n-1), and 2(p-1)/p of the
 * data per rank, as the ring's. Any n: with p the largest power of two <= n, r = n - p
 * pairs of positions fold first (the lower one sends its vector to the higher, which
 * reduces it, and gets the result back at the end); the pairs are taken inside hosts
 * where they can be, so a fold crosses a host link only where the hosts' odd ranks must
 * pair up. Partners are taken nearest first (distance 1, 2, 4...), so in host order the
 * halves that cross hosts are the small ones: each host link carries 2(H-1)/H of the
 * data, as hier's. Each chunk's final value is reduced once, by its owner, and copied
 * everywhere: bit-identical. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_STEPS = 32 };

/* Who folds into whom. With one host (host_start NULL) the pairs are (0, 1), (2, 3)...;
 * across hosts each host's positions pair up in order, host after host, until r pairs
 * are made, and if that is not enough the positions left (one per host with an odd count)
 * pair with the next such one. Every rank derives the same plan. */
enum { PLAN_ON_STACK = 64 };
typedef struct plan {
    int p;
    int *partner; /* per position: the one it folds with, -1 none */
    int *vr;      /* per position: its place among the p, -1 folded away (the lower) */
    int *pos;     /* per place: its position */
    int mem[3 * PLAN_ON_STACK];
} plan;

static void pair(plan *pl, int a, int b)
{
    pl->partner[a] = b;
    pl->partner[b] = a;
}

static void plan_pairs(const cl_algo_ctx *x, plan *pl, int left)
{
    int n = x->size, hosts = x->host_start ? x->hosts : 1, loose = -1;
    for (int h = 0; h < hosts && left; h++) {
        int s = x->host_start ? x->host_start[h] : 0, e = x->host_start ? x->host_start[h + 1] : n;
        for (int v = s; v + 1 < e && left; v += 2, left--)
            pair(pl, v, v + 1);
    }
    for (int v = 0; v < n && left; v++)
        if (pl->partner[v] < 0 && loose < 0)
            loose = v;
        else if (pl->partner[v] < 0)
            pair(pl, loose, v), left--, loose = -1;
}

/* COLL_ENOMEM where more than PLAN_ON_STACK positions find no memory; plan_free after. */
static int plan_make(const cl_algo_ctx *x, plan *pl)
{
    int n = x->size, k = 0;
    pl->p = 1;
    while (pl->p * 2 <= n)
        pl->p *= 2;
    int *m = n <= PLAN_ON_STACK ? pl->mem : malloc(3 * sizeof(int) * (size_t)n);
    if (!m)
        return COLL_ENOMEM;
    pl->partner = m, pl->vr = m + n, pl->pos = m + 2 * n;
    for (int v = 0; v < n; v++)
        pl->partner[v] = -1;
    plan_pairs(x, pl, n - pl->p);
    for (int v = 0; v < n; v++) {
        pl->vr[v] = pl->partner[v] > v ? -1 : k++;
        if (pl->vr[v] >= 0)
            pl->pos[pl->vr[v]] = v;
    }
    return COLL_OK;
}

static void plan_free(plan *pl)
{
    if (pl->partner != pl->mem)
        free(pl->partner);
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

/* there 1: the fold (the lower of a pair hands its vector over, the higher reduces it
 * in); there 0: the unfold (the result back to the lower). */
static int fold_step(const cl_algo_ctx *x, cl_op *sum, char *buf, const plan *pl, int there)
{
    int v = x->rank, peer = pl->partner[v];
    if (peer < 0)
        return COLL_OK;
    if (there)
        return pl->vr[v] < 0 ? cl_exchange(x, sum, buf, peer, -1, 0, sum->count, 0, 0, 0)
                             : cl_exchange(x, sum, buf, -1, peer, 0, 0, 0, sum->count, 1);
    return pl->vr[v] < 0 ? cl_exchange(x, sum, buf, -1, peer, 0, 0, 0, sum->count, 0)
                         : cl_exchange(x, sum, buf, peer, -1, 0, sum->count, 0, 0, 0);
}

static int run_planned(const cl_algo_ctx *x, cl_op *op, const plan *pl)
{
    int n = x->size, p = pl->p, vr = pl->vr[x->rank], lo[MAX_STEPS + 1], hi[MAX_STEPS + 1];
    size_t es = cl_dtype_size(op->dtype), count = op->count;
    char *buf = op->rbuf;
    cl_op sum = *op; /* an average divides once, by the owner of each chunk */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    if (op->sbuf != op->rbuf && count)
        memcpy(buf, op->sbuf, count * es);
    int rc = fold_step(x, &sum, buf, pl, 1);
    if (rc == COLL_OK && vr >= 0) {
        int steps = halving(vr, p, lo, hi);
        for (int k = 0; rc == COLL_OK && k < steps; k++)
            rc = level(x, &sum, buf, pl->pos[vr ^ (1 << k)], p, lo, hi, k, 1);
        size_t mine = chunk_at(count, p, lo[steps]);
        if (rc == COLL_OK && op->op == COLL_AVG)
            cl_divide(buf + mine * es, chunk_at(count, p, hi[steps]) - mine, op->dtype, n);
        for (int k = steps - 1; rc == COLL_OK && k >= 0; k--)
            rc = level(x, &sum, buf, pl->pos[vr ^ (1 << k)], p, lo, hi, k, 0);
    }
    return rc == COLL_OK ? fold_step(x, &sum, buf, pl, 0) : rc;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    plan pl;
    int rc = plan_make(x, &pl);
    if (rc != COLL_OK)
        return rc;
    rc = run_planned(x, op, &pl);
    plan_free(&pl);
    return rc;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->size > 1 && op->codec == COLL_CODEC_NONE;
}

/* Across hosts (positions in host order): a fold pair that straddles two hosts (a host
 * has at most one: its odd rank out) moves the vector in and the result back; per level,
 * the busiest host's ranks whose partner is elsewhere, each with its half
 * (count / 2^(level+1)), in the halving and again in the doubling. Each step waits for
 * its busiest link. */
static void across(const cl_algo_ctx *x, const plan *pl, size_t count, size_t es, int steps,
                   cl_cost *k)
{
    for (int v = 0; v < x->size; v++)
        if (pl->partner[v] > v && x->host_at[pl->partner[v]] != x->host_at[v]) {
            k->xsteps += 2, k->xbytes += 2.0 * (double)(count * es);
            break;
        }
    for (int s = 0; s < steps; s++) {
        int c = cl_pairs_crossing(x, pl->p, 1 << s, pl->pos);
        if (c)
            k->xsteps += 2, k->xbytes += 2.0 * c * (double)((count >> (s + 1)) * es);
    }
}

/* This rank's sends, step by step, as run() makes them, and what crosses hosts. Without
 * memory for the plan (thousands of ranks), priced out of the choice. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    plan pl;
    if (plan_make(x, &pl) != COLL_OK)
        return (cl_cost){.steps = 1e30};
    int n = x->size, v = x->rank, p = pl.p, vr = pl.vr[v], lo[MAX_STEPS + 1], hi[MAX_STEPS + 1];
    size_t es = cl_dtype_size(op->dtype), count = op->count, bytes = 0;
    int steps = halving(vr < 0 ? 0 : vr, p, lo, hi);
    cl_cost k = {.steps = 2.0 * steps + (n > p ? 2 : 0)};
    if (vr < 0)
        bytes = count;
    else
        for (int s = 0; s < steps; s++) /* the half sent, then the half kept */
            bytes += (chunk_at(count, p, hi[s]) - chunk_at(count, p, lo[s]));
    bytes += vr >= 0 && pl.partner[v] >= 0 ? count : 0;
    k.bytes = bytes * es;
    /* The halving reduces about the data once, a step at a time. */
    k.serial = (double)(count - count / (size_t)p) * (double)es;
    if (x->hosts > 1 && x->host_at)
        across(x, &pl, count, es, steps, &k);
    plan_free(&pl);
    return k;
}

const cl_algo cl_algo_rabenseifner = {
    .name = "rabenseifner",
    .serves = CL_SERVES(CL_ALLREDUCE),
    .fits = fits,
    .cost = cost,
    .run = run,
};
