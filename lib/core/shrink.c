/* coll_shrink: after a failure, the survivors agree on who is gone, over the lifelines
 * (life.h), and connect a communicator of themselves.
 *
 * The agreement is flooding in rounds, with a perfect-enough failure detector: a peer
 * whose lifeline closes, or that says nothing for two timeouts, is counted failed. Each
 * survivor dials every rank it does not count as failed (refused: failed). In round r it
 * sends every live peer its set of failed ranks and its card for the new communicator,
 * and reads theirs; every set read joins its own.
 *
 * Deciding. A rank decides by itself in a round where every set read equals the one it
 * sent and nothing new failed; it then sends its set and every member's card, marked
 * decided, once more to every rank it has a socket to, and stops. A rank that reads a
 * decided word from a live peer takes that set and those cards as its own, decides, and
 * passes the word on the same way. Why one answer:
 * - Two ranks that decide by themselves in the same round read each other's sets of
 *   that round (one that counted the other failed in it saw something new), and each
 *   set was its sender's decision: equal. (Two that counted each other failed before
 *   exclude each other: the detector's error, below.)
 * - A rank that decided in round r is heard in round r+1 by every rank that still counts
 *   it live, and what they hear is its decided word: none of them can decide by itself
 *   after round r, and those that adopt pass the same set on. The only ranks left to
 *   decide otherwise counted the decider failed: excluded from it (they learn so from its
 *   decided word, which reaches every socket) or dead.
 * - Every round that decides nothing saw a rank fail or a set grow, and sets only grow:
 *   at most 2n + 2 rounds.
 * A member that dies after the decision is in the new communicator: connecting it, or
 * its first collective, fails, and the survivors shrink the new one (as ULFM's
 * MPI_Comm_shrink). What the failure detector gets wrong is a rank alive but silent for
 * two timeouts (stopped): it ends excluded, told so by the deciders' word. The new id is
 * a hash of the decided set, so ranks that decided differently can never connect. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIFE_MAGIC 0x4C494645u /* "LIFE" */

typedef struct {
    uint32_t magic, attempt;
    int32_t from, round, decided, size, ncards;
    uint64_t job, id;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: HMAC of the message, this zeroed */
    /* then `size` bytes: 1 where the sender counts a rank as failed; then ncards cards:
     * the sender's own for the new communicator, or (decided) every rank's by old rank */
} life_msg;

/* One connection a peer dialed to us; rank -1 until its first message names it. */
typedef struct {
    int fd, rank;
    size_t off, cap;
    uint8_t *buf;
} inlink;

typedef struct {
    coll_comm *c;
    int n;
    size_t fixed; /* a message's header and set */
    uint8_t *dead, *heard, *done;
    int decided;              /* by itself or by a peer's word: its set is final */
    int disagree;             /* a set read this round differs from this rank's */
    int *out;                 /* per rank: the socket we dialed, -1 */
    inlink *in;               /* accepted connections */
    int nin, cap;             /* how many, room for */
    cl_card *cards;           /* by old rank: each one's card for the new communicator */
    uint8_t *msg;             /* this rank's outgoing message, room for every card */
    int die_round, die_after; /* COLL_FAULT_SHRINK, or -1 */
} agreement;

static size_t msg_size(const agreement *a, int ncards)
{
    return a->fixed + (size_t)ncards * sizeof(cl_card);
}

static int live(const agreement *a, int p)
{
    return p != a->c->rank && !a->dead[p] && !a->done[p];
}

/* Once this rank decided, nothing more changes its set. */
static void lost(agreement *a, int p, const char *why)
{
    if (p < 0 || a->dead[p] || a->done[p] || a->decided)
        return;
    cl_log(COLL_LOG_INFO, "rank %d shrink: rank %d counted as failed: %s", a->c->rank, p, why);
    a->dead[p] = 1;
}

static void agreement_free(agreement *a)
{
    for (int p = 0; p < a->n; p++)
        if (a->out && a->out[p] >= 0)
            close(a->out[p]);
    for (int i = 0; i < a->nin; i++) {
        if (a->in[i].fd >= 0)
            close(a->in[i].fd);
        free(a->in[i].buf);
    }
    free(a->in);
    free(a->out);
    free(a->dead);
    free(a->heard);
    free(a->done);
    free(a->cards);
    free(a->msg);
}

