/* Heartbeats between the ranks of a communicator, from a thread of the library's own
 * (beat.c): what finds a rank that is stopped (SIGSTOP, a debugger) or wedged, which
 * keeps its sockets open while its kernel acknowledges TCP for it. */
#ifndef CL_BEAT_H
#define CL_BEAT_H

#include "collective.h"

#include <stdint.h>

struct cl_card;
struct cl_rdzv;
typedef struct cl_beat cl_beat;

/* Opens c's heartbeat socket at its lifeline's address (c->life open) and writes its
 * port to *port, and its status endpoint's (status.h, answered by the same thread) to
 * *status_port, for c's card (the address is the lifeline's). Not for a split that shares
 * its root's links: the root's heartbeat answers for the same processes. */
int cl_beat_open(coll_comm *c, uint16_t *port, uint16_t *status_port);
/* Rank 0 of a tcp:// rendezvous, before cl_beat_start: its status endpoint answers at
 * the rendezvous's address too. */
void cl_beat_public(coll_comm *c, const struct cl_rdzv *rv);
/* Once c is placed (rank, size, id, job) and every rank's card is known: beats to every
 * rank and watches them, on a thread of its own, until cl_beat_close. A split that shares
 * its root's links (family.h) is watched by its root's instead. */
int cl_beat_start(coll_comm *c, const struct cl_card *cards);
/* c's status endpoint (status.h), NULL when c has none of its own (a split sharing its
 * root's links answers through the root's). */
struct cl_status *cl_beat_status(const coll_comm *c);
/* The status endpoint that answers for c: its own, or its family root's, with *to_root
 * then c's ranks' ranks in the root (status.c's PEERS of a split). NULL: none. */
struct cl_status *cl_beat_any_status(const coll_comm *c, const int **to_root);
/* The id of the communicator whose beat watches c (c's, or its family root's). */
uint64_t cl_beat_owner_id(const coll_comm *c);
/* Whether c's heartbeat heard rank r within its silence bound (0 where c has no beat of
 * its own): a rank that does not answer though it beat a moment ago is leaving, not
 * stopped. Any thread. */
int cl_beat_heard_lately(const coll_comm *c, int r);
/* How long rank r of c (c's numbering) had not been heard when the beat's thread last
 * read its socket, in ms, once that is the silence bound or more and r is watched (it
 * did not leave); else 0, also where nothing beats for c. What a point-to-point wait on
 * r asks: no collective waits, so the beat's own thread judges nothing. Any thread. */
int cl_beat_silent_ms(const coll_comm *c, int r);
/* Whether rank r of c said it left (LEAVE) or cannot be watched, as of a read of the
 * heartbeat's socket that began after `since` (ms), so a LEAVE sent before something
 * seen at `since` is counted: 1 left or unwatched; 0 not; -1 not known yet (the thread
 * is woken to read: ask again) or nothing beats for c. Any thread. */
int cl_beat_left(const coll_comm *c, int r, int64_t since);
/* 1 when rank r's heartbeat port answers a datagram with port unreachable within
 * wait_ms: nothing listens there, its process ended. 0 when it does not (a live rank,
 * also one whose TCP connections a firewall resets, as UDP beats pass), nothing beats
 * for c, or no answer came in time (the network may drop it). Blocks at most wait_ms.
 * Any thread. */
int cl_beat_refused(const coll_comm *c, int r, int wait_ms);
/* How often a wait should ask cl_beat_silent_ms (ms): the beat's period; 0 without one. */
int cl_beat_period_ms(const coll_comm *c);
/* Stops the thread, tells every rank that this one leaves (no longer to be watched),
 * and frees what cl_beat_open and cl_beat_start made. Nothing when c has no beat. */
void cl_beat_close(coll_comm *c);

#endif
