/* The ibverbs transport. Each one-directional connection is an RC queue pair. The
 * receiver owns a registered region of SLOTS slots; the sender copies each message
 * (header, then payload, cut into slot-sized chunks that never span two messages) into
 * its own registered slot of the same index and moves it with one RDMA WRITE WITH
 * IMMEDIATE, the immediate carrying the chunk length. The receiver copies chunks out into
 * the posted receive in order and grants the slots back: an RDMA WRITE WITH IMMEDIATE
 * whose immediate is the number of chunks consumed so far. A sender holds at most SLOTS
 * chunks unacknowledged, so neither side ever posts more work than its queues hold.
 * Queue pair addresses travel over a TCP bootstrap socket that then stays open as a
 * lifeline: EOF means the peer closed or died, which RDMA alone reports only after the
 * retry timers run out. A progress thread sleeps on the completion channel, the async
 * event fd and the lifelines; callers copy and post directly when they can. */
#include "ib_dev.h"

#include "../transport.h"
#include "../tcp/tcp_iface.h"
#include "../../lib/core/log.h"
#include "../../lib/core/util.h"
#include "collective.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOTS 8
#define SLOT_BYTES ((size_t)128 << 10)
#define HDR sizeof(cl_msg_hdr)
#define WR_RECV 1u
#define WR_WRITE 2u
#define BOOT_BYTES (CL_HELLO_BYTES + sizeof(cl_ib_addr))

static char tag_channel, tag_async; /* epoll data for the two device fds */

struct cl_tr_req {
    struct cl_tr_req *next;
    struct cl_tr_req *live_prev, *live_next; /* ctx->live: every request not yet tested */
    cl_tr_conn *conn;
    cl_msg_hdr hdr_out;
    cl_msg_hdr *hdr_in;
    void *buf;
    size_t len;   /* send: payload bytes; recv: capacity, then the payload's length */
    size_t moved; /* stream bytes handled, header included */
    int status;
    atomic_int done;
};

struct cl_tr_conn {
    cl_tr_ctx *ctx;
    struct cl_tr_conn *next_all;
    int is_recv, sock, ready, dead, peer_gone;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t psn;
    char *slots; /* SLOTS x SLOT_BYTES, registered */
    struct ibv_mr *slots_mr;
    uint64_t credit; /* send: where grants land; recv: the source of grant writes */
    struct ibv_mr *credit_mr;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t posted, written, granted; /* send: chunks posted, completed, allowed */
    uint32_t arrived, consumed, acked; /* recv: chunks landed, copied out, granted back */
    int grants_out;                    /* recv: grant writes in flight */
    uint32_t len[SLOTS];               /* recv: bytes in each landed slot */
    size_t off;                        /* recv: bytes copied out of the current slot */
    uint8_t boot[BOOT_BYTES];          /* send: the acceptor's answer, as it arrives */
    size_t nboot;
    cl_tr_req *head, *tail;
    char name[CL_HANDLE_BYTES + 32];
};

typedef struct pending {
    int fd;
    size_t n;
    uint8_t buf[BOOT_BYTES];
} pending;

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    struct cl_tr_listener *next_all;
    int fd;
    pending p[16];
    int np;
};

struct cl_tr_ctx {
    cl_ib_dev dev;
    cl_notifier *notifier;
    int timeout_ms;
    char ip[64];
    pthread_mutex_t mu;
    int efd, epfd;
    pthread_t thread;
    atomic_int stop;
    cl_tr_conn *conns;
    cl_tr_listener *listeners;
    cl_tr_req *live; /* freed at destroy: a caller may abandon a request (see test) */
    int down;
};

static void complete(cl_tr_req *r, int status)
{
    r->status = status;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    cl_notify(r->conn->ctx->notifier);
}

static void fail_all(cl_tr_conn *c, int status)
{
    if (!c->dead)
        c->dead = status;
    while (c->head) {
        cl_tr_req *r = c->head;
        c->head = r->next;
        complete(r, c->dead);
    }
    c->tail = NULL;
}

