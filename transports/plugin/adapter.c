/* The adapter: a plugin's coll_net_ops served through the internal contract
 * (transports/transport.h), so every collective runs over a plugin as over tcp.
 *
 * Framing: a library message (cl_msg_hdr + payload) is one plugin message when its
 * payload fits INLINE bytes (the header and payload copied into a staging slot), else
 * two: the header alone, then the payload straight from the caller's buffer (no copy of
 * bulk data). The receiver posts one staging receive per library message; the header
 * says whether a second message follows and its exact size, so a payload longer than the
 * caller's receive is known before anything is posted for it (COLL_EMISMATCH).
 * A send connection's first message is the hello; the listener keeps what the plugin's
 * accept() gives until its hello came and passed the vet.
 *
 * Contexts: a communicator's context here holds its own listeners, connections and
 * requests, over the plugin context of the process (shared.c) that every communicator
 * running the plugin shares. Threads: that shared context's mutex serializes every call
 * into the plugin, from any communicator (the ABI promises plugins that), and guards
 * this file's state too. Each communicator's progress thread calls test() while its
 * requests are pending, napping between looks from 10 us up to 1 ms while nothing moves
 * (the plugin's notify() wakes every communicator's); a waiter that polls (CL_POLL)
 * moves them on its own thread. */
#include "transports/plugin/plugin.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    STAGE = 4096,                         /* a staging slot: the first message's room */
    INLINE = STAGE - sizeof(cl_msg_hdr), /* payload bytes that ride with their header */
    SLOTS = 16,                           /* a send connection's staging slots */
    PENDING = 64,                         /* connections a listener holds without hello */
    NAP_MAX_US = 1000,
};

struct cl_tr_req {
    cl_tr_req_head head;
    cl_tr_req *next;             /* its connection's queue, in posting order */
    cl_tr_req *all_prev, *all_next; /* the context's, freed with it if never tested */
    cl_tr_conn *c;
    cl_msg_hdr out;   /* a send's header */
    cl_msg_hdr *hdr;  /* a receive's: where its header goes */
    void *buf;
    size_t cap;
    int stage;        /* send: messages posted; receive: see recv_step */
    int slot;         /* a send's staging slot, -1 when none */
    void *preq[2];    /* the plugin's requests not done yet */
    int done, status;
    size_t nbytes;
};

struct cl_tr_conn {
    cl_tr_ctx *ctx;
    cl_tr_conn *next;
    void *comm;   /* the plugin's; NULL once closed */
    int send;
    int status;   /* COLL_OK, or what every request fails with */
    cl_tr_req *head, *tail;
    uint8_t hello[CL_HELLO_BYTES];
    void *hello_req;
    int hello_state; /* send: 0 to post, 1 posted, 2 gone */
    unsigned char *stage; /* SLOTS slots (send) or one (receive) */
    void *mh;             /* stage's registration */
    uint32_t busy_slots;
    char name[COLL_NET_NAME_BYTES + 24];
};

typedef struct pending {
    void *comm;
    void *req;
    int64_t deadline_ms;
    uint8_t hello[CL_HELLO_BYTES];
} pending;

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    cl_tr_listener *next;
    void *comm; /* NULL once closed */
    pending wait[PENDING];
    int nwait;
};

struct cl_tr_ctx {
    const cl_net_plugin *p;
    const coll_net_ops *ops;
    cl_net_shared *sh; /* the process's plugin context: net, dev, speed */
    cl_net_user user;  /* on sh's notify() list: wakes this context's thread */
    int optional;      /* auto's: a listen that fails is said at info */
    cl_notifier *notifier;
    cl_tr_vet vet;
    void *vet_arg;
    int timeout_ms;
    pthread_mutex_t *mu; /* sh->mu: every plugin call and everything below */
    cl_tr_conn *conns;
    cl_tr_listener *listeners;
    cl_tr_req *reqs;
    unsigned nconns;
    size_t moved;    /* bytes completed, for poll() */
    int completions; /* since the last notify */
    int stop;
    pthread_t thread;
    pthread_mutex_t wake_mu; /* not mu: notify() may come from inside a plugin call */
    pthread_cond_t wake_cv;
    uint64_t wakes;
};

