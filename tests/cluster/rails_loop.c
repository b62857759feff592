/* An all-reduce loop that checks every result (tests/cluster/rails_down.sh): RANK,
 * WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (env://); ITERS calls of
 * COUNT floats (defaults 60 and 1 Mi), inputs fresh each call. Rank 0 prints each
 * call's end time since the first call and its duration; at the end the wrong values of
 * every rank summed, and coll_perf's "Out of bounds values : 0 OK" line when none. */
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static float value(int rank, size_t i, int it)
{
    return (float)((rank + 1) * (int)((i + (size_t)it) % 97));
}

/* One checked call: the number of wrong values, or -1 when the call failed. */
static long long one_call(coll_comm *c, float *in, float *out, size_t count, int it)
{
    int rank = coll_rank(c), n = coll_size(c);
    for (size_t i = 0; i < count; i++)
        in[i] = value(rank, i, it);
    int rc = coll_allreduce(c, in, out, count, COLL_F32, COLL_SUM);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: call %d: %s: %s\n", rank, it, coll_strerror(rc),
                coll_last_error(c));
        return -1;
    }
    long long wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += out[i] != value(0, i, it) * (float)(n * (n + 1) / 2);
    return wrong;
}

int main(void)
{
    int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 60;
    size_t count = getenv("COUNT") ? (size_t)atoll(getenv("COUNT")) : (size_t)1 << 20;
    coll_comm *c;
    int rc = coll_init(&c, "env://", -1, -1, NULL);
    if (rc != COLL_OK) {
        fprintf(stderr, "coll_init: %s: %s\n", coll_strerror(rc), coll_last_error(NULL));
        return 2;
    }
    float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    if (!in || !out)
        return 2;
    long long wrong = 0, failed = 0;
    double t0 = now_ms(), last = t0;
    for (int it = 0; it < iters && !failed; it++) {
        long long w = one_call(c, in, out, count, it);
        failed = w < 0;
        wrong += w > 0 ? w : 0;
        double t = now_ms();
        if (coll_rank(c) == 0)
            printf("call %3d at %8.1f ms: %7.1f ms, %lld wrong\n", it, t - t0, t - last, w);
        last = t;
    }
    long long sum[2] = {wrong, failed}, all[2] = {0, 0};
    if (!failed && coll_allreduce(c, sum, all, 2, COLL_I64, COLL_SUM) != COLL_OK)
        all[1] = 1;
    if (coll_rank(c) == 0)
        printf("# #wrong %lld, failed ranks %lld\n%s", all[0], all[1],
               all[0] || all[1] || failed ? "" : "# Out of bounds values : 0 OK\n");
    coll_destroy(c);
    free(in);
    free(out);
    return wrong || failed || all[0] || all[1];
}
