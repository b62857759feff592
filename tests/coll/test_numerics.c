/* Numerics through the public API against numpy-like references: NaN (with payloads and
 * both signs), +-Inf, signed zeros, subnormals, the smallest normals and the largest
 * finite values, for every dtype x op on all-reduce (each algorithm COLL_ALGO forces, and
 * the engine's own choice), reduce-scatter and reduce, and for every codec on f32 sum and
 * avg. The rules checked (docs/algorithms.md, "Numerics"):
 * - MIN and MAX: any NaN gives the one canonical quiet NaN, as numpy.minimum/maximum give
 *   a NaN, and -0 orders below +0: the same bits whatever order an algorithm reduces in;
 * - SUM, PROD, AVG: a NaN wherever numpy's is (its bits unspecified), every other result
 *   to the bit (each column's values are chosen so that any order rounds alike);
 * - AVG divides a sum accumulated as numpy's mean does: f16 and bf16 in f32 (every rank
 *   holding 49152 in f16 averages to 49152, not inf), f32 and f64 in their own type;
 * - integers wrap in their type (SUM, PROD), int8/uint8/int32 AVG is exact, BAND, BOR
 *   and BXOR (integers only) are C's &, | and ^ on every bit, the sign bit included;
 * - through a codec (docs/codecs.md): a NaN where numpy's is; numpy's Inf (from an Inf
 *   input or a sum past f32's range) as that Inf, or through int8 as NaN (the scale of
 *   a block holding an Inf); finite inputs within the codec's error, n + 1 encodings of
 *   the largest magnitude around (a value past the format's range may come back
 *   non-finite), never with a flipped sign (int8 blocks below 2^-120 come back 0).
 * A column is a pattern of values over the ranks, repeated along the vector so each
 * kernel's vector body and tail see it. */
#include "common/harness.h"
#include "kernels/half.h"

#include "common/suite.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    PLAIN,
    NAN_MID,
    NAN_FIRST,
    NAN_LAST_NEG,
    NAN_ALL,
    PINF,
    NINF,
    BOTH_INF,
    INF_NAN,
    SUB,
    SUB_MIXED,
    NORM,
    MAX_ONE,
    MAX_BOTH,
    BIG,
    NEGZERO_FIRST,
    NEGZERO_LAST,
    NEGZERO_ALL,
    NFCOL
};
enum { IPLAIN, IMAX, IMIN, IALT, INEG, IZERO_MAX, NICOL };
enum { COUNT = NFCOL * 11 + 7 }; /* odd: every vector loop has a tail */

static const size_t esz[] = {4, 8, 2, 2, 1, 1, 4, 8};

static int is_float(int dt)
{
    return dt <= COLL_BF16;
}

/* A float column's value on rank r: a double, or a NaN with payload p and sign s. */
typedef struct {
    double v;
    int nan, sign;
} fval;

/* Largest finite, 1.5 x 2^emax (twice it overflows), smallest subnormal, smallest normal. */
static void limits(int dt, double *max, double *big, double *sub, double *norm)
{
    static const double t[4][4] = {
        {FLT_MAX, 0x1.8p127, 0x1p-149, 0x1p-126},
        {DBL_MAX, 0x1.8p1023, 0x1p-1074, 0x1p-1022},
        {65504.0, 49152.0, 0x1p-24, 0x1p-14},
        {0x1.fep127, 0x1.8p127, 0x1p-133, 0x1p-126},
    };
    *max = t[dt][0], *big = t[dt][1], *sub = t[dt][2], *norm = t[dt][3];
}

