/* The tcp data path: message bytes in and out of a connection's socket with non-blocking
 * readv/sendmsg, under the connection's io mutex, on the thread of whoever holds it: the
 * caller posting a request, a caller polling, or the loop thread when the socket turns
 * ready. One system call per small message each way; receives read the header and what
 * follows it into a small buffer, large payloads go straight into the caller's memory. */
#include "transports/tcp/tcp_conn.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#define HDR sizeof(cl_msg_hdr)
enum { RB_BYTES = 16384 }; /* payloads this size or larger skip the buffer */
/* The most one system call moves: a call holds the socket's lock while it copies, and on
 * a connection that carries both ways the peer's bytes wait for it meanwhile. Two
 * processes exchanging 4 MiB both ways on loopback (plain C, side by side): one socket
 * 2.4 GB/s each way with whole-buffer calls, 2.9-4.0 in 256 KiB pieces, two sockets
 * 2.7-3.6; 64 KiB pieces 1.6-1.8 (too many calls). A 2-rank tcp all-reduce on a shared
 * connection (5 rounds, medians, busbw): 256 KiB 2.95 -> 3.27 GB/s, 1 MiB 3.31 -> 4.93
 * with the pieces (one socket per direction: 3.20, 5.13); 4 and 16 MiB stayed at 2.66
 * and 2.40 (3.80, 2.80). The ACKs of a large payload's bytes then go at once
 * (TCP_QUICKACK after its reads while a piece or more is still to come), not held for a
 * reply that may be a while coming: 4 MiB 3.38, 16 MiB 2.59 against 3.93 and 2.92 (5
 * rounds each, side by side). Below a piece the reply comes soon and carries the ACK, and
 * the extra system call cost more than it saved: on a quiet 16-core machine (10 rounds,
 * medians) QUICKACK from 16 KiB on took 16.5 us for a 2-rank 32 KiB all-reduce, 40.5 for
 * 128 KiB; from a piece on, 14.1 and 39.4 (one socket per direction: 14.7 and 36.6). */
enum { PIECE = 256 << 10 };

void cl_tcp_complete(cl_tr_req *r, int status)
{
    if (r->owned) { /* the rest of a fast-path send: nobody waits for it */
        free(r);
        return;
    }
    /* Once done is published the waiter may free r: nothing of it is read after. */
    cl_notifier *n = r->conn->ctx->notifier;
    r->status = status;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    cl_notify(n);
}

static cl_tr_req *pop(cl_tr_req **head, cl_tr_req **tail)
{
    cl_tr_req *r = *head;
    *head = r->next;
    if (!*head)
        *tail = NULL;
    return r;
}

void cl_tcp_fail(cl_tr_conn *c, int status)
{
    if (!c->dead)
        c->dead = status;
    while (c->recvq_head)
        cl_tcp_complete(pop(&c->recvq_head, &c->recvq_tail), c->dead);
    while (c->sendq_head)
        cl_tcp_complete(pop(&c->sendq_head, &c->sendq_tail), c->dead);
}

static void fail_io(cl_tr_conn *c, int status, const char *why)
{
    if (!c->dead)
        cl_log(COLL_LOG_DEBUG, "tcp: connection %s failed: %s", c->name, why);
    cl_tcp_fail(c, status);
}

/* One way of c ends, the other goes on. A send that fails (the peer closed or reset)
 * ends the sends, but what the peer wrote before it went, its farewell, is still read
 * (the read that meets the end fails the rest). A message that breaks the stream (bad
 * magic, longer than its receive) ends the receives, but the sends still carry this
 * rank's farewell: on a connection that carries both ways (a shared link), neither
 * failure may silence the other way. */
enum { SENDS, RECVS };

static void end_way(cl_tr_conn *c, int way, int status, const char *why)
{
    int *ended = way == SENDS ? &c->sends_dead : &c->recvs_dead;
    cl_tr_req **head = way == SENDS ? &c->sendq_head : &c->recvq_head;
    cl_tr_req **tail = way == SENDS ? &c->sendq_tail : &c->recvq_tail;
    if (!c->dead && !*ended)
        cl_log(COLL_LOG_DEBUG, "tcp: %s on %s failed: %s", way == SENDS ? "sending" : "receiving",
               c->name, why);
    if (!*ended)
        *ended = status;
    while (*head)
        cl_tcp_complete(pop(head, tail), *ended);
}

static int sends_end(const cl_tr_conn *c)
{
    return c->dead ? c->dead : c->sends_dead;
}

