/* Links, made when first used: a communicator's sender dials each link it sends on (its
 * first message to that peer on that channel) and the receiver takes it from its
 * listener when it first needs it, so a rank holds the links its algorithms and p2p
 * peers use (its ring neighbours at init), not a mesh of every rank. Links are
 * one-directional, so no two ranks ever race to open the same one.
 *
 * The hello (magic, protocol version, job id, communicator id, rank, channel) is checked
 * here; a stray or hostile connection is logged as a protocol error and dropped, and
 * never takes a slot. With COLL_SECRET the hello carries the link's proof: a tag under
 * the job's key over the link (channel, sender, receiver) and the nonce its receiver drew
 * for this communicator and published on its card. A slot is taken once, so a proof
 * seen on the wire cannot be replayed into it, nor into another link or communicator. */
#include "core/link.h"
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "core/beat.h"
#include "core/error.h"
#include "core/family.h"
#include "core/life.h"
#include "core/lifecycle.h"
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What links ask the transport to buffer (shm sizes its rings by it; others ignore it):
 * at most CL_LINK_MAX each, and per machine and communicator these budgets in all. */
#define CL_LINK_MAX ((size_t)4 << 20)
#define CL_BULK_BUDGET ((size_t)1 << 30)    /* the ring neighbours' links */
#define CL_SMALL_BUDGET ((size_t)256 << 20) /* every other link */

cl_tr_conn *cl_link_now_of(coll_comm *c, int ch, int dir, int peer)
{
    return __atomic_load_n(&c->conns[ch][dir][peer], __ATOMIC_ACQUIRE);
}

static cl_hello_expect expectation(const coll_comm *c)
{
    return (cl_hello_expect){c->job, c->id, c->rank, c->size, CL_CHANNELS, c->keyed};
}

static const char HELLO_LABEL[] = "coll link v2", SHARE_LABEL[] = "coll share v1";

/* The proof on link (channel ch, from -> to), over the receiver's card nonce: in the
 * hello (HELLO_LABEL), or in the verdict of a shared connection (SHARE_LABEL, so neither
 * can stand for the other). */
static void proof(const coll_comm *c, const char *label, int ch, int from, int to,
                  uint8_t tag[CL_TAG_BYTES])
{
    int32_t who[3] = {ch, from, to};
    const uint8_t *nonce = to == c->rank ? c->nonce : c->nonces[to];
    cl_auth_tag(c->key, tag, 5, label, strlen(label), &c->job, sizeof(c->job), &c->id,
                sizeof(c->id), who, sizeof(who), nonce, (size_t)CL_NONCE_BYTES);
}

/* Why this hello is not one of this communicator's links (NULL: it is; *slot then says
 * which: channel x size + sender). */
static const char *judge(const coll_comm *c, const uint8_t raw[CL_HELLO_BYTES], int *slot)
{
    cl_hello_expect e = expectation(c);
    const char *why = NULL;
    *slot = cl_hello_check(raw, &e, &why);
    if (*slot < 0 || !c->keyed)
        return why;
    uint8_t want[CL_TAG_BYTES], got[CL_HELLO_PROOF];
    proof(c, HELLO_LABEL, *slot / c->size, *slot % c->size, c->rank, want);
    cl_hello_proof(raw, got);
    if (!cl_auth_equal(want, got, CL_HELLO_PROOF))
        return "failed authentication: another COLL_SECRET, or not a rank of this job";
    return NULL;
}

const char *cl_link_vet(void *comm, const uint8_t raw[CL_HELLO_BYTES])
{
    int slot;
    return __atomic_load_n(&((coll_comm *)comm)->vetting, __ATOMIC_ACQUIRE) ? judge(comm, raw, &slot)
                                                                           : NULL;
}

/* Which recv slot this hello claims, or -1 (with the reason logged) to refuse it. */
static int claim(coll_comm *c, const uint8_t raw[CL_HELLO_BYTES], cl_tr_conn *conn)
{
    int slot;
    const char *why = judge(c, raw, &slot);
    if (!why && c->conns[slot / c->size][1][slot % c->size])
        why = "duplicate connection";
    if (why) {
        cl_log(COLL_LOG_WARN, "rank %d: refused connection from %s: %s (%s)", c->rank,
               c->tr->peer_name(conn), coll_strerror(COLL_EPROTO), why);
        return -1;
    }
    return slot;
}

