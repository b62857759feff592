/* Topology: ranks of one machine told apart as hosts with COLL_HOST (what a cluster's
 * hosts look like to the library, without namespaces). The ring runs in host order
 * whatever the numbering (COLL_DEBUG=info's ring line names it), every all-reduce
 * algorithm gives exact, bit-identical results on uneven hosts with scrambled numbering,
 * reduce-scatter, all-gather and broadcast (run in host order, hier's too) and the rest
 * of the collective set keep rank order there, and a failure names the communicator's
 * ranks, not ring positions. */
#include "common/harness.h"
#include "common/suite.h"
#include "coll/matrix_set.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const int *host; /* per rank */
    const int *ring; /* the host order the library must choose */
    const char *algo;
    const char *segment; /* COLL_SEGMENT_BYTES, or NULL */
    int uneven; /* hosts differ, hier is forced, whole segments: its folds' bytes are checked */
} topo;

static char ring_line[512], link_line[512];

static void keep_ring_line(coll_log_level level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    if (!msg) /* never, but GCC under ASan cannot tell, and warns at the snprintf */
        return;
    if (strstr(msg, ", ring"))
        snprintf(ring_line, sizeof(ring_line), "%s", msg);
    if (strstr(msg, "host link measured"))
        snprintf(link_line, sizeof(link_line), "%s", msg);
}

static void as_host(int rank, void *arg)
{
    const topo *t = arg;
    char name[32];
    snprintf(name, sizeof(name), "host%d", t->host[rank]);
    setenv("COLL_HOST", name, 1);
    if (t->algo)
        setenv("COLL_ALGO", t->algo, 1);
    if (t->segment) /* reduce-scatter and all-gather then run in many rounds */
        setenv("COLL_SEGMENT_BYTES", t->segment, 1);
    coll_set_log(keep_ring_line, NULL, COLL_LOG_INFO);
}

static float val(int r, size_t k)
{
    return (float)((r + 1) * (int)(k % 13 + 1));
}

/* Reduce-scatter (sum, average; in place and not), all-gather (in place and not) and
 * broadcast from every root, laid out by rank number whatever runs them in host order:
 * exact, 0 when right. */
static int layouts_right(coll_comm *c, size_t count)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t total = count * (size_t)n;
    float *s = malloc(total * sizeof(float)), *r = malloc(total * sizeof(float));
    for (int in_place = 0; in_place < 2; in_place++) {
        for (size_t j = 0; j < total; j++)
            s[j] = val(me, j);
        float *out = in_place ? s + (size_t)me * count : r;
        EXPECT_RC(coll_reduce_scatter(c, s, out, count, COLL_F32, COLL_SUM), COLL_OK);
        for (size_t k = 0; k < count; k++)
            FAIL_IF(out[k] != (float)(n * (n + 1) / 2) * (float)((me * count + k) % 13 + 1),
                    "reduce-scatter of %zu (in place %d): element %zu is %g", count, in_place, k,
                    out[k]);
        float *mine = in_place ? r + (size_t)me * count : s;
        for (size_t k = 0; k < count; k++)
            mine[k] = val(me, k);
        EXPECT_RC(coll_allgather(c, mine, r, count, COLL_F32), COLL_OK);
        for (size_t j = 0; j < total; j++)
            FAIL_IF(r[j] != val((int)(j / count), j % count),
                    "all-gather of %zu (in place %d): element %zu is %g", count, in_place, j, r[j]);
    }
    double d[8], avg;
    for (int b = 0; b < n; b++)
        d[b] = me * 8 + b;
    EXPECT_RC(coll_reduce_scatter(c, d, &avg, 1, COLL_F64, COLL_AVG), COLL_OK);
    FAIL_IF(avg != (n - 1) * 4.0 + me, "reduce-scatter average %g", avg);
    for (int root = 0; root < n; root++) {
        for (size_t k = 0; k < count; k++)
            s[k] = me == root ? val(root, k) : -1;
        EXPECT_RC(coll_broadcast(c, s, count, COLL_F32, root), COLL_OK);
        for (size_t k = 0; k < count; k++)
            FAIL_IF(s[k] != val(root, k), "broadcast of %zu from %d: element %zu is %g", count,
                    root, k, s[k]);
    }
    free(s);
    free(r);
    return 0;
}

/* The ring line names this rank's neighbours in t->ring; all-reduces of several sizes
 * are exact and the same everywhere, and so are the collectives laid out by rank. */
