/* Element-wise reduction kernels for every dtype x op. */
#ifndef CL_REDUCE_H
#define CL_REDUCE_H

#include "collective.h"

#include <stddef.h>

/* Bytes per element, or 0 for a value outside coll_dtype. */
size_t cl_dtype_size(int dtype);
/* op is a coll_op value. */
int cl_op_valid(int op);
/* COLL_BAND, COLL_BOR or COLL_BXOR: no arithmetic, integer dtypes only. */
int cl_op_bitwise(int op);
/* op is valid and defined on dtype (bitwise ops on integers only). */
int cl_op_serves(int op, int dtype);

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b. COLL_AVG sums here: the
 * division happens once, in cl_divide, where the sum is complete. f16/bf16 go through
 * f32 and round once per call. Bitwise ops: integer dtypes only (cl_op_serves). */
void cl_reduce(void *dst, const void *a, const void *b, size_t n, coll_dtype dtype, coll_op op);

/* The last step of an average: dst[i] = (a[i] + b[i]) / k, the same numbers cl_reduce
 * then cl_divide give, in one pass; f16/bf16 divide the f32 sum and round once (where
 * the sum rounded to 16 bits would overflow or round, this differs, rightly). */
void cl_reduce_avg(void *dst, const void *a, const void *b, size_t n, coll_dtype dtype, int k);

/* buf[i] /= divisor, in place (integers truncate toward zero). */
void cl_divide(void *buf, size_t n, coll_dtype dtype, int divisor);

#endif
