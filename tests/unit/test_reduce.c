/* Reduction kernels against a scalar reference for every dtype x op (the bitwise ops on
 * every integer width), and the f16/bf16 conversions on the values that break naive code:
 * rounding ties, overflow, denormals, infinities and NaN. */
#include "base/names.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

#include "common/suite.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1031 }; /* odd, so vector loops have a tail */

static double at(const void *b, size_t i, int dt)
{
    switch (dt) {
    case COLL_F32: return ((const float *)b)[i];
    case COLL_F64: return ((const double *)b)[i];
    case COLL_F16: return cl_f16_to_f32(((const uint16_t *)b)[i]);
    case COLL_BF16: return cl_bf16_to_f32(((const uint16_t *)b)[i]);
    case COLL_I8: return ((const int8_t *)b)[i];
    case COLL_U8: return ((const uint8_t *)b)[i];
    case COLL_I32: return ((const int32_t *)b)[i];
    default: return (double)((const int64_t *)b)[i];
    }
}

static void set(void *b, size_t i, int dt, int v)
{
    switch (dt) {
    case COLL_F32: ((float *)b)[i] = (float)v; break;
    case COLL_F64: ((double *)b)[i] = v; break;
    case COLL_F16: ((uint16_t *)b)[i] = cl_f32_to_f16((float)v); break;
    case COLL_BF16: ((uint16_t *)b)[i] = cl_f32_to_bf16((float)v); break;
    case COLL_I8: ((int8_t *)b)[i] = (int8_t)v; break;
    case COLL_U8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    case COLL_I32: ((int32_t *)b)[i] = v; break;
    default: ((int64_t *)b)[i] = v; break;
    }
}

static double scalar(double x, double y, int op)
{
    switch (op) {
    case COLL_PROD: return x * y;
    case COLL_MIN: return x < y ? x : y;
    case COLL_MAX: return x > y ? x : y;
    default: return x + y;
    }
}

START_TEST(every_dtype_and_op_matches_scalar_reference)
{
    int dt = _i / 5, op = _i % 5;
    size_t es = cl_dtype_size(dt);
    char *a = malloc(N * es), *b = malloc(N * es), *d = malloc(N * es);
    int sgn = dt == COLL_U8 ? 0 : 1; /* values that fit every type, negatives where signed */
    for (size_t i = 0; i < N; i++) {
        set(a, i, dt, (int)(i % 11) - 5 * sgn);
        set(b, i, dt, (int)(i % 7) - 3 * sgn);
    }
    cl_reduce(d, a, b, N, (coll_dtype)dt, (coll_op)op);
    for (size_t i = 0; i < N; i++) {
        double want = scalar(at(a, i, dt), at(b, i, dt), op);
        ck_assert_msg(at(d, i, dt) == want, "dtype %s op %s element %zu: got %g want %g",
                      cl_dtype_name(dt), cl_op_name(op), i, at(d, i, dt), want);
    }
    cl_reduce(a, a, b, N, (coll_dtype)dt, (coll_op)op); /* dst aliasing a source */
    ck_assert_int_eq(memcmp(a, d, N * es), 0);
    free(a);
    free(b);
    free(d);
}
END_TEST

/* Element i of an integer buffer, sign-extended to 64 bits. */
static int64_t whole(const void *b, size_t i, int dt)
{
    switch (dt) {
    case COLL_I8: return ((const int8_t *)b)[i];
    case COLL_U8: return ((const uint8_t *)b)[i];
    case COLL_I32: return ((const int32_t *)b)[i];
    default: return ((const int64_t *)b)[i];
    }
}

/* The bitwise kernels on every integer width, over random bits (the sign bit and the top
 * bytes of int64 included), element by element against C's own operator, from an odd
 * element offset (unaligned vectors) and with dst aliasing a source. */