static int ordered_rank(coll_comm *c, void *arg)
{
    const topo *t = arg;
    int n = coll_size(c), me = coll_rank(c), at = 0;
    while (t->ring[at] != me)
        at++;
    int moved = 0;
    for (int v = 0; v < n; v++)
        moved |= t->ring[v] != v;
    char want[64];
    snprintf(want, sizeof(want), "ring%s %d -> %d -> %d:", moved ? " (host order)" : "",
             t->ring[(at + n - 1) % n], me, t->ring[(at + 1) % n]);
    FAIL_IF(!strstr(ring_line, want), "expected '%s' in the ring line '%s'", want, ring_line);
    static const size_t counts[] = {1, 7, 1000, 65536, 300001};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        size_t count = counts[i];
        if (t->algo && !strcmp(t->algo, "doubling") && count > 16384)
            continue; /* doubling serves small messages only */
        float *x = malloc(count * sizeof(float));
        for (size_t k = 0; k < count; k++)
            x[k] = val(me, k);
        coll_stats before, after;
        coll_get_stats(c, &before);
        EXPECT_RC(coll_allreduce(c, x, x, count, COLL_F32, COLL_SUM), COLL_OK);
        coll_get_stats(c, &after);
        /* hier's folds: what this rank sent is what the library says it sends (its lane's
         * part, or its vector once), plus a 32-byte header per message. */
        size_t said = coll_allreduce_wire_bytes(c, count, COLL_F32);
        uint64_t sent = after.wire_tx - before.wire_tx;
        FAIL_IF(t->uneven && (sent < said || sent > said + 64u * (unsigned)n),
                "count %zu: sent %llu bytes, the library says %zu", count,
                (unsigned long long)sent, said);
        for (size_t k = 0; k < count; k++)
            FAIL_IF(x[k] != (float)(n * (n + 1) / 2) * (float)(k % 13 + 1),
                    "count %zu: element %zu is %g", count, k, x[k]);
        FAIL_IF(!identical_everywhere(c, x, count * sizeof(float)), "count %zu differs", count);
        free(x);
    }
    double avg = me;
    EXPECT_RC(coll_allreduce(c, &avg, &avg, 1, COLL_F64, COLL_AVG), COLL_OK);
    FAIL_IF(avg != (n - 1) / 2.0, "average of the ranks is %g", avg);
    static const size_t blocks[] = {1, 5, 3001, 70001};
    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++)
        if (layouts_right(c, blocks[i]))
            return 1;
    return 0;
}

static int run_topo(int n, const int *host, const int *ring, const char *transport,
                    const char *algo, const char *segment)
{
    topo t = {host, ring, algo, segment, 0};
    run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .transport = transport, .setup = as_host};
    return run_ranks(&o, ordered_rank, &t);
}

static const int rr_host[] = {0, 1, 0, 1}, rr_ring[] = {0, 2, 1, 3};
/* 3 + 2 + 2 and 3 + 3 + 2 ranks, numbered at random. */
static const int uneven_host[] = {2, 0, 1, 0, 2, 1, 0}, uneven_ring[] = {0, 4, 1, 3, 6, 2, 5};
static const int uneven8_host[] = {1, 0, 2, 1, 0, 2, 0, 1};
static const int uneven8_ring[] = {0, 3, 7, 1, 4, 6, 2, 5};
/* 1 + 3 + 1 + 1: Rabenseifner's two folds, one inside the host of three, one across (the
 * ranks left alone on their hosts pair up). */
static const int h3111_host[] = {1, 0, 2, 0, 3, 0}, h3111_ring[] = {0, 1, 3, 5, 2, 4};

START_TEST(round_robin_hosts_ring_in_host_order)
{
    static const char *transports[] = {"tcp", "auto"};
    ck_assert_int_eq(run_topo(4, rr_host, rr_ring, transports[_i], NULL, NULL), 0);
}
END_TEST

/* hier: 4 hosts x 2 round-robin, 3 x 2 scrambled, 2 x 3 blocked (rank order); 4 x 2
 * again with 4 KiB segments, so a reduce-scatter or all-gather takes many rounds. */
static const int h42_host[] = {0, 1, 2, 3, 0, 1, 2, 3}, h42_ring[] = {0, 4, 1, 5, 2, 6, 3, 7};
static const int h32_host[] = {0, 1, 1, 2, 0, 2}, h32_ring[] = {0, 4, 1, 2, 3, 5};
static const int h23_host[] = {0, 0, 0, 1, 1, 1}, h23_ring[] = {0, 1, 2, 3, 4, 5};

typedef struct {
    int n;
    const int *host, *ring;
    const char *tr, *segment;
} hier_case;

/* hier forced on k; uneven: its folds' bytes are checked too (whole segments only). */
static int run_hier(const hier_case *k, int uneven)
{
    topo t = {k->host, k->ring, "hier", k->segment, uneven && !k->segment};
    run_opts o = {.nranks = k->n, .rdzv = RDZV_FILE, .transport = k->tr, .setup = as_host};
    return run_ranks(&o, ordered_rank, &t);
}

