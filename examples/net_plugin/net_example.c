/* An example transport plugin for libcollective: messages over plain TCP sockets, each
 * held back COLL_NET_EXAMPLE_DELAY_US microseconds before it leaves (a slow network,
 * for tests). It needs only the installed header:
 *
 *   cc -shared -fPIC -o libcollective-net-example.so net_example.c \
 *      $(pkg-config --cflags libcollective-net)
 *   COLL_NET_PLUGIN=example COLL_TRANSPORT=example ./my_program   (the .so on the library path)
 *
 * Environment: COLL_NET_EXAMPLE_ADDR, the IPv4 address to listen on (127.0.0.1);
 * COLL_NET_EXAMPLE_DELAY_US, the delay (0); COLL_NET_EXAMPLE_KIB_PER_S, the most a send
 * connection writes per second (a slow link; unset: no limit). For the library's failure paths, a send
 * connection that has sent COLL_NET_EXAMPLE_FAIL_AFTER messages fails every request
 * after with COLL_NET_ERR_INTERNAL, and one that has sent COLL_NET_EXAMPLE_STALL_AFTER
 * sends nothing more and never completes a request (unset: never).
 * COLL_NET_EXAMPLE_SPEED_MBPS is the speed its device reports (10000): auto takes the
 * fastest transport to another host. COLL_NET_EXAMPLE_WARN, when set, is a warning init()
 * gives (the tests' check of how the library passes it on). A build with EX_NAME="x" and EX_ENV="COLL_NET_X"
 * reads COLL_NET_X_ADDR and so on instead (the tests' second plugin).
 * Each init() and finalize() says at info how many contexts this process started and
 * holds ("example: init 1, 1 open"): the library starts one per process and device
 * choice, whatever the number of communicators (the tests count them).
 * It implements ABI version 2's progress(). Built with EX_VERSION=1 it is a version-1
 * plugin (a test's: a library of version 2 must still load it).
 * Everything progresses inside test(); the library serializes the calls of a context, so
 * there is no lock here. A message is an 8-byte length, then its bytes. */
#include <collective_net.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The tests build this file as a second plugin of another name, and for the refusals
 * as a plugin of another version, one whose table is too small for any, and one without
 * test. */
#ifndef EX_VERSION
#define EX_VERSION COLL_NET_ABI_VERSION
#endif
#ifndef EX_SIZE
#define EX_SIZE (EX_VERSION == 1 ? COLL_NET_OPS_SIZE_V1 : sizeof(coll_net_ops))
#endif
#ifndef EX_NAME
#define EX_NAME "example"
#endif
#ifndef EX_ENV
#define EX_ENV "COLL_NET_EXAMPLE"
#endif
#ifdef EX_NO_TEST
#define EX_TEST NULL
static int ex_test(void *request, int *done, size_t *size) __attribute__((unused));
#else
#define EX_TEST ex_test
#endif

typedef struct ex_net {
    struct in_addr addr;
    int64_t delay_us;
    uint64_t bytes_per_s; /* 0: no limit */
    uint64_t fail_after, stall_after; /* 0: never */
    uint32_t speed_mbps;
    void (*log)(int level, const char *msg);
} ex_net;

typedef struct ex_req ex_req;

typedef struct ex_comm {
    int fd;
    int send;        /* 1: a send comm (connect's) */
    int err;         /* COLL_NET_OK, or the failure every request of the comm gets */
    const ex_net *net;
    uint64_t sent;   /* messages written whole */
    uint64_t wrote;  /* bytes written, and since when (the rate limit's account) */
    int64_t since_us;
    ex_req *head, *tail; /* every request not yet ended by test(), in posting order */
    ex_req *io;          /* the first not done: where reading or writing goes on */
    uint64_t frame;  /* a receive: the length of the message being read */
    size_t frame_at; /* its bytes read so far */
} ex_comm;

struct ex_req {
    ex_req *next;
    ex_comm *comm;
    unsigned char *data;
    size_t size, at; /* at: bytes moved, the 8-byte length included for a send */
    int64_t due_us;  /* a send leaves from then on */
    uint64_t len;    /* the message's length (a send's goes first, little-endian) */
    int done;
};

