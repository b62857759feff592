/* The collective matrix through the public API: every dtype x op (the bitwise ops on the
 * integer dtypes), counts 0, 1, 7, n-1, n, n+1 and a large odd count, in place and out
 * of place, for all-reduce, reduce-scatter, all-gather and broadcast, and the rest of the
 * set (matrix_set.c), on 1..8 real processes over tcp, plus the same matrix on the loop
 * transport with ranks as threads, on shm (processes and threads) and on ibverbs over
 * fake verbs (threads). Results are compared with an exact reference, and all-reduce
 * results must be bit-identical on every rank. */
#include "coll/matrix_set.h"
#include "common/harness.h"
#include "perf/verify.h"

#include "common/suite.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t esz[] = { 4, 8, 2, 2, 1, 1, 4, 8 };
enum { NOPS = COLL_BXOR + 1 }; /* every op; the bitwise ones on the integer dtypes only */

typedef struct {
    int ndtypes; /* test the first ndtypes dtypes (all: 8) */
    int large;   /* the large odd count */
} matrix_arg;

static int allreduce_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, coll_op op,
                          int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    cl_fill(inplace ? r : s, count, dt, op, me, 0);
    int rc = coll_allreduce(c, inplace ? r : s, r, count, dt, op);
    FAIL_IF(rc != COLL_OK, "allreduce: %s", coll_strerror(rc));
    size_t w = cl_check_reduce(r, count, dt, op, n, 0);
    FAIL_IF(w, "allreduce count %zu dtype %d op %d inplace %d: %zu wrong", count, dt, op, inplace, w);
    FAIL_IF(!identical_everywhere(c, r, count * esz[dt]), "allreduce results differ across ranks");
    return 0;
}

static int reduce_scatter_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt,
                               coll_op op, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    char *in = inplace ? r : s;
    cl_fill(in, count * (size_t)n, dt, op, me, 0);
    int rc = coll_reduce_scatter(c, in, r, count, dt, op);
    FAIL_IF(rc != COLL_OK, "reduce_scatter: %s", coll_strerror(rc));
    size_t w = cl_check_reduce(r, count, dt, op, n, (size_t)me * count);
    FAIL_IF(w, "reduce_scatter count %zu dtype %d op %d inplace %d: %zu wrong", count, dt, op,
            inplace, w);
    return 0;
}

static int allgather_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    char *own = r + (size_t)me * count * esz[dt];
    memset(r, 0xee, count * (size_t)n * esz[dt]);
    cl_fill(inplace ? own : s, count, dt, COLL_SUM, me, 0);
    int rc = coll_allgather(c, inplace ? own : s, r, count, dt);
    FAIL_IF(rc != COLL_OK, "allgather: %s", coll_strerror(rc));
    size_t w = cl_check_gather(r, count, dt, COLL_SUM, n);
    FAIL_IF(w, "allgather count %zu dtype %d inplace %d: %zu wrong", count, dt, inplace, w);
    return 0;
}

static int broadcast_case(coll_comm *c, char *r, size_t count, coll_dtype dt, int root)
{
    memset(r, 0xee, count * esz[dt]);
    if (coll_rank(c) == root)
        cl_fill(r, count, dt, COLL_SUM, 0, 0);
    int rc = coll_broadcast(c, r, count, dt, root);
    FAIL_IF(rc != COLL_OK, "broadcast: %s", coll_strerror(rc));
    size_t w = cl_check_gather(r, count, dt, COLL_SUM, 1);
    FAIL_IF(w, "broadcast count %zu dtype %d root %d: %zu wrong", count, dt, root, w);
    return 0;
}

static int matrix_rank(coll_comm *c, void *p)
{
    const matrix_arg *a = p;
    int n = coll_size(c);
    size_t counts[] = { 0, 1, 7, (size_t)(n > 1 ? n - 1 : 2), (size_t)n, (size_t)n + 1,
                        (size_t)a->large };
    size_t cap = ((size_t)a->large + 8) * (size_t)n * 8 * 9 + 64;
    char *s = malloc(cap), *r = malloc(cap);
    int fails = 0;
    for (int d = 0; d < a->ndtypes && !fails; d++)
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]) && !fails; k++) {
            for (int op = 0; op < NOPS && !fails; op++)
                for (int ip = 0; ip < 2 && !fails && cl_op_fits((coll_dtype)d, (coll_op)op); ip++)
                    fails = allreduce_case(c, s, r, counts[k], (coll_dtype)d, (coll_op)op, ip) ||
                            reduce_scatter_case(c, s, r, counts[k], (coll_dtype)d, (coll_op)op, ip);
            for (int ip = 0; ip < 2 && !fails; ip++)
                fails = allgather_case(c, s, r, counts[k], (coll_dtype)d, ip);
            if (!fails)
                fails = broadcast_case(c, r, counts[k], (coll_dtype)d, (int)(k % (size_t)n));
            if (!fails)
                fails = set_cases(c, s, r, counts[k], (coll_dtype)d, NOPS);
        }
    free(s);
    free(r);
    return fails;
}

