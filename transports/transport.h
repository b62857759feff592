/* The transport contract (internal). Algorithms are written once against it and never
 * know which transport carries the bytes. It follows the shape of NCCL's net plugin.
 *
 * - A context (cl_tr_ctx) belongs to one communicator. Its functions may be called from
 *   any thread; none of them blocks. Progress happens on the transport's own thread (tcp)
 *   or inside the calls themselves (loop), never because the caller polls.
 * - Connections are one-directional: connect() gives a send connection, accept() a
 *   receive connection. connect() sends `hello` (CL_HELLO_BYTES) ahead of any data;
 *   accept() returns the hello it read so the caller can validate and identify the peer.
 *   A listener's handle is at most CL_HANDLE_BYTES and travels through the rendezvous
 *   store or an all-gather.
 * - Every message is a cl_msg_hdr followed by hdr.len payload bytes. The transport reads
 *   only hdr.len; the rest belongs to the caller. Sends and receives on one connection
 *   complete in posting order and match in posting order. A message longer than the
 *   posted receive fails the receive with COLL_EMISMATCH.
 * - Requests are owned by the transport. test() reports done and, once done, frees the
 *   request and returns its status (payload bytes in *nbytes). Every completion calls
 *   cl_notify() on the context's notifier so a waiter can sleep instead of spinning.
 * - EOF, reset or a failed write: pending and later requests on that connection fail
 *   with COLL_EPEER. shutdown() fails every pending request of the context with
 *   `status` and closes every connection, so peers see EOF promptly. Before closing a
 *   send connection that sits at a message boundary it sends `farewell` (a header-only
 *   message, may be NULL) without waiting, so the peer can learn why; best effort.
 */
#ifndef CL_TRANSPORT_H
#define CL_TRANSPORT_H

#include "base/notifier.h"

#include <stddef.h>
#include <stdint.h>

/* A listener's handle: room for auto's, which carries every transport's (plugins' too). */
#define CL_HANDLE_BYTES 256
#define CL_HELLO_BYTES 64
#define CL_MSG_MAGIC 0xC011u
#define CL_NOW_BYTES 8192 /* the largest payload sent by send_now (the fast path) */

/* The per-message header, little-endian on the wire (every supported host is). */
typedef struct cl_msg_hdr {
    uint16_t magic;
    uint8_t coll; /* cl_coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t codec;
    uint16_t flags;
    uint32_t len;  /* payload bytes that follow */
    uint32_t seq;  /* operation sequence number (p2p: per-peer message number) */
    uint32_t unit; /* segment index within the operation */
    uint32_t tag;  /* p2p tag, broadcast root */
    uint64_t count;
} cl_msg_hdr;
_Static_assert(sizeof(cl_msg_hdr) == 32, "wire header is 32 bytes");

typedef struct cl_tr_ctx cl_tr_ctx;
typedef struct cl_tr_listener cl_tr_listener;
typedef struct cl_tr_conn cl_tr_conn;
typedef struct cl_tr_req cl_tr_req;

enum { CL_POLL_BEGIN, CL_POLL, CL_POLL_END };

/* The first member of every transport's request: the transport whose test() and moved()
 * serve it. auto hands its inner transports' requests out as they are, with no wrapper
 * and no allocation per message; its own test() finds the right one here. */
typedef struct cl_tr_req_head {
    const struct cl_transport *tr;
} cl_tr_req_head;
#define CL_TR_OF_REQ(r) (((const cl_tr_req_head *)(const void *)(r))->tr)

/* The caller's judgement of a hello: NULL takes the connection, else why it is refused.
 * Any thread may call it (tcp's loop thread does). */
typedef const char *(*cl_tr_vet)(void *arg, const uint8_t hello[CL_HELLO_BYTES]);

typedef struct cl_tr_config {
    const char *device;    /* interface name or NCCL-style list; NULL: auto */
    int timeout_ms;        /* a connection that sends no hello in this time is dropped */
    cl_notifier *notifier; /* signalled on every completion */
    char *err;             /* NULL, or where ctx_create says why it failed */
    size_t errlen;
    /* Optional. Every hello is put to vet before the transport gives its connector
     * anything (shm maps its ring and sends an eventfd back, ibverbs brings a QP up and
     * sends the rkey of its slots) or holds it for accept() (tcp); what vet refuses is
     * closed and freed at once. accept()'s caller still judges what comes through (a
     * duplicate link is its business). */
    cl_tr_vet vet;
    void *vet_arg;
    int family; /* socket transports: AF_INET, AF_INET6, AF_UNSPEC (IPv4 where there is one) */
    /* 1: the caller does without this transport when it does not start or listen (auto
     * with a plugin) and says so itself: the transport says its own reasons at info,
     * not as errors. 0: they are the user's errors. */
    int optional;
    /* rails: a rail past the first only to a peer whose address for it is on that
     * interface's network (auto's default: a second NIC may not reach every host);
     * 0 (COLL_TRANSPORT=rails): every rail both ends have. */
    int rails_on_net;
    /* The job's key (COLL_SECRET, CL_KEY_BYTES), NULL without one: a transport's own
     * hellos, which the caller's vet never sees (rails' rails past the first), carry a
     * tag under it, so that a stranger cannot hold their places. */
    const uint8_t *key;
} cl_tr_config;

