/* The pipeline: see pipeline.h. */
#include "pipeline.h"

#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t layer_params(const mlp *net, int l)
{
    return (size_t)net->size[l] * net->size[l + 1] + net->size[l + 1];
}

/* The largest stage of the best split of layers [from, L) into k stages; the split goes
 * to bound[0..k). Nets have at most MLP_MAX_LAYERS layers, so trying every split is cheap. */
static size_t best_split(const mlp *net, int from, int k, int *bound)
{
    int L = net->layers, trial[MLP_MAX_LAYERS + 1];
    size_t best = (size_t)-1, first = 0;
    if (k == 1) {
        for (int l = from; l < L; l++)
            first += layer_params(net, l);
        bound[0] = from;
        return first;
    }
    for (int end = from + 1; end <= L - (k - 1); end++) {
        first += layer_params(net, end - 1);
        size_t rest = best_split(net, end, k - 1, trial + 1);
        size_t worst = first > rest ? first : rest;
        if (worst < best) {
            best = worst;
            trial[0] = from;
            memcpy(bound, trial, sizeof(int) * (size_t)k);
        }
    }
    return best;
}

void pipe_split(const mlp *net, int K, int *bound)
{
    best_split(net, 0, K, bound);
    bound[K] = net->layers;
}

size_t pipe_stage_params(const mlp *net, int K, int k)
{
    int bound[MLP_MAX_LAYERS + 1];
    size_t n = 0;
    pipe_split(net, K, bound);
    for (int l = bound[k]; l < bound[k + 1]; l++)
        n += layer_params(net, l);
    return n;
}

/* Recompute: every buffer is the scratch's but the micro-batch's own input, the output
 * it sends forward and the gradient it sends back (both in flight until the step ends). */
static int boundary_work(pipeline *p, mlp_work *w)
{
    size_t in = (size_t)p->mb * p->net->size[p->lo], out = (size_t)p->mb * p->net->size[p->hi];
    float **input = p->lo == 0 ? &w->grad[0] : &w->act[p->lo];
    *w = p->scratch;
    *input = malloc(sizeof(float) * in);
    int bad = !*input;
    if (p->stage < p->K - 1)
        bad |= !(w->act[p->hi] = malloc(sizeof(float) * out));
    if (p->lo > 0)
        bad |= !(w->grad[p->lo] = malloc(sizeof(float) * in));
    return bad ? -1 : 0;
}

/* Frees what a micro-batch owns: under recompute, what it does not share with scratch. */
static void work_free(pipeline *p, mlp_work *w)
{
    if (!p->recompute) {
        mlp_work_free(w);
        return;
    }
    for (int l = 0; l <= MLP_MAX_LAYERS; l++) {
        if (w->act[l] != p->scratch.act[l])
            free(w->act[l]);
        if (w->grad[l] != p->scratch.grad[l])
            free(w->grad[l]);
    }
    memset(w, 0, sizeof(*w));
}

int pipe_init(pipeline *p, coll_comm *c, mlp *net, int batch, int micro, int onef1b,
              int recompute, const dataset *train)
{
    int K = coll_size(c), s = coll_rank(c), bound[MLP_MAX_LAYERS + 1];
    if (K > net->layers || micro < 1 || batch % micro)
        return -1;
    pipe_split(net, K, bound);
    *p = (pipeline){ .c = c, .stage = s, .K = K, .lo = bound[s], .hi = bound[s + 1],
                     .micro = micro, .mb = batch / micro, .onef1b = onef1b,
                     .recompute = recompute, .net = net, .train = train };
    p->work = calloc((size_t)micro, sizeof(mlp_work));
    p->sends = calloc((size_t)micro * 2, sizeof(coll_req *));
    p->y = malloc((size_t)batch);
    if (!p->work || !p->sends || !p->y || (recompute && mlp_work_init(&p->scratch, net, p->mb)))
        return -1;
    for (int i = 0; i < micro; i++)
        if ((recompute ? boundary_work(p, &p->work[i]) : mlp_work_init(&p->work[i], net, p->mb)))
            return -1;
    return 0;
}

