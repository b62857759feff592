/* pp_train: pipeline-parallel training of the MLP on Fashion-MNIST: the layers are split
 * into K stages (one rank each); each global batch is cut into M micro-batches whose
 * activations flow forward and whose gradients flow back with send/recv.
 *   pp_train [--np K] [--schedule gpipe|1f1b] [--microbatches M] [--epochs E]
 *            [--batch B] [--lr LR] [--steps S] [--check-serial K] [--data DIR] [--seed S]
 * gpipe: all forwards, then all backwards. 1f1b: stage s runs K-1-s warm-up forwards,
 * then one forward and one backward in turn, then the remaining backwards, so it never
 * holds more than K-s micro-batches of activations. Backwards run in micro-batch order
 * 0..M-1 under both schedules, so each stage adds the same numbers in the same order as
 * one process on the whole batch: --check-serial K compares every stage's weights with
 * such a run after K steps, bit for bit (exit 3 if they differ). Prints per epoch: loss,
 * accuracy, samples/s, per-stage compute and idle time, the measured bubble fraction next
 * to (K-1)/(M+K-1), the most activations stashed, and bytes sent per step next to the
 * formula. Final line: "test_accuracy A". */
#include "common/mlp.h"
#include "common/mnist.h"
#include "../perf/spawn.h"
#include "collective.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int np, epochs, batch, micro, steps, check_serial, onef1b;
    float lr, momentum;
    unsigned long long seed;
    const char *data;
} opts;

typedef struct {
    coll_comm *c;
    const opts *o;
    int stage, K, lo, hi, mb; /* this stage's layers [lo, hi), micro-batch size */
    mlp net, serial;
    mlp_work *work;   /* one per micro-batch in flight */
    mlp_work whole;   /* serial check and evaluation */
    coll_req **sends; /* outstanding sends, waited at the end of the step */
    int nsends, stashed, peak_stash;
    double compute, idle;
    const dataset *train, *test;
    size_t *perm;
    float *x;
    uint8_t *y;
} stage;

static const int sizes[] = { 784, 512, 256, 128, 10 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse(int argc, char **argv, opts *o)
{
    static struct option longs[] = {
        { "np", 1, 0, 'N' },     { "epochs", 1, 0, 'e' }, { "batch", 1, 0, 'b' },
        { "lr", 1, 0, 'l' },     { "steps", 1, 0, 's' },  { "data", 1, 0, 'd' },
        { "seed", 1, 0, 'S' },   { "microbatches", 1, 0, 'm' }, { "schedule", 1, 0, 'k' },
        { "check-serial", 1, 0, 'c' }, { 0, 0, 0, 0 } };
    *o = (opts){ 2, 10, 64, 4, 0, 0, 1, 0.05f, 0.9f, 1, NULL };
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'N': o->np = atoi(optarg); break;
        case 'e': o->epochs = atoi(optarg); break;
        case 'b': o->batch = atoi(optarg); break;
        case 'l': o->lr = (float)atof(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'd': o->data = optarg; break;
        case 'S': o->seed = strtoull(optarg, NULL, 10); break;
        case 'm': o->micro = atoi(optarg); break;
        case 'c': o->check_serial = atoi(optarg); break;
        case 'k':
            if (strcmp(optarg, "gpipe") && strcmp(optarg, "1f1b"))
                return -1;
            o->onef1b = strcmp(optarg, "1f1b") == 0;
            break;
        default: return -1;
        }
    }
    return o->np >= 1 && o->np <= 4 && o->micro >= 1 && o->batch % o->micro == 0 ? 0 : -1;
}

static void shuffle(size_t *perm, size_t n, unsigned long long seed)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (size_t)((seed >> 33) % (i + 1));
        size_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

static void gather(const dataset *d, const size_t *idx, int n, float *x, uint8_t *y)
{
    for (int i = 0; i < n; i++) {
        memcpy(x + (size_t)i * d->dim, d->x + idx[i] * d->dim, d->dim * sizeof(float));
        y[i] = d->y[idx[i]];
    }
}

/* Waiting on a peer counts as idle (the bubble); the kernels count as compute. */
static int timed_recv(stage *s, float *buf, size_t count, int peer, uint32_t tag)
{
    double t0 = now_s();
    int rc = coll_recv(s->c, buf, count, COLL_F32, peer, tag);
    s->idle += now_s() - t0;
    return rc;
}

