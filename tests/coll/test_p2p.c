/* Point-to-point through the public API on real processes: FIFO matching per peer,
 * large and empty messages, mismatches, and coll_sendrecv's exchanges that never
 * deadlock whatever order the peers use. */
#include "common/harness.h"
#include "perf/verify.h"

#include "common/suite.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_all_pass_on(int n, rank_fn fn, rdzv_kind rdzv, const char *transport)
{
    run_opts o = { .nranks = n, .rdzv = rdzv, .transport = transport, .timeout_ms = 5000,
                   .deadline_s = 60 };
    int failed = run_ranks(&o, fn, NULL);
    ck_assert_msg(failed == 0, "%d of %d ranks failed on %s", failed, n,
                  transport ? transport : "tcp");
}

static void expect_all_pass(int n, rank_fn fn, rdzv_kind rdzv)
{
    expect_all_pass_on(n, fn, rdzv, NULL);
}

/* Several messages to each peer with different tags arrive in posting order. */
static int p2p_fifo_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    enum { M = 16 };
    int32_t out[M][64], in[M][64];
    coll_req *rq[2 * M];
    int to = (me + 1) % n, from = (me + n - 1) % n;
    for (int m = 0; m < M; m++) {
        EXPECT_RC(coll_irecv(c, in[m], 64, COLL_I32, from, (uint32_t)m, &rq[m]), COLL_OK);
        for (int k = 0; k < 64; k++)
            out[m][k] = me * 100000 + m * 100 + k;
        EXPECT_RC(coll_isend(c, out[m], 64, COLL_I32, to, (uint32_t)m, &rq[M + m]), COLL_OK);
    }
    for (int m = 0; m < 2 * M; m++)
        EXPECT_RC(coll_wait(rq[m]), COLL_OK);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < 64; k++)
            FAIL_IF(in[m][k] != from * 100000 + m * 100 + k, "message %d element %d: %d", m, k,
                    in[m][k]);
    return 0;
}

START_TEST(p2p_messages_match_in_posting_order)
{
    expect_all_pass(4, p2p_fifo_rank, RDZV_FILE);
}
END_TEST

/* Sends to every peer, then receives from every peer: zero-length and 4 MiB messages
 * both arrive, and a send to one peer never waits for a send to another. */
static int p2p_all_pairs_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    size_t big = 1u << 20;
    float *out = malloc(big * 4), *in = malloc(big * 4);
    cl_fill(out, big, COLL_F32, COLL_SUM, me, 0);
    coll_req *sends[8], *empties[8];
    for (int p = 0; p < n; p++)
        if (p != me) {
            EXPECT_RC(coll_isend(c, out, big, COLL_F32, p, 7, &sends[p]), COLL_OK);
            EXPECT_RC(coll_isend(c, NULL, 0, COLL_F32, p, 8, &empties[p]), COLL_OK);
        }
    for (int p = 0; p < n; p++)
        if (p != me) {
            EXPECT_RC(coll_recv(c, in, big, COLL_F32, p, 7), COLL_OK);
            for (size_t k = 0; k < big; k++)
                FAIL_IF(in[k] != (float)cl_val(p, k, COLL_SUM), "from %d element %zu", p, k);
            EXPECT_RC(coll_recv(c, NULL, 0, COLL_F32, p, 8), COLL_OK);
        }
    for (int p = 0; p < n; p++)
        if (p != me) {
            EXPECT_RC(coll_wait(sends[p]), COLL_OK);
            EXPECT_RC(coll_wait(empties[p]), COLL_OK);
        }
    free(out);
    free(in);
    return 0;
}

START_TEST(p2p_every_pair_large_and_empty)
{
    expect_all_pass(3, p2p_all_pairs_rank, RDZV_TCP);
}
END_TEST

/* A tag that disagrees is COLL_EMISMATCH on the receiver, not a silent reorder. */
static int p2p_tag_mismatch_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int v = 5;
    if (coll_rank(c) == 0)
        EXPECT_RC(coll_send(c, &v, 1, COLL_I32, 1, 1), COLL_OK);
    else {
        EXPECT_RC(coll_recv(c, &v, 1, COLL_I32, 0, 2), COLL_EMISMATCH);
        FAIL_IF(!strstr(coll_last_error(c), "tag"), "message should name the tags");
        EXPECT_RC(coll_barrier(c), COLL_ESTATE);
    }
    return 0;
}

