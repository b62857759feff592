/* Failures as an algorithm sees them: a sentence for the owner, and a peer's farewell
 * read before its closed link is judged, so every rank reports the cause the failing
 * rank announced. */
#include "algo/ctx.h"

#include "base/util.h"
#include "wire/wire.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

int cl_algo_fail(const cl_algo_ctx *x, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    x->fail.fail(x->fail.owner, status, msg);
    return status;
}

void cl_algo_blame(const cl_algo_ctx *x, int rank, int status)
{
    x->fail.blame(x->fail.owner, cl_rank_of(x, rank), status, 0);
}

int cl_peer_failed(const cl_algo_ctx *x, const cl_msg_hdr *h, const char *what, uint32_t seq)
{
    cl_farewell f = cl_farewell_read(h);
    int status = f.status;
    /* A peer that failed for a reason of its own (a bad argument it passed, its memory):
     * this rank's links and arguments are fine. */
    int mine = status == COLL_EABORTED || status == COLL_ETIMEDOUT || status == COLL_ENOMEM ||
               status == COLL_ESYS || status == COLL_ESTATE || status == COLL_EINVAL ||
               status == COLL_ENOTSUP;
    int rank = x->fail.wire_rank(x->fail.owner, f.rank);
    int silent = (int)f.silent_ms;
    x->fail.blame(x->fail.owner, rank, status, silent);
    if (silent)
        return cl_algo_fail(x, COLL_EPEER, "rank %d %s #%u: " CL_SILENT_FMT, cl_rank_of(x, x->rank),
                            what, seq, rank, silent / 1000.0);
    return cl_algo_fail(x, mine ? COLL_EPEER : status, "rank %d %s #%u: rank %d failed (%s, #%u)",
                        cl_rank_of(x, x->rank), what, seq, rank, coll_strerror(status), f.seq);
}

void cl_tr_settle(const cl_algo_ctx *x, cl_tr_req **r)
{
    int done = 0;
    while (*r) {
        uint64_t seen = cl_notifier_events(x->notifier);
        x->tr->test(*r, &done, NULL);
        if (done)
            *r = NULL;
        else
            cl_notifier_wait(x->notifier, seen, cl_now_ms() + 100);
    }
}

int cl_await_farewell(const cl_algo_ctx *x, int peer, const char *what, uint32_t seq)
{
    cl_msg_hdr h = {0};
    cl_tr_req *r;
    /* A farewell is written before the close that failed our send: it is here already,
     * or nearly, on a link of its own if the peer had none to us. */
    int64_t deadline = cl_now_ms() + CL_MIN(x->timeout_ms, 1000);
    cl_tr_conn *from = NULL;
    while (cl_link_get(x, 1, peer, &from) == COLL_INPROGRESS && cl_now_ms() < deadline) {
        uint64_t seen = cl_notifier_events(x->notifier);
        cl_notifier_wait(x->notifier, seen, CL_MIN(deadline, cl_now_ms() + 1));
    }
    if (!from || x->tr->irecv(from, &h, NULL, 0, &r) != COLL_OK)
        return COLL_OK;
    int done = 0, rc = COLL_EPEER;
    while (!done && cl_now_ms() < deadline) {
        uint64_t seen = cl_notifier_events(x->notifier);
        rc = x->tr->test(r, &done, NULL);
        if (!done)
            cl_notifier_wait(x->notifier, seen, deadline);
    }
    if (done && rc == COLL_OK && h.coll == CL_FAREWELL)
        return cl_peer_failed(x, &h, what, seq);
    if (!done) { /* h is ours: the link it would land on closes first (the send to this
                  * peer failed, so this rank fails anyway), which completes the receive */
        x->tr->close_conn(from);
        cl_tr_settle(x, &r);
    }
    return COLL_OK;
}
