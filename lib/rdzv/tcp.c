/* TCP store: rank 0 binds host:port before anyone connects and serves a key-value table
 * from a poll() thread; every rank (rank 0 too) is a client on one blocking socket.
 * The server treats its input as hostile: oversized or malformed requests drop the
 * client, never the server. */
#include "rdzv/store.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A create is answered 1 (set), 2 (taken) or 0 (out of memory); a set 1 or 0. */
enum { OP_SET = 1, OP_GET = 2, OP_CREATE = 3, REQ_HDR = 9, MAX_CLIENTS = 4096 };

struct kv {
    struct kv *next;
    char *key;
    size_t len;
    unsigned char *val;
};

struct client {
    int fd;
    unsigned char *buf;
    size_t got, cap;
};

typedef struct {
    cl_store base;
    int fd; /* client socket */
    int64_t deadline_ms;
    /* server side (rank 0 only) */
    int serving, lfd, wake[2];
    pthread_t thread;
    struct kv *table;
} tcp_store;

/* ---- server ---------------------------------------------------------------------- */

static struct kv *lookup(tcp_store *t, const char *key, size_t klen)
{
    for (struct kv *e = t->table; e; e = e->next)
        if (strlen(e->key) == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int serve_set(tcp_store *t, const unsigned char *key, uint32_t klen,
                     const unsigned char *val, uint32_t vlen)
{
    struct kv *e = lookup(t, (const char *)key, klen);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e || !(e->key = calloc(1, klen + 1u))) {
            free(e);
            return -1;
        }
        memcpy(e->key, key, klen);
        e->next = t->table;
        t->table = e;
    }
    unsigned char *v = malloc(vlen ? vlen : 1);
    if (!v)
        return -1;
    memcpy(v, val, vlen);
    free(e->val);
    e->val = v;
    e->len = vlen;
    return 0;
}

/* Handles every whole request in c->buf. -1 drops the client. */
static int serve_requests(tcp_store *t, struct client *c)
{
    size_t off = 0;
    while (c->got - off >= REQ_HDR) {
        unsigned char *p = c->buf + off;
        uint32_t klen, vlen;
        memcpy(&klen, p + 1, 4);
        memcpy(&vlen, p + 5, 4);
        if (klen > CL_STORE_MAX_KEY || vlen > CL_STORE_MAX_VALUE || p[0] < OP_SET ||
            p[0] > OP_CREATE)
            return -1;
        if (c->got - off < REQ_HDR + klen + vlen)
            break;
        if (p[0] != OP_GET) {
            int taken = p[0] == OP_CREATE && lookup(t, (const char *)p + REQ_HDR, klen);
            unsigned char ok =
                taken ? 2 : serve_set(t, p + REQ_HDR, klen, p + REQ_HDR + klen, vlen) == 0;
            if (send_all(c->fd, &ok, 1) != 0)
                return -1;
        } else {
            struct kv *e = lookup(t, (const char *)p + REQ_HDR, klen);
            unsigned char found = e != NULL;
            uint32_t len = e ? (uint32_t)e->len : 0;
            if (send_all(c->fd, &found, 1) || send_all(c->fd, &len, 4) ||
                (e && send_all(c->fd, e->val, len)))
                return -1;
        }
        off += REQ_HDR + klen + vlen;
    }
    memmove(c->buf, c->buf + off, c->got - off);
    c->got -= off;
    return 0;
}

static int client_read(tcp_store *t, struct client *c)
{
    if (c->cap - c->got < 4096) {
        size_t cap = c->cap ? c->cap * 2 : 8192;
        if (cap > 2 * (REQ_HDR + CL_STORE_MAX_KEY + CL_STORE_MAX_VALUE))
            return -1;
        unsigned char *b = realloc(c->buf, cap);
        if (!b)
            return -1;
        c->buf = b;
        c->cap = cap;
    }
    ssize_t n = recv(c->fd, c->buf + c->got, c->cap - c->got, 0);
    if (n <= 0)
        return -1;
    c->got += (size_t)n;
    return serve_requests(t, c);
}

