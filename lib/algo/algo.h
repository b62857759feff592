/* Algorithms: sequences of transport sends and receives plus local kernels, written once
 * against the transport contract. */
#ifndef CL_ALGO_H
#define CL_ALGO_H

#include "../core/comm.h"

/* One segmented pipeline over a ring link: receive from `from`, send to `to`.
 * Units are segments numbered in order; send unit u may start once `lag` fewer receive
 * units completed than u + 1 (a forwarded segment must have arrived first). */
enum pass_mode { PASS_RS, PASS_AG, PASS_BCAST };

typedef struct pass {
    coll_comm *comm;
    coll_req *req;
    enum pass_mode mode;
    int from, to; /* peer ranks; -1: this rank does not receive / send */
    size_t units, lag, segs_per_chunk, seg_elems, esize;
    size_t chunk_base, chunk_rem; /* chunk c: base + (c < rem) elements */
    const char *src;              /* RS: this rank's contribution */
    char *acc;                    /* RS: accumulation; AG, bcast: the buffer itself */
    int divide_last;              /* RS with avg: divide the owned chunk once complete */
} pass;

/* Runs the pipeline to completion; on failure fails the communicator. */
int cl_pass_run(pass *p);

/* Every collective, run on the engine thread. */
int cl_ring_allreduce(coll_comm *c, coll_req *r);
int cl_ring_reduce_scatter(coll_comm *c, coll_req *r);
int cl_ring_allgather(coll_comm *c, coll_req *r);
int cl_chain_broadcast(coll_comm *c, coll_req *r);
int cl_ring_barrier(coll_comm *c, coll_req *r);

#endif
