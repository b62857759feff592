/* One pipeline of the MLP: the layers split into K stages, one rank of `c` each; a batch
 * is cut into micro-batches whose activations go forward and whose gradients come back
 * with send/recv, in GPipe or 1F1B order. Backwards run in micro-batch order under both
 * schedules, so gradients add up in the same order as one process on the same batch. */
#ifndef EX_PIPELINE_H
#define EX_PIPELINE_H

#include "collective.h"
#include "mlp.h"
#include "mnist.h"

typedef struct {
    char kind; /* 'F' or 'B' */
    int mb;
    double t0, t1; /* seconds, this process's monotonic clock */
} pipe_event;

typedef struct {
    coll_comm *c; /* rank = stage */
    int stage, K, lo, hi; /* this stage's layers [lo, hi) */
    int micro, mb, onef1b;
    mlp *net;
    mlp_work *work; /* one per micro-batch */
    coll_req **sends;
    int nsends, stashed, peak_stash;
    double compute, idle; /* seconds in kernels, and waiting for a peer */
    pipe_event *events;   /* while recording: the kernels of one step */
    int nevents, record;
    const dataset *train;
    uint8_t *y;
} pipeline;

int pipe_init(pipeline *p, coll_comm *c, mlp *net, int batch, int micro, int onef1b,
              const dataset *train);
void pipe_free(pipeline *p);
/* Zeroes net->grads and runs one batch (samples idx[0 .. micro x mb)): gradients of the
 * mean loss over `norm` samples. Loss and correct predictions add up on the last stage.
 * With order != NULL, writes the schedule that ran ("F0 F1 B0 ..."). */
int pipe_step(pipeline *p, const size_t *idx, int norm, double *loss, int *correct, char *order,
              size_t orderlen);
/* Records the next step's kernels, then gathers every stage's on rank 0, which prints an
 * ASCII timeline (one row per stage) and, with path != NULL, writes a Chrome trace-event
 * JSON file (one track per stage; open it in Perfetto). Collective over the pipeline. */
int pipe_traced_step(pipeline *p, const size_t *idx, int norm, double *loss, int *correct,
                     const char *path);

/* Forward only over the test set; every stage gets the accuracy. */
double pipe_evaluate(pipeline *p, const dataset *test);
/* This stage's parameters: [*from, *from + return) of net->params. */
size_t pipe_params(const pipeline *p, size_t *from);

#endif
