/* Hierarchical all-reduce on H >= 2 hosts, reduce-scatter and all-gather on H hosts of
 * L >= 2 ranks each (topo.c builds the rings). Every host runs L lanes, L being the
 * emptiest host's ranks (one lane: nothing to do inside the host but the folds).
 * All-reduce: a ring reduce-scatter among this host's lanes (shared memory), a ring
 * all-reduce of this lane's shard with the lanes holding the same shard on the other
 * hosts (every lane of a host runs its own ring at once, so every rank's link share
 * moves together), and a ring all-gather among this host's lanes. Each host link carries
 * 2(H-1)/H of the data each way, where a ring over all ranks carries 2(n-1)/n. A host's
 * ranks past its lanes fold in: the one at place p hands its vector to the lane at
 * p mod L first, which reduces it in, and gets the result back at the end.
 * Reduce-scatter: the host's reduce-scatter leaves place i with the host's sums of the
 * H blocks owned by the ranks at place i, which then reduce-scatter them across hosts;
 * all-gather runs the other way (across, then inside). A host link carries L(H-1) blocks
 * each way where the ring carries n-1. Both work a slice of every block at a time
 * (cl_in_rounds), copied to scratch laid out place by place (place i's H slices
 * together) and back, so scratch is bounded and any numbering works.
 * The shard all-reduce leaves the same bytes on every host and the all-gathers and the
 * folds copy them, so every rank ends bit-identical. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

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

/* ---- reduce-scatter and all-gather: slices laid out place by place ---------------- */

/* Slices [first, first + len) of every block (count elements each, in rank order in the
 * caller's buffer) to the place-by-place layout in scratch, slice i*H + h the rank's at
 * place i of host h (in = 1), or back. */
static void relayout(const cl_algo_ctx *x, char *placed, char *ranked, const cl_op *op,
                     size_t first, size_t len, int in)
{
    int L = x->local->size, H = x->cross->size;
    size_t es = cl_dtype_size(op->dtype);
    for (int v = 0; v < x->size; v++) {
        char *p = placed + (size_t)(v % L * H + v / L) * len * es;
        char *r = ranked + ((size_t)cl_rank_of(x, v) * op->count + first) * es;
        memcpy(in ? p : r, in ? r : p, len * es);
    }
}

/* The host's sums of the slices of place i's ranks, then theirs across. */
static int reduce_scatter_round(const cl_algo_ctx *x, const cl_op *op, char *s, size_t first,
                                size_t len)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t es = cl_dtype_size(op->dtype), H = (size_t)across->size;
    char *mine = s + (size_t)in->rank * H * len * es, *out = (char *)op->rbuf + first * es;
    cl_op sum = *op; /* an average divides once, at the end */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    relayout(x, s, (char *)op->sbuf, op, first, len, 1);
    int rc = cl_ring_reduce_scatter_into(in, &sum, (size_t)x->size * len, s, s);
    if (rc == COLL_OK)
        rc = cl_ring_reduce_scatter_into(across, &sum, H * len, mine, mine);
    if (rc == COLL_OK && len)
        memcpy(out, mine + (size_t)across->rank * len * es, len * es);
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(out, len, op->dtype, x->size);
    return rc;
}

/* Place i's slices across hosts, then every place's inside the host. */
static int allgather_round(const cl_algo_ctx *x, const cl_op *op, char *s, size_t first,
                           size_t len)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t es = cl_dtype_size(op->dtype), H = (size_t)across->size;
    char *mine = s + (size_t)in->rank * H * len * es;
    memmove(mine + (size_t)across->rank * len * es, (const char *)op->sbuf + first * es, len * es);
    int rc = cl_ring_allgather_in(across, op, H * len, mine, NULL);
    if (rc == COLL_OK)
        rc = cl_ring_allgather_in(in, op, (size_t)x->size * len, s, NULL);
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

/* All-reduce: two or more hosts, any placement; reduce-scatter and all-gather, whose
 * blocks follow the places, on hosts of as many ranks each, two or more. */
static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    int even = x->lanes * x->hosts == x->size;
    return x->host_start && x->hosts >= 2 && op->codec == COLL_CODEC_NONE &&
           (op->kind == CL_ALLREDUCE || (even && x->lanes >= 2));
}

/* Per rank: (L-1)/L of the data each way inside the host, 2(H-1)/H of its shard across;
 * a rank past the lanes its vector in and the result out, which its lane sends back
 * after taking it in; reduce-scatter and all-gather: (L-1)H blocks inside, H-1 across,
 * and a copy of every block to and from the place-by-place layout. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    if (!x->host_start)
        return (cl_cost){0};
    size_t L = (size_t)x->lanes, H = (size_t)x->hosts, es = cl_dtype_size(op->dtype);
    if (op->kind != CL_ALLREDUCE) {
        size_t blk = op->count * es;
        return (cl_cost){.steps = (double)(L - 1 + H - 1),
                         .bytes = ((L - 1) * H + H - 1) * blk,
                         .xsteps = (double)(H - 1),
                         .xbytes = (double)(L * (H - 1) * blk),
                         .serial = (double)(L * H * blk)};
    }
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