static int recvs_end(const cl_tr_conn *c)
{
    return c->dead ? c->dead : c->recvs_dead;
}

/* ---- sends ------------------------------------------------------------------------ */

static size_t send_some(cl_tr_conn *c)
{
    size_t moved = 0;
    c->send_blocked = 0;
    c->sent_on |= c->sendq_head != NULL;
    while (c->sendq_head && !sends_end(c)) {
        cl_tr_req *r = c->sendq_head;
        struct iovec v[2];
        int n = 0;
        if (r->got < HDR)
            v[n++] = (struct iovec){(char *)&r->hdr_out + r->got, HDR - r->got};
        size_t off = r->got > HDR ? r->got - HDR : 0;
        if (r->span > off)
            v[n++] = (struct iovec){(char *)r->buf + off, CL_MIN(r->span - off, (size_t)PIECE)};
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->send_blocked = 1;
            break;
        }
        if (k < 0) {
            end_way(c, SENDS, COLL_EPEER, strerror(errno));
            break;
        }
        moved += (size_t)k;
        r->got += (size_t)k;
        if (r->got == HDR + r->span)
            cl_tcp_complete(pop(&c->sendq_head, &c->sendq_tail), COLL_OK);
    }
    return moved;
}

/* ---- receives --------------------------------------------------------------------- */

/* A header has arrived: is it sane, and does the payload fit the cap bytes received into? */
static int header_ok(cl_tr_conn *c, const cl_msg_hdr *h, size_t cap)
{
    if (h->magic != CL_MSG_MAGIC) {
        end_way(c, RECVS, COLL_EPROTO, "bad message magic");
        return 0;
    }
    if (h->len > cap) {
        /* Debug only: the caller names a real mismatch, and a farewell probe (a 0-byte
         * receive) that meets a data message is no error. */
        cl_log(COLL_LOG_DEBUG, "tcp: %s sent a %u-byte message for a %zu-byte receive", c->name,
               h->len, cap);
        end_way(c, RECVS, COLL_EMISMATCH, "message longer than the receive");
        return 0;
    }
    return 1;
}

static size_t wanted(const cl_tr_req *r)
{
    return r->got < HDR ? HDR - r->got : HDR + r->span - r->got;
}

static char *dest(cl_tr_req *r)
{
    return r->got < HDR ? (char *)r->hdr_in + r->got : (char *)r->buf + (r->got - HDR);
}

/* n more bytes of the head receive are in place: check its header, complete it when
 * whole. 0 when the connection failed. */
static int took(cl_tr_conn *c, cl_tr_req *r, size_t n)
{
    int had_header = r->got >= HDR;
    r->got += n;
    if (r->got < HDR)
        return 1;
    if (!had_header && !header_ok(c, r->hdr_in, r->len))
        return 0;
    if (!had_header)
        r->span = r->on_fhdr  ? r->on_fhdr(r->hook_arg, r->hdr_in, &r->buf)
                  : r->on_hdr ? r->on_hdr(r->hook_arg, r->hdr_in)
                              : r->hdr_in->len;
    if (r->got == HDR + r->span && r->on_frame) { /* a frame receiver waits for the next */
        r->on_frame(r->hook_arg, r->hdr_in, r->buf);
        r->got = 0;
    } else if (r->got == HDR + r->span) {
        r->len = r->hdr_in->len;
        c->recvs_ok++;
        cl_tcp_complete(pop(&c->recvq_head, &c->recvq_tail), COLL_OK);
    }
    return 1;
}

/* One readv; a closed or failed socket fails c. <= 0: nothing was read. */
static ssize_t read_into(cl_tr_conn *c, struct iovec *v, int n)
{
    ssize_t k;
    do
        k = readv(c->fd, v, n);
    while (k < 0 && errno == EINTR);
    if (k == 0)
        fail_io(c, COLL_EPEER, "closed by the peer");
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        fail_io(c, COLL_EPEER, strerror(errno));
    return k;
}

static int have_rb(cl_tr_conn *c)
{
    if (!c->rb && !(c->rb = malloc(RB_BYTES)))
        fail_io(c, COLL_ENOMEM, "no memory for the read buffer");
    return c->rb != NULL;
}

/* One readv for the head receive: the header (and whatever follows, into rb), a large
 * payload straight into place, or a small one through rb. -1: stop reading. */
