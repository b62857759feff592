/* The clock of the recorder and the traces: see clock.h. */
#include "base/clock.h"

#include "base/util.h"

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

int cl_clock_tsc;
static double ticks_per_us = 1000.0; /* nanoseconds, unless the TSC is used */
static uint64_t base_tick;
static int64_t base_us;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

/* An invariant TSC (cpuid 0x80000007, EDX bit 8) ticks at one rate on every core, in
 * every power state: a read costs a third of clock_gettime's, which counts against an
 * 8-byte all-reduce of a microsecond. Its rate is measured once, over 2 ms, against
 * CLOCK_MONOTONIC, and refined by the longer interval at each conversion. */
static void clock_setup(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    cl_clock_tsc = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
#endif
    base_tick = cl_clock_ticks();
    base_us = cl_now_us();
    if (!cl_clock_tsc)
        return;
    int64_t until = base_us + 2000, now;
    while ((now = cl_now_us()) < until)
        ;
    ticks_per_us = (double)(cl_clock_ticks() - base_tick) / (double)(now - base_us);
}

cl_timebase cl_timebase_now(void)
{
    cl_timebase b = {base_tick, (double)base_us, ticks_per_us};
    int64_t now_us = 0;
    uint64_t now_tick = 0;
    for (int i = 0; i < 4; i++) { /* a pair read together: not one preempted between */
        uint64_t before = cl_clock_ticks();
        now_us = cl_now_us();
        now_tick = cl_clock_ticks();
        if ((double)(now_tick - before) < 20 * ticks_per_us)
            break;
    }
    if (cl_clock_tsc && now_us - base_us > 1000000) /* a longer interval measures it better */
        b.rate = (double)(now_tick - base_tick) / (double)(now_us - base_us);
    return b;
}

double cl_timebase_us(const cl_timebase *b, uint64_t t)
{
    return t ? b->us + (double)(int64_t)(t - b->tick) / b->rate : 0;
}

double cl_clock_us(uint64_t t)
{
    cl_timebase b = cl_timebase_now();
    return t ? cl_timebase_us(&b, t) : 0;
}

void cl_clock_start(void)
{
    pthread_once(&clock_once, clock_setup);
}
