/* "In place, exactly" (API.md): all-gather and reduce-scatter accept both in-place
 * layouts (the rank's block at its own place, or at the start of the one buffer), with
 * and without a wire codec, on tcp and shm; any other overlap of what a call reads and
 * writes is COLL_EINVAL with a message on that rank, and fails that communicator. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t counts[] = { 1, 4, 1000, 70001 };
enum { NCOUNTS = sizeof(counts) / sizeof(counts[0]) };

/* Element k of rank r's block: exact in f32 and in fp16 (small integers). */
static float val(int r, size_t k)
{
    return (float)(r * 7 + (int)(k % 13));
}

/* layout 0: the block at the start (sendbuf == recvbuf); 1: at rank*count. */
static int allgather_layout(coll_comm *c, size_t count, int layout)
{
    int n = coll_size(c), me = coll_rank(c);
    float *buf = malloc((size_t)n * count * sizeof(float));
    for (size_t k = 0; k < (size_t)n * count; k++)
        buf[k] = -1.0f;
    float *mine = layout ? buf + (size_t)me * count : buf;
    for (size_t k = 0; k < count; k++)
        mine[k] = val(me, k);
    EXPECT_RC(coll_allgather(c, mine, buf, count, COLL_F32), COLL_OK);
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < count; k++)
            FAIL_IF(buf[(size_t)r * count + k] != val(r, k),
                    "allgather layout %d count %zu: block %d element %zu is %g, want %g", layout,
                    count, r, k, buf[(size_t)r * count + k], val(r, k));
    free(buf);
    return 0;
}

/* layout 0: the result lands at the start (recvbuf == sendbuf); 1: in the rank's block. */
static int reduce_scatter_layout(coll_comm *c, size_t count, int layout)
{
    int n = coll_size(c), me = coll_rank(c);
    float *buf = malloc((size_t)n * count * sizeof(float));
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < count; k++)
            buf[(size_t)r * count + k] = val(me, k) + (float)r;
    float *out = layout ? buf + (size_t)me * count : buf;
    EXPECT_RC(coll_reduce_scatter(c, buf, out, count, COLL_F32, COLL_SUM), COLL_OK);
    for (size_t k = 0; k < count; k++) {
        float want = 0;
        for (int q = 0; q < n; q++)
            want += val(q, k) + (float)me;
        FAIL_IF(out[k] != want, "reduce_scatter layout %d count %zu: element %zu is %g, want %g",
                layout, count, k, out[k], want);
    }
    free(buf);
    return 0;
}

static int layouts_rank(coll_comm *c, void *arg)
{
    coll_codec codec = *(coll_codec *)arg;
    EXPECT_RC(coll_set_codec(c, codec), COLL_OK);
    for (int i = 0; i < NCOUNTS; i++)
        for (int layout = 0; layout < 2; layout++) {
            if (allgather_layout(c, counts[i], layout) || reduce_scatter_layout(c, counts[i], layout))
                return 1;
        }
    return 0;
}

/* _i: transport (tcp, shm) x codec (none, fp16). */
START_TEST(both_in_place_layouts_give_the_right_blocks)
{
    static const char *const transports[] = { "tcp", "shm" };
    coll_codec codec = _i % 2 ? COLL_CODEC_FP16 : COLL_CODEC_NONE;
    for (int n = 1; n <= 4; n += 3) {
        run_opts o = { .nranks = n, .rdzv = RDZV_FILE, .transport = transports[_i / 2],
                       .timeout_ms = 10000, .deadline_s = 60 };
        int failed = run_ranks(&o, layouts_rank, &codec);
        ck_assert_msg(failed == 0, "%d of %d ranks failed (%s, codec %d)", failed, n,
                      transports[_i / 2], (int)codec);
    }
}
END_TEST

/* Overlap k: all-gather's block one element past its place, reduce-scatter's result
 * one element into its input, all-reduce's two elements. */
static int overlap(coll_comm *s, int k, void *arg)
{
    enum { K = 8 };
    float *buf = arg;
    int me = coll_rank(s);
    switch (k) {
    case 0: return coll_allgather(s, buf + me * K + 1, buf, K, COLL_F32);
    case 1: return coll_reduce_scatter(s, buf, buf + 1, K, COLL_F32, COLL_SUM);
    default: return coll_allreduce(s, buf, buf + 2, K, COLL_F32, COLL_SUM);
    }
}

/* Each on a split of its own (the refusal fails the communicator it was passed to); the
 * sentence names the overlap, and the parent stays good. */
static int overlap_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c);
    float buf[4 * 8 * 2] = { 0 };
    for (int k = 0; k < 3; k++)
        if (einval_on_split(c, overlap, k, buf, "overlap"))
            return 1;
    float v = 1, sum = 0;
    EXPECT_RC(coll_allreduce(c, &v, &sum, 1, COLL_F32, COLL_SUM), COLL_OK);
    FAIL_IF(sum != (float)n, "sum %g after the refused calls, want %d", sum, n);
    return 0;
}

START_TEST(any_other_overlap_is_einval_and_fails_that_comm)
{
    run_opts o = { .nranks = 4, .rdzv = RDZV_FILE, .timeout_ms = 5000, .deadline_s = 30 };
    ck_assert_int_eq(run_ranks(&o, overlap_rank, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("inplace");
    TCase *t = tcase_create("inplace");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, both_in_place_layouts_give_the_right_blocks, 0, 4);
    tcase_add_test(t, any_other_overlap_is_einval_and_fails_that_comm);
    suite_add_tcase(s, t);
    return run_suite(s);
}