static fval fcol(int dt, int col, int r, int n)
{
    double max, big, sub, norm, k = r + 1;
    limits(dt, &max, &big, &sub, &norm);
    fval q = {0};
    int first = r == 0, last = r == n - 1;
    switch (col) {
    case PLAIN: q.v = k; break;
    case NAN_MID: /* the ranks: 1, 2, NaN, 4, MAX */
        q.nan = r == 2 % n, q.v = last ? max : k;
        break;
    case NAN_FIRST: q.nan = first, q.v = k; break;
    case NAN_LAST_NEG: q.nan = last, q.sign = 1, q.v = -k; break;
    case NAN_ALL: q.nan = 1 + r, q.sign = r % 2; break;
    case PINF: q.v = last ? INFINITY : k; break;
    case NINF: q.v = first ? -INFINITY : k; break;
    case BOTH_INF: q.v = first ? -INFINITY : last ? INFINITY : k; break;
    case INF_NAN: q.nan = last, q.v = first ? INFINITY : k; break;
    case SUB: q.v = k * sub; break;
    case SUB_MIXED: q.v = (r % 2 ? -k : k) * sub; break;
    case NORM: q.v = k * norm; break;
    case MAX_ONE: q.v = first ? max : 0; break;
    case MAX_BOTH: q.v = first ? max : last ? -max : 0; break;
    case BIG: q.v = big; break;
    case NEGZERO_FIRST: q.v = first ? -0.0 : 0.0; break;
    case NEGZERO_LAST: q.v = last ? -0.0 : 0.0; break;
    default: q.v = -0.0; break;
    }
    return q;
}

static int64_t icol(int dt, int col, int r, int n)
{
    static const int64_t lo[] = {0, 0, 0, 0, INT8_MIN, 0, INT32_MIN, INT64_MIN};
    static const int64_t hi[] = {0, 0, 0, 0, INT8_MAX, UINT8_MAX, INT32_MAX, INT64_MAX};
    switch (col) {
    case IPLAIN: return r + 1;
    case IMAX: return hi[dt];
    case IMIN: return lo[dt];
    case IALT: return r % 2 ? hi[dt] : lo[dt];
    case INEG: return r == 0 ? lo[dt] : dt == COLL_U8 ? UINT8_MAX : -1;
    default: return r == n - 1 ? hi[dt] : 0;
    }
}

static int ncols(int dt)
{
    return is_float(dt) ? NFCOL : NICOL;
}

/* Double to dt, the values here exact (a double beyond f32 becomes inf, as numpy's cast). */
static void put_double(void *b, size_t i, int dt, double v)
{
    switch (dt) {
    case COLL_F32: ((float *)b)[i] = (float)v; break;
    case COLL_F64: ((double *)b)[i] = v; break;
    case COLL_F16: ((uint16_t *)b)[i] = cl_f32_to_f16((float)v); break;
    default: ((uint16_t *)b)[i] = cl_f32_to_bf16((float)v); break;
    }
}

static void put_nan(void *b, size_t i, int dt, int payload, int sign)
{
    uint64_t s = (uint64_t)sign;
    switch (dt) {
    case COLL_F32: {
        uint32_t u = (uint32_t)s << 31 | 0x7fc00000u | (uint32_t)payload;
        memcpy((float *)b + i, &u, 4);
        break;
    }
    case COLL_F64: {
        uint64_t u = s << 63 | 0x7ff8000000000000ull | (uint64_t)payload;
        memcpy((double *)b + i, &u, 8);
        break;
    }
    case COLL_F16: ((uint16_t *)b)[i] = (uint16_t)(s << 15 | 0x7e00u | (unsigned)payload); break;
    default: ((uint16_t *)b)[i] = (uint16_t)(s << 15 | 0x7fc0u | (unsigned)payload); break;
    }
}

static void put_int(void *b, size_t i, int dt, int64_t v)
{
    switch (dt) {
    case COLL_I8: ((int8_t *)b)[i] = (int8_t)v; break;
    case COLL_U8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    case COLL_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: ((int64_t *)b)[i] = v; break;
    }
}

/* Element j of rank r's vector (its column: j mod the dtype's columns). */
static void fill(void *b, size_t count, int dt, int r, int n, size_t first)
{
    for (size_t i = 0; i < count; i++) {
        int col = (int)((first + i) % (size_t)ncols(dt));
        if (!is_float(dt)) {
            put_int(b, i, dt, icol(dt, col, r, n));
            continue;
        }
        fval q = fcol(dt, col, r, n);
        if (q.nan)
            put_nan(b, i, dt, q.nan, q.sign);
        else
            put_double(b, i, dt, q.v);
    }
}