static int post_send(stage *s, const float *buf, size_t count, int peer, uint32_t tag)
{
    return coll_isend(s->c, buf, count, COLL_F32, peer, tag, &s->sends[s->nsends++]);
}

/* This stage's input for micro-batch i: the data on stage 0, else the previous stage's
 * activations, received into act[lo]. */
static float *input_of(stage *s, mlp_work *w)
{
    return s->lo == 0 ? w->grad[0] : w->act[s->lo];
}

static int forward(stage *s, int i, const size_t *idx)
{
    mlp_work *w = &s->work[i];
    const size_t *mine = idx + (size_t)i * s->mb;
    int rc = COLL_OK;
    if (s->stage == 0)
        gather(s->train, mine, s->mb, input_of(s, w), s->y + i * s->mb);
    else
        rc = timed_recv(s, input_of(s, w), (size_t)s->mb * sizes[s->lo], s->stage - 1,
                        (uint32_t)i);
    for (int k = 0; k < s->mb; k++) /* labels travel by index: every stage has the data */
        s->y[i * s->mb + k] = s->train->y[mine[k]];
    double t0 = now_s();
    w->act[0] = w->grad[0];
    for (int l = s->lo; l < s->hi; l++)
        mlp_layer_forward(&s->net, l, l == s->lo ? input_of(s, w) : w->act[l], w->act[l + 1],
                          s->mb);
    s->compute += now_s() - t0;
    s->stashed++;
    s->peak_stash = s->stashed > s->peak_stash ? s->stashed : s->peak_stash;
    if (rc == COLL_OK && s->stage < s->K - 1)
        rc = post_send(s, w->act[s->hi], (size_t)s->mb * sizes[s->hi], s->stage + 1, (uint32_t)i);
    return rc;
}

static int backward(stage *s, int i, double *loss, int *correct)
{
    mlp_work *w = &s->work[i];
    int rc = COLL_OK;
    if (s->stage < s->K - 1)
        rc = timed_recv(s, w->grad[s->hi], (size_t)s->mb * sizes[s->hi], s->stage + 1,
                        (uint32_t)i);
    double t0 = now_s();
    if (s->stage == s->K - 1) /* mean over the whole batch, as one process would take it */
        *loss += mlp_loss_grad(w->act[s->hi], s->y + i * s->mb, s->mb, sizes[s->hi],
                               s->o->batch, w->grad[s->hi], correct);
    for (int l = s->hi - 1; l >= s->lo; l--)
        mlp_layer_backward(&s->net, l, l == s->lo ? input_of(s, w) : w->act[l], w->grad[l + 1],
                           l > 0 ? w->grad[l] : NULL, s->mb);
    s->compute += now_s() - t0;
    s->stashed--;
    if (rc == COLL_OK && s->stage > 0)
        rc = post_send(s, w->grad[s->lo], (size_t)s->mb * sizes[s->lo], s->stage - 1,
                       (uint32_t)i);
    return rc;
}

/* The order of one step: 'F' or 'B' and the micro-batch, as the schedule dictates. */
static int schedule(const stage *s, char *kind, int *mb)
{
    int M = s->o->micro, n = 0, f = 0, b = 0;
    int warm = s->o->onef1b ? s->K - 1 - s->stage : M;
    warm = warm < M ? warm : M;
    while (f < warm)
        kind[n] = 'F', mb[n++] = f++;
    while (f < M) {
        kind[n] = 'F', mb[n++] = f++;
        if (s->o->onef1b)
            kind[n] = 'B', mb[n++] = b++;
    }
    while (b < M)
        kind[n] = 'B', mb[n++] = b++;
    return n;
}

static int run_step(stage *s, size_t step, double *loss, int *correct, int show)
{
    const size_t *idx = s->perm + step * (size_t)s->o->batch;
    char kind[256];
    int mb[256], n = schedule(s, kind, mb), rc = COLL_OK;
    memset(s->net.grads, 0, sizeof(float) * s->net.nparams);
    s->nsends = 0;
    for (int k = 0; rc == COLL_OK && k < n; k++)
        rc = kind[k] == 'F' ? forward(s, mb[k], idx) : backward(s, mb[k], loss, correct);
    for (int k = 0; k < s->nsends; k++) {
        double t0 = now_s();
        int r = coll_wait(s->sends[k]);
        s->idle += now_s() - t0;
        rc = rc != COLL_OK ? rc : r;
    }
    if (show) {
        char line[2048];
        int at = snprintf(line, sizeof(line), "order stage %d:", s->stage);
        for (int k = 0; k < n && at < (int)sizeof(line) - 16; k++)
            at += snprintf(line + at, sizeof(line) - (size_t)at, " %c%d", kind[k], mb[k]);
        printf("%s\n", line);
    }
    if (rc == COLL_OK)
        mlp_sgd(&s->net, s->o->lr, s->o->momentum);
    return rc;
}

