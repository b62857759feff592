/* Heartbeats: every rank's library says, from a thread of its own, that it is there, and
 * watches that every other rank does. A process that is stopped (SIGSTOP, a debugger) or
 * wedged keeps its sockets and its kernel acknowledges TCP for it, so neither its links
 * nor keepalive tell it from a busy one; its threads fall silent with it. A rank that is
 * only slow in the caller's code (evaluating, writing a checkpoint) goes on beating: its
 * library thread runs. So silence, not slowness, is what fails a communicator here.
 *
 * One UDP socket per communicator that owns its links, at its lifeline's address, and
 * one thread: every period it sends each rank a datagram (sealed under the job's key with
 * COLL_SECRET) and reads what came. The splits that share its links (family.h) are
 * judged by the same beats: their ranks are its ranks' processes. While a collective of
 * a communicator is queued or running on this rank, a rank of it not heard for the
 * silence bound fails it, blamed by name: its farewell carries how long that rank was
 * silent, so every survivor's sentence names it, whichever link the failure reached it
 * by. A rank that destroys its communicator says so and is no longer watched.
 * A point-to-point wait judges only the rank it waits on (a pair of ranks may go on while
 * a third is done), asking cl_beat_silent_ms from its own thread (req.c).
 *
 * The bound is the peer timeout, or half the operation timeout when that is shorter, so
 * that the heartbeat speaks before an operation's own timeout would (that one names the
 * neighbour a rank waits on, not the rank the wait began at); never under BEAT_MIN_MS,
 * which a loaded machine's scheduler may take from a sleeping thread. Four beats per
 * bound: a datagram or two lost is no silence.
 *
 * This file must never touch an operation's path: what it costs a collective is the
 * thread's wake-ups, a few per bound. */
#include "core/beat.h"

#include "base/addr.h"
#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/family.h"
#include "core/lifecycle.h"
#include "core/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BEAT_MAGIC 0x54414542u /* "BEAT" */
enum { BEAT = 1, LEAVE = 2 };
enum { BEAT_MIN_MS = 500, BEATS_PER_BOUND = 4 };
/* Datagrams read per wake-up: a flood of them on this socket must not keep the thread
 * from sending its own beats and judging (it reads on at the next wake-up). */
enum { READ_BATCH = 256 };

typedef struct beat_msg {
    uint32_t magic, kind;
    int32_t from, size;
    uint64_t job, id;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: HMAC of the message, this zeroed */
} beat_msg;

struct cl_beat {
    coll_comm *c; /* whose socket and thread these are: a family's root (family.h) */
    int fd;       /* the UDP socket */
    int started;
    atomic_int stop;
    pthread_t thread;
    int bound_ms, period_ms;
    int family;         /* this rank's address's */
    cl_addr *to;        /* every rank's: its lifeline's, with its card's port */
    int64_t *heard;     /* per rank: when a beat of it was last read (ms) */
    int64_t looked;     /* when this thread last read the socket (ms) */
    uint8_t *unwatched; /* per rank: it left, or cannot be reached from here */
    beat_msg msg[2];    /* this rank's BEAT and LEAVE, sealed once */
    cl_status *status;  /* the status endpoint this thread answers (status.h) */
    /* The communicators judged by these beats: c and the members of its family, whose
     * ranks are processes of c's (their to_root), so one beat answers for all of them
     * and a split that shares links costs no descriptor here. */
    pthread_mutex_t mu;
    coll_comm **watch;
    int nwatch, capwatch;
};

static in_port_t *port_of(cl_addr *a)
{
    return a->sa.ss_family == AF_INET ? &((struct sockaddr_in *)&a->sa)->sin_port
                                      : &((struct sockaddr_in6 *)&a->sa)->sin6_port;
}

int cl_beat_open(coll_comm *c, uint16_t *port, uint16_t *status_port)
{
    cl_addr a = {.len = sizeof(a.sa)};
    cl_beat *b = calloc(1, sizeof(*b));
    if (!b)
        return COLL_ENOMEM;
    b->c = c;
    b->fd = -1;
    pthread_mutex_init(&b->mu, NULL);
    c->beat = b;
    /* Where the lifeline listens, on a port of its own: an interface the job reaches. */
    if (getsockname(c->life.fd, (struct sockaddr *)&a.sa, &a.len) != 0 ||
        (a.sa.ss_family != AF_INET && a.sa.ss_family != AF_INET6))
        return COLL_ESYS;
    b->family = a.sa.ss_family;
    *port_of(&a) = 0;
    b->fd = socket(b->family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b->fd < 0 || bind(b->fd, (struct sockaddr *)&a.sa, a.len) != 0 ||
        getsockname(b->fd, (struct sockaddr *)&a.sa, &a.len) != 0)
        return COLL_ESYS;
    *port = ntohs(*port_of(&a));
    return cl_status_open(b->fd, &b->status, status_port);
}

