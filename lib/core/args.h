/* What the public entry points share (args.c): argument checks whose messages name the
 * call and the argument, and the launch of the request they build. */
#ifndef CL_ARGS_H
#define CL_ARGS_H

#include "core/comm.h"

/* What the blocking calls pass as `out`: run the operation and return its status. */
extern coll_req *cl_blocking;
#define CL_BLOCKING (&cl_blocking)

/* A call refused for a reason that leaves the communicator as it was (another thread is
 * inside a collective, a forced algorithm that cannot run it): logged at warn, and kept
 * as coll_last_error(c)'s sentence while the communicator has not failed. Returns
 * status. */
int cl_refuse(coll_comm *c, const char *fn, int status, const char *what);
/* A bad argument to a collective or point-to-point call: COLL_EINVAL, and (c not NULL)
 * the communicator fails with this sentence, so its peers learn at once (the farewell
 * names this rank and the cause) instead of waiting for this rank until the timeout. */
int cl_bad(coll_comm *c, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks shared by every operation; `blocks` elements of `count` move per rank; s and r
 * must not be NULL when count is not 0. Then the communicator's state. */
int cl_check(const char *fn, coll_comm *c, const void *s, const void *r, size_t count,
             size_t blocks, int dtype);
/* What a call reads, [s, s + sn), and writes, [r, r + rn), may overlap only in one of
 * the in-place layouts the call allows (`in_place`). */
int cl_check_overlap(const char *fn, coll_comm *c, const void *s, size_t sn, const void *r,
                     size_t rn, int in_place);
/* op is a coll_op that dtype has (bitwise ops on integer dtypes only). */
int cl_check_op(const char *fn, coll_comm *c, int op, int dtype);
int cl_check_root(const char *fn, coll_comm *c, int root);
/* COLL_ALGO forces an algorithm that cannot run this one (collective `kind`): COLL_ENOTSUP. */
int cl_check_algo(const char *fn, coll_comm *c, int kind, size_t count, coll_dtype dt,
                  coll_op op);
int cl_check_req(const char *fn, coll_comm *c, coll_req **req);
/* First in every non-blocking call: a request refused by any check is NULL, never what
 * the caller's variable held before (coll_wait(NULL) is COLL_EINVAL). */
void cl_clear_req(coll_req **req);

/* The communicator's codec applies where it can: f32 all-gathers and f32 sum/avg
 * all-reduces and reduce-scatters. Everything else moves uncompressed. */
coll_codec cl_codec_for(coll_comm *c, int kind, int dtype, int op);
/* Hands a request for op (its codec decided) to the engine (collectives) or the
 * transport (point-to-point); with CL_BLOCKING waits for it and returns its status, else
 * *out is the request (NULL when it could not start). */
int cl_launch(coll_comm *c, const cl_op *op, coll_req **out);
int cl_start(coll_comm *c, int kind, const void *s, void *r, size_t count, int dtype, int op,
             int root, uint32_t tag, coll_req **out);

#endif
