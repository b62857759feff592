/* Helpers every trainer shares: a clock, the seeded shuffle every rank agrees on, and
 * gathering a batch of samples by index. */
#ifndef EX_BATCH_H
#define EX_BATCH_H

#include "mlp.h"
#include "mnist.h"

#include <stddef.h>
#include <stdint.h>

double ex_now_s(void);
/* Wall-clock seconds since the epoch: times that processes compare (a heal's phases). */
double ex_wall_s(void);
/* perm = a permutation of 0..n-1, the same on every rank for the same seed. */
void ex_shuffle(size_t *perm, size_t n, unsigned long long seed);
/* x, y = samples idx[0..n) of d. */
void ex_gather(const dataset *d, const size_t *idx, int n, float *x, uint8_t *y);

/* The one-process reference: `steps` steps of SGD on whole batches perm[k*batch ...]. */
void ex_train_serial(mlp *m, mlp_work *w, const dataset *d, const size_t *perm, int batch,
                     size_t steps, float lr, float momentum);

/* Samples per second of one process training a copy of m on whole batches (a few steps
 * from perm): the baseline of every trainer's strong-scaling speedup. m is unchanged. */
double ex_serial_rate(const mlp *m, const dataset *d, const size_t *perm, int batch, float lr,
                      float momentum);

#endif
