/* fsdp_train: fully sharded data parallel (ZeRO-3) training of the MLP on Fashion-MNIST.
 * Each rank keeps 1/N of every layer's parameters, gradients and momentum. Before a
 * layer's forward and again before its backward the ranks all-gather its parameters into
 * a buffer that is reused for the next layer; after its backward they reduce-scatter
 * (avg) its gradient, so each rank gets its shard's share and updates only that shard.
 * With --prefetch 1 (the default) the next layer's all-gather is started with the
 * non-blocking API before the current layer computes, so it overlaps compute.
 *   fsdp_train [--np N] [--epochs E] [--batch B] [--lr LR] [--lr-schedule cosine|const]
 *              [--prefetch 0|1] [--steps S] [--check-serial K] [--data DIR] [--seed S]
 *              [--json FILE] [--trace FILE]
 * A layer of c parameters is cut into N shards of ceil(c/N) (the last one zero-padded),
 * so the wire carries 3 P'(N-1)/N bytes a step with P' the padded size (two all-gathers
 * and one reduce-scatter of every layer). --check-serial K compares the shards with one
 * process training on the whole global batch after K steps (relative L2 within 1e-5).
 * Prints per epoch loss, accuracy, samples/s, speedup over one process, compute and
 * communication per rank, wire bytes next to the formula and the memory each rank holds;
 * the second step is drawn as a timeline (G gather wait, F, B, R reduce-scatter).
 * Final line: "test_accuracy A". */
#include "common/batch.h"
#include "common/driver.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes[] = { 784, 512, 256, 128, 10 };
enum { L = 4, EVAL_BATCH = 500 };

typedef struct {
    size_t count, shard; /* the layer's parameters, and this rank's slice of them */
    size_t offset;       /* where the layer starts in the one-process flat layout */
    float *p, *v, *g;    /* shard parameters, momentum, gradient */
} layer_shard;

typedef struct {
    ex_run r; /* first: the driver's callbacks get this trainer */
    coll_comm *c;
    const ex_opts *o;
    const dataset *train, *test;
    int n, me;
    layer_shard sh[L];
    float *full[2]; /* gathered parameters of the layer running (and the next one) */
    float *gfull;   /* one layer's whole gradient, before the reduce-scatter */
    mlp view;       /* W/b/dW/db point into full[] and gfull for the layer running */
    mlp_work work, eval, *cur; /* cur: training's or evaluation's activations */
    float *bx;
    uint8_t *by;
    size_t padded;
} trainer;

static size_t max_shard(const trainer *t)
{
    size_t m = 0;
    for (int l = 0; l < L; l++)
        m = t->sh[l].shard > m ? t->sh[l].shard : m;
    return m;
}

/* Every rank builds the same full model from the seed, keeps its shards, drops the rest. */
static int shard_model(trainer *t)
{
    mlp full;
    if (mlp_init(&full, sizes, L, t->o->seed) != 0)
        return -1;
    t->view = full; /* sizes and layer count; the pointers are replaced per layer */
    t->view.params = t->view.grads = t->view.velocity = NULL;
    for (int l = 0; l < L; l++) {
        layer_shard *s = &t->sh[l];
        s->count = (size_t)sizes[l] * sizes[l + 1] + sizes[l + 1];
        s->shard = (s->count + t->n - 1) / t->n;
        s->offset = (size_t)(full.W[l] - full.params);
        s->p = calloc(s->shard, sizeof(float));
        s->v = calloc(s->shard, sizeof(float));
        s->g = calloc(s->shard, sizeof(float));
        if (!s->p || !s->v || !s->g)
            return -1;
        size_t from = (size_t)t->me * s->shard;
        if (from < s->count)
            memcpy(s->p, full.W[l] + from,
                   sizeof(float) * (s->count - from < s->shard ? s->count - from : s->shard));
        t->padded += s->shard * (size_t)t->n;
    }
    mlp_free(&full);
    size_t whole = max_shard(t) * (size_t)t->n, shards = t->padded / (size_t)t->n;
    for (int k = 0; k < 1 + t->o->prefetch; k++)
        if (!(t->full[k] = calloc(whole, sizeof(float))))
            return -1;
    if (!(t->gfull = calloc(whole, sizeof(float))))
        return -1;
    t->r.mem = (ex_memory){.params = 4.0 * shards,
                           .grads = 4.0 * shards,
                           .optimizer = 4.0 * shards,
                           .gathered = 4.0 * whole * (2 + t->o->prefetch)};
    return 0;
}

