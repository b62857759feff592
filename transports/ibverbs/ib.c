/* The ibverbs transport, set-up half: device, listeners, the TCP bootstrap that carries
 * queue pair addresses and then stays open as a lifeline (EOF means the peer closed or
 * died, which RDMA alone reports only after its retry timers run out), and a progress
 * thread sleeping on the completion channel, the async event fd and the lifelines.
 * The protocol on the queue pairs is in ib_data.c. */
#include "transports/ibverbs/ib_conn.h"

#include "transports/accept.h"

#include "transports/iface.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char tag_channel, tag_async; /* epoll data for the two device fds */

_Static_assert(BOOT_BYTES <= CL_PENDING_BYTES, "the bootstrap fits a pending buffer");

struct cl_tr_listener {
    cl_listener base; /* first */
    cl_tr_ctx *ctx;
};

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
        for (cl_tr_conn *c = ctx->set.all; c && (qp_fatal || all_fatal); c = c->base.next)
            if (all_fatal || c->qp == ev.element.qp) {
                if (!c->base.dead)
                    cl_log(COLL_LOG_ERROR, "ibverbs: %s: %s", c->name, event_name(t));
                cl_ib_fail_all(c, COLL_EPEER);
            }
        ctx->dev.v->ack_async_event(&ev);
    }
}

static void on_lifeline(cl_tr_conn *c)
{
    if (!c->is_recv && !c->ready) { /* the acceptor's answer */
        ssize_t n =
            recv(c->base.sock, c->boot + c->nboot, sizeof(cl_ib_addr) - c->nboot, MSG_DONTWAIT);
        if (n > 0 && (c->nboot += (size_t)n) == sizeof(cl_ib_addr)) {
            cl_ib_addr a;
            memcpy(&a, c->boot, sizeof(a));
            c->raddr = a.addr, c->rkey = a.rkey;
            if (cl_ib_qp_connect(&c->ctx->dev, c->qp, &a, c->psn) || cl_ib_post_recvs(c, RECV_DEPTH)) {
                cl_log(COLL_LOG_ERROR, "ibverbs: %s: cannot bring the queue pair up", c->name);
                cl_ib_fail_all(c, COLL_EPEER);
            }
            c->ready = 1;
            c->granted = SLOTS;
        }
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
    } else {
        char b;
        ssize_t n = recv(c->base.sock, &b, 1, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
    }
    c->peer_gone = 1;
    cl_conn_close_sock(c);
    if (!c->is_recv) { /* a write acknowledged before the EOF counts; one in flight decides
                        * by its own completion (success, or an error once retries run out) */
        cl_ib_poll(c);
        cl_ib_fail_queued(c, COLL_EPEER);
    }
    cl_log(COLL_LOG_DEBUG, "ibverbs: %s: peer closed", c->name);
}

static void on_ready(void *arg, void *tag)
{
    if (tag == &tag_channel)
        drain_channel(arg);
    else if (tag == &tag_async)
        drain_async(arg);
    else
        on_lifeline(tag);
}

static void on_round(void *arg)
{
    for (cl_tr_conn *c = ((cl_tr_ctx *)arg)->set.all; c; c = c->base.next) {
        cl_ib_poll(c);
        cl_ib_pump(c);
    }
}

static const cl_conn_ops ib_ops;

static int ctx_create(const cl_transport *tr, const cl_verbs *v, const char *verr,
                      const cl_tr_config *cfg, cl_tr_ctx **out)
{
    if (!v) {
        cl_tr_error(cfg, "%s", verr);
        return COLL_ENOTSUP;
    }
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    char err[200];
    int rc = cl_ib_dev_open(v, &ctx->dev, err, sizeof(err));
    char why[150];
    if (rc == COLL_OK && cl_pick_iface(cfg->device, cfg->family, &ctx->at, why, sizeof(why))) {
        snprintf(err, sizeof(err), "ibverbs: no interface for the bootstrap socket: %s", why);
        rc = COLL_ENOTSUP;
        cl_ib_dev_close(&ctx->dev);
    }
    if (rc == COLL_OK && !(ctx->mrs = cl_mr_cache_new(v, ctx->dev.pd))) {
        snprintf(err, sizeof(err), "ibverbs: out of memory");
        rc = COLL_ENOMEM;
        cl_ib_dev_close(&ctx->dev);
    }
    if (rc != COLL_OK) {
        cl_tr_error(cfg, "%s", err);
        free(ctx);
        return rc;
    }
    cl_conns_init(&ctx->set, &ib_ops, tr, cfg);
    ctx->timeout_ms = cfg->timeout_ms;
    if ((rc = cl_progress_start(&ctx->set.pg, on_ready, on_round, ctx)) == COLL_OK &&
        (cl_progress_watch(&ctx->set.pg, ctx->dev.channel->fd, &tag_channel) ||
         cl_progress_watch(&ctx->set.pg, ctx->dev.ctx->async_fd, &tag_async))) {
        cl_progress_stop(&ctx->set.pg);
        cl_progress_close(&ctx->set.pg);
        rc = COLL_ESYS;
    }
    if (rc != COLL_OK) {
        cl_mr_cache_free(ctx->mrs);
        cl_ib_dev_close(&ctx->dev);
        free(ctx);
        return rc;
    }
    *out = ctx;
    return COLL_OK;
}

static int ib_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    char err[256];
    const cl_verbs *v = cl_verbs_dl(err, sizeof(err));
    return ctx_create(&cl_transport_ibverbs, v, err, cfg, out);
}

