/* The TCP store's server: one poll() thread serving a hashed key-value table to every
 * rank. Its input is hostile, so nothing a client does can stop it or grow it without
 * bound: sockets are non-blocking and replies wait in a per-client queue (a client that
 * sends requests and never reads them is no longer read once one reply's worth waits);
 * keys, bytes and clients are capped; malformed requests and clients idle past the
 * bound are dropped. */
#include "rdzv/tcp_server.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "rdzv/store.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BUCKETS = 4096, OUT_LIMIT = 5 + CL_STORE_MAX_VALUE, IN_LIMIT = 2 * (CL_STORE_REQ_HDR + CL_STORE_MAX_KEY + CL_STORE_MAX_VALUE) };

struct kv {
    struct kv *next;
    unsigned char *key, *val;
    size_t klen, len;
};

struct client {
    int fd;
    unsigned char *in, *out;
    size_t got, in_cap, out_len, out_sent, out_cap;
    /* When it last owed us nothing: a whole request read with no reply waiting, or every
     * reply taken. A reply byte taken now and then does not count: a client that trickles
     * its replies out (a closed window's probes) held the server's attention for good. */
    int64_t last_ms;
};

struct cl_store_server {
    int lfd[CL_STORE_LISTENERS], nl, wake[2], full_told, running;
    int64_t idle_ms; /* twice the init timeout: 2^32 ms and more for the largest */
    pthread_t thread;
    struct kv *bucket[BUCKETS];
    size_t keys, bytes;
    struct client *cl;
    struct pollfd *pfd;
    int ncl;
    /* cl_store_server_watch: set by another thread while this one serves */
    pthread_mutex_t watch_mu;
    char watch_key[CL_STORE_MAX_KEY + 1];
    void (*watch_fn)(void *arg, const char *val, size_t len);
    void *watch_arg;
    cl_store_server *next_live; /* on the list of servers running in this process */
};

enum { FIRST_CLIENT = CL_STORE_LISTENERS + 1 }; /* the first client's place in pfd */

static void close_listeners(cl_store_server *s)
{
    for (int i = 0; i < s->nl; i++)
        close(s->lfd[i]);
}

/* ---- fork ----------------------------------------------------------------------------- */

/* A server runs for its job's life; a process forked meanwhile (a data loader's worker)
 * must not hold the port after the job ends: the child closes its copies. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_store_server *live;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void in_child(void)
{
    for (cl_store_server *s = live; s; s = s->next_live)
        close_listeners(s);
    pthread_mutex_unlock(&live_mu);
}

static void before_fork(void)
{
    pthread_mutex_lock(&live_mu);
}

static void in_parent(void)
{
    pthread_mutex_unlock(&live_mu);
}

static void watch_forks(void)
{
    pthread_atfork(before_fork, in_parent, in_child);
}

static void set_live(cl_store_server *s, int on)
{
    pthread_once(&fork_once, watch_forks);
    pthread_mutex_lock(&live_mu);
    cl_store_server **at = &live;
    while (*at && *at != s)
        at = &(*at)->next_live;
    if (on && !*at)
        s->next_live = live, live = s;
    else if (!on && *at)
        *at = s->next_live;
    pthread_mutex_unlock(&live_mu);
}

/* ---- the table ---------------------------------------------------------------------- */

static struct kv **slot(cl_store_server *s, const unsigned char *key, size_t klen)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < klen; i++)
        h = (h ^ key[i]) * 1099511628211ULL;
    struct kv **at = &s->bucket[h % BUCKETS];
    while (*at && ((*at)->klen != klen || memcmp((*at)->key, key, klen) != 0))
        at = &(*at)->next;
    return at;
}

/* 1 stored, 0 refused (memory or the limits). */
static unsigned char store(cl_store_server *s, struct kv **at, const unsigned char *key,
                           size_t klen, const unsigned char *val, size_t vlen)
{
    struct kv *e = *at;
    size_t more = vlen + (e ? 0 : klen), less = e ? e->len : 0;
    if ((!e && s->keys >= CL_STORE_MAX_KEYS) || s->bytes - less + more > CL_STORE_MAX_BYTES) {
        if (!s->full_told++)
            cl_log(COLL_LOG_WARN, "rendezvous store: a set refused: %zu keys and %zu bytes "
                                  "held, the limits are %d and %u",
                   s->keys, s->bytes, CL_STORE_MAX_KEYS, CL_STORE_MAX_BYTES);
        return 0;
    }
    unsigned char *v = malloc(vlen ? vlen : 1);
    struct kv *fresh = e ? NULL : calloc(1, sizeof(*fresh));
    unsigned char *k = fresh ? malloc(klen ? klen : 1) : NULL;
    if (!v || (!e && !k)) {
        free(v), free(fresh), free(k);
        return 0;
    }
    if (!e) {
        memcpy(k, key, klen);
        fresh->key = k, fresh->klen = klen;
        *at = e = fresh;
        s->keys++;
    }
    memcpy(v, val, vlen);
    free(e->val);
    e->val = v;
    e->len = vlen;
    s->bytes = s->bytes - less + more;
    return 1;
}

