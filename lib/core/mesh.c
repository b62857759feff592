/* Connection set-up: every rank connects to every other rank once per channel and
 * accepts the same from each. The handshake (magic, protocol version, job id,
 * communicator id, rank, channel) is checked here; a stray or hostile connection is
 * logged as a protocol error and dropped, and never takes a slot. With COLL_SECRET, each
 * link's first message is its sender's proof: a tag under the job's key over the nonce
 * the receiver drew for its own link back (sent in its hello), so every link is
 * authenticated both ways and no proof can be replayed. Init returns only once every
 * proof checked. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What links ask the transport to buffer (shm sizes its rings by it; others ignore it):
 * at most CL_LINK_MAX each, and per machine and communicator these budgets in all. */
#define CL_LINK_MAX ((size_t)4 << 20)
#define CL_BULK_BUDGET ((size_t)1 << 30)    /* the ring neighbours' links */
#define CL_SMALL_BUDGET ((size_t)256 << 20) /* every other link */

/* The nonces of this communicator's hellos, [channel * size + peer]. */
typedef struct {
    uint8_t (*drawn)[CL_NONCE_BYTES]; /* in the hello this rank sent the peer */
    uint8_t (*got)[CL_NONCE_BYTES];   /* in the hello the peer sent this rank */
} nonces;

static cl_hello_expect expectation(const coll_comm *c)
{
    return (cl_hello_expect){c->job, c->id, c->rank, c->size, CL_CHANNELS, c->keyed};
}

/* Which recv slot this hello claims, or -1 (with the reason logged) to refuse it. */
static int claim(coll_comm *c, const uint8_t raw[CL_HELLO_BYTES], cl_tr_conn *conn, nonces *nc)
{
    cl_hello_expect e = expectation(c);
    const char *why;
    int slot = cl_hello_check(raw, &e, &why);
    if (slot >= 0 && c->conns[slot / c->size][1][slot % c->size])
        why = "duplicate connection";
    if (why) {
        cl_log(COLL_LOG_WARN, "rank %d: refused connection from %s: %s (%s)", c->rank,
               c->tr->peer_name(conn), coll_strerror(COLL_EPROTO), why);
        return -1;
    }
    cl_hello_nonce(raw, nc->got[slot]);
    return slot;
}

/* The proof on link (channel ch, from -> to) over the nonce its receiver drew. */
static void proof(const coll_comm *c, int ch, int from, int to, const uint8_t *nonce,
                  uint8_t tag[CL_TAG_BYTES])
{
    int32_t who[3] = {ch, from, to};
    cl_auth_tag(c->key, tag, 5, "coll link v1", (size_t)12, &c->job, sizeof(c->job), &c->id,
                sizeof(c->id), who, sizeof(who), nonce, (size_t)CL_NONCE_BYTES);
}

static int missing_ranks(coll_comm *c, char *out, size_t len)
{
    int n = 0, got = 0;
    out[0] = 0;
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank || (c->conns[0][1][p] && c->conns[1][1][p]))
            continue;
        got += snprintf(out + got, got < (int)len ? len - (size_t)got : 0, "%s%d", n ? "," : "", p);
        n++;
    }
    return n;
}

/* The timeout of link_all, naming who never connected or whose listener stayed full. */
static int link_timeout(coll_comm *c, int out, int links)
{
    char miss[256];
    if (out < links) {
        int p = (c->rank + 1 + out % (c->size - 1)) % c->size;
        cl_comm_fail(c, COLL_ETIMEDOUT,
                     "rank %d: connecting the communicator timed out after %d ms: rank %d's "
                     "listener took no connection",
                     c->rank, c->timeout_ms, p);
    } else {
        missing_ranks(c, miss, sizeof(miss));
        cl_comm_fail(c, COLL_ETIMEDOUT,
                     "rank %d: connecting the communicator timed out after %d ms: no "
                     "connection from rank(s) %s",
                     c->rank, c->timeout_ms, miss);
    }
    return COLL_ETIMEDOUT;
}