static int has_device;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
    char err[256];
    const cl_verbs *v = cl_verbs_dl(err, sizeof(err));
    int n = 0;
    struct ibv_device **list = v ? v->get_device_list(&n) : NULL;
    if (list)
        v->free_device_list(list);
    has_device = n > 0;
}

int cl_ibverbs_present(void)
{
    pthread_once(&probe_once, probe);
    return has_device;
}

static int fake_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    return ctx_create(&cl_transport_ibverbs_fake, cl_verbs_fake(), NULL, cfg, out);
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
    if (c->box_mr)
        v->dereg_mr(c->box_mr);
    free(c->slots);
    if (c->base.sock >= 0)
        close(c->base.sock);
    free(c);
}

/* A send completes once its bytes are in our slots; let the writes still in flight land
 * before their queue pairs go, as closing a TCP socket still delivers what it holds. */
static void drain_writes(cl_tr_ctx *ctx)
{
    int64_t deadline = cl_now_ms() + ctx->timeout_ms;
    for (int busy = 1; busy && cl_now_ms() < deadline;) {
        busy = 0;
        cl_lock_take(&ctx->set.pg.mu);
        for (cl_tr_conn *c = ctx->set.all; c; c = c->base.next)
            busy |= !c->is_recv && !c->base.dead && (c->written != c->posted || c->pieces_out);
        cl_lock_give(&ctx->set.pg.mu);
        if (busy)
            cl_sleep_ms(1);
    }
}

static void ib_ctx_destroy(cl_tr_ctx *ctx)
{
    drain_writes(ctx);
    cl_progress_stop(&ctx->set.pg);
    drain_channel(ctx); /* every event acknowledged before its CQ goes */
    cl_conns_free(&ctx->set);
    cl_mr_cache_free(ctx->mrs);
    cl_ib_dev_close(&ctx->dev);
    free(ctx);
}

static int ib_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    cl_addr a = ctx->at;
    int fd = cl_addr_listen(&a, SOCK_NONBLOCK, 128);
    if (fd < 0) {
        free(l);
        return COLL_ESYS;
    }
    memset(handle, 0, CL_HANDLE_BYTES);
    memcpy(handle, "ib:", 3);
    cl_addr_text(&a, handle + 3, CL_HANDLE_BYTES - 3);
    cl_conns_add_listener(&ctx->set, l, fd);
    *out = l;
    return COLL_OK;
}

