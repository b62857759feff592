/* Requests queued per connection, for transports whose progress copies into and out of
 * the caller's buffers (shm, ibverbs, loop): one definition of the request, its
 * completion, its test-and-free, and the list that lets a context free requests a caller
 * abandoned. The owner's mutex (the context's) guards the list, and the queues of shm and
 * ibverbs; loop's queues sit in pipes two contexts share, under the pipe's own mutex. */
#ifndef CL_REQQ_H
#define CL_REQQ_H

#include "base/lock.h"
#include "transports/transport.h"

#include <stdatomic.h>

typedef struct cl_req_owner {
    const struct cl_transport *tr; /* the requests' head */
    cl_lock *mu;
    cl_notifier *notifier;
    cl_tr_req *live; /* every request not yet tested */
} cl_req_owner;

struct cl_tr_req {
    cl_tr_req_head head;
    struct cl_tr_req *next; /* in its connection's queue */
    struct cl_tr_req *live_prev, *live_next;
    cl_req_owner *owner;
    cl_msg_hdr hdr_out;
    cl_msg_hdr *hdr_in;
    void *buf;
    size_t len;   /* send: payload bytes; recv: capacity, then the payload's length */
    size_t moved; /* stream bytes handled, header included */
    const cl_tr_sink *sink; /* receive: where the payload may go instead of buf */
    int sinking;            /* the sink accepted this payload */
    int status;
    atomic_int done;
};

typedef struct cl_reqq {
    cl_tr_req *head, *tail;
} cl_reqq;

/* A send (hdr, buf) or, with hdr_in set, a receive (buf of cap bytes); NULL if no memory. */
cl_tr_req *cl_req_send(cl_req_owner *o, const cl_msg_hdr *hdr, const void *buf);
cl_tr_req *cl_req_recv(cl_req_owner *o, cl_msg_hdr *hdr, void *buf, size_t cap);
/* Under o->mu: lists r as live and appends it to q. */
void cl_reqq_push(cl_reqq *q, cl_tr_req *r);
/* Takes o->mu to list r as live, for a transport whose queues another mutex guards. */
void cl_req_keep(cl_tr_req *r);
/* Appends r, listed as live already, to q. */
void cl_reqq_append(cl_reqq *q, cl_tr_req *r);
/* Removes the head of q and returns it. */
cl_tr_req *cl_reqq_pop(cl_reqq *q);
/* Marks r done with status and wakes waiters. */
void cl_req_complete(cl_tr_req *r, int status);
/* Removes the head of q and completes it with status. */
void cl_reqq_finish_head(cl_reqq *q, int status);
/* Completes every queued request with status. */
void cl_reqq_fail(cl_reqq *q, int status);
/* The transport's test(): done, status and size once complete; frees the request. */
int cl_req_test(cl_tr_req *r, int *done, size_t *nbytes);
/* The transport's moved(): r->moved as it stands. */
size_t cl_req_moved(cl_tr_req *r);
/* At context destroy, after the progress thread stopped: frees what nobody will test. */
void cl_req_owner_free_live(cl_req_owner *o);

#endif
