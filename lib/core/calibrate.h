/* What init measures on every rank at its end (calibrate.c): the link between hosts,
 * and the clock offset of a traced communicator. */
#ifndef CL_CALIBRATE_H
#define CL_CALIBRATE_H

#include "collective.h"

/* Measures the link between hosts for the cost model, on every rank at the end of
 * init (calibrate.c): nothing on one host or where the environment gave the link. */
int cl_calibrate(coll_comm *c);
/* With COLL_TRACE (after cl_calibrate): this process's clock offset against rank 0's,
 * from the fastest of a few round trips; what c did before is left out of the trace. A
 * failure is a warning (the trace unaligned). */
void cl_calibrate_clock(coll_comm *c);

#endif
