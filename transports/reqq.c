/* See reqq.h. */
#include "transports/reqq.h"

#include "collective.h"

#include <stdlib.h>

static cl_tr_req *req_new(cl_req_owner *o, void *buf, size_t len)
{
    cl_tr_req *r = malloc(sizeof(*r)); /* not calloc: glibc's calloc bypasses its tcache */
    if (r)
        *r = (cl_tr_req){.head = {o->tr}, .owner = o, .buf = buf, .len = len};
    return r;
}

cl_tr_req *cl_req_send(cl_req_owner *o, const cl_msg_hdr *hdr, const void *buf)
{
    cl_tr_req *r = req_new(o, (void *)buf, hdr->len);
    if (r)
        r->hdr_out = *hdr;
    return r;
}

cl_tr_req *cl_req_recv(cl_req_owner *o, cl_msg_hdr *hdr, void *buf, size_t cap)
{
    cl_tr_req *r = req_new(o, buf, cap);
    if (r)
        r->hdr_in = hdr;
    return r;
}

static void live_link(cl_tr_req *r)
{
    cl_req_owner *o = r->owner;
    r->live_next = o->live;
    if (o->live)
        o->live->live_prev = r;
    o->live = r;
}

void cl_reqq_append(cl_reqq *q, cl_tr_req *r)
{
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

void cl_reqq_push(cl_reqq *q, cl_tr_req *r)
{
    live_link(r);
    cl_reqq_append(q, r);
}

void cl_req_keep(cl_tr_req *r)
{
    cl_lock_take(r->owner->mu);
    live_link(r);
    cl_lock_give(r->owner->mu);
}

void cl_req_complete(cl_tr_req *r, int status)
{
    /* Once done is published the waiter may free r: nothing of it is read after. */
    cl_notifier *n = r->owner->notifier;
    r->status = status;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    cl_notify(n);
}

cl_tr_req *cl_reqq_pop(cl_reqq *q)
{
    cl_tr_req *r = q->head;
    q->head = r->next;
    if (!q->head)
        q->tail = NULL;
    return r;
}

void cl_reqq_finish_head(cl_reqq *q, int status)
{
    cl_req_complete(cl_reqq_pop(q), status);
}

void cl_reqq_fail(cl_reqq *q, int status)
{
    while (q->head)
        cl_reqq_finish_head(q, status);
}

size_t cl_req_moved(cl_tr_req *r)
{
    return __atomic_load_n(&r->moved, __ATOMIC_RELAXED);
}

int cl_req_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    *done = 1;
    if (nbytes)
        *nbytes = r->len;
    int status = r->status;
    cl_req_owner *o = r->owner;
    cl_lock_take(o->mu);
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        o->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    cl_lock_give(o->mu);
    free(r);
    return status;
}

void cl_req_owner_free_live(cl_req_owner *o)
{
    for (cl_tr_req *r = o->live; r;) {
        cl_tr_req *n = r->live_next;
        free(r);
        r = n;
    }
    o->live = NULL;
}
