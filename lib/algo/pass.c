/* The segmented ring pipeline every collective runs on. A bounded window of receives and
 * sends is in flight, so the reduction of one segment overlaps the transfer of the next
 * and memory stays bounded (window x segment of staging for reduce-scatter). Every
 * received header is checked against what this rank expects: a disagreement between
 * ranks is COLL_EMISMATCH with both sides named, never garbage or a hang. */
#include "algo/algo.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 4 };

typedef struct flight flight;

/* A receive whose payload the transport hands over where it lies (cl_tr_sink). */
typedef struct {
    flight *f;
    size_t u;
    int taken; /* the payload went through take(): nothing left to do on arrival */
} sink_at;

struct flight {
    pass *p;
    cl_tr_req *rq[WINDOW], *sq[WINDOW];
    cl_msg_hdr rh[WINDOW];
    char *rslots, *sslots; /* WINDOW x slot_bytes each, when the pass stages */
    void *rbuf[WINDOW];
    size_t rbytes[WINDOW];
    size_t r_posted, r_done, s_posted, s_done;
    int linking, link_peer; /* a link (to or from link_peer) is not open yet */
    cl_tr_sink sink[WINDOW];
    sink_at sink_at[WINDOW];
    size_t busy_at; /* the pass's meanwhile work done so far */
    /* COLL_TRACE only: when each slot's transfer was posted, a send's bytes, and
     * whether this flight's steps are traced (not where flights run side by side). */
    uint64_t rt[WINDOW], st[WINDOW], sbytes[WINDOW];
    int steps;
};

size_t cl_unit_chunk(const pass *p, size_t u, int recv)
{
    long n = p->x->size, r = p->x->rank, step = (long)(u / p->segs_per_chunk);
    switch (p->order) {
    case CHUNKS_ONE: return 0;
    case CHUNKS_DIRECT: return (size_t)(recv ? r : (r + step + 1) % n);
    case CHUNKS_RS: return (size_t)((((r - step - 1 - recv) % n) + n) % n);
    default: return (size_t)((((r - step - recv) % n) + n) % n);
    }
}

int cl_unit_peer(const pass *p, size_t u, int recv)
{
    if (p->ops->peer)
        return p->ops->peer(p, u, recv);
    int n = p->x->size, r = p->x->rank, step = (int)(u / p->segs_per_chunk);
    if (p->order != CHUNKS_DIRECT)
        return recv ? p->from : p->to;
    return recv ? (r + n - step - 1) % n : (r + step + 1) % n;
}

size_t cl_unit_range(const pass *p, size_t u, int recv, size_t *off)
{
    size_t c = cl_unit_chunk(p, u, recv), k = u % p->segs_per_chunk;
    c = p->blocks ? (size_t)p->blocks[c] : c;
    size_t cstart =
        p->stride ? c * p->stride + p->first : c * p->chunk_base + CL_MIN(c, p->chunk_rem);
    size_t clen = p->chunk_base + (c < p->chunk_rem);
    if (p->chunks)
        cstart = p->chunks[c], clen = p->chunks[c + 1] - cstart;
    size_t lo = CL_MIN(k * p->seg_elems, clen), hi = CL_MIN(lo + p->seg_elems, clen);
    *off = cstart + lo;
    return hi - lo;
}

/* Segments of at most `seg` elements (whole seg_align groups, no larger than a chunk of
 * maxc: small messages stage little), enough for the largest chunk. */
static void cut(pass *p, size_t maxc, size_t seg, size_t seg_align)
{
    if (maxc && maxc < seg)
        seg = (maxc + seg_align - 1) / seg_align * seg_align;
    size_t segs = maxc ? (maxc + seg - 1) / seg : 1; /* one empty unit still checks headers */
    p->units = segs * (size_t)(p->x->size - 1);
    p->lag = p->segs_per_chunk = segs;
    p->seg_elems = seg;
}

