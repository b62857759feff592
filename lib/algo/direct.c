/* Direct exchanges: every block goes straight from the rank that has it to the rank that
 * wants it, one message per pair, in pairwise order (step k: send to r+k+1, receive from
 * r-k-1, so each link carries one message per step and no rank is everyone's target at
 * once). All-to-all(v), all-gather-v and reduce-scatter-v move (n-1) blocks each way per
 * rank, which for even blocks is what the ring moves; gather and scatter move only the
 * root's n-1 blocks. A block moves whole (the transport streams it, and every link is
 * busy at once), but one that is reduced travels in segments: its staging is a segment,
 * not a block, and the reduction overlaps the transfer. (Segmenting every block made
 * tcp all-to-all on 4 ranks 0.45-0.8x as fast: one peer at a time.) Reductions take the
 * contributions in step order, so the result does not depend on timing. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t prefix(const size_t *counts, int upto)
{
    size_t sum = 0;
    for (int i = 0; i < upto; i++)
        sum += counts[i];
    return sum;
}

/* Chunk c of `count` elements split n ways (reduce's ring chunks). */
static size_t chunk(size_t count, int n, int c, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, k = (size_t)c;
    *len = base + (k < rem);
    return k * base + (k < rem ? k : rem);
}

/* The block this rank sends to `peer` (recv = 0) or receives from it: its offset in
 * elements from the buffer's start (SIZE_MAX: a staging slot) and its elements in *n. */
static size_t extent(const pass *p, int peer, int recv, size_t *n)
{
    const cl_op *o = p->op;
    int me = p->x->rank;
    switch (o->kind) {
    case CL_ALLTOALL: *n = o->count; return (size_t)peer * o->count;
    case CL_ALLTOALLV:
        *n = recv ? o->rcounts[peer] : o->scounts[peer];
        return recv ? o->rdispls[peer] : o->sdispls[peer];
    case CL_ALLGATHERV: *n = o->rcounts[recv ? peer : me]; return o->rdispls[recv ? peer : me];
    case CL_REDUCE_SCATTERV:
        *n = o->rcounts[recv ? me : peer];
        return recv ? SIZE_MAX : prefix(o->rcounts, peer);
    case CL_GATHER: *n = o->count; return recv ? (size_t)peer * o->count : 0;
    case CL_SCATTER: *n = o->count; return recv ? 0 : (size_t)peer * o->count;
    default: return chunk(o->count, p->x->size, recv ? peer : me, n); /* reduce's chunks */
    }
}

/* Where that block is: src is what this rank sends from, acc where it receives into
 * (all-gather-v and reduce send from acc too); NULL: a staging slot. */
static char *block(const pass *p, int peer, int recv, size_t *n)
{
    size_t off = extent(p, peer, recv, n);
    int from_acc = recv || p->op->kind == CL_ALLGATHERV || p->op->kind == CL_REDUCE;
    if (off == SIZE_MAX)
        return NULL;
    return (from_acc ? p->acc : (char *)p->src) + off * p->esize;
}

/* The uneven forms' headers carry, as their count, what the sender expects back from
 * the receiver: each side of a pair then checks both directions' counts, so a
 * disagreement is COLL_EMISMATCH on both ranks, not only on the one that receives. */
static uint64_t wire_count(const pass *p, size_t u, int recv)
{
    int k = p->op->kind;
    if (k != CL_ALLTOALLV && k != CL_ALLGATHERV && k != CL_REDUCE_SCATTERV)
        return p->op->count;
    size_t n;
    extent(p, p->ops->peer(p, u, recv), !recv, &n);
    return n;
}

static int fans_in(const cl_op *o)
{
    return o->kind == CL_GATHER || o->kind == CL_REDUCE;
}

/* Where each step's units begin, per direction, ending with the total: a block of k
 * elements is ceil(k / seg_elems) units, one when empty (its header is still checked).
 * NULL: one unit a step (whole blocks, no table to build on the data path). */
typedef struct {
    size_t steps[2];
    size_t *first[2];
} plan;

/* The peer of step k. */
static int peer_at(const pass *p, size_t k, int recv)
{
    int n = p->x->size, r = p->x->rank;
    if ((fans_in(p->op) && !recv) || (p->op->kind == CL_SCATTER && recv))
        return p->op->root;
    return recv ? (r + n - (int)k - 1) % n : (r + (int)k + 1) % n;
}

/* The step unit u belongs to; its segment in the step's block in *seg. */
static size_t step_of(const pass *p, size_t u, int recv, size_t *seg)
{
    const plan *pl = p->plan;
    const size_t *first = pl->first[recv];
    size_t lo = 0, hi = pl->steps[recv]; /* first[lo] <= u < first[hi] */
    if (!first) {
        *seg = 0;
        return u;
    }
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        *(first[mid] <= u ? &lo : &hi) = mid;
    }
    *seg = u - first[lo];
    return lo;
}

