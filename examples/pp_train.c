/* pp_train: pipeline-parallel training of the MLP on Fashion-MNIST: the layers are split
 * into K stages (one rank each, cut so the largest stage is as small as it can be);
 * each global batch is cut into M micro-batches whose activations flow forward and whose
 * gradients flow back with send/recv.
 *   pp_train [--np K] [--schedule gpipe|1f1b] [--microbatches M] [--epochs E]
 *            [--batch B] [--lr LR] [--lr-schedule cosine|const] [--steps S]
 *            [--check-serial K] [--data DIR] [--seed S] [--json FILE] [--trace FILE]
 *            [--sweep M1,M2,...] [--recompute]
 * gpipe: all forwards, then all backwards. 1f1b: stage s runs K-1-s warm-up forwards,
 * then one forward and one backward in turn, then the remaining backwards, so it never
 * holds more than K-s micro-batches of activations. Backwards run in micro-batch order
 * 0..M-1 under both schedules, so each stage adds the same numbers in the same order as
 * one process on the whole batch: --check-serial K compares every stage's weights with
 * such a run after K steps, bit for bit (exit 3 if they differ). Prints per epoch: loss,
 * accuracy, samples/s and the speedup over one process, per-stage compute and idle time,
 * the measured bubble fraction next to (K-1)/(M+K-1), the peak of activations stashed
 * (micro-batches and bytes), and bytes sent per step next to the formula; the second step
 * is drawn as an ASCII timeline (one row per stage) and, with --trace, written as Chrome
 * trace-event JSON for Perfetto. --sweep trains S steps (--steps, default 10) for each
 * micro-batch count under both schedules and prints bubble, throughput and activation
 * memory instead of training epochs. --recompute stashes only each stage's input (and the
 * output it sends) and runs the stage's forward again in each backward: the same weights,
 * bit for bit, for less activation memory and one more forward (the peak stash and each
 * rank's VmHWM are printed beside the throughput). Last lines: "weights_hash H" (every
 * stage's final weights) and "test_accuracy A". */
#include "common/batch.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/options.h"
#include "common/pipeline.h"
#include "common/report.h"
#include "common/timeline.h"
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes[] = { 784, 512, 256, 128, 10 };

enum { COMPUTE, IDLE, SENT, STASH, STASH_BYTES, HWM, NSTAT }; /* per-stage numbers gathered */