pass cl_pass_init(const cl_algo_ctx *x, const cl_op *op, chunk_order order, size_t count,
                  size_t esize, size_t seg_align)
{
    int n = x->size;
    size_t seg = x->segment_bytes / esize / seg_align * seg_align;
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    pass p = {.x = x,
              .op = op,
              .order = order,
              .from = (x->rank + n - 1) % n,
              .to = (x->rank + 1) % n,
              .esize = esize,
              .chunk_base = base,
              .chunk_rem = rem};
    cut(&p, base + (rem != 0), seg ? seg : seg_align, seg_align);
    return p;
}

void cl_pass_chunks(pass *p, const size_t *chunks)
{
    size_t maxc = 0;
    for (int c = 0; c < p->x->size; c++)
        maxc = CL_MAX(maxc, chunks[c + 1] - chunks[c]);
    p->chunks = chunks;
    p->chunk_base = maxc, p->chunk_rem = 0; /* what a unit holds at most */
    cut(p, maxc, CL_MAX(p->x->segment_bytes / p->esize, (size_t)1), 1);
}

static cl_msg_hdr header_for(const pass *p, size_t u, int recv, size_t bytes)
{
    const cl_op *q = p->op;
    return (cl_msg_hdr){.magic = CL_MSG_MAGIC,
                        .coll = (uint8_t)q->kind,
                        .dtype = (uint8_t)q->dtype,
                        .op = (uint8_t)q->op,
                        .codec = (uint8_t)p->codec,
                        .flags = p->x->wire,
                        .len = (uint32_t)bytes,
                        .seq = q->seq,
                        .unit = p->ops->peer ? 0 : (uint32_t)u, /* routed: in order per link */
                        .tag = (uint32_t)q->root,
                        .count = p->ops->count ? p->ops->count(p, u, recv) : q->count};
}

static void *slot_at(char *base, size_t i, size_t bytes)
{
    return base ? base + i * bytes : NULL;
}

static int link_error(pass *p, int rc, int peer, const char *dir);

/* COLL_DEBUG=trace: every segment that leaves or arrives. */
static void trace_unit(const pass *p, size_t u, int recv, size_t bytes)
{
    if (cl_log_enabled(COLL_LOG_TRACE))
        cl_log(COLL_LOG_TRACE, "rank %d %s #%u: segment %zu, %zu bytes, %s rank %d",
               cl_rank_of(p->x, p->x->rank), cl_kind_name(p->op->kind), p->op->seq, u, bytes,
               recv ? "from" : "sent to", cl_rank_of(p->x, cl_unit_peer(p, u, recv)));
}

/* Bytes to or from unit u's peer, for the flight recorder (tally.h). */
static void count_peer(const pass *p, size_t u, int recv, uint64_t bytes)
{
    if (p->x->running && p->x->running->moved)
        cl_moved_add(p->x->running, cl_rank_of(p->x, cl_unit_peer(p, u, recv)), recv, bytes);
}

/* Traced: unit u's transfer (posted at `start`) to its peer's span, and the step it
 * ends, on the side that paces the steps: the receives, or the sends of a pass that
 * receives nothing. A routed pass's units are its peers', not steps. */
static void traced_unit(const pass *p, int steps, size_t u, int recv, uint64_t start,
                        uint64_t bytes)
{
    cl_spans *s = cl_traced(p->x->running);
    uint64_t now = cl_span_clock();
    size_t segs = p->segs_per_chunk ? p->segs_per_chunk : 1;
    int routed = p->ops->peer != NULL, step = routed ? 0 : (int)(u / segs);
    cl_span_transfer(s, recv, cl_rank_of(p->x, cl_unit_peer(p, u, recv)), step, start, now, bytes);
    if (steps && !routed && (recv || p->from < 0) && ((u + 1) % segs == 0 || u + 1 == p->units))
        cl_span_step(s, step, now);
}

/* Send unit u's bytes, header and link (*to NULL while it is not open). */
static int send_unit(flight *f, size_t u, const void **buf, cl_msg_hdr *h, cl_tr_conn **to)
{
    pass *p = f->p;
    size_t bytes = 0;
    *buf = p->ops->send(p, u, slot_at(f->sslots, u % WINDOW, p->slot_bytes), &bytes);
    *h = header_for(p, u, 0, bytes);
    int peer = cl_unit_peer(p, u, 0), rc = cl_link_get(p->x, 0, peer, to);
    return rc != COLL_OK && rc != COLL_INPROGRESS ? link_error(p, rc, peer, "send to") : rc;
}

