/* The tcp transport on libuv. One loop thread per context owns every libuv handle:
 * listening, connecting, the hello with its timeout, and watching data sockets that
 * nobody polls. Other threads hand it work through a command queue and uv_async_send,
 * because libuv is not thread-safe otherwise. Message bytes move in tcp_io.c, on any
 * thread, under each connection's own mutex. This file must never block the loop thread
 * and never touch a request after marking it done (the owner may free it at once). */
#include "transports/iface.h"
#include "transports/tcp/tcp_conn.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum cmd_kind { CMD_ARM, CMD_CONNECT, CMD_LISTEN, CMD_CLOSE, CMD_SHUTDOWN, CMD_STOP };

/* Accepted connections whose hello is not all in, at most, per listener: a newer one
 * pushes out the oldest, so strangers cannot hold the listener's descriptors. A hello
 * that is there when the connection is accepted is taken at once and never counts, so
 * a whole job dialing one rank does not push its own ranks out. */
enum { PENDING_MAX = 64 };

struct cl_tr_listener {
    uv_tcp_t tcp;
    cl_tr_ctx *ctx;
    int fd;
    struct cl_tr_listener *next_all;     /* ctx->listeners */
    cl_tr_conn *ready_head, *ready_tail; /* accepted with a full hello, under ctx->mu */
    cl_tr_conn *pending;                 /* oldest first (loop thread) */
    int npending;
    int closed;
};

struct cmd {
    enum cmd_kind kind;
    struct cmd *next;
    cl_tr_conn *conn;
    cl_tr_listener *listener;
    int status;
    cl_msg_hdr farewell;
    int has_farewell;
};

static void post(cl_tr_ctx *ctx, struct cmd c)
{
    struct cmd *p = malloc(sizeof(*p));
    if (!p)
        abort(); /* a small allocation failing leaves nothing sane to do */
    *p = c;
    p->next = NULL;
    pthread_mutex_lock(&ctx->mu);
    if (ctx->cmd_tail)
        ctx->cmd_tail->next = p;
    else
        ctx->cmd_head = p;
    ctx->cmd_tail = p;
    pthread_mutex_unlock(&ctx->mu);
    uv_async_send(&ctx->async);
}

void cl_tcp_arm(cl_tr_conn *c)
{
    post(c->ctx, (struct cmd){.kind = CMD_ARM, .conn = c});
}

/* ---- the data socket, seen from the loop ------------------------------------------ */

/* An error on the socket (a reset: libuv stops watching and says UV_EBADF) is left to the
 * data path: a read meets it only after the bytes that came before it, which may be the
 * peer's farewell (a peer that closes with our bytes unread resets the connection). */
static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)events;
    cl_tr_conn *c = h->data;
    pthread_mutex_lock(&c->io);
    if (status < 0)
        c->watching = 0;
    cl_tcp_progress(c, NULL);
    cl_tcp_reconcile(c);
    pthread_mutex_unlock(&c->io);
}

void cl_tcp_reconcile(cl_tr_conn *c)
{
    int want = 0;
    if (c->fd >= 0 && !c->dead && atomic_load(&c->ctx->pollers) == 0)
        want = (c->recvq_head ? UV_READABLE : 0) | (c->send_blocked ? UV_WRITABLE : 0);
    if (want != c->watching && c->has_poll) {
        if (want)
            uv_poll_start(&c->poll, want, on_poll);
        else
            uv_poll_stop(&c->poll);
        c->watching = want;
    }
    c->asked = want;
}

static void do_arm(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->io);
    cl_tcp_progress(c, NULL);
    cl_tcp_reconcile(c);
    pthread_mutex_unlock(&c->io);
}

static void mark_dead(cl_tr_conn *c, int status, const char *why)
{
    pthread_mutex_lock(&c->io);
    if (!c->dead)
        cl_log(COLL_LOG_DEBUG, "tcp: connection %s failed: %s", c->name, why);
    cl_tcp_fail(c, status);
    pthread_mutex_unlock(&c->io);
    if (c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
}

/* ---- a connection's memory ------------------------------------------------------- */

static cl_tr_conn *conn_new(cl_tr_ctx *ctx)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx;
    c->fd = -1;
    pthread_mutex_init(&c->io, NULL);
    return c;
}

