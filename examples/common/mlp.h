/* A small multi-layer perceptron in plain C: dense layers with ReLU, softmax
 * cross-entropy, SGD with momentum. Parameters and gradients each live in one flat
 * array, so a data-parallel trainer all-reduces them in one call. Layer-wise forward and
 * backward are public so pipeline stages can run a range of layers. Deterministic for a
 * seed: same inputs, same bits. */
#ifndef EX_MLP_H
#define EX_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 8

typedef struct {
    int layers;                   /* dense layers */
    int size[MLP_MAX_LAYERS + 1]; /* size[0] inputs ... size[layers] classes */
    size_t nparams;
    float *params, *grads, *velocity; /* nparams each */
    float *W[MLP_MAX_LAYERS], *b[MLP_MAX_LAYERS];   /* views into params */
    float *dW[MLP_MAX_LAYERS], *db[MLP_MAX_LAYERS]; /* views into grads */
} mlp;

/* Activations and their gradients for batches of up to `batch` samples. */
typedef struct {
    int batch;
    float *act[MLP_MAX_LAYERS + 1]; /* act[0] is the input (not owned) */
    float *grad[MLP_MAX_LAYERS + 1];
} mlp_work;

int mlp_init(mlp *m, const int *sizes, int layers, uint64_t seed);
void mlp_free(mlp *m);
int mlp_work_init(mlp_work *w, const mlp *m, int batch);
void mlp_work_free(mlp_work *w);

/* The dense kernels under every layer, for trainers that hold a slice of a layer (tensor
 * parallel, sharded): W is K x N row-major. out = in W (+ b when b) over n samples, ReLU'd
 * when relu. */
void mlp_dense_forward(const float *W, const float *b, const float *in, float *out, int n, int K,
                       int N, int relu);
/* dW += in^T dout and, when db, db += the column sums of dout; when din, din = dout W^T
 * times the ReLU derivative of in (in is always a ReLU output or the data). */
void mlp_dense_backward(const float *W, float *dW, float *db, const float *in, const float *dout,
                        float *din, int n, int K, int N);

/* out = act(in W + b) for layer l over n samples (ReLU on all but the last layer). */
void mlp_layer_forward(const mlp *m, int l, const float *in, float *out, int n);
/* Given dout (gradient at layer l's output, after the activation's derivative), adds
 * to dW[l] and db[l] and, when din is not NULL, writes the gradient at the input times
 * the ReLU derivative of the input. */
void mlp_layer_backward(mlp *m, int l, const float *in, const float *dout, float *din, int n);
/* Softmax cross-entropy on logits (n x classes): writes d(mean loss)/d(logits) with the
 * mean taken over `norm` samples; returns the summed loss; counts correct predictions. */
double mlp_loss_grad(const float *logits, const uint8_t *y, int n, int classes, int norm,
                     float *dlogits, int *correct);

/* Forward over n samples: w->act[0] = x, ..., w->act[layers] the logits. */
void mlp_forward(const mlp *m, mlp_work *w, const float *x, int n);
/* After mlp_forward on the same samples: the loss gradient, then every layer's backward,
 * adding to grads (mean loss over `norm` samples). Returns the summed loss; adds correct
 * predictions. */
double mlp_backward(mlp *m, mlp_work *w, const uint8_t *y, int n, int norm, int *correct);
/* Zeroes the gradients, runs forward and backward over n samples, gradients of the mean
 * loss over `norm` samples. Returns the summed loss; adds correct predictions. */
double mlp_train_batch(mlp *m, mlp_work *w, const float *x, const uint8_t *y, int n, int norm,
                       int *correct);
/* v = momentum v + grads; params -= lr v. */
void mlp_sgd(mlp *m, float lr, float momentum);
/* The same update on n values of any slice (a shard). */
void mlp_sgd_span(float *params, float *velocity, const float *grads, size_t n, float lr,
                  float momentum);
/* Bytes mlp_work_init allocates for `batch` samples of m: activations and their gradients. */
size_t mlp_work_bytes(const mlp *m, int batch);
/* Accuracy over n samples (batches of w->batch). */
double mlp_accuracy(const mlp *m, mlp_work *w, const float *x, const uint8_t *y, size_t n);
/* 64-bit FNV-1a of params[from, from + n), for checking replicas are identical. */
uint64_t mlp_hash(const mlp *m, size_t from, size_t n);

#endif
