/* Lifeline sockets: see life.h. */
#include "core/life.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/iface.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Where the tcp transport listens (transports/tcp: the interface `device` picks, of the
 * job's family), so a job that meets on loopback is not reachable from the network
 * through its lifeline. A device the interfaces do not know (an RDMA device's name) leaves
 * the choice to the defaults. */
int cl_life_open(const char *device, int family, cl_life *out, char *err, size_t errlen)
{
    cl_addr a;
    out->fd = -1;
    if (cl_pick_iface(device, family, &a, err, errlen) != 0 &&
        cl_pick_iface(NULL, family, &a, err, errlen) != 0)
        return COLL_ESYS;
    int fd = cl_addr_listen(&a, SOCK_NONBLOCK, 1024);
    if (fd < 0) {
        snprintf(err, errlen, "lifeline: cannot listen: %s", strerror(errno));
        return COLL_ESYS;
    }
    out->fd = fd;
    cl_addr_text(&a, out->addr, sizeof(out->addr));
    cl_log(COLL_LOG_DEBUG, "lifeline listens at %s", out->addr);
    return COLL_OK;
}

void cl_life_close(cl_life *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}

int cl_life_dial(const char *addr)
{
    cl_addr a;
    return cl_addr_parse(addr, &a) == 0 ? cl_addr_dial(&a, SOCK_NONBLOCK) : -1;
}

int cl_life_dialed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
        return -1;
    return cl_addr_self_dialed(fd) ? -1 : 1; /* a dead peer's port, met by ourselves */
}

/* ECONNREFUSED, or our own port met (cl_life_dialed): a dead peer's port. */
static int refusal(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return 0;
    return err == ECONNREFUSED || (err == 0 && cl_addr_self_dialed(fd));
}

int cl_life_refused(const char *addr, int wait_ms)
{
    cl_addr a;
    if (cl_addr_parse(addr, &a) != 0)
        return 0;
    int fd = cl_addr_dial(&a, SOCK_NONBLOCK);
    if (fd < 0)
        return errno == ECONNREFUSED;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int refused = poll(&p, 1, wait_ms) > 0 && refusal(fd);
    close(fd);
    return refused;
}

int cl_life_send(int fd, const void *buf, size_t n, int64_t deadline_ms)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return COLL_EPEER;
        int64_t left = deadline_ms - cl_now_ms();
        if (left <= 0)
            return COLL_ETIMEDOUT;
        struct pollfd q = {.fd = fd, .events = POLLOUT};
        poll(&q, 1, (int)CL_MIN(left, 100));
    }
    return COLL_OK;
}

/* ---- the hello: who dials whom ------------------------------------------------------ */

static void hello_tag(const cl_life_who *w, const cl_life_hello *h, uint8_t tag[CL_TAG_BYTES])
{
    cl_life_hello bare = *h;
    memset(bare.tag, 0, sizeof(bare.tag));
    cl_auth_tag(w->key, tag, 2, "coll life hello v1", (size_t)18, &bare, sizeof(bare));
}

void cl_life_hello_make(const cl_life_who *w, int to, cl_life_hello *out)
{
    memset(out, 0, sizeof(*out));
    out->magic = CL_LIFE_HELLO_MAGIC;
    out->attempt = w->attempt;
    out->from = w->rank;
    out->to = to;
    out->job = w->job;
    out->id = w->id;
    if (w->keyed)
        hello_tag(w, out, out->tag);
}

/* Every field names this agreement and this rank, so a hello meant for another rank,
 * communicator, attempt or job takes no place here; with COLL_SECRET the tag proves the
 * sender holds the key (a hello replayed on a second connection finds its rank's place
 * taken). */
int cl_life_hello_check(const cl_life_who *w, const cl_life_hello *h, const char **why)
{
    uint8_t want[CL_TAG_BYTES];
    *why = NULL;
    if (h->magic != CL_LIFE_HELLO_MAGIC)
        *why = "not a lifeline hello";
    else if (h->job != w->job || h->id != w->id)
        *why = "of another job or communicator";
    else if (h->attempt != w->attempt)
        *why = "of another shrink of this communicator";
    else if (h->to != w->rank || h->from < 0 || h->from >= w->size || h->from == w->rank)
        *why = "names ranks that do not dial this one";
    else if (w->keyed && (hello_tag(w, h, want), !cl_auth_equal(want, h->tag, CL_TAG_BYTES)))
        *why = "failed authentication: another COLL_SECRET, or not a rank of this job";
    return *why ? -1 : h->from;
}

/* ---- the gate: connections until their hello is in ----------------------------------- */

static void gate_drop(cl_life_gate *g, int i, int level, const char *why)
{
    cl_log(level, "lifeline: dropped a connection that %s", why);
    close(g->p[i].fd);
    g->p[i] = g->p[--g->np];
}

/* Reads each pending hello: the socket of the first that proves a rank (*from), or -1.
 * Whatever fails or closes leaves the gate. */