static void dequeue(cl_tr_conn *c)
{
    c->head = c->head->next;
    if (!c->head)
        c->tail = NULL;
}

static int post_recvs(cl_tr_conn *c, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_recv_wr wr = { .wr_id = WR_RECV }, *bad;
        if (c->ctx->dev.v->post_recv(c->qp, &wr, &bad))
            return -1;
    }
    return 0;
}

/* One RDMA WRITE WITH IMMEDIATE of n bytes from local to the peer's remote address. */
static int post_write(cl_tr_conn *c, void *local, uint32_t lkey, uint64_t remote, uint32_t n,
                      uint32_t imm)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = n, .lkey = lkey };
    struct ibv_send_wr wr = { .wr_id = WR_WRITE, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                              .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm),
                              .wr.rdma = { .remote_addr = remote, .rkey = c->rkey } },
                       *bad;
    if (c->ctx->dev.v->post_send(c->qp, &wr, &bad) == 0)
        return 0;
    cl_log(COLL_LOG_ERROR, "ibverbs: %s: cannot post a write", c->name);
    fail_all(c, COLL_EPEER);
    return -1;
}

/* The next chunk of the head send into slot `slot`; returns its length. */
static uint32_t fill_chunk(cl_tr_req *r, char *slot)
{
    size_t n = 0, total = HDR + r->len;
    if (r->moved == 0) {
        memcpy(slot, &r->hdr_out, HDR);
        n = r->moved = HDR;
    }
    size_t p = CL_MIN(SLOT_BYTES - n, total - r->moved);
    if (p) /* a zero-length message may have no buffer */
        memcpy(slot + n, (char *)r->buf + (r->moved - HDR), p);
    r->moved += p;
    return (uint32_t)(n + p);
}

/* Sends: as many chunks as the receiver's grants and our own slots allow. */
static void pump_send(cl_tr_conn *c)
{
    while (c->head && !c->dead && c->ready && c->posted != c->granted &&
           c->posted - c->written < SLOTS) {
        cl_tr_req *r = c->head;
        size_t slot = c->posted % SLOTS;
        char *mem = c->slots + slot * SLOT_BYTES;
        uint32_t n = fill_chunk(r, mem);
        if (post_write(c, mem, c->slots_mr->lkey, c->raddr + slot * SLOT_BYTES, n, n))
            return;
        c->posted++;
        if (r->moved == HDR + r->len) {
            dequeue(c);
            complete(r, COLL_OK);
        }
    }
}

/* A header arrived: sane, and does the payload fit? Fails the connection if not. */
static int header_ok(cl_tr_conn *c, cl_tr_req *r, uint32_t chunk)
{
    if (chunk < HDR || r->hdr_in->magic != CL_MSG_MAGIC) {
        fail_all(c, COLL_EPROTO);
        return 0;
    }
    if (r->hdr_in->len > r->len) {
        cl_log(COLL_LOG_ERROR, "ibverbs: %s sent a %u-byte message for a %zu-byte receive",
               c->name, r->hdr_in->len, r->len);
        fail_all(c, COLL_EMISMATCH);
        return 0;
    }
    return 1;
}

/* Copies landed chunks into the head receive; 0 when the stream is malformed. */
static int take_chunk(cl_tr_conn *c, cl_tr_req *r)
{
    size_t slot = c->consumed % SLOTS;
    const char *mem = c->slots + slot * SLOT_BYTES;
    uint32_t n = c->len[slot];
    if (r->moved == 0) {
        memcpy(r->hdr_in, mem, HDR);
        if (!header_ok(c, r, n))
            return 0;
        c->off = r->moved = HDR;
    }
    size_t total = HDR + r->hdr_in->len, p = CL_MIN(n - c->off, total - r->moved);
    if (p)
        memcpy((char *)r->buf + (r->moved - HDR), mem + c->off, p);
    c->off += p;
    r->moved += p;
    if (c->off == n) {
        c->consumed++;
        c->off = 0;
    }
    if (r->moved < total)
        return 1;
    if (c->off != 0) { /* chunks never span messages */
        fail_all(c, COLL_EPROTO);
        return 0;
    }
    r->len = r->hdr_in->len;
    dequeue(c);
    complete(r, COLL_OK);
    return 1;
}

