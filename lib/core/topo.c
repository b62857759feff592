/* Topology: which ranks share a host, and the ring in host order. Launchers often number
 * ranks round-robin over hosts (rank r on host r mod H); a ring in rank order then
 * crosses a host link on every hop, so each host's link carries every rank's share. In
 * host order (each host's ranks one after another, hosts in the order of their lowest
 * rank) the ring crosses each host link once each way. An all-reduce's result does not
 * depend on who owns which chunk, so it runs on positions in that order; collectives
 * whose layout follows rank numbers (reduce-scatter, all-gather) keep rank order. */
#include "core/comm.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Positions in host order; returns 1 when that is not rank order. */
static int host_order(const cl_card *cards, int n, int *ring)
{
    uint8_t *placed = calloc((size_t)n, 1);
    int k = 0, moved = 0;
    if (!placed)
        return -1;
    for (int p = 0; p < n; p++) {
        if (placed[p])
            continue; /* its host is in already */
        for (int q = p; q < n; q++)
            if (cards[q].host == cards[p].host) {
                placed[q] = 1;
                moved |= q != k;
                ring[k++] = q;
            }
    }
    free(placed);
    return moved;
}

int cl_topo_order(coll_comm *c, const cl_card *cards)
{
    int n = c->size;
    int *ring = malloc((size_t)n * sizeof(int));
    if (!ring)
        return COLL_ENOMEM;
    int moved = host_order(cards, n, ring);
    if (moved <= 0) {
        free(ring);
        return moved < 0 ? COLL_ENOMEM : COLL_OK;
    }
    c->ring = ring;
    for (int v = 0; v < n; v++)
        if (ring[v] == c->rank)
            c->ordered.rank = v;
    for (int d = 0; d < 2; d++)
        if (!(c->ring_links[d] = calloc((size_t)n, sizeof(cl_tr_conn *))))
            return COLL_ENOMEM;
    return COLL_OK;
}

/* Once connected: the ordered context's links by position. */
void cl_topo_link(coll_comm *c)
{
    if (!c->ring)
        return;
    int at = c->ordered.rank;
    c->ordered = c->algo[CL_CH_COLL];
    c->ordered.rank = at;
    for (int v = 0; v < c->size; v++) {
        c->ring_links[0][v] = c->conns[CL_CH_COLL][0][c->ring[v]];
        c->ring_links[1][v] = c->conns[CL_CH_COLL][1][c->ring[v]];
    }
    c->ordered.send = c->ring_links[0];
    c->ordered.recv = c->ring_links[1];
    c->ordered.ranks = c->ring;
}

const cl_algo_ctx *cl_topo_ctx(const coll_comm *c, const cl_op *op)
{
    return c->ring && op->kind == CL_ALLREDUCE ? &c->ordered : &c->algo[CL_CH_COLL];
}

int cl_topo_peer(const coll_comm *c, int step)
{
    int n = c->size, v = c->ring ? c->ordered.rank : c->rank, at = ((v + step) % n + n) % n;
    return c->ring ? c->ring[at] : at;
}
