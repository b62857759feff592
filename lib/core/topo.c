/* Topology: which ranks share a host, the ring in host order, and hier's sub-rings.
 * Launchers often number ranks round-robin over hosts (rank r on host r mod H); a ring
 * in rank order then crosses a host link on every hop, so each host's link carries every
 * rank's share. In host order (each host's ranks one after another, hosts in the order
 * of their lowest rank) the ring crosses each host link once each way. An all-reduce's
 * result does not depend on who owns which chunk, so it runs on positions in that order;
 * collectives whose layout follows rank numbers (reduce-scatter, all-gather, a broadcast's
 * root) run on positions where the algorithm maps positions back to ranks (cl_algo.placed),
 * else in rank order. */
#include "core/comm.h"

#include <stdlib.h>
#include <string.h>

/* Positions in host order, each rank's host (numbered from 0 in order of appearance),
 * the number of hosts, the fullest one's ranks, per_host when all hold as many. */
static void host_order(cl_topo *t, const cl_card *cards, int n, int *host, int *fullest)
{
    int k = 0;
    t->per_host = -1;
    *fullest = 0;
    for (int p = 0; p < n; p++)
        host[p] = -1;
    for (int p = 0; p < n; p++) {
        if (host[p] >= 0)
            continue; /* its host is in already */
        int here = 0;
        for (int q = p; q < n; q++)
            if (cards[q].host == cards[p].host) {
                host[q] = t->hosts;
                t->moved |= q != k;
                t->ring[k++] = q;
                here++;
            }
        t->second = t->hosts == 0 ? k : t->second;
        t->per_host = t->per_host < 0 || t->per_host == here ? here : 0;
        *fullest = here > *fullest ? here : *fullest;
        t->hosts++;
    }
}

/* The ring edges in rank order that leave the busiest host. */
static int rank_ring_cross(const int *host, int n, int hosts)
{
    int *out = calloc((size_t)hosts, sizeof(int)), most = 0;
    for (int p = 0; out && p < n; p++)
        if (host[p] != host[(p + 1) % n] && ++out[host[p]] > most)
            most = out[host[p]];
    free(out);
    return out ? most : n; /* no memory: assume the worst, it is only a price */
}

void cl_topo_free(cl_topo *t)
{
    free(t->ring);
    for (int d = 0; d < 2; d++)
        free(t->sub_ranks[d]);
    memset(t, 0, sizeof(*t));
}

int cl_topo_order(coll_comm *c, const cl_card *cards)
{
    cl_topo *t = &c->topo;
    size_t n = (size_t)c->size;
    t->ring = malloc(n * sizeof(int));
    int *host = malloc(n * sizeof(int)), fullest;
    if (!t->ring || !host) {
        free(host);
        return COLL_ENOMEM;
    }
    host_order(t, cards, c->size, host, &fullest);
    cl_algo_ctx *x = &c->algo[CL_CH_COLL];
    x->hosts = t->hosts;
    x->host_ranks = fullest;
    x->ring_cross = t->hosts > 1 ? rank_ring_cross(host, c->size, t->hosts) : 0;
    free(host);
    if (t->hosts == 1) { /* every rank here: rank order, nothing to map */
        cl_topo_free(t);
        t->hosts = 1;
        return COLL_OK;
    }
    for (int v = 0; v < c->size; v++)
        if (t->ring[v] == c->rank)
            t->ordered.rank = v;
    if (t->per_host < 2)
        return COLL_OK;
    size_t len[2] = {(size_t)t->per_host, (size_t)t->hosts};
    for (int s = 0; s < 2; s++)
        if (!(t->sub_ranks[s] = malloc(len[s] * sizeof(int))))
            return COLL_ENOMEM;
    return COLL_OK;
}

/* A context over `size` of the ordered context's positions: its i-th is position
 * first + i * stride. */
static void sub_ring(coll_comm *c, int s, int first, int stride, int size)
{
    cl_topo *t = &c->topo;
    cl_algo_ctx *x = &t->sub[s];
    *x = t->ordered;
    x->size = size;
    for (int i = 0; i < size; i++) {
        int v = first + i * stride;
        t->sub_ranks[s][i] = t->ring[v];
        if (v == t->ordered.rank)
            x->rank = i;
    }
    x->ranks = t->sub_ranks[s];
}

void cl_topo_contexts(coll_comm *c)
{
    cl_topo *t = &c->topo;
    if (!t->ring)
        return;
    int at = t->ordered.rank, L = t->per_host;
    t->ordered = c->algo[CL_CH_COLL];
    t->ordered.rank = at;
    t->ordered.ranks = t->ring;
    t->ordered.ring_cross = 1;
    if (L < 2)
        return;
    sub_ring(c, 0, at / L * L, 1, L);    /* this host's ranks */
    sub_ring(c, 1, at % L, L, t->hosts); /* this place on every host */
    t->ordered.local = &t->sub[0];
    t->ordered.cross = &t->sub[1];
}

const cl_algo_ctx *cl_topo_ctx(const coll_comm *c, const cl_algo *a, const cl_op *op)
{
    int ordered = op->kind == CL_ALLREDUCE || (a->placed & CL_SERVES(op->kind));
    return c->topo.ring && ordered ? &c->topo.ordered : &c->algo[CL_CH_COLL];
}

int cl_topo_peer(const coll_comm *c, int step)
{
    const cl_topo *t = &c->topo;
    int n = c->size, v = t->ring ? t->ordered.rank : c->rank, at = ((v + step) % n + n) % n;
    return t->ring ? t->ring[at] : at;
}
