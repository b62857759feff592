/* Small shared helpers: monotonic time, deadlines, checked size arithmetic, counters. */
#ifndef CL_UTIL_H
#define CL_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

int64_t cl_now_ms(void);
int64_t cl_now_us(void);
/* Adds v to a counter that one thread at a time writes (the running collective's, handed
 * on under a lock): a load and a store, no locked instruction on a small call's path;
 * readers on other threads see whole values. */
static inline void cl_tally(atomic_uint_least64_t *k, uint64_t v)
{
    atomic_store_explicit(k, atomic_load_explicit(k, memory_order_relaxed) + v,
                          memory_order_relaxed);
}
struct timespec cl_deadline_timespec(int64_t deadline_ms);
void cl_sleep_ms(int ms);
/* 64-bit FNV-1a, for job ids and secrets. */
uint64_t cl_hash(const void *data, size_t len, uint64_t seed);
/* Which machine this is (its kernel's boot id, else its hostname): ranks that share it
 * share its CPUs, whatever their network namespace or container. */
uint64_t cl_machine_id(void);
/* Which host this is for the network: the machine, its hostname and this process's
 * network namespace, or COLL_HOST's name on this machine when set. Ranks with equal ids
 * share memory and one network link (an emulated host counts as a host of its own). */
uint64_t cl_host_id(void);

/* Room for `need` more open descriptors: raises the soft RLIMIT_NOFILE (often 1024)
 * towards the hard one when short. 0 when there is room, else -1; *limit: the soft limit. */
int cl_fd_room(long need, long *limit);

/* s is a whole decimal number in [lo, hi] (no sign games, no trailing text): 0 and *out
 * set, else -1. */
int cl_parse_long(const char *s, long lo, long hi, long *out);

#define CL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CL_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
