/* --heal: a lost rank comes back, and the job goes on at full size. The launcher starts
 * the dead rank's process again (coll_run --max-restarts, which sets COLL_RESTART); the
 * survivors shrink, rank 0 of them makes a grow id (coll_grow_id) and leaves it in a file
 * named after the job, every survivor grows back (coll_grow) while the new process joins
 * (coll_init_grow), and rank 0 hands it the trainer's state over the grown communicator.
 * The file is the out-of-band hand-over: one machine (or a shared directory, TMPDIR). */
#ifndef EX_HEAL_H
#define EX_HEAL_H

#include "collective.h"

#include <stddef.h>
#include <stdint.h>

/* This process was started again by its launcher (COLL_RESTART is set): it joins. */
int ex_heal_is_replacement(void);
/* Every survivor, on c (after coll_shrink): grows c back to size ranks into *out, rank 0
 * leaving the id where the replacement looks. COLL_OK or a COLL_E* code, said on stderr. */
int ex_heal_offer(coll_comm *c, int size, coll_comm **out);
/* The replacement: waits (up to wait_ms) for a fresh id and joins its grow with cfg
 * (the job's settings: codec). */
int ex_heal_join(const coll_config *cfg, int wait_ms, coll_comm **out);
/* Everybody on the grown communicator: rank 0's position (pos, n words) and state
 * (every buffer of bufs, lens[i] floats each) reach every rank, one broadcast each. */
int ex_heal_state(coll_comm *c, int64_t *pos, int n, float *const *bufs, const size_t *lens,
                  int nbufs);

/* A heal's phases on a survivor in wall-clock seconds (ex_wall_s, comparable across the
 * host's processes): the loss seen (a collective failed), the shrink, the grow and the
 * state hand-over (bytes of it) done. */
typedef struct {
    double seen, shrunk, grown, done;
    size_t bytes;
} ex_heal_clock;

/* Every survivor's line "heal: rank R phases: seen S shrunk S grown S done S" (absolute
 * times, perf/heal_timeline.py draws them), and, where first is set (one rank), "heal:
 * back at N ranks T ms after the loss was seen (...)": the phases in ms, then the
 * absolute times, which a script lines up with its kill (perf/heal_time.sh). */
void ex_heal_report(const ex_heal_clock *k, int rank, int first, int size);
/* The replacement's line "heal: rank R joined at epoch E, step S (...)": when its process
 * started, joined the grow and had the state (wall-clock seconds). */
void ex_heal_joined(int rank, int epoch, size_t step, double started, double joined,
                    double done);

#endif
