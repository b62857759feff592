/* coll_shrink beyond one clean agreement, with real processes: a rank that dies inside
 * the agreement (after its word reached some of its peers and not others), losses one
 * after another (lose, shrink, lose, shrink), a communicator made by split, and a rank
 * that shrinks while the others go on. Every survivor keeps the sets it agreed on, and
 * at the end they are the same on every survivor, the communicator holds exactly the
 * living ranks in their first order, and its all-reduces are right. */
#include "common/harness.h"

#include "common/suite.h"
#include "survivors.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TIMEOUT_MS = 2000, MAX_STAGES = 3, MAX_SHRINKS = 6 };

typedef struct {
    int kill[MAX_STAGES]; /* per stage, the first rank that dies in its all-reduces */
    int stages, at;       /* how many; at which all-reduce of each */
    int late, reach;      /* a first rank that dies in the first agreement (-1: none),
                             once its first word reached `reach` peers */
} journey;

/* This rank's view of the journey: its first rank, the first ranks of the current
 * communicator's ranks, and the sets agreed so far (bits of first ranks). */
typedef struct {
    int orig, first[32];
    unsigned agreed[MAX_SHRINKS];
    int shrinks;
} view;

/* All-reduces on c until one fails; the victim dies at all-reduce `at`. */
static int until_failure(coll_comm *c, int victim, int at)
{
    float buf[2048] = {0};
    int rc = COLL_OK;
    for (int it = 0; it < 400 && rc == COLL_OK; it++) {
        if (victim && it == at)
            raise(SIGKILL);
        rc = coll_allreduce(c, buf, buf, 2048 >> (it % 4), COLL_F32, COLL_SUM);
    }
    return rc;
}

/* Shrinks *c (the caller destroys what it gave) and notes the agreed set. */
static int shrink_noted(coll_comm *c, coll_comm **out, view *v)
{
    EXPECT_RC(coll_shrink(c, out), COLL_OK);
    int failed[32], nf = coll_failed_ranks(c, failed, 32), m = 0;
    FAIL_IF(v->shrinks == MAX_SHRINKS, "more than %d shrinks", MAX_SHRINKS);
    unsigned set = 0;
    for (int i = 0; i < nf; i++)
        set |= 1u << v->first[failed[i]];
    v->agreed[v->shrinks++] = set;
    for (int r = 0; r < coll_size(c); r++)
        if (!(set >> v->first[r] & 1))
            v->first[m++] = v->first[r];
    return 0;
}

/* What a trainer does after a failure: shrink, try the new communicator, and shrink that
 * too while it fails (a rank that died during the agreement is in it). *c becomes the
 * one that works; the one given is the caller's. */
static int recover(coll_comm **c, coll_comm *given, view *v, unsigned alive)
{
    for (int tries = 0; tries < 3; tries++) {
        coll_comm *next = NULL;
        int r = shrink_noted(*c, &next, v);
        if (*c != given)
            coll_destroy(*c);
        *c = next;
        if (r)
            return r;
        if ((r = survivors_sum(*c, v->orig, alive)) == COLL_OK)
            return 0;
        if (r > 0)
            return r;
    }
    fprintf(stderr, "rank %d: three shrinks and no communicator that works\n", v->orig);
    return 1;
}

static int journey_rank(coll_comm *c, void *arg)
{
    const journey *j = arg;
    view v = {.orig = coll_rank(c)};
    for (int r = 0; r < coll_size(c); r++)
        v.first[r] = r;
    unsigned alive = (1u << coll_size(c)) - 1;
    coll_comm *cur = c;
    for (int st = 0; st < j->stages; st++) {
        int rc = until_failure(cur, v.orig == j->kill[st], j->at);
        FAIL_IF(rc == COLL_OK, "stage %d: nobody noticed rank %d's death", st, j->kill[st]);
        alive &= ~(1u << j->kill[st]);
        if (st == 0 && j->late >= 0) {
            char f[32];
            snprintf(f, sizeof(f), "0:%d", j->reach);
            if (v.orig == j->late)
                setenv("COLL_FAULT_SHRINK", f, 1);
            alive &= ~(1u << j->late);
        }
        if (recover(&cur, c, &v, alive))
            return 1;
    }
    int r = survivors_check(cur, v.orig, alive);
    if (r == COLL_OK) {
        FAIL_IF(!identical_everywhere(cur, &v.shrinks, sizeof(v.shrinks)) ||
                    !identical_everywhere(cur, v.agreed, sizeof(v.agreed)),
                "survivors agreed on different sets (this one: %d shrinks, first 0x%x)", v.shrinks,
                v.agreed[0]);
    }
    if (cur != c)
        coll_destroy(cur);
    return r != COLL_OK;
}

