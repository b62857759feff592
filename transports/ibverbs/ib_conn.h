/* The ibverbs transport's connection state, shared by its set-up half (ib.c: device,
 * bootstrap sockets, progress thread) and its data path (ib_data.c: the protocol).
 * Everything here is guarded by the context's mutex (ctx->pg.mu). */
#ifndef CL_IB_CONN_H
#define CL_IB_CONN_H

#include "base/addr.h"
#include "transports/ibverbs/ib_dev.h"
#include "transports/ibverbs/mr_cache.h"

#include "transports/conn.h"
#include "transports/transport.h"

/* A connection's slots: SLOTS of a size its sender chooses from the bytes the link asked
 * to keep in flight (connect's want), a power of two from SLOT_MIN to SLOT_MAX, told to
 * the receiver in its address (in KiB), which registers as many. A ring neighbour's bulk
 * link gets the largest; a link that carries small messages pins 128 KiB a side, not
 * 1 MiB. A message of a slot or more goes zero-copy. */
#define SLOTS 8
#define SLOT_MIN ((size_t)16 << 10)
#define SLOT_MAX ((size_t)128 << 10)
#define HDR sizeof(cl_msg_hdr)
#define BOOT_BYTES (CL_HELLO_BYTES + sizeof(cl_ib_addr))

/* Sender: slot writes plus zero-copy writes in flight; receiver: grants and one
 * clear-to-send. Receive queues: a landed chunk per slot plus one "done". */
#define SEND_DEPTH (2 * SLOTS + 2)
#define RECV_DEPTH (SLOTS + 1)

/* What a receiver writes into its sender's mailbox with a clear-to-send. */
typedef struct cl_ib_box {
    uint64_t addr;
    uint32_t rkey, pad;
} cl_ib_box;

/* A zero-copy message whose writes are all posted: it completes when they land, while
 * the next message is already being announced. */
#define FLIGHTS 4
typedef struct cl_ib_flight {
    cl_tr_req *req;
    struct ibv_mr *mr;
    int pieces; /* writes still to complete */
} cl_ib_flight;

struct cl_tr_conn {
    cl_conn base; /* first: the lifeline, the queue, the failure (conn.h) */
    cl_tr_ctx *ctx;
    int is_recv, ready, peer_gone;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t psn;
    char *slots; /* SLOTS x slot_bytes, registered */
    size_t slot_bytes;
    struct ibv_mr *slots_mr;
    cl_ib_box box; /* send: where clear-to-sends land; recv: their source */
    struct ibv_mr *box_mr;
    uint64_t raddr; /* send: the receiver's slots; recv: the sender's box */
    uint32_t rkey;
    uint32_t posted, written, granted, grant_seen; /* send: slot writes */
    struct ibv_mr *src_mr; /* send: the head message's payload, going zero-copy */
    int cts;               /* send: the receiver said where it goes */
    size_t sent;           /* send: zero-copy bytes posted */
    int pieces, pieces_done; /* send: the head message's zero-copy writes */
    int pieces_out;          /* send: zero-copy writes in flight, all messages */
    cl_ib_flight fly[FLIGHTS]; /* send: messages whose writes are posted, oldest first */
    int nfly;
    uint32_t arrived, consumed, acked; /* recv: chunks landed, copied out, granted back */
    int grants_out;                    /* recv: grant writes in flight */
    uint32_t len[SLOTS];               /* recv: bytes in each landed slot */
    uint8_t kind[SLOTS];               /* recv: a chunk, or a zero-copy announcement */
    size_t off;                        /* recv: bytes copied out of the current slot */
    struct ibv_mr *dst_mr;             /* recv: the head receive's buffer, being written */
    int done_seen;                     /* recv: the zero-copy payload has landed */
    uint8_t boot[BOOT_BYTES];          /* send: the acceptor's answer, as it arrives */
    size_t nboot;
    char name[CL_HANDLE_BYTES + 32];
};

struct cl_tr_ctx {
    cl_ib_dev dev;
    cl_mr_cache *mrs;
    int timeout_ms;
    cl_addr at;   /* where the bootstrap socket listens (port 0) */
    cl_conns set; /* its progress mutex guards everything here */
};

/* Fails every request of c with status (the first status sticks). */
void cl_ib_fail_all(cl_tr_conn *c, int status);
/* The same, but messages whose writes are all posted wait for their completions: the
 * peer may have received them and gone before the acknowledgements were polled. */
void cl_ib_fail_queued(cl_tr_conn *c, int status);
int cl_ib_post_recvs(cl_tr_conn *c, int n);
/* Moves what can move on c: sends into slots or zero-copy, landed chunks into receives. */
void cl_ib_pump(cl_tr_conn *c);
/* Drains c's completion queue and re-arms its notification. */
void cl_ib_poll(cl_tr_conn *c);
/* A header-only message on a send connection at a message boundary; 1 if posted. */
int cl_ib_farewell(cl_tr_conn *c, const cl_msg_hdr *h);

#endif
