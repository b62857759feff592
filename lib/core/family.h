/* Families of communicators that share one set of links (COLL_SPLIT_SHARE=1, as NCCL's
 * splitShare): a split's communicator uses its root's transport context, listener and
 * connections (the root: the first communicator split this way; a split of a split joins
 * the same family), so a split costs its parent one all-gather and no connection the
 * root already has.
 *
 * The price is what sharing a wire means:
 * - Collectives run in issue order across the family (each takes a ticket when issued),
 *   so every rank must issue the family's collectives in the same order, as with
 *   communicators that share a stream; point-to-point messages between two ranks match
 *   in posting order across the family. Every message carries its communicator's mark
 *   (cl_msg_hdr.flags), so an order that differs between ranks fails with
 *   COLL_EMISMATCH instead of mixing data.
 * - One fate: a failure or an abort of any member fails every member on this rank (the
 *   links it leaves are no longer in step) and closes the links, so peers fail too.
 * - The root's links outlive its coll_destroy while members still use them. */
#ifndef CL_FAMILY_H
#define CL_FAMILY_H

#include "collective.h"

#include <stdint.h>

/* Makes child (its to_root, size and rank set) a member of parent's family, parent its
 * root if it had none: COLL_OK or COLL_ENOMEM. */
int cl_family_join(coll_comm *parent, coll_comm *child);
/* The communicator whose links c uses: its family's root, or c itself. */
coll_comm *cl_family_root(const coll_comm *c);
/* c's rank for rank r of its root (-1: not a member); r itself without a family. */
int cl_family_rank(const coll_comm *c, int r);
/* A turn for an operation issued on c now (issue order); 0 when c has no family. */
uint64_t cl_family_ticket(coll_comm *c);
/* Waits until every earlier turn of c's family is done (returns at once for 0). */
void cl_family_turn(coll_comm *c, uint64_t ticket);
/* The operation holding this turn is over: the next may run. */
void cl_family_done(coll_comm *c, uint64_t ticket);
/* Member c fails with status and msg: every member's failure is recorded with it.
 * Returns the root when its state failed first here (its links must close now, once),
 * else NULL: closing is the caller's (error.c), so the family never calls back up. */
coll_comm *cl_family_fail(coll_comm *c, int status, const char *msg);
/* c leaves its family (coll_destroy): 1 when its memory may go now, 0 when c is a root
 * whose links members still use (freed when the last of them leaves). *last is set to
 * a root left behind that goes now too, else NULL. */
int cl_family_leave(coll_comm *c, coll_comm **last);

#endif
