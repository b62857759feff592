/* Codec kernels: the vector path gives the same bytes as the portable path on data full
 * of the cases that break codecs (Inf, NaN, denormals, signed zeros, short tail blocks);
 * the q8b256 format holds its promises (zero block scale 0, non-finite block scale NaN,
 * per-element error within half a quantisation step). */
#include "kernels/codec.h"
#include "kernels/half.h"

#include "common/suite.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float *nasty(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof(float));
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        int k = rand() % 40;
        float g = ((float)rand() / (float)RAND_MAX - 0.5f) * 8.0f;
        x[i] = k == 0   ? INFINITY
               : k == 1 ? -INFINITY
               : k == 2 ? NAN
               : k == 3 ? 1e-40f
               : k == 4 ? -0.0f
               : k == 5 ? 70000.0f
               : k == 6 ? cl_bits_f32((uint32_t)rand())
                        : g;
    }
    return x;
}

START_TEST(vector_and_portable_paths_agree_bit_for_bit)
{
    coll_codec codec = (coll_codec)(1 + _i % 3);
    size_t n = (size_t)(1 + (_i * 977) % 5000);
    float *x = nasty(n, (unsigned)_i);
    size_t eb = cl_codec_bytes(codec, n);
    unsigned char *e0 = calloc(1, eb), *e1 = calloc(1, eb);
    float *d0 = malloc(n * 4), *d1 = malloc(n * 4), *a0 = malloc(n * 4), *a1 = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        a0[i] = a1[i] = (float)i * 0.25f;
    cl_codec_use_simd(0);
    cl_encode(codec, e0, x, n);
    cl_decode(codec, d0, e0, n);
    cl_decode_add(codec, a0, e0, n);
    for (int level = 1; level <= 2; level++) { /* AVX2, then AVX-512 where present */
        int vec = cl_codec_use_simd(level);
        memset(e1, 0, eb);
        for (size_t i = 0; i < n; i++)
            a1[i] = (float)i * 0.25f;
        cl_encode(codec, e1, x, n);
        cl_decode(codec, d1, e0, n);
        cl_decode_add(codec, a1, e0, n);
        ck_assert_msg(memcmp(e0, e1, eb) == 0, "%s encode differs (n %zu, level %d)",
                      cl_codec_name(codec), n, vec);
        ck_assert_msg(memcmp(d0, d1, n * 4) == 0, "%s decode differs", cl_codec_name(codec));
        ck_assert_msg(memcmp(a0, a1, n * 4) == 0, "%s decode-add differs", cl_codec_name(codec));
    }
    free(x), free(e0), free(e1), free(d0), free(d1), free(a0), free(a1);
}
END_TEST

