/* A communicator fails (fail.c): its failure recorded (error.h), its links closed with
 * the farewell, every waiter woken. */
#ifndef CL_FAIL_H
#define CL_FAIL_H

#include "collective.h"

#include "algo/ctx.h"

/* Records the communicator's first failure with its sentence, closes every link so the
 * peers notice, and wakes every waiter. Later failures only count as errors. */
void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* cl_comm_fail's last part: closes c's links with the farewell that names the cause. */
void cl_comm_close_links(coll_comm *c, int status);
/* A call on c (fn) that cannot get the memory it needs: fails c, so the peers waiting
 * on this rank hear at once. Returns COLL_ENOMEM. */
int cl_comm_no_memory(coll_comm *c, const char *fn);
/* coll_abort, and destroy's abort of what is unfinished: c fails with COLL_EABORTED. */
void cl_comm_abort(coll_comm *c);
/* Where the communicator's algorithms report failures: cl_comm_fail and cl_comm_blame. */
cl_fail_hooks cl_comm_hooks(coll_comm *c);

#endif