static void drop(struct client *c)
{
    close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void accept_client(int lfd, struct client *cl, int *ncl, struct pollfd *pfd)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return;
    if (*ncl >= MAX_CLIENTS) {
        close(fd);
        return;
    }
    cl[*ncl] = (struct client){ .fd = fd };
    pfd[*ncl + 2] = (struct pollfd){ .fd = fd, .events = POLLIN };
    (*ncl)++;
}

static void *serve(void *arg)
{
    tcp_store *t = arg;
    struct client *cl = calloc(MAX_CLIENTS, sizeof(*cl));
    struct pollfd *pfd = calloc(MAX_CLIENTS + 2, sizeof(*pfd));
    int ncl = 0;
    pfd[0] = (struct pollfd){ .fd = t->lfd, .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = t->wake[0], .events = POLLIN };
    while (cl && pfd && poll(pfd, (nfds_t)ncl + 2, -1) >= 0) {
        if (pfd[1].revents)
            break;
        for (int i = 0; i < ncl; i++)
            if (pfd[i + 2].revents && client_read(t, &cl[i]) != 0)
                drop(&cl[i]);
        int k = 0;
        for (int i = 0; i < ncl; i++) /* compact out dropped clients */
            if (cl[i].fd >= 0) {
                cl[k] = cl[i];
                pfd[k + 2] = (struct pollfd){ .fd = cl[i].fd, .events = POLLIN };
                k++;
            }
        ncl = k;
        if (pfd[0].revents)
            accept_client(t->lfd, cl, &ncl, pfd);
    }
    for (int i = 0; cl && i < ncl; i++)
        drop(&cl[i]);
    free(cl);
    free(pfd);
    return NULL;
}

/* ---- client ---------------------------------------------------------------------- */

static int split_hostport(const char *hp, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp || (size_t)(colon - hp) >= hlen || strlen(colon + 1) >= plen)
        return -1;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = 0;
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

static int bind_server(tcp_store *t, const char *port, char *err, size_t errlen)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
    int one = 1;
    t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t->lfd < 0)
        return COLL_ESYS;
    setsockopt(t->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(t->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(t->lfd, 1024) != 0) {
        snprintf(err, errlen, "rendezvous: rank 0 cannot bind port %s: %s%s", port, strerror(errno),
                 errno == EADDRINUSE ? " (another job, or one still closing, holds it: use "
                                       "another port)"
                                     : "");
        close(t->lfd);
        return COLL_ESYS;
    }
    if (pipe(t->wake) != 0) {
        close(t->lfd);
        return COLL_ESYS;
    }
    if (pthread_create(&t->thread, NULL, serve, t) != 0) {
        close(t->lfd);
        close(t->wake[0]);
        close(t->wake[1]);
        return COLL_ESYS;
    }
    t->serving = 1;
    return COLL_OK;
}

static int try_connect(const char *host, const char *port)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* Rank 0 may not be up yet: retry with backoff until the deadline. */
static int connect_retry(const char *host, const char *port, int64_t deadline_ms)
{
    int delay = 10;
    for (;;) {
        int fd = try_connect(host, port);
        if (fd >= 0 || cl_now_ms() >= deadline_ms)
            return fd;
        cl_sleep_ms(delay);
        delay = CL_MIN(delay * 2, 500);
    }
}

static int recv_all(tcp_store *t, void *p, size_t n)
{
    char *c = p;
    while (n) {
        int left = (int)(t->deadline_ms - cl_now_ms());
        struct pollfd pfd = { .fd = t->fd, .events = POLLIN };
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return COLL_ETIMEDOUT;
        ssize_t k = recv(t->fd, c, n, 0);
        if (k <= 0)
            return COLL_EPEER;
        c += k;
        n -= (size_t)k;
    }
    return COLL_OK;
}

