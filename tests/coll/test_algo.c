/* The algorithm table through the public API: every all-reduce algorithm, forced with
 * COLL_ALGO, gives the exact result on every rank and moves the bytes its cost says; one
 * that cannot run here is COLL_ENOTSUP with its reason (the communicator stays usable);
 * an unknown name fails coll_init; unforced, COLL_DEBUG=info names the model's choice:
 * recursive doubling for small messages on a power of two, the ring for large. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t counts[] = {1, 1000, 16384, 100003};
enum { NCOUNTS = sizeof(counts) / sizeof(counts[0]) };

/* Exact in f32 whatever the order of the sum (small integers). */
static float val(int r, size_t k)
{
    return (float)((r + 1) * (int)(k % 17 + 1));
}

static int allreduce_exact(coll_comm *c, size_t count)
{
    int n = coll_size(c), me = coll_rank(c);
    float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
    for (size_t k = 0; k < count; k++)
        x[k] = val(me, k);
    coll_stats before, after;
    coll_get_stats(c, &before);
    EXPECT_RC(coll_allreduce(c, x, y, count, COLL_F32, COLL_SUM), COLL_OK);
    coll_get_stats(c, &after);
    for (size_t k = 0; k < count; k++)
        FAIL_IF(y[k] != (float)(n * (n + 1) / 2) * (float)(k % 17 + 1),
                "count %zu: element %zu is %g", count, k, y[k]);
    FAIL_IF(!identical_everywhere(c, y, count * sizeof(float)), "count %zu differs", count);
    /* Payload as the cost says, plus one 32-byte header per message: at most 2n, and
     * (a tree) six a segment of a half. */
    const char *seg = getenv("COLL_SEGMENT_BYTES");
    size_t want = coll_allreduce_wire_bytes(c, count, COLL_F32);
    size_t segs = count * sizeof(float) / (seg ? strtoul(seg, NULL, 10) : 512 * 1024) + 1;
    uint64_t sent = after.wire_tx - before.wire_tx;
    FAIL_IF(sent < want || sent > want + 32u * (2u * (unsigned)n + 6u * segs),
            "count %zu: sent %llu bytes, the algorithm's cost says %zu payload", count,
            (unsigned long long)sent, want);
    free(x);
    free(y);
    return 0;
}

static int exact_rank(coll_comm *c, void *arg)
{
    const char *algo = arg;
    int n = coll_size(c);
    size_t s = 1000 * sizeof(float);
    /* 1000 f32 on 4 ranks: the ring sends 2 x 3/4 of 4000 bytes, doubling 2 x 4000. */
    size_t want = !strcmp(algo, "doubling") ? 2 * s : 2 * s - 2 * s / (size_t)n;
    if (n == 4 && strcmp(algo, "tree")) /* a tree's inner nodes send more than its leaves */
        FAIL_IF(coll_allreduce_wire_bytes(c, 1000, COLL_F32) != want,
                "COLL_ALGO=%s: wire bytes %zu, want %zu", algo,
                coll_allreduce_wire_bytes(c, 1000, COLL_F32), want);
    for (int i = 0; i < NCOUNTS; i++) {
        if (!strcmp(algo, "doubling") && counts[i] * sizeof(float) > 64 * 1024)
            continue;
        if (allreduce_exact(c, counts[i]))
            return 1;
    }
    if (strcmp(algo, "tree"))
        return 0;
    /* The last rank's count is one more: every rank fails with COLL_EMISMATCH (one whose
     * own edges agreed, at its next call), none waits. */
    float x[1001] = {0}, y[1001];
    int rc = coll_allreduce(c, x, y, 1000 + (coll_rank(c) == n - 1), COLL_F32, COLL_SUM);
    if (rc == COLL_OK)
        rc = coll_barrier(c);
    FAIL_IF(rc != COLL_EMISMATCH, "a count mismatch: %s (%s)", coll_strerror(rc),
            coll_last_error(c));
    return 0;
}

/* _i: ring, doubling, rabenseifner or tree, on 2 to 5 ranks (doubling: 2 and 4;
 * rabenseifner folds 3 and 5; the second tree is mirrored on 2, 3 and 4, shifted on 5),
 * tcp and shm. */
START_TEST(a_forced_algorithm_is_exact_and_moves_what_it_costs)
{
    static const char *const algos[] = {"ring", "doubling", "rabenseifner", "tree"};
    static const char *const transports[] = {"tcp", "shm"};
    const char *algo = algos[_i % 4];
    setenv("COLL_ALGO", algo, 1);
    for (int n = 2; n <= 5; n++) {
        if (!strcmp(algo, "doubling") && (n & (n - 1)))
            continue;
        run_opts o = {.nranks = n,
                      .rdzv = RDZV_FILE,
                      .transport = transports[_i / 4],
                      .timeout_ms = 10000,
                      .deadline_s = 60};
        int failed = run_ranks(&o, exact_rank, (void *)algo);
        ck_assert_msg(failed == 0, "%d of %d ranks failed (COLL_ALGO=%s, %s)", failed, n, algo,
                      transports[_i / 4]);
    }
    unsetenv("COLL_ALGO");
}
END_TEST

