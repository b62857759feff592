/* MPI_Allreduce (float, sum) over a range of sizes, printed in coll_perf's columns so
 * perf/compare reads both the same way: size, count, type, redop, root, time (us),
 * algbw, busbw (2(n-1)/n), #wrong. Every result is checked against the exact sum.
 *   mpi_bench -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Small integers, so every order of summation gives the exact same float. */
static float value(int rank, size_t i)
{
    return (float)((rank + 1) * (int)(i % 7 + 1));
}

static long check(const float *out, size_t count, int n)
{
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
            want += value(r, i);
        wrong += out[i] != want;
    }
    return wrong;
}

static void run(size_t bytes, int iters, int warmup, int me, int n)
{
    size_t count = bytes / sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    for (size_t i = 0; i < count; i++)
        in[i] = value(me, i);
    for (int k = 0; k < warmup; k++)
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; k++)
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, worst;
    long wrong = check(out, count, n), all;
    MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0) {
        double algbw = bytes / worst / 1e9;
        printf("%12zu  %12zu     float     sum      -1  %9.2f  %6.2f  %6.2f  %6ld\n", bytes,
               count, worst * 1e6, algbw, algbw * 2.0 * (n - 1) / n, all);
        fflush(stdout);
    }
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    size_t lo = 8, hi = 8 << 20;
    int factor = 2, iters = 20, warmup = 5, c, me, n;
    MPI_Init(&argc, &argv);
    while ((c = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
        switch (c) {
        case 'b': lo = strtoull(optarg, NULL, 0); break;
        case 'e': hi = strtoull(optarg, NULL, 0); break;
        case 'f': factor = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        default: MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (size_t b = lo; b <= hi && factor > 1; b *= (size_t)factor)
        run(b, iters, warmup, me, n);
    MPI_Finalize();
    return 0;
}
