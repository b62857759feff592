#include "undo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ex_undo_init(ex_undo *u, size_t n)
{
    u->n = n;
    u->slot[0] = malloc(2 * n * sizeof(float));
    u->slot[1] = malloc(2 * n * sizeof(float));
    return u->slot[0] && u->slot[1] ? 0 : -1;
}

void ex_undo_free(ex_undo *u)
{
    free(u->slot[0]);
    free(u->slot[1]);
    u->slot[0] = u->slot[1] = NULL;
}

void ex_undo_keep(ex_undo *u, size_t k, const float *w, const float *v)
{
    memcpy(u->slot[k % 2], w, u->n * sizeof(float));
    memcpy(u->slot[k % 2] + u->n, v, u->n * sizeof(float));
}

int ex_undo_agree(ex_undo *u, coll_comm *c, size_t k, float *w, float *v, size_t *from)
{
    int64_t mine = (int64_t)k, first = 0;
    int rc = coll_allreduce(c, &mine, &first, 1, COLL_I64, COLL_MIN);
    if (rc == COLL_OK && first + 1 < mine) {
        fprintf(stderr, "rank %d: the others failed at step %lld, this rank at %lld: no "
                        "weights kept that far back\n",
                coll_rank(c), (long long)first, (long long)mine);
        rc = COLL_EMISMATCH;
    }
    if (rc == COLL_OK && first < mine) {
        memcpy(w, u->slot[first % 2], u->n * sizeof(float));
        memcpy(v, u->slot[first % 2] + u->n, u->n * sizeof(float));
    }
    *from = (size_t)first;
    return rc;
}
