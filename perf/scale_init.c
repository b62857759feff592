/* What a communicator costs as ranks grow: init time, resident memory, descriptors and
 * the machine's shared memory, with N local ranks (perf/scale.sh runs it for several N
 * and transports). Every rank inits, runs a few small all-reduces (checked), and rank 0
 * prints one line: the slowest init, the largest RSS and descriptor count, and how much
 * the machine's Shmem grew while the communicator lived. A benchmark, not a test. */
#include "collective.h"
#include "spawn.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A "Key:   N kB" line of a /proc file, in MiB; -1 if absent. */
static double proc_mib(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    double v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, k) == 0 && line[k] == ':')
            v = strtod(line + k + 1, NULL) / 1024;
    if (f)
        fclose(f);
    return v;
}

static double open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    double n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n - 3; /* ".", ".." and the directory's own descriptor */
}

static int run(int rank, int size, const char *url, double shm_before, int iters)
{
    coll_config cfg = COLL_CONFIG_INIT;
    const char *t = getenv("SCALE_TIMEOUT_MS");
    cfg.timeout_ms = t ? atoi(t) : 120000;
    coll_comm *c;
    double t0 = now_ms();
    int rc = coll_init(&c, url, rank, size, &cfg);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init: %s: %s\n", rank, coll_strerror(rc),
                coll_last_error(NULL));
        return 1;
    }
    /* Every rank's numbers, the largest of each: init ms, RSS MiB, descriptors (after
     * the all-reduces: links open as they are used), Shmem MiB, wrong all-reduce results. */
    double m[5] = {now_ms() - t0, proc_mib("/proc/self/status", "VmRSS"), open_fds(),
                   proc_mib("/proc/meminfo", "Shmem") - shm_before, 0};
    for (int i = 0; i < iters && rc == COLL_OK; i++) {
        double v = rank + i;
        rc = coll_allreduce(c, &v, &v, 1, COLL_F64, COLL_SUM);
        m[4] += v != (double)size * (size - 1) / 2 + (double)size * i;
    }
    m[2] = open_fds();
    if (rc == COLL_OK)
        rc = coll_allreduce(c, m, m, 5, COLL_F64, COLL_MAX);
    const char *tr = getenv("COLL_TRANSPORT");
    if (rc == COLL_OK && rank == 0)
        printf("%6d %-5s %9.0f %9.1f %6.0f %9.0f %6.0f\n", size, tr ? tr : "auto", m[0], m[1],
               m[2], m[3], m[4]);
    if (rc != COLL_OK)
        fprintf(stderr, "rank %d: %s: %s\n", rank, coll_strerror(rc), coll_last_error(c));
    coll_destroy(c);
    return rc != COLL_OK || m[4] != 0;
}

int main(int argc, char **argv)
{
    int np = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 10;
    if (np < 1 || iters < 0) {
        fprintf(stderr, "usage: scale_init [NP [ALLREDUCES]]\n");
        return 2;
    }
    double shm_before = proc_mib("/proc/meminfo", "Shmem");
    int rank, size, status;
    char url[512];
    int who = cl_spawn(np, &rank, &size, url, sizeof(url), &status);
    if (who < 0) {
        perror("scale_init: spawn");
        return 2;
    }
    return who == 1 ? status : run(rank, size, url, shm_before, iters);
}
