/* Tagged point-to-point over per-peer connections of their own channel, so messages
 * never interleave with a collective's segments. Matching is FIFO per peer: the n-th
 * receive from a peer takes the n-th message it sent, and a tag, count or dtype that
 * disagrees is COLL_EMISMATCH, not a silent reorder. A link is opened on first use: a
 * request whose link is not open yet (a receive from a peer that has not sent yet) is
 * held, in issue order, and posted once it is, so posting order stays matching order.
 * The members of a family that shares links (family.h) share its root's posting order
 * and held list (the hub), since their messages to a peer share one link. */
#include "core/p2p.h"
#include "core/comm.h"
#include "core/record.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/family.h"
#include "core/link.h"
#include "kernels/reduce.h"

static cl_msg_hdr header(const coll_comm *c, const cl_op *r, size_t len, uint32_t seq)
{
    return (cl_msg_hdr){.magic = CL_MSG_MAGIC, .coll = CL_SEND, .dtype = (uint8_t)r->dtype,
                        .flags = c->wire, .len = (uint32_t)len, .seq = seq, .tag = r->tag,
                        .count = r->count};
}

/* Whose p2p_mu and held list c's requests go by. */
static coll_comm *hub(coll_comm *c)
{
    return c->fam ? cl_family_root(c) : c;
}

/* COLL_DEBUG=debug: every send and receive as it is issued. */
static void tell(const coll_comm *c, const cl_op *r, const char *how)
{
    if (!cl_log_enabled(COLL_LOG_DEBUG))
        return; /* the names are looked up for a line that is written, not per message */
    cl_log(COLL_LOG_DEBUG, "rank %d %s #%u %s rank %d, tag %u: %zu x %s%s", c->rank,
           cl_kind_name(r->kind), r->seq, r->kind == CL_SEND ? "to" : "from", r->root, r->tag,
           r->count, cl_dtype_name(r->dtype), how);
}

/* Hands q to the transport over its open link. */
static int post(coll_comm *c, coll_req *q)
{
    cl_op *r = &q->op;
    int send = r->kind == CL_SEND;
    cl_tr_conn *link = cl_link_now_of(c, CL_CH_P2P, send ? 0 : 1, r->root);
    size_t len = r->count * cl_dtype_size(r->dtype);
    if (!send)
        return c->tr->irecv(link, &q->hdr, r->rbuf, len, &q->treq);
    q->hdr = header(c, r, len, r->seq);
    int rc = c->tr->isend(link, &q->hdr, r->sbuf, &q->treq);
    if (rc == COLL_OK)
        atomic_fetch_add(&c->wire_tx, sizeof(q->hdr) + len);
    return rc;
}

static int same_link(const coll_req *a, const coll_req *b)
{
    const int *am = a->comm->to_root, *bm = b->comm->to_root;
    return a->op.kind == b->op.kind &&
           (am ? am[a->op.root] : a->op.root) == (bm ? bm[b->op.root] : b->op.root);
}

/* A peer whose link closed or reset is where the failure began (coll_failed_ranks), not
 * this rank. */
static void blame_peer(coll_comm *c, int peer, int rc)
{
    if (rc == COLL_EPEER)
        cl_comm_blame(c, peer, COLL_EPEER, 0);
}

/* Where a peer that failed left this rank its farewell: on its p2p link to us or, where
 * it had none, on the collective one, where cl_link_spread sends it (the ring's link, or
 * one dialed for it). Read there, the sentence names the rank the failure began at, not
 * the messenger: a live rank whose p2p link never formed was blamed for it. COLL_OK:
 * no farewell came. */
static int peer_farewell(coll_comm *c, const cl_op *r)
{
    int ch = cl_link_now_of(c, CL_CH_P2P, 1, r->root) ? CL_CH_P2P : CL_CH_COLL;
    return cl_await_farewell(&c->algo[ch], r->root, cl_kind_name(r->kind), r->seq);
}

/* A link to or from r's peer that cannot be opened (its dial refused): the peer's
 * farewell says why, if it left one; else the failure began at the peer. */
static int connect_failed(coll_comm *c, const cl_op *r, int rc)
{
    int why = rc == COLL_EPEER ? peer_farewell(c, r) : COLL_OK;
    if (why != COLL_OK)
        return why;
    blame_peer(c, r->root, rc);
    cl_comm_fail(c, rc, "rank %d %s #%u: cannot connect to peer %d: %s", c->rank,
                 cl_kind_name(r->kind), r->seq, r->root, coll_strerror(rc));
    return rc;
}

/* Posts every held request whose link opens now, in issue order; one behind another
 * held request on its link stays held (h: the hub, its p2p_mu held). A request that
 * cannot be posted leaves the list done with its status. */
