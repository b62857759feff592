/* Local spawn: run N ranks as forked processes of this program when no launcher
 * (torchrun, mpirun, srun) set the rank variables. */
#ifndef CL_PERF_SPAWN_H
#define CL_PERF_SPAWN_H

/* With launcher variables set: returns 0 and sets url to "env://".
 * Otherwise forks np ranks meeting at a fresh file:// directory: in each child returns 0
 * with *rank set, bound to one CPU (see COLL_BIND in the README); in the parent waits for all and returns 1 with *status = 0 when every
 * rank exited 0. Returns -1 on failure. */
int cl_spawn(int np, int *rank, int *size, char *url, unsigned long urllen, int *status);

#endif
