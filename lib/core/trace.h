/* Traces (trace.c): with COLL_TRACE=DIR, every process writes the operations its
 * communicators ran as a Chrome trace-event file (Perfetto and chrome://tracing open it),
 * DIR/coll-trace-<job>-<rank>.json: one complete event per collective, send and receive,
 * pid its rank in the communicator coll_init made, tid the communicator; inside each
 * collective's, its passes (phases) and their steps on the same track, and its transfers
 * to and from each peer, a step at a time, on a track per peer and direction. The flight
 * recorder is the one place that records (record.h): its end hooks hand each finished
 * entry here. Clocks are aligned at init against rank 0's, so the files of a job merge
 * into one timeline (tools/coll_trace_merge.py). */
#ifndef CL_TRACE_H
#define CL_TRACE_H

#include "algo/tally.h"
#include "collective.h"

#include <stdint.h>

struct cl_rec_entry;
typedef struct cl_trace cl_trace;

/* COLL_TRACE's directory; NULL when it is unset or empty. */
const char *cl_trace_dir(void);
/* A new communicator's trace, when COLL_TRACE names a directory (NULL otherwise, or out
 * of memory); job: the job's name, in the file's. */
cl_trace *cl_trace_open(const char *job);
/* An entry of c's recorder that ended: copied (under a lock; only where tracing), with
 * the children its passes recorded (phases, steps, per-peer transfers; NULL: none). */
void cl_trace_add(cl_trace *t, const struct cl_rec_entry *e, const cl_spans *kids);
/* c goes: the process's file is written when its last traced communicator goes. */
void cl_trace_close(cl_trace *t, const coll_comm *c);
/* The alignment of clocks at init (calibrate.c): whether c is traced, with *offset the
 * process's offset to rank 0 so far (a grown communicator's rank 0 answers with it);
 * now on this process's clock (a test's skew included); and the outcome, kept for the
 * file (the first communicator's), what c did before left out of it. */
int cl_trace_offset(const coll_comm *c, double *offset);
double cl_trace_now_us(void);
void cl_trace_aligned(coll_comm *c, int rc, double offset, double rtt);

#endif