static int flush(coll_comm *h)
{
    coll_req **at = &h->held, *prev = NULL;
    while (*at) {
        coll_req *q = *at, *e = h->held;
        coll_comm *c = q->comm;
        while (e != q && !same_link(e, q))
            e = e->next;
        int rc = e != q ? COLL_INPROGRESS
                        : cl_link_open(c, CL_CH_P2P, q->op.kind == CL_SEND ? 0 : 1, q->op.root);
        if (rc == COLL_OK)
            rc = post(c, q);
        if (rc == COLL_INPROGRESS) {
            prev = q;
            at = &q->next;
            continue;
        }
        if (rc != COLL_OK && cl_comm_state(c) == COLL_OK)
            rc = connect_failed(c, &q->op, rc);
        q->status = rc;
        if (rc != COLL_OK) /* a posted one ends in its test (the recorder's end, once) */
            cl_rec_p2p_end(c, q->rec, rc, 0);
        __atomic_store_n(&q->held, 0, __ATOMIC_RELEASE);
        __atomic_store_n(at, q->next, __ATOMIC_RELEASE);
        if (h->held_tail == q)
            h->held_tail = prev;
    }
    return h->held != NULL;
}

int cl_p2p_progress(coll_comm *c)
{
    coll_comm *h = hub(c);
    if (!__atomic_load_n(&h->held, __ATOMIC_ACQUIRE))
        return 0;
    cl_lock_take(&h->p2p_mu);
    int held = flush(h);
    cl_lock_give(&h->p2p_mu);
    return held;
}

void cl_p2p_forget(coll_comm *c)
{
    coll_comm *h = hub(c);
    cl_lock_take(&h->p2p_mu);
    coll_req **at = &h->held, *prev = NULL;
    while (*at) {
        coll_req *q = *at;
        if (q->comm && q->comm != c) {
            prev = q;
            at = &q->next;
            continue;
        }
        __atomic_store_n(at, q->next, __ATOMIC_RELEASE);
        if (h->held_tail == q)
            h->held_tail = prev;
    }
    cl_lock_give(&h->p2p_mu);
}

int cl_p2p_post(coll_comm *c, coll_req *q)
{
    cl_op *r = &q->op;
    coll_comm *h = hub(c);
    cl_lock_take(&h->p2p_mu); /* sequence numbers and posting order agree */
    r->seq = ++c->p2p_seq[r->kind == CL_SEND ? 0 : 1][r->root];
    q->rec = cl_rec_p2p(c, r, COLL_OK, 0, 0);
    tell(c, r, "");
    q->held = 1;
    q->next = NULL;
    if (h->held_tail)
        h->held_tail->next = q;
    else
        __atomic_store_n(&h->held, q, __ATOMIC_RELEASE);
    h->held_tail = q;
    flush(h);
    int rc = q->held || q->treq ? COLL_OK : q->status;
    cl_lock_give(&h->p2p_mu);
    return rc;
}

/* The message received is the one q expects. */
static int as_expected(const coll_comm *c, const coll_req *q)
{
    const cl_msg_hdr *h = &q->hdr;
    const cl_op *r = &q->op;
    return h->coll == CL_SEND && h->tag == r->tag && h->count == r->count &&
           h->dtype == r->dtype && h->seq == r->seq && h->flags == c->wire;
}

static int check_recv(coll_comm *c, const coll_req *q, int rc)
{
    const cl_msg_hdr *h = &q->hdr;
    const cl_op *r = &q->op;
    if (rc == COLL_OK && as_expected(c, q))
        return COLL_OK;
    if (rc == COLL_OK && h->coll == CL_FAREWELL)
        return cl_peer_failed(&c->algo[CL_CH_P2P], h, "recv", r->seq);
    if (rc != COLL_OK && rc != COLL_EMISMATCH)
        return rc;
    cl_comm_fail(c, COLL_EMISMATCH,
                 "rank %d recv #%u: peer %d sent tag %u count %llu %s%s, this rank expects tag "
                 "%u count %llu %s",
                 c->rank, r->seq, r->root, h->tag, (unsigned long long)h->count,
                 cl_dtype_name(h->dtype),
                 h->flags != c->wire ? " for another communicator on this link (COLL_SPLIT_SHARE: "
                                       "posted in another order)"
                                     : "",
                 r->tag, (unsigned long long)r->count, cl_dtype_name(r->dtype));
    return COLL_EMISMATCH;
}

/* A peer that closed may have said why (a mismatch it saw): prefer its reason. */
static int send_failed(coll_comm *c, const cl_op *r, int rc)
{
    int why = rc == COLL_EPEER ? peer_farewell(c, r) : COLL_OK;
    if (why != COLL_OK)
        return why;
    blame_peer(c, r->root, rc);
    cl_comm_fail(c, rc, "rank %d send #%u: peer %d (%s): %s", c->rank, r->seq, r->root,
                 c->tr->peer_name(cl_link_now_of(c, CL_CH_P2P, 0, r->root)), coll_strerror(rc));
    return rc;
}

