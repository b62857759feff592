/* The names of statuses, kinds, dtypes and reductions: see names.h. */
#include "base/names.h"

const char *coll_strerror(int status)
{
    switch (status) {
    case COLL_OK: return "success";
    case COLL_INPROGRESS: return "operation in progress";
    case COLL_EINVAL: return "invalid argument";
    case COLL_ENOMEM: return "out of memory";
    case COLL_ENOTSUP: return "not supported";
    case COLL_ESYS: return "system call failed";
    case COLL_ETIMEDOUT: return "timed out";
    case COLL_EPEER: return "peer closed, reset or unreachable";
    case COLL_EMISMATCH: return "ranks disagree on the operation";
    case COLL_EABORTED: return "aborted";
    case COLL_ESTATE: return "communicator already failed";
    case COLL_EPROTO: return "protocol error (bad magic, version or secret)";
    default: return "unknown status";
    }
}

const char *cl_kind_name(int kind)
{
    static const char *names[] = {"invalid",  "allreduce",  "reduce_scatter", "allgather",
                                  "broadcast", "barrier",   "send",           "recv",
                                  "split",    "reduce",     "gather",         "scatter",
                                  "alltoall", "alltoallv",  "allgatherv",     "reduce_scatterv"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == CL_KINDS, "a name for every kind");
    return kind >= CL_ALLREDUCE && kind < CL_KINDS ? names[kind] : names[0];
}

const char *cl_dtype_name(int dtype)
{
    static const char *names[] = { "float", "double", "half", "bfloat16",
                                   "int8", "uint8", "int32", "int64" };
    _Static_assert(sizeof(names) / sizeof(names[0]) == COLL_I64 + 1, "a name for every dtype");
    return dtype >= COLL_F32 && dtype <= COLL_I64 ? names[dtype] : "invalid";
}

const char *cl_op_name(int op)
{
    static const char *names[] = { "sum", "prod", "min", "max", "avg", "band", "bor", "bxor" };
    _Static_assert(sizeof(names) / sizeof(names[0]) == COLL_BXOR + 1, "a name for every op");
    return op >= COLL_SUM && op <= COLL_BXOR ? names[op] : "invalid";
}
