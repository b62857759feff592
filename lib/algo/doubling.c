/* Recursive doubling all-reduce for small messages on a power-of-two number of ranks:
 * log2(n) exchanges of the whole vector instead of the ring's 2(n-1) steps, because
 * below DOUBLING_BYTES the latency of a step, not the bytes, is the cost. At step k
 * rank r exchanges with r ^ 2^k and both compute (lower half's partial) op (upper half's
 * partial) in that order, so every rank ends with bit-identical results, as the ring's. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <string.h>

/* Past this, the ring's 2(n-1)/n x S beats log2(n) x S on the wire. */
#define DOUBLING_BYTES (64u * 1024u)

static const void *rd_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    *bytes = p->op->count * p->esize;
    return p->src; /* a copy of acc: acc changes while the send may still read */
}

static void *rd_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    *bytes = p->op->count * p->esize;
    return p->enc; /* the partner's partial */
}

/* Bytes [off, off + n) of the partner's partial are at buf. */
static void rd_take(pass *p, size_t u, size_t off, const void *buf, size_t n)
{
    (void)u;
    const cl_op *op = p->op;
    char *acc = p->acc + off;
    int lower = p->x->rank < p->to;
    cl_reduce(acc, lower ? acc : buf, lower ? buf : acc, n / p->esize, op->dtype, op->op);
}

static void rd_arrived(pass *p, size_t u, void *buf)
{
    rd_take(p, u, 0, buf, p->op->count * p->esize);
}

static const pass_ops rd_ops = {
    .send = rd_send, .recv = rd_recv, .arrived = rd_arrived, .take = rd_take};

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size;
    return op->codec == COLL_CODEC_NONE && n > 1 && (n & (n - 1)) == 0 &&
           op->count * cl_dtype_size(op->dtype) <= DOUBLING_BYTES;
}

static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t steps = 0;
    for (int bit = 1; bit < x->size; bit <<= 1)
        steps++;
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    cl_cost k = {.steps = (double)steps, .bytes = steps * bytes};
    /* Across hosts (host order): each step whose partners straddle hosts waits for the
     * busiest host link, which carries the vector of each of its ranks that crosses. */
    for (int bit = 1; x->hosts > 1 && x->host_at && bit < x->size; bit <<= 1) {
        int c = cl_pairs_crossing(x, x->size, bit, NULL);
        if (c)
            k.xsteps += 1, k.xbytes += (double)c * (double)bytes;
    }
    return k;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    char *copy = cl_buf_grow(x->scratch, 2 * bytes); /* what we send, then what we receive */
    if (!copy)
        return COLL_ENOMEM;
    if (op->rbuf != op->sbuf)
        memcpy(op->rbuf, op->sbuf, bytes);
    for (int bit = 1; bit < x->size; bit <<= 1) {
        memcpy(copy, op->rbuf, bytes);
        /* One unit, the whole vector: nothing to cut into chunks and segments (what
         * cl_pass_init works out takes divisions a small all-reduce notices). */
        pass p = {.x = x, .op = op, .order = CHUNKS_ONE, .esize = cl_dtype_size(op->dtype),
                  .chunk_base = op->count, .seg_elems = op->count};
        p.ops = &rd_ops;
        p.units = p.segs_per_chunk = 1;
        p.lag = 1; /* the send waits for nothing */
        p.from = p.to = x->rank ^ bit;
        p.src = copy;
        p.enc = copy + bytes;
        p.acc = op->rbuf;
        int rc = cl_pass_run(&p);
        if (rc != COLL_OK)
            return rc;
    }
    if (op->op == COLL_AVG)
        cl_divide(op->rbuf, op->count, op->dtype, x->size);
    return COLL_OK;
}

const cl_algo cl_algo_doubling = {
    .name = "doubling",
    .serves = CL_SERVES(CL_ALLREDUCE),
    .fits = fits,
    .cost = cost,
    .run = run,
};