/* ctx_create's sentence for the caller (coll_last_error), into cfg->err when given. */
void cl_tr_error(const cl_tr_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Where a receive with a sink sends its payload: straight from the transport's memory
 * (shm: the ring), piece by piece, so a reduction reads its operand where it lies
 * instead of after a copy into staging. */
typedef struct cl_tr_sink {
    /* The header arrived: 1 to take the payload through take(), 0 to copy it into buf. */
    int (*accept)(void *arg, const cl_msg_hdr *hdr);
    /* Payload bytes [off, off + n); n is a multiple of align. */
    void (*take)(void *arg, size_t off, const void *bytes, size_t n);
    void *arg;
    size_t align;
} cl_tr_sink;

typedef struct cl_transport {
    const char *name;
    /* 1: a connection carries messages both ways: its acceptor may send on it and its
     * dialer receive (link.c then gives a pair of ranks one connection, not two). A send
     * that fails leaves what the peer sent before it readable (its farewell). */
    int duplex;
    int (*ctx_create)(const cl_tr_config *cfg, cl_tr_ctx **out);
    void (*ctx_destroy)(cl_tr_ctx *ctx);
    int (*listen)(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out);
    /* COLL_INPROGRESS while no validated-length hello is waiting. */
    int (*accept)(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out);
    void (*close_listener)(cl_tr_listener *l);
    /* `want`: the bytes the link should buffer in flight (a ring neighbour's bulk link
     * asks for more than a link that carries small messages); transports with buffers of
     * their own size them by it, others ignore it. COLL_INPROGRESS: the peer's listener
     * cannot take a connection now (nothing was made); accept, then try again. */
    int (*connect)(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                   const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out);
    int (*isend)(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out);
    int (*irecv)(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out);
    int (*test)(cl_tr_req *r, int *done, size_t *nbytes);
    /* Optional (NULL: not known): the stream bytes of a request not yet done that moved
     * so far, header included. A waiter's no-progress deadline starts again while this
     * grows (a large message on a slow link is slow, not stuck). */
    size_t (*moved)(cl_tr_req *r);
    void (*close_conn)(cl_tr_conn *c);
    void (*shutdown)(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell);
    /* Optional (NULL: progress needs no caller). A waiter that polls moves bytes on its
     * own thread instead of waiting for the transport's thread to wake up. CL_POLL_BEGIN:
     * this thread polls from now on (peers may skip waking this side); CL_POLL: move what
     * can move now, without blocking; CL_POLL_END: it stops (and may sleep), so wake-ups
     * resume and a last poll takes what arrived meanwhile. Calls pair up per thread.
     * Returns the bytes a CL_POLL moved for any request (> 0: the peer is alive and busy). */
    size_t (*poll)(cl_tr_ctx *ctx, int mode);
    /* Optional (NULL: use irecv). irecv whose payload may go to sink instead of buf (the
     * transport calls accept() then, or never, which means buf); sink outlives the request. */
    int (*irecv_sink)(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, const cl_tr_sink *sink,
                      cl_tr_req **out);
    /* Optional (NULL: none), the fast path of small messages: one whole message moves
     * now, with no request, or nothing moves. send_now: COLL_OK when the header and its
     * hdr->len payload bytes went (in one piece: a peer never sees half of them),
     * COLL_INPROGRESS when they cannot go now (requests queued ahead on c, no room, the
     * connection busy on another thread), else the connection's failure. recv_now:
     * COLL_OK when c's next message was there whole, its header in *hdr and its payload
     * in buf (*nbytes); COLL_INPROGRESS when it is not whole yet or requests are queued
     * ahead; else the connection's failure, as a receive would have it (a payload over
     * cap fails c with COLL_EMISMATCH, *hdr holding the header that did not fit). Both
     * answer COLL_ENOTSUP, having done nothing, on a connection without a fast path (auto
     * over a transport that has none). */
    int (*send_now)(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf);
    int (*recv_now)(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes);
    /* A human-readable peer address for messages ("127.0.0.1:41711"). */
    const char *(*peer_name)(cl_tr_conn *c);
    /* Optional (NULL: not known): the link speed in Mb/s of the device ctx serves, as
     * its driver or plugin says (0: not known). auto takes the fastest for other hosts. */
    uint32_t (*speed_mbps)(cl_tr_ctx *ctx);
} cl_transport;

/* The registered transport called `name`, or NULL. */
const cl_transport *cl_transport_find(const char *name);
/* Comma-separated names of every registered transport, for error messages. */
const char *cl_transport_names(void);

extern const cl_transport cl_transport_tcp;
extern const cl_transport cl_transport_loop;
extern const cl_transport cl_transport_shm;
extern const cl_transport cl_transport_auto;
extern const cl_transport cl_transport_rails; /* tcp striped over every interface */
/* A rails connection of one rail as the tcp connection it is, which the caller then
 * owns and drives through cl_transport_tcp (auto: no rails layer per message where
 * there is nothing to stripe); NULL when c has more rails. */
cl_tr_conn *cl_rails_sole(cl_tr_conn *c);
/* Closes rails listener l's rails past the first n: its handle gave only n (auto's, out
 * of room), and a dialer told of fewer than the listener has would not be waited for. */
void cl_rails_keep(cl_tr_listener *l, int n);
extern const cl_transport cl_transport_ibverbs;      /* libibverbs, dlopen()ed */
extern const cl_transport cl_transport_ibverbs_fake; /* the same over in-process fake verbs */
/* 1 when libibverbs loads and lists at least one device (checked once, quietly). */
int cl_ibverbs_present(void);

#endif