static int gate_pass(cl_life_gate *g, const cl_life_who *w, int *from)
{
    for (int i = 0; i < g->np; i++) {
        cl_life_pending *p = &g->p[i];
        ssize_t got = read(p->fd, (uint8_t *)&p->hello + p->got, sizeof(p->hello) - p->got);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got <= 0) {
            gate_drop(g, i--, COLL_LOG_DEBUG, "closed before its hello");
            continue;
        }
        if ((p->got += (size_t)got) < sizeof(p->hello))
            continue;
        const char *why;
        if ((*from = cl_life_hello_check(w, &p->hello, &why)) < 0) {
            cl_log(COLL_LOG_WARN, "rank %d lifeline: refused a connection: protocol error (%s)",
                   w->rank, why);
            gate_drop(g, i--, COLL_LOG_DEBUG, "sent a bad hello");
            continue;
        }
        int fd = p->fd;
        g->p[i] = g->p[--g->np];
        return fd;
    }
    return -1;
}

static int gate_oldest(const cl_life_gate *g)
{
    int o = 0;
    for (int i = 1; i < g->np; i++)
        o = g->p[i].since < g->p[o].since ? i : o;
    return o;
}

/* Each connection accepted is read at once: a rank's hello is usually there already and
 * passes without waiting, so strangers that crowd the gate push out only connections
 * that have said nothing yet. */
int cl_life_admit(cl_life_gate *g, const cl_life *l, const cl_life_who *w, int *from)
{
    int64_t now = cl_now_ms();
    for (int i = g->np - 1; i >= 0; i--)
        if (now - g->p[i].since > CL_LIFE_PENDING_MS)
            gate_drop(g, i, COLL_LOG_DEBUG, "sent no hello in time");
    for (;;) {
        int fd = gate_pass(g, w, from);
        if (fd >= 0)
            return fd;
        int s = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0)
            return -1;
        if (g->np == CL_LIFE_PENDING)
            gate_drop(g, gate_oldest(g), COLL_LOG_DEBUG, "was pushed out by a newer one");
        g->p[g->np++] = (cl_life_pending){.fd = s, .since = now};
    }
}

void cl_life_gate_close(cl_life_gate *g)
{
    for (int i = 0; i < g->np; i++)
        close(g->p[i].fd);
    g->np = 0;
}

/* ---- words of an agreement ---------------------------------------------------------- */

size_t cl_life_msg_len(const cl_life_who *w, int ncards)
{
    return sizeof(cl_life_msg) + (size_t)w->size + (size_t)ncards * w->card;
}

void cl_life_seal(const cl_life_who *w, uint8_t *msg, size_t len)
{
    uint8_t *tag = msg + offsetof(cl_life_msg, tag);
    memset(tag, 0, CL_TAG_BYTES);
    cl_auth_tag(w->key, tag, 2, "coll life v1", (size_t)12, msg, len);
}

static int sealed(const cl_life_who *w, const uint8_t *msg, size_t len)
{
    if (!w->keyed)
        return 1;
    uint8_t *copy = malloc(len), want[CL_TAG_BYTES];
    if (!copy)
        return 0;
    memcpy(copy, msg, len);
    cl_life_seal(w, copy, len);
    memcpy(want, copy + offsetof(cl_life_msg, tag), CL_TAG_BYTES);
    free(copy);
    return cl_auth_equal(want, msg + offsetof(cl_life_msg, tag), CL_TAG_BYTES);
}

/* How long the word arriving on k is: its header first, then what that says (0: a
 * header no word of this agreement has). */
static size_t word_len(const cl_life_link *k, const cl_life_who *w)
{
    if (k->off < sizeof(cl_life_msg))
        return sizeof(cl_life_msg);
    cl_life_msg m;
    memcpy(&m, k->buf, sizeof(m));
    if (m.size != w->size || m.ncards != (m.decided ? w->size : 1))
        return 0;
    return cl_life_msg_len(w, m.ncards);
}

static const char *word_check(const cl_life_link *k, const cl_life_who *w, int from, size_t len)
{
    cl_life_msg m;
    memcpy(&m, k->buf, sizeof(m));
    if (m.magic != CL_LIFE_MAGIC || m.job != w->job || m.id != w->id || m.attempt != w->attempt)
        return "a word of another agreement";
    if (m.from != from)
        return "a word in another rank's name";
    if (!sealed(w, k->buf, len))
        return "a word that failed authentication";
    return NULL;
}

static int link_fail(cl_life_link *k, const char *what, const char **why)
{
    *why = what;
    close(k->fd);
    k->fd = -1;
    return -1;
}

int cl_life_read(cl_life_link *k, const cl_life_who *w, int from, const char **why)
{
    for (;;) {
        size_t want = word_len(k, w);
        if (!want)
            return link_fail(k, "a header that is no word of this agreement", why);
        if (want > k->cap) {
            uint8_t *b = realloc(k->buf, want);
            if (!b)
                return link_fail(k, "no memory for its word", why);
            k->buf = b;
            k->cap = want;
        }
        ssize_t got = read(k->fd, k->buf + k->off, want - k->off);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (got <= 0)
            return link_fail(k, "its lifeline closed", why);
        k->off += (size_t)got;
        if (k->off == want && want > sizeof(cl_life_msg)) {
            k->off = 0;
            const char *bad = word_check(k, w, from, want);
            return bad ? link_fail(k, bad, why) : 1;
        }
    }
}

void cl_life_link_close(cl_life_link *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
    free(k->buf);
    k->buf = NULL;
    k->cap = k->off = 0;
}