static void conn_list(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->ctx->mu);
    c->next_all = c->ctx->conns;
    c->ctx->conns = c;
    c->listed = 1;
    pthread_mutex_unlock(&c->ctx->mu);
}

static void conn_free(cl_tr_conn *c)
{
    if (c->fd >= 0) /* only if the loop never got to close it */
        close(c->fd);
    for (cl_tr_req *r = c->sendq_head, *n; r; r = n) { /* the rest are ctx->reqs' */
        n = r->next;
        if (r->owned)
            free(r);
    }
    pthread_mutex_destroy(&c->io);
    free(c->rb);
    free(c);
}

static void free_graves(cl_tr_ctx *ctx)
{
    while (ctx->graves) {
        cl_tr_conn *n = ctx->graves->next_grave;
        conn_free(ctx->graves);
        ctx->graves = n;
    }
}

/* A connection closed for good whose handles libuv has let go of. Only a poller walking
 * ctx->conns may still hold a listed one, so it is unlinked and freed once none walks:
 * a poller that starts later cannot reach it. */
static void release(cl_tr_conn *c)
{
    cl_tr_ctx *ctx = c->ctx;
    if (!c->listed) {
        conn_free(c);
        return;
    }
    pthread_mutex_lock(&ctx->mu);
    cl_tr_conn **p = &ctx->conns;
    while (*p != c)
        p = &(*p)->next_all;
    __atomic_store_n(p, c->next_all, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ctx->mu);
    c->next_grave = ctx->graves;
    ctx->graves = c;
    if (atomic_load(&ctx->walkers) == 0)
        free_graves(ctx);
}

/* c is closed for good and its handles are closing: it goes when the last one has. */
static void bury(cl_tr_conn *c)
{
    c->gone = 1;
    if (c->handles == 0)
        release(c);
}

static void on_closed(uv_handle_t *h)
{
    cl_tr_conn *c = h->data;
    if (h == (uv_handle_t *)&c->poll)
        close(c->poll_fd);
    if (--c->handles == 0 && c->gone)
        release(c);
}

