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
 * trace-event JSON. Final line: "test_accuracy A".
 * --elastic: when a rank is lost, the survivors shrink the communicator, split the same
 * global batch over the ranks left (unevenly when it does not divide: each rank's
 * gradient is then of its samples' summed loss over B, all-reduced with a sum), keep their
 * replicas (identical) and redo the step; the run goes on to the end.
 * --heal (under a launcher that restarts a dead rank: coll_run --max-restarts): the
 * survivors shrink, then grow back to full size as the replacement joins, hand it the
 * weights, optimizer state and position, and redo the step at full size: the run ends
 * with the weights of a run that lost nothing. Every run ends with a line "weights H",
 * H the final weights' hash (rank 0). */
#include "common/batch.h"
#include "common/heal.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/options.h"
#include "common/report.h"
#include "common/timeline.h"
#include "common/undo.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    coll_comm *c, *first; /* the communicator in use, and the one the trainer was given */
    int size0;            /* the job's size: --heal grows back to it */
    int serial_owner;     /* this process began as rank 0: it runs --check-serial */
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
    int reported; /* epochs in the JSON file */
    ex_undo undo; /* --elastic: the weights and velocity as the last two steps began */
    ex_heal_clock heal; /* --heal: the last heal's phases */
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

/* One step: local slice forward/backward, gradient all-reduce, update. Ranks that
 * divide the batch average their slices' mean gradients; otherwise (after a shrink)
 * slices differ by one sample and the gradients of loss sums over B are summed. Loss and
 * correct count only once the step's all-reduce succeeded (a failed step is redone). */
static int step(trainer *t, size_t s, double *tc, double *tm, double *loss, int *correct)
{
    int n = coll_size(t->c), me = coll_rank(t->c), B = t->o->batch, even = B % n == 0;
    int lo = (int)((long)me * B / n), b = (int)((long)(me + 1) * B / n) - lo, ok = 0;
    const size_t *idx = t->perm + s * (size_t)B;
    double t0 = ex_now_s();
    ex_gather(t->train, idx + lo, b, t->bx, t->by);
    memset(t->net.grads, 0, sizeof(float) * t->net.nparams);
    mlp_forward(&t->net, &t->work, t->bx, b);
    double tf = ex_now_s();
    double l = mlp_backward(&t->net, &t->work, t->by, b, even ? b : B, &ok);
    double t1 = ex_now_s();
    int rc = coll_allreduce(t->c, t->net.grads, t->net.grads, t->net.nparams, COLL_F32,
                            even ? COLL_AVG : COLL_SUM);
    double t2 = ex_now_s();
    if (rc != COLL_OK)
        return rc;
    *loss += l;
    *correct += ok;
    tl_add(&t->tl, 'F', -1, t0, tf);
    tl_add(&t->tl, 'B', -1, tf, t1);
    tl_add(&t->tl, 'A', -1, t1, t2);
    mlp_sgd(&t->net, t->lr, t->o->momentum);
    *tc += t1 - t0;
    *tm += t2 - t1;
    if (t->serial_owner && (int)s < t->o->check_serial) {
        int ignore = 0;
        ex_gather(t->train, idx, B, t->sx, t->sy);
        mlp_train_batch(&t->serial, &t->serial_work, t->sx, t->sy, B, B, &ignore);
        mlp_sgd(&t->serial, t->lr, t->o->momentum);
    }
    return COLL_OK;
}

/* The epoch's closing exchanges: replica hashes compared (*same), stats summed, every
 * rank's times gathered into per (2 x size). A COLL_E* code when a collective failed. */
static int close_epoch(trainer *t, const double stats[3], double sum[3], const double times[2],
                       double *per, int *same)
{
    int n = coll_size(t->c);
    uint64_t h = mlp_hash(&t->net, 0, t->net.nparams), *all = malloc(sizeof(uint64_t) * (size_t)n);
    int rc = all ? coll_allgather(t->c, &h, all, 1, COLL_I64) : COLL_ENOMEM;
    *same = 1;
    for (int r = 0; rc == COLL_OK && r < n; r++)
        *same &= all[r] == h;
    free(all);
    if (rc == COLL_OK)
        rc = coll_allreduce(t->c, stats, sum, 3, COLL_F64, COLL_SUM);
    return rc == COLL_OK ? coll_allgather(t->c, times, per, 2, COLL_F64) : rc;
}

/* --elastic: step k failed here (steps count on across epochs, each epoch's close one of
 * them). The survivors agree on who is gone and go on as a smaller communicator (the old
 * one stays failed; the one the trainer was given is its caller's to destroy), back at
 * the first step not every rank finished, from the weights it began with (*from), and
 * learn the furthest any rank got (*last). */
static int recover(trainer *t, size_t k, size_t *from, size_t *last)
{
    int was = coll_rank(t->c), lost[64];
    double t0 = ex_now_s();
    t->heal.seen = ex_wall_s();
    coll_comm *next = NULL;
    int rc = coll_shrink(t->c, &next);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: shrink: %s\n", was, coll_last_error(NULL));
        return rc;
    }
    int nl = coll_failed_ranks(t->c, lost, 64);
    if (t->c != t->first)
        coll_destroy(t->c);
    t->c = next;
    int64_t mine = (int64_t)k, most = 0;
    if ((rc = coll_allreduce(next, &mine, &most, 1, COLL_I64, COLL_MAX)) ||
        (rc = ex_undo_agree(&t->undo, next, k, t->net.params, t->net.velocity, from)))
        return rc;
    *last = (size_t)most;
    if (coll_rank(next) == 0) {
        printf("elastic: lost rank(s)");
        for (int i = 0; i < nl && i < 64; i++)
            printf(" %d", lost[i]);
        printf(" of the old numbering; %d ranks go on, the global batch of %d split %d ways, "
               "from step %zu of the run (shrink took %.0f ms)\n", coll_size(next), t->o->batch,
               coll_size(next), *from, (ex_now_s() - t0) * 1e3);
        fflush(stdout);
    }
    if (!t->o->heal)
        return COLL_OK;
    coll_comm *grown = NULL;
    t->heal.shrunk = ex_wall_s();
    if ((rc = ex_heal_offer(next, t->size0, &grown)) != COLL_OK)
        return rc;
    t->heal.grown = ex_wall_s();
    coll_destroy(next);
    t->c = grown;
    return COLL_OK;
}

