/* pp_train: pipeline-parallel training of the MLP on Fashion-MNIST: the layers are split
 * into K stages (one rank each); each global batch is cut into M micro-batches whose
 * activations flow forward and whose gradients flow back with send/recv.
 *   pp_train [--np K] [--schedule gpipe|1f1b] [--microbatches M] [--epochs E]
 *            [--batch B] [--lr LR] [--steps S] [--check-serial K] [--data DIR] [--seed S]
 *            [--trace FILE]
 * gpipe: all forwards, then all backwards. 1f1b: stage s runs K-1-s warm-up forwards,
 * then one forward and one backward in turn, then the remaining backwards, so it never
 * holds more than K-s micro-batches of activations. Backwards run in micro-batch order
 * 0..M-1 under both schedules, so each stage adds the same numbers in the same order as
 * one process on the whole batch: --check-serial K compares every stage's weights with
 * such a run after K steps, bit for bit (exit 3 if they differ). Prints per epoch: loss,
 * accuracy, samples/s, per-stage compute and idle time, the measured bubble fraction next
 * to (K-1)/(M+K-1), the most activations stashed, and bytes sent per step next to the
 * formula; the second step is drawn as an ASCII timeline (one row per stage) and, with
 * --trace, written as Chrome trace-event JSON for Perfetto. Final line: "test_accuracy A". */
#include "common/batch.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/options.h"
#include "common/pipeline.h"
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const int sizes[] = { 784, 512, 256, 128, 10 };

typedef struct {
    const ex_opts *o;
    pipeline p;
    mlp net, serial;
    mlp_work whole;
    const dataset *train, *test;
    size_t *perm;
} trainer;

/* Every stage trains a one-process copy on the whole batch and compares its own layers,
 * bit for bit. */
static int serial_matches(trainer *t, size_t steps)
{
    ex_train_serial(&t->serial, &t->whole, t->train, t->perm, t->o->batch, steps, t->o->lr,
                    t->o->momentum);
    size_t from, n = pipe_params(&t->p, &from);
    int same = memcmp(t->net.params + from, t->serial.params + from, n * 4) == 0, all;
    coll_allreduce(t->p.c, &same, &all, 1, COLL_I32, COLL_MIN);
    return all;
}

static void report(trainer *t, int epoch, size_t steps, double wall, double *sum, double acc,
                   const double *all)
{
    const ex_opts *o = t->o;
    int K = t->p.K, M = o->micro;
    double samples = (double)steps * o->batch;
    printf("epoch %d: loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s | schedule %s, "
           "K %d, M %d, bubble formula (K-1)/(M+K-1) = %.3f\n",
           epoch, sum[0] / samples, sum[1] / samples, acc, samples / wall,
           o->onef1b ? "1f1b" : "gpipe", K, M, (double)(K - 1) / (M + K - 1));
    for (int k = 0; k < K; k++) {
        const double *v = all + 4 * k;
        int in = sizes[4 * k / K], out = sizes[4 * (k + 1) / K];
        printf("  stage %d: compute %.2fs idle %.2fs bubble %.3f | peak stash %.0f "
               "micro-batches | sent %.0f B/step",
               k, v[0], v[1], v[1] / (v[0] + v[1]), v[3], v[2]);
        /* per step (B/M) x width x 4 bytes x M micro-batches, each way */
        if (k < K - 1)
            printf(" (activations B x %d x 4 = %d", out, o->batch * out * 4);
        if (k > 0)
            printf("%sgradients B x %d x 4 = %d", k < K - 1 ? " + " : " (", in, o->batch * in * 4);
        printf(K > 1 ? " + headers)\n" : "\n");
    }
}

