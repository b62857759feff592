/* All-reduce on a pipelined double binary tree (NCCL's): the vector's two halves go up
 * and then down two binary trees at once, in segments. The first tree is rank 0's
 * in-order tree (a rank's lowest set bit gives its height); the second is the first
 * mirrored (n even, and 3) or shifted by one (other odd n), so most ranks that are inner
 * nodes in one tree are leaves in the other, and every rank sends and receives about S
 * each way in a number of steps that grows with the depth (log2 n), not the ring's
 * 2(n-1). No link carries both trees in one direction (checked for every n up to 2048;
 * 3 shifted would share one), so the trees run as two pipelines at once. Upwards each node
 * adds its children's segments to its own (in child order: the result does not depend on timing)
 * and passes the sum to its parent; each root then holds its half's result, which comes back down
 * the same edges. Every rank ends with the roots' bytes: bit-identical everywhere. */
#include "algo/algo.h"

#include "base/util.h"
#include "kernels/reduce.h"

#include <stdlib.h>
#include <string.h>

/* One rank's place in one tree: -1 where there is none. */
typedef struct {
    int parent, child[2];
} node;

/* In rank 0's in-order tree over n ranks: v's lowest set bit is its height; its parent
 * is v with that bit moved up one place (or cleared, past the end), its children v -+
 * half that bit (the right one lower while past the end). Rank 0 has one child, the
 * largest power of two below n. */
static node in_order(int n, int v)
{
    node t = {-1, {-1, -1}};
    int bit = 1;
    while (bit < n && !(bit & v))
        bit <<= 1;
    if (!v) {
        t.child[1] = bit >> 1;
        return t;
    }
    t.parent = (v ^ bit) | (bit << 1);
    t.parent = t.parent < n ? t.parent : v ^ bit;
    int low = bit >> 1;
    if (low)
        t.child[0] = v - low;
    while (low && v + low >= n)
        low >>= 1;
    t.child[1] = low ? v + low : -1;
    return t;
}

static int unmap(int n, int v, int mirror)
{
    return v < 0 ? -1 : mirror ? n - 1 - v : (v + 1) % n;
}

/* This rank's place in tree t (0 or 1). */
static node tree_node(int n, int r, int t)
{
    if (t == 0)
        return in_order(n, r);
    int mirror = n % 2 == 0 || n == 3;
    node m = in_order(n, mirror ? n - 1 - r : (r + n - 1) % n);
    return (node){unmap(n, m.parent, mirror),
                  {unmap(n, m.child[0], mirror), unmap(n, m.child[1], mirror)}};
}

static int depth(int n, int r, int t)
{
    int d = 0;
    for (node v = tree_node(n, r, t); v.parent >= 0; v = tree_node(n, v.parent, t))
        d++;
    return d;
}

/* A unit of the schedule: its peer, its elements, and (a send) how many receives must
 * have completed before it goes. */
typedef struct {
    int peer;
    size_t off, len, needs;
} unit;

typedef struct {
    unit *send, *recv;
} schedule;

static const unit *unit_of(const pass *p, size_t u, int recv)
{
    const schedule *s = p->plan;
    return recv ? &s->recv[u] : &s->send[u];
}

static int u_peer(const pass *p, size_t u, int recv)
{
    return unit_of(p, u, recv)->peer;
}

static size_t u_needs(const pass *p, size_t u)
{
    return unit_of(p, u, 0)->needs;
}

static const void *u_send(pass *p, size_t u, void *slot, size_t *bytes)
{
    (void)slot;
    const unit *it = unit_of(p, u, 0);
    *bytes = it->len * p->esize;
    return p->acc + it->off * p->esize;
}

/* Upwards a child's segment is staged and added; downwards it lands in place. */
static void *u_recv(pass *p, size_t u, void *slot, size_t *bytes)
{
    const unit *it = unit_of(p, u, 1);
    *bytes = it->len * p->esize;
    return p->slot_bytes ? slot : p->acc + it->off * p->esize;
}

/* Added as it completes, in unit order (child 0, then child 1): not as the bytes come,
 * so the sum's order, and its rounding, never depends on timing. */
static void u_arrived(pass *p, size_t u, void *buf)
{
    const unit *it = unit_of(p, u, 1);
    char *acc = p->acc + it->off * p->esize;
    cl_reduce(acc, acc, buf, it->len, p->op->dtype, p->op->op);
}

static const pass_ops up_ops = {
    .send = u_send, .recv = u_recv, .arrived = u_arrived, .peer = u_peer, .needs = u_needs};
static const pass_ops down_ops = {.send = u_send, .recv = u_recv, .peer = u_peer, .needs = u_needs};

