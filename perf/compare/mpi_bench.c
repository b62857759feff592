/* MPI_Allreduce (float, sum) over a range of sizes, printed in coll_perf's columns so
 * perf/compare reads both the same way: size, count, type, redop, root, time (us),
 * algbw, busbw (2(n-1)/n), #wrong. Every result is checked against the exact sum.
 * With -C pingpong, as coll_perf -C pingpong (and osu_latency): ranks 2k and 2k+1
 * bounce the message with MPI_Send/MPI_Recv, time = half the round trip, busbw = algbw,
 * the received message checked. With -C alltoall, MPI_Alltoall as coll_perf -C alltoall
 * times it: the size is a rank's whole buffer (n blocks), busbw = algbw x (n-1)/n, every
 * block received checked against its sender's values. With -C reduce_scatter,
 * all_gather, broadcast: MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast (root 0) as
 * coll_perf times them: the size is the whole vector (reduce-scatter's input, all-gather's
 * output), busbw = algbw x (n-1)/n (broadcast: algbw), results checked exactly.
 *   mpi_bench [-C allreduce|pingpong|alltoall|reduce_scatter|all_gather|broadcast]
 *             -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ALLREDUCE, PINGPONG, ALLTOALL, REDUCE_SCATTER, ALLGATHER, BROADCAST };
static int mode;

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

/* One round trip with the partner (rank ^ 1); a rank without one sits out. */
static void bounce(const float *in, float *out, int count, int me, int n)
{
    int peer = me ^ 1;
    if (peer >= n)
        return;
    if (me % 2 == 0)
        MPI_Send(in, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD);
    MPI_Recv(out, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (me % 2 == 1)
        MPI_Send(in, count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD);
}

static void once(const float *in, float *out, int count, int me, int n)
{
    if (mode == PINGPONG)
        bounce(in, out, count, me, n);
    else if (mode == ALLTOALL)
        MPI_Alltoall(in, count / n, MPI_FLOAT, out, count / n, MPI_FLOAT, MPI_COMM_WORLD);
    else if (mode == REDUCE_SCATTER)
        MPI_Reduce_scatter_block(in, out, count / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (mode == ALLGATHER)
        MPI_Allgather(in, count / n, MPI_FLOAT, out, count / n, MPI_FLOAT, MPI_COMM_WORLD);
    else if (mode == BROADCAST)
        MPI_Bcast(me == 0 ? (void *)in : out, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Block p came from rank p: its values at this rank's place in p's buffer. */
static long check_exchanged(const float *out, size_t count, int me, int n)
{
    long wrong = 0;
    size_t block = count / (size_t)n;
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < block; i++)
            wrong += out[(size_t)p * block + i] != value(p, (size_t)me * block + i);
    return wrong;
}

/* Reduce-scatter: this rank's block of the sum; all-gather: block p is rank p's first
 * count/n values; broadcast: rank 0's values (rank 0 itself keeps its own). */
static long check_placed(const float *out, size_t count, int me, int n)
{
    long wrong = 0;
    size_t block = count / (size_t)n;
    if (mode == REDUCE_SCATTER)
        for (size_t i = 0; i < block; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += value(r, (size_t)me * block + i);
            wrong += out[i] != want;
        }
    else if (mode == ALLGATHER)
        for (size_t i = 0; i < block * (size_t)n; i++)
            wrong += out[i] != value((int)(i / block), i % block);
    else
        for (size_t i = 0; me && i < count; i++)
            wrong += out[i] != value(0, i);
    return wrong;
}

static long check_bounced(const float *out, size_t count, int me, int n)
{
    long wrong = 0;
    for (size_t i = 0; (me ^ 1) < n && i < count; i++)
        wrong += out[i] != value(me ^ 1, i);
    return wrong;
}

static void run(size_t bytes, int iters, int warmup, int me, int n)
{
    size_t count = bytes / sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    for (size_t i = 0; i < count; i++)
        in[i] = value(me, i);
    for (int k = 0; k < warmup; k++)
        once(in, out, (int)count, me, n);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; k++)
        once(in, out, (int)count, me, n);
    double t = (MPI_Wtime() - t0) / iters / (mode == PINGPONG ? 2 : 1), worst;
    long wrong = mode == PINGPONG    ? check_bounced(out, count, me, n)
                 : mode == ALLTOALL  ? check_exchanged(out, count, me, n)
                 : mode == ALLREDUCE ? check(out, count, n)
                                     : check_placed(out, count, me, n),
         all;
    MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0) {
        double algbw = bytes / worst / 1e9;
        double bus = mode == PINGPONG || mode == BROADCAST ? 1.0
                     : mode == ALLREDUCE                   ? 2.0 * (n - 1) / n
                                                           : (double)(n - 1) / n;
        printf("%12zu  %12zu     float     sum      -1  %9.2f  %6.2f  %6.2f  %6ld\n", bytes,
               count, worst * 1e6, algbw, algbw * bus, all);
        fflush(stdout);
    }
    free(in);
    free(out);
}

/* A size in bytes, with K, M or G (powers of two) as coll_perf takes it. */
static size_t size_arg(const char *s)
{
    char *end;
    size_t v = strtoull(s, &end, 0);
    return *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : *end == 'G' ? v << 30 : v;
}

int main(int argc, char **argv)
{
    size_t lo = 8, hi = 8 << 20;
    int factor = 2, iters = 20, warmup = 5, c, me, n;
    MPI_Init(&argc, &argv);
    while ((c = getopt(argc, argv, "C:b:e:f:n:w:")) != -1) {
        switch (c) {
        case 'C':
            mode = strcmp(optarg, "pingpong") == 0         ? PINGPONG
                   : strcmp(optarg, "alltoall") == 0       ? ALLTOALL
                   : strcmp(optarg, "reduce_scatter") == 0 ? REDUCE_SCATTER
                   : strcmp(optarg, "all_gather") == 0     ? ALLGATHER
                   : strcmp(optarg, "broadcast") == 0      ? BROADCAST
                                                           : ALLREDUCE;
            break;
        case 'b': lo = size_arg(optarg); break;
        case 'e': hi = size_arg(optarg); break;
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
