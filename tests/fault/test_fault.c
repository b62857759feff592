/* Faults through the public API with real processes: a rank killed at a random point of
 * a sequence of collectives, a rank that never arrives at the rendezvous, ranks that
 * start seconds apart. Survivors must fail within twice the timeout, never hang. */
#include "../../lib/core/util.h"
#include "../common/harness.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TIMEOUT_MS = 2000 };

typedef struct {
    int victim, at;
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
        free(buf);
        return 0;
    }
    fprintf(stderr, "rank %d of %d: never noticed rank %d die\n", me, n, k->victim);
    return 1;
}

START_TEST(killed_rank_fails_every_survivor_within_twice_the_timeout)
{
    srand((unsigned)(_i * 7919 + 17));
    int n = 3 + _i % 3;
    kill_plan k = { 1 + rand() % (n - 1), rand() % 40 };
    run_opts o = { .nranks = n, .rdzv = RDZV_FILE, .timeout_ms = TIMEOUT_MS, .deadline_s = 30 };
    run_ranks(&o, victim_rank, &k);
    for (int r = 0; r < n; r++) {
        if (r == k.victim)
            ck_assert_msg(last_exit[r] == -1, "victim %d was not killed", r);
        else
            ck_assert_msg(last_exit[r] == 0, "survivor %d of %d (victim %d at %d) exit %d", r, n,
                          k.victim, k.at, last_exit[r]);
    }
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
            cfg.timeout_ms = want_err ? 1500 : 10000;
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

START_TEST(missing_rank_times_out_naming_it)
{
    ck_assert_int_eq(init_ranks(2, 3, 0, "2/3 ranks joined"), 0);
    ck_assert_int_eq(init_ranks(2, 3, 0, "missing 2"), 0);
}
END_TEST

START_TEST(ranks_starting_seconds_apart_still_join)
{
    ck_assert_int_eq(init_ranks(3, 3, 1500, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *t = tcase_create("faults");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, killed_rank_fails_every_survivor_within_twice_the_timeout, 0, 12);
    tcase_add_test(t, missing_rank_times_out_naming_it);
    tcase_add_test(t, ranks_starting_seconds_apart_still_join);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