static void run_matrix(int n, rdzv_kind rdzv, const char *transport, int ndtypes)
{
    matrix_arg a = { ndtypes, 100003 };
    run_opts o = { .nranks = n, .rdzv = rdzv, .transport = transport, .deadline_s = 280 };
    int failed = run_ranks(&o, matrix_rank, &a);
    ck_assert_msg(failed == 0, "%d of %d ranks failed the matrix", failed, n);
}

START_TEST(matrix_tcp_ranks)
{
    static const int sizes[] = { 1, 2, 3, 4, 5, 8 };
    run_matrix(sizes[_i], RDZV_FILE, "tcp", 8);
}
END_TEST

START_TEST(matrix_tcp_rendezvous_tcp_url)
{
    run_matrix(3, RDZV_TCP, "tcp", 2);
}
END_TEST

START_TEST(matrix_tcp_rendezvous_env_url)
{
    run_matrix(3, RDZV_ENV, "tcp", 2);
}
END_TEST

/* Shared memory: processes, and ranks as threads of one process. */
START_TEST(matrix_shm_ranks)
{
    static const int sizes[] = { 2, 4 };
    run_matrix(sizes[_i], RDZV_FILE, "shm", 8);
}
END_TEST

START_TEST(matrix_shm_threads)
{
    run_matrix(3, RDZV_MEM, "shm", 2);
}
END_TEST

START_TEST(matrix_loop_threads)
{
    static const int sizes[] = { 1, 2, 3, 4, 7 };
    run_matrix(sizes[_i], RDZV_MEM, "loop", 8);
}
END_TEST

/* RDMA through the in-process fake verbs: ranks as threads of one process. */
START_TEST(matrix_ibverbs_fake_threads)
{
    static const int sizes[] = { 2, 3, 4 };
    run_matrix(sizes[_i], RDZV_MEM, "ibverbs-fake", _i == 0 ? 8 : 2);
}
END_TEST

/* MATRIX_TRANSPORT=name: only the matrix on 2 and 4 processes over that transport (the
 * real-verbs run in tests/rdma uses it for ibverbs). */
static void small_segments(int rank, void *arg)
{
    (void)rank, (void)arg;
    setenv("COLL_SEGMENT_BYTES", "4096", 1);
}

/* Segments far smaller than the blocks: a block of the direct exchange or a chunk of the
 * ring travels in many units, reductions go segment by segment, and an in-place
 * all-to-all swaps its blocks pair by pair, window by window (odd and even ranks). */
START_TEST(matrix_small_segments)
{
    static const int ranks[] = { 3, 5, 4 };
    matrix_arg a = { 2, 100003 };
    run_opts o = { .nranks = ranks[_i], .rdzv = RDZV_FILE, .transport = _i == 1 ? "shm" : "tcp",
                   .deadline_s = 280, .setup = small_segments };
    int failed = run_ranks(&o, matrix_rank, &a);
    ck_assert_msg(failed == 0, "%d of %d ranks failed the matrix", failed, o.nranks);
}
END_TEST

START_TEST(matrix_named_transport)
{
    run_matrix(_i == 0 ? 2 : 4, RDZV_FILE, getenv("MATRIX_TRANSPORT"), _i == 0 ? 8 : 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("collective matrix");
    TCase *t = tcase_create("matrix");
    tcase_set_timeout(t, 300);
    if (getenv("MATRIX_TRANSPORT")) {
        tcase_add_loop_test(t, matrix_named_transport, 0, 2);
        suite_add_tcase(s, t);
        return run_suite(s);
    }
    tcase_add_loop_test(t, matrix_tcp_ranks, 0, 6);
    tcase_add_loop_test(t, matrix_small_segments, 0, 3);
    tcase_add_test(t, matrix_tcp_rendezvous_tcp_url);
    tcase_add_test(t, matrix_tcp_rendezvous_env_url);
    tcase_add_loop_test(t, matrix_loop_threads, 0, 5);
    tcase_add_loop_test(t, matrix_shm_ranks, 0, 2);
    tcase_add_test(t, matrix_shm_threads);
#ifdef CL_HAVE_IBVERBS
    tcase_add_loop_test(t, matrix_ibverbs_fake_threads, 0, 3);
#endif
    suite_add_tcase(s, t);
    return run_suite(s);
}