static void close_setup_handles(cl_tr_conn *c)
{
    if (c->setup_closed)
        return;
    c->setup_closed = 1;
    if (c->timer_on)
        uv_close((uv_handle_t *)&c->hello_timer, on_closed);
    c->timer_on = 0;
    if (c->tcp.loop)
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* Closes the connection for good; the socket is closed once libuv lets go of it. */
static void close_conn_handles(cl_tr_conn *c)
{
    close_setup_handles(c);
    pthread_mutex_lock(&c->io);
    int fd = c->fd, has_poll = c->has_poll;
    c->fd = -1;
    c->has_poll = 0;
    pthread_mutex_unlock(&c->io);
    if (has_poll) {
        c->poll_fd = fd;
        uv_close((uv_handle_t *)&c->poll, on_closed);
    } else if (fd >= 0) {
        close(fd);
    }
}

/* After the hello: the socket leaves libuv's stream (which would read and write it on
 * this thread only) for our own data path; the loop keeps a poll handle on it. */
static void to_data_mode(cl_tr_conn *c)
{
    int fd = -1, dup_fd = -1;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
    close_setup_handles(c);
    if (dup_fd < 0 || uv_poll_init_socket(&c->ctx->loop, &c->poll, dup_fd) != 0) {
        if (dup_fd >= 0)
            close(dup_fd);
        mark_dead(c, COLL_EPEER, "cannot take over the socket");
        return;
    }
    c->handles++;
    c->poll.data = c;
    pthread_mutex_lock(&c->io);
    c->fd = dup_fd;
    c->has_poll = 1;
    cl_tcp_progress(c, NULL);
    cl_tcp_reconcile(c);
    pthread_mutex_unlock(&c->io);
}

/* ---- the hello -------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    cl_tr_conn *c = h->data;
    *buf = uv_buf_init((char *)c->hello + c->hello_got, (unsigned)(CL_HELLO_BYTES - c->hello_got));
}

static void unpend(cl_tr_conn *c)
{
    if (!c->pending)
        return;
    cl_tr_listener *l = c->listener;
    cl_tr_conn **p = &l->pending;
    while (*p != c)
        p = &(*p)->next_pending;
    *p = c->next_pending;
    c->pending = 0;
    l->npending--;
}

/* An accepted connection that will not be one: closed, and freed once libuv lets go. */
static void discard(cl_tr_conn *c, const char *why)
{
    cl_log(COLL_LOG_DEBUG, "tcp: dropped connection from %s: %s", c->name, why);
    unpend(c);
    mark_dead(c, COLL_EPROTO, why);
    close_setup_handles(c);
    bury(c);
}

static void discard_pending(cl_tr_listener *l)
{
    while (l->pending)
        discard(l->pending, "the listener closed");
}

/* The hello is in: the caller's vet refuses it at once, or it waits for accept(). */
static void hello_done(cl_tr_conn *c)
{
    cl_tr_listener *l = c->listener;
    const char *why = c->ctx->vet ? c->ctx->vet(c->ctx->vet_arg, c->hello) : NULL;
    if (why) {
        cl_log(COLL_LOG_WARN, "tcp: refused connection from %s: %s (%s)", c->name,
               coll_strerror(COLL_EPROTO), why);
        discard(c, why);
        return;
    }
    unpend(c);
    conn_list(c);
    to_data_mode(c);
    pthread_mutex_lock(&c->ctx->mu);
    if (l->ready_tail)
        l->ready_tail->next_ready = c;
    else
        l->ready_head = c;
    l->ready_tail = c;
    pthread_mutex_unlock(&c->ctx->mu);
    cl_notify(c->ctx->notifier);
}

static void took_hello_bytes(cl_tr_conn *c, size_t n)
{
    c->hello_got += n;
    if (c->hello_got == CL_HELLO_BYTES)
        hello_done(c);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    cl_tr_conn *c = s->data;
    if (n == UV_ENOBUFS || n == 0)
        return;
    if (n < 0)
        discard(c, uv_strerror((int)n));
    else
        took_hello_bytes(c, (size_t)n);
}

/* What of the hello is there already (a rank sends it as soon as it is connected). */
static void read_hello_now(cl_tr_conn *c)
{
    int fd = -1;
    ssize_t n = -1;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        n = recv(fd, c->hello, CL_HELLO_BYTES, MSG_DONTWAIT);
    if (n > 0)
        took_hello_bytes(c, (size_t)n);
}

static void start_reading(cl_tr_conn *c)
{
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = 1;
    else
        discard(c, "read_start failed");
}

/* ---- connections ----------------------------------------------------------------- */

/* A peer whose host vanished or whose network went away is found within about the
 * peer timeout T on an idle link: keepalive probes it (first after T/2, then every T/6,
 * three unanswered end it). A link with bytes on their way is the heartbeat's to judge
 * (lib/core/beat.c) while a collective waits, and the operation timeout's. No
 * TCP_USER_TIMEOUT: Linux (since 5.11) counts a receive window kept shut as bytes
 * unacknowledged, and a peer busy in its own code (evaluating, writing a checkpoint)
 * shuts it while more than the socket buffers hold waits for its receive, so at T a busy
 * rank's link was reset and the job failed (test fault, a_busy_rank_is_not_a_dead_one);
 * and where it is set it replaces keepalive's count of probes by its own time, so at the
 * operation timeout an idle link's vanished host went unseen for that long (30 minutes
 * by default) instead of T (test fault, bad-links' receive from a vanished host). */
static void tune_socket(uv_tcp_t *t, int peer_timeout_ms)
{
    uv_tcp_nodelay(t, 1);
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)t, &fd) != 0)
        return;
    int on = 1, idle = CL_MAX(1, peer_timeout_ms / 2000), intvl = CL_MAX(1, peer_timeout_ms / 6000);
    int cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static int conn_dead(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->io);
    int dead = c->dead;
    pthread_mutex_unlock(&c->io);
    return dead;
}

