/* The collective set's cases of the matrix (matrix_set.c): reduce, gather, scatter,
 * all-to-all(v), all-gather-v and reduce-scatter-v, in place and not, any root, ragged
 * counts with gaps between blocks, against the exact reference. 0 when right. */
#ifndef CL_MATRIX_SET_H
#define CL_MATRIX_SET_H

#include "collective.h"

#include <stddef.h>

/* s and r hold at least (count + 8) * n * 9 elements of the largest dtype. Reductions
 * with the first nops ops that dt has (the bitwise ones on integer dtypes only). */
int set_cases(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int nops);

#endif
