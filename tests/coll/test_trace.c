/* COLL_TRACE on real processes: 4 ranks, each with its clock set off by a different
 * amount (COLL_TRACE_SKEW_US, as ranks on different hosts), run all-reduces (a ring, or
 * hierarchical on two hosts named by COLL_HOST), broadcasts, sends and receives and time
 * them, and dump their flight recorders; then trace_check.py reads every rank's file
 * with python3's json and the merged one (tools/coll_trace_merge.py): the events, their
 * names and arguments, each all-reduce's passes, steps and per-peer transfers (nested in
 * it, to the algorithm's peers only, adding up to what it sends, as the recorder's bytes
 * by peer in the trace and the dump say), complete events nesting on every track, the
 * same all-reduce overlapping in time on every rank (which needs the clocks aligned),
 * and each rank's spans lying inside what it measured and covering at least half of it
 * (how close they come is printed: a measurement, not a check). Without COLL_TRACE no
 * file is written; a directory that cannot be written is a warning. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef TRACE_CHECK
#define TRACE_CHECK "tests/coll/trace_check.py"
#endif
#ifndef TRACE_MERGE
#define TRACE_MERGE "tools/coll_trace_merge.py"
#endif

enum { RANKS = 4, ROUNDS = 10, FLOATS = 1 << 18, SKEW_US = 40000 };

typedef struct {
    char dir[64];
    int traced;
    const char *trace_dir; /* COLL_TRACE when not dir */
    const char *algo;      /* COLL_ALGO: "ring", or "hier" on two hosts of two ranks */
} trace_arg;

static void trace_setup(int rank, void *arg)
{
    const trace_arg *a = arg;
    char skew[32];
    snprintf(skew, sizeof(skew), "%d", rank * SKEW_US);
    if (a->traced)
        setenv("COLL_TRACE", a->trace_dir ? a->trace_dir : a->dir, 1);
    else
        unsetenv("COLL_TRACE");
    setenv("COLL_TRACE_SKEW_US", skew, 1);
    setenv("COLL_JOB_ID", "tracetest", 1);
    setenv("COLL_ALGO", a->algo ? a->algo : "ring", 1);
    if (a->algo && !strcmp(a->algo, "hier"))
        setenv("COLL_HOST", rank < RANKS / 2 ? "trace-host-a" : "trace-host-b", 1);
    else
        unsetenv("COLL_HOST");
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* One round: an all-reduce, a broadcast from rank 1, and a send from each even rank to
 * the odd one after it; the time spent in the calls added to *spent. */
static int round_of(coll_comm *c, float *f, double *spent)
{
    int me = coll_rank(c), peer = me ^ 1;
    double t0 = now_us();
    EXPECT_RC(coll_allreduce(c, f, f, FLOATS, COLL_F32, COLL_SUM), COLL_OK);
    double t1 = now_us();
    EXPECT_RC(coll_broadcast(c, f, FLOATS / 4, COLL_F32, 1), COLL_OK);
    double t2 = now_us();
    EXPECT_RC(me % 2 == 0 ? coll_send(c, f, FLOATS / 4, COLL_F32, peer, 5)
                          : coll_recv(c, f, FLOATS / 4, COLL_F32, peer, 5),
              COLL_OK);
    *spent += (t1 - t0) + (t2 - t1) + (now_us() - t2);
    return 0;
}

/* The rounds, the flight recorder's dump, then destroy (the trace is written then) and
 * leave what was measured beside the trace for trace_check.py. */
static int trace_rank(coll_comm *c, void *arg)
{
    const trace_arg *a = arg;
    float *f = calloc(FLOATS, sizeof(float));
    double spent = 0;
    int me = coll_rank(c), bad = !f;
    for (int i = 0; i < ROUNDS && !bad; i++)
        bad = round_of(c, f, &spent);
    free(f);
    char path[128];
    snprintf(path, sizeof(path), "%s/recorder-%d.json", a->dir, me);
    if (coll_recorder_dump(c, path) != COLL_OK)
        bad = 1;
    coll_destroy(c);
    snprintf(path, sizeof(path), "%s/measured-%d.txt", a->dir, me);
    FILE *m = fopen(path, "w");
    if (!m || fprintf(m, "%.3f\n", spent) < 0 || fclose(m) != 0)
        bad = 1;
    return bad;
}

static int run(trace_arg *a)
{
    char url[128];
    if (dir_url(a->dir, "trace", url, sizeof(url)) != 0)
        return -1;
    run_opts o = {.nranks = RANKS, .rdzv = RDZV_FILE, .timeout_ms = 10000, .deadline_s = 90,
                  .setup = trace_setup, .fn_destroys = 1};
    return run_ranks(&o, trace_rank, a);
}

/* The job with all-reduces by `algo`, checked by trace_check.py. */
static void traced_job(const char *algo)
{
    trace_arg a = {.traced = 1, .algo = algo};
    ck_assert_int_eq(run(&a), 0);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "python3 %s %s %s %d %d %d %d %s", TRACE_CHECK, TRACE_MERGE, a.dir,
             RANKS, ROUNDS, SKEW_US, FLOATS, algo);
    int rc = system(cmd);
    if (rc == 0)
        remove_dir(a.dir);
    ck_assert_msg(rc == 0, "trace_check.py failed on %s (kept)", a.dir);
}

START_TEST(every_rank_writes_a_trace_that_merges_into_one_timeline)
{
    traced_job("ring");
}
END_TEST

START_TEST(a_hierarchical_allreduce_shows_its_passes_in_and_across_hosts)
{
    traced_job("hier");
}
END_TEST

START_TEST(without_coll_trace_no_file_is_written)
{
    trace_arg a = {.traced = 0};
    ck_assert_int_eq(run(&a), 0);
    char pattern[96];
    snprintf(pattern, sizeof(pattern), "%s/coll-trace-*", a.dir);
    glob_t g;
    int found = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (found)
        globfree(&g);
    remove_dir(a.dir);
    ck_assert_int_eq(found, 0);
}
END_TEST

/* The file is written when the communicator goes: one that cannot be is a warning, and
 * every rank's collectives and destroy went as they would. */
START_TEST(an_unwritable_directory_is_a_warning)
{
    trace_arg a = {.traced = 1, .trace_dir = "/proc/coll-trace"};
    ck_assert_int_eq(run(&a), 0);
    remove_dir(a.dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace");
    TCase *t = tcase_create("trace");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, every_rank_writes_a_trace_that_merges_into_one_timeline);
    tcase_add_test(t, a_hierarchical_allreduce_shows_its_passes_in_and_across_hosts);
    tcase_add_test(t, without_coll_trace_no_file_is_written);
    tcase_add_test(t, an_unwritable_directory_is_a_warning);
    suite_add_tcase(s, t);
    return run_suite(s);
}
