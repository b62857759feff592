/* TCP store: rank 0 binds host:port before anyone connects and serves a key-value table
 * (tcp_server.c); every rank (rank 0 too) is a client on one blocking socket. */
#include "rdzv/store.h"
#include "rdzv/tcp_server.h"

#include "base/addr.h"
#include "base/interrupt.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    cl_store base;
    int fd; /* client socket */
    int ended; /* a request found the connection closed */
    int gone;  /* renew found no server with the pinned value: it went away */
    int mute;  /* an interrupted init stopped waiting for an answer: no request waits again */
    int64_t deadline_ms;
    cl_store_server *server; /* rank 0 only */
    /* The server's address as this client first reached it: renew dials that one, looking
     * up no name (a resolver that hangs, or a name's other address). */
    cl_addr served;
    /* A value the server that served this client holds (tcp_pin): renew's proof that a
     * server at the address now is that one. NULL: none. */
    char pin_key[CL_STORE_MAX_KEY + 1];
    void *pin;
    size_t pin_len;
} tcp_store;

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

/* ---- client ---------------------------------------------------------------------- */

/* Every address of both families at a's port (IPV6_V6ONLY off, whatever the host's
 * default), or -1 (errno says why). A rank whose family is not rank 0's (COLL_SOCKET_FAMILY
 * on one rank only, a name with both kinds of address) still reaches the store, and the
 * terms tell every rank at once that the families differ; listening on the job's family
 * alone, it retried until the timeout while rank 0 waited for its card. A host without
 * IPv6 listens on IPv4's. */
static int listen_both(const cl_addr *a, int backlog)
{
    int off = 0, one = 1, fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && a->sa.ss_family == AF_INET) {
        cl_addr v4 = *a;
        ((struct sockaddr_in *)&v4.sa)->sin_addr.s_addr = htonl(INADDR_ANY);
        return cl_addr_listen(&v4, 0, backlog);
    }
    struct sockaddr_in6 any = {.sin6_family = AF_INET6,
                               .sin6_port = ((const struct sockaddr_in *)&a->sa)->sin_port};
    if (fd < 0 || setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&any, sizeof(any)) != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Whether one of fds[0..n) listens at a's address already (a name's addresses repeat
 * across /etc/hosts and DNS). */
static int bound_already(const cl_addr *a, const int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        cl_addr b = {.len = sizeof(b.sa)};
        if (getsockname(fds[i], (struct sockaddr *)&b.sa, &b.len) == 0 && b.len == a->len &&
            memcmp(&b.sa, &a->sa, a->len) == 0)
            return 1;
    }
    return 0;
}

/* A listener at each address host resolves to, of either family (so a rank of the other
 * family reaches the store too, as listen_both says), each address once: their number,
 * or -1 when another socket holds the port at an address of the job's family (`family`,
 * errno EADDRINUSE, that address in *held), or 0 when an address does not bind for any
 * other reason (not this machine's: a container's, a NAT's; no IPv6; a link-local one
 * without its scope) or there are more than CL_STORE_LISTENERS: the caller then listens on
 * the wildcard, as before names were bound. An address of the other family held by
 * another socket is left out (a rank of that family does not reach this store there; the
 * job's own ranks do). Bound to the named addresses, an IPv4 job's store is not reachable
 * over IPv6 or at the host's other addresses. */
static int listen_named(const char *host, const char *port, int family, int *fds,
                        cl_addr *held)
{
    struct addrinfo *res;
    char why[300];
    if (cl_addr_resolve(host, port, AF_UNSPEC, &res, why, sizeof(why)) != 0)
        return 0;
    int n = 0, e = 0;
    for (struct addrinfo *ai = res; ai && !e; ai = ai->ai_next) {
        cl_addr a = {.len = ai->ai_addrlen};
        memcpy(&a.sa, ai->ai_addr, ai->ai_addrlen);
        if (bound_already(&a, fds, n))
            continue;
        int fd = n < CL_STORE_LISTENERS ? cl_addr_listen(&a, 0, 1024) : -1;
        e = fd >= 0 ? 0 : n < CL_STORE_LISTENERS ? errno : EADDRNOTAVAIL;
        if (e == EADDRINUSE && a.sa.ss_family != family) {
            cl_addr_text(&a, why, sizeof(why));
            cl_log(COLL_LOG_INFO, "rendezvous: %s is held by another socket: the store "
                   "listens at the name's other addresses", why);
            e = 0;
        } else if (e == EADDRINUSE) {
            *held = a;
        } else if (fd >= 0) {
            fds[n++] = fd;
        }
    }
    freeaddrinfo(res);
    if (e) {
        while (n > 0)
            close(fds[--n]);
        errno = e;
    }
    return e == EADDRINUSE ? -1 : e ? 0 : n;
}

