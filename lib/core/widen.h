/* Narrow integer averages run wide (widen.c). */
#ifndef CL_WIDEN_H
#define CL_WIDEN_H

#include "collective.h"

#include "algo/algo.h"

/* COLL_AVG on a narrow integer type: run in int64 (widen.c). */
int cl_widen_wanted(const cl_op *op);
/* Runs r through `run` on int64 copies of its buffers and narrows the result back. */
int cl_run_widened(coll_comm *c, coll_req *r, int (*run)(coll_comm *, coll_req *));

#endif
