/* The per-communicator progress engine: a thread that runs queued collectives in order,
 * like a stream. Callers enqueue and return (non-blocking) or enqueue and wait; a
 * blocking call that finds nothing queued or running runs on its own thread instead, as
 * MPI does: two thread hand-offs (to the engine and back) cost more than a small
 * all-reduce itself. One collective runs at a time either way (`busy`), in issue order.
 * It never runs point-to-point messages: those go to the transport directly so a
 * receive never queues behind a send. The members of a family that shares links
 * (family.h) run their collectives in their turns, in issue order across the family. */
#include "core/comm.h"

#include "base/log.h"
#include "base/util.h"
#include "kernels/codec.h"
#include "kernels/reduce.h"

#include <stdlib.h>

/* cl_choose, remembered per collective for the same count, dtype, op and codec (the
 * uneven forms, whose per-rank counts would be part of the key, always choose afresh).
 * Only the running collective reads or writes it: one runs at a time. */
static const cl_algo *choose(coll_comm *c, const cl_op *op, char *why, size_t len)
{
    struct cl_choice *k = &c->chosen[op->kind];
    int plain = !op->scounts && !op->rcounts;
    if (plain && k->algo && k->count == op->count && k->dtype == (int)op->dtype &&
        k->op == (int)op->op && k->codec == (int)op->codec)
        return k->algo;
    const cl_algo *a = cl_choose(c, op, why, len);
    if (plain)
        *k = (struct cl_choice){op->count, (int)op->dtype, (int)op->op, (int)op->codec, a};
    return a;
}

/* COLL_DEBUG=debug: every collective, with what it moved, how, how long it took and how
 * many of its messages took the fast path (quick: the count before it ran). */
static void tell_done(coll_comm *c, const cl_algo *a, const cl_op *op, int rc, int64_t t0,
                      uint64_t quick)
{
    cl_log(COLL_LOG_DEBUG,
           "rank %d %s #%u: %zu x %s %s, root %d, codec %s: %s, %lld us, %llu fast%s%s", c->rank,
           cl_kind_name(op->kind), op->seq, op->count, cl_dtype_name(op->dtype), cl_op_name(op->op),
           op->root, cl_codec_name(op->codec), a->name, (long long)(cl_now_us() - t0),
           (unsigned long long)(atomic_load(&c->ran.quick) - quick), rc == COLL_OK ? "" : ": ",
           rc == COLL_OK ? "" : coll_strerror(rc));
}

static int run_one(coll_comm *c, coll_req *r)
{
    char why[256];
    const cl_algo *a = choose(c, &r->op, why, sizeof(why));
    if (!a) /* api.c refuses an operation no algorithm runs: never here */
        return COLL_ENOTSUP;
    cl_tell_choice(c, a, &r->op);
    int64_t t0 = cl_log_enabled(COLL_LOG_DEBUG) ? cl_now_us() : 0;
    uint64_t quick = t0 ? atomic_load(&c->ran.quick) : 0;
    int rc = a->run(cl_topo_ctx(c, a, &r->op), &r->op);
    if (t0)
        tell_done(c, a, &r->op, rc, t0, quick);
    return rc;
}

int cl_run_collective(coll_comm *c, coll_req *r)
{
    return cl_widen_wanted(&r->op) ? cl_run_widened(c, r, run_one) : run_one(c, r);
}

static coll_req *next_request(coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    while ((!c->qhead || c->busy) && !c->stop)
        pthread_cond_wait(&c->cv, &c->mu);
    coll_req *r = c->qhead;
    if (r) {
        c->qhead = r->next;
        if (!c->qhead)
            c->qtail = NULL;
        c->busy = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* A request run by its own caller has no other waiter: wake the engine only if work
 * queued behind it (a needless wake-up costs more than a small all-reduce). */
static void finish(coll_comm *c, coll_req *r, int status, int by_caller)
{
    if (status == COLL_OK)
        cl_tally(&c->ran.ops, 1);
    pthread_mutex_lock(&c->mu);
    r->status = status;
    r->done = 1;
    c->busy = 0;
    if (!by_caller || c->qhead)
        pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* What scratch and staging keep between collectives: the ring's reduce-scatter rounds
 * (8 MiB of scratch at the default segment) and the segment windows fit; what a single
 * large message grew them to (a reduce's accumulation off the root, a codec's encoded
 * copy) is given back once calls stop asking for it. */
#define CL_KEEP_BYTES ((size_t)16 << 20)

/* An error an algorithm met on this rank alone (no memory for scratch) fails the
 * communicator like one it reported, so the peers waiting on this rank hear at once. */
static void run(coll_comm *c, coll_req *r, int by_caller)
{
    if (r->ticket)
        cl_family_turn(c, r->ticket);
    int rc = cl_comm_state(c);
    if (rc == COLL_OK && (rc = cl_run_collective(c, r)) != COLL_OK && cl_comm_state(c) == COLL_OK)
        cl_comm_fail(c, rc, "rank %d %s #%u: %s", c->rank, cl_kind_name(r->op.kind), r->op.seq,
                     coll_strerror(rc));
    cl_buf_settle(&c->scratch, CL_KEEP_BYTES);
    cl_buf_settle(&c->staging, CL_KEEP_BYTES);
    if (r->ticket)
        cl_family_done(c, r->ticket);
    finish(c, r, rc, by_caller);
}

static void *engine_main(void *arg)
{
    coll_comm *c = arg;
    coll_req *r;
    while ((r = next_request(c)) != NULL)
        run(c, r, 0);
    return NULL;
}

int cl_engine_start(coll_comm *c)
{
    return pthread_create(&c->engine, NULL, engine_main, c) == 0 ? COLL_OK : COLL_ESYS;
}

/* Queued requests still run (and fail at once on a failed communicator) before the
 * thread sees stop: nobody waiting on one is left hanging. */
void cl_engine_stop(coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->engine, NULL);
}

void cl_engine_submit(coll_comm *c, coll_req *r)
{
    pthread_mutex_lock(&c->mu);
    r->op.seq = ++c->seq;
    r->ticket = c->fam ? cl_family_ticket(c) : 0;
    r->next = NULL;
    if (c->qtail)
        c->qtail->next = r;
    else
        c->qhead = r;
    c->qtail = r;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int cl_engine_call(coll_comm *c, coll_req *r)
{
    pthread_mutex_lock(&c->mu);
    int here = !c->qhead && !c->busy;
    if (here) {
        c->busy = 1;
        r->op.seq = ++c->seq;
        r->ticket = c->fam ? cl_family_ticket(c) : 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (here) {
        run(c, r, 1);
        return r->status;
    }
    cl_engine_submit(c, r);
    pthread_mutex_lock(&c->mu);
    while (!r->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return r->status;
}