static int agreement_init(agreement *a, coll_comm *c, const cl_card *mine)
{
    int n = c->size;
    *a = (agreement){.c = c, .n = n, .fixed = sizeof(life_msg) + (size_t)n, .cap = 2 * n + 4};
    a->dead = calloc((size_t)n, 1);
    a->heard = calloc((size_t)n, 1);
    a->done = calloc((size_t)n, 1);
    a->out = malloc((size_t)n * sizeof(int));
    a->in = calloc((size_t)a->cap, sizeof(inlink));
    a->cards = calloc((size_t)n, sizeof(cl_card));
    a->msg = calloc(1, msg_size(a, n));
    for (int p = 0; a->out && p < n; p++)
        a->out[p] = -1; /* before any return: agreement_free closes what is not -1 */
    if (!a->dead || !a->heard || !a->done || !a->out || !a->in || !a->cards || !a->msg)
        return COLL_ENOMEM;
    a->cards[c->rank] = *mine;
    /* Fault injection for the tests: COLL_FAULT_SHRINK=R:K kills this rank in round R
     * once its word reached K peers: a death between two peers' reads of one round. */
    const char *f = getenv("COLL_FAULT_SHRINK");
    if (!f || sscanf(f, "%d:%d", &a->die_round, &a->die_after) != 2)
        a->die_round = a->die_after = -1;
    return COLL_OK;
}

/* Dials every rank not known failed, all at once; a refused or late dial is a failure. */
static void dial_all(agreement *a, int64_t deadline)
{
    coll_comm *c = a->c;
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && (a->out[p] = cl_life_dial(c->lives[p])) < 0)
            lost(a, p, "its lifeline refused the connection");
    for (int p = 0; p < a->n; p++) {
        int st = 0;
        while (live(a, p) && (st = cl_life_dialed(a->out[p])) == 0 && cl_now_ms() < deadline)
            cl_sleep_ms(1);
        if (live(a, p) && st != 1)
            lost(a, p, st < 0 ? "its lifeline refused the connection" : "no answer to a dial");
    }
}

/* With COLL_SECRET, a lifeline message carries a tag under the job's key: nobody
 * without it can speak in an agreement (a message replayed from one is the same word
 * again, and the attempt number keeps one agreement's words out of the next). */
static void seal(const agreement *a, uint8_t *msg, size_t len)
{
    uint8_t *tag = msg + offsetof(life_msg, tag);
    memset(tag, 0, CL_TAG_BYTES);
    cl_auth_tag(a->c->key, tag, 2, "coll life v1", (size_t)12, msg, len);
}

static int sealed(const agreement *a, const uint8_t *msg, size_t len)
{
    if (!a->c->keyed)
        return 1;
    uint8_t *copy = malloc(len), want[CL_TAG_BYTES];
    if (!copy)
        return 0;
    memcpy(copy, msg, len);
    seal(a, copy, len);
    memcpy(want, copy + offsetof(life_msg, tag), CL_TAG_BYTES);
    free(copy);
    return cl_auth_equal(want, msg + offsetof(life_msg, tag), CL_TAG_BYTES);
}

/* This rank's word for `round` to every live peer; decided, also to every rank it still
 * has a socket to (one counted failed but still in the agreement, a round or more
 * behind, learns it is out), and whoever no longer listens changes nothing. */
static void send_round(agreement *a, int round, int decided, int64_t deadline)
{
    coll_comm *c = a->c;
    int ncards = decided ? a->n : 1;
    life_msg m;
    memset(&m, 0, sizeof(m)); /* the padding travels too */
    m.magic = LIFE_MAGIC;
    m.attempt = c->shrinks;
    m.from = c->rank;
    m.round = round;
    m.decided = decided;
    m.size = a->n;
    m.ncards = ncards;
    m.job = c->job;
    m.id = c->id;
    memcpy(a->msg, &m, sizeof(m));
    memcpy(a->msg + sizeof(m), a->dead, (size_t)a->n);
    memcpy(a->msg + a->fixed, decided ? a->cards : &a->cards[c->rank],
           (size_t)ncards * sizeof(cl_card));
    size_t len = msg_size(a, ncards);
    if (c->keyed)
        seal(a, a->msg, len);
    for (int p = 0, told = 0; p < a->n; p++) {
        if (round == a->die_round && told == a->die_after)
            raise(SIGKILL);
        told += live(a, p);
        if (live(a, p) && cl_life_send(a->out[p], a->msg, len, deadline) != COLL_OK)
            lost(a, p, "the lifeline closed");
        else if (decided && p != c->rank && a->dead[p] && a->out[p] >= 0)
            cl_life_send(a->out[p], a->msg, len, cl_now_ms());
    }
    if (round == a->die_round)
        raise(SIGKILL);
}

