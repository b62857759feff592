/* Binomial trees for small rooted collectives: reduce, gather, scatter and broadcast in
 * ceil(log2 n) steps instead of the ring's or the direct exchange's n - 1, because for a
 * few kilobytes the latency of a step, not the bytes, is the cost. The tree is rank 0's
 * whatever the root: rank v's children are v + m for the powers of two m below v's
 * lowest set bit, its parent v - lowbit(v), its subtree the ranks [v, v + min(lowbit(v),
 * n - v)). Another root costs one more step (rank 0 hands the result over, or the root
 * hands its data to rank 0), and buys the check: every edge is the same for every root,
 * and every header carries the root, so ranks that disagree on it meet on some edge and
 * fail there with COLL_EMISMATCH, where a tree drawn from each rank's own root would
 * leave some waiting for messages sent elsewhere. Gather and reduce fold subtrees
 * upwards (children in increasing m, each subtree taken whole), scatter and broadcast
 * hand them down (largest subtree first, as it has the longest way to go). A reduction
 * combines (the lower ranks' partial) op (the child's) in that order, so the result does
 * not depend on timing. Every edge is a one-unit pass, so a small one takes the
 * transport's fast path. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <string.h>

/* The largest message this takes on: past it the pipelined ring or the direct exchange
 * moves the bytes better, and the tree's scratch stays small. */
#define TREE_BYTES (256u * 1024u)

static int lowbit(int v)
{
    return v & -v;
}

/* Ranks in v's subtree (rank 0's: all n). */
static int span(int n, int v)
{
    return v ? CL_MIN(lowbit(v), n - v) : n;
}

static const void *t_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u, (void)slot;
    *bytes = p->chunk_base * p->esize;
    return p->acc;
}

static void *t_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)u;
    *bytes = p->chunk_base * p->esize;
    return p->slot_bytes ? slot : p->acc;
}

/* Bytes [off, off + n) of a child's partial, reduced into this subtree's. */
static void t_take(pass *p, size_t u, size_t off, const void *buf, size_t n)
{
    (void)u;
    char *acc = p->acc + off;
    cl_reduce(acc, acc, buf, n / p->esize, p->op->dtype, p->op->op);
}

static void t_arrived(pass *p, size_t u, void *buf)
{
    t_take(p, u, 0, buf, p->chunk_base * p->esize);
}

static const pass_ops plain = {.send = t_send, .recv = t_recv};
static const pass_ops folding = {
    .send = t_send, .recv = t_recv, .arrived = t_arrived, .take = t_take};

/* One edge: `elems` elements at buf go to rank `to`, or come from rank `from` into buf
 * (fold: reduced into it). */
static int edge(const cl_algo_ctx *x, const cl_op *op, int from, int to, void *buf, size_t elems,
                int fold)
{
    pass p = cl_pass_init(x, op, CHUNKS_ONE, elems, cl_dtype_size(op->dtype), 1);
    p.ops = fold ? &folding : &plain;
    p.units = p.segs_per_chunk = p.lag = 1;
    p.from = from, p.to = to;
    p.acc = buf;
    p.chunk_base = elems, p.chunk_rem = 0; /* the unit's size */
    p.slot_bytes = fold ? elems * p.esize : 0;
    return cl_pass_run(&p);
}

int cl_root_check(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size;
    return n == 1 ? COLL_OK : edge(x, op, (x->rank + n - 1) % n, (x->rank + 1) % n, NULL, 0, 0);
}

/* Elements of the subtree of v: `blocks` of count each, or the whole vector. */
static size_t elems(const cl_op *op, int n, int v, int blocks)
{
    return (blocks ? (size_t)span(n, v) : 1) * op->count;
}

/* Upwards: every child's subtree (its partial, or its blocks at their place in buf),
 * then this subtree to the parent. blocks 0: the whole vector at every rank. */
static int up(const cl_algo_ctx *x, const cl_op *op, char *buf, int blocks)
{
    int n = x->size, v = x->rank, rc = COLL_OK;
    size_t blk = blocks ? op->count * cl_dtype_size(op->dtype) : 0;
    for (int m = 1; rc == COLL_OK && m < span(n, v) && v + m < n; m <<= 1)
        rc = edge(x, op, v + m, -1, buf + (size_t)m * blk, elems(op, n, v + m, blocks), !blocks);
    if (rc == COLL_OK && v)
        rc = edge(x, op, -1, v - lowbit(v), buf, elems(op, n, v, blocks), 0);
    return rc;
}

/* Downwards: this subtree from the parent, then each child's, the largest first. */
static int down(const cl_algo_ctx *x, const cl_op *op, char *buf, int blocks)
{
    int n = x->size, v = x->rank, rc = COLL_OK, m = 1;
    size_t blk = blocks ? op->count * cl_dtype_size(op->dtype) : 0;
    if (v)
        rc = edge(x, op, v - lowbit(v), -1, buf, elems(op, n, v, blocks), 0);
    while (m << 1 < span(n, v) && v + (m << 1) < n)
        m <<= 1;
    for (; rc == COLL_OK && m >= 1 && m < span(n, v) && v + m < n; m >>= 1)
        rc = edge(x, op, -1, v + m, buf + (size_t)m * blk, elems(op, n, v + m, blocks), 0);
    return rc;
}

