/* A rank stopped with SIGSTOP, by its parent as an operator would, in the middle of a
 * loop of 1 MiB all-reduces: every survivor fails within the operation timeout, sooner
 * by the heartbeat, with COLL_EPEER and a sentence naming the stopped rank (before the
 * heartbeat only the rank waiting on it named it; the others named the neighbour they
 * waited on). And silence is judged only while a collective waits: a rank stopped while
 * the others are busy in their own code, and continued before they call, is no failure.
 * A split that shares its root's links is judged by the root's heartbeat, with the same
 * words. Ranks are forked processes meeting at a tcp:// rendezvous, on tcp and on shm. */
#include "base/util.h"
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NP = 4, VICTIM = 2, TIMEOUT_MS = 3000, COUNT = 1 << 18 /* 1 MiB of floats */ };

static const char *const transports[] = {"tcp", "shm"};

/* What each rank tells the parent, in memory they share. */
typedef struct {
    atomic_int iters;        /* all-reduces done */
    atomic_int go;           /* set by the parent: carry on (idle test) */
    int rc;                  /* the call that failed, or the last one */
    int64_t failed_ms;       /* when it returned (cl_now_ms: one clock for every process) */
    char msg[512];           /* coll_last_error */
    int failed[NP], nfailed; /* coll_failed_ranks after the failure */
} report;

static report *reports;
static pid_t pids[NP];

static void kill_stopped(pid_t pid)
{
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
}

static coll_comm *join(const char *url, const char *transport, int rank, int share)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.split_share = share;
    cfg.transport = transport;
    cfg.timeout_ms = TIMEOUT_MS;
    cfg.op_timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL;
    int rc = coll_init(&c, url, rank, NP, &cfg);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: init: %s: %s\n", rank, coll_strerror(rc), coll_last_error(NULL));
        _exit(2);
    }
    return c;
}

/* All-reduces until one fails (or `limit` are done), saying how it ended. */
static void reduce_until_failure(coll_comm *c, report *me, float *buf, int limit)
{
    int rc = COLL_OK;
    for (int i = 0; i < limit && rc == COLL_OK; i++) {
        rc = coll_allreduce(c, buf, buf, COUNT, COLL_F32, COLL_SUM);
        if (rc == COLL_OK)
            atomic_fetch_add(&me->iters, 1);
    }
    me->failed_ms = cl_now_ms();
    me->rc = rc;
    snprintf(me->msg, sizeof(me->msg), "%s", rc == COLL_OK ? "" : coll_last_error(c));
    me->nfailed = coll_failed_ranks(c, me->failed, NP);
}

enum { BUSY, IDLE, SHARED };

/* BUSY: all-reduces until one fails. IDLE: one, then wait in the caller's code for the
 * parent's go, then five more. SHARED: BUSY on a split that shares c's links (family.h). */
static void rank_main(const char *url, const char *transport, int rank, int mode)
{
    report *me = &reports[rank];
    coll_comm *c = join(url, transport, rank, mode == SHARED), *s = NULL;
    float *buf = calloc(COUNT, sizeof(float));
    if (!buf)
        _exit(3);
    if (mode == IDLE) {
        reduce_until_failure(c, me, buf, 1);
        while (!atomic_load(&me->go))
            cl_sleep_ms(5);
        reduce_until_failure(c, me, buf, 5);
    } else if (mode == SHARED) {
        if (coll_split(c, 0, rank, &s) != COLL_OK)
            _exit(4);
        reduce_until_failure(s, me, buf, 1 << 30);
        coll_destroy(s);
    } else {
        reduce_until_failure(c, me, buf, 1 << 30);
    }
    coll_destroy(c);
    free(buf);
    _exit(0);
}

static void start_ranks(const char *transport, int mode)
{
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    memset(reports, 0, NP * sizeof(report));
    for (int r = 0; r < NP; r++) {
        if ((pids[r] = fork()) == 0)
            rank_main(url, transport, r, mode);
        ck_assert_int_gt(pids[r], 0);
    }
}

/* Waits until every rank has done `n` all-reduces. */
static void await_iters(int n)
{
    int64_t deadline = cl_now_ms() + 30000;
    for (int r = 0; r < NP; r++)
        while (atomic_load(&reports[r].iters) < n) {
            if (cl_now_ms() >= deadline) {
                for (int k = 0; k < NP; k++)
                    kill_stopped(pids[k]);
                ck_abort_msg("rank %d did %d all-reduces, want %d", r,
                             atomic_load(&reports[r].iters), n);
            }
            cl_sleep_ms(5);
        }
}

