/* Splits that share their parent's links (COLL_SPLIT_SHARE=1, core/family.h), through the
 * public API on real processes: no connection the root has is opened again, results are
 * exact, an order that differs between ranks is COLL_EMISMATCH, and the family has one
 * fate while the root's links outlive its destroy. */
#include "collective.h"
#include "common/harness.h"
#include "common/suite.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

static const char *transports[] = {"tcp", "shm"};

static void sharing(int rank, void *arg)
{
    (void)rank, (void)arg;
    setenv("COLL_SPLIT_SHARE", "1", 1);
}

static void expect_all_pass(int n, const char *tr, rank_fn fn)
{
    run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .transport = tr, .timeout_ms = 5000,
                  .deadline_s = 60, .setup = sharing, .fn_destroys = 1};
    int failed = run_ranks(&o, fn, NULL);
    ck_assert_msg(failed == 0, "%d of %d ranks failed on %s", failed, n, tr);
}

static int open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

/* Evens and odds split, each half splits again; point-to-point on the halves and on the
 * world between the same ranks, all-reduces on halves, quarters and the world,
 * interleaved: exact. */
static int halves_and_quarters(coll_comm *c, int *fds)
{
    int me = coll_rank(c);
    coll_comm *half = NULL, *quarter = NULL;
    EXPECT_RC(coll_split(c, me % 2, me, &half), COLL_OK);
    int h = coll_rank(half), hn = coll_size(half);
    EXPECT_RC(coll_split(half, h < 2, h, &quarter), COLL_OK);
    for (int round = 0; round < 3; round++) {
        for (int d = 1; d < hn; d++) {
            int out = me * 100 + d, in = -1, to = (h + d) % hn, from = (h + hn - d) % hn;
            EXPECT_RC(coll_sendrecv(half, &out, 1, to, &in, 1, from, COLL_I32, (uint32_t)d),
                      COLL_OK);
            FAIL_IF(in != (from * 2 + me % 2) * 100 + d, "half rank %d got %d from %d", h, in,
                    from);
        }
        /* The world's messages to the same peers, on the same links, in between. */
        int out = -me, in = 1, to = (me + 2) % 6, from = (me + 4) % 6;
        EXPECT_RC(coll_sendrecv(c, &out, 1, to, &in, 1, from, COLL_I32, 5), COLL_OK);
        FAIL_IF(in != -from, "world rank %d got %d from %d", me, in, from);
        int want = 0;
        for (int r = me % 2; r < 6; r += 2)
            want += (r / 2 < 2) == (h < 2) ? r : 0;
        if (sum_is(quarter, me, want) || sum_is(half, me, me % 2 ? 9 : 6) || sum_is(c, me, 15))
            return 1;
    }
    *fds = open_descriptors();
    coll_destroy(quarter);
    coll_destroy(half);
    return 0;
}

/* 6 ranks make the same splits twice. The second time every link the splits use is one
 * their root opened for the first ones, so the only descriptors they add are their two
 * lifelines (splits of their own would add a transport and its links each time). */
static int split_of_split_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int during = 0;
    if (halves_and_quarters(c, &during))
        return 1;
    int before = open_descriptors();
    if (halves_and_quarters(c, &during))
        return 1;
    FAIL_IF(during - before != 2, "the second splits added %d descriptors, want 2 (their "
            "lifelines)", during - before);
    FAIL_IF(open_descriptors() != before, "destroying them left %d descriptors, want %d",
            open_descriptors(), before);
    EXPECT_RC(coll_barrier(c), COLL_OK);
    coll_destroy(c);
    return 0;
}

START_TEST(a_split_of_a_split_opens_no_link_its_root_has)
{
    expect_all_pass(6, transports[_i], split_of_split_rank);
}
END_TEST

/* The same asked for by coll_config.split_share instead of the environment. */
START_TEST(split_share_in_the_config_does_the_same)
{
    run_opts o = {.nranks = 6, .rdzv = RDZV_FILE, .transport = "tcp", .timeout_ms = 5000,
                  .deadline_s = 60, .fn_destroys = 1, .split_share = 1};
    int failed = run_ranks(&o, split_of_split_rank, NULL);
    ck_assert_msg(failed == 0, "%d of 6 ranks failed", failed);
}
END_TEST

/* Rank 0 issues the world's all-reduce before the split's, rank 1 the other way round;
 * both have the same sequence number, count and type, so only the communicator's mark
 * on the wire tells them apart: COLL_EMISMATCH on both ranks, not a sum of the wrong
 * numbers. */
static int crossed_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    coll_comm *sub = NULL;
    EXPECT_RC(coll_split(c, 0, me, &sub), COLL_OK);
    if (sum_is(sub, me, 1)) /* the split's #2 now meets the world's #2 (#1: the split) */
        return 1;
    int in[2] = {me + 10, me + 20}, out[2] = {-1, -1};
    coll_req *r[2];
    coll_comm *first = me == 0 ? c : sub, *second = me == 0 ? sub : c;
    EXPECT_RC(coll_iallreduce(first, &in[0], &out[0], 1, COLL_I32, COLL_SUM, &r[0]), COLL_OK);
    /* The first may have failed the family already: the second is refused then. */
    int s1 = coll_iallreduce(second, &in[1], &out[1], 1, COLL_I32, COLL_SUM, &r[1]);
    int s0 = coll_wait(r[0]);
    s1 = s1 == COLL_OK ? coll_wait(r[1]) : s1;
    FAIL_IF(s0 != COLL_EMISMATCH || s1 == COLL_OK,
            "statuses %s, %s; want a mismatch, then a failure", coll_strerror(s0),
            coll_strerror(s1));
    coll_destroy(sub);
    coll_destroy(c);
    return 0;
}

