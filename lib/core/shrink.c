/* coll_shrink: after a failure, the survivors agree on who is gone, over the lifelines
 * (life.h), and connect a communicator of themselves.
 *
 * The agreement is flooding in rounds. Each survivor dials every rank it does not
 * count as failed (a refused dial: failed). In round r it sends every live peer its set
 * of failed ranks and reads theirs; a peer that closes or says nothing before the
 * deadline joins the set. A round where every set read equals this rank's own, and
 * nothing new failed, decides; the rank says so in one last message, which its peers
 * count as that peer's round, and stops. Then each survivor builds its new communicator
 * and sends its card over the same lifelines. The new id is a hash of the decided set:
 * survivors that decided differently (a rank died between two peers' reads of one round)
 * cannot connect to each other, and their shrink fails rather than build two
 * communicators; calling it again agrees anew. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIFE_MAGIC 0x4C494645u /* "LIFE" */
#define CARDS (-1)               /* the round that carries the new communicator's cards */

typedef struct {
    uint32_t magic, attempt;
    int32_t from, round, decided, size;
    uint64_t job, id;
    cl_card card;               /* round CARDS: the sender's, for the new communicator */
    uint8_t tag[CL_TAG_BYTES];  /* with COLL_SECRET: HMAC of the message, this zeroed */
    /* then `size` bytes: 1 where the sender counts a rank as failed */
} life_msg;

/* One connection a peer dialed to us; rank -1 until its first message names it. */
typedef struct {
    int fd, rank;
    size_t off;
    uint8_t *buf;
} inlink;

typedef struct {
    coll_comm *c;
    int n;
    size_t msz;
    uint8_t *dead, *heard, *done;
    int *out;     /* per rank: the socket we dialed, -1 */
    inlink *in;   /* accepted connections */
    int nin, cap; /* how many, room for */
    int disagree; /* a set read this round differs from this rank's */
    cl_card *cards;
    uint8_t *msg; /* this rank's outgoing message */
} agreement;

static int live(const agreement *a, int p)
{
    return p != a->c->rank && !a->dead[p] && !a->done[p];
}

