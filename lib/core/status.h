/* The status endpoint (status.c): what coll_status (tools/coll_status.c) asks a running
 * job, and how it is answered. Each process answers on one UDP socket, at its
 * lifeline's address, for every live communicator it has (status_list.c), from the
 * heartbeat threads of the communicators that own their links (beat.c): they run while
 * the caller's thread is busy or wedged in a collective, and a rank that is stopped
 * answers nothing, which is the answer. Rank 0 of a job that met at a tcp:// rendezvous
 * answers at the rendezvous's own address too (UDP, the same port), and rank 0 of the
 * first communicator a process made through a caller's store at MASTER_ADDR:MASTER_PORT
 * (torch's), so the tool needs only what the ranks were given (MASTER_ADDR and
 * MASTER_PORT, or the URL); any rank tells every rank's endpoint, so with rank 0 stopped
 * another is asked.
 *
 * The wire is this header's structs in the host's byte order (a job and the tool that
 * asks it run on one architecture). With COLL_SECRET, asks and answers carry an HMAC
 * under the job's key over every byte before it; an ask without the right one is refused
 * in a datagram smaller than the ask, and an answer is no larger than its ask (nothing to
 * amplify); a malformed one (any other length) is dropped,
 * and a flood is read at a bounded rate (status.c), so it takes no more than that rate's
 * CPU from the job and never touches the heartbeat's own socket. */
#ifndef CL_STATUS_H
#define CL_STATUS_H

#include "base/addr.h"
#include "base/auth.h"
#include "collective.h"

#include <stddef.h>
#include <stdint.h>

#define CL_STATUS_MAGIC 0x54415453u /* "STAT" */
#define CL_STATUS_VERSION 2u
/* An ask's kind, and its answer's. HEAD and PEERS are about one communicator (the ask's
 * comm, 0: the endpoint's own); COMMS lists the process's live communicators, a page at
 * a time (status_list.c). */
enum { CL_STATUS_HEAD = 1, CL_STATUS_PEERS = 2, CL_STATUS_REFUSED = 3, CL_STATUS_COMMS = 4 };
/* Endpoints per PEERS answer, communicators per COMMS answer: a page, under 1500 bytes. */
enum { CL_STATUS_PAGE = 16, CL_STATUS_COMMS_PAGE = 5 };
enum { CL_STATUS_LABEL = 32 };

/* One operation of the flight recorder, as the rank that answers sees it now. */
typedef struct cl_status_op {
    uint32_t seq;                /* 0: none */
    int32_t state, status, root; /* coll_rec_state; COLL_OK or its error; root or peer */
    uint64_t count, bytes;
    int64_t issued_ago_us, started_ago_us, progress_ago_us; /* -1: not yet */
    char kind[16], dtype[12], op[12], algo[24];
} cl_status_op;

typedef struct cl_status_head {
    int32_t pid;
    int32_t failed;   /* the communicator's first failure (COLL_OK: none) */
    uint32_t issued;  /* collectives issued on it */
    int32_t recorder; /* the recorder is on: coll and p2p mean something */
    char job[64], host[64];
    char err[200];     /* the communicator's error sentence, cut */
    cl_status_op coll; /* the newest collective */
    cl_status_op p2p;  /* the newest send or receive */
} cl_status_head;

typedef struct cl_status_peers {
    uint32_t first, n;
    char addr[CL_STATUS_PAGE][CL_ADDR_TEXT]; /* ranks first..first+n-1; "": none */
} cl_status_peers;

/* One live communicator of the process that answers (status_list.c). */
typedef struct cl_status_comm {
    uint64_t job, id;        /* what names a communicator: its job's and its own id */
    uint64_t parent;         /* the family root whose links it shares (its job's) */
    int32_t rank, size;
    int32_t parent_rank;     /* its rank in parent, -1: it owns its links */
    int32_t global;          /* the global rank its label gave, -1: none */
    int32_t failed;          /* its first failure, COLL_OK: none */
    uint32_t issued;         /* collectives issued on it */
    int32_t recorder, pad;
    char label[CL_STATUS_LABEL]; /* coll_comm_set_label's, "": none */
    cl_status_op coll;       /* its newest collective */
} cl_status_comm;

typedef struct cl_status_comms {
    uint32_t first, n, total; /* entries first..first+n-1 of total */
    int32_t pid;
    char host[64];
    cl_status_comm e[CL_STATUS_COMMS_PAGE];
} cl_status_comms;

typedef struct cl_status_answer {
    uint32_t magic, version, kind;
    int32_t keyed;                 /* the job has COLL_SECRET: the tag is checked */
    uint8_t nonce[CL_NONCE_BYTES]; /* the ask's */
    /* A REFUSED answer ends here. */
    int32_t rank, size;
    uint64_t job, comm;
    union {
        cl_status_head head;
        cl_status_peers peers;
        cl_status_comms comms;
    } u;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: over every byte before it */
} cl_status_answer;

#define CL_STATUS_REFUSED_BYTES offsetof(cl_status_answer, rank)

/* An ask is as long as the answer it asks for: a datagram with a forged source (the
 * endpoint answers whoever asks, where the job has no secret) is never reflected larger. */
