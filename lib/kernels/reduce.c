/* Reduction kernels. One macro generates every native-type kernel so there is one loop
 * to read; f16/bf16 convert blocks to f32, reuse the f32 kernel, and convert back;
 * bitwise ops run one byte kernel for every integer width.
 * Integer sums and products compute in the unsigned type so overflow wraps instead of
 * being undefined. */
#include "kernels/reduce.h"

#include "kernels/half.h"

#include <stdint.h>
#include <string.h>

typedef void (*kernel_fn)(void *d, const void *a, const void *b, size_t n);

#define BINARY(NAME, T, EXPR)                                                    \
    static void NAME(void *dv, const void *av, const void *bv, size_t n)         \
    {                                                                            \
        T *d = dv;                                                               \
        const T *a = av, *b = bv;                                                \
        for (size_t i = 0; i < n; i++) {                                         \
            T x = a[i], y = b[i];                                                \
            d[i] = (EXPR);                                                       \
        }                                                                        \
    }

#define KERNELS(S, T, U)                                      \
    BINARY(sum_##S, T, (T)((U)x + (U)y))                      \
    BINARY(prod_##S, T, (T)((U)x * (U)y))                     \
    static void div_##S(T *d, size_t n, int k)                \
    {                                                         \
        for (size_t i = 0; i < n; i++)                        \
            d[i] = (T)(d[i] / k);                          \
    }

#define INT_ORDER(S, T)                                       \
    BINARY(min_##S, T, y < x ? y : x)                         \
    BINARY(max_##S, T, y > x ? y : x)

/* MIN and MAX on floats as numpy.minimum/maximum, with the same bits whatever order an
 * algorithm reduces in: an operand NaN gives the one canonical quiet NaN (numpy's "first
 * NaN" would depend on which rank's value came first, and `y < x ? y : x` drops a NaN on
 * one side only), and -0 orders below +0. `x < y ? x : y` and `y < x ? y : x` (minps
 * both ways round) agree unless the operands are equal, that is the same bits or -0 and
 * +0, where the OR of the two is the minimum and the AND the maximum: a few vector
 * instructions on SSE2, f32 and f64 alike. */
#define FLOAT_ORDER(S, T, U, QNAN)                                               \
    static inline T pick_##S(T x, T y, int max)                                  \
    {                                                                            \
        T a = max ? (x > y ? x : y) : (x < y ? x : y);                           \
        T b = max ? (y > x ? y : x) : (y < x ? y : x);                           \
        U ba, bb, bq = QNAN;                                                     \
        memcpy(&ba, &a, sizeof(ba));                                             \
        memcpy(&bb, &b, sizeof(bb));                                             \
        ba = max ? ba & bb : ba | bb;                                            \
        T m, nan;                                                                \
        memcpy(&m, &ba, sizeof(m));                                              \
        memcpy(&nan, &bq, sizeof(nan));                                          \
        return x != x || y != y ? nan : m;                                       \
    }                                                                            \
    BINARY(min_##S, T, pick_##S(x, y, 0))                                        \
    BINARY(max_##S, T, pick_##S(x, y, 1))

KERNELS(f32, float, float)
KERNELS(f64, double, double)
FLOAT_ORDER(f32, float, uint32_t, 0x7fc00000u)
FLOAT_ORDER(f64, double, uint64_t, 0x7ff8000000000000u)

/* The last step of an average: d = (a + b) / k in the loop that adds, so the sum is
 * divided while it is in a register (a second pass over a segment's sums made COLL_AVG
 * 1.2x COLL_SUM). Floats multiply by 1/k when k is a power of two: x / k and x * (1/k)
 * are then one real number and round alike, and the multiply costs a fraction of the
 * division. Integers sum in the element type (wrapping) and truncate, as apart. */
#define AVG_LAST(S, T, U)                                                        \
    static void avg_##S(void *dv, const void *av, const void *bv, size_t n, int k) \
    {                                                                            \
        T *d = dv;                                                               \
        const T *a = av, *b = bv;                                                \
        T r = (T)1 / (T)k;                                                       \
        int exact = (T)0.5 != 0 && !(k & (k - 1));                               \
        for (size_t i = 0; exact && i < n; i++)                                  \
            d[i] = (T)((T)((U)a[i] + (U)b[i]) * r);                              \
        for (size_t i = 0; !exact && i < n; i++)                                 \
            d[i] = (T)((T)((U)a[i] + (U)b[i]) / k);                              \
    }
AVG_LAST(f32, float, float)
AVG_LAST(f64, double, double)
AVG_LAST(i8, int8_t, uint32_t)
AVG_LAST(u8, uint8_t, uint32_t)
AVG_LAST(i32, int32_t, uint32_t)
AVG_LAST(i64, int64_t, uint64_t)

typedef void (*avg_fn)(void *d, const void *a, const void *b, size_t n, int k);
static const avg_fn avgs[] = {[COLL_F32] = avg_f32, [COLL_F64] = avg_f64, [COLL_I8] = avg_i8,
                              [COLL_U8] = avg_u8,   [COLL_I32] = avg_i32, [COLL_I64] = avg_i64};
KERNELS(i8, int8_t, uint32_t)
KERNELS(u8, uint8_t, uint32_t)
KERNELS(i32, int32_t, uint32_t)
KERNELS(i64, int64_t, uint64_t)
INT_ORDER(i8, int8_t)
INT_ORDER(u8, uint8_t)
INT_ORDER(i32, int32_t)
INT_ORDER(i64, int64_t)

/* Bitwise operations do not care where one element ends and the next begins: one kernel
 * per op over bytes serves every integer width (n elements of size s are n * s bytes),
 * and at -O3 it is as wide a vector loop as any per-type copy would be. */
BINARY(band_bytes, uint8_t, (uint8_t)(x & y))
BINARY(bor_bytes, uint8_t, (uint8_t)(x | y))
BINARY(bxor_bytes, uint8_t, (uint8_t)(x ^ y))
static const kernel_fn bitwise[] = {
    [COLL_BAND] = band_bytes, [COLL_BOR] = bor_bytes, [COLL_BXOR] = bxor_bytes};

#define ROW(S) { sum_##S, prod_##S, min_##S, max_##S, sum_##S }
static const kernel_fn table[][COLL_AVG + 1] = {
    [COLL_F32] = ROW(f32), [COLL_F64] = ROW(f64), [COLL_I8] = ROW(i8),
    [COLL_U8] = ROW(u8),   [COLL_I32] = ROW(i32), [COLL_I64] = ROW(i64),
};

size_t cl_dtype_size(int dtype)
{
    static const size_t sizes[] = { 4, 8, 2, 2, 1, 1, 4, 8 };
    return dtype >= 0 && dtype <= COLL_I64 ? sizes[dtype] : 0;
}

int cl_op_valid(int op)
{
    return op >= COLL_SUM && op <= COLL_BXOR;
}

int cl_op_bitwise(int op)
{
    return op == COLL_BAND || op == COLL_BOR || op == COLL_BXOR;
}

int cl_op_serves(int op, int dtype)
{
    int integer = dtype == COLL_I8 || dtype == COLL_U8 || dtype == COLL_I32 || dtype == COLL_I64;
    return cl_op_valid(op) && (integer || !cl_op_bitwise(op));
}

enum { BLOCK = 256 };

static void widen(float *out, const uint16_t *in, size_t n, int bf)
{
    for (size_t i = 0; i < n; i++)
        out[i] = bf ? cl_bf16_to_f32(in[i]) : cl_f16_to_f32(in[i]);
}

static void narrow(uint16_t *out, const float *in, size_t n, int bf)
{
    for (size_t i = 0; i < n; i++)
        out[i] = bf ? cl_f32_to_bf16(in[i]) : cl_f32_to_f16(in[i]);
}

static void reduce_half(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, int bf,
                        coll_op op)
{
    float fa[BLOCK], fb[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(fa, a + i, m, bf);
        widen(fb, b + i, m, bf);
        table[COLL_F32][op](fa, fa, fb, m);
        narrow(d + i, fa, m, bf);
    }
}

void cl_reduce(void *dst, const void *a, const void *b, size_t n, coll_dtype dtype, coll_op op)
{
    if (cl_op_bitwise(op))
        bitwise[op](dst, a, b, n * cl_dtype_size(dtype));
    else if (dtype == COLL_F16 || dtype == COLL_BF16)
        reduce_half(dst, a, b, n, dtype == COLL_BF16, op);
    else
        table[dtype][op](dst, a, b, n);
}

/* f16/bf16 averages divide the f32 sum and round once: a sum rounded to 16 bits first
 * overflowed f16 (40000 + 40000) where the average fits. (The engine runs f16/bf16 AVG
 * collectives in f32 anyway, core/widen.c; this keeps the kernel right for every dtype.) */
static void avg_half(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, int bf, int k)
{
    float fa[BLOCK], fb[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(fa, a + i, m, bf);
        widen(fb, b + i, m, bf);
        avg_f32(fa, fa, fb, m, k);
        narrow(d + i, fa, m, bf);
    }
}

void cl_reduce_avg(void *dst, const void *a, const void *b, size_t n, coll_dtype dtype, int k)
{
    if (dtype == COLL_F16 || dtype == COLL_BF16)
        avg_half(dst, a, b, n, dtype == COLL_BF16, k);
    else
        avgs[dtype](dst, a, b, n, k);
}

static void divide_half(uint16_t *d, size_t n, int bf, int k)
{
    float f[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(f, d + i, m, bf);
        div_f32(f, m, k);
        narrow(d + i, f, m, bf);
    }
}

void cl_divide(void *buf, size_t n, coll_dtype dtype, int k)
{
    switch (dtype) {
    case COLL_F32: div_f32(buf, n, k); break;
    case COLL_F64: div_f64(buf, n, k); break;
    case COLL_F16: divide_half(buf, n, 0, k); break;
    case COLL_BF16: divide_half(buf, n, 1, k); break;
    case COLL_I8: div_i8(buf, n, k); break;
    case COLL_U8: div_u8(buf, n, k); break;
    case COLL_I32: div_i32(buf, n, k); break;
    case COLL_I64: div_i64(buf, n, k); break;
    }
}