/* A fresh socket's buffer takes the 64-byte hello whole; anything else is a failure. */
static int send_hello(cl_tr_conn *c)
{
    int fd = -1;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return -1;
    ssize_t n;
    do
        n = send(fd, c->hello, CL_HELLO_BYTES, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == CL_HELLO_BYTES ? 0 : -1;
}

static void on_connect(uv_connect_t *req, int status)
{
    cl_tr_conn *c = req->data;
    int dead = conn_dead(c);
    if (status < 0 || dead) {
        mark_dead(c, dead ? dead : COLL_EPEER, status < 0 ? uv_strerror(status) : "closed");
        return;
    }
    tune_socket(&c->tcp, c->ctx->timeout_ms);
    if (send_hello(c) != 0) {
        mark_dead(c, COLL_EPEER, "cannot send the hello");
        return;
    }
    to_data_mode(c);
}

static void do_connect(cl_tr_conn *c)
{
    uv_tcp_init(&c->ctx->loop, &c->tcp);
    c->handles++;
    c->tcp.data = c;
    c->connect_req.data = c;
    int rc = c->ctx->shutdown_status;
    if (!rc && uv_tcp_connect(&c->connect_req, &c->tcp, (struct sockaddr *)&c->addr.sa,
                                on_connect))
        rc = COLL_EPEER;
    if (rc)
        mark_dead(c, rc, "connect failed");
}

static void on_hello_timeout(uv_timer_t *t)
{
    cl_tr_conn *c = t->data;
    cl_log(COLL_LOG_WARN, "tcp: dropped connection from %s: no handshake within %d ms", c->name,
           c->ctx->timeout_ms);
    discard(c, "no hello");
}

/* An accepted connection waits for its hello, bounded in time (the timer) and in number
 * (PENDING_MAX), unless the hello is there already. */
static void await_hello(cl_tr_listener *l, cl_tr_conn *c)
{
    read_hello_now(c);
    if (c->hello_got == CL_HELLO_BYTES || c->gone)
        return;
    uv_timer_init(&l->ctx->loop, &c->hello_timer);
    c->handles++;
    c->hello_timer.data = c;
    c->timer_on = 1;
    uv_timer_start(&c->hello_timer, on_hello_timeout, (uint64_t)l->ctx->timeout_ms, 0);
    cl_tr_conn **p = &l->pending;
    while (*p)
        p = &(*p)->next_pending;
    *p = c;
    c->pending = 1;
    if (++l->npending > PENDING_MAX)
        discard(l->pending, "pushed out by a newer one (too many pending)");
    start_reading(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    cl_tr_listener *l = server->data;
    if (status < 0)
        return;
    cl_tr_conn *c = conn_new(l->ctx);
    if (!c)
        return;
    c->listener = l;
    uv_tcp_init(&l->ctx->loop, &c->tcp);
    c->handles++;
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        discard(c, "accept failed");
        return;
    }
    cl_addr peer = {.len = sizeof(peer.sa)};
    int len = (int)peer.len;
    uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer.sa, &len);
    peer.len = (socklen_t)len;
    cl_addr_text(&peer, c->name, sizeof(c->name));
    tune_socket(&c->tcp, c->ctx->timeout_ms);
    await_hello(l, c);
}

static void do_listen(cl_tr_listener *l)
{
    uv_tcp_init(&l->ctx->loop, &l->tcp);
    l->tcp.data = l;
    if (uv_tcp_open(&l->tcp, l->fd) != 0 ||
        uv_listen((uv_stream_t *)&l->tcp, 1024, on_connection) != 0)
        cl_log(COLL_LOG_ERROR, "tcp: cannot listen on fd %d", l->fd);
}

/* A connection nobody made a request on (one accept()'s caller refused) is freed once
 * closed; the others live until the context does, as their requests point at them. */
static void do_close(cl_tr_conn *c, cl_tr_listener *l)
{
    if (c) {
        mark_dead(c, COLL_EPEER, "closed locally");
        close_conn_handles(c);
        pthread_mutex_lock(&c->ctx->mu);
        int used = c->used;
        pthread_mutex_unlock(&c->ctx->mu);
        if (!used)
            bury(c);
    }
    if (l && !l->closed) {
        l->closed = 1;
        uv_close((uv_handle_t *)&l->tcp, NULL);
        discard_pending(l);
    }
}

/* On what the peer reads (what we dialed, or sent on), and only when nothing is queued: a
 * frame in the middle of another message would corrupt the stream, and a full socket
 * must not delay the close. */
