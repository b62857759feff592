/* The ibverbs data path. A message travels one of two ways:
 * - eager (payloads under one slot): the sender copies header and payload into its own
 *   registered slot and moves it with one RDMA WRITE WITH IMMEDIATE into the receiver's
 *   slot of the same index; the receiver copies it out into the posted receive.
 * - zero-copy (a slot or more): the sender announces the message with its header alone;
 *   the receiver registers the destination and answers with a clear-to-send naming its
 *   address and key; the sender registers the source and RDMA-writes the payload straight
 *   into it, the last write carrying an immediate that tells the receiver it is done.
 *   The sender announces the next message as soon as those writes are posted, so the
 *   receiver can clear it the moment the previous one lands.
 * The receiver grants slots back (an immediate with the count consumed so far), so a
 * sender never has more than SLOTS slot writes unanswered and no queue ever overflows.
 * The immediate's top two bits say what it carries. */
#include "transports/ibverbs/ib_conn.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#define WR_RECV 1u
#define WR_SLOT 2u  /* a slot write (send) or a grant or clear-to-send (recv) */
#define WR_PIECE 3u /* a zero-copy write */
#define PIECE ((size_t)4 << 20)
#define VAL_MASK 0x3fffffffu
enum { IMM_CHUNK, IMM_ANNOUNCE, IMM_DONE };  /* sender to receiver */
enum { IMM_GRANT, IMM_CTS };                 /* receiver to sender */
#define IMM(kind, val) (((uint32_t)(kind) << 30) | ((val) & VAL_MASK))

/* Registrations end with the failure, so a late write cannot reach a buffer that its
 * owner got back. */
void cl_ib_fail_queued(cl_tr_conn *c, int status)
{
    if (c->src_mr)
        cl_mr_put(c->ctx->mrs, c->src_mr);
    if (c->dst_mr)
        cl_mr_put(c->ctx->mrs, c->dst_mr);
    c->src_mr = c->dst_mr = NULL;
    cl_conn_fail(c, status);
}

void cl_ib_fail_all(cl_tr_conn *c, int status)
{
    cl_ib_fail_queued(c, status);
    for (int i = 0; i < c->nfly; i++) {
        cl_mr_put(c->ctx->mrs, c->fly[i].mr);
        cl_req_complete(c->fly[i].req, c->base.dead);
    }
    c->nfly = 0;
}

int cl_ib_post_recvs(cl_tr_conn *c, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_recv_wr wr = { .wr_id = WR_RECV }, *bad;
        if (c->ctx->dev.v->post_recv(c->qp, &wr, &bad))
            return -1;
    }
    return 0;
}

/* One RDMA write of n bytes (with immediate `imm` unless it is ~0u). */
static int post(cl_tr_conn *c, uint64_t wr_id, const void *local, uint32_t lkey, uint32_t n,
                uint64_t remote, uint32_t rkey, uint32_t imm)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = n, .lkey = lkey };
    struct ibv_send_wr wr = {
        .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
        .opcode = imm == ~0u ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl(imm == ~0u ? 0 : imm), .wr.rdma = { .remote_addr = remote, .rkey = rkey },
    },
                       *bad;
    if (c->ctx->dev.v->post_send(c->qp, &wr, &bad) == 0)
        return 0;
    cl_log(COLL_LOG_ERROR, "ibverbs: %s: cannot post a write", c->name);
    cl_ib_fail_all(c, COLL_EPEER);
    return -1;
}

static int slot_free(const cl_tr_conn *c)
{
    return c->ready && c->posted != c->granted && c->posted - c->written < SLOTS;
}