/* Send unit u went (or is posted): counted and traced. */
static void sent(const pass *p, size_t u, const cl_msg_hdr *h)
{
    cl_tally(p->x->wire_tx, sizeof(*h) + h->len);
    count_peer(p, u, 0, sizeof(*h) + h->len);
    trace_unit(p, u, 0, h->len);
}

static int post_send(flight *f)
{
    size_t u = f->s_posted;
    const void *buf;
    cl_msg_hdr h;
    cl_tr_conn *to;
    int rc = send_unit(f, u, &buf, &h, &to);
    if (rc == COLL_OK)
        rc = f->p->x->tr->isend(to, &h, buf, &f->sq[u % WINDOW]);
    if (rc == COLL_OK) {
        f->s_posted++;
        sent(f->p, u, &h);
        if (cl_traced(f->p->x->running)) {
            f->st[u % WINDOW] = cl_span_clock();
            f->sbytes[u % WINDOW] = sizeof(h) + h.len;
        }
    }
    return rc;
}

/* Only a payload whose header is exactly what this rank expects goes to take(). */
static int sink_accept(void *arg, const cl_msg_hdr *h)
{
    sink_at *at = arg;
    pass *p = at->f->p;
    cl_msg_hdr want = header_for(p, at->u, 1, at->f->rbytes[at->u % WINDOW]);
    at->taken = cl_header_check(h, &want, h->len) == CL_WIRE_OK;
    return at->taken;
}

static void sink_take(void *arg, size_t off, const void *bytes, size_t n)
{
    sink_at *at = arg;
    at->f->p->ops->take(at->f->p, at->u, off, bytes, n);
}

static int post_recv(flight *f)
{
    pass *p = f->p;
    const cl_transport *tr = p->x->tr;
    size_t u = f->r_posted, bytes = 0, slot = u % WINDOW;
    cl_tr_conn *from;
    int peer = cl_unit_peer(p, u, 1), rc = cl_link_get(p->x, 1, peer, &from);
    if (rc != COLL_OK)
        return rc == COLL_INPROGRESS ? rc : link_error(p, rc, peer, "from");
    void *dst = p->ops->recv(p, u, slot_at(f->rslots, slot, p->slot_bytes), &bytes);
    f->rbuf[slot] = dst;
    f->rbytes[slot] = bytes;
    f->sink_at[slot] = (sink_at){f, u, 0};
    f->sink[slot] = (cl_tr_sink){sink_accept, sink_take, &f->sink_at[slot], p->esize};
    rc = p->ops->take && tr->irecv_sink
             ? tr->irecv_sink(from, &f->rh[slot], dst, bytes, &f->sink[slot], &f->rq[slot])
             : tr->irecv(from, &f->rh[slot], dst, bytes, &f->rq[slot]);
    if (rc == COLL_OK && cl_traced(p->x->running))
        f->rt[slot] = cl_span_clock();
    if (rc == COLL_OK)
        f->r_posted++;
    return rc;
}

static int mismatch(pass *p, size_t u, const cl_msg_hdr *got, const cl_msg_hdr *want)
{
    return cl_algo_fail(
        p->x, COLL_EMISMATCH,
        "rank %d %s #%u: peer %d sent %s #%u count %llu %s %s root %u segment %u "
        "(%u bytes)%s; this rank expects %s #%u count %llu %s %s root %u segment %u "
        "(%u bytes)",
        cl_rank_of(p->x, p->x->rank), cl_kind_name(want->coll), want->seq,
        cl_rank_of(p->x, cl_unit_peer(p, u, 1)), cl_kind_name(got->coll), got->seq,
        (unsigned long long)got->count, cl_dtype_name(got->dtype), cl_op_name(got->op), got->tag,
        got->unit, got->len,
        got->flags != want->flags ? " for another communicator on this link (a collective "
                                    "issued in another order: COLL_SPLIT_SHARE)"
                                  : "",
        cl_kind_name(want->coll), want->seq, (unsigned long long)want->count,
        cl_dtype_name(want->dtype), cl_op_name(want->op), want->tag, want->unit, want->len);
}