/* ---- errors and completion ------------------------------------------------------ */

int cl_net_status(int net_rc)
{
    switch (net_rc) {
    case COLL_NET_OK: return COLL_OK;
    case COLL_NET_ERR_INVALID: return COLL_EINVAL;
    case COLL_NET_ERR_NOMEM: return COLL_ENOMEM;
    case COLL_NET_ERR_REMOTE: return COLL_EPEER;
    case COLL_NET_ERR_TRUNCATED: return COLL_EMISMATCH;
    default: return COLL_ESYS; /* SYSTEM, INTERNAL, and what the ABI does not know */
    }
}

/* A plugin operation's failure: said once where it happens (at level), with the
 * plugin's name and its own code (the COLL_E* code alone would not name either), then
 * mapped. */
static int failed_at(const cl_tr_ctx *ctx, const char *op, int net_rc, coll_log_level level)
{
    static const char *const names[] = {"ok",     "system",    "invalid", "nomem",
                                        "remote", "truncated", "internal"};
    const char *name = net_rc >= 0 && net_rc <= COLL_NET_ERR_INTERNAL ? names[net_rc] : "unknown";
    cl_log(level, "transport plugin '%s': %s() failed: %s (%d)", ctx->p->name, op, name, net_rc);
    return cl_net_status(net_rc);
}

/* A warning, or info for the peer's doing (the peer's side says why). */
static int failed(const cl_tr_ctx *ctx, const char *op, int net_rc)
{
    return failed_at(ctx, op, net_rc,
                     net_rc == COLL_NET_ERR_REMOTE ? COLL_LOG_INFO : COLL_LOG_WARN);
}

static void wake(cl_tr_ctx *ctx)
{
    pthread_mutex_lock(&ctx->wake_mu);
    ctx->wakes++;
    pthread_cond_signal(&ctx->wake_cv);
    pthread_mutex_unlock(&ctx->wake_mu);
}

static void on_notify(void *arg)
{
    wake(arg);
}

/* Takes the queue's head off as done with status (n payload bytes). */
static void complete_head(cl_tr_conn *c, int status, size_t n)
{
    cl_tr_req *r = c->head;
    c->head = r->next;
    if (!c->head)
        c->tail = NULL;
    if (r->slot >= 0)
        c->busy_slots &= ~(1u << r->slot);
    r->done = 1, r->status = status, r->nbytes = n;
    c->ctx->moved += n + sizeof(cl_msg_hdr);
    c->ctx->completions++;
}

static void close_comm(cl_tr_conn *c)
{
    const coll_net_ops *o = c->ctx->ops;
    if (!c->comm)
        return;
    if (c->mh)
        o->dereg_mr(c->comm, c->mh);
    (c->send ? o->close_send : o->close_recv)(c->comm);
    c->comm = NULL, c->mh = NULL;
}

/* The connection is over: its plugin comm closes (which ends the plugin's requests and
 * its use of their buffers) and every queued request fails with status. */
static void fail_conn(cl_tr_conn *c, int status)
{
    if (c->status == COLL_OK)
        c->status = status;
    close_comm(c);
    while (c->head)
        complete_head(c, c->status, 0);
}

/* Tests plugin request *preq: 1 once it is done (and *preq NULL), 0 while not, or the
 * failure (< 0). */
static int test_one(cl_tr_ctx *ctx, void **preq, size_t *n)
{
    int done = 0;
    size_t size = 0;
    int rc = ctx->ops->test(*preq, &done, &size);
    if (rc != COLL_NET_OK) {
        *preq = NULL;
        return failed(ctx, "test", rc);
    }
    if (done)
        *preq = NULL;
    if (n)
        *n = size;
    return done;
}