void pipe_free(pipeline *p)
{
    for (int i = 0; p->work && i < p->micro; i++)
        work_free(p, &p->work[i]);
    mlp_work_free(&p->scratch);
    free(p->work);
    free(p->sends);
    free(p->y);
    p->work = NULL, p->sends = NULL, p->y = NULL; /* freed twice is harmless */
}

size_t pipe_params(const pipeline *p, size_t *from)
{
    *from = (size_t)(p->net->W[p->lo] - p->net->params);
    size_t to = p->hi < p->net->layers ? (size_t)(p->net->W[p->hi] - p->net->params)
                                       : p->net->nparams;
    return to - *from;
}

/* Waiting on a peer counts as idle (the bubble); the kernels count as compute. */
static int timed_recv(pipeline *p, float *buf, size_t count, int peer, uint32_t tag)
{
    double t0 = ex_now_s();
    int rc = coll_recv(p->c, buf, count, COLL_F32, peer, tag);
    p->idle += ex_now_s() - t0;
    return rc;
}

/* Only a send that started is waited on later. */
static int post_send(pipeline *p, const float *buf, size_t count, int peer, uint32_t tag)
{
    coll_req *q;
    int rc = coll_isend(p->c, buf, count, COLL_F32, peer, tag, &q);
    if (rc == COLL_OK)
        p->sends[p->nsends++] = q;
    return rc;
}

/* This stage's input: the data on stage 0 (in grad[0], which layer 0 never needs for a
 * gradient), else the previous stage's activations, received into act[lo]. */
static float *input_of(const pipeline *p, mlp_work *w)
{
    return p->lo == 0 ? w->grad[0] : w->act[p->lo];
}

static void note(pipeline *p, char kind, int mb, double t0, double t1)
{
    p->compute += t1 - t0;
    tl_add(p->tl, kind, mb, t0, t1);
}

static void forward_layers(pipeline *p, mlp_work *w, int n, int mb)
{
    double t0 = ex_now_s();
    for (int l = p->lo; l < p->hi; l++)
        mlp_layer_forward(p->net, l, l == p->lo ? input_of(p, w) : w->act[l], w->act[l + 1], n);
    note(p, 'F', mb, t0, ex_now_s());
}

static int forward(pipeline *p, int i, const size_t *idx)
{
    mlp_work *w = &p->work[i];
    const size_t *mine = idx + (size_t)i * p->mb;
    int rc = COLL_OK;
    const int *size = p->net->size;
    if (p->stage == 0)
        ex_gather(p->train, mine, p->mb, input_of(p, w), p->y + i * p->mb);
    else
        rc = timed_recv(p, input_of(p, w), (size_t)p->mb * size[p->lo], p->stage - 1, (uint32_t)i);
    for (int k = 0; k < p->mb; k++) /* labels travel by index: every stage has the data */
        p->y[i * p->mb + k] = p->train->y[mine[k]];
    forward_layers(p, w, p->mb, i);
    p->stashed++;
    p->peak_stash = p->stashed > p->peak_stash ? p->stashed : p->peak_stash;
    if (rc == COLL_OK && p->stage < p->K - 1)
        rc = post_send(p, w->act[p->hi], (size_t)p->mb * size[p->hi], p->stage + 1, (uint32_t)i);
    return rc;
}

/* The forward again, from the stashed input, as far as the backward reads: each layer's
 * input, and the logits on the last stage (elsewhere the output is not read). */
static void recompute(pipeline *p, mlp_work *w)
{
    int to = p->stage == p->K - 1 ? p->hi : p->hi - 1;
    for (int l = p->lo; l < to; l++)
        mlp_layer_forward(p->net, l, l == p->lo ? input_of(p, w) : w->act[l], w->act[l + 1], p->mb);
}

static int backward(pipeline *p, int i, int norm, double *loss, int *correct)
{
    mlp_work *w = &p->work[i];
    const int *size = p->net->size;
    int rc = COLL_OK;
    if (p->stage < p->K - 1)
        rc = timed_recv(p, w->grad[p->hi], (size_t)p->mb * size[p->hi], p->stage + 1,
                        (uint32_t)i);
    double t0 = ex_now_s();
    if (p->recompute)
        recompute(p, w);
    if (p->stage == p->K - 1)
        *loss += mlp_loss_grad(w->act[p->hi], p->y + i * p->mb, p->mb, size[p->hi], norm,
                               w->grad[p->hi], correct);
    for (int l = p->hi - 1; l >= p->lo; l--)
        mlp_layer_backward(p->net, l, l == p->lo ? input_of(p, w) : w->act[l], w->grad[l + 1],
                           l > 0 ? w->grad[l] : NULL, p->mb);
    note(p, 'B', i, t0, ex_now_s());
    p->stashed--;
    if (rc == COLL_OK && p->stage > 0)
        rc = post_send(p, w->grad[p->lo], (size_t)p->mb * size[p->lo], p->stage - 1, (uint32_t)i);
    return rc;
}

