/* The engine (engine.c): runs a communicator's collectives one at a time, in issue order. */
#ifndef CL_ENGINE_H
#define CL_ENGINE_H

#include "collective.h"

#include "core/comm.h"

#include <stdatomic.h>
#include <stdint.h>

/* The gate (coll_comm.gate): one word for the collectives issued, whether one runs and
 * whether any is queued, so that a blocking call on an idle communicator claims it, and
 * later lets it go, with one atomic operation each and no lock. The two lock pairs it
 * took before cost a 2-rank 8-byte all-reduce 5-7% of its time here. The queue's writers
 * hold c->mu too; QUEUED stays set while the queue holds anything, so a claim never jumps
 * it. */
enum { CL_GATE_BUSY = 1, CL_GATE_QUEUED = 2, CL_GATE_ISSUE = 4 };

/* The engine's thread, and the collectives handed to it. */
int cl_engine_start(coll_comm *c);
void cl_engine_stop(coll_comm *c);
void cl_engine_submit(coll_comm *c, coll_req *r);
/* A blocking collective: runs r on the calling thread when nothing is queued or running,
 * else queues it behind the others and waits. r is the caller's; returns its status. */
int cl_engine_call(coll_comm *c, coll_req *r);

/* The collectives issued on c so far (the last one's sequence number). Read where the
 * engine's state is reported (the farewell, the recorder, the status endpoint, the
 * heartbeat): a read of the gate, inline so that none of them calls into the engine. */
static inline uint32_t cl_engine_issued(const coll_comm *c)
{
    return (uint32_t)(atomic_load_explicit(&c->gate, memory_order_relaxed) / CL_GATE_ISSUE);
}

/* Whether no collective runs nor waits in the queue. */
static inline int cl_engine_idle(const coll_comm *c)
{
    return !(atomic_load(&c->gate) & (CL_GATE_BUSY | CL_GATE_QUEUED));
}

/* Runs one collective to completion (engine thread or cl_engine_call); returns its status. */
int cl_run_collective(coll_comm *c, coll_req *r);

#endif
