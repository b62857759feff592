/* A communicator fails (fail.h): its first failure recorded (error.c) and logged, its
 * links closed with the farewell that names the cause, so every peer hears within one
 * timeout; a family member's failure fails the whole family (family.h). The links call
 * here when they fail, and here the links are closed: that recursion is the design. */
#include "core/fail.h"
#include "core/comm.h"

#include "base/log.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/family.h"
#include "core/link.h"
#include "wire/wire.h"

#include <stdarg.h>
#include <stdio.h>

void cl_comm_close_links(coll_comm *c, int status)
{
    pthread_mutex_lock(&c->mu);
    int cause_rank = c->cause_rank, cause_status = c->cause_status, silent = c->cause_silent_ms;
    uint32_t seq = cl_engine_issued(c);
    pthread_mutex_unlock(&c->mu);
    /* Closing every link makes the failure reach every peer within one timeout; the
     * farewell tells them why, so a mismatch is a mismatch on every rank. */
    cl_farewell why = {.status = cause_status,
                       .rank = (uint64_t)cause_rank,
                       .seq = seq,
                       .silent_ms = (uint32_t)silent}; /* 0 but for a silent rank */
    c->bye = cl_farewell_make(&why);
    cl_link_spread(c, &c->bye);
    c->tr->shutdown(c->ctx, status, &c->bye);
    cl_notify(c->note);
}

static void fail_msg(coll_comm *c, int status, const char *msg)
{
    atomic_fetch_add(&c->errors, 1);
    if (c->fam) {
        coll_comm *root = cl_family_fail(c, status, msg);
        if (root)
            cl_comm_close_links(root, status);
        return;
    }
    if (!cl_comm_record(c, status, msg))
        return;
    cl_log(COLL_LOG_ERROR, "%s", msg);
    cl_comm_close_links(c, status);
}

void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fail_msg(c, status, msg);
}

int cl_comm_no_memory(coll_comm *c, const char *fn)
{
    cl_comm_fail(c, COLL_ENOMEM, "rank %d %s: out of memory", c->rank, fn);
    return COLL_ENOMEM;
}

static void hook_fail(void *owner, int status, const char *msg)
{
    fail_msg(owner, status, msg);
}

static void hook_blame(void *owner, int rank, int status, int silent_ms)
{
    cl_comm_blame(owner, rank, status, silent_ms);
}

/* A farewell names its rank in the numbering of the links' owner (family.h). */
static int hook_rank(void *owner, uint64_t r)
{
    coll_comm *c = owner;
    return r < (uint64_t)cl_family_root(c)->size ? cl_family_rank(c, (int)r) : -1;
}

cl_fail_hooks cl_comm_hooks(coll_comm *c)
{
    return (cl_fail_hooks){c, hook_blame, hook_fail, hook_rank};
}

void cl_comm_abort(coll_comm *c)
{
    atomic_store(&c->aborted, 1);
    cl_comm_fail(c, COLL_EABORTED, "rank %d: aborted by the application", c->rank);
}
