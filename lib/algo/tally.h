/* What a pass tells the flight recorder as it runs (the storage is the recorder's,
 * core/record.h): the bytes it moved by peer, always; with COLL_TRACE also its phases,
 * steps and per-peer transfers, which the trace writes as the collective's children
 * (core/trace.c). One writer at a time: the thread running the collective. */
#ifndef CL_ALGO_TALLY_H
#define CL_ALGO_TALLY_H

#include <stddef.h>
#include <stdint.h>

/* Bytes by peer in a fixed handful of slots and one bucket for the rest, not an array
 * of the communicator's size: a recorder keeps 64 entries, and 64 x 128 ranks x 16 B is
 * 128 KiB per communicator of counts mostly zero, which every issue would have to clear
 * (an 8-byte all-reduce takes a microsecond). Six slots name every peer of the ring (2),
 * a hierarchical lane (4: the ring in its host and across) and the double binary tree
 * (a parent and two children in each tree); doubling, Bruck and the direct all-to-all
 * fill them with their first six peers and count the others together. */
#define CL_PEER_SLOTS 6

typedef struct cl_moved {
    uint32_t used;                 /* slots taken, in order: stored after a slot's fields */
    int32_t who[CL_PEER_SLOTS];    /* the communicator rank */
    uint64_t other_tx, other_rx;   /* peers past the slots (cleared with the first slot) */
    uint64_t tx[CL_PEER_SLOTS], rx[CL_PEER_SLOTS]; /* header + payload bytes */
} cl_moved;

/* A child of a traced collective: a pass (phase), one of its steps, or the transfers of
 * one step to or from one peer. */
enum { CL_SPAN_PHASE, CL_SPAN_STEP, CL_SPAN_SEND, CL_SPAN_RECV };

typedef struct cl_span {
    uint64_t start, end;   /* base/clock.h ticks */
    uint64_t bytes;        /* transfers: header + payload */
    uint32_t messages;     /* transfers: how many (each a header's 32 bytes) */
    const char *name;      /* the phase's ("reduce-scatter", "all-gather" ...) */
    const char *scope;     /* where its ring runs: "" (all ranks), "host", "across hosts" */
    int32_t peer;          /* transfers: the communicator rank; else -1 */
    int32_t step;          /* steps and transfers: the pass's step; phases: -1 */
    uint8_t what;          /* CL_SPAN_* */
} cl_span;

/* The running collective's children (kept by the recorder while COLL_TRACE is set). */
typedef struct cl_spans {
    cl_span *s;
    uint32_t n, cap, dropped;
    uint32_t phase;     /* the open phase's index + 1; 0: none (or it was dropped) */
    uint32_t depth;     /* passes open: a pass run inside another's is part of it */
    uint64_t step_from; /* where the open phase's next step begins */
} cl_spans;

/* The flight recorder's running collective, as a pass sees it (cl_algo_ctx.running). */
typedef struct cl_running {
    cl_moved *moved; /* its entry's counts; NULL: none (or its entry was taken) */
    cl_spans *spans; /* NULL: not traced */
} cl_running;

static inline void cl_moved_put(uint64_t *k, uint64_t v)
{
    __atomic_store_n(k, __atomic_load_n(k, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

/* `bytes` moved to (recv 0) or from communicator rank `peer`. A new peer's slot is
 * filled before `used` counts it, so a reader sees only whole slots; an entry is made
 * empty at issue by one store (used = 0: the others' bucket is cleared with slot 0). */
static inline void cl_moved_add(const cl_running *run, int peer, int recv, uint64_t bytes)
{
    cl_moved *m = run ? run->moved : NULL;
    if (!m)
        return;
    uint32_t used = __atomic_load_n(&m->used, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < used; i++)
        if (m->who[i] == peer) {
            cl_moved_put(recv ? &m->rx[i] : &m->tx[i], bytes);
            return;
        }
    if (used == CL_PEER_SLOTS) {
        cl_moved_put(recv ? &m->other_rx : &m->other_tx, bytes);
        return;
    }
    if (!used) {
        __atomic_store_n(&m->other_tx, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&m->other_rx, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&m->who[used], peer, __ATOMIC_RELAXED);
    __atomic_store_n(&m->tx[used], recv ? 0 : bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&m->rx[used], recv ? bytes : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->used, used + 1, __ATOMIC_RELEASE);
}

/* The spans of a traced collective (tally.c); each a no-op on a NULL spans. */
static inline cl_spans *cl_traced(const cl_running *run)
{
    return run ? run->spans : NULL;
}
/* Now, in the recorder's ticks. */
uint64_t cl_span_clock(void);
/* A pass begins (phases do not nest: a pass inside another's is not one of its own). */
void cl_span_phase(cl_spans *s, const char *name, const char *scope);
/* The open pass ended. */
void cl_span_phase_end(cl_spans *s);
/* Step `step` of the open pass ended at tick `end` (it began where the one before it
 * ended, or with the pass). */
void cl_span_step(cl_spans *s, int step, uint64_t end);
/* A transfer of `bytes` to (recv 0) or from `peer`, posted at `start` and completed at
 * `end`, part of `step`: added to that peer's span of the step, each peer's spans
 * kept one after another (a link carries its messages in order). */
void cl_span_transfer(cl_spans *s, int recv, int peer, int step, uint64_t start, uint64_t end,
                      uint64_t bytes);

#endif
