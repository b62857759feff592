/* record_cost: what the flight recorder adds to each collective, without a peer's noise.
 *   record_cost [CALLS [ROUNDS]]
 * Two one-rank communicators of this process, the recorder off on one
 * (coll_config.recorder_ops = -1) and on on the other (64), take 8-byte all-reduces in
 * blocks of CALLS (200000), alternating which goes first each round (ROUNDS, 21); it
 * prints the median and the fastest block of each in ns per call. A one-rank all-reduce
 * runs the whole issue path (checks, the engine's claim, the algorithm, the end) but no
 * transfer, so the difference is the recorder's own work; a two-rank all-reduce between
 * processes adds a scheduler's noise many times larger. */
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A one-rank communicator with the recorder keeping `ops` (negative: off). */
static coll_comm *world(int ops)
{
    char dir[] = "/tmp/record_cost.XXXXXX", url[64], rm[64];
    if (!mkdtemp(dir))
        return NULL;
    snprintf(url, sizeof(url), "file://%s", dir);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = "tcp";
    cfg.recorder_ops = ops;
    coll_comm *c = NULL;
    if (coll_init(&c, url, 0, 1, &cfg) != COLL_OK)
        fprintf(stderr, "record_cost: coll_init: %s\n", coll_last_error(NULL));
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    if (system(rm) != 0)
        fprintf(stderr, "record_cost: cannot remove %s\n", dir);
    return c;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 200000, rounds = argc > 2 ? atol(argv[2]) : 21;
    if (calls < 1 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: record_cost [CALLS [ROUNDS (1-1000)]]\n");
        return 2;
    }
    coll_comm *c[2] = {world(-1), world(64)};
    double *t[2] = {calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
    int rc = 1;
    if (!c[0] || !c[1] || !t[0] || !t[1])
        goto out;
    float f[2] = {1, 2};
    for (long r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            int w = (r & 1) ? 1 - k : k;
            double t0 = now_s();
            for (long i = 0; i < calls; i++)
                if (coll_allreduce(c[w], f, f, 2, COLL_F32, COLL_SUM) != COLL_OK)
                    goto out;
            t[w][r] = (now_s() - t0) / (double)calls * 1e9;
        }
    for (int w = 0; w < 2; w++) {
        qsort(t[w], (size_t)rounds, sizeof(double), by_value);
        printf("recorder %s: median %.1f ns, fastest %.1f ns per 8-byte all-reduce (1 rank)\n",
               w ? "on " : "off", t[w][rounds / 2], t[w][0]);
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "record_cost: %s\n", coll_last_error(c[0] ? c[0] : c[1]));
    coll_destroy(c[0]);
    coll_destroy(c[1]);
    free(t[0]);
    free(t[1]);
    return rc;
}