static void small_segments(int rank, void *arg)
{
    (void)rank, (void)arg;
    setenv("COLL_SEGMENT_BYTES", "4096", 1);
}

/* The tree's halves in many segments (100003 f32: 49 a half), its two trees each a
 * pipeline of their own, on 3 (mirrored), 5 and 7 (shifted) and 8 ranks. */
START_TEST(a_tree_in_many_segments_is_exact)
{
    static const int ranks[] = {3, 5, 7, 8};
    setenv("COLL_ALGO", "tree", 1);
    run_opts o = {.nranks = ranks[_i],
                  .rdzv = RDZV_FILE,
                  .transport = _i % 2 ? "shm" : "tcp",
                  .timeout_ms = 10000,
                  .deadline_s = 120,
                  .setup = small_segments};
    int failed = run_ranks(&o, exact_rank, "tree");
    ck_assert_msg(failed == 0, "%d of %d ranks failed", failed, o.nranks);
    unsetenv("COLL_ALGO");
}
END_TEST

static int unsupported_rank(coll_comm *c, void *arg)
{
    const char *reason = arg;
    float v = 1, sum = 0, all[3];
    EXPECT_RC(coll_allreduce(c, &v, &sum, 1, COLL_F32, COLL_SUM), COLL_ENOTSUP);
    FAIL_IF(!strstr(coll_last_error(c), reason) || !strstr(coll_last_error(c), "COLL_ALGO"),
            "the message should say COLL_ALGO and '%s'", reason);
    coll_req *q = NULL;
    EXPECT_RC(coll_iallreduce(c, &v, &sum, 1, COLL_F32, COLL_SUM, &q), COLL_ENOTSUP);
    FAIL_IF(q != NULL, "a refused request must be NULL");
    /* hier forces the reduce-scatter and all-gather it serves: refused as well. */
    int forced = strstr(reason, "hosts") != NULL;
    EXPECT_RC(coll_allgather(c, &v, all, 1, COLL_F32), forced ? COLL_ENOTSUP : COLL_OK);
    FAIL_IF(!forced && (all[0] != 1 || all[2] != 1), "allgather: %g %g", all[0], all[2]);
    EXPECT_RC(coll_reduce_scatter(c, all, &sum, 1, COLL_F32, COLL_SUM),
              forced ? COLL_ENOTSUP : COLL_OK);
    FAIL_IF(forced && !strstr(coll_last_error(c), "reduce_scatter"), "%s", coll_last_error(c));
    /* Nothing was sent: the communicator still works. */
    float b = (float)coll_rank(c);
    EXPECT_RC(coll_broadcast(c, &b, 1, COLL_F32, 2), COLL_OK);
    FAIL_IF(b != 2, "broadcast after the refusal: %g", b);
    return 0;
}

START_TEST(an_algorithm_that_cannot_run_is_enotsup_with_its_reason)
{
    run_opts o = {.nranks = 3, .rdzv = RDZV_FILE, .timeout_ms = 5000, .deadline_s = 30};
    setenv("COLL_ALGO", "doubling", 1);
    ck_assert_int_eq(run_ranks(&o, unsupported_rank, "power of two"), 0);
    setenv("COLL_ALGO", "hier", 1);
    ck_assert_int_eq(run_ranks(&o, unsupported_rank, "two or more hosts"), 0);
    unsetenv("COLL_ALGO");
}
END_TEST

/* codec names the algorithm a codec runs, never one an uncompressed all-reduce can be
 * forced to: no more a name COLL_ALGO takes than one nobody wrote. */
START_TEST(an_unknown_name_fails_init)
{
    const char *names[] = {"fastest", "codec"};
    for (int i = 0; i < 2; i++) {
        setenv("COLL_ALGO", names[i], 1);
        coll_comm *c = NULL;
        int rc = coll_init(&c, "file:///tmp/coll-algo-unknown", 0, 1, NULL);
        unsetenv("COLL_ALGO");
        ck_assert_msg(rc == COLL_EINVAL, "COLL_ALGO=%s: %d", names[i], rc);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(coll_last_error(NULL), "COLL_ALGO") &&
                          strstr(coll_last_error(NULL), names[i]),
                      "message: %s", coll_last_error(NULL));
    }
}
END_TEST

static char told[32768];

static void keep(coll_log_level level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    size_t at = strlen(told);
    snprintf(told + at, sizeof(told) - at, "%s\n", msg);
}