typedef struct ex_region {
    const unsigned char *data;
    size_t size;
} ex_region;

typedef struct ex_handle {
    uint32_t magic;
    struct sockaddr_in sa;
} ex_handle;
#define EX_MAGIC 0x45584e31u /* "EXN1" */

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static int err_of(int e)
{
    return e == EPIPE || e == ECONNRESET || e == ECONNREFUSED || e == ENOTCONN ||
                   e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH
               ? COLL_NET_ERR_REMOTE
               : COLL_NET_ERR_SYSTEM;
}

/* This process's contexts: started, and open now. */
static int inits, open_now;

static void say_count(const ex_net *n, const char *what)
{
    char line[96];
    snprintf(line, sizeof(line), EX_NAME ": %s %d, %d open", what,
             __atomic_load_n(&inits, __ATOMIC_RELAXED),
             __atomic_load_n(&open_now, __ATOMIC_RELAXED));
    if (n->log)
        n->log(COLL_NET_LOG_INFO, line);
}

static int ex_init(const coll_net_init_args *args, void **net)
{
    ex_net *n = calloc(1, sizeof(*n));
    if (!n)
        return COLL_NET_ERR_NOMEM;
    const char *a = getenv(EX_ENV "_ADDR"), *d = getenv(EX_ENV "_DELAY_US");
    if (inet_pton(AF_INET, a && *a ? a : "127.0.0.1", &n->addr) != 1) {
        if (args->log)
            args->log(COLL_NET_LOG_ERROR, EX_NAME ": " EX_ENV "_ADDR is no IPv4 address");
        free(n);
        return COLL_NET_ERR_INVALID;
    }
    const char *f = getenv(EX_ENV "_FAIL_AFTER"), *st = getenv(EX_ENV "_STALL_AFTER"),
               *kib = getenv(EX_ENV "_KIB_PER_S"), *mbps = getenv(EX_ENV "_SPEED_MBPS");
    n->delay_us = d ? atoll(d) : 0;
    n->bytes_per_s = kib ? strtoull(kib, NULL, 10) << 10 : 0;
    n->fail_after = f ? strtoull(f, NULL, 10) : 0;
    n->stall_after = st ? strtoull(st, NULL, 10) : 0;
    n->speed_mbps = mbps ? (uint32_t)strtoul(mbps, NULL, 10) : 10000;
    n->log = args->log;
    const char *warn = getenv(EX_ENV "_WARN");
    if (warn && args->log)
        args->log(COLL_NET_LOG_WARN, warn);
    __atomic_add_fetch(&inits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&open_now, 1, __ATOMIC_RELAXED);
    say_count(n, "init");
    *net = n;
    return COLL_NET_OK;
}

static void ex_finalize(void *net)
{
    __atomic_sub_fetch(&open_now, 1, __ATOMIC_RELAXED);
    say_count(net, "finalize");
    free(net);
}

static int ex_devices(void *net, int *ndev)
{
    (void)net;
    *ndev = 1;
    return COLL_NET_OK;
}

static int ex_get_properties(void *net, int dev, coll_net_props *props)
{
    ex_net *n = net;
    if (dev != 0)
        return COLL_NET_ERR_INVALID;
    snprintf(props->name, sizeof(props->name), "example-tcp");
    props->speed_mbps = n->speed_mbps;
    props->latency_us = 20.0f + (float)n->delay_us;
    props->max_requests = 0;
    return COLL_NET_OK;
}

static ex_comm *comm_of(int fd, const ex_net *net)
{
    ex_comm *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return NULL;
    }
    c->fd = fd, c->net = net;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return c;
}

static int ex_listen(void *net, int dev, void *handle, void **listen_comm)
{
    ex_net *n = net;
    ex_handle h = {EX_MAGIC, {.sin_family = AF_INET, .sin_addr = n->addr}};
    socklen_t len = sizeof(h.sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (dev != 0 || fd < 0)
        return fd < 0 ? COLL_NET_ERR_SYSTEM : COLL_NET_ERR_INVALID;
    if (bind(fd, (struct sockaddr *)&h.sa, len) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&h.sa, &len) != 0) {
        close(fd);
        return COLL_NET_ERR_SYSTEM;
    }
    ex_comm *c = comm_of(fd, n);
    if (!c)
        return COLL_NET_ERR_NOMEM;
    memcpy(handle, &h, sizeof(h));
    *listen_comm = c;
    return COLL_NET_OK;
}

