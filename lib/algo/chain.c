/* Chain broadcast: the root sends segments down the chain root, root+1, ...; each rank
 * forwards a segment as soon as it has it, so the chain is a pipeline, not n-1
 * whole-buffer hops. Per rank (but the last) S bytes on the wire, n-1 + segments steps.
 * Across hosts the chain runs on positions in host order from the root's, so each host
 * link carries the data once each way. */
#include "algo/algo.h"

#include "kernels/reduce.h"

static int run(const cl_algo_ctx *x, cl_op *op)
{
    int n = x->size, pos = (x->rank - cl_position_of(x, op->root) + n) % n;
    if (n == 1)
        return COLL_OK;
    pass p = cl_pass_init(x, op, CHUNKS_ONE, op->count, cl_dtype_size(op->dtype), 1);
    size_t seg = p.seg_elems;
    p.ops = &cl_plain_ops;
    p.units = op->count ? (op->count + seg - 1) / seg : 1;
    p.segs_per_chunk = p.units;
    p.chunk_base = op->count;
    p.chunk_rem = 0;
    p.lag = 0;
    p.from = pos == 0 ? -1 : p.from;
    p.to = pos == n - 1 ? -1 : p.to;
    p.acc = op->rbuf;
    return cl_pass_run(&p);
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    (void)x, (void)op;
    return 1;
}

static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    size_t segs = bytes / (x->segment_bytes ? x->segment_bytes : 1) + 1;
    int n = x->size, last = (x->rank - cl_position_of(x, op->root) + n) % n == n - 1;
    cl_cost k = {.steps = (double)(n - 1 + segs - 1), .bytes = last ? 0 : bytes};
    if (x->hosts > 1) /* as the ring: each step waits on the edges that cross */
        k.xsteps = k.steps, k.xbytes = (double)x->ring_cross * (double)bytes;
    return k;
}

const cl_algo cl_algo_chain = {
    .name = "chain",
    .serves = CL_SERVES(CL_BROADCAST),
    .fits = fits,
    .cost = cost,
    .run = run,
    .placed = CL_SERVES(CL_BROADCAST),
};