static ssize_t read_once(cl_tr_conn *c, cl_tr_req *r)
{
    size_t want = wanted(r);
    struct iovec v[2];
    int n = 0;
    if (r->got < HDR || want >= RB_BYTES)
        v[n++] = (struct iovec){dest(r), CL_MIN(want, (size_t)PIECE)};
    if (want < RB_BYTES || r->got < HDR)
        v[n++] = (struct iovec){c->rb, RB_BYTES};
    ssize_t k = read_into(c, v, n);
    if (k <= 0)
        return -1;
    if (want >= PIECE) { /* see PIECE */
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    }
    size_t direct = v[0].iov_base == c->rb ? 0 : ((size_t)k < want ? (size_t)k : want);
    c->rb_at = 0;
    c->rb_end = (size_t)k - direct;
    return (ssize_t)direct;
}

static size_t recv_some(cl_tr_conn *c)
{
    size_t moved = 0;
    if (c->recvq_head && !have_rb(c))
        return 0;
    while (c->recvq_head && !recvs_end(c)) {
        cl_tr_req *r = c->recvq_head;
        if (c->rb_at < c->rb_end) { /* bytes read earlier come first */
            size_t n = c->rb_end - c->rb_at, want = wanted(r);
            n = n < want ? n : want;
            memcpy(dest(r), c->rb + c->rb_at, n);
            c->rb_at += n;
            moved += n;
            if (!took(c, r, n))
                break;
            continue;
        }
        ssize_t direct = read_once(c, r);
        if (direct < 0)
            break;
        moved += (size_t)direct; /* what went to rb counts when it is copied out */
        if (direct > 0 && !took(c, r, (size_t)direct))
            break;
    }
    return moved;
}

/* ---- the fast path (transport.h: send_now, recv_now) --------------------------------- */

/* COLL_OK, with c->io held, when c's socket is free for a whole message now: no thread
 * in it, no request queued ahead in that direction. */
static int now_ok(cl_tr_conn *c, int sending)
{
    if (pthread_mutex_trylock(&c->io) != 0)
        return COLL_INPROGRESS;
    int end = sending ? sends_end(c) : recvs_end(c);
    int busy = c->fd < 0 || (sending ? c->sendq_head : c->recvq_head) != NULL;
    int rc = end ? end : busy ? COLL_INPROGRESS : COLL_OK;
    if (rc != COLL_OK)
        pthread_mutex_unlock(&c->io);
    return rc;
}

/* The socket took only part of a message: the rest goes as a send of its own copy (the
 * caller has its buffer back), ahead of anything sent later, so the stream stays whole. */
static int keep_rest(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, size_t sent)
{
    cl_tr_req *r = calloc(1, sizeof(*r) + hdr->len);
    if (!r) {
        fail_io(c, COLL_ENOMEM, "no memory for the rest of a message");
        return c->dead;
    }
    r->conn = c;
    r->owned = 1;
    r->hdr_out = *hdr;
    r->buf = r + 1;
    if (hdr->len)
        memcpy(r->buf, buf, hdr->len);
    r->len = r->span = hdr->len;
    r->got = sent;
    c->sendq_head = c->sendq_tail = r;
    return COLL_OK;
}

int cl_tcp_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, int *arm)
{
    int rc = now_ok(c, 1);
    if (rc != COLL_OK)
        return rc;
    struct iovec v[2] = {{(void *)hdr, HDR}, {(void *)buf, hdr->len}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = hdr->len ? 2 : 1};
    ssize_t k;
    do
        k = sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        end_way(c, SENDS, COLL_EPEER, strerror(errno));
    c->sent_on = 1;
    if (sends_end(c))
        rc = sends_end(c);
    else if (k < 0)
        rc = COLL_INPROGRESS;
    else if ((size_t)k < HDR + hdr->len && (rc = keep_rest(c, hdr, buf, (size_t)k)) == COLL_OK)
        *arm = cl_tcp_progress(c, NULL);
    pthread_mutex_unlock(&c->io);
    return rc;
}

/* The next message from rb, if all of it is there. */
static int take_whole(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    size_t have = c->rb_end - c->rb_at;
    if (have < HDR)
        return COLL_INPROGRESS;
    memcpy(hdr, c->rb + c->rb_at, HDR);
    if (!header_ok(c, hdr, cap))
        return recvs_end(c);
    if (have < HDR + hdr->len)
        return COLL_INPROGRESS;
    if (hdr->len)
        memcpy(buf, c->rb + c->rb_at + HDR, hdr->len);
    c->rb_at += HDR + hdr->len;
    *nbytes = hdr->len;
    return COLL_OK;
}