/* Copies n bytes of stream into the next slot and writes it across. */
static int post_slot(cl_tr_conn *c, const void *hdr, const void *payload, size_t p, int kind)
{
    size_t slot = c->posted % SLOTS, n = (hdr ? HDR : 0) + p;
    char *mem = c->slots + slot * c->slot_bytes;
    if (hdr)
        memcpy(mem, hdr, HDR);
    if (p) /* a zero-length message may have no buffer */
        memcpy(mem + (hdr ? HDR : 0), payload, p);
    if (post(c, WR_SLOT, mem, c->slots_mr->lkey, (uint32_t)n, c->raddr + slot * c->slot_bytes,
             c->rkey, IMM(kind, n)))
        return -1;
    c->posted++;
    return 0;
}

/* The next eager chunk of the head message; 1 if it moved. */
static int send_chunk(cl_tr_conn *c, cl_tr_req *r)
{
    if (!slot_free(c))
        return 0;
    size_t h = r->moved == 0 ? HDR : 0;
    size_t p = CL_MIN(c->slot_bytes - h, HDR + r->len - r->moved - h);
    const char *from = p ? (char *)r->buf + (r->moved + h - HDR) : NULL;
    if (post_slot(c, h ? &r->hdr_out : NULL, from, p, IMM_CHUNK))
        return 0;
    r->moved += h + p;
    if (r->moved == HDR + r->len)
        cl_reqq_finish_head(&c->base.q, COLL_OK);
    return 1;
}

/* A zero-copy message whose writes have all landed. */
static void landed(cl_tr_conn *c, cl_tr_req *r, struct ibv_mr *mr)
{
    cl_mr_put(c->ctx->mrs, mr);
    cl_req_complete(r, COLL_OK);
}

/* The head message, zero-copy: announce, wait for clear-to-send, write. Once every write
 * is posted the message waits in c->fly and the next one goes. 1 when it moved on. */
static int send_direct(cl_tr_conn *c, cl_tr_req *r)
{
    if (r->moved == 0) {
        if (!slot_free(c) || post_slot(c, &r->hdr_out, NULL, 0, IMM_ANNOUNCE))
            return 0;
        r->moved = HDR;
    }
    while (c->cts && c->sent < r->len && c->pieces_out < SLOTS) {
        size_t n = CL_MIN(PIECE, r->len - c->sent);
        int last = c->sent + n == r->len;
        if (post(c, WR_PIECE, (char *)r->buf + c->sent, c->src_mr->lkey, (uint32_t)n,
                 c->box.addr + c->sent, c->box.rkey, last ? IMM(IMM_DONE, 0) : ~0u))
            return 0;
        c->sent += n;
        c->pieces_out++, c->pieces++;
    }
    if (!c->cts || c->sent < r->len || c->nfly == FLIGHTS)
        return 0;
    cl_reqq_pop(&c->base.q);
    if (c->pieces == c->pieces_done)
        landed(c, r, c->src_mr);
    else
        c->fly[c->nfly++] = (cl_ib_flight){ r, c->src_mr, c->pieces - c->pieces_done };
    c->src_mr = NULL;
    c->cts = 0, c->sent = 0, c->pieces = c->pieces_done = 0;
    return 1;
}

/* Writes complete in posting order: the oldest message in flight, else the head's. */
static void piece_done(cl_tr_conn *c)
{
    c->pieces_out--;
    if (c->nfly == 0) {
        c->pieces_done++;
        return;
    }
    if (--c->fly[0].pieces > 0)
        return;
    landed(c, c->fly[0].req, c->fly[0].mr);
    memmove(c->fly, c->fly + 1, (size_t)--c->nfly * sizeof(c->fly[0]));
}

static void pump_send(cl_tr_conn *c)
{
    for (int moved = 1; moved && c->base.q.head && !c->base.dead && c->ready;) {
        cl_tr_req *r = c->base.q.head;
        /* A buffer that cannot be registered still goes, through the slots. */
        if (r->moved == 0 && r->len >= c->slot_bytes && !c->src_mr)
            c->src_mr = cl_mr_get(c->ctx->mrs, r->buf, r->len, 0);
        moved = c->src_mr ? send_direct(c, r) : send_chunk(c, r);
    }
}