static void point_view(trainer *t, int l, float *params)
{
    size_t w = (size_t)sizes[l] * sizes[l + 1];
    t->view.W[l] = params, t->view.b[l] = params + w;
    t->view.dW[l] = t->gfull, t->view.db[l] = t->gfull + w;
}

static int gather_start(trainer *t, int l, float *into, coll_req **req)
{
    return coll_iallgather(t->c, t->sh[l].p, into, t->sh[l].shard, COLL_F32, req);
}

/* Waits for layer l's parameters; counts the wait as communication (G on the timeline). */
static int gather_wait(trainer *t, int l, coll_req *req)
{
    double t0 = ex_now_s();
    int rc = coll_wait(req);
    double t1 = ex_now_s();
    t->r.comm += t1 - t0;
    tl_add(&t->r.tl, 'G', l, t0, t1);
    return rc;
}

/* Visits layers in `order` (forward 0..L-1 or backward L-1..0): gathers each one's
 * parameters (the next one's already in flight with prefetch) and runs fn on it. */
static int each_layer(trainer *t, int backward, int (*fn)(trainer *, int, int), int n)
{
    coll_req *req = NULL;
    int first = backward ? L - 1 : 0, step = backward ? -1 : 1, buf = 0;
    int rc = gather_start(t, first, t->full[0], &req);
    for (int l = first; rc == COLL_OK && l >= 0 && l < L; l += step) {
        rc = gather_wait(t, l, req);
        req = NULL;
        point_view(t, l, t->full[buf]);
        int next = l + step, other = t->o->prefetch ? !buf : buf;
        if (rc == COLL_OK && t->o->prefetch && next >= 0 && next < L)
            rc = gather_start(t, next, t->full[other], &req);
        if (rc == COLL_OK)
            rc = fn(t, l, n);
        if (rc == COLL_OK && !t->o->prefetch && next >= 0 && next < L)
            rc = gather_start(t, next, t->full[other], &req);
        buf = other;
    }
    if (req)
        coll_wait(req);
    return rc;
}

static int forward_layer(trainer *t, int l, int n)
{
    double t0 = ex_now_s();
    mlp_layer_forward(&t->view, l, t->cur->act[l], t->cur->act[l + 1], n);
    double t1 = ex_now_s();
    t->r.compute += t1 - t0;
    tl_add(&t->r.tl, 'F', l, t0, t1);
    return COLL_OK;
}

/* Layer l's backward into gfull, then the reduce-scatter of its gradient into the shard. */
static int backward_layer(trainer *t, int l, int n)
{
    layer_shard *s = &t->sh[l];
    double t0 = ex_now_s();
    memset(t->gfull, 0, sizeof(float) * s->shard * (size_t)t->n);
    mlp_layer_backward(&t->view, l, t->work.act[l], t->work.grad[l + 1],
                       l > 0 ? t->work.grad[l] : NULL, n);
    double t1 = ex_now_s();
    int rc = coll_reduce_scatter(t->c, t->gfull, s->g, s->shard, COLL_F32, COLL_AVG);
    double t2 = ex_now_s();
    t->r.compute += t1 - t0, t->r.comm += t2 - t1;
    tl_add(&t->r.tl, 'B', l, t0, t1);
    tl_add(&t->r.tl, 'R', l, t1, t2);
    return rc;
}

static int step(ex_run *r, size_t k, double *loss, int *correct)
{
    trainer *t = (trainer *)r;
    int B = t->o->batch, b = B / t->n;
    ex_gather(t->train, r->perm + k * (size_t)B + (size_t)t->me * b, b, t->bx, t->by);
    t->work.act[0] = t->bx;
    t->cur = &t->work;
    int rc = each_layer(t, 0, forward_layer, b);
    if (rc != COLL_OK)
        return rc;
    double t0 = ex_now_s();
    *loss += mlp_loss_grad(t->work.act[L], t->by, b, sizes[L], b, t->work.grad[L], correct);
    r->compute += ex_now_s() - t0;
    rc = each_layer(t, 1, backward_layer, b);
    for (int l = 0; rc == COLL_OK && l < L; l++)
        mlp_sgd_span(t->sh[l].p, t->sh[l].v, t->sh[l].g, t->sh[l].shard, r->lr, t->o->momentum);
    return rc;
}

