/* The communicator and request structures: data only. What acts on them is declared by
 * concern: lifecycle.h (create, connect, free), error.h (the failure's state), fail.h
 * (failing), engine.h, link.h, connect.h (at init), p2p.h, req.h. */
#ifndef CL_COMM_H
#define CL_COMM_H

#include "collective.h"

#include "algo/algo.h"
#include "base/auth.h"
#include "base/lock.h"
#include "core/life.h"
#include "core/topo.h"
#include "rdzv/store.h"
#include "transports/transport.h"
#include "wire/wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Every field is set by req_init (args.c), not by zeroing the whole: a new field goes
 * there too. */
struct coll_req {
    coll_comm *comm;
    struct coll_req *next; /* the engine's queue; p2p: the held list */
    int held;              /* p2p: waiting for its link (comm->held) */
    cl_op op;
    int status, done; /* under comm->mu */
    /* Handed to the caller (a coll_i... form): on comm->out until collected, so destroy
     * can leave it finished and on its own (comm NULL) instead of dangling. */
    struct coll_req *out_prev, *out_next;
    int handed;
    uint64_t ticket; /* its turn among its family's collectives (family.h); 0: none */
    uint32_t rec;    /* p2p: its entry in the flight recorder (record.h); 0: none */
    cl_tr_req *treq; /* p2p only */
    cl_msg_hdr hdr;   /* p2p only: what was sent or received */
};

/* A pair of ranks sharing one connection (link.c): the verdict that says so, going out
 * (the higher rank) or awaited (the lower). */
struct cl_share {
    cl_tr_req *req;
    cl_msg_hdr hdr;
    uint8_t proof[CL_TAG_BYTES];
    int farewell; /* hdr is the peer's farewell, read on our dial (link.c) */
};

/* Whether a peer's process is gone (link.c, cl_link_gone), per peer of the communicator
 * that owns the links: looked at once our dial to it was refused, or a receive from it
 * has waited without a link. */
struct cl_gone {
    int64_t refused_ms; /* looking since (0: not): our dial refused, or a receive waits */
    int64_t gone_ms;    /* its lifeline and heartbeat ports refused too: when (0: not) */
    int64_t next_ms;    /* a receive's waiting starts the look again from then */
    int probes;         /* of its ports that answered, this look */
    int looks;          /* looks that found it there: each waits longer for the next */
    int by_dial;        /* this look began at a refused dial, not a receive's wait */
    int probing;        /* a thread probes its ports now (link_mu let go meanwhile) */
};

