/* Small messages and their fast path (issue 22): exchanges of up to 8 KiB on a transport
 * with send_now/recv_now (shm, auto, tcp) skip the transport's requests. Proven here through
 * the public API on real processes: results exact at every small count and rank count,
 * the path taken (COLL_DEBUG=debug counts it), ranks on either path interoperating, and
 * mismatches and a dead peer caught on it as on the general path. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void expect_all_pass(int n, const char *transport, rank_fn fn, void *arg)
{
    run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .transport = transport, .timeout_ms = 5000,
                  .deadline_s = 60};
    int failed = run_ranks(&o, fn, arg);
    ck_assert_msg(failed == 0, "%d of %d ranks failed on %s", failed, n, transport);
}

/* ---- exact results ---------------------------------------------------------------- */

static int32_t value(int rank, size_t i, int round)
{
    return (int32_t)(rank * 1000 + (int)(i % 97) + round);
}

/* Every small count around the rank count and the 8 KiB edge, all-reduce (blocking, and
 * non-blocking just before, so one rank's call may queue behind the other's), broadcast
 * from every root (a one-element chain forwards what it received) and a barrier. */
static int exact_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    const size_t counts[] = {0, 1, 2, (size_t)n - 1, (size_t)n, (size_t)n + 1, 100, 2048, 2049};
    static int32_t a[2049], b[2049], d[2049];
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t cnt = counts[k];
        for (int round = 0; round < 3; round++) {
            for (size_t i = 0; i < cnt; i++)
                a[i] = value(me, i, round), b[i] = value(me, i, round + 1);
            coll_req *q;
            EXPECT_RC(coll_iallreduce(c, b, d, cnt, COLL_I32, COLL_SUM, &q), COLL_OK);
            EXPECT_RC(coll_allreduce(c, a, a, cnt, COLL_I32, COLL_SUM), COLL_OK);
            EXPECT_RC(coll_wait(q), COLL_OK);
            for (size_t i = 0; i < cnt; i++) {
                int32_t want = 0, want_d = 0;
                for (int r = 0; r < n; r++)
                    want += value(r, i, round), want_d += value(r, i, round + 1);
                FAIL_IF(a[i] != want || d[i] != want_d, "count %zu element %zu: %d, %d; want %d, %d",
                        cnt, i, a[i], d[i], want, want_d);
            }
            int root = (int)(k + (size_t)round) % n;
            for (size_t i = 0; i < cnt; i++)
                a[i] = me == root ? value(root, i, round) : -1;
            EXPECT_RC(coll_broadcast(c, a, cnt, COLL_I32, root), COLL_OK);
            for (size_t i = 0; i < cnt; i++)
                FAIL_IF(a[i] != value(root, i, round), "broadcast of %zu from %d, element %zu: %d",
                        cnt, root, i, a[i]);
            EXPECT_RC(coll_barrier(c), COLL_OK);
        }
    }
    return 0;
}

START_TEST(small_collectives_are_exact_on_every_path)
{
    static const char *const transports[] = {"shm", "auto", "tcp"};
    static const int sizes[] = {2, 3, 4, 5, 8};
    expect_all_pass(sizes[_i % 5], transports[_i / 5], exact_rank, NULL);
}
END_TEST

/* A blocking call runs on its caller's thread only when nothing is queued or running
 * (engine.c's gate). Mixed with bursts of non-blocking ones, some still queued and some
 * running on the engine's thread, it takes its place in issue order on every rank (an
 * order that differs between ranks is COLL_EMISMATCH, or a wrong sum). A rank that pauses
 * now and then lets its engine drain, so that its blocking call finds the communicator
 * idle while the peer's does not. */
static int order_rank(coll_comm *c, void *arg)
{
    (void)arg;
    enum { ROUNDS = 300, BURST = 5 };
    int n = coll_size(c), me = coll_rank(c);
    static int32_t in[BURST + 1][2], out[BURST + 1][2];
    for (int round = 0; round < ROUNDS; round++) {
        int k = round % (BURST + 1);
        coll_req *q[BURST];
        for (int j = 0; j <= k; j++)
            in[j][0] = value(me, (size_t)j, round), in[j][1] = round;
        for (int j = 0; j < k; j++)
            EXPECT_RC(coll_iallreduce(c, in[j], out[j], 2, COLL_I32, COLL_SUM, &q[j]), COLL_OK);
        if ((round + me) % 7 == 0)
            usleep(200);
        EXPECT_RC(coll_allreduce(c, in[k], out[k], 2, COLL_I32, COLL_SUM), COLL_OK);
        for (int j = 0; j < k; j++)
            EXPECT_RC(coll_wait(q[j]), COLL_OK);
        for (int j = 0; j <= k; j++) {
            int32_t want = 0;
            for (int r = 0; r < n; r++)
                want += value(r, (size_t)j, round);
            FAIL_IF(out[j][0] != want || out[j][1] != n * round,
                    "round %d, call %d of %d: %d, %d; want %d, %d", round, j, k + 1, out[j][0],
                    out[j][1], want, n * round);
        }
    }
    return 0;
}

