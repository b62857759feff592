/* Interrupts of an init: see interrupt.h. */
#include "base/interrupt.h"

#include <stdatomic.h>

static atomic_uint raised;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only touch a lock-free count");

/* Per thread, as cl_init_err: an init runs on its caller's thread, and others may run
 * beside it (threads of one process meeting through mem://). */
static __thread unsigned since;
static __thread int armed;

void cl_interrupt_raise(void)
{
    atomic_fetch_add(&raised, 1);
}

int cl_interrupt_arm(void)
{
    if (armed)
        return 0;
    since = atomic_load(&raised);
    armed = 1;
    return 1;
}

void cl_interrupt_disarm(int mine)
{
    if (mine)
        armed = 0;
}

int cl_interrupted(void)
{
    return armed && atomic_load(&raised) != since;
}
