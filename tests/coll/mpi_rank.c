/* One rank started by mpirun (or srun/torchrun): joins through env:// with rank and size
 * from the launcher's variables, checks an all-reduce and an all-gather, exits 0. */
#include "perf/verify.h"
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    coll_comm *c = NULL;
    int rc = coll_init(&c, "env://", -1, -1, NULL);
    if (rc != COLL_OK) {
        fprintf(stderr, "coll_init(env://): %s: %s\n", coll_strerror(rc), coll_last_error(NULL));
        return 1;
    }
    int n = coll_size(c), me = coll_rank(c);
    enum { COUNT = 100003 };
    float *buf = malloc(sizeof(float) * COUNT);
    int *ranks = malloc(sizeof(int) * (size_t)n);
    cl_fill(buf, COUNT, COLL_F32, COLL_SUM, me, 0);
    rc = coll_allreduce(c, buf, buf, COUNT, COLL_F32, COLL_SUM);
    size_t wrong = rc == COLL_OK ? cl_check_reduce(buf, COUNT, COLL_F32, COLL_SUM, n, 0) : 1;
    if (rc == COLL_OK)
        rc = coll_allgather(c, &me, ranks, 1, COLL_I32);
    for (int r = 0; rc == COLL_OK && r < n; r++)
        wrong += ranks[r] != r;
    printf("rank %d of %d: %s, %zu wrong\n", me, n, coll_strerror(rc), wrong);
    coll_destroy(c);
    free(buf);
    free(ranks);
    return rc == COLL_OK && wrong == 0 ? 0 : 1;
}