/* Receive unit u of `bytes` came with header *got and nbytes of payload: its header
 * checked (a farewell or a mismatch reported), then counted and traced. rc is the
 * transport's status: a message longer than expected is a mismatch too. */
static int received(pass *p, size_t u, int rc, const cl_msg_hdr *got, size_t bytes, size_t nbytes)
{
    cl_msg_hdr want = header_for(p, u, 1, bytes);
    if (rc != COLL_OK && rc != COLL_EMISMATCH)
        return link_error(p, rc, cl_unit_peer(p, u, 1), "from");
    cl_wire_verdict v = rc == COLL_OK ? cl_header_check(got, &want, nbytes) : CL_WIRE_MISMATCH;
    if (v == CL_WIRE_FAREWELL)
        return cl_peer_failed(p->x, got, cl_kind_name(p->op->kind), p->op->seq);
    if (v == CL_WIRE_MISMATCH)
        return mismatch(p, u, got, &want);
    cl_tally(p->x->wire_rx, sizeof(want) + nbytes);
    count_peer(p, u, 1, sizeof(want) + nbytes);
    trace_unit(p, u, 1, nbytes);
    return COLL_OK;
}

/* A received unit of the flight: checked, then reduced (reduce-scatter) or left in place. */
static int finish_recv(flight *f, int rc, size_t nbytes)
{
    pass *p = f->p;
    size_t u = f->r_done, slot = u % WINDOW;
    rc = received(p, u, rc, &f->rh[slot], f->rbytes[slot], nbytes);
    if (rc != COLL_OK)
        return rc;
    if (p->ops->arrived && !f->sink_at[slot].taken)
        p->ops->arrived(p, u, f->rbuf[slot]);
    if (cl_traced(p->x->running))
        traced_unit(p, f->steps, u, 1, f->rt[slot], sizeof(cl_msg_hdr) + nbytes);
    f->r_done++;
    return COLL_OK;
}

static int link_error(pass *p, int rc, int peer, const char *dir)
{
    const cl_algo_ctx *x = p->x;
    const char *kind = cl_kind_name(p->op->kind);
    int why =
        rc == COLL_EPEER && dir[0] == 's' ? cl_await_farewell(x, peer, kind, p->op->seq) : COLL_OK;
    if (why != COLL_OK)
        return why;
    const char *what =
        rc == COLL_EPEER ? "closed the connection or could not be reached" : coll_strerror(rc);
    if (rc == COLL_EPEER)
        cl_algo_blame(x, peer, rc);
    cl_tr_conn *link = cl_link_now(x, dir[0] == 's' ? 0 : 1, peer);
    return cl_algo_fail(x, rc, "rank %d %s #%u: %s peer %d (%s): %s", cl_rank_of(x, x->rank), kind,
                        p->op->seq, dir, cl_rank_of(x, peer),
                        link ? x->tr->peer_name(link) : "not connected", what);
}

/* A send to `peer` failed. A peer that fails says why in a farewell before it closes,
 * and that farewell may already sit in front of a receive this pass posted from it: a
 * second receive would queue behind ours and see only the closed link. So the pass's
 * own receives from the peer are read first (bounded, as cl_await_farewell). */
static int send_failed(flight *f, int rc, int peer)
{
    pass *p = f->p;
    const cl_algo_ctx *x = p->x;
    int64_t deadline = cl_now_ms() + CL_MIN(x->timeout_ms, 1000);
    while (rc == COLL_EPEER && f->r_done < f->r_posted && cl_unit_peer(p, f->r_done, 1) == peer &&
           cl_now_ms() < deadline) {
        uint64_t seen = cl_notifier_events(x->notifier);
        size_t slot = f->r_done % WINDOW, nbytes = 0;
        int done = 0, rrc = x->tr->test(f->rq[slot], &done, &nbytes);
        if (!done) {
            cl_notifier_wait(x->notifier, seen, deadline);
            continue;
        }
        f->rq[slot] = NULL;
        if ((rrc = finish_recv(f, rrc, nbytes)) != COLL_OK)
            return rrc;
    }
    return link_error(p, rc, peer, "send to");
}

