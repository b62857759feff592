/* coll_shrink through the public API with real processes: ranks killed at a random
 * point of a run of all-reduces (one, two, rank 0 among them, 3 to 8 ranks) or hung, on
 * tcp, shm and auto (threads that leave on ibverbs-fake); the survivors agree on the same
 * failed set, get a communicator of themselves in their old order, and their all-reduces
 * on it are right. Also: a rank that dies inside the agreement, a survivor slow to call
 * shrink, losses one after another, a communicator made by split, a rank that shrinks
 * while the others go on. A healthy communicator shrinks to a copy of itself; bad
 * arguments are errors. */
#include "common/harness.h"

#include "common/suite.h"
#include "survivors.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TIMEOUT_MS = 2000, MAX_VICTIMS = 2 };

typedef struct {
    int victims[MAX_VICTIMS], nv, at; /* nv == 0: nobody dies, every rank shrinks */
    int stop;                         /* victims stop (SIGSTOP) instead of dying */
    int slow; /* 1 + the survivor that waits a timeout before it shrinks; 0: none */
    int leave;                        /* threads: victims leave (destroy) instead */
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
        if (is_victim(k, coll_rank(c)) && it == k->at) {
            if (k->leave)
                break;
            raise(k->stop ? SIGSTOP : SIGKILL);
        }
        rc = coll_allreduce(c, buf, buf, count >> (it % 5), COLL_F32, COLL_SUM);
        if (!k->nv && it == 10)
            break;
    }
    free(buf);
    return rc;
}

static int shrink_rank(coll_comm *c, void *arg)
{
    const plan *k = arg;
    int rc = run_until_failure(c, k);
    if (k->leave && is_victim(k, coll_rank(c)))
        return 0;
    if (k->nv)
        FAIL_IF(rc == COLL_OK, "nobody noticed the victims");
    if (coll_rank(c) == k->slow - 1)
        usleep(TIMEOUT_MS * 1000);
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
    unsigned alive = (1u << coll_size(c)) - 1;
    for (int i = 0; i < k->nv; i++)
        alive &= ~(1u << k->victims[i]);
    int r = survivors_check(s, coll_rank(c), alive);
    coll_destroy(s);
    return r != COLL_OK;
}

static void run_plan(int n, plan k, const char *transport)
{
    /* A stopped victim is killed at the deadline, once the survivors are long done.
     * Threads (ibverbs-fake) share the memory store. */
    run_opts o = {.nranks = n, .rdzv = k.leave ? RDZV_MEM : RDZV_FILE, .transport = transport,
                  .timeout_ms = TIMEOUT_MS, .deadline_s = k.stop ? 16 : 40};
    run_ranks(&o, shrink_rank, &k);
    for (int r = 0; r < n; r++) {
        if (is_victim(&k, r) && !k.leave)
            ck_assert_msg(last_exit[r] == -1, "victim %d was not killed", r);
        else
            ck_assert_msg(last_exit[r] == 0, "%s: survivor %d of %d (victims %d,%d at %d) exit %d",
                          transport, r, n, k.victims[0], k.nv > 1 ? k.victims[1] : -1, k.at,
                          last_exit[r]);
    }
}

static const char *transports[] = {"tcp", "shm", "auto"};

/* One victim anywhere, rank 0 included, 3 to 8 ranks: _i picks transport, size and
 * victim. */
START_TEST(survivors_of_one_death_shrink_and_go_on)
{
    srand((unsigned)(_i * 7919 + 5));
    int n = 3 + _i % 6;
    plan k = {.victims = {_i % 4 == 0 ? 0 : 1 + rand() % (n - 1)}, .nv = 1, .at = rand() % 30};
    run_plan(n, k, transports[_i % 3]);
}
END_TEST

/* Two ranks die at once, on 5 ranks. */
START_TEST(survivors_of_two_deaths_shrink_and_go_on)
{
    plan k = {.victims = {1, 3}, .nv = 2, .at = 5 + _i};
    run_plan(5, k, transports[_i % 3]);
}
END_TEST

/* A rank that hangs (SIGSTOP) answers no dial and no round: counted failed after the
 * agreement's deadline, and the others carry on. */
START_TEST(survivors_of_a_hung_rank_shrink_and_go_on)
{
    plan k = {.victims = {2}, .nv = 1, .at = 3, .stop = 1};
    run_plan(4, k, transports[_i]);
}
END_TEST

/* A survivor that comes a whole timeout after the others is waited for, not dropped. */
START_TEST(a_slow_survivor_is_waited_for)
{
    plan k = {.victims = {1}, .nv = 1, .at = 4, .slow = 1 + (_i ? 3 : 0)};
    run_plan(4, k, transports[_i]);
}
END_TEST

/* ibverbs-fake runs ranks as threads: the victim leaves (destroys its communicator) and
 * the others shrink onto a new ibverbs-fake communicator. */
START_TEST(ibverbs_fake_survivors_shrink_and_go_on)
{
    plan k = {.victims = {_i}, .nv = 1, .at = 3 + 5 * _i, .leave = 1};
    run_plan(3, k, "ibverbs-fake");
}
END_TEST

/* Nobody died: every rank shrinks a healthy communicator and gets all of them back. */
START_TEST(healthy_communicator_shrinks_to_itself)
{
    plan k = {.nv = 0};
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
    tcase_add_loop_test(t, a_slow_survivor_is_waited_for, 0, 2);
    tcase_add_loop_test(t, ibverbs_fake_survivors_shrink_and_go_on, 0, 3);
    tcase_add_test(t, healthy_communicator_shrinks_to_itself);
    tcase_add_test(t, bad_arguments_are_einval);
    suite_add_tcase(s, t);
    return run_suite(s);
}
