/* The rails transport: tcp over every usable interface at once (issue 55). A context
 * holds one tcp context per interface (a rail); a connection holds one tcp connection
 * per rail to the same peer.
 *
 * Where striping lives, and why here. It lives below the algorithms, inside the socket
 * transport's family (design (a) of the issue), not above it as one link per rail with
 * segments dealt out by the algorithms (design (b)): (b) would make every algorithm, the
 * links' sharing and the cost model learn about rails, and a rail that dies would fail a
 * link in the middle of an operation whose other segments went on other links, so the
 * recovery would have to live in every algorithm. Here the contract (transport.h) does
 * not change: one cl_tr_conn, messages in posting order.
 *
 * The wire. Rail 0 carries every message's header (the caller's, unchanged: hdr.len is
 * the whole payload) and the first part of its payload; a message of STRIPE_MIN bytes or
 * more puts the rest on rails 1.. in parts of equal size (multiples of ALIGN; rail 0
 * keeps the remainder), each part a message of its own on its rail with a rails header
 * (len: the part). Both ends cut by the same rule from hdr.len and the rail count, so
 * nothing says where a part goes: the receiver learns hdr.len from rail 0's header (tcp's
 * header hook, tcp_span.h) and posts the parts' receives then, into their places in the
 * caller's buffer; each rail's stream stays in order, so parts match in order too. Small
 * messages (and the fast path, send_now/recv_now) use rail 0 alone.
 *
 * The set-up. The handle lists one address per rail ("a0\0a1\0", cl_addr text; the
 * first reads as a tcp handle). The dialer connects rail 0 with the caller's hello, which
 * the caller's vet judges as on tcp, and rails k > 0 with a hello of ours (RAIL_MAGIC, a
 * random 64-bit id, k); its first message on rail 0 says the id and the rail count used.
 * The acceptor holds a rail-0 connection until that message and every rail it names are
 * in, then hands the whole out. A peer with one rail uses one.
 *
 * Not done yet (see the closing note): weights (the cut is equal, not by each
 * rail's measured speed); failover (a rail that fails fails the connection, as tcp does:
 * moving the parts to the other rails needs the receiver to say which parts arrived);
 * the auto transport still uses plain tcp. */
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/iface.h"
#include "transports/tcp/tcp_span.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { MAX_RAILS = 4, STRIPE_MIN = 128 << 10, ALIGN = 4096, MAX_SPARE = 64 };
enum { RAIL_PART = 0xEF, RAIL_ID = 0xEE }; /* cl_msg_hdr.coll of the rails' own messages */
static const char RAIL_MAGIC[8] = "collrail";

#define TCP (&cl_transport_tcp)

struct cl_tr_ctx {
    int n;
    cl_tr_ctx *rail[MAX_RAILS];
    pthread_mutex_t mu;
    cl_tr_conn *conns; /* every connection, freed with the context */
    cl_tr_req *reqs;   /* requests not yet tested done */
    cl_tr_listener *listeners;
};

struct cl_tr_conn {
    cl_tr_ctx *ctx;
    int n; /* rails in use */
    cl_tr_conn *rail[MAX_RAILS];
    cl_tr_conn *next, *next_forming;
    pthread_mutex_t send_mu; /* a striped send posts all its parts before the next one */
    atomic_int sends;        /* sends not yet tested done: send_now must not overtake */
    uint8_t hello[CL_HELLO_BYTES];
    uint64_t id[2]; /* the id message's payload: id, rails */
    int have_id;
    char name[CL_HANDLE_BYTES + 24];
};

typedef struct {
    cl_tr_conn *c;
    uint64_t id;
    int k;
} spare;

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    cl_tr_listener *rail[MAX_RAILS], *next;
    cl_tr_conn *forming; /* rail 0 in, waiting for its id or rails */
    spare spares[MAX_SPARE];
    int nspares;
};

