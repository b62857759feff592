/* tp_train: tensor-parallel (Megatron-style) training of the MLP on Fashion-MNIST.
 * The four layers make two pairs. The first layer of a pair is column-parallel: each of
 * the N ranks holds 1/N of its output columns (and their biases) and computes its slice
 * of the output from the whole input, with no communication. The second is row-parallel:
 * each rank holds the matching 1/N of its input rows, computes a partial product from its
 * slice, and an all-reduce (sum) adds the partials before the bias (held by every rank)
 * and the ReLU. Backward mirrors it: the gradient at a pair's output is whole on every
 * rank, each rank's input gradient of the column-parallel layer is a partial sum, and an
 * all-reduce adds those (not needed for the first pair, whose input is the data). Every
 * rank works on the whole global batch.
 *   tp_train [--np N (divides 128)] [--epochs E] [--batch B] [--lr LR]
 *            [--lr-schedule cosine|const] [--steps S] [--check-serial K] [--data DIR]
 *            [--seed S] [--json FILE] [--trace FILE]
 * Wire bytes per step: all-reduces of B x 256 and B x 10 values forward and B x 256
 * backward, each 2(N-1)/N x 4 bytes a value. --check-serial K compares the slices with one
 * process after K steps (relative L2 within 1e-5: partial sums add in another order).
 * Final line: "test_accuracy A". */
#include "collective.h"
#include "common/batch.h"
#include "common/driver.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes[] = {784, 512, 256, 128, 10};
enum { L = 4, EVAL_BATCH = 500 };

typedef struct {
    int K, N;     /* this rank's slice: K x N weights */
    int col;      /* column-parallel (slice of outputs) or row-parallel (slice of inputs) */
    size_t off;   /* where the slice starts in the rank's flat parameters */
    float *W, *b; /* into params; b is the output slice (col) or the whole bias (row) */
    float *dW, *db;
} tp_layer;

typedef struct {
    ex_run r;        /* first: the driver's callbacks get this trainer */
    int n, me, rows; /* rows: the most samples the activation buffers hold */
    tp_layer ly[L];
    float *params, *grads, *velocity;
    size_t nparams;
    float *act[L + 1], *grad[L + 1]; /* act[0] is the input (not owned) */
    float *bx;
    uint8_t *by;
} trainer;

/* Lays out this rank's slices in one flat array (so one SGD call updates them all). */
static int layout(trainer *t)
{
    for (int l = 0; l < L; l++) {
        tp_layer *y = &t->ly[l];
        y->col = l % 2 == 0;
        y->K = y->col ? sizes[l] : sizes[l] / t->n;
        y->N = y->col ? sizes[l + 1] / t->n : sizes[l + 1];
        y->off = t->nparams;
        t->nparams += (size_t)y->K * y->N + y->N;
    }
    t->params = calloc(t->nparams, sizeof(float));
    t->grads = calloc(t->nparams, sizeof(float));
    t->velocity = calloc(t->nparams, sizeof(float));
    if (!t->params || !t->grads || !t->velocity)
        return -1;
    for (int l = 0; l < L; l++) {
        tp_layer *y = &t->ly[l];
        y->W = t->params + y->off, y->b = y->W + (size_t)y->K * y->N;
        y->dW = t->grads + y->off, y->db = y->dW + (size_t)y->K * y->N;
    }
    for (int l = 0; l <= L; l++) {
        size_t width = (size_t)(l == 0 ? sizes[0] : t->ly[l - 1].N);
        if ((l > 0 && !(t->act[l] = malloc(sizeof(float) * width * t->rows))) ||
            !(t->grad[l] = malloc(sizeof(float) * width * t->rows)))
            return -1;
    }
    return 0;
}

/* Copies (to = 1) or compares this rank's slice of layer l with the whole layer of m:
 * returns the squared distance, and the squared norm of m's slice in *norm. */
static double slice(trainer *t, const mlp *m, int l, int to, double *norm)
{
    const tp_layer *y = &t->ly[l];
    int full = sizes[l + 1];
    double d = 0;
    for (int k = 0; k <= y->K; k++) { /* row K is the bias */
        int bias = k == y->K;
        if (bias && !y->col && t->me != 0 && !to)
            break; /* a row-parallel bias is the same everywhere: count it once */
        const float *src = bias ? m->b[l] + (y->col ? t->me * y->N : 0)
                                : m->W[l] + (size_t)(y->col ? k : t->me * y->K + k) * full +
                                      (y->col ? t->me * y->N : 0);
        float *dst = bias ? y->b : y->W + (size_t)k * y->N;
        for (int j = 0; j < y->N; j++) {
            if (to)
                dst[j] = src[j];
            d += ((double)dst[j] - src[j]) * ((double)dst[j] - src[j]);
            *norm += (double)src[j] * src[j];
        }
    }
    return d;
}

