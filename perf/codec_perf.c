/* codec_perf: throughput of every codec kernel next to memcpy of the same f32 bytes,
 * timed in the same run on one core (median of repetitions), at 4 MiB and 64 MiB of
 * f32 input, for the AVX-512 int8 encoder (where present), AVX2/F16C and the portable path.
 *   codec_perf [-r REPS]    ratio = memcpy time / kernel time (>1: faster than memcpy) */
#include "kernels/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { ENC, DEC, DEC_ADD, COPY };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_time(int kind, coll_codec codec, float *x, void *enc, float *y, size_t n,
                          int reps)
{
    double t[64];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        switch (kind) {
        case ENC: cl_encode(codec, enc, x, n); break;
        case DEC: cl_decode(codec, y, enc, n); break;
        case DEC_ADD: cl_decode_add(codec, y, enc, n); break;
        default: memcpy(y, x, n * 4); break;
        }
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp);
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    int reps = 11, c;
    while ((c = getopt(argc, argv, "r:")) != -1)
        reps = c == 'r' ? atoi(optarg) : reps;
    reps = reps < 1 ? 1 : reps > 63 ? 63 : reps;
    static const char *kinds[] = {"encode", "decode", "decode-add"};
    static const char *paths[] = {"c", "avx2", "avx512"}; /* avx512: int8 encode only */
    printf("# codec_perf: median of %d, GB/s of f32 input, ratio = memcpy time / kernel time\n",
           reps);
    printf("# %-5s %-10s %8s %6s %10s %10s %7s\n", "codec", "kernel", "MiB", "path", "GB/s",
           "memcpy", "ratio");
    size_t sizes[] = {1u << 20, 16u << 20}; /* floats: 4 MiB, 64 MiB */
    for (int si = 0; si < 2; si++) {
        size_t n = sizes[si];
        float *x = malloc(n * 4), *y = malloc(n * 4);
        void *enc = malloc(n * 4 + 64);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((i * 2654435761u) % 20001) / 1000.0f - 10.0f;
        memset(y, 0, n * 4);
        for (int codec = COLL_CODEC_FP16; codec <= COLL_CODEC_INT8; codec++)
            for (int level = 2; level >= 0; level--) {
                int vec = cl_codec_use_simd(level);
                if (vec != level)
                    continue;
                cl_encode((coll_codec)codec, enc, x, n);
                for (int k = ENC; k <= DEC_ADD; k++) {
                    double tm = median_time(COPY, (coll_codec)codec, x, enc, y, n, reps);
                    double tk = median_time(k, (coll_codec)codec, x, enc, y, n, reps);
                    printf("  %-5s %-10s %8zu %6s %10.2f %10.2f %7.2f\n", cl_codec_name(codec),
                           kinds[k], n * 4 >> 20, paths[vec], n * 4 / tk / 1e9, n * 4 / tm / 1e9,
                           tm / tk);
                }
            }
        free(x);
        free(y);
        free(enc);
    }
    return 0;
}
