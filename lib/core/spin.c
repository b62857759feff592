/* The spin phase of every wait: for up to spin_us after the last progress, a waiter moves
 * bytes on its own thread (the transport's poll) instead of sleeping until the
 * transport's thread wakes it; a wake-up costs tens of microseconds, more than a small
 * message. While it polls, peers skip waking this side's threads. A wait for a step of
 * many bytes spins longer (cl_spin_expect): the peer is busy reducing or copying the
 * previous one, which moves nothing we can see. Bytes moving count as
 * progress too, for at most SPIN_BUSY_FACTOR x spin_us after the last completed
 * transfer: a large message takes longer than spin_us, and giving up the spin midway
 * hands every later step of the collective to thread wake-ups (seen: 4 MiB all-reduces
 * on shm at 1000 us instead of 350). The cap keeps a waiter whose peer is silent while
 * other transfers flow from spinning past the point where its timeout is checked. */
#include "comm.h"

#include "util.h"

#include <sched.h>

enum { SPIN_BUSY_FACTOR = 20, SPIN_BYTES_PER_US = 4096 };

static void set_on(cl_spin *s, int on)
{
    coll_comm *c = s->comm;
    if (s->on != on && c->tr->poll)
        c->tr->poll(c->ctx, on ? CL_POLL_BEGIN : CL_POLL_END);
    s->on = on;
}

cl_spin cl_spin_start(coll_comm *c)
{
    cl_spin s = {.comm = c, .budget_us = c->spin_us};
    set_on(&s, c->spin_us > 0); /* from the start: the first messages need no wake-up */
    return s;
}

void cl_spin_expect(cl_spin *s, size_t bytes)
{
    int64_t cap = (int64_t)SPIN_BUSY_FACTOR * s->comm->spin_us;
    int64_t want = s->comm->spin_us + (int64_t)(bytes / SPIN_BYTES_PER_US);
    s->budget_us = want < cap ? want : cap;
}

void cl_spin_progress(cl_spin *s)
{
    s->since = s->done_at = 0;
}

int cl_spin_poll(cl_spin *s)
{
    coll_comm *c = s->comm;
    /* The clock every 8th poll: under a hypervisor a read costs about as much as a poll. */
    if (!s->since || (++s->polls & 7) == 0) {
        int64_t now = cl_now_us();
        if (!s->since)
            s->since = now;
        if (!s->done_at)
            s->done_at = now;
        if (now - s->since >= s->budget_us ||
            now - s->done_at >= (int64_t)SPIN_BUSY_FACTOR * c->spin_us) {
            set_on(s, 0);
            return 0;
        }
    }
    set_on(s, 1);
    if (c->tr->poll && c->tr->poll(c->ctx, CL_POLL))
        s->since = 0; /* bytes moved: the peer is busy, not gone */
    /* The transport's thread, or with more ranks than cores another rank, needs the core. */
    if (!c->tr->poll || c->crowded)
        sched_yield();
    return 1;
}

void cl_spin_stop(cl_spin *s)
{
    set_on(s, 0);
}
