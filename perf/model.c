/* What the library would do on a cluster: for a placement of ranks on hosts and the host
 * link's latency and rate, each all-reduce algorithm's predicted time per size (the
 * engine's own cost model, lib/core/choose.c, run on rank 0's view) and the one it
 * chooses. `--project` prints the choices for 64, 256 and 1024 ranks, 8 per host, on
 * 100 and 25 Gbit/s links with 2 and 10 us of latency. A prediction, not a measurement:
 * perf/cluster.sh measures. */
#include "core/comm.h"

#include "kernels/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, hosts, blocked;
    double lat_us, gbps;
} cluster;

/* Rank 0's communicator on that cluster, with no links: enough for the cost model. */
static coll_comm *paper_comm(const cluster *k)
{
    coll_comm *c = calloc(1, sizeof(*c));
    cl_card *cards = calloc((size_t)k->n, sizeof(*cards));
    int per = (k->n + k->hosts - 1) / k->hosts;
    c->size = k->n;
    c->net_alpha_s = k->lat_us * 1e-6;
    c->net_beta_s = 8.0 / (k->gbps * 1e9);
    c->algo[CL_CH_COLL] = (cl_algo_ctx){.size = k->n, .segment_bytes = CL_DEFAULT_SEGMENT};
    for (int d = 0; d < 2; d++)
        c->conns[CL_CH_COLL][d] = calloc((size_t)k->n, sizeof(cl_tr_conn *));
    for (int r = 0; r < k->n; r++)
        cards[r].host = (uint64_t)(k->blocked ? r / per : r % k->hosts) + 1;
    if (cl_topo_order(c, cards) != COLL_OK) {
        fprintf(stderr, "model: out of memory\n");
        exit(2);
    }
    cl_topo_contexts(c);
    free(cards);
    return c;
}

static void paper_free(coll_comm *c)
{
    cl_topo_free(&c->topo);
    free(c->conns[CL_CH_COLL][0]);
    free(c->conns[CL_CH_COLL][1]);
    free(c);
}

static const cl_algo *choice(coll_comm *c, size_t bytes)
{
    char why[160];
    cl_op op = {.kind = CL_ALLREDUCE, .count = bytes / 4, .dtype = COLL_F32, .op = COLL_SUM};
    return cl_choose(c, &op, why, sizeof(why));
}

static void table(const cluster *k)
{
    coll_comm *c = paper_comm(k);
    printf("# %d ranks on %d hosts (%s), host links %.0f Gbit/s, %.0f us; predicted us\n", k->n,
           k->hosts, k->blocked ? "blocked" : "round-robin", k->gbps, k->lat_us);
    printf("%10s", "bytes");
    for (int i = 0; cl_algos[i]; i++)
        if (cl_algos[i]->serves & CL_SERVES(CL_ALLREDUCE) && cl_algos[i] != &cl_algo_codec)
            printf(" %12s", cl_algos[i]->name);
    printf("   chosen\n");
    for (size_t bytes = 8; bytes <= ((size_t)256 << 20); bytes *= 8) {
        cl_op op = {.kind = CL_ALLREDUCE, .count = bytes / 4, .dtype = COLL_F32, .op = COLL_SUM};
        printf("%10zu", bytes);
        for (int i = 0; cl_algos[i]; i++) {
            const cl_algo *a = cl_algos[i];
            if (!(a->serves & CL_SERVES(CL_ALLREDUCE)) || a == &cl_algo_codec)
                continue;
            if (a->fits(cl_topo_ctx(c, a, &op), &op))
                printf(" %12.1f", cl_price(c, a, &op) * 1e6);
            else
                printf(" %12s", "-");
        }
        printf("   %s\n", choice(c, bytes)->name);
    }
    paper_free(c);
}

static void project(void)
{
    printf("# the choice per size, 8 ranks per host, round-robin numbering\n");
    printf("%6s %6s %6s", "ranks", "Gbit/s", "us");
    for (size_t bytes = 8; bytes <= ((size_t)256 << 20); bytes *= 8)
        printf(" %12zu", bytes);
    printf("\n");
    static const int ranks[] = {64, 256, 1024};
    static const double rates[] = {100, 25}, lats[] = {2, 10};
    for (int i = 0; i < 3; i++)
        for (int g = 0; g < 2; g++)
            for (int l = 0; l < 2; l++) {
                cluster k = {ranks[i], ranks[i] / 8, 0, lats[l], rates[g]};
                coll_comm *c = paper_comm(&k);
                printf("%6d %6.0f %6.0f", k.n, k.gbps, k.lat_us);
                for (size_t bytes = 8; bytes <= ((size_t)256 << 20); bytes *= 8)
                    printf(" %12s", choice(c, bytes)->name);
                printf("\n");
                paper_free(c);
            }
}

int main(int argc, char **argv)
{
    cluster k = {8, 4, 0, 10, 25};
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--project")) {
            project();
            return 0;
        }
        if (!strcmp(a, "--blocked"))
            k.blocked = 1;
        else if (!strcmp(a, "-n") && ++i)
            k.n = atoi(v);
        else if (!strcmp(a, "-H") && ++i)
            k.hosts = atoi(v);
        else if (!strcmp(a, "-l") && ++i)
            k.lat_us = atof(v);
        else if (!strcmp(a, "-g") && ++i)
            k.gbps = atof(v);
        else
            bad = 1;
    }
    if (bad || k.n < 1 || k.hosts < 1 || k.hosts > k.n || k.gbps <= 0 || k.lat_us < 0) {
        fprintf(stderr, "usage: model [-n RANKS] [-H HOSTS] [--blocked] [-l LATENCY_US] "
                        "[-g GBIT_PER_S] | --project\n");
        return 2;
    }
    table(&k);
    return 0;
}