START_TEST(half_codecs_match_the_scalar_conversions)
{
    size_t n = 4099;
    float *x = nasty(n, 7);
    uint16_t *e = malloc(n * 2);
    cl_codec_use_simd(1);
    cl_encode(COLL_CODEC_FP16, e, x, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(e[i], cl_f32_to_f16(x[i]));
    cl_encode(COLL_CODEC_BF16, e, x, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(e[i], cl_f32_to_bf16(x[i]));
    free(x);
    free(e);
}
END_TEST

START_TEST(q8_blocks_scale_and_bound_the_error)
{
    enum { N = 256 * 3 + 17 };
    float x[N], d[N];
    unsigned char e[N + 16];
    for (int i = 0; i < N; i++)
        x[i] = i < 256 ? 0.0f : sinf((float)i) * (float)(i % 97);
    x[600] = INFINITY; /* third block non-finite */
    cl_codec_use_simd(_i);
    cl_encode(COLL_CODEC_INT8, e, x, N);
    ck_assert_uint_eq(cl_codec_bytes(COLL_CODEC_INT8, N), N + 16);
    float s0, s1, s2, s3;
    memcpy(&s0, e, 4);
    memcpy(&s1, e + 260, 4);
    memcpy(&s2, e + 520, 4);
    memcpy(&s3, e + 780, 4);
    ck_assert(s0 == 0.0f);
    ck_assert(isnan(s2));
    cl_decode(COLL_CODEC_INT8, d, e, N);
    for (int i = 0; i < N; i++) {
        if (i >= 512 && i < 768) {
            ck_assert_msg(!isfinite(d[i]), "element %d of a block with Inf must be non-finite", i);
            continue;
        }
        float scale = i < 256 ? s0 : i < 512 ? s1 : s3;
        ck_assert_msg(fabsf(d[i] - x[i]) <= scale * 0.5f * 1.0001f, "element %d: %g vs %g", i, d[i],
                      x[i]);
    }
}
END_TEST

/* Blocks of tiny values on every path: absmax 1e-37 (127/absmax is +Inf in f32: the
 * vector paths made every value -128, a flipped sign, and the portable (int)Inf was
 * undefined), subnormals only, just below 2^-120 (zeros with scale 0, error under
 * 2^-120) and 2^-120 itself (quantized as usual). Every path gives the same bytes, no
 * value changes sign, and the error stays within half a step or, for a zero block,
 * its absmax. */
START_TEST(tiny_blocks_keep_their_sign_on_every_path)
{
    enum { B = 256, N = 4 * B + 77 };
    static const float amax[] = {1e-37f, 1e-40f, 0x1.fffffep-121f, 0x1p-120f, 3e-37f};
    float x[N], d[N];
    unsigned char e[3][N + 20];
    for (int i = 0; i < N; i++) /* both signs, zeros, values down to amax / 255 */
        x[i] = i % 7 == 3 ? 0.0f
                          : amax[i / B] * (float)((i * 37) % 256) / 255.0f * (i % 2 ? -1.0f : 1.0f);
    for (int b = 0; b < 5; b++)
        x[b * B + 1] = amax[b]; /* each block's absmax */
    for (int level = 0; level <= 2; level++) {
        cl_codec_use_simd(level);
        cl_encode(COLL_CODEC_INT8, e[level], x, N);
        ck_assert_msg(memcmp(e[0], e[level], sizeof(e[0])) == 0, "level %d encodes otherwise",
                      level);
        cl_decode(COLL_CODEC_INT8, d, e[level], N);
        for (int i = 0; i < N; i++) {
            float scale;
            memcpy(&scale, e[level] + (i / B) * (B + 4), 4);
            double bound = scale > 0 ? scale * 0.5 * 1.0001 : amax[i / B];
            ck_assert_msg(!(d[i] < 0 && x[i] > 0) && !(d[i] > 0 && x[i] < 0) &&
                              fabs((double)d[i] - x[i]) <= bound,
                          "level %d element %d: %g decodes to %g (scale %g)", level, i, x[i], d[i],
                          scale);
        }
    }
    float s3, s0;
    memcpy(&s0, e[0], 4);
    memcpy(&s3, e[0] + 3 * (B + 4), 4);
    ck_assert_msg(s0 == 0.0f && s3 > 0.0f, "scales %g (1e-37 block), %g (2^-120 block)", s0, s3);
}
END_TEST

START_TEST(names_and_sizes)
{
    ck_assert_int_eq(cl_codec_parse("int8"), COLL_CODEC_INT8);
    ck_assert_int_eq(cl_codec_parse("nope"), -1);
    ck_assert_uint_eq(cl_codec_bytes(COLL_CODEC_FP16, 10), 20);
    ck_assert_uint_eq(cl_codec_bytes(COLL_CODEC_INT8, 256), 260);
    ck_assert_uint_eq(cl_codec_bytes(COLL_CODEC_INT8, 257), 265);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("codecs");
    TCase *t = tcase_create("codecs");
    tcase_add_loop_test(t, vector_and_portable_paths_agree_bit_for_bit, 0, 60);
    tcase_add_test(t, half_codecs_match_the_scalar_conversions);
    tcase_add_loop_test(t, q8_blocks_scale_and_bound_the_error, 0, 3);
    tcase_add_test(t, tiny_blocks_keep_their_sign_on_every_path);
    tcase_add_test(t, names_and_sizes);
    suite_add_tcase(s, t);
    return run_suite(s);
}