static void say_farewell(cl_tr_conn *c, const cl_msg_hdr *h)
{
    pthread_mutex_lock(&c->io);
    if ((!c->listener || c->sent_on) && c->fd >= 0 && !c->dead && !c->sends_dead &&
        !c->sendq_head)
        (void)!send(c->fd, h, sizeof(*h), MSG_DONTWAIT | MSG_NOSIGNAL);
    pthread_mutex_unlock(&c->io);
}

static void do_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    if (!ctx->shutdown_status)
        ctx->shutdown_status = status;
    pthread_mutex_lock(&ctx->mu);
    cl_tr_conn *c = ctx->conns;
    cl_tr_listener *l = ctx->listeners;
    pthread_mutex_unlock(&ctx->mu);
    for (; l; l = l->next_all)
        discard_pending(l);
    for (; c; c = c->next_all) {
        if (farewell)
            say_farewell(c, farewell);
        mark_dead(c, status, "communicator shut down");
        close_conn_handles(c);
    }
    atomic_fetch_add(&ctx->shutdowns, 1);
}

/* ---- the loop thread ------------------------------------------------------------- */

static int run_cmd(cl_tr_ctx *ctx, struct cmd *c)
{
    switch (c->kind) {
    case CMD_ARM: do_arm(c->conn); break;
    case CMD_CONNECT: do_connect(c->conn); break;
    case CMD_LISTEN: do_listen(c->listener); break;
    case CMD_CLOSE: do_close(c->conn, c->listener); break;
    case CMD_SHUTDOWN: do_shutdown(ctx, c->status, c->has_farewell ? &c->farewell : NULL); break;
    case CMD_STOP: do_shutdown(ctx, COLL_EABORTED, NULL); return 1;
    }
    return 0;
}

static void close_any(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void on_async(uv_async_t *a)
{
    cl_tr_ctx *ctx = a->data;
    pthread_mutex_lock(&ctx->mu);
    struct cmd *c = ctx->cmd_head;
    ctx->cmd_head = ctx->cmd_tail = NULL;
    pthread_mutex_unlock(&ctx->mu);
    int stop = 0;
    while (c) {
        struct cmd *next = c->next;
        stop |= run_cmd(ctx, c);
        free(c);
        c = next;
    }
    if (stop)
        uv_walk(&ctx->loop, close_any, NULL);
}

static void *loop_main(void *arg)
{
    cl_tr_ctx *ctx = arg;
    uv_run(&ctx->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- the vtable ------------------------------------------------------------------ */

static int tcp_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    ctx->notifier = cfg->notifier;
    ctx->timeout_ms = cfg->timeout_ms;
    ctx->vet = cfg->vet;
    ctx->vet_arg = cfg->vet_arg;
    char why[400];
    if (cl_pick_iface(cfg->device, cfg->family, &ctx->at, why, sizeof(why)) != 0) {
        cl_tr_error(cfg, "%s; the filter is COLL_SOCKET_IFNAME's (or coll_config.device's), the "
                    "family COLL_SOCKET_FAMILY's, else the rendezvous host's", why);
        free(ctx);
        return COLL_EINVAL;
    }
    pthread_mutex_init(&ctx->mu, NULL);
    uv_loop_init(&ctx->loop);
    uv_async_init(&ctx->loop, &ctx->async, on_async);
    ctx->async.data = ctx;
    if (pthread_create(&ctx->thread, NULL, loop_main, ctx) != 0) {
        uv_close((uv_handle_t *)&ctx->async, NULL);
        uv_run(&ctx->loop, UV_RUN_DEFAULT);
        uv_loop_close(&ctx->loop);
        pthread_mutex_destroy(&ctx->mu);
        free(ctx);
        return COLL_ESYS;
    }
    *out = ctx;
    return COLL_OK;
}

static void tcp_ctx_destroy(cl_tr_ctx *ctx)
{
    post(ctx, (struct cmd){.kind = CMD_STOP});
    pthread_join(ctx->thread, NULL);
    uv_loop_close(&ctx->loop);
    for (struct cmd *c = ctx->cmd_head; c;) {
        struct cmd *n = c->next;
        free(c);
        c = n;
    }
    free_graves(ctx);
    for (cl_tr_conn *c = ctx->conns; c;) {
        cl_tr_conn *n = c->next_all;
        conn_free(c);
        c = n;
    }
    for (cl_tr_listener *l = ctx->listeners; l;) {
        cl_tr_listener *n = l->next_all;
        free(l);
        l = n;
    }
    for (cl_tr_req *r = ctx->reqs; r;) {
        cl_tr_req *n = r->all_next;
        free(r);
        r = n;
    }
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

static int tcp_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_addr a = ctx->at;
    int fd = cl_addr_listen(&a, 0, 1024);
    if (fd < 0)
        return COLL_ESYS;
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l) {
        close(fd);
        return COLL_ENOMEM;
    }
    l->ctx = ctx;
    l->fd = fd;
    pthread_mutex_lock(&ctx->mu);
    l->next_all = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->mu);
    memset(handle, 0, CL_HANDLE_BYTES);
    cl_addr_text(&a, handle, CL_HANDLE_BYTES);
    post(ctx, (struct cmd){.kind = CMD_LISTEN, .listener = l});
    *out = l;
    return COLL_OK;
}