struct cl_tr_req {
    cl_tr_req_head head;
    cl_tr_req *prev, *next;
    cl_tr_conn *conn;
    cl_msg_hdr *hdr_in; /* receives */
    size_t len;         /* the payload */
    char *buf;
    atomic_int nsub;    /* posted parts (a receive's grow at its header) */
    cl_tr_req *sub[MAX_RAILS];
    cl_msg_hdr part[MAX_RAILS];
    size_t part_len[MAX_RAILS];
    int fin[MAX_RAILS];
    size_t moved_done;
    int status, closed, is_send;
};

/* The cut of a len-byte payload over n rails: part k's offset and length. */
static void cut(size_t len, int n, size_t off[MAX_RAILS], size_t plen[MAX_RAILS])
{
    size_t each = n > 1 && len >= STRIPE_MIN ? len / (size_t)n / ALIGN * ALIGN : 0;
    size_t first = len - each * (size_t)(n - 1);
    for (int k = 0; k < n; k++) {
        off[k] = k == 0 ? 0 : first + each * (size_t)(k - 1);
        plen[k] = k == 0 ? first : each;
    }
}

/* ---- contexts -------------------------------------------------------------------- */

static const char *rail_vet(void *arg, const uint8_t hello[CL_HELLO_BYTES])
{
    (void)arg;
    return memcmp(hello, RAIL_MAGIC, sizeof(RAIL_MAGIC)) == 0 ? NULL : "not a rail's hello";
}

/* Tests over one interface: COLL_RAILS_REPEAT=N uses the first one N times. */
static int repeat(cl_iface *ifs, int n)
{
    const char *e = getenv("COLL_RAILS_REPEAT");
    int want = e ? atoi(e) : 0;
    for (; n < want && n < MAX_RAILS; n++)
        ifs[n] = ifs[0];
    return n;
}

static int rails_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_iface ifs[MAX_RAILS];
    char why[400];
    int n = cl_pick_ifaces(cfg->device, cfg->family, ifs, MAX_RAILS, why, sizeof(why));
    if (n < 0) {
        cl_tr_error(cfg, "%s; the filter is COLL_SOCKET_IFNAME's", why);
        return COLL_EINVAL;
    }
    n = repeat(ifs, n);
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    pthread_mutex_init(&ctx->mu, NULL);
    for (int k = 0; k < n; k++) {
        char dev[24];
        snprintf(dev, sizeof(dev), "=%.15s", ifs[k].name);
        cl_tr_config sub = *cfg;
        sub.device = strcmp(ifs[k].name, "last-resort") == 0 ? cfg->device : dev;
        sub.vet = k == 0 ? cfg->vet : rail_vet;
        int rc = TCP->ctx_create(&sub, &ctx->rail[k]);
        if (rc != COLL_OK) {
            while (k-- > 0)
                TCP->ctx_destroy(ctx->rail[k]);
            free(ctx);
            return rc;
        }
        ctx->n = k + 1;
    }
    cl_log(COLL_LOG_INFO, "rails: %d rail%s", n, n == 1 ? "" : "s");
    *out = ctx;
    return COLL_OK;
}

