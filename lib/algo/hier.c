/* Hierarchical all-reduce, reduce-scatter and all-gather on H >= 2 hosts, any placement
 * (topo.c builds the rings). Every host runs L lanes, L being the emptiest host's ranks
 * (one lane: nothing to do inside the host but the folds); a host's ranks past its lanes
 * fold in: the one at place p works through the lane at p mod L.
 * All-reduce: a ring reduce-scatter among this host's lanes (shared memory), a ring
 * all-reduce of this lane's shard with the lanes holding the same shard on the other
 * hosts (every lane of a host runs its own ring at once, so every rank's link share
 * moves together), and a ring all-gather among this host's lanes. Each host link carries
 * 2(H-1)/H of the data each way, where a ring over all ranks carries 2(n-1)/n. An extra
 * hands its vector to its lane first, which reduces it in, and gets the result back.
 * Reduce-scatter: each lane stands for a group of blocks (its own rank's and its
 * extras'); the host's reduce-scatter leaves place i with the host's sums of the groups
 * of the lanes at place i on every host, which then reduce-scatter them across hosts;
 * all-gather runs the other way (across, then inside). A host link carries the blocks
 * of the other hosts' ranks each way (L(H-1) on even hosts) where the ring carries n-1.
 * Both work a slice of every block at a time (cl_in_rounds), copied to scratch laid out
 * lane by lane and back, so scratch is bounded and any numbering works.
 * The shard all-reduce leaves the same bytes on every host and the all-gathers and the
 * folds copy them, so every rank ends bit-identical. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <stdlib.h>
#include <string.h>

/* The shard of an L-way split this rank owns after the host's reduce-scatter. */
static size_t shard(size_t count, int L, int i, size_t *off)
{
    size_t base = count / (size_t)L, rem = count % (size_t)L;
    *off = (size_t)i * base + CL_MIN((size_t)i, rem);
    return base + ((size_t)i < rem);
}

/* The lanes' all-reduce of src (this rank's vector, or its sum with its extras') into
 * op->rbuf. */
static int lanes(const cl_algo_ctx *x, const cl_op *op, const cl_op *sum, const void *src)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t es = cl_dtype_size(op->dtype), off;
    size_t len = shard(op->count, in->size, in->rank, &off);
    int rc = COLL_OK, alone = in->size == 1; /* one lane: the host's work is the folds' */
    if (!alone)
        rc = cl_ring_reduce_scatter_into(in, sum, op->count, src, op->rbuf);
    else if (src != op->rbuf && op->count)
        memcpy(op->rbuf, src, op->count * es);
    char *mine = (char *)op->rbuf + off * es;
    cl_op part = *sum;
    part.count = len; /* what every header of the shard's passes says */
    if (rc == COLL_OK)
        rc = cl_ring_reduce_scatter_into(across, &part, len, mine, mine);
    if (rc == COLL_OK)
        rc = cl_ring_allgather_in(across, &part, len, mine, NULL);
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(mine, len, op->dtype, x->size);
    return rc == COLL_OK && !alone ? cl_ring_allgather_in(in, sum, op->count, op->rbuf, NULL) : rc;
}

/* Where position v stands: its host's positions [*first, *end); returns its place. */
static int place_of(const cl_algo_ctx *x, int v, int *first, int *end)
{
    int h = 0;
    while (x->host_start[h + 1] <= v)
        h++;
    *first = x->host_start[h];
    *end = x->host_start[h + 1];
    return v - *first;
}

static int allreduce(const cl_algo_ctx *x, const cl_op *op)
{
    int first, end, place = place_of(x, x->rank, &first, &end), L = x->lanes;
    size_t count = op->count;
    cl_op sum = *op; /* an average divides once, by every rank, at the end */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    if (place >= L) { /* past the lanes: the lane at place mod L stands in for this rank */
        int lane = first + place % L;
        int rc = cl_exchange(x, &sum, (void *)op->sbuf, lane, -1, 0, count, 0, 0, 0);
        return rc == COLL_OK ? cl_exchange(x, &sum, op->rbuf, -1, lane, 0, 0, 0, count, 0) : rc;
    }
    int rc = COLL_OK, folds = x->rank + L < end;
    if (folds && op->sbuf != op->rbuf && count)
        memcpy(op->rbuf, op->sbuf, count * cl_dtype_size(op->dtype));
    for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
        rc = cl_exchange(x, &sum, op->rbuf, -1, v, 0, 0, 0, count, 1);
    if (rc == COLL_OK)
        rc = lanes(x, op, &sum, folds ? op->rbuf : op->sbuf);
    for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
        rc = cl_exchange(x, &sum, op->rbuf, v, -1, 0, count, 0, 0, 0);
    return rc;
}

/* ---- reduce-scatter and all-gather: slices laid out lane by lane ------------------- */

/* Of a host of `ranks`, the places that fold into lane i (i, i + L, ...), and those
 * folding into the lanes before it. */
