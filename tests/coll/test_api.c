/* Behaviour through the public API on real processes: the non-blocking forms, split, barrier,
 * statistics, mismatches, misuse, and destroy with work outstanding. */
#include "common/harness.h"
#include "perf/verify.h"

#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void expect_all_pass(int n, rank_fn fn, rdzv_kind rdzv)
{
    run_opts o = { .nranks = n, .rdzv = rdzv, .timeout_ms = 5000, .deadline_s = 60 };
    int failed = run_ranks(&o, fn, NULL);
    ck_assert_msg(failed == 0, "%d of %d ranks failed", failed, n);
}

/* Non-blocking collectives progress with nobody calling test or wait. */
static int progress_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    enum { K = 4, COUNT = 300000 };
    float *buf = malloc(sizeof(float) * COUNT * K);
    coll_req *rq[K];
    for (int k = 0; k < K; k++) {
        cl_fill(buf + (size_t)k * COUNT, COUNT, COLL_F32, COLL_SUM, me, 0);
        EXPECT_RC(coll_iallreduce(c, buf + (size_t)k * COUNT, buf + (size_t)k * COUNT, COUNT,
                                  COLL_F32, COLL_SUM, &rq[k]),
                  COLL_OK);
    }
    int done = 0;
    for (int t = 0; t < 500 && !done; t++) {
        usleep(20000); /* no library call here: the engine must do the work */
        int d;
        EXPECT_RC(coll_test(rq[K - 1], &d), d ? COLL_OK : COLL_INPROGRESS);
        done = d;
    }
    FAIL_IF(!done, "the last all-reduce never finished on its own");
    for (int k = 0; k < K; k++) {
        EXPECT_RC(coll_wait(rq[k]), COLL_OK);
        FAIL_IF(cl_check_reduce(buf + (size_t)k * COUNT, COUNT, COLL_F32, COLL_SUM, n, 0),
                "all-reduce %d wrong", k);
    }
    free(buf);
    return 0;
}

START_TEST(nonblocking_ops_progress_without_test)
{
    expect_all_pass(3, progress_rank, RDZV_FILE);
}
END_TEST

/* Even and odd ranks form two communicators ordered by key; color < 0 joins none. The
 * split costs the parent one collective (the exchange of colors, keys and cards). */
static int split_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    coll_comm *sub = NULL;
    int color = me == n - 1 ? -1 : me % 2;
    coll_stats before, after;
    coll_get_stats(c, &before);
    EXPECT_RC(coll_split(c, color, -me, &sub), COLL_OK);
    coll_get_stats(c, &after);
    FAIL_IF(after.ops - before.ops != 1, "the split ran %llu collectives on the parent",
            (unsigned long long)(after.ops - before.ops));
    if (color < 0) {
        FAIL_IF(sub != NULL, "color -1 must give NULL");
    } else {
        int members = 0, pos = 0;
        for (int r = 0; r < n - 1; r++)
            if (r % 2 == color) {
                members++;
                pos += r > me; /* key -rank: higher old ranks come first */
            }
        FAIL_IF(coll_size(sub) != members || coll_rank(sub) != pos, "size %d rank %d, want %d %d",
                coll_size(sub), coll_rank(sub), members, pos);
        int want = 0;
        for (int r = 0; r < n - 1; r++)
            want += r % 2 == color ? r : 0;
        if (sum_is(sub, me, want))
            return 1;
        coll_destroy(sub);
    }
    EXPECT_RC(coll_barrier(c), COLL_OK);
    return 0;
}

START_TEST(split_makes_groups_by_color_and_key)
{
    expect_all_pass(5, split_rank, RDZV_FILE);
}
END_TEST

/* A split of a split, and point-to-point between ranks whose links open on first use:
 * 6 ranks split into evens and odds, each splits again into its first two and the
 * rest; every rank of a half sends to every other (in both halves, ranks that never
 * exchanged anything before), and the quarters all-reduce. */
