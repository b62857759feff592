/* coll_status's parts (coll_status.c: asking and the entry communicator's table;
 * status_comms.c: every other communicator of the processes asked). */
#ifndef COLL_STATUS_TOOL_H
#define COLL_STATUS_TOOL_H

#include "base/addr.h"
#include "core/status.h"

#include <stdint.h>

typedef struct asker {
    int fd, family;
    int keyed;
    uint8_t key[CL_KEY_BYTES];
    int timeout_ms;
    uint8_t base[CL_NONCE_BYTES]; /* each ask's nonce: this, its target's index last */
} asker;

typedef struct rank_view {
    cl_addr to;
    int reachable; /* its endpoint is known and of this socket's family */
    int answered;
    cl_status_answer a;
    const char *straggler; /* why it is one, NULL when it is not */
    char why[160];
} rank_view;

/* A communicator: its job's id and its own (job 0: the endpoint's own). */
typedef struct comm_id {
    uint64_t job, id;
} comm_id;

/* Asks every reachable view without an answer (kind, page `first`, communicator c; a
 * HEAD asks the view's index as the rank) until all answered or the timeout; how many
 * refused. */
int ask_all(asker *k, rank_view *v, int n, uint32_t kind, uint32_t first, comm_id c);
/* The endpoints of *c's ranks (job 0: the endpoint's own; *c is then its), a page at a
 * time from at; NULL with the reason on stderr. */
rank_view *learn_ranks(asker *k, const cl_addr *at, const char *where, comm_id *c, int *size);
const char *state_name(int state);
int op_stuck(const cl_status_op *o, double stall_s);
/* Whether o is collective #seq, waited in for the stall or longer (coll_status.c). */
int op_waited(const cl_status_op *o, uint32_t seq, double stall_s);
/* Whether o, a rank's newest, ended and was issued the stall or longer ago. */
int op_idle(const cl_status_op *o, double stall_s);
void print_op(const cl_status_op *o);
void put_string(const char *s, size_t max);
void put_op(const char *name, const cl_status_op *o);

/* The communicators of the processes in v (the entry communicator's n ranks; comm its
 * id), each a group of its ranks, with its stragglers; freed by comms_free. */
typedef struct comms comms;
comms *comms_learn(asker *k, const rank_view *v, int n, comm_id entry, double stall_s);
/* The label the processes gave the entry communicator, "" none. */
const char *comms_label(const comms *m);
int comms_stragglers(const comms *m);
void comms_print_text(const comms *m);
void comms_print_json(const comms *m); /* ",\n  \"communicators\": [...]" */
void comms_free(comms *m);

#endif
