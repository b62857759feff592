/* Starting ranks: one implementation for coll_run (tools/coll_run.c, which runs a
 * program as each rank) and for the bundled tools' --np (which fork themselves). It sets
 * each rank's variables, binds local ranks (COLL_BIND), and supervises: forwards
 * signals, ends every rank when one fails, restarts, prefixes output lines. */
#ifndef CL_PERF_SPAWN_H
#define CL_PERF_SPAWN_H

typedef struct cl_launch {
    int np;
    char *const *argv;       /* each rank's program; NULL: fork only (see cl_launch_run) */
    const char *const *host; /* np host names; NULL (or a NULL entry): this machine */
    int max_restarts;        /* per rank: a failed rank is started again this often */
    int keep_going;          /* a failed rank ends no other (programs that shrink) */
    int tag_output;          /* "[rank] " before each line of a rank's output */
    int secret;              /* a fresh COLL_SECRET unless the caller's environment has one */
    int grace_ms;            /* from SIGTERM to SIGKILL when ranks are ended; <= 0: 5000 */
    const char *who;         /* name for messages ("coll_run") */
} cl_launch;

/* Starts l->np ranks with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
 * and MASTER_PORT (a free port unless set), COLL_JOB_ID (fresh unless set), COLL_RESTART
 * (a restarted rank's count) and, asked, COLL_SECRET. A rank whose host is another
 * machine runs through ssh ($COLL_RUN_SSH, default "ssh"). With argv NULL, in each rank
 * returns 0 with *rank set (the caller runs as that rank; no restarts); in the launcher,
 * once every rank has ended, returns 1 with *status the first failed rank's exit status
 * (128 + signal for a signal death), 0 when none failed. Returns -1 when nothing could
 * start (errno set, a message printed). */
int cl_launch_run(const cl_launch *l, int *rank, int *status);

/* The tools' --np. Under a launcher (RANK/WORLD_SIZE, Open MPI's, PMI's or Slurm's
 * variables): returns 0 with *rank and *size from them and url "env://". Otherwise
 * cl_launch_run of np forked ranks on this machine, each meeting the others at "env://";
 * keep_going as in cl_launch. */
int cl_spawn(int np, int keep_going, int *rank, int *size, char *url, unsigned long urllen,
             int *status);

#endif
