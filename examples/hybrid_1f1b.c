/* hybrid_1f1b: K pipeline stages x D data-parallel replicas of the MLP on Fashion-MNIST.
 * World rank r is stage r % K of replica r / K. coll_split makes one pipeline communicator
 * per replica (1F1B inside it, or GPipe) and one stage-group communicator per stage; after
 * each pipeline flush every stage all-reduces (avg, codec selectable) the gradients of its
 * own layers within its group, then all replicas take the same step.
 *   hybrid_1f1b [--np N] [--stages K] [--schedule 1f1b|gpipe] [--microbatches M]
 *               [--epochs E] [--batch B] [--lr LR] [--codec none|fp16|bf16|int8]
 *               [--lr-schedule cosine|const] [--steps S] [--check-serial K] [--data DIR]
 *               [--seed S] [--json FILE] [--trace FILE] [--elastic]
 * The global batch B is split across the D replicas. Replicas are checked bit-identical
 * every epoch; --check-serial K compares the weights after K steps with one process on
 * the whole batch (relative L2 within 1e-5 allowed: the summation order differs).
 * Prints per epoch the speedup over one process, each rank's compute, pipeline idle and
 * all-reduce time, peak activations stashed and the group's wire bytes next to 2P(D-1)/D;
 * the second step is drawn as a timeline (one row per rank: F, B, A) and, with --trace,
 * written as Chrome trace-event JSON. Final line: "test_accuracy A".
 * --elastic: when a rank is lost, the survivors shrink the world; a replica that lost a
 * rank cannot run its pipeline and leaves whole, the others re-form their pipelines and
 * stage groups, split the global batch over the replicas left, and redo the first step
 * not every rank finished, from the weights it began with.
 * --heal (under a launcher that restarts a dead rank: coll_run --max-restarts): nobody
 * leaves; the survivors shrink, grow back to full size as the replacement joins, and
 * the world is re-formed in role order (a rank's role is its place in the layout), the
 * replacement taking the lost rank's role; its stage's weights and optimizer state come
 * from a replica peer of that stage (the stage group), the position from rank 0, and the
 * step is redone at full size. Every run ends with "weights H", H a hash of the final
 * weights of every stage (rank 0). */
#include "common/batch.h"
#include "common/heal.h"
#include "common/mlp.h"
#include "common/mnist.h"
#include "common/options.h"
#include "common/pipeline.h"
#include "common/report.h"
#include "common/timeline.h"
#include "common/undo.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes[] = { 784, 512, 256, 128, 10 };

enum { COMPUTE, IDLE, REDUCE, WIRE, STASH_BYTES, NSTAT }; /* per-rank numbers gathered */

typedef struct {
    const ex_opts *o;
    coll_comm *first;                /* the world the caller gave (theirs to destroy) */
    coll_comm *world, *pipe, *group; /* group: the same stage of every replica */
    int replica, D;
    pipeline p;
    mlp net, serial;
    mlp_work whole;
    const dataset *train, *test;
    size_t *perm;
    double reduce_s, serial_sps;
    float lr;
    timeline tl;
    FILE *json;
    int reported;   /* epochs in the JSON file */
    ex_undo undo;   /* --elastic: this stage's weights and velocity as steps began */
    ex_heal_clock heal; /* --heal: the last heal's phases */
} trainer;

enum { LEAVES = -2 }; /* recover(): this rank's replica lost a rank */
enum { MAX_LOST = 64 };

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
    double t1 = ex_now_s();
    t->reduce_s += t1 - t0;
    tl_add(t->p.tl, 'A', -1, t0, t1);
    if (rc == COLL_OK)
        mlp_sgd(&t->net, t->lr, t->o->momentum);
    return rc;
}

/* COLL_OK with *every set when every stage group's replicas hold the same weights. */
static int replicas_identical(trainer *t, int *every)
{
    size_t from, n = pipe_params(&t->p, &from);
    uint64_t h = mlp_hash(&t->net, from, n), *all = malloc(sizeof(uint64_t) * (size_t)t->D);
    int rc = all ? coll_allgather(t->group, &h, all, 1, COLL_I64) : COLL_ENOMEM, ok = 1;
    for (int r = 0; rc == COLL_OK && r < t->D; r++)
        ok &= all[r] == h;
    free(all);
    return rc == COLL_OK ? coll_allreduce(t->world, &ok, every, 1, COLL_I32, COLL_MIN) : rc;
}

