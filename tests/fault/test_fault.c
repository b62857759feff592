/* Faults through the public API with real processes: a rank killed at a random point of
 * a sequence of collectives, a rank that stops (SIGSTOP), a rank that never arrives at
 * the rendezvous, ranks that start seconds apart, two jobs side by side, ranks that
 * disagree on root or collective order, abort from another thread. Survivors must fail
 * within twice the timeout, name the rank, and never hang. */
#include "base/util.h"
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TIMEOUT_MS = 2000 };

typedef struct {
    int victim, at;
    int leave; /* survivors _exit as soon as they have checked their error, no destroy */
} kill_plan;

static int victim_rank(coll_comm *c, void *arg)
{
    const kill_plan *k = arg;
    int me = coll_rank(c), n = coll_size(c);
    size_t count = 1 << 16;
    float *buf = calloc(count, sizeof(float));
    for (int it = 0; it < 200; it++) {
        if (me == k->victim && it == k->at)
            raise(SIGKILL);
        int64_t t0 = cl_now_ms();
        int rc = coll_allreduce(c, buf, buf, count >> (it % 8), COLL_F32, COLL_SUM);
        int64_t took = cl_now_ms() - t0;
        if (rc == COLL_OK)
            continue;
        if (rc != COLL_EPEER && rc != COLL_ETIMEDOUT) {
            fprintf(stderr, "rank %d: got %s, want EPEER or ETIMEDOUT\n", me, coll_strerror(rc));
            return 1;
        }
        if (took > 2 * TIMEOUT_MS) {
            fprintf(stderr, "rank %d: failed after %lld ms, over 2x the timeout\n", me,
                    (long long)took);
            return 1;
        }
        if (coll_barrier(c) != COLL_ESTATE) {
            fprintf(stderr, "rank %d: a failed communicator must say ESTATE\n", me);
            return 1;
        }
        char rank_v[32], peer_v[32];
        snprintf(rank_v, sizeof(rank_v), "rank %d ", k->victim);
        snprintf(peer_v, sizeof(peer_v), "peer %d ", k->victim);
        if (rc == COLL_EPEER && !strstr(coll_last_error(c), rank_v) &&
            !strstr(coll_last_error(c), peer_v)) {
            fprintf(stderr, "rank %d: '%s' does not name rank %d\n", me, coll_last_error(c),
                    k->victim);
            return 1;
        }
        if (k->leave)
            _exit(0); /* its farewells must already be out: peers still learn the cause */
        free(buf);
        return 0;
    }
    fprintf(stderr, "rank %d of %d: never noticed rank %d die\n", me, n, k->victim);
    return 1;
}

static void kill_one(int i, const char *transport)
{
    srand((unsigned)(i * 7919 + 17));
    int n = 3 + i % 3;
    kill_plan k = { 1 + rand() % (n - 1), rand() % 40, 0 };
    run_opts o = { .nranks = n, .rdzv = RDZV_FILE, .transport = transport,
                   .timeout_ms = TIMEOUT_MS, .deadline_s = 30 };
    run_ranks(&o, victim_rank, &k);
    for (int r = 0; r < n; r++) {
        if (r == k.victim)
            ck_assert_msg(last_exit[r] == -1, "victim %d was not killed", r);
        else
            ck_assert_msg(last_exit[r] == 0, "survivor %d of %d (victim %d at %d) exit %d", r, n,
                          k.victim, k.at, last_exit[r]);
    }
}

/* 5 ranks on tcp, rank 4 killed at the 17th all-reduce (ring, 256 KiB), every survivor
 * leaving the process the moment its call fails: the first to fail wrote its farewell
 * before returning, so the others name rank 4, not the rank that left (4 runs in 5
 * named the leaver when tcp wrote farewells on its loop thread after the call returned). */
START_TEST(survivors_that_exit_at_once_still_name_the_dead_rank)
{
    kill_plan k = {4, 16, 1};
    run_opts o = {.nranks = 5, .rdzv = RDZV_FILE, .transport = "tcp", .timeout_ms = TIMEOUT_MS,
                  .deadline_s = 30};
    run_ranks(&o, victim_rank, &k);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(last_exit[r] == 0, "survivor %d exit %d", r, last_exit[r]);
}
END_TEST