START_TEST(bitwise_ops_on_every_integer_width)
{
    static const int dts[] = { COLL_I8, COLL_U8, COLL_I32, COLL_I64 };
    int dt = dts[_i / 3], op = COLL_BAND + _i % 3;
    size_t es = cl_dtype_size(dt);
    ck_assert(cl_op_serves(op, dt));
    unsigned char *a = malloc((N + 1) * es), *b = malloc((N + 1) * es), *d = malloc((N + 1) * es);
    srand(11 + (unsigned)_i);
    for (size_t i = 0; i < (N + 1) * es; i++) {
        a[i] = (unsigned char)rand();
        b[i] = (unsigned char)rand();
    }
    cl_reduce(d + es, a + es, b + es, N, (coll_dtype)dt, (coll_op)op);
    for (size_t i = 1; i <= N; i++) {
        int64_t x = whole(a, i, dt), y = whole(b, i, dt), got = whole(d, i, dt);
        int64_t want = op == COLL_BAND ? x & y : op == COLL_BOR ? x | y : x ^ y;
        ck_assert_msg(got == want, "dtype %s op %s element %zu: got %lld want %lld",
                      cl_dtype_name(dt), cl_op_name(op), i, (long long)got, (long long)want);
    }
    cl_reduce(b + es, a + es, b + es, N, (coll_dtype)dt, (coll_op)op);
    ck_assert_int_eq(memcmp(b + es, d + es, N * es), 0);
    free(a);
    free(b);
    free(d);
}
END_TEST

START_TEST(divide_rounds_like_the_type)
{
    int32_t i[3] = { 7, -7, 9 };
    cl_divide(i, 3, COLL_I32, 2);
    ck_assert_int_eq(i[0], 3);
    ck_assert_int_eq(i[1], -3);
    ck_assert_int_eq(i[2], 4);
    float f[2] = { 1.0f, 3.0f };
    cl_divide(f, 2, COLL_F32, 3);
    ck_assert(f[0] == 1.0f / 3.0f && f[1] == 1.0f);
    uint16_t h = cl_f32_to_f16(3.0f);
    cl_divide(&h, 1, COLL_F16, 2);
    ck_assert(cl_f16_to_f32(h) == 1.5f);
}
END_TEST

/* The fused last step of an average gives exactly what a sum then a division give, for
 * every dtype and divisors that are and are not powers of two; f16/bf16 what dividing
 * the f32 sum and rounding once gives. */
START_TEST(fused_average_equals_sum_then_divide)
{
    int dt = _i / 5, k = (int[]){2, 3, 4, 5, 8}[_i % 5];
    enum { N = 1000 };
    size_t es = cl_dtype_size(dt);
    unsigned char a[N * 8], b[N * 8], want[N * 8], got[N * 8];
    srand(7 + (unsigned)_i);
    for (size_t i = 0; i < N * es; i++) {
        a[i] = (unsigned char)rand();
        b[i] = (unsigned char)rand();
    }
    for (size_t i = 0; i < N && (dt == COLL_F16 || dt == COLL_BF16); i++) { /* finite */
        set(a, i, dt, rand() % 2001 - 1000);
        set(b, i, dt, rand() % 7 - 3);
    }
    for (size_t i = 0; i < N && dt == COLL_F32; i++) { /* fractions of every size */
        ((float *)a)[i] = (float)(rand() - RAND_MAX / 2) / (float)(1 + rand() % 100000);
        ((float *)b)[i] = (float)(rand() - RAND_MAX / 2) / 3.7e5f;
    }
    for (size_t i = 0; i < N && dt == COLL_F64; i++) {
        ((double *)a)[i] = (double)(rand() - RAND_MAX / 2) / (double)(1 + rand() % 100000);
        ((double *)b)[i] = (double)(rand() - RAND_MAX / 2) / 3.7e5;
    }
    cl_reduce(want, a, b, N, (coll_dtype)dt, COLL_AVG);
    cl_divide(want, N, (coll_dtype)dt, k);
    for (size_t i = 0; i < N && (dt == COLL_F16 || dt == COLL_BF16); i++) {
        float f = ((float)at(a, i, dt) + (float)at(b, i, dt)) / (float)k;
        ((uint16_t *)want)[i] = dt == COLL_F16 ? cl_f32_to_f16(f) : cl_f32_to_bf16(f);
    }
    cl_reduce_avg(got, a, b, N, (coll_dtype)dt, k);
    ck_assert_msg(memcmp(want, got, N * es) == 0, "%s / %d differs", cl_dtype_name(dt), k);
}
END_TEST

/* The case: every rank holding 40000 in f16 averages to 40000 (the sum rounded
 * to 16 bits was inf); bf16 rounds once: (255 + 0.5) / 3 is 85, where 255.5 rounded to
 * bf16 first (256) gave 85.5. */
