/* A mutex for the paths every small message takes: taken and given with one atomic
 * operation each, inline, sleeping on a futex only when it is held. glibc's
 * pthread_mutex_trylock/unlock pair, called twice per 2-rank 8-byte all-reduce (the shm
 * fast path's send and receive), cost it 5-7% of its time here: the calls, the mutex
 * kind's checks, the owner and user counts. No condition variable pairs with it; where
 * one is needed, pthread's mutex stays. Not recursive. */
#ifndef CL_LOCK_H
#define CL_LOCK_H

#include <stdatomic.h>

typedef struct cl_lock {
    atomic_int v; /* 0 free, 1 held, 2 held and a thread may sleep on it */
} cl_lock;

/* The slow halves (lock.c): sleep until it is ours; wake one sleeper. */
void cl_lock_wait(cl_lock *l);
void cl_lock_wake(cl_lock *l);

/* 1 if taken, 0 if somebody holds it. */
static inline int cl_lock_try(cl_lock *l)
{
    int free = 0;
    return atomic_compare_exchange_strong_explicit(&l->v, &free, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static inline void cl_lock_take(cl_lock *l)
{
    if (!cl_lock_try(l))
        cl_lock_wait(l);
}

static inline void cl_lock_give(cl_lock *l)
{
    if (atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2)
        cl_lock_wake(l);
}

#endif