static int split_twice_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c);
    coll_comm *half = NULL, *quarter = NULL;
    EXPECT_RC(coll_split(c, me % 2, me, &half), COLL_OK);
    int h = coll_rank(half), hn = coll_size(half);
    EXPECT_RC(coll_split(half, h < 2, h, &quarter), COLL_OK);
    for (int d = 1; d < hn; d++) {
        int out = me * 100 + d, in = -1, to = (h + d) % hn, from = (h + hn - d) % hn;
        EXPECT_RC(coll_sendrecv(half, &out, 1, to, &in, 1, from, COLL_I32, (uint32_t)d), COLL_OK);
        FAIL_IF(in != (from * 2 + me % 2) * 100 + d, "half rank %d got %d from %d", h, in, from);
    }
    int want = 0;
    for (int r = me % 2; r < 6; r += 2)
        want += (r / 2 < 2) == (h < 2) ? r : 0;
    if (sum_is(quarter, me, want))
        return 1;
    coll_destroy(quarter);
    coll_destroy(half);
    EXPECT_RC(coll_barrier(c), COLL_OK);
    return 0;
}

START_TEST(split_of_a_split_and_lazy_p2p)
{
    expect_all_pass(6, split_twice_rank, RDZV_FILE);
}
END_TEST

/* The last "ranks on this machine" log line (the info line of each new communicator). */
static char machine_line[1024];

static void keep_machine_line(coll_log_level level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    if (strstr(msg, "ranks on this machine"))
        snprintf(machine_line, sizeof(machine_line), "%s", msg);
}

/* All ranks run here, so a communicator counts all its ranks as sharing this machine's
 * CPUs, and it is crowded (its pollers yield) only with more ranks than CPUs: a 4-rank
 * communicator and its 2-rank halves, on a machine of any size. */
static int machine_rank(coll_comm *c, void *arg)
{
    (void)arg;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    coll_set_log(keep_machine_line, NULL, COLL_LOG_INFO);
    for (int halves = 0; halves < 2; halves++) {
        coll_comm *sub = NULL;
        machine_line[0] = 0;
        EXPECT_RC(coll_split(c, halves ? coll_rank(c) % 2 : 0, coll_rank(c), &sub), COLL_OK);
        int n = coll_size(sub);
        char want[64];
        snprintf(want, sizeof(want), "%d of %d ranks on this machine, %ld CPUs", n, n, cpus);
        int crowded = strstr(machine_line, "crowded") != NULL;
        coll_destroy(sub);
        FAIL_IF(!strstr(machine_line, want) || crowded != (n > cpus),
                "logged \"%s\", want \"%s\"%s", machine_line, want, n > cpus ? ", crowded" : "");
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    return 0;
}

START_TEST(ranks_on_one_machine_are_counted)
{
    expect_all_pass(4, machine_rank, RDZV_FILE);
}
END_TEST

/* A 16 MiB f32 all-reduce puts 2(n-1)/n x 16 MiB on the wire per rank, plus headers
 * under 2%; coll_allreduce_wire_bytes says the payload exactly, also for a small one
 * (recursive doubling at n = 4: 2 x 4000 bytes in 2 messages, where the ring has 6000). */
static int stats_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c);
    size_t count = 4u << 20;
    float *buf = calloc(count, sizeof(float));
    coll_reset_stats(c);
    EXPECT_RC(coll_allreduce(c, buf, buf, count, COLL_F32, COLL_SUM), COLL_OK);
    coll_stats st;
    EXPECT_RC(coll_get_stats(c, &st), COLL_OK);
    uint64_t payload = 2 * (uint64_t)(n - 1) * (count * 4 / (size_t)n);
    FAIL_IF(st.wire_tx < payload || st.wire_tx > payload + payload / 50,
            "wire_tx %llu, payload %llu", (unsigned long long)st.wire_tx,
            (unsigned long long)payload);
    FAIL_IF(st.wire_rx != st.wire_tx, "wire_rx %llu != wire_tx %llu",
            (unsigned long long)st.wire_rx, (unsigned long long)st.wire_tx);
    FAIL_IF(st.ops != 1 || st.bytes_in != count * 4, "ops %llu bytes_in %llu",
            (unsigned long long)st.ops, (unsigned long long)st.bytes_in);
    uint64_t said = coll_allreduce_wire_bytes(c, count, COLL_F32);
    FAIL_IF(said > st.wire_tx || st.wire_tx - said > said / 50, "said %llu, wire_tx %llu",
            (unsigned long long)said, (unsigned long long)st.wire_tx);
    coll_reset_stats(c);
    EXPECT_RC(coll_allreduce(c, buf, buf, 1000, COLL_F32, COLL_SUM), COLL_OK);
    EXPECT_RC(coll_get_stats(c, &st), COLL_OK);
    said = coll_allreduce_wire_bytes(c, 1000, COLL_F32);
    FAIL_IF(n == 4 && said != 8000, "n = 4 small all-reduce: %llu payload bytes, not 8000",
            (unsigned long long)said);
    FAIL_IF(st.wire_tx < said || (st.wire_tx - said) % 32 ||
                st.wire_tx - said > 32 * 2 * (uint64_t)(n - 1),
            "wire_tx %llu is not %llu payload bytes plus headers", (unsigned long long)st.wire_tx,
            (unsigned long long)said);
    FAIL_IF(coll_allreduce_wire_bytes(NULL, 1, COLL_F32) != 0 ||
                coll_allreduce_wire_bytes(c, 1, (coll_dtype)99) != 0,
            "bad arguments must give 0");
    free(buf);
    return 0;
}