START_TEST(hier_on_even_hosts)
{
    static const hier_case k[] = {{8, h42_host, h42_ring, "auto", NULL},
                                  {6, h32_host, h32_ring, "auto", NULL},
                                  {6, h23_host, h23_ring, "tcp", NULL},
                                  {8, h42_host, h42_ring, "tcp", "4096"}};
    ck_assert_int_eq(run_hier(&k[_i], 0), 0);
}
END_TEST

/* hier on hosts that differ: 3 + 2 + 2 and 3 + 3 + 2 scrambled (one rank past the lanes
 * on a host, two hosts with one), 5 + 2 (a lane that takes two ranks in), 2 + 1 + 1 (one
 * lane: the host of two folds, the ring across is all there is); 3 + 2 + 2 again with
 * 4 KiB segments (a reduce-scatter or all-gather in many rounds). All-reduce,
 * reduce-scatter and all-gather, their groups of blocks uneven. */
static const int h52_host[] = {0, 1, 0, 0, 1, 0, 0}, h52_ring[] = {0, 2, 3, 5, 6, 1, 4};
static const int h211_host[] = {0, 1, 0, 2}, h211_ring[] = {0, 2, 1, 3};

START_TEST(hier_on_uneven_hosts)
{
    static const hier_case k[] = {{7, uneven_host, uneven_ring, "auto", NULL},
                                  {8, uneven8_host, uneven8_ring, "tcp", NULL},
                                  {7, h52_host, h52_ring, "auto", NULL},
                                  {4, h211_host, h211_ring, "tcp", NULL},
                                  {7, uneven_host, uneven_ring, "tcp", "4096"}};
    ck_assert_int_eq(run_hier(&k[_i], 1), 0);
}
END_TEST

START_TEST(uneven_scrambled_hosts_every_algorithm)
{
    /* Doubling needs a power of two; unforced, the model chooses per size. */
    static const char *algos[] = {"ring", "doubling", NULL, "rabenseifner", "rabenseifner",
                                  "rabenseifner"};
    if (_i == 1 || _i == 4)
        ck_assert_int_eq(run_topo(8, uneven8_host, uneven8_ring, "auto", algos[_i], NULL), 0);
    else if (_i == 5)
        ck_assert_int_eq(run_topo(6, h3111_host, h3111_ring, "auto", algos[_i], NULL), 0);
    else
        ck_assert_int_eq(run_topo(7, uneven_host, uneven_ring, "auto", algos[_i], NULL), 0);
}
END_TEST

/* Reduce, gather, scatter, all-to-all(v), the v-forms: rank order on scrambled hosts. */
static int set_rank(coll_comm *c, void *arg)
{
    (void)arg;
    size_t count = 37, n = (size_t)coll_size(c);
    char *s = malloc((count + 8) * n * 9 * 8), *r = malloc((count + 8) * n * 9 * 8);
    int bad = set_cases(c, s, r, count, COLL_F32, 2) || set_cases(c, s, r, count, COLL_I64, 2);
    free(s);
    free(r);
    FAIL_IF(bad, "a collective of the set was wrong on emulated hosts");
    /* And the layout collectives: all-gather and reduce-scatter by rank. */
    float mine = (float)coll_rank(c), all[8];
    EXPECT_RC(coll_allgather(c, &mine, all, 1, COLL_F32), COLL_OK);
    for (size_t k = 0; k < n; k++)
        FAIL_IF(all[k] != (float)k, "all-gather block %zu is %g", k, all[k]);
    return 0;
}

/* Rank 0 measured the link to rank 1 (the first of the second host) and said so, with
 * a latency and a rate; nobody else measured, and nobody where the link was given. */
static int link_rank(coll_comm *c, void *arg)
{
    (void)arg;
    double us, gbps;
    int peer, told = getenv("COLL_NET_GBPS") != NULL, said = link_line[0] != 0;
    FAIL_IF(said != (!told && coll_rank(c) == 0), "link line '%s' on rank %d", link_line,
            coll_rank(c));
    if (said)
        FAIL_IF(sscanf(strstr(link_line, "between"), "between ranks 0 and %d: %lf us, %lf Gbit/s",
                       &peer, &us, &gbps) != 3 ||
                    peer != 1 || us <= 0 || gbps <= 0,
                "link line '%s'", link_line);
    float x = 1; /* and the communicator works */
    EXPECT_RC(coll_allreduce(c, &x, &x, 1, COLL_F32, COLL_SUM), COLL_OK);
    FAIL_IF(x != (float)coll_size(c), "sum %g", x);
    return 0;
}

static void as_host_told(int rank, void *arg)
{
    as_host(rank, arg);
    setenv("COLL_NET_GBPS", "10", 1);
}

