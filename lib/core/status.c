/* The status endpoint (status.h): answers coll_status's asks for this rank's current
 * operations (the flight recorder's newest entries) and for every rank's endpoint, on
 * the heartbeat's thread. What it must never do: slow a collective or the heartbeat. So
 * it has sockets of its own (a flood here leaves the beats' queue alone), reads at most
 * BUDGET datagrams per WINDOW_MS (the rest wait in, or drop from, the kernel's queue),
 * and touches the communicator only through the recorder's lock-free reads. */
#include "core/status.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/beat.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/lifecycle.h"
#include "core/record.h"
#include "rdzv/store.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* 640 datagrams a second: a tool's ask of a few thousand ranks' endpoints in seconds,
 * a few milliseconds of one core at most under a flood. */
enum { WINDOW_MS = 100, BUDGET = 64 };

struct cl_status {
    /* The process's endpoint (status_list.c), or this one's where the process's serves
     * another address (own); rank 0's at the rendezvous's address, or -1. */
    int fd[2], own;
    int budget; /* datagrams still to be read in this window */
    int64_t window_end;
    int size;
    char (*addr)[CL_ADDR_TEXT]; /* every rank's endpoint */
};

static in_port_t *port_of(struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET ? &((struct sockaddr_in *)a)->sin_port
                                   : &((struct sockaddr_in6 *)a)->sin6_port;
}

void cl_status_set_port(cl_addr *a, uint16_t port)
{
    *port_of(&a->sa) = htons(port);
}