static int ex_connect(void *net, int dev, const void *handle, void **send_comm)
{
    ex_net *n = net;
    ex_handle h;
    memcpy(&h, handle, sizeof(h));
    if (dev != 0 || h.magic != EX_MAGIC)
        return COLL_NET_ERR_INVALID;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return COLL_NET_ERR_SYSTEM;
    /* Nonblocking: sends wait (EAGAIN) until the connection is up. */
    if (connect(fd, (struct sockaddr *)&h.sa, sizeof(h.sa)) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return err_of(e);
    }
    ex_comm *c = comm_of(fd, n);
    if (!c)
        return COLL_NET_ERR_NOMEM;
    c->send = 1;
    *send_comm = c;
    return COLL_NET_OK;
}

static int ex_accept(void *listen_comm, void **recv_comm)
{
    ex_comm *l = listen_comm;
    *recv_comm = NULL;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED
                   ? COLL_NET_OK
                   : COLL_NET_ERR_SYSTEM;
    *recv_comm = comm_of(fd, l->net);
    return *recv_comm ? COLL_NET_OK : COLL_NET_ERR_NOMEM;
}

static int ex_reg_mr(void *comm, void *data, size_t size, void **mhandle)
{
    (void)comm;
    ex_region *r = malloc(sizeof(*r));
    if (!r)
        return COLL_NET_ERR_NOMEM;
    *r = (ex_region){data, size};
    *mhandle = r;
    return COLL_NET_OK;
}

static int ex_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    free(mhandle);
    return COLL_NET_OK;
}

/* A registered transfer must lie inside its region: the library's use is checked. */
static int inside(const void *mhandle, const void *data, size_t size)
{
    const ex_region *r = mhandle;
    const unsigned char *p = data;
    return !r || (p >= r->data && size <= r->size && (size_t)(p - r->data) <= r->size - size);
}

static int post(ex_comm *c, void *data, size_t size, void *mhandle, void **request)
{
    if (!inside(mhandle, data, size))
        return COLL_NET_ERR_INVALID;
    ex_req *r = calloc(1, sizeof(*r));
    if (!r)
        return COLL_NET_ERR_NOMEM;
    *r = (ex_req){.comm = c, .data = data, .size = size, .len = size,
                  .due_us = now_us() + c->net->delay_us};
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    if (!c->io)
        c->io = r;
    *request = r;
    return COLL_NET_OK;
}

/* The bytes c may write now under the rate limit. */
static size_t allowance(ex_comm *c)
{
    if (!c->net->bytes_per_s)
        return SIZE_MAX;
    int64_t now = now_us();
    if (!c->since_us)
        c->since_us = now;
    uint64_t may = (uint64_t)(now - c->since_us) * c->net->bytes_per_s / 1000000;
    return may > c->wrote ? (size_t)(may - c->wrote) : 0;
}

/* Writes the queue's head messages whose time came, as far as the socket (and the rate
 * limit) takes them. */
static void send_progress(ex_comm *c)
{
    for (ex_req *r; (r = c->io) && !c->err && r->due_us <= now_us();) {
        if (c->net->fail_after && c->sent >= c->net->fail_after)
            c->err = COLL_NET_ERR_INTERNAL;
        if (c->err || (c->net->stall_after && c->sent >= c->net->stall_after))
            return;
        struct iovec v[2];
        int n = 0;
        if (r->at < 8)
            v[n++] = (struct iovec){(char *)&r->len + r->at, 8 - r->at};
        size_t body = r->at > 8 ? r->at - 8 : 0;
        if (body < r->size)
            v[n++] = (struct iovec){r->data + body, r->size - body};
        size_t may = allowance(c);
        if (may == 0)
            return;
        for (int i = 0; i < n; i++) { /* cut the vector to what may go */
            v[i].iov_len = v[i].iov_len < may ? v[i].iov_len : may;
            may -= v[i].iov_len;
        }
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                c->err = err_of(errno);
            return;
        }
        r->at += (size_t)k;
        c->wrote += (uint64_t)k;
        if (r->at < 8 + r->size)
            return;
        r->done = 1;
        c->io = r->next;
        c->sent++;
    }
}