/* numpy.minimum/maximum over the ranks: any NaN is the canonical quiet NaN; -0 < +0. */
static double ref_order(const fval *x, int n, int op)
{
    double m = x[0].v;
    for (int r = 0; r < n; r++) {
        if (x[r].nan)
            return NAN;
        double v = x[r].v;
        int below = v < m || (v == m && signbit(v) && !signbit(m));
        if (op == COLL_MIN ? below : (v > m || (v == m && !signbit(v) && signbit(m))))
            m = v;
    }
    return m;
}

/* SUM, PROD, AVG in rank order in double (exact for these columns); AVG accumulates as
 * numpy's mean does: in f32 for f32 and the 16-bit types. */
static double ref_float(const fval *x, int n, int dt, int op)
{
    if (op == COLL_MIN || op == COLL_MAX)
        return ref_order(x, n, op);
    double acc = op == COLL_PROD ? 1.0 : 0.0;
    for (int r = 0; r < n; r++) {
        double v = x[r].nan ? NAN : x[r].v;
        acc = op == COLL_PROD ? acc * v : r ? acc + v : v; /* -0 alone sums to -0 */
    }
    if (op != COLL_AVG)
        return acc;
    return dt == COLL_F64 ? acc / n : (double)(float)((double)(float)acc / n);
}

/* The bits dt gives the reference: canonical NaN for MIN and MAX, and any NaN marked. */
static void ref_bits(void *out, int dt, double v)
{
    if (isnan(v))
        put_nan(out, 0, dt, 0, 0);
    else
        put_double(out, 0, dt, v);
}

static int64_t wrap(uint64_t u, int dt)
{
    switch (dt) {
    case COLL_I8: return (int8_t)u;
    case COLL_U8: return (uint8_t)u;
    case COLL_I32: return (int32_t)u;
    default: return (int64_t)u;
    }
}

static int64_t ref_int(int dt, int col, int n, int op)
{
    uint64_t acc = op == COLL_PROD ? 1 : 0, bits = op == COLL_BAND ? ~0ull : 0;
    int64_t m = icol(dt, col, 0, n), exact = 0;
    for (int r = 0; r < n; r++) {
        int64_t v = icol(dt, col, r, n);
        acc = op == COLL_PROD ? acc * (uint64_t)v : acc + (uint64_t)v;
        m = (op == COLL_MIN ? v < m : v > m) ? v : m;
        exact += dt == COLL_I64 ? 0 : v; /* int8/uint8/int32 average in 64 bits */
        bits = op == COLL_BAND  ? bits & (uint64_t)v
               : op == COLL_BOR ? bits | (uint64_t)v
                                : bits ^ (uint64_t)v;
    }
    if (op >= COLL_BAND)
        return wrap(bits, dt);
    if (op == COLL_MIN || op == COLL_MAX)
        return m;
    if (op == COLL_AVG)
        return dt == COLL_I64 ? wrap(acc, dt) / n : exact / n;
    return wrap(acc, dt);
}

/* Checks count elements of got, the first being element `first` of the vector; returns
 * how many are wrong, printing the first. */
static size_t check(const void *got, size_t count, int dt, int op, int n, size_t first,
                    const char *what)
{
    size_t wrong = 0, es = esz[dt];
    for (size_t i = 0; i < count; i++) {
        int col = (int)((first + i) % (size_t)ncols(dt));
        unsigned char want[8] = {0};
        int any_nan = 0;
        if (is_float(dt)) {
            fval x[64] = {{0}};
            for (int r = 0; r < n; r++)
                x[r] = fcol(dt, col, r, n);
            /* MAX x PROD x -MAX with zeros between depends on the order: skipped. */
            if (col == MAX_BOTH && op == COLL_PROD && n > 2)
                continue;
            double v = ref_float(x, n, dt, op);
            ref_bits(want, dt, v);
            any_nan = isnan(v) && op != COLL_MIN && op != COLL_MAX;
        } else {
            put_int(want, 0, dt, ref_int(dt, col, n, op));
        }
        const unsigned char *g = (const unsigned char *)got + i * es;
        int ok = any_nan ? isnan(dt == COLL_F32   ? *(const float *)g
                                 : dt == COLL_F64 ? *(const double *)g
                                 : dt == COLL_F16 ? cl_f16_to_f32(*(const uint16_t *)g)
                                                  : cl_bf16_to_f32(*(const uint16_t *)g))
                         : memcmp(g, want, es) == 0;
        if (!ok && !wrong++) {
            uint64_t gb = 0, wb = 0;
            memcpy(&gb, g, es);
            memcpy(&wb, want, es);
            static const char *const dts[] = {"f32", "f64", "f16", "bf16",
                                              "i8",  "u8",  "i32", "i64"};
            static const char *const ops[] = {"sum", "prod", "min", "max",
                                              "avg", "band", "bor", "bxor"};
            fprintf(stderr, "%s %s %s n %d: element %zu (column %d): bits %#llx, want %#llx%s\n",
                    what, dts[dt], ops[op], n, first + i, col, (unsigned long long)gb,
                    (unsigned long long)wb, any_nan ? " (a NaN)" : "");
        }
    }
    return wrong;
}