static int init_from_seed(trainer *t)
{
    mlp whole;
    double norm = 0;
    if (mlp_init(&whole, sizes, L, t->r.o->seed) != 0)
        return -1;
    for (int l = 0; l < L; l++)
        slice(t, &whole, l, 1, &norm);
    mlp_free(&whole);
    return 0;
}

static int allreduce(trainer *t, float *buf, size_t count)
{
    double t0 = ex_now_s();
    int rc = coll_allreduce(t->r.c, buf, buf, count, COLL_F32, COLL_SUM);
    double t1 = ex_now_s();
    t->r.comm += t1 - t0;
    tl_add(&t->r.tl, 'A', -1, t0, t1);
    return rc;
}

/* Bias and ReLU after the partial sums of a row-parallel layer were added. */
static void bias_relu(float *z, const float *b, int n, int N, int relu)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < N; j++) {
            float v = z[(size_t)i * N + j] + b[j];
            z[(size_t)i * N + j] = relu && v < 0.0f ? 0.0f : v;
        }
}

static int forward(trainer *t, const float *x, int n)
{
    int rc = COLL_OK;
    t->act[0] = (float *)x;
    for (int l = 0; rc == COLL_OK && l < L; l++) {
        const tp_layer *y = &t->ly[l];
        double t0 = ex_now_s();
        mlp_dense_forward(y->W, y->col ? y->b : NULL, t->act[l], t->act[l + 1], n, y->K, y->N,
                          y->col);
        double t1 = ex_now_s();
        t->r.compute += t1 - t0;
        tl_add(&t->r.tl, 'F', l, t0, t1);
        if (y->col)
            continue;
        rc = allreduce(t, t->act[l + 1], (size_t)n * y->N);
        double t2 = ex_now_s();
        bias_relu(t->act[l + 1], y->b, n, y->N, l < L - 1);
        t->r.compute += ex_now_s() - t2;
    }
    return rc;
}

/* grad[L] holds the loss gradient (whole on every rank). */
static int backward(trainer *t, int n)
{
    int rc = COLL_OK;
    for (int l = L - 1; rc == COLL_OK && l >= 0; l--) {
        const tp_layer *y = &t->ly[l];
        double t0 = ex_now_s();
        mlp_dense_backward(y->W, y->dW, y->db, t->act[l], t->grad[l + 1], l > 0 ? t->grad[l] : NULL,
                           n, y->K, y->N);
        double t1 = ex_now_s();
        t->r.compute += t1 - t0;
        tl_add(&t->r.tl, 'B', l, t0, t1);
        if (y->col && l > 0) /* partial input gradients of a column-parallel layer */
            rc = allreduce(t, t->grad[l], (size_t)n * y->K);
    }
    return rc;
}

static int step(ex_run *r, size_t k, double *loss, int *correct)
{
    trainer *t = (trainer *)r;
    int B = r->o->batch;
    ex_gather(r->train, r->perm + k * (size_t)B, B, t->bx, t->by);
    memset(t->grads, 0, sizeof(float) * t->nparams);
    int rc = forward(t, t->bx, B);
    if (rc != COLL_OK)
        return rc;
    double t0 = ex_now_s();
    *loss += mlp_loss_grad(t->act[L], t->by, B, sizes[L], B, t->grad[L], correct);
    r->compute += ex_now_s() - t0;
    rc = backward(t, B);
    if (rc == COLL_OK)
        mlp_sgd_span(t->params, t->velocity, t->grads, t->nparams, r->lr, r->o->momentum);
    return rc;
}

static double evaluate(ex_run *r)
{
    trainer *t = (trainer *)r;
    size_t right = 0, n = r->test->n;
    for (size_t at = 0; at < n; at += (size_t)t->rows) {
        int b = (int)(n - at < (size_t)t->rows ? n - at : (size_t)t->rows);
        if (forward(t, r->test->x + at * r->test->dim, b) != COLL_OK)
            return -1;
        for (int i = 0; i < b; i++) {
            const float *z = t->act[L] + (size_t)i * sizes[L];
            int best = 0;
            for (int j = 1; j < sizes[L]; j++)
                best = z[j] > z[best] ? j : best;
            right += best == r->test->y[at + (size_t)i];
        }
    }
    return (double)right / (double)n;
}