static size_t members(int ranks, int L, int i)
{
    return (size_t)(ranks / L + (i < ranks % L));
}

static size_t below(int ranks, int L, int i)
{
    return (size_t)(ranks / L) * (size_t)i + (size_t)CL_MIN(ranks % L, i);
}

static int ranks_on(const cl_algo_ctx *x, int h)
{
    return x->host_start[h + 1] - x->host_start[h];
}

/* In slices, where position v's slice sits in a round's scratch: lane groups by place,
 * then host; a group its lane's slice, then its extras' in place order. */
static size_t slot_of(const cl_algo_ctx *x, int v)
{
    int L = x->lanes, h = x->host_at[v], p = v - x->host_start[h], i = p % L;
    size_t at = (size_t)(p / L);
    for (int g = 0; g < x->hosts; g++)
        at += below(ranks_on(x, g), L, i) + (g < h ? members(ranks_on(x, g), L, i) : 0);
    return at;
}

/* A lane's chunks, in elements of slices of len: its host's lanes' groups (in, L + 1
 * entries) and, from in[i], its place's groups on every host (across, H + 1). */
static void chunks_of(const cl_algo_ctx *x, int i, size_t len, size_t *in, size_t *across)
{
    int L = x->lanes, H = x->hosts;
    for (int k = 0; k <= L; k++) {
        in[k] = 0;
        for (int g = 0; g < H; g++)
            in[k] += below(ranks_on(x, g), L, k) * len;
    }
    across[0] = 0;
    for (int g = 0; g < H; g++)
        across[g + 1] = across[g] + members(ranks_on(x, g), L, i) * len;
}

/* Slices [first, first + len) of every block (count elements each, in rank order in the
 * caller's buffer) to the lane-by-lane layout in scratch (in = 1), or back. */
static void relayout(const cl_algo_ctx *x, char *placed, char *ranked, const cl_op *op,
                     size_t first, size_t len, int in)
{
    size_t es = cl_dtype_size(op->dtype);
    for (int v = 0; v < x->size; v++) {
        char *p = placed + slot_of(x, v) * len * es;
        char *r = ranked + ((size_t)cl_rank_of(x, v) * op->count + first) * es;
        memcpy(in ? p : r, in ? r : p, len * es);
    }
}

/* This rank's lane (its own position if it is one) and its host's range. */
static int lane_of(const cl_algo_ctx *x, int *end)
{
    int first, place = place_of(x, x->rank, &first, end);
    return first + place % x->lanes;
}

/* A lane's rings over its chunks: the host's (skipped for a lane alone), then its
 * place's across hosts, reducing (rs = 1) or gathering in the other order. */
static int lane_rings(const cl_algo_ctx *x, const cl_op *op, char *s, size_t len, int rs)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t *at = malloc(((size_t)x->lanes + (size_t)x->hosts + 2) * sizeof(size_t));
    if (!at)
        return COLL_ENOMEM;
    size_t *cross = at + x->lanes + 1;
    chunks_of(x, in->rank, len, at, cross);
    char *mine = s + at[in->rank] * cl_dtype_size(op->dtype);
    int rc = rs && in->size > 1 ? cl_ring_reduce_scatter_chunks(in, op, at, s) : COLL_OK;
    if (rc == COLL_OK)
        rc = rs ? cl_ring_reduce_scatter_chunks(across, op, cross, mine)
                : cl_ring_allgather_chunks(across, op, cross, mine);
    if (rc == COLL_OK && !rs && in->size > 1)
        rc = cl_ring_allgather_chunks(in, op, at, s);
    free(at);
    return rc;
}

/* The host's sums of every lane group's slices, then theirs across hosts; an extra
 * hands its slices to its lane first and gets its own back at the end. */
static int reduce_scatter_round(const cl_algo_ctx *x, const cl_op *op, char *s, size_t first,
                                size_t len)
{
    int end, lane = lane_of(x, &end), L = x->lanes;
    size_t es = cl_dtype_size(op->dtype), all = (size_t)x->size * len;
    char *out = (char *)op->rbuf + first * es;
    cl_op sum = *op; /* an average divides once, at the end */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    relayout(x, s, (char *)op->sbuf, op, first, len, 1);
    int rc = COLL_OK;
    if (lane != x->rank) {
        rc = cl_exchange(x, &sum, s, lane, -1, 0, all, 0, 0, 0);
        if (rc == COLL_OK)
            rc = cl_exchange(x, &sum, out, -1, lane, 0, 0, 0, len, 0);
    } else {
        for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
            rc = cl_exchange(x, &sum, s, -1, v, 0, 0, 0, all, 1);
        if (rc == COLL_OK)
            rc = lane_rings(x, &sum, s, len, 1);
        for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
            rc = cl_exchange(x, &sum, s, v, -1, slot_of(x, v) * len, len, 0, 0, 0);
        if (rc == COLL_OK && len)
            memcpy(out, s + slot_of(x, x->rank) * len * es, len * es);
    }
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(out, len, op->dtype, x->size);
    return rc;
}

