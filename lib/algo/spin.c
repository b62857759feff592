/* The spin phase of every wait: for a budget after the last progress, a waiter moves
 * bytes on its own thread (the transport's poll) instead of sleeping until the
 * transport's thread wakes it; a wake-up costs tens of microseconds, more than a small
 * message. While it polls, peers skip waking this side's threads.
 * The budget is COLL_SPIN_US, stretched three ways, each capped at SPIN_CAP x spin_us:
 * - bytes moving count as progress (after the last completed transfer): a large message
 *   takes longer than spin_us, and giving the spin up midway hands every later step of
 *   the collective to thread wake-ups (seen: 4 MiB shm all-reduces at 1000 us, not 350);
 * - a wait for a step of many bytes spins longer (cl_spin_expect): the peer is busy
 *   reducing or copying the previous one, which moves nothing we can see;
 * - a communicator whose waits sleep and are woken soon after spins longer from then on
 *   (x4 at a time, halved again after SPIN_CALM waits that never slept): once one rank
 *   sleeps, its peers wait for its wake-up, give up their own spins and sleep too, and
 *   the pair stays in that slow mode (seen: 128 KiB tcp all-reduces at 385 us, not 45).
 * The cap keeps a waiter whose peer is silent while other transfers flow from spinning
 * past the point where its timeout is checked, and lets an idle rank sleep. */
#include "algo/spin.h"

#include "base/util.h"

#include <sched.h>

enum { SPIN_CAP = 20, SPIN_BYTES_PER_US = 4096, SPIN_CALM = 64, YIELD_EVERY = 4, TURN_US = 25 };

static void set_on(cl_spin *s, int on)
{
    const cl_algo_ctx *x = s->x;
    if (s->on != on && x->tr->poll && !s->quiet)
        x->tr->poll(x->tctx, on ? CL_POLL_BEGIN : CL_POLL_END);
    s->on = on;
}

static int64_t capped(const cl_spin_tune *t, int64_t us)
{
    int64_t cap = (int64_t)SPIN_CAP * t->spin_us;
    return us < cap ? us : cap;
}

static cl_spin begin(const cl_algo_ctx *x, int quiet)
{
    cl_spin_tune *t = x->spin;
    int boost = atomic_load_explicit(&t->boost, memory_order_relaxed);
    cl_spin s = {.x = x, .budget_us = capped(t, (int64_t)t->spin_us * boost), .quiet = quiet};
    set_on(&s, t->spin_us > 0); /* from the start: the first messages need no wake-up */
    return s;
}

cl_spin cl_spin_start(const cl_algo_ctx *x)
{
    return begin(x, 0);
}

cl_spin cl_spin_quiet(const cl_algo_ctx *x)
{
    return begin(x, 1);
}

void cl_spin_expect(cl_spin *s, size_t bytes)
{
    cl_spin_tune *t = s->x->spin;
    int64_t want = capped(t, t->spin_us + (int64_t)(bytes / SPIN_BYTES_PER_US));
    s->budget_us = want > s->budget_us ? want : s->budget_us;
}

/* Woken soon after giving up: the peer was about to answer, so spin longer next time. */
static void after_sleep(cl_spin *s)
{
    cl_spin_tune *t = s->x->spin;
    if (cl_now_us() - s->slept_at >= 4 * s->budget_us)
        return;
    int boost = atomic_load_explicit(&t->boost, memory_order_relaxed);
    if (boost < SPIN_CAP)
        atomic_store_explicit(&t->boost, boost * 4 < SPIN_CAP ? boost * 4 : SPIN_CAP,
                              memory_order_relaxed);
    atomic_store_explicit(&t->calm, 0, memory_order_relaxed);
}

void cl_spin_progress(cl_spin *s)
{
    if (s->slept_at)
        after_sleep(s);
    s->since = s->done_at = s->slept_at = 0;
}

/* With more ranks on a machine than cores, a poller gives its core away once it has had
 * a turn: moved bytes for TURN_US, or polled YIELD_EVERY times for nothing. A yield that
 * switches costs ~13 us here, and a peer on another core often answers within a few
 * polls: yielding after every poll, as this did before, took twice the time for small
 * all-reduces on 4 and 8 ranks over 2 cores. Moving bytes for long, without yielding, starves the rank
 * that shares the core and stalls the ring behind it. A turn is a time, not a byte count:
 * a byte costs tcp about four times what it costs shm. */
static int turn_over(cl_spin *s, size_t moved)
{
    if (moved) {
        s->idle = 0;
        int64_t now = cl_now_us();
        if (!s->turn_at)
            s->turn_at = now;
        if (now - s->turn_at < TURN_US)
            return 0;
    } else if (++s->idle < YIELD_EVERY) {
        return 0;
    }
    s->turn_at = 0;
    s->idle = 0;
    return 1;
}

int cl_spin_poll(cl_spin *s)
{
    const cl_algo_ctx *x = s->x;
    /* The clock every 8th poll, from the 8th: under a hypervisor a read costs about as much
     * as a poll, and most small messages arrive within the first few. */
    if ((++s->polls & 7) == 0) {
        int64_t now = cl_now_us();
        if (!s->since)
            s->since = now;
        if (!s->done_at)
            s->done_at = now;
        if (now - s->since >= s->budget_us || now - s->done_at >= capped(x->spin, INT64_MAX)) {
            set_on(s, 0);
            s->slept = 1;
            s->slept_at = now;
            return 0;
        }
    }
    set_on(s, 1);
    size_t moved = x->tr->poll && !s->quiet ? x->tr->poll(x->tctx, CL_POLL) : 0;
    if (moved)
        s->since = 0; /* bytes moved: the peer is busy, not gone */
    /* Without a poll, the transport's thread needs the core to move the bytes. */
    if ((!x->tr->poll && !s->quiet) || (x->spin->crowded && turn_over(s, moved)))
        sched_yield();
    return 1;
}

void cl_spin_stop(cl_spin *s)
{
    set_on(s, 0);
    cl_spin_tune *t = s->x->spin;
    if (s->slept || atomic_fetch_add_explicit(&t->calm, 1, memory_order_relaxed) < SPIN_CALM)
        return;
    atomic_store_explicit(&t->calm, 0, memory_order_relaxed);
    int boost = atomic_load_explicit(&t->boost, memory_order_relaxed);
    if (boost > 1)
        atomic_store_explicit(&t->boost, boost / 2, memory_order_relaxed);
}
