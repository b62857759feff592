/* Two ranks through env://: after one all-reduce, rank 0 waits in a receive from rank 1,
 * which sends nothing and sleeps until killed. netem.sh takes rank 1's namespace off the
 * network: the heartbeat (the receive judges the rank it waits on) or the idle link's
 * keepalive must end the receive within about COLL_TIMEOUT_MS. Rank 0 exits 0 when the
 * receive failed, as it must, and prints how long it took. */
#include "collective.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void)
{
    coll_comm *c = NULL;
    int rc = coll_init(&c, "env://", -1, -1, NULL);
    if (rc != COLL_OK) {
        fprintf(stderr, "coll_init(env://): %s: %s\n", coll_strerror(rc), coll_last_error(NULL));
        return 2;
    }
    int x = 1;
    rc = coll_allreduce(c, &x, &x, 1, COLL_I32, COLL_SUM);
    if (rc != COLL_OK || coll_rank(c) != 0) {
        for (;;) /* rank 1: alive, silent on every link; netem.sh kills it */
            pause();
    }
    printf("ready\n");
    fflush(stdout);
    double t0 = now_s();
    rc = coll_recv(c, &x, 1, COLL_I32, 1, 1);
    printf("receive from the lost peer: %s after %.1f s: %s\n", coll_strerror(rc), now_s() - t0,
           coll_last_error(c));
    return rc == COLL_OK ? 1 : 0;
}
