#include "survivors.h"

#include "common/harness.h"

#include <stdint.h>
#include <stdio.h>

int survivors_sum(coll_comm *c, int orig, unsigned alive)
{
    int32_t v[1000], want = 0, size = 0;
    for (int r = 0; r < 32; r++)
        if (alive >> r & 1) {
            want += r;
            size++;
        }
    for (int i = 0; i < 1000; i++)
        v[i] = orig + i;
    int rc = coll_allreduce(c, v, v, 1000, COLL_I32, COLL_SUM);
    if (rc != COLL_OK)
        return rc;
    for (int i = 0; i < 1000; i++)
        FAIL_IF(v[i] != want + i * size, "element %d: %d, want %d", i, v[i], want + i * size);
    return COLL_OK;
}

int survivors_check(coll_comm *c, int orig, unsigned alive)
{
    int want_rank = 0, want_size = 0;
    for (int r = 0; r < 32; r++) {
        want_rank += (alive >> r & 1) && r < orig;
        want_size += alive >> r & 1;
    }
    FAIL_IF(coll_size(c) != want_size || coll_rank(c) != want_rank, "rank %d of %d, want %d of %d",
            coll_rank(c), coll_size(c), want_rank, want_size);
    for (int round = 0; round < 3; round++) {
        int rc = survivors_sum(c, orig, alive);
        if (rc != COLL_OK)
            return rc;
    }
    return COLL_OK;
}
