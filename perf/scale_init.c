/* What a communicator costs as ranks grow: init time, resident memory, descriptors and
 * the machine's shared memory, with N local ranks (perf/scale.sh runs it for several N
 * and transports). Every rank inits, runs a few small all-reduces (checked), splits the
 * ranks into evens and odds and runs as many on its half, and rank 0 prints one line:
 * the slowest init, the largest RSS and descriptor count, how much the machine's Shmem
 * grew while the communicator lived, and the slowest split (with its first all-reduce)
 * and the descriptors and Shmem after it (COLL_SPLIT_SHARE=1: the split uses the
 * world's links).
 * A benchmark, not a test. */
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

/* iters checked sum all-reduces of rank + i over c, whose members are `members` of the
 * world with ranks first, first + step, ...: how many came out wrong, or -1. */
static int sums(coll_comm *c, int rank, int first, int step, int iters)
{
    int n = coll_size(c), wrong = 0;
    double base = 0;
    for (int k = 0; k < n; k++)
        base += first + k * step;
    for (int i = 0; i < iters; i++) {
        double v = rank + i;
        if (coll_allreduce(c, &v, &v, 1, COLL_F64, COLL_SUM) != COLL_OK)
            return -1;
        wrong += v != base + (double)n * i;
    }
    return wrong;
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
     * the all-reduces: links open as they are used), Shmem MiB, wrong all-reduce results,
     * the split's ms with its first all-reduce, descriptors and Shmem MiB after the split's. */
    double m[8] = {now_ms() - t0, proc_mib("/proc/self/status", "VmRSS"), open_fds(),
                   proc_mib("/proc/meminfo", "Shmem") - shm_before, 0, 0, 0, 0};
    int wrong = sums(c, rank, 0, 1, iters);
    m[2] = open_fds();
    coll_comm *half = NULL;
    double t1 = now_ms();
    if (wrong >= 0 && (rc = coll_split(c, rank % 2, rank, &half)) == COLL_OK) {
        int w = sums(half, rank, rank % 2, 2, 1);
        m[5] = now_ms() - t1;
        int more = w < 0 ? w : sums(half, rank, rank % 2, 2, iters > 1 ? iters - 1 : 0);
        w = w < 0 || more < 0 ? -1 : w + more;
        wrong = w < 0 ? w : wrong + w;
        m[6] = open_fds();
        m[7] = proc_mib("/proc/meminfo", "Shmem") - shm_before;
    }
    m[4] = wrong;
    if (rc == COLL_OK && wrong < 0)
        rc = COLL_ESTATE; /* an all-reduce failed: the last errors say why */
    if (rc == COLL_OK)
        rc = coll_allreduce(c, m, m, 8, COLL_F64, COLL_MAX);
    const char *tr = getenv("COLL_TRANSPORT");
    if (rc == COLL_OK && rank == 0)
        printf("%6d %-5s %9.0f %9.1f %6.0f %9.0f %6.0f %9.0f %6.0f %9.0f\n", size,
               tr ? tr : "auto", m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
    if (rc != COLL_OK)
        fprintf(stderr, "rank %d: %s: %s / %s\n", rank, coll_strerror(rc), coll_last_error(c),
                half ? coll_last_error(half) : "");
    coll_destroy(half);
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
    int who = cl_spawn(np, 0, &rank, &size, url, sizeof(url), &status);
    if (who < 0) {
        perror("scale_init: spawn");
        return 2;
    }
    return who == 1 ? status : run(rank, size, url, shm_before, iters);
}
