/* Algorithms: sequences of transport sends and receives plus local kernels, written once
 * against the transport contract. Each file in lib/algo defines one algorithm (a cl_algo:
 * name, the collectives it serves, where it fits, what it costs, how it runs); table.c
 * lists them, and the engine picks from that list. */
#ifndef CL_ALGO_H
#define CL_ALGO_H

#include "algo/ctx.h"
#include "algo/spin.h"

/* What an algorithm moves for one operation on this rank: messages on its critical path
 * (each costs a latency) and payload bytes it sends, and what of that crosses between
 * hosts. The engine prices these with its two-class link model; coll_allreduce_wire_bytes
 * reports `bytes`. */
typedef struct cl_cost {
    double steps;
    size_t bytes;
    /* Of those, the steps that wait on a link between hosts, and the bytes the busiest
     * host link carries each way (0 on one host). */
    double xsteps, xbytes;
    /* Bytes reduced between steps instead of under the next transfer (the ring's
     * pipeline hides its reductions; a step-by-step algorithm's wait for them). */
    double serial;
} cl_cost;

typedef struct cl_algo {
    const char *name;
    unsigned serves; /* CL_SERVES(kind) for each collective it runs */
    /* Can it run this operation on this communicator (rank count, size, codec)? */
    int (*fits)(const cl_algo_ctx *x, const cl_op *op);
    /* What position x->rank moves: the engine also asks it for other positions (a copy
     * of x with another rank), so it may depend on x->rank but on nothing else of this
     * rank's own. Every rank must compute the same choice. */
    cl_cost (*cost)(const cl_algo_ctx *x, const cl_op *op);
    /* Runs the operation to completion; on failure has reported it (cl_algo_fail). */
    int (*run)(const cl_algo_ctx *x, cl_op *op);
    /* CL_SERVES of the collectives laid out by rank number (reduce-scatter, all-gather,
     * barrier, a broadcast's root) that it runs on positions in host order, mapping each
     * position's block back to its rank; an all-reduce always runs in host order. */
    unsigned placed;
} cl_algo;

#define CL_SERVES(kind) (1u << (kind))

/* Every algorithm, NULL-terminated. */
extern const cl_algo *const cl_algos[];
/* The algorithm of that name, or NULL. */
const cl_algo *cl_algo_named(const char *name);

extern const cl_algo cl_algo_ring;         /* ring.c */
extern const cl_algo cl_algo_doubling;     /* doubling.c */
extern const cl_algo cl_algo_chain;        /* chain.c */
extern const cl_algo cl_algo_codec;        /* codec_ring.c */
extern const cl_algo cl_algo_direct;       /* direct.c */
extern const cl_algo cl_algo_ring_gather;  /* direct.c: reduce */
extern const cl_algo cl_algo_hier;         /* hier.c */
extern const cl_algo cl_algo_rabenseifner; /* rabenseifner.c */
extern const cl_algo cl_algo_bruck;        /* bruck.c */
extern const cl_algo cl_algo_binomial;     /* binomial.c */
extern const cl_algo cl_algo_tree;         /* tree.c */

/* ---- the pipeline every algorithm runs on (pass.c) --------------------------------- */

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
    /* Optional, a routed pass: the peer send unit u goes to (recv = 0) or receive unit u
     * comes from, for `sends` and `recvs` units of the pass's own choosing. A routed pass
     * sends a peer's units one after another (their headers' unit is 0: a link keeps
     * their order), and its sends wait for nothing (lag = units) unless lag says
     * otherwise. */
    int (*peer)(const pass *p, size_t u, int recv);
    /* Optional: the header's count for send unit u (recv = 0), or the count this rank
     * expects in receive unit u's header; default: the op's count. */
    uint64_t (*count)(const pass *p, size_t u, int recv);
    /* Optional: how many receive units must have completed before send unit u may go
     * (a tree's node forwards what its children sent); default: by lag. */
    size_t (*needs)(const pass *p, size_t u);
} pass_ops;

typedef enum { CHUNKS_RS, CHUNKS_AG, CHUNKS_ONE, CHUNKS_DIRECT } chunk_order;

struct pass {
    const cl_algo_ctx *x;
    const cl_op *op;
    const pass_ops *ops;
    chunk_order order;
    int from, to; /* ring peers; -1: this rank does not receive / send */
    size_t units, lag, segs_per_chunk, seg_elems, esize;
    size_t sends, recvs;          /* units each way: set by the run, or by a routed pass */
    size_t chunk_base, chunk_rem; /* chunk c: base + (c < rem) elements */
    size_t slot_bytes;            /* staging per in-flight unit; 0: none */
    const char *src;              /* this rank's contribution */
    char *acc;                    /* accumulation or the buffer itself */
    char *enc;                    /* encoded copy of the whole vector (codec all-gather) */
    float *residual, *tmp;        /* error feedback */
    coll_codec codec;
    int divide_last;
    const void *plan; /* a routed pass's own layout of its units (direct.c) */
    /* Chunk c is block blocks[c] of the buffer (NULL: block c): the communicator rank at
     * position c, for a collective laid out by rank run in host order. */
    const int *blocks;
    /* Nonzero: chunk b is elements [b * stride + first, + chunk_base) of the buffers (a
     * slice of every rank's block: one round of a reduce-scatter, whose acc holds the
     * slices packed); 0: chunks follow one another. */
    size_t stride, first;
    /* Optional (cl_pass_chunks): chunk c is elements [chunks[c], chunks[c + 1]). */
    const size_t *chunks;
    /* Optional: work that moves no message (a block this rank keeps), done a piece at a
     * time between the transfers' polls, so it overlaps them: the piece from *at on,
     * advancing *at; returns 0 once all is done. Skipped if the pass fails. */
    int (*meanwhile)(pass *p, size_t *at);
};

