/* A communicator's failure (error.c): the sticky first one, its sentence and where it
 * began, recorded and read; and the sentence of a failed init, split, shrink or grow.
 * Acting on a failure is fail.h's. */
#ifndef CL_ERROR_H
#define CL_ERROR_H

#include "collective.h"

/* Records c's first failure (1: it was the first; later ones change nothing) and wakes
 * every waiter; reads where it began. */
int cl_comm_record(coll_comm *c, int status, const char *msg);
void cl_comm_cause(coll_comm *c, int *rank, int *status, int *silent_ms);
/* Before cl_comm_fail: the failure began at `rank` with `status`, not here; silent_ms >
 * 0: the heartbeat found that rank silent this long (beat.c), and the farewell says so. */
void cl_comm_blame(coll_comm *c, int rank, int status, int silent_ms);
/* COLL_OK, or what a new or queued operation must return on a failed communicator. */
int cl_comm_state(coll_comm *c);

/* Where the last failed init, split, shrink or grow on this thread said why, for
 * coll_last_error(NULL): written by cl_comm_init_error, or by init (init.c) handing it
 * whole to the steps of its rendezvous, which write their reasons into a buffer. */
enum { CL_INIT_ERR_BYTES = 512 };
extern __thread char cl_init_err[CL_INIT_ERR_BYTES];
void cl_comm_init_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