START_TEST(blocking_calls_keep_their_place_among_queued_ones)
{
    static const char *const transports[] = {"shm", "tcp"};
    expect_all_pass(2 + _i % 2, transports[_i / 2], order_rank, NULL);
}
END_TEST

/* Ping-pong between neighbours and a ring of sends: every message whole and in order,
 * and counted in the communicator's stats. */
static int p2p_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c), to = (me + 1) % n, from = (me + n - 1) % n;
    static int32_t out[2049], in[2049];
    const size_t counts[] = {0, 1, 2, 100, 2048, 2049, 1};
    uint64_t bytes = 0, wire = 0;
    coll_reset_stats(c);
    for (int round = 0; round < 20; round++) {
        size_t cnt = counts[round % 7];
        bytes += 2 * cnt * sizeof(int32_t);
        wire += 32 + cnt * sizeof(int32_t); /* a header and the payload, each way */
        for (size_t i = 0; i < cnt; i++)
            out[i] = value(me, i, round);
        if (me % 2 == 0) { /* odd n: the last even rank's to is rank 0, its from is odd */
            EXPECT_RC(coll_send(c, out, cnt, COLL_I32, to, (uint32_t)round), COLL_OK);
            EXPECT_RC(coll_recv(c, in, cnt, COLL_I32, from, (uint32_t)round), COLL_OK);
        } else {
            EXPECT_RC(coll_recv(c, in, cnt, COLL_I32, from, (uint32_t)round), COLL_OK);
            EXPECT_RC(coll_send(c, out, cnt, COLL_I32, to, (uint32_t)round), COLL_OK);
        }
        for (size_t i = 0; i < cnt; i++)
            FAIL_IF(in[i] != value(from, i, round), "round %d element %zu: %d", round, i, in[i]);
    }
    /* Counted alike on either path (the first messages open links on the general one). */
    coll_stats st;
    EXPECT_RC(coll_get_stats(c, &st), COLL_OK);
    FAIL_IF(st.ops != 40 || st.bytes_in != bytes || st.wire_tx != wire || st.wire_rx != wire,
            "stats: ops %llu, bytes_in %llu (want %llu), wire_tx %llu, wire_rx %llu (want %llu)",
            (unsigned long long)st.ops, (unsigned long long)st.bytes_in,
            (unsigned long long)bytes, (unsigned long long)st.wire_tx,
            (unsigned long long)st.wire_rx, (unsigned long long)wire);
    return 0;
}

START_TEST(small_messages_arrive_whole_and_in_order)
{
    static const char *const transports[] = {"shm", "auto", "tcp"};
    expect_all_pass(2 + _i % 3, transports[_i / 3], p2p_rank, NULL);
}
END_TEST

/* ---- the path is taken ------------------------------------------------------------ */

static int fast_collectives, fast_sends, fast_recvs;

/* "..., doubling, 3 us, 2 fast": a collective two of whose messages took the path. */
static void count_fast(coll_log_level level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    const char *f = strstr(msg, " fast"), *k = f;
    while (k && k > msg && k[-1] >= '0' && k[-1] <= '9')
        k--;
    if (f && strstr(msg, "allreduce #") && strtol(k, NULL, 10) > 0)
        fast_collectives++;
    if (strstr(msg, "(fast path)"))
        *(strstr(msg, " send #") ? &fast_sends : &fast_recvs) += 1;
}

static int taken_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    int32_t v[4] = {me, me, me, me};
    coll_set_log(count_fast, NULL, COLL_LOG_DEBUG);
    /* 200 rounds: on a loaded machine (2 ranks and a fuzzer on 2 cores, under ASan) a
     * reply can miss the spin 20 times in a row. */
    for (int k = 0; k < 200; k++) {
        EXPECT_RC(coll_allreduce(c, v, v, 4, COLL_I32, COLL_SUM), COLL_OK);
        if (me == 0) {
            EXPECT_RC(coll_send(c, v, 4, COLL_I32, 1, 7), COLL_OK);
            EXPECT_RC(coll_recv(c, v, 4, COLL_I32, 1, 7), COLL_OK);
        } else {
            EXPECT_RC(coll_recv(c, v, 4, COLL_I32, 0, 7), COLL_OK);
            EXPECT_RC(coll_send(c, v, 4, COLL_I32, 0, 7), COLL_OK);
        }
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    /* Each kind at least once: the first call of each opens its links by the general
     * path, and a peer slower than the spin is met there too. */
    FAIL_IF(!fast_collectives || !fast_sends || !fast_recvs,
            "fast path: %d all-reduces, %d sends, %d receives", fast_collectives, fast_sends,
            fast_recvs);
    return 0;
}

START_TEST(the_fast_path_is_taken)
{
    static const char *const transports[] = {"shm", "auto", "tcp"};
    expect_all_pass(2, transports[_i], taken_rank, NULL);
}
END_TEST

/* A peer slower than the spin: one rank's send goes on the fast path and its receive
 * is not there within the spin, so the general loop takes over from there (without
 * sending again); each rank in turn is the late one. Exact every time. */