int cl_p2p_test(coll_req *r, int *done)
{
    coll_comm *c = r->comm;
    cl_p2p_progress(c); /* every held request: the one tested may wait on another's peer */
    if (__atomic_load_n(&r->held, __ATOMIC_ACQUIRE)) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    if (!r->treq) {
        *done = 1;
        return r->status;
    }
    size_t nbytes = 0;
    int rc = c->tr->test(r->treq, done, &nbytes);
    if (!*done)
        return COLL_INPROGRESS;
    r->treq = NULL;
    if (r->op.kind == CL_RECV)
        rc = check_recv(c, r, rc);
    else if (rc != COLL_OK)
        rc = send_failed(c, &r->op, rc);
    if (rc == COLL_OK && r->op.kind == CL_RECV)
        atomic_fetch_add(&c->wire_rx, sizeof(r->hdr) + nbytes);
    if (rc == COLL_OK)
        atomic_fetch_add(&c->ops, 1);
    r->status = rc;
    cl_rec_p2p_end(c, r->rec, rc, sizeof(r->hdr) + (r->op.kind == CL_RECV ? nbytes : r->hdr.len));
    return rc;
}

/* ---- the fast path ------------------------------------------------------------------ */

/* A blocking send or receive of a few cache lines, on a link that is open, with nothing
 * held, moves by the transport's send_now/recv_now (transport.h): no request, no
 * transport poll. Its sequence number is taken only when its message moved, under
 * p2p_mu, so it is ordered with every other send or receive as a posted one is; it is
 * counted there too (c->now). */

static cl_tr_conn *quick_link(coll_comm *c, const cl_op *r)
{
    return hub(c)->held ? NULL : cl_link_now_of(c, CL_CH_P2P, r->kind == CL_SEND ? 0 : 1, r->root);
}

static int send_now(coll_comm *c, coll_req *q, size_t len)
{
    cl_op *r = &q->op;
    coll_comm *h = hub(c);
    cl_lock_take(&h->p2p_mu);
    cl_tr_conn *link = quick_link(c, r);
    q->hdr = header(c, r, len, c->p2p_seq[0][r->root] + 1);
    int rc = link ? c->tr->send_now(link, &q->hdr, r->sbuf) : COLL_INPROGRESS;
    if (rc == COLL_OK) {
        r->seq = ++c->p2p_seq[0][r->root];
        cl_rec_p2p(c, r, COLL_OK, sizeof(q->hdr) + len, 1);
        cl_tally(&c->now.ops, 1);
        cl_tally(&c->now.bytes_in, len);
        cl_tally(&c->now.wire_tx, sizeof(q->hdr) + len);
    }
    cl_lock_give(&h->p2p_mu);
    if (rc != COLL_OK) /* a failed link fails the posted send the same way, and says so */
        return COLL_INPROGRESS;
    tell(c, r, " (fast path)");
    return COLL_OK;
}

/* A receive's message came (or its link failed): its number and counts (p2p_mu held). */
static void took_now(coll_comm *c, coll_req *q, int rc, size_t len, size_t nbytes)
{
    q->op.seq = ++c->p2p_seq[1][q->op.root];
    cl_tally(&c->now.bytes_in, len);
    int status = rc != COLL_OK ? rc : as_expected(c, q) ? COLL_OK : COLL_EMISMATCH;
    cl_rec_p2p(c, &q->op, status, sizeof(q->hdr) + nbytes, 1);
    if (status != COLL_OK)
        return;
    cl_tally(&c->now.ops, 1);
    cl_tally(&c->now.wire_rx, sizeof(q->hdr) + nbytes);
}

/* Polled for the spin's budget, p2p_mu taken per poll (never held while waiting). */
static int recv_now(coll_comm *c, coll_req *q, size_t len)
{
    cl_op *r = &q->op;
    cl_spin spin = cl_spin_quiet(&c->algo[CL_CH_P2P]);
    coll_comm *h = hub(c);
    size_t nbytes = 0;
    int rc;
    do {
        cl_lock_take(&h->p2p_mu);
        cl_tr_conn *link = quick_link(c, r);
        rc = link ? c->tr->recv_now(link, &q->hdr, r->rbuf, len, &nbytes) : COLL_ENOTSUP;
        if (rc != COLL_INPROGRESS && rc != COLL_ENOTSUP)
            took_now(c, q, rc, len, nbytes);
        cl_lock_give(&h->p2p_mu);
    } while (rc == COLL_INPROGRESS && cl_spin_poll(&spin));
    cl_spin_stop(&spin);
    if (rc == COLL_INPROGRESS || rc == COLL_ENOTSUP)
        return COLL_INPROGRESS;
    tell(c, r, " (fast path)");
    return check_recv(c, q, rc);
}

int cl_p2p_now(coll_comm *c, coll_req *q)
{
    cl_op *r = &q->op;
    size_t len = r->count * cl_dtype_size(r->dtype);
    if (!c->tr->send_now || len > CL_NOW_BYTES || cl_comm_state(c) != COLL_OK)
        return COLL_INPROGRESS;
    return r->kind == CL_SEND ? send_now(c, q, len) : recv_now(c, q, len);
}
