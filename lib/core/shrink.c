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

#include "base/log.h"
#include "base/util.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/lifecycle.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    coll_comm *c;
    int n;
    cl_life_who who; /* this agreement, as this rank checks what it reads */
    size_t fixed;    /* a word's header and set */
    uint8_t *dead, *heard, *done;
    int decided;              /* by itself or by a peer's word: its set is final */
    int disagree;             /* a set read this round differs from this rank's */
    int *out;                 /* per rank: the socket we dialed, -1 */
    cl_life_link *in;         /* per rank: the connection it dialed to us, once admitted */
    cl_life_gate gate;        /* connections whose hello is not in yet */
    cl_card *cards;           /* by old rank: each one's card for the new communicator */
    uint8_t *msg;             /* this rank's outgoing word, room for every card */
    int die_round, die_after; /* COLL_FAULT_SHRINK, or -1 */
} agreement;

static size_t msg_size(const agreement *a, int ncards)
{
    return cl_life_msg_len(&a->who, ncards);
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
    for (int p = 0; p < a->n; p++) {
        if (a->out && a->out[p] >= 0)
            close(a->out[p]);
        if (a->in)
            cl_life_link_close(&a->in[p]);
    }
    cl_life_gate_close(&a->gate);
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
    *a = (agreement){.c = c, .n = n, .fixed = sizeof(cl_life_msg) + (size_t)n};
    a->who =
        (cl_life_who){c->job, c->id, c->shrinks, c->rank, n, c->keyed, c->key, sizeof(cl_card)};
    a->dead = calloc((size_t)n, 1);
    a->heard = calloc((size_t)n, 1);
    a->done = calloc((size_t)n, 1);
    a->out = malloc((size_t)n * sizeof(int));
    a->in = calloc((size_t)n, sizeof(cl_life_link));
    a->cards = calloc((size_t)n, sizeof(cl_card));
    a->msg = calloc(1, msg_size(a, n));
    /* Before any return: agreement_free closes what is not -1. */
    for (int p = 0; a->out && p < n; p++)
        a->out[p] = -1;
    for (int p = 0; a->in && p < n; p++)
        a->in[p].fd = -1;
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

/* Takes every connection whose hello proved a rank of this agreement into that rank's
 * place, once: a second connection in the same rank's name (a hello replayed) is
 * refused. Strangers never get a place: the gate closes them. */
static void admit(agreement *a)
{
    int fd, from;
    while ((fd = cl_life_admit(&a->gate, &a->c->life, &a->who, &from)) >= 0) {
        cl_life_link *k = &a->in[from];
        if (k->taken) {
            cl_log(COLL_LOG_WARN,
                   "rank %d shrink: refused a second lifeline connection "
                   "from rank %d: %s",
                   a->c->rank, from, coll_strerror(COLL_EPROTO));
            close(fd);
            continue;
        }
        *k = (cl_life_link){.fd = fd, .taken = 1};
    }
}

/* Sends p the hello on the socket dialed to it, once the dial completed: 1 when it went
 * (or p is gone), 0 while the dial is under way. */
static int greet(agreement *a, int p, int64_t deadline)
{
    int st = cl_life_dialed(a->out[p]);
    cl_life_hello h;
    if (st == 0)
        return 0;
    cl_life_hello_make(&a->who, p, &h);
    if (st < 0 || cl_life_send(a->out[p], &h, sizeof(h), deadline) != COLL_OK)
        lost(a, p, "its lifeline refused the connection");
    return 1;
}

/* Dials every rank not known failed, all at once, and greets each as its dial completes;
 * a refused or late dial is a failure. Meanwhile the peers' connections are admitted:
 * strangers queued at this lifeline since init must not keep them waiting. */
static void dial_all(agreement *a, int64_t deadline)
{
    coll_comm *c = a->c;
    uint8_t *greeted = calloc((size_t)a->n, 1);
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && (a->out[p] = cl_life_dial(c->lives[p])) < 0)
            lost(a, p, "its lifeline refused the connection");
    for (int waiting = 1; waiting && greeted && cl_now_ms() < deadline;) {
        admit(a);
        waiting = 0;
        for (int p = 0; p < a->n; p++)
            if (live(a, p) && !greeted[p])
                waiting |= !(greeted[p] = (uint8_t)greet(a, p, deadline));
        if (waiting)
            cl_sleep_ms(1);
    }
    for (int p = 0; p < a->n; p++)
        if (live(a, p) && (!greeted || !greeted[p]))
            lost(a, p, "no answer to a dial");
    free(greeted);
}

/* This rank's word for `round` to every live peer; decided, also to every rank it still
 * has a socket to (one counted failed but still in the agreement, a round or more
 * behind, learns it is out), and whoever no longer listens changes nothing. With
 * COLL_SECRET every word carries a tag under the job's key: nobody without it can speak
 * in an agreement (a word replayed is the same word again, and the attempt number keeps
 * one agreement's words out of the next). */
