/* One pipeline of the MLP: the layers split into K stages, one rank of `c` each; a batch
 * is cut into micro-batches whose activations go forward and whose gradients come back
 * with send/recv, in GPipe or 1F1B order. Backwards run in micro-batch order under both
 * schedules, so gradients add up in the same order as one process on the same batch. */
#ifndef EX_PIPELINE_H
#define EX_PIPELINE_H

#include "collective.h"
#include "mlp.h"
#include "mnist.h"
#include "timeline.h"

typedef struct {
    coll_comm *c; /* rank = stage */
    int stage, K, lo, hi; /* this stage's layers [lo, hi) */
    int micro, mb, onef1b;
    int recompute; /* stash only boundary activations, redo the forward in the backward */
    mlp *net;
    mlp_work *work;   /* one per micro-batch */
    mlp_work scratch; /* with recompute: the interior activations every micro-batch shares */
    coll_req **sends;
    int nsends, stashed, peak_stash;
    double compute, idle; /* seconds in kernels, and waiting for a peer */
    timeline *tl;         /* where kernels are recorded, or NULL */
    const dataset *train;
    uint8_t *y;
} pipeline;

/* Cuts the net's layers into K contiguous stages whose largest has the fewest parameters
 * (a dense layer's forward and backward work grows with its parameters; sparse inputs
 * make the first layer cheaper than that): stage s holds layers [bound[s], bound[s+1]). */
void pipe_split(const mlp *net, int K, int *bound);
/* Returns -1 when the pipeline cannot be built (more stages than layers, micro does not
 * divide batch, out of memory). With recompute, a micro-batch keeps only its stage input
 * (and, but on the last stage, its output, which is being sent) from its forward to its
 * backward; the backward first runs the stage's forward again into one shared scratch.
 * The kernels see the same inputs in the same order, so the weights come out the same
 * bits either way. */
int pipe_init(pipeline *p, coll_comm *c, mlp *net, int batch, int micro, int onef1b,
              int recompute, const dataset *train);
void pipe_free(pipeline *p);
/* Zeroes net->grads and runs one batch (samples idx[0 .. micro x mb)): gradients of the
 * mean loss over `norm` samples. Loss and correct predictions add up on the last stage.
 * With order != NULL, writes the schedule that ran ("F0 F1 B0 ..."). */
int pipe_step(pipeline *p, const size_t *idx, int norm, double *loss, int *correct, char *order,
              size_t orderlen);
/* Activation bytes one micro-batch keeps on this stage until its backward: the stage's
 * input and every layer output, or with recompute the input and the sent output. */
size_t pipe_stash_bytes(const pipeline *p);
/* Parameters of stage k of K, split as pipe_split cuts them. */
size_t pipe_stage_params(const mlp *net, int K, int k);

/* Forward only over the test set; every stage gets the accuracy (-1 when a send, receive
 * or the broadcast failed). */
double pipe_evaluate(pipeline *p, const dataset *test);
/* This stage's parameters: [*from, *from + return) of net->params. */
size_t pipe_params(const pipeline *p, size_t *from);

#endif