/* ---- one connection for both ways (duplex transports) ------------------------------ */

/* On a transport whose connections carry messages both ways (tcp), a pair of ranks that
 * talks both ways shares one: each reply carries the acknowledgement of what it answers,
 * where two one-way sockets cost a bare ACK per message (a 2-rank tcp exchange of 48
 * bytes: 5.4-7.0 us on one socket, 7.1-9.5 on two, measured side by side). Only the
 * lower rank dials the shared one, when it first needs the pair either way. The higher
 * rank, taking it, sends on it too unless it had dialed a link of its own, and then says
 * so first on it: a verdict carrying its proof, so the lower rank knows where the higher
 * one's messages come (after a verdict, or on the higher rank's own link) and that the
 * rank it dialed answers. A higher rank that must send before the lower one dialed waits
 * SHARE_GRACE_MS for it, once, then dials its own: whether a pair shares is a matter of
 * timing; either way is correct. */
enum { SHARE_GRACE_MS = 50 };

/* The higher rank, link_mu held: conn from the lower rank lo is taken; our sends to lo go
 * on it too, unless we have a link to lo already. */
static void adopt(coll_comm *c, int ch, int lo, cl_tr_conn *conn)
{
    struct cl_share *s = c->share[ch] ? &c->share[ch][lo] : NULL;
    if (!s || lo > c->rank || c->conns[ch][0][lo])
        return;
    s->hdr = (cl_msg_hdr){.magic = CL_MSG_MAGIC, .coll = CL_SHARE, .len = CL_TAG_BYTES};
    memset(s->proof, 0, sizeof(s->proof));
    if (c->keyed)
        proof(c, SHARE_LABEL, ch, c->rank, lo, s->proof);
    if (c->tr->isend(conn, &s->hdr, s->proof, &s->req) != COLL_OK)
        return; /* we dial our own, after the grace */
    __atomic_store_n(&c->conns[ch][0][lo], conn, __ATOMIC_RELEASE);
    cl_log(COLL_LOG_DEBUG, "rank %d: link to rank %d (channel %d) shares the one from it",
           c->rank, lo, ch);
}

/* The lower rank, link_mu held: the higher rank hi's verdict on the connection we
 * dialed, if it came. COLL_INPROGRESS while it did not, and for good once the connection
 * ended without one: hi did not adopt it, so its messages (its farewell too) come on a
 * link of its own, which may still be on its way. */
static int verdict(coll_comm *c, int ch, int hi)
{
    struct cl_share *s = &c->share[ch][hi];
    int done = 0, rc = s->req ? c->tr->test(s->req, &done, NULL) : COLL_INPROGRESS;
    if (!done)
        return COLL_INPROGRESS;
    s->req = NULL;
    if (rc == COLL_EPEER || (rc == COLL_OK && s->hdr.coll == CL_FAREWELL)) {
        cl_log(COLL_LOG_DEBUG, "rank %d: no verdict from rank %d (channel %d): %s", c->rank, hi,
               ch, rc != COLL_OK ? coll_strerror(rc) : "a farewell");
        __atomic_store_n(&s->farewell, rc == COLL_OK, __ATOMIC_RELEASE); /* cl_link_farewell */
        if (rc != COLL_OK) { /* refused or reset: is its process gone? (cl_link_gone) */
            c->gone[hi].by_dial = 1;
            __atomic_store_n(&c->gone[hi].refused_ms, cl_now_ms(), __ATOMIC_RELAXED);
        }
        return COLL_INPROGRESS;
    }
    uint8_t want[CL_TAG_BYTES] = {0};
    if (c->keyed)
        proof(c, SHARE_LABEL, ch, hi, c->rank, want);
    if (rc != COLL_OK || s->hdr.coll != CL_SHARE || s->hdr.len != CL_TAG_BYTES ||
        !cl_auth_equal(want, s->proof, CL_TAG_BYTES)) { /* a frame too long, or garbage */
        cl_log(COLL_LOG_WARN, "rank %d: the connection to rank %d (channel %d) brought a "
               "verdict that does not hold: %s", c->rank, hi, ch, coll_strerror(COLL_EPROTO));
        return COLL_EPROTO;
    }
    __atomic_store_n(&c->conns[ch][1][hi], c->conns[ch][0][hi], __ATOMIC_RELEASE);
    cl_log(COLL_LOG_DEBUG, "rank %d: link from rank %d (channel %d) shares the one to it",
           c->rank, hi, ch);
    return COLL_OK;
}

