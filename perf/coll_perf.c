/* coll_perf: bandwidth and correctness test in nccl-tests' format.
 *   coll_perf [--np N] [-C all_reduce|reduce_scatter|all_gather|broadcast|sendrecv|
 *                          reduce|gather|scatter|alltoall|alltoallv|pingpong]
 *             [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
 *             [-d float|double|half|bfloat16|int8|uint8|int32|int64|all] (or f32, f64,
 *                fp16, bf16) [-I 0|1]
 *             [-o sum|prod|min|max|avg|band|bor|bxor|all] [-T TIMEOUT_MS] [-z none|fp16|bf16|int8]
 *             [-J FILE]
 * Without launcher variables it spawns N local ranks (default 2); under mpirun, srun or
 * torchrun it is one rank and meets the others through env://. Sizes are bytes per rank
 * buffer (the all-gather output, the reduce-scatter input), as in nccl-tests. With a
 * codec (-z) two columns follow: bytes this rank put on the wire per call, and the
 * compression ratio against the uncompressed algorithm's bytes; #wrong then allows the
 * codec's error (int8: 0.1 x ranks on these small-integer inputs). sendrecv: every rank
 * sends to the next and receives from the previous (busbw = algbw); it has no in-place
 * form, so those columns are empty. reduce, gather and scatter use root 0; gather,
 * scatter and alltoall count n blocks in the size, busbw = algbw x (n-1)/n, reduce's
 * busbw = algbw, as nccl-tests; none of these four has an in-place column. pingpong:
 * ranks 2k and 2k+1 bounce a message (2k sends first, 2k+1 answers with its own), and
 * the time is half the round trip, the one-way latency as OSU's osu_latency reports it
 * (busbw = algbw; no in-place column; an odd last rank sits out). -J FILE also writes
 * every row as JSON. As in nccl-tests, the sizes are MIN x FACTOR^k up to MAX; the header
 * says so when MAX is not among them. The header names the transports of rank 0's ring
 * links and the footer the algorithms rank 0 ran, read from the library's info log (the
 * public API names neither). */
#include "spawn.h"
#include "verify.h"

#include "collective.h"

#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum coll { AR, RS, AG, BC, SR, RD, GA, SC, A2A, PP, A2AV, NCOLL };
static const char *coll_names[] = { "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                    "sendrecv",   "reduce",         "gather",     "scatter",
                                    "alltoall",   "pingpong",       "alltoallv" };
static const char *dt_names[] = { "float", "double", "half", "bfloat16",
                                  "int8",  "uint8",  "int32", "int64" };
static const size_t dt_size[] = { 4, 8, 2, 2, 1, 1, 4, 8 };
static const char *op_names[] = { "sum", "prod", "min", "max", "avg", "band", "bor", "bxor" };
enum { NOPS = sizeof(op_names) / sizeof(op_names[0]) };

typedef struct {
    enum coll coll;
    size_t minb, maxb;
    double factor;
    int iters, warmup, check, np, timeout_ms;
    int in_place; /* also time the in-place form (-I) */
    int dt_all, op_all;
    coll_codec codec;
    coll_dtype dt;
    coll_op op;
    const char *json_path;
    FILE *json;
} opts;

/* What ran, as the library's info log tells: the transports of this rank's ring links and
 * each (collective, algorithm) with the smallest and largest row (table size) it served.
 * The library logs a choice once per size class, at the class's first call. */
#define MAX_RAN 24
static struct {
    pthread_mutex_t mu;
    coll_log_level shown; /* the user's level ($COLL_DEBUG): lines up to it go to stderr */
    char chosen[16];     /* the communicator's transport: "auto", "shm", "tcp", ... */
    char transports[64]; /* what its ring links use: auto's choice per link */
    size_t row; /* the table size being timed; 0: the tool's own calls (not recorded) */
    int n;
    struct { char kind[24], algo[24]; size_t lo, hi; } algo[MAX_RAN];
} ran = { .mu = PTHREAD_MUTEX_INITIALIZER, .shown = COLL_LOG_WARN };

/* "... transport auto, ring ...: from 1 via shm NAME, to 1 via tcp ADDR; ..." (link.c):
 * auto names each link's transport before its peer, another transport only its peer. */
