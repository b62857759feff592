/* What the library would do on a cluster: for a placement of ranks on hosts and the host
 * link's latency and rate, each algorithm's predicted time per size for a collective
 * (all-reduce by default; -C reduce_scatter, all_gather, broadcast: sizes are the whole
 * vector, as coll_perf's; -b, -e, -f: the sizes, 8 to 256M by 8 unless given) (the
 * engine's own cost model, lib/core/choose.c, on rank 0's topology) and the one it
 * chooses. `--project` prints the choices for 64, 256 and 1024 ranks, 8 per host, on
 * 100 and 25 Gbit/s links with 2 and 10 us of latency. A prediction, not a measurement:
 * perf/cluster.sh measures. */
#include "base/names.h"
#include "core/config.h"
#include "core/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, hosts, blocked;
    double lat_us, gbps;
    int kind;
    size_t from, to, factor; /* the sizes printed */
} cluster;

/* "64K", "1M", "8": bytes (0 when not a size). */
static size_t bytes_of(const char *v)
{
    char *end;
    unsigned long long b = strtoull(v, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    return (shift && end[1]) || (!shift && *end) ? 0 : (size_t)b << shift;
}

/* Rank 0's topology on that cluster: all the cost model asks for. */
typedef struct {
    cl_algo_ctx plain;
    cl_topo t;
} paper;

static void paper_make(paper *p, const cluster *k)
{
    uint64_t *hosts = calloc((size_t)k->n, sizeof(*hosts));
    int per = (k->n + k->hosts - 1) / k->hosts;
    p->plain = (cl_algo_ctx){.size = k->n, .segment_bytes = CL_DEFAULT_SEGMENT};
    p->t = (cl_topo){.plain = &p->plain,
                     .net_alpha_s = k->lat_us * 1e-6,
                     .net_beta_s = 8.0 / (k->gbps * 1e9)};
    for (int r = 0; hosts && r < k->n; r++)
        hosts[r] = (uint64_t)(k->blocked ? r / per : r % k->hosts) + 1;
    if (!hosts || cl_topo_order(&p->t, hosts) != COLL_OK) {
        fprintf(stderr, "model: out of memory\n");
        exit(2);
    }
    cl_topo_contexts(&p->t);
    free(hosts);
}

/* An operation of `bytes` in all (float32) of kind k->kind. */
static cl_op op_of(const cluster *k, size_t bytes)
{
    size_t count = bytes / 4;
    if (k->kind == CL_REDUCE_SCATTER || k->kind == CL_ALLGATHER)
        count /= (size_t)k->n; /* per rank */
    return (cl_op){.kind = k->kind, .count = count, .dtype = COLL_F32, .op = COLL_SUM};
}

static const cl_algo *choice(const cl_topo *t, const cluster *k, size_t bytes)
{
    char why[160];
    cl_op op = op_of(k, bytes);
    return cl_choose(t, "", &op, why, sizeof(why));
}

static int shown(const cluster *k, const cl_algo *a)
{
    return (a->serves & CL_SERVES(k->kind)) && a != &cl_algo_codec;
}

static void table(const cluster *k)
{
    paper p;
    paper_make(&p, k);
    printf("# %s: %d ranks on %d hosts (%s), host links %g Gbit/s, %g us; predicted us\n",
           cl_kind_name(k->kind), k->n, k->hosts, k->blocked ? "blocked" : "round-robin", k->gbps,
           k->lat_us);
    printf("%10s", "bytes");
    for (int i = 0; cl_algos[i]; i++)
        if (shown(k, cl_algos[i]))
            printf(" %12s", cl_algos[i]->name);
    printf("   chosen\n");
    for (size_t bytes = k->from; bytes <= k->to; bytes *= k->factor) {
        cl_op op = op_of(k, bytes);
        printf("%10zu", bytes);
        for (int i = 0; cl_algos[i]; i++) {
            const cl_algo *a = cl_algos[i];
            if (!shown(k, a))
                continue;
            if (a->fits(cl_topo_ctx(&p.t, a, &op), &op))
                printf(" %12.1f", cl_price(&p.t, a, &op) * 1e6);
            else
                printf(" %12s", "-");
        }
        printf("   %s\n", choice(&p.t, k, bytes)->name);
    }
    cl_topo_free(&p.t);
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
                cluster k = {ranks[i], ranks[i] / 8, 0, lats[l], rates[g], CL_ALLREDUCE, 0, 0, 0};
                paper p;
                paper_make(&p, &k);
                printf("%6d %6.0f %6.0f", k.n, k.gbps, k.lat_us);
                for (size_t bytes = 8; bytes <= ((size_t)256 << 20); bytes *= 8)
                    printf(" %12s", choice(&p.t, &k, bytes)->name);
                printf("\n");
                cl_topo_free(&p.t);
            }
}

int main(int argc, char **argv)
{
    cluster k = {8, 4, 0, 10, 25, CL_ALLREDUCE, 8, (size_t)256 << 20, 8};
    static const struct {
        const char *name;
        int kind;
    } kinds[] = {{"all_reduce", CL_ALLREDUCE}, {"reduce_scatter", CL_REDUCE_SCATTER},
                 {"all_gather", CL_ALLGATHER}, {"broadcast", CL_BROADCAST}};
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
        else if (!strcmp(a, "-b") && ++i)
            k.from = bytes_of(v);
        else if (!strcmp(a, "-e") && ++i)
            k.to = bytes_of(v);
        else if (!strcmp(a, "-f") && ++i)
            k.factor = bytes_of(v);
        else if (!strcmp(a, "-C") && ++i) {
            bad = 1;
            for (size_t j = 0; j < sizeof(kinds) / sizeof(kinds[0]); j++)
                if (!strcmp(v, kinds[j].name))
                    k.kind = kinds[j].kind, bad = 0;
        } else
            bad = 1;
    }
    if (bad || k.n < 1 || k.hosts < 1 || k.hosts > k.n || k.gbps <= 0 || k.lat_us < 0 ||
        !k.from || k.factor < 2) {
        fprintf(stderr, "usage: model [-n RANKS] [-H HOSTS] [--blocked] [-l LATENCY_US] "
                        "[-g GBIT_PER_S] [-C all_reduce|reduce_scatter|all_gather|broadcast] "
                        "[-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] | --project\n");
        return 2;
    }
    table(&k);
    return 0;
}
