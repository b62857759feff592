/* coll_grow: newcomers join a running communicator at the places after its ranks, and the
 * grown one computes right on every rank; the old one stays usable. A grow that cannot
 * complete (no newcomer, one with other settings, one too many, an id whose grow is
 * over, a rank that does not call it, a newcomer that dies in it) fails on every rank that takes part within the
 * timeout, saying why, and a retry with a fresh id works. Shrink then grow brings a job
 * back to its size. Newcomers are processes of their own that read the id rank 0 made
 * from a pipe (the out-of-band hand-over a launcher would do). */
#include "collective.h"

#include "common/harness.h"
#include "common/suite.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TIMEOUT_MS = 3000, MAX_NEW = 2 };

/* One grow: comm's ranks grow to `to`; rank 0 hands its id to `handed` newcomers
 * (first `skip` grows get no newcomer: they fail and are retried). */
typedef struct {
    int to, newcomers, skip;
    int dies;             /* a first grow whose newcomers come, one of them dying in it */
    int want;             /* what coll_grow returns on comm's ranks; -1: any error */
    const char *says;     /* words of its error */
    const char *new_env;  /* "NAME=value" a newcomer sets, or NULL */
    const char *env;      /* and comm's ranks, before their init */
    int shrink_first;     /* the last rank leaves; the others shrink, then grow back */
    int idle_rank;        /* this rank of comm does not call coll_grow (-1: all do) */
    int late;             /* newcomers that read the id again once the grow is over */
    int fds[2];           /* the pipe the ids go through */
} plan;

static int sum_to(int n)
{
    return n * (n + 1) / 2;
}

/* The grown communicator g splits as any does: every rank of it, in reverse order, and an
 * all-gather over the split (a ring: every rank's new links). 0 when it came out right. */
static int split_adds_up(coll_comm *g)
{
    int n = coll_size(g), r = coll_rank(g), got[8] = {0}, bad = n > 8;
    coll_comm *s = NULL;
    if (!bad && coll_split(g, 0, n - 1 - r, &s) != COLL_OK)
        return 1;
    bad = bad || coll_rank(s) != n - 1 - r || coll_allgather(s, &r, got, 1, COLL_I32) != COLL_OK;
    for (int i = 0; !bad && i < n; i++)
        bad = got[i] != n - 1 - i;
    if (bad)
        fprintf(stderr, "rank %d: the grown communicator's split: %s\n", r, coll_last_error(s));
    coll_destroy(s);
    return bad;
}

/* What a newcomer reads: the id, and whether it is to die in the grow. */
typedef struct {
    char id[COLL_GROW_ID_BYTES];
    int die;
} handed;

static void hand_id(const plan *p, const char *id, int copies, int dying)
{
    for (int i = 0; i < copies; i++) {
        handed h = {.die = i < dying};
        snprintf(h.id, sizeof(h.id), "%s", id);
        if (write(p->fds[1], &h, sizeof(h)) != (ssize_t)sizeof(h))
            perror("write id");
    }
}

/* A newcomer: 0 when it joined and the grown communicator added up, 2 when it was
 * refused with wants_says, 1 otherwise. */
static int newcomer(const plan *p, const char *wants_says)
{
    alarm(8 * TIMEOUT_MS / 1000);
    handed h;
    close(p->fds[1]);
    if (read(p->fds[0], &h, sizeof(h)) != (ssize_t)sizeof(h))
        return 1;
    if (p->new_env)
        putenv((char *)p->new_env);
    if (h.die)
        putenv("COLL_FAULT_GROW=claimed");
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL;
    int rc = coll_init_grow(&c, h.id, &cfg);
    if (rc != COLL_OK) {
        int told = wants_says && strstr(coll_last_error(NULL), wants_says);
        fprintf(stderr, "newcomer: %s: %s\n", coll_strerror(rc), coll_last_error(NULL));
        return told ? 2 : 1;
    }
    int r = coll_rank(c), bad = r < 1 || coll_size(c) != p->to || sum_is(c, r + 1, sum_to(p->to)) ||
                          split_adds_up(c);
    if (bad)
        fprintf(stderr, "newcomer: rank %d of %d, want size %d and the sum\n", r, coll_size(c),
                p->to);
    coll_destroy(c);
    return bad;
}