START_TEST(killed_rank_fails_every_survivor_within_twice_the_timeout)
{
    kill_one(_i, "tcp");
}
END_TEST

/* The shm transport learns of the death from the lifeline socket the kernel closes. */
START_TEST(killed_rank_on_shm_fails_every_survivor)
{
    kill_one(_i, "shm");
}
END_TEST

/* Forks `n` ranks of a world of `world` (ranks >= n never come), each checking init. */
static int init_ranks(int n, int world, int stagger_ms, const char *want_err)
{
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
        if ((pids[r] = fork()) == 0) {
            cl_sleep_ms(r * stagger_ms);
            coll_config cfg = COLL_CONFIG_INIT;
            cfg.timeout_ms = want_err ? 1500 : 20000;
            coll_comm *c = NULL;
            int rc = coll_init(&c, url, r, world, &cfg);
            if (want_err) {
                int ok = rc == COLL_ETIMEDOUT && strstr(coll_last_error(NULL), want_err);
                if (!ok)
                    fprintf(stderr, "rank %d: %s: '%s'\n", r, coll_strerror(rc),
                            coll_last_error(NULL));
                _exit(ok ? 0 : 1);
            }
            int v = 1, sum = 0;
            if (rc == COLL_OK)
                rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM);
            if (rc != COLL_OK || sum != world)
                fprintf(stderr, "rank %d: %s, sum %d: %s\n", r, coll_strerror(rc), sum,
                        coll_last_error(c));
            coll_destroy(c);
            _exit(rc == COLL_OK && sum == world ? 0 : 1);
        }
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "init rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    return bad;
}

/* A rank that stops answering (SIGSTOP, a hung process): the others time out. */
static int stopped_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float buf[1024] = { 0 };
    EXPECT_RC(coll_allreduce(c, buf, buf, 1024, COLL_F32, COLL_SUM), COLL_OK);
    if (coll_rank(c) == 1) {
        raise(SIGSTOP); /* the parent kills it after the run */
        return 0;
    }
    int64_t t0 = cl_now_ms();
    int rc = coll_allreduce(c, buf, buf, 1024, COLL_F32, COLL_SUM);
    int64_t took = cl_now_ms() - t0;
    if ((rc != COLL_ETIMEDOUT && rc != COLL_EPEER) || took > 2 * TIMEOUT_MS) {
        fprintf(stderr, "rank %d: %s after %lld ms\n", coll_rank(c), coll_strerror(rc),
                (long long)took);
        return 1;
    }
    return 0;
}

START_TEST(stopped_rank_makes_the_others_time_out)
{
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = TIMEOUT_MS, .deadline_s = 7 };
    run_ranks(&o, stopped_rank, NULL);
    ck_assert_msg(last_exit[0] == 0 && last_exit[2] == 0, "survivors: %d %d", last_exit[0],
                  last_exit[2]);
    ck_assert_int_eq(last_exit[1], -1); /* stopped, then killed at the deadline */
}
END_TEST

/* A rank busy for three times the peer timeout (evaluating, writing a checkpoint) is not
 * dead: the others wait in the collective, bounded by the operation timeout only. 64 MiB,
 * more than the kernel's socket buffers hold: its neighbour's sends stay queued behind a
 * closed receive window all the while, which TCP_USER_TIMEOUT at the peer timeout took for
 * a dead peer (Linux since 5.11 counts a window kept shut as unacknowledged data) and
 * reset the link. */
enum { BUSY_COUNT = 16 << 20 };

static int busy_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float *buf = malloc(BUSY_COUNT * sizeof(float));
    FAIL_IF(!buf, "no memory");
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < BUSY_COUNT; k++)
            buf[k] = (float)(coll_rank(c) + k % 256);
        if (coll_rank(c) == 1 && round == 1)
            usleep(3 * 1000 * 1000);
        EXPECT_RC(coll_allreduce(c, buf, buf, BUSY_COUNT, COLL_F32, COLL_SUM), COLL_OK);
        int n = coll_size(c);
        for (int k = 0; k < BUSY_COUNT; k++)
            FAIL_IF(buf[k] != (float)(n * (n - 1) / 2 + n * (k % 256)), "element %d: %g", k,
                    buf[k]);
    }
    free(buf);
    return 0;
}