START_TEST(an_order_that_differs_between_ranks_is_emismatch)
{
    expect_all_pass(2, transports[_i], crossed_rank);
}
END_TEST

/* The world is destroyed first: its split and the split's split go on over its links.
 * Then rank 0 aborts the innermost: on rank 0 every member has failed, and the other
 * ranks' next all-reduce on the middle one fails within the timeout. */
static int fate_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c), n = coll_size(c);
    coll_comm *mid = NULL, *inner = NULL;
    EXPECT_RC(coll_split(c, 0, -me, &mid), COLL_OK);
    EXPECT_RC(coll_split(mid, 0, me, &inner), COLL_OK);
    EXPECT_RC(coll_destroy(c), COLL_OK);
    c = mid;
    if (sum_is(mid, me, n * (n - 1) / 2) || sum_is(inner, me, n * (n - 1) / 2))
        return 1;
    int m = coll_rank(mid), out = m, in = -1;
    EXPECT_RC(coll_sendrecv(mid, &out, 1, (m + 1) % n, &in, 1, (m + n - 1) % n, COLL_I32, 1),
              COLL_OK);
    FAIL_IF(in != (m + n - 1) % n, "got %d", in);
    EXPECT_RC(coll_barrier(inner), COLL_OK);
    if (me == 0) {
        EXPECT_RC(coll_abort(inner), COLL_OK);
        int x = 1, y;
        EXPECT_RC(coll_allreduce(mid, &x, &y, 1, COLL_I32, COLL_SUM), COLL_ESTATE);
    } else {
        int x = 1, y, rc = coll_allreduce(mid, &x, &y, 1, COLL_I32, COLL_SUM);
        FAIL_IF(rc == COLL_OK, "the all-reduce after rank 0's abort succeeded");
        EXPECT_RC(coll_barrier(inner), COLL_ESTATE);
    }
    coll_destroy(mid);
    coll_destroy(inner);
    return 0;
}

START_TEST(the_family_shares_one_fate_and_outlives_its_root)
{
    expect_all_pass(3, transports[_i], fate_rank);
}
END_TEST

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

enum { DEATH_TIMEOUT_MS = 3000 };

/* 4 ranks: evens and odds share the world's links; each step all-reduces 256 KiB on the
 * half, then on the world. Rank 3 is killed at step 5. Every survivor's first failure
 * (rank 1's on its half, the others' on the world) is EPEER or ETIMEDOUT within two
 * timeouts, and then its other communicator says ESTATE: one fate. */
static int death_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    coll_comm *half = NULL;
    EXPECT_RC(coll_split(c, me % 2, me, &half), COLL_OK);
    size_t count = 1 << 16;
    float *buf = calloc(count, sizeof(float));
    for (int step = 0; step < 100; step++) {
        if (me == 3 && step == 5)
            raise(SIGKILL);
        coll_comm *both[2] = {half, c};
        for (int k = 0; k < 2; k++) {
            long long t0 = now_ms();
            int rc = coll_allreduce(both[k], buf, buf, count, COLL_F32, COLL_SUM);
            long long took = now_ms() - t0;
            if (rc == COLL_OK)
                continue;
            FAIL_IF(rc != COLL_EPEER && rc != COLL_ETIMEDOUT, "step %d: %s, want EPEER or "
                    "ETIMEDOUT", step, coll_strerror(rc));
            FAIL_IF(took > 2 * DEATH_TIMEOUT_MS, "failed after %lld ms", took);
            EXPECT_RC(coll_barrier(both[1 - k]), COLL_ESTATE);
            free(buf);
            coll_destroy(half);
            coll_destroy(c);
            return 0;
        }
    }
    FAIL_IF(1, "never noticed rank 3 die");
}

START_TEST(a_dead_rank_fails_the_family_on_every_survivor)
{
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .transport = transports[_i],
                  .timeout_ms = DEATH_TIMEOUT_MS, .deadline_s = 60, .setup = sharing,
                  .fn_destroys = 1};
    run_ranks(&o, death_rank, NULL);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(last_exit[r] == 0, "survivor %d exit %d on %s", r, last_exit[r],
                      transports[_i]);
    ck_assert_msg(last_exit[3] == -1, "rank 3 was not killed");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("family");
    TCase *t = tcase_create("family");
    tcase_set_timeout(t, 90);
    tcase_add_loop_test(t, a_split_of_a_split_opens_no_link_its_root_has, 0, 2);
    tcase_add_test(t, split_share_in_the_config_does_the_same);
    tcase_add_loop_test(t, an_order_that_differs_between_ranks_is_emismatch, 0, 2);
    tcase_add_loop_test(t, the_family_shares_one_fate_and_outlives_its_root, 0, 2);
    tcase_add_loop_test(t, a_dead_rank_fails_the_family_on_every_survivor, 0, 2);
    suite_add_tcase(s, t);
    return run_suite(s);
}
