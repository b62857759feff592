/* How long a communicator takes to grow by one: NP local ranks meet, all-reduce once,
 * then grow to NP + 1 with a newcomer (a process rank 0 started before its init, handed
 * the id through a pipe) and all-reduce on the grown communicator. For each run, the
 * slowest rank's coll_grow (from its call to its return; the newcomer waits in
 * coll_init_grow meanwhile) and the first all-reduce after it. Transport and timeout
 * from COLL_TRANSPORT and COLL_TIMEOUT_MS. A benchmark, not a test.
 *
 *   grow_time [NP [RUNS]] */
#include "collective.h"
#include "spawn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_NP = 1024 };

typedef struct {
    double grow[MAX_NP + 1], first[MAX_NP + 1];
    int bad;
} board;

static board *bd;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The all-reduce that proves a communicator: the sum of every rank's 1. */
static int sums(coll_comm *c)
{
    float x = 1.0f;
    return coll_allreduce(c, &x, &x, 1, COLL_F32, COLL_SUM) == COLL_OK && x == coll_size(c);
}

/* Both sides of a grow: time it, then the first all-reduce on the grown communicator. */
static void timed(coll_comm *c, int place, double t0)
{
    bd->grow[place] = now_ms() - t0;
    double t1 = now_ms();
    bd->bad |= !sums(c);
    bd->first[place] = now_ms() - t1;
    coll_destroy(c);
}

static int newcomer(int fd, int place)
{
    char id[COLL_GROW_ID_BYTES];
    coll_comm *c;
    if (read(fd, id, sizeof(id)) != (ssize_t)sizeof(id))
        return 1;
    double t0 = now_ms();
    if (coll_init_grow(&c, id, NULL) != COLL_OK) {
        fprintf(stderr, "newcomer: %s\n", coll_last_error(NULL));
        return bd->bad = 1;
    }
    timed(c, place, t0);
    return 0;
}

static int rank_main(int rank, int size, const char *url)
{
    int fds[2] = {-1, -1};
    pid_t kid = -1;
    if (rank == 0 && (pipe(fds) != 0 || (kid = fork()) < 0))
        return 1;
    if (kid == 0) {
        close(fds[1]);
        exit(newcomer(fds[0], size));
    }
    coll_comm *c, *g;
    char id[COLL_GROW_ID_BYTES] = "";
    if (coll_init(&c, url, rank, size, NULL) != COLL_OK || !sums(c) ||
        (rank == 0 && (coll_grow_id(c, size + 1, id, sizeof(id)) != COLL_OK ||
                       write(fds[1], id, sizeof(id)) != (ssize_t)sizeof(id)))) {
        fprintf(stderr, "rank %d: %s\n", rank, coll_last_error(NULL));
        return bd->bad = 1;
    }
    double t0 = now_ms();
    if (coll_grow(c, &g) != COLL_OK) {
        fprintf(stderr, "rank %d: coll_grow: %s\n", rank, coll_last_error(NULL));
        bd->bad = 1;
    } else {
        timed(g, rank, t0);
    }
    coll_destroy(c);
    if (kid > 0)
        waitpid(kid, NULL, 0);
    return bd->bad;
}

static double slowest(const double *v, int n)
{
    double m = 0;
    for (int r = 0; r < n; r++)
        m = v[r] > m ? v[r] : m;
    return m;
}

int main(int argc, char **argv)
{
    int np = argc > 1 ? atoi(argv[1]) : 4, runs = argc > 2 ? atoi(argv[2]) : 5;
    if (np < 1 || np > MAX_NP - 1 || runs < 1) {
        fprintf(stderr, "usage: grow_time [NP (1..%d) [RUNS]]\n", MAX_NP - 1);
        return 2;
    }
    bd = mmap(NULL, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (bd == MAP_FAILED)
        return 2;
    const char *tr = getenv("COLL_TRANSPORT");
    printf("# np %d -> %d, transport %s; ms, slowest rank (the newcomer included)\n", np,
           np + 1, tr ? tr : "auto");
    printf("# run  grow  first-allreduce\n");
    for (int run = 0; run < runs; run++) {
        int rank, size, status;
        char url[512];
        memset(bd, 0, sizeof(*bd));
        fflush(stdout);
        int who = cl_spawn(np, 1, &rank, &size, url, sizeof(url), &status);
        if (who < 0) {
            perror("grow_time: spawn");
            return 2;
        }
        if (who == 0)
            exit(rank_main(rank, size, url));
        if (bd->bad || status != 0) {
            printf("%5d  failed\n", run);
            continue;
        }
        printf("%5d %6.1f %8.2f\n", run, slowest(bd->grow, np + 1), slowest(bd->first, np + 1));
    }
    return 0;
}