START_TEST(a_busy_rank_is_not_a_dead_one)
{
    static const char *const tr[] = { "tcp", "shm" };
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .transport = tr[_i], .timeout_ms = 1000,
                   .op_timeout_ms = 30000, .deadline_s = 30 };
    ck_assert_int_eq(run_ranks(&o, busy_rank, NULL), 0);
}
END_TEST

#ifdef CL_HAVE_IBVERBS /* the fake verbs are built with the ibverbs transport */
/* A queue pair error (retry count exceeded, injected into the fake verbs after a
 * random number of writes after start-up) on one link: every rank fails within twice the
 * timeout. */
static int qp_error_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float buf[4096];
    int rc = COLL_OK;
    int64_t t0 = cl_now_ms();
    for (int i = 0; i < 400 && rc == COLL_OK; i++) {
        for (int k = 0; k < 4096; k++)
            buf[k] = 1.0f;
        t0 = cl_now_ms();
        rc = coll_allreduce(c, buf, buf, 4096, COLL_F32, COLL_SUM);
    }
    int64_t took = cl_now_ms() - t0;
    if ((rc != COLL_EPEER && rc != COLL_ETIMEDOUT) || took > 2 * TIMEOUT_MS) {
        fprintf(stderr, "rank %d: %s after %lld ms [%s]\n", coll_rank(c), coll_strerror(rc),
                (long long)took, coll_last_error(c));
        return 1;
    }
    return 0;
}

START_TEST(rdma_queue_pair_error_fails_every_rank)
{
    static const char *const faults[] = { "retry", "access", "fatal" };
    char v[64];
    srand((unsigned)cl_now_us());
    /* Past the writes of coll_init (first messages and grants on every link, ~24 here):
     * a fault there could hit a link the all-reduces never use again. */
    snprintf(v, sizeof(v), "%s:%d", faults[_i % 3], 60 + rand() % 200);
    setenv("COLL_IB_FAKE_FAULT", v, 1);
    run_opts o = { .nranks = 3, .rdzv = RDZV_MEM, .transport = "ibverbs-fake",
                   .timeout_ms = TIMEOUT_MS, .deadline_s = 20 };
    int failed = run_ranks(&o, qp_error_rank, NULL);
    unsetenv("COLL_IB_FAKE_FAULT");
    ck_assert_msg(failed == 0, "%s: %d ranks did not fail cleanly", v, failed);
}
END_TEST
#endif

/* Ranks that disagree on the broadcast root, or call different collectives: every rank
 * gets COLL_EMISMATCH, none hangs. A rank whose part of a pipelined broadcast was already
 * complete (the root, say) learns it from its next operation. */
static int disorder_rank(coll_comm *c, void *arg)
{
    int what = *(int *)arg, me = coll_rank(c);
    float buf[64] = { 0 };
    int rc = what == 0 ? coll_broadcast(c, buf, 64, COLL_F32, me == 2 ? 1 : 0)
             : me == 1 ? coll_allgather(c, buf, buf, 16, COLL_F32)
                       : coll_allreduce(c, buf, buf, 64, COLL_F32, COLL_SUM);
    if (rc == COLL_OK && what == 0)
        rc = coll_barrier(c);
    if (rc != COLL_EMISMATCH) {
        fprintf(stderr, "rank %d case %d: %s (%s)\n", me, what, coll_strerror(rc),
                coll_last_error(c));
        return 1;
    }
    return 0;
}

/* Cases 0 and 1 on tcp, shm and auto: a rank that learns of the failure from a closed
 * link still reports the mismatch its peer announced. */
START_TEST(root_or_order_disagreement_is_emismatch_everywhere)
{
    static const char *const transports[] = { "tcp", "shm", "auto" };
    int what = _i % 2;
    run_opts o = { .nranks = 4, .rdzv = RDZV_FILE, .transport = transports[_i / 2],
                   .timeout_ms = TIMEOUT_MS, .deadline_s = 20 };
    ck_assert_int_eq(run_ranks(&o, disorder_rank, &what), 0);
}
END_TEST