static int route(const pass *p, size_t u, int recv)
{
    size_t seg;
    return peer_at(p, step_of(p, u, recv, &seg), recv);
}

/* Unit u's place in its block: its first element (returned) and its length in *len;
 * the block's own place in *at (NULL: a staging slot). */
static size_t unit_at(const pass *p, size_t u, int recv, char **at, size_t *len)
{
    size_t seg, n, k = step_of(p, u, recv, &seg), off = seg * p->seg_elems;
    *at = block(p, peer_at(p, k, recv), recv, &n);
    *len = CL_MIN(p->seg_elems, n - off);
    return off;
}

static const void *d_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    char *at;
    size_t len, off = unit_at(p, u, 0, &at, &len);
    *bytes = len * p->esize;
    return at + off * p->esize;
}

static void *d_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    char *at;
    size_t len, off = unit_at(p, u, 1, &at, &len);
    *bytes = len * p->esize;
    return at ? at + off * p->esize : slot;
}

/* Reduce-scatter-v: a segment of a contribution to this rank's block arrived in its
 * slot. */
static void d_reduce(pass *p, size_t u, void *buf)
{
    char *at;
    size_t len, off = unit_at(p, u, 1, &at, &len);
    char *acc = p->acc + off * p->esize;
    cl_reduce(acc, acc, buf, len, p->op->dtype, p->op->op);
}

static const pass_ops plain = {.send = d_send, .recv = d_recv, .peer = route, .count = wire_count};
static const pass_ops reducing = {
    .send = d_send, .recv = d_recv, .arrived = d_reduce, .peer = route, .count = wire_count};

/* Lays out `steps` blocks of one direction in units (first NULL: one a step); returns
 * the total. */
static size_t lay_out(pass *p, plan *pl, int recv, size_t steps, size_t *first)
{
    size_t n, units = 0;
    pl->steps[recv] = steps;
    pl->first[recv] = first;
    if (!first)
        return steps;
    for (size_t k = 0; k < steps; k++) {
        first[k] = units;
        block(p, peer_at(p, k, recv), recv, &n);
        units += n ? 1 + (n - 1) / p->seg_elems : 1;
    }
    first[steps] = units;
    return units;
}

enum { PIECE_BYTES = 256 << 10 };

/* This rank's own block, which no message carries: moved from where the caller put it
 * to where the result wants it, a piece at a time while the exchange moves the others
 * (pass.meanwhile; all at once where the two overlap: the in-place layouts), except
 * all-gather-v's, which its sends read from where it goes. */
static int own_block(pass *p, size_t *at)
{
    const cl_op *op = p->op;
    int me = p->x->rank;
    if ((op->kind == CL_GATHER || op->kind == CL_SCATTER) && me != op->root)
        return 0; /* its one block travels */
    size_t n, m;
    const char *from = op->kind == CL_SCATTER      ? p->src + (size_t)me * op->count * p->esize
                       : op->kind == CL_ALLGATHERV ? p->src
                                                   : block(p, me, 0, &n);
    char *to = block(p, me, 1, &m);
    size_t bytes = m * p->esize, piece = bytes - *at;
    if (from == to || !piece)
        return 0;
    if (from + bytes <= to || to + bytes <= from)
        piece = CL_MIN(piece, (size_t)PIECE_BYTES);
    memmove(to + *at, from + *at, piece);
    *at += piece;
    return *at < bytes;
}

/* The routed pass: who sends and receives how many blocks, in how many units. */
static int exchange(const cl_algo_ctx *x, const cl_op *op, const void *src, void *acc, int own)
{
    int n = x->size, root = x->rank == op->root;
    pass p = cl_pass_init(x, op, CHUNKS_DIRECT, 0, cl_dtype_size(op->dtype), 1);
    p.ops = op->kind == CL_REDUCE_SCATTERV ? &reducing : &plain;
    p.src = src;
    p.acc = acc;
    size_t done = 0;
    if (own && op->kind == CL_ALLGATHERV)
        while (own_block(&p, &done))
            ;
    else if (own)
        p.meanwhile = own_block;
    size_t sends = (size_t)(n - 1), recvs = (size_t)(n - 1);
    if (fans_in(op))
        sends = !root, recvs = root ? (size_t)(n - 1) : 0;
    if (op->kind == CL_SCATTER)
        sends = root ? (size_t)(n - 1) : 0, recvs = !root;
    size_t *first = NULL; /* whole blocks, but a reduced one in segments */
    if (op->kind == CL_REDUCE_SCATTERV) {
        if (!(first = malloc((sends + recvs + 2) * sizeof(*first))))
            return COLL_ENOMEM;
        p.slot_bytes = CL_MIN(p.seg_elems, op->rcounts[x->rank]) * p.esize;
    } else {
        p.seg_elems = SIZE_MAX;
    }
    plan pl;
    p.plan = &pl;
    p.sends = lay_out(&p, &pl, 0, sends, first);
    p.recvs = lay_out(&p, &pl, 1, recvs, first ? first + sends + 1 : NULL);
    p.lag = p.sends + 1; /* sends wait for nothing */
    int rc = cl_pass_run(&p);
    free(first);
    return rc;
}