/* --heal, on the grown communicator: rank 0's position (the epoch and step the run goes
 * on from) and its weights and optimizer state reach every rank (the replacement's
 * first). */
static int hand_over(trainer *t, int *epoch, size_t *step)
{
    int64_t pos[2] = {*epoch, (int64_t)*step};
    float *bufs[2] = {t->net.params, t->net.velocity};
    size_t lens[2] = {t->net.nparams, t->net.nparams};
    int rc = ex_heal_state(t->c, pos, 2, bufs, lens, 2);
    *epoch = (int)pos[0];
    *step = (size_t)pos[1];
    t->heal.done = ex_wall_s();
    t->heal.bytes = sizeof(pos) + sizeof(float) * 2 * t->net.nparams;
    if (rc == COLL_OK && t->heal.seen > 0) /* a survivor's (a newcomer's first has none) */
        ex_heal_report(&t->heal, coll_rank(t->c), coll_rank(t->c) == 0, coll_size(t->c));
    return rc;
}

/* Epoch `epoch` from step `first` (a replacement's first epoch: where it joined). */
static int run_epoch(trainer *t, int epoch, size_t first, double *test_acc)
{
    int n = coll_size(t->c), me = coll_rank(t->c), B = t->o->batch;
    size_t steps = t->train->n / (size_t)B;
    if (t->o->steps > 0 && (size_t)t->o->steps < steps)
        steps = (size_t)t->o->steps;
    ex_shuffle(t->perm, t->train->n, t->o->seed * 1000003ULL + (unsigned long long)epoch);
    t->lr = ex_lr(t->o, epoch);
    if (epoch == 0 && me == 0 && first == 0)
        t->serial_sps = ex_serial_rate(&t->net, t->train, t->perm, B, t->o->lr, t->o->momentum);
    coll_stats st0, st1;
    coll_get_stats(t->c, &st0);
    double tc = 0, tm = 0, loss = 0, t0 = ex_now_s();
    int correct = 0;
    /* wire bytes count from wire_from (the last shrink); steps are numbered from `base`
     * across epochs for --elastic, this epoch's close being base + steps. */
    size_t wire_from = first, s = first, from, last, base = (size_t)epoch * (steps + 1);
    double wall, stats[3], sum[3], times[2], *per = malloc(sizeof(double) * 2 * (size_t)n);
    int same = 1, rc;
    if (!per)
        return 1;
    for (;;) { /* the steps, then the close; a lost rank sends both back to `from` */
        for (; s < steps; s++) {
            if (t->o->elastic)
                ex_undo_keep(&t->undo, base + s, t->net.params, t->net.velocity);
            int traced = epoch == 0 && s == 1;
            rc = traced ? tl_begin(&t->tl, t->c) : COLL_OK;
            if (rc == COLL_OK)
                rc = step(t, s, &tc, &tm, &loss, &correct);
            if (rc == COLL_OK && traced)
                rc = tl_end(&t->tl, t->c, "rank", t->o->trace);
            if (rc != COLL_OK)
                break;
            if (epoch == 0 && t->serial_owner && (int)s + 1 == t->o->check_serial) {
                double d = rel_diff(&t->net, &t->serial);
                printf("check: after %d steps, %d-rank weights differ from one process by %.2e "
                       "(relative L2)\n", t->o->check_serial, n, d);
                if (d > 1e-5) {
                    free(per);
                    return 3;
                }
            }
        }
        if (s == steps) {
            if (t->o->elastic)
                ex_undo_keep(&t->undo, base + s, t->net.params, t->net.velocity);
            wall = ex_now_s() - t0;
            coll_get_stats(t->c, &st1);
            stats[0] = loss, stats[1] = correct, stats[2] = tm;
            times[0] = tc, times[1] = tm;
            if ((rc = close_epoch(t, stats, sum, times, per, &same)) == COLL_OK)
                break;
        }
        fprintf(stderr, "rank %d: %s %zu: %s\n", me, s < steps ? "step" : "closing epoch at step",
                s, coll_last_error(t->c));
        if (!t->o->elastic || recover(t, base + s, &from, &last) != COLL_OK) {
            free(per);
            return 1;
        }
        n = coll_size(t->c), me = coll_rank(t->c); /* as large at most: per still fits */
        coll_get_stats(t->c, &st0);
        /* A collective can end on some ranks and fail on others: those that finished the
         * last epoch's close went on to this epoch's first step, and those still in this
         * close when others finished it leave it unreported (the weights are the same). */
        int next = s == steps && last > base + s, e = epoch + next;
        size_t resume = next || from < base ? 0 : from - base;
        if (t->o->heal && hand_over(t, &e, &resume) != COLL_OK) {
            free(per);
            return 1;
        }
        if (next) {
            fprintf(stderr, "rank %d: epoch %d's close ended on other ranks: not reported\n",
                    me, epoch);
            free(per);
            *test_acc = mlp_accuracy(&t->net, &t->work, t->test->x, t->test->y, t->test->n);
            return 0;
        }
        s = wire_from = resume;
    }
    if (!same) {
        fprintf(stderr, "rank %d: replicas differ after epoch %d\n", me, epoch);
        free(per);
        return 2;
    }
    *test_acc = mlp_accuracy(&t->net, &t->work, t->test->x, t->test->y, t->test->n);
    if (me != 0) {
        free(per);
        return 0;
    }
    double samples = (double)steps * B, sps = samples / wall;
    double P = (double)t->net.nparams * 4, bytes = 2.0 * P * (n - 1) / n;
    double formula = bytes / 4 * ex_wire_bytes(t->o->codec);
    double wire = (double)(st1.wire_tx - st0.wire_tx) / (double)(steps - wire_from);
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
                t->reported++ ? ",\n" : "", epoch, t->lr, sum[0] / samples,
                sum[1] / samples, *test_acc, sps,
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
    trainer t = {.c = c, .first = c, .size0 = n, .serial_owner = me == 0 && !o->joined, .o = o,
                 .train = &train_set, .test = &test_set};
    int rc = tl_init(&t.tl, 3) || mlp_init(&t.net, sizes, 4, o->seed) ||
             mlp_init(&t.serial, sizes, 4, o->seed) ||
             mlp_work_init(&t.work, &t.net, o->batch) ||
             mlp_work_init(&t.serial_work, &t.net, o->batch) ||
             (o->elastic && ex_undo_init(&t.undo, t.net.nparams));
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
    int e0 = 0;
    size_t s0 = 0;
    if (!rc && o->joined && (rc = hand_over(&t, &e0, &s0)) == COLL_OK)
        ex_heal_joined(me, e0, s0, o->started, o->joined_at, t.heal.done);
    for (int e = e0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, e == e0 ? s0 : 0, &acc);
    if (t.json) {
        fprintf(t.json, "\n],\"test_accuracy\":%.5f}\n", acc);
        fclose(t.json);
    }
    if (coll_rank(t.c) == 0 && !rc)
        printf("weights %016llx\ntest_accuracy %.4f\n",
               (unsigned long long)mlp_hash(&t.net, 0, t.net.nparams), acc);
    if (t.c != c)
        coll_destroy(t.c);
    mlp_free(&t.net), mlp_free(&t.serial), mlp_work_free(&t.work), mlp_work_free(&t.serial_work);
    tl_free(&t.tl);
    free(t.bx), free(t.sx), free(t.by), free(t.sy), free(t.perm);
    ex_undo_free(&t.undo);
    mnist_free(&train_set), mnist_free(&test_set);
    return rc;
}

int main(int argc, char **argv)
{
    return ex_main(argc, argv,
                   "dp_train [--np N] [--epochs E] [--batch B (multiple of N)] [--lr LR] "
                   "[--codec none|fp16|bf16|int8] [--steps S] [--check-serial K] [--data DIR] "
                   "[--json FILE] [--trace FILE] [--seed S] [--lr-schedule cosine|const] "
                   "[--elastic] [--heal]",
                   NULL, train);
}