/* ---- sends ------------------------------------------------------------------------- */

static int msgs_of(const cl_tr_req *r)
{
    return r->out.len > INLINE ? 2 : 1;
}

/* Posts what r still has to post: 1 once all is posted, 0 when the plugin takes no more
 * now, or the failure. */
static int post_send(cl_tr_conn *c, cl_tr_req *r)
{
    const coll_net_ops *o = c->ctx->ops;
    if (r->stage == 0) {
        if (c->busy_slots == (1u << SLOTS) - 1)
            return 0;
        int s = __builtin_ctz(~c->busy_slots);
        unsigned char *st = c->stage + (size_t)s * STAGE;
        size_t inl = r->out.len > INLINE ? 0 : r->out.len;
        memcpy(st, &r->out, sizeof(r->out));
        if (inl)
            memcpy(st + sizeof(r->out), r->buf, inl);
        int rc = o->isend(c->comm, st, sizeof(r->out) + inl, c->mh, &r->preq[0]);
        if (rc != COLL_NET_OK)
            return failed(c->ctx, "isend", rc);
        if (!r->preq[0])
            return 0;
        r->slot = s, c->busy_slots |= 1u << s, r->stage = 1;
    }
    if (r->stage == 1 && msgs_of(r) == 2) {
        int rc = o->isend(c->comm, r->buf, r->out.len, NULL, &r->preq[1]);
        if (rc != COLL_NET_OK)
            return failed(c->ctx, "isend", rc);
        if (!r->preq[1])
            return 0;
        r->stage = 2;
    }
    return 1;
}

static int send_hello(cl_tr_conn *c)
{
    if (c->hello_state == 0) {
        int rc = c->ctx->ops->isend(c->comm, c->hello, CL_HELLO_BYTES, NULL, &c->hello_req);
        if (rc != COLL_NET_OK)
            return failed(c->ctx, "isend", rc);
        c->hello_state = c->hello_req ? 1 : 0;
    }
    if (c->hello_state == 1) {
        int rc = test_one(c->ctx, &c->hello_req, NULL);
        if (rc < 0)
            return rc;
        c->hello_state += rc;
    }
    return c->hello_state > 0;
}

/* Posts and tests c's sends; completes them in posting order. */
static void send_step(cl_tr_conn *c)
{
    int rc = send_hello(c);
    int room = rc > 0;
    for (cl_tr_req *r = c->head; r && rc >= 0; r = r->next) {
        if (room && (rc = post_send(c, r)) >= 0)
            room = rc;
        for (int k = 0; k < 2 && rc >= 0; k++)
            if (r->preq[k])
                rc = test_one(c->ctx, &r->preq[k], NULL);
    }
    if (rc < 0)
        return fail_conn(c, rc);
    while (c->head && c->head->stage == msgs_of(c->head) && !c->head->preq[0] &&
           !c->head->preq[1])
        complete_head(c, COLL_OK, c->head->out.len);
}

/* ---- receives ---------------------------------------------------------------------- */

/* The staged first message of r (n bytes) is in: its header goes to the caller; the
 * payload is copied (inline), or the second message is due. 1: r is complete, 0: a
 * payload follows, or the failure. */
static int took_first(cl_tr_conn *c, cl_tr_req *r, size_t n)
{
    if (n < sizeof(cl_msg_hdr))
        return COLL_EPROTO;
    memcpy(r->hdr, c->stage, sizeof(cl_msg_hdr));
    size_t len = r->hdr->len;
    if (n != sizeof(cl_msg_hdr) + (len > INLINE ? 0 : len))
        return COLL_EPROTO;
    if (len > r->cap)
        return COLL_EMISMATCH;
    if (len > INLINE)
        return 0;
    if (len)
        memcpy(r->buf, c->stage + sizeof(cl_msg_hdr), len);
    return 1;
}

