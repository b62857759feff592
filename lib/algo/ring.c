/* Ring reduce-scatter, all-gather, all-reduce (= reduce-scatter + all-gather) and
 * barrier, each set up as one or two pipeline passes.
 * Reduce-scatter: at step s rank r sends chunk r-s-1 and reduces chunk r-s-2 into its
 * copy, so after n-1 steps it owns the full reduction of chunk r. All-gather: at step s
 * rank r forwards chunk r-s; it forwards the owner's bytes unchanged, so every rank ends
 * with bit-identical results. Per rank each pass puts (n-1)/n of the data on the wire.
 * Across hosts the ring runs on positions in host order, each position's chunk being its
 * rank's block (pass.blocks), so it crosses each host link once each way whatever the
 * launcher's numbering. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <string.h>

/* ---- reduce-scatter: receive into staging, reduce into the accumulation ------------ */

/* Where element off of the buffers is in acc: the same place, or packed (pass.stride). */
static char *acc_at(const pass *p, size_t off)
{
    size_t at = p->stride ? off / p->stride * p->chunk_base + off % p->stride - p->first : off;
    return p->acc + at * p->esize;
}

static const void *rs_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    size_t off, n = cl_unit_range(p, u, 0, &off);
    *bytes = n * p->esize;
    return u < p->segs_per_chunk ? p->src + off * p->esize : acc_at(p, off);
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
    off += first;
    const char *src = p->src + off * p->esize;
    if (p->divide_last && u / p->segs_per_chunk == (size_t)p->x->size - 2)
        cl_reduce_avg(acc_at(p, off), src, buf, n, p->op->dtype, p->x->size);
    else
        cl_reduce(acc_at(p, off), src, buf, n, p->op->dtype, p->op->op);
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

static const pass_ops rs_ops = {
    .send = rs_send, .recv = rs_recv, .arrived = rs_arrived, .take = rs_take};

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

const pass_ops cl_plain_ops = {.send = ag_send, .recv = ag_recv};

static pass rs_pass(const cl_algo_ctx *x, const cl_op *op, size_t count, const size_t *chunks,
                    const void *src, void *acc)
{
    size_t es = cl_dtype_size(op->dtype);
    pass p = cl_pass_init(x, op, CHUNKS_RS, count, es, 1);
    if (chunks)
        cl_pass_chunks(&p, chunks);
    p.ops = &rs_ops;
    p.slot_bytes = p.seg_elems * es;
    p.src = src;
    p.acc = acc;
    p.divide_last = op->op == COLL_AVG;
    return p;
}

int cl_ring_reduce_scatter_into(const cl_algo_ctx *x, const cl_op *op, size_t count,
                                const void *src, void *acc)
{
    pass p = rs_pass(x, op, count, NULL, src, acc);
    return cl_pass_run(&p);
}

int cl_ring_reduce_scatter_chunks(const cl_algo_ctx *x, const cl_op *op, const size_t *chunks,
                                  void *acc)
{
    pass p = rs_pass(x, op, chunks[x->size], chunks, acc, acc);
    return cl_pass_run(&p);
}

/* Elements per block in one round: whole segments, so a round's slice splits as the block
 * would (the same headers), and at least 1024 elements: on many ranks, small messages
 * rather than many rounds. */
static size_t round_elems(const cl_algo_ctx *x, const cl_op *op)
{
    size_t es = cl_dtype_size(op->dtype), seg = CL_MAX(x->segment_bytes / es, 1);
    size_t w = CL_ROUND_SEGMENTS * seg / (size_t)x->size;
    w = w >= seg ? w / seg * seg : CL_MAX(w, 1024);
    return CL_MIN(w, CL_MAX(op->count, 1));
}

int cl_in_rounds(const cl_algo_ctx *x, const cl_op *op, cl_round_fn round)
{
    size_t w = round_elems(x, op), first = 0, es = cl_dtype_size(op->dtype);
    char *s = cl_buf_grow(x->scratch, (size_t)x->size * w * es);
    if (!s)
        return COLL_ENOMEM;
    int rc;
    do { /* once at least: an empty operation still checks its headers */
        size_t len = CL_MIN(w, op->count - first);
        rc = round(x, op, s, first, len);
        first += len;
    } while (rc == COLL_OK && first < op->count);
    return rc;
}

size_t cl_window_elems(const cl_algo_ctx *x, const cl_op *op)
{
    return CL_MAX(CL_ROUND_SEGMENTS * (x->segment_bytes / cl_dtype_size(op->dtype)),
                  (size_t)x->size);
}

int cl_in_windows(const cl_algo_ctx *x, const cl_op *op, cl_window_fn fn)
{
    size_t es = cl_dtype_size(op->dtype), first = 0, w = cl_window_elems(x, op);
    int rc;
    do { /* once at least: an empty operation still checks its headers */
        cl_op part = *op;
        part.count = CL_MIN(w, op->count - first);
        part.sbuf = (const char *)op->sbuf + first * es;
        part.rbuf = op->rbuf ? (char *)op->rbuf + first * es : NULL;
        part.residual = op->residual ? op->residual + first : NULL;
        rc = fn(x, &part);
        first += part.count;
    } while (rc == COLL_OK && first < op->count);
    return rc;
}

