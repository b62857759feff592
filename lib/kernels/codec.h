/* Wire codecs for f32 data: fp16, bf16 and q8b256 (per block of 256 values an f32 scale
 * = absmax/127, then 256 int8 rounded to nearest even; the last block short; a block
 * whose absmax is below 2^-120, the all-zero one included, has scale 0 and zero values;
 * a block holding Inf or NaN has scale NaN, so it decodes to NaN). Every kernel has a
 * portable C path and an AVX2/F16C path chosen at run time; both give the same bits. */
#ifndef CL_CODEC_H
#define CL_CODEC_H

#include "collective.h"

#include <stddef.h>

#define CL_Q8_BLOCK 256

/* Encoded bytes of n f32 values. */
size_t cl_codec_bytes(coll_codec codec, size_t n);
const char *cl_codec_name(int codec);
/* The codec named by s ("none", "fp16", "bf16", "int8"), or -1. */
int cl_codec_parse(const char *s);

void cl_encode(coll_codec codec, void *dst, const float *src, size_t n);
void cl_decode(coll_codec codec, float *dst, const void *src, size_t n);
/* acc[i] += decode(src)[i] */
void cl_decode_add(coll_codec codec, float *acc, const void *src, size_t n);

/* Caps the kernels at the portable path (0), AVX2/F16C (1) or AVX2 plus AVX-512BW for the
 * int8 encoder (2, the default); for tests and benchmarks. Returns the level in use now,
 * at most the one asked for (lower where the CPU lacks the instructions). */
int cl_codec_use_simd(int level);

#endif
