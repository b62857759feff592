/* One exchange between two positions: a range of a buffer goes to one peer while a range
 * comes from another (or the same), reduced into the buffer or copied there, in segments.
 * Rabenseifner's halving and doubling steps are exchanges; so are the folds that hand an
 * extra rank's vector to the rank that stands in for it and bring the result back
 * (Rabenseifner's ranks past a power of two, hier's ranks past a host's lanes). And, for
 * the costs of algorithms made of pairwise steps, what such a step carries across hosts. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

typedef struct {
    pass p; /* first: the ops get the pass */
    size_t s_off, s_len, r_off, r_len;
} xchg;

/* Element range [*lo, *lo + return) of unit u of a range of len elements. */
static size_t seg_of(const pass *p, size_t len, size_t u, size_t *lo)
{
    *lo = CL_MIN(u * p->seg_elems, len);
    return CL_MIN(len, *lo + p->seg_elems) - *lo;
}

static const void *x_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    const xchg *e = (const xchg *)p;
    size_t lo, n = seg_of(p, e->s_len, u, &lo);
    *bytes = n * p->esize;
    return p->src + (e->s_off + lo) * p->esize;
}

static void *x_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    const xchg *e = (const xchg *)p;
    size_t lo, n = seg_of(p, e->r_len, u, &lo);
    *bytes = n * p->esize;
    return p->slot_bytes ? slot : p->acc + (e->r_off + lo) * p->esize;
}

/* Bytes [off, off + n) of receive unit u: reduced into the buffer where they belong. */
static void x_take(pass *p, size_t u, size_t off, const void *bytes, size_t n)
{
    const xchg *e = (const xchg *)p;
    size_t lo;
    seg_of(p, e->r_len, u, &lo);
    char *at = p->acc + (e->r_off + lo) * p->esize + off;
    cl_reduce(at, at, bytes, n / p->esize, p->op->dtype, p->op->op);
}

static void x_arrived(pass *p, size_t u, void *buf)
{
    const xchg *e = (const xchg *)p;
    size_t lo;
    x_take(p, u, 0, buf, seg_of(p, e->r_len, u, &lo) * p->esize);
}

static const pass_ops reduce_ops = {
    .send = x_send, .recv = x_recv, .arrived = x_arrived, .take = x_take};
static const pass_ops copy_ops = {.send = x_send, .recv = x_recv};

static int run(const cl_algo_ctx *x, const cl_op *op, const void *src, void *buf, int to,
               int from, size_t s_off, size_t s_len, size_t r_off, size_t r_len, int reduce)
{
    size_t es = cl_dtype_size(op->dtype), seg = CL_MAX(x->segment_bytes / es, (size_t)1);
    xchg e = {.s_off = s_off, .s_len = s_len, .r_off = r_off, .r_len = r_len};
    e.p = cl_pass_init(x, op, CHUNKS_ONE, op->count, es, 1);
    e.p.ops = reduce ? &reduce_ops : &copy_ops;
    e.p.seg_elems = seg;
    /* Both ends count the longer range's segments: empty units still check headers. */
    size_t longer = CL_MAX(to >= 0 ? s_len : 0, from >= 0 ? r_len : 0);
    e.p.units = e.p.segs_per_chunk = CL_MAX((longer + seg - 1) / seg, (size_t)1);
    e.p.lag = e.p.units; /* the sends wait for nothing */
    e.p.to = to;
    e.p.from = from;
    e.p.src = src;
    e.p.acc = buf;
    e.p.slot_bytes = reduce ? seg * es : 0;
    return cl_pass_run(&e.p);
}

int cl_exchange(const cl_algo_ctx *x, const cl_op *op, void *buf, int to, int from,
                size_t s_off, size_t s_len, size_t r_off, size_t r_len, int reduce)
{
    return run(x, op, buf, buf, to, from, s_off, s_len, r_off, r_len, reduce);
}

int cl_swap(const cl_algo_ctx *x, const cl_op *op, const void *src, size_t s_len, void *dst,
            size_t r_len, int peer)
{
    return run(x, op, src, dst, peer, peer, 0, s_len, 0, r_len, 0);
}

int cl_pairs_crossing(const cl_algo_ctx *x, int p, int d, const int *pos)
{
    int most = 0, run = 0, host = -1;
    for (int i = 0; i < p; i++) {
        int h = x->host_at[pos ? pos[i] : i];
        if (h != host)
            host = h, run = 0;
        run += h != x->host_at[pos ? pos[i ^ d] : i ^ d];
        most = run > most ? run : most;
    }
    return most;
}
