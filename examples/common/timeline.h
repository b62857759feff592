/* What each rank did during one step, drawn for people: an ASCII timeline on rank 0 (one
 * row per rank, time across) and a Chrome trace-event JSON file (one track per rank, open
 * it in Perfetto). Every trainer records its kernels and collectives the same way. */
#ifndef EX_TIMELINE_H
#define EX_TIMELINE_H

#include "collective.h"

typedef struct {
    char kind; /* F forward, B backward, A all-reduce, G all-gather, R reduce-scatter */
    int id;    /* micro-batch or layer; -1 for none */
    double t0, t1;
} tl_event;

typedef struct {
    tl_event *ev;
    int n, cap, on;
    double base; /* this rank's clock when the step began */
} timeline;

int tl_init(timeline *t, int cap);
void tl_free(timeline *t);
/* Starts recording after a barrier over c, so every row starts at the same moment. */
int tl_begin(timeline *t, coll_comm *c);
/* Records [t0, t1] (ex_now_s() times) while recording; a NULL timeline records nothing. */
void tl_add(timeline *t, char kind, int id, double t0, double t1);
/* Stops recording and gathers every rank's events over c; rank 0 prints the timeline,
 * rows named `row` ("stage", "rank"), and with path != NULL writes the trace there.
 * Collective over c. */
int tl_end(timeline *t, coll_comm *c, const char *row, const char *path);

#endif
