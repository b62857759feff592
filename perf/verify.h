/* Deterministic test data and exact references for collectives, shared by coll_perf's
 * #wrong column and the test suite. Values are small integers, so every dtype (bf16
 * included) represents sums of up to 8 ranks exactly. */
#ifndef CL_VERIFY_H
#define CL_VERIFY_H

#include "collective.h"

#include <stddef.h>

/* op is defined on dt: the bitwise ops on integer dtypes only. */
int cl_op_fits(coll_dtype dt, coll_op op);
/* The value rank `rank` contributes at element index i. */
double cl_val(int rank, size_t i, coll_op op);
/* buf[k] = cl_val(rank, first + k, op) for k < count. */
void cl_fill(void *buf, size_t count, coll_dtype dt, coll_op op, int rank, size_t first);
/* Elements of buf (holding indices first..first+count-1 of the reduction over nranks)
 * that differ from the reference. */
size_t cl_check_reduce(const void *buf, size_t count, coll_dtype dt, coll_op op, int nranks,
                       size_t first);
/* An absolute error every later check allows (a lossy wire codec); 0 by default. */
void cl_verify_tolerance(double abs_tol);
/* Elements of buf (what `rank` filled at indices first..first+count-1) that differ. */
size_t cl_check_from(const void *buf, size_t count, coll_dtype dt, coll_op op, int rank,
                     size_t first);
/* Elements of buf (nranks blocks of count, block r from rank r, filled with op) that differ. */
size_t cl_check_gather(const void *buf, size_t count, coll_dtype dt, coll_op op, int nranks);

#endif
