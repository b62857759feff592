/* Heartbeats: every rank's library says, from a thread of its own, that it is there, and
 * watches that every other rank does. A process that is stopped (SIGSTOP, a debugger) or
 * wedged keeps its sockets and its kernel acknowledges TCP for it, so neither its links
 * nor keepalive tell it from a busy one; its threads fall silent with it. A rank that is
 * only slow in the caller's code (evaluating, writing a checkpoint) goes on beating: its
 * library thread runs. So silence, not slowness, is what fails a communicator here.
 *
 * One UDP socket per communicator, at its lifeline's address, and one thread: every
 * period it sends each rank a datagram (sealed under the job's key with COLL_SECRET) and
 * reads what came. While a collective of this communicator is queued or running on this
 * rank, a rank not heard for the silence bound fails the communicator, blamed by name:
 * its farewell carries how long that rank was silent, so every survivor's sentence names
 * it, whichever link the failure reached it by. A rank that destroys its communicator
 * says so and is no longer watched. Point-to-point waits are not judged (a pair of ranks
 * may go on while a third is done) and keep the operation timeout.
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

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "core/comm.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define BEAT_MAGIC 0x54414542u /* "BEAT" */
enum { BEAT = 1, LEAVE = 2 };
enum { BEAT_MIN_MS = 500, BEATS_PER_BOUND = 4 };

_Static_assert(sizeof(struct sockaddr_in6) <= CL_BEAT_ADDR, "a card holds a beat address");

typedef struct beat_msg {
    uint32_t magic, kind;
    int32_t from, size;
    uint64_t job, id;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: HMAC of the message, this zeroed */
} beat_msg;

struct cl_beat {
    coll_comm *c;
    int fd;   /* the UDP socket */
    int wake; /* an eventfd: the thread stops */
    int started;
    atomic_int stop;
    pthread_t thread;
    int bound_ms, period_ms;
    uint8_t (*to)[CL_BEAT_ADDR]; /* every rank's address, from its card */
    int64_t *heard;              /* per rank: when a beat of it was last read (ms) */
    uint8_t *unwatched;          /* per rank: it left, or cannot be reached from here */
    beat_msg msg[2];             /* this rank's BEAT and LEAVE, sealed once */
};

/* The bytes of a socket address of this family; 0 for any other. */
static socklen_t addr_len(const void *a)
{
    sa_family_t f = ((const struct sockaddr *)a)->sa_family;
    return f == AF_INET    ? sizeof(struct sockaddr_in)
           : f == AF_INET6 ? sizeof(struct sockaddr_in6)
                           : 0;
}

int cl_beat_open(coll_comm *c, uint8_t addr[CL_BEAT_ADDR])
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    cl_beat *b = calloc(1, sizeof(*b));
    if (!b)
        return COLL_ENOMEM;
    b->c = c;
    b->fd = b->wake = -1;
    c->beat = b;
    /* Where the lifeline listens, on a port of its own: an interface the job reaches. */
    if (getsockname(c->life.fd, (struct sockaddr *)&a, &len) != 0 || !addr_len(&a))
        return COLL_ESYS;
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&a)->sin6_port = 0;
    len = addr_len(&a);
    b->fd = socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    b->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (b->fd < 0 || b->wake < 0 || bind(b->fd, (struct sockaddr *)&a, len) != 0 ||
        getsockname(b->fd, (struct sockaddr *)&a, &len) != 0)
        return COLL_ESYS;
    memset(addr, 0, CL_BEAT_ADDR);
    memcpy(addr, &a, len);
    return COLL_OK;
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
        if (r != b->c->rank && addr_len(b->to[r]))
            (void)sendto(b->fd, m, sizeof(*m), MSG_DONTWAIT | MSG_NOSIGNAL,
                         (const struct sockaddr *)b->to[r], addr_len(b->to[r]));
}

