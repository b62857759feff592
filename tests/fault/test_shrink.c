/* coll_shrink through the public API with real processes: ranks killed at a random
 * point of a run of all-reduces (one, two, rank 0 among them) or hung, on tcp, shm and auto; the
 * survivors agree on the same failed set, get a communicator of themselves in their old
 * order, and their all-reduces on it are right. A healthy communicator shrinks to a copy
 * of itself; bad arguments are errors. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TIMEOUT_MS = 2000, MAX_VICTIMS = 2 };

typedef struct {
    int victims[MAX_VICTIMS], nv, at; /* nv == 0: nobody dies, every rank shrinks */
    int stop;                         /* victims stop (SIGSTOP) instead of dying */
} plan;

static int is_victim(const plan *k, int r)
{
    for (int i = 0; i < k->nv; i++)
        if (k->victims[i] == r)
            return 1;
    return 0;
}

/* All-reduces until one fails (a victim dies at iteration `at`). */
static int run_until_failure(coll_comm *c, const plan *k)
{
    size_t count = 4096;
    float *buf = calloc(count, sizeof(float));
    int rc = COLL_OK;
    for (int it = 0; it < 400 && rc == COLL_OK; it++) {
        if (is_victim(k, coll_rank(c)) && it == k->at)
            raise(k->stop ? SIGSTOP : SIGKILL);
        rc = coll_allreduce(c, buf, buf, count >> (it % 5), COLL_F32, COLL_SUM);
        if (!k->nv && it == 10)
            break;
    }
    free(buf);
    return rc;
}

/* The new communicator: survivors in old order, and an all-reduce of old ranks. */
static int check_shrunk(coll_comm *c, coll_comm *s, const plan *k)
{
    int n = coll_size(c), me = coll_rank(c), want_rank = 0, want_size = 0;
    int32_t want_sum = 0;
    for (int r = 0; r < n; r++)
        if (!is_victim(k, r)) {
            want_rank += r < me;
            want_size++;
            want_sum += r;
        }
    FAIL_IF(coll_size(s) != want_size || coll_rank(s) != want_rank,
            "shrunk to rank %d of %d, want %d of %d", coll_rank(s), coll_size(s), want_rank,
            want_size);
    for (int round = 0; round < 3; round++) {
        int32_t v[1000], sum;
        for (int i = 0; i < 1000; i++)
            v[i] = me + i * round;
        EXPECT_RC(coll_allreduce(s, v, v, 1000, COLL_I32, COLL_SUM), COLL_OK);
        sum = want_sum + 0;
        for (int i = 0; i < 1000; i++)
            FAIL_IF(v[i] != sum + i * round * want_size, "element %d: %d", i, v[i]);
    }
    return 0;
}

static int shrink_rank(coll_comm *c, void *arg)
{
    const plan *k = arg;
    int rc = run_until_failure(c, k);
    if (k->nv)
        FAIL_IF(rc == COLL_OK, "nobody noticed the victims");
    int before[8], nb = coll_failed_ranks(c, before, 8);
    FAIL_IF(nb < 0 || nb > k->nv, "before shrink: %d failed ranks", nb);
    for (int i = 0; i < nb; i++)
        FAIL_IF(!is_victim(k, before[i]), "before shrink: rank %d is no victim", before[i]);
    coll_comm *s = NULL;
    EXPECT_RC(coll_shrink(c, &s), COLL_OK);
    int failed[8], nf = coll_failed_ranks(c, failed, 8);
    FAIL_IF(nf != k->nv, "%d ranks agreed failed, want %d", nf, k->nv);
    for (int i = 0; i < nf; i++)
        FAIL_IF(failed[i] != k->victims[i], "failed[%d] = %d, want %d", i, failed[i],
                k->victims[i]);
    EXPECT_RC(coll_barrier(c), COLL_ESTATE); /* the old one stays failed */
    int r = check_shrunk(c, s, k);
    coll_destroy(s);
    return r;
}

static void run_plan(int n, plan k, const char *transport)
{
    /* A stopped victim is killed at the deadline, once the survivors are long done. */
    run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .transport = transport,
                  .timeout_ms = TIMEOUT_MS, .deadline_s = k.stop ? 16 : 40};
    run_ranks(&o, shrink_rank, &k);
    for (int r = 0; r < n; r++) {
        if (is_victim(&k, r))
            ck_assert_msg(last_exit[r] == -1, "victim %d was not killed", r);
        else
            ck_assert_msg(last_exit[r] == 0, "%s: survivor %d of %d (victims %d,%d at %d) exit %d",
                          transport, r, n, k.victims[0], k.nv > 1 ? k.victims[1] : -1, k.at,
                          last_exit[r]);
    }
}

static const char *transports[] = {"tcp", "shm", "auto"};

/* One victim anywhere, rank 0 included: _i picks transport, size and victim. */
START_TEST(survivors_of_one_death_shrink_and_go_on)
{
    srand((unsigned)(_i * 7919 + 5));
    int n = 3 + _i % 3;
    plan k = {{_i % 4 == 0 ? 0 : 1 + rand() % (n - 1)}, 1, rand() % 30, 0};
    run_plan(n, k, transports[_i % 3]);
}
END_TEST

/* Two ranks die at once, on 5 ranks. */
START_TEST(survivors_of_two_deaths_shrink_and_go_on)
{
    plan k = {{1, 3}, 2, 5 + _i, 0};
    run_plan(5, k, transports[_i % 3]);
}
END_TEST

/* A rank that hangs (SIGSTOP) answers no dial and no round: counted failed after the
 * agreement's deadline, and the others carry on. */
START_TEST(survivors_of_a_hung_rank_shrink_and_go_on)
{
    plan k = {{2}, 1, 3, 1};
    run_plan(4, k, transports[_i]);
}
END_TEST

/* Nobody died: every rank shrinks a healthy communicator and gets all of them back. */
START_TEST(healthy_communicator_shrinks_to_itself)
{
    plan k = {{0}, 0, 0, 0};
    run_plan(3, k, "tcp");
}
END_TEST

static int misuse_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int r[4];
    EXPECT_RC(coll_shrink(c, NULL), COLL_EINVAL);
    EXPECT_RC(coll_failed_ranks(NULL, r, 4), COLL_EINVAL);
    EXPECT_RC(coll_failed_ranks(c, NULL, 4), COLL_EINVAL);
    EXPECT_RC(coll_failed_ranks(c, r, 4), 0);
    coll_comm *s = (coll_comm *)1;
    EXPECT_RC(coll_shrink(NULL, &s), COLL_EINVAL);
    FAIL_IF(s != NULL, "out not cleared");
    EXPECT_RC(coll_barrier(c), COLL_OK); /* still healthy */
    return 0;
}

START_TEST(bad_arguments_are_einval)
{
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .timeout_ms = TIMEOUT_MS, .deadline_s = 20};
    ck_assert_int_eq(run_ranks(&o, misuse_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shrink");
    TCase *t = tcase_create("shrink");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, survivors_of_one_death_shrink_and_go_on, 0, 12);
    tcase_add_loop_test(t, survivors_of_two_deaths_shrink_and_go_on, 0, 3);
    tcase_add_loop_test(t, survivors_of_a_hung_rank_shrink_and_go_on, 0, 2);
    tcase_add_test(t, healthy_communicator_shrinks_to_itself);
    tcase_add_test(t, bad_arguments_are_einval);
    suite_add_tcase(s, t);
    return run_suite(s);
}
