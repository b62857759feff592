/* A cheap clock for what runs on every collective (the flight recorder's stamps, a
 * trace's spans): ticks of the invariant TSC where there is one, else CLOCK_MONOTONIC
 * nanoseconds, and their conversion to microseconds. On the floor, so that algorithms
 * time their passes without calling into the core. A read takes no lock and calls
 * nothing. */
#ifndef CL_CLOCK_H
#define CL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Chooses the TSC (and measures its rate) once per process; ticks read before are
 * nanoseconds. */
void cl_clock_start(void);
/* Ticks of the TSC where it is invariant, else nanoseconds (the functions below convert). */
extern int cl_clock_tsc;
/* Ticks as CLOCK_MONOTONIC microseconds, with their fraction (0 stays 0: not yet). */
double cl_clock_us(uint64_t t);
/* The conversion cl_clock_us makes now, held: the TSC's rate is refined at each call, so
 * times converted at different calls may swap by a little; a file whose events must
 * nest (trace.c) converts them all with one. */
typedef struct {
    uint64_t tick;
    double us, rate; /* CLOCK_MONOTONIC at tick; ticks per microsecond */
} cl_timebase;
cl_timebase cl_timebase_now(void);
double cl_timebase_us(const cl_timebase *b, uint64_t t);
static inline uint64_t cl_clock_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (cl_clock_tsc)
        return __builtin_ia32_rdtsc();
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