/* What each level adds: debug, every collective with its algorithm and time and every
 * send/recv; trace, every segment; info, neither. Counted per level, lines of each kind. */
static int said[COLL_LOG_TRACE + 1][3];

static void count_kinds(coll_log_level level, const char *msg, void *arg)
{
    (void)arg;
    said[level][0] += strstr(msg, "allreduce #") && strstr(msg, " us") && strstr(msg, "ring");
    said[level][1] += strstr(msg, "send #") != NULL;
    said[level][2] += strstr(msg, ": segment ") != NULL;
}

static int levels_rank(coll_comm *c, void *arg)
{
    (void)arg;
    enum { COUNT = 1 << 18 };
    float *x = calloc(COUNT, sizeof(float));
    int me = coll_rank(c), peer = 1 - me;
    for (int l = COLL_LOG_INFO; l <= COLL_LOG_TRACE; l++) {
        coll_set_log(count_kinds, NULL, (coll_log_level)l);
        EXPECT_RC(coll_allreduce(c, x, x, COUNT, COLL_F32, COLL_SUM), COLL_OK);
        EXPECT_RC(coll_sendrecv(c, x, 4, peer, x + 4, 4, peer, COLL_F32, 0), COLL_OK);
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    free(x);
    FAIL_IF(said[COLL_LOG_INFO][0] + said[COLL_LOG_INFO][1] + said[COLL_LOG_INFO][2] ||
                !said[COLL_LOG_DEBUG][0] || !said[COLL_LOG_DEBUG][1] || !said[COLL_LOG_TRACE][2],
            "lines (collective, send, segment): info %d %d %d, debug %d %d, trace %d",
            said[COLL_LOG_INFO][0], said[COLL_LOG_INFO][1], said[COLL_LOG_INFO][2],
            said[COLL_LOG_DEBUG][0], said[COLL_LOG_DEBUG][1], said[COLL_LOG_TRACE][2]);
    return 0;
}

START_TEST(debug_and_trace_say_what_runs)
{
    expect_all_pass(2, levels_rank, RDZV_TCP);
}
END_TEST

/* Rank 0's first thread waits inside a blocking all-reduce (rank 1 comes late) while
 * its second thread issues one: refused with COLL_EINVAL saying why; the first completes
 * and the communicator stays usable. */
typedef struct {
    coll_comm *c;
    int rc;
    float v;
} issuer;

static void *blocking_issuer(void *arg)
{
    issuer *t = arg;
    t->v = 1;
    t->rc = coll_allreduce(t->c, &t->v, &t->v, 1, COLL_F32, COLL_SUM);
    return NULL;
}

static int two_threads_rank(coll_comm *c, void *arg)
{
    (void)arg;
    issuer first = {c, -100, 0};
    float v = 1;
    if (coll_rank(c) == 1) {
        usleep(600 * 1000);
        EXPECT_RC(coll_allreduce(c, &v, &v, 1, COLL_F32, COLL_SUM), COLL_OK);
        EXPECT_RC(coll_allreduce(c, &v, &v, 1, COLL_F32, COLL_SUM), COLL_OK);
        FAIL_IF(v != 4, "sums %g, want 4", v);
        return 0;
    }
    pthread_t t;
    pthread_create(&t, NULL, blocking_issuer, &first);
    usleep(300 * 1000);
    coll_req *q = (coll_req *)&first;
    int rc = coll_iallreduce(c, &v, &v, 1, COLL_F32, COLL_SUM, &q);
    const char *e = coll_last_error(c);
    FAIL_IF(rc != COLL_EINVAL || q || !strstr(e, "another thread is inside a blocking collective"),
            "second thread: %s, request %p, '%s'", coll_strerror(rc), (void *)q, e);
    pthread_join(t, NULL);
    FAIL_IF(first.rc != COLL_OK || first.v != 2, "first thread: %s, %g", coll_strerror(first.rc),
            first.v);
    EXPECT_RC(coll_allreduce(c, &first.v, &first.v, 1, COLL_F32, COLL_SUM), COLL_OK);
    FAIL_IF(first.v != 4, "then %g, want 4", first.v);
    return 0;
}

START_TEST(a_second_issuing_thread_is_refused)
{
    expect_all_pass(2, two_threads_rank, RDZV_TCP);
}
END_TEST

START_TEST(stats_count_wire_bytes_exactly)
{
    expect_all_pass(4, stats_rank, RDZV_FILE);
}
END_TEST

/* Integer averages whose sum does not fit the element type: all-reduce (blocking, in
 * place and not, non-blocking), reduce-scatter, reduce to rank 1 and reduce-scatter-v. */
static int int_avg_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    int8_t i8[8], o8[8];
    uint8_t u8[2] = {200, 250}, ou8[2];
    int32_t i32[3] = {2000000000, -2000000000, 7 + me}, o32[3];
    for (int k = 0; k < 8; k++)
        i8[k] = (int8_t)(k % 2 ? -100 : 100);
    EXPECT_RC(coll_allreduce(c, i8, o8, 8, COLL_I8, COLL_AVG), COLL_OK);
    for (int k = 0; k < 8; k++)
        FAIL_IF(o8[k] != i8[k], "int8 AVG element %d is %d, want %d", k, o8[k], i8[k]);
    EXPECT_RC(coll_allreduce(c, u8, u8, 2, COLL_U8, COLL_AVG), COLL_OK);
    FAIL_IF(u8[0] != 200 || u8[1] != 250, "uint8 AVG in place: %u %u", u8[0], u8[1]);
    coll_req *q = NULL;
    EXPECT_RC(coll_iallreduce(c, i32, o32, 3, COLL_I32, COLL_AVG, &q), COLL_OK);
    EXPECT_RC(coll_wait(q), COLL_OK);
    int want = 7 + (n - 1) / 2; /* (7n + n(n-1)/2) / n, truncated */
    FAIL_IF(o32[0] != 2000000000 || o32[1] != -2000000000 || o32[2] != want,
            "int32 AVG: %d %d %d (want %d)", o32[0], o32[1], o32[2], want);
    EXPECT_RC(coll_reduce_scatter(c, i8, o8, 2, COLL_I8, COLL_AVG), COLL_OK);
    FAIL_IF(o8[0] != 100 || o8[1] != -100, "int8 reduce-scatter AVG: %d %d", o8[0], o8[1]);
    memset(ou8, 0, sizeof(ou8));
    u8[0] = 200, u8[1] = 250;
    EXPECT_RC(coll_reduce(c, u8, ou8, 2, COLL_U8, COLL_AVG, 1), COLL_OK);
    FAIL_IF(me == 1 && (ou8[0] != 200 || ou8[1] != 250), "uint8 reduce AVG: %u %u", ou8[0], ou8[1]);
    size_t counts[8], at = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r % 2 ? 1 : 2;
        at += r < me ? counts[r] : 0;
    }
    EXPECT_RC(coll_reduce_scatterv(c, i8, o8, counts, COLL_I8, COLL_AVG), COLL_OK);
    FAIL_IF(o8[0] != i8[at], "int8 reduce-scatter-v AVG: %d, want %d", o8[0], i8[at]);
    return 0;
}

