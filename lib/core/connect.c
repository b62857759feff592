/* A communicator connects at init: this rank's ring links (to the next rank in host
 * order, from the previous one) opened within the timeout, then a token once around the
 * ring, then rank 0's verdict the same way. Here, not in link.c, because a failure to
 * connect fails the communicator (fail.c), which closes the links (link.c): the links
 * themselves never call up. */
#include "core/connect.h"
#include "core/comm.h"

#include "base/interrupt.h"
#include "base/log.h"
#include "base/util.h"
#include "core/fail.h"
#include "core/family.h"
#include "core/lifecycle.h"
#include "core/link.h"
#include "wire/wire.h"

#include <string.h>
#include <unistd.h>

/* A header-only message that may go around the ring: a token, or a farewell. */
static int lap_header_ok(const cl_msg_hdr *h)
{
    return h->magic == CL_MSG_MAGIC && h->len == 0 && (h->coll == 0 || h->coll == CL_FAREWELL);
}

/* cl_link_await in slices, so that an interrupted init (interrupt.h) stops waiting. */
static int await_slices(coll_comm *c, cl_tr_req **r, int64_t deadline)
{
    for (;;) {
        int rc = cl_link_await(c, r, CL_MIN(deadline, cl_now_ms() + CL_INTERRUPT_SLICE_MS));
        if (rc != COLL_ETIMEDOUT || cl_now_ms() >= deadline)
            return rc;
        if (cl_interrupted())
            return COLL_EABORTED;
    }
}

/* One header once around the ring in host order: rank 0 sends *start to the next rank,
 * every other rank passes on what came from the previous one (into *got). */
static int lap(coll_comm *c, const cl_msg_hdr *start, cl_msg_hdr *got, const char *what)
{
    int to = cl_topo_peer(&c->topo, 1), from = cl_topo_peer(&c->topo, -1);
    int first = c->rank == 0, peer = from;
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    const char *dir = "from";
    cl_tr_req *s = NULL, *r = NULL;
    memset(got, 0, sizeof(*got));
    int rc = c->tr->irecv(cl_link_now_of(c, CL_CH_COLL, 1, from), got, NULL, 0, &r);
    if (rc != COLL_OK)
        r = NULL;
    if (rc == COLL_OK && !first && (rc = await_slices(c, &r, deadline)) == COLL_OK && !lap_header_ok(got))
        rc = COLL_EPROTO;
    if (rc == COLL_OK) {
        peer = to, dir = "to";
        rc = c->tr->isend(cl_link_now_of(c, CL_CH_COLL, 0, to), first ? start : got, NULL, &s);
        s = rc == COLL_OK ? s : NULL;
    }
    if (rc == COLL_OK)
        rc = await_slices(c, &s, deadline);
    if (rc == COLL_OK && first) {
        peer = from, dir = "from";
        if ((rc = await_slices(c, &r, deadline)) == COLL_OK && !lap_header_ok(got))
            rc = COLL_EPROTO;
    }
    if (rc != COLL_OK) {
        cl_comm_fail(c, rc, "rank %d: the %s %s rank %d failed: %s", c->rank, what, dir, peer,
                     coll_strerror(rc));
        /* The failure closed every link, which ends what is still posted: it points into
         * this frame and the caller's. */
        cl_tr_settle(&c->algo[CL_CH_COLL], &r);
        cl_tr_settle(&c->algo[CL_CH_COLL], &s);
    }
    return rc;
}

/* A token once around the ring. A rank passes it only after its own rendezvous, so when
 * it is back rank 0 knows every rank read the cards and its store may close; and init
 * returns only once the link to the next rank carried a message, so a rank that leaves
 * right after init cannot strand a neighbour still connecting. Costs n hops, once. */
static int first_messages(coll_comm *c)
{
    cl_msg_hdr token = {.magic = CL_MSG_MAGIC}, got;
    int rc = lap(c, &token, &got, "first message");
    if (rc == COLL_OK && got.coll == CL_FAREWELL) {
        rc = COLL_EPEER;
        cl_comm_fail(c, rc, "rank %d: rank %llu failed while the communicator connected",
                     c->rank, (unsigned long long)cl_farewell_read(&got).rank);
    }
    return rc;
}

int cl_link_verdict(coll_comm *c, int status)
{
    cl_msg_hdr start = {.magic = CL_MSG_MAGIC}, got;
    if (status != COLL_OK)
        start = cl_farewell_make(&(cl_farewell){.status = status});
    if (c->size == 1)
        return status;
    int rc = lap(c, &start, &got, "verdict");
    if (rc == COLL_OK && got.coll == CL_FAREWELL)
        rc = cl_farewell_read(&got).status;
    return rc;
}

