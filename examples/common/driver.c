/* The shared epoch loop: see driver.h. */
#include "driver.h"

#include "batch.h"

#include <stdio.h>
#include <stdlib.h>

enum { LOSS, CORRECT };

static void report(ex_run *r, FILE *json, int epoch, size_t steps, double wall, const double *sum,
                   double acc, const double *per, double wire, double serial_sps)
{
    int n = coll_size(r->c);
    double samples = (double)steps * r->o->batch, sps = samples / wall;
    double speedup = serial_sps > 0 ? sps / serial_sps : 0;
    printf("epoch %d: lr %.4f loss %.4f train_acc %.4f test_acc %.4f | %.0f samples/s, speedup "
           "%.2fx | wire %.0f B/step (%s = %.0f)\n",
           epoch, r->lr, sum[LOSS] / samples, sum[CORRECT] / samples, acc, sps, speedup, wire,
           r->formula_text, r->formula);
    for (int k = 0; k < n; k++)
        printf("  rank %d: compute %.2fs comm %.2fs\n", k, per[2 * k], per[2 * k + 1]);
    ex_print_memory("per rank", &r->mem);
    fflush(stdout);
    if (!json)
        return;
    fprintf(json, "%s{\"epoch\":%d,\"lr\":%.5f,\"loss\":%.6f,\"train_acc\":%.5f,"
                  "\"test_acc\":%.5f,\"samples_per_s\":%.1f,\"speedup\":%.3f,\"compute_s\":%.3f,"
                  "\"comm_s\":%.3f,\"wire_bytes_per_step\":%.0f,\"formula_bytes_per_step\":%.0f",
            epoch ? ",\n" : "", epoch, r->lr, sum[LOSS] / samples, sum[CORRECT] / samples, acc,
            sps, speedup, per[0], per[1], wire, r->formula);
    ex_json_memory(json, &r->mem);
    fprintf(json, "}");
}

/* Rank 0 times one process on whole batches of a model built from the same seed. */
static double serial_rate(ex_run *r)
{
    mlp whole;
    double sps = 0;
    if (mlp_init(&whole, r->sizes, r->layers, r->o->seed) == 0)
        sps = ex_serial_rate(&whole, r->train, r->perm, r->o->batch, r->o->lr, r->o->momentum);
    mlp_free(&whole);
    return sps;
}

/* The steps of one epoch; the second step of the run is drawn. */
static int run_steps(ex_run *r, int epoch, size_t steps, double *tot)
{
    int rc = COLL_OK, correct = 0;
    for (size_t k = 0; rc == COLL_OK && k < steps; k++) {
        int traced = epoch == 0 && k == 1;
        if (traced)
            rc = tl_begin(&r->tl, r->c);
        rc = rc ? rc : r->step(r, k, &tot[LOSS], &correct);
        if (rc == COLL_OK && traced)
            rc = tl_end(&r->tl, r->c, "rank", r->o->trace);
        if (rc == COLL_OK && epoch == 0 && (int)k + 1 == r->o->check_serial) {
            double d = r->distance(r, k + 1);
            if (coll_rank(r->c) == 0)
                printf("check: after %zu steps, weights differ from one process by %.2e "
                       "(relative L2)\n", k + 1, d);
            if (d > 1e-5)
                return 3;
        }
    }
    tot[CORRECT] = correct;
    if (rc != COLL_OK)
        fprintf(stderr, "rank %d: %s\n", coll_rank(r->c), coll_last_error(r->c));
    return rc == COLL_OK ? 0 : 1;
}

static int run_epoch(ex_run *r, FILE *json, int epoch, double *acc, double *serial_sps)
{
    const ex_opts *o = r->o;
    int n = coll_size(r->c), me = coll_rank(r->c);
    size_t steps = r->train->n / (size_t)o->batch;
    steps = o->steps > 0 && (size_t)o->steps < steps ? (size_t)o->steps : steps;
    ex_shuffle(r->perm, r->train->n, o->seed * 1000003ULL + (unsigned long long)epoch);
    r->lr = ex_lr(o, epoch);
    if (epoch == 0 && me == 0)
        *serial_sps = serial_rate(r);
    coll_stats s0, s1;
    coll_get_stats(r->c, &s0);
    double tot[2] = { 0, 0 }, sum[2], t0 = ex_now_s();
    r->compute = r->comm = 0;
    int rc = run_steps(r, epoch, steps, tot);
    if (rc)
        return rc;
    double wall = ex_now_s() - t0, mine[2] = { r->compute, r->comm };
    coll_get_stats(r->c, &s1);
    double *per = malloc(sizeof(double) * 2 * (size_t)n);
    rc = !per || coll_allgather(r->c, mine, per, 2, COLL_F64) ||
         coll_allreduce(r->c, tot, sum, 2, COLL_F64, COLL_SUM);
    if (!rc && !r->split_batch) /* every rank saw the whole batch: count it once */
        sum[LOSS] /= n, sum[CORRECT] /= n;
    *acc = rc ? -1 : r->evaluate(r);
    if (*acc >= 0 && me == 0)
        report(r, json, epoch, steps, wall, sum, *acc, per,
               (double)(s1.wire_tx - s0.wire_tx) / (double)steps, *serial_sps);
    free(per);
    return rc || *acc < 0;
}

int ex_run_train(ex_run *r)
{
    FILE *json = NULL;
    int me = coll_rank(r->c), rc = 0;
    if (me == 0 && r->o->json && !(json = fopen(r->o->json, "w")))
        fprintf(stderr, "cannot write %s\n", r->o->json);
    if (json)
        fprintf(json, "{\"trainer\":\"%s\",\"ranks\":%d,\"batch\":%d,\"epochs\":[\n", r->name,
                coll_size(r->c), r->o->batch);
    double acc = 0, serial_sps = 0;
    for (int e = 0; !rc && e < r->o->epochs; e++)
        rc = run_epoch(r, json, e, &acc, &serial_sps);
    if (json) {
        fprintf(json, "\n],\"test_accuracy\":%.5f}\n", acc);
        fclose(json);
    }
    if (me == 0 && !rc)
        printf("test_accuracy %.4f\n", acc);
    return rc;
}
