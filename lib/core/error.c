/* Status codes, the sticky first failure of a communicator, and its sentence. */
#include "comm.h"

#include "log.h"

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
    static const char *names[] = { "invalid",   "allreduce", "reduce_scatter", "allgather",
                                   "broadcast", "barrier",   "send",           "recv",
                                   "split" };
    return kind >= CL_ALLREDUCE && kind <= CL_SPLIT ? names[kind] : names[0];
}

void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
{
    atomic_fetch_add(&c->errors, 1);
    pthread_mutex_lock(&c->mu);
    int first = c->status == COLL_OK;
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
    /* Closing every link makes the failure reach every peer within one timeout. */
    c->tr->shutdown(c->ctx, status);
    cl_notify(&c->notifier);
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