/* A link's first message: a real one (not a farewell), with its proof if keyed. */
static int first_ok(coll_comm *c, int ch, int p, const cl_msg_hdr *h, const uint8_t *tag,
                    const nonces *nc)
{
    uint8_t want[CL_TAG_BYTES];
    if (h->coll == CL_FAREWELL) {
        cl_comm_fail(c, COLL_EPEER, "rank %d: rank %d failed while connecting", c->rank, p);
        return COLL_EPEER;
    }
    if (h->magic == CL_MSG_MAGIC && h->coll == 0 && h->len == (c->keyed ? CL_TAG_BYTES : 0u)) {
        if (!c->keyed)
            return COLL_OK;
        proof(c, ch, p, c->rank, nc->drawn[ch * c->size + p], want);
        if (cl_auth_equal(want, tag))
            return COLL_OK;
    }
    cl_comm_fail(c, COLL_EPROTO,
                 "rank %d: rank %d's link (channel %d) failed authentication: "
                 "another COLL_SECRET, or not a rank of this job",
                 c->rank, p, ch);
    return COLL_EPROTO;
}

/* Every link's first message, both ways: init returns only once every link carried one
 * (so a rank that leaves right after init cannot strand its peers), and with a secret
 * only once every peer proved it on every link. */
static int exchange_first_message(coll_comm *c, const nonces *nc)
{
    int n = c->size, k = 0, rc = COLL_OK;
    size_t links = (size_t)(CL_CHANNELS * n);
    cl_tr_req **reqs = calloc(2 * links, sizeof(*reqs));
    cl_msg_hdr *in = calloc(links, sizeof(*in));
    uint8_t(*out_tag)[CL_TAG_BYTES] = calloc(links, CL_TAG_BYTES);
    uint8_t(*in_tag)[CL_TAG_BYTES] = calloc(links, CL_TAG_BYTES);
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC, .len = c->keyed ? CL_TAG_BYTES : 0};
    if (!reqs || !in || !out_tag || !in_tag)
        rc = COLL_ENOMEM;
    for (int ch = 0; ch < CL_CHANNELS && rc == COLL_OK; ch++)
        for (int p = 0; p < n && rc == COLL_OK; p++) {
            if (p == c->rank)
                continue;
            int at = ch * n + p;
            if (c->keyed)
                proof(c, ch, c->rank, p, nc->got[at], out_tag[at]);
            rc = c->tr->isend(c->conns[ch][0][p], &h, out_tag[at], &reqs[k++]);
            if (rc == COLL_OK)
                rc =
                    c->tr->irecv(c->conns[ch][1][p], &in[at], in_tag[at], CL_TAG_BYTES, &reqs[k++]);
        }
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    for (int i = 0; i < k; i++) {
        int done = 0, r = COLL_OK;
        while (reqs[i] && !done) {
            uint64_t seen = cl_notifier_events(&c->notifier);
            r = c->tr->test(reqs[i], &done, NULL);
            if (!done && cl_now_ms() >= deadline) {
                r = COLL_ETIMEDOUT;
                break;
            }
            if (!done)
                cl_notifier_wait(&c->notifier, seen, deadline);
        }
        int j = (i / 2) % (n - 1), peer = j < c->rank ? j : j + 1, ch = i / 2 / (n - 1);
        if (r != COLL_OK && rc == COLL_OK) {
            cl_comm_fail(c, r, "rank %d: the first message with rank %d failed: %s", c->rank, peer,
                         coll_strerror(r));
            rc = r;
        }
        if (r == COLL_OK && rc == COLL_OK && i % 2)
            rc = first_ok(c, ch, peer, &in[ch * n + peer], in_tag[ch * n + peer], nc);
    }
    free(reqs);
    free(in);
    free(out_tag);
    free(in_tag);
    return rc;
}

/* Takes every connection waiting on the listener: how many claimed a slot. */
static int take_waiting(coll_comm *c, cl_tr_listener *l, nonces *nc)
{
    int got = 0;
    uint8_t raw[CL_HELLO_BYTES];
    cl_tr_conn *conn;
    while (c->tr->accept(l, raw, &conn) == COLL_OK) {
        int slot = claim(c, raw, conn, nc);
        if (slot < 0) {
            c->tr->close_conn(conn);
            continue;
        }
        c->conns[slot / c->size][1][slot % c->size] = conn;
        got++;
    }
    return got;
}

/* What link (ch, this rank -> p) should buffer. A ring neighbour's links carry the bulk
 * of every ring collective (the next rank) and of a pipeline's sends (both neighbours);
 * the others carry small messages. Each kind shares a budget per machine, so a
 * machine's shared memory grows with its ranks, not with their square. */