static void lost(agreement *a, int p, const char *why)
{
    if (p < 0 || a->dead[p] || a->done[p])
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

static int agreement_init(agreement *a, coll_comm *c)
{
    int n = c->size;
    *a = (agreement){.c = c, .n = n, .msz = sizeof(life_msg) + (size_t)n, .cap = 2 * n + 4};
    a->dead = calloc((size_t)n, 1);
    a->heard = calloc((size_t)n, 1);
    a->done = calloc((size_t)n, 1);
    a->out = malloc((size_t)n * sizeof(int));
    a->in = calloc((size_t)a->cap, sizeof(inlink));
    a->cards = calloc((size_t)n, sizeof(cl_card));
    a->msg = calloc(1, a->msz);
    for (int p = 0; a->out && p < n; p++)
        a->out[p] = -1; /* before any return: agreement_free closes what is not -1 */
    if (!a->dead || !a->heard || !a->done || !a->out || !a->in || !a->cards || !a->msg)
        return COLL_ENOMEM;
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
static void seal(const agreement *a, uint8_t *msg)
{
    uint8_t *tag = msg + offsetof(life_msg, tag);
    memset(tag, 0, CL_TAG_BYTES);
    cl_auth_tag(a->c->key, tag, 2, "coll life v1", (size_t)12, msg, a->msz);
}

static int sealed(const agreement *a, const uint8_t *msg)
{
    if (!a->c->keyed)
        return 1;
    uint8_t *copy = malloc(a->msz), want[CL_TAG_BYTES];
    if (!copy)
        return 0;
    memcpy(copy, msg, a->msz);
    seal(a, copy);
    memcpy(want, copy + offsetof(life_msg, tag), CL_TAG_BYTES);
    free(copy);
    return cl_auth_equal(want, msg + offsetof(life_msg, tag), CL_TAG_BYTES);
}

static void send_round(agreement *a, int round, int decided, int64_t deadline)
{
    coll_comm *c = a->c;
    life_msg m = {LIFE_MAGIC, c->shrinks, c->rank, round, decided, a->n, c->job, c->id,
                  {{0}, 0, 0, {0}, {0}, {0}}, {0}};
    if (round == CARDS)
        m.card = a->cards[c->rank];
    memcpy(a->msg, &m, sizeof(m));
    memcpy(a->msg + sizeof(m), a->dead, (size_t)a->n);
    if (c->keyed)
        seal(a, a->msg);
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && cl_life_send(a->out[p], a->msg, a->msz, deadline) != COLL_OK)
            lost(a, p, "the lifeline closed");
}

/* A whole message on link l: checks it and takes it as its sender's word for `round`
 * (round CARDS skips what is left of the rounds before it): its set joins this rank's,
 * and differs or not from what this rank sent (`sent`). */
static void take(agreement *a, inlink *l, int round, const uint8_t *sent)
{
    coll_comm *c = a->c;
    life_msg m;
    memcpy(&m, l->buf, sizeof(m));
    const uint8_t *set = l->buf + sizeof(m);
    l->off = 0;
    int ok = m.magic == LIFE_MAGIC && m.job == c->job && m.id == c->id && sealed(a, l->buf) &&
             m.size == a->n && m.from >= 0 && m.from < a->n && m.from != c->rank &&
             m.attempt == c->shrinks && (l->rank < 0 || l->rank == m.from);
    /* Counted failed already (it came too late): its word no longer counts. */
    if (ok && (a->dead[m.from] || a->done[m.from])) {
        l->rank = m.from;
        return;
    }
    if (ok && round == CARDS && m.round != CARDS)
        return;
    if (!ok || m.round != round) {
        cl_log(COLL_LOG_WARN, "rank %d shrink: dropped a lifeline message that is not this "
               "communicator's round %d (from %d, round %d)", c->rank, round, m.from, m.round);
        close(l->fd);
        l->fd = -1;
        return;
    }
    l->rank = m.from;
    a->heard[m.from] = 1;
    if (round == CARDS) {
        a->cards[m.from] = m.card;
        return;
    }
    a->done[m.from] = m.decided != 0;
    for (int p = 0; p < a->n; p++)
        a->dead[p] |= set[p];
    if (memcmp(set, sent, (size_t)a->n) != 0)
        a->disagree = 1;
}

static void read_link(agreement *a, inlink *l, int round, const uint8_t *sent)
{
    ssize_t got = read(l->fd, l->buf + l->off, a->msz - l->off);
    if (got > 0) {
        l->off += (size_t)got;
        if (l->off == a->msz)
            take(a, l, round, sent);
    } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        lost(a, l->rank, "its lifeline closed");
        close(l->fd);
        l->fd = -1;
    }
}

static void accept_new(agreement *a)
{
    int fd;
    while (a->nin < a->cap && (fd = cl_life_accept(&a->c->life)) >= 0) {
        uint8_t *buf = malloc(a->msz);
        if (!buf) {
            close(fd);
            return;
        }
        a->in[a->nin++] = (inlink){fd, -1, 0, buf};
    }
}