/* Moves c's head receive as far as it goes. Stages: 0 post the staged receive, 1 it is
 * posted, 2 post the payload's, 3 that is posted. Returns 1 when the head completed. */
static int recv_head(cl_tr_conn *c)
{
    const coll_net_ops *o = c->ctx->ops;
    cl_tr_req *r = c->head;
    int rc = 1;
    size_t n = 0;
    if (r->stage == 0 || r->stage == 2) {
        void **pr = &r->preq[r->stage / 2];
        rc = r->stage == 0 ? o->irecv(c->comm, c->stage, STAGE, c->mh, pr)
                           : o->irecv(c->comm, r->buf, r->hdr->len, NULL, pr);
        if (rc != COLL_NET_OK)
            return fail_conn(c, failed(c->ctx, "irecv", rc)), 0;
        if (!*pr)
            return 0;
        r->stage++;
    }
    rc = test_one(c->ctx, &r->preq[r->stage / 2], &n);
    if (rc == 1 && r->stage == 1)
        rc = took_first(c, r, n);
    else if (rc == 1 && n != r->hdr->len)
        rc = COLL_EPROTO;
    if (rc < 0)
        return fail_conn(c, rc), 0;
    if (rc == 0 && r->stage == 1 && !r->preq[0]) { /* the payload follows */
        r->stage = 2;
        return recv_head(c);
    }
    if (rc == 1)
        complete_head(c, COLL_OK, r->hdr->len);
    return rc == 1;
}

static void recv_step(cl_tr_conn *c)
{
    while (c->head && c->comm && recv_head(c))
        ;
}

static void conn_step(cl_tr_conn *c)
{
    if (!c->comm)
        return;
    if (c->send)
        send_step(c);
    else
        recv_step(c);
}

/* Steps every connection; tells the waiters of completions. 1 if requests are pending. */
static int step_all(cl_tr_ctx *ctx)
{
    int busy = 0;
    for (cl_tr_conn *c = ctx->conns; c; c = c->next) {
        conn_step(c);
        busy |= c->comm && (c->head || c->hello_state == 1);
    }
    if (ctx->completions)
        cl_notify(ctx->notifier);
    ctx->completions = 0;
    return busy;
}

/* ---- the progress thread ----------------------------------------------------------- */

