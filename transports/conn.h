/* The skeleton of the transports whose connections each keep a socket as a lifeline and a
 * queue of requests that a progress thread moves (shm, ibverbs): the context's lists of
 * connections and listeners, linking a connection in, queueing a request, closing, the
 * shutdown and the teardown, written once. A transport starts its connection and listener
 * structs with the heads below (as requests start with cl_tr_req_head), embeds cl_conns in
 * its context and supplies what differs in cl_conn_ops. Everything here is guarded by the
 * progress thread's mutex (pg.mu). It never moves bytes: rings and queue pairs stay
 * behind the ops. */
#ifndef CL_CONN_H
#define CL_CONN_H

#include "transports/accept.h"
#include "transports/progress.h"
#include "transports/reqq.h"
#include "transports/transport.h"

typedef struct cl_conns cl_conns;

/* What differs between the transports; each is called under the mutex. */
typedef struct cl_conn_ops {
    /* Fails every request of c with status (the first status sticks in dead). */
    void (*fail)(cl_tr_conn *c, int status);
    /* A request joined the queue of c, which has not failed: move what can move now. */
    void (*queued)(cl_tr_conn *c);
    /* A header-only message on c, if a send connection at a message boundary (best
     * effort): 1 when it is still on its way. */
    int (*farewell)(cl_tr_conn *c, const cl_msg_hdr *h);
    /* After a farewell said 1: waits (briefly) for them all to land, as a peer that sees
     * EOF first would not learn why. */
    void (*flush)(cl_conns *s);
    /* At destroy, the progress thread stopped: frees c, its lifeline included. */
    void (*release)(cl_tr_conn *c);
} cl_conn_ops;

/* The first member of each connection. */
typedef struct cl_conn {
    cl_conns *set;
    cl_tr_conn *next; /* in set->all */
    int sock;         /* the lifeline: EOF means the peer closed or died; -1 once closed */
    int dead;         /* status that fails every request from now on */
    cl_reqq q;        /* pending sends or receives, in order */
} cl_conn;

/* The first member of each listener. */
typedef struct cl_listener {
    cl_tr_listener *next; /* in set->listeners: freed with the context */
    cl_listen_fd lfd;
} cl_listener;

/* A context's part. */
struct cl_conns {
    cl_progress pg; /* its mutex guards everything here and in the connections */
    const cl_conn_ops *ops;
    cl_tr_conn *all;
    cl_tr_listener *listeners;
    cl_req_owner reqs;
    cl_tr_vet vet; /* cl_tr_config's, for the listeners */
    void *vet_arg;
    int down; /* shutdown status: a connection linked later fails at once */
};

/* Fills s in before its progress thread starts (cl_progress_start(&s->pg, ...)). */
void cl_conns_init(cl_conns *s, const cl_conn_ops *ops, const cl_transport *tr,
                   const cl_tr_config *cfg);
/* Lists l, which now owns fd (listening, non-blocking), its accepts vetted by s's vet. */
void cl_conns_add_listener(cl_conns *s, cl_tr_listener *l, int fd);
/* Lists c (its head filled in) and watches its lifeline. */
void cl_conn_link(cl_tr_conn *c);
/* Queues r (NULL: COLL_ENOMEM) on c and moves what can move now, in the caller's thread. */
int cl_conn_enqueue(cl_tr_conn *c, cl_tr_req *r, cl_tr_req **out);
/* The transport's isend() and irecv(). */
int cl_conn_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out);
int cl_conn_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out);
/* Fails every queued request of c with status (the first status sticks). */
void cl_conn_fail(cl_tr_conn *c, int status);
/* Stops watching c's lifeline and closes it, so the peer sees EOF. */
void cl_conn_close_sock(cl_tr_conn *c);
/* The transport's close_conn() and close_listener(). */
void cl_conn_close(cl_tr_conn *c);
void cl_listener_close(cl_tr_listener *l);
/* The transport's shutdown(). */
void cl_conns_shutdown(cl_conns *s, int status, const cl_msg_hdr *farewell);
/* At destroy, the progress thread stopped: fails and releases every connection, frees the
 * listeners and the requests their callers abandoned, closes the thread's descriptors. */
void cl_conns_free(cl_conns *s);

#endif
