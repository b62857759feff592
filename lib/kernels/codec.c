/* Codec kernels: see codec.h. The portable loops are written so the compiler can
 * vectorise them; the AVX2/F16C versions do the same arithmetic in the same order, so
 * results are bit-identical whichever path runs (the tests compare them). */
#include "kernels/codec.h"

#include "kernels/half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

static int simd = -1; /* -1: not decided yet */
static int simd512;   /* AVX-512BW on top of AVX2: the int8 quantizer uses it */

#if HAVE_X86
/* From cpuid: clang's __builtin_cpu_supports knows no "f16c". */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int cl_codec_use_simd(int level)
{
#if HAVE_X86
    simd = level >= 1 && __builtin_cpu_supports("avx2") && has_f16c();
    simd512 = simd && level >= 2 && __builtin_cpu_supports("avx512bw");
#else
    (void)level;
    simd = simd512 = 0;
#endif
    return simd + simd512;
}

static int use_simd(void)
{
    if (simd < 0)
        cl_codec_use_simd(2);
    return simd;
}

size_t cl_codec_bytes(coll_codec codec, size_t n)
{
    switch (codec) {
    case COLL_CODEC_FP16:
    case COLL_CODEC_BF16: return 2 * n;
    case COLL_CODEC_INT8: return n + 4 * ((n + CL_Q8_BLOCK - 1) / CL_Q8_BLOCK);
    default: return 4 * n;
    }
}

const char *cl_codec_name(int codec)
{
    static const char *names[] = {"none", "fp16", "bf16", "int8"};
    return codec >= 0 && codec <= COLL_CODEC_INT8 ? names[codec] : "invalid";
}

int cl_codec_parse(const char *s)
{
    for (int c = 0; c <= COLL_CODEC_INT8; c++)
        if (strcmp(s, cl_codec_name(c)) == 0)
            return c;
    return -1;
}

/* ---- q8b256: portable ------------------------------------------------------------ */

/* For non-negative floats the bit patterns order like the values, and Inf and NaN sort
 * above every finite value: one integer max finds absmax and non-finite blocks alike. */
static uint32_t absmax_bits(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b = cl_f32_bits(x[i]) & 0x7fffffffu;
        m = b > m ? b : m;
    }
    return m;
}

/* Below 2^-120 a block encodes as zeros with scale 0 (the all-zero block among them):
 * 127/absmax passes f32's range under about 3.7e-37, and the +Inf multiplier made every
 * value of the block -128 on the vector paths (0 * Inf a NaN, either way INT_MIN before
 * saturating) and was undefined behaviour in the portable (int) conversion. The error,
 * below absmax < 2^-120 (7.5e-37), is far under anything f32 data can be compared with;
 * from 2^-120 up the multiplier stays finite (at most 1.7e38) and |value x multiplier|
 * at most 127, so every path rounds the same products. */
enum { Q8_TINY = 0x03800000 }; /* the bits of 2^-120 */

static float block_scale(uint32_t amax, float *inv)
{
    *inv = 0.0f;
    if (amax >= 0x7f800000u)
        return NAN;
    if (amax < Q8_TINY)
        return 0.0f;
    float a = cl_bits_f32(amax);
    *inv = 127.0f / a;
    return a / 127.0f;
}

/* Round half to even for |v| < 2^22, with the default rounding mode. */
static inline float rne(float v)
{
    return (v + 0x1.8p23f) - 0x1.8p23f;
}

/* Writes the scale; returns 0 for a block with Inf/NaN (scale NaN) or below 2^-120
 * (scale 0), whose values are then all zero. */
static int q8_start_block(unsigned char *dst, uint32_t amax, size_t n, float *inv)
{
    float scale = block_scale(amax, inv);
    memcpy(dst, &scale, 4);
    if (scale > 0.0f)
        return 1;
    memset(dst + 4, 0, n);
    return 0;
}

static void q8_encode_block(unsigned char *dst, const float *x, size_t n)
{
    float inv;
    if (!q8_start_block(dst, absmax_bits(x, n), n, &inv))
        return;
    int8_t *q = (int8_t *)(dst + 4);
    for (size_t i = 0; i < n; i++)
        q[i] = (int8_t)(int)rne(x[i] * inv);
}

static void q8_decode_block(float *out, const unsigned char *src, size_t n, int add)
{
    float scale;
    memcpy(&scale, src, 4);
    const int8_t *q = (const int8_t *)(src + 4);
    for (size_t i = 0; i < n; i++)
        out[i] = add ? out[i] + (float)q[i] * scale : (float)q[i] * scale;
}

