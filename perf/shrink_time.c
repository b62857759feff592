/* How long a job stands still when a rank dies: NP local ranks all-reduce 64 KiB in a
 * loop, one of them is killed (SIGKILL, by itself) at all-reduce 20, the survivors
 * shrink and all-reduce again. For each run, the slowest survivor's times from the kill:
 * when its collective failed (detection), how long the agreement and the new
 * communicator's connection took (from the library's info log), and when its first
 * correct all-reduce on the shrunken communicator returned. Transport and timeout come
 * from COLL_TRANSPORT and COLL_TIMEOUT_MS. A benchmark, not a test.
 *
 *   shrink_time [NP [RUNS]]   (the victim is rank 1 + run % (NP - 1), rank 0 every 4th) */
#include "collective.h"
#include "spawn.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { COUNT = 16384, KILL_AT = 20, MAX_NP = 64 };

/* Per rank, milliseconds: detection and first correct all-reduce from the kill, the
 * agreement and the connection as the library logged them. */
typedef struct {
    double killed; /* the victim's clock when it raised SIGKILL */
    double failed[MAX_NP], ok[MAX_NP], agreed[MAX_NP], connected[MAX_NP];
} board;

static board *bd;
static int me;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); /* one clock for every process */
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void on_log(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    const char *at;
    if ((at = strstr(msg, "round(s), ")))
        bd->agreed[me] = strtod(at + 10, NULL);
    else if ((at = strstr(msg, "connected in ")))
        bd->connected[me] = strtod(at + 13, NULL);
}

static int allreduce_ok(coll_comm *c, float *buf)
{
    for (int i = 0; i < COUNT; i++)
        buf[i] = 1.0f;
    int rc = coll_allreduce(c, buf, buf, COUNT, COLL_F32, COLL_SUM);
    return rc == COLL_OK && buf[0] == (float)coll_size(c) && buf[COUNT - 1] == buf[0];
}

static int rank_main(int rank, int size, const char *url, int victim)
{
    me = rank;
    coll_set_log(on_log, NULL, COLL_LOG_INFO);
    coll_comm *c, *s = NULL;
    coll_config cfg = COLL_CONFIG_INIT;
    if (coll_init(&c, url, rank, size, &cfg) != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init: %s\n", rank, coll_last_error(NULL));
        return 1;
    }
    float *buf = malloc(COUNT * sizeof(float));
    int it = 0;
    while (allreduce_ok(c, buf))
        if (++it == KILL_AT && rank == victim) {
            bd->killed = now_ms();
            raise(SIGKILL);
        }
    bd->failed[rank] = now_ms();
    int good = coll_shrink(c, &s) == COLL_OK && allreduce_ok(s, buf);
    bd->ok[rank] = now_ms();
    if (!good)
        fprintf(stderr, "rank %d: %s\n", rank, coll_last_error(s ? s : c));
    coll_destroy(s);
    coll_destroy(c);
    free(buf);
    return !good;
}

static double slowest(const double *v, int np, int victim, double from)
{
    double m = 0;
    for (int r = 0; r < np; r++)
        if (r != victim && v[r] - from > m)
            m = v[r] - from;
    return m;
}

int main(int argc, char **argv)
{
    int np = argc > 1 ? atoi(argv[1]) : 4, runs = argc > 2 ? atoi(argv[2]) : 5;
    if (np < 3 || np > MAX_NP || runs < 1) {
        fprintf(stderr, "usage: shrink_time [NP (3..%d) [RUNS]]\n", MAX_NP);
        return 2;
    }
    bd = mmap(NULL, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (bd == MAP_FAILED)
        return 2;
    const char *tr = getenv("COLL_TRANSPORT"), *to = getenv("COLL_TIMEOUT_MS");
    printf("# np %d, transport %s, COLL_TIMEOUT_MS %s; ms, slowest survivor\n", np,
           tr ? tr : "auto", to ? to : "default");
    printf("# victim  detect  agree  connect  kill->first-ok\n");
    for (int run = 0; run < runs; run++) {
        int victim = run % 4 == 3 ? 0 : 1 + run % (np - 1), rank, size, status;
        char url[512];
        memset(bd, 0, sizeof(*bd));
        fflush(stdout);
        int who = cl_spawn(np, 1, &rank, &size, url, sizeof(url), &status);
        if (who < 0) {
            perror("shrink_time: spawn");
            return 2;
        }
        if (who == 0)
            exit(rank_main(rank, size, url, victim));
        printf("%8d %7.1f %6.1f %8.1f %15.1f\n", victim,
               slowest(bd->failed, np, victim, bd->killed), slowest(bd->agreed, np, victim, 0),
               slowest(bd->connected, np, victim, 0), slowest(bd->ok, np, victim, bd->killed));
    }
    return 0;
}
