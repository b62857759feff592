/* The auto transport, the default: shm to peers on this host; to other hosts the
 * fastest transport both ends have among ibverbs (when both have an RDMA device) and
 * the loaded plugins (COLL_NET_PLUGIN), by the speed their devices report; tcp to the
 * rest, striped over the NICs of like speed that both hosts have on a common network
 * (the rails transport with rails_on_net: no configuration for two NICs, issue 55; a
 * pair with one rail between them gets rails' tcp connection itself, cl_rails_sole, so
 * the common case pays nothing for it). It listens on each; its handle carries a host
 * key (hostname, boot id and network namespace, since abstract Unix sockets do not
 * cross namespaces) next to the inner handles, and connect() picks shm when the peer's
 * key equals ours. The connection keeps the chosen transport's operations (as NCCL's
 * connectors do) and every call on it goes there; its requests are that transport's
 * own, found by their head (transport.h). */
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/plugin/plugin.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_HEX 16
enum { TCP, SHM, IB, NFIXED };            /* the built-in inner transports, in this order */
/* TCP's: tcp over every interface; its handle's addresses, NUL-separated there, are
 * separated by RAIL_SEP in auto's. */
#define RAIL_SEP ','
#define NINNER (NFIXED + CL_NET_MAX_PLUGINS) /* then the plugins, in load order */

struct cl_tr_ctx {
    const cl_transport *tr[NINNER]; /* what serves inner[k]; NULL where none runs */
    cl_tr_ctx *inner[NINNER];
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

#ifndef CL_HAVE_IBVERBS
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

static void destroy_inner(cl_tr_ctx *ctx)
{
    for (int k = 0; k < NINNER; k++)
        if (ctx->inner[k])
            ctx->tr[k]->ctx_destroy(ctx->inner[k]);
}

/* A transport beyond tcp and shm is a bonus: one that does not start (no RDMA device
 * after all, a plugin's init failing) leaves its peers to tcp, said at info, and so are
 * its own reasons (cl_tr_config's optional): COLL_TRANSPORT=<it> makes them errors. */
static void start_bonus(cl_tr_ctx *ctx, int k, const cl_transport *tr, const cl_tr_config *cfg)
{
    char why[256] = "";
    cl_tr_config mine = *cfg;
    mine.err = why, mine.errlen = sizeof(why), mine.optional = 1;
    if (tr->ctx_create(&mine, &ctx->inner[k]) == COLL_OK)
        ctx->tr[k] = tr;
    else
        cl_log(COLL_LOG_INFO, "auto: %s is not used: %s", tr->name, why[0] ? why : "it did not start");
}

static int auto_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    host_key(ctx->key);
    const cl_transport *const must[] = {&cl_transport_rails, &cl_transport_shm};
    cl_tr_config on_net = *cfg;
    on_net.rails_on_net = 1;
    for (int k = TCP; k <= SHM; k++) {
        int rc = must[k]->ctx_create(k == TCP ? &on_net : cfg, &ctx->inner[k]);
        if (rc != COLL_OK) {
            destroy_inner(ctx);
            free(ctx);
            return rc;
        }
        ctx->tr[k] = must[k];
    }
#ifdef CL_HAVE_IBVERBS
    if (cl_ibverbs_present())
        start_bonus(ctx, IB, &cl_transport_ibverbs, cfg);
#endif
    for (int i = 0; i < CL_NET_MAX_PLUGINS && cl_net_at(i); i++)
        start_bonus(ctx, NFIXED + i, cl_net_at(i), cfg);
    pthread_mutex_init(&ctx->mu, NULL);
    *out = ctx;
    return COLL_OK;
}