/* Grants consumed slots back, in batches unless the receiver has caught up. */
static void grant(cl_tr_conn *c)
{
    uint32_t fresh = c->consumed - c->acked;
    if (fresh == 0 || c->grants_out >= SLOTS || c->dead)
        return;
    if (fresh < SLOTS / 2 && c->arrived != c->consumed)
        return;
    c->credit = c->consumed;
    if (post_write(c, &c->credit, c->credit_mr->lkey, c->raddr, sizeof(c->credit), c->consumed))
        return;
    c->acked = c->consumed;
    c->grants_out++;
}

static void pump_recv(cl_tr_conn *c)
{
    while (c->head && !c->dead && c->consumed != c->arrived && take_chunk(c, c->head))
        ;
    grant(c);
    /* The sender is gone and nothing more can land for the waiting receive. */
    if (c->peer_gone && c->head && !c->dead && c->consumed == c->arrived)
        fail_all(c, COLL_EPEER);
}

/* Under ctx->mu. */
static void pump(cl_tr_conn *c)
{
    if (c->is_recv)
        pump_recv(c);
    else
        pump_send(c);
}

static void on_completion(cl_tr_conn *c, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) {
        /* Flushed requests only follow the error that moved the QP to its error state. */
        cl_log(wc->status == IBV_WC_WR_FLUSH_ERR ? COLL_LOG_DEBUG : COLL_LOG_ERROR,
               "ibverbs: %s: %s", c->name, c->ctx->dev.v->wc_status_str(wc->status));
        fail_all(c, COLL_EPEER);
        return;
    }
    if (wc->wr_id == WR_WRITE) {
        if (c->is_recv)
            c->grants_out--;
        else
            c->written++;
        return;
    }
    uint32_t imm = ntohl(wc->imm_data);
    if (c->is_recv && (imm == 0 || imm > SLOT_BYTES)) {
        cl_log(COLL_LOG_ERROR, "ibverbs: %s: a %u-byte chunk does not fit a slot", c->name, imm);
        fail_all(c, COLL_EPROTO);
        return;
    }
    if (c->is_recv)
        c->len[c->arrived++ % SLOTS] = imm;
    else
        c->granted = imm + SLOTS;
    if (post_recvs(c, 1))
        fail_all(c, COLL_EPEER);
}

/* Drains c's CQ, re-arms its notification and drains again (the standard race fix). */
static void poll_conn(cl_tr_conn *c)
{
    const cl_verbs *v = c->ctx->dev.v;
    struct ibv_wc wc[16];
    for (int pass = 0; pass < 2; pass++) {
        int n;
        while ((n = v->poll_cq(c->cq, 16, wc)) > 0)
            for (int i = 0; i < n; i++)
                on_completion(c, &wc[i]);
        if (pass == 0)
            v->req_notify_cq(c->cq, 0);
    }
}

static void drain_channel(cl_tr_ctx *ctx)
{
    struct ibv_cq *cq;
    void *cq_ctx;
    while (ctx->dev.v->get_cq_event(ctx->dev.channel, &cq, &cq_ctx) == 0)
        ctx->dev.v->ack_cq_events(cq, 1);
}

static const char *event_name(enum ibv_event_type t)
{
    switch (t) {
    case IBV_EVENT_QP_FATAL: return "fatal queue pair error (async event)";
    case IBV_EVENT_QP_REQ_ERR: return "invalid request on the queue pair (async event)";
    case IBV_EVENT_QP_ACCESS_ERR: return "access error on the queue pair (async event)";
    case IBV_EVENT_PORT_ERR: return "port went down (async event)";
    case IBV_EVENT_DEVICE_FATAL: return "fatal device error (async event)";
    default: return "completion queue overrun (async event)";
    }
}

