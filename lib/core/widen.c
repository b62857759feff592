/* COLL_AVG on 8- and 32-bit integers: the partial sums travel in 64 bits, so an average
 * whose sum does not fit the element type is still right (int8 AVG of 100 on 4 ranks is
 * 100, where summing in int8 wrapped to -28). The operation runs as an int64 average over
 * widened copies and the result is narrowed back: every average fits its type. */
#include "core/comm.h"

#include <stdlib.h>
#include <string.h>

int cl_widen_wanted(const cl_op *op)
{
    coll_dtype d = op->dtype;
    int narrow_int = d == COLL_I8 || d == COLL_U8 || d == COLL_I32;
    int reduces = op->kind == CL_ALLREDUCE || op->kind == CL_REDUCE_SCATTER ||
                  op->kind == CL_REDUCE || op->kind == CL_REDUCE_SCATTERV;
    return narrow_int && reduces && op->op == COLL_AVG;
}

static void widen(const void *in, int64_t *out, size_t n, coll_dtype d)
{
    for (size_t i = 0; i < n; i++)
        out[i] = d == COLL_I8   ? ((const int8_t *)in)[i]
                 : d == COLL_U8 ? ((const uint8_t *)in)[i]
                                : ((const int32_t *)in)[i];
}

static void narrow(const int64_t *in, void *out, size_t n, coll_dtype d)
{
    for (size_t i = 0; i < n; i++) {
        if (d == COLL_I8)
            ((int8_t *)out)[i] = (int8_t)in[i];
        else if (d == COLL_U8)
            ((uint8_t *)out)[i] = (uint8_t)in[i];
        else
            ((int32_t *)out)[i] = (int32_t)in[i];
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
    int64_t *win = malloc((in ? in : 1) * sizeof(int64_t));
    int64_t *wout = malloc((out ? out : 1) * sizeof(int64_t));
    int rc = COLL_ENOMEM;
    if (win && wout) {
        widen(op->sbuf, win, in, op->dtype);
        op->sbuf = win;
        op->rbuf = wout;
        op->dtype = COLL_I64;
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