/* Takes every connection waiting on the listener (link_mu held). */
static void take_waiting(coll_comm *c)
{
    uint8_t raw[CL_HELLO_BYTES];
    cl_tr_conn *conn;
    while (c->tr->accept(c->listener, raw, &conn) == COLL_OK) {
        int slot = claim(c, raw, conn);
        if (slot < 0) {
            c->tr->close_conn(conn);
            continue;
        }
        __atomic_store_n(&c->conns[slot / c->size][1][slot % c->size], conn, __ATOMIC_RELEASE);
        cl_log(COLL_LOG_DEBUG, "rank %d: link from rank %d (channel %d) via %s", c->rank,
               slot % c->size, slot / c->size, c->tr->peer_name(conn));
        adopt(c, slot / c->size, slot % c->size, conn);
    }
}

/* Is link (ch, this rank -> p) one of c's ring neighbours'? A ring neighbour's links
 * carry the bulk of every ring collective (the next rank) and of a pipeline's sends (both
 * neighbours); the others carry small messages. */
static int bulk_for(const coll_comm *c, int ch, int p)
{
    int n = c->size;
    return ch == CL_CH_COLL ? p == cl_topo_peer(&c->topo, 1)
                            : p == (c->rank + 1) % n || p == (c->rank + n - 1) % n;
}

/* What a link should buffer: each kind shares a budget per machine, so a machine's
 * shared memory grows with its ranks, not with their square. */
static size_t link_want(const coll_comm *c, int bulk)
{
    size_t l = (size_t)c->local;
    size_t links = bulk ? 3 * l : CL_CHANNELS * l * (l > 1 ? l - 1 : 1);
    return CL_MIN(CL_LINK_MAX, (bulk ? CL_BULK_BUDGET : CL_SMALL_BUDGET) / links);
}

/* Dials link (ch, this rank -> p) (link_mu held). COLL_INPROGRESS: the peer's listener
 * is full; accept, then try again. */
static int dial(coll_comm *c, int ch, int p, int bulk)
{
    uint8_t raw[CL_HELLO_BYTES], tag[CL_TAG_BYTES] = {0};
    cl_hello_expect me = expectation(c);
    if (c->keyed)
        proof(c, HELLO_LABEL, ch, c->rank, p, tag);
    cl_hello_make(&me, ch, tag, raw);
    cl_tr_conn *conn = NULL;
    int rc = c->tr->connect(c->ctx, c->handles[p], raw, link_want(c, bulk), &conn);
    struct cl_share *s = c->share[ch] && p > c->rank ? &c->share[ch][p] : NULL;
    if (rc == COLL_OK && s &&
        c->tr->irecv(conn, &s->hdr, s->proof, sizeof(s->proof), &s->req) != COLL_OK)
        s->req = NULL; /* the verdict cannot come: hi's own link will */
    if (rc == COLL_OK) {
        __atomic_store_n(&c->conns[ch][0][p], conn, __ATOMIC_RELEASE);
        cl_log(COLL_LOG_DEBUG, "rank %d: link to rank %d (channel %d, %zu bytes in flight) via %s",
               c->rank, p, ch, link_want(c, bulk), c->tr->peer_name(conn));
    }
    return rc;
}

/* link_mu held (let go while it waits), no link to lo yet: a higher rank on a duplex
 * transport gives the lower rank lo a while to dial first. It waits here, not by
 * answering COLL_INPROGRESS: a send link not there at once lets the pass's receives run
 * ahead of its sends, which no algorithm met before links were shared (Bruck's
 * all-to-all sent places its receive had overwritten: now it packs them first). */