/* Relative L2 distance of this stage's weights from one process on the whole batch,
 * the largest over all stages; -1 when a rank was lost meanwhile (no check then: the
 * next step fails and the run recovers). */
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
    return coll_allreduce(t->world, &d, &worst, 1, COLL_F64, COLL_MAX) == COLL_OK ? worst : -1;
}

/* Step k, drawn as a timeline over the world when it is the second of the run. */
static int run_step(trainer *t, int epoch, size_t k, double *loss, int *correct)
{
    int traced = epoch == 0 && k == 1, rc = COLL_OK;
    t->p.tl = traced ? &t->tl : NULL;
    if (traced)
        rc = tl_begin(&t->tl, t->world);
    if (rc == COLL_OK)
        rc = step(t, k, loss, correct);
    if (rc == COLL_OK && traced)
        rc = tl_end(&t->tl, t->world, "rank", t->o->trace);
    t->p.tl = NULL;
    return rc;
}

static void report(trainer *t, int epoch, size_t steps, double wall, const double *sum,
                   double acc, const double *all)
{
    const ex_opts *o = t->o;
    int K = o->stages, M = o->micro, N = coll_size(t->world);
    double samples = (double)steps * o->batch, sps = samples / wall;
    double speedup = t->serial_sps > 0 ? sps / t->serial_sps : 0;
    printf("epoch %d: lr %.4f loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s, speedup "
           "%.2fx | %d stages x %d replicas, %s, M %d, bubble formula %.3f\n",
           epoch, t->lr, sum[0] / samples, sum[1] / samples, acc, sps, speedup, K, t->D,
           o->onef1b ? "1f1b" : "gpipe", M, (double)(K - 1) / (M + K - 1));
    if (t->json)
        fprintf(t->json, "%s{\"epoch\":%d,\"lr\":%.5f,\"loss\":%.6f,\"train_acc\":%.5f,"
                         "\"test_acc\":%.5f,\"samples_per_s\":%.1f,\"speedup\":%.3f,\"ranks\":[",
                t->reported++ ? ",\n" : "", epoch, t->lr, sum[0] / samples,
                sum[1] / samples, acc, sps,
                speedup);
    for (int r = 0; r < N; r++) {
        const double *v = all + NSTAT * r;
        size_t P = pipe_stage_params(&t->net, K, r % K);
        ex_memory mem = {4.0 * P, 4.0 * P, 4.0 * P, v[STASH_BYTES], 0};
        double formula = 2.0 * P * ex_wire_bytes(o->codec) * (t->D - 1) / t->D;
        printf("  rank %d (stage %d, replica %d): compute %.2fs pipeline idle %.2fs "
               "all-reduce %.2fs | params %.0f KiB, peak activations %.0f KiB | group wire "
               "%.0f B/step (2P(D-1)/D = %.0f)\n",
               r, r % K, r / K, v[COMPUTE], v[IDLE], v[REDUCE], mem.params / 1024,
               v[STASH_BYTES] / 1024, v[WIRE], formula);
        if (t->json)
            fprintf(t->json, "%s{\"stage\":%d,\"replica\":%d,\"compute_s\":%.4f,"
                             "\"idle_s\":%.4f,\"allreduce_s\":%.4f,\"peak_stash_bytes\":%.0f,"
                             "\"wire_bytes_per_step\":%.0f,\"formula_bytes_per_step\":%.0f",
                    r ? "," : "", r % K, r / K, v[COMPUTE], v[IDLE], v[REDUCE], v[STASH_BYTES],
                    v[WIRE], formula);
        if (t->json)
            ex_json_memory(t->json, &mem), fprintf(t->json, "}");
    }
    if (t->json)
        fprintf(t->json, "]}");
}

/* The pipelines (one per replica) and stage groups over the world as it is now, and
 * this rank's pipeline on them. */