static void rails_ctx_destroy(cl_tr_ctx *ctx)
{
    for (int k = 0; k < ctx->n; k++)
        TCP->ctx_destroy(ctx->rail[k]);
    for (cl_tr_conn *c = ctx->conns, *n; c; c = n) {
        n = c->next;
        pthread_mutex_destroy(&c->send_mu);
        free(c);
    }
    for (cl_tr_listener *l = ctx->listeners, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    for (cl_tr_req *r = ctx->reqs, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

static cl_tr_conn *conn_new(cl_tr_ctx *ctx)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx;
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_mutex_lock(&ctx->mu);
    c->next = ctx->conns;
    ctx->conns = c;
    pthread_mutex_unlock(&ctx->mu);
    return c;
}

static void name_conn(cl_tr_conn *c)
{
    snprintf(c->name, sizeof(c->name), "%s (%d rail%s)", TCP->peer_name(c->rail[0]), c->n,
             c->n == 1 ? "" : "s");
}

/* ---- listening and accepting ------------------------------------------------------- */

static int rails_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    memset(handle, 0, CL_HANDLE_BYTES);
    size_t at = 0;
    for (int k = 0; k < ctx->n; k++) {
        char h[CL_HANDLE_BYTES];
        int rc = TCP->listen(ctx->rail[k], h, &l->rail[k]);
        size_t len = strnlen(h, CL_HANDLE_BYTES);
        if (rc != COLL_OK || at + len + 2 > CL_HANDLE_BYTES) { /* no room: fewer rails */
            if (rc == COLL_OK)
                TCP->close_listener(l->rail[k]);
            l->rail[k] = NULL;
            if (k == 0) {
                free(l);
                return rc != COLL_OK ? rc : COLL_EINVAL;
            }
            break;
        }
        memcpy(handle + at, h, len);
        at += len + 1;
    }
    pthread_mutex_lock(&ctx->mu);
    l->next = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->mu);
    *out = l;
    return COLL_OK;
}

static int listening(const cl_tr_listener *l)
{
    int n = 0;
    while (n < MAX_RAILS && l->rail[n])
        n++;
    return n;
}

/* Rails k > 0 that came in, kept until their rail 0 claims them. */
static void take_spares(cl_tr_listener *l)
{
    for (int k = 1; k < listening(l); k++) {
        uint8_t hello[CL_HELLO_BYTES];
        cl_tr_conn *t;
        while (TCP->accept(l->rail[k], hello, &t) == COLL_OK) {
            if (l->nspares == MAX_SPARE) {
                TCP->close_conn(t);
                continue;
            }
            spare *s = &l->spares[l->nspares++];
            s->c = t;
            memcpy(&s->id, hello + 8, 8);
            s->k = hello[16];
        }
    }
}

static int find_spare(cl_tr_listener *l, uint64_t id, int k)
{
    for (int i = 0; i < l->nspares; i++)
        if (l->spares[i].id == id && l->spares[i].k == k)
            return i;
    return -1;
}

/* c's id message, when in: COLL_OK, COLL_INPROGRESS, or the failure that drops c. */
static int read_id(cl_tr_conn *c)
{
    if (c->have_id)
        return COLL_OK;
    cl_msg_hdr h;
    size_t nb = 0;
    int rc = TCP->recv_now(c->rail[0], &h, c->id, sizeof(c->id), &nb);
    if (rc == COLL_OK && (h.coll != RAIL_ID || nb != sizeof(c->id) || c->id[1] < 1 ||
                          c->id[1] > MAX_RAILS))
        rc = COLL_EPROTO;
    c->have_id = rc == COLL_OK;
    return rc;
}

/* c is whole once every rail its id names is in: they leave the spares for c. */
static int complete_conn(cl_tr_listener *l, cl_tr_conn *c)
{
    int n = (int)c->id[1];
    for (int k = 1; k < n; k++)
        if (find_spare(l, c->id[0], k) < 0)
            return 0;
    for (int k = 1; k < n; k++) {
        int i = find_spare(l, c->id[0], k);
        c->rail[k] = l->spares[i].c;
        l->spares[i] = l->spares[--l->nspares];
    }
    c->n = n;
    return 1;
}

/* A forming connection that is whole now, unlinked; NULL if none. */
static cl_tr_conn *whole_one(cl_tr_listener *l)
{
    for (cl_tr_conn **p = &l->forming; *p;) {
        cl_tr_conn *c = *p;
        int rc = read_id(c);
        if (rc != COLL_OK && rc != COLL_INPROGRESS) {
            cl_log(COLL_LOG_DEBUG, "rails: dropped %s: no rails id (%s)",
                   TCP->peer_name(c->rail[0]), coll_strerror(rc));
            TCP->close_conn(c->rail[0]);
            *p = c->next_forming;
            continue;
        }
        if (rc == COLL_OK && complete_conn(l, c)) {
            *p = c->next_forming;
            return c;
        }
        p = &c->next_forming;
    }
    return NULL;
}

