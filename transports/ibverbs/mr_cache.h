/* Memory registrations of callers' buffers for zero-copy transfers. By default each
 * transfer registers its buffer and deregisters it when done: always correct, but pinning
 * costs time. COLL_IB_REG_CACHE=1 keeps registrations (up to 64, least recently used ones
 * go first) as Open MPI's leave_pinned does: faster for buffers used again and again, but
 * only safe if the program never frees a buffer and gets new memory at the same address
 * while the communicator lives (the cache would still point at the old, pinned pages). */
#ifndef CL_IB_MR_CACHE_H
#define CL_IB_MR_CACHE_H

#include "transports/ibverbs/verbs.h"

typedef struct cl_mr_cache cl_mr_cache;

cl_mr_cache *cl_mr_cache_new(const cl_verbs *v, struct ibv_pd *pd);
/* Deregisters everything; no registration may be in use. */
void cl_mr_cache_free(cl_mr_cache *mc);
/* A registration covering [addr, addr + len) with at least `access`, or NULL. */
struct ibv_mr *cl_mr_get(cl_mr_cache *mc, void *addr, size_t len, int access);
/* Ends one use of a registration from cl_mr_get. */
void cl_mr_put(cl_mr_cache *mc, struct ibv_mr *mr);

#endif
