/* The communicator and request structures, shared by the core and the algorithms. */
#ifndef CL_COMM_H
#define CL_COMM_H

#include "collective.h"

#include "core/config.h"
#include "core/family.h"

#include "algo/algo.h"
#include "base/lock.h"
#include "core/beat.h"
#include "core/life.h"
#include "core/topo.h"
#include "rdzv/store.h"
#include "transports/transport.h"
#include "wire/wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { CL_CH_COLL = 0, CL_CH_P2P = 1, CL_CHANNELS = 2 };

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

/* What each rank publishes when a communicator is built: where its transport listens,
 * its machine, its lifeline. */
typedef struct cl_card {
    char handle[CL_HANDLE_BYTES];
    uint64_t machine; /* cl_machine_id: whose CPUs */
    uint64_t host;    /* cl_host_id: whose memory and network link */
    char life[CL_LIFE_ADDR];
    uint8_t nonce[CL_NONCE_BYTES]; /* drawn for this communicator: links to it prove it */
    uint16_t beat;                 /* its heartbeat's UDP port, at its life address (beat.h) */
    uint16_t status;               /* its status endpoint's UDP port, there too (status.h) */
} cl_card;

/* A communicator of `size` with its transport context, listener and lifeline, not yet
 * connected; *mine is this rank's card. */
int cl_comm_create(const cl_config *cfg, int rank, int size, uint64_t id, coll_comm **out,
                   cl_tr_listener **l, cl_card *mine);
/* Where c stands, when it is learnt after cl_comm_create (shrink): size no more than
 * the size c was created with. */
void cl_comm_place(coll_comm *c, int rank, int size, uint64_t id);
/* Connects c given every rank's card (rank order), then starts its engine. */
int cl_comm_connect(coll_comm *c, cl_tr_listener *l, const cl_card *cards);
void cl_comm_free(coll_comm *c);
/* The configuration a communicator derived from c (split, shrink) inherits. */
cl_config cl_comm_config(const coll_comm *c);
/* Where the last failed init, split, shrink or grow on this thread said why. */
void cl_comm_init_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* coll_init's meeting (init.c): cfg's ranks meet at rv through store (the caller's, or
 * NULL to open the one rv names; the communicator owns it, failed or not). */
int cl_init_meet(coll_comm **out, const cl_config *cfg, const cl_rdzv *rv, cl_store *store);
/* Rank 0: stops the grow's rendezvous, if it serves one (grow.c). */
void cl_grow_stop(coll_comm *c);

/* Records the communicator's first failure with its sentence, closes every link so the
 * peers notice, and wakes every waiter. Later failures only count as errors. */