int cl_beat_heard_lately(const coll_comm *c, int r)
{
    const cl_beat *b = c->beat;
    if (!b || b->c != c || !b->heard || r < 0 || r >= c->size)
        return 0;
    return cl_now_ms() - __atomic_load_n(&b->heard[r], __ATOMIC_RELAXED) < b->bound_ms;
}

int cl_beat_silent_ms(const coll_comm *c, int r)
{
    const cl_beat *b = c->beat;
    if (!b || !b->heard || r < 0 || r >= c->size || r == c->rank)
        return 0;
    int p = c->to_root ? c->to_root[r] : r; /* the process: b's rank */
    /* Silent as of this thread's last look, not as of now: after this process was
     * stopped (a debugger, ^Z, a suspended job) the waiter may run before this thread
     * has read the beats that came meanwhile, and would blame a live peer for it. */
    int64_t looked = __atomic_load_n(&b->looked, __ATOMIC_ACQUIRE);
    int64_t quiet = looked - __atomic_load_n(&b->heard[p], __ATOMIC_RELAXED);
    if (__atomic_load_n(&b->unwatched[p], __ATOMIC_RELAXED) || quiet < b->bound_ms)
        return 0;
    return (int)CL_MIN(quiet, INT32_MAX);
}

/* Wakes the thread to read its socket now (not at its next beat, a quarter of the bound
 * away): a datagram to itself, which it reads as no one's. */
static void nudge(const cl_beat *b)
{
    const cl_addr *me = &b->to[b->c->rank];
    uint8_t poke = 0;
    if (me->len)
        (void)sendto(b->fd, &poke, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&me->sa,
                     me->len);
}

int cl_beat_left(const coll_comm *c, int r, int64_t since)
{
    const cl_beat *b = c->beat;
    if (!b || !b->heard || r < 0 || r >= c->size)
        return -1;
    int p = c->to_root ? c->to_root[r] : r; /* the process: b's rank */
    /* looked first: what that read set is seen below (its release, this acquire). */
    int64_t looked = __atomic_load_n(&b->looked, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&b->unwatched[p], __ATOMIC_RELAXED))
        return 1;
    if (looked > since)
        return 0;
    nudge(b);
    return -1;
}