/* Bytes the caller's sendbuf spans (what an in-place all-to-all must copy away first). */
static size_t send_extent(const cl_algo_ctx *x, const cl_op *op)
{
    size_t end = 0;
    for (int j = 0; j < x->size; j++) {
        size_t e =
            op->kind == CL_ALLTOALL ? (size_t)(j + 1) * op->count : op->sdispls[j] + op->scounts[j];
        end = e > end ? e : end;
    }
    return end * cl_dtype_size(op->dtype);
}

static int run_reduce_scatterv(const cl_algo_ctx *x, const cl_op *op)
{
    size_t es = cl_dtype_size(op->dtype), mine = op->rcounts[x->rank] * es;
    const char *own = (const char *)op->sbuf + prefix(op->rcounts, x->rank) * es;
    /* The result at the start of sendbuf would overwrite blocks still to be sent. */
    char *acc = op->rbuf == op->sbuf && x->rank ? cl_buf_grow(x->scratch, mine) : op->rbuf;
    if (!acc)
        return COLL_ENOMEM;
    if (acc != own && mine)
        memmove(acc, own, mine);
    int rc = exchange(x, op, op->sbuf, acc, 0);
    if (rc == COLL_OK && op->op == COLL_AVG)
        cl_divide(acc, op->rcounts[x->rank], op->dtype, x->size);
    if (rc == COLL_OK && acc != op->rbuf && mine)
        memcpy(op->rbuf, acc, mine);
    return rc;
}

/* Round k's partner of rank r among m (even) places, the circle method: every round pairs
 * every place once, and m - 1 rounds pair every two. A rank paired with place n (odd n)
 * rests that round. */
static int partner(int r, int m, int k)
{
    if (r == m - 1 || r == k)
        return r == k ? m - 1 : k;
    return ((2 * k - r) % (m - 1) + (m - 1)) % (m - 1);
}

/* Block q of an all-to-all(-v): where it goes out from and where q's comes back to. */
static void block_q(const cl_op *op, int q, size_t *s_off, size_t *s_len, size_t *r_off,
                    size_t *r_len)
{
    if (op->kind == CL_ALLTOALL) {
        *s_off = *r_off = (size_t)q * op->count;
        *s_len = *r_len = op->count;
        return;
    }
    *s_off = op->sdispls[q], *s_len = op->scounts[q];
    *r_off = op->rdispls[q], *r_len = op->rcounts[q];
}

/* The scratch a pairwise in-place all-to-all(-v) needs, in bytes: a window, or the largest
 * block if smaller, when every block comes back where it went out from, as long (MPI's
 * layout, *sym = 1); else a copy of the send side. */
static size_t swap_scratch(const cl_algo_ctx *x, const cl_op *op, size_t window, int *sym)
{
    size_t largest = 0;
    *sym = 1;
    for (int q = 0; q < x->size; q++) {
        size_t so, sl, ro, rl;
        block_q(op, q, &so, &sl, &ro, &rl);
        *sym &= so == ro && sl == rl;
        largest = CL_MAX(largest, sl);
    }
    return *sym ? CL_MIN(window, largest) * cl_dtype_size(op->dtype) : send_extent(x, op);
}

/* In place, pair by pair: each pair of ranks trades its two blocks, a window at a time, in
 * the circle method's rounds of disjoint pairs. A symmetric layout goes through one
 * window of scratch (the window sent is copied out before the answer lands on it); any
 * other needs the send side copied first, as an answer may land on a block not yet sent.
 * Every rank keeps the same rounds and windows whatever its layout, so the pairs agree. */