static void nap(cl_tr_ctx *ctx, uint64_t *seen, int64_t us)
{
    pthread_mutex_lock(&ctx->wake_mu);
    if (ctx->wakes == *seen) {
        if (us < 0) {
            pthread_cond_wait(&ctx->wake_cv, &ctx->wake_mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += us * 1000;
            ts.tv_sec += ts.tv_nsec / 1000000000;
            ts.tv_nsec %= 1000000000;
            pthread_cond_timedwait(&ctx->wake_cv, &ctx->wake_mu, &ts);
        }
    }
    *seen = ctx->wakes;
    pthread_mutex_unlock(&ctx->wake_mu);
}

static void *progress_main(void *arg)
{
    cl_tr_ctx *ctx = arg;
    uint64_t seen = 0;
    int64_t us = 0;
    for (;;) {
        pthread_mutex_lock(ctx->mu);
        if (ctx->stop) {
            pthread_mutex_unlock(ctx->mu);
            return NULL;
        }
        size_t before = ctx->moved;
        int busy = step_all(ctx);
        int moved = ctx->moved != before;
        pthread_mutex_unlock(ctx->mu);
        us = moved ? 0 : busy ? CL_MIN(us * 2 + 10, NAP_MAX_US) : -1;
        if (us)
            nap(ctx, &seen, us);
    }
}

/* ---- contexts ---------------------------------------------------------------------- */

/* The communicator's context: the process's plugin context (shared.c; started here
 * when this is its first user) and a progress thread of its own. */
int cl_net_ctx_create(cl_net_plugin *p, const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    *ctx = (cl_tr_ctx){.p = p,
                       .ops = &p->ops,
                       .optional = cfg->optional,
                       .notifier = cfg->notifier,
                       .vet = cfg->vet,
                       .vet_arg = cfg->vet_arg,
                       .timeout_ms = cfg->timeout_ms};
    int rc = cl_net_shared_get(p, cfg, &ctx->sh);
    if (rc != COLL_OK) {
        free(ctx);
        return rc;
    }
    ctx->mu = &ctx->sh->mu;
    pthread_mutex_init(&ctx->wake_mu, NULL);
    pthread_cond_init(&ctx->wake_cv, NULL);
    ctx->user = (cl_net_user){on_notify, ctx, NULL};
    cl_net_shared_watch(ctx->sh, &ctx->user);
    if (pthread_create(&ctx->thread, NULL, progress_main, ctx) != 0) {
        cl_tr_error(cfg, "transport plugin '%s': no progress thread", p->name);
        cl_net_shared_unwatch(ctx->sh, &ctx->user);
        cl_net_shared_put(ctx->sh);
        pthread_cond_destroy(&ctx->wake_cv);
        pthread_mutex_destroy(&ctx->wake_mu);
        free(ctx);
        return COLL_ESYS;
    }
    *out = ctx;
    return COLL_OK;
}

/* Takes l's pending connection i off the list (which stays oldest first). */
static void *take_pending(cl_tr_listener *l, int i)
{
    void *comm = l->wait[i].comm;
    memmove(&l->wait[i], &l->wait[i + 1], (size_t)(--l->nwait - i) * sizeof(l->wait[0]));
    return comm;
}

static void drop_pending(cl_tr_listener *l, int i)
{
    l->ctx->ops->close_recv(take_pending(l, i));
}

static void close_listener_locked(cl_tr_listener *l)
{
    while (l->nwait)
        drop_pending(l, 0);
    if (l->comm)
        l->ctx->ops->close_listen(l->comm);
    l->comm = NULL;
}

static void net_ctx_destroy(cl_tr_ctx *ctx)
{
    pthread_mutex_lock(ctx->mu);
    ctx->stop = 1;
    pthread_mutex_unlock(ctx->mu);
    wake(ctx);
    pthread_join(ctx->thread, NULL);
    cl_net_shared_unwatch(ctx->sh, &ctx->user);
    pthread_mutex_lock(ctx->mu); /* other communicators call the plugin meanwhile */
    for (cl_tr_listener *l = ctx->listeners, *n; l; l = n) {
        n = l->next;
        close_listener_locked(l);
        free(l);
    }
    for (cl_tr_conn *c = ctx->conns, *n; c; c = n) {
        n = c->next;
        fail_conn(c, COLL_EABORTED);
        free(c->stage);
        free(c);
    }
    for (cl_tr_req *r = ctx->reqs, *n; r; r = n) {
        n = r->all_next;
        free(r);
    }
    pthread_mutex_unlock(ctx->mu);
    cl_net_shared_put(ctx->sh);
    pthread_cond_destroy(&ctx->wake_cv);
    pthread_mutex_destroy(&ctx->wake_mu);
    free(ctx);
}

/* ---- connections ------------------------------------------------------------------- */

/* A connection over plugin comm (owned by it from here on, closed on failure). */
static int new_conn(cl_tr_ctx *ctx, void *comm, int send, cl_tr_conn **out)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    unsigned char *stage = malloc((size_t)(send ? SLOTS : 1) * STAGE);
    int rc = c && stage ? COLL_NET_OK : COLL_NET_ERR_NOMEM;
    if (rc == COLL_NET_OK && ctx->ops->reg_mr)
        rc = ctx->ops->reg_mr(comm, stage, (size_t)(send ? SLOTS : 1) * STAGE, &c->mh);
    if (rc != COLL_NET_OK) {
        (send ? ctx->ops->close_send : ctx->ops->close_recv)(comm);
        free(stage);
        free(c);
        return cl_net_status(rc);
    }
    c->ctx = ctx, c->comm = comm, c->send = send, c->stage = stage;
    snprintf(c->name, sizeof(c->name), "%s conn %u", ctx->p->name, ctx->nconns++);
    c->next = ctx->conns;
    ctx->conns = c;
    *out = c;
    return COLL_OK;
}