/* ---- one client --------------------------------------------------------------------- */

/* Queues a reply behind what still waits to go out (moved to the front first: a client
 * that always leaves a little unread must not grow the queue with what it took). */
static int reply(struct client *c, const void *a, size_t n, const void *b, size_t m)
{
    if (c->out_sent) {
        memmove(c->out, c->out + c->out_sent, c->out_len - c->out_sent);
        c->out_len -= c->out_sent;
        c->out_sent = 0;
    }
    if (c->out_cap - c->out_len < n + m) {
        size_t cap = c->out_len + n + m + 4096;
        unsigned char *o = realloc(c->out, cap);
        if (!o)
            return -1;
        c->out = o, c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, a, n);
    if (m)
        memcpy(c->out + c->out_len + n, b, m);
    c->out_len += n + m;
    return 0;
}

/* A watched key was set: its value, cut to 255 bytes and ended, goes to the watcher. */
static void tell_watcher(cl_store_server *s, const unsigned char *key, uint32_t klen,
                         const unsigned char *val, uint32_t vlen)
{
    pthread_mutex_lock(&s->watch_mu);
    if (s->watch_fn && strlen(s->watch_key) == klen && memcmp(s->watch_key, key, klen) == 0) {
        char v[256];
        size_t n = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
        memcpy(v, val, n);
        v[n] = 0;
        s->watch_fn(s->watch_arg, v, n);
    }
    pthread_mutex_unlock(&s->watch_mu);
}

static int answer(cl_store_server *s, struct client *c, const unsigned char *p, uint32_t klen,
                  uint32_t vlen)
{
    const unsigned char *key = p + CL_STORE_REQ_HDR;
    if (p[0] == CL_STORE_OP_HELLO)
        return reply(c, CL_STORE_MAGIC, strlen(CL_STORE_MAGIC), NULL, 0);
    struct kv **at = slot(s, key, klen);
    if (p[0] == CL_STORE_OP_GET) {
        unsigned char hdr[5] = {*at != NULL};
        uint32_t len = *at ? (uint32_t)(*at)->len : 0;
        memcpy(hdr + 1, &len, 4);
        return reply(c, hdr, 5, *at ? (*at)->val : NULL, len);
    }
    unsigned char ok = p[0] == CL_STORE_OP_CREATE && *at ? 2 : store(s, at, key, klen, key + klen, vlen);
    if (ok == 1)
        tell_watcher(s, key, klen, key + klen, vlen);
    return reply(c, &ok, 1, NULL, 0);
}

/* Answers the whole requests read, while less than one largest reply waits to go out.
 * -1 drops the client. */
static int serve_requests(cl_store_server *s, struct client *c, int64_t now)
{
    size_t off = 0;
    while (c->got - off >= CL_STORE_REQ_HDR && c->out_len - c->out_sent < OUT_LIMIT) {
        unsigned char *p = c->in + off;
        uint32_t klen, vlen;
        memcpy(&klen, p + 1, 4);
        memcpy(&vlen, p + 5, 4);
        if (klen > CL_STORE_MAX_KEY || vlen > CL_STORE_MAX_VALUE || p[0] < CL_STORE_OP_SET ||
            p[0] > CL_STORE_OP_HELLO)
            return -1;
        if (c->got - off < CL_STORE_REQ_HDR + klen + vlen)
            break;
        if (c->out_len == c->out_sent)
            c->last_ms = now;
        if (answer(s, c, p, klen, vlen) != 0)
            return -1;
        off += CL_STORE_REQ_HDR + klen + vlen;
    }
    if (off) {
        memmove(c->in, c->in + off, c->got - off);
        c->got -= off;
    }
    return 0;
}

static int read_some(struct client *c)
{
    if (c->in_cap - c->got < 4096) {
        size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
        unsigned char *b = cap <= IN_LIMIT ? realloc(c->in, cap) : NULL;
        if (!b)
            return -1;
        c->in = b, c->in_cap = cap;
    }
    ssize_t n = recv(c->fd, c->in + c->got, c->in_cap - c->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1;
    c->got += (size_t)n;
    return 0;
}

static int write_some(struct client *c, int64_t now)
{
    if (!c->out_len)
        return 0;
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->out_sent += (size_t)n;
    }
    c->out_len = c->out_sent = 0;
    c->last_ms = now;
    return 0;
}

/* A client dropped for what it did is reset, not closed: the replies it never took go
 * with it at once (a FIN would wait behind megabytes it will never read, and the client
 * would not learn it was dropped). */
static int refuse(struct client *c)
{
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    return -1;
}

