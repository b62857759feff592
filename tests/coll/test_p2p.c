/* Point-to-point through the public API on real processes: FIFO matching per peer,
 * large and empty messages, mismatches, coll_sendrecv's exchanges that never deadlock
 * whatever order the peers use, and tcp's one connection for a pair that talks both
 * ways. */
#include "common/harness.h"
#include "perf/verify.h"

#include "common/suite.h"

#include <check.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- one tcp connection for a pair that talks both ways ---------------------------- */

static int shared_to, own_to, shared_from;
static int order_pipe[2]; /* rank 1 tells rank 0 its first send returned */

/* COLL_DEBUG's account of rank 1's p2p link to rank 0 (channel 1): "link to rank 0
 * (channel 1) shares the one from it", or dialed: "link to rank 0 (channel 1, N bytes in
 * flight) via ..."; and rank 0's "link from rank 1 (channel 1) shares the one to it". */
static void count_links(coll_log_level level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    shared_to += strstr(msg, "link to rank 0 (channel 1) shares") != NULL;
    own_to += strstr(msg, "link to rank 0 (channel 1,") != NULL;
    shared_from += strstr(msg, "link from rank 1 (channel 1) shares") != NULL;
}

static void use_secret(int rank, void *arg)
{
    (void)rank;
    if (*(int *)arg)
        setenv("COLL_SECRET", "a pair shares a connection", 1);
}

/* Rounds of replies over the pair, small (the fast path) and 1 MiB both ways at once
 * (coll_sendrecv), every value checked. */
static int replies(coll_comm *c, int first_from_1)
{
    int me = coll_rank(c), other = 1 - me;
    enum { BIG = 1 << 18 };
    int32_t *out = malloc(BIG * 4), *in = malloc(BIG * 4);
    FAIL_IF(!out || !in, "no memory");
    for (int round = 0; round < 6; round++) {
        size_t n = round % 2 ? BIG : 64;
        for (size_t i = 0; i < n; i++)
            out[i] = me * 100000 + round * 1000 + (int32_t)(i % 1000);
        int speaks = (round == 0 && first_from_1) ? me == 1 : me == round % 2;
        if (n == BIG)
            EXPECT_RC(coll_sendrecv(c, out, n, other, in, n, other, COLL_I32, (uint32_t)round),
                      COLL_OK);
        else if (speaks) {
            EXPECT_RC(coll_send(c, out, n, COLL_I32, other, (uint32_t)round), COLL_OK);
            EXPECT_RC(coll_recv(c, in, n, COLL_I32, other, (uint32_t)round), COLL_OK);
        } else {
            EXPECT_RC(coll_recv(c, in, n, COLL_I32, other, (uint32_t)round), COLL_OK);
            EXPECT_RC(coll_send(c, out, n, COLL_I32, other, (uint32_t)round), COLL_OK);
        }
        for (size_t i = 0; i < n; i++)
            FAIL_IF(in[i] != other * 100000 + round * 1000 + (int32_t)(i % 1000),
                    "round %d element %zu: %d", round, i, in[i]);
    }
    free(out);
    free(in);
    return 0;
}

/* Rank 0 speaks first: rank 1 takes its connection before it sends, so it answers on
 * that one (a verdict with its proof first), and rank 0 hears it there. */
static int lower_first_rank(coll_comm *c, void *arg)
{
    (void)arg;
    coll_set_log(count_links, NULL, COLL_LOG_DEBUG);
    int bad = replies(c, 0);
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    FAIL_IF(coll_rank(c) == 1 && (shared_to != 1 || own_to != 0),
            "rank 1: %d shared links to rank 0, %d of its own; want 1 and 0", shared_to, own_to);
    FAIL_IF(coll_rank(c) == 0 && shared_from != 1, "rank 0: %d shared links from rank 1",
            shared_from);
    return bad;
}

START_TEST(a_pair_that_talks_both_ways_shares_one_tcp_connection)
{
    int keyed = _i;
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "tcp", .timeout_ms = 5000,
                  .deadline_s = 60, .setup = use_secret};
    ck_assert_int_eq(run_ranks(&o, lower_first_rank, &keyed), 0);
}
END_TEST

/* Rank 1 sends first while rank 0 is away from the library: its send does not wait for
 * rank 0 (it dials a link of its own after a short grace), and the pair goes on over two
 * one-way connections. */
static int higher_first_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    char b = 1;
    coll_set_log(count_links, NULL, COLL_LOG_DEBUG);
    int32_t v[16] = {0};
    if (me == 1) {
        for (int i = 0; i < 16; i++)
            v[i] = i;
        EXPECT_RC(coll_send(c, v, 16, COLL_I32, 0, 99), COLL_OK);
        FAIL_IF(write(order_pipe[1], &b, 1) != 1, "pipe");
    } else {
        struct pollfd p = {.fd = order_pipe[0], .events = POLLIN};
        FAIL_IF(poll(&p, 1, 30000) != 1 || read(order_pipe[0], &b, 1) != 1,
                "rank 1's send never returned while rank 0 stayed away");
        EXPECT_RC(coll_recv(c, v, 16, COLL_I32, 1, 99), COLL_OK);
        for (int i = 0; i < 16; i++)
            FAIL_IF(v[i] != i, "element %d: %d", i, v[i]);
    }
    int bad = replies(c, 1);
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    FAIL_IF(me == 1 && (shared_to != 0 || own_to != 1),
            "rank 1: %d shared links to rank 0, %d of its own; want 0 and 1", shared_to, own_to);
    return bad;
}

START_TEST(a_higher_rank_that_sends_first_does_not_wait_for_the_lower)
{
    ck_assert_int_eq(pipe(order_pipe), 0);
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "tcp", .timeout_ms = 5000,
                  .deadline_s = 60};
    ck_assert_int_eq(run_ranks(&o, higher_first_rank, NULL), 0);
    close(order_pipe[0]);
    close(order_pipe[1]);
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
    tcase_add_loop_test(t, a_pair_that_talks_both_ways_shares_one_tcp_connection, 0, 2);
    tcase_add_test(t, a_higher_rank_that_sends_first_does_not_wait_for_the_lower);
    suite_add_tcase(s, t);
    return run_suite(s);
}