/* A fatal event on a QP fails its connection; on the port or device, every one. */
static void drain_async(cl_tr_ctx *ctx)
{
    struct ibv_async_event ev;
    while (ctx->dev.v->get_async_event(ctx->dev.ctx, &ev) == 0) {
        enum ibv_event_type t = ev.event_type;
        int qp_fatal = t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                       t == IBV_EVENT_QP_ACCESS_ERR;
        int all_fatal = t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_DEVICE_FATAL ||
                        t == IBV_EVENT_CQ_ERR;
        for (cl_tr_conn *c = ctx->conns; c && (qp_fatal || all_fatal); c = c->next_all)
            if (all_fatal || c->qp == ev.element.qp) {
                if (!c->dead)
                    cl_log(COLL_LOG_ERROR, "ibverbs: %s: %s", c->name, event_name(t));
                fail_all(c, COLL_EPEER);
            }
        ctx->dev.v->ack_async_event(&ev);
    }
}

static void close_sock(cl_tr_conn *c)
{
    if (c->sock >= 0) {
        epoll_ctl(c->ctx->epfd, EPOLL_CTL_DEL, c->sock, NULL);
        close(c->sock);
        c->sock = -1;
    }
}

static void on_lifeline(cl_tr_conn *c)
{
    if (!c->is_recv && !c->ready) { /* the acceptor's answer */
        ssize_t n = recv(c->sock, c->boot + c->nboot, sizeof(cl_ib_addr) - c->nboot, MSG_DONTWAIT);
        if (n > 0 && (c->nboot += (size_t)n) == sizeof(cl_ib_addr)) {
            cl_ib_addr a;
            memcpy(&a, c->boot, sizeof(a));
            c->raddr = a.addr, c->rkey = a.rkey;
            if (cl_ib_qp_connect(&c->ctx->dev, c->qp, &a, c->psn) || post_recvs(c, SLOTS)) {
                cl_log(COLL_LOG_ERROR, "ibverbs: %s: cannot bring the queue pair up", c->name);
                fail_all(c, COLL_EPEER);
            }
            c->ready = 1;
            c->granted = SLOTS;
        }
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
    } else {
        char b;
        ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
    }
    c->peer_gone = 1;
    close_sock(c);
    if (!c->is_recv)
        fail_all(c, COLL_EPEER);
    cl_log(COLL_LOG_DEBUG, "ibverbs: %s: peer closed", c->name);
}

static void *progress_main(void *arg)
{
    cl_tr_ctx *ctx = arg;
    struct epoll_event ev[16];
    while (!atomic_load(&ctx->stop)) {
        /* The timeout only guards against a lost wake-up. */
        int n = epoll_wait(ctx->epfd, ev, 16, 100);
        pthread_mutex_lock(&ctx->mu);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            uint64_t v;
            if (p == NULL) {
                if (read(ctx->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    cl_log(COLL_LOG_DEBUG, "ibverbs: eventfd: %s", strerror(errno));
            } else if (p == &tag_channel) {
                drain_channel(ctx);
            } else if (p == &tag_async) {
                drain_async(ctx);
            } else {
                on_lifeline(p);
            }
        }
        for (cl_tr_conn *c = ctx->conns; c; c = c->next_all) {
            poll_conn(c);
            pump(c);
        }
        pthread_mutex_unlock(&ctx->mu);
    }
    return NULL;
}

static int watch(cl_tr_ctx *ctx, int fd, void *tag)
{
    struct epoll_event e = { .events = EPOLLIN, .data.ptr = tag };
    return epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &e);
}