static void await_dial(coll_comm *c, int ch, int lo)
{
    if (!c->share[ch] || lo > c->rank)
        return;
    int64_t deadline = cl_now_ms() + CL_MIN(SHARE_GRACE_MS, c->timeout_ms / 4);
    while (!c->conns[ch][0][lo] && cl_now_ms() < deadline) {
        uint64_t seen = cl_notifier_events(c->note);
        pthread_mutex_unlock(&c->link_mu);
        cl_notifier_wait(c->note, seen, CL_MIN(deadline, cl_now_ms() + 1));
        pthread_mutex_lock(&c->link_mu);
        take_waiting(c);
    }
}

static int open_out(coll_comm *c, int ch, int p, int bulk)
{
    await_dial(c, ch, p);
    return c->conns[ch][0][p] ? COLL_OK : dial(c, ch, p, bulk);
}

/* link_mu held, the link not open. A lower rank on a duplex transport dials (if it has
 * not) and awaits the verdict; otherwise the peer's dial is awaited. */
static int open_in(coll_comm *c, int ch, int p, int bulk)
{
    if (!c->share[ch] || p < c->rank)
        return COLL_INPROGRESS;
    int rc = c->conns[ch][0][p] ? COLL_OK : dial(c, ch, p, bulk);
    return rc == COLL_OK ? verdict(c, ch, p) : rc;
}

/* Opens link (ch, dir, peer) of the communicator that owns its links. */
static int open_link(coll_comm *c, int ch, int dir, int peer, int bulk)
{
    if (cl_link_now_of(c, ch, dir, peer))
        return COLL_OK;
    int rc = cl_comm_state(c);
    if (rc != COLL_OK)
        return rc;
    pthread_mutex_lock(&c->link_mu);
    take_waiting(c);
    if (!c->conns[ch][dir][peer])
        rc = dir ? open_in(c, ch, peer, bulk) : open_out(c, ch, peer, bulk);
    pthread_mutex_unlock(&c->link_mu);
    if (rc != COLL_OK && rc != COLL_INPROGRESS)
        cl_log(COLL_LOG_WARN, "rank %d: cannot connect to rank %d at '%.*s': %s", c->rank, peer,
               CL_HANDLE_BYTES, c->handles[peer], coll_strerror(rc));
    return rc;
}

int cl_link_open(coll_comm *c, int ch, int dir, int peer)
{
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return COLL_EINVAL;
    if (cl_link_now_of(c, ch, dir, peer))
        return COLL_OK;
    if (!c->to_root)
        return open_link(c, ch, dir, peer, bulk_for(c, ch, peer));
    /* A shared split's: its root's link to the same rank, sized for what it carries here. */
    int rc = cl_comm_state(c), to = c->to_root[peer];
    coll_comm *root = cl_family_root(c);
    if (rc == COLL_OK && (rc = open_link(root, ch, dir, to, bulk_for(c, ch, peer))) == COLL_OK)
        __atomic_store_n(&c->conns[ch][dir][peer], cl_link_now_of(root, ch, dir, to),
                         __ATOMIC_RELEASE);
    return rc;
}

int cl_link_await(coll_comm *c, cl_tr_req **r, int64_t deadline)
{
    int done = 0, rc = COLL_OK;
    while (!done) {
        uint64_t seen = cl_notifier_events(c->note);
        rc = c->tr->test(*r, &done, NULL);
        if (!done && cl_now_ms() >= deadline)
            return COLL_ETIMEDOUT;
        if (!done)
            cl_notifier_wait(c->note, seen, deadline);
    }
    *r = NULL;
    return rc;
}

