/* A communicator's life cycle: created (comm.c), met at init (init.c), connected, placed
 * after a shrink, freed; the configuration its splits inherit. */
#ifndef CL_LIFECYCLE_H
#define CL_LIFECYCLE_H

#include "collective.h"

#include "base/auth.h"
#include "core/config.h"
#include "core/life.h"
#include "rdzv/store.h"
#include "transports/transport.h"

#include <stdint.h>

/* What each rank publishes when a communicator is built: where its transport listens,
 * its machine, its lifeline. */
typedef struct cl_card {
    char handle[CL_HANDLE_BYTES];
    uint64_t machine; /* cl_machine_id: whose CPUs */
    uint64_t host;    /* cl_host_id: whose memory and network link */
    char life[CL_LIFE_ADDR];
    uint8_t nonce[CL_NONCE_BYTES]; /* drawn for this communicator: links to it prove it */
    uint16_t beat;                 /* its heartbeat's UDP port, at its life address (beat.h) */
    uint16_t status;               /* its status endpoint's UDP port, there too (status.h) */
} cl_card;

/* A communicator of `size` with its transport context, listener and lifeline, not yet
 * connected; *mine is this rank's card. */
int cl_comm_create(const cl_config *cfg, int rank, int size, uint64_t id, coll_comm **out,
                   cl_tr_listener **l, cl_card *mine);
/* Where c stands, when it is learnt after cl_comm_create (shrink): size no more than
 * the size c was created with. */
void cl_comm_place(coll_comm *c, int rank, int size, uint64_t id);
/* Connects c given every rank's card (rank order), then starts its engine. */
int cl_comm_connect(coll_comm *c, cl_tr_listener *l, const cl_card *cards);
void cl_comm_free(coll_comm *c);
/* The configuration a communicator derived from c (split, shrink) inherits. */
cl_config cl_comm_config(const coll_comm *c);
/* coll_init's meeting (init.c): cfg's ranks meet at rv through store (the caller's, or
 * NULL to open the one rv names; the communicator owns it, failed or not). */
int cl_init_meet(coll_comm **out, const cl_config *cfg, const cl_rdzv *rv, cl_store *store);
/* The end of an init whose thread cl_interrupt_arm marked, rc its answer so far: where an
 * interrupt came meanwhile, COLL_EABORTED ("init interrupted"), a communicator formed
 * meanwhile destroyed and *out NULL; else rc. */
int cl_init_end(int rc, coll_comm **out);

#endif