/* The plugin's handle in hex, without its trailing zero bytes (at least one byte): a
 * handle travels as text, which messages may print, and auto fits several in its own. */
static void hex_handle(const unsigned char raw[COLL_NET_HANDLE_BYTES], char handle[CL_HANDLE_BYTES])
{
    _Static_assert(2 * COLL_NET_HANDLE_BYTES < CL_HANDLE_BYTES, "a hex handle fits");
    static const char hex[] = "0123456789abcdef";
    int n = COLL_NET_HANDLE_BYTES;
    while (n > 1 && raw[n - 1] == 0)
        n--;
    memset(handle, 0, CL_HANDLE_BYTES);
    for (int i = 0; i < n; i++)
        handle[2 * i] = hex[raw[i] >> 4], handle[2 * i + 1] = hex[raw[i] & 15];
}

static int net_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    unsigned char raw[COLL_NET_HANDLE_BYTES] = {0};
    if (!l)
        return COLL_ENOMEM;
    pthread_mutex_lock(ctx->mu);
    int rc = ctx->ops->listen(ctx->sh->net, ctx->sh->dev, raw, &l->comm);
    if (rc == COLL_NET_OK) {
        l->ctx = ctx;
        l->next = ctx->listeners;
        ctx->listeners = l;
        hex_handle(raw, handle);
        *out = l;
    }
    pthread_mutex_unlock(ctx->mu);
    if (rc != COLL_NET_OK)
        free(l);
    if (rc == COLL_NET_OK)
        return COLL_OK;
    return failed_at(ctx, "listen", rc, ctx->optional ? COLL_LOG_INFO : COLL_LOG_WARN);
}

/* hex_handle's inverse: the bytes it left out are zeros. */
static int unhex(const char handle[CL_HANDLE_BYTES], unsigned char raw[COLL_NET_HANDLE_BYTES])
{
    size_t len = strnlen(handle, CL_HANDLE_BYTES);
    if (len < 2 || len % 2 || len > 2 * COLL_NET_HANDLE_BYTES ||
        strspn(handle, "0123456789abcdef") != len)
        return COLL_EINVAL;
    memset(raw, 0, COLL_NET_HANDLE_BYTES);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        char two[3] = {handle[2 * i], handle[2 * i + 1], 0};
        sscanf(two, "%2x", &v);
        raw[i] = (unsigned char)v;
    }
    return COLL_OK;
}

static int net_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                       const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    (void)want; /* the plugin sizes its own buffers */
    unsigned char raw[COLL_NET_HANDLE_BYTES];
    if (unhex(handle, raw) != COLL_OK)
        return COLL_EINVAL;
    pthread_mutex_lock(ctx->mu);
    void *comm = NULL;
    int rc = ctx->ops->connect(ctx->sh->net, ctx->sh->dev, raw, &comm);
    rc = rc != COLL_NET_OK ? failed(ctx, "connect", rc) : COLL_OK;
    if (rc == COLL_OK && !comm)
        rc = COLL_ESYS; /* the ABI promises a comm */
    if (rc == COLL_OK && (rc = new_conn(ctx, comm, 1, out)) == COLL_OK) {
        memcpy((*out)->hello, hello, CL_HELLO_BYTES);
        send_step(*out);
    }
    pthread_mutex_unlock(ctx->mu);
    if (rc == COLL_OK)
        wake(ctx);
    return rc;
}

/* Takes what the plugin accepted and moves the hellos; a pending connection whose hello
 * came whole and passed the vet becomes *out. */
