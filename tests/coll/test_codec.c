/* Wire codecs through the public API on real processes (n = 2, 4, 8): relative L2 error
 * against an exact double sum of Gaussian data within the bars, the int8 error of every
 * element within what the block scales allow, bit-identical results on every rank, an
 * Inf on one rank non-finite everywhere, a codec disagreement COLL_EMISMATCH, wire
 * bytes that match the codec, and error feedback that averages the error away. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COUNT = 100003 };

static double gauss(int rank, size_t i)
{
    uint64_t z = ((uint64_t)rank << 40) ^ (i * 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    double u1 = ((double)(z >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)((z * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill(float *x, int rank)
{
    for (size_t i = 0; i < COUNT; i++)
        x[i] = (float)gauss(rank, i);
}

static double rel_l2(const float *got, const double *exact)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < COUNT; i++) {
        num += (got[i] - exact[i]) * (got[i] - exact[i]);
        den += exact[i] * exact[i];
    }
    return sqrt(num / den);
}

/* Elements an all-reduce works at a time: 16 segments (COLL_SEGMENT_BYTES=4096 in the
 * windowed cases), each window split n ways among its owners. */
static size_t window = COUNT;

/* Half a quantisation step of every encoding element i went through: each non-owner's
 * contribution and the owner's result, blocks of 256 from the start of each chunk of
 * i's window. */
static double q8_bound(int n, size_t i, const float *result)
{
    size_t w0 = i / window * window, wlen = COUNT - w0 < window ? COUNT - w0 : window;
    size_t base = wlen / (size_t)n, rem = wlen % (size_t)n, c = 0;
    while (w0 + (c + 1) * base + (c + 1 < rem ? c + 1 : rem) <= i)
        c++;
    size_t start = w0 + c * base + (c < rem ? c : rem), len = base + (c < rem);
    size_t b0 = start + (i - start) / 256 * 256, b1 = b0 + 256 < start + len ? b0 + 256 : start + len;
    double bound = 0, rmax = 0;
    for (int r = 0; r < n; r++) {
        if ((size_t)r == c)
            continue; /* the owner adds its own contribution unencoded */
        double m = 0;
        for (size_t k = b0; k < b1; k++)
            m = fmax(m, fabs((float)gauss(r, k)));
        bound += m / 127.0 / 2.0;
    }
    for (size_t k = b0; k < b1; k++)
        rmax = fmax(rmax, fabs(result[k]));
    return (bound + rmax / 127.0 / 2.0) * 1.001 + 1e-6;
}

static int accuracy_rank(coll_comm *c, void *arg)
{
    coll_codec codec = *(coll_codec *)arg;
    int n = coll_size(c), me = coll_rank(c);
    float *x = malloc(COUNT * 4), *y = malloc(COUNT * 4);
    double *exact = calloc(COUNT, sizeof(double));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < COUNT; i++)
            exact[i] += (float)gauss(r, i);
    fill(x, me);
    EXPECT_RC(coll_set_codec(c, codec), COLL_OK);
    coll_reset_stats(c);
    EXPECT_RC(coll_allreduce(c, x, y, COUNT, COLL_F32, COLL_SUM), COLL_OK);
    double err = rel_l2(y, exact), bar = codec == COLL_CODEC_INT8 ? 1.0e-2
                                        : codec == COLL_CODEC_BF16 ? 2.5e-3 : 3.0e-4;
    if (me == 0)
        printf("codec %d n %d: relative L2 error %.3e (bar %.1e)\n", codec, n, err, bar);
    if (err > bar) {
        fprintf(stderr, "rank %d: error %.3e over %.1e\n", me, err, bar);
        return 1;
    }
    if (!identical_everywhere(c, y, COUNT * 4)) {
        fprintf(stderr, "rank %d: results differ between ranks\n", me);
        return 1;
    }
    coll_stats st;
    coll_get_stats(c, &st);
    double ratio = (double)st.wire_tx / (2.0 * (n - 1) / n * COUNT * 4);
    double want = codec == COLL_CODEC_INT8 ? 260.0 / 1024 : 0.5;
    if (ratio < want * 0.98 || ratio > want * 1.05) {
        fprintf(stderr, "rank %d: wire bytes ratio %.3f, want about %.3f\n", me, ratio, want);
        return 1;
    }
    if (codec == COLL_CODEC_INT8)
        for (size_t i = 0; i < COUNT; i += 7)
            if (fabs(y[i] - exact[i]) > q8_bound(n, i, y)) {
                fprintf(stderr, "element %zu: error %g over the scale bound %g\n", i,
                        fabs(y[i] - exact[i]), q8_bound(n, i, y));
                return 1;
            }
    free(x), free(y), free(exact);
    return 0;
}