START_TEST(integer_averages_do_not_wrap)
{
    expect_all_pass(4, int_avg_rank, RDZV_FILE);
}
END_TEST

/* Ranks that disagree on count, dtype or op all get COLL_EMISMATCH: those that see the
 * disagreement name both sides, the others learn it from their neighbour's farewell. */
static int mismatch_rank(coll_comm *c, void *arg)
{
    int what = *(int *)arg, me = coll_rank(c);
    float buf[64] = { 0 };
    size_t count = what == 0 && me == 1 ? 33 : 32;
    coll_dtype dt = what == 1 && me == 1 ? COLL_I32 : COLL_F32;
    coll_op op = what == 2 && me == 1 ? COLL_MAX : COLL_SUM;
    int rc = coll_allreduce(c, buf, buf, count, dt, op);
    FAIL_IF(rc != COLL_EMISMATCH, "got %s", coll_strerror(rc));
    FAIL_IF(!strstr(coll_last_error(c), me == 0 ? "failed (ranks disagree" : "expects"),
            "message should name both sides or the rank that saw it");
    EXPECT_RC(coll_allreduce(c, buf, buf, 1, COLL_F32, COLL_SUM), COLL_ESTATE);
    return 0;
}

START_TEST(mismatched_arguments_are_emismatch_on_every_rank)
{
    int what = _i;
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 3000, .deadline_s = 30 };
    int failed = run_ranks(&o, mismatch_rank, &what);
    ck_assert_msg(failed == 0, "%d ranks failed (case %d)", failed, what);
}
END_TEST