static int tcp_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    pthread_mutex_lock(&l->ctx->mu);
    cl_tr_conn *c = l->ready_head;
    if (c) {
        l->ready_head = c->next_ready;
        if (!l->ready_head)
            l->ready_tail = NULL;
    }
    pthread_mutex_unlock(&l->ctx->mu);
    if (!c)
        return COLL_INPROGRESS;
    memcpy(hello, c->hello, CL_HELLO_BYTES);
    *out = c;
    return COLL_OK;
}

static void tcp_close_listener(cl_tr_listener *l)
{
    /* The listener struct lives on in the ctx's memory until destroy; handles close now. */
    post(l->ctx, (struct cmd){.kind = CMD_CLOSE, .listener = l});
}

static int tcp_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                       const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    (void)want; /* the kernel sizes its socket buffers */
    char h[CL_HANDLE_BYTES + 1];
    memcpy(h, handle, CL_HANDLE_BYTES);
    h[CL_HANDLE_BYTES] = 0;
    cl_addr addr;
    if (cl_addr_parse(h, &addr) != 0)
        return COLL_EINVAL;
    cl_tr_conn *c = conn_new(ctx);
    if (!c)
        return COLL_ENOMEM;
    conn_list(c);
    c->addr = addr;
    snprintf(c->name, sizeof(c->name), "%s", h);
    c->hello_got = CL_HELLO_BYTES;
    memcpy(c->hello, hello, CL_HELLO_BYTES);
    post(ctx, (struct cmd){.kind = CMD_CONNECT, .conn = c});
    *out = c;
    return COLL_OK;
}

static cl_tr_req *new_req(cl_tr_conn *c)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->head.tr = &cl_transport_tcp;
    r->conn = c;
    pthread_mutex_lock(&c->ctx->mu);
    c->used = 1;
    r->all_next = c->ctx->reqs;
    if (r->all_next)
        r->all_next->all_prev = r;
    c->ctx->reqs = r;
    pthread_mutex_unlock(&c->ctx->mu);
    return r;
}

int cl_tcp_isend_span(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, size_t span,
                      cl_tr_req **out)
{
    if (hdr->len > (1u << 30))
        return COLL_EINVAL;
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_out = *hdr;
    r->buf = (void *)buf;
    r->len = hdr->len;
    r->span = span;
    *out = r;
    if (cl_tcp_enqueue(c, r, 0))
        cl_tcp_arm(c);
    return COLL_OK;
}

static int tcp_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    return cl_tcp_isend_span(c, hdr, buf, hdr->len, out);
}

int cl_tcp_irecv_hook(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tcp_hook on_hdr,
                      void *arg, cl_tr_req **out)
{
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->on_hdr = on_hdr;
    r->hook_arg = arg;
    r->hdr_in = hdr;
    r->buf = buf;
    r->len = cap;
    *out = r;
    if (cl_tcp_enqueue(c, r, 1))
        cl_tcp_arm(c);
    return COLL_OK;
}

