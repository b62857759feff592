/* The spin phase of every wait: for up to spin_us after the last progress, a waiter moves
 * bytes on its own thread (the transport's poll) instead of sleeping until the
 * transport's thread wakes it; a wake-up costs tens of microseconds, more than a small
 * message. While it polls, peers skip waking this side's threads. */
#include "comm.h"

#include "util.h"

#include <sched.h>

static void set_on(cl_spin *s, int on)
{
    coll_comm *c = s->comm;
    if (s->on != on && c->tr->poll)
        c->tr->poll(c->ctx, on ? CL_POLL_BEGIN : CL_POLL_END);
    s->on = on;
}

cl_spin cl_spin_start(coll_comm *c)
{
    cl_spin s = {.comm = c};
    set_on(&s, c->spin_us > 0); /* from the start: the first messages need no wake-up */
    return s;
}

void cl_spin_progress(cl_spin *s)
{
    s->since = 0;
}

int cl_spin_poll(cl_spin *s)
{
    coll_comm *c = s->comm;
    /* The clock every 8th poll: under a hypervisor a read costs about as much as a poll. */
    if (!s->since || (++s->polls & 7) == 0) {
        int64_t now = cl_now_us();
        if (!s->since)
            s->since = now;
        if (now - s->since >= c->spin_us) {
            set_on(s, 0);
            return 0;
        }
    }
    set_on(s, 1);
    if (c->tr->poll)
        c->tr->poll(c->ctx, CL_POLL);
    /* The transport's thread, or with more ranks than cores another rank, needs the core. */
    if (!c->tr->poll || c->crowded)
        sched_yield();
    return 1;
}

void cl_spin_stop(cl_spin *s)
{
    set_on(s, 0);
}