/* The model picks doubling for 4 KiB and the ring for 1 MiB on 4 ranks, and says so
 * once per size class. */
static int told_rank(coll_comm *c, void *arg)
{
    (void)arg;
    static float x[1 << 18], y[1 << 18];
    coll_set_log(keep, NULL, COLL_LOG_INFO);
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(coll_allreduce(c, x, y, 1024, COLL_F32, COLL_SUM), COLL_OK);
        EXPECT_RC(coll_allreduce(c, x, y, 1 << 18, COLL_F32, COLL_SUM), COLL_OK);
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    const char *small = strstr(told, "allreduce of 4096 bytes");
    const char *large = strstr(told, "allreduce of 1048576 bytes");
    FAIL_IF(!small || strncmp(strchr(small, ':') + 2, "doubling", 8) != 0,
            "4 KiB: want doubling named; log:\n%s", told);
    FAIL_IF(!large || strncmp(strchr(large, ':') + 2, "ring", 4) != 0,
            "1 MiB: want ring named; log:\n%s", told);
    FAIL_IF(strstr(small + 1, "allreduce of 4096 bytes"), "named twice; log:\n%s", told);
    return 0;
}

START_TEST(the_choice_is_named_once_per_size_class)
{
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 60};
    ck_assert_int_eq(run_ranks(&o, told_rank, NULL), 0);
}
END_TEST

/* Bruck's all-to-all: chosen for small blocks on 4 or more ranks (the direct exchange for
 * large ones), every block where it belongs, in place too, on each transport; a rank
 * that disagrees on the block count makes it COLL_EMISMATCH on every rank. */
static int bruck_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    static int32_t s[8 * 4096], r[8 * 4096];
    told[0] = 0;
    coll_set_log(keep, NULL, COLL_LOG_INFO);
    const size_t counts[] = {1, 3, 16, 4096};
    for (int k = 0; k < 4; k++) {
        size_t cnt = counts[k];
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < (size_t)n * cnt; i++)
                s[i] = (int32_t)(me * 1000000 + (int)i);
            int32_t *out = inplace ? s : r;
            EXPECT_RC(coll_alltoall(c, s, out, cnt, COLL_I32), COLL_OK);
            for (int p = 0; p < n; p++)
                for (size_t i = 0; i < cnt; i++)
                    FAIL_IF(out[(size_t)p * cnt + i] !=
                                (int32_t)(p * 1000000 + (int)((size_t)me * cnt + i)),
                            "count %zu, in place %d: block %d element %zu is %d", cnt, inplace, p,
                            i, out[(size_t)p * cnt + i]);
        }
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    const char *small = strstr(told, "alltoall of 4 bytes"),
               *large = strstr(told, "alltoall of 16384 bytes");
    FAIL_IF(!small || strncmp(strchr(small, ':') + 2, "bruck", 5) != 0,
            "4-byte blocks: want bruck named; log:\n%s", told);
    FAIL_IF(!large || strncmp(strchr(large, ':') + 2, "direct", 6) != 0,
            "16 KiB blocks: want direct named; log:\n%s", told);
    int rc = coll_alltoall(c, s, r, me == 1 ? 2 : 1, COLL_I32);
    FAIL_IF(rc != COLL_EMISMATCH && rc != COLL_EPEER, "a count mismatch: %s", coll_strerror(rc));
    FAIL_IF(rc == COLL_EPEER && !strstr(coll_last_error(c), "disagree"),
            "a count mismatch reported as something else");
    return 0;
}

START_TEST(bruck_all_to_all_for_small_blocks)
{
    static const char *const transports[] = {"shm", "tcp", "auto"};
    run_opts o = {.nranks = 4 + _i % 5,
                  .rdzv = RDZV_FILE,
                  .transport = transports[_i % 3],
                  .timeout_ms = 10000,
                  .deadline_s = 60};
    ck_assert_int_eq(run_ranks(&o, bruck_rank, NULL), 0);
}
END_TEST

/* The algorithm named for `kind` of `bytes` in the kept log, or "" */
static const char *named(const char *kind, size_t bytes)
{
    static char name[32];
    char key[64];
    snprintf(key, sizeof(key), "%s of %zu bytes", kind, bytes);
    const char *at = strstr(told, key);
    name[0] = 0;
    if (at && (at = strchr(at, ':')))
        sscanf(at + 2, "%31[a-z-]", name);
    return name;
}

/* Binomial trees: small reduce, gather, scatter and broadcast from every root, in place
 * and not, give what the root (or every rank) should have; large ones take the ring or
 * the direct exchange. Values are small integers, so every order of summing is exact. */
