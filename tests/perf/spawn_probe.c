/* Starts N ranks with the perf tools' local spawn; each prints its rank and the CPUs it
 * may run on, for spawn_bind.sh to check. Usage: spawn_probe N */
#include "perf/spawn.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, status = 0;
    char url[600];
    int who = cl_spawn(argc > 1 ? atoi(argv[1]) : 2, 0, &rank, &size, url, sizeof(url), &status);
    if (who < 0) {
        perror("spawn_probe: spawn");
        return 2;
    }
    if (who == 1)
        return status;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set))
        return 1;
    char line[4096];
    int at = snprintf(line, sizeof(line), "rank %d cpus", rank);
    for (int cpu = 0; cpu < CPU_SETSIZE && at < (int)sizeof(line) - 8; cpu++)
        if (CPU_ISSET(cpu, &set))
            at += snprintf(line + at, sizeof(line) - (size_t)at, " %d", cpu);
    puts(line);
    return 0;
}