static int alltoall_swapping(const cl_algo_ctx *x, const cl_op *op, size_t window)
{
    int n = x->size, m = n + (n & 1), sym, rc = COLL_OK;
    size_t es = cl_dtype_size(op->dtype), so, sl, ro, rl, bytes = swap_scratch(x, op, window, &sym);
    char *buf = op->rbuf, *tmp = cl_buf_grow(x->scratch, bytes);
    if (!tmp)
        return COLL_ENOMEM;
    if (!sym) { /* the send side, and this rank's own block into place */
        memcpy(tmp, op->sbuf, bytes);
        block_q(op, x->rank, &so, &sl, &ro, &rl);
        memcpy(buf + ro * es, tmp + so * es, sl * es);
    }
    for (int k = 0; k < m - 1 && rc == COLL_OK; k++) {
        int q = partner(x->rank, m, k);
        if (q >= n) /* resting */
            continue;
        block_q(op, q, &so, &sl, &ro, &rl);
        size_t most = CL_MAX(sl, rl), windows = most ? (most + window - 1) / window : 1;
        for (size_t w = 0; w < windows && rc == COLL_OK; w++) {
            size_t at = w * window, s = sl - CL_MIN(sl, at), r = rl - CL_MIN(rl, at);
            s = CL_MIN(s, window), r = CL_MIN(r, window);
            if (sym)
                memcpy(tmp, buf + (so + at) * es, s * es);
            rc = cl_swap(x, op, sym ? tmp : tmp + (so + at) * es, s, buf + (ro + at) * es, r, q);
        }
    }
    return rc;
}

static int run(const cl_algo_ctx *x, cl_op *op)
{
    if (op->kind == CL_REDUCE_SCATTERV)
        return run_reduce_scatterv(x, op);
    const char *src = op->sbuf;
    size_t window = cl_window_elems(x, op);
    /* The all-to-all-v's totals differ by rank: all of them swap, whatever their size. */
    if (op->sbuf == op->rbuf &&
        (op->kind == CL_ALLTOALLV || (op->kind == CL_ALLTOALL && op->count * x->size > window)))
        return alltoall_swapping(x, op, window);
    if (op->kind == CL_ALLTOALL && op->sbuf == op->rbuf) {
        size_t bytes = send_extent(x, op);
        char *copy = cl_buf_grow(x->scratch, bytes);
        if (!copy)
            return COLL_ENOMEM;
        memcpy(copy, op->sbuf, bytes);
        src = copy;
    }
    int rc = op->kind == CL_GATHER || op->kind == CL_SCATTER ? cl_root_check(x, op) : COLL_OK;
    return rc == COLL_OK ? exchange(x, op, src, op->rbuf, 1) : rc;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    (void)x, (void)op;
    return 1;
}

/* n-1 messages; bytes: the blocks this rank sends (even blocks of S/n for the v-forms'
 * estimate, where only the caller's arrays know). Gather and scatter: the n - 1 blocks on
 * the root's link, and the root check before them. */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t n = (size_t)x->size, es = cl_dtype_size(op->dtype);
    cl_cost k = {.steps = (double)(n - 1), .bytes = (n - 1) * op->count * es};
    if (op->kind == CL_GATHER || op->kind == CL_SCATTER)
        k.steps += 1;
    return k;
}

const cl_algo cl_algo_direct = {
    .name = "direct",
    .serves = CL_SERVES(CL_GATHER) | CL_SERVES(CL_SCATTER) | CL_SERVES(CL_ALLTOALL) |
              CL_SERVES(CL_ALLTOALLV) | CL_SERVES(CL_ALLGATHERV) | CL_SERVES(CL_REDUCE_SCATTERV),
    .fits = fits,
    .cost = cost,
    .run = run,
};

/* Reduce: a ring reduce-scatter leaves each rank's chunk reduced (every rank's input in
 * acc: the root's recvbuf, a scratch buffer elsewhere), then the chunks go straight to
 * the root. 2(n-1)/n x S per rank, as an all-reduce, but only the root receives the
 * second half. A window of the vector at a time, so the scratch off the root is a
 * window, not the message. */
static int reduce_window(const cl_algo_ctx *x, const cl_op *part)
{
    size_t bytes = part->count * cl_dtype_size(part->dtype);
    char *acc = x->rank == part->root ? part->rbuf : cl_buf_grow(x->scratch, bytes);
    if (!acc)
        return COLL_ENOMEM;
    int rc = cl_ring_reduce_scatter_into(x, part, part->count, part->sbuf, acc);
    return rc == COLL_OK ? exchange(x, part, NULL, acc, 0) : rc;
}

static int run_reduce(const cl_algo_ctx *x, cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    if (x->size > 1)
        return cl_in_windows(x, op, reduce_window);
    if (op->sbuf != op->rbuf && bytes)
        memcpy(op->rbuf, op->sbuf, bytes);
    return COLL_OK;
}

static cl_cost reduce_cost(const cl_algo_ctx *x, const cl_op *op)
{
    size_t n = (size_t)x->size, bytes = op->count * cl_dtype_size(op->dtype);
    return (cl_cost){.steps = (double)n,
                     .bytes = bytes - bytes / n + (x->rank != op->root ? bytes / n : 0)};
}

const cl_algo cl_algo_ring_gather = {
    .name = "ring-gather",
    .serves = CL_SERVES(CL_REDUCE),
    .fits = fits,
    .cost = reduce_cost,
    .run = run_reduce,
};