static int tree_case(coll_comm *c, int root, size_t cnt, int inplace, int32_t *s, int32_t *r)
{
    int n = coll_size(c), me = coll_rank(c), at_root = me == root;
    for (size_t i = 0; i < (size_t)n * cnt; i++)
        s[i] = (int32_t)(me * 1000 + (int)(i % 1000)), r[i] = -1;
    int32_t *in = inplace && at_root ? r : s;
    if (in == r)
        memcpy(r, s, cnt * sizeof(*r));
    EXPECT_RC(coll_reduce(c, in, at_root ? r : NULL, cnt, COLL_I32, COLL_SUM, root), COLL_OK);
    for (size_t i = 0; at_root && i < cnt; i++)
        FAIL_IF(r[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (int)(i % 1000)),
                "reduce root %d count %zu in place %d: [%zu] = %d", root, cnt, inplace, i, r[i]);
    in = inplace && at_root ? r + (size_t)root * cnt : s;
    if (in != s)
        memcpy(in, s, cnt * sizeof(*r));
    EXPECT_RC(coll_gather(c, in, at_root ? r : NULL, cnt, COLL_I32, root), COLL_OK);
    for (size_t i = 0; at_root && i < (size_t)n * cnt; i++)
        FAIL_IF(r[i] != (int32_t)((int)(i / cnt) * 1000 + (int)(i % cnt % 1000)),
                "gather root %d count %zu in place %d: [%zu] = %d", root, cnt, inplace, i, r[i]);
    int32_t *out = inplace && at_root ? s + (size_t)root * cnt : r;
    EXPECT_RC(coll_scatter(c, at_root ? s : NULL, out, cnt, COLL_I32, root), COLL_OK);
    for (size_t i = 0; i < cnt; i++)
        FAIL_IF(out[i] != (int32_t)(root * 1000 + (int)(((size_t)me * cnt + i) % 1000)),
                "scatter root %d count %zu in place %d: [%zu] = %d", root, cnt, inplace, i, out[i]);
    EXPECT_RC(coll_broadcast(c, s, cnt, COLL_I32, root), COLL_OK);
    for (size_t i = 0; i < cnt; i++)
        FAIL_IF(s[i] != (int32_t)(root * 1000 + (int)(i % 1000)),
                "broadcast root %d count %zu: [%zu] = %d", root, cnt, i, s[i]);
    return 0;
}

static int tree_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c);
    static int32_t s[8 * 70000], r[8 * 70000];
    told[0] = 0;
    coll_set_log(keep, NULL, COLL_LOG_INFO);
    const size_t counts[] = {0, 1, 5, 1000, 70000};
    for (int k = 0; k < 5; k++)
        for (int root = 0; root < n; root++)
            if (tree_case(c, root, counts[k], root % 2, s, r))
                return 1;
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    static const char *const kinds[] = {"reduce", "gather", "scatter", "broadcast"};
    for (int k = 0; k < 4; k++) {
        /* By the model: the chain broadcasts as fast on 2 and 3 ranks. */
        int tree = k < 3 || n >= 4;
        FAIL_IF((strcmp(named(kinds[k], 4), "binomial") == 0) != tree,
                "%s of 4 bytes on %d ranks: %s; log:\n%s", kinds[k], n, named(kinds[k], 4), told);
        FAIL_IF(!strcmp(named(kinds[k], 280000), "binomial"),
                "%s of 280000 bytes: binomial; log:\n%s", kinds[k], told);
    }
    int rc = coll_gather(c, s, r, 1, COLL_I32, coll_rank(c) == 1 ? n - 1 : 0);
    if (rc == COLL_OK)
        rc = coll_barrier(c);
    FAIL_IF(rc != COLL_EMISMATCH, "a root mismatch: %s (%s)", coll_strerror(rc),
            coll_last_error(c));
    return 0;
}

START_TEST(binomial_trees_for_small_rooted_collectives)
{
    static const char *const transports[] = {"shm", "tcp", "auto"};
    run_opts o = {.nranks = 2 + _i,
                  .rdzv = RDZV_FILE,
                  .transport = transports[_i % 3],
                  .timeout_ms = 10000,
                  .deadline_s = 90};
    ck_assert_int_eq(run_ranks(&o, tree_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("algo");
    TCase *t = tcase_create("algo");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, a_forced_algorithm_is_exact_and_moves_what_it_costs, 0, 8);
    tcase_add_loop_test(t, a_tree_in_many_segments_is_exact, 0, 4);
    tcase_add_test(t, an_algorithm_that_cannot_run_is_enotsup_with_its_reason);
    tcase_add_test(t, an_unknown_name_fails_init);
    tcase_add_test(t, the_choice_is_named_once_per_size_class);
    tcase_add_loop_test(t, bruck_all_to_all_for_small_blocks, 0, 5);
    tcase_add_loop_test(t, binomial_trees_for_small_rooted_collectives, 0, 7);
    suite_add_tcase(s, t);
    return run_suite(s);
}