/* A peer's decided word: its set and cards become this rank's. */
static void adopt(agreement *a, const uint8_t *set, const uint8_t *cards)
{
    if (a->decided)
        return;
    memcpy(a->dead, set, (size_t)a->n);
    memcpy(a->cards, cards, (size_t)a->n * sizeof(cl_card));
    a->decided = 1;
}

static void drop(agreement *a, inlink *l, int round, const life_msg *m)
{
    cl_log(COLL_LOG_WARN,
           "rank %d shrink: dropped a lifeline message that is not this "
           "communicator's round %d (from %d, round %d)",
           a->c->rank, round, m->from, m->round);
    close(l->fd);
    l->fd = -1;
}

/* A whole message on link l: checks it and takes it as its sender's word for `round`:
 * its set joins this rank's, and differs or not from what this rank sent (`sent`). */
static void take(agreement *a, inlink *l, int round, const uint8_t *sent)
{
    coll_comm *c = a->c;
    life_msg m;
    memcpy(&m, l->buf, sizeof(m));
    const uint8_t *set = l->buf + sizeof(m), *cards = l->buf + a->fixed;
    l->off = 0;
    int ok = m.magic == LIFE_MAGIC && m.job == c->job && m.id == c->id &&
             sealed(a, l->buf, msg_size(a, m.ncards)) && m.from >= 0 && m.from < a->n &&
             m.from != c->rank && m.attempt == c->shrinks && (l->rank < 0 || l->rank == m.from);
    /* Counted failed already (it came too late): its word no longer counts. */
    if (ok && (a->dead[m.from] || a->done[m.from])) {
        l->rank = m.from;
        return;
    }
    /* A decided word is final whatever round it comes in (to a rank a round behind). */
    if (!ok || (m.round != round && !m.decided)) {
        drop(a, l, round, &m);
        return;
    }
    l->rank = m.from;
    a->heard[m.from] = 1;
    if (m.decided) {
        a->done[m.from] = 1;
        if (!a->decided)
            cl_log(COLL_LOG_INFO, "rank %d shrink: takes rank %d's decision", c->rank, m.from);
        adopt(a, set, cards);
        return;
    }
    memcpy(&a->cards[m.from], cards, sizeof(cl_card));
    if (a->decided)
        return;
    for (int p = 0; p < a->n; p++)
        a->dead[p] |= set[p];
    if (memcmp(set, sent, (size_t)a->n) != 0)
        a->disagree = 1;
}

/* How long the message arriving on l is: its header first, then what that says (0: a
 * header no message of this agreement has). */
static size_t expected(const agreement *a, const inlink *l)
{
    if (l->off < a->fixed)
        return a->fixed;
    life_msg m;
    memcpy(&m, l->buf, sizeof(m));
    if (m.size != a->n || m.ncards != (m.decided ? a->n : 1))
        return 0;
    return msg_size(a, m.ncards);
}

static void read_link(agreement *a, inlink *l, int round, const uint8_t *sent)
{
    for (;;) {
        size_t want = expected(a, l);
        if (want > l->cap) {
            uint8_t *b = realloc(l->buf, want);
            if (!b)
                want = 0;
            else
                l->buf = b, l->cap = want;
        }
        if (!want) {
            life_msg m;
            memcpy(&m, l->buf, sizeof(m));
            drop(a, l, round, &m);
            return;
        }
        ssize_t got = read(l->fd, l->buf + l->off, want - l->off);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            lost(a, l->rank, "its lifeline closed");
            close(l->fd);
            l->fd = -1;
        }
        if (got <= 0)
            return;
        l->off += (size_t)got;
        if (l->off == want && want > a->fixed) {
            take(a, l, round, sent);
            return;
        }
    }
}

static void accept_new(agreement *a)
{
    int fd;
    while (a->nin < a->cap && (fd = cl_life_accept(&a->c->life)) >= 0) {
        uint8_t *buf = malloc(a->fixed);
        if (!buf) {
            close(fd);
            return;
        }
        a->in[a->nin++] = (inlink){fd, -1, 0, a->fixed, buf};
    }
}

