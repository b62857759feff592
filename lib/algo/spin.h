/* A waiter's spin phase (spin.c). cl_spin_poll polls once and returns 1 while within the
 * budget (spin_us, or more after cl_spin_expect) of the last cl_spin_progress, of the
 * last bytes moved or of the last sleep; then it stops polling and returns 0: the caller
 * re-tests, then may sleep. cl_spin_stop before leaving. */
#ifndef CL_SPIN_H
#define CL_SPIN_H

#include "algo/ctx.h"

typedef struct cl_spin {
    const cl_algo_ctx *x;
    int64_t since;     /* us; 0: progress or bytes moved since the last poll */
    int64_t budget_us; /* how long to poll with nothing moving */
    int64_t done_at;   /* us; 0: a transfer completed since the last poll */
    int64_t slept_at;  /* us; when the spin last gave up, 0 if not since the progress */
    unsigned polls;    /* since the clock was last read */
    int64_t turn_at;   /* us; when this waiter first moved bytes since it last yielded */
    unsigned idle;     /* polls that moved nothing, likewise */
    int on;            /* between CL_POLL_BEGIN and CL_POLL_END */
    int quiet;         /* the waiter polls its own connection: the transport is not told */
    int slept;         /* this wait gave up its spin at least once */
} cl_spin;

cl_spin cl_spin_start(const cl_algo_ctx *x);
/* A spin for a waiter that polls one connection itself (recv_now) with nothing queued:
 * the same budget and turns, without the transport's poll. */
cl_spin cl_spin_quiet(const cl_algo_ctx *x);
/* Each step moves about `bytes`: the peer may go that long without moving any. */
void cl_spin_expect(cl_spin *s, size_t bytes);
void cl_spin_progress(cl_spin *s);
int cl_spin_poll(cl_spin *s);
void cl_spin_stop(cl_spin *s);

#endif