/* A connection with its CQ, QP in INIT and registered slots; NULL on failure. */
static cl_tr_conn *conn_new(cl_tr_ctx *ctx, int sock, int is_recv, size_t slot_bytes)
{
    const cl_verbs *v = ctx->dev.v;
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->base.set = &ctx->set, c->base.sock = sock;
    c->ctx = ctx, c->is_recv = is_recv, c->slot_bytes = slot_bytes;
    c->psn = (uint32_t)(cl_hash(&c, sizeof(c), (uint64_t)cl_now_us()) & 0xffffff);
    int remote = is_recv ? IBV_ACCESS_REMOTE_WRITE : 0;
    c->slots = aligned_alloc(4096, SLOTS * slot_bytes);
    c->cq = v->create_cq(ctx->dev.ctx, SEND_DEPTH + RECV_DEPTH, c, ctx->dev.channel, 0);
    if (!c->slots || !c->cq ||
        !(c->qp = cl_ib_qp_create(&ctx->dev, c->cq, SEND_DEPTH, RECV_DEPTH, c)) ||
        !(c->slots_mr = v->reg_mr(ctx->dev.pd, c->slots, SLOTS * slot_bytes,
                                  IBV_ACCESS_LOCAL_WRITE | remote)) ||
        !(c->box_mr = v->reg_mr(ctx->dev.pd, &c->box, sizeof(c->box),
                                   IBV_ACCESS_LOCAL_WRITE | (is_recv ? 0 : IBV_ACCESS_REMOTE_WRITE))) ||
        v->req_notify_cq(c->cq, 0)) {
        cl_log(COLL_LOG_ERROR, "ibverbs: cannot create a queue pair or register its slots");
        c->base.sock = -1;
        conn_free(c);
        return NULL;
    }
    return c;
}

static int send_all(int fd, const void *p, size_t n)
{
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* A complete hello and address from the connector: once the hello passes, bring the QP
 * up and answer (nothing registered or told before). */
static int accept_one(cl_tr_listener *l, cl_pending *p, uint8_t hello[CL_HELLO_BYTES],
                      cl_tr_conn **out)
{
    cl_ib_addr peer, mine;
    memcpy(&peer, p->buf + CL_HELLO_BYTES, sizeof(peer));
    size_t slot = (size_t)peer.slot_kib << 10;
    if (!cl_listen_vet(&l->base.lfd, p->buf, "ibverbs"))
        return -1;
    if (slot < SLOT_MIN || slot > SLOT_MAX || (slot & (slot - 1))) {
        cl_log(COLL_LOG_WARN, "ibverbs: dropped a connection asking for %zu-byte slots", slot);
        return -1;
    }
    cl_tr_conn *c = conn_new(l->ctx, p->fd, 1, slot);
    if (!c)
        return -1;
    cl_ib_local_addr(&l->ctx->dev, c->qp, c->psn, &mine);
    mine.addr = (uintptr_t)c->slots, mine.rkey = c->slots_mr->rkey;
    c->raddr = peer.addr, c->rkey = peer.rkey;
    if (cl_ib_qp_connect(&l->ctx->dev, c->qp, &peer, c->psn) || cl_ib_post_recvs(c, RECV_DEPTH) ||
        send_all(p->fd, &mine, sizeof(mine))) {
        cl_log(COLL_LOG_WARN, "ibverbs: cannot bring up the queue pair of a connection");
        c->base.sock = -1;
        conn_free(c);
        return -1;
    }
    c->ready = 1;
    snprintf(c->name, sizeof(c->name), "qp %u <- qp %u", mine.qpn, peer.qpn);
    memcpy(hello, p->buf, CL_HELLO_BYTES);
    cl_conn_link(c);
    *out = c;
    return 1;
}

/* Reads what arrived on a pending socket: 1 connected, 0 not yet, -1 drop it. */
static int take_boot(void *arg, cl_pending *p)
{
    cl_accepting *a = arg;
    ssize_t n = recv(p->fd, p->buf + p->n, BOOT_BYTES - p->n, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        cl_log(COLL_LOG_WARN, "ibverbs: dropped a connection without a complete hello");
        return -1;
    }
    p->n += (size_t)n;
    return p->n < BOOT_BYTES ? 0 : accept_one(a->l, p, a->hello, a->out);
}

static int ib_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    cl_accepting a = {l, hello, out};
    return cl_listen_accept(&l->base.lfd, take_boot, &a);
}