static void note_links(const char *msg)
{
    char name[16];
    if (sscanf(strstr(msg, "transport ") + 10, "%15[^ ,]", ran.chosen) != 1)
        return;
    int any = strcmp(ran.chosen, "auto") == 0; /* auto: each link names its own */
    for (const char *v = strstr(msg, " via "); v; v = strstr(v + 5, " via ")) {
        if (!any)
            snprintf(name, sizeof(name), "%s", ran.chosen);
        else if (sscanf(v + 5, "%15[^ ,;]", name) != 1 || strcmp(name, "-") == 0)
            continue; /* "-": no peer (1 rank) */
        if (!strstr(ran.transports, name)) {
            size_t at = strlen(ran.transports);
            snprintf(ran.transports + at, sizeof(ran.transports) - at, "%s%s", at ? ", " : "",
                     name);
        }
    }
}

/* "rank 0 allreduce of 8 bytes (class 2^3) on 2 ranks: doubling; model: ..." (choose.c) */
static void note_choice(const char *msg)
{
    char kind[24], algo[24];
    size_t bytes = ran.row;
    int rank, n, i;
    if (!bytes || sscanf(msg, "rank %d %23s of %*u bytes (class 2^%*d) on %d ranks: %23[^; ]",
                         &rank, kind, &n, algo) != 4 || strcmp(kind, "barrier") == 0)
        return; /* the barrier is the tool's own, between warm-up and timing */
    for (i = 0; i < ran.n; i++)
        if (strcmp(ran.algo[i].kind, kind) == 0 && strcmp(ran.algo[i].algo, algo) == 0)
            break;
    if (i == MAX_RAN)
        return;
    if (i == ran.n) {
        ran.n++;
        snprintf(ran.algo[i].kind, sizeof(ran.algo[i].kind), "%s", kind);
        snprintf(ran.algo[i].algo, sizeof(ran.algo[i].algo), "%s", algo);
        ran.algo[i].lo = ran.algo[i].hi = bytes;
    }
    ran.algo[i].lo = bytes < ran.algo[i].lo ? bytes : ran.algo[i].lo;
    ran.algo[i].hi = bytes > ran.algo[i].hi ? bytes : ran.algo[i].hi;
}

static void take_log(coll_log_level l, const char *msg, void *arg)
{
    static const char *tags[] = { "", "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };
    (void)arg;
    pthread_mutex_lock(&ran.mu);
    if (strstr(msg, "transport ") && strstr(msg, " via "))
        note_links(msg);
    else if (strstr(msg, "; model:"))
        note_choice(msg);
    pthread_mutex_unlock(&ran.mu);
    if (l <= ran.shown)
        fprintf(stderr, "coll %s: %s\n", tags[l], msg);
}

/* Reads the info log into `ran`, still showing the user the lines of COLL_DEBUG's level. */
static void watch_log(void)
{
    static const char *levels[] = { "error", "warn", "info", "debug", "trace" };
    const char *want = getenv("COLL_DEBUG");
    for (int i = 0; want && i < 5; i++)
        if (strcasecmp(want, levels[i]) == 0)
            ran.shown = (coll_log_level)(i + 1);
    coll_set_log(take_log, NULL,
                 ran.shown > COLL_LOG_INFO ? ran.shown : COLL_LOG_INFO);
}

static void timing_row(size_t shown)
{
    pthread_mutex_lock(&ran.mu);
    ran.row = shown;
    pthread_mutex_unlock(&ran.mu);
}

static void print_ran(void)
{
    pthread_mutex_lock(&ran.mu);
    printf("# Algorithms (rank 0) :");
    for (int i = 0; i < ran.n; i++)
        printf("%s %s %s %zu-%zu B", i ? "," : "", ran.algo[i].kind, ran.algo[i].algo,
               ran.algo[i].lo, ran.algo[i].hi);
    printf("%s\n", ran.n ? "" : " none logged");
    pthread_mutex_unlock(&ran.mu);
}

/* "64", "64K", "1M", "2G": 0 and *out set, or -1 for anything else ("1X", "", "-3"). */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double unit = 1;
    switch (*end) {
    case 'G': case 'g': unit *= 1024; /* fall through */
    case 'M': case 'm': unit *= 1024; /* fall through */
    case 'K': case 'k': unit *= 1024; end++; break;
    default: break;
    }
    if (end == s || *end || !(v >= 0) || v * unit > 1e15)
        return -1;
    *out = (size_t)(v * unit);
    return 0;
}