/* Every stage trains a one-process copy on the whole batch and compares its own layers. */
static int serial_matches(stage *s, size_t steps)
{
    int ignore = 0, B = s->o->batch;
    float *x = malloc(sizeof(float) * (size_t)B * 784);
    uint8_t *y = malloc((size_t)B);
    for (size_t k = 0; k < steps; k++) {
        gather(s->train, s->perm + k * (size_t)B, B, x, y);
        mlp_train_batch(&s->serial, &s->whole, x, y, B, B, &ignore);
        mlp_sgd(&s->serial, s->o->lr, s->o->momentum);
    }
    free(x);
    free(y);
    size_t from = (size_t)(s->net.W[s->lo] - s->net.params);
    size_t to = s->hi < s->net.layers ? (size_t)(s->net.W[s->hi] - s->net.params) : s->net.nparams;
    int same = memcmp(s->net.params + from, s->serial.params + from, (to - from) * 4) == 0, all;
    coll_allreduce(s->c, &same, &all, 1, COLL_I32, COLL_MIN);
    return all;
}

/* Forward only, through the pipeline; the last stage counts, then tells everyone. */
static double evaluate(stage *s)
{
    const dataset *d = s->test;
    mlp_work *w = &s->work[0];
    long correct = 0;
    for (size_t at = 0; at + (size_t)s->mb <= d->n; at += (size_t)s->mb) {
        float *in = input_of(s, w);
        if (s->stage == 0)
            memcpy(in, d->x + at * d->dim, sizeof(float) * (size_t)s->mb * d->dim);
        else if (coll_recv(s->c, in, (size_t)s->mb * sizes[s->lo], COLL_F32, s->stage - 1, 0))
            return -1;
        for (int l = s->lo; l < s->hi; l++)
            mlp_layer_forward(&s->net, l, l == s->lo ? in : w->act[l], w->act[l + 1], s->mb);
        if (s->stage < s->K - 1) {
            if (coll_send(s->c, w->act[s->hi], (size_t)s->mb * sizes[s->hi], COLL_F32,
                          s->stage + 1, 0))
                return -1;
            continue;
        }
        for (int i = 0; i < s->mb; i++) {
            const float *z = w->act[s->hi] + (size_t)i * 10;
            int best = 0;
            for (int j = 1; j < 10; j++)
                best = z[j] > z[best] ? j : best;
            correct += best == d->y[at + (size_t)i];
        }
    }
    double acc = (double)correct / (double)(d->n / (size_t)s->mb * (size_t)s->mb);
    coll_broadcast(s->c, &acc, 1, COLL_F64, s->K - 1);
    return acc;
}