static void send_round(agreement *a, int round, int decided, int64_t deadline)
{
    coll_comm *c = a->c;
    int ncards = decided ? a->n : 1;
    cl_life_msg m;
    memset(&m, 0, sizeof(m)); /* the padding travels too */
    m.magic = CL_LIFE_MAGIC;
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
        cl_life_seal(&a->who, a->msg, len);
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

/* Rank p's whole word on its link (k->buf), checked as a word of this agreement from p:
 * taken as p's word for `round`: its set joins this rank's, and differs or not from
 * what this rank sent (`sent`). */
static void take(agreement *a, int p, int round, const uint8_t *sent)
{
    coll_comm *c = a->c;
    cl_life_msg m;
    const uint8_t *buf = a->in[p].buf;
    memcpy(&m, buf, sizeof(m));
    const uint8_t *set = buf + sizeof(m), *cards = buf + a->fixed;
    /* Counted failed already (it came too late): its word no longer counts. */
    if (a->dead[p] || a->done[p])
        return;
    /* A decided word is final whatever round it comes in (to a rank a round behind);
     * any other word is for this round, or p breaks the protocol. */
    if (m.round != round && !m.decided) {
        cl_log(COLL_LOG_WARN, "rank %d shrink: rank %d sent a word of round %d in round %d",
               c->rank, p, m.round, round);
        cl_life_link_close(&a->in[p]);
        lost(a, p, "a word out of its round");
        return;
    }
    a->heard[p] = 1;
    if (m.decided) {
        a->done[p] = 1;
        if (!a->decided)
            cl_log(COLL_LOG_INFO, "rank %d shrink: takes rank %d's decision", c->rank, p);
        adopt(a, set, cards);
        return;
    }
    memcpy(&a->cards[p], cards, sizeof(cl_card));
    if (a->decided)
        return;
    for (int q = 0; q < a->n; q++)
        a->dead[q] |= set[q];
    if (memcmp(set, sent, (size_t)a->n) != 0)
        a->disagree = 1;
}

static void read_link(agreement *a, int p, int round, const uint8_t *sent)
{
    const char *why;
    int got = cl_life_read(&a->in[p], &a->who, p, &why);
    if (got > 0)
        take(a, p, round, sent);
    else if (got < 0)
        lost(a, p, why);
}

/* Our socket to p reads as closed: p is gone, or done with the agreement. Its last
 * words (a decided one) may wait on its link, read first. */
static void dialed_closed(agreement *a, int p, int round, const uint8_t *sent)
{
    if (a->heard[p])
        return; /* heard since the poll: what follows comes on its link */
    if (a->in[p].fd >= 0)
        read_link(a, p, round, sent);
    if (!a->heard[p])
        lost(a, p, "the lifeline it accepted closed");
}

/* Is anyone's word for this round still to come? */
static int waiting(const agreement *a)
{
    for (int p = 0; p < a->n && !a->decided; p++)
        if (live(a, p) && !a->heard[p])
            return 1;
    return 0;
}

/* The poll set: the listener and the gate, links still to be heard from, and the sockets
 * we dialed to peers still to be heard from (never written to by the peer: readable
 * means it closed, which is how the death of a rank that has not dialed us yet shows).
 * idx: a rank's link (p), a dialed socket (-1 - p), or the gate (a->n). */
static int poll_set(const agreement *a, struct pollfd *pf, int *idx)
{
    int k = 0;
    idx[k] = a->n;
    pf[k++] = (struct pollfd){.fd = a->c->life.fd, .events = POLLIN};
    for (int i = 0; i < a->gate.np; i++) {
        idx[k] = a->n;
        pf[k++] = (struct pollfd){.fd = a->gate.p[i].fd, .events = POLLIN};
    }
    for (int p = 0; p < a->n; p++) {
        /* A peer a round ahead waits in its socket until this round is done. */
        if (!live(a, p) || a->heard[p])
            continue;
        if (a->in[p].fd >= 0) {
            idx[k] = p;
            pf[k++] = (struct pollfd){.fd = a->in[p].fd, .events = POLLIN};
        }
        if (a->out[p] >= 0) {
            idx[k] = -1 - p;
            pf[k++] = (struct pollfd){.fd = a->out[p], .events = POLLIN};
        }
    }
    return k;
}

/* Reads every live peer's word for `round` (or counts the peer failed). */
static void read_round(agreement *a, int round, const uint8_t *sent, int64_t deadline)
{
    size_t slots = 1 + CL_LIFE_PENDING + 2 * (size_t)a->n;
    struct pollfd *pf = calloc(slots, sizeof(*pf));
    int *idx = calloc(slots, sizeof(int));
    while (pf && idx && waiting(a)) {
        int k = poll_set(a, pf, idx), at_gate = 0;
        int64_t left = deadline - cl_now_ms();
        if (left <= 0)
            break;
        if (poll(pf, (nfds_t)k, (int)CL_MIN(left, 100)) <= 0)
            continue;
        for (int j = 0; j < k; j++) {
            if (!pf[j].revents)
                continue;
            if (idx[j] == a->n)
                at_gate = 1;
            else if (idx[j] >= 0)
                read_link(a, idx[j], round, sent);
            else
                dialed_closed(a, -1 - idx[j], round, sent);
        }
        if (at_gate)
            admit(a);
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