/* A grow from comm's side: its result is checked against the plan. */
static int grow_once(coll_comm *c, const plan *p, int want, const char *says, int copies,
                     int dying)
{
    char id[COLL_GROW_ID_BYTES] = "";
    if (coll_rank(c) == 0) {
        EXPECT_RC(coll_grow_id(c, p->to, id, sizeof(id)), COLL_OK);
        hand_id(p, id, copies, dying);
    }
    coll_comm *g = NULL;
    int rc = coll_grow(c, &g);
    FAIL_IF((want < 0 ? rc == COLL_OK : rc != want) ||
                (rc != COLL_OK && says && !strstr(coll_last_error(NULL), says)),
            "grow: %s, want %s with '%s': %s", coll_strerror(rc), coll_strerror(want),
            says ? says : "", coll_last_error(NULL));
    if (rc != COLL_OK)
        return 0;
    int r = coll_rank(g);
    FAIL_IF(r != coll_rank(c) || coll_size(g) != p->to, "grown: rank %d of %d", r, coll_size(g));
    FAIL_IF(sum_is(g, r + 1, sum_to(p->to)), "the grown communicator's sum");
    FAIL_IF(split_adds_up(g), "the grown communicator's split");
    coll_destroy(g);
    if (coll_rank(c) == 0) /* a newcomer late with this id finds the grow over */
        hand_id(p, id, p->late, 0);
    return 0;
}

static void setup(int rank, void *arg)
{
    const plan *p = arg;
    (void)rank;
    if (p->env)
        putenv((char *)p->env);
}

static int member(coll_comm *c, void *arg)
{
    const plan *p = arg;
    coll_comm *s = NULL;
    if (p->shrink_first) {
        if (coll_rank(c) == coll_size(c) - 1)
            _exit(0); /* leaves without a word: its sockets close */
        FAIL_IF(coll_barrier(c) == COLL_OK, "nobody noticed the rank that left");
        EXPECT_RC(coll_shrink(c, &s), COLL_OK);
        c = s;
    }
    int rc = 0;
    if (coll_rank(c) == p->idle_rank) {
        usleep(1000 * 1000);
    } else {
        for (int i = 0; i < p->skip && !rc; i++)
            rc = grow_once(c, p, COLL_ETIMEDOUT, "missing rank", 0, 0);
        if (p->dies && !rc)
            rc = grow_once(c, p, COLL_ETIMEDOUT, "missing rank", p->newcomers, 1);
        if (!rc)
            rc = grow_once(c, p, p->want, p->says, p->newcomers, 0);
    }
    if (!rc && !p->shrink_first && p->idle_rank < 0) /* the old one is as it was */
        FAIL_IF(sum_is(c, 1, coll_size(c)), "the old communicator after the grow");
    if (s)
        coll_destroy(s);
    return rc;
}

/* Runs comm's n ranks and the plan's newcomers (plus one that reads the id of a grow that
 * succeeded after it is over, and must fail); counts how the newcomers ended, each
 * telling it through a pipe (the harness reaps every child it finds). */
static void run_grow(int n, plan p, const char *newcomer_says, int ended[3])
{
    int told[2];
    ck_assert_int_eq(pipe(p.fds), 0);
    ck_assert_int_eq(pipe(told), 0);
    p.late = p.want == COLL_OK;
    pid_t kids[2 * MAX_NEW + 1];
    int nk = p.newcomers * (1 + p.dies) + p.late;
    for (int i = 0; i < nk; i++)
        if ((kids[i] = fork()) == 0) {
            close(told[0]);
            char code = (char)newcomer(&p, newcomer_says);
            _exit(write(told[1], &code, 1) == 1 ? 0 : 1);
        }
    close(told[1]);
    run_opts o = {.nranks = n, .rdzv = RDZV_TCP, .timeout_ms = TIMEOUT_MS, .deadline_s = 30,
                  .setup = setup};
    int failed = run_ranks(&o, member, &p);
    close(p.fds[0]);
    close(p.fds[1]);
    ended[0] = ended[1] = ended[2] = 0;
    char code;
    for (int i = 0; i < nk; i++)
        ended[read(told[0], &code, 1) == 1 && code >= 0 && code <= 2 ? code : 1]++;
    close(told[0]);
    for (int i = 0; i < nk; i++)
        waitpid(kids[i], NULL, 0);
    ck_assert_msg(failed == 0, "%d of comm's ranks failed", failed);
}

START_TEST(newcomers_take_the_places_after_the_ranks)
{
    int ended[3];
    run_grow(3, (plan){.to = 4, .newcomers = 1, .want = COLL_OK, .idle_rank = -1}, NULL, ended);
    ck_assert_msg(ended[0] == 1 && ended[1] == 1, "newcomers: %d ok, %d failed (1: the late one)",
                  ended[0], ended[1]);
    run_grow(2, (plan){.to = 4, .newcomers = 2, .want = COLL_OK, .idle_rank = -1}, NULL, ended);
    ck_assert_msg(ended[0] == 2 && ended[1] == 1, "newcomers: %d ok, %d failed (1: the late one)",
                  ended[0], ended[1]);
}
END_TEST