/* The chunk unit u belongs to, seen by the sender (recv = 0) or the receiver. */
size_t cl_unit_chunk(const pass *p, size_t u, int recv);
/* The element range [*off, *off + return) of unit u. */
size_t cl_unit_range(const pass *p, size_t u, int recv, size_t *off);
/* The peer unit u goes to (recv = 0) or comes from. */
int cl_unit_peer(const pass *p, size_t u, int recv);
/* A pass over `count` elements split in n chunks and segments of segment_bytes. */
pass cl_pass_init(const cl_algo_ctx *x, const cl_op *op, chunk_order order, size_t count,
                  size_t esize, size_t seg_align);

/* Uneven chunks: chunk c of the pass is elements [chunks[c], chunks[c + 1]) (size + 1
 * entries, kept by the caller while the pass runs); segments as cl_pass_init's. */
void cl_pass_chunks(pass *p, const size_t *chunks);

/* Runs the pipeline to completion; on failure reports it (cl_algo_fail). */
int cl_pass_run(pass *p);

/* Runs n (at most CL_PASS_MAX_FLIGHTS) passes at once, each in its own order, so one
 * waiting on a peer never holds another back (a double tree's two trees). Passes that
 * share a link in one direction must not run together: a link matches in posting order. */
enum { CL_PASS_MAX_FLIGHTS = 2 };
int cl_pass_run_all(pass *ps, int n);

/* ---- pieces the algorithms share --------------------------------------------------- */

/* Units straight into the op's buffer (pass.acc) and forwarded from there: all-gather
 * and broadcast. */
extern const pass_ops cl_plain_ops;

/* A reduce-scatter or all-gather a slice of every block at a time, so its scratch is n
 * slices (at most CL_ROUND_SEGMENTS segments in all: 8 MiB by default), not n blocks:
 * round() gets the scratch and the slice [first, first + len) of every block (count
 * elements each), at least once (count 0: len 0), until one fails. */
typedef int (*cl_round_fn)(const cl_algo_ctx *x, const cl_op *op, char *scratch, size_t first,
                           size_t len);
int cl_in_rounds(const cl_algo_ctx *x, const cl_op *op, cl_round_fn round);
#define CL_ROUND_SEGMENTS 16

/* An operation on a vector a window of it at a time (CL_ROUND_SEGMENTS segments, at
 * least one element per rank), each window an operation of its own for fn: sbuf, rbuf
 * (unless NULL) and residual moved to the window, count its length; at least once (count
 * 0: an empty window), until one fails. What fn needs beside the window is bounded by it. */
typedef int (*cl_window_fn)(const cl_algo_ctx *x, const cl_op *part);
int cl_in_windows(const cl_algo_ctx *x, const cl_op *op, cl_window_fn fn);
/* The elements of op's dtype in a window. */
size_t cl_window_elems(const cl_algo_ctx *x, const cl_op *op);

/* All-gather's first step: this rank's block moves from sendbuf to its place in recvbuf
 * (in place with the block at the start of the buffer, sendbuf == recvbuf, included). */
void cl_place_own_block(const cl_algo_ctx *x, const cl_op *op);
/* The ring reduce-scatter pass over `count` elements: every rank's src reduced chunk by
 * chunk into acc (count elements), leaving rank r's fully reduced chunk r at its offset
 * in acc (chunk c: count/n elements, one more for c < count % n). */
int cl_ring_reduce_scatter_into(const cl_algo_ctx *x, const cl_op *op, size_t count,
                                const void *src, void *acc);
/* The same over uneven chunks, in place: chunk c is elements [chunks[c], chunks[c + 1])
 * of acc (size + 1 entries). */
int cl_ring_reduce_scatter_chunks(const cl_algo_ctx *x, const cl_op *op, const size_t *chunks,
                                  void *acc);
/* An empty message to rank r + 1 and from r - 1 whose header carries the root: ranks
 * that disagree on it get COLL_EMISMATCH (some neighbours differ) where an exchange that
 * depends on the root would leave one waiting for a message sent elsewhere. */
int cl_root_check(const cl_algo_ctx *x, const cl_op *op);
/* One exchange (exchange.c): elements [s_off, s_off + s_len) of buf go to position `to`
 * while [r_off, r_off + r_len) come from position `from` (-1: that direction is idle),
 * reduced into buf (reduce = 1) or copied there, in segments. */
int cl_exchange(const cl_algo_ctx *x, const cl_op *op, void *buf, int to, int from,
                size_t s_off, size_t s_len, size_t r_off, size_t r_len, int reduce);
/* A swap with position `peer`: s_len elements of src go to it while its r_len land in
 * dst (the peer's s_len and r_len the other way round). */
int cl_swap(const cl_algo_ctx *x, const cl_op *op, const void *src, size_t s_len, void *dst,
            size_t r_len, int peer);
/* For the cost of a step of pairwise exchanges across hosts (x->host_at set): i < p at
 * position pos[i] (ascending in i; pos NULL: i) pairs with i ^ d; how many of the
 * busiest host's send across its link. */
int cl_pairs_crossing(const cl_algo_ctx *x, int p, int d, const int *pos);
/* A ring all-gather of `count` elements in buf, every rank's chunk already in place
 * (blocks: as pass.blocks). */
int cl_ring_allgather_in(const cl_algo_ctx *x, const cl_op *op, size_t count, void *buf,
                         const int *blocks);
/* The same over uneven chunks (as cl_ring_reduce_scatter_chunks). */
int cl_ring_allgather_chunks(const cl_algo_ctx *x, const cl_op *op, const size_t *chunks,
                             void *buf);

#endif
