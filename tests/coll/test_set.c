/* The collective set's contract beyond the matrix: the non-blocking forms complete with
 * the right data (the barrier's once every rank came, not before); counts or roots that
 * disagree between ranks are COLL_EMISMATCH on every rank within the timeout, never a
 * hang or garbage; bad arguments are COLL_EINVAL on the calling rank with a message
 * naming the call and the argument (and fail the communicator, as every bad argument
 * does); memory a large message grew is given back. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int nonblocking_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    int s[8], a2a[8], g[8], sc = -1, red = -1, agv[8], rsv = -1;
    size_t ones[8], displs[8];
    for (int i = 0; i < n; i++)
        s[i] = me * 10 + i, ones[i] = 1, displs[i] = (size_t)i;
    coll_req *q[6];
    EXPECT_RC(coll_ialltoall(c, s, a2a, 1, COLL_I32, &q[0]), COLL_OK);
    EXPECT_RC(coll_igather(c, &s[0], me == 1 % n ? g : NULL, 1, COLL_I32, 1 % n, &q[1]), COLL_OK);
    EXPECT_RC(coll_iscatter(c, me == 0 ? s : NULL, &sc, 1, COLL_I32, 0, &q[2]), COLL_OK);
    EXPECT_RC(coll_ireduce(c, &me, me == n - 1 ? &red : NULL, 1, COLL_I32, COLL_SUM, n - 1, &q[3]),
              COLL_OK);
    EXPECT_RC(coll_iallgatherv(c, &me, 1, agv, ones, displs, COLL_I32, &q[4]), COLL_OK);
    EXPECT_RC(coll_ireduce_scatterv(c, s, &rsv, ones, COLL_I32, COLL_MAX, &q[5]), COLL_OK);
    for (int i = 0; i < 6; i++)
        EXPECT_RC(coll_wait(q[i]), COLL_OK);
    for (int i = 0; i < n; i++) {
        FAIL_IF(a2a[i] != i * 10 + me, "alltoall block %d: %d", i, a2a[i]);
        FAIL_IF(me == 1 % n && g[i] != i * 10, "gather block %d: %d", i, g[i]);
        FAIL_IF(agv[i] != i, "allgatherv block %d: %d", i, agv[i]);
    }
    FAIL_IF(sc != me, "scatter gave %d", sc);
    FAIL_IF(me == n - 1 && red != n * (n - 1) / 2, "reduce gave %d", red);
    FAIL_IF(rsv != (n - 1) * 10 + me, "reduce_scatterv max gave %d", rsv);
    return 0;
}

START_TEST(the_nonblocking_forms_complete_with_the_right_data)
{
    static const char *const transports[] = {"tcp", "shm"};
    for (int n = 1; n <= 4; n += 3) {
        run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .transport = transports[_i],
                      .timeout_ms = 10000, .deadline_s = 60};
        ck_assert_int_eq(run_ranks(&o, nonblocking_rank, NULL), 0);
    }
}
END_TEST

/* The non-blocking barrier returns at once and is done only once every rank came: the
 * last rank enters 300 ms late (by the blocking form, which must meet it). */
static int ibarrier_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c), done = -1;
    coll_req *q = NULL;
    if (me == n - 1) {
        usleep(300 * 1000);
        EXPECT_RC(coll_barrier(c), COLL_OK);
        return sum_is(c, 1, n);
    }
    EXPECT_RC(coll_ibarrier(c, &q), COLL_OK);
    EXPECT_RC(coll_test(q, &done), COLL_INPROGRESS);
    FAIL_IF(done != 0, "the barrier was done before the last rank came");
    EXPECT_RC(coll_wait(q), COLL_OK);
    return sum_is(c, 1, n);
}

START_TEST(the_nonblocking_barrier_is_done_when_the_last_rank_comes)
{
    run_opts o = {.nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 60};
    ck_assert_int_eq(run_ranks(&o, ibarrier_rank, NULL), 0);
}
END_TEST

/* Rank 0 sends rank 1 one element more than rank 1 expects: both get COLL_EMISMATCH;
 * rank 2, whose own exchanges agreed, may finish first with the right data, and then
 * fails at its next call instead of waiting. */
static int count_mismatch_rank(coll_comm *c)
{
    int n = coll_size(c), me = coll_rank(c), buf[32] = {0}, out[32];
    size_t sc[8], rc[8], d[8];
    for (int i = 0; i < n; i++)
        sc[i] = rc[i] = 2, d[i] = (size_t)i * 4;
    if (me == 0)
        sc[1] = 3;
    return coll_alltoallv(c, buf, sc, d, out, rc, d, COLL_I32);
}

/* Rank 2 names root 1 where the others name 0, for a rooted collective of a few
 * elements (a binomial tree) or of many (the ring or the direct exchange). */