static int form_groups(trainer *t)
{
    const ex_opts *o = t->o;
    int me = coll_rank(t->world), K = o->stages, N = coll_size(t->world);
    t->D = N / K, t->replica = me / K;
    if (N % K || o->batch % (t->D * o->micro)) {
        fprintf(stderr, "hybrid_1f1b: %d ranks do not make %d stages with batch %d in %d "
                        "micro-batches per replica\n", N, K, o->batch, o->micro);
        return 2;
    }
    int rc = coll_split(t->world, me / K, me % K, &t->pipe) ||
             coll_split(t->world, me % K, me / K, &t->group);
    if (!rc && o->codec != COLL_CODEC_NONE)
        rc = coll_set_codec(t->group, o->codec);
    return rc || pipe_init(&t->p, t->pipe, &t->net, o->batch / t->D, o->micro, o->onef1b,
                           o->recompute, t->train);
}

/* This stage's weights and velocity. */
static float *stage_of(trainer *t, float *all)
{
    size_t from;
    pipe_params(&t->p, &from);
    return all + from;
}

static void say_lost(const int *lost, int k, int left, int D, int B, size_t from)
{
    printf("elastic: lost rank(s)");
    for (int i = 0; i < k && i < 64; i++)
        printf(" %d", lost[i]);
    printf(" of the old numbering; %d ranks (%d replicas) go on, the global batch of %d split "
           "%d ways, from step %zu of the run\n", left, D, B, D, from);
    fflush(stdout);
}

/* The first replica whose rank of `stage` is not among the nl lost roles, or -1: the one
 * that hands the stage's state on. */
static int state_root(const trainer *t, int stage, const int64_t *lost, int64_t nl)
{
    int K = t->o->stages;
    for (int d = 0; d < t->D; d++) {
        int gone = 0;
        for (int64_t i = 0; i < nl && i < MAX_LOST; i++)
            gone |= lost[i] == d * K + stage;
        if (!gone)
            return d;
    }
    return -1;
}

/* Whether every stage keeps a replica after losing these roles (every survivor decides
 * alike, from the agreed set, before anyone grows). */
static int healable(const trainer *t, const int *lost, int nl)
{
    int64_t roles[MAX_LOST];
    for (int i = 0; i < nl && i < MAX_LOST; i++)
        roles[i] = lost[i];
    for (int i = 0; i < nl && i < MAX_LOST; i++)
        if (state_root(t, lost[i] % t->o->stages, roles, nl) < 0)
            return 0;
    return nl <= MAX_LOST;
}

/* --heal, on the grown communicator g (survivors and newcomers alike; role -1 on a
 * newcomer): rank 0 of g, a survivor, says where the run goes on (the step *from, and
 * *last, the furthest any rank got) and which roles were lost (lost, nl); newcomers take
 * them in the order they joined. The world is split in role order, its groups formed,
 * and every stage group hands its stage's weights and velocity on from a replica that
 * has them. COLL_OK or a COLL_E* code. */
static int rejoin(trainer *t, coll_comm *g, int role, const int *lost, int nl, size_t *from,
                  size_t *last)
{
    int64_t m[3 + MAX_LOST] = {(int64_t)*from, (int64_t)*last, nl};
    for (int i = 0; i < nl && i < MAX_LOST; i++)
        m[3 + i] = lost[i];
    int rc = coll_broadcast(g, m, 3 + MAX_LOST, COLL_I64, 0);
    int fresh = coll_rank(g) - (coll_size(g) - (int)m[2]); /* its place among newcomers */
    if (rc == COLL_OK && role < 0)
        role = fresh >= 0 && fresh < MAX_LOST ? (int)m[3 + fresh] : -1;
    if (rc == COLL_OK && (rc = coll_split(g, 0, role, &t->world)) == COLL_OK)
        rc = form_groups(t) ? COLL_EINVAL : COLL_OK;
    int root = rc == COLL_OK ? state_root(t, role % t->o->stages, m + 3, m[2]) : -1;
    if (rc == COLL_OK && root < 0)
        rc = COLL_EINVAL; /* healable() said so on every survivor: they never grow */
    size_t at = 0, n = rc == COLL_OK ? pipe_params(&t->p, &at) : 0;
    float *bufs[2] = {t->net.params + at, t->net.velocity + at};
    for (int i = 0; rc == COLL_OK && i < 2; i++)
        rc = coll_broadcast(t->group, bufs[i], n, COLL_F32, root);
    *from = (size_t)m[0], *last = (size_t)m[1];
    t->heal.done = ex_wall_s();
    t->heal.bytes = sizeof(m) + 2 * sizeof(float) * n;
    return rc;
}