typedef struct {
    const ex_opts *o;
    pipeline p;
    mlp net, serial;
    mlp_work whole;
    const dataset *train, *test;
    size_t *perm;
    timeline tl;
    double serial_sps;
    float lr;
    FILE *json;
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

/* Bytes stage k sends per step by the formula: activations B x width x 4 forward and
 * gradients B x width x 4 backward, at each boundary it touches. */
static double formula_bytes(const pipeline *p, int k, int batch)
{
    int bound[MLP_MAX_LAYERS + 1];
    pipe_split(p->net, p->K, bound);
    double b = 0;
    if (k < p->K - 1)
        b += (double)batch * p->net->size[bound[k + 1]] * 4;
    if (k > 0)
        b += (double)batch * p->net->size[bound[k]] * 4;
    return b;
}

static void report(trainer *t, int epoch, size_t steps, double wall, const double *sum,
                   double acc, const double *all)
{
    const ex_opts *o = t->o;
    int K = t->p.K, M = o->micro;
    double samples = (double)steps * o->batch, sps = samples / wall;
    double speedup = t->serial_sps > 0 ? sps / t->serial_sps : 0;
    printf("epoch %d: lr %.4f loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s, speedup "
           "%.2fx | schedule %s, K %d, M %d, bubble formula (K-1)/(M+K-1) = %.3f\n",
           epoch, t->lr, sum[0] / samples, sum[1] / samples, acc, sps, speedup,
           o->onef1b ? "1f1b" : "gpipe", K, M, (double)(K - 1) / (M + K - 1));
    for (int k = 0; k < K; k++) {
        const double *v = all + NSTAT * k;
        printf("  stage %d: compute %.2fs idle %.2fs bubble %.3f | peak stash %.0f "
               "micro-batches = %.0f KiB | sent %.0f B/step (formula %.0f + headers) | "
               "VmHWM %.1f MiB\n",
               k, v[COMPUTE], v[IDLE], v[IDLE] / (v[COMPUTE] + v[IDLE]), v[STASH],
               v[STASH_BYTES] / 1024, v[SENT], formula_bytes(&t->p, k, o->batch),
               v[HWM] / (1 << 20));
    }
    ex_memory mem[4]; /* K <= layers = 4 */
    for (int k = 0; k < K; k++) {
        double P = 4.0 * pipe_stage_params(&t->net, K, k);
        char who[24]; /* "stage " and any int: gcc checks the bound without LTO */
        mem[k] = (ex_memory){P, P, P, all[NSTAT * k + STASH_BYTES], 0};
        snprintf(who, sizeof(who), "stage %d", k);
        ex_print_memory(who, &mem[k]);
    }
    if (!t->json)
        return;
    fprintf(t->json, "%s{\"epoch\":%d,\"lr\":%.5f,\"loss\":%.6f,\"train_acc\":%.5f,"
                     "\"test_acc\":%.5f,\"samples_per_s\":%.1f,\"speedup\":%.3f,"
                     "\"bubble_formula\":%.4f,\"stages\":[",
            epoch ? ",\n" : "", epoch, t->lr, sum[0] / samples, sum[1] / samples, acc, sps,
            speedup, (double)(K - 1) / (M + K - 1));
    for (int k = 0; k < K; k++) {
        const double *v = all + NSTAT * k;
        fprintf(t->json, "%s{\"compute_s\":%.4f,\"idle_s\":%.4f,\"bubble\":%.4f,"
                         "\"peak_stash\":%.0f,\"peak_stash_bytes\":%.0f,"
                         "\"sent_bytes_per_step\":%.0f,\"formula_bytes_per_step\":%.0f",
                k ? "," : "", v[COMPUTE], v[IDLE], v[IDLE] / (v[COMPUTE] + v[IDLE]), v[STASH],
                v[STASH_BYTES], v[SENT], formula_bytes(&t->p, k, o->batch));
        ex_json_memory(t->json, &mem[k]);
        fprintf(t->json, "}");
    }
    fprintf(t->json, "]}");
}

/* Runs `steps` steps from perm; the second step of epoch 0 is drawn. Every stage gets
 * the per-stage numbers in all[NSTAT x K] and loss / correct summed in sum[2]. */
static int run_steps(trainer *t, int epoch, size_t steps, double *all, double *sum)
{
    const ex_opts *o = t->o;
    pipeline *p = &t->p;
    p->compute = p->idle = 0;
    coll_stats st0, st1;
    coll_get_stats(p->c, &st0);
    double loss = 0;
    int correct = 0, rc = COLL_OK;
    for (size_t k = 0; rc == COLL_OK && k < steps; k++) {
        char order[1024];
        int show = epoch == 0 && k == 0, traced = epoch == 0 && k == 1;
        const size_t *idx = t->perm + k * (size_t)o->batch;
        p->tl = traced ? &t->tl : NULL;
        if (traced)
            rc = tl_begin(&t->tl, p->c);
        if (rc == COLL_OK)
            rc = pipe_step(p, idx, o->batch, &loss, &correct, show ? order : NULL, sizeof(order));
        if (rc == COLL_OK && traced)
            rc = tl_end(&t->tl, p->c, "stage", o->trace);
        if (show && rc == COLL_OK)
            printf("order stage %d: %s\n", p->stage, order);
        fflush(stdout);
        mlp_sgd(&t->net, t->lr, o->momentum);
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
    coll_get_stats(p->c, &st1);
    double mine[NSTAT] = { p->compute, p->idle, (double)(st1.wire_tx - st0.wire_tx) / (double)steps,
                           (double)p->peak_stash, (double)p->peak_stash * pipe_stash_bytes(p),
                           ex_peak_rss() };
    double tot[2] = { loss, correct };
    if (coll_allgather(p->c, mine, all, NSTAT, COLL_F64) ||
        coll_allreduce(p->c, tot, sum, 2, COLL_F64, COLL_SUM))
        return 1;
    return 0;
}

/* One hash of every stage's weights: each stage's FNV-1a of its slice, hashed in stage
 * order on every rank (0 where the all-gather failed). */
static uint64_t weights_hash(const pipeline *p)
{
    size_t from, n = pipe_params(p, &from);
    int64_t mine = (int64_t)mlp_hash(p->net, from, n), all[4]; /* K <= layers = 4 */
    if (coll_allgather(p->c, &mine, all, 1, COLL_I64) != COLL_OK)
        return 0;
    uint64_t h = 1469598103934665603ULL;
    for (int k = 0; k < p->K; k++)
        h = (h ^ (uint64_t)all[k]) * 1099511628211ULL;
    return h;
}

static size_t epoch_steps(const trainer *t)
{
    size_t steps = t->train->n / (size_t)t->o->batch;
    return t->o->steps > 0 && (size_t)t->o->steps < steps ? (size_t)t->o->steps : steps;
}

static int run_epoch(trainer *t, int epoch, double *acc)
{
    size_t steps = epoch_steps(t);
    ex_shuffle(t->perm, t->train->n, t->o->seed * 1000003ULL + (unsigned long long)epoch);
    t->lr = ex_lr(t->o, epoch);
    if (epoch == 0 && t->p.stage == 0)
        t->serial_sps = ex_serial_rate(&t->net, t->train, t->perm, t->o->batch, t->o->lr,
                                       t->o->momentum);
    double *all = malloc(sizeof(double) * NSTAT * (size_t)t->p.K), sum[2], t0 = ex_now_s();
    int rc = run_steps(t, epoch, steps, all, sum);
    double wall = ex_now_s() - t0;
    if (rc == 0) {
        *acc = pipe_evaluate(&t->p, t->test);
        if (t->p.stage == 0)
            report(t, epoch, steps, wall, sum, *acc, all);
    }
    free(all);
    return rc;
}

/* For each micro-batch count and both schedules: a fresh pipeline, S steps, one row of
 * measured bubble (mean over stages), throughput and stage 0's activation memory. */
static int sweep(trainer *t, coll_comm *c)
{
    const ex_opts *given = t->o;
    ex_opts o = *given;
    size_t steps = o.steps > 0 ? (size_t)o.steps : 10;
    int K = coll_size(c), rc = 0;
    double *all = malloc(sizeof(double) * NSTAT * (size_t)K), sum[2];
    ex_shuffle(t->perm, t->train->n, o.seed);
    t->lr = o.lr;
    if (coll_rank(c) == 0)
        printf("# sweep: %d stages, batch %d, %zu steps each%s\n"
               "%4s %-6s %12s %10s %10s %10s %16s\n", K, o.batch, steps,
               o.recompute ? ", recompute" : "", "M", "sched",
               "samples/s", "bubble", "formula", "peak_stash", "stage0_act_KiB");
    for (int i = 0; !rc && i < o.nsweep; i++) {
        for (int f = 0; !rc && f < 2; f++) {
            o.micro = o.sweep[i], o.onef1b = f;
            t->o = &o;
            if (o.batch % o.micro ||
                pipe_init(&t->p, c, &t->net, o.batch, o.micro, f, o.recompute, t->train)) {
                fprintf(stderr, "pp_train: no pipeline of %d stages with %d micro-batches of "
                                "batch %d\n", K, o.micro, o.batch);
                rc = 2;
                break;
            }
            rc = run_steps(t, 1, 1, all, sum); /* warm-up: first touches, connections */
            double t0 = ex_now_s();
            rc = rc ? rc : run_steps(t, 1, steps, all, sum);
            double wall = ex_now_s() - t0, bubble = 0;
            for (int k = 0; k < K; k++)
                bubble += all[NSTAT * k + IDLE] / (all[NSTAT * k + IDLE] + all[NSTAT * k]) / K;
            if (!rc && coll_rank(c) == 0)
                printf("%4d %-6s %12.0f %10.3f %10.3f %10.0f %16.1f\n", o.micro,
                       f ? "1f1b" : "gpipe", steps * o.batch / wall, bubble,
                       (double)(K - 1) / (o.micro + K - 1), all[STASH], all[STASH_BYTES] / 1024);
            pipe_free(&t->p);
        }
    }
    free(all);
    t->o = given;
    return rc;
}

static void describe(const pipeline *p, const ex_opts *o)
{
    int bound[MLP_MAX_LAYERS + 1];
    pipe_split(p->net, p->K, bound);
    printf("# pp_train: %d stages, layers per stage", p->K);
    for (int k = 0; k < p->K; k++)
        printf("%s%d", k ? "+" : " ", bound[k + 1] - bound[k]);
    printf(", batch %d in %d micro-batches of %d%s\n", o->batch, o->micro, o->batch / o->micro,
           o->recompute ? ", recompute (stashing stage inputs and sent outputs only)" : "");
}

static int train(coll_comm *c, const ex_opts *o)
{
    dataset tr, te;
    if (ex_load_data(o, "pp_train", &tr, &te) != 0)
        return 2;
    trainer t = { .o = o, .train = &tr, .test = &te };
    int rc = tl_init(&t.tl, 2 * o->micro) || mlp_init(&t.net, sizes, 4, o->seed) ||
             mlp_init(&t.serial, sizes, 4, o->seed) || mlp_work_init(&t.whole, &t.net, o->batch);
    t.perm = malloc(sizeof(size_t) * tr.n);
    if (!rc && o->nsweep) {
        rc = sweep(&t, c);
        goto out;
    }
    if (!rc && pipe_init(&t.p, c, &t.net, o->batch, o->micro, o->onef1b, o->recompute, &tr)) {
        fprintf(stderr, "pp_train: cannot make %d stages of %d layers\n", coll_size(c), 4);
        rc = 2;
        goto out;
    }
    if (coll_rank(c) == 0 && o->json && !(t.json = fopen(o->json, "w")))
        fprintf(stderr, "cannot write %s\n", o->json);
    if (t.json)
        fprintf(t.json, "{\"trainer\":\"pp\",\"ranks\":%d,\"batch\":%d,\"schedule\":\"%s\","
                        "\"micro\":%d,\"epochs\":[\n", coll_size(c), o->batch, o->onef1b ? "1f1b" : "gpipe", o->micro);
    if (coll_rank(c) == 0)
        describe(&t.p, o);
    double acc = 0;
    for (int e = 0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, &acc);
    if (t.json) {
        fprintf(t.json, "\n],\"test_accuracy\":%.5f}\n", acc);
        fclose(t.json);
    }
    uint64_t hash = rc ? 0 : weights_hash(&t.p);
    if (coll_rank(c) == 0 && !rc)
        printf("weights_hash %016llx\ntest_accuracy %.4f\n", (unsigned long long)hash, acc);
    pipe_free(&t.p);
out:
    tl_free(&t.tl);
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
                   "--batch)] [--epochs E] [--batch B] [--lr LR] [--lr-schedule cosine|const] "
                   "[--steps S] [--check-serial K] [--data DIR] [--seed S] [--json FILE] "
                   "[--trace FILE] [--sweep M1,M2,...] [--recompute]",
                   valid, train);
}