static int late_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    for (int k = 0; k < 8; k++) {
        int32_t v[4] = {me + k, me + k, me + k, me + k};
        if (k % 2 == me)
            usleep(20000);
        EXPECT_RC(coll_allreduce(c, v, v, 4, COLL_I32, COLL_SUM), COLL_OK);
        for (int i = 0; i < 4; i++)
            FAIL_IF(v[i] != 2 * k + 1, "call %d: element %d is %d", k, i, v[i]);
    }
    return 0;
}

START_TEST(a_peer_slower_than_the_spin_is_met_by_the_general_loop)
{
    static const char *const transports[] = {"shm", "tcp"};
    expect_all_pass(2, transports[_i], late_rank, NULL);
}
END_TEST

/* ---- failures on the fast path ---------------------------------------------------- */

/* After a warm-up (links open, so both ranks are on the fast path), the ranks disagree
 * on the count, the dtype, or a tag: COLL_EMISMATCH on both, naming what each sent. */
static int mismatch_rank(coll_comm *c, void *arg)
{
    int what = *(int *)arg, me = coll_rank(c);
    int32_t v[4] = {1, 2, 3, 4};
    for (int k = 0; k < 5; k++) {
        EXPECT_RC(coll_allreduce(c, v, v, 4, COLL_I32, COLL_SUM), COLL_OK);
        EXPECT_RC(me ? coll_recv(c, v, 4, COLL_I32, 0, 1) : coll_send(c, v, 4, COLL_I32, 1, 1),
                  COLL_OK);
    }
    int rc;
    if (what == 0)
        rc = coll_allreduce(c, v, v, me ? 3 : 2, COLL_I32, COLL_SUM);
    else if (what == 1)
        rc = coll_allreduce(c, v, v, 2, me ? COLL_F32 : COLL_I32, COLL_SUM);
    else if (me == 0)
        rc = coll_send(c, v, 2, COLL_I32, 1, 5) == COLL_OK ? coll_barrier(c) : COLL_EINVAL;
    else
        rc = coll_recv(c, v, 2, COLL_I32, 0, 6);
    const char *err = coll_last_error(c);
    if (rc != COLL_EMISMATCH) {
        fprintf(stderr, "rank %d case %d: %s [%s]\n", me, what, coll_strerror(rc), err);
        return 1;
    }
    const char *says[] = {"count 3", "int32", "tag 5"};
    FAIL_IF(me == 1 && !strstr(err, says[what]) && !strstr(err, "disagree"),
            "case %d: the error does not say what the peer sent", what);
    return 0;
}

START_TEST(mismatches_on_the_fast_path_are_emismatch_on_both_ranks)
{
    int what = _i % 3;
    static const char *const transports[] = {"shm", "auto", "tcp"};
    expect_all_pass(2, transports[_i / 3], mismatch_rank, &what);
}
END_TEST

/* A peer that dies between small operations: the survivor's next all-reduce or receive
 * (fast path first, then the general loop) fails with COLL_EPEER well within its
 * timeout, never hangs. */
static int dying_rank(coll_comm *c, void *arg)
{
    int p2p = *(int *)arg, me = coll_rank(c);
    int32_t v[2] = {me, me};
    for (int k = 0; k < 20; k++)
        EXPECT_RC(coll_allreduce(c, v, v, 2, COLL_I32, COLL_SUM), COLL_OK);
    if (p2p)
        EXPECT_RC(me ? coll_send(c, v, 2, COLL_I32, 0, 1) : coll_recv(c, v, 2, COLL_I32, 1, 1),
                  COLL_OK);
    if (me == 1)
        raise(SIGKILL);
    int rc = p2p ? coll_recv(c, v, 2, COLL_I32, 1, 1) : coll_allreduce(c, v, v, 2, COLL_I32, COLL_SUM);
    FAIL_IF(rc != COLL_EPEER, "after the peer died: %s", coll_strerror(rc));
    return 0;
}

START_TEST(a_peer_that_dies_fails_the_fast_path_with_epeer)
{
    int p2p = _i % 2;
    static const char *const transports[] = {"shm", "auto", "tcp"};
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = transports[_i / 2],
                  .timeout_ms = 5000, .deadline_s = 30};
    run_ranks(&o, dying_rank, &p2p);
    ck_assert_msg(last_exit[0] == 0, "the survivor did not fail cleanly (exit %d)", last_exit[0]);
    ck_assert_int_eq(last_exit[1], -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("small");
    TCase *t = tcase_create("small");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, small_collectives_are_exact_on_every_path, 0, 15);
    tcase_add_loop_test(t, blocking_calls_keep_their_place_among_queued_ones, 0, 4);
    tcase_add_loop_test(t, small_messages_arrive_whole_and_in_order, 0, 6);
    tcase_add_loop_test(t, the_fast_path_is_taken, 0, 3);
    tcase_add_loop_test(t, a_peer_slower_than_the_spin_is_met_by_the_general_loop, 0, 2);
    tcase_add_loop_test(t, mismatches_on_the_fast_path_are_emismatch_on_both_ranks, 0, 9);
    tcase_add_loop_test(t, a_peer_that_dies_fails_the_fast_path_with_epeer, 0, 6);
    suite_add_tcase(s, t);
    return run_suite(s);
}
