/* Topology: which ranks share a host, the ring in host order, and hier's sub-rings.
 * Launchers often number ranks round-robin over hosts (rank r on host r mod H); a ring
 * in rank order then crosses a host link on every hop, so each host's link carries every
 * rank's share. In host order (each host's ranks one after another, hosts in the order
 * of their lowest rank) the ring crosses each host link once each way. An all-reduce's
 * result does not depend on who owns which chunk, so it runs on positions in that order;
 * collectives whose layout follows rank numbers (reduce-scatter, all-gather, a broadcast's
 * root) run on positions where the algorithm maps positions back to ranks (cl_algo.placed),
 * else in rank order. */
#include "core/topo.h"

#include "collective.h"

#include <stdlib.h>
#include <string.h>

/* Positions in host order, each rank's host (numbered from 0 in order of appearance),
 * where each host's positions begin, the number of hosts, the fullest one's ranks and the
 * emptiest's (lanes). */
static void host_order(cl_topo *t, const uint64_t *ids, int n, int *host, int *fullest)
{
    int k = 0;
    t->lanes = n;
    *fullest = 0;
    for (int p = 0; p < n; p++)
        host[p] = -1;
    for (int p = 0; p < n; p++) {
        if (host[p] >= 0)
            continue; /* its host is in already */
        int here = 0;
        t->start[t->hosts] = k;
        for (int q = p; q < n; q++)
            if (ids[q] == ids[p]) {
                host[q] = t->hosts;
                t->moved |= q != k;
                t->ring[k++] = q;
                here++;
            }
        *fullest = here > *fullest ? here : *fullest;
        t->lanes = here < t->lanes ? here : t->lanes;
        t->hosts++;
    }
    t->start[t->hosts] = n;
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
    free(t->start);
    free(t->host);
    for (int d = 0; d < 2; d++)
        free(t->sub_ranks[d]);
    *t = (cl_topo){.plain = t->plain, .net_alpha_s = t->net_alpha_s, .net_beta_s = t->net_beta_s};
}

int cl_topo_order(cl_topo *t, const uint64_t *host_ids)
{
    cl_algo_ctx *x = t->plain;
    int size = x->size;
    size_t n = (size_t)size;
    t->ring = malloc(n * sizeof(int));
    t->start = malloc((n + 1) * sizeof(int));
    t->host = malloc(n * sizeof(int));
    int *host = malloc(n * sizeof(int)), fullest;
    if (!t->ring || !t->start || !t->host || !host) {
        free(host);
        return COLL_ENOMEM;
    }
    host_order(t, host_ids, size, host, &fullest);
    x->hosts = t->hosts;
    x->host_ranks = fullest;
    x->ring_cross = t->hosts > 1 ? rank_ring_cross(host, size, t->hosts) : 0;
    for (int v = 0; v < size; v++)
        t->host[v] = host[t->ring[v]];
    free(host);
    if (t->hosts == 1) { /* every rank here: rank order, nothing to map */
        cl_topo_free(t);
        t->hosts = 1;
        return COLL_OK;
    }
    for (int v = 0; v < size; v++)
        if (t->ring[v] == x->rank)
            t->ordered.rank = v;
    size_t len[2] = {(size_t)t->lanes, (size_t)t->hosts};
    for (int s = 0; s < 2; s++)
        if (!(t->sub_ranks[s] = malloc(len[s] * sizeof(int))))
            return COLL_ENOMEM;
    return COLL_OK;
}

/* A context over `size` of the ordered context's positions, whose i-th is the position
 * in sub_ranks[s][i] (made the rank there). */
static void sub_ring(cl_topo *t, int s, int size)
{
    cl_algo_ctx *x = &t->sub[s];
    *x = t->ordered;
    x->size = size;
    for (int i = 0; i < size; i++) {
        int v = t->sub_ranks[s][i];
        t->sub_ranks[s][i] = t->ring[v];
        if (v == t->ordered.rank)
            x->rank = i;
    }
    x->ranks = t->sub_ranks[s];
    x->scope = s == 0 ? "host" : "across hosts";
}

void cl_topo_contexts(cl_topo *t)
{
    if (!t->ring)
        return;
    int at = t->ordered.rank, h = 0, L = t->lanes;
    t->ordered = *t->plain;
    t->ordered.rank = at;
    t->ordered.ranks = t->ring;
    t->ordered.ring_cross = 1;
    t->ordered.host_start = t->start;
    t->ordered.host_at = t->host;
    t->ordered.lanes = L;
    while (t->start[h + 1] <= at)
        h++;
    int place = at - t->start[h];
    if (place >= L)
        return; /* this rank folds into a lane (hier.c) */
    for (int i = 0; i < L; i++) /* this host's lanes */
        t->sub_ranks[0][i] = t->start[h] + i;
    for (int g = 0; g < t->hosts; g++) /* this place on every host */
        t->sub_ranks[1][g] = t->start[g] + place;
    sub_ring(t, 0, L);
    sub_ring(t, 1, t->hosts);
    t->ordered.local = &t->sub[0];
    t->ordered.cross = &t->sub[1];
}

const cl_algo_ctx *cl_topo_ctx(const cl_topo *t, const cl_algo *a, const cl_op *op)
{
    int ordered = op->kind == CL_ALLREDUCE || (a->placed & CL_SERVES(op->kind));
    return t->ring && ordered ? &t->ordered : t->plain;
}

int cl_topo_peer(const cl_topo *t, int step)
{
    int n = t->plain->size, v = t->ring ? t->ordered.rank : t->plain->rank;
    int at = ((v + step) % n + n) % n;
    return t->ring ? t->ring[at] : at;
}
