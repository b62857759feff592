/* The epoch loop of a trainer whose model is split some way across the ranks of one
 * communicator (fsdp_train, tp_train): it shuffles, schedules the learning rate, times
 * the steps, draws the second one, checks against one process, evaluates and reports
 * (stdout and --json) in one format. The strategy supplies its step, its distance from a
 * one-process run, its evaluation, its wire-byte formula and its memory. */
#ifndef EX_DRIVER_H
#define EX_DRIVER_H

#include "collective.h"
#include "mlp.h"
#include "mnist.h"
#include "options.h"
#include "report.h"
#include "timeline.h"

typedef struct ex_run ex_run;
struct ex_run {
    coll_comm *c;
    const ex_opts *o;
    const dataset *train, *test;
    const int *sizes; /* the model, as mlp_init takes it */
    int layers;
    const char *name;  /* "fsdp" */
    int split_batch;   /* 1: ranks share the batch (sum loss); 0: each holds all of it */
    double formula;    /* wire bytes per step per rank by the strategy's formula */
    const char *formula_text;
    ex_memory mem;     /* what one rank holds */
    /* kept by the loop for the strategy */
    size_t *perm;
    float lr;
    double compute, comm; /* seconds this epoch; the step adds to them */
    timeline tl;          /* the step records into it (tl_add) */
    int (*step)(ex_run *r, size_t k, double *loss, int *correct);
    double (*distance)(ex_run *r, size_t steps); /* relative L2 from one process */
    double (*evaluate)(ex_run *r);               /* test accuracy, < 0 on failure */
};

/* Runs --epochs epochs; rank 0 prints and writes the report and the final
 * "test_accuracy A" line. Returns 0, 1 when a collective failed, 3 when the weights
 * moved further than 1e-5 from one process. r->perm and r->tl must be allocated. */
int ex_run_train(ex_run *r);

#endif