/* Misuse number k on s; every one is a bad argument, named in the sentence by `names`. */
static const char *const names[] = { "dtype 42", "op -1", "sendbuf is NULL", "overflows",
                                     "overflows", "root 99", "peer", "peer -1", "req is NULL",
                                     "codec 99", "buf is NULL",
                                     "op band is bitwise: integer dtypes only, not float",
                                     "op bor is bitwise: integer dtypes only, not half",
                                     "op bxor is bitwise: integer dtypes only, not bfloat16",
                                     "op band is bitwise: integer dtypes only, not double",
                                     "op bxor is bitwise: integer dtypes only, not float" };

static int misuse(coll_comm *s, int k, void *arg)
{
    float *f = arg;
    coll_req *q;
    switch (k) {
    case 0: return coll_allreduce(s, f, f, 4, (coll_dtype)42, COLL_SUM);
    case 1: return coll_allreduce(s, f, f, 4, COLL_F32, (coll_op)-1);
    case 2: return coll_allreduce(s, NULL, f, 4, COLL_F32, COLL_SUM);
    case 3: return coll_allreduce(s, f, f, SIZE_MAX / 2, COLL_F32, COLL_SUM);
    case 4: return coll_reduce_scatter(s, f, f, SIZE_MAX / 8, COLL_F64, COLL_SUM);
    case 5: return coll_broadcast(s, f, 4, COLL_F32, 99);
    case 6: return coll_send(s, f, 4, COLL_F32, coll_rank(s), 0);
    case 7: return coll_recv(s, f, 4, COLL_F32, -1, 0);
    case 8: return coll_iallreduce(s, f, f, 4, COLL_F32, COLL_SUM, NULL);
    case 9: return coll_set_codec(s, (coll_codec)99);
    case 10: return coll_irecv(s, NULL, 4, COLL_F32, 0, 0, &q);
    /* a bitwise op with a float dtype, through every call that reduces */
    case 11: return coll_allreduce(s, f, f, 4, COLL_F32, COLL_BAND);
    case 12: return coll_reduce_scatter(s, f, f, 1, COLL_F16, COLL_BOR);
    case 13: return coll_reduce(s, f, f, 4, COLL_BF16, COLL_BXOR, 0);
    case 14: {
        size_t counts[2] = { 1, 1 };
        return coll_reduce_scatterv(s, f, f, counts, COLL_F64, COLL_BAND);
    }
    default: return coll_iallreduce(s, f, f, 4, COLL_F32, COLL_BXOR, &q);
    }
}