/* Reads into the queue's head receive: the length, then the message. */
static void recv_progress(ex_comm *c)
{
    for (ex_req *r; (r = c->io) && !c->err;) {
        unsigned char *to = c->frame_at < 8 ? (unsigned char *)&c->frame + c->frame_at
                                            : r->data + (c->frame_at - 8);
        size_t want = c->frame_at < 8 ? 8 - c->frame_at : c->frame - (c->frame_at - 8);
        ssize_t k = want ? recv(c->fd, to, want, MSG_DONTWAIT) : 0;
        if (want && k == 0) {
            c->err = COLL_NET_ERR_REMOTE;
            return;
        }
        if (k < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                c->err = err_of(errno);
            return;
        }
        c->frame_at += (size_t)k;
        if (c->frame_at == 8 && k && c->frame > r->size) {
            c->err = COLL_NET_ERR_TRUNCATED;
            return;
        }
        if (c->frame_at < 8 || c->frame_at < 8 + c->frame)
            continue;
        r->done = 1, r->len = c->frame;
        c->frame_at = 0, c->frame = 0;
        c->io = r->next;
    }
}

static int ex_isend(void *send_comm, const void *data, size_t size, void *mhandle, void **request)
{
    ex_comm *c = send_comm;
    int rc = post(c, (void *)data, size, mhandle, request);
    if (rc == COLL_NET_OK)
        send_progress(c); /* a message due now leaves now (a close right after keeps it) */
    return rc;
}

static int ex_irecv(void *recv_comm, void *data, size_t size, void *mhandle, void **request)
{
    return post(recv_comm, data, size, mhandle, request);
}

/* Ends r: off its comm's list (mostly its head: requests are tested in order), freed. */
static void end_req(ex_req *r)
{
    ex_comm *c = r->comm;
    ex_req **p = &c->head, *prev = NULL;
    while (*p != r)
        prev = *p, p = &(*p)->next;
    *p = r->next;
    if (c->tail == r)
        c->tail = prev;
    if (c->io == r)
        c->io = r->next;
    free(r);
}

static int ex_test(void *request, int *done, size_t *size)
{
    ex_req *r = request;
    ex_comm *c = r->comm;
    if (!r->done)
        (c->send ? send_progress : recv_progress)(c);
    if (!r->done && c->err) { /* the request ends with its comm's failure */
        int err = c->err;
        end_req(r);
        return err;
    }
    *done = r->done;
    if (r->done) {
        *size = (size_t)r->len;
        end_req(r);
    }
    return COLL_NET_OK;
}

/* Version 2: the bytes moved of a request not yet done. */
#if EX_VERSION < 2
static int ex_progress(void *request, size_t *bytes) __attribute__((unused));
#endif
static int ex_progress(void *request, size_t *bytes)
{
    const ex_req *r = request;
    const ex_comm *c = r->comm;
    *bytes = c->send ? r->at : c->io == r ? c->frame_at : 0;
    return COLL_NET_OK;
}

/* Its requests end with it, done or not (test() would have freed them). */
static int ex_close(void *comm)
{
    ex_comm *c = comm;
    close(c->fd);
    for (ex_req *r = c->head, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    free(c);
    return COLL_NET_OK;
}

COLL_NET_EXPORT const coll_net_ops coll_net_plugin = {
    .version = EX_VERSION,
    .size = EX_SIZE,
    .name = EX_NAME,
    .init = ex_init,
    .finalize = ex_finalize,
    .devices = ex_devices,
    .get_properties = ex_get_properties,
    .listen = ex_listen,
    .connect = ex_connect,
    .accept = ex_accept,
    .reg_mr = ex_reg_mr,
    .dereg_mr = ex_dereg_mr,
    .isend = ex_isend,
    .irecv = ex_irecv,
    .test = EX_TEST,
    .close_send = ex_close,
    .close_recv = ex_close,
    .close_listen = ex_close,
#if EX_VERSION >= 2
    .progress = ex_progress,
#endif
};