/* Completes whatever finished, oldest first (a connection completes in order). */
static int reap(flight *f, int *progress)
{
    pass *p = f->p;
    int done, rc;
    size_t nbytes = 0;
    while (f->r_done < f->r_posted) {
        rc = p->x->tr->test(f->rq[f->r_done % WINDOW], &done, &nbytes);
        if (!done)
            break;
        f->rq[f->r_done % WINDOW] = NULL;
        *progress = 1;
        if ((rc = finish_recv(f, rc, nbytes)) != COLL_OK)
            return rc;
    }
    while (f->s_done < f->s_posted) {
        rc = p->x->tr->test(f->sq[f->s_done % WINDOW], &done, NULL);
        if (!done)
            break;
        f->sq[f->s_done % WINDOW] = NULL;
        if (cl_traced(p->x->running))
            traced_unit(p, f->steps, f->s_done, 0, f->st[f->s_done % WINDOW],
                        f->sbytes[f->s_done % WINDOW]);
        f->s_done++;
        *progress = 1;
        if (rc != COLL_OK)
            return send_failed(f, rc, cl_unit_peer(p, f->s_done - 1, 0));
    }
    return COLL_OK;
}

/* A link not open yet holds its transfers back until a later step, not the others. */
static int not_yet(flight *f, int rc, size_t u, int recv)
{
    if (rc != COLL_INPROGRESS)
        return 0;
    f->linking = 1;
    f->link_peer = cl_unit_peer(f->p, u, recv);
    return 1;
}

/* Sends first: a receive posted first tries to read at once, and on a socket that read
 * finds nothing yet (a wasted system call, ~1.3 us here) while the peer waits for our
 * bytes too. */
static int post_ready(flight *f)
{
    pass *p = f->p;
    int rc = COLL_OK;
    size_t nr = p->recvs, ns = p->sends;
    f->linking = 0;
    while (rc == COLL_OK && f->s_posted < ns && f->s_posted - f->s_done < WINDOW) {
        size_t need = p->ops->needs              ? p->ops->needs(p, f->s_posted)
                      : f->s_posted + 1 > p->lag ? f->s_posted + 1 - p->lag
                                                 : 0;
        if (nr && f->r_done < CL_MIN(need, nr))
            break;
        if (not_yet(f, rc = post_send(f), f->s_posted, 0)) {
            rc = COLL_OK;
            break;
        }
    }
    while (rc == COLL_OK && f->r_posted < nr && f->r_posted - f->r_done < WINDOW) {
        if (not_yet(f, rc = post_recv(f), f->r_posted, 1)) {
            rc = COLL_OK;
            break;
        }
    }
    return rc;
}

static int finished(const flight *f)
{
    const pass *p = f->p;
    return f->r_done == p->recvs && f->s_done == p->sends;
}

/* Waits for the requests still posted, so no transport touches this flight (its headers
 * and sinks) or the caller's buffers after return. Only a failed pass drains, and the
 * failure shut the transport down, which completes every pending request (transport.h):
 * the wait is short and needs no deadline of its own. */
static void drain(flight *f)
{
    const cl_algo_ctx *x = f->p->x;
    for (int i = 0; i < WINDOW; i++) {
        cl_tr_req **qs[2] = {&f->rq[i], &f->sq[i]};
        for (int k = 0; k < 2; k++)
            cl_tr_settle(x, qs[k]);
    }
}

