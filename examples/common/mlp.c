/* The MLP: see mlp.h. Loops are ordered so the innermost runs along contiguous rows
 * (restrict pointers, so the compiler vectorises them). */
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double gaussian(uint64_t *s)
{
    double u1 = ((double)(splitmix(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(splitmix(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int mlp_init(mlp *m, const int *sizes, int layers, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    if (layers < 1 || layers > MLP_MAX_LAYERS)
        return -1;
    m->layers = layers;
    for (int l = 0; l <= layers; l++)
        m->size[l] = sizes[l];
    for (int l = 0; l < layers; l++)
        m->nparams += (size_t)sizes[l] * sizes[l + 1] + sizes[l + 1];
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->velocity = calloc(m->nparams, sizeof(float));
    if (!m->params || !m->grads || !m->velocity)
        return -1;
    size_t off = 0;
    for (int l = 0; l < layers; l++) {
        size_t nw = (size_t)sizes[l] * sizes[l + 1];
        m->W[l] = m->params + off, m->dW[l] = m->grads + off;
        off += nw;
        m->b[l] = m->params + off, m->db[l] = m->grads + off;
        off += (size_t)sizes[l + 1];
        double scale = sqrt(2.0 / sizes[l]); /* He initialisation for ReLU */
        for (size_t i = 0; i < nw; i++)
            m->W[l][i] = (float)(gaussian(&seed) * scale);
    }
    return 0;
}

void mlp_free(mlp *m)
{
    free(m->params);
    free(m->grads);
    free(m->velocity);
    memset(m, 0, sizeof(*m));
}

int mlp_work_init(mlp_work *w, const mlp *m, int batch)
{
    memset(w, 0, sizeof(*w));
    w->batch = batch;
    for (int l = 0; l <= m->layers; l++) {
        if (l > 0)
            w->act[l] = malloc(sizeof(float) * (size_t)batch * m->size[l]);
        w->grad[l] = malloc(sizeof(float) * (size_t)batch * m->size[l]);
        if ((l > 0 && !w->act[l]) || !w->grad[l])
            return -1;
    }
    return 0;
}

void mlp_work_free(mlp_work *w)
{
    for (int l = 0; l <= MLP_MAX_LAYERS; l++) {
        if (l > 0)
            free(w->act[l]);
        free(w->grad[l]);
    }
    memset(w, 0, sizeof(*w));
}

void mlp_dense_forward(const float *W, const float *b, const float *in, float *out, int n, int K,
                       int N, int relu)
{
    for (int i = 0; i < n; i++) {
        float *restrict o = out + (size_t)i * N;
        const float *x = in + (size_t)i * K;
        if (b)
            memcpy(o, b, sizeof(float) * (size_t)N);
        else
            memset(o, 0, sizeof(float) * (size_t)N);
        for (int k = 0; k < K; k++) {
            float a = x[k];
            if (a == 0.0f)
                continue; /* ReLU zeros and blank pixels are common */
            const float *restrict wk = W + (size_t)k * N;
            for (int j = 0; j < N; j++)
                o[j] += a * wk[j];
        }
        for (int j = 0; relu && j < N; j++)
            o[j] = o[j] > 0.0f ? o[j] : 0.0f;
    }
}

void mlp_dense_backward(const float *W, float *dW, float *db, const float *in, const float *dout,
                        float *din, int n, int K, int N)
{
    for (int i = 0; i < n; i++) {
        const float *restrict d = dout + (size_t)i * N, *x = in + (size_t)i * K;
        for (int j = 0; db && j < N; j++)
            db[j] += d[j];
        for (int k = 0; k < K; k++) {
            float a = x[k];
            if (a != 0.0f) {
                float *restrict g = dW + (size_t)k * N;
                for (int j = 0; j < N; j++)
                    g[j] += a * d[j];
            }
        }
        if (!din)
            continue;
        float *restrict di = din + (size_t)i * K;
        for (int k = 0; k < K; k++) {
            const float *restrict wk = W + (size_t)k * N;
            float s = 0.0f;
            for (int j = 0; j < N; j++)
                s += d[j] * wk[j];
            di[k] = x[k] > 0.0f ? s : 0.0f; /* the input is the previous layer's ReLU */
        }
    }
}

void mlp_layer_forward(const mlp *m, int l, const float *in, float *out, int n)
{
    mlp_dense_forward(m->W[l], m->b[l], in, out, n, m->size[l], m->size[l + 1],
                      l < m->layers - 1);
}

void mlp_layer_backward(mlp *m, int l, const float *in, const float *dout, float *din, int n)
{
    mlp_dense_backward(m->W[l], m->dW[l], m->db[l], in, dout, din, n, m->size[l],
                       m->size[l + 1]);
}

double mlp_loss_grad(const float *logits, const uint8_t *y, int n, int classes, int norm,
                     float *dlogits, int *correct)
{
    double loss = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *d = dlogits + (size_t)i * classes;
        int best = 0;
        float mx = z[0];
        for (int j = 1; j < classes; j++)
            if (z[j] > mx)
                mx = z[j], best = j;
        double sum = 0;
        for (int j = 0; j < classes; j++)
            sum += exp((double)(z[j] - mx));
        loss += log(sum) - (double)(z[y[i]] - mx);
        for (int j = 0; j < classes; j++)
            d[j] = (float)((exp((double)(z[j] - mx)) / sum - (j == y[i])) / norm);
        *correct += best == y[i];
    }
    return loss;
}

void mlp_forward(const mlp *m, mlp_work *w, const float *x, int n)
{
    w->act[0] = (float *)x;
    for (int l = 0; l < m->layers; l++)
        mlp_layer_forward(m, l, w->act[l], w->act[l + 1], n);
}

double mlp_backward(mlp *m, mlp_work *w, const uint8_t *y, int n, int norm, int *correct)
{
    int L = m->layers;
    double loss = mlp_loss_grad(w->act[L], y, n, m->size[L], norm, w->grad[L], correct);
    for (int l = L - 1; l >= 0; l--)
        mlp_layer_backward(m, l, w->act[l], w->grad[l + 1], l > 0 ? w->grad[l] : NULL, n);
    return loss;
}

double mlp_train_batch(mlp *m, mlp_work *w, const float *x, const uint8_t *y, int n, int norm,
                       int *correct)
{
    memset(m->grads, 0, sizeof(float) * m->nparams);
    mlp_forward(m, w, x, n);
    return mlp_backward(m, w, y, n, norm, correct);
}

void mlp_sgd_span(float *params, float *velocity, const float *grads, size_t n, float lr,
                  float momentum)
{
    float *restrict p = params, *restrict v = velocity;
    const float *restrict g = grads;
    for (size_t i = 0; i < n; i++) {
        v[i] = momentum * v[i] + g[i];
        p[i] -= lr * v[i];
    }
}

void mlp_sgd(mlp *m, float lr, float momentum)
{
    mlp_sgd_span(m->params, m->velocity, m->grads, m->nparams, lr, momentum);
}

size_t mlp_work_bytes(const mlp *m, int batch)
{
    size_t floats = 0;
    for (int l = 0; l <= m->layers; l++)
        floats += (size_t)m->size[l] * (l > 0 ? 2 : 1);
    return floats * (size_t)batch * sizeof(float);
}

double mlp_accuracy(const mlp *m, mlp_work *w, const float *x, const uint8_t *y, size_t n)
{
    size_t correct = 0;
    int L = m->layers, C = m->size[L];
    for (size_t s = 0; s < n; s += (size_t)w->batch) {
        int b = (int)(n - s < (size_t)w->batch ? n - s : (size_t)w->batch);
        mlp_forward(m, w, x + s * (size_t)m->size[0], b);
        for (int i = 0; i < b; i++) {
            const float *z = w->act[L] + (size_t)i * C;
            int best = 0;
            for (int j = 1; j < C; j++)
                best = z[j] > z[best] ? j : best;
            correct += best == y[s + (size_t)i];
        }
    }
    return (double)correct / (double)n;
}

uint64_t mlp_hash(const mlp *m, size_t from, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)(m->params + from);
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}