START_TEST(half_average_divides_the_f32_sum)
{
    uint16_t a = cl_f32_to_f16(40000.0f), d;
    cl_reduce_avg(&d, &a, &a, 1, COLL_F16, 2);
    ck_assert_msg(cl_f16_to_f32(d) == 40000.0f, "f16 (40000 + 40000) / 2 = %g", cl_f16_to_f32(d));
    uint16_t x = cl_f32_to_bf16(255.0f), y = cl_f32_to_bf16(0.5f);
    cl_reduce_avg(&d, &x, &y, 1, COLL_BF16, 3);
    ck_assert_msg(cl_bf16_to_f32(d) == 85.0f, "bf16 (255 + 0.5) / 3 = %g", cl_bf16_to_f32(d));
}
END_TEST

/* A float's bits for element i of the MIN/MAX operands: NaNs of both signs and several
 * payloads, signed zeros and infinities, subnormals, the largest finite values. */
static uint64_t special(int dt, int k)
{
    static const uint32_t f32[] = {0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, 0x00000000,
                                   0x80000000, 0x7f800000, 0xff800000, 0x00000001, 0x80000003,
                                   0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000};
    static const uint64_t f64[] = {0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001,
                                   0x7ff4000000000000, 0, 0x8000000000000000, 0x7ff0000000000000,
                                   0xfff0000000000000, 1, 0x8000000000000003, 0x7fefffffffffffff,
                                   0xffefffffffffffff, 0x3ff0000000000000, 0xbff0000000000000};
    static const uint16_t f16[] = {0x7e00, 0xfe01, 0x7c01, 0x7d00, 0, 0x8000, 0x7c00,
                                   0xfc00, 1,      0x8003, 0x7bff, 0xfbff, 0x3c00, 0xbc00};
    static const uint16_t bf16[] = {0x7fc0, 0xffc1, 0x7f81, 0x7fa0, 0, 0x8000, 0x7f80,
                                    0xff80, 1,      0x8003, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
    k %= 14;
    return dt == COLL_F32 ? f32[k] : dt == COLL_F64 ? f64[k] : dt == COLL_F16 ? f16[k] : bf16[k];
}

/* MIN and MAX of every pair of specials, both ways round (the order an algorithm happens to
 * combine ranks in): the same bits; a NaN operand gives the canonical quiet NaN (numpy's
 * minimum/maximum give a NaN); -0 is below +0; otherwise the smaller/larger operand. */
START_TEST(min_max_give_one_answer_in_either_order)
{
    static const uint64_t qnan[] = {0x7fc00000, 0x7ff8000000000000, 0x7e00, 0x7fc0};
    int dt = _i / 2, op = _i % 2 ? COLL_MAX : COLL_MIN;
    size_t es = cl_dtype_size(dt);
    enum { M = 14 * 14 * 5 + 3 }; /* every pair, and a vector tail */
    unsigned char x[M * 8], y[M * 8], xy[M * 8], yx[M * 8];
    for (int i = 0; i < M; i++) {
        uint64_t u = special(dt, i), v = special(dt, i / 14);
        memcpy(x + i * es, &u, es);
        memcpy(y + i * es, &v, es);
    }
    cl_reduce(xy, x, y, M, (coll_dtype)dt, (coll_op)op);
    cl_reduce(yx, y, x, M, (coll_dtype)dt, (coll_op)op);
    for (int i = 0; i < M; i++) {
        double a = at(x, (size_t)i, dt), b = at(y, (size_t)i, dt);
        uint64_t want = 0, got = 0, other = 0;
        if (isnan(a) || isnan(b))
            want = qnan[dt];
        else if (a == b) /* the same bits, or -0 and +0 */
            want = (op == COLL_MIN) == (signbit(a) != 0) ? special(dt, i) : special(dt, i / 14);
        else
            want = (op == COLL_MIN) == (a < b) ? special(dt, i) : special(dt, i / 14);
        memcpy(&got, xy + i * es, es);
        memcpy(&other, yx + i * es, es);
        ck_assert_msg(got == want && other == want,
                      "%s %s of %#llx and %#llx: %#llx and %#llx, want %#llx", cl_dtype_name(dt),
                      cl_op_name(op), (unsigned long long)special(dt, i),
                      (unsigned long long)special(dt, i / 14), (unsigned long long)got,
                      (unsigned long long)other, (unsigned long long)want);
    }
}
END_TEST

START_TEST(f16_conversion_edge_cases)
{
    ck_assert_uint_eq(cl_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(cl_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(cl_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(cl_f32_to_f16(65520.0f), 0x7c00);   /* rounds up to infinity */
    ck_assert_uint_eq(cl_f32_to_f16(65519.0f), 0x7bff);
    ck_assert_uint_eq(cl_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(cl_f32_to_f16(-INFINITY), 0xfc00);
    ck_assert(isnan(cl_f16_to_f32(cl_f32_to_f16(NAN))));
    ck_assert_uint_eq(cl_f32_to_f16(0x1p-24f), 0x0001);   /* smallest denormal */
    ck_assert_uint_eq(cl_f32_to_f16(0x1p-25f), 0x0000);   /* tie to even: 0 */
    ck_assert_uint_eq(cl_f32_to_f16(0x3p-25f), 0x0002);   /* tie to even: 2 */
    ck_assert_uint_eq(cl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie: even mantissa */
    ck_assert_uint_eq(cl_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    ck_assert_uint_eq(cl_f32_to_f16(-0.0f), 0x8000);
    for (uint32_t h = 0; h < 0x10000; h++) { /* every half survives a round trip */
        float f = cl_f16_to_f32((uint16_t)h);
        if (!isnan(f))
            ck_assert_uint_eq(cl_f32_to_f16(f), h);
    }
}
END_TEST

START_TEST(bf16_conversion_edge_cases)
{
    ck_assert_uint_eq(cl_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(cl_f32_to_bf16(cl_bits_f32(0x3f808000u)), 0x3f80); /* tie to even */
    ck_assert_uint_eq(cl_f32_to_bf16(cl_bits_f32(0x3f818000u)), 0x3f82);
    ck_assert_uint_eq(cl_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert(isnan(cl_bf16_to_f32(cl_f32_to_bf16(NAN))));
    ck_assert(isnan(cl_bf16_to_f32(cl_f32_to_bf16(cl_bits_f32(0x7f800001u)))));
    ck_assert_uint_eq(cl_f32_to_bf16(cl_bits_f32(0x7f7fffffu)), 0x7f80); /* max rounds to inf */
}
END_TEST

START_TEST(sizes_and_names)
{
    ck_assert_uint_eq(cl_dtype_size(COLL_BF16), 2);
    ck_assert_uint_eq(cl_dtype_size(COLL_I64), 8);
    ck_assert_uint_eq(cl_dtype_size(8), 0);
    ck_assert_uint_eq(cl_dtype_size(-1), 0);
    ck_assert(!cl_op_valid(8) && !cl_op_valid(-1) && cl_op_valid(COLL_AVG) &&
              cl_op_valid(COLL_BXOR));
    ck_assert(cl_op_serves(COLL_BXOR, COLL_I64) && cl_op_serves(COLL_BAND, COLL_U8) &&
              cl_op_serves(COLL_MAX, COLL_F16));
    for (int dt = COLL_F32; dt <= COLL_BF16; dt++)
        ck_assert(!cl_op_serves(COLL_BAND, dt) && !cl_op_serves(COLL_BOR, dt) &&
                  !cl_op_serves(COLL_BXOR, dt));
    ck_assert_str_eq(cl_op_name(COLL_BAND), "band");
    ck_assert_str_eq(cl_op_name(COLL_BXOR), "bxor");
    ck_assert_str_eq(cl_op_name(8), "invalid");
    ck_assert_str_eq(cl_dtype_name(COLL_F16), "half");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reduce kernels");
    TCase *t = tcase_create("kernels");
    tcase_add_loop_test(t, every_dtype_and_op_matches_scalar_reference, 0, 40);
    tcase_add_loop_test(t, bitwise_ops_on_every_integer_width, 0, 12);
    tcase_add_test(t, divide_rounds_like_the_type);
    tcase_add_loop_test(t, fused_average_equals_sum_then_divide, 0, 40);
    tcase_add_test(t, half_average_divides_the_f32_sum);
    tcase_add_loop_test(t, min_max_give_one_answer_in_either_order, 0, 8);
    tcase_add_test(t, f16_conversion_edge_cases);
    tcase_add_test(t, bf16_conversion_edge_cases);
    tcase_add_test(t, sizes_and_names);
    suite_add_tcase(s, t);
    return run_suite(s);
}