/* Bad arguments are COLL_EINVAL with a sentence naming them, and fail the communicator
 * they were passed to (its peers would otherwise wait for this rank). */
static int misuse_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float f[4] = { 0 };
    coll_req *q;
    EXPECT_RC(coll_allreduce(NULL, f, f, 4, COLL_F32, COLL_SUM), COLL_EINVAL);
    EXPECT_RC(coll_wait(NULL), COLL_EINVAL);
    for (int k = 0; k < (int)(sizeof(names) / sizeof(names[0])); k++)
        if (einval_on_split(c, misuse, k, f, names[k]))
            return 1;
    EXPECT_RC(coll_iallreduce(c, f, f, 4, COLL_F32, COLL_SUM, &q), COLL_OK);
    EXPECT_RC(coll_wait(q), COLL_OK);
    EXPECT_RC(coll_barrier(c), COLL_OK);
    return 0;
}

START_TEST(misuse_returns_einval_and_fails_the_comm)
{
    expect_all_pass(2, misuse_rank, RDZV_FILE);
}
END_TEST

/* One rank passes a bad argument, the others call the collective rightly: they return
 * COLL_EPEER naming that rank and its cause, long before their timeout (60 s here; the
 * test's own deadline is 30 s). A broadcast's root may have finished its part first:
 * then its next call says it. */
static int one_bad_rank(coll_comm *c, void *arg)
{
    int which = *(int *)arg, me = coll_rank(c);
    float f[8] = { 0 }, out[8];
    int rc = which == 0 ? coll_allreduce(c, me == 1 ? NULL : f, out, 8, COLL_F32, COLL_SUM)
                        : coll_broadcast(c, f, 8, COLL_F32, me == 1 ? -3 : 0);
    if (me == 1) {
        EXPECT_RC(rc, COLL_EINVAL);
        return 0;
    }
    if (which == 1 && me == 0 && rc == COLL_OK) /* the root's part was done: its next call */
        rc = coll_barrier(c);
    EXPECT_RC(rc, COLL_EPEER);
    const char *e = coll_last_error(c);
    FAIL_IF(!strstr(e, "rank 1 failed") || !strstr(e, "invalid argument"),
            "the survivors' sentence should name rank 1 and its cause: '%s'", e);
    return 0;
}

START_TEST(a_bad_argument_on_one_rank_fails_the_others_at_once)
{
    int which = _i;
    run_opts o = { .nranks = 3, .rdzv = RDZV_FILE, .transport = _i ? "shm" : "tcp",
                   .timeout_ms = 60000, .deadline_s = 30 };
    ck_assert_int_eq(run_ranks(&o, one_bad_rank, &which), 0);
}
END_TEST

/* COLL_SEGMENT_BYTES sets the ring's segment: a 4 KiB segment cuts each chunk of a
 * 300000-element all-reduce into dozens of pipelined units, all still exact. */
