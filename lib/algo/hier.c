/* Hierarchical all-reduce, reduce-scatter and all-gather on H hosts of L ranks each
 * (H, L >= 2; topo.c builds the two rings: this host's ranks, and the ranks with this
 * one's place on every host; uneven hosts run the ring in host order instead).
 * All-reduce: a ring reduce-scatter among this host's ranks (shared memory), a ring
 * all-reduce of this rank's shard with the ranks holding the same shard on the other
 * hosts (every place on a host runs its own ring at once, so every rank's link share
 * moves together), and a ring all-gather among this host's ranks. Each host link carries
 * 2(H-1)/H of the data each way, where a ring over all ranks carries 2(n-1)/n.
 * Reduce-scatter: the host's reduce-scatter leaves place i with the host's sums of the H
 * blocks owned by the ranks at place i, which then reduce-scatter them across hosts;
 * all-gather runs the other way (across, then inside). A host link carries L(H-1) blocks
 * each way where the ring carries n-1. The blocks are laid out place by place (place i's
 * H blocks together) in scratch, unless the launcher numbered ranks round-robin over the
 * hosts, where rank order is that layout already.
 * The shard all-reduce leaves the same bytes on every host and the all-gathers copy them,
 * so every rank ends bit-identical. */
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

static int allreduce(const cl_algo_ctx *x, const cl_op *op)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t es = cl_dtype_size(op->dtype), off;
    size_t len = shard(op->count, in->size, in->rank, &off);
    cl_op sum = *op; /* an average divides once, by every rank, at the end */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    int rc = cl_ring_reduce_scatter_into(in, &sum, op->count, op->sbuf, op->rbuf, NULL);
    char *mine = (char *)op->rbuf + off * es;
    cl_op part = sum;
    part.count = len; /* what every header of the shard's passes says */
    if (rc == COLL_OK)
        rc = cl_ring_reduce_scatter_into(across, &part, len, mine, mine, NULL);
    if (rc == COLL_OK)
        rc = cl_ring_allgather_in(across, &part, len, mine, NULL);
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(mine, len, op->dtype, x->size);
    return rc == COLL_OK ? cl_ring_allgather_in(in, &sum, op->count, op->rbuf, NULL) : rc;
}

/* ---- reduce-scatter and all-gather: blocks laid out place by place ----------------- */

/* Is rank order the place-by-place layout (block i*H + h is the rank at place i of host
 * h), as a round-robin numbering makes it? */
static int round_robin(const cl_algo_ctx *x)
{
    int L = x->local->size, H = x->cross->size;
    for (int v = 0; v < x->size; v++)
        if (cl_rank_of(x, v) != v % L * H + v / L)
            return 0;
    return 1;
}

/* Copies every block between rank order (ranked) and the place-by-place layout (placed):
 * to the placed layout (in = 1) or back. */
static void relayout(const cl_algo_ctx *x, char *placed, char *ranked, size_t blk, int in)
{
    int L = x->local->size, H = x->cross->size;
    for (int v = 0; v < x->size; v++) {
        char *p = placed + (size_t)(v % L * H + v / L) * blk;
        char *r = ranked + (size_t)cl_rank_of(x, v) * blk;
        memcpy(in ? p : r, in ? r : p, blk);
    }
}

static int reduce_scatter(const cl_algo_ctx *x, const cl_op *op)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t blk = op->count * cl_dtype_size(op->dtype), n = (size_t)x->size;
    char *s = cl_buf_grow(x->scratch, n * blk);
    if (!s)
        return COLL_ENOMEM;
    const char *src = op->sbuf;
    if (!round_robin(x)) {
        relayout(x, s, (char *)op->sbuf, blk, 1);
        src = s;
    }
    cl_op sum = *op;
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    char *mine = s + (size_t)in->rank * across->size * blk;
    int rc = cl_ring_reduce_scatter_into(in, &sum, n * op->count, src, s, NULL);
    if (rc == COLL_OK)
        rc = cl_ring_reduce_scatter_into(across, &sum, (size_t)across->size * op->count, mine,
                                         mine, NULL);
    if (rc == COLL_OK && blk) {
        memcpy(op->rbuf, mine + (size_t)across->rank * blk, blk);
        if (op->op == COLL_AVG)
            cl_divide(op->rbuf, op->count, op->dtype, x->size);
    }
    return rc;
}

static int allgather(const cl_algo_ctx *x, const cl_op *op)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t blk = op->count * cl_dtype_size(op->dtype), n = (size_t)x->size;
    int direct = round_robin(x);
    char *s = direct ? op->rbuf : cl_buf_grow(x->scratch, n * blk);
    if (!s)
        return COLL_ENOMEM;
    char *mine = s + (size_t)in->rank * across->size * blk;
    if (direct)
        cl_place_own_block(x, op); /* its place in rbuf is its place in the layout */
    else if (blk)
        memcpy(mine + (size_t)across->rank * blk, op->sbuf, blk);
    int rc = cl_ring_allgather_in(across, op, (size_t)across->size * op->count, mine, NULL);
    if (rc == COLL_OK)
        rc = cl_ring_allgather_in(in, op, n * op->count, s, NULL);
    if (rc == COLL_OK && !direct)
        relayout(x, s, op->rbuf, blk, 0);
    return rc;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    switch (op->kind) {
    case CL_ALLREDUCE: return allreduce(x, op);
    case CL_REDUCE_SCATTER: return reduce_scatter(x, op);
    default: return allgather(x, op);
    }
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->local && x->cross && op->codec == COLL_CODEC_NONE;
}

/* Per rank: (L-1)/L of the data each way inside the host, 2(H-1)/H of its shard across;
 * reduce-scatter and all-gather: (L-1)H blocks inside, H-1 across, and a copy of every
 * block to and from the place-by-place layout unless the numbering is round-robin. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    if (!x->local || !x->cross)
        return (cl_cost){0};
    size_t L = (size_t)x->local->size, H = (size_t)x->cross->size, es = cl_dtype_size(op->dtype);
    if (op->kind != CL_ALLREDUCE) {
        size_t blk = op->count * es;
        return (cl_cost){.steps = (double)(L - 1 + H - 1),
                         .bytes = ((L - 1) * H + H - 1) * blk,
                         .xsteps = (double)(H - 1),
                         .xbytes = (double)(L * (H - 1) * blk),
                         .serial = round_robin(x) ? 0 : (double)(L * H * blk)};
    }
    /* Positions are in host order, L to a host: the place on the host is rank mod L. */
    size_t off, len = shard(op->count, (int)L, x->rank % (int)L, &off);
    size_t inside = 2 * (op->count - op->count / L), across = 2 * (len - len / H);
    /* Every place on a host runs its ring at once: the host link carries L shards. */
    return (cl_cost){.steps = 2.0 * (double)(L - 1 + H - 1),
                     .bytes = (inside + across) * es,
                     .xsteps = 2.0 * (double)(H - 1),
                     .xbytes = (double)L * (double)across * (double)es};
}

const cl_algo cl_algo_hier = {
    .name = "hier",
    .serves = CL_SERVES(CL_ALLREDUCE) | CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER),
    .fits = fits,
    .cost = cost,
    .run = run,
    .placed = CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER),
};
