/* The tcp transport's shared structures (internal): tcp.c sets connections up on the
 * libuv loop thread and arms it; tcp_io.c moves message bytes, on whichever thread gets
 * there first, and calls nothing of tcp.c (the arrows point one way).
 *
 * A connection's data path belongs to its `io` mutex, not to the loop: once the hello is
 * through, the socket is ours (a dup of libuv's, whose handle is closed) and any thread
 * holding io may read or write it without blocking. The loop thread only watches the
 * socket (a uv_poll) while requests wait and no caller polls, so a caller that polls
 * sends and receives small messages with no thread hand-off and no wake-up at all. */
#ifndef CL_TCP_CONN_H
#define CL_TCP_CONN_H

#include "base/addr.h"
#include "transports/tcp/tcp_span.h"
#include "transports/transport.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <uv.h>

struct cl_tr_req {
    cl_tr_req_head head;
    struct cl_tr_req *next;
    struct cl_tr_req *all_prev, *all_next; /* ctx->reqs, for cleanup */
    cl_tr_conn *conn;
    cl_msg_hdr hdr_out;
    cl_msg_hdr *hdr_in;
    void *buf;
    size_t len; /* send: payload bytes; recv: capacity, then the payload's length */
    size_t got; /* stream bytes moved so far, header included */
    /* Payload bytes on this stream (rails.c stripes a message: the rest go on other
     * rails); a receive's is hdr_in->len unless on_hdr, called when its header is in
     * (under c->io), says less. */
    size_t span;
    cl_tcp_hook on_hdr;
    cl_tcp_fhook on_fhdr;    /* a frame receiver (cl_tcp_irecv_frames): never completes */
    cl_tcp_frame on_frame;
    void *hook_arg;
    int status;
    int owned; /* the rest of a fast-path send: freed when done, by the transport */
    atomic_int done;
};

struct cl_tr_conn {
    uv_tcp_t tcp; /* set-up only: connect, the hello, its timer */
    cl_tr_ctx *ctx;
    cl_tr_listener *listener;    /* accepted conns: where the hello is delivered */
    struct cl_tr_conn *next_all; /* ctx->conns once listed (atomic: pollers walk it) */
    struct cl_tr_conn *next_ready;
    struct cl_tr_conn *next_pending; /* the listener's, until the hello is in (loop thread) */
    struct cl_tr_conn *next_grave;   /* ctx->graves (loop thread) */
    int pending, listed;             /* on those lists (loop thread) */
    int handles;                     /* libuv handles not yet closed (loop thread) */
    int gone;                        /* closed for good: freed once its handles are */
    int poll_fd;                     /* closed with the poll handle */
    int used;                        /* a request was made on it (ctx->mu) */
    cl_addr addr;
    char name[CL_HANDLE_BYTES + 8];
    uint8_t hello[CL_HELLO_BYTES];
    size_t hello_got;
    uv_timer_t hello_timer;
    uv_connect_t connect_req;
    int reading, setup_closed, timer_on; /* loop thread: set-up handles */

    pthread_mutex_t io; /* everything below */
    int fd;             /* the data socket; -1 before the hello and after close */
    int dead;           /* status that fails every request from now on */
    int sends_dead;     /* status that fails every send: a send failed, reads go on */
    int recvs_dead;     /* status that fails every receive: the stream broke, sends go on */
    int sent_on;        /* something was sent on it: its peer reads it (the farewell) */
    int send_blocked;   /* the socket's buffer was full: wait for writable */
    int asked;          /* events the loop was asked to watch */
    int watching;       /* events the poll handle watches (changed by the loop only) */
    int has_poll;       /* the poll handle exists and must be closed */
    uv_poll_t poll;
    cl_tr_req *sendq_head, *sendq_tail;
    cl_tr_req *recvq_head, *recvq_tail;
    char *rb; /* bytes read past a header, not yet claimed by a receive */
    size_t rb_at, rb_end;
    size_t recvs_ok; /* receives completed whole (cl_tcp_halt's answer) */
    size_t rx_total; /* bytes received (read without the lock: cl_tcp_rx_bytes) */
    size_t tx_total; /* bytes sent by queued sends (read without the lock: cl_tcp_tx_bytes) */
};

struct cl_tr_ctx {
    cl_notifier *notifier;
    int timeout_ms;
    cl_addr at; /* where listeners bind (port 0): the interface picked */
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t mu; /* cmds, conns list, listener ready queues, reqs list */
    struct cmd *cmd_head, *cmd_tail;
    cl_tr_conn *conns;
    struct cl_tr_listener *listeners;
    cl_tr_req *reqs;
    cl_tr_conn *graves;  /* unlisted, freed once no poller walks conns (loop thread) */
    atomic_int walkers;  /* pollers walking conns now */
    cl_tr_vet vet;       /* cl_tr_config's */
    void *vet_arg;
    int shutdown_status; /* loop thread only */
    atomic_int shutdowns; /* shutdown commands the loop thread has carried out */
    atomic_int pollers;  /* threads between CL_POLL_BEGIN and CL_POLL_END */
};

/* ---- tcp_io.c: under c->io unless said otherwise ------------------------------------ */

/* Marks r done with status and wakes waiters; r may be freed at once by its owner. */
void cl_tcp_complete(cl_tr_req *r, int status);
/* Fails every queued request with status; later ones fail at once. */
void cl_tcp_fail(cl_tr_conn *c, int status);
/* Queues a send (is_recv 0) or a receive and moves what can move now. Takes c->io.
 * Returns 1 when the loop must be asked to watch the socket (cl_tcp_arm). */
int cl_tcp_enqueue(cl_tr_conn *c, cl_tr_req *r, int is_recv);
/* Moves what can move now (*moved, if given, grows by the bytes moved); returns 1 when
 * the loop must be asked to watch the socket. */
int cl_tcp_progress(cl_tr_conn *c, size_t *moved);
/* The fast path (transport.h's send_now and recv_now). Take c->io if free; *arm as
 * cl_tcp_enqueue's answer. */
int cl_tcp_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, int *arm);
int cl_tcp_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes);
/* Loop thread: makes the poll handle watch what the queues need now. */
void cl_tcp_reconcile(cl_tr_conn *c);
/* Any thread: asks the loop thread to run cl_tcp_progress and cl_tcp_reconcile on c. */
void cl_tcp_arm(cl_tr_conn *c);

/* TCP_INFO's bytes acknowledged and time busy sending of fd (tcp_rate.c). */
int cl_tcp_sock_busy(int fd, uint64_t *acked, uint64_t *busy_us);

#endif
