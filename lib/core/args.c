/* What every entry point shares: argument checks that name the call and the argument,
 * the request they build, and its launch (engine for collectives, transport for
 * point-to-point; blocking = non-blocking + wait). */
#include "core/args.h"

#include "base/log.h"
#include "base/names.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/p2p.h"
#include "core/req.h"
#include "kernels/reduce.h"
#include "wire/wire.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int cl_refuse(coll_comm *c, const char *fn, int status, const char *what)
{
    cl_log(COLL_LOG_WARN, "%s: %s", fn, what);
    if (c) {
        pthread_mutex_lock(&c->mu);
        if (c->status == COLL_OK)
            snprintf(c->err, sizeof(c->err), "rank %d %s: %s", c->rank, fn, what);
        pthread_mutex_unlock(&c->mu);
    }
    return status;
}

int cl_bad(coll_comm *c, const char *fn, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!c)
        return cl_refuse(c, fn, COLL_EINVAL, what);
    cl_comm_fail(c, COLL_EINVAL, "rank %d %s: %s", c->rank, fn, what);
    return COLL_EINVAL;
}

int cl_check(const char *fn, coll_comm *c, const void *s, const void *r, size_t count,
                 size_t blocks, int dtype)
{
    if (!c)
        return cl_bad(c, fn, "communicator is NULL");
    size_t es = cl_dtype_size(dtype), bytes;
    if (!es)
        return cl_bad(c, fn, "invalid dtype %d", dtype);
    if (__builtin_mul_overflow(count, es, &bytes) || __builtin_mul_overflow(bytes, blocks, &bytes))
        return cl_bad(c, fn, "count %zu x dtype size overflows", count); /* no division per call */
    if (count && (!s || !r)) /* broadcast and p2p pass their one buffer as both */
        return cl_bad(c, fn, "%s is NULL with count %zu", s == r ? "buf" : !s ? "sendbuf" : "recvbuf",
                   count);
    return cl_comm_state(c);
}

int cl_check_overlap(const char *fn, coll_comm *c, const void *s, size_t sn, const void *r,
                         size_t rn, int in_place)
{
    uintptr_t a = (uintptr_t)s, b = (uintptr_t)r;
    if (in_place || !sn || !rn || a >= b + rn || b >= a + sn)
        return COLL_OK;
    return cl_bad(c, fn, "sendbuf and recvbuf overlap but are not an in-place layout");
}

/* Gradient reductions only: an all-gather moves parameters, indices or counts that must
 * come back exact, so it is never encoded. */
coll_codec cl_codec_for(coll_comm *c, int kind, int dtype, int op)
{
    int reduces = kind == CL_ALLREDUCE || kind == CL_REDUCE_SCATTER;
    int fits = dtype == COLL_F32 && reduces && (op == COLL_SUM || op == COLL_AVG);
    return fits ? c->codec : COLL_CODEC_NONE;
}

/* A request as it starts, its op aside. Field by field: a whole-struct initializer
 * clears its 200 bytes with `rep stos`, slow to start on AMD processors (a one-rank
 * all-reduce here: 57 -> 51 ns without it). */
static void req_init(coll_req *q, coll_comm *c)
{
    q->comm = c;
    q->next = q->out_prev = q->out_next = NULL;
    q->held = q->status = q->done = q->handed = 0;
    q->ticket = 0;
    q->rec = 0;
    q->treq = NULL;
    q->hdr = (cl_msg_hdr){0};
}

static coll_req *make(coll_comm *c, const cl_op *op)
{
    coll_req *q = malloc(sizeof(*q)); /* not calloc: glibc's calloc bypasses its tcache */
    if (q) {
        req_init(q, c);
        q->op = *op;
    }
    return q;
}

coll_req *cl_blocking;

/* One issuing order per communicator: a thread that issues a collective while another is
 * inside a blocking one on the same communicator is the race the header warns of (the
 * two may pair differently on another rank), and is refused. Point-to-point is ordered
 * per peer and direction, not here. */
static __thread char thread_tag __attribute__((tls_model("initial-exec")));

static int issue_alone(coll_comm *c, const cl_op *op, int blocking)
{
    uintptr_t me = (uintptr_t)&thread_tag, none = 0, in = atomic_load(&c->blocking_in);
    if ((in && in != me) ||
        (blocking && !atomic_compare_exchange_strong(&c->blocking_in, &none, me)))
        return cl_refuse(c, cl_kind_name(op->kind), COLL_EINVAL,
                         "issued while another thread is inside a blocking collective on "
                         "this communicator: issue from one thread, or give each thread "
                         "its own communicator (coll_split)");
    return COLL_OK;
}

/* A request that could not start leaves *out NULL (coll_wait(NULL) is COLL_EINVAL), never
 * whatever the caller's variable held before. */
