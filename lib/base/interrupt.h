/* coll_init_interrupt: a count of interrupts, and the thread that runs an init marking
 * the count it began at. Every wait of an init (the rendezvous, the tcp store's dials,
 * the ring links and their first messages) looks here between slices of a fifth of a
 * second at most, so an interrupt ends it that soon without waking anything: a count is
 * all a signal handler may touch. On the floor, so that the rendezvous (below the core)
 * looks too. */
#ifndef CL_INTERRUPT_H
#define CL_INTERRUPT_H

/* The longest an init's wait goes without looking. */
enum { CL_INTERRUPT_SLICE_MS = 200 };

/* Counts one interrupt; async-signal-safe (one lock-free atomic add). */
void cl_interrupt_raise(void);
/* This thread runs an init from now: an interrupt counted after this call ends it.
 * Returns 1 where it armed the thread, 0 where it was armed already (an init's first
 * steps arm it before its meeting does: an interrupt between them must still count). */
int cl_interrupt_arm(void);
/* This thread's init ended, where armed (cl_interrupt_arm's answer) is 1: its waits no
 * longer look. */
void cl_interrupt_disarm(int armed);
/* Whether this thread runs an init that an interrupt came to since it was armed. */
int cl_interrupted(void);

#endif