void cl_link_spread(coll_comm *c, const cl_msg_hdr *bye)
{
    int n = c->size, k = 0;
    cl_tr_req **reqs = c->handles ? calloc((size_t)n, sizeof(*reqs)) : NULL;
    if (!reqs)
        return;
    /* One bound for the dials too: ibverbs dials block, up to the timeout each. */
    int64_t deadline = cl_now_ms() + CL_MIN(c->timeout_ms, 1000);
    pthread_mutex_lock(&c->link_mu);
    for (int p = 0; p < n; p++)
        if (p != c->rank &&
            (c->conns[CL_CH_COLL][0][p] ||
             (cl_now_ms() < deadline &&
              dial(c, CL_CH_COLL, p, bulk_for(c, CL_CH_COLL, p)) == COLL_OK)) &&
            c->tr->isend(c->conns[CL_CH_COLL][0][p], bye, NULL, &reqs[k]) == COLL_OK)
            k++;
    pthread_mutex_unlock(&c->link_mu);
    for (int i = 0; i < k; i++)
        cl_link_await(c, &reqs[i], deadline); /* one still pending reads c->bye, which stays */
    free(reqs);
}

/* Keeps l and where every rank listens, and starts judging hellos by them. */
int cl_link_keep(coll_comm *c, cl_tr_listener *l, const cl_card *cards)
{
    size_t n = (size_t)c->size;
    c->listener = l;
    c->handles = calloc(n, CL_HANDLE_BYTES);
    c->nonces = calloc(n, CL_NONCE_BYTES);
    if (!c->handles || !c->nonces)
        return COLL_ENOMEM;
    for (size_t p = 0; p < n; p++) {
        memcpy(c->handles[p], cards[p].handle, CL_HANDLE_BYTES);
        memcpy(c->nonces[p], cards[p].nonce, CL_NONCE_BYTES);
    }
    __atomic_store_n(&c->vetting, 1, __ATOMIC_RELEASE);
    return COLL_OK;
}

/* ---- a peer whose process is gone ---------------------------------------------------- */

/* A dead rank's ports refuse connections at once (its kernel closed them), so a wait on
 * it need not wait out the heartbeat's silence bound (the peer timeout: 15 minutes under
 * torch). We look when our dial to it was refused, or when a receive from it has waited
 * GONE_SETTLE_MS with no link from it (a receiver that does not dial: the higher rank of
 * a tcp pair, every shm one). A link it made before it ended was accepted by the kernel
 * before its ports closed; GONE_SETTLE_MS later the transport's thread has long handed
 * it to our listener's queue (a connection from a dialer is read at once: its hello is
 * there). A LEAVE it sent before closing its ports is asked for by a read of the
 * heartbeat's socket begun after: a peer that left normally is never judged gone. A live
 * peer found there waits GONE_LOOK_MS, doubling up to GONE_LOOK_MAX_MS, before a
 * receive's waiting looks again: one probe connection each time, which its lifeline's
 * queue holds until a shrink. */
enum { GONE_SETTLE_MS = 1000, GONE_PROBE_MS = 1000, GONE_UDP_MS = 100, GONE_PROBES = 3 };
enum { GONE_LOOK_MS = 4000, GONE_LOOK_MAX_MS = 64000 };

/* A look ended (the rank answered, its link came, or it said it left): the next one,
 * if any, starts afresh. */
static void end_look(struct cl_gone *g)
{
    g->probes = 0, g->gone_ms = 0, g->by_dial = 0;
    __atomic_store_n(&g->refused_ms, 0, __ATOMIC_RELAXED);
}

/* The gone state of (p2p channel, rank p) in the communicator that owns c's links. */
static struct cl_gone *gone_of(coll_comm *c, int p, coll_comm **owner, int *q)
{
    *owner = c->to_root ? cl_family_root(c) : c;
    *q = c->to_root ? c->to_root[p] : p;
    return &(*owner)->gone[*q];
}

/* Probes rank q's ports: its heartbeat's refusing a datagram, then its lifeline a
 * connection, its ports are closed (gone_ms set). Both, because a TCP refusal alone may be
 * a firewall's reset, sent for a live rank whose UDP beats pass (its own link to us may
 * still come). The datagram first: a live rank's port never refuses (the kernel sends no
 * port unreachable), so it gets no probe connection, which its lifeline's queue would
 * hold until a shrink; a receive's look waits GONE_UDP_MS at most for the refusal (the
 * receive is not served meanwhile; on a far network a late one only leaves the rank to
 * the heartbeat), a refused dial's the probe's bound. Answered, it is probed again a
 * settle later, GONE_PROBES times in all (an exiting process's kernel closes its sockets
 * one by one), then left to the heartbeat (the look ends) until next_ms. link_mu held,
 * let go meanwhile; one thread probes at a time. */