static int ctx_create(const cl_verbs *v, const char *verr, const cl_tr_config *cfg,
                      cl_tr_ctx **out)
{
    if (!v) {
        cl_log(COLL_LOG_ERROR, "%s", verr);
        return COLL_ENOTSUP;
    }
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    char err[200];
    int rc = cl_ib_dev_open(v, &ctx->dev, err, sizeof(err));
    if (rc == COLL_OK && cl_tcp_pick_iface(cfg->device, ctx->ip, sizeof(ctx->ip)) != 0) {
        snprintf(err, sizeof(err), "ibverbs: no interface for the bootstrap socket");
        rc = COLL_ENOTSUP;
        cl_ib_dev_close(&ctx->dev);
    }
    if (rc != COLL_OK) {
        cl_log(COLL_LOG_ERROR, "%s", err);
        free(ctx);
        return rc;
    }
    ctx->notifier = cfg->notifier;
    ctx->timeout_ms = cfg->timeout_ms;
    ctx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    pthread_mutex_init(&ctx->mu, NULL);
    if (ctx->efd < 0 || ctx->epfd < 0 || watch(ctx, ctx->efd, NULL) ||
        watch(ctx, ctx->dev.channel->fd, &tag_channel) ||
        watch(ctx, ctx->dev.ctx->async_fd, &tag_async) ||
        pthread_create(&ctx->thread, NULL, progress_main, ctx)) {
        if (ctx->efd >= 0)
            close(ctx->efd);
        if (ctx->epfd >= 0)
            close(ctx->epfd);
        pthread_mutex_destroy(&ctx->mu);
        cl_ib_dev_close(&ctx->dev);
        free(ctx);
        return COLL_ESYS;
    }
    *out = ctx;
    return COLL_OK;
}

static int ib_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    char err[256];
    const cl_verbs *v = cl_verbs_dl(err, sizeof(err));
    return ctx_create(v, err, cfg, out);
}

static int fake_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    return ctx_create(cl_verbs_fake(), NULL, cfg, out);
}

static void conn_free(cl_tr_conn *c)
{
    const cl_verbs *v = c->ctx->dev.v;
    if (c->qp)
        v->destroy_qp(c->qp);
    if (c->cq)
        v->destroy_cq(c->cq);
    if (c->slots_mr)
        v->dereg_mr(c->slots_mr);
    if (c->credit_mr)
        v->dereg_mr(c->credit_mr);
    free(c->slots);
    if (c->sock >= 0)
        close(c->sock);
    free(c);
}

static void close_listener_fds(cl_tr_listener *l)
{
    for (int i = 0; i < l->np; i++)
        close(l->p[i].fd);
    l->np = 0;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}

/* A send completes once its bytes are in our slots; let the writes still in flight land
 * before their queue pairs go, as closing a TCP socket still delivers what it holds. */
static void drain_writes(cl_tr_ctx *ctx)
{
    int64_t deadline = cl_now_ms() + ctx->timeout_ms;
    for (int busy = 1; busy && cl_now_ms() < deadline;) {
        busy = 0;
        pthread_mutex_lock(&ctx->mu);
        for (cl_tr_conn *c = ctx->conns; c; c = c->next_all)
            busy |= !c->is_recv && !c->dead && c->written != c->posted;
        pthread_mutex_unlock(&ctx->mu);
        if (busy)
            cl_sleep_ms(1);
    }
}

static void ib_ctx_destroy(cl_tr_ctx *ctx)
{
    drain_writes(ctx);
    atomic_store(&ctx->stop, 1);
    uint64_t one = 1;
    if (write(ctx->efd, &one, sizeof(one)) < 0)
        cl_log(COLL_LOG_DEBUG, "ibverbs: cannot wake the progress thread: %s", strerror(errno));
    pthread_join(ctx->thread, NULL);
    drain_channel(ctx); /* every event acknowledged before its CQ goes */
    for (cl_tr_conn *c = ctx->conns; c;) {
        cl_tr_conn *n = c->next_all;
        fail_all(c, COLL_EABORTED);
        conn_free(c);
        c = n;
    }
    for (cl_tr_listener *l = ctx->listeners; l;) {
        cl_tr_listener *n = l->next_all;
        close_listener_fds(l);
        free(l);
        l = n;
    }
    close(ctx->efd);
    close(ctx->epfd);
    /* Requests abandoned by callers that gave up on them (a farewell that never came). */
    for (cl_tr_req *r = ctx->live; r;) {
        cl_tr_req *n = r->live_next;
        free(r);
        r = n;
    }
    pthread_mutex_destroy(&ctx->mu);
    cl_ib_dev_close(&ctx->dev);
    free(ctx);
}

