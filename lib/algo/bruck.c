/* Bruck's all-to-all, for small blocks on many ranks: ceil(log2 n) messages per rank
 * instead of the pairwise exchange's n - 1. Each rank first rotates its blocks so that
 * place i holds the block for rank r + i; at the step of distance d it sends every place
 * whose index has bit d set, packed in one message, to rank r + d and takes the same
 * places from rank r - d; in the end place i holds what rank r - i sent to this rank.
 * A block crosses up to log2(n) hops and is packed and unpacked at each, so it pays in
 * bytes what it saves in messages: the cost model weighs the two. */
#include "algo/algo.h"

#include "kernels/reduce.h"

#include <string.h>

/* This step's distance, from its peers. */
static int distance(const pass *p)
{
    return (p->to - p->x->rank + p->x->size) % p->x->size;
}

/* Copies the places with bit d between the rotated blocks and a packed message. */
static size_t pack(pass *p, char *msg, int to_msg)
{
    int n = p->x->size, d = distance(p);
    size_t blk = p->op->count * p->esize, k = 0;
    for (int i = 1; i < n; i++) {
        if (!(i & d))
            continue;
        char *place = p->acc + (size_t)i * blk, *packed = msg + k++ * blk;
        if (blk)
            memcpy(to_msg ? packed : place, to_msg ? place : packed, blk);
    }
    return k * blk;
}

/* The step's outgoing places, packed before the pass starts: its receive overwrites
 * those very places, and may land before the send goes (a link still opening). */
typedef struct bpass {
    pass p; /* first: the ops get &b->p */
    char *out;
    size_t out_bytes;
} bpass;

static const void *b_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    const bpass *b = (const bpass *)p;
    *bytes = b->out_bytes;
    return b->out;
}

static void *b_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u;
    *bytes = ((const bpass *)p)->out_bytes; /* the same places come in as went out */
    return slot;
}

static void b_arrived(pass *p, size_t u, void *buf)
{
    (void)u;
    pack(p, buf, 0);
}

static const pass_ops bruck_ops = {.send = b_send, .recv = b_recv, .arrived = b_arrived};

static int run(const cl_algo_ctx *x, cl_op *op)
{
    int n = x->size, r = x->rank;
    size_t es = cl_dtype_size(op->dtype), blk = op->count * es, half = (size_t)(n / 2) * blk;
    char *rot = cl_buf_grow(x->scratch, (size_t)n * blk + half + 1);
    if (!rot)
        return COLL_ENOMEM;
    for (int i = 0; i < n && blk; i++) /* place i: the block for rank r + i */
        memcpy(rot + (size_t)i * blk, (const char *)op->sbuf + (size_t)((r + i) % n) * blk, blk);
    for (int d = 1; d < n; d <<= 1) {
        bpass b = {.p = cl_pass_init(x, op, CHUNKS_ONE, op->count, es, 1),
                   .out = rot + (size_t)n * blk};
        pass *p = &b.p;
        p->ops = &bruck_ops;
        p->units = p->segs_per_chunk = p->lag = 1; /* the send waits for nothing */
        p->from = (r + n - d) % n;
        p->to = (r + d) % n;
        p->acc = rot;
        p->slot_bytes = half; /* places with bit d among 1..n-1 */
        p->chunk_base = (size_t)(n / 2) * op->count, p->chunk_rem = 0; /* the unit's size */
        b.out_bytes = pack(p, b.out, 1);
        int rc = cl_pass_run(p);
        if (rc != COLL_OK)
            return rc;
    }
    for (int i = 0; i < n && blk; i++) /* place i came from rank r - i */
        memcpy((char *)op->rbuf + (size_t)((r + n - i) % n) * blk, rot + (size_t)i * blk, blk);
    return COLL_OK;
}

/* Its scratch holds the whole exchange: kept to what a small all-to-all needs. */
static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->size > 2 && op->count * cl_dtype_size(op->dtype) * (size_t)x->size <= (256u << 10);
}

/* ceil(log2 n) messages; every packed place is sent once per step it is in, and copied
 * in and out of the message around it (serial: between steps, not under a transfer). */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size;
    size_t blk = op->count * cl_dtype_size(op->dtype), places = 0, steps = 0;
    for (int d = 1; d < n; d <<= 1, steps++)
        for (int i = 1; i < n; i++)
            places += (i & d) != 0;
    return (cl_cost){.steps = (double)steps,
                     .bytes = places * blk,
                     .serial = 2.0 * (double)(places * blk) + 2.0 * (double)((size_t)n * blk)};
}

const cl_algo cl_algo_bruck = {
    .name = "bruck",
    .serves = CL_SERVES(CL_ALLTOALL),
    .fits = fits,
    .cost = cost,
    .run = run,
};