static int run_epoch(trainer *t, int epoch, double *acc)
{
    const ex_opts *o = t->o;
    pipeline *p = &t->p;
    size_t steps = t->train->n / (size_t)o->batch;
    if (o->steps > 0 && (size_t)o->steps < steps)
        steps = (size_t)o->steps;
    ex_shuffle(t->perm, t->train->n, o->seed * 1000003ULL + (unsigned long long)epoch);
    p->compute = p->idle = 0;
    coll_stats st0, st1;
    coll_get_stats(p->c, &st0);
    double loss = 0, t0 = ex_now_s();
    int correct = 0, rc = COLL_OK;
    for (size_t k = 0; rc == COLL_OK && k < steps; k++) {
        char order[1024];
        int show = epoch == 0 && k == 0, traced = epoch == 0 && k == 1;
        const size_t *idx = t->perm + k * (size_t)o->batch;
        rc = traced ? pipe_traced_step(p, idx, o->batch, &loss, &correct, o->trace)
                    : pipe_step(p, idx, o->batch, &loss, &correct, show ? order : NULL,
                                sizeof(order));
        if (show)
            printf("order stage %d: %s\n", p->stage, order);
        fflush(stdout);
        mlp_sgd(&t->net, o->lr, o->momentum);
        if (rc == COLL_OK && epoch == 0 && (int)k + 1 == o->check_serial) {
            int same = serial_matches(t, k + 1);
            if (p->stage == 0)
                printf("check: after %zu steps, every stage's weights %s a one-process run\n",
                       k + 1, same ? "are bit-identical to" : "DIFFER from");
            if (!same)
                return 3;
        }
    }
    if (rc != COLL_OK) {
        fprintf(stderr, "stage %d: %s\n", p->stage, coll_last_error(p->c));
        return 1;
    }
    double wall = ex_now_s() - t0;
    coll_get_stats(p->c, &st1);
    double mine[4] = { p->compute, p->idle, (double)(st1.wire_tx - st0.wire_tx) / (double)steps,
                       (double)p->peak_stash };
    double *all = malloc(sizeof(double) * 4 * (size_t)p->K), tot[2] = { loss, correct }, sum[2];
    coll_allgather(p->c, mine, all, 4, COLL_F64);
    coll_allreduce(p->c, tot, sum, 2, COLL_F64, COLL_SUM);
    *acc = pipe_evaluate(p, t->test);
    if (p->stage == 0)
        report(t, epoch, steps, wall, sum, *acc, all);
    free(all);
    return 0;
}

static int train(coll_comm *c, const ex_opts *o)
{
    char err[1200];
    dataset tr, te;
    if (mnist_load(o->data, 1, &tr, err, sizeof(err)) ||
        mnist_load(o->data, 0, &te, err, sizeof(err))) {
        fprintf(stderr, "pp_train: %s\n", err);
        return 2;
    }
    trainer t = { .o = o, .train = &tr, .test = &te };
    int rc = mlp_init(&t.net, sizes, 4, o->seed) || mlp_init(&t.serial, sizes, 4, o->seed) ||
             mlp_work_init(&t.whole, &t.net, o->batch) ||
             pipe_init(&t.p, c, &t.net, o->batch, o->micro, o->onef1b, &tr);
    t.perm = malloc(sizeof(size_t) * tr.n);
    int K = coll_size(c);
    if (coll_rank(c) == 0)
        printf("# pp_train: %d stages, layers per stage %s, batch %d in %d micro-batches of %d\n",
               K, K == 1 ? "4" : K == 2 ? "2+2" : K == 3 ? "1+1+2" : "1+1+1+1", o->batch,
               o->micro, o->batch / o->micro);
    double acc = 0;
    for (int e = 0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, &acc);
    if (coll_rank(c) == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    pipe_free(&t.p);
    mlp_work_free(&t.whole);
    mlp_free(&t.net), mlp_free(&t.serial);
    free(t.perm);
    mnist_free(&tr), mnist_free(&te);
    return rc;
}

/* The stage count is checked by pipe_init: under a launcher --np is not the size. */
static int valid(const ex_opts *o)
{
    return o->batch % o->micro == 0;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "pp_train [--np K (1-4)] [--schedule gpipe|1f1b] [--microbatches M (divides "
                   "--batch)] [--epochs E] [--batch B] [--lr LR] [--steps S] [--check-serial K] "
                   "[--data DIR] [--seed S] [--trace FILE]",
                   valid, train);
}