/* Everything one wake-up allows for c: -1 drops it. */
static int tend(cl_store_server *s, struct client *c, short revents, int64_t now)
{
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && read_some(c) != 0)
        return -1;
    if (serve_requests(s, c, now) != 0 || write_some(c, now) != 0)
        return refuse(c);
    /* a reply that went out may let requests waiting behind it be answered */
    if (serve_requests(s, c, now) != 0 || write_some(c, now) != 0)
        return refuse(c);
    if (now - c->last_ms > s->idle_ms) {
        cl_log(COLL_LOG_DEBUG, "rendezvous store: a client idle for %lld ms dropped",
               (long long)s->idle_ms);
        return refuse(c);
    }
    return 0;
}

static void drop(struct client *c)
{
    close(c->fd);
    free(c->in);
    free(c->out);
    *c = (struct client){.fd = -1};
}

/* ---- the thread --------------------------------------------------------------------- */

static void accept_client(cl_store_server *s, int lfd, int64_t now)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (s->ncl >= CL_STORE_MAX_CLIENTS) {
        close(fd);
        return;
    }
    s->cl[s->ncl++] = (struct client){.fd = fd, .last_ms = now};
}

/* The poll set: the wake pipe, the listeners (pfd[1..nl]), then the clients (from
 * pfd[CL_STORE_LISTENERS + 1] on); a client is read only while its replies are taken. */
static void watch(cl_store_server *s)
{
    s->pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    for (int i = 0; i < CL_STORE_LISTENERS; i++)
        s->pfd[i + 1] = (struct pollfd){.fd = i < s->nl ? s->lfd[i] : -1, .events = POLLIN};
    int k = 0;
    for (int i = 0; i < s->ncl; i++) {
        struct client *c = &s->cl[i];
        if (c->fd < 0)
            continue;
        s->cl[k] = *c;
        short ev = c->out_len - c->out_sent < OUT_LIMIT ? POLLIN : 0;
        s->pfd[k + FIRST_CLIENT] =
            (struct pollfd){.fd = c->fd, .events = ev | (c->out_len ? POLLOUT : 0)};
        k++;
    }
    s->ncl = k;
}

static void *serve(void *arg)
{
    cl_store_server *s = arg;
    watch(s);
    /* woken at least every second: idle clients are dropped on time */
    for (;;) {
        int n = poll(s->pfd, (nfds_t)(s->ncl + FIRST_CLIENT), 1000);
        if ((n < 0 && errno != EINTR) || (n > 0 && s->pfd[0].revents))
            break;
        int64_t now = cl_now_ms();
        for (int i = 0; i < s->ncl; i++)
            if (tend(s, &s->cl[i], s->pfd[i + FIRST_CLIENT].revents, now) != 0)
                drop(&s->cl[i]);
        for (int i = 0; i < s->nl; i++)
            if (s->pfd[i + 1].revents)
                accept_client(s, s->lfd[i], now);
        watch(s);
    }
    return NULL;
}

int cl_store_server_start(const int *lfd, int nl, int64_t idle_ms, cl_store_server **out)
{
    cl_store_server *s = nl >= 1 && nl <= CL_STORE_LISTENERS ? calloc(1, sizeof(*s)) : NULL;
    if (!s) {
        for (int i = 0; i < nl; i++)
            close(lfd[i]);
        return nl >= 1 && nl <= CL_STORE_LISTENERS ? COLL_ENOMEM : COLL_EINVAL;
    }
    for (int i = 0; i < nl; i++)
        s->lfd[s->nl++] = lfd[i];
    s->idle_ms = idle_ms;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->watch_mu, NULL);
    s->cl = calloc(CL_STORE_MAX_CLIENTS, sizeof(*s->cl));
    s->pfd = calloc(CL_STORE_MAX_CLIENTS + FIRST_CLIENT, sizeof(*s->pfd));
    s->running = s->cl && s->pfd && pipe(s->wake) == 0 &&
                 pthread_create(&s->thread, NULL, serve, s) == 0;
    if (!s->running) {
        cl_store_server_stop(s);
        return COLL_ESYS;
    }
    set_live(s, 1);
    *out = s;
    return COLL_OK;
}

void cl_store_server_watch(cl_store_server *s, const char *key,
                           void (*fn)(void *arg, const char *val, size_t len), void *arg)
{
    pthread_mutex_lock(&s->watch_mu);
    snprintf(s->watch_key, sizeof(s->watch_key), "%s", key);
    s->watch_fn = fn;
    s->watch_arg = arg;
    pthread_mutex_unlock(&s->watch_mu);
}

void cl_store_server_stop(cl_store_server *s)
{
    set_live(s, 0);
    if (s->running) {
        ssize_t w = write(s->wake[1], "x", 1);
        (void)w;
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->ncl; i++)
        drop(&s->cl[i]);
    for (int b = 0; b < BUCKETS; b++)
        while (s->bucket[b]) {
            struct kv *e = s->bucket[b];
            s->bucket[b] = e->next;
            free(e->key);
            free(e->val);
            free(e);
        }
    if (s->wake[0] >= 0)
        close(s->wake[0]), close(s->wake[1]);
    close_listeners(s);
    free(s->cl);
    free(s->pfd);
    pthread_mutex_destroy(&s->watch_mu);
    free(s);
}