static int root_mismatch_rank(coll_comm *c, int kind, size_t count)
{
    int n = coll_size(c), root = coll_rank(c) == 2 ? 1 : 0, rc;
    int *buf = calloc((size_t)n * count, sizeof(int)), *out = calloc((size_t)n * count, sizeof(int));
    switch (kind) {
    case 0: rc = coll_reduce(c, buf, out, count, COLL_I32, COLL_SUM, root); break;
    case 1: rc = coll_gather(c, buf, out, count, COLL_I32, root); break;
    case 2: rc = coll_scatter(c, buf, out, count, COLL_I32, root); break;
    default: rc = coll_broadcast(c, buf, count, COLL_I32, root); break;
    }
    free(buf);
    free(out);
    return rc;
}

/* Case 0: the count mismatch; then reduce, gather, scatter and broadcast with roots that
 * disagree, small and large. Every rank gets COLL_EMISMATCH: from the call, or (a rank
 * whose own part agreed and ended first) from its next one. */
static int mismatch_rank(coll_comm *c, void *arg)
{
    int which = *(int *)arg;
    int rcode = which == 0 ? count_mismatch_rank(c)
                           : root_mismatch_rank(c, (which - 1) % 4, which > 4 ? 100003 : 4);
    if (rcode == COLL_OK) {
        rcode = coll_barrier(c);
        FAIL_IF(rcode == COLL_OK, "case %d: the barrier after a disagreement succeeded", which);
    }
    EXPECT_RC(rcode, COLL_EMISMATCH);
    FAIL_IF(!strstr(coll_last_error(c), "rank"), "the message should name the ranks");
    return 0;
}

START_TEST(disagreeing_counts_or_roots_are_emismatch_everywhere)
{
    int which = _i;
    run_opts o = {.nranks = which ? 4 : 3, .rdzv = RDZV_FILE, .transport = "tcp",
                  .timeout_ms = 5000, .deadline_s = 30};
    ck_assert_int_eq(run_ranks(&o, mismatch_rank, &which), 0);
}
END_TEST

/* Bad argument k, and what its sentence must name besides the call. */
static const char *const bad_names[] = { "coll_reduce: root 7", "coll_gather: root -1",
                                         "coll_alltoallv: sendcounts",
                                         "coll_allgatherv: sendcount 2",
                                         "coll_ireduce_scatterv: recvcounts",
                                         "coll_alltoall: sendbuf and recvbuf overlap",
                                         "coll_scatter: sendbuf", "coll_ibarrier: req" };

static int bad_arg(coll_comm *s, int k, void *arg)
{
    int *buf = arg, out[16];
    size_t counts[4] = { 1, 1, 1, 1 }, displs[4] = { 0, 1, 2, 3 };
    coll_req *q = (coll_req *)&q;
    int rc;
    switch (k) {
    case 0: return coll_reduce(s, buf, out, 1, COLL_I32, COLL_SUM, 7);
    case 1: return coll_gather(s, buf, out, 1, COLL_I32, -1);
    case 2: return coll_alltoallv(s, buf, NULL, displs, out, counts, displs, COLL_I32);
    case 3: return coll_allgatherv(s, buf, 2, out, counts, displs, COLL_I32);
    case 4:
        rc = coll_ireduce_scatterv(s, buf, out, NULL, COLL_I32, COLL_SUM, &q);
        return q ? COLL_OK : rc; /* a refused request must be NULL */
    case 5: return coll_alltoall(s, buf, buf + 1, 2, COLL_I32);
    case 6: return coll_scatter(s, NULL, out, 1, COLL_I32, 0);
    default: return coll_ibarrier(s, NULL);
    }
}

static int bad_args_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int buf[16] = { 0 };
    for (int k = 0; k < (int)(sizeof(bad_names) / sizeof(bad_names[0])); k++)
        if (einval_on_split(c, bad_arg, k, buf, bad_names[k]))
            return 1;
    return 0;
}

START_TEST(bad_arguments_are_einval_naming_the_call_and_argument)
{
    run_opts o = {.nranks = 1, .rdzv = RDZV_FILE, .timeout_ms = 5000, .deadline_s = 30};
    ck_assert_int_eq(run_ranks(&o, bad_args_rank, NULL), 0);
}
END_TEST

/* ---- memory a large message grew is given back -------------------------------------- */

