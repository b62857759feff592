/* Waiting on and testing requests. A collective is done when the engine says so; a
 * point-to-point request when its transport request completes, bounded by the timeout
 * since the last progress. */
#include "core/req.h"
#include "core/comm.h"

#include "base/util.h"
#include "core/beat.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/link.h"
#include "core/p2p.h"

#include <stdlib.h>

static int is_p2p(const coll_req *r)
{
    return r->op.kind == CL_SEND || r->op.kind == CL_RECV;
}

int coll_test(coll_req *r, int *done)
{
    if (!r || !done)
        return COLL_EINVAL;
    coll_comm *c = r->comm;
    if (!c) { /* its communicator was destroyed: it finished then */
        *done = 1;
        return r->status;
    }
    int rc;
    atomic_fetch_add(&c->inside, 1);
    if (is_p2p(r)) {
        rc = cl_p2p_test(r, done);
        rc = *done ? rc : COLL_INPROGRESS;
    } else {
        pthread_mutex_lock(&c->mu);
        *done = r->done;
        rc = r->done ? r->status : COLL_INPROGRESS;
        pthread_mutex_unlock(&c->mu);
    }
    atomic_fetch_sub(&c->inside, 1);
    return rc;
}

/* Bytes r's transport request moved so far (0 while held or unknown). */
static size_t moved(const coll_req *r)
{
    const cl_transport *tr = r->comm->tr;
    return r->treq && tr->moved ? tr->moved(r->treq) : 0;
}

/* What our dial to the peer of a request whose link never formed found, before the
 * heartbeat's bound (link.c): the peer's farewell (it failed: its cause is this rank's
 * too), or its process gone (its ports refuse connections). COLL_OK: neither, or not
 * known; else the status c failed with here. */
static int judge_link(const coll_req *r, int64_t since)
{
    coll_comm *c = r->comm;
    cl_msg_hdr bye;
    if (cl_link_farewell(c, r->op.root, &bye))
        return cl_peer_failed(&c->algo[CL_CH_P2P], &bye, cl_kind_name(r->op.kind), r->op.seq);
    if (!cl_link_gone(c, r->op.root, r->op.kind == CL_RECV ? since : 0))
        return COLL_OK;
    cl_comm_blame(c, r->op.root, COLL_EPEER, 0);
    cl_comm_fail(c, COLL_EPEER,
                 "rank %d %s #%u: rank %d is gone: its process ended (its ports refuse "
                 "connections, and it did not say it left)",
                 c->rank, cl_kind_name(r->op.kind), r->op.seq, r->op.root);
    return COLL_EPEER;
}

/* A point-to-point request's peer not heard for the heartbeat's bound (stopped, wedged,
 * its process or host gone) fails the communicator, naming it, as a collective's silent
 * rank does (beat.c): else a receive from a dead rank whose link never formed, or a send
 * to a stopped one, waited the operation timeout (30 minutes by default). Before that
 * bound, what our dial to the peer found may fail it sooner (judge_link). Only the rank
 * waited on is judged (a pair may go on while a third is done), and only in a wait, as
 * the operation timeout: a request only tested (a receive posted ahead, for a message
 * that may never come) fails nothing. COLL_EPEER when it failed c here, else COLL_OK. */
static int judge_peer(const coll_req *r, int64_t since)
{
    coll_comm *c = r->comm;
    int ms = cl_beat_silent_ms(c, r->op.root);
    if (cl_comm_state(c) != COLL_OK)
        return COLL_OK;
    if (!ms)
        return judge_link(r, since);
    cl_comm_blame(c, r->op.root, COLL_EPEER, ms);
    cl_comm_fail(c, COLL_EPEER, "rank %d %s #%u: " CL_SILENT_FMT, c->rank,
                 cl_kind_name(r->op.kind), r->op.seq, r->op.root, ms / 1000.0);
    return COLL_EPEER;
}

/* Past the deadline (an op timeout in which no byte moved), or once the peer is silent
 * (judge_peer), the communicator fails; its shutdown completes the transport request,
 * which is then collected so nothing writes into the buffer after return. */
