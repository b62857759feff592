/* The tcp transport on libuv. One loop thread per context owns every libuv handle;
 * other threads hand it work through a command queue and uv_async_send, because libuv
 * is not thread-safe otherwise. This file must never block the loop thread and never
 * touch a request after marking it done (the owner may free it at once). */
#include "tcp_iface.h"

#include "../transport.h"
#include "../../lib/core/log.h"
#include "../../lib/core/util.h"
#include "collective.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

enum cmd_kind { CMD_SEND, CMD_RECV, CMD_CONNECT, CMD_LISTEN, CMD_CLOSE, CMD_SHUTDOWN, CMD_STOP };

struct cl_tr_req {
    uv_write_t w; /* sends: libuv owns it until write_cb */
    struct cl_tr_req *next;
    struct cl_tr_req *all_prev, *all_next; /* ctx->reqs, for cleanup */
    cl_tr_conn *conn;
    cl_msg_hdr hdr_out;
    cl_msg_hdr *hdr_in;
    void *buf;
    size_t len; /* send: payload bytes; recv: capacity */
    size_t got; /* recv: bytes received so far, header included */
    int status;
    atomic_int done;
};

struct cl_tr_conn {
    uv_tcp_t tcp;
    cl_tr_ctx *ctx;
    cl_tr_listener *listener;    /* accepted conns: where the hello is delivered */
    struct cl_tr_conn *next_all; /* ctx->conns */
    struct cl_tr_conn *next_ready;
    struct sockaddr_in addr;
    char name[CL_HANDLE_BYTES + 8];
    uint8_t hello[CL_HELLO_BYTES];
    size_t hello_got;
    uv_timer_t hello_timer;
    uv_connect_t connect_req;
    cl_tr_req *sendq_head, *sendq_tail; /* sends waiting for the connection */
    cl_tr_req *recvq_head, *recvq_tail; /* posted receives, in order */
    int connected, reading, dead, closed, timer_on;
};

struct cl_tr_listener {
    uv_tcp_t tcp;
    cl_tr_ctx *ctx;
    int fd;
    struct cl_tr_listener *next_all; /* ctx->listeners */
    cl_tr_conn *ready_head, *ready_tail; /* accepted with a full hello, under ctx->mu */
    int closed;
};

struct cmd {
    enum cmd_kind kind;
    struct cmd *next;
    cl_tr_conn *conn;
    cl_tr_req *req;
    cl_tr_listener *listener;
    int status;
    cl_msg_hdr farewell;
    int has_farewell;
};

struct cl_tr_ctx {
    cl_notifier *notifier;
    int timeout_ms;
    char ip[64];
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t mu; /* cmds, listener ready queues, reqs list */
    struct cmd *cmd_head, *cmd_tail;
    cl_tr_conn *conns;
    cl_tr_listener *listeners;
    cl_tr_req *reqs;
    int shutdown_status; /* loop thread only */
};

static void complete(cl_tr_req *r, int status)
{
    r->status = status;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    cl_notify(r->conn->ctx->notifier);
}