static int rails_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    int many = listening(l) > 1;
    if (many)
        take_spares(l);
    cl_tr_conn *t;
    uint8_t h[CL_HELLO_BYTES];
    while (TCP->accept(l->rail[0], h, &t) == COLL_OK) {
        cl_tr_conn *c = conn_new(l->ctx);
        if (!c) {
            TCP->close_conn(t);
            return COLL_ENOMEM;
        }
        c->rail[0] = t;
        c->n = 1;
        memcpy(c->hello, h, CL_HELLO_BYTES);
        if (!many) {
            name_conn(c);
            memcpy(hello, h, CL_HELLO_BYTES);
            *out = c;
            return COLL_OK;
        }
        c->next_forming = l->forming;
        l->forming = c;
    }
    cl_tr_conn *c = many ? whole_one(l) : NULL;
    if (!c)
        return COLL_INPROGRESS;
    name_conn(c);
    memcpy(hello, c->hello, CL_HELLO_BYTES);
    *out = c;
    return COLL_OK;
}

static void rails_close_listener(cl_tr_listener *l)
{
    for (int k = 0; k < MAX_RAILS && l->rail[k]; k++)
        TCP->close_listener(l->rail[k]);
    for (cl_tr_conn *c = l->forming; c; c = c->next_forming)
        TCP->close_conn(c->rail[0]);
    l->forming = NULL;
    for (int i = 0; i < l->nspares; i++)
        TCP->close_conn(l->spares[i].c);
    l->nspares = 0;
}

/* ---- connecting ------------------------------------------------------------------ */

/* The addresses of a handle, each as a tcp handle of its own; how many. */
static int split_handle(const char handle[CL_HANDLE_BYTES], char out[MAX_RAILS][CL_HANDLE_BYTES])
{
    int n = 0;
    for (size_t at = 0; at < CL_HANDLE_BYTES && handle[at] && n < MAX_RAILS; n++) {
        size_t len = strnlen(handle + at, CL_HANDLE_BYTES - at);
        memset(out[n], 0, CL_HANDLE_BYTES);
        memcpy(out[n], handle + at, len);
        at += len + 1;
    }
    return n;
}

static uint64_t fresh_id(void)
{
    uint64_t id;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
        id = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&id;
    return id;
}

/* Rails 1.. of c and the id message that binds them to rail 0 for the acceptor. */
static int dial_rails(cl_tr_conn *c, char h[MAX_RAILS][CL_HANDLE_BYTES], int theirs, size_t want)
{
    c->id[0] = fresh_id();
    c->id[1] = (uint64_t)c->n;
    for (int k = 1; k < c->n; k++) {
        uint8_t hello[CL_HELLO_BYTES] = {0};
        memcpy(hello, RAIL_MAGIC, sizeof(RAIL_MAGIC));
        memcpy(hello + 8, &c->id[0], 8);
        hello[16] = (uint8_t)k;
        int rc = TCP->connect(c->ctx->rail[k], h[k], hello, want, &c->rail[k]);
        if (rc != COLL_OK)
            return rc;
    }
    if (theirs < 2)
        return COLL_OK;
    cl_msg_hdr idh = {.magic = CL_MSG_MAGIC, .coll = RAIL_ID, .len = sizeof(c->id)};
    cl_tr_req *r; /* tested by nobody: freed with the tcp context */
    return TCP->isend(c->rail[0], &idh, c->id, &r);
}

static int rails_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                         const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    char h[MAX_RAILS][CL_HANDLE_BYTES];
    int theirs = split_handle(handle, h);
    if (theirs == 0)
        return COLL_EINVAL;
    cl_tr_conn *c = conn_new(ctx);
    if (!c)
        return COLL_ENOMEM;
    c->n = CL_MIN(theirs, ctx->n);
    int rc = TCP->connect(ctx->rail[0], h[0], hello, want, &c->rail[0]);
    if (rc == COLL_OK)
        rc = dial_rails(c, h, theirs, want);
    if (rc != COLL_OK) {
        for (int k = 0; k < c->n; k++)
            if (c->rail[k])
                TCP->close_conn(c->rail[k]);
        c->n = 0;
        return rc;
    }
    name_conn(c);
    *out = c;
    return COLL_OK;
}

