/* Status codes, the sticky first failure of a communicator, and its sentence. */
#include "core/comm.h"

#include "base/log.h"
#include "base/util.h"

#include <stdarg.h>
#include <stdio.h>

const char *coll_strerror(int status)
{
    switch (status) {
    case COLL_OK: return "success";
    case COLL_INPROGRESS: return "operation in progress";
    case COLL_EINVAL: return "invalid argument";
    case COLL_ENOMEM: return "out of memory";
    case COLL_ENOTSUP: return "not supported";
    case COLL_ESYS: return "system call failed";
    case COLL_ETIMEDOUT: return "timed out";
    case COLL_EPEER: return "peer closed, reset or unreachable";
    case COLL_EMISMATCH: return "ranks disagree on the operation";
    case COLL_EABORTED: return "aborted";
    case COLL_ESTATE: return "communicator already failed";
    case COLL_EPROTO: return "protocol error (bad magic, version or secret)";
    default: return "unknown status";
    }
}

const char *cl_kind_name(int kind)
{
    static const char *names[] = {"invalid",   "allreduce", "reduce_scatter",
                                  "allgather", "broadcast", "barrier",
                                  "send",      "recv",      "split"};
    return kind >= CL_ALLREDUCE && kind <= CL_SPLIT ? names[kind] : names[0];
}

void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
{
    uint32_t seq;
    int cause_rank, cause_status;
    atomic_fetch_add(&c->errors, 1);
    pthread_mutex_lock(&c->mu);
    int first = c->status == COLL_OK;
    seq = c->seq;
    if (first && c->cause_status == COLL_OK) {
        c->cause_rank = c->rank;
        c->cause_status = status;
    }
    cause_rank = c->cause_rank;
    cause_status = c->cause_status;
    if (first) {
        c->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof(c->err), fmt, ap);
        va_end(ap);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (!first)
        return;
    cl_log(COLL_LOG_ERROR, "%s", c->err);
    /* Closing every link makes the failure reach every peer within one timeout; the
     * farewell tells them why, so a mismatch is a mismatch on every rank. */
    cl_msg_hdr bye = {.magic = CL_MSG_MAGIC,
                      .coll = CL_FAREWELL,
                      .seq = seq,
                      .tag = (uint32_t)-cause_status,
                      .count = (uint64_t)cause_rank};
    c->tr->shutdown(c->ctx, status, &bye);
    cl_notify(&c->notifier);
}

int cl_peer_failed(coll_comm *c, const cl_msg_hdr *h, const char *what, uint32_t seq)
{
    int status = -(int)h->tag;
    if (status >= 0 || status < COLL_EPROTO)
        status = COLL_EPROTO;
    /* A peer that failed for a reason of its own: this rank's links are fine. */
    int mine = status == COLL_EABORTED || status == COLL_ETIMEDOUT || status == COLL_ENOMEM ||
               status == COLL_ESYS || status == COLL_ESTATE;
    cl_comm_blame(c, (int)h->count, status);
    cl_comm_fail(c, mine ? COLL_EPEER : status, "rank %d %s #%u: rank %llu failed (%s, #%u)",
                 c->rank, what, seq, (unsigned long long)h->count, coll_strerror(status), h->seq);
    return mine ? COLL_EPEER : status;
}

int cl_await_farewell(coll_comm *c, int peer, int ch, const char *what, uint32_t seq)
{
    cl_msg_hdr h = {0};
    cl_tr_req *r;
    if (c->tr->irecv(c->conns[ch][1][peer], &h, NULL, 0, &r) != COLL_OK)
        return COLL_OK;
    /* A farewell is written before the close that failed our send: it is here already,
     * or nearly. Past this bound the request stays with the transport until destroy. */
    int64_t deadline = cl_now_ms() + CL_MIN(c->timeout_ms, 1000);
    int done = 0, rc = COLL_EPEER;
    while (!done && cl_now_ms() < deadline) {
        uint64_t seen = cl_notifier_events(&c->notifier);
        rc = c->tr->test(r, &done, NULL);
        if (!done)
            cl_notifier_wait(&c->notifier, seen, deadline);
    }
    if (done && rc == COLL_OK && h.coll == CL_FAREWELL)
        return cl_peer_failed(c, &h, what, seq);
    return COLL_OK;
}

void cl_comm_blame(coll_comm *c, int rank, int status)
{
    pthread_mutex_lock(&c->mu);
    if (c->status == COLL_OK && c->cause_status == COLL_OK) {
        c->cause_rank = rank;
        c->cause_status = status;
    }
    pthread_mutex_unlock(&c->mu);
}

int cl_comm_state(coll_comm *c)
{
    if (atomic_load(&c->aborted))
        return COLL_EABORTED;
    pthread_mutex_lock(&c->mu);
    int failed = c->status != COLL_OK;
    pthread_mutex_unlock(&c->mu);
    return failed ? COLL_ESTATE : COLL_OK;
}