START_TEST(p2p_tag_mismatch_is_an_error)
{
    expect_all_pass(2, p2p_tag_mismatch_rank, RDZV_FILE);
}
END_TEST

/* 8 MiB each way, more than a shm ring or a socket buffer holds: every rank sends to
 * the next and receives from the previous in one call, all at once, and on two ranks
 * each sends to and receives from the same peer. A blocking send first would wait for
 * the timeout here. */

/* Sendrecv with this rank as one side only (k 0) or a peer out of range (k 1). */
static int bad_sendrecv(coll_comm *s, int k, void *arg)
{
    float *buf = arg, in[5];
    int me = coll_rank(s), n = coll_size(s);
    return k == 0 ? coll_sendrecv(s, buf, 5, me, in, 5, (me + 1) % n, COLL_F32, 1)
                  : coll_sendrecv(s, buf, 1, n, in, 1, (me + n - 1) % n, COLL_F32, 1);
}

static int sendrecv_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    int to = (me + 1) % n, from = (me + n - 1) % n;
    size_t big = 2u << 20;
    float *out = malloc(big * 4), *in = malloc(big * 4);
    for (int round = 0; round < 3; round++) {
        cl_fill(out, big, COLL_F32, COLL_SUM, me + round, 0);
        memset(in, 0, big * 4);
        EXPECT_RC(coll_sendrecv(c, out, big, to, in, big, from, COLL_F32, (uint32_t)round),
                  COLL_OK);
        for (size_t k = 0; k < big; k += 997)
            FAIL_IF(in[k] != (float)cl_val(from + round, k, COLL_SUM),
                    "round %d element %zu from %d: %g", round, k, from, in[k]);
    }
    /* To and from this rank: a copy, counts matched as a receive would be. */
    EXPECT_RC(coll_sendrecv(c, out, 5, me, in, 5, me, COLL_F32, 1), COLL_OK);
    FAIL_IF(memcmp(in, out, 5 * 4) != 0, "self sendrecv did not copy");
    EXPECT_RC(coll_sendrecv(c, out, 5, me, in, 4, me, COLL_F32, 1), COLL_EMISMATCH);
    EXPECT_RC(coll_barrier(c), COLL_OK);
    int bad = einval_on_split(c, bad_sendrecv, 0, out, "peer") ||
              einval_on_split(c, bad_sendrecv, 1, out, "peer");
    free(out);
    free(in);
    return bad;
}

START_TEST(sendrecv_exchanges_large_messages_without_deadlock)
{
    const char *tr[] = {"tcp", "shm"};
    expect_all_pass_on(3, sendrecv_rank, RDZV_FILE, tr[_i]);
    expect_all_pass_on(2, sendrecv_rank, RDZV_FILE, tr[_i]);
}
END_TEST

/* A receive that expects another count is COLL_EMISMATCH, as for recv (here on both
 * ranks: each expects 3 of the 4 elements sent), and the communicator stays failed. */
static int sendrecv_mismatch_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c), other = 1 - me, v[4] = {1, 2, 3, 4}, w[4];
    int rc = coll_sendrecv(c, v, 4, other, w, 3, other, COLL_I32, 9);
    FAIL_IF(rc != COLL_EMISMATCH, "expected COLL_EMISMATCH, got %s", coll_strerror(rc));
    FAIL_IF(!strstr(coll_last_error(c), "count 4"), "the error should name the counts");
    EXPECT_RC(coll_barrier(c), COLL_ESTATE);
    return 0;
}

START_TEST(sendrecv_count_mismatch_is_emismatch_on_both)
{
    expect_all_pass(2, sendrecv_mismatch_rank, RDZV_FILE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("p2p");
    TCase *t = tcase_create("p2p");
    tcase_set_timeout(t, 90);
    tcase_add_test(t, p2p_messages_match_in_posting_order);
    tcase_add_test(t, p2p_every_pair_large_and_empty);
    tcase_add_test(t, p2p_tag_mismatch_is_an_error);
    tcase_add_loop_test(t, sendrecv_exchanges_large_messages_without_deadlock, 0, 2);
    tcase_add_test(t, sendrecv_count_mismatch_is_emismatch_on_both);
    suite_add_tcase(s, t);
    return run_suite(s);
}
