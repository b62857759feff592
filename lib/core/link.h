/* A communicator's links (link.c): made when first used, by their sender; the listener
 * takes them. */
#ifndef CL_LINK_H
#define CL_LINK_H

#include "collective.h"

#include "transports/transport.h"
#include "wire/wire.h"

#include <stdint.h>

struct cl_card;

/* Keeps l and every rank's card (where each listens, the nonce each proves links
 * over), and starts judging hellos by them (cl_link_vet). */
int cl_link_keep(coll_comm *c, cl_tr_listener *l, const struct cl_card *cards);
/* Opens link (ch, dir, peer) without blocking: COLL_OK once it is in c->conns;
 * COLL_INPROGRESS while the peer has not connected (dir 1) or its listener is full
 * (dir 0); else the communicator's failure or why the peer cannot be reached. Takes
 * every connection waiting on the listener meanwhile. */
int cl_link_open(coll_comm *c, int ch, int dir, int peer);
/* A failure, before the links close: the farewell goes to every rank on the collective
 * channel, queued behind what each link carries, over a link dialed for it where there
 * was none (a rank may be waiting for the link this one would have opened), waiting at
 * most min(timeout, 1 s) for them to go out. Each failing rank does it, so a failure
 * costs O(n) connections per rank, once. */
void cl_link_spread(coll_comm *c, const cl_msg_hdr *bye);
/* A transport's vet (cl_tr_config): why a hello is not one of communicator comm's
 * links, or NULL (also before cl_link_start, when there is nothing yet to judge by:
 * accept's caller judges those). Safe on a transport's thread. */
const char *cl_link_vet(void *comm, const uint8_t raw[CL_HELLO_BYTES]);
/* Waits for a request posted on a link, by deadline: done (then *r is NULL) and its
 * status, or COLL_ETIMEDOUT, the request still with the transport. */
int cl_link_await(coll_comm *c, cl_tr_req **r, int64_t deadline);
/* Whether rank p's process is gone, judged without waiting for its silence: our dial to
 * it on the p2p channel got no verdict (refused or reset), or a receive from it has
 * waited since receiving_since (0: not a receive) a while with no link from it; its
 * lifeline and heartbeat ports refuse too, it did not say it left (heartbeat LEAVE), and
 * a while after, nothing it sent before it ended waits on our listener. 0 for a live,
 * busy or slow rank. A p2p wait asks; it may probe the rank's ports (a bounded connect
 * and datagram) a few times, then again after a longer while. */
int cl_link_gone(coll_comm *c, int p, int64_t receiving_since);
/* 1 with *out the farewell rank p answered our p2p dial with (it failed), else 0. */
int cl_link_farewell(coll_comm *c, int p, cl_msg_hdr *out);
/* The link as it stands (NULL: not opened). */
cl_tr_conn *cl_link_now_of(coll_comm *c, int ch, int dir, int peer);

#endif