static void post(cl_tr_ctx *ctx, struct cmd c)
{
    struct cmd *p = malloc(sizeof(*p));
    if (!p)
        abort(); /* a 48-byte allocation failing leaves nothing sane to do */
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

/* ---- receive path ---------------------------------------------------------------- */

static void fail_recvs(cl_tr_conn *c, int status)
{
    while (c->recvq_head) {
        cl_tr_req *r = c->recvq_head;
        c->recvq_head = r->next;
        complete(r, status);
    }
    c->recvq_tail = NULL;
}

static void mark_dead(cl_tr_conn *c, int status, const char *why)
{
    if (!c->dead)
        cl_log(COLL_LOG_DEBUG, "tcp: connection %s failed: %s", c->name, why);
    c->dead = status;
    if (c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
    fail_recvs(c, status);
    while (c->sendq_head) {
        cl_tr_req *r = c->sendq_head;
        c->sendq_head = r->next;
        complete(r, status);
    }
    c->sendq_tail = NULL;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    cl_tr_conn *c = h->data;
    if (c->hello_got < CL_HELLO_BYTES) {
        *buf = uv_buf_init((char *)c->hello + c->hello_got,
                           (unsigned)(CL_HELLO_BYTES - c->hello_got));
        return;
    }
    cl_tr_req *r = c->recvq_head;
    if (!r) {
        *buf = uv_buf_init(NULL, 0);
    } else if (r->got < sizeof(cl_msg_hdr)) {
        *buf = uv_buf_init((char *)r->hdr_in + r->got, (unsigned)(sizeof(cl_msg_hdr) - r->got));
    } else {
        size_t off = r->got - sizeof(cl_msg_hdr), left = r->hdr_in->len - off;
        *buf = uv_buf_init((char *)r->buf + off, (unsigned)CL_MIN(left, (size_t)1 << 30));
    }
}

static void stop_reading_if_idle(cl_tr_conn *c)
{
    if (!c->recvq_head && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void hello_done(cl_tr_conn *c)
{
    cl_tr_listener *l = c->listener;
    uv_timer_stop(&c->hello_timer);
    stop_reading_if_idle(c);
    pthread_mutex_lock(&c->ctx->mu);
    if (l->ready_tail)
        l->ready_tail->next_ready = c;
    else
        l->ready_head = c;
    l->ready_tail = c;
    pthread_mutex_unlock(&c->ctx->mu);
    cl_notify(c->ctx->notifier);
}

/* A header has arrived: is it sane, and does the payload fit the posted buffer? */
static int header_ok(cl_tr_conn *c, cl_tr_req *r)
{
    if (r->hdr_in->magic != CL_MSG_MAGIC) {
        mark_dead(c, COLL_EPROTO, "bad message magic");
        return 0;
    }
    if (r->hdr_in->len > r->len) {
        cl_log(COLL_LOG_ERROR, "tcp: %s sent a %u-byte message for a %zu-byte receive", c->name,
               r->hdr_in->len, r->len);
        mark_dead(c, COLL_EMISMATCH, "message longer than the receive");
        return 0;
    }
    return 1;
}

static void advance_recv(cl_tr_conn *c, size_t n)
{
    cl_tr_req *r = c->recvq_head;
    int had_header = r->got >= sizeof(cl_msg_hdr);
    r->got += n;
    if (r->got < sizeof(cl_msg_hdr))
        return;
    if (!had_header && !header_ok(c, r))
        return;
    if (r->got - sizeof(cl_msg_hdr) < r->hdr_in->len)
        return;
    c->recvq_head = r->next;
    if (!c->recvq_head)
        c->recvq_tail = NULL;
    r->len = r->hdr_in->len;
    complete(r, COLL_OK);
    stop_reading_if_idle(c);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    cl_tr_conn *c = s->data;
    if (n == UV_ENOBUFS || n == 0)
        return;
    if (n < 0) {
        mark_dead(c, COLL_EPEER, uv_strerror((int)n));
        return;
    }
    if (c->hello_got < CL_HELLO_BYTES) {
        c->hello_got += (size_t)n;
        if (c->hello_got == CL_HELLO_BYTES)
            hello_done(c);
        return;
    }
    advance_recv(c, (size_t)n);
}

static void start_reading(cl_tr_conn *c)
{
    if (c->reading || c->dead)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = 1;
    else
        mark_dead(c, COLL_EPEER, "read_start failed");
}

static void do_recv(cl_tr_conn *c, cl_tr_req *r)
{
    if (c->dead) {
        complete(r, c->dead);
        return;
    }
    r->next = NULL;
    if (c->recvq_tail)
        c->recvq_tail->next = r;
    else
        c->recvq_head = r;
    c->recvq_tail = r;
    start_reading(c);
}

/* ---- send path ------------------------------------------------------------------- */

static void on_write(uv_write_t *w, int status)
{
    cl_tr_req *r = (cl_tr_req *)w;
    if (status < 0) {
        mark_dead(r->conn, COLL_EPEER, uv_strerror(status));
        complete(r, r->conn->dead ? r->conn->dead : COLL_EPEER);
        return;
    }
    complete(r, COLL_OK);
}

static void start_write(cl_tr_conn *c, cl_tr_req *r)
{
    uv_buf_t b[2] = { uv_buf_init((char *)&r->hdr_out, sizeof(cl_msg_hdr)),
                      uv_buf_init(r->buf, (unsigned)r->len) };
    int rc = uv_write(&r->w, (uv_stream_t *)&c->tcp, b, r->len ? 2 : 1, on_write);
    if (rc < 0) {
        mark_dead(c, COLL_EPEER, uv_strerror(rc));
        complete(r, c->dead);
    }
}

static void do_send(cl_tr_conn *c, cl_tr_req *r)
{
    if (c->dead) {
        complete(r, c->dead);
    } else if (!c->connected) {
        r->next = NULL;
        if (c->sendq_tail)
            c->sendq_tail->next = r;
        else
            c->sendq_head = r;
        c->sendq_tail = r;
    } else {
        start_write(c, r);
    }
}

/* ---- connections ----------------------------------------------------------------- */

static void tune_socket(uv_tcp_t *t)
{
    uv_tcp_nodelay(t, 1);
    /* Keepalive finds a peer whose host vanished while we wait to send nothing. */
    uv_tcp_keepalive(t, 1, 30);
}

static void on_hello_written(uv_write_t *w, int status)
{
    cl_tr_conn *c = w->data;
    free(w);
    if (status < 0)
        mark_dead(c, COLL_EPEER, uv_strerror(status));
}

static void on_connect(uv_connect_t *req, int status)
{
    cl_tr_conn *c = req->data;
    if (status < 0 || c->dead) {
        mark_dead(c, c->dead ? c->dead : COLL_EPEER, status < 0 ? uv_strerror(status) : "closed");
        return;
    }
    tune_socket(&c->tcp);
    uv_write_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init((char *)c->hello, CL_HELLO_BYTES);
    w->data = c;
    uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_hello_written);
    c->connected = 1;
    cl_tr_req *q = c->sendq_head;
    c->sendq_head = c->sendq_tail = NULL;
    while (q) {
        cl_tr_req *next = q->next;
        start_write(c, q);
        q = next;
    }
}

static void do_connect(cl_tr_conn *c)
{
    uv_tcp_init(&c->ctx->loop, &c->tcp);
    c->tcp.data = c;
    c->connect_req.data = c;
    int rc = c->ctx->shutdown_status;
    if (!rc && uv_tcp_connect(&c->connect_req, &c->tcp, (struct sockaddr *)&c->addr, on_connect))
        rc = COLL_EPEER;
    if (rc)
        mark_dead(c, rc, "connect failed");
}

static void on_hello_timeout(uv_timer_t *t)
{
    cl_tr_conn *c = t->data;
    cl_log(COLL_LOG_WARN, "tcp: dropped connection from %s: no handshake within %d ms", c->name,
           c->ctx->timeout_ms);
    mark_dead(c, COLL_EPROTO, "no hello");
    uv_close((uv_handle_t *)&c->tcp, NULL);
    c->closed = 1;
}

static void link_conn(cl_tr_ctx *ctx, cl_tr_conn *c)
{
    pthread_mutex_lock(&ctx->mu);
    c->next_all = ctx->conns;
    ctx->conns = c;
    pthread_mutex_unlock(&ctx->mu);
}

static void on_connection(uv_stream_t *server, int status)
{
    cl_tr_listener *l = server->data;
    if (status < 0)
        return;
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->ctx = l->ctx;
    c->listener = l;
    link_conn(l->ctx, c);
    uv_tcp_init(&l->ctx->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        c->dead = COLL_EPEER;
        uv_close((uv_handle_t *)&c->tcp, NULL);
        c->closed = 1;
        return;
    }
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len);
    struct sockaddr_in *in = (struct sockaddr_in *)&sa;
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    snprintf(c->name, sizeof(c->name), "%s:%u", ip, ntohs(in->sin_port));
    tune_socket(&c->tcp);
    uv_timer_init(&l->ctx->loop, &c->hello_timer);
    c->hello_timer.data = c;
    c->timer_on = 1;
    uv_timer_start(&c->hello_timer, on_hello_timeout, (uint64_t)l->ctx->timeout_ms, 0);
    start_reading(c);
}

static void do_listen(cl_tr_listener *l)
{
    uv_tcp_init(&l->ctx->loop, &l->tcp);
    l->tcp.data = l;
    if (uv_tcp_open(&l->tcp, l->fd) != 0 ||
        uv_listen((uv_stream_t *)&l->tcp, 1024, on_connection) != 0)
        cl_log(COLL_LOG_ERROR, "tcp: cannot listen on fd %d", l->fd);
}

static void close_conn_handles(cl_tr_conn *c)
{
    if (!c->closed) {
        c->closed = 1;
        if (c->timer_on)
            uv_close((uv_handle_t *)&c->hello_timer, NULL);
        c->timer_on = 0;
        uv_close((uv_handle_t *)&c->tcp, NULL);
    }
}

static void do_close(cl_tr_conn *c, cl_tr_listener *l)
{
    if (c) {
        mark_dead(c, COLL_EPEER, "closed locally");
        close_conn_handles(c);
    }
    if (l && !l->closed) {
        l->closed = 1;
        uv_close((uv_handle_t *)&l->tcp, NULL);
    }
}

/* Only when nothing is queued: a frame in the middle of another message would corrupt
 * the stream, and a full socket must not delay the close. */
static void say_farewell(cl_tr_conn *c, const cl_msg_hdr *h)
{
    if (c->listener || !c->connected || c->dead || c->closed)
        return;
    uv_buf_t b = uv_buf_init((char *)h, sizeof(*h));
    uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
}

static void do_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    if (!ctx->shutdown_status)
        ctx->shutdown_status = status;
    pthread_mutex_lock(&ctx->mu);
    cl_tr_conn *c = ctx->conns;
    pthread_mutex_unlock(&ctx->mu);
    for (; c; c = c->next_all) {
        if (farewell)
            say_farewell(c, farewell);
        mark_dead(c, status, "communicator shut down");
        if (c->tcp.loop)
            close_conn_handles(c);
    }
}

/* ---- the loop thread ------------------------------------------------------------- */

static int run_cmd(cl_tr_ctx *ctx, struct cmd *c)
{
    switch (c->kind) {
    case CMD_SEND:
        do_send(c->conn, c->req);
        break;
    case CMD_RECV:
        do_recv(c->conn, c->req);
        break;
    case CMD_CONNECT:
        do_connect(c->conn);
        break;
    case CMD_LISTEN:
        do_listen(c->listener);
        break;
    case CMD_CLOSE:
        do_close(c->conn, c->listener);
        break;
    case CMD_SHUTDOWN:
        do_shutdown(ctx, c->status, c->has_farewell ? &c->farewell : NULL);
        break;
    case CMD_STOP:
        do_shutdown(ctx, COLL_EABORTED, NULL);
        return 1;
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
    if (cl_tcp_pick_iface(cfg->device, ctx->ip, sizeof(ctx->ip)) != 0) {
        cl_log(COLL_LOG_ERROR, "tcp: no network interface matches '%s'", cfg->device);
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
    post(ctx, (struct cmd){ .kind = CMD_STOP });
    pthread_join(ctx->thread, NULL);
    uv_loop_close(&ctx->loop);
    for (struct cmd *c = ctx->cmd_head; c;) {
        struct cmd *n = c->next;
        free(c);
        c = n;
    }
    for (cl_tr_conn *c = ctx->conns; c;) {
        cl_tr_conn *n = c->next_all;
        free(c);
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
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, ctx->ip, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return COLL_ESYS;
    }
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
    snprintf(handle, CL_HANDLE_BYTES, "%s:%u", ctx->ip, ntohs(a.sin_port));
    post(ctx, (struct cmd){ .kind = CMD_LISTEN, .listener = l });
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
    post(l->ctx, (struct cmd){ .kind = CMD_CLOSE, .listener = l });
}

static int parse_handle(const char *h, struct sockaddr_in *a)
{
    char ip[64];
    unsigned port;
    const char *colon = strrchr(h, ':');
    if (!colon || (size_t)(colon - h) >= sizeof(ip) || sscanf(colon + 1, "%u", &port) != 1)
        return COLL_EINVAL;
    memcpy(ip, h, (size_t)(colon - h));
    ip[colon - h] = 0;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, ip, &a->sin_addr) == 1 ? COLL_OK : COLL_EINVAL;
}

static int tcp_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                       const uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return COLL_ENOMEM;
    char h[CL_HANDLE_BYTES + 1];
    memcpy(h, handle, CL_HANDLE_BYTES);
    h[CL_HANDLE_BYTES] = 0;
    if (parse_handle(h, &c->addr) != COLL_OK) {
        free(c);
        return COLL_EINVAL;
    }
    snprintf(c->name, sizeof(c->name), "%s", h);
    c->ctx = ctx;
    c->hello_got = CL_HELLO_BYTES;
    memcpy(c->hello, hello, CL_HELLO_BYTES);
    link_conn(ctx, c);
    post(ctx, (struct cmd){ .kind = CMD_CONNECT, .conn = c });
    *out = c;
    return COLL_OK;
}

static cl_tr_req *new_req(cl_tr_conn *c)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->conn = c;
    pthread_mutex_lock(&c->ctx->mu);
    r->all_next = c->ctx->reqs;
    if (r->all_next)
        r->all_next->all_prev = r;
    c->ctx->reqs = r;
    pthread_mutex_unlock(&c->ctx->mu);
    return r;
}

