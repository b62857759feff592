/* The loop transport: ranks are threads of one process, connections are in-memory pipes.
 * A send copies straight into a posted receive, or into a queued message when none is
 * posted yet (eager), so it completes at once; a receive completes when its message
 * arrives. It exists to test algorithms fast; it must stay simple enough to trust. */
#include "collective.h"
#include "transports/reqq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct msg {
    struct msg *next;
    cl_msg_hdr hdr;
    unsigned char data[];
};

struct pipe {
    pthread_mutex_t mu;
    int refs;
    int closed; /* either end closed: later traffic fails */
    int bad;    /* a message failed its receive (its status): none after it is delivered */
    struct msg *msg_head, *msg_tail;
    cl_reqq recvs; /* the receiving context's requests, which complete with its notifier */
};

struct cl_tr_conn {
    cl_tr_ctx *ctx;
    struct pipe *p;
    struct cl_tr_conn *next_all, *next_ready;
    uint8_t hello[CL_HELLO_BYTES];
    char name[32];
    int closed, is_recv;
};

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    unsigned id;
    struct cl_tr_listener *next_reg;
    cl_tr_conn *ready_head, *ready_tail;
};

struct cl_tr_ctx {
    cl_notifier *notifier;
    cl_lock mu; /* the connection list, and the requests' live list */
    cl_req_owner reqs;
    cl_tr_conn *conns;
    int down;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_tr_listener *registry;
static unsigned next_id = 1;

static int loop_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    ctx->notifier = cfg->notifier;
    ctx->reqs = (cl_req_owner){&cl_transport_loop, &ctx->mu, cfg->notifier, NULL};
    *out = ctx;
    return COLL_OK;
}

static void pipe_release(struct pipe *p)
{
    pthread_mutex_lock(&p->mu);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    while (p->msg_head) {
        struct msg *m = p->msg_head;
        p->msg_head = m->next;
        free(m);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Closing either end fails the receives still waiting on the pipe: nothing will come.
 * Once the receiving end closed none is queued, so no sender touches its context again. */
static void pipe_close(cl_tr_conn *c, int status)
{
    struct pipe *p = c->p;
    pthread_mutex_lock(&p->mu);
    p->closed = 1;
    cl_reqq_fail(&p->recvs, c->is_recv ? status : COLL_EPEER);
    pthread_mutex_unlock(&p->mu);
}

static void loop_ctx_destroy(cl_tr_ctx *ctx)
{
    for (cl_tr_conn *c = ctx->conns; c;) {
        cl_tr_conn *n = c->next_all;
        if (!c->closed)
            pipe_close(c, COLL_EPEER);
        pipe_release(c->p);
        free(c);
        c = n;
    }
    pthread_mutex_lock(&reg_mu);
    for (cl_tr_listener **l = &registry; *l;) {
        if ((*l)->ctx == ctx) {
            cl_tr_listener *dead = *l;
            *l = dead->next_reg;
            free(dead);
        } else {
            l = &(*l)->next_reg;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    cl_req_owner_free_live(&ctx->reqs); /* requests their callers abandoned */
    free(ctx);
}

static int loop_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    pthread_mutex_lock(&reg_mu);
    l->id = next_id++;
    l->next_reg = registry;
    registry = l;
    pthread_mutex_unlock(&reg_mu);
    memset(handle, 0, CL_HANDLE_BYTES);
    snprintf(handle, CL_HANDLE_BYTES, "loop:%u", l->id);
    *out = l;
    return COLL_OK;
}

static int loop_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    pthread_mutex_lock(&reg_mu);
    cl_tr_conn *c = l->ready_head;
    if (c) {
        l->ready_head = c->next_ready;
        if (!l->ready_head)
            l->ready_tail = NULL;
        c->next_ready = NULL;
    }
    pthread_mutex_unlock(&reg_mu);
    if (!c)
        return COLL_INPROGRESS;
    memcpy(hello, c->hello, CL_HELLO_BYTES);
    *out = c;
    return COLL_OK;
}

static void loop_close_listener(cl_tr_listener *l)
{
    (void)l; /* freed with its context; connecting to it later is harmless */
}

static cl_tr_conn *new_conn(cl_tr_ctx *ctx, struct pipe *p, const char *name)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx;
    c->p = p;
    snprintf(c->name, sizeof(c->name), "%s", name);
    cl_lock_take(&ctx->mu);
    c->next_all = ctx->conns;
    ctx->conns = c;
    cl_lock_give(&ctx->mu);
    return c;
}

static int loop_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                        const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    (void)want; /* queued messages are not bounded */
    unsigned id;
    if (sscanf(handle, "loop:%u", &id) != 1)
        return COLL_EINVAL;
    struct pipe *p = calloc(1, sizeof(*p));
    if (!p)
        return COLL_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    p->refs = 2;
    pthread_mutex_lock(&reg_mu);
    cl_tr_listener *l = registry;
    while (l && l->id != id)
        l = l->next_reg;
    cl_tr_conn *s = l ? new_conn(ctx, p, handle) : NULL;
    cl_tr_conn *r = s ? new_conn(l->ctx, p, "loop peer") : NULL;
    if (r) {
        r->is_recv = 1;
        memcpy(r->hello, hello, CL_HELLO_BYTES);
        if (l->ready_tail)
            l->ready_tail->next_ready = r;
        else
            l->ready_head = r;
        l->ready_tail = r;
        cl_notify(l->ctx->notifier);
    }
    pthread_mutex_unlock(&reg_mu);
    if (!r) {
        /* No such listener (or no memory): the peer is unreachable. */
        if (s)
            s->closed = 1, pipe_close(s, COLL_EPEER);
        else
            free(p);
        return s ? COLL_ENOMEM : COLL_EPEER;
    }
    *out = s;
    return COLL_OK;
}