static int launch(coll_comm *c, coll_req *q, coll_req **out)
{
    if (out != CL_BLOCKING)
        *out = NULL;
    if (!q)
        return cl_comm_no_memory(c, "a request");
    int coll = q->op.kind != CL_SEND && q->op.kind != CL_RECV, blocking = out == CL_BLOCKING;
    int rc = coll ? issue_alone(c, &q->op, blocking) : COLL_OK;
    if (rc == COLL_OK) { /* handed in: counted now, whether it runs now or queues */
        atomic_fetch_add(&c->bytes_in, q->op.count * cl_dtype_size(q->op.dtype));
        rc = coll ? COLL_OK : cl_p2p_post(c, q);
    }
    if (rc != COLL_OK) {
        if (!(coll && blocking))
            free(q);
        return rc;
    }
    if (coll && blocking) {
        rc = cl_engine_call(c, q);
        atomic_store_explicit(&c->blocking_in, 0, memory_order_release); /* its last touch of c */
        return rc;
    }
    if (out != CL_BLOCKING)
        cl_req_hand_out(c, q);
    if (coll)
        cl_engine_submit(c, q);
    if (out == CL_BLOCKING)
        return cl_req_wait(q);
    *out = q;
    return COLL_OK;
}

/* Counted inside c for its whole length, so coll_destroy on another thread waits it out:
 * a blocking collective by its mark in blocking_in (issue_alone), anything else by
 * `inside`. A blocking collective's request lives on its caller's stack (the caller waits
 * for it and nobody else holds it), and a blocking send or receive first tries the fast
 * path there: a small all-reduce or message allocates nothing. */
static int go(coll_comm *c, coll_req *here, coll_req **out)
{
    int coll = here->op.kind != CL_SEND && here->op.kind != CL_RECV;
    if (coll && out == CL_BLOCKING)
        return launch(c, here, out);
    atomic_fetch_add(&c->inside, 1);
    int rc = !coll && out == CL_BLOCKING ? cl_p2p_now(c, here) : COLL_INPROGRESS;
    if (rc == COLL_INPROGRESS)
        rc = launch(c, make(c, &here->op), out);
    atomic_fetch_sub(&c->inside, 1);
    return rc;
}

int cl_launch(coll_comm *c, const cl_op *op, coll_req **out)
{
    coll_req here;
    req_init(&here, c);
    here.op = *op;
    return go(c, &here, out);
}

/* The request is built where it lives, not built as an op and copied: the copy read back
 * in 16-byte loads what had just been stored field by field, which the processor cannot
 * forward from its store buffer (a one-rank all-reduce here: 69 -> 57 ns). */
int cl_start(coll_comm *c, int kind, const void *s, void *r, size_t count, int dtype, int op,
             int root, uint32_t tag, coll_req **out)
{
    coll_req here;
    req_init(&here, c);
    here.op = (cl_op){.kind = kind,
                      .sbuf = s,
                      .rbuf = r,
                      .count = count,
                      .dtype = (coll_dtype)dtype,
                      .op = (coll_op)op,
                      .root = root,
                      .tag = tag,
                      .codec = cl_codec_for(c, kind, dtype, op)};
    return go(c, &here, out);
}

int cl_check_op(const char *fn, coll_comm *c, int op, int dtype)
{
    if (!cl_op_valid(op))
        return cl_bad(c, fn, "invalid reduction op %d", op);
    if (!cl_op_serves(op, dtype))
        return cl_bad(c, fn, "op %s is bitwise: integer dtypes only, not %s", cl_op_name(op),
                      cl_dtype_name(dtype));
    return COLL_OK;
}

int cl_check_algo(const char *fn, coll_comm *c, int kind, size_t count, coll_dtype dt,
                  coll_op op)
{
    if (!c->force[0])
        return COLL_OK;
    char why[256];
    cl_op o = {.kind = kind, .count = count, .dtype = dt, .op = op,
               .codec = cl_codec_for(c, kind, dt, op)};
    return cl_choose(&c->topo, c->force, &o, why, sizeof(why)) ? COLL_OK
                                                                : cl_refuse(c, fn, COLL_ENOTSUP, why);
}

int cl_check_root(const char *fn, coll_comm *c, int root)
{
    return root >= 0 && root < c->size ? COLL_OK
                                       : cl_bad(c, fn, "root %d out of range [0, %d)", root, c->size);
}

void cl_clear_req(coll_req **req)
{
    if (req && req != CL_BLOCKING)
        *req = NULL;
}

int cl_check_req(const char *fn, coll_comm *c, coll_req **req)
{
    return req ? COLL_OK : cl_bad(c, fn, "req is NULL");
}

