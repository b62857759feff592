/* Hierarchical all-reduce: a ring reduce-scatter among this host's ranks (shared
 * memory), a ring all-reduce of this rank's shard with the ranks holding the same shard
 * on the other hosts (every place on a host runs its own ring at once, so every rank's
 * link share moves together), and a ring all-gather among this host's ranks. Each host
 * link carries 2(H-1)/H of the data each way, where a ring over all ranks carries
 * 2(n-1)/n. Needs H >= 2 hosts of L >= 2 ranks each (topo.c builds the two rings);
 * uneven hosts run the ring in host order instead. The shard all-reduce leaves the same
 * bytes on every host and the all-gather copies them, so every rank ends bit-identical. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

/* The shard of an L-way split this rank owns after the host's reduce-scatter. */
static size_t shard(size_t count, int L, int i, size_t *off)
{
    size_t base = count / (size_t)L, rem = count % (size_t)L;
    *off = (size_t)i * base + CL_MIN((size_t)i, rem);
    return base + ((size_t)i < rem);
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    const cl_algo_ctx *in = x->local, *across = x->cross;
    size_t es = cl_dtype_size(op->dtype), off;
    size_t len = shard(op->count, in->size, in->rank, &off);
    cl_op sum = *op; /* an average divides once, by every rank, at the end */
    sum.op = op->op == COLL_AVG ? COLL_SUM : op->op;
    int rc = cl_ring_reduce_scatter_into(in, &sum, op->count, op->sbuf, op->rbuf);
    char *mine = (char *)op->rbuf + off * es;
    cl_op part = sum;
    part.count = len; /* what every header of the shard's passes says */
    if (rc == COLL_OK)
        rc = cl_ring_reduce_scatter_into(across, &part, len, mine, mine);
    if (rc == COLL_OK)
        rc = cl_ring_allgather_in(across, &part, len, mine);
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(mine, len, op->dtype, x->size);
    return rc == COLL_OK ? cl_ring_allgather_in(in, &sum, op->count, op->rbuf) : rc;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->local && x->cross && op->codec == COLL_CODEC_NONE;
}

/* Per rank: (L-1)/L of the data each way inside the host, 2(H-1)/H of its shard across. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    if (!x->local || !x->cross)
        return (cl_cost){0};
    size_t L = (size_t)x->local->size, H = (size_t)x->cross->size, es = cl_dtype_size(op->dtype);
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
    .serves = CL_SERVES(CL_ALLREDUCE),
    .fits = fits,
    .cost = cost,
    .run = run,
};