static void run_codec(int n, coll_codec codec)
{
    run_opts o = { .nranks = n, .rdzv = RDZV_FILE, .timeout_ms = 20000, .deadline_s = 200 };
    int failed = run_ranks(&o, accuracy_rank, &codec);
    ck_assert_msg(failed == 0, "codec %d on %d ranks: %d ranks failed", codec, n, failed);
}

START_TEST(codec_error_within_bars_on_2_4_8_ranks)
{
    static const int ns[] = { 2, 4, 8 };
    run_codec(ns[_i / 3], (coll_codec)(1 + _i % 3));
}
END_TEST

static void small_segments(int rank, void *arg)
{
    (void)rank, (void)arg;
    setenv("COLL_SEGMENT_BYTES", "4096", 1);
}

/* 4 KiB segments: the all-reduce runs in windows of 16384 elements (7 here), each
 * encoded and owned on its own; the same bars, element bounds and wire bytes hold, and
 * error feedback keeps each window's residual in its place. */
START_TEST(codec_in_windows)
{
    window = 16384;
    coll_codec codec = (coll_codec)(1 + _i % 3);
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 20000, .deadline_s = 200,
                   .setup = small_segments };
    ck_assert_int_eq(run_ranks(&o, accuracy_rank, &codec), 0);
}
END_TEST

static int inf_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = coll_rank(c) == 1 && i == 600 ? INFINITY : 1.0f;
    for (int codec = 1; codec <= 3; codec++) {
        float y[1000];
        EXPECT_RC(coll_set_codec(c, (coll_codec)codec), COLL_OK);
        EXPECT_RC(coll_allreduce(c, x, y, 1000, COLL_F32, COLL_SUM), COLL_OK);
        if (isfinite(y[600]) || y[0] != (float)coll_size(c)) {
            fprintf(stderr, "codec %d: y[600] %g y[0] %g\n", codec, y[600], y[0]);
            return 1;
        }
    }
    return 0;
}

START_TEST(inf_on_one_rank_is_non_finite_everywhere)
{
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 60 };
    ck_assert_int_eq(run_ranks(&o, inf_rank, NULL), 0);
}
END_TEST

static int disagree_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float x[300] = { 0 };
    EXPECT_RC(coll_set_codec(c, coll_rank(c) ? COLL_CODEC_INT8 : COLL_CODEC_FP16), COLL_EMISMATCH);
    EXPECT_RC(coll_allreduce(c, x, x, 300, COLL_F32, COLL_SUM), COLL_OK); /* still uncoded */
    int32_t i[4] = { 1, 2, 3, 4 };
    EXPECT_RC(coll_set_codec(c, COLL_CODEC_INT8), COLL_OK);
    EXPECT_RC(coll_allreduce(c, i, i, 4, COLL_I32, COLL_MAX), COLL_OK); /* not f32: uncoded */
    /* An all-gather comes back exact whatever the codec: a 7 beside 1234567 survives. */
    float mine[2] = { 1234567.0f, 7.0f + (float)coll_rank(c) }, all[6];
    EXPECT_RC(coll_allgather(c, mine, all, 2, COLL_F32), COLL_OK);
    for (int r = 0; r < 3; r++)
        FAIL_IF(all[2 * r] != 1234567.0f || all[2 * r + 1] != 7.0f + (float)r,
                "all-gather block %d: %g %g", r, all[2 * r], all[2 * r + 1]);
    EXPECT_RC(coll_allreduce_ef(c, x, x, 300, COLL_MAX, COLL_CODEC_INT8, x), COLL_ENOTSUP);
    EXPECT_RC(coll_allreduce_ef(c, x, x, 300, COLL_BXOR, COLL_CODEC_INT8, x), COLL_ENOTSUP);
    /* bitwise ops are exact under any codec: every bit of each rank's value survives */
    uint64_t b = 1ull << (61 + coll_rank(c)) | 0x5a; /* the top three bits, one a rank */
    EXPECT_RC(coll_allreduce(c, &b, &b, 1, COLL_I64, COLL_BXOR), COLL_OK);
    FAIL_IF(b != (0xe000000000000000ull | 0x5a), "int64 bxor under int8: %#llx",
            (unsigned long long)b);
    return 0;
}