typedef struct {
    coll_comm *c;
    int delay_ms;
} aborter;

static void *abort_later(void *p)
{
    aborter *a = p;
    cl_sleep_ms(a->delay_ms);
    coll_abort(a->c);
    return NULL;
}

/* coll_abort from another thread ends a wait that would otherwise last the timeout. */
static int abort_thread_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float v = 0;
    if (coll_rank(c) != 0) {
        cl_sleep_ms(1500); /* alive, but never sends */
        return 0;
    }
    aborter a = { c, 200 };
    pthread_t t;
    pthread_create(&t, NULL, abort_later, &a);
    int64_t t0 = cl_now_ms();
    int rc = coll_recv(c, &v, 1, COLL_F32, 1, 0);
    pthread_join(t, NULL);
    if (rc != COLL_EABORTED || cl_now_ms() - t0 > TIMEOUT_MS / 2) {
        fprintf(stderr, "recv: %s after %lld ms\n", coll_strerror(rc),
                (long long)(cl_now_ms() - t0));
        return 1;
    }
    EXPECT_RC(coll_barrier(c), COLL_EABORTED);
    return 0;
}

START_TEST(abort_from_another_thread_ends_a_wait)
{
    run_opts o = { .nranks = 2, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 20 };
    ck_assert_int_eq(run_ranks(&o, abort_thread_rank, NULL), 0);
}
END_TEST

static int two_jobs_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c);
    for (int it = 0; it < 50; it++) {
        int v = coll_rank(c) + it, sum = 0;
        EXPECT_RC(coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM), COLL_OK);
        if (sum != n * (n - 1) / 2 + n * it) {
            fprintf(stderr, "sum %d: another job's data?\n", sum);
            return 1;
        }
    }
    return 0;
}

/* Two jobs on one host at the same time never cross. */
START_TEST(two_jobs_on_one_host_never_cross)
{
    pid_t job[2];
    for (int j = 0; j < 2; j++)
        if ((job[j] = fork()) == 0) {
            run_opts o = { .nranks = 3 + j, .rdzv = RDZV_TCP, .timeout_ms = 10000,
                           .deadline_s = 40 };
            _exit(run_ranks(&o, two_jobs_rank, NULL) ? 1 : 0);
        }
    for (int j = 0; j < 2; j++) {
        int st;
        waitpid(job[j], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "job %d failed", j);
    }
}
END_TEST

START_TEST(missing_rank_times_out_naming_it)
{
    ck_assert_int_eq(init_ranks(2, 3, 0, "2/3 ranks joined"), 0);
    ck_assert_int_eq(init_ranks(2, 3, 0, "missing rank(s) 2"), 0);
}
END_TEST

START_TEST(ranks_starting_seconds_apart_still_join)
{
    ck_assert_int_eq(init_ranks(3, 3, 5000, NULL), 0); /* the last one 10 s after the first */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *t = tcase_create("faults");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, killed_rank_fails_every_survivor_within_twice_the_timeout, 0, 24);
    tcase_add_loop_test(t, killed_rank_on_shm_fails_every_survivor, 0, 6);
    tcase_add_loop_test(t, survivors_that_exit_at_once_still_name_the_dead_rank, 0, 4);
    tcase_add_test(t, stopped_rank_makes_the_others_time_out);
    tcase_add_loop_test(t, a_busy_rank_is_not_a_dead_one, 0, 2);
    tcase_add_loop_test(t, root_or_order_disagreement_is_emismatch_everywhere, 0, 6);
    tcase_add_test(t, abort_from_another_thread_ends_a_wait);
    tcase_add_test(t, two_jobs_on_one_host_never_cross);
    tcase_add_test(t, missing_rank_times_out_naming_it);
    tcase_add_test(t, ranks_starting_seconds_apart_still_join);
#ifdef CL_HAVE_IBVERBS
    tcase_add_loop_test(t, rdma_queue_pair_error_fails_every_rank, 0, 3);
#endif
    suite_add_tcase(s, t);
    return run_suite(s);
}
