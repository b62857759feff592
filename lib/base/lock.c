/* cl_lock's sleeping half: the three-state futex mutex of Drepper's "Futexes Are
 * Tricky". A waiter marks the lock contended (2) whenever it tries, so the holder's give
 * sees that a sleeper may be there and wakes one. */
#include "base/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void cl_lock_wait(cl_lock *l)
{
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void cl_lock_wake(cl_lock *l)
{
    syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