static int tcp_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    if (hdr->len > (1u << 30))
        return COLL_EINVAL;
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_out = *hdr;
    r->buf = (void *)buf;
    r->len = hdr->len;
    post(c->ctx, (struct cmd){ .kind = CMD_SEND, .conn = c, .req = r });
    *out = r;
    return COLL_OK;
}

static int tcp_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = new_req(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_in = hdr;
    r->buf = buf;
    r->len = cap;
    post(c->ctx, (struct cmd){ .kind = CMD_RECV, .conn = c, .req = r });
    *out = r;
    return COLL_OK;
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

static void tcp_close_conn(cl_tr_conn *c)
{
    post(c->ctx, (struct cmd){ .kind = CMD_CLOSE, .conn = c });
}

static void tcp_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    post(ctx, (struct cmd){ .kind = CMD_SHUTDOWN, .status = status,
                            .farewell = farewell ? *farewell : (cl_msg_hdr){ 0 },
                            .has_farewell = farewell != NULL });
}

static const char *tcp_peer_name(cl_tr_conn *c)
{
    return c->name;
}

const cl_transport cl_transport_tcp = {
    .name = "tcp",
    .ctx_create = tcp_ctx_create,
    .ctx_destroy = tcp_ctx_destroy,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .close_listener = tcp_close_listener,
    .connect = tcp_connect,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .close_conn = tcp_close_conn,
    .shutdown = tcp_shutdown,
    .peer_name = tcp_peer_name,
};
