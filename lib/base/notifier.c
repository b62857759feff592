/* Completion notifier: transports bump a counter and wake sleepers; waiters compare the
 * counter they saw so no wake-up between test and sleep is ever lost. */
#include "base/notifier.h"
#include "base/util.h"

#include <time.h>

void cl_notifier_init(cl_notifier *n)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, &a);
    pthread_condattr_destroy(&a);
    atomic_init(&n->events, 0);
    atomic_init(&n->sleepers, 0);
}

void cl_notifier_destroy(cl_notifier *n)
{
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

/* Dekker with cl_notifier_wait: the notifier bumps events then reads sleepers; a sleeper
 * counts itself then reads events (both seq_cst). Either the sleeper sees the new count
 * or the notifier sees the sleeper and broadcasts under the mutex it waits on. */
void cl_notify(cl_notifier *n)
{
    atomic_fetch_add(&n->events, 1);
    if (atomic_load(&n->sleepers) == 0)
        return;
    pthread_mutex_lock(&n->mu);
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

uint64_t cl_notifier_events(cl_notifier *n)
{
    return atomic_load(&n->events);
}

void cl_notifier_wait(cl_notifier *n, uint64_t seen, int64_t deadline_ms)
{
    struct timespec ts = cl_deadline_timespec(deadline_ms);
    pthread_mutex_lock(&n->mu);
    atomic_fetch_add(&n->sleepers, 1);
    while (atomic_load(&n->events) == seen && cl_now_ms() < deadline_ms)
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    atomic_fetch_sub(&n->sleepers, 1);
    pthread_mutex_unlock(&n->mu);
}