/* names[i], or an alias: nccl-tests' spelling without underscores ("allreduce"). */
static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0)
            return i;
        char bare[32];
        size_t k = 0;
        for (const char *p = names[i]; *p && k + 1 < sizeof(bare); p++)
            if (*p != '_')
                bare[k++] = *p;
        bare[k] = 0;
        if (strcmp(s, bare) == 0)
            return i;
    }
    return -1;
}

/* -d takes nccl-tests' names and the codec's (fp16, bf16; also f32, f64). */
static int lookup_dtype(const char *s)
{
    static const char *const alias[] = {"f32", "f64", "fp16", "bf16"};
    int k = lookup(s, dt_names, 8);
    for (int i = 0; k < 0 && i < 4; i++)
        if (strcmp(s, alias[i]) == 0)
            k = i;
    return k;
}

static int parse(int argc, char **argv, opts *o)
{
    static struct option longs[] = { { "np", required_argument, 0, 'N' },
                                     { "help", no_argument, 0, 'h' },
                                     { 0, 0, 0, 0 } };
    *o = (opts){ AR, 8, 256u << 20, 2, 20, 5, 1, 2, 0, 1, 0, 0, COLL_CODEC_NONE, COLL_F32,
                 COLL_SUM, NULL, NULL };
    int c, k = 0;
    static const char *codecs[] = { "none", "fp16", "bf16", "int8" };
    while ((c = getopt_long(argc, argv, "C:b:e:f:n:w:c:I:d:o:T:z:J:h", longs, NULL)) != -1) {
        switch (c) {
        case 'N': o->np = atoi(optarg); break;
        case 'b':
            if (parse_size(optarg, &o->minb))
                return -1;
            break;
        case 'e':
            if (parse_size(optarg, &o->maxb))
                return -1;
            break;
        case 'f': o->factor = atof(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'c': o->check = atoi(optarg); break;
        case 'I': o->in_place = atoi(optarg); break;
        case 'T': o->timeout_ms = atoi(optarg); break;
        case 'J': o->json_path = optarg; break;
        case 'z':
            if ((k = lookup(optarg, codecs, 4)) < 0)
                return -1;
            o->codec = (coll_codec)k;
            break;
        case 'C':
            if ((k = lookup(optarg, coll_names, NCOLL)) < 0)
                return -1;
            o->coll = (enum coll)k;
            break;
        case 'd':
            o->dt_all = strcmp(optarg, "all") == 0;
            if (!o->dt_all && (k = lookup_dtype(optarg)) < 0)
                return -1;
            o->dt = o->dt_all ? COLL_F32 : (coll_dtype)k;
            break;
        case 'o':
            o->op_all = strcmp(optarg, "all") == 0;
            if (!o->op_all && (k = lookup(optarg, op_names, NOPS)) < 0)
                return -1;
            o->op = o->op_all ? COLL_SUM : (coll_op)k;
            break;
        case 'h': return 1;
        default: return -1;
        }
    }
    int ok = o->np >= 1 && o->iters >= 1 && (o->in_place == 0 || o->in_place == 1);
    return ok && o->factor > 1 && o->minb <= o->maxb ? 0 : -1;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Collectives whose size counts n blocks (the all-gather's output, the reduce-scatter's
 * input, the gather's and the scatter's root buffer, the all-to-all's). */
static int blocked(enum coll c)
{
    return c == RS || c == AG || c == GA || c == SC || c == A2A || c == A2AV;
}

/* Elements per rank buffer for `bytes` (per block where blocked), as nccl-tests counts. */
static size_t count_for(const opts *o, size_t bytes, size_t es, int n)
{
    size_t count = bytes / es;
    return blocked(o->coll) ? count / (size_t)n : count;
}

/* The collectives coll_perf times without an in-place form. */
static int no_in_place(enum coll c)
{
    return c == SR || c == RD || c == GA || c == SC || c == PP;
}

/* To the next rank, from the previous one; one rank sends to itself by copying. */
static int sendrecv(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    int n = coll_size(c), me = coll_rank(c);
    coll_req *req;
    if (n == 1) {
        memcpy(r, s, count * dt_size[dt]);
        return COLL_OK;
    }
    int rc = coll_isend(c, s, count, dt, (me + 1) % n, 0, &req);
    if (rc != COLL_OK)
        return rc;
    rc = coll_recv(c, r, count, dt, (me + n - 1) % n, 0);
    int sent = coll_wait(req);
    return rc != COLL_OK ? rc : sent;
}

/* One round trip with the partner (rank ^ 1); a rank without one sits out. */
static int pingpong(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    int peer = coll_rank(c) ^ 1, first = coll_rank(c) % 2 == 0, rc = COLL_OK;
    if (peer >= coll_size(c))
        return COLL_OK;
    if (first)
        rc = coll_send(c, s, count, dt, peer, 1);
    if (rc == COLL_OK)
        rc = coll_recv(c, r, count, dt, peer, 1);
    if (rc == COLL_OK && !first)
        rc = coll_send(c, s, count, dt, peer, 1);
    return rc;
}

/* The all-to-all through the uneven form, every block count elements where the
 * all-to-all has it (in place: MPI's layout). */
static int alltoallv_even(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    int n = coll_size(c);
    size_t *a = malloc(2 * (size_t)n * sizeof(size_t));
    if (!a)
        return COLL_ENOMEM;
    for (int j = 0; j < n; j++)
        a[j] = count, a[n + j] = (size_t)j * count;
    int rc = coll_alltoallv(c, s, a, a + n, r, a, a + n, dt);
    free(a);
    return rc;
}

static int run_once(coll_comm *c, const opts *o, void *s, void *r, size_t count, coll_dtype dt,
                    coll_op op)
{
    switch (o->coll) {
    case SR: return sendrecv(c, s, r, count, dt);
    case PP: return pingpong(c, s, r, count, dt);
    case AR: return coll_allreduce(c, s, r, count, dt, op);
    case RS: return coll_reduce_scatter(c, s, r, count, dt, op);
    case AG: return coll_allgather(c, s, r, count, dt);
    case BC: return coll_broadcast(c, r, count, dt, 0);
    case RD: return coll_reduce(c, s, r, count, dt, op, 0);
    case GA: return coll_gather(c, s, r, count, dt, 0);
    case SC: return coll_scatter(c, s, r, count, dt, 0);
    case A2A: return coll_alltoall(c, s, r, count, dt);
    case A2AV: return alltoallv_even(c, s, r, count, dt);
    default: return COLL_EINVAL;
    }
}

static uint64_t count_unlike_rank(const char *got, size_t count, coll_dtype dt, coll_op op,
                                  int rank)
{
    size_t es = dt_size[dt];
    char *want = malloc(count * es + 1);
    uint64_t w = want ? 0 : count;
    if (want)
        cl_fill(want, count, dt, op, rank, 0);
    for (size_t i = 0; want && i < count; i++)
        w += memcmp(got + i * es, want + i * es, es) != 0;
    free(want);
    return w;
}

/* Fresh inputs, one call, then #wrong summed over every rank. */
static int check_once(coll_comm *c, const opts *o, char *s, char *r, size_t count, coll_dtype dt,
                      coll_op op, int inplace, uint64_t *wrong)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t es = dt_size[dt], rsz = o->coll == RS ? count * (size_t)n : count;
    char *in = inplace ? r : s;
    if (o->coll == AG)
        in = inplace ? r + (size_t)me * count * es : s;
    cl_fill(in, rsz, dt, op, me, 0);
    if (o->coll == BC)
        cl_fill(r, count, dt, op, 0, 0), memset(r, 0, me ? count * es : 0);
    /* The scatter's block p is what rank p would have filled; the all-to-all's block p is
     * this rank's values at p's place in the whole, so each receiver knows what came. */
    for (int p = 0; (o->coll == SC || o->coll == A2A || o->coll == A2AV) && p < n; p++)
        cl_fill((o->coll == SC ? s : in) + (size_t)p * count * es, count, dt, op, o->coll == SC ? p : me,
                o->coll == SC ? 0 : (size_t)p * count);
    int rc = run_once(c, o, in, r, count, dt, op);
    uint64_t w = 0;
    if (o->coll == SR) /* the previous rank's values, as a one-rank gather would hold them */
        w = count_unlike_rank(r, count, dt, op, (me + n - 1) % n);
    else if (o->coll == PP)
        w = (me ^ 1) < n ? count_unlike_rank(r, count, dt, op, me ^ 1) : 0;
    else if (o->coll == RD || o->coll == GA)
        w = me ? 0 : o->coll == RD ? cl_check_reduce(r, count, dt, op, n, 0)
                                   : cl_check_gather(r, count, dt, op, n);
    else if (o->coll == SC)
        w = cl_check_from(r, count, dt, op, me, 0);
    else if (o->coll == A2A || o->coll == A2AV)
        for (int p = 0; p < n; p++)
            w += cl_check_from(r + (size_t)p * count * es, count, dt, op, p, (size_t)me * count);
    else if (o->coll == AR)
        w = cl_check_reduce(r, count, dt, op, n, 0);
    else if (o->coll == RS)
        w = cl_check_reduce(r, count, dt, op, n, (size_t)me * count);
    else if (o->coll == AG)
        w = cl_check_gather(r, count, dt, op, n);
    else
        w = cl_check_gather(r, count, dt, op, 1);
    if (rc == COLL_OK)
        rc = coll_allreduce(c, &w, wrong, 1, COLL_I64, COLL_SUM);
    return rc;
}

static double bus_factor(enum coll c, int n)
{
    return c == AR                                       ? 2.0 * (n - 1) / n
           : c == BC || c == SR || c == RD || c == PP ? 1.0
                                                      : (double)(n - 1) / n;
}

static int measure(coll_comm *c, const opts *o, char *s, char *r, size_t count, coll_dtype dt,
                   coll_op op, int inplace, double *us, uint64_t *wrong, double *wire)
{
    char *in = inplace ? r : s;
    if (o->coll == AG && inplace)
        in = r + (size_t)coll_rank(c) * count * dt_size[dt];
    int rc = COLL_OK;
    for (int i = 0; i < o->warmup && rc == COLL_OK; i++)
        rc = run_once(c, o, in, r, count, dt, op);
    if (rc == COLL_OK)
        rc = coll_barrier(c);
    coll_stats st0, st1;
    coll_get_stats(c, &st0);
    double t0 = now_us();
    for (int i = 0; i < o->iters && rc == COLL_OK; i++)
        rc = run_once(c, o, in, r, count, dt, op);
    double t = (now_us() - t0) / o->iters / (o->coll == PP ? 2 : 1); /* one way */
    coll_get_stats(c, &st1);
    *wire = (double)(st1.wire_tx - st0.wire_tx) / o->iters;
    timing_row(0);
    if (rc == COLL_OK) /* the slowest rank's time, as nccl-tests reports */
        rc = coll_allreduce(c, &t, us, 1, COLL_F64, COLL_MAX);
    *wrong = 0;
    if (rc == COLL_OK && o->check)
        rc = check_once(c, o, s, r, count, dt, op, inplace, wrong);
    return rc;
}

static int run_size(coll_comm *c, const opts *o, char *s, char *r, size_t bytes, coll_dtype dt,
                    coll_op op, double *busbw_sum, int *rows)
{
    int n = coll_size(c);
    size_t es = dt_size[dt], count = count_for(o, bytes, es, n);
    size_t shown = (blocked(o->coll) ? count * (size_t)n : count) * es;
    double us[2], wire[2];
    uint64_t wrong[2];
    int forms = no_in_place(o->coll) || !o->in_place ? 1 : 2;
    for (int ip = 0; ip < forms; ip++) {
        timing_row(shown);
        int rc = measure(c, o, s, r, count, dt, op, ip, &us[ip], &wrong[ip], &wire[ip]);
        if (rc != COLL_OK) {
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", coll_rank(c), coll_names[o->coll],
                    coll_strerror(rc), coll_last_error(c));
            return rc;
        }
    }
    if (coll_rank(c) == 0) {
        const char *redop = o->coll == AR || o->coll == RS || o->coll == RD ? op_names[op] : "none";
        int rooted = o->coll == BC || o->coll == RD || o->coll == GA || o->coll == SC;
        printf("%12zu  %12zu  %8s  %6s  %6d", shown, shown / es, dt_names[dt], redop,
               rooted ? 0 : -1);
        if (o->json)
            fprintf(o->json, "%s{\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"count\":%zu,"
                             "\"type\":\"%s\",\"redop\":\"%s\"",
                    *rows ? ",\n" : "", coll_names[o->coll], n, shown, shown / es, dt_names[dt],
                    redop);
        for (int ip = 0; ip < forms; ip++) {
            double algbw = (double)shown / us[ip] / 1e3;
            printf("  %9.2f  %6.2f  %6.2f", us[ip], algbw, algbw * bus_factor(o->coll, n));
            if (o->check)
                printf("  %6llu", (unsigned long long)wrong[ip]);
            else
                printf("  %6s", "N/A"); /* not checked, as nccl-tests prints it */
            *busbw_sum += algbw * bus_factor(o->coll, n);
            if (o->json)
                fprintf(o->json, ",\"%s\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,"
                                 "\"wrong\":%llu,\"wire_bytes\":%.0f}",
                        ip ? "in_place" : "out_of_place", us[ip], algbw,
                        algbw * bus_factor(o->coll, n), (unsigned long long)wrong[ip], wire[ip]);
        }
        if (forms == 1)
            printf("  %9s  %6s  %6s  %6s", "-", "-", "-", "-");
        if (o->json)
            fprintf(o->json, "}");
        if (o->codec != COLL_CODEC_NONE) /* uncompressed: busbw's bytes, per rank */
            printf("  %12.0f  %6.2f", wire[0],
                   (double)shown * (o->coll == BC ? 1.0 : bus_factor(o->coll, n)) / wire[0]);
        printf("\n");
        fflush(stdout);
    }
    *rows += forms;
    return wrong[0] || (forms > 1 && wrong[1]) ? 1 : 0;
}

/* The largest size the sweep reaches: MIN x FACTOR^k <= MAX, as nccl-tests' loop. */
static size_t last_size(const opts *o)
{
    double b = (double)o->minb;
    while (b * o->factor <= (double)o->maxb)
        b *= o->factor;
    return (size_t)b;
}

static void header(const opts *o, int n)
{
    printf("# coll_perf %s: %d ranks, minBytes %zu maxBytes %zu step: %g(factor) warmup iters: "
           "%d iters: %d validation: %d\n",
           coll_names[o->coll], n, o->minb, o->maxb, o->factor, o->warmup, o->iters, o->check);
    pthread_mutex_lock(&ran.mu);
    printf("# transport %s: rank 0's ring links over %s; the algorithms that ran are listed "
           "at the end\n", ran.chosen[0] ? ran.chosen : "-",
           ran.transports[0] ? ran.transports : "none (1 rank)");
    pthread_mutex_unlock(&ran.mu);
    if (last_size(o) != o->maxb)
        printf("# sizes: minBytes x %g^k stop at %zu, short of maxBytes (as in nccl-tests: "
               "choose -b, -e, -f with maxBytes = minBytes x factor^k)\n",
               o->factor, last_size(o));
    printf("#\n");
    if (o->codec != COLL_CODEC_NONE)
        printf("# wire codec %s: the last columns are bytes on the wire per rank per call and "
               "the compression ratio\n#\n", (const char *[]){ "none", "fp16", "bf16", "int8" }[o->codec]);
    int z = o->codec != COLL_CODEC_NONE;
    printf("#                                                   out-of-place"
           "                       in-place\n");
    printf("#       size         count      type   redop    root       time   algbw   busbw "
           "#wrong       time   algbw   busbw #wrong%s\n", z ? "    wire bytes   ratio" : "");
    printf("#        (B)    (elements)                                 (us)  (GB/s)  (GB/s)"
           "                (us)  (GB/s)  (GB/s)%s\n", z ? "        (B/call)" : "");
}

static int run_all(coll_comm *c, const opts *o)
{
    int n = coll_size(c), failed = 0, rows = 0;
    size_t cap = o->maxb + 64;
    char *s = malloc(cap), *r = malloc(cap);
    if (!s || !r)
        return 2;
    memset(s, 0, cap);
    memset(r, 0, cap);
    if (coll_rank(c) == 0)
        header(o, n);
    if (coll_rank(c) == 0 && o->json)
        fprintf(o->json, "[\n");
    double busbw = 0;
    for (int d = o->dt_all ? 0 : (int)o->dt; d <= (o->dt_all ? 7 : (int)o->dt) && failed < 2; d++)
        for (int p = o->op_all ? 0 : (int)o->op; p <= (o->op_all ? NOPS - 1 : (int)o->op); p++) {
            if (o->coll != AR && o->coll != RS && o->coll != RD && p != (int)o->op)
                continue; /* no reduction: one op is enough */
            if ((o->coll == AR || o->coll == RS || o->coll == RD) && (o->op_all || o->dt_all) &&
                !cl_op_fits((coll_dtype)d, (coll_op)p))
                continue; /* -o all or -d all: the bitwise ops on the integer dtypes only */
            for (double b = (double)o->minb; b <= (double)o->maxb && failed < 2; b *= o->factor) {
                int rc = run_size(c, o, s, r, (size_t)b, (coll_dtype)d, (coll_op)p, &busbw, &rows);
                failed = rc < 0 ? 2 : (failed | rc);
            }
        }
    if (coll_rank(c) == 0) {
        printf("# Out of bounds values : %s\n", failed ? "FAILED" : "0 OK");
        printf("# Avg bus bandwidth    : %.4f GB/s\n", rows ? busbw / rows : 0.0);
        print_ran();
        printf("#\n");
        if (o->json)
            fprintf(o->json, "\n]\n");
    }
    free(s);
    free(r);
    return failed;
}

int main(int argc, char **argv)
{
    opts o;
    int asked = parse(argc, argv, &o);
    if (asked != 0) {
        fprintf(asked > 0 ? stdout : stderr,
                "usage: coll_perf [--np N] [-C all_reduce|reduce_scatter|all_gather|broadcast|"
                "sendrecv|reduce|gather|scatter|alltoall|alltoallv|pingpong] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] "
                "[-I 0|1] [-d DTYPE|all] [-o OP|all] [-T TIMEOUT_MS] [-z none|fp16|bf16|int8] "
                "[-J FILE]\n"
                "  sizes: bytes, or with K, M, G; collectives also without '_' (allreduce)\n"
                "  DTYPE: float|double|half|bfloat16|int8|uint8|int32|int64 (also f32, f64, "
                "fp16, bf16)\n"
                "  OP: sum|prod|min|max|avg|band|bor|bxor (band, bor, bxor: integer dtypes only;\n"
                "      -o all or -d all skips them on floats)\n");
        return asked > 0 ? 0 : 2;
    }
    int rank, size, status = 0;
    char url[600];
    int who = cl_spawn(o.np, 0, &rank, &size, url, sizeof(url), &status);
    if (who < 0) {
        perror("coll_perf: spawn");
        return 2;
    }
    if (who == 1)
        return status;
    watch_log();
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = o.timeout_ms;
    coll_comm *c;
    int rc = coll_init(&c, url, rank, size, &cfg);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init: %s: %s\n", rank, coll_strerror(rc),
                coll_last_error(NULL));
        return 2;
    }
    if (o.codec != COLL_CODEC_NONE) {
        rc = coll_set_codec(c, o.codec);
        cl_verify_tolerance(o.codec == COLL_CODEC_INT8 ? 0.1 * size : 0);
    }
    if (rc == COLL_OK && rank == 0 && o.json_path && !(o.json = fopen(o.json_path, "w"))) {
        perror(o.json_path);
        rc = COLL_ESYS;
    }
    int failed = rc != COLL_OK ? 2 : run_all(c, &o);
    if (o.json)
        fclose(o.json);
    coll_destroy(c);
    return failed ? 1 : 0;
}
