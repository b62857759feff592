/* Tagged point-to-point over per-peer connections of their own channel, so messages
 * never interleave with a collective's segments. Matching is FIFO per peer: the n-th
 * receive from a peer takes the n-th message it sent, and a tag, count or dtype that
 * disagrees is COLL_EMISMATCH, not a silent reorder. */
#include "core/comm.h"

#include "base/util.h"
#include "kernels/reduce.h"

int cl_p2p_post(coll_comm *c, coll_req *q)
{
    cl_op *r = &q->op;
    int send = r->kind == CL_SEND, peer = r->root;
    size_t len = r->count * cl_dtype_size(r->dtype);
    pthread_mutex_lock(&c->mu); /* sequence numbers and posting order agree */
    r->seq = ++c->p2p_seq[send ? 0 : 1][peer];
    int rc;
    if (send) {
        q->hdr = (cl_msg_hdr){.magic = CL_MSG_MAGIC, .coll = CL_SEND, .dtype = (uint8_t)r->dtype,
                              .len = (uint32_t)len, .seq = r->seq, .tag = r->tag,
                              .count = r->count};
        rc = c->tr->isend(c->conns[CL_CH_P2P][0][peer], &q->hdr, r->sbuf, &q->treq);
        if (rc == COLL_OK)
            atomic_fetch_add(&c->wire_tx, sizeof(q->hdr) + len);
    } else {
        rc = c->tr->irecv(c->conns[CL_CH_P2P][1][peer], &q->hdr, r->rbuf, len, &q->treq);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int check_recv(coll_comm *c, const coll_req *q, int rc, size_t nbytes)
{
    const cl_msg_hdr *h = &q->hdr;
    const cl_op *r = &q->op;
    if (rc == COLL_OK && h->coll == CL_FAREWELL)
        return cl_peer_failed(&c->algo[CL_CH_P2P], h, "recv", r->seq);
    if (rc == COLL_OK) {
        atomic_fetch_add(&c->wire_rx, sizeof(*h) + nbytes);
        if (h->tag == r->tag && h->count == r->count && h->dtype == r->dtype &&
            h->seq == r->seq && h->coll == CL_SEND)
            return COLL_OK;
    }
    if (rc != COLL_OK && rc != COLL_EMISMATCH)
        return rc;
    cl_comm_fail(c, COLL_EMISMATCH,
                 "rank %d recv #%u: peer %d sent tag %u count %llu %s, this rank expects tag %u "
                 "count %llu %s",
                 c->rank, r->seq, r->root, h->tag, (unsigned long long)h->count,
                 cl_dtype_name(h->dtype), r->tag, (unsigned long long)r->count,
                 cl_dtype_name(r->dtype));
    return COLL_EMISMATCH;
}

/* A peer that closed may have said why (a mismatch it saw): prefer its reason. */
static int send_failed(coll_comm *c, const cl_op *r, int rc)
{
    int why = rc == COLL_EPEER ? cl_await_farewell(&c->algo[CL_CH_P2P], r->root, "send", r->seq)
                               : COLL_OK;
    if (why != COLL_OK)
        return why;
    cl_comm_fail(c, rc, "rank %d send #%u: peer %d (%s): %s", c->rank, r->seq, r->root,
                 c->tr->peer_name(c->conns[CL_CH_P2P][0][r->root]), coll_strerror(rc));
    return rc;
}

int cl_p2p_test(coll_req *r, int *done)
{
    coll_comm *c = r->comm;
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
        rc = check_recv(c, r, rc, nbytes);
    else if (rc != COLL_OK)
        rc = send_failed(c, &r->op, rc);
    if (rc == COLL_OK)
        atomic_fetch_add(&c->ops, 1);
    r->status = rc;
    return rc;
}