static int timed_out(flight *f)
{
    const cl_algo_ctx *x = f->p->x;
    const cl_op *op = f->p->op;
    int recv = f->r_done < f->r_posted;
    int peer = f->linking ? f->link_peer : cl_unit_peer(f->p, recv ? f->r_done : f->s_done, recv);
    if (f->linking) /* it never connected: likely gone, the failure begins there */
        cl_algo_blame(x, peer, COLL_ETIMEDOUT);
    return cl_algo_fail(x, COLL_ETIMEDOUT, "rank %d %s #%u: no progress for %d ms %s peer %d",
                        cl_rank_of(x, x->rank), cl_kind_name(op->kind), op->seq, x->timeout_ms,
                        f->linking ? "waiting for a connection with" : "waiting on",
                        cl_rank_of(x, peer));
}

/* A turn of one flight: what completed is reaped, what may go is posted. A transfer that
 * cannot be posted fails the communicator like every other error: its links close, so no
 * request of this pass outlives it (a sink points into f). */
static int turn(flight *f, int *progress)
{
    const cl_algo_ctx *x = f->p->x;
    const cl_op *op = f->p->op;
    int rc = reap(f, progress);
    if (rc == COLL_OK && (rc = post_ready(f)) != COLL_OK)
        cl_algo_fail(x, rc, "rank %d %s #%u: cannot post a transfer: %s", cl_rank_of(x, x->rank),
                     cl_kind_name(op->kind), op->seq, coll_strerror(rc));
    return rc;
}

/* A turn of every flight still going; then, if none moved, the wait: spin, then sleep
 * until the notifier says something completed, or the deadline. */
static int step(flight *fs, int n, cl_spin *spin, int64_t *deadline)
{
    const cl_algo_ctx *x = fs[0].p->x;
    uint64_t seen = cl_notifier_events(x->notifier);
    int progress = 0, rc = COLL_OK, linking = 0;
    flight *waiting = NULL;
    for (int i = 0; i < n && rc == COLL_OK; i++)
        if (!finished(&fs[i]) && (rc = turn(&fs[i], &progress)) == COLL_OK && !finished(&fs[i])) {
            waiting = waiting ? waiting : &fs[i];
            linking |= fs[i].linking;
        }
    if (rc != COLL_OK || !waiting)
        return rc;
    if (atomic_load(x->aborted))
        return COLL_EABORTED;
    /* The clock is read only when polling gives up (a read costs as much as a poll): the
     * deadline counts from then, at most the spin phase after the last progress. */
    if (progress) {
        *deadline = 0;
        cl_spin_progress(spin);
        return COLL_OK;
    }
    if (cl_spin_poll(spin))
        return COLL_OK;
    int64_t now = cl_now_ms();
    if (!*deadline) {
        *deadline = now + x->timeout_ms;
        cl_stall_note(x, now);
    }
    if (now >= *deadline)
        return timed_out(waiting);
    /* Not every listener signals a connection: a link on its way is looked for often. */
    int soon = x->link.progress(x->link.owner) | linking;
    cl_notifier_wait(x->notifier, seen, soon ? CL_MIN(*deadline, now + 1) : *deadline);
    cl_spin_progress(spin); /* woken: poll again before the next sleep */
    return COLL_OK;
}

/* ---- the fast path ---------------------------------------------------------------- */

/* A one-unit exchange of a few cache lines (a recursive-doubling step, a two-rank ring)
 * takes no transport request and sets no flight up: its send goes out whole at once
 * (send_now) and its receive is polled on its own connection (recv_now), as a
 * shared-memory MPI does (a flight's set-up cost a two-rank 8-byte all-reduce an
 * eighth of its time). What cannot go that way now (a link
 * not open, a ring without room, a peer slower than the spin) is left to the general
 * loop, which goes on from what went. Headers and their checks are the general loop's
 * own, so either side may take either path. */

static int quick_fits(const pass *p)
{
    const cl_transport *tr = p->x->tr;
    return tr->send_now && tr->recv_now && !p->ops->peer && p->units == 1 &&
           p->codec == COLL_CODEC_NONE &&
           (p->chunk_base + (p->chunk_rem != 0)) * p->esize <= CL_NOW_BYTES; /* the largest unit */
}