static int one_dtype_op(coll_comm *c, char *s, char *r, int dt, int op)
{
    int n = coll_size(c), me = coll_rank(c), root = n - 1;
    size_t es = esz[dt];
    fill(s, COUNT, dt, me, n, 0);
    EXPECT_RC(coll_allreduce(c, s, r, COUNT, (coll_dtype)dt, (coll_op)op), COLL_OK);
    FAIL_IF(check(r, COUNT, dt, op, n, 0, "allreduce"), "allreduce wrong");
    FAIL_IF(!identical_everywhere(c, r, COUNT * es), "allreduce differs across ranks");
    fill(s, COUNT * (size_t)n, dt, me, n, 0);
    EXPECT_RC(coll_reduce_scatter(c, s, r, COUNT, (coll_dtype)dt, (coll_op)op), COLL_OK);
    FAIL_IF(check(r, COUNT, dt, op, n, (size_t)me * COUNT, "reduce_scatter"),
            "reduce_scatter wrong");
    fill(s, COUNT, dt, me, n, 0);
    EXPECT_RC(coll_reduce(c, s, r, COUNT, (coll_dtype)dt, (coll_op)op, root), COLL_OK);
    FAIL_IF(me == root && check(r, COUNT, dt, op, n, 0, "reduce"), "reduce wrong");
    return 0;
}

static int numerics_rank(coll_comm *c, void *arg)
{
    (void)arg;
    size_t cap = COUNT * 8 * (size_t)coll_size(c);
    char *s = malloc(cap), *r = malloc(cap);
    int failed = 0;
    for (int dt = 0; dt <= COLL_I64 && !failed; dt++)
        for (int op = 0; op <= (is_float(dt) ? COLL_AVG : COLL_BXOR) && !failed; op++)
            failed = one_dtype_op(c, s, r, dt, op);
    free(s);
    free(r);
    return failed;
}

/* _i: an algorithm (none: the engine chooses) on a number of ranks and a transport. */
START_TEST(specials_reduce_as_numpy_on_every_algorithm)
{
    static const struct {
        const char *algo;
        int n;
        const char *transport;
    } runs[] = {
        {NULL, 2, "tcp"},       {NULL, 3, "shm"},           {NULL, 5, "tcp"},
        {"ring", 3, "tcp"},     {"ring", 4, "shm"},         {"doubling", 2, "shm"},
        {"doubling", 4, "tcp"}, {"rabenseifner", 3, "tcp"}, {"rabenseifner", 5, "shm"},
        {"tree", 4, "tcp"},     {"tree", 5, "shm"},
    };
    if (runs[_i].algo)
        setenv("COLL_ALGO", runs[_i].algo, 1);
    run_opts o = {.nranks = runs[_i].n,
                  .rdzv = RDZV_FILE,
                  .transport = runs[_i].transport,
                  .timeout_ms = 10000,
                  .deadline_s = 60};
    int failed = run_ranks(&o, numerics_rank, NULL);
    unsetenv("COLL_ALGO");
    ck_assert_msg(failed == 0, "%d of %d ranks failed (COLL_ALGO=%s, %s)", failed, o.nranks,
                  runs[_i].algo ? runs[_i].algo : "unset", o.transport);
}
END_TEST