static int small_segment_rank(coll_comm *c, void *arg)
{
    (void)arg;
    enum { N = 300000 };
    float *buf = malloc(N * sizeof(float));
    FAIL_IF(!buf, "no memory");
    cl_fill(buf, N, COLL_F32, COLL_SUM, coll_rank(c), 0);
    EXPECT_RC(coll_allreduce(c, buf, buf, N, COLL_F32, COLL_SUM), COLL_OK);
    size_t wrong = cl_check_reduce(buf, N, COLL_F32, COLL_SUM, coll_size(c), 0);
    free(buf);
    FAIL_IF(wrong, "%zu wrong elements", wrong);
    return 0;
}

START_TEST(segment_bytes_from_the_environment)
{
    setenv("COLL_SEGMENT_BYTES", "4096", 1);
    expect_all_pass(3, small_segment_rank, RDZV_FILE);
}
END_TEST

/* A malformed COLL_* variable fails coll_init with COLL_EINVAL, naming the variable. */
START_TEST(bad_environment_is_einval_naming_the_variable)
{
    const char *bad[][2] = { { "COLL_SEGMENT_BYTES", "12x" }, { "COLL_SEGMENT_BYTES", "0" },
                             { "COLL_SPIN_US", "-5" }, { "COLL_SPIN_US", "x" },
                             { "COLL_TIMEOUT_MS", "abc" }, { "COLL_TIMEOUT_MS", "5s" },
                             { "COLL_DEBUG", "loud" }, { "MASTER_PORT", "abc" },
                             { "MASTER_PORT", "70000" }, { "MASTER_PORT", "0" },
                             { "COLL_SPLIT_SHARE", "yes" } };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        coll_comm *c = NULL;
        const char *url = strcmp(bad[i][0], "MASTER_PORT") ? "mem://badenv" : "env://";
        ck_assert_int_eq(coll_init(&c, url, 0, 1, NULL), COLL_EINVAL);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(coll_last_error(NULL), bad[i][0]), "error '%s' does not name %s",
                      coll_last_error(NULL), bad[i][0]);
        unsetenv(bad[i][0]);
    }
    /* A bad URL's message lists every scheme; a tcp:// port is checked too. */
    coll_comm *c = NULL;
    ck_assert_int_eq(coll_init(&c, "udp://x", 0, 1, NULL), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "mem"), "%s", coll_last_error(NULL));
    ck_assert_int_eq(coll_init(&c, "tcp://127.0.0.1:99999", 0, 1, NULL), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "99999"), "%s", coll_last_error(NULL));
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.split_share = 2;
    ck_assert_int_eq(coll_init(&c, "mem://badcfg", 0, 1, &cfg), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "split_share"), "%s", coll_last_error(NULL));
}
END_TEST

static int abort_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float f[4] = { 0 };
    if (coll_rank(c) == 0) {
        EXPECT_RC(coll_abort(c), COLL_OK);
        EXPECT_RC(coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM), COLL_EABORTED);
    } else {
        int rc = coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM);
        FAIL_IF(rc != COLL_EPEER && rc != COLL_EABORTED, "peer of an aborted rank got %s",
                coll_strerror(rc));
    }
    return 0;
}

START_TEST(abort_fails_this_rank_and_its_peers)
{
    expect_all_pass(3, abort_rank, RDZV_FILE);
}
END_TEST

/* coll_destroy with requests outstanding: each stays valid until collected, finished with
 * its status (COLL_EABORTED where it had not finished), and a thread inside a blocking
 * collective on the communicator is woken and waited out, not left on freed memory. */
static void *blocked_caller(void *arg)
{
    issuer *t = arg;
    t->rc = coll_allreduce(t->c, &t->v, &t->v, 1, COLL_F32, COLL_SUM);
    return NULL;
}

