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
#include "common/options.h"
#include "common/pipeline.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const int sizes[] = { 784, 512, 256, 128, 10 };

typedef struct {
    const ex_opts *o;
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
    uint64_t h = mlp_hash(&t->net, from, n), *all = malloc(sizeof(uint64_t) * (size_t)t->D);
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
    ex_train_serial(&t->serial, &t->whole, t->train, t->perm, t->o->batch, steps, t->o->lr,
                    t->o->momentum);
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
    const ex_opts *o = t->o;
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
    int N = coll_size(t->world);
    double tot[2] = { loss, correct }, sum[2], *all = malloc(sizeof(double) * 4 * (size_t)N);
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
        for (int r = 0; r < N; r++) {
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

static int train(coll_comm *world, const ex_opts *o)
{
    char err[1200];
    dataset tr, te;
    if (mnist_load(o->data, 1, &tr, err, sizeof(err)) ||
        mnist_load(o->data, 0, &te, err, sizeof(err))) {
        fprintf(stderr, "hybrid_1f1b: %s\n", err);
        return 2;
    }
    int me = coll_rank(world), K = o->stages, N = coll_size(world);
    if (N % K || o->batch % (N / K * o->micro)) {
        fprintf(stderr, "hybrid_1f1b: %d ranks do not make %d stages with batch %d in %d "
                        "micro-batches per replica\n", N, K, o->batch, o->micro);
        mnist_free(&tr), mnist_free(&te);
        return 2;
    }
    trainer t = { .o = o, .world = world, .replica = me / K, .D = N / K, .train = &tr,
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

/* The rank layout is checked in train(): under a launcher --np is not the size. */
static int valid(const ex_opts *o)
{
    return o->stages >= 1 && o->stages <= 4 && o->batch % o->micro == 0;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "hybrid_1f1b [--np N] [--stages K (1-4, divides N)] [--schedule 1f1b|gpipe] "
                   "[--microbatches M] [--epochs E] [--batch B (divisible by N/K x M)] [--lr LR] "
                   "[--codec none|fp16|bf16|int8] [--steps S] [--check-serial K] [--data DIR] "
                   "[--seed S]",
                   valid, train);
}