START_TEST(the_host_link_is_measured_unless_given)
{
    topo t = {rr_host, rr_ring, NULL, NULL, 0};
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .transport = "tcp",
                  .setup = _i ? as_host_told : as_host};
    ck_assert_int_eq(run_ranks(&o, link_rank, &t), 0);
}
END_TEST

START_TEST(collective_set_keeps_rank_order)
{
    topo t = {uneven_host, uneven_ring, NULL, NULL, 0};
    run_opts o = {.nranks = 7, .rdzv = RDZV_FILE, .transport = "auto", .setup = as_host};
    ck_assert_int_eq(run_ranks(&o, set_rank, &t), 0);
}
END_TEST

/* Rank 1 leaves after init; on the ring 0 -> 2 -> 1 -> 3, rank 2 sends to it and rank 3
 * receives from it: both name rank 1 (its position is 2). */
static int leaver_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    if (me == 1)
        return 0; /* the harness destroys it */
    float x[4096] = {0};
    int rc = COLL_OK;
    for (int i = 0; i < 20 && rc == COLL_OK; i++)
        rc = coll_allreduce(c, x, x, 4096, COLL_F32, COLL_SUM);
    FAIL_IF(rc == COLL_OK, "all-reduces went on without rank 1");
    const char *err = coll_last_error(c);
    if (me == 2 || me == 3)
        FAIL_IF(!strstr(err, "peer 1 ") && !strstr(err, "rank 1 "),
                "the error does not name rank 1: %s", err);
    return 0;
}

START_TEST(failure_names_ranks_not_positions)
{
    topo t = {rr_host, rr_ring, NULL, NULL, 0};
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .transport = "tcp", .timeout_ms = 3000,
                  .setup = as_host};
    ck_assert_int_eq(run_ranks(&o, leaver_rank, &t), 0);
}
END_TEST

/* auto between hosts, each with two rails (loopback twice): the ring's links to the
 * other host are rails' of two (issue 55, no configuration: NICs on one network are
 * striped), those on the host shm; large all-reduces are right. With one rail each, the
 * links are tcp's own connections (cl_rails_sole: no rails layer). */
static int host_rails; /* COLL_RAILS_REPEAT */

static void as_host_with_rails(int rank, void *arg)
{
    as_host(rank, arg);
    char n[8];
    snprintf(n, sizeof(n), "%d", host_rails);
    setenv("COLL_RAILS_REPEAT", n, 1);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
}

static int striped_rank(coll_comm *c, void *arg)
{
    (void)arg;
    enum { N = 1 << 20 };
    int n = coll_size(c);
    float *x = malloc(N * sizeof(float));
    for (int i = 0; i < 3; i++) {
        for (size_t k = 0; k < N; k++)
            x[k] = val(coll_rank(c), k);
        EXPECT_RC(coll_allreduce(c, x, x, N, COLL_F32, COLL_SUM), COLL_OK);
        for (size_t k = 0; k < N; k++)
            FAIL_IF(x[k] != (float)(n * (n + 1) / 2 * (int)(k % 13 + 1)), "[%zu] = %g", k, x[k]);
    }
    free(x);
    if (host_rails > 1)
        FAIL_IF(!strstr(ring_line, "via rails") || !strstr(ring_line, "(2 rails)") ||
                    !strstr(ring_line, "via shm"),
                "not a striped link to the other host and shm on this one: %s", ring_line);
    else
        FAIL_IF(!strstr(ring_line, "via tcp") || strstr(ring_line, "rails") ||
                    !strstr(ring_line, "via shm"),
                "not tcp's own link to the other host and shm on this one: %s", ring_line);
    return 0;
}

START_TEST(auto_stripes_to_another_host_over_every_rail)
{
    host_rails = 2 - _i;
    topo t = {rr_host, rr_ring, NULL, NULL, 0};
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .transport = "auto",
                  .setup = as_host_with_rails};
    ck_assert_int_eq(run_ranks(&o, striped_rank, &t), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("topo");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, round_robin_hosts_ring_in_host_order, 0, 2);
    tcase_add_loop_test(tc, uneven_scrambled_hosts_every_algorithm, 0, 6);
    tcase_add_loop_test(tc, hier_on_even_hosts, 0, 4);
    tcase_add_loop_test(tc, hier_on_uneven_hosts, 0, 5);
    tcase_add_test(tc, collective_set_keeps_rank_order);
    tcase_add_loop_test(tc, the_host_link_is_measured_unless_given, 0, 2);
    tcase_add_test(tc, failure_names_ranks_not_positions);
    tcase_add_loop_test(tc, auto_stripes_to_another_host_over_every_rail, 0, 2);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