static size_t link_want(const coll_comm *c, int ch, int p)
{
    size_t n = (size_t)c->size, l = (size_t)c->local;
    int bulk = ch == CL_CH_COLL
                   ? p == cl_topo_peer(c, 1)
                   : (size_t)p == (c->rank + 1) % n || (size_t)p == (c->rank + n - 1) % n;
    size_t links = bulk ? 3 * l : CL_CHANNELS * l * (l > 1 ? l - 1 : 1);
    return CL_MIN(CL_LINK_MAX, (bulk ? CL_BULK_BUDGET : CL_SMALL_BUDGET) / links);
}

/* Dials link k of this rank's sends (channel k / (n-1), then peers from the next rank
 * on, so not every rank dials rank 0 first). COLL_INPROGRESS: the peer's listener is
 * full, try again after accepting. */
static int dial(coll_comm *c, const char *handles, nonces *nc, int k)
{
    int ch = k / (c->size - 1), p = (c->rank + 1 + k % (c->size - 1)) % c->size;
    uint8_t raw[CL_HELLO_BYTES];
    cl_hello_expect me = expectation(c);
    if (cl_auth_nonce(nc->drawn[ch * c->size + p], CL_NONCE_BYTES) != 0) {
        cl_comm_fail(c, COLL_ESYS, "rank %d: no random bytes for a nonce", c->rank);
        return COLL_ESYS;
    }
    cl_hello_make(&me, ch, nc->drawn[ch * c->size + p], raw);
    const char *h = handles + (size_t)p * CL_HANDLE_BYTES;
    int rc = c->tr->connect(c->ctx, h, raw, link_want(c, ch, p), &c->conns[ch][0][p]);
    if (rc != COLL_OK && rc != COLL_INPROGRESS)
        cl_comm_fail(c, rc, "rank %d: cannot connect to rank %d at '%.*s': %s", c->rank, p,
                     CL_HANDLE_BYTES, h, coll_strerror(rc));
    return rc;
}

/* Every link out of this rank dialed and every link into it accepted, in one loop: a
 * peer whose listener is full is dialed again once this rank took the connections
 * waiting on its own, so ranks that all dial at once never wait on each other (shm's
 * backlog holds 128; a blocking dial-everything-first hung at 66 ranks). */
static int link_all(coll_comm *c, cl_tr_listener *l, const char *handles, nonces *nc)
{
    int links = CL_CHANNELS * (c->size - 1), out = 0, in = 0, rc = COLL_OK;
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    while (out < links || in < links) {
        uint64_t seen = cl_notifier_events(&c->notifier);
        int before = out + in;
        while (out < links && (rc = dial(c, handles, nc, out)) == COLL_OK)
            out++;
        if (rc != COLL_OK && rc != COLL_INPROGRESS)
            return rc;
        in += take_waiting(c, l, nc);
        if (out + in > before || (out == links && in == links))
            continue;
        if (cl_now_ms() >= deadline)
            return link_timeout(c, out, links);
        cl_notifier_wait(&c->notifier, seen,
                         CL_MIN(deadline, cl_now_ms() + (out < links ? 1 : 100)));
    }
    return COLL_OK;
}

int cl_mesh_connect(coll_comm *c, cl_tr_listener *l, const char *handles)
{
    size_t links = (size_t)(CL_CHANNELS * c->size);
    nonces nc = {calloc(links, CL_NONCE_BYTES), calloc(links, CL_NONCE_BYTES)};
    int rc = nc.drawn && nc.got ? link_all(c, l, handles, &nc) : COLL_ENOMEM;
    c->tr->close_listener(l);
    if (rc == COLL_OK)
        rc = exchange_first_message(c, &nc);
    free(nc.drawn);
    free(nc.got);
    if (rc == COLL_OK && cl_log_enabled(COLL_LOG_INFO)) {
        int n = c->size, prev = cl_topo_peer(c, -1), next = cl_topo_peer(c, 1);
        cl_log(COLL_LOG_INFO,
               "rank %d/%d comm %llx: transport %s, ring%s %d -> %d -> %d: from %d "
               "via %s, to %d via %s; %d of %d ranks on this machine, %ld CPUs%s",
               c->rank, n, (unsigned long long)c->id, c->tr->name, c->topo.moved ? " (host order)" : "",
               prev, c->rank, next, prev,
               n > 1 ? c->tr->peer_name(c->conns[CL_CH_COLL][1][prev]) : "-", next,
               n > 1 ? c->tr->peer_name(c->conns[CL_CH_COLL][0][next]) : "-", c->local, n,
               sysconf(_SC_NPROCESSORS_ONLN), c->spin.crowded ? ": crowded, pollers yield" : "");
    }
    return rc;
}