/* Reaps rank r by `deadline`; -1 when it had not exited by then (then it is killed). */
static int reap_by(pid_t pid, int64_t deadline)
{
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (cl_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        cl_sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Stops VICTIM once every rank did ten all-reduces; each survivor must fail within the
 * op timeout with COLL_EPEER, naming it in its sentence and in coll_failed_ranks. */
static void stop_and_judge(const char *transport, int mode)
{
    start_ranks(transport, mode);
    await_iters(10);
    int64_t stopped = cl_now_ms();
    kill(pids[VICTIM], SIGSTOP);
    int exits[NP];
    for (int r = 0; r < NP; r++)
        if (r != VICTIM)
            exits[r] = reap_by(pids[r], stopped + 4 * TIMEOUT_MS);
    kill_stopped(pids[VICTIM]);
    char want[64];
    snprintf(want, sizeof(want), "rank %d has not answered for", VICTIM);
    for (int r = 0; r < NP; r++) {
        if (r == VICTIM)
            continue;
        const report *p = &reports[r];
        long long took = (long long)(p->failed_ms - stopped);
        ck_assert_msg(exits[r] == 0, "%s: survivor %d exit %d", transport, r, exits[r]);
        ck_assert_msg(p->rc == COLL_EPEER, "%s: survivor %d got %s, want %s: '%s'", transport, r,
                      coll_strerror(p->rc), coll_strerror(COLL_EPEER), p->msg);
        ck_assert_msg(strstr(p->msg, want), "%s: survivor %d: '%s' does not say '%s'", transport, r,
                      p->msg, want);
        ck_assert_msg(p->nfailed == 1 && p->failed[0] == VICTIM,
                      "%s: survivor %d: coll_failed_ranks gave %d ranks (first %d), want [%d]",
                      transport, r, p->nfailed, p->failed[0], VICTIM);
        ck_assert_msg(took < TIMEOUT_MS,
                      "%s: survivor %d failed %lld ms after the stop, want "
                      "under the op timeout (%d ms)",
                      transport, r, took, TIMEOUT_MS);
    }
}

START_TEST(every_survivor_of_a_stopped_rank_names_it_within_the_op_timeout)
{
    stop_and_judge(transports[_i], BUSY);
}
END_TEST

/* The split has no heartbeat of its own: its root's judges it, and the farewell the
 * root's links carry says the silence too. */
START_TEST(a_split_sharing_links_names_the_stopped_rank_too)
{
    stop_and_judge(transports[_i], SHARED);
}
END_TEST

/* Stopped for more than the heartbeat's bound (half the op timeout here) while the
 * others wait in their own code, continued before they call: their all-reduces go on. */
START_TEST(a_rank_stopped_while_the_others_are_idle_is_no_failure)
{
    start_ranks(transports[_i], IDLE);
    await_iters(1);
    kill(pids[VICTIM], SIGSTOP);
    cl_sleep_ms(TIMEOUT_MS * 3 / 4);
    kill(pids[VICTIM], SIGCONT);
    cl_sleep_ms(300); /* its heartbeat is heard again: the others may judge it now */
    for (int r = 0; r < NP; r++)
        atomic_store(&reports[r].go, 1);
    int64_t deadline = cl_now_ms() + 4 * TIMEOUT_MS;
    for (int r = 0; r < NP; r++) {
        int e = reap_by(pids[r], deadline);
        ck_assert_msg(e == 0 && reports[r].rc == COLL_OK && atomic_load(&reports[r].iters) == 6,
                      "%s: rank %d exit %d, %d all-reduces, %s: '%s'", transports[_i], r, e,
                      atomic_load(&reports[r].iters), coll_strerror(reports[r].rc), reports[r].msg);
    }
}
END_TEST

int main(void)
{
    reports =
        mmap(NULL, NP * sizeof(report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (reports == MAP_FAILED)
        return 1;
    Suite *s = suite_create("stopped");
    TCase *t = tcase_create("stopped");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, every_survivor_of_a_stopped_rank_names_it_within_the_op_timeout, 0, 2);
    tcase_add_loop_test(t, a_split_sharing_links_names_the_stopped_rank_too, 0, 2);
    tcase_add_loop_test(t, a_rank_stopped_while_the_others_are_idle_is_no_failure, 0, 2);
    suite_add_tcase(s, t);
    return run_suite(s);
}