static int quick_send(pass *p, cl_tr_conn *to, char *slot, int *sent_now)
{
    size_t bytes = 0;
    const void *buf = p->ops->send(p, 0, slot, &bytes);
    cl_msg_hdr h = header_for(p, 0, 0, bytes);
    uint64_t t0 = cl_traced(p->x->running) ? cl_span_clock() : 0;
    if (p->x->tr->send_now(to, &h, buf) != COLL_OK)
        return COLL_INPROGRESS; /* the general loop sends it, or reports why it cannot */
    *sent_now = 1;
    sent(p, 0, &h);
    if (t0)
        traced_unit(p, 1, 0, 0, t0, sizeof(h) + h.len);
    cl_tally(p->x->quick, 1);
    return COLL_OK;
}

static int quick_recv(pass *p, cl_tr_conn *from, char *slot, int *got_now)
{
    size_t bytes = 0, nbytes = 0;
    void *dst = p->ops->recv(p, 0, slot, &bytes);
    cl_msg_hdr h;
    cl_spin spin = cl_spin_quiet(p->x);
    uint64_t t0 = cl_traced(p->x->running) ? cl_span_clock() : 0;
    int rc;
    while ((rc = p->x->tr->recv_now(from, &h, dst, bytes, &nbytes)) == COLL_INPROGRESS &&
           cl_spin_poll(&spin))
        ;
    cl_spin_stop(&spin);
    if (rc == COLL_INPROGRESS || rc == COLL_ENOTSUP)
        return COLL_INPROGRESS;
    *got_now = 1;
    cl_tally(p->x->quick, 1);
    rc = received(p, 0, rc, &h, bytes, nbytes);
    if (rc == COLL_OK && p->ops->arrived)
        p->ops->arrived(p, 0, dst);
    if (rc == COLL_OK && t0)
        traced_unit(p, 1, 0, 1, t0, sizeof(h) + nbytes);
    return rc;
}

/* In the order the general loop keeps: a pass with no lag forwards what it receives
 * (a chain's middle), so its send waits for its receive; otherwise the send goes first
 * and the receive is polled only once it went (the peer may be waiting for it).
 * COLL_INPROGRESS: the general loop goes on from *sent_now and *got_now. */
static int quick(pass *p, int *sent_now, int *got_now)
{
    int sends = p->to >= 0, recvs = p->from >= 0, forward = p->lag == 0 && recvs;
    cl_tr_conn *to = NULL, *from = NULL;
    char *slots = p->slot_bytes ? cl_buf_grow(p->x->staging, 2 * p->slot_bytes) : NULL;
    if ((p->slot_bytes && !slots) || (sends && cl_link_get(p->x, 0, p->to, &to) != COLL_OK) ||
        (recvs && cl_link_get(p->x, 1, p->from, &from) != COLL_OK))
        return COLL_INPROGRESS; /* the general loop dials, waits, or reports */
    char *sslot = slots ? slots + p->slot_bytes : NULL;
    int rc = forward ? quick_recv(p, from, slots, got_now) : COLL_OK;
    if (rc == COLL_OK && sends)
        rc = quick_send(p, to, sslot, sent_now);
    if (rc == COLL_OK && recvs && !forward)
        rc = quick_recv(p, from, slots, got_now);
    return rc;
}

/* Dials every link this pass sends on before the first transfer, not as each is reached:
 * the peers connect at once instead of one after another, and a rank that fails midway
 * has a link to every peer waiting on it, which carries its farewell. */
static void dial_ahead(pass *p)
{
    size_t stride = p->ops->peer ? 1 : p->segs_per_chunk;
    cl_tr_conn *conn;
    for (size_t u = 0; u < p->sends; u += stride)
        cl_link_get(p->x, 0, cl_unit_peer(p, u, 0), &conn);
}

/* The next piece of the pass's meanwhile work (all: every piece left); none once done. */
static void meanwhile(pass *p, size_t *at, int all)
{
    do
        if (p->meanwhile && !p->meanwhile(p, at))
            p->meanwhile = NULL;
    while (all && p->meanwhile);
}

/* Counts and staging of each flight (its slots side by side in the one staging
 * buffer), then the links dialled. */