int cl_tcp_irecv_frames(cl_tr_conn *c, cl_msg_hdr *hdr, cl_tcp_fhook on_hdr, cl_tcp_frame on_frame,
                        void *arg, cl_tr_req **out)
{
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->on_fhdr = on_hdr;
    r->on_frame = on_frame;
    r->hook_arg = arg;
    r->hdr_in = hdr;
    r->len = 1u << 30;
    *out = r;
    if (cl_tcp_enqueue(c, r, 1))
        cl_tcp_arm(c);
    return COLL_OK;
}

static int tcp_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    return cl_tcp_irecv_hook(c, hdr, buf, cap, NULL, NULL, out);
}

static int tcp_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    *done = 1;
    if (nbytes)
        *nbytes = r->len;
    int status = r->status;
    cl_tr_ctx *ctx = r->conn->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (r->all_prev)
        r->all_prev->all_next = r->all_next;
    else
        ctx->reqs = r->all_next;
    if (r->all_next)
        r->all_next->all_prev = r->all_prev;
    pthread_mutex_unlock(&ctx->mu);
    free(r);
    return status;
}

static int tcp_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf)
{
    int arm = 0, rc = cl_tcp_send_now(c, hdr, buf, &arm);
    if (arm)
        cl_tcp_arm(c);
    return rc;
}

static size_t tcp_moved(cl_tr_req *r)
{
    return __atomic_load_n(&r->got, __ATOMIC_RELAXED);
}

static void tcp_close_conn(cl_tr_conn *c)
{
    post(c->ctx, (struct cmd){.kind = CMD_CLOSE, .conn = c});
}

/* Waits (briefly) for the loop thread to have written the farewells: a program that
 * exits as soon as a collective fails would otherwise take them with it, and its peers
 * would see a closed link instead of the cause. */
static void tcp_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    int before = atomic_load(&ctx->shutdowns);
    post(ctx, (struct cmd){.kind = CMD_SHUTDOWN,
                           .status = status,
                           .farewell = farewell ? *farewell : (cl_msg_hdr){0},
                           .has_farewell = farewell != NULL});
    int64_t deadline = cl_now_ms() + 1000;
    while (!pthread_equal(pthread_self(), ctx->thread) && atomic_load(&ctx->shutdowns) == before &&
           cl_now_ms() < deadline)
        cl_sleep_ms(1);
}

static const char *tcp_peer_name(cl_tr_conn *c)
{
    return c->name;
}

/* ---- polling from a waiter's thread ------------------------------------------------ */

static cl_tr_conn *first_conn(cl_tr_ctx *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    cl_tr_conn *c = ctx->conns;
    pthread_mutex_unlock(&ctx->mu);
    return c;
}

/* Polling never waits for a connection's mutex: whoever holds it is moving its bytes.
 * The last poller to stop hands waiting connections back to the loop thread. */
static size_t tcp_poll(cl_tr_ctx *ctx, int mode)
{
    if (mode == CL_POLL_BEGIN) {
        atomic_fetch_add(&ctx->pollers, 1);
        return 0;
    }
    int last = mode == CL_POLL_END && atomic_fetch_sub(&ctx->pollers, 1) == 1;
    size_t moved = 0;
    if (mode == CL_POLL_END && !last)
        return 0;
    atomic_fetch_add(&ctx->walkers, 1);
    for (cl_tr_conn *c = first_conn(ctx); c; c = __atomic_load_n(&c->next_all, __ATOMIC_ACQUIRE)) {
        if (last)
            pthread_mutex_lock(&c->io);
        else if (pthread_mutex_trylock(&c->io) != 0)
            continue;
        int arm = (c->sendq_head || c->recvq_head) && cl_tcp_progress(c, &moved);
        pthread_mutex_unlock(&c->io);
        if (arm)
            cl_tcp_arm(c);
    }
    atomic_fetch_sub(&ctx->walkers, 1);
    return moved;
}

const cl_transport cl_transport_tcp = {
    .name = "tcp",
    .duplex = 1,
    .ctx_create = tcp_ctx_create,
    .ctx_destroy = tcp_ctx_destroy,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .close_listener = tcp_close_listener,
    .connect = tcp_connect,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .moved = tcp_moved,
    .close_conn = tcp_close_conn,
    .shutdown = tcp_shutdown,
    .poll = tcp_poll,
    .send_now = tcp_send_now,
    .recv_now = cl_tcp_recv_now,
    .peer_name = tcp_peer_name,
};