static int ib_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t alen = sizeof(a);
    inet_pton(AF_INET, ctx->ip, &a.sin_addr);
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof(a)) || listen(l->fd, 128) ||
        getsockname(l->fd, (struct sockaddr *)&a, &alen)) {
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return COLL_ESYS;
    }
    memset(handle, 0, CL_HANDLE_BYTES);
    snprintf(handle, CL_HANDLE_BYTES, "ib:%s:%u", ctx->ip, ntohs(a.sin_port));
    pthread_mutex_lock(&ctx->mu);
    l->next_all = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->mu);
    *out = l;
    return COLL_OK;
}

/* A connection with its CQ, QP in INIT and registered slots; NULL on failure. */
static cl_tr_conn *conn_new(cl_tr_ctx *ctx, int sock, int is_recv)
{
    const cl_verbs *v = ctx->dev.v;
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx, c->sock = sock, c->is_recv = is_recv;
    c->psn = (uint32_t)(cl_hash(&c, sizeof(c), (uint64_t)cl_now_us()) & 0xffffff);
    int remote = is_recv ? IBV_ACCESS_REMOTE_WRITE : 0;
    c->slots = aligned_alloc(4096, SLOTS * SLOT_BYTES);
    c->cq = v->create_cq(ctx->dev.ctx, 2 * SLOTS + 4, c, ctx->dev.channel, 0);
    if (!c->slots || !c->cq ||
        !(c->qp = cl_ib_qp_create(&ctx->dev, c->cq, SLOTS + 1, c)) ||
        !(c->slots_mr = v->reg_mr(ctx->dev.pd, c->slots, SLOTS * SLOT_BYTES,
                                  IBV_ACCESS_LOCAL_WRITE | remote)) ||
        !(c->credit_mr = v->reg_mr(ctx->dev.pd, &c->credit, sizeof(c->credit),
                                   IBV_ACCESS_LOCAL_WRITE | (is_recv ? 0 : IBV_ACCESS_REMOTE_WRITE))) ||
        v->req_notify_cq(c->cq, 0)) {
        cl_log(COLL_LOG_ERROR, "ibverbs: cannot create a queue pair or register its slots");
        c->sock = -1;
        conn_free(c);
        return NULL;
    }
    return c;
}

/* Registers a connection with the progress thread. */
static void conn_link(cl_tr_conn *c)
{
    struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
    pthread_mutex_lock(&c->ctx->mu);
    c->next_all = c->ctx->conns;
    c->ctx->conns = c;
    if (c->ctx->down)
        fail_all(c, c->ctx->down);
    epoll_ctl(c->ctx->epfd, EPOLL_CTL_ADD, c->sock, &e);
    pthread_mutex_unlock(&c->ctx->mu);
}