typedef struct cl_status_ask {
    uint32_t magic, version, kind;
    uint32_t first;                /* PEERS, COMMS: the page's first rank or entry */
    uint64_t job, comm;            /* HEAD, PEERS: the communicator; job 0: the endpoint's */
    uint8_t nonce[CL_NONCE_BYTES]; /* the tool's: its answer carries it back */
    uint8_t pad[sizeof(cl_status_answer) - 32 - CL_NONCE_BYTES - CL_TAG_BYTES]; /* zeros */
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: over every byte before it */
} cl_status_ask;
_Static_assert(sizeof(cl_status_ask) == sizeof(cl_status_answer), "an ask is an answer's size");

/* The tag of an ask or answer (msg, the tag its last CL_TAG_BYTES of len). */
static inline void cl_status_tag(const uint8_t key[CL_KEY_BYTES], const void *msg, size_t len,
                                 uint8_t out[CL_TAG_BYTES])
{
    cl_auth_tag(key, out, 2, "coll status v1", (size_t)14, msg, len - CL_TAG_BYTES);
}

/* An ask of kind (page `first`, communicator `comm` of job `job`; job 0: the endpoint's)
 * for target `index`: its nonce is base with the index in its last 4 bytes, its tag made
 * under key (NULL: no secret). */
void cl_status_ask_make(const uint8_t *key, const uint8_t base[CL_NONCE_BYTES], uint32_t kind,
                        uint32_t first, uint64_t job, uint64_t comm, uint32_t index,
                        cl_status_ask *q);
/* The target (below n) an answer of len bytes to asks made with base is for, or -1: not
 * ours, not whole, not of kind, or its tag does not check under key (NULL: an answer
 * sealed by a job with a secret does not check). *refused: it is a refusal. */
int cl_status_answer_check(const uint8_t *key, const uint8_t base[CL_NONCE_BYTES],
                           const cl_status_answer *a, long len, uint32_t kind, int n, int *refused);

/* ---- the library's side (status.c) ---- */

struct coll_comm;
struct cl_card;
struct cl_rdzv;
struct pollfd;
typedef struct cl_status cl_status;

/* This rank's endpoint: a UDP socket at the address `near` is bound to (the heartbeat's),
 * its port to *port, for the rank's card. COLL_OK, COLL_ENOMEM or COLL_ESYS. */
int cl_status_open(int near, cl_status **out, uint16_t *port);
/* Rank 0 of a tcp:// rendezvous: answers at its address too (a port held by another
 * process is a note in the log: the job is then asked through another rank). */
void cl_status_public(cl_status *s, const struct cl_rdzv *rv);
/* Every rank's endpoint, from its card and lifeline address, once c is placed. */
int cl_status_start(cl_status *s, const struct coll_comm *c, const struct cl_card *cards);
/* Puts its sockets into p[0..1] (an fd of -1 where there is none, or while a flood has
 * spent the budget) and lowers *wait_ms to when the budget comes back. */
void cl_status_poll(cl_status *s, struct pollfd *p, int64_t now, int *wait_ms);
/* Reads what came on p[0..1] (within the budget) and answers for c. */
void cl_status_serve(cl_status *s, struct coll_comm *c, const struct pollfd *p);
void cl_status_close(cl_status *s);
/* o: what the status wire says of recorder entry x, now_us being now. */
void cl_status_put_op(const coll_record *x, int64_t now_us, cl_status_op *o);
void cl_status_set_port(cl_addr *a, uint16_t port);

/* ---- the process's list and socket (status_list.c) ---- */

/* c is live (from cl_beat_start, a split sharing links too) / goes (first thing in its
 * destroy: cl_comm_free). */
void cl_status_enlist(struct coll_comm *c);
void cl_status_delist(struct coll_comm *c);
/* Held while an answer reads the listed communicators. */
void cl_status_list_lock(void);
void cl_status_list_unlock(void);
/* Under the lock: the listed communicator id of job whose rank is `rank` (-1: any), or
 * with job 0 the oldest listed; NULL: none. */
struct coll_comm *cl_status_list_find(uint64_t job, uint64_t id, int rank);
/* Under the lock: the page of entries from `first` (n 0 beyond the last). */
void cl_status_list_page(uint32_t first, cl_status_comms *p);
/* The process's endpoint socket where its address is at's (port aside), made with
 * make(at) by the first caller; -1: it serves another address (the caller makes its
 * own). Each fd returned is given back with cl_status_unshare. */
int cl_status_share(const cl_addr *at, int (*make)(const cl_addr *));
void cl_status_unshare(int fd);
/* What the other ranks are doing while this rank's collective `kind` #seq failed: asks
 * every rank's endpoint (s: c's, cl_beat_status) but `gone` (a rank known lost, or -1)
 * for its head, waits up to wait_ms, and writes into out the ranks that differ ("rank 3
 * never issued allreduce #88 (its newest: allreduce #87, done)", "rank 2 did not answer
 * (stopped?)"); "" when none does. */
void cl_status_survey(const cl_status *s, const struct coll_comm *c, int kind, uint32_t seq,
                      int gone, int wait_ms, char *out, size_t len);

#endif
