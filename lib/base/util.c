/* Time and hashing helpers used across the library. */
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int64_t cl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t cl_now_ms(void)
{
    return cl_now_us() / 1000;
}

struct timespec cl_deadline_timespec(int64_t deadline_ms)
{
    struct timespec ts = {(time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000L};
    return ts;
}

void cl_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

uint64_t cl_hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t cl_machine_id(void)
{
    char id[256] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(id, sizeof(id), f))
        gethostname(id, sizeof(id) - 1);
    if (f)
        fclose(f);
    return cl_hash(id, strlen(id), 0);
}

uint64_t cl_host_id(void)
{
    const char *named = getenv("COLL_HOST");
    if (named && *named)
        return cl_hash(named, strlen(named), cl_machine_id());
    char id[400] = "";
    int at = gethostname(id, 256) == 0 ? (int)strnlen(id, 256) : 0;
    id[at++] = '|';
    ssize_t n = readlink("/proc/self/ns/net", id + at, sizeof(id) - (size_t)at - 1);
    at += n > 0 ? (int)n : 0;
    return cl_hash(id, (size_t)at, cl_machine_id());
}

int cl_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    if (!s || !*s)
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = -3; /* ".", ".." and d's own descriptor */
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return d ? n : 0;
}

int cl_fd_room(long need, long *limit)
{
    struct rlimit r;
    *limit = -1;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return -1;
    rlim_t want = (rlim_t)(open_fds() + need);
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
        r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max > want ? want : r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
        getrlimit(RLIMIT_NOFILE, &r);
    }
    *limit = r.rlim_cur == RLIM_INFINITY ? LONG_MAX : (long)r.rlim_cur;
    return *limit >= (long)want ? 0 : -1;
}
