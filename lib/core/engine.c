/* The per-communicator progress engine: a thread that runs queued collectives in order,
 * like a stream. Callers enqueue and return (non-blocking) or enqueue and wait; a
 * blocking call that finds nothing queued or running runs on its own thread instead, as
 * MPI does: two thread hand-offs (to the engine and back) cost more than a small
 * all-reduce itself. One collective runs at a time either way (CL_GATE_BUSY), in issue order.
 * It never runs point-to-point messages: those go to the transport directly so a
 * receive never queues behind a send. The members of a family that shares links
 * (family.h) run their collectives in their turns, in issue order across the family. */
#include "core/engine.h"
#include "core/comm.h"
#include "core/record.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/choose.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/family.h"
#include "core/widen.h"
#include "kernels/codec.h"

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
    const cl_algo *a = cl_choose(&c->topo, c->force, op, why, len);
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
    cl_rec_start(c, &r->op, a->name);
    int64_t t0 = cl_log_enabled(COLL_LOG_DEBUG) ? cl_now_us() : 0;
    uint64_t quick = t0 ? atomic_load(&c->ran.quick) : 0;
    int rc = a->run(cl_topo_ctx(&c->topo, a, &r->op), &r->op);
    if (t0)
        tell_done(c, a, &r->op, rc, t0, quick);
    return rc;
}

int cl_run_collective(coll_comm *c, coll_req *r)
{
    return cl_widen_wanted(&r->op) ? cl_run_widened(c, r, run_one) : run_one(c, r);
}

/* In one step: adds `add` (CL_GATE_ISSUE: one more collective issued), sets `set` and
 * clears `clear`; 0 with nothing changed if a bit of `unless` is set. *seq: the
 * collectives issued after it, the number of the one it issued. */
static int gate_move(coll_comm *c, uint64_t unless, uint64_t add, uint64_t set, uint64_t clear,
                     uint32_t *seq)
{
    uint64_t g = atomic_load_explicit(&c->gate, memory_order_relaxed), to;
    do {
        if (g & unless)
            return 0;
        to = ((g + add) | set) & ~clear;
    } while (!atomic_compare_exchange_weak_explicit(&c->gate, &g, to, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (seq)
        *seq = (uint32_t)(to / CL_GATE_ISSUE);
    return 1;
}

static coll_req *next_request(coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    while ((!c->qhead || (atomic_load(&c->gate) & CL_GATE_BUSY)) && !c->stop)
        pthread_cond_wait(&c->cv, &c->mu);
    coll_req *r = c->qhead;
    if (r) {
        c->qhead = r->next;
        if (!c->qhead)
            c->qtail = NULL;
        gate_move(c, 0, 0, CL_GATE_BUSY, c->qhead ? 0 : CL_GATE_QUEUED, NULL);
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
    if (by_caller) {
        r->status = status;
        r->done = 1;
        if (!(atomic_fetch_and(&c->gate, ~(uint64_t)CL_GATE_BUSY) & CL_GATE_QUEUED))
            return;
    }
    pthread_mutex_lock(&c->mu);
    if (!by_caller) {
        r->status = status;
        r->done = 1;
        atomic_fetch_and(&c->gate, ~(uint64_t)CL_GATE_BUSY);
    }
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
    /* A failure that came after this call was issued (the heartbeat's, while it waited
     * its turn) is the call's own news, its cause's code (EPEER, ETIMEDOUT): ESTATE is for
     * calls issued on a communicator that had failed already (api.c says it at once). */
    int rc = cl_comm_state(c);
    if (rc == COLL_ESTATE)
        rc = __atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
    if (rc == COLL_OK && (rc = cl_run_collective(c, r)) != COLL_OK && cl_comm_state(c) == COLL_OK)
        cl_comm_fail(c, rc, "rank %d %s #%u: %s", c->rank, cl_kind_name(r->op.kind), r->op.seq,
                     coll_strerror(rc));
    cl_buf_settle(&c->scratch, CL_KEEP_BYTES);
    cl_buf_settle(&c->staging, CL_KEEP_BYTES);
    if (r->ticket)
        cl_family_done(c, r->ticket);
    cl_rec_end(c, &r->op, rc);
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
    gate_move(c, 0, CL_GATE_ISSUE, CL_GATE_QUEUED, 0, &r->op.seq);
    cl_rec_issue(c, &r->op, 0);
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

/* Claims the idle communicator for the caller's thread: 1 with r's sequence number. */
static int claim(coll_comm *c, coll_req *r)
{
    return gate_move(c, CL_GATE_BUSY | CL_GATE_QUEUED, CL_GATE_ISSUE, CL_GATE_BUSY, 0, &r->op.seq);
}

/* A family's turns are handed out under c->mu with the sequence numbers (submit): a
 * member's claim takes it too. */
int cl_engine_call(coll_comm *c, coll_req *r)
{
    int here = !c->fam && claim(c, r);
    if (!here && c->fam) {
        pthread_mutex_lock(&c->mu);
        if ((here = claim(c, r)))
            r->ticket = cl_family_ticket(c);
        pthread_mutex_unlock(&c->mu);
    }
    if (here) {
        cl_rec_issue(c, &r->op, 1);
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
