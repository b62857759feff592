/* Local spawn for the perf tools and examples: see spawn.h. */
#include "spawn.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int launched(int *rank, int *size)
{
    static const char *pairs[][2] = { { "RANK", "WORLD_SIZE" },
                                      { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
                                      { "PMI_RANK", "PMI_SIZE" },
                                      { "SLURM_PROCID", "SLURM_NTASKS" } };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        if (getenv(pairs[i][0]) && getenv(pairs[i][1])) {
            *rank = atoi(getenv(pairs[i][0]));
            *size = atoi(getenv(pairs[i][1]));
            return 1;
        }
    return 0;
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* COLL_BIND: 1 for core (unset or empty: the default), 0 for none, -1 otherwise. */
static int binding(void)
{
    const char *how = getenv("COLL_BIND");
    if (!how || !*how || strcmp(how, "core") == 0)
        return 1;
    if (strcmp(how, "none") == 0)
        return 0;
    fprintf(stderr, "COLL_BIND=%s: expected core or none\n", how);
    return -1;
}

/* Binds a rank to one CPU of those this process may use, round robin, as mpirun
 * --map-by core --bind-to core does: neighbours in the ring land on different cores.
 * With more ranks than cores and no binding, the scheduler often puts ring neighbours
 * on one core, where a sender and its receiver take turns instead of copying at once:
 * tcp all-reduces of 2-8 MiB on 4 ranks over 2 cores took 1.4-1.5x longer. */
static void bind_rank(int rank)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) || CPU_COUNT(&allowed) < 2)
        return;
    int nth = rank % CPU_COUNT(&allowed);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed) && nth-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof(one), &one))
                perror("sched_setaffinity");
            return;
        }
}

int cl_spawn(int np, int *rank, int *size, char *url, unsigned long urllen, int *status)
{
    if (launched(rank, size)) {
        if (!getenv("MASTER_ADDR"))
            setenv("MASTER_ADDR", "127.0.0.1", 0);
        snprintf(url, urllen, "env://");
        return 0;
    }
    int bind = binding();
    if (bind < 0) {
        errno = EINVAL;
        return -1;
    }
    char dir[] = "/tmp/coll_spawn.XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    snprintf(url, urllen, "file://%s", dir);
    setenv("COLL_SOCKET_IFNAME", "lo", 0); /* all ranks are here */
    *size = np;
    pid_t *pids = calloc((size_t)np, sizeof(pid_t));
    for (int r = 0; r < np; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            free(pids);
            if (bind)
                bind_rank(r);
            *rank = r;
            return 0;
        }
    }
    int ok = 1;
    for (int r = 0; r < np; r++) {
        int st = 0;
        if (pids[r] < 0 || waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
            if (pids[r] > 0 && WIFSIGNALED(st))
                fprintf(stderr, "rank %d killed by signal %d\n", r, WTERMSIG(st));
            ok = 0;
        }
    }
    free(pids);
    remove_dir(dir);
    *status = ok ? 0 : 1;
    return 1;
}