static int destroy_outstanding_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int me = coll_rank(c), d = 0;
    coll_comm *s;
    EXPECT_RC(coll_split(c, 0, me, &s), COLL_OK);
    float one = 1, sum = 0, late = 1, in[4];
    coll_req *finished, *recv, *queued;
    EXPECT_RC(coll_iallreduce(s, &one, &sum, 1, COLL_F32, COLL_SUM, &finished), COLL_OK);
    for (int t = 0; t < 5000 && !d; t++, usleep(1000))
        coll_test(finished, &d);
    FAIL_IF(!d, "the all-reduce did not finish");
    EXPECT_RC(coll_barrier(c), COLL_OK);
    if (me == 0) { /* rank 1 sends nothing and joins nothing on s until rank 0 is through */
        issuer blocked = {s, -100, 1};
        pthread_t t;
        EXPECT_RC(coll_irecv(s, in, 4, COLL_F32, 1, 8, &recv), COLL_OK);
        EXPECT_RC(coll_iallreduce(s, &one, &late, 1, COLL_F32, COLL_SUM, &queued), COLL_OK);
        coll_stats st;
        coll_get_stats(s, &st);
        uint64_t before = st.bytes_in;
        pthread_create(&t, NULL, blocked_caller, &blocked);
        /* its bytes are counted once it is inside the call: destroy must find it there */
        for (int k = 0; k < 5000 && st.bytes_in == before; k++, usleep(1000))
            coll_get_stats(s, &st);
        FAIL_IF(st.bytes_in == before, "the blocked caller never entered its all-reduce");
        usleep(50 * 1000);
        EXPECT_RC(coll_destroy(s), COLL_OK);
        pthread_join(t, NULL);
        FAIL_IF(blocked.rc != COLL_EABORTED, "the blocked caller got %s",
                coll_strerror(blocked.rc));
        d = 0;
        EXPECT_RC(coll_test(recv, &d), COLL_EABORTED);
        FAIL_IF(!d, "a request of a destroyed communicator is not done");
        EXPECT_RC(coll_wait(recv), COLL_EABORTED);
        EXPECT_RC(coll_wait(queued), COLL_EABORTED);
    }
    EXPECT_RC(coll_barrier(c), COLL_OK);
    if (me == 1)
        EXPECT_RC(coll_destroy(s), COLL_OK);
    EXPECT_RC(coll_wait(finished), COLL_OK);
    FAIL_IF(sum != 2, "the finished all-reduce gave %g", sum);
    return 0;
}

START_TEST(destroy_leaves_outstanding_requests_valid)
{
    const char *tr[] = {"tcp", "shm"};
    run_opts o = { .nranks = 2, .rdzv = RDZV_FILE, .transport = tr[_i], .timeout_ms = 5000,
                   .deadline_s = 60 };
    ck_assert_msg(run_ranks(&o, destroy_outstanding_rank, NULL) == 0, "on %s", tr[_i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api");
    TCase *t = tcase_create("api");
    tcase_set_timeout(t, 90);
    tcase_add_test(t, nonblocking_ops_progress_without_test);
    tcase_add_test(t, split_makes_groups_by_color_and_key);
    tcase_add_test(t, split_of_a_split_and_lazy_p2p);
    tcase_add_test(t, ranks_on_one_machine_are_counted);
    tcase_add_test(t, debug_and_trace_say_what_runs);
    tcase_add_test(t, a_second_issuing_thread_is_refused);
    tcase_add_test(t, stats_count_wire_bytes_exactly);
    tcase_add_test(t, integer_averages_do_not_wrap);
    tcase_add_loop_test(t, mismatched_arguments_are_emismatch_on_every_rank, 0, 3);
    tcase_add_test(t, misuse_returns_einval_and_fails_the_comm);
    tcase_add_loop_test(t, a_bad_argument_on_one_rank_fails_the_others_at_once, 0, 2);
    tcase_add_test(t, segment_bytes_from_the_environment);
    tcase_add_test(t, bad_environment_is_einval_naming_the_variable);
    tcase_add_test(t, abort_fails_this_rank_and_its_peers);
    tcase_add_loop_test(t, destroy_leaves_outstanding_requests_valid, 0, 2);
    suite_add_tcase(s, t);
    return run_suite(s);
}