/* A TCP connection to "ib:IP:PORT" within the timeout, or -1. */
static int dial(const char *handle, int timeout_ms)
{
    cl_addr a;
    if (strncmp(handle, "ib:", 3) != 0 || cl_addr_parse(handle + 3, &a) != 0)
        return -2;
    int s = cl_addr_dial(&a, SOCK_NONBLOCK), err = 0;
    socklen_t el = sizeof(err);
    if (s < 0)
        return -1;
    struct pollfd p = { .fd = s, .events = POLLOUT };
    if (poll(&p, 1, timeout_ms) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) || err ||
        cl_addr_self_dialed(s)) {
        close(s);
        return -1;
    }
    return s;
}

static int ib_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                      const uint8_t hello[CL_HELLO_BYTES], size_t want,
                      cl_tr_conn **out)
{
    size_t slot = SLOT_MIN;
    while (slot < SLOT_MAX && slot * SLOTS < want)
        slot <<= 1;
    char h[CL_HANDLE_BYTES + 1];
    memcpy(h, handle, CL_HANDLE_BYTES);
    h[CL_HANDLE_BYTES] = 0;
    int s = dial(h, ctx->timeout_ms);
    if (s == -2)
        return COLL_EINVAL;
    cl_tr_conn *c = s >= 0 ? conn_new(ctx, s, 0, slot) : NULL;
    if (!c) {
        if (s >= 0)
            close(s);
        return COLL_EPEER;
    }
    uint8_t boot[BOOT_BYTES];
    cl_ib_addr mine;
    cl_ib_local_addr(&ctx->dev, c->qp, c->psn, &mine);
    mine.addr = (uintptr_t)&c->box, mine.rkey = c->box_mr->rkey;
    mine.slot_kib = (uint16_t)(slot >> 10);
    memcpy(boot, hello, CL_HELLO_BYTES);
    memcpy(boot + CL_HELLO_BYTES, &mine, sizeof(mine));
    /* A fresh socket's buffer takes the few bytes at once, even non-blocking. */
    if (send_all(s, boot, sizeof(boot))) {
        conn_free(c);
        return COLL_EPEER;
    }
    snprintf(c->name, sizeof(c->name), "qp %u -> %s", mine.qpn, h + 3);
    cl_conn_link(c);
    *out = c;
    return COLL_OK;
}

/* Waits (briefly) until the farewells have landed: closing the lifeline first could let
 * the peer see EOF before the message that says why. */
static void flush_farewells(cl_conns *s)
{
    int64_t deadline = cl_now_ms() + 200;
    for (;;) {
        int waiting = 0;
        for (cl_tr_conn *c = s->all; c; c = c->base.next) {
            cl_ib_poll(c);
            waiting |= !c->is_recv && !c->base.dead && c->written != c->posted;
        }
        if (!waiting || cl_now_ms() > deadline)
            return;
        cl_sleep_ms(1);
    }
}

static void ib_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    cl_conns_shutdown(&ctx->set, status, farewell);
}

static const cl_conn_ops ib_ops = {
    .fail = cl_ib_fail_all,
    .queued = cl_ib_pump,
    .farewell = cl_ib_farewell,
    .flush = flush_farewells,
    .release = conn_free,
};

static const char *ib_peer_name(cl_tr_conn *c)
{
    return c->name;
}

static uint32_t ib_speed_mbps(cl_tr_ctx *ctx)
{
    return ctx->dev.speed_mbps;
}

#define IB_OPS                                                                              \
    .ctx_destroy = ib_ctx_destroy, .listen = ib_listen, .accept = ib_accept,                \
    .close_listener = cl_listener_close, .connect = ib_connect, .isend = cl_conn_isend,     \
    .irecv = cl_conn_irecv, .test = cl_req_test, .moved = cl_req_moved,                     \
    .close_conn = cl_conn_close, .shutdown = ib_shutdown,                                   \
    .peer_name = ib_peer_name, .speed_mbps = ib_speed_mbps

const cl_transport cl_transport_ibverbs = { .name = "ibverbs", .ctx_create = ib_ctx_create,
                                            IB_OPS };
const cl_transport cl_transport_ibverbs_fake = { .name = "ibverbs-fake",
                                                 .ctx_create = fake_ctx_create, IB_OPS };
