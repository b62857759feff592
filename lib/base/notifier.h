/* Completion notifier: the producer of completions (a transport) bumps a counter and
 * wakes sleepers; a waiter compares the counter it saw, so no wake-up between its test
 * and its sleep is lost. Depends on nothing of ours but the clock. */
#ifndef CL_NOTIFIER_H
#define CL_NOTIFIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Completion notifier shared by a communicator's waiters. The counter is read and
 * bumped without the mutex; only a notify that finds a sleeper takes it. */
typedef struct cl_notifier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t events;
    _Atomic int sleepers;
} cl_notifier;

void cl_notifier_init(cl_notifier *n);
void cl_notifier_destroy(cl_notifier *n);
void cl_notify(cl_notifier *n);
uint64_t cl_notifier_events(cl_notifier *n);
/* Sleeps until events != seen or the absolute deadline (ms, cl_now_ms clock) passes. */
void cl_notifier_wait(cl_notifier *n, uint64_t seen, int64_t deadline_ms);

#endif
