/* Trainer helpers: see batch.h. */
#include "batch.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double ex_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ex_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ex_shuffle(size_t *perm, size_t n, unsigned long long seed)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) { /* Fisher-Yates over a 64-bit LCG */
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (size_t)((seed >> 33) % (i + 1));
        size_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

void ex_gather(const dataset *d, const size_t *idx, int n, float *x, uint8_t *y)
{
    for (int i = 0; i < n; i++) {
        memcpy(x + (size_t)i * d->dim, d->x + idx[i] * d->dim, d->dim * sizeof(float));
        y[i] = d->y[idx[i]];
    }
}

void ex_train_serial(mlp *m, mlp_work *w, const dataset *d, const size_t *perm, int batch,
                     size_t steps, float lr, float momentum)
{
    int ignore = 0;
    float *x = malloc(sizeof(float) * (size_t)batch * d->dim);
    uint8_t *y = malloc((size_t)batch);
    for (size_t k = 0; x && y && k < steps; k++) {
        ex_gather(d, perm + k * (size_t)batch, batch, x, y);
        mlp_train_batch(m, w, x, y, batch, batch, &ignore);
        mlp_sgd(m, lr, momentum);
    }
    free(x);
    free(y);
}

double ex_serial_rate(const mlp *m, const dataset *d, const size_t *perm, int batch, float lr,
                      float momentum)
{
    enum { STEPS = 8 };
    mlp copy;
    mlp_work w;
    double rate = 0;
    if (mlp_init(&copy, m->size, m->layers, 0) == 0 && mlp_work_init(&w, m, batch) == 0) {
        memcpy(copy.params, m->params, sizeof(float) * m->nparams);
        double t0 = ex_now_s();
        ex_train_serial(&copy, &w, d, perm, batch, STEPS, lr, momentum);
        rate = STEPS * batch / (ex_now_s() - t0);
        mlp_work_free(&w);
    }
    mlp_free(&copy);
    return rate;
}