/* ---- AVX2 / F16C ----------------------------------------------------------------- */
#if HAVE_X86
#define CL_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))
enum { Q8_GROUP = 2 }; /* blocks per group (1, 4, 8, 16 measured no better) */
#define AVX __attribute__((target("avx2,f16c")))
/* The absmax pass prefetches 8 KiB ahead: the hardware prefetcher alone left the int8
 * encoder waiting on memory (1.0x memcpy at 64 MiB; 1.3-1.7x with it). Prefetching past
 * the end of a buffer is harmless. */
enum { Q8_PREFETCH = 2048 };

AVX static uint32_t absmax_bits_avx(const float *x, size_t n)
{
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* four chains hide the max latency */
        _mm_prefetch((const char *)(x + i + Q8_PREFETCH), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + Q8_PREFETCH + 16), _MM_HINT_T0);
        for (int k = 0; k < 4; k++)
            m[k] = _mm256_max_epu32(
                m[k], _mm256_and_si256(_mm256_loadu_si256((const void *)(x + i + 8 * k)), mask));
    }
    __m256i v = _mm256_max_epu32(_mm256_max_epu32(m[0], m[1]), _mm256_max_epu32(m[2], m[3]));
    __m128i h = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
    uint32_t r = (uint32_t)_mm_cvtsi128_si32(h), t = absmax_bits(x + i, n - i);
    return t > r ? t : r;
}

AVX static void q8_quantize_avx(int8_t *q, const float *x, size_t n, float inv)
{
    __m256 vinv = _mm256_set1_ps(inv);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) /* cvtps rounds half to even, as rne() does */
            v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vinv));
        __m256i a = _mm256_packs_epi32(v[0], v[1]), b = _mm256_packs_epi32(v[2], v[3]);
        __m256i p = _mm256_packs_epi16(a, b);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((void *)(q + i), p);
    }
    for (; i < n; i++)
        q[i] = (int8_t)(int)rne(x[i] * inv);
}

#ifndef PF
#define PF 2048
#endif
#define AVX512 __attribute__((target("avx512f,avx512bw,avx2,f16c")))

/* The same rounding (cvtps to nearest even) with AVX-512's saturating narrowing: one
 * instruction where AVX2 needs two packs and a lane permute. */
AVX512 static void q8_quantize_avx512(int8_t *q, const float *x, size_t n, float inv)
{
    __m512 vinv = _mm512_set1_ps(inv);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128((void *)(q + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(
                                              _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv))));
    for (; i < n; i++)
        q[i] = (int8_t)(int)rne(x[i] * inv);
}

AVX512 static uint32_t absmax_bits_avx512(const float *x, size_t n)
{
    const __m512i mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(x + i + Q8_PREFETCH), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + Q8_PREFETCH + 16), _MM_HINT_T0);
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), mask));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), mask));
    }
    uint32_t r = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1)), t = absmax_bits(x + i, n - i);
    return t > r ? t : r;
}

/* Scales of a group of blocks first, then their values: the absmax reductions of different
 * blocks overlap, instead of each block's quantization waiting on its own reduction. */
AVX static void q8_encode_group_avx(unsigned char *dst, const float *x, size_t n)
{
    uint32_t amax[Q8_GROUP];
    size_t nb = (n + CL_Q8_BLOCK - 1) / CL_Q8_BLOCK;
    for (size_t b = 0; b < nb; b++)
        amax[b] = (simd512 ? absmax_bits_avx512 : absmax_bits_avx)(
            x + b * CL_Q8_BLOCK, CL_MIN_SZ(n - b * CL_Q8_BLOCK, CL_Q8_BLOCK));
    for (size_t b = 0; b < nb; b++) {
        size_t m = CL_MIN_SZ(n - b * CL_Q8_BLOCK, CL_Q8_BLOCK);
        unsigned char *d = dst + b * (4 + CL_Q8_BLOCK);
        float inv;
        if (q8_start_block(d, amax[b], m, &inv))
            (simd512 ? q8_quantize_avx512 : q8_quantize_avx)((int8_t *)(d + 4), x + b * CL_Q8_BLOCK,
                                                             m, inv);
    }
}

AVX static void q8_encode_avx(unsigned char *dst, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i += Q8_GROUP * CL_Q8_BLOCK)
        q8_encode_group_avx(dst + i + 4 * (i / CL_Q8_BLOCK), x + i,
                            CL_MIN_SZ(n - i, Q8_GROUP * CL_Q8_BLOCK));
}

