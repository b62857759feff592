/* The library's vocabulary: what its status codes, collective kinds, data types and
 * reductions are called, on the floor (libuv's uv-common) so that every layer names
 * what it reports without calling up into the core. Pure lookups over any value: no
 * state, no allocation. coll_strerror, the public one, is declared in collective.h. */
#ifndef CL_NAMES_H
#define CL_NAMES_H

#include "collective.h"

/* What a message belongs to (cl_msg_hdr.coll, wire.h) and what an operation is. */
enum cl_coll_kind {
    CL_ALLREDUCE = 1,
    CL_REDUCE_SCATTER,
    CL_ALLGATHER,
    CL_BROADCAST,
    CL_BARRIER,
    CL_SEND,
    CL_RECV,
    CL_SPLIT,
    CL_REDUCE,
    CL_GATHER,
    CL_SCATTER,
    CL_ALLTOALL,
    CL_ALLTOALLV,
    CL_ALLGATHERV,
    CL_REDUCE_SCATTERV,
    CL_KINDS
};

/* "allreduce", "send", ...; "invalid" for anything else. */
const char *cl_kind_name(int kind);
/* "float", "bfloat16", ...; "invalid" outside coll_dtype. */
const char *cl_dtype_name(int dtype);
/* "sum", "avg", ...; "invalid" outside coll_op. */
const char *cl_op_name(int op);

#endif
