/* --elastic: what a trainer keeps to redo a step after a lost rank. The weights and
 * optimizer state as each of the last two steps began: a rank can finish the step its
 * peers failed in (its all-reduce completed, theirs did not), never more. */
#ifndef EX_UNDO_H
#define EX_UNDO_H

#include "collective.h"

#include <stddef.h>

typedef struct {
    float *slot[2];
    size_t n;
} ex_undo;

/* n: how many floats of weights (and as many of optimizer state) are kept. */
int ex_undo_init(ex_undo *u, size_t n);
void ex_undo_free(ex_undo *u);
/* Keeps w and v as step k begins. */
void ex_undo_keep(ex_undo *u, size_t k, const float *w, const float *v);
/* After a shrink, on the survivors' communicator c: the first step not every rank
 * finished (k: where this rank failed; the epoch's close counts as the step after the
 * last) into *from, and w and v back to how it began. COLL_OK, or a COLL_E* code. */
int ex_undo_agree(ex_undo *u, coll_comm *c, size_t k, float *w, float *v, size_t *from);

#endif
