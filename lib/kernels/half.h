/* IEEE binary16 and bfloat16 conversions: round to nearest even, NaN kept (quiet),
 * overflow to infinity, denormals exact. Scalar and branch-light so loops vectorise. */
#ifndef CL_HALF_H
#define CL_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t cl_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float cl_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float cl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)
        return cl_bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) /* zero or denormal: man * 2^-24, exact in f32 */
        return cl_bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)man * 0x1p-24f;
    return cl_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t cl_f32_to_f16(float f)
{
    uint32_t u = cl_f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep it quiet and a NaN */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) { /* below 2^-14: denormal half, round the scaled value */
        float m = cl_bits_f32(a) * 0x1p24f;  /* exact: value in units of 2^-24 */
        float r = (m + 0x1p23f) - 0x1p23f;   /* round to nearest even integer */
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t mant_odd = (a >> 13) & 1;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round half to even */
    return (uint16_t)(sign | (a >> 13));
}

static inline float cl_bf16_to_f32(uint16_t h)
{
    return cl_bits_f32((uint32_t)h << 16);
}

static inline uint16_t cl_f32_to_bf16(float f)
{
    uint32_t u = cl_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#endif