static int board(flight *fs, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += 2 * WINDOW * fs[i].p->slot_bytes;
    char *slots = total ? cl_buf_grow(fs[0].p->x->staging, total) : NULL;
    if (total && !slots)
        return COLL_ENOMEM;
    for (int i = 0; i < n; i++) {
        pass *p = fs[i].p;
        if (!p->ops->peer) {
            p->recvs = p->from >= 0 ? p->units : 0;
            p->sends = p->to >= 0 ? p->units : 0;
        }
        if (p->slot_bytes) {
            fs[i].rslots = slots;
            fs[i].sslots = slots + WINDOW * p->slot_bytes;
            slots += 2 * WINDOW * p->slot_bytes;
        }
        dial_ahead(p);
    }
    return COLL_OK;
}

static int all_finished(const flight *fs, int n)
{
    for (int i = 0; i < n; i++)
        if (!finished(&fs[i]))
            return 0;
    return 1;
}

static int fly(flight *fs, int n)
{
    pass *p = fs[0].p;
    int rc = board(fs, n);
    if (rc != COLL_OK)
        return rc;
    int64_t deadline = 0; /* set when polling first gives up (step) */
    cl_spin spin = cl_spin_start(p->x);
    for (int i = 0; i < n; i++)
        cl_spin_expect(&spin, (fs[i].p->chunk_base + 1) * fs[i].p->esize);
    while (rc == COLL_OK && !all_finished(fs, n))
        if ((rc = step(fs, n, &spin, &deadline)) == COLL_OK)
            for (int i = 0; i < n; i++)
                meanwhile(fs[i].p, &fs[i].busy_at, 0);
    cl_spin_stop(&spin);
    if (rc != COLL_OK) {
        if (rc == COLL_EABORTED)
            cl_algo_fail(p->x, rc, "rank %d %s #%u: aborted", cl_rank_of(p->x, p->x->rank),
                         cl_kind_name(p->op->kind), p->op->seq);
        for (int i = 0; i < n; i++)
            drain(&fs[i]);
    }
    return rc;
}

static int run(flight *fs, int n)
{
    int rc = fly(fs, n);
    for (int i = 0; i < n && rc == COLL_OK; i++)
        meanwhile(fs[i].p, &fs[i].busy_at, 1); /* what the transfers left */
    return rc;
}

/* What a traced pass is called: the kind of its chunks, where its ring runs. */
static void phase(cl_spans *s, const pass *p)
{
    static const char *names[] = {[CHUNKS_RS] = "reduce-scatter", [CHUNKS_AG] = "all-gather",
                                  [CHUNKS_ONE] = "exchange", [CHUNKS_DIRECT] = "direct"};
    cl_span_phase(s, names[p->order], p->x->scope);
}

int cl_pass_run_all(pass *ps, int n)
{
    flight fs[CL_PASS_MAX_FLIGHTS] = {{0}};
    if (n < 1 || n > CL_PASS_MAX_FLIGHTS)
        return COLL_EINVAL;
    for (int i = 0; i < n; i++)
        fs[i].p = &ps[i];
    fs[0].steps = n == 1; /* side by side, steps of two flights would overlap */
    cl_spans *s = cl_traced(ps[0].x->running);
    if (!s)
        return run(fs, n);
    phase(s, &ps[0]);
    int rc = run(fs, n);
    cl_span_phase_end(s);
    return rc;
}

static int run_pass(pass *p)
{
    int sent_now = 0, got_now = 0;
    int rc = quick_fits(p) ? quick(p, &sent_now, &got_now) : COLL_INPROGRESS;
    if (rc == COLL_OK) {
        size_t at = 0;
        meanwhile(p, &at, 1);
    }
    if (rc != COLL_INPROGRESS)
        return rc;
    flight f = {.p = p, .steps = 1};
    f.s_posted = f.s_done = (size_t)sent_now;
    f.r_posted = f.r_done = (size_t)got_now;
    return run(&f, 1);
}

int cl_pass_run(pass *p)
{
    cl_spans *s = cl_traced(p->x->running);
    if (!s)
        return run_pass(p);
    phase(s, p);
    int rc = run_pass(p);
    cl_span_phase_end(s);
    return rc;
}
