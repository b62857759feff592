/* Requests (req.c): waited on, handed to the caller, settled when their communicator goes. */
#ifndef CL_REQ_H
#define CL_REQ_H

#include "collective.h"

/* Waits until a request is done; frees it; returns its status. */
int cl_req_wait(coll_req *r);
/* r goes to the caller: it stays valid until coll_wait, whatever happens to its comm. */
void cl_req_hand_out(coll_comm *c, coll_req *r);
/* coll_destroy's first part: aborts c if anything is unfinished, waits (bounded by the
 * timeout) for the callers inside c to leave, stops the engine, and leaves every
 * request handed out finished, with its status and no communicator. COLL_ETIMEDOUT
 * when a caller stayed inside (c must not be freed then). */
int cl_comm_settle(coll_comm *c);

#endif