static int listener_step(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    cl_tr_ctx *ctx = l->ctx;
    void *comm;
    while (l->comm && ctx->ops->accept(l->comm, &comm) == COLL_NET_OK && comm) {
        if (l->nwait == PENDING) /* the oldest silent one makes room */
            drop_pending(l, 0);
        l->wait[l->nwait++] = (pending){comm, NULL, cl_now_ms() + ctx->timeout_ms, {0}};
    }
    for (int i = 0; i < l->nwait; i++) {
        pending *w = &l->wait[i];
        size_t n = 0;
        int rc = w->req ? COLL_NET_OK
                        : ctx->ops->irecv(w->comm, w->hello, CL_HELLO_BYTES, NULL, &w->req);
        rc = rc != COLL_NET_OK ? -1 : w->req ? test_one(ctx, &w->req, &n) : 0;
        const char *why = rc < 0                   ? "its connection failed"
                          : rc == 0                ? NULL
                          : n != CL_HELLO_BYTES    ? "a hello of the wrong length"
                          : ctx->vet               ? ctx->vet(ctx->vet_arg, w->hello)
                                                   : NULL;
        if (rc == 1 && !why) {
            memcpy(hello, w->hello, CL_HELLO_BYTES);
            return new_conn(ctx, take_pending(l, i), 0, out);
        }
        if (why || (rc == 0 && cl_now_ms() > w->deadline_ms)) {
            cl_log(COLL_LOG_DEBUG, "transport plugin '%s': dropped a connection: %s",
                   ctx->p->name, why ? why : "no hello in time");
            drop_pending(l, i--);
        }
    }
    return COLL_INPROGRESS;
}

static int net_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    pthread_mutex_lock(l->ctx->mu);
    int rc = listener_step(l, hello, out);
    pthread_mutex_unlock(l->ctx->mu);
    return rc;
}

/* The wrapper goes with the context. */
static void net_close_listener(cl_tr_listener *l)
{
    pthread_mutex_lock(l->ctx->mu);
    close_listener_locked(l);
    pthread_mutex_unlock(l->ctx->mu);
}

/* ---- requests ---------------------------------------------------------------------- */

static int enqueue(cl_tr_conn *c, cl_tr_req *r, cl_tr_req **out)
{
    cl_tr_ctx *ctx = c->ctx;
    r->head.tr = &cl_net_adapter; /* every plugin's table has the adapter's test() */
    r->c = c, r->slot = -1;
    pthread_mutex_lock(ctx->mu);
    r->all_next = ctx->reqs;
    if (ctx->reqs)
        ctx->reqs->all_prev = r;
    ctx->reqs = r;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    if (c->status != COLL_OK || !c->comm) /* failed or closed: fails as it is posted */
        fail_conn(c, c->status != COLL_OK ? c->status : COLL_EPEER);
    else
        conn_step(c);
    if (ctx->completions)
        cl_notify(ctx->notifier);
    ctx->completions = 0;
    pthread_mutex_unlock(ctx->mu);
    wake(ctx);
    *out = r;
    return COLL_OK;
}

static int net_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return COLL_ENOMEM;
    r->out = *hdr, r->buf = (void *)buf;
    return enqueue(c, r, out);
}

static int net_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return COLL_ENOMEM;
    r->hdr = hdr, r->buf = buf, r->cap = cap;
    return enqueue(c, r, out);
}

static int net_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    cl_tr_ctx *ctx = r->c->ctx;
    pthread_mutex_lock(ctx->mu);
    if (!r->done) {
        conn_step(r->c);
        if (ctx->completions)
            cl_notify(ctx->notifier);
        ctx->completions = 0;
    }
    *done = r->done;
    int status = r->done ? r->status : COLL_OK;
    if (r->done) {
        if (nbytes)
            *nbytes = r->nbytes;
        if (r->all_prev)
            r->all_prev->all_next = r->all_next;
        else
            ctx->reqs = r->all_next;
        if (r->all_next)
            r->all_next->all_prev = r->all_prev;
        free(r);
    }
    pthread_mutex_unlock(ctx->mu);
    return status;
}