static int wait_p2p(coll_req *r)
{
    coll_comm *c = r->comm;
    int done = 0, rc = COLL_INPROGRESS, failed = COLL_OK;
    int64_t since = cl_now_ms(), deadline = since + c->op_timeout_ms;
    int period = cl_beat_period_ms(c);
    size_t seen_bytes = 0;
    cl_spin spin = cl_spin_start(&c->algo[CL_CH_P2P]);
    for (;;) {
        uint64_t seen = cl_notifier_events(c->note);
        rc = cl_p2p_test(r, &done);
        if (done)
            break;
        if (cl_spin_poll(&spin))
            continue;
        /* Bytes that moved since the last look are progress: the bound starts again
         * (a stall is found within one to two op timeouts). */
        if (!failed && cl_now_ms() >= deadline && moved(r) != seen_bytes) {
            seen_bytes = moved(r);
            deadline = cl_now_ms() + c->op_timeout_ms;
        }
        if (!failed && (failed = judge_peer(r, since)) != COLL_OK)
            deadline = cl_now_ms() + c->timeout_ms;
        if (cl_now_ms() >= deadline) {
            if (failed)
                break; /* the transport never let go: leave the request */
            failed = COLL_ETIMEDOUT;
            cl_comm_fail(c, COLL_ETIMEDOUT, "rank %d %s #%u: no progress with peer %d for %d ms",
                         c->rank, cl_kind_name(r->op.kind), r->op.seq, r->op.root,
                         c->op_timeout_ms);
            deadline = cl_now_ms() + c->timeout_ms;
        }
        /* Not every listener signals a connection: a held request looks again soon; the
         * peer's silence is asked once a beat. */
        int64_t until = cl_p2p_progress(c) ? CL_MIN(deadline, cl_now_ms() + 1) : deadline;
        if (period && !failed)
            until = CL_MIN(until, cl_now_ms() + period);
        cl_notifier_wait(c->note, seen, until);
        cl_spin_progress(&spin);
    }
    cl_spin_stop(&spin);
    return failed ? failed : rc;
}

/* Off the list of requests handed out (c->mu held). */
static void take_back(coll_comm *c, coll_req *r)
{
    if (!r->handed)
        return;
    if (r->out_prev)
        r->out_prev->out_next = r->out_next;
    else
        c->out = r->out_next;
    if (r->out_next)
        r->out_next->out_prev = r->out_prev;
}

void cl_req_hand_out(coll_comm *c, coll_req *r)
{
    pthread_mutex_lock(&c->mu);
    r->handed = 1;
    r->out_prev = NULL;
    r->out_next = c->out;
    if (c->out)
        c->out->out_prev = r;
    c->out = r;
    pthread_mutex_unlock(&c->mu);
}

int cl_req_wait(coll_req *r)
{
    coll_comm *c = r->comm;
    int rc = r->status;
    if (!c) { /* finished when its communicator was destroyed */
        free(r);
        return rc;
    }
    atomic_fetch_add(&c->inside, 1);
    if (is_p2p(r)) {
        rc = wait_p2p(r);
        if (r->handed) {
            pthread_mutex_lock(&c->mu);
            take_back(c, r);
            pthread_mutex_unlock(&c->mu);
        }
    } else {
        pthread_mutex_lock(&c->mu);
        while (!r->done)
            pthread_cond_wait(&c->cv, &c->mu);
        rc = r->status;
        take_back(c, r);
        pthread_mutex_unlock(&c->mu);
    }
    atomic_fetch_sub(&c->inside, 1);
    free(r);
    return rc;
}

/* A handed-out request as destroy leaves it: finished, its status kept, on its own. */
static void settle(coll_req *r)
{
    int done = 1;
    if (is_p2p(r)) {
        cl_p2p_test(r, &done);
        if (!done)
            r->status = wait_p2p(r); /* the aborted transport lets go within the timeout */
        if (r->treq || __atomic_load_n(&r->held, __ATOMIC_ACQUIRE))
            r->status = COLL_EABORTED; /* never let go: the transport's to free */
    } else if (!r->done) {
        r->status = COLL_EABORTED;
    }
    r->done = 1;
    r->handed = 0;
    r->comm = NULL;
}

/* Whether destroy must abort first: somebody is inside, or something is unfinished. */
static int unfinished(coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    int any = atomic_load(&c->inside) > 0 || !cl_engine_idle(c);
    coll_req *out = c->out;
    for (coll_req *r = out; r && !any; r = r->out_next)
        any = !is_p2p(r) && !r->done;
    pthread_mutex_unlock(&c->mu);
    for (coll_req *r = out; r && !any; r = r->out_next) {
        int done = 1;
        if (is_p2p(r))
            cl_p2p_test(r, &done);
        any = !done;
    }
    return any;
}

/* A caller inside an operation on c (cl_launch): a blocking collective's or another's. */
static int someone_inside(coll_comm *c)
{
    return atomic_load(&c->inside) > 0 || atomic_load(&c->blocking_in) != 0;
}

int cl_comm_settle(coll_comm *c)
{
    if (unfinished(c))
        cl_comm_abort(c);
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    while (someone_inside(c) && cl_now_ms() < deadline)
        cl_sleep_ms(1);
    if (someone_inside(c))
        return COLL_ETIMEDOUT;
    cl_engine_stop(c);
    pthread_mutex_lock(&c->mu);
    coll_req *r = c->out;
    c->out = NULL;
    pthread_mutex_unlock(&c->mu);
    while (r) {
        coll_req *next = r->out_next;
        settle(r);
        r = next;
    }
    return COLL_OK;
}

int coll_wait(coll_req *r)
{
    return r ? cl_req_wait(r) : COLL_EINVAL;
}
