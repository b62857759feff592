/* The topology value: where a communicator's ranks are and what the link between hosts
 * costs, and the cost model (choose.c) as a function of it. A communicator holds one
 * (coll_comm.topo); perf/model.c fills one for a cluster that does not exist and asks
 * the same model, with no communicator behind it. */
#ifndef CL_TOPO_H
#define CL_TOPO_H

#include "algo/algo.h"

#include <stddef.h>
#include <stdint.h>

/* With more than one host, an all-reduce runs on `ordered`: positions in host order
 * (ring[v] is the rank at position v, host h's from start[h] on), links by position.
 * hier runs L lanes on each host, L the emptiest host's ranks; for a rank on one, `sub`
 * are its rings: this host's lanes (sub[0]) and this one's place on every host (sub[1]). */
typedef struct cl_topo {
    /* The context in rank order (size, rank and the rest an algorithm runs with): the
     * communicator's collective channel, or a model's own. Its hosts, host_ranks and
     * ring_cross are set by cl_topo_order. */
    cl_algo_ctx *plain;
    double net_alpha_s, net_beta_s; /* the link between hosts: latency, time per byte */
    int hosts;
    int lanes;  /* the emptiest host's ranks */
    int *start; /* hosts + 1 */
    int *host;  /* per position */
    int moved;  /* host order is not rank order */
    int *ring;  /* NULL: one host */
    cl_algo_ctx ordered;
    int *sub_ranks[2];
    cl_algo_ctx sub[2];
} cl_topo;

/* Learns the hosts from each rank's host id (plain->size of them; equal ids share a
 * host) and orders the ring; t->plain set, the rest of t zero. */
int cl_topo_order(cl_topo *t, const uint64_t *host_ids);
/* The host-ordered and hier contexts, from t->plain as it stands (once its links exist). */
void cl_topo_contexts(cl_topo *t);
/* Frees what cl_topo_order allocated; plain and the link costs stay. */
void cl_topo_free(cl_topo *t);
/* The context algorithm a runs op on: in host order for an all-reduce, and for what a
 * places (cl_algo.placed); else in rank order. */
const cl_algo_ctx *cl_topo_ctx(const cl_topo *t, const cl_algo *a, const cl_op *op);
/* The rank `step` places on along the collective ring (host order; 1: the next). */
int cl_topo_peer(const cl_topo *t, int step);

/* The algorithm for op: `force`'s (COLL_ALGO, "" for none) for an uncompressed
 * all-reduce and what else it serves, else the cheapest that fits by the link model;
 * NULL with the reason in why when none can run it. */
const cl_algo *cl_choose(const cl_topo *t, const char *force, const cl_op *op, char *why,
                         size_t len);
/* What the cost model says op takes with algorithm a on t, in seconds. */
double cl_price(const cl_topo *t, const cl_algo *a, const cl_op *op);
/* Whether a runs op on t (it serves the collective and fits). */
int cl_runs(const cl_topo *t, const cl_algo *a, const cl_op *op);
/* Is name one COLL_ALGO may give (built, or promised by the contract)? */
int cl_algo_name_valid(const char *name);

#endif