/* The halves: tree t's elements from *off. */
static size_t half(size_t count, int t, size_t *off)
{
    *off = t ? count / 2 : 0;
    return t ? count - count / 2 : count / 2;
}

/* Lays out tree t's units in one direction, segment by segment: upwards each child's
 * segment then the sum to the parent, downwards the parent's segment then one to each
 * child. Returns the sends. */
static size_t lay_out(const pass *p, int t, schedule *s, int down, size_t *recvs)
{
    node me = tree_node(p->x->size, p->x->rank, t);
    size_t off, len = half(p->op->count, t, &off), seg = p->seg_elems, sends = 0;
    size_t segs = len ? (len + seg - 1) / seg : 1; /* an empty half still checks */
    int from[2] = {down ? me.parent : me.child[0], down ? -1 : me.child[1]};
    int to[2] = {down ? me.child[0] : me.parent, down ? me.child[1] : -1};
    *recvs = 0;
    for (size_t i = 0; i < segs; i++) {
        size_t at = off + i * seg, n = CL_MIN(seg, len - CL_MIN(len, i * seg));
        for (int c = 0; c < 2; c++)
            if (from[c] >= 0)
                s->recv[(*recvs)++] = (unit){from[c], at, n, 0};
        for (int c = 0; c < 2; c++)
            if (to[c] >= 0)
                s->send[sends++] = (unit){to[c], at, n, *recvs};
    }
    return sends;
}

/* Segments of the pipeline segment's size, not a ring's chunk. */
static size_t seg_elems(const cl_algo_ctx *x, const cl_op *op)
{
    return CL_MAX((size_t)1, x->segment_bytes / cl_dtype_size(op->dtype));
}

/* One direction, both trees at once, each its own pipeline: in one, a leaf's send up
 * one tree would wait behind its receives in the other (the pass completes receives in
 * order), and two ranks would take turns instead of sending at once. */
static int run_pass(const cl_algo_ctx *x, const cl_op *op, int down, schedule s[2])
{
    pass p[2];
    for (int t = 0; t < 2; t++) {
        p[t] = cl_pass_init(x, op, CHUNKS_ONE, op->count, cl_dtype_size(op->dtype), 1);
        p[t].seg_elems = seg_elems(x, op);
        p[t].ops = down ? &down_ops : &up_ops;
        p[t].acc = op->rbuf;
        p[t].plan = &s[t];
        p[t].sends = lay_out(&p[t], t, &s[t], down, &p[t].recvs);
        p[t].slot_bytes = down ? 0 : CL_MIN(p[t].seg_elems, op->count) * p[t].esize;
    }
    return cl_pass_run_all(p, 2);
}

/* A root divides its half of an average once, before it goes down. */
static void divide_roots(const cl_algo_ctx *x, const cl_op *op)
{
    for (int k = 0; k < 2 && op->op == COLL_AVG; k++) {
        size_t off, len = half(op->count, k, &off);
        if (tree_node(x->size, x->rank, k).parent < 0 && len)
            cl_divide((char *)op->rbuf + off * cl_dtype_size(op->dtype), len, op->dtype, x->size);
    }
}

/* One schedule per tree serves both directions: per segment of a half, at most two
 * units each way. */
static int run(const cl_algo_ctx *x, cl_op *op)
{
    size_t most = 2 * (op->count / 2 / seg_elems(x, op) + 2);
    schedule s[2];
    int rc = COLL_OK;
    for (int t = 0; t < 2; t++) {
        s[t] = (schedule){malloc(most * sizeof(unit)), malloc(most * sizeof(unit))};
        rc = s[t].send && s[t].recv ? rc : COLL_ENOMEM;
    }
    if (rc == COLL_OK && op->sbuf != op->rbuf && op->count)
        memcpy(op->rbuf, op->sbuf, op->count * cl_dtype_size(op->dtype));
    if (rc == COLL_OK && (rc = run_pass(x, op, 0, s)) == COLL_OK) {
        divide_roots(x, op);
        rc = run_pass(x, op, 1, s);
    }
    for (int t = 0; t < 2; t++) {
        free(s[t].send);
        free(s[t].recv);
    }
    return rc;
}

static int fits(const cl_algo_ctx *x, const cl_op *op)
{
    return x->size > 1 && op->codec == COLL_CODEC_NONE;
}

/* Every rank's height in tree t (a leaf's 0, a node's one above its highest child). */
static void heights(int n, int t, int *h)
{
    memset(h, 0, (size_t)n * sizeof(int));
    for (int v = 0; v < n; v++)
        for (int u = v, p; (p = tree_node(n, u, t).parent) >= 0 && h[p] < h[u] + 1; u = p)
            h[p] = h[u] + 1;
}