START_TEST(a_newcomer_too_many_is_told_every_place_is_taken)
{
    int ended[3];
    run_grow(2, (plan){.to = 3, .newcomers = 2, .want = COLL_OK, .idle_rank = -1},
             "every place", ended);
    ck_assert_msg(ended[0] == 1 && ended[2] == 1 && ended[1] == 1,
                  "newcomers: %d ok, %d told, %d failed (1: the late one)", ended[0], ended[2],
                  ended[1]);
}
END_TEST

START_TEST(a_grow_nobody_comes_to_fails_and_a_retry_works)
{
    int ended[3];
    run_grow(2, (plan){.to = 3, .newcomers = 1, .skip = 1, .want = COLL_OK, .idle_rank = -1},
             NULL, ended);
    ck_assert_msg(ended[0] == 1 && ended[1] == 1, "the newcomer of the retry: %d ok, %d failed",
                  ended[0], ended[1]);
}
END_TEST

START_TEST(a_newcomer_with_another_codec_fails_the_grow_naming_it)
{
    int ended[3];
    run_grow(2, (plan){.to = 3, .newcomers = 1, .want = COLL_EMISMATCH, .says = "codec",
                       .new_env = "COLL_CODEC=fp16", .idle_rank = -1},
             "codec", ended);
    ck_assert_msg(ended[2] == 1, "the newcomer was not told of the codec");
}
END_TEST

/* Its values do not check under the job's key: nobody reads its card, nor it theirs. */
START_TEST(a_newcomer_with_another_secret_never_joins)
{
    int ended[3];
    run_grow(2, (plan){.to = 3, .newcomers = 1, .want = COLL_ETIMEDOUT, .says = "missing rank",
                       .env = "COLL_SECRET=the-job's", .new_env = "COLL_SECRET=a-guess",
                       .idle_rank = -1},
             NULL, ended);
    ck_assert_msg(ended[0] == 0 && ended[1] == 1, "the newcomer with another secret joined");
}
END_TEST

START_TEST(a_rank_that_does_not_grow_fails_the_others_in_time)
{
    int ended[3];
    run_grow(3, (plan){.to = 4, .newcomers = 1, .want = -1, .idle_rank = 2}, NULL, ended);
    ck_assert_msg(ended[0] == 0 && ended[1] == 1, "the newcomer joined a grow without rank 2");
}
END_TEST

START_TEST(shrink_then_grow_brings_the_job_back)
{
    int ended[3];
    run_grow(3, (plan){.to = 3, .newcomers = 1, .want = COLL_OK, .shrink_first = 1,
                       .idle_rank = -1},
             NULL, ended);
    ck_assert_msg(ended[0] == 1 && ended[1] == 1, "newcomers: %d ok, %d failed (1: the late one)",
                  ended[0], ended[1]);
}
END_TEST

/* One of two newcomers dies with its place claimed: the grow fails on every rank that
 * met (comm's and the other newcomer's) within the timeout, and a retry with a fresh id
 * and two newcomers works. */
START_TEST(a_newcomer_that_dies_in_the_grow_fails_it_and_a_retry_works)
{
    int ended[3];
    run_grow(2, (plan){.to = 4, .newcomers = 2, .dies = 1, .want = COLL_OK, .idle_rank = -1},
             NULL, ended);
    ck_assert_msg(ended[0] == 2 && ended[1] == 3,
                  "newcomers: %d ok, %d failed (want 2 ok; failed: the dead one, the other of "
                  "its grow, the late one)", ended[0], ended[1]);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("grow");
    TCase *t = tcase_create("grow");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, newcomers_take_the_places_after_the_ranks);
    tcase_add_test(t, a_newcomer_too_many_is_told_every_place_is_taken);
    tcase_add_test(t, a_grow_nobody_comes_to_fails_and_a_retry_works);
    tcase_add_test(t, a_newcomer_with_another_codec_fails_the_grow_naming_it);
    tcase_add_test(t, a_newcomer_with_another_secret_never_joins);
    tcase_add_test(t, a_rank_that_does_not_grow_fails_the_others_in_time);
    tcase_add_test(t, shrink_then_grow_brings_the_job_back);
    tcase_add_test(t, a_newcomer_that_dies_in_the_grow_fails_it_and_a_retry_works);
    suite_add_tcase(s, t);
    return run_suite(s);
}
