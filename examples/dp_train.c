/* dp_train: data-parallel training of an MLP on Fashion-MNIST through libcollective.
 * The global batch is split across ranks; each rank computes gradients of the mean loss
 * of its slice, the gradients are all-reduced (avg, codec selectable), and every replica
 * applies the same update. Replicas are checked bit-identical every epoch.
 *   dp_train [--np N] [--epochs E] [--batch B] [--lr LR] [--codec none|fp16|bf16|int8]
 *            [--steps S] [--check-serial K] [--data DIR] [--json FILE] [--trace FILE]
 *            [--seed S] [--lr-schedule cosine|const]
 * --steps limits the steps per epoch (short runs); --check-serial K makes rank 0 also
 * train a single-process copy on the whole global batch for K steps and compare weights
 * (relative L2 within 1e-5, or exit 3). Prints per epoch: loss, train and test accuracy,
 * samples/s, compute / communication time per rank, speedup over one process on the same
 * global batch, bandwidth utilisation and bytes on the wire next to 2P(N-1)/N; the second
 * step is drawn as a timeline (F, B, A per rank) and, with --trace, written as Chrome
 * trace-event JSON. Final line: "test_accuracy A". */
#include "common/batch.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/options.h"
#include "common/report.h"
#include "common/timeline.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    coll_comm *c;
    const ex_opts *o;
    const dataset *train, *test;
    mlp net, serial;
    mlp_work work, serial_work;
    float *bx, *sx;
    uint8_t *by, *sy;
    size_t *perm;
    double serial_sps; /* one process, same global batch (measured by rank 0) */
    float lr;          /* this epoch's */
    timeline tl;
    FILE *json;
} trainer;

static double rel_diff(const mlp *a, const mlp *b)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < a->nparams; i++) {
        double d = (double)a->params[i] - b->params[i];
        num += d * d;
        den += (double)b->params[i] * b->params[i];
    }
    return sqrt(num / den);
}

/* One step: local slice forward/backward, gradient all-reduce, update. */
static int step(trainer *t, size_t s, double *tc, double *tm, double *loss, int *correct)
{
    int n = coll_size(t->c), me = coll_rank(t->c), B = t->o->batch, b = B / n;
    const size_t *idx = t->perm + s * (size_t)B;
    double t0 = ex_now_s();
    ex_gather(t->train, idx + (size_t)me * b, b, t->bx, t->by);
    memset(t->net.grads, 0, sizeof(float) * t->net.nparams);
    mlp_forward(&t->net, &t->work, t->bx, b);
    double tf = ex_now_s();
    *loss += mlp_backward(&t->net, &t->work, t->by, b, b, correct);
    double t1 = ex_now_s();
    int rc = coll_allreduce(t->c, t->net.grads, t->net.grads, t->net.nparams, COLL_F32, COLL_AVG);
    double t2 = ex_now_s();
    if (rc != COLL_OK)
        return rc;
    tl_add(&t->tl, 'F', -1, t0, tf);
    tl_add(&t->tl, 'B', -1, tf, t1);
    tl_add(&t->tl, 'A', -1, t1, t2);
    mlp_sgd(&t->net, t->lr, t->o->momentum);
    *tc += t1 - t0;
    *tm += t2 - t1;
    if (me == 0 && (int)s < t->o->check_serial) {
        int ignore = 0;
        ex_gather(t->train, idx, B, t->sx, t->sy);
        mlp_train_batch(&t->serial, &t->serial_work, t->sx, t->sy, B, B, &ignore);
        mlp_sgd(&t->serial, t->lr, t->o->momentum);
    }
    return COLL_OK;
}

static int replicas_identical(trainer *t)
{
    int n = coll_size(t->c);
    uint64_t h = mlp_hash(&t->net, 0, t->net.nparams), *all = malloc(sizeof(uint64_t) * (size_t)n);
    int ok = coll_allgather(t->c, &h, all, 1, COLL_I64) == COLL_OK;
    for (int r = 0; ok && r < n; r++)
        ok = all[r] == h;
    free(all);
    return ok;
}