/* A header arrived: sane, and does the payload fit? Fails the connection if not. */
static int header_ok(cl_tr_conn *c, cl_tr_req *r, uint32_t chunk)
{
    if (chunk < HDR || r->hdr_in->magic != CL_MSG_MAGIC) {
        cl_ib_fail_all(c, COLL_EPROTO);
        return 0;
    }
    if (r->hdr_in->len > r->len) {
        /* Debug only: the caller names a real mismatch, and a farewell probe (a 0-byte
         * receive) that meets a data message is no error. */
        cl_log(COLL_LOG_DEBUG, "ibverbs: %s sent a %u-byte message for a %zu-byte receive",
               c->name, r->hdr_in->len, r->len);
        cl_ib_fail_all(c, COLL_EMISMATCH);
        return 0;
    }
    return 1;
}

/* An announced message: register where it goes and tell the sender. */
static int clear_to_send(cl_tr_conn *c, cl_tr_req *r)
{
    c->dst_mr = cl_mr_get(c->ctx->mrs, r->buf, r->hdr_in->len,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->dst_mr) {
        cl_log(COLL_LOG_ERROR, "ibverbs: %s: cannot register a %u-byte receive buffer",
               c->name, r->hdr_in->len);
        cl_ib_fail_all(c, COLL_ESYS);
        return 0;
    }
    c->box = (cl_ib_box){ (uintptr_t)r->buf, c->dst_mr->rkey, 0 };
    if (post(c, WR_SLOT, &c->box, c->box_mr->lkey, sizeof(c->box), c->raddr, c->rkey,
             IMM(IMM_CTS, 0)))
        return 0;
    c->grants_out++;
    return 1;
}

/* Copies the landed chunk into the head receive; 0 when nothing more can move. */
static int take_chunk(cl_tr_conn *c, cl_tr_req *r)
{
    size_t slot = c->consumed % SLOTS;
    const char *mem = c->slots + slot * c->slot_bytes;
    uint32_t n = c->len[slot];
    if (r->moved == 0) {
        memcpy(r->hdr_in, mem, HDR);
        if (!header_ok(c, r, n))
            return 0;
        c->off = r->moved = HDR;
        if (c->kind[slot] == IMM_ANNOUNCE) {
            c->consumed++, c->off = 0;
            return n == HDR && r->hdr_in->len ? clear_to_send(c, r)
                                              : (cl_ib_fail_all(c, COLL_EPROTO), 0);
        }
    }
    size_t total = HDR + r->hdr_in->len, p = CL_MIN(n - c->off, total - r->moved);
    if (p)
        memcpy((char *)r->buf + (r->moved - HDR), mem + c->off, p);
    c->off += p;
    r->moved += p;
    if (c->off == n)
        c->consumed++, c->off = 0;
    if (r->moved < total)
        return 1;
    if (c->off != 0) { /* chunks never span messages */
        cl_ib_fail_all(c, COLL_EPROTO);
        return 0;
    }
    r->len = r->hdr_in->len;
    cl_reqq_finish_head(&c->base.q, COLL_OK);
    return 1;
}

/* The head receive, written zero-copy: done once the sender's last write landed. */
static int take_direct(cl_tr_conn *c, cl_tr_req *r)
{
    if (!c->done_seen)
        return 0;
    cl_mr_put(c->ctx->mrs, c->dst_mr);
    c->dst_mr = NULL;
    c->done_seen = 0;
    r->len = r->hdr_in->len;
    cl_reqq_finish_head(&c->base.q, COLL_OK);
    return 1;
}

/* Grants consumed slots back, in batches unless the receiver has caught up. */
static void grant(cl_tr_conn *c)
{
    uint32_t fresh = c->consumed - c->acked;
    if (fresh == 0 || c->grants_out >= SLOTS || c->base.dead)
        return;
    if (fresh < SLOTS / 2 && c->arrived != c->consumed)
        return;
    if (post(c, WR_SLOT, &c->box, c->box_mr->lkey, sizeof(c->box), c->raddr, c->rkey,
             IMM(IMM_GRANT, c->consumed)))
        return;
    c->acked = c->consumed;
    c->grants_out++;
}

