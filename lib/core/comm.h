/* The communicator and request structures, shared by the core and the algorithms. */
#ifndef CL_COMM_H
#define CL_COMM_H

#include "collective.h"

#include "transports/transport.h"
#include "rdzv/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum cl_coll_kind {
    CL_ALLREDUCE = 1,
    CL_REDUCE_SCATTER,
    CL_ALLGATHER,
    CL_BROADCAST,
    CL_BARRIER,
    CL_SEND,
    CL_RECV,
    CL_SPLIT
};
enum { CL_CH_COLL = 0, CL_CH_P2P = 1, CL_CHANNELS = 2 };
/* The header-only frame a failing rank sends on its way out: tag = -status, count = its
 * rank, seq = the operation it was running. */
enum { CL_FAREWELL = 0x7f };
#define CL_PROTO_VERSION 1u
#define CL_HELLO_MAGIC 0x4c4c4f43u /* "COLL" */

const char *cl_kind_name(int kind);

struct coll_req {
    coll_comm *comm;
    struct coll_req *next;
    int kind;
    const void *sbuf;
    void *rbuf;
    size_t count;
    coll_dtype dtype;
    coll_op op;
    int root; /* broadcast root, p2p peer */
    uint32_t tag;
    uint32_t seq;
    coll_codec codec; /* the wire codec this operation uses */
    float *residual;  /* error feedback, caller-owned; NULL: none */
    int status, done; /* under comm->mu */
    cl_tr_req *treq;  /* p2p only */
    cl_msg_hdr hdr;   /* p2p only: what was sent or received */
};

struct coll_comm {
    int rank, size;
    uint64_t id, job, secret;
    int timeout_ms;
    size_t segment_bytes;
    int spin_us;
    _Atomic int spin_boost; /* spin budget multiplier, 1 to SPIN_CAP (spin.c) */
    _Atomic int spin_calm;  /* waits since one last slept */
    int local;   /* ranks of this communicator on this machine, this one included */
    int crowded; /* more of them than the machine has CPUs: pollers yield */
    coll_codec codec;
    char device[64];
    const cl_transport *tr;
    cl_tr_ctx *ctx;
    cl_notifier notifier;
    cl_tr_conn **conns[CL_CHANNELS][2]; /* [channel][0 send / 1 recv][peer] */
    cl_store *store;                    /* the job's store, kept by the root communicator */

    pthread_mutex_t mu; /* queue, request states, status */
    pthread_cond_t cv;
    coll_req *qhead, *qtail;
    int stop;
    int busy; /* a collective is running, on the engine thread or a caller's */
    pthread_t engine;
    uint32_t seq;         /* collectives issued */
    uint32_t *p2p_seq[2]; /* per peer: messages sent, messages received */
    uint32_t splits;

    int status;                   /* first failure, sticky */
    int cause_rank, cause_status; /* where the failure began, passed on in the farewell */
    atomic_int aborted;
    char err[512];

    atomic_uint_least64_t ops, bytes_in, wire_tx, wire_rx, errors;

    void *scratch; /* the running collective's (see busy) */
    size_t scratch_bytes;
    void *staging; /* the running pass's receive and send slots */
    size_t staging_bytes;
};

/* Records the communicator's first failure with its sentence, closes every link so the
 * peers notice, and wakes every waiter. Later failures only count as errors. */
void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A received header that is a peer's farewell: fails this communicator with the
 * peer's status and returns it. `what` and `seq` name this rank's operation. */
int cl_peer_failed(coll_comm *c, const cl_msg_hdr *h, const char *what, uint32_t seq);
/* After a send to `peer` failed: did the peer leave a farewell on its connection to us
 * (channel ch)? Waits briefly; if so fails the communicator with the peer's status and
 * returns it, else returns COLL_OK. */
int cl_await_farewell(coll_comm *c, int peer, int ch, const char *what, uint32_t seq);
/* Before cl_comm_fail: the failure began at `rank` with `status`, not here. */
void cl_comm_blame(coll_comm *c, int rank, int status);
/* COLL_OK, or what a new or queued operation must return on a failed communicator. */
int cl_comm_state(coll_comm *c);

/* Engine: runs queued collectives in order on the communicator's own thread. */
int cl_engine_start(coll_comm *c);
void cl_engine_stop(coll_comm *c);
void cl_engine_submit(coll_comm *c, coll_req *r);
/* A blocking collective: runs r on the calling thread when nothing is queued or running,
 * else queues it behind the others and waits. Frees r; returns its status. */
int cl_engine_call(coll_comm *c, coll_req *r);

/* Runs one collective to completion (engine thread or cl_engine_call); returns its status. */
int cl_run_collective(coll_comm *c, coll_req *r);

/* Point-to-point requests bypass the engine: posted to the transport at once. */
int cl_p2p_post(coll_comm *c, coll_req *r);
int cl_p2p_test(coll_req *r, int *done);

/* A waiter's spin phase (spin.c). cl_spin_poll polls once and returns 1 while within
 * the budget (spin_us, or more after cl_spin_expect) of the last cl_spin_progress, of
 * the last bytes moved or of the last sleep; then it stops polling and returns 0: the
 * caller re-tests, then may sleep. cl_spin_stop before leaving. */
typedef struct cl_spin {
    coll_comm *comm;
    int64_t since;     /* us; 0: progress or bytes moved since the last poll */
    int64_t budget_us; /* how long to poll with nothing moving */
    int64_t done_at;   /* us; 0: a transfer completed since the last poll */
    int64_t slept_at;  /* us; when the spin last gave up, 0 if not since the progress */
    unsigned polls;    /* since the clock was last read */
    int64_t turn_at;   /* us; when this waiter first moved bytes since it last yielded */
    unsigned idle;     /* polls that moved nothing, likewise */
    int on;            /* between CL_POLL_BEGIN and CL_POLL_END */
    int slept;         /* this wait gave up its spin at least once */
} cl_spin;
cl_spin cl_spin_start(coll_comm *c);
/* Each step moves about `bytes`: the peer may go that long without moving any. */
void cl_spin_expect(cl_spin *s, size_t bytes);
void cl_spin_progress(cl_spin *s);
int cl_spin_poll(cl_spin *s);
void cl_spin_stop(cl_spin *s);

/* Waits until a request is done; frees it; returns its status. */
int cl_req_wait(coll_req *r);

/* Connects the full mesh of this communicator, given every rank's listener handle. */
int cl_mesh_connect(coll_comm *c, cl_tr_listener *l, const char *handles);

/* The running collective's scratch buffer, grown to at least `bytes`. NULL when out of memory. */
void *cl_scratch(coll_comm *c, size_t bytes);
/* The running pass's staging slots, likewise: kept between passes, so a pass neither
 * maps nor faults in fresh memory (a malloc of megabytes is an mmap and a munmap). */
void *cl_staging(coll_comm *c, size_t bytes);

#endif
