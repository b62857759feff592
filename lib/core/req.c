/* Waiting on and testing requests. A collective is done when the engine says so; a
 * point-to-point request when its transport request completes, bounded by the timeout
 * since the last progress. */
#include "core/comm.h"

#include "base/util.h"

#include <stdlib.h>

static int is_p2p(const coll_req *r)
{
    return r->op.kind == CL_SEND || r->op.kind == CL_RECV;
}

int coll_test(coll_req *r, int *done)
{
    if (!r || !done)
        return COLL_EINVAL;
    if (is_p2p(r)) {
        int rc = cl_p2p_test(r, done);
        return *done ? rc : COLL_INPROGRESS;
    }
    coll_comm *c = r->comm;
    pthread_mutex_lock(&c->mu);
    *done = r->done;
    int rc = r->done ? r->status : COLL_INPROGRESS;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Past the deadline the communicator fails; its shutdown completes the transport
 * request, which is then collected so nothing writes into the buffer after return. */
static int wait_p2p(coll_req *r)
{
    coll_comm *c = r->comm;
    int done = 0, rc = COLL_INPROGRESS, timed_out = 0;
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    cl_spin spin = cl_spin_start(&c->algo[CL_CH_P2P]);
    for (;;) {
        uint64_t seen = cl_notifier_events(&c->notifier);
        rc = cl_p2p_test(r, &done);
        if (done)
            break;
        if (cl_spin_poll(&spin))
            continue;
        if (cl_now_ms() >= deadline) {
            if (timed_out)
                break; /* the transport never let go: leave the request */
            timed_out = 1;
            cl_comm_fail(c, COLL_ETIMEDOUT, "rank %d %s #%u: nothing from peer %d for %d ms",
                         c->rank, cl_kind_name(r->op.kind), r->op.seq, r->op.root, c->timeout_ms);
            deadline = cl_now_ms() + c->timeout_ms;
        }
        /* Not every listener signals a connection: a held request looks again soon. */
        int64_t until = cl_p2p_progress(c) ? CL_MIN(deadline, cl_now_ms() + 1) : deadline;
        cl_notifier_wait(&c->notifier, seen, until);
        cl_spin_progress(&spin);
    }
    cl_spin_stop(&spin);
    return timed_out ? COLL_ETIMEDOUT : rc;
}

int cl_req_wait(coll_req *r)
{
    int rc;
    if (is_p2p(r)) {
        rc = wait_p2p(r);
    } else {
        coll_comm *c = r->comm;
        pthread_mutex_lock(&c->mu);
        while (!r->done)
            pthread_cond_wait(&c->cv, &c->mu);
        rc = r->status;
        pthread_mutex_unlock(&c->mu);
    }
    free(r);
    return rc;
}

int coll_wait(coll_req *r)
{
    return r ? cl_req_wait(r) : COLL_EINVAL;
}