/* Is anyone's word for this round still to come? */
static int waiting(const agreement *a)
{
    for (int p = 0; p < a->n; p++)
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

/* Rounds until one decides; COLL_OK with a->dead the agreed set. */
static int agree(agreement *a)
{
    coll_comm *c = a->c;
    uint8_t *sent = malloc((size_t)a->n);
    if (!sent)
        return COLL_ENOMEM;
    /* Survivors come late by up to a timeout (one whose collective ended by its timeout,
     * another's at once when the peer closed), and rounds end that far apart. */
    int64_t deadline = cl_now_ms() + 2 * (int64_t)c->timeout_ms;
    dial_all(a, deadline);
    int decided = 0;
    for (int round = 0; !decided && round <= 2 * a->n + 2; round++) {
        memcpy(sent, a->dead, (size_t)a->n);
        send_round(a, round, 0, deadline);
        memset(a->heard, 0, (size_t)a->n);
        a->disagree = 0;
        read_round(a, round, sent, deadline);
        decided = !a->disagree && memcmp(sent, a->dead, (size_t)a->n) == 0;
        deadline = cl_now_ms() + 2 * (int64_t)c->timeout_ms;
        if (decided)
            send_round(a, round + 1, 1, deadline);
    }
    free(sent);
    if (!decided)
        return COLL_ETIMEDOUT;
    return a->dead[c->rank] ? COLL_EPEER : COLL_OK;
}

/* Every survivor's card for the new communicator, in new rank order, into cards. */
static int trade_cards(agreement *a, cl_card *cards)
{
    int64_t deadline = cl_now_ms() + a->c->timeout_ms;
    uint8_t *agreed = malloc((size_t)a->n);
    if (!agreed)
        return COLL_ENOMEM;
    memcpy(agreed, a->dead, (size_t)a->n);
    memset(a->done, 0, (size_t)a->n); /* from here, live = survivor */
    memset(a->heard, 0, (size_t)a->n);
    send_round(a, CARDS, 0, deadline);
    read_round(a, CARDS, NULL, deadline);
    int m = 0, rc = COLL_OK;
    for (int p = 0; p < a->n; p++) {
        if (agreed[p])
            continue;
        if (p != a->c->rank && !a->heard[p])
            rc = COLL_EPEER;
        cards[m++] = a->cards[p];
    }
    free(agreed);
    return rc;
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

/* The survivors' communicator, once they agree on the failed set. */
static int rebuild(agreement *a, coll_comm **out)
{
    coll_comm *c = a->c, *nc = NULL;
    int m = 0, me = 0;
    for (int p = 0; p < a->n; p++) {
        me += p < c->rank && !a->dead[p];
        m += !a->dead[p];
    }
    cl_config cfg = cl_comm_config(c);
    cl_tr_listener *l = NULL;
    cl_card *cards = calloc((size_t)m, sizeof(cl_card));
    uint64_t id = cl_hash(a->dead, (size_t)a->n, cl_hash(&c->shrinks, sizeof(c->shrinks), c->id));
    int rc = cards ? cl_comm_create(&cfg, me, m, id, &nc, &l, &a->cards[c->rank]) : COLL_ENOMEM;
    if (rc == COLL_OK) {
        nc->job = c->job;
        rc = trade_cards(a, cards);
    }
    if (rc == COLL_OK && (rc = cl_comm_connect(nc, l, cards)) != COLL_OK)
        cl_comm_init_error("shrink: %.480s", nc->err);
    else if (rc != COLL_OK)
        cl_comm_init_error("shrink: a survivor failed before it sent its address; call "
                           "coll_shrink again");
    if (rc != COLL_OK && nc) {
        cl_comm_free(nc);
        nc = NULL;
    }
    free(cards);
    *out = nc;
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
    agreement a;
    int rc = agreement_init(&a, c);
    if (rc == COLL_OK && (rc = agree(&a)) != COLL_OK)
        cl_comm_init_error("shrink: %s", rc == COLL_EPEER ? "the other survivors count this rank "
                           "as failed" : "no agreement on the failed ranks in time");
    if (rc == COLL_OK) {
        memcpy(c->failed, a.dead, (size_t)c->size);
        char gone[256];
        describe(&a, gone, sizeof(gone));
        cl_log(COLL_LOG_INFO, "rank %d shrink: ranks failed: %s", c->rank, gone);
        rc = rebuild(&a, out);
    }
    agreement_free(&a);
    if (rc != COLL_OK)
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
