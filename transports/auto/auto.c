/* The auto transport, the default: shm to peers on this host, ibverbs to other hosts
 * when both ends have an RDMA device, tcp to the rest, within one communicator. It
 * listens on each; its handle carries a host key (hostname, boot id and network
 * namespace, since abstract Unix sockets do not cross namespaces) next to the inner
 * handles, and connect() picks shm when the peer's key equals ours. The connection keeps
 * the chosen transport's operations (as NCCL's connectors do) and every call on it goes
 * there; its requests are that transport's own, found by their head (transport.h). */
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_HEX 16
#define NINNER 3 /* tcp, shm, ibverbs (optional) */

struct cl_tr_ctx {
    cl_tr_ctx *inner[NINNER]; /* [0] tcp, [1] shm, [2] ibverbs or NULL */
    char key[KEY_HEX + 1];
    pthread_mutex_t mu;
    cl_tr_conn *conns; /* every wrapper, freed with the context */
    cl_tr_listener *listeners;
};

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    cl_tr_listener *inner[NINNER], *next;
    int closed;
};

struct cl_tr_conn {
    const cl_transport *tr;
    cl_tr_conn *inner, *next;
    char name[CL_HANDLE_BYTES + 24]; /* "tcp 10.0.0.2:41711", "shm ..." */
};

#ifdef CL_HAVE_IBVERBS
static const cl_transport *const inner_tr[NINNER] = {&cl_transport_tcp, &cl_transport_shm,
                                                     &cl_transport_ibverbs};
#else
static const cl_transport *const inner_tr[NINNER] = {&cl_transport_tcp, &cl_transport_shm, NULL};
/* transport.h's, for a build without rdma-core's headers (no ib.c to define it). */
int cl_ibverbs_present(void)
{
    return 0;
}
#endif

/* cl_host_id as 16 hex digits: ranks with equal keys reach each other's shared memory. */
static void host_key(char key[KEY_HEX + 1])
{
    snprintf(key, KEY_HEX + 1, "%016llx", (unsigned long long)cl_host_id());
}

static int auto_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    host_key(ctx->key);
    for (int k = 0; k < 2; k++) {
        int rc = inner_tr[k]->ctx_create(cfg, &ctx->inner[k]);
        if (rc != COLL_OK) {
            if (k)
                inner_tr[0]->ctx_destroy(ctx->inner[0]);
            free(ctx);
            return rc;
        }
    }
    /* RDMA is a bonus: without it (or if it fails to start) other hosts get tcp. */
    if (cl_ibverbs_present() && inner_tr[2]->ctx_create(cfg, &ctx->inner[2]) != COLL_OK)
        ctx->inner[2] = NULL;
    pthread_mutex_init(&ctx->mu, NULL);
    *out = ctx;
    return COLL_OK;
}

static void auto_ctx_destroy(cl_tr_ctx *ctx)
{
    for (int k = 0; k < NINNER; k++)
        if (ctx->inner[k])
            inner_tr[k]->ctx_destroy(ctx->inner[k]);
    for (cl_tr_conn *c = ctx->conns; c;) {
        cl_tr_conn *n = c->next;
        free(c);
        c = n;
    }
    for (cl_tr_listener *l = ctx->listeners; l;) {
        cl_tr_listener *n = l->next;
        free(l);
        l = n;
    }
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

static void close_inner_listeners(cl_tr_listener *l)
{
    for (int k = 0; k < NINNER; k++)
        if (l->inner[k])
            inner_tr[k]->close_listener(l->inner[k]);
}

/* "auto KEY TCP-HANDLE SHM-HANDLE IB-HANDLE|-": inner handles never hold spaces. */
static int auto_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    char h[NINNER][CL_HANDLE_BYTES + 1] = {{0}, {0}, "-"};
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    for (int k = 0; k < NINNER; k++) {
        int rc = ctx->inner[k] ? inner_tr[k]->listen(ctx->inner[k], h[k], &l->inner[k]) : COLL_OK;
        if (rc != COLL_OK) {
            close_inner_listeners(l);
            free(l);
            return rc;
        }
    }
    char all[4 * CL_HANDLE_BYTES];
    int n = snprintf(all, sizeof(all), "auto %s %s %s %s", ctx->key, h[0], h[1], h[2]);
    if (n >= CL_HANDLE_BYTES && l->inner[2]) { /* no room for RDMA: other hosts get tcp */
        inner_tr[2]->close_listener(l->inner[2]);
        l->inner[2] = NULL;
        n = snprintf(all, sizeof(all), "auto %s %s %s -", ctx->key, h[0], h[1]);
    }
    if (n < 0 || n >= CL_HANDLE_BYTES) {
        close_inner_listeners(l);
        free(l);
        return COLL_EINVAL;
    }
    memset(handle, 0, CL_HANDLE_BYTES);
    memcpy(handle, all, (size_t)n);
    pthread_mutex_lock(&ctx->mu);
    l->next = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->mu);
    *out = l;
    return COLL_OK;
}

