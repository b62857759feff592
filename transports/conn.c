/* See conn.h. */
#include "transports/conn.h"

#include "collective.h"

#include <stdlib.h>
#include <unistd.h>

/* Every connection and listener of these transports starts with its head. */
static cl_conn *head(cl_tr_conn *c)
{
    return (cl_conn *)(void *)c;
}

static cl_listener *lhead(cl_tr_listener *l)
{
    return (cl_listener *)(void *)l;
}

void cl_conns_init(cl_conns *s, const cl_conn_ops *ops, const cl_transport *tr,
                   const cl_tr_config *cfg)
{
    s->ops = ops;
    s->vet = cfg->vet;
    s->vet_arg = cfg->vet_arg;
    s->reqs = (cl_req_owner){tr, &s->pg.mu, cfg->notifier, NULL};
}

void cl_conns_add_listener(cl_conns *s, cl_tr_listener *l, int fd)
{
    cl_listener *h = lhead(l);
    h->lfd.fd = fd;
    h->lfd.vet = s->vet;
    h->lfd.vet_arg = s->vet_arg;
    cl_lock_take(&s->pg.mu);
    h->next = s->listeners;
    s->listeners = l;
    cl_lock_give(&s->pg.mu);
}

void cl_conn_link(cl_tr_conn *c)
{
    cl_conns *s = head(c)->set;
    cl_lock_take(&s->pg.mu);
    head(c)->next = s->all;
    s->all = c;
    if (s->down) /* the context shut down while this connection was being made */
        s->ops->fail(c, s->down);
    cl_progress_watch(&s->pg, head(c)->sock, c);
    cl_lock_give(&s->pg.mu);
}

int cl_conn_enqueue(cl_tr_conn *c, cl_tr_req *r, cl_tr_req **out)
{
    if (!r)
        return COLL_ENOMEM;
    cl_conns *s = head(c)->set;
    cl_lock_take(&s->pg.mu);
    cl_reqq_push(&head(c)->q, r);
    if (head(c)->dead)
        s->ops->fail(c, head(c)->dead);
    else
        s->ops->queued(c);
    cl_lock_give(&s->pg.mu);
    *out = r;
    return COLL_OK;
}

int cl_conn_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    return cl_conn_enqueue(c, cl_req_send(&head(c)->set->reqs, hdr, buf), out);
}

int cl_conn_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    return cl_conn_enqueue(c, cl_req_recv(&head(c)->set->reqs, hdr, buf, cap), out);
}

void cl_conn_fail(cl_tr_conn *c, int status)
{
    cl_conn *h = head(c);
    if (!h->dead)
        h->dead = status;
    cl_reqq_fail(&h->q, h->dead);
}

void cl_conn_close_sock(cl_tr_conn *c)
{
    cl_conn *h = head(c);
    if (h->sock >= 0) {
        cl_progress_unwatch(&h->set->pg, h->sock);
        close(h->sock);
        h->sock = -1;
    }
}

void cl_conn_close(cl_tr_conn *c)
{
    cl_conns *s = head(c)->set;
    cl_lock_take(&s->pg.mu);
    s->ops->fail(c, COLL_EPEER);
    cl_conn_close_sock(c);
    cl_lock_give(&s->pg.mu);
}

void cl_listener_close(cl_tr_listener *l)
{
    cl_listen_close(&lhead(l)->lfd);
}

/* Every farewell is out before the first lifeline closes: a peer that sees EOF first
 * would not learn why. */
void cl_conns_shutdown(cl_conns *s, int status, const cl_msg_hdr *farewell)
{
    cl_lock_take(&s->pg.mu);
    if (!s->down)
        s->down = status;
    int said = 0;
    for (cl_tr_conn *c = s->all; c && farewell; c = head(c)->next)
        said |= s->ops->farewell(c, farewell);
    if (said)
        s->ops->flush(s);
    for (cl_tr_conn *c = s->all; c; c = head(c)->next) {
        s->ops->fail(c, status);
        cl_conn_close_sock(c);
    }
    cl_lock_give(&s->pg.mu);
}

void cl_conns_free(cl_conns *s)
{
    for (cl_tr_conn *c = s->all; c;) {
        cl_tr_conn *n = head(c)->next;
        s->ops->fail(c, COLL_EABORTED);
        s->ops->release(c);
        c = n;
    }
    for (cl_tr_listener *l = s->listeners; l;) {
        cl_tr_listener *n = lhead(l)->next;
        cl_listen_close(&lhead(l)->lfd);
        free(l);
        l = n;
    }
    cl_req_owner_free_live(&s->reqs); /* requests their callers abandoned */
    cl_progress_close(&s->pg);
}