void cl_comm_fail(coll_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* cl_comm_fail's parts: records c's first failure (1: it was the first; later ones
 * change nothing), reads where it began, and closes c's links with the farewell. */
int cl_comm_record(coll_comm *c, int status, const char *msg);
void cl_comm_cause(coll_comm *c, int *rank, int *status, int *silent_ms);
void cl_comm_close_links(coll_comm *c, int status);
/* A call on c (fn) that cannot get the memory it needs: fails c, so the peers waiting
 * on this rank hear at once. Returns COLL_ENOMEM. */
int cl_comm_no_memory(coll_comm *c, const char *fn);
/* Before cl_comm_fail: the failure began at `rank` with `status`, not here; silent_ms >
 * 0: the heartbeat found that rank silent this long (beat.c), and the farewell says so. */
void cl_comm_blame(coll_comm *c, int rank, int status, int silent_ms);
/* Where the communicator's algorithms report failures: cl_comm_fail and cl_comm_blame. */
cl_fail_hooks cl_comm_hooks(coll_comm *c);
/* COLL_OK, or what a new or queued operation must return on a failed communicator. */
int cl_comm_state(coll_comm *c);

/* Engine: runs queued collectives in order on the communicator's own thread. */
int cl_engine_start(coll_comm *c);
void cl_engine_stop(coll_comm *c);
void cl_engine_submit(coll_comm *c, coll_req *r);
/* The collectives issued on c so far (the last one's sequence number). */
uint32_t cl_engine_issued(const coll_comm *c);
/* Whether no collective runs nor waits in the queue. */
int cl_engine_idle(const coll_comm *c);
/* A blocking collective: runs r on the calling thread when nothing is queued or running,
 * else queues it behind the others and waits. r is the caller's; returns its status. */
int cl_engine_call(coll_comm *c, coll_req *r);

/* Measures the link between hosts for the cost model, on every rank at the end of
 * init (calibrate.c): nothing on one host or where the environment gave the link. */
int cl_calibrate(coll_comm *c);

/* COLL_AVG on a narrow integer type: run in int64 (widen.c). */
int cl_widen_wanted(const cl_op *op);
/* Runs r through `run` on int64 copies of its buffers and narrows the result back. */
int cl_run_widened(coll_comm *c, coll_req *r, int (*run)(coll_comm *, coll_req *));

/* Runs one collective to completion (engine thread or cl_engine_call); returns its status. */
int cl_run_collective(coll_comm *c, coll_req *r);

/* At COLL_DEBUG=info, names the choice for op's collective and size class, once. */
void cl_tell_choice(coll_comm *c, const cl_algo *chosen, const cl_op *op);

/* Point-to-point requests bypass the engine: posted to the transport at once. */
int cl_p2p_post(coll_comm *c, coll_req *r);
/* A blocking send or receive by the transport's fast path, done on return, or
 * COLL_INPROGRESS: it did not apply and nothing was done (post it instead). */
int cl_p2p_now(coll_comm *c, coll_req *q);
int cl_p2p_test(coll_req *r, int *done);
/* A family member going away: its held requests (left to the transport by destroy)
 * leave its root's list. */
void cl_p2p_forget(coll_comm *c);
/* Posts the held p2p requests whose links opened: 1 while some are still held. */
int cl_p2p_progress(coll_comm *c);

/* Waits until a request is done; frees it; returns its status. */
int cl_req_wait(coll_req *r);
/* r goes to the caller: it stays valid until coll_wait, whatever happens to its comm. */
void cl_req_hand_out(coll_comm *c, coll_req *r);
/* coll_destroy's first part: aborts c if anything is unfinished, waits (bounded by the
 * timeout) for the callers inside c to leave, stops the engine, and leaves every
 * request handed out finished, with its status and no communicator. COLL_ETIMEDOUT
 * when a caller stayed inside (c must not be freed then). */
int cl_comm_settle(coll_comm *c);

/* Links (link.c): made when first used, by their sender; the listener takes them. */
/* Keeps l and every rank's card, then opens this rank's ring links (to the next rank,
 * from the previous one) and waits for them. l NULL: a shared split's, whose links are
 * its family root's (it opens them in its turn). */
int cl_link_start(coll_comm *c, cl_tr_listener *l, const cl_card *cards);
/* After cl_link_start, rank 0's word to every rank, once around the ring: status is
 * rank 0's (COLL_OK: carry on); every rank returns what rank 0 said, or why it did not
 * hear it (the communicator has failed then). */
int cl_link_verdict(coll_comm *c, int status);
/* Opens link (ch, dir, peer) without blocking: COLL_OK once it is in c->conns;
 * COLL_INPROGRESS while the peer has not connected (dir 1) or its listener is full
 * (dir 0); else the communicator's failure or why the peer cannot be reached. Takes
 * every connection waiting on the listener meanwhile. */
int cl_link_open(coll_comm *c, int ch, int dir, int peer);
/* A failure, before the links close: the farewell goes to every rank on the collective
 * channel, queued behind what each link carries, over a link dialed for it where there
 * was none (a rank may be waiting for the link this one would have opened), waiting at
 * most min(timeout, 1 s) for them to go out. Each failing rank does it, so a failure
 * costs O(n) connections per rank, once. */
void cl_link_spread(coll_comm *c, const cl_msg_hdr *bye);
/* A transport's vet (cl_tr_config): why a hello is not one of communicator comm's
 * links, or NULL (also before cl_link_start, when there is nothing yet to judge by:
 * accept's caller judges those). Safe on a transport's thread. */
const char *cl_link_vet(void *comm, const uint8_t raw[CL_HELLO_BYTES]);
/* The link as it stands (NULL: not opened). */
cl_tr_conn *cl_link_now_of(coll_comm *c, int ch, int dir, int peer);

#endif