/* --heal on a survivor, after the shrink to next and the undo: grow back to the job's
 * size and rejoin in role (`was`) order. COLL_OK or a COLL_E* code. */
static int heal(trainer *t, coll_comm *next, int was, const int *lost, int nl, size_t *from,
                size_t *last)
{
    coll_comm *g = NULL;
    t->heal.shrunk = ex_wall_s();
    int rc = ex_heal_offer(next, coll_size(next) + nl, &g);
    t->heal.grown = ex_wall_s();
    if (rc == COLL_OK)
        rc = rejoin(t, g, was, lost, nl, from, last);
    if (rc == COLL_OK) /* by its role; the summary by rank 0 of g, a survivor */
        ex_heal_report(&t->heal, coll_rank(t->world), coll_rank(g) == 0, coll_size(g));
    coll_destroy(g);
    return rc;
}

/* --elastic: step k failed here (steps count on across epochs, each epoch's close one of
 * them). The survivors agree on who is gone; a replica that lost a rank leaves whole
 * (LEAVES on its ranks), unless --heal brings the lost rank back; the others re-form
 * their groups and go back to the first step not every rank finished (returned), from
 * the weights it began with, and learn the furthest step any rank got (*last). -1 when
 * recovery failed. */
static int recover(trainer *t, size_t k, size_t *last)
{
    int K = t->o->stages, was = coll_rank(t->world), lost[MAX_LOST], leave = 0;
    t->heal.seen = ex_wall_s();
    coll_abort(t->pipe); /* whoever waits in them stops now, not at its timeout */
    coll_abort(t->group);
    coll_comm *next = NULL, *rest = NULL;
    if (coll_shrink(t->world, &next) != COLL_OK) {
        fprintf(stderr, "rank %d: shrink: %s\n", was, coll_last_error(NULL));
        return -1;
    }
    int nl = coll_failed_ranks(t->world, lost, MAX_LOST);
    for (int i = 0; i < nl && i < MAX_LOST && !t->o->heal; i++)
        leave |= lost[i] / K == was / K;
    int rc = coll_split(next, leave ? -1 : 0, was, &rest);
    coll_destroy(next);
    if (t->world != t->first)
        coll_destroy(t->world);
    coll_destroy(t->pipe);
    coll_destroy(t->group);
    pipe_free(&t->p);
    t->world = rest, t->pipe = t->group = NULL;
    if (rc != COLL_OK || leave) {
        if (leave)
            printf("elastic: rank %d leaves with its replica %d\n", was, was / K);
        return rc != COLL_OK ? -1 : LEAVES;
    }
    size_t from = 0;
    int64_t mine = (int64_t)k, most = 0;
    if (coll_allreduce(rest, &mine, &most, 1, COLL_I64, COLL_MAX) != COLL_OK ||
        ex_undo_agree(&t->undo, rest, k, stage_of(t, t->net.params),
                      stage_of(t, t->net.velocity), &from) != COLL_OK)
        return -1;
    *last = (size_t)most;
    double compute = t->p.compute, idle = t->p.idle;
    if (coll_rank(rest) == 0)
        say_lost(lost, nl, coll_size(rest), t->o->heal ? t->D : coll_size(rest) / K,
                 t->o->batch, from);
    if (t->o->heal && !healable(t, lost, nl)) {
        fprintf(stderr, "heal: rank %d: a stage lost every replica (or more than %d ranks "
                        "were lost): nothing to rebuild it from\n", was, MAX_LOST);
        rc = -1;
    } else if (t->o->heal) {
        t->world = NULL;
        rc = heal(t, rest, was, lost, nl, &from, last);
        coll_destroy(rest);
    } else {
        rc = form_groups(t);
    }
    if (rc != 0)
        return -1;
    t->p.compute = compute, t->p.idle = idle;
    return (int)from;
}

/* The epoch's closing exchanges: replicas compared, every rank's numbers gathered, the
 * test accuracy through the pipelines, and rank 0's report. A COLL_E* code when one
 * failed; 2 when replicas differ. */
