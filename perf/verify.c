/* Test data and references for collectives: see verify.h. */
#include "verify.h"

#include "kernels/half.h"

#include <math.h>
#include <stdint.h>

int cl_op_fits(coll_dtype dt, coll_op op)
{
    int integer = dt == COLL_I8 || dt == COLL_U8 || dt == COLL_I32 || dt == COLL_I64;
    return integer || op < COLL_BAND;
}

double cl_val(int rank, size_t i, coll_op op)
{
    if (op == COLL_PROD)
        return ((i + (size_t)rank) % 4 == 0 && rank < 4) ? 2.0 : 1.0;
    if (op >= COLL_BAND) /* all 7 low bits in play, and every int8 holds them */
        return (double)(((size_t)rank * 37 + i * 11 + 5) % 128);
    return (double)(((size_t)rank * 7 + i * 3) % 11 + 1);
}

static double bitwise(double acc, double v, coll_op op)
{
    int64_t a = (int64_t)acc, b = (int64_t)v;
    return (double)(op == COLL_BAND ? a & b : op == COLL_BOR ? a | b : a ^ b);
}

static void put(void *buf, size_t i, coll_dtype dt, double v)
{
    int64_t w = (int64_t)v;
    switch (dt) {
    case COLL_F32: ((float *)buf)[i] = (float)v; break;
    case COLL_F64: ((double *)buf)[i] = v; break;
    case COLL_F16: ((uint16_t *)buf)[i] = cl_f32_to_f16((float)v); break;
    case COLL_BF16: ((uint16_t *)buf)[i] = cl_f32_to_bf16((float)v); break;
    case COLL_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)w; break;
    case COLL_U8: ((uint8_t *)buf)[i] = (uint8_t)w; break;
    case COLL_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)w; break;
    case COLL_I64: ((int64_t *)buf)[i] = w; break;
    }
}

static double get(const void *buf, size_t i, coll_dtype dt)
{
    switch (dt) {
    case COLL_F32: return ((const float *)buf)[i];
    case COLL_F64: return ((const double *)buf)[i];
    case COLL_F16: return cl_f16_to_f32(((const uint16_t *)buf)[i]);
    case COLL_BF16: return cl_bf16_to_f32(((const uint16_t *)buf)[i]);
    case COLL_I8: return ((const int8_t *)buf)[i];
    case COLL_U8: return ((const uint8_t *)buf)[i];
    case COLL_I32: return ((const int32_t *)buf)[i];
    case COLL_I64: return (double)((const int64_t *)buf)[i];
    }
    return NAN;
}

void cl_fill(void *buf, size_t count, coll_dtype dt, coll_op op, int rank, size_t first)
{
    for (size_t k = 0; k < count; k++)
        put(buf, k, dt, cl_val(rank, first + k, op));
}

static double reference(size_t i, coll_dtype dt, coll_op op, int n)
{
    double acc = cl_val(0, i, op);
    for (int r = 1; r < n; r++) {
        double v = cl_val(r, i, op);
        acc = op >= COLL_BAND   ? bitwise(acc, v, op)
              : op == COLL_PROD ? acc * v
              : op == COLL_MIN  ? fmin(acc, v)
              : op == COLL_MAX  ? fmax(acc, v)
                                : acc + v;
    }
    if (op != COLL_AVG)
        return acc;
    int integer = dt == COLL_I8 || dt == COLL_U8 || dt == COLL_I32 || dt == COLL_I64;
    return integer ? trunc(acc / n) : acc / n;
}

static double abs_tol;

void cl_verify_tolerance(double t)
{
    abs_tol = t;
}

static int same(double got, double want, coll_dtype dt)
{
    if (abs_tol > 0 && fabs(got - want) <= abs_tol)
        return 1;
    /* Sums of small integers are exact; only avg's division rounds, once, in dt. */
    double tol = dt == COLL_F16 ? 1e-3 : dt == COLL_BF16 ? 8e-3 : dt == COLL_F32 ? 1e-6 : 1e-12;
    return fabs(got - want) <= tol * fabs(want);
}

size_t cl_check_reduce(const void *buf, size_t count, coll_dtype dt, coll_op op, int nranks,
                       size_t first)
{
    size_t wrong = 0;
    for (size_t k = 0; k < count; k++)
        wrong += !same(get(buf, k, dt), reference(first + k, dt, op, nranks), dt);
    return wrong;
}

size_t cl_check_from(const void *buf, size_t count, coll_dtype dt, coll_op op, int rank,
                     size_t first)
{
    size_t wrong = 0;
    for (size_t k = 0; k < count; k++)
        wrong += !same(get(buf, k, dt), cl_val(rank, first + k, op), dt);
    return wrong;
}

size_t cl_check_gather(const void *buf, size_t count, coll_dtype dt, coll_op op, int nranks)
{
    size_t wrong = 0;
    for (int r = 0; r < nranks; r++)
        for (size_t k = 0; k < count; k++)
            wrong += !same(get(buf, (size_t)r * count + k, dt), cl_val(r, k, op), dt);
    return wrong;
}