/* ---- requests -------------------------------------------------------------------- */

static cl_tr_req *req_new(cl_tr_conn *c)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->head.tr = &cl_transport_rails;
    r->conn = c;
    cl_tr_ctx *ctx = c->ctx;
    pthread_mutex_lock(&ctx->mu);
    r->next = ctx->reqs;
    if (r->next)
        r->next->prev = r;
    ctx->reqs = r;
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

static void req_free(cl_tr_req *r)
{
    cl_tr_ctx *ctx = r->conn->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        ctx->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    pthread_mutex_unlock(&ctx->mu);
    free(r);
}

static int rails_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    cl_tr_req *r = req_new(c);
    if (!r)
        return COLL_ENOMEM;
    size_t off[MAX_RAILS];
    cut(hdr->len, c->n, off, r->part_len);
    int parts = r->part_len[c->n - 1] ? c->n : 1, rc = COLL_OK;
    pthread_mutex_lock(&c->send_mu);
    for (int k = 0; k < parts && rc == COLL_OK; k++) {
        r->part[k] = k ? (cl_msg_hdr){.magic = CL_MSG_MAGIC, .coll = RAIL_PART,
                                      .len = (uint32_t)r->part_len[k], .seq = hdr->seq,
                                      .unit = (uint32_t)k}
                       : *hdr;
        rc = cl_tcp_isend_span(c->rail[k], &r->part[k], (const char *)buf + off[k],
                               r->part_len[k], &r->sub[k]);
        if (rc == COLL_OK)
            atomic_store(&r->nsub, k + 1);
    }
    pthread_mutex_unlock(&c->send_mu);
    r->len = hdr->len;
    r->is_send = 1;
    atomic_fetch_add(&c->sends, 1);
    if (rc != COLL_OK && atomic_load(&r->nsub) == 0) {
        atomic_fetch_sub(&c->sends, 1);
        req_free(r);
        return rc;
    }
    r->status = rc;
    *out = r;
    return COLL_OK;
}

/* Rail 0's header is in (under rail 0's lock): the other parts' receives go up now, in
 * the order of rail 0's headers, which is each rail's order of parts. */
static size_t on_header(void *arg, const cl_msg_hdr *hdr)
{
    cl_tr_req *r = arg;
    cl_tr_conn *c = r->conn;
    size_t off[MAX_RAILS];
    cut(hdr->len, c->n, off, r->part_len);
    r->len = hdr->len; /* the caller's header may be another receive's too by test() */
    int parts = r->part_len[c->n - 1] ? c->n : 1;
    for (int k = 1; k < parts; k++) {
        int rc = cl_tcp_irecv_hook(c->rail[k], &r->part[k], r->buf + off[k], r->part_len[k],
                                   NULL, NULL, &r->sub[k]);
        if (rc != COLL_OK) {
            r->status = rc;
            break;
        }
        atomic_store(&r->nsub, k + 1);
    }
    return r->part_len[0];
}

static int rails_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = req_new(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_in = hdr;
    r->buf = buf;
    atomic_store(&r->nsub, 1);
    cl_tr_req *sub;
    int rc = cl_tcp_irecv_hook(c->rail[0], hdr, buf, cap, on_header, r, &sub);
    if (rc != COLL_OK) {
        req_free(r);
        return rc;
    }
    r->sub[0] = sub;
    *out = r;
    return COLL_OK;
}

/* A part failed: the others may never come, so every rail of the connection closes and
 * fails them (they must be done before the caller's buffer goes back). */
