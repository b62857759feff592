/* COLL_AVG on 8- and 32-bit integers: the partial sums travel in 64 bits, so an average
 * whose sum does not fit the element type is still right (int8 AVG of 100 on 4 ranks is
 * 100, where summing in int8 wrapped to -28). The operation runs as an int64 average over
 * widened copies and the result is narrowed back: every average fits its type.
 * COLL_AVG on f16 and bf16 the same way in f32, as numpy's mean of float16 accumulates:
 * every rank holding 40000 in f16 averages to 40000, where a sum kept in 16 bits was inf
 * from 2 ranks on (and each step's rounding to 16 bits is gone too). Dividing each
 * contribution by n first would not overflow either, but flushes small values into f16's
 * subnormals and rounds every contribution once more; a sum in f32 is what every
 * algorithm carries unchanged, at twice the bytes on the wire. */
#include "core/widen.h"
#include "core/comm.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

#include <stdlib.h>
#include <string.h>

int cl_widen_wanted(const cl_op *op)
{
    coll_dtype d = op->dtype;
    int narrow = d == COLL_I8 || d == COLL_U8 || d == COLL_I32 || d == COLL_F16 ||
                 d == COLL_BF16;
    int reduces = op->kind == CL_ALLREDUCE || op->kind == CL_REDUCE_SCATTER ||
                  op->kind == CL_REDUCE || op->kind == CL_REDUCE_SCATTERV;
    return narrow && reduces && op->op == COLL_AVG;
}

static coll_dtype wide_type(coll_dtype d)
{
    return d == COLL_F16 || d == COLL_BF16 ? COLL_F32 : COLL_I64;
}

static void widen(const void *in, void *out, size_t n, coll_dtype d)
{
    const uint16_t *h = in;
    for (size_t i = 0; i < n && wide_type(d) == COLL_F32; i++)
        ((float *)out)[i] = d == COLL_F16 ? cl_f16_to_f32(h[i]) : cl_bf16_to_f32(h[i]);
    for (size_t i = 0; i < n && wide_type(d) == COLL_I64; i++)
        ((int64_t *)out)[i] = d == COLL_I8   ? ((const int8_t *)in)[i]
                              : d == COLL_U8 ? ((const uint8_t *)in)[i]
                                             : ((const int32_t *)in)[i];
}

static void narrow(const void *in, void *out, size_t n, coll_dtype d)
{
    const float *f = in;
    const int64_t *w = in;
    for (size_t i = 0; i < n && wide_type(d) == COLL_F32; i++)
        ((uint16_t *)out)[i] = d == COLL_F16 ? cl_f32_to_f16(f[i]) : cl_f32_to_bf16(f[i]);
    for (size_t i = 0; i < n && wide_type(d) == COLL_I64; i++) {
        if (d == COLL_I8)
            ((int8_t *)out)[i] = (int8_t)w[i];
        else if (d == COLL_U8)
            ((uint8_t *)out)[i] = (uint8_t)w[i];
        else
            ((int32_t *)out)[i] = (int32_t)w[i];
    }
}

/* Elements this rank hands in and gets back for op. */
static void sizes(const coll_comm *c, const cl_op *op, size_t *in, size_t *out)
{
    *in = *out = op->count;
    if (op->kind == CL_REDUCE_SCATTER)
        *in = op->count * (size_t)c->size;
    if (op->kind == CL_REDUCE_SCATTERV) {
        *in = 0;
        for (int r = 0; r < c->size; r++)
            *in += op->rcounts[r];
        *out = op->rcounts[c->rank];
    }
    if (op->kind == CL_REDUCE && c->rank != op->root)
        *out = 0;
}

int cl_run_widened(coll_comm *c, coll_req *r, int (*run)(coll_comm *, coll_req *))
{
    cl_op *op = &r->op, keep = *op;
    size_t in, out;
    sizes(c, op, &in, &out);
    size_t ws = cl_dtype_size(wide_type(op->dtype));
    void *win = malloc((in ? in : 1) * ws), *wout = malloc((out ? out : 1) * ws);
    int rc = COLL_ENOMEM;
    if (win && wout) {
        widen(op->sbuf, win, in, op->dtype);
        op->sbuf = win;
        op->rbuf = wout;
        op->dtype = wide_type(op->dtype);
        rc = run(c, r);
        *op = keep;
        if (rc == COLL_OK && out)
            narrow(wout, op->rbuf, out, op->dtype);
    }
    *op = keep;
    free(win);
    free(wout);
    return rc;
}
