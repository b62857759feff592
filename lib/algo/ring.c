/* Ring reduce-scatter, all-gather and all-reduce (= reduce-scatter + all-gather), chain
 * broadcast and barrier, each set up as one or two pipeline passes.
 * Reduce-scatter: at step s rank r sends chunk r-s-1 and reduces chunk r-s-2 into its
 * copy, so after n-1 steps it owns the full reduction of chunk r. All-gather: at step s
 * rank r forwards chunk r-s; it forwards the owner's bytes unchanged, so every rank ends
 * with bit-identical results. Per rank each pass puts (n-1)/n of the data on the wire. */
#include "algo/algo.h"

#include "base/log.h"
#include "kernels/reduce.h"

#include <string.h>

/* ---- reduce-scatter: receive into staging, reduce into the accumulation ------------ */

static const void *rs_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    size_t off, n = cl_unit_range(p, u, 0, &off);
    *bytes = n * p->esize;
    return (u < p->segs_per_chunk ? p->src : p->acc) + off * p->esize;
}

static void *rs_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    size_t off;
    *bytes = cl_unit_range(p, u, 1, &off) * p->esize;
    return slot;
}

/* Elements [first, first + n) of receive unit u arrived at buf: reduce them into acc. */
static void rs_reduce(pass *p, size_t u, size_t first, const void *buf, size_t n)
{
    size_t off;
    cl_unit_range(p, u, 1, &off);
    off = (off + first) * p->esize;
    cl_reduce(p->acc + off, p->src + off, buf, n, p->req->dtype, p->req->op);
    if (p->divide_last && u / p->segs_per_chunk == (size_t)p->comm->size - 2)
        cl_divide(p->acc + off, n, p->req->dtype, p->comm->size);
}

static void rs_arrived(pass *p, size_t u, void *buf)
{
    size_t off;
    rs_reduce(p, u, 0, buf, cl_unit_range(p, u, 1, &off));
}

/* From the transport's memory (the shm ring): no copy into staging first. */
static void rs_take(pass *p, size_t u, size_t off, const void *bytes, size_t n)
{
    rs_reduce(p, u, off / p->esize, bytes, n / p->esize);
}

static const pass_ops rs_ops = { rs_send, rs_recv, rs_arrived, rs_take };

/* ---- all-gather and broadcast: straight into the buffer, forwarded from there ------ */

static const void *ag_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    size_t off, n = cl_unit_range(p, u, 0, &off);
    *bytes = n * p->esize;
    return p->acc + off * p->esize;
}

static void *ag_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    size_t off, n = cl_unit_range(p, u, 1, &off);
    *bytes = n * p->esize;
    return p->acc + off * p->esize;
}

static const pass_ops ag_ops = { .send = ag_send, .recv = ag_recv };

/* The reduce-scatter pass leaves rank r's fully reduced chunk r at acc + offset(r). */
static int reduce_scatter_into(coll_comm *c, coll_req *r, size_t count, const void *src,
                               void *acc)
{
    size_t es = cl_dtype_size(r->dtype);
    pass p = cl_pass_init(c, r, CHUNKS_RS, count, es, 1);
    p.ops = &rs_ops;
    p.slot_bytes = p.seg_elems * es;
    p.src = src;
    p.acc = acc;
    p.divide_last = r->op == COLL_AVG;
    return cl_pass_run(&p);
}

static int allgather_in(coll_comm *c, coll_req *r, size_t count, void *buf)
{
    pass p = cl_pass_init(c, r, CHUNKS_AG, count, cl_dtype_size(r->dtype), 1);
    p.ops = &ag_ops;
    p.acc = buf;
    return cl_pass_run(&p);
}

int cl_ring_allreduce(coll_comm *c, coll_req *r)
{
    if (c->size == 1) {
        if (r->sbuf != r->rbuf)
            memcpy(r->rbuf, r->sbuf, r->count * cl_dtype_size(r->dtype));
        return COLL_OK;
    }
    int rc = reduce_scatter_into(c, r, r->count, r->sbuf, r->rbuf);
    return rc == COLL_OK ? allgather_in(c, r, r->count, r->rbuf) : rc;
}

int cl_ring_reduce_scatter(coll_comm *c, coll_req *r)
{
    size_t esize = cl_dtype_size(r->dtype), bytes = r->count * esize;
    size_t total = r->count * (size_t)c->size;
    if (c->size == 1) {
        if (r->sbuf != r->rbuf)
            memcpy(r->rbuf, r->sbuf, bytes);
        return COLL_OK;
    }
    /* Partial sums of other ranks' blocks need a home the size of the input. */
    char *acc = cl_scratch(c, total * esize);
    if (!acc)
        return COLL_ENOMEM;
    int rc = reduce_scatter_into(c, r, total, r->sbuf, acc);
    if (rc == COLL_OK && bytes)
        memcpy(r->rbuf, acc + (size_t)c->rank * bytes, bytes);
    return rc;
}

void cl_place_own_block(coll_comm *c, coll_req *r)
{
    size_t bytes = r->count * cl_dtype_size(r->dtype);
    char *own = (char *)r->rbuf + (size_t)c->rank * bytes;
    if ((const char *)r->sbuf != own && bytes)
        memmove(own, r->sbuf, bytes);
}

int cl_ring_allgather(coll_comm *c, coll_req *r)
{
    cl_place_own_block(c, r);
    return c->size == 1 ? COLL_OK : allgather_in(c, r, r->count * (size_t)c->size, r->rbuf);
}

/* Root sends segments down the chain root, root+1, ...; each rank forwards a segment as
 * soon as it has it, so the chain is a pipeline, not n-1 whole-buffer hops. */
int cl_chain_broadcast(coll_comm *c, coll_req *r)
{
    int n = c->size, pos = (c->rank - r->root + n) % n;
    if (n == 1)
        return COLL_OK;
    pass p = cl_pass_init(c, r, CHUNKS_ONE, r->count, cl_dtype_size(r->dtype), 1);
    size_t seg = p.seg_elems;
    p.ops = &ag_ops;
    p.units = r->count ? (r->count + seg - 1) / seg : 1;
    p.segs_per_chunk = p.units;
    p.chunk_base = r->count;
    p.chunk_rem = 0;
    p.lag = 0;
    p.from = pos == 0 ? -1 : p.from;
    p.to = pos == n - 1 ? -1 : p.to;
    p.acc = r->rbuf;
    return cl_pass_run(&p);
}

/* An all-gather of one byte per rank: nobody leaves before everyone's byte arrived. */
int cl_ring_barrier(coll_comm *c, coll_req *r)
{
    unsigned char *flags = cl_scratch(c, (size_t)c->size);
    if (!flags)
        return COLL_ENOMEM;
    memset(flags, 1, (size_t)c->size);
    r->sbuf = r->rbuf = flags;
    r->count = 1;
    r->dtype = COLL_U8;
    return cl_ring_allgather(c, r);
}