static int send_all(int fd, const void *p, size_t n)
{
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* A complete hello and address from the connector: bring the QP up and answer. */
static int accept_one(cl_tr_listener *l, pending *p, uint8_t hello[CL_HELLO_BYTES],
                      cl_tr_conn **out)
{
    cl_ib_addr peer, mine;
    memcpy(&peer, p->buf + CL_HELLO_BYTES, sizeof(peer));
    cl_tr_conn *c = conn_new(l->ctx, p->fd, 1);
    if (!c)
        return -1;
    cl_ib_local_addr(&l->ctx->dev, c->qp, c->psn, &mine);
    mine.addr = (uintptr_t)c->slots, mine.rkey = c->slots_mr->rkey;
    c->raddr = peer.addr, c->rkey = peer.rkey;
    if (cl_ib_qp_connect(&l->ctx->dev, c->qp, &peer, c->psn) || post_recvs(c, SLOTS) ||
        send_all(p->fd, &mine, sizeof(mine))) {
        cl_log(COLL_LOG_WARN, "ibverbs: cannot bring up the queue pair of a connection");
        c->sock = -1;
        conn_free(c);
        return -1;
    }
    c->ready = 1;
    snprintf(c->name, sizeof(c->name), "qp %u <- qp %u", mine.qpn, peer.qpn);
    memcpy(hello, p->buf, CL_HELLO_BYTES);
    conn_link(c);
    *out = c;
    return 1;
}

/* Reads what arrived on a pending socket: 1 connected, 0 not yet, -1 drop it. */
static int take_boot(cl_tr_listener *l, pending *p, uint8_t hello[CL_HELLO_BYTES],
                     cl_tr_conn **out)
{
    ssize_t n = recv(p->fd, p->buf + p->n, BOOT_BYTES - p->n, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        cl_log(COLL_LOG_WARN, "ibverbs: dropped a connection without a complete hello");
        return -1;
    }
    p->n += (size_t)n;
    return p->n < BOOT_BYTES ? 0 : accept_one(l, p, hello, out);
}

static int ib_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    int s;
    while (l->np < 16 && (s = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
        l->p[l->np++] = (pending){ .fd = s };
    for (int i = 0; i < l->np; i++) {
        int got = take_boot(l, &l->p[i], hello, out);
        if (got == 0)
            continue;
        if (got < 0)
            close(l->p[i].fd);
        l->p[i] = l->p[--l->np];
        if (got > 0)
            return COLL_OK;
        i--;
    }
    return COLL_INPROGRESS;
}

static void ib_close_listener(cl_tr_listener *l)
{
    close_listener_fds(l);
}

/* A TCP connection to "ib:IP:PORT" within the timeout, or -1. */
static int dial(const char *handle, int timeout_ms)
{
    char ip[64];
    unsigned port;
    struct sockaddr_in a = { .sin_family = AF_INET };
    if (sscanf(handle, "ib:%63[^:]:%u", ip, &port) != 2 || port > 65535 ||
        inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        return -2;
    a.sin_port = htons((uint16_t)port);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), err = 0, one = 1;
    socklen_t el = sizeof(err);
    if (s < 0)
        return -1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) {
        struct pollfd p = { .fd = s, .events = POLLOUT };
        if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
            getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            close(s);
            return -1;
        }
    }
    return s;
}

static int ib_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                      const uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    char h[CL_HANDLE_BYTES + 1];
    memcpy(h, handle, CL_HANDLE_BYTES);
    h[CL_HANDLE_BYTES] = 0;
    int s = dial(h, ctx->timeout_ms);
    if (s == -2)
        return COLL_EINVAL;
    cl_tr_conn *c = s >= 0 ? conn_new(ctx, s, 0) : NULL;
    if (!c) {
        if (s >= 0)
            close(s);
        return COLL_EPEER;
    }
    uint8_t boot[BOOT_BYTES];
    cl_ib_addr mine;
    cl_ib_local_addr(&ctx->dev, c->qp, c->psn, &mine);
    mine.addr = (uintptr_t)&c->credit, mine.rkey = c->credit_mr->rkey;
    memcpy(boot, hello, CL_HELLO_BYTES);
    memcpy(boot + CL_HELLO_BYTES, &mine, sizeof(mine));
    /* A fresh socket's buffer takes the few bytes at once, even non-blocking. */
    if (send_all(s, boot, sizeof(boot))) {
        conn_free(c);
        return COLL_EPEER;
    }
    snprintf(c->name, sizeof(c->name), "qp %u -> %s", mine.qpn, h + 3);
    conn_link(c);
    *out = c;
    return COLL_OK;
}

static cl_tr_req *new_req(cl_tr_conn *c)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (r)
        r->conn = c;
    return r;
}