static int wrap_conn(cl_tr_ctx *ctx, const cl_transport *tr, cl_tr_conn *inner, cl_tr_conn **out)
{
    cl_tr_conn *c = malloc(sizeof(*c));
    if (!c) {
        tr->close_conn(inner);
        return COLL_ENOMEM;
    }
    *c = (cl_tr_conn){tr, inner, NULL, ""};
    snprintf(c->name, sizeof(c->name), "%s %s", tr->name, tr->peer_name(inner));
    pthread_mutex_lock(&ctx->mu);
    c->next = ctx->conns;
    ctx->conns = c;
    pthread_mutex_unlock(&ctx->mu);
    *out = c;
    return COLL_OK;
}

static int auto_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    for (int k = 0; k < NINNER; k++) {
        cl_tr_conn *inner;
        if (!l->inner[k])
            continue;
        int rc = inner_tr[k]->accept(l->inner[k], hello, &inner);
        if (rc == COLL_OK)
            return wrap_conn(l->ctx, inner_tr[k], inner, out);
        if (rc != COLL_INPROGRESS)
            return rc;
    }
    return COLL_INPROGRESS;
}

/* The wrapper itself goes with the context, like the inner transports' listeners. */
static void auto_close_listener(cl_tr_listener *l)
{
    if (!l->closed)
        close_inner_listeners(l);
    l->closed = 1;
}

static int auto_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                        const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    char all[CL_HANDLE_BYTES + 1], key[KEY_HEX + 1], h[NINNER][CL_HANDLE_BYTES + 1] = {{0}};
    memcpy(all, handle, CL_HANDLE_BYTES);
    all[CL_HANDLE_BYTES] = 0;
    if (sscanf(all, "auto %16s %128s %128s %128s", key, h[0], h[1], h[2]) != 4)
        return COLL_EINVAL;
    int k = strcmp(key, ctx->key) == 0                ? 1 /* this host: shm */
            : ctx->inner[2] && strcmp(h[2], "-") != 0 ? 2
                                                      : 0; /* RDMA at both ends */
    cl_tr_conn *inner;
    int rc = inner_tr[k]->connect(ctx->inner[k], h[k], hello, want, &inner);
    return rc == COLL_OK ? wrap_conn(ctx, inner_tr[k], inner, out) : rc;
}

/* Requests are the inner transport's own (their head names it): no wrapper per message. */
static int auto_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    return c->tr->isend(c->inner, hdr, buf, out);
}

static int auto_irecv_sink(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap,
                           const cl_tr_sink *sink, cl_tr_req **out)
{
    return sink && c->tr->irecv_sink ? c->tr->irecv_sink(c->inner, hdr, buf, cap, sink, out)
                                     : c->tr->irecv(c->inner, hdr, buf, cap, out);
}

static int auto_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    return auto_irecv_sink(c, hdr, buf, cap, NULL, out);
}

static int auto_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf)
{
    return c->tr->send_now ? c->tr->send_now(c->inner, hdr, buf) : COLL_ENOTSUP;
}

static int auto_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    return c->tr->recv_now ? c->tr->recv_now(c->inner, hdr, buf, cap, nbytes) : COLL_ENOTSUP;
}

static int auto_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    return CL_TR_OF_REQ(r)->test(r, done, nbytes);
}

/* The wrapper stays until the context goes: the core may still name the peer. */
static void auto_close_conn(cl_tr_conn *c)
{
    c->tr->close_conn(c->inner);
}

static void auto_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    for (int k = 0; k < NINNER; k++)
        if (ctx->inner[k])
            inner_tr[k]->shutdown(ctx->inner[k], status, farewell);
}

static size_t auto_moved(cl_tr_req *r)
{
    const cl_transport *tr = CL_TR_OF_REQ(r);
    return tr->moved ? tr->moved(r) : 0;
}

static size_t auto_poll(cl_tr_ctx *ctx, int mode)
{
    size_t moved = 0;
    for (int k = 0; k < NINNER; k++)
        if (ctx->inner[k] && inner_tr[k]->poll)
            moved += inner_tr[k]->poll(ctx->inner[k], mode);
    return moved;
}

static const char *auto_peer_name(cl_tr_conn *c)
{
    return c->name;
}

const cl_transport cl_transport_auto = {
    .name = "auto",
    .ctx_create = auto_ctx_create,
    .ctx_destroy = auto_ctx_destroy,
    .listen = auto_listen,
    .accept = auto_accept,
    .close_listener = auto_close_listener,
    .connect = auto_connect,
    .isend = auto_isend,
    .irecv = auto_irecv,
    .irecv_sink = auto_irecv_sink,
    .send_now = auto_send_now,
    .recv_now = auto_recv_now,
    .test = auto_test,
    .moved = auto_moved,
    .close_conn = auto_close_conn,
    .shutdown = auto_shutdown,
    .poll = auto_poll,
    .peer_name = auto_peer_name,
};