static int run_epoch(stage *s, int epoch, double *acc)
{
    const opts *o = s->o;
    size_t steps = s->train->n / (size_t)o->batch;
    if (o->steps > 0 && (size_t)o->steps < steps)
        steps = (size_t)o->steps;
    shuffle(s->perm, s->train->n, o->seed * 1000003ULL + (unsigned long long)epoch);
    s->compute = s->idle = 0;
    coll_stats st0, st1;
    coll_get_stats(s->c, &st0);
    double loss = 0, t0 = now_s();
    int correct = 0, rc = COLL_OK;
    for (size_t k = 0; rc == COLL_OK && k < steps; k++) {
        rc = run_step(s, k, &loss, &correct, epoch == 0 && k == 0);
        fflush(stdout);
        if (rc == COLL_OK && epoch == 0 && (int)k + 1 == o->check_serial) {
            int same = serial_matches(s, k + 1);
            if (s->stage == 0)
                printf("check: after %zu steps, every stage's weights %s a one-process run\n",
                       k + 1, same ? "are bit-identical to" : "DIFFER from");
            if (!same)
                return 3;
        }
    }
    if (rc != COLL_OK) {
        fprintf(stderr, "stage %d: %s\n", s->stage, coll_last_error(s->c));
        return 1;
    }
    double wall = now_s() - t0;
    coll_get_stats(s->c, &st1);
    *acc = evaluate(s);
    int K = s->K, M = o->micro;
    double mine[4] = { s->compute, s->idle, (double)(st1.wire_tx - st0.wire_tx) / (double)steps,
                       (double)s->peak_stash };
    double *all = malloc(sizeof(double) * 4 * (size_t)K), tot[2] = { loss, correct }, sum[2];
    coll_allgather(s->c, mine, all, 4, COLL_F64);
    coll_allreduce(s->c, tot, sum, 2, COLL_F64, COLL_SUM);
    if (s->stage == 0) {
        double samples = (double)steps * o->batch;
        printf("epoch %d: loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s | schedule %s, "
               "K %d, M %d, bubble formula (K-1)/(M+K-1) = %.3f\n",
               epoch, sum[0] / samples, sum[1] / samples, *acc, samples / wall,
               o->onef1b ? "1f1b" : "gpipe", K, M, (double)(K - 1) / (M + K - 1));
        for (int k = 0; k < K; k++) {
            double *v = all + 4 * k;
            printf("  stage %d: compute %.2fs idle %.2fs bubble %.3f | peak stash %.0f "
                   "micro-batches | sent %.0f B/step",
                   k, v[0], v[1], v[1] / (v[0] + v[1]), v[3], v[2]);
            /* per step: (B/M) x width x 4 bytes x M micro-batches, each way */
            if (k < K - 1)
                printf(" (activations B x %d x 4 = %d", sizes[4 * (k + 1) / K],
                       o->batch * sizes[4 * (k + 1) / K] * 4);
            if (k > 0)
                printf("%sgradients B x %d x 4 = %d", k < K - 1 ? " + " : " (",
                       sizes[4 * k / K], o->batch * sizes[4 * k / K] * 4);
            printf(K > 1 ? " + headers)\n" : "\n");
        }
    }
    free(all);
    return 0;
}

static int train(coll_comm *c, const opts *o)
{
    int K = coll_size(c), me = coll_rank(c);
    char err[1200];
    dataset tr, te;
    if (mnist_load(o->data, 1, &tr, err, sizeof(err)) ||
        mnist_load(o->data, 0, &te, err, sizeof(err))) {
        fprintf(stderr, "pp_train: %s\n", err);
        return 2;
    }
    stage s = { .c = c, .o = o, .stage = me, .K = K, .lo = 4 * me / K, .hi = 4 * (me + 1) / K,
                .mb = o->batch / o->micro, .train = &tr, .test = &te };
    int rc = mlp_init(&s.net, sizes, 4, o->seed) || mlp_init(&s.serial, sizes, 4, o->seed) ||
             mlp_work_init(&s.whole, &s.net, o->batch);
    s.work = calloc((size_t)o->micro, sizeof(mlp_work));
    for (int i = 0; !rc && i < o->micro; i++)
        rc = mlp_work_init(&s.work[i], &s.net, s.mb);
    s.sends = calloc((size_t)o->micro * 2, sizeof(coll_req *));
    s.perm = malloc(sizeof(size_t) * tr.n);
    s.y = malloc((size_t)o->batch);
    if (me == 0)
        printf("# pp_train: %d stages, layers per stage %s, batch %d in %d micro-batches of %d\n",
               K, K == 1 ? "4" : K == 2 ? "2+2" : K == 3 ? "1+1+2" : "1+1+1+1", o->batch,
               o->micro, s.mb);
    double acc = 0;
    for (int e = 0; !rc && e < o->epochs; e++)
        rc = run_epoch(&s, e, &acc);
    if (me == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    for (int i = 0; i < o->micro; i++)
        mlp_work_free(&s.work[i]);
    mlp_work_free(&s.whole);
    mlp_free(&s.net), mlp_free(&s.serial);
    free(s.work), free(s.sends), free(s.perm), free(s.y);
    mnist_free(&tr), mnist_free(&te);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: pp_train [--np K (1-4)] [--schedule gpipe|1f1b] "
                        "[--microbatches M (divides --batch)] [--epochs E] [--batch B] [--lr LR] "
                        "[--steps S] [--check-serial K] [--data DIR] [--seed S]\n");
        return 2;
    }
    int rank, size, status = 0;
    char url[600];
    int who = cl_spawn(o.np, &rank, &size, url, sizeof(url), &status);
    if (who != 0)
        return who < 0 ? 2 : status;
    coll_comm *c;
    if (coll_init(&c, url, rank, size, NULL) != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init: %s\n", rank, coll_last_error(NULL));
        return 2;
    }
    int rc = train(c, &o);
    coll_destroy(c);
    return rc;
}
