/* What the shrink tests check of a survivors' communicator. */
#ifndef CL_TEST_SURVIVORS_H
#define CL_TEST_SURVIVORS_H

#include "collective.h"

/* s holds exactly the ranks in `alive` (bits of their first ranks), in that order, with
 * this rank (first rank `orig`) in its place; three all-reduces of first ranks on it are
 * right. COLL_OK; an all-reduce's error (the caller may shrink again); or 1, with what
 * was wrong printed, where s is wrong. */
int survivors_check(coll_comm *s, int orig, unsigned alive);

/* One all-reduce of first ranks on s: the sum of the bits of `alive` when COLL_OK. */
int survivors_sum(coll_comm *s, int orig, unsigned alive);

#endif