static int udp_at(const cl_addr *a)
{
    int fd = socket(a->sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && bind(fd, (const struct sockaddr *)&a->sa, a->len) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int cl_status_open(int near, cl_status **out, uint16_t *port)
{
    cl_status *s = calloc(1, sizeof(*s));
    if (!s)
        return COLL_ENOMEM;
    s->fd[0] = s->fd[1] = -1;
    *out = s;
    cl_addr a = {.len = sizeof(a.sa)};
    if (getsockname(near, (struct sockaddr *)&a.sa, &a.len) != 0)
        return COLL_ESYS;
    *port_of(&a.sa) = 0;
    if ((s->fd[0] = cl_status_share(&a, udp_at)) < 0)
        s->own = (s->fd[0] = udp_at(&a)) >= 0;
    if (s->fd[0] < 0 || getsockname(s->fd[0], (struct sockaddr *)&a.sa, &a.len))
        return COLL_ESYS;
    *port = ntohs(*port_of(&a.sa));
    return COLL_OK;
}

/* The address the rendezvous's store serves at: the first MASTER_ADDR resolves to. */
static int public_addr(const cl_rdzv *rv, cl_addr *a, char *why, size_t len)
{
    char host[512], port[16];
    struct addrinfo *res;
    if (cl_addr_split(rv->where, host, sizeof(host), port, sizeof(port)) != 0 ||
        cl_addr_resolve(host, port, rv->family, &res, why, len) != 0)
        return -1;
    memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* A socket at a, bound as the store binds (rdzv/tcp.c): at a itself where this machine
 * has it; else, unless a is a loopback address, at every address of its family, since
 * this machine may not be able to bind the one the others reach it by (a container's, a
 * NAT's). */
static int udp_public(cl_addr *a)
{
    int fd = udp_at(a);
    if (fd >= 0 || cl_addr_is_loopback(a))
        return fd;
    int family = a->sa.ss_family;
    in_port_t port_n = *port_of(&a->sa);
    memset(&a->sa, 0, sizeof(a->sa)); /* INADDR_ANY, in6addr_any */
    a->sa.ss_family = (sa_family_t)family;
    *port_of(&a->sa) = port_n;
    return udp_at(a);
}

void cl_status_public(cl_status *s, const cl_rdzv *rv)
{
    cl_addr a = {0};
    char why[300] = "";
    if (!s || strcmp(rv->scheme, "tcp") != 0)
        return;
    if (public_addr(rv, &a, why, sizeof(why)) != 0 || (s->fd[1] = udp_public(&a)) < 0)
        cl_log(COLL_LOG_INFO,
               "status: rank 0 cannot answer at udp %s (%s): coll_status reaches this "
               "job through another rank's endpoint (--rank-addr)",
               rv->where, why[0] ? why : strerror(errno));
}

int cl_status_start(cl_status *s, const coll_comm *c, const cl_card *cards)
{
    s->size = c->size;
    s->addr = calloc((size_t)c->size, sizeof(*s->addr));
    if (!s->addr)
        return COLL_ENOMEM;
    for (int r = 0; r < c->size; r++) {
        cl_addr a;
        if (!cards[r].status || cl_addr_parse(c->lives[r], &a) != 0)
            continue;
        *port_of(&a.sa) = htons(cards[r].status);
        cl_addr_text(&a, s->addr[r], sizeof(s->addr[r]));
    }
    cl_log(COLL_LOG_INFO, "rank %d: status endpoint at udp %s (coll_status --rank-addr)", c->rank,
           s->addr[c->rank]);
    return COLL_OK;
}

void cl_status_poll(cl_status *s, struct pollfd *p, int64_t now, int *wait_ms)
{
    if (now >= s->window_end) {
        s->budget = BUDGET;
        s->window_end = now + WINDOW_MS;
    }
    for (int i = 0; i < 2; i++)
        p[i] = (struct pollfd){.fd = s->budget ? s->fd[i] : -1, .events = POLLIN};
    if (!s->budget && s->window_end - now < *wait_ms)
        *wait_ms = (int)(s->window_end - now);
}

/* ---- asks and their answers' checks (the tool's and the survey's) -------------------- */

void cl_status_ask_make(const uint8_t *key, const uint8_t base[CL_NONCE_BYTES], uint32_t kind,
                        uint32_t first, uint64_t job, uint64_t comm, uint32_t index,
                        cl_status_ask *q)
{
    memset(q, 0, sizeof(*q));
    q->magic = CL_STATUS_MAGIC;
    q->version = CL_STATUS_VERSION;
    q->kind = kind;
    q->first = first;
    q->job = job;
    q->comm = comm;
    memcpy(q->nonce, base, sizeof(q->nonce));
    memcpy(q->nonce + CL_NONCE_BYTES - 4, &index, 4);
    if (key)
        cl_status_tag(key, q, sizeof(*q), q->tag);
}

int cl_status_answer_check(const uint8_t *key, const uint8_t base[CL_NONCE_BYTES],
                           const cl_status_answer *a, long len, uint32_t kind, int n, int *refused)
{
    uint32_t index;
    *refused = 0;
    if (len < (long)CL_STATUS_REFUSED_BYTES || a->magic != CL_STATUS_MAGIC ||
        a->version != CL_STATUS_VERSION || memcmp(a->nonce, base, CL_NONCE_BYTES - 4) != 0)
        return -1;
    memcpy(&index, a->nonce + CL_NONCE_BYTES - 4, 4);
    if (index >= (uint32_t)n)
        return -1;
    if (a->kind == CL_STATUS_REFUSED) {
        *refused = 1;
        return (int)index;
    }
    if (len != (long)sizeof(*a) || a->kind != kind)
        return -1;
    if (a->keyed) { /* a job without a secret answers anyone, unsealed */
        uint8_t want[CL_TAG_BYTES];
        if (!key)
            return -1;
        cl_status_tag(key, a, sizeof(*a), want);
        if (!cl_auth_equal(want, a->tag, CL_TAG_BYTES))
            return -1;
    }
    return (int)index;
}

/* ---- answers ------------------------------------------------------------------------ */

static int64_t ago(int64_t now_us, int64_t t_us)
{
    return t_us ? now_us - t_us : -1;
}

void cl_status_put_op(const coll_record *x, int64_t now_us, cl_status_op *o)
{
    o->seq = x->seq;
    o->state = x->state;
    o->status = x->status;
    o->root = x->root;
    o->count = x->count;
    o->bytes = x->bytes;
    o->issued_ago_us = ago(now_us, x->issued_us);
    o->started_ago_us = ago(now_us, x->started_us);
    o->progress_ago_us = ago(now_us, x->progress_us);
    if (!x->seq)
        return;
    snprintf(o->kind, sizeof(o->kind), "%s", x->kind);
    snprintf(o->dtype, sizeof(o->dtype), "%s", cl_dtype_name(x->dtype));
    snprintf(o->op, sizeof(o->op), "%s", cl_op_name(x->op));
    snprintf(o->algo, sizeof(o->algo), "%s", x->algo);
}

static void put_head(coll_comm *c, cl_status_head *h)
{
    coll_record coll, p2p;
    cl_rec_head(c, &coll, &p2p);
    int64_t now_us = cl_now_us();
    h->pid = (int32_t)getpid();
    h->failed = cl_comm_state(c);
    h->issued = cl_engine_issued(c);
    h->recorder = c->rec != NULL;
    snprintf(h->job, sizeof(h->job), "%s", c->rec ? c->rec->job : "");
    gethostname(h->host, sizeof(h->host) - 1);
    if (h->failed != COLL_OK) { /* written under mu, and added to by the diagnosis */
        pthread_mutex_lock(&c->mu);
        snprintf(h->err, sizeof(h->err), "%.199s", c->err);
        pthread_mutex_unlock(&c->mu);
    }
    cl_status_put_op(&coll, now_us, &h->coll);
    cl_status_put_op(&p2p, now_us, &h->p2p);
}

/* c's ranks' endpoints: its own status's, or (a split sharing its root's links) its
 * ranks' in the root's, which are the same processes'. */
static void put_peers(const coll_comm *c, uint32_t first, cl_status_peers *p)
{
    const int *to_root = NULL;
    const cl_status *s = cl_beat_any_status(c, &to_root);
    p->first = first;
    p->n = (uint32_t)CL_MIN(CL_STATUS_PAGE, c->size - (int)first);
    for (uint32_t i = 0; s && i < p->n; i++) {
        int r = to_root ? to_root[first + i] : (int)(first + i);
        if (r >= 0 && r < s->size)
            memcpy(p->addr[i], s->addr[r], CL_ADDR_TEXT);
    }
}

/* The communicator an ask on fd[fdi] is about (under the list's lock): the one it names
 * (HEAD: its rank `first`), else the one whose rendezvous address fd[1] is, else the
 * process's oldest. NULL: none here, or a page beyond its last rank. */
static coll_comm *about(coll_comm *own, int fdi, const cl_status_ask *ask)
{
    int rank = ask->kind == CL_STATUS_HEAD ? (int)CL_MIN(ask->first, INT32_MAX) : -1;
    coll_comm *c = ask->job ? cl_status_list_find(ask->job, ask->comm, rank)
                            : fdi ? own : cl_status_list_find(0, 0, -1);
    if (!c && !ask->job)
        c = own;
    if (c && ask->kind == CL_STATUS_PEERS && ask->first >= (uint32_t)c->size)
        return NULL;
    return c;
}

/* What ask (on fd[fdi]) deserves: an answer, a refusal (the tag does not check), or
 * nothing (-1: malformed, about no communicator here, or a page beyond the last rank). */
static int answer(coll_comm *own, int fdi, const cl_status_ask *ask, cl_status_answer *a,
                  size_t *len)
{
    if (ask->magic != CL_STATUS_MAGIC || ask->version != CL_STATUS_VERSION ||
        (ask->kind != CL_STATUS_HEAD && ask->kind != CL_STATUS_PEERS &&
         ask->kind != CL_STATUS_COMMS))
        return -1;
    coll_comm *c = ask->kind == CL_STATUS_COMMS ? own : about(own, fdi, ask);
    if (!c)
        return -1;
    memset(a, 0, sizeof(*a)); /* every byte goes on the wire */
    *a = (cl_status_answer){.magic = CL_STATUS_MAGIC,
                            .version = CL_STATUS_VERSION,
                            .kind = ask->kind,
                            .keyed = c->keyed};
    memcpy(a->nonce, ask->nonce, sizeof(a->nonce));
    if (c->keyed) {
        uint8_t want[CL_TAG_BYTES];
        cl_status_tag(c->key, ask, sizeof(*ask), want);
        if (!cl_auth_equal(want, ask->tag, CL_TAG_BYTES)) {
            a->kind = CL_STATUS_REFUSED;
            *len = CL_STATUS_REFUSED_BYTES;
            return 0;
        }
    }
    a->rank = c->rank;
    a->size = c->size;
    a->job = c->job;
    a->comm = c->id;
    if (ask->kind == CL_STATUS_HEAD)
        put_head(c, &a->u.head);
    else if (ask->kind == CL_STATUS_PEERS)
        put_peers(c, ask->first, &a->u.peers);
    else
        cl_status_list_page(ask->first, &a->u.comms);
    if (c->keyed)
        cl_status_tag(c->key, a, sizeof(*a), a->tag);
    *len = sizeof(*a);
    return 0;
}

/* Up to the budget's datagrams from fd[fdi]; each costs one, whatever it holds. */
static void serve_fd(cl_status *s, coll_comm *c, int fdi)
{
    int fd = s->fd[fdi];
    while (s->budget > 0) {
        cl_status_ask ask;
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        ssize_t got = recvfrom(fd, &ask, sizeof(ask), MSG_DONTWAIT | MSG_TRUNC,
                               (struct sockaddr *)&from, &flen);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return;
        s->budget--;
        cl_status_answer a;
        size_t len;
        if (got != (ssize_t)sizeof(ask))
            continue;
        cl_status_list_lock(); /* what the answer reads stays while it does */
        int ok = answer(c, fdi, &ask, &a, &len) == 0;
        cl_status_list_unlock();
        if (ok)
            (void)sendto(fd, &a, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&from, flen);
    }
}

void cl_status_serve(cl_status *s, coll_comm *c, const struct pollfd *p)
{
    for (int i = 0; i < 2; i++)
        if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLERR)))
            serve_fd(s, c, i);
}

/* ---- the survey ----------------------------------------------------------------------- */

enum { SURVEY_RESEND_MS = 100, SURVEY_SAID = 4 };

/* Every other rank's head but gone's into heads (got[r]: 1 when it answered), asked from
 * a socket of this thread's own until all answered or wait_ms passed. */
static void survey_ask(const cl_status *s, const coll_comm *c, int gone,
                       cl_status_answer *heads, uint8_t *got, int wait_ms)
{
    cl_addr *to = calloc((size_t)s->size, sizeof(*to));
    uint8_t base[CL_NONCE_BYTES];
    int fd = -1, left = 0;
    if (!to || cl_auth_nonce(base, sizeof(base)) != 0 ||
        cl_addr_parse(s->addr[c->rank], &to[c->rank]) != 0 ||
        (fd = socket(to[c->rank].sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        goto done;
    for (int r = 0; r < s->size; r++)
        left += r != c->rank && r != gone && cl_addr_parse(s->addr[r], &to[r]) == 0;
    const uint8_t *key = c->keyed ? c->key : NULL;
    for (int64_t now = cl_now_ms(), end = now + wait_ms, resend = 0; left && now < end;
         now = cl_now_ms()) {
        for (int r = 0; now >= resend && r < s->size; r++) {
            cl_status_ask q;
            if (r == c->rank || r == gone || got[r] || !to[r].len)
                continue;
            cl_status_ask_make(key, base, CL_STATUS_HEAD, (uint32_t)r, c->job, c->id,
                               (uint32_t)r, &q);
            (void)sendto(fd, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL,
                         (struct sockaddr *)&to[r].sa, to[r].len);
        }
        resend = now >= resend ? now + SURVEY_RESEND_MS : resend;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(CL_MIN(resend, end) - now)) <= 0)
            continue;
        cl_status_answer a;
        int refused;
        ssize_t n = recv(fd, &a, sizeof(a), MSG_DONTWAIT);
        int r = cl_status_answer_check(key, base, &a, (long)n, CL_STATUS_HEAD, s->size, &refused);
        if (r < 0 || r == c->rank || got[r] || refused)
            continue;
        heads[r] = a;
        got[r] = 1;
        left--;
    }
done:
    if (fd >= 0)
        close(fd);
    free(to);
}

/* " (its newest: allreduce #87, done 3.2 s ago)", " (its newest: recv #41 with rank 2,
 * running for 31.0 s)". */
static void newest(const cl_status_op *o, int p2p, char *out, size_t len)
{
    char with[32] = "";
    if (p2p)
        snprintf(with, sizeof(with), " with rank %d", o->root);
    if (o->state == COLL_REC_DONE || o->state == COLL_REC_FAILED)
        snprintf(out, len, " (its newest: %s #%u%s, %s %.1f s ago)", o->kind, o->seq, with,
                 o->state == COLL_REC_DONE ? "done" : "failed", o->progress_ago_us / 1e6);
    else
        snprintf(out, len, " (its newest: %s #%u%s, %s for %.1f s)", o->kind, o->seq, with,
                 o->state == COLL_REC_RUNNING ? "running" : "queued", o->issued_ago_us / 1e6);
}

/* What a rank's answer (a; answered: it came) says against this rank's collective `kind`
 * #seq, into out: STRONG (it is not where the others are), WEAK (it is, but does not
 * move), or 0 (in step). A rank that did not answer though its heartbeat was heard within
 * the bound left or is leaving (its own failure is its story): 0. */
enum { STRONG = 1, WEAK = 2 };
static int differs(const coll_comm *c, int r, const cl_status_answer *a, int answered,
                   const char *kind, uint32_t seq, char *out, size_t len)
{
    const cl_status_head *h = &a->u.head;
    const cl_status_op *o = &h->coll;
    if (!answered && cl_beat_heard_lately(c, r))
        return 0;
    if (!answered)
        return snprintf(out, len, "did not answer, nor beat (stopped?)"), STRONG;
    if (!h->recorder)
        return 0;
    if (h->issued < seq) {
        const cl_status_op *p = &h->p2p;
        const cl_status_op *last = p->seq && p->issued_ago_us < o->issued_ago_us ? p : o;
        int n = snprintf(out, len, "never issued %s #%u", kind, seq);
        if (last->seq && n > 0 && (size_t)n < len)
            newest(last, last == p, out + n, len - (size_t)n);
        return STRONG;
    }
    if (o->seq == seq && strcmp(o->kind, kind) != 0)
        return snprintf(out, len, "issued %s #%u where this rank issued %s #%u", o->kind, seq, kind,
                        seq),
               STRONG;
    if (o->seq == seq && o->state == COLL_REC_RUNNING && o->progress_ago_us >= 1000000)
        return snprintf(out, len, "is in %s #%u but has moved no byte for %.1f s", kind, seq,
                        o->progress_ago_us / 1e6),
               WEAK;
    return 0;
}

/* The ranks of one kind of finding (STRONG or WEAK) into out at *at; how many. */
static int tell(const cl_status *s, const coll_comm *c, int gone, const cl_status_answer *heads,
                const uint8_t *got, int kind, uint32_t seq, int which, char *out, size_t len,
                size_t *at)
{
    int found = 0;
    for (int r = 0; r < s->size; r++) {
        char what[200];
        if (r == c->rank || r == gone ||
            differs(c, r, &heads[r], got[r], cl_kind_name(kind), seq, what, sizeof(what)) != which)
            continue;
        if (found++ < SURVEY_SAID)
            *at += (size_t)snprintf(out + *at, len - *at, "%srank %d %s", *at ? "; " : "", r, what);
        *at = CL_MIN(*at, len - 1);
    }
    if (found > SURVEY_SAID)
        *at += (size_t)snprintf(out + *at, len - *at, "; %d more such ranks", found - SURVEY_SAID);
    *at = CL_MIN(*at, len - 1);
    return found;
}

void cl_status_survey(const cl_status *s, const coll_comm *c, int kind, uint32_t seq, int gone,
                      int wait_ms, char *out, size_t len)
{
    cl_status_answer *heads = calloc((size_t)s->size, sizeof(*heads));
    uint8_t *got = calloc((size_t)s->size, 1);
    size_t at = 0;
    out[0] = 0;
    if (heads && got) {
        survey_ask(s, c, gone, heads, got, wait_ms);
        /* Ranks that do not move only where none is elsewhere: they wait for it. */
        if (!tell(s, c, gone, heads, got, kind, seq, STRONG, out, len, &at))
            tell(s, c, gone, heads, got, kind, seq, WEAK, out, len, &at);
    }
    free(heads);
    free(got);
}

void cl_status_close(cl_status *s)
{
    if (!s)
        return;
    if (s->fd[0] >= 0 && !s->own)
        cl_status_unshare(s->fd[0]);
    else if (s->fd[0] >= 0)
        close(s->fd[0]);
    if (s->fd[1] >= 0)
        close(s->fd[1]);
    free(s->addr);
    free(s);
}