static long rss_mib(void)
{
    long pages = 0, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    if (f)
        fclose(f);
    return resident * sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Freed memory stays resident under ASan (its quarantine) and valgrind (its allocator). */
static int rss_tells(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 0;
#else
    const char *pre = getenv("LD_PRELOAD");
    return !(pre && strstr(pre, "vgpreload"));
#endif
}

/* An in-place all-to-all-v of the halves of a big-element buffer on two ranks: each
 * block comes back where it went out from (MPI's layout), or to the other half. */
static int alltoallv_in_place(coll_comm *c, float *a, size_t big, int crossed)
{
    size_t counts[2] = {big / 2, big / 2}, sd[2] = {0, big / 2}, rd[2] = {big / 2, 0};
    return coll_alltoallv(c, a, counts, sd, a, counts, crossed ? rd : sd, COLL_F32);
}

/* A 32 MiB reduce makes rank 1 (not the root) accumulate a window of the vector in
 * scratch (16 segments: 8 MiB), not the message, and an in-place 32 MiB all-to-all, and
 * all-to-all-v in MPI's layout, swap their blocks a window at a time. An in-place
 * all-to-all-v whose blocks land elsewhere copies its send side to scratch whole; 16
 * small all-reduces later that memory is back with the system, while 16 large ones in a
 * row keep it (no churn in a loop of large messages). */
static int given_back_rank(coll_comm *c, void *arg)
{
    (void)arg;
    enum { BIG = 8 << 20 }; /* floats: 32 MiB */
    int me = coll_rank(c);
    float *a = malloc((size_t)BIG * 4), *b = malloc((size_t)BIG * 4), x = 1;
    FAIL_IF(!a || !b, "no memory");
    for (size_t i = 0; i < BIG; i++)
        a[i] = 1, b[i] = -1; /* resident before the first measure (zeros may stay unmapped) */
    for (int k = 0; k < 20; k++)
        EXPECT_RC(coll_allreduce(c, &x, &x, 1, COLL_F32, COLL_SUM), COLL_OK);
    long base = rss_mib();
    EXPECT_RC(coll_reduce(c, a, me == 0 ? b : NULL, BIG, COLL_F32, COLL_SUM, 0), COLL_OK);
    FAIL_IF(me == 0 && (b[0] != 2 || b[BIG - 1] != 2), "reduce gave %g, %g", b[0], b[BIG - 1]);
    long reduced = rss_mib();
    for (size_t i = 0; i < BIG; i++)
        a[i] = (float)(me + 1);
    EXPECT_RC(coll_alltoall(c, a, a, BIG / 2, COLL_F32), COLL_OK);
    FAIL_IF(a[0] != 1 || a[BIG - 1] != 2, "all-to-all gave %g, %g", a[0], a[BIG - 1]);
    long swapped = rss_mib();
    EXPECT_RC(alltoallv_in_place(c, a, BIG, 0), COLL_OK);
    FAIL_IF(a[0] != me + 1 || a[BIG - 1] != me + 1, "all-to-all-v gave %g, %g", a[0], a[BIG - 1]);
    long swapped_v = rss_mib();
    EXPECT_RC(alltoallv_in_place(c, a, BIG, 1), COLL_OK);
    FAIL_IF(a[0] != 2 || a[BIG - 1] != 1, "crossed all-to-all-v gave %g, %g", a[0], a[BIG - 1]);
    long grown = rss_mib();
    for (int k = 0; k < 16; k++)
        EXPECT_RC(coll_allreduce(c, &x, &x, 1, COLL_F32, COLL_SUM), COLL_OK);
    long back = rss_mib();
    for (int k = 0; k < 16; k++)
        EXPECT_RC(alltoallv_in_place(c, a, BIG, 1), COLL_OK);
    EXPECT_RC(coll_allreduce(c, &x, &x, 1, COLL_F32, COLL_SUM), COLL_OK);
    long kept = rss_mib();
    free(a);
    free(b);
    fprintf(stderr, "rank %d RSS MiB: %ld, after the reduce %ld, the all-to-all %ld, the "
            "all-to-all-v %ld, the crossed one %ld, 16 small %ld, 16 large %ld\n", me, base,
            reduced, swapped, swapped_v, grown, back, kept);
    FAIL_IF(me == 1 && rss_tells() && reduced - base > 16,
            "rank 1: the reduce's scratch grew %ld MiB: not bounded by its window",
            reduced - base);
    FAIL_IF(rss_tells() && (swapped - base > 16 || swapped_v - base > 16),
            "rank %d: the in-place all-to-all(-v) grew %ld / %ld MiB: not bounded by its window",
            me, swapped - base, swapped_v - base);
    FAIL_IF(rss_tells() && (grown - base < 24 || back - base > 8 || kept - base < 24),
            "rank %d: scratch not given back, or not kept in a loop", me);
    return 0;
}

START_TEST(memory_a_large_message_grew_is_given_back)
{
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "shm", .timeout_ms = 10000,
                  .deadline_s = 120};
    ck_assert_int_eq(run_ranks(&o, given_back_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("set");
    TCase *t = tcase_create("set");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, the_nonblocking_forms_complete_with_the_right_data, 0, 2);
    tcase_add_loop_test(t, disagreeing_counts_or_roots_are_emismatch_everywhere, 0, 9);
    tcase_add_test(t, the_nonblocking_barrier_is_done_when_the_last_rank_comes);
    tcase_add_test(t, bad_arguments_are_einval_naming_the_call_and_argument);
    tcase_add_test(t, memory_a_large_message_grew_is_given_back);
    suite_add_tcase(s, t);
    return run_suite(s);
}