/* Whether rank 0's store, which served this rank at init (cl_store_renew: its connection
 * ended and nothing with the terms it read answers there), went away: rank 0 left, and a
 * link from it would never come. Only until this rank passes the first token: rank 0
 * closes its store once the token is back. */
static int rank0_left_while_linking(coll_comm *c, int64_t deadline)
{
    if (!c->store || cl_store_renew(c->store, deadline) != COLL_EPEER)
        return 0;
    cl_comm_fail(c, COLL_EPEER,
                 "rank %d: rank 0's rendezvous store went away while the communicator "
                 "connected: rank 0 failed, gave up or ended (its own error says why)",
                 c->rank);
    return 1;
}

/* This rank's ring links, to the next rank and from the previous one, within the
 * timeout: a rank that cannot reach its neighbours learns it at init. */
static int ring_links(coll_comm *c)
{
    int to = cl_topo_peer(&c->topo, 1), from = cl_topo_peer(&c->topo, -1), rc = COLL_INPROGRESS;
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    while (c->size > 1) {
        uint64_t seen = cl_notifier_events(c->note);
        int out = cl_link_open(c, CL_CH_COLL, 0, to);
        int in = out == COLL_OK || out == COLL_INPROGRESS ? cl_link_open(c, CL_CH_COLL, 1, from)
                                                          : out;
        if (out == COLL_OK && in == COLL_OK)
            return first_messages(c);
        if ((rc = out != COLL_INPROGRESS && out != COLL_OK ? out : in) != COLL_INPROGRESS &&
            rc != COLL_OK) {
            cl_comm_fail(c, rc, "rank %d: cannot connect to rank %d at '%.*s': %s", c->rank, to,
                         CL_HANDLE_BYTES, c->handles ? c->handles[to] : "its root's link",
                         coll_strerror(rc));
            return rc;
        }
        if (cl_now_ms() >= deadline)
            break;
        if (rank0_left_while_linking(c, deadline))
            return COLL_EPEER;
        if (cl_interrupted()) {
            cl_comm_fail(c, COLL_EABORTED, "rank %d: init interrupted", c->rank);
            return COLL_EABORTED;
        }
        /* Not every listener signals a connection: look again soon. */
        cl_notifier_wait(c->note, seen, CL_MIN(deadline, cl_now_ms() + 1));
    }
    if (c->size == 1)
        return COLL_OK;
    int no_out = !cl_link_now_of(c, CL_CH_COLL, 0, to);
    cl_comm_fail(c, COLL_ETIMEDOUT,
                 no_out ? "rank %d: connecting the communicator timed out after %d ms: rank "
                          "%d's listener took no connection"
                        : "rank %d: connecting the communicator timed out after %d ms: no "
                          "connection from rank(s) %d",
                 c->rank, c->timeout_ms, no_out ? to : from);
    return COLL_ETIMEDOUT;
}

int cl_link_start(coll_comm *c, cl_tr_listener *l, const cl_card *cards)
{
    size_t n = (size_t)c->size;
    int rc = l ? cl_link_keep(c, l, cards) : COLL_OK;
    /* A shared split's ring links are its root's: its first messages take their turn
     * among the family's collectives. */
    uint64_t turn = cl_family_ticket(c);
    cl_family_turn(c, turn);
    if (rc == COLL_OK)
        rc = ring_links(c);
    cl_family_done(c, turn);
    if (rc == COLL_OK && cl_log_enabled(COLL_LOG_INFO)) {
        int prev = cl_topo_peer(&c->topo, -1), next = cl_topo_peer(&c->topo, 1);
        cl_tr_conn *in = n > 1 ? cl_link_now_of(c, CL_CH_COLL, 1, prev) : NULL;
        cl_tr_conn *out = n > 1 ? cl_link_now_of(c, CL_CH_COLL, 0, next) : NULL;
        cl_log(COLL_LOG_INFO,
               "rank %d/%d comm %llx: transport %s, ring%s %d -> %d -> %d: from %d "
               "via %s, to %d via %s; %d of %d ranks on this machine, %ld CPUs%s",
               c->rank, c->size, (unsigned long long)c->id, c->tr->name,
               c->topo.moved ? " (host order)" : "", prev, c->rank, next, prev,
               in ? c->tr->peer_name(in) : "-", next, out ? c->tr->peer_name(out) : "-",
               c->local, c->size, sysconf(_SC_NPROCESSORS_ONLN),
               c->spin.crowded ? ": crowded, pollers yield" : "");
    }
    return rc;
}
