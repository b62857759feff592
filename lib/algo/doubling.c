/* Recursive doubling all-reduce for small messages on a power-of-two number of ranks:
 * log2(n) exchanges of the whole vector instead of the ring's 2(n-1) steps, because
 * below CL_DOUBLING_BYTES the latency of a step, not the bytes, is the cost. At step k
 * rank r exchanges with r ^ 2^k and both compute (lower half's partial) op (upper half's
 * partial) in that order, so every rank ends with bit-identical results, as the ring's. */
#include "algo/algo.h"

#include "kernels/reduce.h"

#include <string.h>

static const void *rd_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    *bytes = p->req->count * p->esize;
    return p->src; /* a copy of acc: acc changes while the send may still read */
}

static void *rd_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    *bytes = p->req->count * p->esize;
    return p->enc; /* the partner's partial */
}

/* Bytes [off, off + n) of the partner's partial are at buf. */
static void rd_take(pass *p, size_t u, size_t off, const void *buf, size_t n)
{
    (void)u;
    coll_req *r = p->req;
    char *acc = p->acc + off;
    int lower = p->comm->rank < p->to;
    cl_reduce(acc, lower ? acc : buf, lower ? buf : acc, n / p->esize, r->dtype, r->op);
}

static void rd_arrived(pass *p, size_t u, void *buf)
{
    rd_take(p, u, 0, buf, p->req->count * p->esize);
}

static const pass_ops rd_ops = {rd_send, rd_recv, rd_arrived, rd_take};

int cl_doubling_fits(const coll_comm *c, size_t bytes)
{
    int n = c->size;
    return n > 1 && (n & (n - 1)) == 0 && bytes <= CL_DOUBLING_BYTES;
}

size_t cl_allreduce_bytes_sent(const coll_comm *c, size_t count, size_t esize)
{
    size_t n = (size_t)c->size, r = (size_t)c->rank, steps = 0;
    if (cl_doubling_fits(c, count * esize)) {
        for (size_t bit = 1; bit < n; bit <<= 1)
            steps++;
        return steps * count * esize;
    }
    /* Ring: every chunk but this rank's in the reduce-scatter, but the next rank's in the
     * all-gather (chunk k holds base elements, one more for k < rem). */
    size_t base = count / n, rem = count % n;
    size_t mine = base + (r < rem), next = base + ((r + 1) % n < rem);
    return n == 1 ? 0 : (2 * count - mine - next) * esize;
}

int cl_doubling_allreduce(coll_comm *c, coll_req *r)
{
    size_t bytes = r->count * cl_dtype_size(r->dtype);
    char *copy = cl_scratch(c, 2 * bytes); /* what we send, then what we receive */
    if (!copy)
        return COLL_ENOMEM;
    if (r->rbuf != r->sbuf)
        memcpy(r->rbuf, r->sbuf, bytes);
    for (int bit = 1; bit < c->size; bit <<= 1) {
        memcpy(copy, r->rbuf, bytes);
        pass p = cl_pass_init(c, r, CHUNKS_ONE, r->count, cl_dtype_size(r->dtype), 1);
        p.ops = &rd_ops;
        p.units = p.segs_per_chunk = 1;
        p.lag = 1; /* the send waits for nothing */
        p.from = p.to = c->rank ^ bit;
        p.src = copy;
        p.enc = copy + bytes;
        p.acc = r->rbuf;
        int rc = cl_pass_run(&p);
        if (rc != COLL_OK)
            return rc;
    }
    if (r->op == COLL_AVG)
        cl_divide(r->rbuf, r->count, r->dtype, c->size);
    return COLL_OK;
}
