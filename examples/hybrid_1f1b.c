/* hybrid_1f1b: K pipeline stages x D data-parallel replicas of the MLP on Fashion-MNIST.
 * World rank r is stage r % K of replica r / K. coll_split makes one pipeline communicator
 * per replica (1F1B inside it, or GPipe) and one stage-group communicator per stage; after
 * each pipeline flush every stage all-reduces (avg, codec selectable) the gradients of its
 * own layers within its group, then all replicas take the same step.
 *   hybrid_1f1b [--np N] [--stages K] [--schedule 1f1b|gpipe] [--microbatches M]
 *               [--epochs E] [--batch B] [--lr LR] [--codec none|fp16|bf16|int8]
 *               [--steps S] [--check-serial K] [--data DIR] [--seed S]
 * The global batch B is split across the D replicas. Replicas are checked bit-identical
 * every epoch; --check-serial K compares the weights after K steps with one process on
 * the whole batch (relative L2 within 1e-5 allowed: the summation order differs).
 * Final line: "test_accuracy A". */
#include "common/batch.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/pipeline.h"
#include "../perf/spawn.h"
#include "collective.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int np, stages, epochs, batch, micro, steps, check_serial, onef1b;
    float lr, momentum;
    unsigned long long seed;
    coll_codec codec;
    const char *data;
} opts;

static const int sizes[] = { 784, 512, 256, 128, 10 };

static int parse(int argc, char **argv, opts *o)
{
    static const char *codecs[] = { "none", "fp16", "bf16", "int8" };
    static struct option longs[] = {
        { "np", 1, 0, 'N' },   { "stages", 1, 0, 'K' }, { "epochs", 1, 0, 'e' },
        { "batch", 1, 0, 'b' }, { "lr", 1, 0, 'l' },    { "steps", 1, 0, 's' },
        { "data", 1, 0, 'd' }, { "seed", 1, 0, 'S' },   { "microbatches", 1, 0, 'm' },
        { "schedule", 1, 0, 'k' }, { "codec", 1, 0, 'z' }, { "check-serial", 1, 0, 'c' },
        { 0, 0, 0, 0 } };
    *o = (opts){ 4, 2, 10, 64, 4, 0, 0, 1, 0.05f, 0.9f, 1, COLL_CODEC_NONE, NULL };
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'N': o->np = atoi(optarg); break;
        case 'K': o->stages = atoi(optarg); break;
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
        case 'z': {
            int k = 0;
            while (k < 4 && strcmp(optarg, codecs[k]))
                k++;
            if (k == 4)
                return -1;
            o->codec = (coll_codec)k;
            break;
        }
        default: return -1;
        }
    }
    int D = o->stages > 0 ? o->np / o->stages : 0;
    return o->stages >= 1 && o->stages <= 4 && D >= 1 && D * o->stages == o->np &&
                   o->batch % (D * o->micro) == 0
               ? 0
               : -1;
}

typedef struct {
    const opts *o;
    coll_comm *world, *pipe, *group; /* group: the same stage of every replica */
    int replica, D;
    pipeline p;
    mlp net, serial;
    mlp_work whole;
    const dataset *train, *test;
    size_t *perm;
    double reduce_s;
} trainer;

/* One step: this replica's share through the pipeline, then the stage group averages
 * the stage's gradients and everyone updates. */
static int step(trainer *t, size_t k, double *loss, int *correct)
{
    int share = t->o->batch / t->D;
    const size_t *idx = t->perm + k * (size_t)t->o->batch + (size_t)t->replica * share;
    int rc = pipe_step(&t->p, idx, share, loss, correct, NULL, 0);
    size_t from, n = pipe_params(&t->p, &from);
    double t0 = ex_now_s();
    if (rc == COLL_OK)
        rc = coll_allreduce(t->group, t->net.grads + from, t->net.grads + from, n, COLL_F32,
                            COLL_AVG);
    t->reduce_s += ex_now_s() - t0;
    if (rc == COLL_OK)
        mlp_sgd(&t->net, t->o->lr, t->o->momentum);
    return rc;
}

