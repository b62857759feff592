/* The lifeline: a listening TCP socket every communicator keeps from init to destroy,
 * apart from its transport. A failure closes every transport link (that is how peers
 * learn of it); the lifeline stays, so the survivors can find each other afterwards and
 * agree on who is gone (coll_shrink). Plain sockets with deadlines: nothing here runs
 * unless a shrink does.
 *
 * Anyone who reaches the port can connect, so the lifeline listens where the transport
 * does (the interface COLL_SOCKET_IFNAME or the rendezvous picks, never every address),
 * and a connection speaks in an agreement only once its hello proves it is a rank of
 * that agreement (job, communicator, attempt, receiver and, with COLL_SECRET, a tag under
 * the job's key). Until then it waits at the gate, bounded in number and time; a hello
 * that fails, or a connection that closes or stays silent, is closed and its place
 * reused. This file must never let a connection that has not proved itself hold a place
 * that a rank's connection needs. */
#ifndef CL_LIFE_H
#define CL_LIFE_H

#include "base/addr.h"
#include "base/auth.h"

#include <stddef.h>
#include <stdint.h>

#define CL_LIFE_ADDR CL_ADDR_TEXT
#define CL_LIFE_HELLO_MAGIC 0x4C494648u /* "HFIL": a hello */
#define CL_LIFE_MAGIC 0x4C494645u       /* "EFIL": a word of an agreement */

/* Connections at the gate (a hello not all in) at most; a newer one pushes out the
 * oldest, and one is dropped after CL_LIFE_PENDING_MS (a rank sends its hello as soon as
 * its dial completes). */
enum { CL_LIFE_PENDING = 64, CL_LIFE_PENDING_MS = 2000 };

typedef struct cl_life {
    int fd;                  /* listening, non-blocking; -1 when closed */
    char addr[CL_LIFE_ADDR]; /* "ip:port" or "[ip6]:port" peers dial (base/addr.h) */
} cl_life;

/* Who speaks in one agreement, as the receiving rank knows it. */
typedef struct cl_life_who {
    uint64_t job, id;
    uint32_t attempt; /* the communicator's shrink number: one agreement's words stay in it */
    int rank, size;
    int keyed;
    const uint8_t *key; /* CL_KEY_BYTES, when keyed */
    size_t card;        /* the bytes of one card (shrink's cl_card) */
} cl_life_who;

/* A connection's first bytes: the dialer names itself and the rank it dialed. */
typedef struct cl_life_hello {
    uint32_t magic, attempt;
    int32_t from, to;
    uint64_t job, id;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: HMAC of the hello, this zeroed */
} cl_life_hello;

/* A word of an agreement: this header, then `size` bytes (1 where the sender counts a
 * rank as failed), then ncards cards: the sender's own, or (decided) every rank's. */
typedef struct cl_life_msg {
    uint32_t magic, attempt;
    int32_t from, round, decided, size, ncards;
    uint64_t job, id;
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: HMAC of the word, this zeroed */
} cl_life_msg;

/* One rank's connection to this one, admitted through the gate. */
typedef struct cl_life_link {
    int fd;    /* -1: none, or closed */
    int taken; /* a connection was admitted for this rank: no second one is */
    size_t off, cap;
    uint8_t *buf; /* the word arriving */
} cl_life_link;

typedef struct cl_life_pending {
    int fd;
    int64_t since;
    size_t got;
    cl_life_hello hello;
} cl_life_pending;

typedef struct cl_life_gate {
    cl_life_pending p[CL_LIFE_PENDING];
    int np;
} cl_life_gate;

/* Listens on the address of `family` (AF_UNSPEC: either) of the interface `device` (NCCL
 * syntax) names, the one the tcp transport binds (NULL or no match: the first usable
 * interface), and publishes it; a sentence in err when it cannot. */
int cl_life_open(const char *device, int family, cl_life *out, char *err, size_t errlen);
void cl_life_close(cl_life *l);

/* Starts a non-blocking connect to addr: the socket, or -1 when it failed at once
 * (nobody listens there on this machine, or the address is bad). */
int cl_life_dial(const char *addr);
/* 1 once a dial completed, 0 while it is under way, -1 when it failed. */
int cl_life_dialed(int fd);
/* 1 when a connection to addr is refused (no answer but a reset) within wait_ms: nobody
 * listens there, the process that did closed it or ended. 0 when it is accepted, gets no
 * answer in time, or fails otherwise (a host or network gone is no refusal). Blocks at
 * most wait_ms. */
int cl_life_refused(const char *addr, int wait_ms);
/* Writes all n bytes before the deadline; COLL_OK, COLL_EPEER or COLL_ETIMEDOUT. */
int cl_life_send(int fd, const void *buf, size_t n, int64_t deadline_ms);

/* The hello this rank (w->rank) sends on the connection it dialed to rank `to`. */
void cl_life_hello_make(const cl_life_who *w, int to, cl_life_hello *out);
/* The rank whose hello to this one (w->rank) h is, or -1 with *why said. */
int cl_life_hello_check(const cl_life_who *w, const cl_life_hello *h, const char **why);

/* Accepts what waits on l and reads the hellos at the gate: a socket whose hello proved
 * it is rank *from of w's agreement (the caller owns it now), or -1 when none is ready.
 * Strangers' connections are closed on the way. */
int cl_life_admit(cl_life_gate *g, const cl_life *l, const cl_life_who *w, int *from);
/* Closes the connections still at the gate. */
void cl_life_gate_close(cl_life_gate *g);

/* The length of a word of w's agreement (its header and set) with ncards cards. */
size_t cl_life_msg_len(const cl_life_who *w, int ncards);
/* Seals a word of len bytes (COLL_SECRET): its tag under the job's key. */
void cl_life_seal(const cl_life_who *w, uint8_t *msg, size_t len);
/* Reads what arrived on k, rank `from`'s link: 1 with one whole word of w's agreement
 * from that rank in k->buf (header, length, sender and seal checked), 0 while more is to
 * come, -1 when the link closed or carried what is not such a word (*why says; k->fd is
 * closed then). */
int cl_life_read(cl_life_link *k, const cl_life_who *w, int from, const char **why);
/* Closes k's socket and frees its buffer. */
void cl_life_link_close(cl_life_link *k);

#endif