/* numpy's f32 answer ref (ref_float) against what came through codec, as the header says. */
static int codec_ok(float got, const fval *x, int n, int op, coll_codec codec)
{
    double ref = ref_float(x, n, COLL_F32, op), m = isfinite(ref) ? fabs(ref) : 0;
    int pos = 1, neg = 1;
    for (int r = 0; r < n; r++) {
        m = x[r].nan ? m : fmax(m, fabs(x[r].v));
        pos &= !(x[r].v < 0), neg &= !(x[r].v > 0);
    }
    if (isnan(ref))
        return isnan(got);
    if (isinf(ref)) /* int8: any block with an Inf, an input's or the sum's, is NaN */
        return got == ref || (codec == COLL_CODEC_INT8 && isnan(got));
    if ((pos && got < 0) || (neg && got > 0))
        return 0;
    double e = codec == COLL_CODEC_FP16   ? m * 0x1p-11 + 0x1p-25
               : codec == COLL_CODEC_BF16 ? m * 0x1p-8 + 0x1p-134
                                          : m / 254 * 1.001 + 0x1p-120;
    double limit = codec == COLL_CODEC_FP16   ? 65504
                   : codec == COLL_CODEC_BF16 ? 0x1.fep127
                                              : 0x1p127;
    return (m > limit && !isfinite(got)) || fabs(got - ref) <= (n + 1) * (e + m * 0x1p-24);
}

enum { CCOUNT = 300 }; /* a block of 256 and a short one */

/* Every element of this call from one column, so an int8 block holds that column only. */
static int codec_case(coll_comm *c, float *s, float *r, coll_codec codec, int op, int col)
{
    int n = coll_size(c), me = coll_rank(c), rs;
    fval x[64] = {{0}};
    for (int k = 0; k < n; k++)
        x[k] = fcol(COLL_F32, col, k, n);
    for (size_t i = 0; i < CCOUNT * (size_t)n; i++)
        fill(s + i, 1, COLL_F32, me, n, (size_t)col);
    for (rs = 0; rs < 2; rs++) {
        int rc = rs ? coll_reduce_scatter(c, s, r, CCOUNT, COLL_F32, (coll_op)op)
                    : coll_allreduce(c, s, r, CCOUNT, COLL_F32, (coll_op)op);
        EXPECT_RC(rc, COLL_OK);
        for (size_t i = 0; i < CCOUNT; i++)
            FAIL_IF(!codec_ok(r[i], x, n, op, codec), "%s %s %s column %d element %zu: %g",
                    rs ? "reduce_scatter" : "allreduce", op == COLL_SUM ? "sum" : "avg",
                    (const char *[]){"none", "fp16", "bf16", "int8"}[codec], col, i, r[i]);
        FAIL_IF(!rs && !identical_everywhere(c, r, CCOUNT * 4), "results differ across ranks");
    }
    return 0;
}

static int codec_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float *s = malloc(CCOUNT * 4 * (size_t)coll_size(c)), *r = malloc(CCOUNT * 4);
    int failed = 0;
    for (int codec = COLL_CODEC_FP16; codec <= COLL_CODEC_INT8 && !failed; codec++) {
        failed = coll_set_codec(c, (coll_codec)codec) != COLL_OK;
        for (int op = 0; op <= COLL_AVG && !failed; op += COLL_AVG)
            for (int col = 0; col < NFCOL && !failed; col++)
                failed = codec_case(c, s, r, (coll_codec)codec, op, col);
    }
    free(s);
    free(r);
    return failed;
}

/* _i: 2 ranks on tcp, 3 on shm, 4 on tcp; every codec in each. */
START_TEST(specials_through_every_codec)
{
    run_opts o = {.nranks = 2 + _i,
                  .rdzv = RDZV_FILE,
                  .transport = _i == 1 ? "shm" : "tcp",
                  .timeout_ms = 10000,
                  .deadline_s = 60};
    int failed = run_ranks(&o, codec_rank, NULL);
    ck_assert_msg(failed == 0, "%d of %d ranks failed (%s)", failed, o.nranks, o.transport);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("numerics");
    TCase *t = tcase_create("numerics");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, specials_reduce_as_numpy_on_every_algorithm, 0, 11);
    tcase_add_loop_test(t, specials_through_every_codec, 0, 3);
    suite_add_tcase(s, t);
    return run_suite(s);
}