/* Each rank scores its own slice of the test set, a layer-gathered forward at a time. */
static double evaluate(ex_run *r)
{
    trainer *t = (trainer *)r;
    size_t per = t->test->n / (size_t)t->n, from = per * (size_t)t->me;
    double right[2] = { 0, 0 }, sum[2];
    for (size_t at = 0; at < per; at += EVAL_BATCH) {
        int n = (int)(per - at < EVAL_BATCH ? per - at : EVAL_BATCH);
        t->eval.act[0] = t->test->x + (from + at) * t->test->dim;
        t->cur = &t->eval;
        if (each_layer(t, 0, forward_layer, n) != COLL_OK)
            return -1;
        for (int i = 0; i < n; i++) {
            const float *z = t->eval.act[L] + (size_t)i * sizes[L];
            int best = 0;
            for (int j = 1; j < sizes[L]; j++)
                best = z[j] > z[best] ? j : best;
            right[0] += best == t->test->y[from + at + (size_t)i];
        }
        right[1] += n;
    }
    if (coll_allreduce(t->c, right, sum, 2, COLL_F64, COLL_SUM) != COLL_OK)
        return -1;
    return sum[0] / sum[1];
}

/* Relative L2 distance of the shards from one process after `steps` whole batches. */
static double serial_distance(ex_run *r, size_t steps)
{
    trainer *t = (trainer *)r;
    mlp serial;
    mlp_work w;
    double d[2] = { 0, 0 }, all[2];
    if (mlp_init(&serial, sizes, L, t->o->seed) || mlp_work_init(&w, &serial, t->o->batch))
        return 1;
    ex_train_serial(&serial, &w, t->train, r->perm, t->o->batch, steps, t->o->lr, t->o->momentum);
    for (int l = 0; l < L; l++) {
        const layer_shard *s = &t->sh[l];
        for (size_t i = 0; i < s->shard && (size_t)t->me * s->shard + i < s->count; i++) {
            double ref = serial.params[s->offset + (size_t)t->me * s->shard + i];
            d[0] += (s->p[i] - ref) * (s->p[i] - ref);
            d[1] += ref * ref;
        }
    }
    mlp_free(&serial);
    mlp_work_free(&w);
    coll_allreduce(t->c, d, all, 2, COLL_F64, COLL_SUM);
    return sqrt(all[0] / all[1]);
}

static void release(trainer *t)
{
    for (int l = 0; l < L; l++)
        free(t->sh[l].p), free(t->sh[l].v), free(t->sh[l].g);
    free(t->full[0]), free(t->full[1]), free(t->gfull);
    mlp_work_free(&t->work), mlp_work_free(&t->eval);
    free(t->bx), free(t->by), free(t->r.perm);
    tl_free(&t->r.tl);
}

static int train(coll_comm *c, const ex_opts *o)
{
    dataset tr, te;
    int n = coll_size(c);
    if (o->batch % n) {
        fprintf(stderr, "--batch %d must be a multiple of %d ranks\n", o->batch, n);
        return 2;
    }
    if (ex_load_data(o, "fsdp_train", &tr, &te) != 0)
        return 2;
    trainer t = { .c = c, .o = o, .train = &tr, .test = &te, .n = n, .me = coll_rank(c) };
    int rc = shard_model(&t) || mlp_work_init(&t.work, &t.view, o->batch / n) ||
             mlp_work_init(&t.eval, &t.view, EVAL_BATCH) || tl_init(&t.r.tl, 5 * L);
    t.bx = malloc(sizeof(float) * (size_t)o->batch * 784);
    t.by = malloc((size_t)o->batch);
    t.r.perm = malloc(sizeof(size_t) * tr.n);
    if (rc || !t.bx || !t.by || !t.r.perm) {
        fprintf(stderr, "fsdp_train: out of memory\n");
        rc = 2;
    }
    t.r.c = c, t.r.o = o, t.r.train = &tr, t.r.test = &te, t.r.sizes = sizes, t.r.layers = L;
    t.r.name = "fsdp", t.r.split_batch = 1;
    t.r.formula = 3.0 * (double)t.padded * 4 * (n - 1) / n, t.r.formula_text = "3P'(N-1)/N";
    t.r.mem.activations = (double)mlp_work_bytes(&t.view, o->batch / n);
    t.r.step = step, t.r.distance = serial_distance, t.r.evaluate = evaluate;
    if (!rc && t.me == 0)
        printf("# fsdp_train: %d ranks, global batch %d (%d per rank), %zu padded parameters in "
               "shards of 1/%d, prefetch %s\n",
               n, o->batch, o->batch / n, t.padded, n, o->prefetch ? "on" : "off");
    rc = rc ? rc : ex_run_train(&t.r);
    release(&t);
    mnist_free(&tr), mnist_free(&te);
    return rc;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "fsdp_train [--np N] [--epochs E] [--batch B (multiple of N)] [--lr LR] "
                   "[--lr-schedule cosine|const] [--prefetch 0|1] [--steps S] "
                   "[--check-serial K] [--data DIR] [--seed S] [--json FILE] [--trace FILE]",
                   NULL, train);
}