int cl_beat_refused(const coll_comm *c, int r, int wait_ms)
{
    const cl_beat *b = c->beat;
    if (!b || !b->to || r < 0 || r >= c->size)
        return 0;
    const cl_addr *to = &b->to[c->to_root ? c->to_root[r] : r];
    int fd = to->len ? socket(to->sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) : -1;
    if (fd < 0)
        return 0;
    /* Connected, so the kernel's port unreachable comes back as this socket's error. A
     * live rank's thread reads the byte as no one's beat. */
    uint8_t poke = 0;
    int err = 0, refused = 0;
    socklen_t len = sizeof(err);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (connect(fd, (const struct sockaddr *)&to->sa, to->len) == 0 &&
        send(fd, &poke, 1, MSG_NOSIGNAL) == 1 && poll(&p, 1, wait_ms) > 0 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
        refused = err == ECONNREFUSED;
    close(fd);
    return refused;
}

int cl_beat_period_ms(const coll_comm *c)
{
    return c->beat && c->beat->heard ? c->beat->period_ms : 0;
}

cl_status *cl_beat_status(const coll_comm *c)
{
    return c->beat && c->beat->c == c ? c->beat->status : NULL;
}

cl_status *cl_beat_any_status(const coll_comm *c, const int **to_root)
{
    *to_root = c->beat && c->beat->c != c ? c->to_root : NULL;
    return c->beat ? c->beat->status : NULL;
}

uint64_t cl_beat_owner_id(const coll_comm *c)
{
    return c->beat ? c->beat->c->id : 0;
}

void cl_beat_public(coll_comm *c, const cl_rdzv *rv)
{
    if (c->beat && c->beat->c == c)
        cl_status_public(c->beat->status, rv);
}

static void seal(const coll_comm *c, beat_msg *m)
{
    memset(m->tag, 0, sizeof(m->tag));
    if (!c->keyed)
        return;
    beat_msg bare = *m;
    cl_auth_tag(c->key, m->tag, 2, "coll beat v1", (size_t)12, &bare, sizeof(bare));
}

static void make_msg(const coll_comm *c, uint32_t kind, beat_msg *m)
{
    memset(m, 0, sizeof(*m)); /* every byte goes on the wire */
    m->magic = BEAT_MAGIC;
    m->kind = kind;
    m->from = c->rank;
    m->size = c->size;
    m->job = c->job;
    m->id = c->id;
    seal(c, m);
}

/* The rank whose beat m is, or -1 when it is not one of this communicator's. */
static int sender(const cl_beat *b, const beat_msg *m)
{
    const coll_comm *c = b->c;
    if (m->magic != BEAT_MAGIC || (m->kind != BEAT && m->kind != LEAVE) || m->job != c->job ||
        m->id != c->id || m->size != c->size || m->from < 0 || m->from >= c->size ||
        m->from == c->rank)
        return -1;
    if (c->keyed) {
        beat_msg bare = *m;
        seal(c, &bare);
        if (!cl_auth_equal(bare.tag, m->tag, CL_TAG_BYTES))
            return -1;
    }
    return m->from;
}

static void send_all(const cl_beat *b, const beat_msg *m)
{
    for (int r = 0; r < b->c->size; r++)
        if (r != b->c->rank && b->to[r].len)
            (void)sendto(b->fd, m, sizeof(*m), MSG_DONTWAIT | MSG_NOSIGNAL,
                         (const struct sockaddr *)&b->to[r].sa, b->to[r].len);
}

/* Everything that waits on the socket: a rank heard is a rank alive now. Stops at an
 * empty read too: what a shut socket returns (cl_beat_close). */
static void read_all(cl_beat *b, int64_t now)
{
    beat_msg m;
    ssize_t got;
    int n = 0;
    while (n++ < READ_BATCH &&
           ((got = recv(b->fd, &m, sizeof(m), MSG_DONTWAIT)) > 0 || (got < 0 && errno == EINTR))) {
        int r = got == (ssize_t)sizeof(m) ? sender(b, &m) : -1;
        if (r < 0)
            continue;
        if (m.kind == LEAVE) /* read by cl_beat_silent_ms on other threads */
            __atomic_store_n(&b->unwatched[r], 1, __ATOMIC_RELAXED);
        else /* read by cl_beat_heard_lately on other threads */
            __atomic_store_n(&b->heard[r], now, __ATOMIC_RELAXED);
    }
}

/* Of w's ranks, the one silent longest, if it has been for the bound, else -1. */
static int silent_rank(const cl_beat *b, const coll_comm *w, int64_t now)
{
    int worst = -1;
    int64_t since = now;
    for (int r = 0; r < w->size; r++) {
        int p = w->to_root ? w->to_root[r] : r; /* the process: b's rank */
        if (r != w->rank && !b->unwatched[p] && now - b->heard[p] >= b->bound_ms &&
            b->heard[p] < since) {
            worst = r;
            since = b->heard[p];
        }
    }
    return worst;
}

/* Silence matters while a collective of w waits for its ranks; an idle rank's peers may
 * be stopped in a debugger as long as they like. */
static void judge(cl_beat *b, coll_comm *w, int64_t now)
{
    if (cl_engine_idle(w) || cl_comm_state(w) != COLL_OK)
        return;
    int r = silent_rank(b, w, now);
    if (r < 0)
        return;
    int p = w->to_root ? w->to_root[r] : r;
    int ms = (int)CL_MIN(now - b->heard[p], INT32_MAX);
    cl_comm_blame(w, r, COLL_EPEER, ms);
    cl_comm_fail(w, COLL_EPEER, "rank %d, collective #%u: " CL_SILENT_FMT, w->rank,
                 cl_engine_issued(w), r, ms / 1000.0);
}

/* Under mu: a watcher leaves only between two rounds. */
static void judge_all(cl_beat *b, int64_t now)
{
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->nwatch; i++)
        judge(b, b->watch[i], now);
    pthread_mutex_unlock(&b->mu);
}

