/* Collectives through a wire codec (f32 data). Re-quantising partial sums at every ring
 * hop makes the error grow with the number of ranks, so instead:
 *  - direct reduce-scatter: at step s rank r sends its encoded contribution to chunk r+s+1
 *    straight to that chunk's owner and decode-adds the contribution of rank r-s-1 to its
 *    own chunk in f32 (per rank the same bytes as the ring moves);
 *  - the owner encodes its result once; a ring all-gather forwards those bytes unchanged
 *    and every rank, the owner too, decodes them: bit-identical results everywhere.
 * With a residual buffer (error feedback) each encoding adds the residual first and keeps
 * what the codec lost, so the error averages out over repeated calls. */
#include "algo/algo.h"

#include "kernels/codec.h"

#include <stdlib.h>
#include <string.h>

static size_t chunk_start(const pass *p, size_t c)
{
    return c * p->chunk_base + (c < p->chunk_rem ? c : p->chunk_rem);
}

/* Encodes n values at x into out; with a residual, encodes x + residual and keeps the
 * part the codec lost in the residual. */
static void encode_fb(const pass *p, void *out, const float *x, float *res, size_t n)
{
    if (!res) {
        cl_encode(p->codec, out, x, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        p->tmp[i] = x[i] + res[i];
    cl_encode(p->codec, out, p->tmp, n);
    cl_decode(p->codec, res, out, n);
    for (size_t i = 0; i < n; i++)
        res[i] = p->tmp[i] - res[i];
}

/* ---- direct reduce-scatter -------------------------------------------------------- */

static const void *drs_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    size_t off, n = cl_unit_range(p, u, 0, &off);
    encode_fb(p, slot, (const float *)p->src + off, p->residual ? p->residual + off : NULL, n);
    *bytes = cl_codec_bytes(p->codec, n);
    return slot;
}

static void *drs_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    size_t off;
    *bytes = cl_codec_bytes(p->codec, cl_unit_range(p, u, 1, &off));
    return slot;
}

/* acc holds this rank's chunk only. Steps arrive in a fixed order, so the f32 sum is
 * the same every run. */
static void drs_arrived(pass *p, size_t u, void *buf)
{
    size_t off, n = cl_unit_range(p, u, 1, &off);
    float *acc = (float *)p->acc + (off - chunk_start(p, (size_t)p->x->rank));
    cl_decode_add(p->codec, acc, buf, n);
}

static const pass_ops drs_ops = {.send = drs_send, .recv = drs_recv, .arrived = drs_arrived};

/* Reduces `count` values (every rank's src) into acc, this rank's chunk in f32. */
static int direct_reduce_scatter(const cl_algo_ctx *x, const cl_op *r, size_t count, float *acc)
{
    pass p = cl_pass_init(x, r, CHUNKS_DIRECT, count, 4, CL_Q8_BLOCK);
    size_t own = chunk_start(&p, (size_t)x->rank);
    size_t len = p.chunk_base + ((size_t)x->rank < p.chunk_rem);
    if ((const float *)r->sbuf + own != acc && len)
        memcpy(acc, (const float *)r->sbuf + own, len * 4);
    p.ops = &drs_ops;
    p.lag = p.units; /* nothing is forwarded: sends never wait for receives */
    p.codec = r->codec;
    p.slot_bytes = cl_codec_bytes(r->codec, p.seg_elems);
    p.src = r->sbuf;
    p.acc = (char *)acc;
    p.residual = r->residual;
    p.tmp = r->residual ? malloc(p.seg_elems * sizeof(float)) : NULL;
    if (r->residual && !p.tmp)
        return COLL_ENOMEM;
    int rc = cl_pass_run(&p);
    free(p.tmp);
    if (rc == COLL_OK && r->op == COLL_AVG)
        for (size_t i = 0; i < len; i++)
            acc[i] /= (float)x->size;
    return rc;
}

/* ---- all-gather of encoded chunks ------------------------------------------------- */

static size_t enc_chunk_bytes(const pass *p, size_t len)
{
    return len / p->seg_elems * cl_codec_bytes(p->codec, p->seg_elems) +
           cl_codec_bytes(p->codec, len % p->seg_elems);
}

/* Where segment k of chunk c sits in the encoded vector. */
static size_t enc_offset(const pass *p, size_t c, size_t k)
{
    size_t big = c < p->chunk_rem ? c : p->chunk_rem;
    return big * enc_chunk_bytes(p, p->chunk_base + 1) +
           (c - big) * enc_chunk_bytes(p, p->chunk_base) +
           k * cl_codec_bytes(p->codec, p->seg_elems);
}

