/* What the engine hands an algorithm: the operation (cl_op) and everything the algorithm
 * may use to run it (cl_algo_ctx): its links, buffers, deadline, counters and where to
 * report a failure. An algorithm reads these and calls the transport and the kernels;
 * it never calls into the communicator or the engine that own them. */
#ifndef CL_ALGO_CTX_H
#define CL_ALGO_CTX_H

#include "collective.h"

#include "algo/tally.h"
#include "base/buf.h"
#include "transports/transport.h"
#include "wire/wire.h"

#include <stdatomic.h>
#include <stdint.h>

/* One operation as the caller described it (a request carries one). */
typedef struct cl_op {
    int kind; /* cl_coll_kind */
    const void *sbuf;
    void *rbuf;
    size_t count;
    coll_dtype dtype;
    coll_op op;
    int root;         /* broadcast root, p2p peer */
    uint32_t tag;     /* p2p tag */
    uint32_t seq;     /* collectives: issue order; p2p: per-peer message number */
    coll_codec codec; /* the wire codec this operation uses */
    float *residual;  /* error feedback, caller-owned; NULL: none */
    /* The uneven forms' caller-owned arrays (elements): alltoallv all four; allgatherv
     * rcounts and rdispls; reduce_scatterv rcounts. Their count is 0. */
    const size_t *scounts, *sdispls, *rcounts, *rdispls;
} cl_op;

/* How long a waiter polls before it sleeps (spin.h), shared by a communicator's waits. */
typedef struct cl_spin_tune {
    int spin_us;
    int crowded;       /* more ranks on this machine than CPUs: pollers yield */
    _Atomic int boost; /* budget multiplier, 1 to SPIN_CAP (spin.c) */
    _Atomic int calm;  /* waits since one last slept */
} cl_spin_tune;

/* Where a pass notes that it ran out of work and began to wait: the time (ms) and the
 * running collective's bytes then (the flight recorder's last progress, record.h). */
typedef struct cl_stall {
    _Atomic int64_t since_ms;
    atomic_uint_least64_t bytes;
} cl_stall;

/* Where a failure goes: the owner records the first one, closes every link (sending the
 * farewell that names the cause) and wakes its waiters. */
typedef struct cl_fail_hooks {
    void *owner;
    /* The failure begins at `rank` with `status`, not here (say before fail()); silent_ms
     * > 0: the heartbeat found that rank silent this long (core/beat.c). */
    void (*blame)(void *owner, int rank, int status, int silent_ms);
    void (*fail)(void *owner, int status, const char *msg);
    /* The communicator rank a farewell names (its count), -1 for none of ours. */
    int (*wire_rank)(void *owner, uint64_t r);
} cl_fail_hooks;

/* How every rank words a rank the heartbeat found silent: its rank, then seconds. */
#define CL_SILENT_FMT "rank %d has not answered for %.1f s (stopped, wedged or cut off?)"

/* Where an algorithm finds its links: opened on first use, not all at init. */
typedef struct cl_link_hooks {
    void *owner;
    int channel;
    cl_tr_conn **conns[2]; /* [0 send / 1 recv][communicator rank]; NULL until opened */
    /* Opens (channel, dir, rank) without blocking: COLL_OK once it is in conns,
     * COLL_INPROGRESS while the peer has not connected yet or its listener is full. */
    int (*open)(void *owner, int channel, int dir, int rank);
    /* Before a wait sleeps: posts the owner's other work that waited for a link (p2p
     * receives), so a peer's send is never stuck behind this rank's collective. 1 while
     * some still waits: sleep briefly, not every listener signals a connection. */
    int (*progress)(void *owner);
} cl_link_hooks;

