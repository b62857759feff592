/* Point-to-point (p2p.c): messages posted to the transport at once, never queued behind
 * collectives. */
#ifndef CL_P2P_H
#define CL_P2P_H

#include "collective.h"

/* Point-to-point requests bypass the engine: posted to the transport at once. */
int cl_p2p_post(coll_comm *c, coll_req *r);
/* A blocking send or receive by the transport's fast path, done on return, or
 * COLL_INPROGRESS: it did not apply and nothing was done (post it instead). */
int cl_p2p_now(coll_comm *c, coll_req *q);
int cl_p2p_test(coll_req *r, int *done);
/* A family member going away: its held requests (left to the transport by destroy)
 * leave its root's list. */
void cl_p2p_forget(coll_comm *c);
/* Posts the held p2p requests whose links opened: 1 while some are still held. */
int cl_p2p_progress(coll_comm *c);

#endif