static void *eag_unit(pass *p, size_t u, int recv, size_t *bytes)
{
    size_t off, n = cl_unit_range(p, u, recv, &off);
    *bytes = cl_codec_bytes(p->codec, n);
    return p->enc + enc_offset(p, cl_unit_chunk(p, u, recv), u % p->segs_per_chunk);
}

static const void *eag_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    return eag_unit(p, u, 0, bytes);
}

static void *eag_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    return eag_unit(p, u, 1, bytes);
}

static void eag_arrived(pass *p, size_t u, void *buf)
{
    size_t off, n = cl_unit_range(p, u, 1, &off);
    cl_decode(p->codec, (float *)p->acc + off, buf, n);
}

static const pass_ops eag_ops = {.send = eag_send, .recv = eag_recv, .arrived = eag_arrived};

/* buf (count values) holds this rank's chunk in f32: encode it once, replace it with
 * its decoded value, and gather every other chunk's encoded bytes into buf decoded. */
static int encoded_allgather(const cl_algo_ctx *x, const cl_op *r, size_t count, float *buf)
{
    pass p = cl_pass_init(x, r, CHUNKS_AG, count, 4, CL_Q8_BLOCK);
    p.ops = &eag_ops;
    p.codec = r->codec;
    p.acc = (char *)buf;
    p.enc = cl_buf_grow(x->scratch, enc_offset(&p, (size_t)x->size, 0) + 64);
    p.tmp = r->residual ? malloc(p.seg_elems * sizeof(float)) : NULL;
    if (!p.enc || (r->residual && !p.tmp)) {
        free(p.tmp);
        return COLL_ENOMEM;
    }
    for (size_t u = 0; u < p.segs_per_chunk; u++) { /* step 0 units: this rank's chunk */
        size_t off, n = cl_unit_range(&p, u, 0, &off), bytes;
        void *e = eag_unit(&p, u, 0, &bytes);
        encode_fb(&p, e, buf + off, r->residual ? r->residual + off : NULL, n);
        cl_decode(p.codec, buf + off, e, n);
    }
    free(p.tmp);
    p.tmp = NULL;
    return x->size > 1 ? cl_pass_run(&p) : COLL_OK;
}

/* A window at a time (cl_in_windows): the encoded copy the all-gather forwards from is
 * a window's, not the message's. */
static int allreduce_window(const cl_algo_ctx *x, const cl_op *r)
{
    float *out = r->rbuf;
    size_t n = (size_t)x->size, me = (size_t)x->rank;
    size_t own = r->count / n * me + (me < r->count % n ? me : r->count % n);
    int rc = COLL_OK;
    if (x->size > 1)
        rc = direct_reduce_scatter(x, r, r->count, out + own);
    else if (r->sbuf != r->rbuf)
        memcpy(out, r->sbuf, r->count * 4);
    return rc == COLL_OK ? encoded_allgather(x, r, r->count, out) : rc;
}

static int reduce_scatter(const cl_algo_ctx *x, const cl_op *r)
{
    if (x->size == 1) {
        if (r->sbuf != r->rbuf)
            memcpy(r->rbuf, r->sbuf, r->count * 4);
        return COLL_OK;
    }
    /* In place, block r is read from the input while the result lands at the start. */
    float *acc = r->sbuf == r->rbuf ? cl_buf_grow(x->scratch, r->count * 4 + 64) : r->rbuf;
    if (!acc)
        return COLL_ENOMEM;
    int rc = direct_reduce_scatter(x, r, r->count * (size_t)x->size, acc);
    if (rc == COLL_OK && acc != r->rbuf)
        memcpy(r->rbuf, acc, r->count * 4);
    return rc;
}

static int run(const cl_algo_ctx *x, cl_op *r)
{
    return r->kind == CL_ALLREDUCE ? cl_in_windows(x, r, allreduce_window) : reduce_scatter(x, r);
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    (void)x;
    return op->codec != COLL_CODEC_NONE;
}

/* As the ring's, with every segment encoded. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t n = (size_t)x->size, count = op->kind == CL_ALLREDUCE ? op->count : op->count * n;
    size_t bytes = cl_codec_bytes(op->codec, count - count / n);
    int passes = op->kind == CL_ALLREDUCE ? 2 : 1;
    return (cl_cost){.steps = passes * (double)(n - 1), .bytes = (size_t)passes * bytes};
}

const cl_algo cl_algo_codec = {
    .name = "codec",
    .serves = CL_SERVES(CL_ALLREDUCE) | CL_SERVES(CL_REDUCE_SCATTER),
    .fits = fits,
    .cost = cost,
    .run = run,
};