/* Every lane group's slices across hosts, then inside the host; an extra hands its slice
 * to its lane first and gets the whole round back at the end. */
static int allgather_round(const cl_algo_ctx *x, const cl_op *op, char *s, size_t first,
                           size_t len)
{
    int end, lane = lane_of(x, &end), L = x->lanes;
    size_t es = cl_dtype_size(op->dtype), all = (size_t)x->size * len;
    int rc = COLL_OK;
    if (lane != x->rank) {
        rc = cl_exchange(x, op, (void *)op->sbuf, lane, -1, first, len, 0, 0, 0);
        if (rc == COLL_OK)
            rc = cl_exchange(x, op, s, -1, lane, 0, 0, 0, all, 0);
    } else {
        memmove(s + slot_of(x, x->rank) * len * es, (const char *)op->sbuf + first * es, len * es);
        for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
            rc = cl_exchange(x, op, s, -1, v, 0, 0, slot_of(x, v) * len, len, 0);
        if (rc == COLL_OK)
            rc = lane_rings(x, op, s, len, 0);
        for (int v = x->rank + L; rc == COLL_OK && v < end; v += L)
            rc = cl_exchange(x, op, s, v, -1, 0, all, 0, 0, 0);
    }
    if (rc == COLL_OK)
        relayout(x, s, op->rbuf, op, first, len, 0);
    return rc;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    switch (op->kind) {
    case CL_ALLREDUCE: return allreduce(x, op);
    case CL_REDUCE_SCATTER: return cl_in_rounds(x, op, reduce_scatter_round);
    default: return cl_in_rounds(x, op, allgather_round);
    }
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->host_start && x->hosts >= 2 && op->codec == COLL_CODEC_NONE;
}

/* Reduce-scatter and all-gather, in blocks: an extra sends its n blocks (all-gather: its
 * one) and gets one back (all n); a lane with f extras takes f x n in (or sends them out)
 * besides its rings, which send the n blocks but its chunk inside the host (its place's
 * groups on every host) and its chunk but its own group (its f + 1) across: n - f - 1 in
 * all. A host link carries its lanes' across, the n blocks but the host's own; the
 * emptiest host's (L ranks) the most. The relayout copies every block in and out. */
static cl_cost placed_cost(const cl_algo_ctx *x, const cl_op *op)
{
    int first, end, place = place_of(x, x->rank, &first, &end), L = x->lanes;
    size_t n = (size_t)x->size, blk = op->count * cl_dtype_size(op->dtype);
    int rs = op->kind == CL_REDUCE_SCATTER;
    if (place >= L)
        return (cl_cost){.steps = 2, .bytes = (rs ? n : 1) * blk, .serial = (double)(n * blk)};
    size_t f = members(end - first, L, place) - 1, H = (size_t)x->hosts;
    return (cl_cost){.steps = (double)((size_t)L - 1 + H - 1 + 2 * f),
                     .bytes = (n - f - 1 + (rs ? f : f * n)) * blk,
                     .xsteps = (double)(H - 1),
                     .xbytes = (double)((n - (size_t)L) * blk),
                     .serial = (double)((n + (rs ? f * n : 0)) * blk)};
}

/* Per rank: (L-1)/L of the data each way inside the host, 2(H-1)/H of its shard across;
 * a rank past the lanes its vector in and the result out, which its lane sends back
 * after taking it in. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    if (!x->host_start)
        return (cl_cost){0};
    if (op->kind != CL_ALLREDUCE)
        return placed_cost(x, op);
    size_t L = (size_t)x->lanes, H = (size_t)x->hosts, es = cl_dtype_size(op->dtype);
    int first, end, place = place_of(x, x->rank, &first, &end);
    size_t vec = op->count * es;
    if ((size_t)place >= L)
        return (cl_cost){.steps = 2, .bytes = vec};
    size_t off, len = shard(op->count, (int)L, place, &off);
    size_t inside = 2 * (op->count - op->count / L), across = 2 * (len - len / H);
    size_t folds = (size_t)(end - 1 - x->rank) / L;
    /* Every lane of a host runs its ring at once: the host link carries L shards. */
    return (cl_cost){.steps = 2.0 * (double)(L - 1 + H - 1 + folds),
                     .bytes = (inside + across) * es + folds * vec,
                     .xsteps = 2.0 * (double)(H - 1),
                     .xbytes = (double)L * (double)across * (double)es,
                     .serial = (double)(folds * vec)};
}

const cl_algo cl_algo_hier = {
    .name = "hier",
    .serves = CL_SERVES(CL_ALLREDUCE) | CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER),
    .fits = fits,
    .cost = cost,
    .run = run,
    .placed = CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER),
};