AVX static void q8_decode_block_avx(float *out, const unsigned char *src, size_t n, int add)
{
    float scale;
    memcpy(&scale, src, 4);
    const int8_t *q = (const int8_t *)(src + 4);
    __m256 vs = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i b = _mm_loadl_epi64((const void *)(q + i));
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), vs);
        if (add)
            f = _mm256_add_ps(_mm256_loadu_ps(out + i), f);
        _mm256_storeu_ps(out + i, f);
    }
    for (; i < n; i++)
        out[i] = add ? out[i] + (float)q[i] * scale : (float)q[i] * scale;
}

AVX static void f16_encode_avx(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = cl_f32_to_f16(src[i]);
}

AVX static void f16_decode_avx(float *dst, const uint16_t *src, size_t n, int add)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(src + i)));
        if (add)
            f = _mm256_add_ps(_mm256_loadu_ps(dst + i), f);
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++)
        dst[i] = add ? dst[i] + cl_f16_to_f32(src[i]) : cl_f16_to_f32(src[i]);
}

AVX static void bf16_encode_avx(uint16_t *dst, const float *src, size_t n)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                  abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                  quiet = _mm256_set1_epi32(0x400000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i u = _mm256_loadu_si256((const void *)(src + i + 8 * k));
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
            __m256i rounded = _mm256_add_epi32(
                u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
            __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan);
            r[k] = _mm256_srli_epi32(v, 16);
        }
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((void *)(dst + i), p);
    }
    for (; i < n; i++)
        dst[i] = cl_f32_to_bf16(src[i]);
}

AVX static void bf16_decode_avx(float *dst, const uint16_t *src, size_t n, int add)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(src + i)));
        __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        if (add)
            f = _mm256_add_ps(_mm256_loadu_ps(dst + i), f);
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++)
        dst[i] = add ? dst[i] + cl_bf16_to_f32(src[i]) : cl_bf16_to_f32(src[i]);
}
#endif

/* ---- dispatch -------------------------------------------------------------------- */

static void half_encode(uint16_t *dst, const float *src, size_t n, int bf)
{
#if HAVE_X86
    if (use_simd()) {
        if (bf)
            bf16_encode_avx(dst, src, n);
        else
            f16_encode_avx(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = bf ? cl_f32_to_bf16(src[i]) : cl_f32_to_f16(src[i]);
}

static void half_decode(float *dst, const uint16_t *src, size_t n, int bf, int add)
{
#if HAVE_X86
    if (use_simd()) {
        if (bf)
            bf16_decode_avx(dst, src, n, add);
        else
            f16_decode_avx(dst, src, n, add);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        float v = bf ? cl_bf16_to_f32(src[i]) : cl_f16_to_f32(src[i]);
        dst[i] = add ? dst[i] + v : v;
    }
}

static void q8_code(void *dst, const void *src, size_t n, int op)
{
#if HAVE_X86
    if (op == 0 && use_simd()) {
        q8_encode_avx(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i += CL_Q8_BLOCK) {
        size_t m = n - i < CL_Q8_BLOCK ? n - i : CL_Q8_BLOCK, at = i + 4 * (i / CL_Q8_BLOCK);
#if HAVE_X86
        if (use_simd()) {
            q8_decode_block_avx((float *)dst + i, (const unsigned char *)src + at, m, op == 2);
            continue;
        }
#endif
        if (op == 0)
            q8_encode_block((unsigned char *)dst + at, (const float *)src + i, m);
        else
            q8_decode_block((float *)dst + i, (const unsigned char *)src + at, m, op == 2);
    }
}

void cl_encode(coll_codec codec, void *dst, const float *src, size_t n)
{
    if (codec == COLL_CODEC_INT8)
        q8_code(dst, src, n, 0);
    else if (codec == COLL_CODEC_NONE)
        memcpy(dst, src, 4 * n);
    else
        half_encode(dst, src, n, codec == COLL_CODEC_BF16);
}

static void decode_any(coll_codec codec, float *dst, const void *src, size_t n, int add)
{
    if (codec == COLL_CODEC_INT8) {
        q8_code(dst, src, n, add ? 2 : 1);
    } else if (codec == COLL_CODEC_NONE) {
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = add ? dst[i] + s[i] : s[i];
    } else {
        half_decode(dst, src, n, codec == COLL_CODEC_BF16, add);
    }
}

void cl_decode(coll_codec codec, float *dst, const void *src, size_t n)
{
    decode_any(codec, dst, src, n, 0);
}

void cl_decode_add(coll_codec codec, float *acc, const void *src, size_t n)
{
    decode_any(codec, acc, src, n, 1);
}