enum { LEVELS = 40 }; /* more than any height (log2 n + 2) */

/* Where crossing() counts the segments through host h's link at a level, out or in. */
static size_t slot(int h, int level, int in)
{
    return ((size_t)h * LEVELS + (size_t)level) * 2 + (size_t)in;
}

/* Across hosts (positions in host order), a pipeline of m segments a half: an edge whose
 * ends are on two hosts carries each segment of its tree's half up at the level of the
 * child's height (out of the child's host, into the parent's), then down the other way.
 * The first segment takes, level after level, that level's busiest host link; each later
 * one the busiest host link over every level (the pipeline full); the way down as long
 * as the way up. Returns that time in bytes at the host link's rate. */
static double crossing(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size, *h = malloc((size_t)n * sizeof(int));
    double *load = calloc((size_t)x->hosts * LEVELS * 2, sizeof(double)), first = 0, busy = 0;
    size_t es = cl_dtype_size(op->dtype), off, len = half(op->count, 1, &off);
    if (!h || !load) { /* no memory: every rank of the fullest host sends its vector, a bound */
        free(h), free(load);
        return (double)x->host_ranks * (double)(op->count * es) * 2;
    }
    for (int k = 0; k < 2; k++) {
        heights(n, k, h);
        for (int v = 0; v < n; v++) {
            int p = tree_node(n, v, k).parent, l = CL_MIN(h[v], LEVELS - 1);
            if (p < 0 || x->host_at[v] == x->host_at[p])
                continue;
            load[slot(x->host_at[v], l, 0)]++; /* out of the child's host */
            load[slot(x->host_at[p], l, 1)]++; /* into the parent's */
        }
    }
    for (int l = 0; l < LEVELS; l++) {
        double most = 0;
        for (int i = 0; i < 2 * x->hosts; i++)
            most = CL_MAX(most, load[slot(i / 2, l, i % 2)]);
        first += most;
    }
    for (int i = 0; i < 2 * x->hosts; i++) {
        double all = 0;
        for (int l = 0; l < LEVELS; l++)
            all += load[slot(i / 2, l, i % 2)];
        busy = CL_MAX(busy, all);
    }
    free(h);
    free(load);
    size_t m = len ? (len + seg_elems(x, op) - 1) / seg_elems(x, op) : 1;
    return 2.0 * (first + (double)(m - 1) * busy) * (double)(len * es) / (double)m;
}

/* Steps: the critical path, two messages a level each way (a node takes its second
 * child's segment after its first's, and sends to its second child after its first),
 * less the leaves': 4 x depth - 2, which is what 5 and 6 ranks measured here (38 and
 * 43 us for 8 bytes, against recursive halving's 19 and 31). Bytes: what this rank sends
 * (a half to each parent, the halves it forwards to its children); its additions are
 * serial work, and so is the pipeline's fill (a segment climbs d - 1 levels before the
 * root's starts, and comes back down as many). Across hosts every step is priced as
 * crossing (an upper bound), the bytes as the edges that cross carry them (crossing). */
static cl_cost cost(const cl_algo_ctx *x, const cl_op *op)
{
    int n = x->size, d = 0;
    size_t es = cl_dtype_size(op->dtype), bytes = 0, adds = 0;
    for (int k = 0; k < 2; k++) {
        size_t off, len = half(op->count, k, &off) * es;
        node t = tree_node(n, x->rank, k);
        int kids = (t.child[0] >= 0) + (t.child[1] >= 0);
        bytes += (t.parent >= 0) * len + (size_t)kids * len;
        adds += (size_t)kids * len;
        for (int r = 0; r < n; r++)
            d = CL_MAX(d, depth(n, r, k));
    }
    size_t off, seg = CL_MIN(x->segment_bytes, half(op->count, 1, &off) * es);
    double fill = 2.0 * (d > 1 ? d - 1 : 0) * (double)seg;
    cl_cost c = {.steps = 4.0 * d - 2, .bytes = bytes, .serial = (double)adds + fill};
    if (x->hosts > 1) /* in rank order (no host_at): what the fullest host sends, a bound */
        c.xsteps = c.steps,
        c.xbytes = x->host_at ? crossing(x, op) : (double)x->host_ranks * (double)bytes + fill;
    return c;
}

const cl_algo cl_algo_tree = {
    .name = "tree",
    .serves = CL_SERVES(CL_ALLREDUCE),
    .fits = fits,
    .cost = cost,
    .run = run,
};