static int replicas_identical(trainer *t)
{
    size_t from, n = pipe_params(&t->p, &from);
    uint64_t h = 1469598103934665603ULL, *all = malloc(sizeof(uint64_t) * (size_t)t->D);
    const unsigned char *b = (const unsigned char *)(t->net.params + from);
    for (size_t i = 0; i < n * 4; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    int ok = coll_allgather(t->group, &h, all, 1, COLL_I64) == COLL_OK;
    for (int r = 0; ok && r < t->D; r++)
        ok = all[r] == h;
    free(all);
    int every;
    coll_allreduce(t->world, &ok, &every, 1, COLL_I32, COLL_MIN);
    return every;
}

/* Relative L2 distance of this stage's weights from one process on the whole batch,
 * the largest over all stages. */
static double serial_distance(trainer *t, size_t steps)
{
    int ignore = 0, B = t->o->batch;
    float *x = malloc(sizeof(float) * (size_t)B * 784);
    uint8_t *y = malloc((size_t)B);
    for (size_t k = 0; k < steps; k++) {
        ex_gather(t->train, t->perm + k * (size_t)B, B, x, y);
        mlp_train_batch(&t->serial, &t->whole, x, y, B, B, &ignore);
        mlp_sgd(&t->serial, t->o->lr, t->o->momentum);
    }
    free(x);
    free(y);
    size_t from, n = pipe_params(&t->p, &from);
    double num = 0, den = 0, d, worst;
    for (size_t i = from; i < from + n; i++) {
        d = (double)t->net.params[i] - t->serial.params[i];
        num += d * d;
        den += (double)t->serial.params[i] * t->serial.params[i];
    }
    d = sqrt(num / den);
    coll_allreduce(t->world, &d, &worst, 1, COLL_F64, COLL_MAX);
    return worst;
}

static int run_epoch(trainer *t, int epoch, double *acc)
{
    const opts *o = t->o;
    size_t steps = t->train->n / (size_t)o->batch;
    if (o->steps > 0 && (size_t)o->steps < steps)
        steps = (size_t)o->steps;
    ex_shuffle(t->perm, t->train->n, o->seed * 1000003ULL + (unsigned long long)epoch);
    t->p.compute = t->p.idle = t->reduce_s = 0;
    coll_stats g0, g1;
    coll_get_stats(t->group, &g0);
    double loss = 0, t0 = ex_now_s();
    int correct = 0, me = coll_rank(t->world);
    for (size_t k = 0; k < steps; k++) {
        if (step(t, k, &loss, &correct) != COLL_OK) {
            fprintf(stderr, "rank %d: %s / %s\n", me, coll_last_error(t->pipe),
                    coll_last_error(t->group));
            return 1;
        }
        if (epoch == 0 && (int)k + 1 == o->check_serial) {
            double d = serial_distance(t, k + 1);
            if (me == 0)
                printf("check: after %zu steps, weights differ from one process by %.2e "
                       "(relative L2, largest stage)\n", k + 1, d);
            if (d > 1e-5)
                return 3;
        }
    }
    double wall = ex_now_s() - t0;
    coll_get_stats(t->group, &g1);
    if (!replicas_identical(t)) {
        fprintf(stderr, "rank %d: replicas differ after epoch %d\n", me, epoch);
        return 2;
    }
    double mine[4] = { t->p.compute, t->p.idle, t->reduce_s,
                       (double)(g1.wire_tx - g0.wire_tx) / (double)steps };
    double tot[2] = { loss, correct }, sum[2], *all = malloc(sizeof(double) * 4 * (size_t)o->np);
    coll_allgather(t->world, mine, all, 4, COLL_F64);
    coll_allreduce(t->world, tot, sum, 2, COLL_F64, COLL_SUM);
    *acc = pipe_evaluate(&t->p, t->test);
    if (me == 0) {
        int K = o->stages, M = o->micro;
        double samples = (double)steps * o->batch;
        printf("epoch %d: loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s | %d stages x "
               "%d replicas, %s, M %d, bubble formula %.3f\n",
               epoch, sum[0] / samples, sum[1] / samples, *acc, samples / wall, K, t->D,
               o->onef1b ? "1f1b" : "gpipe", M, (double)(K - 1) / (M + K - 1));
        for (int r = 0; r < o->np; r++) {
            double *v = all + 4 * r;
            size_t lo = (size_t)(4 * (r % K) / K), hi = (size_t)(4 * (r % K + 1) / K), P = 0;
            for (size_t l = lo; l < hi; l++)
                P += (size_t)sizes[l] * sizes[l + 1] + sizes[l + 1];
            printf("  rank %d (stage %d, replica %d): compute %.2fs pipeline idle %.2fs "
                   "all-reduce %.2fs | group wire %.0f B/step (2P(D-1)/D = %.0f)\n",
                   r, r % K, r / K, v[0], v[1], v[2], v[3],
                   2.0 * P * 4 * (t->D - 1) / t->D);
        }
    }
    free(all);
    return 0;
}

static int train(coll_comm *world, const opts *o)
{
    char err[1200];
    dataset tr, te;
    if (mnist_load(o->data, 1, &tr, err, sizeof(err)) ||
        mnist_load(o->data, 0, &te, err, sizeof(err))) {
        fprintf(stderr, "hybrid_1f1b: %s\n", err);
        return 2;
    }
    int me = coll_rank(world), K = o->stages;
    trainer t = { .o = o, .world = world, .replica = me / K, .D = o->np / K, .train = &tr,
                  .test = &te };
    int rc = coll_split(world, me / K, me % K, &t.pipe) || coll_split(world, me % K, me / K, &t.group);
    if (!rc && o->codec != COLL_CODEC_NONE)
        rc = coll_set_codec(t.group, o->codec);
    rc = rc || mlp_init(&t.net, sizes, 4, o->seed) || mlp_init(&t.serial, sizes, 4, o->seed) ||
         mlp_work_init(&t.whole, &t.net, o->batch) ||
         pipe_init(&t.p, t.pipe, &t.net, o->batch / t.D, o->micro, o->onef1b, &tr);
    t.perm = malloc(sizeof(size_t) * tr.n);
    if (me == 0)
        printf("# hybrid_1f1b: %d stages x %d replicas, global batch %d (%d per replica, %d "
               "micro-batches), codec %d\n",
               K, t.D, o->batch, o->batch / t.D, o->micro, (int)o->codec);
    double acc = 0;
    for (int e = 0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, &acc);
    if (me == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    pipe_free(&t.p);
    mlp_work_free(&t.whole);
    mlp_free(&t.net), mlp_free(&t.serial);
    free(t.perm);
    coll_destroy(t.pipe);
    coll_destroy(t.group);
    mnist_free(&tr), mnist_free(&te);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: hybrid_1f1b [--np N] [--stages K (1-4, divides N)] "
                        "[--schedule 1f1b|gpipe] [--microbatches M] [--epochs E] [--batch B] "
                        "[--lr LR] [--codec none|fp16|bf16|int8] [--steps S] [--check-serial K] "
                        "[--data DIR] [--seed S]   (B divisible by (N/K) x M)\n");
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