static void probe_ports(coll_comm *o, struct cl_gone *g, int q)
{
    int wait_ms = CL_MIN(o->timeout_ms, GONE_PROBE_MS);
    int udp_ms = g->by_dial ? wait_ms : CL_MIN(wait_ms, GONE_UDP_MS);
    g->probing = 1;
    pthread_mutex_unlock(&o->link_mu);
    int refused = cl_beat_refused(o, q, udp_ms) && cl_life_refused(o->lives[q], wait_ms);
    pthread_mutex_lock(&o->link_mu);
    g->probing = 0;
    int64_t now = cl_now_ms();
    if (refused) {
        g->gone_ms = now;
    } else if (++g->probes < GONE_PROBES) {
        __atomic_store_n(&g->refused_ms, now, __ATOMIC_RELAXED);
    } else {
        __atomic_store_n(&g->next_ms,
                         now + CL_MIN((int64_t)GONE_LOOK_MS << CL_MIN(g->looks, 4), GONE_LOOK_MAX_MS),
                         __ATOMIC_RELAXED);
        g->looks++;
        end_look(g);
    }
    cl_log(COLL_LOG_DEBUG, "rank %d: rank %d's %s", o->rank, q,
           refused ? "heartbeat port and lifeline refuse too" : "ports answer: not gone");
}

/* One step of a look at rank q (link_mu held): 1 its link came or it said it left (the
 * look ends), 0 it is gone, -1 not known yet. */
static int look(coll_comm *c, int p, coll_comm *o, struct cl_gone *g, int q, int64_t now)
{
    int64_t settle = CL_MIN(GONE_SETTLE_MS, o->timeout_ms / 2);
    if (o->conns[CL_CH_P2P][1][q])
        return 1;
    if (g->probing)
        return -1;
    if (!g->gone_ms && (!g->probes || now - g->refused_ms >= settle))
        probe_ports(o, g, q);
    else if (g->gone_ms && now - g->gone_ms >= settle)
        return cl_beat_left(c, p, g->gone_ms);
    return -1;
}

int cl_link_gone(coll_comm *c, int p, int64_t receiving_since)
{
    coll_comm *o;
    int q;
    struct cl_gone *g = gone_of(c, p, &o, &q);
    int64_t now = cl_now_ms();
    int waited = receiving_since && now - receiving_since >= GONE_SETTLE_MS;
    if (!__atomic_load_n(&g->refused_ms, __ATOMIC_RELAXED) &&
        (!waited || now < __atomic_load_n(&g->next_ms, __ATOMIC_RELAXED) ||
         cl_link_now_of(o, CL_CH_P2P, 1, q)))
        return 0; /* no look, and none to start: the common case, without a lock */
    pthread_mutex_lock(&o->link_mu);
    take_waiting(o);
    if (waited && !g->refused_ms && now >= g->next_ms &&
        !o->conns[CL_CH_P2P][1][q]) /* a receive waited without its link: look */
        __atomic_store_n(&g->refused_ms, now, __ATOMIC_RELAXED);
    int left = g->refused_ms ? look(c, p, o, g, q, now) : -1;
    if (left > 0) /* not failed, and not judged here again */
        end_look(g);
    pthread_mutex_unlock(&o->link_mu);
    return left == 0;
}

int cl_link_farewell(coll_comm *c, int p, cl_msg_hdr *out)
{
    coll_comm *o;
    int q;
    gone_of(c, p, &o, &q);
    struct cl_share *s = o->share[CL_CH_P2P] ? &o->share[CL_CH_P2P][q] : NULL;
    if (!s || !__atomic_load_n(&s->farewell, __ATOMIC_ACQUIRE)) /* every wait asks: no lock */
        return 0;
    pthread_mutex_lock(&o->link_mu);
    *out = s->hdr;
    pthread_mutex_unlock(&o->link_mu);
    return 1;
}