static void *beat_main(void *arg)
{
    cl_beat *b = arg;
    int64_t next = 0;
    while (!atomic_load(&b->stop)) {
        int64_t now = cl_now_ms();
        if (now >= next) {
            send_all(b, &b->msg[0]);
            next = now + b->period_ms;
        }
        struct pollfd p[3] = {{.fd = b->fd, .events = POLLIN}};
        int wait_ms = (int)(next - now);
        cl_status_poll(b->status, p + 1, now, &wait_ms);
        poll(p, 3, wait_ms);
        if (atomic_load(&b->stop))
            break;
        now = cl_now_ms();
        read_all(b, now);
        __atomic_store_n(&b->looked, now, __ATOMIC_RELEASE); /* cl_beat_silent_ms */
        cl_status_serve(b->status, b->c, p + 1);
        judge_all(b, now);
    }
    return NULL;
}

static int watch(cl_beat *b, coll_comm *c)
{
    pthread_mutex_lock(&b->mu);
    int rc = COLL_OK;
    if (b->nwatch == b->capwatch) {
        int cap = b->capwatch ? 2 * b->capwatch : 4;
        coll_comm **w = realloc(b->watch, (size_t)cap * sizeof(*w));
        if (w) {
            b->watch = w;
            b->capwatch = cap;
        } else {
            rc = COLL_ENOMEM;
        }
    }
    if (rc == COLL_OK) {
        b->watch[b->nwatch++] = c;
        c->beat = b;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void unwatch(cl_beat *b, coll_comm *c)
{
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->nwatch; i++)
        if (b->watch[i] == c)
            b->watch[i--] = b->watch[--b->nwatch];
    pthread_mutex_unlock(&b->mu);
    c->beat = NULL;
}

int cl_beat_start(coll_comm *c, const struct cl_card *cards)
{
    coll_comm *root = c->fam ? cl_family_root(c) : c;
    cl_status_enlist(c); /* coll_status lists every communicator of the process */
    if (root != c) /* its root's links, its root's beat */
        return root->beat ? watch(root->beat, c) : COLL_OK;
    cl_beat *b = c->beat;
    int n = c->size;
    b->to = calloc((size_t)n, sizeof(cl_addr));
    b->heard = calloc((size_t)n, sizeof(int64_t));
    b->unwatched = calloc((size_t)n, 1);
    if (!b->to || !b->heard || !b->unwatched)
        return COLL_ENOMEM;
    b->bound_ms = CL_MAX(BEAT_MIN_MS, CL_MIN(c->timeout_ms, c->op_timeout_ms / 2));
    b->period_ms = b->bound_ms / BEATS_PER_BOUND;
    int64_t now = cl_now_ms();
    b->looked = now;
    for (int r = 0; r < n; r++) {
        b->heard[r] = now;
        /* A rank of another address family has no beat this socket could reach. */
        if (cl_addr_parse(c->lives[r], &b->to[r]) != 0 || b->to[r].sa.ss_family != b->family ||
            !cards[r].beat) {
            b->to[r].len = 0;
            b->unwatched[r] = 1;
            continue;
        }
        *port_of(&b->to[r]) = htons(cards[r].beat);
    }
    if (cl_status_start(b->status, c, cards) != COLL_OK)
        return COLL_ENOMEM;
    make_msg(c, BEAT, &b->msg[0]);
    make_msg(c, LEAVE, &b->msg[1]);
    if (watch(b, c) != COLL_OK)
        return COLL_ENOMEM;
    if (pthread_create(&b->thread, NULL, beat_main, b) != 0)
        return COLL_ESYS;
    b->started = 1;
    return COLL_OK;
}

void cl_beat_close(coll_comm *c)
{
    cl_beat *b = c->beat;
    if (!b)
        return;
    if (b->c != c) { /* a member of b's family: the root closes b, after every member */
        unwatch(b, c);
        return;
    }
    if (b->started) {
        send_all(b, &b->msg[1]);
        atomic_store(&b->stop, 1);
        /* Wakes the thread's poll, also on a socket that is not connected (Linux). */
        if (shutdown(b->fd, SHUT_RD) != 0 && errno != ENOTCONN)
            cl_log(COLL_LOG_DEBUG, "beat: cannot wake the thread: %s", strerror(errno));
        pthread_join(b->thread, NULL);
    }
    if (b->fd >= 0)
        close(b->fd);
    cl_status_close(b->status);
    pthread_mutex_destroy(&b->mu);
    free(b->watch);
    free(b->to);
    free(b->heard);
    free(b->unwatched);
    free(b);
    c->beat = NULL;
}