static run_opts opts(int n, const char *transport, int deadline_s)
{
    return (run_opts){.nranks = n,
                      .rdzv = RDZV_FILE,
                      .transport = transport,
                      .timeout_ms = TIMEOUT_MS,
                      .deadline_s = deadline_s};
}

static void run_journey(int n, const journey *j, const char *transport)
{
    run_opts o = opts(n, transport, 50);
    run_ranks(&o, journey_rank, (void *)j);
    for (int r = 0; r < n; r++) {
        int dies = r == j->late;
        for (int st = 0; st < j->stages; st++)
            dies |= r == j->kill[st];
        ck_assert_msg(last_exit[r] == (dies ? -1 : 0), "%s: rank %d of %d exit %d", transport, r, n,
                      last_exit[r]);
    }
}

static const char *transports[] = {"tcp", "shm", "auto"};

/* Rank 1 dies; rank 3 dies inside the agreement that follows, once its first word
 * reached 0..3 of its peers: the peers that heard it may decide without it, the others
 * count it failed, and all must still agree (on one set, then on the next). */
START_TEST(a_death_inside_the_agreement_is_agreed_on)
{
    journey j = {.kill = {1}, .stages = 1, .at = 4 + _i, .late = 3, .reach = _i % 4};
    run_journey(5, &j, transports[_i % 3]);
}
END_TEST

/* Lose a rank, shrink, go on; lose another, shrink; and a third. */
START_TEST(losses_one_after_another)
{
    journey j = {.kill = {_i % 2 ? 0 : 2, 4, 1}, .stages = 3, .at = 3 + _i, .late = -1};
    run_journey(6, &j, transports[_i]);
}
END_TEST

/* Ranks 0..5 split by parity; rank 3 dies in its half's all-reduces. Its half's
 * survivors shrink their split communicator; the other half never notices. */
static int split_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c), odd = me % 2;
    coll_comm *half = NULL, *s = NULL;
    EXPECT_RC(coll_split(c, odd, me, &half), COLL_OK);
    int rc = until_failure(half, me == 3, odd ? 5 : 1000);
    if (!odd) { /* 400 all-reduces, untouched */
        EXPECT_RC(rc, COLL_OK);
        coll_destroy(half);
        return 0;
    }
    FAIL_IF(rc == COLL_OK, "nobody noticed rank 3's death");
    EXPECT_RC(coll_shrink(half, &s), COLL_OK);
    int r = survivors_check(s, me / 2, 1u << 0 | 1u << 2);
    coll_destroy(s);
    coll_destroy(half);
    return r != COLL_OK;
}

START_TEST(shrink_of_a_split_communicator)
{
    run_opts o = opts(6, transports[_i], 40);
    run_ranks(&o, split_rank, NULL);
    for (int r = 0; r < 6; r++)
        ck_assert_msg(last_exit[r] == (r == 3 ? -1 : 0), "%s: rank %d exit %d", transports[_i], r,
                      last_exit[r]);
}
END_TEST

/* Rank 0 shrinks a healthy communicator while the others go on with all-reduces: theirs
 * fail (no hang), they shrink too, and all of them are in the new one. */
static int eager_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    coll_comm *s = NULL;
    if (me != 0) {
        int rc = until_failure(c, 0, -1);
        FAIL_IF(rc != COLL_EPEER && rc != COLL_EMISMATCH, "the others went on: %s",
                coll_strerror(rc));
    }
    EXPECT_RC(coll_shrink(c, &s), COLL_OK);
    int r = survivors_check(s, me, (1u << coll_size(c)) - 1);
    coll_destroy(s);
    return r != COLL_OK;
}

START_TEST(a_rank_that_shrinks_while_others_go_on)
{
    run_opts o = opts(4, transports[_i], 30);
    ck_assert_int_eq(run_ranks(&o, eager_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shrink-chain");
    TCase *t = tcase_create("shrink-chain");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, a_death_inside_the_agreement_is_agreed_on, 0, 8);
    tcase_add_loop_test(t, losses_one_after_another, 0, 3);
    tcase_add_loop_test(t, shrink_of_a_split_communicator, 0, 3);
    tcase_add_loop_test(t, a_rank_that_shrinks_while_others_go_on, 0, 3);
    suite_add_tcase(s, t);
    return run_suite(s);
}