/* Everything that waits on the socket: a rank heard is a rank alive now. */
static void read_all(cl_beat *b, int64_t now)
{
    beat_msg m;
    ssize_t got;
    while ((got = recv(b->fd, &m, sizeof(m), MSG_DONTWAIT)) >= 0 || errno == EINTR) {
        int r = got == (ssize_t)sizeof(m) ? sender(b, &m) : -1;
        if (r < 0)
            continue;
        if (m.kind == LEAVE)
            b->unwatched[r] = 1;
        else
            b->heard[r] = now;
    }
}

/* The watched rank silent longest, if it has been for the bound, else -1. */
static int silent_rank(const cl_beat *b, int64_t now)
{
    int worst = -1;
    for (int r = 0; r < b->c->size; r++)
        if (r != b->c->rank && !b->unwatched[r] && now - b->heard[r] >= b->bound_ms &&
            (worst < 0 || b->heard[r] < b->heard[worst]))
            worst = r;
    return worst;
}

/* Silence matters while a collective waits for every rank; an idle rank's peers may be
 * stopped in a debugger as long as they like. */
static void judge(cl_beat *b, int64_t now)
{
    coll_comm *c = b->c;
    if (cl_engine_idle(c) || cl_comm_state(c) != COLL_OK)
        return;
    int r = silent_rank(b, now);
    if (r < 0)
        return;
    int ms = (int)CL_MIN(now - b->heard[r], INT32_MAX);
    cl_comm_blame_silent(c, r, ms);
    cl_comm_fail(c, COLL_EPEER, "rank %d, collective #%u: " CL_SILENT_FMT, c->rank,
                 cl_engine_issued(c), r, ms / 1000.0);
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
        struct pollfd p[2] = {{.fd = b->fd, .events = POLLIN}, {.fd = b->wake, .events = POLLIN}};
        if (poll(p, 2, (int)(next - now)) > 0 && p[1].revents)
            break;
        now = cl_now_ms();
        read_all(b, now);
        judge(b, now);
    }
    return NULL;
}

int cl_beat_start(coll_comm *c, const struct cl_card *cards)
{
    cl_beat *b = c->beat;
    int n = c->size;
    b->to = calloc((size_t)n, CL_BEAT_ADDR);
    b->heard = calloc((size_t)n, sizeof(int64_t));
    b->unwatched = calloc((size_t)n, 1);
    if (!b->to || !b->heard || !b->unwatched)
        return COLL_ENOMEM;
    b->bound_ms = CL_MAX(BEAT_MIN_MS, CL_MIN(c->timeout_ms, c->op_timeout_ms / 2));
    b->period_ms = b->bound_ms / BEATS_PER_BOUND;
    int64_t now = cl_now_ms();
    sa_family_t mine = ((const struct sockaddr *)cards[c->rank].beat)->sa_family;
    for (int r = 0; r < n; r++) {
        memcpy(b->to[r], cards[r].beat, CL_BEAT_ADDR);
        b->heard[r] = now;
        /* A rank of another address family has no beat this socket could reach. */
        if (((const struct sockaddr *)b->to[r])->sa_family != mine || !addr_len(b->to[r]))
            b->unwatched[r] = 1;
    }
    make_msg(c, BEAT, &b->msg[0]);
    make_msg(c, LEAVE, &b->msg[1]);
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
    if (b->started) {
        uint64_t one = 1;
        atomic_store(&b->stop, 1);
        if (write(b->wake, &one, sizeof(one)) != sizeof(one))
            cl_log(COLL_LOG_DEBUG, "beat: cannot wake the thread: %s", strerror(errno));
        pthread_join(b->thread, NULL);
        send_all(b, &b->msg[1]);
    }
    if (b->fd >= 0)
        close(b->fd);
    if (b->wake >= 0)
        close(b->wake);
    free(b->to);
    free(b->heard);
    free(b->unwatched);
    free(b);
    c->beat = NULL;
}
