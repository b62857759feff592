/* Which algorithm runs an operation: the cheapest of those that serve the collective and
 * fit this communicator, priced by a latency-bandwidth model with two link classes: on
 * a host each message costs ALPHA and each byte sent BETA; the steps that wait on a link
 * between hosts cost its latency instead, and the bytes the busiest host link carries
 * cost its time per byte on top (measured at init, or COLL_NET_LATENCY_US, COLL_NET_GBPS).
 * COLL_ALGO forces the uncompressed all-reduce's, and that of the other collectives the
 * named algorithm serves. COLL_DEBUG=info names the choice, with the prices it compared,
 * once per collective and size class. The model reads nothing but the topology value
 * (topo.h): a communicator's, or the cluster perf/model.c describes. */
#include "core/choose.h"
#include "core/comm.h"

#include "base/log.h"
#include "kernels/reduce.h"

#include <stdio.h>
#include <string.h>

/* On a host: shm (or loopback tcp), where a message costs a few microseconds and a byte
 * a quarter of a nanosecond. With these, recursive doubling beats the ring wherever it
 * fits (up to 64 KiB), as measured on 2 to 8 ranks. */
#define ALPHA_S 4e-6
#define BETA_S 0.25e-9

/* The dearer of *most and what position `at` of view pays. */
static void price_at(const cl_topo *t, const cl_algo *a, cl_algo_ctx view, int at,
                     const cl_op *op, double *most)
{
    view.rank = at < view.size ? at : 0;
    cl_cost k = a->cost(&view, op);
    double s = (k.steps - k.xsteps) * ALPHA_S + k.xsteps * t->net_alpha_s +
               ((double)k.bytes + k.serial) * BETA_S + k.xbytes * t->net_beta_s;
    *most = s > *most ? s : *most;
}

/* The first position of the host with the most ranks (host order), or 0. */
static int fullest_start(const cl_algo_ctx *x)
{
    int best = 0;
    for (int h = 1; x->host_start && h < x->hosts; h++)
        if (x->host_start[h + 1] - x->host_start[h] >
            x->host_start[best + 1] - x->host_start[best])
            best = h;
    return x->host_start ? x->host_start[best] : 0;
}

/* Every rank must choose the same algorithm, so the price is not this rank's cost but the
 * dearest of the positions whose share differs most (the first pair, which folds or owns
 * the larger chunks, the last, and the fullest host's first, which takes the most folds
 * of hier's lanes): the same numbers on every rank, and a few cost calls whatever n. */
double cl_price(const cl_topo *t, const cl_algo *a, const cl_op *op)
{
    const cl_algo_ctx *view = cl_topo_ctx(t, a, op);
    double most = 0;
    price_at(t, a, *view, 0, op, &most);
    price_at(t, a, *view, 1, op, &most);
    price_at(t, a, *view, view->size - 1, op, &most);
    price_at(t, a, *view, fullest_start(view), op, &most);
    return most;
}

int cl_runs(const cl_topo *t, const cl_algo *a, const cl_op *op)
{
    return (a->serves & CL_SERVES(op->kind)) && a->fits(cl_topo_ctx(t, a, op), op);
}

int cl_algo_name_valid(const char *name)
{
    const cl_algo *a = cl_algo_named(name);
    /* codec's runs whenever a codec is on and never without one: nothing to force */
    return a && a != &cl_algo_codec && (a->serves & CL_SERVES(CL_ALLREDUCE));
}

/* COLL_ALGO names an all-reduce algorithm; it forces the other collectives it serves too
 * (ring and hier: reduce-scatter and all-gather), and leaves the rest to the model. */
static int forcing(const char *force, const cl_op *op)
{
    if (!force[0] || op->codec != COLL_CODEC_NONE)
        return 0;
    const cl_algo *a = cl_algo_named(force);
    return op->kind == CL_ALLREDUCE || (a && (a->serves & CL_SERVES(op->kind)));
}

static const cl_algo *forced(const cl_topo *t, const char *force, const cl_op *op, char *why,
                             size_t len)
{
    const cl_algo *a = cl_algo_named(force);
    if (!a || !(a->serves & CL_SERVES(CL_ALLREDUCE)))
        snprintf(
            why, len,
            "COLL_ALGO=%s: not an all-reduce algorithm (ring, doubling, rabenseifner, tree, hier)",
            force);
    else if (!a->fits(cl_topo_ctx(t, a, op), op))
        snprintf(why, len, "COLL_ALGO=%s cannot run a %zu-byte %s on %d ranks%s", force,
                 op->count * cl_dtype_size(op->dtype), cl_kind_name(op->kind), t->plain->size,
                 a == &cl_algo_doubling ? " (it needs a power of two, at most 64 KiB)"
                 : a == &cl_algo_hier   ? " (it needs two or more hosts)"
                                        : "");
    else
        return a;
    return NULL;
}

const cl_algo *cl_choose(const cl_topo *t, const char *force, const cl_op *op, char *why,
                         size_t len)
{
    if (forcing(force, op))
        return forced(t, force, op, why, len);
    const cl_algo *best = NULL;
    double best_s = 0;
    for (int i = 0; cl_algos[i]; i++) {
        const cl_algo *a = cl_algos[i];
        if (!cl_runs(t, a, op))
            continue;
        double s = cl_price(t, a, op);
        if (!best || s < best_s)
            best = a, best_s = s;
    }
    if (!best)
        snprintf(why, len, "no algorithm runs %s here", cl_kind_name(op->kind));
    return best;
}

void cl_tell_choice(coll_comm *c, const cl_algo *chosen, const cl_op *op)
{
    size_t bytes = op->count * cl_dtype_size(op->dtype);
    int cls = bytes ? 63 - __builtin_clzll((unsigned long long)bytes) : 0;
    /* Once per class either way: the level check takes a lock, the bit test does not. */
    if (c->told[op->kind] >> cls & 1)
        return;
    c->told[op->kind] |= 1ull << cls;
    if (!cl_log_enabled(COLL_LOG_INFO))
        return;
    char prices[256] = "";
    for (int i = 0; cl_algos[i]; i++) {
        size_t at = strlen(prices);
        if (cl_runs(&c->topo, cl_algos[i], op))
            snprintf(prices + at, sizeof(prices) - at, " %s %.1f us", cl_algos[i]->name,
                     cl_price(&c->topo, cl_algos[i], op) * 1e6);
    }
    cl_log(COLL_LOG_INFO, "rank %d %s of %zu bytes (class 2^%d) on %d ranks: %s%s; model:%s",
           c->rank, cl_kind_name(op->kind), bytes, cls, c->size, chosen->name,
           c->force[0] && chosen == cl_algo_named(c->force) ? " (COLL_ALGO)" : "", prices);
}
