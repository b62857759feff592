/* Completion notifier: transports bump a counter and wake sleepers; waiters compare the
 * counter they saw so no wake-up between test and sleep is ever lost. */
#include "transport.h"
#include "../lib/core/util.h"

#include <time.h>

void cl_notifier_init(cl_notifier *n)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, &a);
    pthread_condattr_destroy(&a);
    n->events = 0;
}

void cl_notifier_destroy(cl_notifier *n)
{
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

void cl_notify(cl_notifier *n)
{
    pthread_mutex_lock(&n->mu);
    n->events++;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

uint64_t cl_notifier_events(cl_notifier *n)
{
    pthread_mutex_lock(&n->mu);
    uint64_t e = n->events;
    pthread_mutex_unlock(&n->mu);
    return e;
}

void cl_notifier_wait(cl_notifier *n, uint64_t seen, int64_t deadline_ms)
{
    struct timespec ts = cl_deadline_timespec(deadline_ms);
    pthread_mutex_lock(&n->mu);
    while (n->events == seen && cl_now_ms() < deadline_ms)
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    pthread_mutex_unlock(&n->mu);
}