/* Every request is listed as its context's until tested, so that destroying the context
 * frees those a caller abandoned. */
static cl_tr_req *kept(cl_tr_req *r)
{
    if (r)
        cl_req_keep(r);
    return r;
}

/* r->len is the receive's capacity until the message is in. */
static int deliver(cl_tr_req *r, const cl_msg_hdr *hdr, const void *data)
{
    *r->hdr_in = *hdr;
    if (hdr->len > r->len)
        return COLL_EMISMATCH;
    if (hdr->len)
        memcpy(r->buf, data, hdr->len);
    r->len = hdr->len;
    return COLL_OK;
}

static int loop_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    cl_tr_req *s = kept(cl_req_send(&c->ctx->reqs, hdr, buf));
    if (!s)
        return COLL_ENOMEM;
    struct pipe *p = c->p;
    int status = COLL_OK;
    pthread_mutex_lock(&p->mu);
    if (p->closed) {
        status = COLL_EPEER;
    } else if (p->recvs.head) {
        cl_tr_req *r = cl_reqq_pop(&p->recvs);
        int rs = deliver(r, hdr, buf);
        cl_req_complete(r, rs);
        if (rs != COLL_OK)
            p->closed = 1, p->bad = rs; /* as on a stream: nothing after it can be trusted */
    } else {
        struct msg *m = malloc(sizeof(*m) + hdr->len);
        if (!m) {
            status = COLL_ENOMEM;
        } else {
            m->next = NULL;
            m->hdr = *hdr;
            if (hdr->len)
                memcpy(m->data, buf, hdr->len);
            if (p->msg_tail)
                p->msg_tail->next = m;
            else
                p->msg_head = m;
            p->msg_tail = m;
        }
    }
    pthread_mutex_unlock(&p->mu);
    cl_req_complete(s, status);
    *out = s;
    return COLL_OK;
}

static int loop_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = kept(cl_req_recv(&c->ctx->reqs, hdr, buf, cap));
    if (!r)
        return COLL_ENOMEM;
    struct pipe *p = c->p;
    pthread_mutex_lock(&p->mu);
    if (p->bad) {
        cl_req_complete(r, p->bad);
    } else if (p->msg_head) {
        struct msg *m = p->msg_head;
        p->msg_head = m->next;
        if (!p->msg_head)
            p->msg_tail = NULL;
        int rs = deliver(r, &m->hdr, m->data);
        free(m);
        if (rs != COLL_OK)
            p->closed = 1, p->bad = rs;
        cl_req_complete(r, rs);
    } else if (p->closed) {
        cl_req_complete(r, COLL_EPEER);
    } else {
        cl_reqq_append(&p->recvs, r);
    }
    pthread_mutex_unlock(&p->mu);
    *out = r;
    return COLL_OK;
}

/* Marks c closed; 1 if it was already. */
static int mark_closed(cl_tr_conn *c)
{
    cl_lock_take(&c->ctx->mu);
    int was = c->closed;
    c->closed = 1;
    cl_lock_give(&c->ctx->mu);
    return was;
}

static void loop_close_conn(cl_tr_conn *c)
{
    if (!mark_closed(c))
        pipe_close(c, COLL_EPEER);
}

static void loop_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    cl_lock_take(&ctx->mu);
    cl_tr_conn *c = ctx->conns;
    ctx->down = 1;
    cl_lock_give(&ctx->mu);
    for (; c; c = c->next_all) {
        int was = mark_closed(c);
        cl_tr_req *r;
        if (!was && farewell && !c->is_recv && loop_isend(c, farewell, NULL, &r) == COLL_OK)
            cl_req_test(r, &(int){0}, NULL);
        if (!was)
            pipe_close(c, status);
    }
}

static const char *loop_peer_name(cl_tr_conn *c)
{
    return c->name;
}

const cl_transport cl_transport_loop = {
    .name = "loop",
    .ctx_create = loop_ctx_create,
    .ctx_destroy = loop_ctx_destroy,
    .listen = loop_listen,
    .accept = loop_accept,
    .close_listener = loop_close_listener,
    .connect = loop_connect,
    .isend = loop_isend,
    .irecv = loop_irecv,
    .test = cl_req_test,
    .close_conn = loop_close_conn,
    .shutdown = loop_shutdown,
    .peer_name = loop_peer_name,
};
