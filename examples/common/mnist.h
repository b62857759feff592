/* Fashion-MNIST (or MNIST) from gzipped IDX files: images as floats in [0, 1], labels. */
#ifndef EX_MNIST_H
#define EX_MNIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n, dim; /* samples, pixels per sample */
    float *x;      /* n x dim */
    uint8_t *y;    /* n labels, 0..9 */
} dataset;

/* Loads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. dir NULL: the Debian
 * package's /usr/share/datasets/fashion-mnist. Returns 0, or -1 with a message in err. */
int mnist_load(const char *dir, int train, dataset *out, char *err, size_t errlen);
void mnist_free(dataset *d);

#endif
