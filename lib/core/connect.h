/* A communicator connects at init (connect.c): its ring links, and rank 0's verdict. */
#ifndef CL_CONNECT_H
#define CL_CONNECT_H

#include "collective.h"

#include "transports/transport.h"

struct cl_card;

/* Keeps l and every rank's card, then opens this rank's ring links (to the next rank,
 * from the previous one) and waits for them. l NULL: a shared split's, whose links are
 * its family root's (it opens them in its turn). */
int cl_link_start(coll_comm *c, cl_tr_listener *l, const struct cl_card *cards);
/* After cl_link_start, rank 0's word to every rank, once around the ring: status is
 * rank 0's (COLL_OK: carry on); every rank returns what rank 0 said, or why it did not
 * hear it (the communicator has failed then). */
int cl_link_verdict(coll_comm *c, int status);

#endif