static int allgather_pass(const cl_algo_ctx *x, const cl_op *op, size_t count,
                          const size_t *chunks, void *buf, const int *blocks)
{
    pass p = cl_pass_init(x, op, CHUNKS_AG, count, cl_dtype_size(op->dtype), 1);
    if (chunks)
        cl_pass_chunks(&p, chunks);
    p.ops = &cl_plain_ops;
    p.acc = buf;
    p.blocks = blocks;
    return cl_pass_run(&p);
}

int cl_ring_allgather_in(const cl_algo_ctx *x, const cl_op *op, size_t count, void *buf,
                         const int *blocks)
{
    return allgather_pass(x, op, count, NULL, buf, blocks);
}

int cl_ring_allgather_chunks(const cl_algo_ctx *x, const cl_op *op, const size_t *chunks,
                             void *buf)
{
    return allgather_pass(x, op, chunks[x->size], chunks, buf, NULL);
}

static int allreduce(const cl_algo_ctx *x, const cl_op *op)
{
    if (x->size == 1) {
        if (op->sbuf != op->rbuf)
            memcpy(op->rbuf, op->sbuf, op->count * cl_dtype_size(op->dtype));
        return COLL_OK;
    }
    int rc = cl_ring_reduce_scatter_into(x, op, op->count, op->sbuf, op->rbuf);
    return rc == COLL_OK ? cl_ring_allgather_in(x, op, op->count, op->rbuf, NULL) : rc;
}

/* One round: the slices' partial sums live in scratch (n slices), not in a copy of the
 * whole input. Positions in host order (x->ranks) reduce their own rank's block. */
static int reduce_scatter_round(const cl_algo_ctx *x, const cl_op *op, char *acc,
                                size_t first, size_t len)
{
    size_t es = cl_dtype_size(op->dtype), own = (size_t)cl_rank_of(x, x->rank);
    pass p = rs_pass(x, op, (size_t)x->size * len, NULL, op->sbuf, acc);
    p.blocks = x->ranks;
    p.stride = op->count;
    p.first = first;
    int rc = cl_pass_run(&p);
    if (rc == COLL_OK && len)
        memcpy((char *)op->rbuf + first * es, acc + own * len * es, len * es);
    return rc;
}

static int reduce_scatter(const cl_algo_ctx *x, const cl_op *op)
{
    if (x->size > 1)
        return cl_in_rounds(x, op, reduce_scatter_round);
    if (op->sbuf != op->rbuf)
        memcpy(op->rbuf, op->sbuf, op->count * cl_dtype_size(op->dtype));
    return COLL_OK;
}

void cl_place_own_block(const cl_algo_ctx *x, const cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    char *own = (char *)op->rbuf + (size_t)cl_rank_of(x, x->rank) * bytes;
    if ((const char *)op->sbuf != own && bytes)
        memmove(own, op->sbuf, bytes);
}

static int allgather(const cl_algo_ctx *x, const cl_op *op)
{
    cl_place_own_block(x, op);
    return x->size == 1
               ? COLL_OK
               : cl_ring_allgather_in(x, op, op->count * (size_t)x->size, op->rbuf, x->ranks);
}

/* An all-gather of one byte per rank: nobody leaves before everyone's byte arrived. */
static int barrier(const cl_algo_ctx *x, cl_op *op)
{
    unsigned char *flags = cl_buf_grow(x->scratch, (size_t)x->size);
    if (!flags)
        return COLL_ENOMEM;
    memset(flags, 1, (size_t)x->size);
    op->sbuf = op->rbuf = flags;
    op->count = 1;
    op->dtype = COLL_U8;
    return allgather(x, op);
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    switch (op->kind) {
    case CL_ALLREDUCE: return allreduce(x, op);
    case CL_REDUCE_SCATTER: return reduce_scatter(x, op);
    case CL_ALLGATHER: return allgather(x, op);
    default: return barrier(x, op);
    }
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    (void)x;
    return op->codec == COLL_CODEC_NONE;
}

/* Per rank: all-reduce sends every chunk but its own in the reduce-scatter and every
 * chunk but the next rank's in the all-gather (chunk k holds base elements, one more for
 * k < rem); reduce-scatter and all-gather send n-1 of the n chunks. Across hosts every
 * step waits on the edges that cross, and the busiest host link carries each of its
 * crossing edges' share. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t n = (size_t)x->size, r = (size_t)x->rank, es = cl_dtype_size(op->dtype);
    size_t count = op->kind == CL_ALLREDUCE ? op->count : op->count * n;
    size_t base = count / n, rem = count % n;
    size_t mine = base + (r < rem), next = base + ((r + 1) % n < rem);
    if (n == 1)
        return (cl_cost){0};
    cl_cost k =
        op->kind == CL_ALLREDUCE
            ? (cl_cost){.steps = 2.0 * (double)(n - 1), .bytes = (2 * count - mine - next) * es}
            : (cl_cost){.steps = (double)(n - 1), .bytes = (count - count / n) * es};
    if (x->hosts > 1)
        k.xsteps = k.steps, k.xbytes = (double)x->ring_cross * (double)k.bytes;
    return k;
}

const cl_algo cl_algo_ring = {
    .name = "ring",
    .serves = CL_SERVES(CL_ALLREDUCE) | CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER) |
              CL_SERVES(CL_BARRIER),
    .fits = fits,
    .cost = cost,
    .run = run,
    .placed = CL_SERVES(CL_REDUCE_SCATTER) | CL_SERVES(CL_ALLGATHER) | CL_SERVES(CL_BARRIER),
};