static void pump_recv(cl_tr_conn *c)
{
    if (c->peer_gone) /* what landed before the peer left must be seen before judging */
        cl_ib_poll(c);
    while (c->base.q.head && !c->base.dead &&
           (c->dst_mr ? take_direct(c, c->base.q.head)
                      : c->consumed != c->arrived && take_chunk(c, c->base.q.head)))
        ;
    grant(c);
    /* The sender is gone and nothing more can land for the waiting receive. */
    if (c->peer_gone && c->base.q.head && !c->base.dead && c->consumed == c->arrived &&
        !c->done_seen)
        cl_ib_fail_all(c, COLL_EPEER);
}

void cl_ib_pump(cl_tr_conn *c)
{
    if (c->is_recv)
        pump_recv(c);
    else
        pump_send(c);
}

/* An immediate arrived: a chunk or announcement, the end of a zero-copy payload, a grant
 * or a clear-to-send. */
static void on_immediate(cl_tr_conn *c, uint32_t imm)
{
    uint32_t kind = imm >> 30, val = imm & VAL_MASK;
    if (c->is_recv && kind == IMM_DONE) {
        c->done_seen = 1;
    } else if (c->is_recv && kind <= IMM_ANNOUNCE && val > 0 && val <= c->slot_bytes) {
        c->kind[c->arrived % SLOTS] = (uint8_t)kind;
        c->len[c->arrived++ % SLOTS] = val;
    } else if (!c->is_recv && kind == IMM_GRANT) {
        c->granted += (val - c->grant_seen) & VAL_MASK;
        c->grant_seen = val;
    } else if (!c->is_recv && kind == IMM_CTS) {
        c->cts = 1; /* the box holds where the payload goes */
    } else {
        cl_log(COLL_LOG_ERROR, "ibverbs: %s: malformed immediate 0x%08x", c->name, imm);
        cl_ib_fail_all(c, COLL_EPROTO);
        return;
    }
    if (cl_ib_post_recvs(c, 1))
        cl_ib_fail_all(c, COLL_EPEER);
}

static void on_completion(cl_tr_conn *c, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) {
        /* Flushed requests only follow the error that moved the QP to its error state. */
        cl_log(wc->status == IBV_WC_WR_FLUSH_ERR ? COLL_LOG_DEBUG : COLL_LOG_ERROR,
               "ibverbs: %s: %s", c->name, c->ctx->dev.v->wc_status_str(wc->status));
        cl_ib_fail_all(c, COLL_EPEER);
    } else if (wc->wr_id == WR_PIECE) {
        piece_done(c);
    } else if (wc->wr_id == WR_SLOT) {
        if (c->is_recv)
            c->grants_out--;
        else
            c->written++;
    } else {
        on_immediate(c, ntohl(wc->imm_data));
    }
}

void cl_ib_poll(cl_tr_conn *c)
{
    const cl_verbs *v = c->ctx->dev.v;
    struct ibv_wc wc[16];
    for (int pass = 0; pass < 2; pass++) { /* drain, re-arm, drain: no event is lost */
        int n;
        while ((n = v->poll_cq(c->cq, 16, wc)) > 0)
            for (int i = 0; i < n; i++)
                on_completion(c, &wc[i]);
        if (pass == 0)
            v->req_notify_cq(c->cq, 0);
    }
}

int cl_ib_farewell(cl_tr_conn *c, const cl_msg_hdr *h)
{
    if (c->is_recv || c->base.dead || c->base.q.head || !slot_free(c))
        return 0;
    return post_slot(c, h, NULL, 0, IMM_CHUNK) == 0;
}