/* Is anyone's word for this round still to come? */
static int waiting(const agreement *a)
{
    for (int p = 0; p < a->n && !a->decided; p++)
        if (live(a, p) && !a->heard[p])
            return 1;
    return 0;
}

/* The poll set: the listener, links still to be heard from, and the sockets we dialed
 * to peers still to be heard from (never written to by the peer: readable means it
 * closed, which is how the death of a rank that has not dialed us yet shows).
 * idx: an in-link's index, or -1 - rank for a dialed socket. */
static int poll_set(const agreement *a, struct pollfd *pf, int *idx)
{
    int k = 0;
    /* With every slot taken (strangers that connect and say nothing), the listener is
     * left alone: watched, its pending connections would wake every poll at once. */
    pf[k++] = (struct pollfd){.fd = a->c->life.fd, .events = a->nin < a->cap ? POLLIN : 0};
    for (int i = 0; i < a->nin; i++) {
        const inlink *l = &a->in[i];
        /* A peer a round ahead waits in its socket until this round is done. */
        if (l->fd >= 0 && (l->rank < 0 || (live(a, l->rank) && !a->heard[l->rank]))) {
            idx[k] = i;
            pf[k++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
        }
    }
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && !a->heard[p] && a->out[p] >= 0) {
            idx[k] = -1 - p;
            pf[k++] = (struct pollfd){.fd = a->out[p], .events = POLLIN};
        }
    return k;
}

/* Reads every live peer's word for `round` (or counts the peer failed). */
static void read_round(agreement *a, int round, const uint8_t *sent, int64_t deadline)
{
    size_t slots = (size_t)a->cap + (size_t)a->n + 1;
    struct pollfd *pf = calloc(slots, sizeof(*pf));
    int *idx = calloc(slots, sizeof(int));
    while (pf && idx && waiting(a)) {
        int k = poll_set(a, pf, idx);
        int64_t left = deadline - cl_now_ms();
        if (left <= 0)
            break;
        if (poll(pf, (nfds_t)k, (int)CL_MIN(left, 100)) <= 0)
            continue;
        if (pf[0].revents)
            accept_new(a);
        for (int j = 1; j < k; j++) {
            if (!pf[j].revents)
                continue;
            if (idx[j] >= 0)
                read_link(a, &a->in[idx[j]], round, sent);
            else
                lost(a, -1 - idx[j], "the lifeline it accepted closed");
        }
    }
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && !a->heard[p])
            lost(a, p, "said nothing before the deadline");
    free(pf);
    free(idx);
}

/* Rounds until this rank decides; COLL_OK with a->dead the agreed set and a->cards
 * every member's card. *rounds: how many it took. */
static int agree(agreement *a, int *rounds)
{
    coll_comm *c = a->c;
    uint8_t *sent = malloc((size_t)a->n);
    if (!sent)
        return COLL_ENOMEM;
    /* Survivors come late by up to a timeout (one whose collective ended by its timeout,
     * another's at once when the peer closed), and rounds end that far apart. */
    int64_t deadline = cl_now_ms() + 2 * (int64_t)c->timeout_ms;
    dial_all(a, deadline);
    int round;
    for (round = 0; !a->decided && round <= 2 * a->n + 2; round++) {
        memcpy(sent, a->dead, (size_t)a->n);
        send_round(a, round, 0, deadline);
        memset(a->heard, 0, (size_t)a->n);
        a->disagree = 0;
        read_round(a, round, sent, deadline);
        a->decided |= !a->disagree && memcmp(sent, a->dead, (size_t)a->n) == 0;
        deadline = cl_now_ms() + 2 * (int64_t)c->timeout_ms;
        if (a->decided)
            send_round(a, round + 1, 1, deadline);
    }
    free(sent);
    *rounds = round;
    if (!a->decided)
        return COLL_ETIMEDOUT;
    return a->dead[c->rank] ? COLL_EPEER : COLL_OK;
}

static void describe(const agreement *a, char *out, size_t len)
{
    size_t at = 0;
    out[0] = 0;
    for (int p = 0; p < a->n && at < len; p++)
        if (a->dead[p])
            at += (size_t)snprintf(out + at, len - at, "%s%d", at ? "," : "", p);
    if (!at)
        snprintf(out, len, "none");
}