typedef struct cl_algo_ctx {
    int rank, size; /* rank: this rank's position among `size` */
    /* The communicator's rank at each position (NULL: the same). An all-reduce runs on
     * positions in host order; what it reports names communicator ranks. */
    const int *ranks;
    /* In host order (NULL on one host): where each host's positions begin (hosts + 1
     * entries) and each position's host; lanes: the emptiest host's ranks, which hier
     * runs on every host. A rank on a lane has its rings (this host's lanes, its place
     * on every host); else (one host, a rank past the lanes) NULL. */
    const int *host_start, *host_at;
    int lanes;
    const struct cl_algo_ctx *local, *cross;
    /* Hosts the ranks span (1: one), ranks on the fullest, and the ring edges (position
     * r to r + 1) that leave the busiest host: 1 each way in host order, up to its
     * ranks in a launcher's round-robin numbering. */
    int hosts, host_ranks, ring_cross;
    const cl_transport *tr;
    cl_tr_ctx *tctx;
    uint16_t wire;             /* every header's flags: the communicator's mark (family.h) */
    cl_link_hooks link;        /* this context's channel's links */
    cl_notifier *notifier;     /* signalled on every transport completion */
    int timeout_ms;            /* no progress for this long fails the operation (op) */
    size_t segment_bytes;      /* pipeline segment */
    cl_buf *scratch;           /* the running collective's own (one runs at a time) */
    cl_buf *staging;           /* the running pass's receive and send slots */
    /* The running collective's counters (cl_tally: one writer at a time). */
    atomic_uint_least64_t *wire_tx, *wire_rx; /* header + payload bytes */
    atomic_uint_least64_t *quick;             /* messages that took the fast path */
    atomic_int *aborted;                      /* set by coll_abort */
    cl_spin_tune *spin;
    cl_fail_hooks fail;
    cl_stall *stall; /* NULL: nobody records where a wait began */
    cl_running *running; /* the recorder's running collective (tally.h); NULL: off */
    const char *scope;   /* a hierarchical sub-ring's, for its traced passes: "host",
                          * "across hosts"; NULL: all ranks */
} cl_algo_ctx;

/* A wait begins at now_ms with no progress since the last one: noted only on the way
 * to sleep, never on a poll that found work. */
static inline void cl_stall_note(const cl_algo_ctx *x, int64_t now_ms)
{
    if (!x->stall)
        return;
    atomic_store_explicit(&x->stall->bytes,
                          atomic_load_explicit(x->wire_tx, memory_order_relaxed) +
                              atomic_load_explicit(x->wire_rx, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&x->stall->since_ms, now_ms, memory_order_release);
}

/* The communicator's rank at position v, for messages and blame. */
static inline int cl_rank_of(const cl_algo_ctx *x, int v)
{
    return x->ranks && v >= 0 ? x->ranks[v] : v;
}

/* The position of the communicator's rank r (the inverse of cl_rank_of). */
static inline int cl_position_of(const cl_algo_ctx *x, int r)
{
    for (int v = 0; x->ranks && v < x->size; v++)
        if (x->ranks[v] == r)
            return v;
    return r;
}

/* The link to (dir 0) or from (dir 1) position v as it stands: NULL until opened. */
static inline cl_tr_conn *cl_link_now(const cl_algo_ctx *x, int dir, int v)
{
    return __atomic_load_n(&x->link.conns[dir][cl_rank_of(x, v)], __ATOMIC_ACQUIRE);
}

/* The link to (dir 0) or from (dir 1) position v, opened on first use: COLL_OK with *out
 * set; COLL_INPROGRESS while the peer has not connected yet (wait a little, try again);
 * else why it cannot be. */
static inline int cl_link_get(const cl_algo_ctx *x, int dir, int v, cl_tr_conn **out)
{
    if ((*out = cl_link_now(x, dir, v)) != NULL)
        return COLL_OK;
    int rc = x->link.open(x->link.owner, x->link.channel, dir, cl_rank_of(x, v));
    *out = rc == COLL_OK ? cl_link_now(x, dir, v) : NULL;
    return rc;
}

/* Reports a failure of this rank's operation: its sentence goes to the owner, which
 * keeps the first. Returns status. */
int cl_algo_fail(const cl_algo_ctx *x, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The failure began at `rank` with `status` (a peer that closed, a farewell's cause). */
void cl_algo_blame(const cl_algo_ctx *x, int rank, int status);
/* A received header that is a peer's farewell: fails with the peer's cause and returns
 * what this rank reports. `what` and `seq` name this rank's operation. */
int cl_peer_failed(const cl_algo_ctx *x, const cl_msg_hdr *h, const char *what, uint32_t seq);
/* After a send to `peer` failed: did it leave a farewell on its link to us? Waits
 * briefly (min(timeout, 1 s)); if so fails as cl_peer_failed and returns that status,
 * else returns COLL_OK. */
int cl_await_farewell(const cl_algo_ctx *x, int peer, const char *what, uint32_t seq);
/* Waits until the transport completed *r (then NULL): for requests whose end is certain,
 * on a connection closed or a transport shut down (transport.h), so no deadline. */
void cl_tr_settle(const cl_algo_ctx *x, cl_tr_req **r);

#endif