static double serial_distance(ex_run *r, size_t steps)
{
    trainer *t = (trainer *)r;
    mlp serial;
    mlp_work w;
    double d[2] = {0, 0}, all[2];
    if (mlp_init(&serial, sizes, L, r->o->seed) || mlp_work_init(&w, &serial, r->o->batch))
        return 1;
    ex_train_serial(&serial, &w, r->train, r->perm, r->o->batch, steps, r->o->lr, r->o->momentum);
    for (int l = 0; l < L; l++)
        d[0] += slice(t, &serial, l, 0, &d[1]);
    mlp_free(&serial);
    mlp_work_free(&w);
    coll_allreduce(r->c, d, all, 2, COLL_F64, COLL_SUM);
    return sqrt(all[0] / all[1]);
}

static void release(trainer *t)
{
    free(t->params), free(t->grads), free(t->velocity);
    for (int l = 0; l <= L; l++) {
        if (l > 0)
            free(t->act[l]);
        free(t->grad[l]);
    }
    free(t->bx), free(t->by), free(t->r.perm);
    tl_free(&t->r.tl);
}

static int train(coll_comm *c, const ex_opts *o)
{
    dataset tr, te;
    int n = coll_size(c);
    if (sizes[1] % n || sizes[3] % n) {
        fprintf(stderr, "tp_train: %d ranks do not divide the layer widths %d and %d\n", n,
                sizes[1], sizes[3]);
        return 2;
    }
    if (ex_load_data(o, "tp_train", &tr, &te) != 0)
        return 2;
    trainer t = {.n = n, .me = coll_rank(c), .rows = o->batch > EVAL_BATCH ? o->batch : EVAL_BATCH};
    t.r =
        (ex_run){.c = c,
                 .o = o,
                 .train = &tr,
                 .test = &te,
                 .sizes = sizes,
                 .layers = L,
                 .name = "tp",
                 .split_batch = 0,
                 .formula_text = "all-reduces of B x 256, B x 10, B x 256 (ring 2(N-1)/N, doubling "
                                 "log2 N; coll_allreduce_wire_bytes)",
                 .step = step,
                 .distance = serial_distance,
                 .evaluate = evaluate};
    t.r.formula = (double)(2 * coll_allreduce_wire_bytes(c, (size_t)o->batch * sizes[2], COLL_F32) +
                           coll_allreduce_wire_bytes(c, (size_t)o->batch * sizes[4], COLL_F32));
    int rc = layout(&t) || init_from_seed(&t) || tl_init(&t.r.tl, 3 * L);
    t.bx = malloc(sizeof(float) * (size_t)o->batch * sizes[0]);
    t.by = malloc((size_t)o->batch);
    t.r.perm = malloc(sizeof(size_t) * tr.n);
    if (rc || !t.bx || !t.by || !t.r.perm) {
        fprintf(stderr, "tp_train: out of memory\n");
        rc = 2;
    }
    double act = 0; /* activations and their gradients for one global batch */
    for (int l = 0; l <= L; l++)
        act += (l > 0 ? 2.0 : 1.0) * (l == 0 ? sizes[0] : t.ly[l - 1].N);
    t.r.mem = (ex_memory){.params = 4.0 * t.nparams,
                          .grads = 4.0 * t.nparams,
                          .optimizer = 4.0 * t.nparams,
                          .activations = act * 4 * o->batch};
    if (!rc && t.me == 0)
        printf("# tp_train: %d ranks, every rank on the whole batch of %d, %zu parameters per "
               "rank (layers 784x%d | %dx256 | 256x%d | %dx10)\n",
               n, o->batch, t.nparams, 512 / n, 512 / n, 128 / n, 128 / n);
    rc = rc ? rc : ex_run_train(&t.r);
    release(&t);
    mnist_free(&tr), mnist_free(&te);
    return rc;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "tp_train [--np N (divides 128)] [--epochs E] [--batch B] [--lr LR] "
                   "[--lr-schedule cosine|const] [--steps S] [--check-serial K] [--data DIR] "
                   "[--seed S] [--json FILE] [--trace FILE]",
                   NULL, train);
}