/* Queues r on c and moves what can move now, in the caller's thread. */
static void enqueue(cl_tr_conn *c, cl_tr_req *r)
{
    pthread_mutex_lock(&c->ctx->mu);
    r->live_next = c->ctx->live; /* listed until tested, so destroy can free it */
    if (c->ctx->live)
        c->ctx->live->live_prev = r;
    c->ctx->live = r;
    if (c->dead) {
        complete(r, c->dead);
    } else {
        if (c->tail)
            c->tail->next = r;
        else
            c->head = r;
        c->tail = r;
        pump(c);
    }
    pthread_mutex_unlock(&c->ctx->mu);
}

static int ib_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_out = *hdr;
    r->buf = (void *)buf;
    r->len = hdr->len;
    *out = r;
    enqueue(c, r);
    return COLL_OK;
}

static int ib_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_in = hdr;
    r->buf = buf;
    r->len = cap;
    *out = r;
    enqueue(c, r);
    return COLL_OK;
}

static int ib_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    *done = 1;
    if (nbytes)
        *nbytes = r->len;
    int status = r->status;
    cl_tr_ctx *x = r->conn->ctx;
    pthread_mutex_lock(&x->mu);
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        x->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    pthread_mutex_unlock(&x->mu);
    free(r);
    return status;
}

static void ib_close_conn(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->ctx->mu);
    fail_all(c, COLL_EPEER);
    close_sock(c);
    pthread_mutex_unlock(&c->ctx->mu);
}

/* Only a ready send connection with no message half written and a free slot may carry
 * the farewell; returns 1 if it was posted. */
static int say_farewell(cl_tr_conn *c, const cl_msg_hdr *h)
{
    if (c->is_recv || c->dead || c->head || !c->ready || c->posted == c->granted ||
        c->posted - c->written >= SLOTS)
        return 0;
    size_t slot = c->posted % SLOTS;
    char *mem = c->slots + slot * SLOT_BYTES;
    memcpy(mem, h, HDR);
    if (post_write(c, mem, c->slots_mr->lkey, c->raddr + slot * SLOT_BYTES, HDR, HDR))
        return 0;
    c->posted++;
    return 1;
}

/* Waits (briefly) until the farewells have landed: closing the lifeline first could let
 * the peer see EOF before the message that says why. */
static void flush_farewells(cl_tr_ctx *ctx)
{
    int64_t deadline = cl_now_ms() + 200;
    for (;;) {
        int waiting = 0;
        for (cl_tr_conn *c = ctx->conns; c; c = c->next_all) {
            poll_conn(c);
            waiting |= !c->is_recv && !c->dead && c->written != c->posted;
        }
        if (!waiting || cl_now_ms() > deadline)
            return;
        cl_sleep_ms(1);
    }
}

static void ib_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    pthread_mutex_lock(&ctx->mu);
    if (!ctx->down)
        ctx->down = status;
    int said = 0;
    for (cl_tr_conn *c = ctx->conns; c && farewell; c = c->next_all)
        said |= say_farewell(c, farewell);
    if (said)
        flush_farewells(ctx);
    for (cl_tr_conn *c = ctx->conns; c; c = c->next_all) {
        fail_all(c, status);
        close_sock(c);
    }
    pthread_mutex_unlock(&ctx->mu);
}

static const char *ib_peer_name(cl_tr_conn *c)
{
    return c->name;
}

#define IB_OPS                                                                              \
    .ctx_destroy = ib_ctx_destroy, .listen = ib_listen, .accept = ib_accept,                \
    .close_listener = ib_close_listener, .connect = ib_connect, .isend = ib_isend,          \
    .irecv = ib_irecv, .test = ib_test, .close_conn = ib_close_conn, .shutdown = ib_shutdown, \
    .peer_name = ib_peer_name

const cl_transport cl_transport_ibverbs = { .name = "ibverbs", .ctx_create = ib_ctx_create,
                                            IB_OPS };
const cl_transport cl_transport_ibverbs_fake = { .name = "ibverbs-fake",
                                                 .ctx_create = fake_ctx_create, IB_OPS };
