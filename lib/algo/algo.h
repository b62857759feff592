/* Algorithms: sequences of transport sends and receives plus local kernels, written once
 * against the transport contract. */
#ifndef CL_ALGO_H
#define CL_ALGO_H

#include "core/comm.h"

/* One segmented pipeline. Units are segments numbered in order, (n-1) steps of
 * segs_per_chunk units (broadcast: one step). Ring passes receive from `from` and send to
 * `to`; direct passes send step s to rank r+s+1 and receive from r-s-1. Send unit u may
 * start once `lag` fewer receive units completed than u + 1 (a forwarded segment must
 * have arrived first). What a unit's bytes are, and what happens when one arrives, is
 * the pass's ops: plain buffers, staging and reduction, or encoding and decoding. */
typedef struct pass pass;

typedef struct pass_ops {
    /* The bytes of send unit u: in a buffer, or written into `slot`. */
    const void *(*send)(pass *p, size_t u, void *slot, size_t *bytes);
    /* Where receive unit u lands (a buffer, or `slot`) and how many bytes it has. */
    void *(*recv)(pass *p, size_t u, void *slot, size_t *bytes);
    /* Receive unit u arrived at buf (NULL: nothing to do). */
    void (*arrived)(pass *p, size_t u, void *buf);
    /* Optional: bytes [off, off + n) of receive unit u, where the transport holds them
     * (a transport with irecv_sink); arrived() is then skipped for u. */
    void (*take)(pass *p, size_t u, size_t off, const void *bytes, size_t n);
} pass_ops;

typedef enum { CHUNKS_RS, CHUNKS_AG, CHUNKS_ONE, CHUNKS_DIRECT } chunk_order;

struct pass {
    coll_comm *comm;
    coll_req *req;
    const pass_ops *ops;
    chunk_order order;
    int from, to; /* ring peers; -1: this rank does not receive / send */
    size_t units, lag, segs_per_chunk, seg_elems, esize;
    size_t chunk_base, chunk_rem; /* chunk c: base + (c < rem) elements */
    size_t slot_bytes;            /* staging per in-flight unit; 0: none */
    const char *src;              /* this rank's contribution */
    char *acc;                    /* accumulation or the buffer itself */
    char *enc;                    /* encoded copy of the whole vector (codec all-gather) */
    float *residual, *tmp;        /* error feedback */
    coll_codec codec;
    int divide_last;
};

/* The chunk unit u belongs to, seen by the sender (recv = 0) or the receiver. */
size_t cl_unit_chunk(const pass *p, size_t u, int recv);
/* The element range [*off, *off + return) of unit u. */
size_t cl_unit_range(const pass *p, size_t u, int recv, size_t *off);
/* The peer unit u goes to (recv = 0) or comes from. */
int cl_unit_peer(const pass *p, size_t u, int recv);
/* A pass over `count` elements split in n chunks and segments of segment_bytes. */
pass cl_pass_init(coll_comm *c, coll_req *r, chunk_order order, size_t count, size_t esize,
                  size_t seg_align);

/* Runs the pipeline to completion; on failure fails the communicator. */
int cl_pass_run(pass *p);

/* Every collective, run on the engine thread. */
int cl_ring_allreduce(coll_comm *c, coll_req *r);
int cl_ring_reduce_scatter(coll_comm *c, coll_req *r);
int cl_ring_allgather(coll_comm *c, coll_req *r);
int cl_chain_broadcast(coll_comm *c, coll_req *r);
int cl_ring_barrier(coll_comm *c, coll_req *r);

/* All-gather's first step: this rank's block moves from sendbuf to its place in recvbuf
 * (in place with the block at the start of the buffer, sendbuf == recvbuf, included). */
void cl_place_own_block(coll_comm *c, coll_req *r);

/* Small all-reduces on a power-of-two number of ranks: recursive doubling. */
#define CL_DOUBLING_BYTES (64u * 1024u)
int cl_doubling_fits(const coll_comm *c, size_t bytes);
int cl_doubling_allreduce(coll_comm *c, coll_req *r);
/* Payload bytes this rank sends for an uncompressed all-reduce, by the algorithm chosen. */
size_t cl_allreduce_bytes_sent(const coll_comm *c, size_t count, size_t esize);

/* The codec forms (f32; sum/avg): every contribution encoded once, accumulated in f32
 * by its chunk's owner; the owner encodes the result once and the ring forwards those
 * bytes unchanged, so every rank decodes the same bits. */
int cl_codec_allreduce(coll_comm *c, coll_req *r);
int cl_codec_reduce_scatter(coll_comm *c, coll_req *r);
int cl_codec_allgather(coll_comm *c, coll_req *r);

#endif
