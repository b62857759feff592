/* IDX reader over zlib: big-endian header (magic, dimensions), then unsigned bytes. */
#include "mnist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int read_u32(gzFile f, uint32_t *v)
{
    unsigned char b[4];
    if (gzread(f, b, 4) != 4)
        return -1;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 0;
}

/* Reads an IDX file of `dims` dimensions into a fresh byte array. */
static unsigned char *read_idx(const char *path, int dims, size_t *count, size_t *per,
                               char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s (install dataset-fashion-mnist or pass --data)",
                 path);
        return NULL;
    }
    uint32_t magic, d[3] = { 1, 1, 1 };
    int ok = read_u32(f, &magic) == 0 && magic == (uint32_t)(0x800 + dims);
    for (int i = 0; ok && i < dims; i++)
        ok = read_u32(f, &d[i]) == 0;
    size_t n = d[0], each = (size_t)d[1] * d[2];
    unsigned char *buf = ok && n && n < 10000000 && each <= 4096 ? malloc(n * each) : NULL;
    if (buf && gzread(f, buf, (unsigned)(n * each)) != (int)(n * each)) {
        free(buf);
        buf = NULL;
    }
    gzclose(f);
    if (!buf)
        snprintf(err, errlen, "%s is not a valid IDX file of %d dimensions", path, dims);
    *count = n;
    *per = each;
    return buf;
}

int mnist_load(const char *dir, int train, dataset *out, char *err, size_t errlen)
{
    char pi[1024], pl[1024];
    const char *base = dir ? dir : "/usr/share/datasets/fashion-mnist";
    const char *pre = train ? "train" : "t10k";
    snprintf(pi, sizeof(pi), "%s/%s-images-idx3-ubyte.gz", base, pre);
    snprintf(pl, sizeof(pl), "%s/%s-labels-idx1-ubyte.gz", base, pre);
    size_t n, dim, nl, one;
    unsigned char *img = read_idx(pi, 3, &n, &dim, err, errlen);
    unsigned char *lab = img ? read_idx(pl, 1, &nl, &one, err, errlen) : NULL;
    if (!lab || nl != n) {
        if (lab)
            snprintf(err, errlen, "%s has %zu labels for %zu images", pl, nl, n);
        free(img);
        free(lab);
        return -1;
    }
    out->n = n;
    out->dim = dim;
    out->x = malloc(n * dim * sizeof(float));
    out->y = lab;
    for (size_t i = 0; i < n * dim; i++)
        out->x[i] = img[i] / 255.0f;
    free(img);
    return 0;
}

void mnist_free(dataset *d)
{
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof(*d));
}