static int close_epoch(trainer *t, int epoch, size_t steps, const double *mine, const double *tot,
                       double wall, double *acc)
{
    int N = coll_size(t->world), same = 0;
    double sum[2], *all = malloc(sizeof(double) * NSTAT * (size_t)N);
    int rc = all ? replicas_identical(t, &same) : COLL_ENOMEM;
    if (rc == COLL_OK && !same) {
        fprintf(stderr, "rank %d: replicas differ after epoch %d\n", coll_rank(t->world), epoch);
        rc = 2;
    }
    if (rc == COLL_OK)
        rc = coll_allgather(t->world, mine, all, NSTAT, COLL_F64);
    if (rc == COLL_OK)
        rc = coll_allreduce(t->world, tot, sum, 2, COLL_F64, COLL_SUM);
    if (rc == COLL_OK && (*acc = pipe_evaluate(&t->p, t->test)) < 0)
        rc = COLL_EPEER;
    if (rc == COLL_OK && coll_rank(t->world) == 0)
        report(t, epoch, steps, wall, sum, *acc, all);
    free(all);
    return rc;
}

/* Steps per epoch. */
static size_t epoch_steps(const trainer *t)
{
    size_t steps = t->train->n / (size_t)t->o->batch;
    return t->o->steps > 0 && (size_t)t->o->steps < steps ? (size_t)t->o->steps : steps;
}

/* Epoch `epoch` from step `first` (a replacement's first epoch: where it joined); 0,
 * LEAVES, or an exit status. */
static int run_epoch(trainer *t, int epoch, size_t first, double *acc)
{
    const ex_opts *o = t->o;
    size_t steps = epoch_steps(t), k = first, wire_from = first, last;
    size_t base = (size_t)epoch * (steps + 1); /* --elastic's step numbers, close included */
    ex_shuffle(t->perm, t->train->n, o->seed * 1000003ULL + (unsigned long long)epoch);
    t->lr = ex_lr(o, epoch);
    int correct = 0;
    if (epoch == 0 && first == 0 && coll_rank(t->world) == 0)
        t->serial_sps = ex_serial_rate(&t->net, t->train, t->perm, o->batch, o->lr, o->momentum);
    t->p.compute = t->p.idle = t->reduce_s = 0;
    coll_stats g0, g1;
    coll_get_stats(t->group, &g0);
    double loss = 0, t0 = ex_now_s(), wall = 0;
    while (k <= steps) {
        int rc;
        if (o->elastic)
            ex_undo_keep(&t->undo, base + k, stage_of(t, t->net.params),
                         stage_of(t, t->net.velocity));
        if (k < steps) {
            rc = run_step(t, epoch, k, &loss, &correct);
        } else {
            wall = ex_now_s() - t0;
            coll_get_stats(t->group, &g1);
            double mine[NSTAT] = { t->p.compute, t->p.idle, t->reduce_s,
                                   (double)(g1.wire_tx - g0.wire_tx) / (double)(steps - wire_from),
                                   (double)t->p.peak_stash * pipe_stash_bytes(&t->p) };
            double tot[2] = { loss, correct };
            if ((rc = close_epoch(t, epoch, steps, mine, tot, wall, acc)) == 2)
                return 2;
        }
        if (rc != COLL_OK) {
            fprintf(stderr, "rank %d: step %zu: %s (%s / %s)\n", coll_rank(t->world), k,
                    coll_strerror(rc), coll_last_error(t->pipe), coll_last_error(t->group));
            int from = o->elastic ? recover(t, base + k, &last) : -1;
            if (from < 0)
                return from == LEAVES ? LEAVES : 1;
            /* Ranks that finished the last epoch's close went on to this epoch's first
             * step; ranks in a close others finished leave it unreported (as dp_train). */
            if (k == steps && last > base + k) {
                fprintf(stderr, "rank %d: epoch %d's close ended on other ranks: not reported\n",
                        coll_rank(t->world), epoch);
                return 0;
            }
            k = wire_from = (size_t)from < base ? 0 : (size_t)from - base;
            coll_get_stats(t->group, &g0);
            continue;
        }
        if (epoch == 0 && (int)k + 1 == o->check_serial) {
            double d = serial_distance(t, k + 1);
            if (d >= 0 && coll_rank(t->world) == 0)
                printf("check: after %zu steps, weights differ from one process by %.2e "
                       "(relative L2, largest stage)\n", k + 1, d);
            if (d > 1e-5)
                return 3;
        }
        k++;
    }
    return 0;
}

/* Rank 0's line "weights H": H mixes the hash of every stage's weights (replica 0's;
 * the replicas were checked identical). COLL_OK, or the gather's error. */