struct coll_comm {
    int rank, size;
    uint64_t id, job;
    int keyed; /* COLL_SECRET is set: every link and lifeline proves it */
    uint8_t key[CL_KEY_BYTES];
    int vetting; /* what cl_link_vet reads is set: it judges from now on (atomic) */
    int timeout_ms;    /* a peer that does not answer */
    int op_timeout_ms; /* an operation without progress */
    size_t segment_bytes;
    cl_spin_tune spin;
    int local; /* ranks of this communicator on this machine, this one included */
    coll_codec codec;
    char force[32];          /* COLL_ALGO: the all-reduce algorithm forced; "": chosen */
    int net_given;                  /* by the environment: not measured (calibrate.c) */
    uint64_t told[CL_KINDS]; /* size classes whose choice COLL_DEBUG=info has named */
    /* The engine's last choice per collective: a loop of same-shaped calls prices once. */
    struct cl_choice {
        size_t count;
        int dtype, op, codec;
        const cl_algo *algo;
    } chosen[CL_KINDS];
    char device[64];
    int family; /* cl_config's: the sockets' address family */
    const cl_transport *tr;
    cl_tr_ctx *ctx; /* a shared split's is its family root's */
    cl_notifier notifier;
    cl_notifier *note; /* what the transport signals: &notifier, or the family root's */
    /* A communicator whose links are its family root's (family.h), NULL when it owns
     * its own: to_root[r] is rank r's rank in the root; wire marks its messages. */
    struct cl_family *fam;
    int *to_root;
    uint16_t wire;
    int split_share; /* its splits share its links (COLL_SPLIT_SHARE) */
    cl_tr_conn **conns[CL_CHANNELS][2]; /* [channel][0 send / 1 recv][peer]: NULL until used */
    struct cl_share *share[CL_CHANNELS]; /* [channel][peer], duplex transports only (link.c) */
    struct cl_gone *gone;                /* [peer]: p2p channel (link.c) */
    pthread_mutex_t link_mu;            /* opens links: the listener, writes to conns */
    cl_tr_listener *listener;           /* takes the links peers open, while c lives */
    char (*handles)[CL_HANDLE_BYTES];   /* every rank's listener */
    uint8_t (*nonces)[CL_NONCE_BYTES];  /* every rank's card nonce (proofs to it are over it) */
    uint8_t nonce[CL_NONCE_BYTES];      /* this rank's */
    cl_store *store;                    /* the job's store, while init runs */
    struct cl_store_server *rdzv;       /* rank 0's tcp rendezvous, served for the job's life */
    struct cl_store_server *grow;       /* rank 0: the rendezvous of the grow it made an id for */
    char grow_id[COLL_GROW_ID_BYTES];   /* that id, "" when none */
    cl_life life;                       /* where survivors find this rank after a failure */
    char (*lives)[CL_LIFE_ADDR];        /* every rank's lifeline address */
    uint8_t *failed;                    /* per rank: agreed failed by a shrink */
    uint32_t shrinks;                   /* coll_shrink calls on this communicator */
    struct cl_beat *beat;               /* heartbeats to and from every rank (beat.h) */
    char label[32];                     /* coll_comm_set_label's (status_list.c, its lock) */
    int global;                         /* the global rank it gave, -1: none */
    cl_algo_ctx algo[CL_CHANNELS];      /* what an algorithm gets, per channel */
    cl_topo topo; /* hosts, the ring in host order, hier's sub-rings, the link between hosts */

    pthread_mutex_t mu; /* queue, request states, status */
    pthread_cond_t cv;
    coll_req *qhead, *qtail;
    coll_req *out; /* requests handed to the caller and not yet collected */
    int stop;
    /* Collectives issued (from bit 2), one running on the engine's thread or a caller's
     * (bit 0), any queued (bit 1): engine.c. */
    _Atomic uint64_t gate;
    pthread_t engine;
    uint32_t *p2p_seq[2]; /* per peer: messages sent, messages received */
    cl_lock p2p_mu;               /* posting order and the held list */
    coll_req *held, *held_tail;   /* p2p requests whose link is not open yet, in issue order */
    uint32_t splits;

    int status;                   /* first failure, sticky */
    int cause_rank, cause_status; /* where the failure began, passed on in the farewell */
    int cause_silent_ms;          /* > 0: the heartbeat found cause_rank silent this long */
    cl_msg_hdr bye; /* the farewell: a send still posted may read it until destroy */
    atomic_int aborted;
    /* The thread inside a blocking collective (its tag, args.c), 0 when none. */
    _Atomic uintptr_t blocking_in;
    /* Callers inside an operation or a wait, but a blocking collective's (marked in
     * blocking_in): destroy waits them out. */
    atomic_int inside;
    char err[512];

    /* Point-to-point's counters (any thread: atomic adds), bytes handed in and errors;
     * coll_get_stats adds the collectives' (ran), which only the running collective
     * writes (cl_tally). */
    atomic_uint_least64_t ops, bytes_in, wire_tx, wire_rx, errors;
    /* The fast path's sends and receives (p2p.c), counted under the hub's p2p_mu: one
     * writer at a time (cl_tally), no locked instruction per message. */
    struct {
        atomic_uint_least64_t ops, bytes_in, wire_tx, wire_rx;
    } now;
    struct {
        atomic_uint_least64_t ops, wire_tx, wire_rx;
        atomic_uint_least64_t quick; /* messages sent or taken on the fast path */
    } ran;

    struct cl_rec *rec; /* the flight recorder (record.h), NULL when off */

    cl_buf scratch; /* the running collective's (see busy) */
    cl_buf staging; /* the running pass's receive and send slots */
};

#endif