/* Connects nc, the survivors' communicator, from the agreed set and cards. A member
 * gone since the decision fails it as it connects; it is kept, failed (its calls say
 * why), so that every survivor holds the same communicator and shrinks it next. */
static int rebuild(agreement *a, coll_comm *nc, cl_tr_listener *l)
{
    coll_comm *c = a->c;
    int m = 0, me = 0;
    cl_card *cards = calloc((size_t)a->n, sizeof(cl_card));
    if (!cards)
        return COLL_ENOMEM;
    for (int p = 0; p < a->n; p++) {
        me += p < c->rank && !a->dead[p];
        if (!a->dead[p])
            cards[m++] = a->cards[p];
    }
    cl_comm_place(nc, me, m,
                  cl_hash(a->dead, (size_t)a->n, cl_hash(&c->shrinks, sizeof(c->shrinks), c->id)));
    nc->job = c->job;
    int rc = cl_comm_connect(nc, l, cards);
    free(cards);
    if (rc != COLL_OK && cl_comm_state(nc) == COLL_ESTATE && cl_engine_start(nc) == COLL_OK) {
        cl_log(COLL_LOG_WARN,
               "rank %d shrink: the survivors agreed, and their communicator "
               "failed as it connected (%s): shrink it too",
               c->rank, nc->err);
        rc = COLL_OK;
    } else if (rc != COLL_OK) {
        cl_comm_init_error("shrink: %.480s", nc->err[0] ? nc->err : coll_strerror(rc));
    }
    return rc;
}

int coll_shrink(coll_comm *c, coll_comm **out)
{
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    if (!c)
        return COLL_EINVAL;
    /* A healthy communicator is failed first, so its peers stop and shrink too. */
    if (cl_comm_state(c) == COLL_OK)
        cl_comm_fail(c, COLL_EABORTED, "rank %d: the communicator was shrunk", c->rank);
    c->shrinks++;
    int64_t t0 = cl_now_us();
    /* The new communicator exists before the agreement, at the old size (an upper
     * bound), so that its card travels in every round. */
    cl_config cfg = cl_comm_config(c);
    cl_tr_listener *l = NULL;
    coll_comm *nc = NULL;
    cl_card mine;
    agreement a = {0};
    int rounds = 0, rc = cl_comm_create(&cfg, c->rank, c->size, 0, &nc, &l, &mine);
    if (rc == COLL_OK && (rc = agreement_init(&a, c, &mine)) == COLL_OK &&
        (rc = agree(&a, &rounds)) != COLL_OK)
        cl_comm_init_error("shrink: %s", rc == COLL_EPEER
                                             ? "the other survivors count this rank "
                                               "as failed"
                                             : "no agreement on the failed ranks in time");
    int64_t t1 = cl_now_us();
    if (rc == COLL_OK) {
        memcpy(c->failed, a.dead, (size_t)c->size);
        char gone[256];
        describe(&a, gone, sizeof(gone));
        cl_log(COLL_LOG_INFO, "rank %d shrink: agreed in %d round(s), %.1f ms: ranks failed: %s",
               c->rank, rounds, (double)(t1 - t0) / 1e3, gone);
        rc = rebuild(&a, nc, l);
    }
    agreement_free(&a);
    if (rc == COLL_OK) {
        cl_log(COLL_LOG_INFO,
               "rank %d shrink: rank %d of %d in the new communicator, "
               "connected in %.1f ms",
               c->rank, nc->rank, nc->size, (double)(cl_now_us() - t1) / 1e3);
        *out = nc;
        return COLL_OK;
    }
    if (nc)
        cl_comm_free(nc);
    cl_log(COLL_LOG_ERROR, "coll_shrink: %s", coll_last_error(NULL));
    return rc;
}

int coll_failed_ranks(const coll_comm *c, int *ranks, int max)
{
    if (!c || max < 0 || (max && !ranks))
        return COLL_EINVAL;
    coll_comm *mc = (coll_comm *)c; /* the lock only; nothing changes */
    pthread_mutex_lock(&mc->mu);
    int blamed = c->cause_status == COLL_EPEER ? c->cause_rank : -1;
    pthread_mutex_unlock(&mc->mu);
    int k = 0;
    for (int p = 0; p < c->size; p++) {
        /* Before an agreement, this rank's own evidence: the peer its failure began at. */
        int gone = c->shrinks ? c->failed[p] : p == blamed;
        if (gone && k++ < max)
            ranks[k - 1] = p;
    }
    return k;
}