/* The idle bound: twice the init timeout, so no rank of a job that is still within it
 * (one between two requests, or waiting for the others) is ever dropped. */
static int bind_server(tcp_store *t, const char *host, const char *port, int family,
                       int64_t idle_ms, char *err, size_t errlen)
{
    struct addrinfo *res;
    char why[300];
    if (cl_addr_resolve(host, port, family, &res, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "rendezvous: rank 0 cannot serve: the host %s", why);
        return COLL_EINVAL;
    }
    cl_addr at = {.len = res->ai_addrlen};
    memcpy(&at.sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    cl_addr held = at;
    int fds[CL_STORE_LISTENERS], n = listen_named(host, port, at.sa.ss_family, fds, &held);
    if (n == 0) /* a loopback address that did not bind stays this machine's alone */
        n = (fds[0] = cl_addr_is_loopback(&at) ? cl_addr_listen(&at, 0, 1024)
                                               : listen_both(&at, 1024)) < 0 ? -1 : 1;
    if (n < 0) {
        int e = errno;
        cl_addr_text(&held, why, sizeof(why));
        snprintf(err, errlen, "rendezvous: rank 0 cannot bind port %s (at %s): %s%s", port, why,
                 strerror(e),
                 e == EADDRINUSE ? " (another job, or one still closing, holds it: use another "
                                   "port)"
                                 : "");
        return e == EADDRINUSE ? CL_STORE_HELD : COLL_ESYS;
    }
    return cl_store_server_start(fds, n, idle_ms, &t->server);
}

/* Whether fd is ready for events by deadline_ms, waited for in slices: where this
 * thread's init was interrupted (interrupt.h), for one more slice at most. A live store
 * answers within it, so a failing rank's note still goes out; a rank 0 stopped, or gone
 * from the network without a word, never answers, and the interrupt must not wait for
 * the deadline. A signal's EINTR is no answer either: the wait goes on. */
static int ready(int fd, short events, int64_t deadline_ms)
{
    int64_t cut = INT64_MAX;
    for (;;) {
        if (cut == INT64_MAX && cl_interrupted())
            cut = cl_now_ms() + CL_INTERRUPT_SLICE_MS;
        int left = cl_store_ms_left(CL_MIN(deadline_ms, cut));
        struct pollfd pfd = {.fd = fd, .events = events};
        if (left <= 0)
            return 0;
        int n = poll(&pfd, 1, CL_MIN(left, CL_INTERRUPT_SLICE_MS));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

/* A connection to a by deadline_ms, or -1: a blocking connect to a host gone from the
 * network (or behind a firewall that drops what it is sent) waits out TCP's retries,
 * about two minutes, past any init timeout and any interrupt. Blocking once connected,
 * as every request expects. */
static int dial_by(const cl_addr *a, int64_t deadline_ms)
{
    int fd = cl_addr_dial(a, SOCK_NONBLOCK), err = 0;
    socklen_t len = sizeof(err);
    if (fd >= 0 && ready(fd, POLLOUT, deadline_ms) &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 &&
        !cl_addr_self_dialed(fd) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* The first of host's addresses (of the job's family) that takes a connection by
 * deadline_ms, or -1. */
static int try_connect(const char *host, const char *port, int family, int64_t deadline_ms)
{
    struct addrinfo *res;
    char why[300];
    if (cl_addr_resolve(host, port, family, &res, why, sizeof(why)) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *r = res; r && fd < 0; r = r->ai_next) {
        cl_addr a = {.len = r->ai_addrlen};
        memcpy(&a.sa, r->ai_addr, r->ai_addrlen);
        fd = dial_by(&a, deadline_ms);
    }
    freeaddrinfo(res);
    return fd;
}

/* How long a rank waits before saying it waits for rank 0, and for an answer to its
 * hello from whoever holds the port. */
enum { TELL_MS = 5000, GREET_MS = 5000 };
/* Retries come often: the ranks of a job must reach rank 0 soon after it binds, so that
 * a rank of another job started at the same port is found before the job forms. */
enum { RETRY_MAX_MS = 50 };

/* Rank 0 may not be up yet: retry with backoff until the deadline, saying once after a
 * while whom we wait for. */
static int connect_retry(const char *host, const char *port, int family, int64_t deadline_ms)
{
    int delay = 10, told = 0;
    int64_t start = cl_now_ms();
    for (;;) {
        int fd = try_connect(host, port, family, deadline_ms);
        if (fd >= 0 || cl_now_ms() >= deadline_ms || cl_interrupted())
            return fd;
        char where[300];
        cl_addr_join(host, port, where, sizeof(where));
        if (!told && cl_now_ms() - start >= TELL_MS && (told = 1))
            cl_log(COLL_LOG_WARN,
                   "rendezvous: nothing listens at %s after %d s: waiting for rank 0 to "
                   "serve it (%lld s more)",
                   where, TELL_MS / 1000, (long long)((deadline_ms - cl_now_ms()) / 1000));
        cl_sleep_ms(delay);
        delay = CL_MIN(delay * 2, RETRY_MAX_MS);
    }
}

static int recv_all(tcp_store *t, void *p, size_t n)
{
    char *c = p;
    while (n) {
        if (!ready(t->fd, POLLIN, t->deadline_ms))
            return t->mute = cl_interrupted(), COLL_ETIMEDOUT;
        ssize_t k = recv(t->fd, c, n, 0);
        if (k <= 0)
            return t->ended = 1, COLL_EPEER;
        c += k;
        n -= (size_t)k;
    }
    return COLL_OK;
}

static int request(tcp_store *t, unsigned char op, const char *key, const void *val, uint32_t vlen)
{
    uint32_t klen = (uint32_t)strlen(key);
    unsigned char hdr[CL_STORE_REQ_HDR] = { op };
    if (t->mute) /* the server did not answer the last one: the note and cleanup go on */
        return COLL_ETIMEDOUT;
    memcpy(hdr + 1, &klen, 4);
    memcpy(hdr + 5, &vlen, 4);
    if (klen > CL_STORE_MAX_KEY || vlen > CL_STORE_MAX_VALUE)
        return COLL_EINVAL;
    if (send_all(t->fd, hdr, CL_STORE_REQ_HDR) || send_all(t->fd, key, klen) ||
        (vlen && send_all(t->fd, val, vlen)))
        return t->ended = 1, COLL_EPEER;
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
    return put(s, CL_STORE_OP_SET, key, val, len);
}

static int tcp_create(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, CL_STORE_OP_CREATE, key, val, len);
}

static int tcp_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    tcp_store *t = (tcp_store *)s;
    unsigned char found = 0;
    uint32_t n = 0;
    int rc = request(t, CL_STORE_OP_GET, key, NULL, 0);
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

/* Whoever holds the port must answer a hello as a rendezvous does: another program there
 * is named at once, not after the timeout. */
static int greet(tcp_store *t, const char *hostport, char *err, size_t errlen)
{
    char magic[sizeof(CL_STORE_MAGIC) - 1];
    int64_t deadline = t->deadline_ms;
    t->deadline_ms = CL_MIN(deadline, cl_now_ms() + GREET_MS);
    int rc = request(t, CL_STORE_OP_HELLO, "", NULL, 0);
    if (rc == COLL_OK)
        rc = recv_all(t, magic, sizeof(magic));
    t->deadline_ms = deadline;
    if (rc == COLL_OK && memcmp(magic, CL_STORE_MAGIC, sizeof(magic)) == 0)
        return COLL_OK;
    snprintf(err, errlen,
             "rendezvous: the program at %s is not a libcollective rendezvous (%s): another "
             "program holds MASTER_PORT, or a rank 0 of an older libcollective",
             hostport,
             rc == COLL_OK          ? "it answered a hello with other bytes"
             : rc == COLL_ETIMEDOUT ? "it did not answer a hello"
                                    : "it closed the connection on a hello");
    return COLL_EPROTO;
}

static void tcp_close(cl_store *s)
{
    tcp_store *t = (tcp_store *)s;
    if (t->fd >= 0)
        close(t->fd);
    if (t->server)
        cl_store_server_stop(t->server);
    free(t->pin);
    free(t);
}

static int tcp_pin(cl_store *s, const char *key, const void *val, size_t len)
{
    tcp_store *t = (tcp_store *)s;
    void *copy = malloc(len ? len : 1);
    if (!copy || strlen(key) > CL_STORE_MAX_KEY) {
        free(copy);
        return copy ? COLL_EINVAL : COLL_ENOMEM;
    }
    memcpy(copy, val, len);
    free(t->pin);
    snprintf(t->pin_key, sizeof(t->pin_key), "%s", key);
    t->pin = copy, t->pin_len = len;
    return COLL_OK;
}

/* Whether the connection has ended: nothing is asked between requests, so anything to
 * read (the server's close or reset) says so. */
static int ended(tcp_store *t)
{
    struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
    return t->ended || poll(&pfd, 1, 0) != 0;
}

/* The server at the address now holds the pinned value: it is the one that served. */
static int holds_pin(tcp_store *t)
{
    size_t n = 0;
    void *got = malloc(t->pin_len + 1);
    int same = got && tcp_get(&t->base, t->pin_key, got, t->pin_len + 1, &n) == COLL_OK &&
               n == t->pin_len && memcmp(got, t->pin, n) == 0;
    free(got);
    return same;
}

/* One dial, no retry: the server was up a moment ago, so a refusal means it went away,
 * not that it is late. The dial and the answers take GREET_MS at most, and never past the
 * caller's deadline: with none left, nothing is proven. */
static int tcp_renew(cl_store *s, int64_t deadline_ms)
{
    tcp_store *t = (tcp_store *)s;
    char err[300], where[CL_ADDR_TEXT];
    int64_t by = CL_MIN(deadline_ms, cl_now_ms() + GREET_MS), keep = t->deadline_ms;
    if (t->gone)
        return COLL_EPEER;
    if (!t->pin || !ended(t) || by <= cl_now_ms())
        return COLL_OK;
    if (t->fd >= 0)
        close(t->fd);
    t->fd = dial_by(&t->served, by);
    cl_addr_text(&t->served, where, sizeof(where));
    t->deadline_ms = by;
    int here = t->fd >= 0 && greet(t, where, err, sizeof(err)) == COLL_OK && holds_pin(t);
    t->deadline_ms = keep;
    t->gone = !here;
    t->ended = !here;
    return here ? COLL_OK : COLL_EPEER;
}

static const cl_store_ops ops = {.set = tcp_set,
                                 .get = tcp_get,
                                 .close = tcp_close,
                                 .create = tcp_create,
                                 .pin = tcp_pin,
                                 .renew = tcp_renew};

cl_store_server *cl_store_tcp_keep_server(cl_store *s)
{
    tcp_store *t = (tcp_store *)s;
    cl_store_server *kept = s->ops == &ops ? t->server : NULL;
    if (kept)
        t->server = NULL;
    return kept;
}

int cl_store_tcp_open(const char *hostport, int family, int serve_it, int64_t deadline_ms,
                      cl_store **out, char *err, size_t errlen)
{
    char host[256], port[16];
    if (cl_addr_split(hostport, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, errlen, "rendezvous address '%s' is not host:port", hostport);
        return COLL_EINVAL;
    }
    tcp_store *t = calloc(1, sizeof(*t));
    if (!t)
        return COLL_ENOMEM;
    t->base.ops = &ops;
    t->fd = -1;
    t->deadline_ms = deadline_ms;
    int64_t idle_ms = CL_MAX(2 * CL_MIN(deadline_ms - cl_now_ms(), INT64_MAX / 2), 1000);
    int rc = serve_it ? bind_server(t, host, port, family, idle_ms, err, errlen) : COLL_OK;
    if (rc == COLL_OK && (t->fd = connect_retry(host, port, family, deadline_ms)) < 0) {
        snprintf(err, errlen, "rendezvous: the rendezvous host (rank 0) at %s did not answer "
                 "within the timeout", hostport);
        rc = COLL_ETIMEDOUT;
    }
    if (rc == COLL_OK)
        rc = greet(t, hostport, err, errlen);
    t->served.len = sizeof(t->served.sa);
    if (rc == COLL_OK && getpeername(t->fd, (struct sockaddr *)&t->served.sa, &t->served.len))
        rc = COLL_ESYS;
    if (rc != COLL_OK) {
        tcp_close(&t->base);
        return rc;
    }
    *out = &t->base;
    return COLL_OK;
}