static int say_weights(trainer *t)
{
    int K = t->o->stages, N = coll_size(t->world);
    size_t from, n = pipe_params(&t->p, &from);
    uint64_t h = mlp_hash(&t->net, from, n), *all = malloc(sizeof(uint64_t) * (size_t)N);
    int rc = all ? coll_allgather(t->world, &h, all, 1, COLL_I64) : COLL_ENOMEM;
    uint64_t mix = 1469598103934665603ULL; /* FNV-1a's, over the stages' hashes */
    for (int s = 0; rc == COLL_OK && s < K; s++)
        mix = (mix ^ all[s]) * 1099511628211ULL;
    if (rc == COLL_OK && coll_rank(t->world) == 0)
        printf("weights %016llx\n", (unsigned long long)mix);
    free(all);
    return rc;
}

static int train(coll_comm *world, const ex_opts *o)
{
    dataset tr, te;
    if (ex_load_data(o, "hybrid_1f1b", &tr, &te) != 0)
        return 2;
    trainer t = { .o = o, .first = world, .world = world, .train = &tr, .test = &te };
    int rc = tl_init(&t.tl, 2 * o->micro + 1) || mlp_init(&t.net, sizes, 4, o->seed) ||
             mlp_init(&t.serial, sizes, 4, o->seed) || mlp_work_init(&t.whole, &t.net, o->batch);
    size_t at = 0, last = 0; /* a replacement: the step it joins at, counted as --elastic's */
    rc = rc ? rc : o->joined ? rejoin(&t, world, -1, NULL, 0, &at, &last) : form_groups(&t);
    int e0 = (int)(at / (epoch_steps(&t) + 1));
    size_t k0 = at % (epoch_steps(&t) + 1);
    if (k0 == epoch_steps(&t) && last > at) /* that epoch's close ended on other ranks */
        e0++, k0 = 0;
    if (!rc && o->joined)
        ex_heal_joined(coll_rank(t.world), e0, k0, o->started, o->joined_at, t.heal.done);
    size_t from, n = rc ? 0 : pipe_params(&t.p, &from);
    if (!rc && o->elastic)
        rc = ex_undo_init(&t.undo, n);
    t.perm = malloc(sizeof(size_t) * tr.n);
    int me = coll_rank(world), K = o->stages, N = coll_size(world);
    if (me == 0 && !rc)
        printf("# hybrid_1f1b: %d stages x %d replicas, global batch %d (%d per replica, %d "
               "micro-batches), codec %d\n",
               K, t.D, o->batch, o->batch / t.D, o->micro, (int)o->codec);
    if (me == 0 && o->json && !(t.json = fopen(o->json, "w")))
        fprintf(stderr, "cannot write %s\n", o->json);
    if (t.json)
        fprintf(t.json, "{\"trainer\":\"hybrid_1f1b\",\"ranks\":%d,\"batch\":%d,\"stages\":%d,\"replicas\":%d,"
                        "\"schedule\":\"%s\",\"micro\":%d,\"codec\":%d,\"epochs\":[\n",
                N, o->batch, K, t.D, o->onef1b ? "1f1b" : "gpipe", o->micro, (int)o->codec);
    double acc = 0;
    for (int e = e0; !rc && e < o->epochs; e++)
        rc = run_epoch(&t, e, e == e0 ? k0 : 0, &acc);
    if (!rc)
        rc = say_weights(&t);
    if (t.json) {
        fprintf(t.json, "\n],\"test_accuracy\":%.5f}\n", acc);
        fclose(t.json);
    }
    if (t.world && coll_rank(t.world) == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    tl_free(&t.tl);
    pipe_free(&t.p);
    mlp_work_free(&t.whole);
    mlp_free(&t.net), mlp_free(&t.serial);
    free(t.perm);
    ex_undo_free(&t.undo);
    coll_destroy(t.pipe);
    coll_destroy(t.group);
    if (t.world != world)
        coll_destroy(t.world);
    mnist_free(&tr), mnist_free(&te);
    return rc == LEAVES ? 0 : rc < 0 ? 1 : rc; /* a COLL_E* code is a failure: 1 */
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
                   "[--seed S] [--lr-schedule cosine|const] [--json FILE] [--trace FILE] "
                   "[--elastic] [--heal]",
                   valid, train);
}
