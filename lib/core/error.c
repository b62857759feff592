/* The sticky first failure of a communicator: its status, its sentence and where it
 * began. Only records and reads: acting on a failure (closing the links, telling the
 * peers) is fail.c's, so every file may ask here without calling back up. Likewise the
 * sentence of a failed init, split, shrink or grow, which has no communicator to keep it. */
#include "core/error.h"
#include "core/comm.h"

#include <stdarg.h>
#include <stdio.h>

int cl_comm_record(coll_comm *c, int status, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    int first = c->status == COLL_OK;
    if (first && c->cause_status == COLL_OK) {
        c->cause_rank = c->rank;
        c->cause_status = status;
    }
    if (first) {
        __atomic_store_n(&c->status, status, __ATOMIC_RELEASE);
        snprintf(c->err, sizeof(c->err), "%s", msg);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return first;
}

void cl_comm_cause(coll_comm *c, int *rank, int *status, int *silent_ms)
{
    pthread_mutex_lock(&c->mu);
    *rank = c->cause_rank;
    *status = c->cause_status;
    *silent_ms = c->cause_silent_ms;
    pthread_mutex_unlock(&c->mu);
}

void cl_comm_blame(coll_comm *c, int rank, int status, int silent_ms)
{
    pthread_mutex_lock(&c->mu);
    if (c->status == COLL_OK && c->cause_status == COLL_OK) {
        c->cause_rank = rank;
        c->cause_status = status;
        c->cause_silent_ms = silent_ms;
    }
    pthread_mutex_unlock(&c->mu);
}

int cl_comm_state(coll_comm *c)
{
    if (atomic_load(&c->aborted))
        return COLL_EABORTED;
    /* Read without the lock, as every call asks: a failure that lands just after is
     * met by the operation itself. */
    return __atomic_load_n(&c->status, __ATOMIC_ACQUIRE) != COLL_OK ? COLL_ESTATE : COLL_OK;
}

__thread char cl_init_err[CL_INIT_ERR_BYTES];

void cl_comm_init_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cl_init_err, sizeof(cl_init_err), fmt, ap);
    va_end(ap);
}

const char *coll_last_error(const coll_comm *comm)
{
    return comm ? comm->err : cl_init_err;
}