static int run_epoch(trainer *t, int epoch, double *test_acc)
{
    int n = coll_size(t->c), me = coll_rank(t->c), B = t->o->batch;
    size_t steps = t->train->n / (size_t)B;
    if (t->o->steps > 0 && (size_t)t->o->steps < steps)
        steps = (size_t)t->o->steps;
    ex_shuffle(t->perm, t->train->n, t->o->seed * 1000003ULL + (unsigned long long)epoch);
    t->lr = ex_lr(t->o, epoch);
    if (epoch == 0 && me == 0)
        t->serial_sps = ex_serial_rate(&t->net, t->train, t->perm, B, t->o->lr, t->o->momentum);
    coll_stats st0, st1;
    coll_get_stats(t->c, &st0);
    double tc = 0, tm = 0, loss = 0, t0 = ex_now_s();
    int correct = 0;
    for (size_t s = 0; s < steps; s++) {
        int traced = epoch == 0 && s == 1, rc = traced ? tl_begin(&t->tl, t->c) : COLL_OK;
        if (rc == COLL_OK)
            rc = step(t, s, &tc, &tm, &loss, &correct);
        if (rc == COLL_OK && traced)
            rc = tl_end(&t->tl, t->c, "rank", t->o->trace);
        if (rc != COLL_OK) {
            fprintf(stderr, "rank %d: all-reduce: %s\n", me, coll_last_error(t->c));
            return 1;
        }
        if (epoch == 0 && me == 0 && (int)s + 1 == t->o->check_serial) {
            double d = rel_diff(&t->net, &t->serial);
            printf("check: after %d steps, %d-rank weights differ from one process by %.2e "
                   "(relative L2)\n", t->o->check_serial, n, d);
            if (d > 1e-5)
                return 3;
        }
    }
    double wall = ex_now_s() - t0;
    coll_get_stats(t->c, &st1);
    if (!replicas_identical(t)) {
        fprintf(stderr, "rank %d: replicas differ after epoch %d\n", me, epoch);
        return 2;
    }
    double stats[3] = { loss, (double)correct, tm }, sum[3], times[2] = { tc, tm };
    double *per = malloc(sizeof(double) * 2 * (size_t)n);
    coll_allreduce(t->c, stats, sum, 3, COLL_F64, COLL_SUM);
    coll_allgather(t->c, times, per, 2, COLL_F64);
    *test_acc = mlp_accuracy(&t->net, &t->work, t->test->x, t->test->y, t->test->n);
    if (me != 0) {
        free(per);
        return 0;
    }
    double samples = (double)steps * B, sps = samples / wall;
    double P = (double)t->net.nparams * 4, bytes = 2.0 * P * (n - 1) / n;
    double formula = bytes / 4 * ex_wire_bytes(t->o->codec);
    double wire = (double)(st1.wire_tx - st0.wire_tx) / (double)steps;
    double ar = sum[2] / n / (double)steps; /* mean all-reduce time per step */
    printf("epoch %d: lr %.4f loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s, speedup "
           "%.2fx | wire %.0f B/step (2P(N-1)/N = %.0f) | allreduce %.2f ms, busbw %.3f GB/s\n",
           epoch, t->lr, sum[0] / samples, sum[1] / samples, *test_acc, sps,
           t->serial_sps > 0 ? sps / t->serial_sps : 0, wire, formula, ar * 1e3,
           n > 1 ? bytes / ar / 1e9 : 0);
    for (int r = 0; r < n; r++)
        printf("  rank %d: compute %.2fs comm %.2fs\n", r, per[2 * r], per[2 * r + 1]);
    free(per);
    ex_memory mem = {P, P, P, (double)mlp_work_bytes(&t->net, B / n), 0};
    ex_print_memory("per rank", &mem);
    if (t->json)
        fprintf(t->json,
                "%s{\"epoch\":%d,\"lr\":%.5f,\"loss\":%.6f,\"train_acc\":%.5f,\"test_acc\":%.5f,"
                "\"samples_per_s\":%.1f,\"speedup\":%.3f,\"compute_s\":%.3f,\"comm_s\":%.3f,"
                "\"wire_bytes_per_step\":%.0f,\"formula_bytes_per_step\":%.0f",
                epoch ? ",\n" : "", epoch, t->lr, sum[0] / samples, sum[1] / samples, *test_acc, sps,
                t->serial_sps > 0 ? sps / t->serial_sps : 0, tc, tm, wire, formula);
    if (t->json) {
        ex_json_memory(t->json, &mem);
        fprintf(t->json, "}");
    }
    fflush(stdout);
    return 0;
}

static int train(coll_comm *c, const ex_opts *o)
{
    static const int sizes[] = { 784, 512, 256, 128, 10 };
    int n = coll_size(c), me = coll_rank(c);
    if (o->batch % n) {
        fprintf(stderr, "--batch %d must be a multiple of %d ranks\n", o->batch, n);
        return 2;
    }
    dataset train_set, test_set;
    if (ex_load_data(o, "dp_train", &train_set, &test_set) != 0)
        return 2;
    trainer t = { .c = c, .o = o, .train = &train_set, .test = &test_set };
    int rc = tl_init(&t.tl, 3) || mlp_init(&t.net, sizes, 4, o->seed) ||
             mlp_init(&t.serial, sizes, 4, o->seed) ||
             mlp_work_init(&t.work, &t.net, o->batch) ||
             mlp_work_init(&t.serial_work, &t.net, o->batch);
    t.bx = malloc(sizeof(float) * (size_t)o->batch * 784);
    t.sx = malloc(sizeof(float) * (size_t)o->batch * 784);
    t.by = malloc((size_t)o->batch);
    t.sy = malloc((size_t)o->batch);
    t.perm = malloc(sizeof(size_t) * train_set.n);
    if (me == 0 && o->json && !(t.json = fopen(o->json, "w")))
        fprintf(stderr, "cannot write %s\n", o->json);
    if (t.json)
        fprintf(t.json, "{\"trainer\":\"dp\",\"ranks\":%d,\"batch\":%d,\"codec\":%d,\"epochs\":[\n", n, o->batch,
                (int)o->codec);
    if (me == 0)
        printf("# dp_train: %d ranks, global batch %d (%d per rank), %zu parameters, codec %d\n",
               n, o->batch, o->batch / n, t.net.nparams, (int)o->codec);
    double acc = 0;
    for (int e = 0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, &acc);
    if (t.json) {
        fprintf(t.json, "\n],\"test_accuracy\":%.5f}\n", acc);
        fclose(t.json);
    }
    if (me == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    mlp_free(&t.net), mlp_free(&t.serial), mlp_work_free(&t.work), mlp_work_free(&t.serial_work);
    tl_free(&t.tl);
    free(t.bx), free(t.sx), free(t.by), free(t.sy), free(t.perm);
    mnist_free(&train_set), mnist_free(&test_set);
    return rc;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "dp_train [--np N] [--epochs E] [--batch B (multiple of N)] [--lr LR] "
                   "[--codec none|fp16|bf16|int8] [--steps S] [--check-serial K] [--data DIR] "
                   "[--json FILE] [--trace FILE] [--seed S] [--lr-schedule cosine|const]",
                   NULL, train);
}