/* GPipe: every forward, then every backward. 1F1B: K-1-s warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards. */
static int schedule(const pipeline *p, char *kind, int *mb)
{
    int M = p->micro, n = 0, f = 0, b = 0;
    int warm = p->onef1b ? p->K - 1 - p->stage : M;
    warm = warm < M ? warm : M;
    while (f < warm)
        kind[n] = 'F', mb[n++] = f++;
    while (f < M) {
        kind[n] = 'F', mb[n++] = f++;
        if (p->onef1b)
            kind[n] = 'B', mb[n++] = b++;
    }
    while (b < M)
        kind[n] = 'B', mb[n++] = b++;
    return n;
}

int pipe_step(pipeline *p, const size_t *idx, int norm, double *loss, int *correct, char *order,
              size_t orderlen)
{
    char *kind = malloc((size_t)p->micro * 2);
    int *mb = malloc(sizeof(int) * (size_t)p->micro * 2), n = schedule(p, kind, mb);
    int rc = COLL_OK;
    memset(p->net->grads, 0, sizeof(float) * p->net->nparams);
    p->nsends = 0;
    for (int k = 0; rc == COLL_OK && k < n; k++)
        rc = kind[k] == 'F' ? forward(p, mb[k], idx) : backward(p, mb[k], norm, loss, correct);
    for (int k = 0; k < p->nsends; k++) {
        double t0 = ex_now_s();
        int r = coll_wait(p->sends[k]);
        p->idle += ex_now_s() - t0;
        rc = rc != COLL_OK ? rc : r;
    }
    size_t at = 0;
    for (int k = 0; order && k < n && at + 16 < orderlen; k++)
        at += (size_t)snprintf(order + at, orderlen - at, "%s%c%d", k ? " " : "", kind[k], mb[k]);
    free(kind);
    free(mb);
    return rc;
}

double pipe_evaluate(pipeline *p, const dataset *test)
{
    mlp_work *w = &p->work[0];
    const int *size = p->net->size;
    int C = size[p->net->layers];
    long correct = 0;
    size_t used = test->n / (size_t)p->mb * (size_t)p->mb;
    for (size_t at = 0; at < used; at += (size_t)p->mb) {
        float *in = input_of(p, w);
        if (p->stage == 0)
            memcpy(in, test->x + at * test->dim, sizeof(float) * (size_t)p->mb * test->dim);
        else if (coll_recv(p->c, in, (size_t)p->mb * size[p->lo], COLL_F32, p->stage - 1, 0))
            return -1;
        forward_layers(p, w, p->mb, 0);
        if (p->stage < p->K - 1) {
            if (coll_send(p->c, w->act[p->hi], (size_t)p->mb * size[p->hi], COLL_F32,
                          p->stage + 1, 0))
                return -1;
            continue;
        }
        for (int i = 0; i < p->mb; i++) {
            const float *z = w->act[p->hi] + (size_t)i * C;
            int best = 0;
            for (int j = 1; j < C; j++)
                best = z[j] > z[best] ? j : best;
            correct += best == test->y[at + (size_t)i];
        }
    }
    double acc = (double)correct / (double)used;
    return coll_broadcast(p->c, &acc, 1, COLL_F64, p->K - 1) == COLL_OK ? acc : -1;
}

size_t pipe_stash_bytes(const pipeline *p)
{
    size_t floats = 0;
    for (int l = p->lo; l <= p->hi; l++)
        if (!p->recompute || l == p->lo || (l == p->hi && p->stage < p->K - 1))
            floats += (size_t)p->net->size[l];
    return floats * (size_t)p->mb * sizeof(float);
}