/* What the socket has, read into rb after the bytes not yet claimed (moved to its start,
 * so a whole fast-path message always fits). */
static void fill_rb(cl_tr_conn *c)
{
    if (!have_rb(c))
        return;
    memmove(c->rb, c->rb + c->rb_at, c->rb_end - c->rb_at);
    c->rb_end -= c->rb_at;
    c->rb_at = 0;
    struct iovec v = {c->rb + c->rb_end, RB_BYTES - c->rb_end};
    ssize_t k = read_into(c, &v, 1);
    if (k > 0)
        c->rb_end += (size_t)k;
}

int cl_tcp_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    if (cap + HDR > RB_BYTES)
        return COLL_ENOTSUP;
    int rc = now_ok(c, 0);
    if (rc != COLL_OK)
        return rc;
    rc = take_whole(c, hdr, buf, cap, nbytes);
    if (rc == COLL_INPROGRESS) {
        fill_rb(c);
        rc = recvs_end(c) ? recvs_end(c) : take_whole(c, hdr, buf, cap, nbytes);
    }
    pthread_mutex_unlock(&c->io);
    return rc;
}

/* ---- who moves the bytes ---------------------------------------------------------- */

static int loop_must_watch(cl_tr_conn *c)
{
    if (c->fd < 0 || c->dead || atomic_load(&c->ctx->pollers) > 0)
        return 0;
    return (c->recvq_head ? UV_READABLE : 0) | (c->send_blocked ? UV_WRITABLE : 0);
}

int cl_tcp_progress(cl_tr_conn *c, size_t *moved)
{
    size_t m = 0;
    if (c->fd >= 0 && !c->dead) {
        m = send_some(c);
        __atomic_store_n(&c->tx_total, c->tx_total + m, __ATOMIC_RELAXED);
        size_t in = recv_some(c);
        __atomic_store_n(&c->rx_total, c->rx_total + in, __ATOMIC_RELAXED);
        m += in;
    }
    if (moved)
        *moved += m;
    int want = loop_must_watch(c), more = want & ~c->asked;
    c->asked |= want;
    return more != 0;
}

size_t cl_tcp_halt(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->io);
    size_t n = c->recvs_ok;
    fail_io(c, COLL_EPEER, "halted");
    pthread_mutex_unlock(&c->io);
    return n;
}

size_t cl_tcp_rx_bytes(cl_tr_conn *c)
{
    return __atomic_load_n(&c->rx_total, __ATOMIC_RELAXED);
}

size_t cl_tcp_tx_bytes(cl_tr_conn *c)
{
    return __atomic_load_n(&c->tx_total, __ATOMIC_RELAXED);
}

/* Under c->io, which keeps c->fd open (close_conn_handles takes it under the lock): read
 * without, a socket closed and its number taken again gave another socket's counts. Only
 * tried: rails asks under its own lock, which comes after c's, and a measure missed while
 * c is busy costs nothing (the counts are running totals; the next one covers both). */
int cl_tcp_busy(cl_tr_conn *c, uint64_t *acked, uint64_t *busy_us)
{
    if (pthread_mutex_trylock(&c->io) != 0)
        return 0;
    int ok = c->fd >= 0 && cl_tcp_sock_busy(c->fd, acked, busy_us);
    pthread_mutex_unlock(&c->io);
    return ok;
}

int cl_tcp_broken(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->io);
    int rc = c->dead ? c->dead : c->recvs_dead ? c->recvs_dead : c->sends_dead;
    pthread_mutex_unlock(&c->io);
    return rc;
}

int cl_tcp_ready(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->io);
    int yes = c->fd >= 0 && !c->dead;
    pthread_mutex_unlock(&c->io);
    return yes;
}

int cl_tcp_enqueue(cl_tr_conn *c, cl_tr_req *r, int is_recv)
{
    pthread_mutex_lock(&c->io);
    r->next = NULL;
    cl_tr_req **head = is_recv ? &c->recvq_head : &c->sendq_head;
    cl_tr_req **tail = is_recv ? &c->recvq_tail : &c->sendq_tail;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
    int arm = 0;
    if (c->dead)
        cl_tcp_fail(c, c->dead);
    else if (!is_recv && c->sends_dead)
        end_way(c, SENDS, c->sends_dead, "sends ended");
    else if (is_recv && c->recvs_dead)
        end_way(c, RECVS, c->recvs_dead, "receives ended");
    else
        arm = cl_tcp_progress(c, NULL);
    pthread_mutex_unlock(&c->io);
    return arm;
}