static void part_failed(cl_tr_req *r, int rc)
{
    if (r->status == COLL_OK)
        r->status = rc;
    if (r->closed || atomic_load(&r->nsub) < 2) /* one part: tcp's failure as it is */
        return;
    r->closed = 1;
    cl_log(COLL_LOG_WARN, "rails: a part on %s failed (%s): closing its rails", r->conn->name,
           coll_strerror(rc));
    for (int k = 0; k < r->conn->n; k++)
        TCP->close_conn(r->conn->rail[k]);
}

static int rails_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    int all = 1;
    /* nsub is read afresh each time: a receive's parts are posted at rail 0's header,
     * before rail 0's part can complete, so once sub[0] is done nsub is final */
    for (int k = 0; k < atomic_load(&r->nsub); k++) {
        if (r->fin[k])
            continue;
        int d = 0;
        size_t nb = 0;
        int rc = TCP->test(r->sub[k], &d, &nb);
        if (!d) {
            all = 0;
            continue;
        }
        r->fin[k] = 1;
        r->moved_done += nb + sizeof(cl_msg_hdr);
        /* A part is a rails part of its cut's length, or the stream is not ours: a short
         * one would leave stale bytes in the caller's buffer, reported as received. */
        if (rc == COLL_OK && !r->is_send && k > 0 &&
            (nb != r->part_len[k] || r->part[k].coll != RAIL_PART))
            rc = COLL_EPROTO;
        if (rc != COLL_OK)
            part_failed(r, rc);
    }
    if (!all) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    *done = 1;
    int status = r->status;
    if (r->is_send)
        atomic_fetch_sub(&r->conn->sends, 1);
    if (nbytes)
        *nbytes = status == COLL_OK ? r->len : 0;
    req_free(r);
    return status;
}

static size_t rails_moved(cl_tr_req *r)
{
    size_t m = r->moved_done;
    for (int k = 0; k < atomic_load(&r->nsub); k++)
        if (!r->fin[k])
            m += TCP->moved(r->sub[k]);
    return m;
}

/* ---- the rest of the contract ---------------------------------------------------- */

static void rails_close_conn(cl_tr_conn *c)
{
    for (int k = 0; k < c->n; k++)
        TCP->close_conn(c->rail[k]);
}

static void rails_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    for (int k = 0; k < ctx->n; k++)
        TCP->shutdown(ctx->rail[k], status, k == 0 ? farewell : NULL);
}

static size_t rails_poll(cl_tr_ctx *ctx, int mode)
{
    size_t moved = 0;
    for (int k = 0; k < ctx->n; k++)
        moved += TCP->poll(ctx->rail[k], mode);
    return moved;
}

/* Rail 0 alone: not a message the cut stripes (the caller posts it instead), and not
 * while a send is out, as a tcp send_now never overtakes a queued send (its rail-0 part
 * may be out while the rest is still queued). */
static int rails_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf)
{
    if (c->n > 1 && (hdr->len >= STRIPE_MIN || atomic_load(&c->sends) > 0))
        return COLL_INPROGRESS;
    return TCP->send_now(c->rail[0], hdr, buf);
}

static int rails_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    return TCP->recv_now(c->rail[0], hdr, buf, cap, nbytes);
}

static const char *rails_peer_name(cl_tr_conn *c)
{
    return c->name;
}

const cl_transport cl_transport_rails = {
    .name = "rails",
    .duplex = 1,
    .ctx_create = rails_ctx_create,
    .ctx_destroy = rails_ctx_destroy,
    .listen = rails_listen,
    .accept = rails_accept,
    .close_listener = rails_close_listener,
    .connect = rails_connect,
    .isend = rails_isend,
    .irecv = rails_irecv,
    .test = rails_test,
    .moved = rails_moved,
    .close_conn = rails_close_conn,
    .shutdown = rails_shutdown,
    .poll = rails_poll,
    .send_now = rails_send_now,
    .recv_now = rails_recv_now,
    .peer_name = rails_peer_name,
};