/* Another root than rank 0: rank 0 hands the root what it holds for it (up = 1), or the
 * root hands rank 0 its data (up = 0); `elems` at buf on either side. */
static int hop(const cl_algo_ctx *x, const cl_op *op, void *buf, size_t elems, int up)
{
    int me = x->rank, peer = me ? 0 : op->root, sends = (me == 0) == up;
    if (!op->root || (me && me != op->root))
        return COLL_OK;
    return edge(x, op, sends ? -1 : peer, sends ? peer : -1, buf, elems, 0);
}

/* Scratch for the blocks of this rank's subtree in rank order (rank 0's: all n). */
static char *subtree_scratch(const cl_algo_ctx *x, const cl_op *op)
{
    size_t blk = op->count * cl_dtype_size(op->dtype);
    int n = x->size;
    return cl_buf_grow(x->scratch, (size_t)(x->rank ? span(n, x->rank) : n) * blk + 1);
}

static int gather(const cl_algo_ctx *x, const cl_op *op)
{
    size_t all = (size_t)x->size * op->count, blk = op->count * cl_dtype_size(op->dtype);
    /* The root's own buffer has room for its subtree at its place. */
    char *sub =
        x->rank == op->root ? (char *)op->rbuf + (size_t)x->rank * blk : subtree_scratch(x, op);
    if (!sub)
        return COLL_ENOMEM;
    if (sub != op->sbuf && blk)
        memmove(sub, op->sbuf, blk);
    int rc = up(x, op, sub, 1);
    return rc == COLL_OK ? hop(x, op, x->rank ? op->rbuf : sub, all, 1) : rc;
}

static int scatter(const cl_algo_ctx *x, const cl_op *op)
{
    size_t all = (size_t)x->size * op->count, blk = op->count * cl_dtype_size(op->dtype);
    char *sub = x->rank == 0 && op->root == 0 ? (char *)op->sbuf : subtree_scratch(x, op);
    if (!sub)
        return COLL_ENOMEM;
    int rc = hop(x, op, x->rank ? (void *)op->sbuf : sub, all, 0);
    if (rc == COLL_OK)
        rc = down(x, op, sub, 1);
    if (rc == COLL_OK && sub != op->rbuf && blk)
        memmove(op->rbuf, sub, blk);
    return rc;
}

static int reduce(const cl_algo_ctx *x, const cl_op *op)
{
    int root = x->rank == op->root;
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    char *acc = root ? op->rbuf : cl_buf_grow(x->scratch, bytes + 1);
    if (!acc)
        return COLL_ENOMEM;
    if (acc != op->sbuf && bytes)
        memcpy(acc, op->sbuf, bytes);
    int rc = up(x, op, acc, 0);
    if (rc == COLL_OK)
        rc = hop(x, op, x->rank ? op->rbuf : acc, op->count, 1);
    if (rc == COLL_OK && root && op->op == COLL_AVG)
        cl_divide(op->rbuf, op->count, op->dtype, x->size);
    return rc;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    int rc;
    switch (op->kind) {
    case CL_GATHER: return gather(x, op);
    case CL_SCATTER: return scatter(x, op);
    case CL_REDUCE: return reduce(x, op);
    default: /* broadcast */
        rc = hop(x, op, op->rbuf, op->count, 0);
        return rc == COLL_OK ? down(x, op, op->rbuf, 0) : rc;
    }
}

/* The largest message a tree edge carries. */
static size_t largest(const cl_algo_ctx *x, const cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    return op->kind == CL_GATHER || op->kind == CL_SCATTER ? bytes * (size_t)x->size : bytes;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->size > 1 && op->codec == COLL_CODEC_NONE && largest(x, op) <= TREE_BYTES;
}

/* ceil(log2 n) steps, and the hop another root takes as an average over roots (the
 * price may not depend on the root, or ranks that disagree on it would choose apart).
 * Gather and scatter: the root's link carries n - 1 blocks (and the hop n), and a block
 * crosses up to log2 n edges, n/2 log2(n) - (n - 1) blocks more than the direct exchange
 * moves (serial: store and forward). Reduce and broadcast: rank 0 takes or sends the
 * whole vector once a step, and a reduction waits for each step's arrival. Across hosts
 * every step and the root's bytes are priced as crossing (an upper bound). */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size, steps = 0;
    for (int m = 1; m < n; m <<= 1)
        steps++;
    double hop = (double)(n - 1) / n, bytes = (double)(op->count * cl_dtype_size(op->dtype));
    cl_cost k = {.steps = steps + hop, .bytes = (size_t)((steps + hop) * bytes)};
    if (op->kind == CL_REDUCE)
        k.serial = steps * bytes;
    if (op->kind == CL_GATHER || op->kind == CL_SCATTER) {
        k.bytes = (size_t)((n - 1 + hop * n) * bytes);
        k.serial = ((double)n / 2 * steps - (n - 1)) * bytes;
    }
    if (x->hosts > 1) /* in rank order any edge may cross, the root's most of all */
        k.xsteps = k.steps, k.xbytes = (double)k.bytes;
    return k;
}

const cl_algo cl_algo_binomial = {
    .name = "binomial",
    .serves = CL_SERVES(CL_REDUCE) | CL_SERVES(CL_GATHER) | CL_SERVES(CL_SCATTER) |
              CL_SERVES(CL_BROADCAST),
    .fits = fits,
    .cost = cost,
    .run = run,
};