static int request(tcp_store *t, unsigned char op, const char *key, const void *val, uint32_t vlen)
{
    uint32_t klen = (uint32_t)strlen(key);
    unsigned char hdr[REQ_HDR] = { op };
    memcpy(hdr + 1, &klen, 4);
    memcpy(hdr + 5, &vlen, 4);
    if (klen > CL_STORE_MAX_KEY || vlen > CL_STORE_MAX_VALUE)
        return COLL_EINVAL;
    if (send_all(t->fd, hdr, REQ_HDR) || send_all(t->fd, key, klen) ||
        (vlen && send_all(t->fd, val, vlen)))
        return COLL_EPEER;
    return COLL_OK;
}

static int put(cl_store *s, unsigned char op, const char *key, const void *val, size_t len)
{
    tcp_store *t = (tcp_store *)s;
    unsigned char ok = 0;
    int rc = request(t, op, key, val, (uint32_t)len);
    if (rc == COLL_OK)
        rc = recv_all(t, &ok, 1);
    if (rc == COLL_OK && ok != 1)
        rc = ok == 2 ? CL_STORE_TAKEN : COLL_ENOMEM;
    return rc;
}

static int tcp_set(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, OP_SET, key, val, len);
}

static int tcp_create(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, OP_CREATE, key, val, len);
}

static int tcp_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    tcp_store *t = (tcp_store *)s;
    unsigned char found = 0;
    uint32_t n = 0;
    int rc = request(t, OP_GET, key, NULL, 0);
    if (rc == COLL_OK && (rc = recv_all(t, &found, 1)) == COLL_OK)
        rc = recv_all(t, &n, 4);
    if (rc != COLL_OK)
        return rc;
    if (!found)
        return COLL_INPROGRESS;
    unsigned char tmp[4096];
    size_t keep = CL_MIN(n, cap);
    if ((rc = recv_all(t, buf, keep)) != COLL_OK)
        return rc;
    for (size_t rest = n - keep; rest && rc == COLL_OK; rest -= CL_MIN(rest, sizeof(tmp)))
        rc = recv_all(t, tmp, CL_MIN(rest, sizeof(tmp)));
    *len = keep;
    return rc;
}

static void tcp_close(cl_store *s)
{
    tcp_store *t = (tcp_store *)s;
    if (t->fd >= 0)
        close(t->fd);
    if (t->serving) {
        ssize_t w = write(t->wake[1], "x", 1);
        (void)w;
        pthread_join(t->thread, NULL);
        close(t->lfd);
        close(t->wake[0]);
        close(t->wake[1]);
    }
    while (t->table) {
        struct kv *e = t->table;
        t->table = e->next;
        free(e->key);
        free(e->val);
        free(e);
    }
    free(t);
}

static const cl_store_ops ops = {
    .set = tcp_set, .get = tcp_get, .close = tcp_close, .create = tcp_create};

int cl_store_tcp_open(const char *hostport, int serve_it, int64_t deadline_ms, cl_store **out,
                      char *err, size_t errlen)
{
    char host[256], port[16];
    if (split_hostport(hostport, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, errlen, "rendezvous address '%s' is not host:port", hostport);
        return COLL_EINVAL;
    }
    tcp_store *t = calloc(1, sizeof(*t));
    if (!t)
        return COLL_ENOMEM;
    t->base.ops = &ops;
    t->fd = -1;
    t->deadline_ms = deadline_ms;
    int rc = serve_it ? bind_server(t, port, err, errlen) : COLL_OK;
    if (rc == COLL_OK && (t->fd = connect_retry(host, port, deadline_ms)) < 0) {
        snprintf(err, errlen, "rendezvous: the rendezvous host (rank 0) at %s did not answer "
                 "within the timeout", hostport);
        rc = COLL_ETIMEDOUT;
    }
    if (rc != COLL_OK) {
        tcp_close(&t->base);
        return rc;
    }
    *out = &t->base;
    return COLL_OK;
}