START_TEST(codec_disagreement_and_unsupported_ops)
{
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 60 };
    ck_assert_int_eq(run_ranks(&o, disagree_rank, NULL), 0);
}
END_TEST

/* The mean of 64 all-reduces of the same input: with error feedback within 1e-3 of the
 * exact sum; without, the codec's error stays. */
static int feedback_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    float *x = malloc(COUNT * 4), *y = malloc(COUNT * 4), *res = calloc(COUNT, 4);
    double *exact = calloc(COUNT, sizeof(double)), *mean[2];
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < COUNT; i++)
            exact[i] += (float)gauss(r, i);
    fill(x, me);
    EXPECT_RC(coll_set_codec(c, COLL_CODEC_INT8), COLL_OK);
    for (int ef = 0; ef < 2; ef++) {
        mean[ef] = calloc(COUNT, sizeof(double));
        for (int it = 0; it < 64; it++) {
            int rc = ef ? coll_allreduce_ef(c, x, y, COUNT, COLL_SUM, COLL_CODEC_INT8, res)
                        : coll_allreduce(c, x, y, COUNT, COLL_F32, COLL_SUM);
            EXPECT_RC(rc, COLL_OK);
            for (size_t i = 0; i < COUNT; i++)
                mean[ef][i] += y[i] / 64.0;
        }
    }
    float *m0 = malloc(COUNT * 4), *m1 = malloc(COUNT * 4);
    for (size_t i = 0; i < COUNT; i++)
        m0[i] = (float)mean[0][i], m1[i] = (float)mean[1][i];
    double e0 = rel_l2(m0, exact), e1 = rel_l2(m1, exact);
    if (me == 0)
        printf("int8 mean of 64 on %d ranks: without feedback %.3e, with %.3e\n", n, e0, e1);
    if (e1 > 1e-3 || e1 * 5 > e0) {
        fprintf(stderr, "error feedback: %.3e (without %.3e)\n", e1, e0);
        return 1;
    }
    free(x), free(y), free(res), free(exact), free(mean[0]), free(mean[1]), free(m0), free(m1);
    return 0;
}

START_TEST(error_feedback_averages_the_error_away)
{
    run_opts o = { .nranks = 4 - 2 * _i, .rdzv = RDZV_FILE, .timeout_ms = 20000,
                   .deadline_s = 200, .setup = _i ? small_segments : NULL };
    ck_assert_int_eq(run_ranks(&o, feedback_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("codec collectives");
    TCase *t = tcase_create("codecs");
    tcase_set_timeout(t, 240);
    tcase_add_loop_test(t, codec_error_within_bars_on_2_4_8_ranks, 0, 9);
    tcase_add_test(t, inf_on_one_rank_is_non_finite_everywhere);
    tcase_add_test(t, codec_disagreement_and_unsupported_ops);
    tcase_add_loop_test(t, codec_in_windows, 0, 3);
    tcase_add_loop_test(t, error_feedback_averages_the_error_away, 0, 2);
    suite_add_tcase(s, t);
    return run_suite(s);
}