/* The wrapper stays until the context goes: the core may still name the peer. */
static void net_close_conn(cl_tr_conn *c)
{
    pthread_mutex_lock(c->ctx->mu);
    fail_conn(c, COLL_EPEER);
    cl_notify(c->ctx->notifier);
    pthread_mutex_unlock(c->ctx->mu);
}

/* Farewell only where no message is half posted (its peer would read the farewell as
 * the rest of that message) and the hello went out. */
static void say_farewell(cl_tr_conn *c, const cl_msg_hdr *farewell)
{
    for (cl_tr_req *r = c->head; r; r = r->next)
        if (r->stage != 0 && r->stage != msgs_of(r))
            return;
    if (!c->comm || c->hello_state == 0 || c->busy_slots == (1u << SLOTS) - 1)
        return;
    int s = __builtin_ctz(~c->busy_slots);
    unsigned char *st = c->stage + (size_t)s * STAGE;
    memcpy(st, farewell, sizeof(*farewell));
    void *req = NULL;
    cl_msg_hdr *h = (cl_msg_hdr *)st;
    h->len = 0;
    c->ctx->ops->isend(c->comm, st, sizeof(*h), c->mh, &req); /* best effort: not tested */
}

static void net_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    pthread_mutex_lock(ctx->mu);
    for (cl_tr_listener *l = ctx->listeners; l; l = l->next)
        close_listener_locked(l);
    for (cl_tr_conn *c = ctx->conns; c; c = c->next) {
        if (c->send && farewell)
            say_farewell(c, farewell);
        fail_conn(c, status);
    }
    cl_notify(ctx->notifier);
    pthread_mutex_unlock(ctx->mu);
}

static size_t net_poll(cl_tr_ctx *ctx, int mode)
{
    if (mode != CL_POLL)
        return 0;
    pthread_mutex_lock(ctx->mu);
    size_t before = ctx->moved;
    step_all(ctx);
    size_t moved = ctx->moved - before;
    pthread_mutex_unlock(ctx->mu);
    return moved;
}

/* The stream bytes of a request not done: its header once its first message is done,
 * and what the plugin's progress() (ABI version 2) says of its messages in flight.
 * Without progress() only whole messages count. A done request's plugin requests may be
 * gone (a failed connection's end with its comm): not asked. */
static size_t net_moved(cl_tr_req *r)
{
    cl_tr_ctx *ctx = r->c->ctx;
    int (*progress)(void *, size_t *) = ctx->ops->progress;
    size_t n = 0, part;
    pthread_mutex_lock(ctx->mu);
    for (int k = 0; k < 2 && !r->done && progress; k++)
        if (r->preq[k] && progress(r->preq[k], &part) == COLL_NET_OK)
            n += part;
    if (!r->done && r->stage > 0 && !r->preq[0])
        n += sizeof(cl_msg_hdr);
    pthread_mutex_unlock(ctx->mu);
    return n;
}

static const char *net_peer_name(cl_tr_conn *c)
{
    return c->name;
}

static uint32_t net_speed_mbps(cl_tr_ctx *ctx)
{
    return ctx->sh->speed_mbps;
}

const cl_transport cl_net_adapter = {
    .name = "plugin",
    .ctx_destroy = net_ctx_destroy,
    .listen = net_listen,
    .accept = net_accept,
    .close_listener = net_close_listener,
    .connect = net_connect,
    .isend = net_isend,
    .irecv = net_irecv,
    .test = net_test,
    .moved = net_moved,
    .close_conn = net_close_conn,
    .shutdown = net_shutdown,
    .poll = net_poll,
    .peer_name = net_peer_name,
    .speed_mbps = net_speed_mbps,
};