static void auto_ctx_destroy(cl_tr_ctx *ctx)
{
    destroy_inner(ctx);
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

static void close_inner_listener(cl_tr_listener *l, int k)
{
    if (l->inner[k])
        l->ctx->tr[k]->close_listener(l->inner[k]);
    l->inner[k] = NULL;
}

static void close_inner_listeners(cl_tr_listener *l)
{
    for (int k = 0; k < NINNER; k++)
        close_inner_listener(l, k);
}

static uint32_t speed_of(const cl_tr_ctx *ctx, int k)
{
    return ctx->tr[k]->speed_mbps ? ctx->tr[k]->speed_mbps(ctx->inner[k]) : 0;
}

/* Appends listener k's handle to all (of room CL_HANDLE_BYTES): ibverbs's as a field of
 * its own ("-" without one), a plugin's as NAME:MBPS=HANDLE (ranks may load different
 * ones; MBPS its device's speed). One that does not fit is closed: its peers take
 * another transport. */
static void add_handle(cl_tr_listener *l, int k, const char *h, char *all)
{
    size_t at = strlen(all), room = CL_HANDLE_BYTES - at;
    int n = k < NFIXED    ? snprintf(all + at, room, " %s", l->inner[k] ? h : "-")
            : l->inner[k] ? snprintf(all + at, room, " %s:%u=%s", l->ctx->tr[k]->name,
                                     speed_of(l->ctx, k), h)
                          : 0;
    if (n >= 0 && (size_t)n < CL_HANDLE_BYTES - at)
        return;
    all[at] = 0;
    cl_log(COLL_LOG_INFO, "auto: no room for %s's handle: other hosts use another transport",
           l->ctx->tr[k]->name);
    close_inner_listener(l, k);
    if (k < NFIXED)
        strcat(all, " -"); /* auto_listen kept the room */
}

/* The rails handle h (addresses NUL-separated) as one field, RAIL_SEP between them. */
static void join_rails(char h[CL_HANDLE_BYTES + 1])
{
    for (size_t at = strlen(h); at + 1 < CL_HANDLE_BYTES && h[at + 1]; at = strlen(h))
        h[at] = RAIL_SEP;
}

/* Puts rails (",ADDR..." after the first address, which all holds from `at` on) into
 * all as far as there is room, whole addresses only; how many rails all then gives. */
static int more_rails(char all[CL_HANDLE_BYTES], size_t at, const char *rails)
{
    size_t len = strlen(all), room = CL_HANDLE_BYTES - 1 - len, take = 0;
    int n = 1;
    for (const char *p = rails; *p && take < room;) {
        const char *next = strchr(p + 1, RAIL_SEP);
        size_t piece = next ? (size_t)(next - p) : strlen(p);
        if (take + piece > room)
            break;
        take += piece, n++;
        p += piece;
    }
    memmove(all + at + take, all + at, len - at + 1);
    memcpy(all + at, rails, take);
    return n;
}

/* "auto KEY TCP-HANDLE SHM-HANDLE IB-HANDLE|- [PLUGIN:MBPS=HANDLE]...": no handle holds a
 * space. TCP-HANDLE is "ADDR[,ADDR]...", one a rail: the first, then the other handles,
 * then as many more as there is room for (fewer rails to other hosts, not a faster
 * transport given up for them). */
static int auto_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    char h[NINNER][CL_HANDLE_BYTES + 1] = {{0}};
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    for (int k = 0; k < NINNER; k++) {
        int rc = ctx->inner[k] ? ctx->tr[k]->listen(ctx->inner[k], h[k], &l->inner[k]) : COLL_OK;
        if (rc != COLL_OK && k <= SHM) {
            close_inner_listeners(l);
            free(l);
            return rc;
        }
        if (rc != COLL_OK) /* a bonus: its peers take another transport */
            cl_log(COLL_LOG_INFO, "auto: %s cannot listen: %s", ctx->tr[k]->name, coll_strerror(rc));
    }
    char all[CL_HANDLE_BYTES], rails[CL_HANDLE_BYTES + 1] = "";
    join_rails(h[TCP]);
    char *sep = strchr(h[TCP], RAIL_SEP);
    if (sep) { /* rails 1.. go in last */
        snprintf(rails, sizeof(rails), "%s", sep);
        *sep = 0;
    }
    int at = snprintf(all, sizeof(all), "auto %s %s", ctx->key, h[TCP]);
    int n = snprintf(all + at, sizeof(all) - (size_t)at, " %s", h[SHM]) + at;
    if (n < 0 || n + 2 >= CL_HANDLE_BYTES) { /* room for " -" at least */
        close_inner_listeners(l);
        free(l);
        return COLL_EINVAL;
    }
    for (int k = IB; k < NINNER; k++)
        add_handle(l, k, h[k], all);
    cl_rails_keep(l->inner[TCP], more_rails(all, (size_t)at, rails));
    memset(handle, 0, CL_HANDLE_BYTES);
    memcpy(handle, all, strlen(all));
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

/* Inner connection c of transport k, wrapped: a rails one of one rail as its tcp one. */
static int wrap_inner(cl_tr_ctx *ctx, int k, cl_tr_conn *c, cl_tr_conn **out)
{
    cl_tr_conn *sole = k == TCP ? cl_rails_sole(c) : NULL;
    return sole ? wrap_conn(ctx, &cl_transport_tcp, sole, out) : wrap_conn(ctx, ctx->tr[k], c, out);
}

static int auto_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    for (int k = 0; k < NINNER; k++) {
        cl_tr_conn *inner;
        if (!l->inner[k])
            continue;
        int rc = l->ctx->tr[k]->accept(l->inner[k], hello, &inner);
        if (rc == COLL_OK)
            return wrap_inner(l->ctx, k, inner, out);
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

/* The peer's handle split into its fields, at[k] for inner transport k of ctx (NULL
 * where the peer has none) and mbps[k] the speed it gives (0: none); the key in key.
 * Fields are cut in place in text. */
static int split_handle(cl_tr_ctx *ctx, char *text, char **key, char *at[NINNER],
                        uint32_t mbps[NINNER])
{
    char *save = NULL, *f[NFIXED + 2] = {0};
    f[0] = strtok_r(text, " ", &save);
    for (int n = 1; f[n - 1] && n < NFIXED + 2; n++)
        f[n] = strtok_r(NULL, " ", &save);
    if (!f[NFIXED + 1] || strcmp(f[0], "auto") != 0)
        return COLL_EINVAL;
    *key = f[1];
    at[TCP] = f[2], at[SHM] = f[3];
    at[IB] = strcmp(f[4], "-") != 0 ? f[4] : NULL;
    for (char *t = strtok_r(NULL, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '='), *colon = eq ? memchr(t, ':', (size_t)(eq - t)) : NULL;
        size_t len = eq ? (size_t)((colon ? colon : eq) - t) : 0;
        for (int k = NFIXED; eq && k < NINNER; k++)
            if (ctx->tr[k] && strlen(ctx->tr[k]->name) == len &&
                strncmp(t, ctx->tr[k]->name, len) == 0) {
                at[k] = eq + 1;
                mbps[k] = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 0;
            }
    }
    return COLL_OK;
}

/* Of the transports both ends run (at[k] set, ours started), the fastest by the slower
 * of the two ends' devices (so both ends of a pair rank them alike), the first of equals
 * (ibverbs, then the plugins in load order); else tcp. A plugin whose device either end
 * reports at speed 0 is left to the peers of its own host, which shm serves: the ABI has
 * no word for a device that reaches this host only (libfabric's shm provider reports
 * no speed) or for reach at all, and tcp, which every end runs, is known to cross hosts.
 * ibverbs's 0 is a port code it does not know: its device is a network's all the same. */
static int fastest(const cl_tr_ctx *ctx, char *const at[NINNER], const uint32_t mbps[NINNER])
{
    int best = TCP;
    uint32_t top = 0;
    for (int k = IB; k < NINNER; k++) {
        if (!at[k] || !ctx->inner[k])
            continue;
        if (k >= NFIXED && (!speed_of(ctx, k) || !mbps[k])) {
            cl_log(COLL_LOG_INFO,
                   "auto: plugin '%s' reports speed 0 (here %u, the peer %u Mb/s): not taken "
                   "to another host (COLL_TRANSPORT=%s takes it everywhere)",
                   ctx->tr[k]->name, speed_of(ctx, k), mbps[k], ctx->tr[k]->name);
            continue;
        }
        uint32_t s = speed_of(ctx, k);
        s = !s || (mbps[k] && mbps[k] < s) ? mbps[k] : s; /* 0: not known */
        if (best == TCP || s > top)
            best = k, top = s;
    }
    return best;
}

static int auto_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                        const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    char text[CL_HANDLE_BYTES + 1], *key, *at[NINNER] = {0}, h[CL_HANDLE_BYTES] = {0};
    uint32_t mbps[NINNER] = {0};
    memcpy(text, handle, CL_HANDLE_BYTES);
    text[CL_HANDLE_BYTES] = 0;
    if (split_handle(ctx, text, &key, at, mbps) != COLL_OK)
        return COLL_EINVAL;
    int k = strcmp(key, ctx->key) == 0 ? SHM : fastest(ctx, at, mbps);
    if (strlen(at[k]) >= CL_HANDLE_BYTES)
        return COLL_EINVAL;
    memcpy(h, at[k], strlen(at[k]));
    for (char *sep = k == TCP ? strchr(h, RAIL_SEP) : NULL; sep; sep = strchr(sep + 1, RAIL_SEP))
        *sep = 0; /* rails' own handle */
    cl_tr_conn *inner;
    int rc = ctx->tr[k]->connect(ctx->inner[k], h, hello, want, &inner);
    return rc == COLL_OK ? wrap_inner(ctx, k, inner, out) : rc;
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
            ctx->tr[k]->shutdown(ctx->inner[k], status, farewell);
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
        if (ctx->inner[k] && ctx->tr[k]->poll)
            moved += ctx->tr[k]->poll(ctx->inner[k], mode);
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
