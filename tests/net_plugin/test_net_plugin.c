/* Transport plugins (include/collective_net.h, issue 52): collectives over the example
 * plugin (examples/net_plugin/) on real processes, and the plugins init refuses, each
 * with its sentence. NET_DIR is the folder of the example's builds. */
#include "collective.h"

#include "common/harness.h"
#include "common/suite.h"

#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *plugin_env; /* COLL_NET_PLUGIN for the ranks */
static const char *delay_env;  /* COLL_NET_EXAMPLE_DELAY_US, or NULL */

static void setup(int rank, void *arg)
{
    (void)rank, (void)arg;
    setenv("COLL_NET_PLUGIN", plugin_env, 1);
    if (delay_env)
        setenv("COLL_NET_EXAMPLE_DELAY_US", delay_env, 1);
}

/* Sums of every size the adapter frames apart: a header alone, a payload inline with
 * its header, and one that follows in a message of its own (over 4064 bytes), also in
 * pieces. Then an all-to-all and a broadcast: every link, both directions. */
static int collectives(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), me = coll_rank(c);
    static const size_t counts[] = {1, 1000, 1016, 1017, 300000};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t count = counts[k];
        float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
        for (size_t i = 0; i < count; i++)
            in[i] = (float)((me + 1) * (int)(i % 97));
        EXPECT_RC(coll_allreduce(c, in, out, count, COLL_F32, COLL_SUM), COLL_OK);
        for (size_t i = 0; i < count; i++)
            FAIL_IF(out[i] != (float)(n * (n + 1) / 2 * (int)(i % 97)),
                    "count %zu: [%zu] = %g", count, i, out[i]);
        free(in), free(out);
    }
    int32_t to[64], from[64];
    for (int p = 0; p < n; p++)
        to[p] = me * 100 + p;
    EXPECT_RC(coll_alltoall(c, to, from, 1, COLL_I32), COLL_OK);
    for (int p = 0; p < n; p++)
        FAIL_IF(from[p] != p * 100 + me, "alltoall from %d: %d", p, from[p]);
    return 0;
}

static void run_over_plugin(int nranks, const char *delay)
{
    plugin_env = NET_DIR "/libcollective-net-example.so";
    delay_env = delay;
    run_opts o = {.nranks = nranks, .rdzv = RDZV_FILE, .transport = "example",
                  .timeout_ms = 20000, .deadline_s = 100, .setup = setup};
    ck_assert_int_eq(run_ranks(&o, collectives, NULL), 0);
}

START_TEST(collectives_over_the_plugin_on_2_ranks)
{
    run_over_plugin(2, NULL);
}
END_TEST

START_TEST(collectives_over_the_plugin_on_4_ranks)
{
    run_over_plugin(4, NULL);
}
END_TEST

/* A delay of 2 ms on every message: slow, still right. */
START_TEST(collectives_over_a_slow_plugin_on_3_ranks)
{
    run_over_plugin(3, "2000");
}
END_TEST

/* Two plugins of two names at once (COLL_NET_PLUGIN's list); the second carries the job.
 * Loading by NAME from the library path: net-plugin-outside. */
START_TEST(two_plugins_load_and_either_serves)
{
    plugin_env = NET_DIR "/libcollective-net-example.so," NET_DIR "/libcollective-net-example2.so";
    delay_env = NULL;
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "example2",
                  .timeout_ms = 20000, .deadline_s = 100, .setup = setup};
    ck_assert_int_eq(run_ranks(&o, collectives, NULL), 0);
}
END_TEST

/* A version-1 plugin (no progress()) still loads and serves a library of version 2. */
START_TEST(a_version_1_plugin_still_loads_and_serves)
{
    plugin_env = NET_DIR "/libcollective-net-example-v1.so";
    delay_env = NULL;
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "example",
                  .timeout_ms = 20000, .deadline_s = 100, .setup = setup};
    ck_assert_int_eq(run_ranks(&o, collectives, NULL), 0);
}
END_TEST

/* One 4 MiB message over a link of 1 MiB/s (COLL_NET_EXAMPLE_KIB_PER_S) takes about 4 s,
 * four operation timeouts: a version-2 plugin's progress() shows its bytes flowing and
 * the send and the receive end well; a version-1 plugin shows nothing until the message
 * is whole, so one of the two fails on the operation timeout, as the ABI's comment says,
 * and the other on its own timeout or on that failure, whichever comes first. */
#define SLOW_BYTES ((size_t)4 << 20)

static void slow_setup(int rank, void *arg)
{
    setup(rank, arg);
    setenv("COLL_NET_EXAMPLE_KIB_PER_S", "1024", 1);
}

static int one_slow_message(coll_comm *c, void *arg)
{
    int want = *(const int *)arg;
    unsigned char *buf = malloc(SLOW_BYTES);
    for (size_t i = 0; i < SLOW_BYTES; i++)
        buf[i] = coll_rank(c) == 0 ? (unsigned char)(i * 7) : 0;
    int rc = coll_rank(c) == 0 ? coll_send(c, buf, SLOW_BYTES, COLL_U8, 1, 5)
                               : coll_recv(c, buf, SLOW_BYTES, COLL_U8, 0, 5);
    int ok = rc == want || (want && rc == COLL_EPEER);
    FAIL_IF(!ok, "rank %d: %s, want %s (%s)", coll_rank(c), coll_strerror(rc),
            coll_strerror(want), coll_last_error(c));
    for (size_t i = 0; want == COLL_OK && i < SLOW_BYTES; i++)
        FAIL_IF(buf[i] != (unsigned char)(i * 7), "byte %zu: %u", i, buf[i]);
    free(buf);
    return 0;
}

static void slow_message(const char *plugin, int want)
{
    plugin_env = plugin;
    delay_env = NULL;
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = "example", .timeout_ms = 20000,
                  .op_timeout_ms = 1000, .deadline_s = 60, .setup = slow_setup};
    ck_assert_int_eq(run_ranks(&o, one_slow_message, &want), 0);
}

START_TEST(a_slow_message_with_progress_outlives_the_operation_timeout)
{
    slow_message(NET_DIR "/libcollective-net-example.so", COLL_OK);
}
END_TEST

START_TEST(a_slow_message_without_progress_fails_on_the_operation_timeout)
{
    slow_message(NET_DIR "/libcollective-net-example-v1.so", COLL_ETIMEDOUT);
}
END_TEST

/* A plugin that fails, or stalls, on one rank's send connections after 40 messages
 * (init's among them): all-reduces go on until then, and afterwards every rank's
 * collective ends with a COLL_E* code within the timeout; no rank crashes or hangs (the
 * harness kills a rank still running at its deadline, which fails the test). */
static const char *fault_var;

static void fault_setup(int rank, void *arg)
{
    setup(rank, arg);
    if (rank == 1)
        setenv(fault_var, "40", 1);
}

static int until_an_error(coll_comm *c, void *arg)
{
    (void)arg;
    static float in[2048], out[2048];
    for (int i = 0; i < 2000; i++) {
        int rc = coll_allreduce(c, in, out, 2048, COLL_F32, COLL_SUM);
        if (rc != COLL_OK) {
            FAIL_IF(rc > 0 || i == 0, "all-reduce %d: %d (%s)", i, rc, coll_strerror(rc));
            return 0;
        }
    }
    FAIL_IF(1, "2000 all-reduces went through, %s=40 on rank 1", fault_var);
}

static void one_rank_faulty(const char *var)
{
    plugin_env = NET_DIR "/libcollective-net-example.so";
    delay_env = NULL;
    fault_var = var;
    run_opts o = {.nranks = 3, .rdzv = RDZV_FILE, .transport = "example", .timeout_ms = 3000,
                  .op_timeout_ms = 3000, .deadline_s = 40, .setup = fault_setup};
    ck_assert_int_eq(run_ranks(&o, until_an_error, NULL), 0);
}

START_TEST(a_plugin_failing_on_one_rank_fails_every_rank_cleanly)
{
    one_rank_faulty("COLL_NET_EXAMPLE_FAIL_AFTER");
}
END_TEST

START_TEST(a_plugin_stalling_on_one_rank_fails_every_rank_in_time)
{
    one_rank_faulty("COLL_NET_EXAMPLE_STALL_AFTER");
}
END_TEST

/* auto, the default transport, with both example plugins loaded on 4 ranks: ranks 0-1
 * on host "a" and 2-3 on host "b" (COLL_HOST), or all four on "a". Which transport
 * carries what shows by a fault: rank 1's connections of the plugin named by `faulty`
 * fail after 40 messages. Another host's peers go over the faster plugin (`faster`
 * reports 40000 Mb/s, the other 10000), this host's over shm. */
typedef struct auto_case {
    int split;          /* ranks 2-3 on another host */
    const char *faster; /* the ..._SPEED_MBPS variable set to 40000 */
    const char *faulty; /* the ..._FAIL_AFTER variable set on rank 1, or NULL */
    int bare_rank;      /* a rank that loads no plugin (its peers reach it by tcp), or -1 */
    const char *faster_b; /* host b's instead of faster, or NULL */
} auto_case;

/* For the cases of speed 0: ..._SPEED_MBPS variables set to 0 on host b, and a second
 * ..._FAIL_AFTER variable set on rank 1 (NULL: none). */
static const char *zero_b[2], *faulty2;

static void auto_setup(int rank, void *arg)
{
    const auto_case *a = arg;
    if (rank != a->bare_rank)
        setenv("COLL_NET_PLUGIN", NET_DIR "/libcollective-net-example.so," NET_DIR
                                          "/libcollective-net-example2.so", 1);
    setenv("COLL_HOST", a->split && rank >= 2 ? "b" : "a", 1);
    setenv(a->faster_b && rank >= 2 ? a->faster_b : a->faster, "40000", 1);
    for (int i = 0; i < 2 && rank >= 2; i++)
        if (zero_b[i])
            setenv(zero_b[i], "0", 1);
    if (rank == 1 && a->faulty)
        setenv(a->faulty, "40", 1);
    if (rank == 1 && faulty2)
        setenv(faulty2, "40", 1);
}

/* 300 all-reduces of 2048 floats, every one right. */
static int sums_hold(coll_comm *c, void *arg)
{
    (void)arg;
    static float in[2048], out[2048];
    int n = coll_size(c);
    for (int i = 0; i < 300; i++) {
        for (int k = 0; k < 2048; k++)
            in[k] = (float)(coll_rank(c) + k % 7);
        EXPECT_RC(coll_allreduce(c, in, out, 2048, COLL_F32, COLL_SUM), COLL_OK);
        for (int k = 0; k < 2048; k++)
            FAIL_IF(out[k] != (float)(n * (n - 1) / 2 + n * (k % 7)), "[%d] = %g", k, out[k]);
    }
    return 0;
}

static void over_auto(auto_case a, rank_fn fn)
{
    run_opts o = {.nranks = 4, .rdzv = RDZV_FILE, .transport = "auto", .timeout_ms = 3000,
                  .op_timeout_ms = 3000, .deadline_s = 60, .setup = auto_setup};
    ck_assert_int_eq(run_ranks(&o, fn, &a), 0);
}

START_TEST(auto_takes_the_faster_plugin_to_another_host)
{
    over_auto((auto_case){1, "COLL_NET_EXAMPLE2_SPEED_MBPS", "COLL_NET_EXAMPLE2_FAIL_AFTER", -1, NULL},
              until_an_error);
    over_auto((auto_case){1, "COLL_NET_EXAMPLE2_SPEED_MBPS", "COLL_NET_EXAMPLE_FAIL_AFTER", -1, NULL},
              sums_hold);
    over_auto((auto_case){1, "COLL_NET_EXAMPLE_SPEED_MBPS", "COLL_NET_EXAMPLE_FAIL_AFTER", -1, NULL},
              until_an_error);
}
END_TEST

START_TEST(auto_keeps_shm_on_one_host)
{
    over_auto((auto_case){0, "COLL_NET_EXAMPLE2_SPEED_MBPS", "COLL_NET_EXAMPLE2_FAIL_AFTER", -1, NULL},
              sums_hold);
    over_auto((auto_case){0, "COLL_NET_EXAMPLE_SPEED_MBPS", "COLL_NET_EXAMPLE_FAIL_AFTER", -1, NULL},
              sums_hold);
}
END_TEST

/* Each host's example2 is faster on host a and example on host b: a pair weighs the
 * slower end's device (10000 Mb/s both), so both directions take the first loaded,
 * example, and a fault in example2 on rank 1 stops nothing. */
START_TEST(auto_weighs_the_slower_end_of_a_pair)
{
    over_auto((auto_case){1, "COLL_NET_EXAMPLE2_SPEED_MBPS", "COLL_NET_EXAMPLE2_FAIL_AFTER", -1,
                          "COLL_NET_EXAMPLE_SPEED_MBPS"},
              sums_hold);
    over_auto((auto_case){1, "COLL_NET_EXAMPLE2_SPEED_MBPS", "COLL_NET_EXAMPLE_FAIL_AFTER", -1,
                          "COLL_NET_EXAMPLE_SPEED_MBPS"},
              until_an_error);
}
END_TEST

/* A device of speed 0 may reach its own host only (the ABI has no word for reach;
 * libfabric's shm provider reports none): auto does not take it to another host, where
 * either end says 0. Host b's example says 0 (host a's 40000): example2 carries the
 * pair, and a fault in example stops nothing. Both say 0 on host b: tcp carries it, and
 * a fault in both stops nothing. (Before, 0 counted as "not known" and the other end's
 * 40000 won: example carried, and its fault stopped the job.) */
START_TEST(auto_takes_no_plugin_of_speed_0_to_another_host)
{
    const auto_case a = {1, "COLL_NET_EXAMPLE_SPEED_MBPS", "COLL_NET_EXAMPLE_FAIL_AFTER", -1, NULL};
    zero_b[0] = "COLL_NET_EXAMPLE_SPEED_MBPS";
    over_auto(a, sums_hold);
    zero_b[1] = "COLL_NET_EXAMPLE2_SPEED_MBPS";
    faulty2 = "COLL_NET_EXAMPLE2_FAIL_AFTER";
    over_auto(a, sums_hold);
}
END_TEST

/* Rank 3 loads no plugin: its peers on host "a" reach it by tcp, the others as before. */
START_TEST(auto_reaches_a_rank_without_the_plugin_by_tcp)
{
    over_auto((auto_case){1, "COLL_NET_EXAMPLE2_SPEED_MBPS", NULL, 3, NULL}, sums_hold);
}
END_TEST

/* coll_init with COLL_NET_PLUGIN=spec (this process, forked by Check) fails with code
 * and a message holding every one of the NULL-ended parts. */
static void refused(const char *spec, int code, ...)
{
    setenv("COLL_NET_PLUGIN", spec, 1);
    coll_comm *c = NULL;
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = "tcp";
    int rc = coll_init(&c, "mem://net-plugin-refused", 0, 1, &cfg);
    const char *msg = coll_last_error(NULL);
    ck_assert_msg(rc == code, "coll_init: %s (%s), not %s", coll_strerror(rc), msg,
                  coll_strerror(code));
    va_list ap;
    va_start(ap, code);
    for (const char *part; (part = va_arg(ap, const char *));)
        ck_assert_msg(strstr(msg, part), "'%s' is not in: %s", part, msg);
    va_end(ap);
}

START_TEST(a_plugin_of_another_version_is_refused_naming_both)
{
    refused(NET_DIR "/libcollective-net-example-v99.so", COLL_ENOTSUP,
            "libcollective-net-example-v99.so", "ABI version 99", "versions 1 to 2", NULL);
}
END_TEST

/* A table smaller than version 1's was not built from collective_net.h. */
START_TEST(a_plugin_with_a_short_table_is_refused)
{
    refused(NET_DIR "/libcollective-net-example-small.so", COLL_ENOTSUP,
            "libcollective-net-example-small.so", "a table of 16 bytes, less than version 1's",
            NULL);
}
END_TEST

START_TEST(a_plugin_missing_an_operation_is_refused_naming_it)
{
    refused(NET_DIR "/libcollective-net-example-notest.so", COLL_ENOTSUP, "'example'",
            "lacks the required operation test", NULL);
}
END_TEST

START_TEST(a_path_that_does_not_load_is_refused_with_dlerror)
{
    refused("/nonexistent/libcollective-net-x.so", COLL_ENOTSUP,
            "cannot load plugin /nonexistent/libcollective-net-x.so",
            "cannot open shared object file", NULL);
}
END_TEST

/* NAME is looked for as libcollective-net-NAME.so on the library path. */
START_TEST(a_name_not_on_the_library_path_is_refused)
{
    refused("nosuch", COLL_ENOTSUP, "libcollective-net-nosuch.so",
            "cannot open shared object file", NULL);
}
END_TEST

/* Loaded once, the name is taken: the second load of a list is refused. */
START_TEST(two_plugins_of_one_name_are_refused)
{
    refused(NET_DIR "/libcollective-net-example.so," NET_DIR "/libcollective-net-example.so",
            COLL_ENOTSUP, "called 'example'", "already there", NULL);
}
END_TEST

/* COLL_TRANSPORT names a plugin's transport only once it is loaded; an unknown name
 * lists the loaded plugins among the transports. */
START_TEST(an_unknown_transport_lists_the_plugins)
{
    setenv("COLL_NET_PLUGIN", NET_DIR "/libcollective-net-example.so", 1);
    coll_comm *c = NULL;
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = "nosuch";
    ck_assert_int_eq(coll_init(&c, "mem://net-plugin-names", 0, 1, &cfg), COLL_ENOTSUP);
    ck_assert_msg(strstr(coll_last_error(NULL), "example (plugin)"), "%s",
                  coll_last_error(NULL));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net-plugin");
    TCase *t = tcase_create("net-plugin");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, collectives_over_the_plugin_on_2_ranks);
    tcase_add_test(t, collectives_over_the_plugin_on_4_ranks);
    tcase_add_test(t, collectives_over_a_slow_plugin_on_3_ranks);
    tcase_add_test(t, two_plugins_load_and_either_serves);
    tcase_add_test(t, a_version_1_plugin_still_loads_and_serves);
    tcase_add_test(t, a_slow_message_with_progress_outlives_the_operation_timeout);
    tcase_add_test(t, a_slow_message_without_progress_fails_on_the_operation_timeout);
    tcase_add_test(t, a_plugin_failing_on_one_rank_fails_every_rank_cleanly);
    tcase_add_test(t, a_plugin_stalling_on_one_rank_fails_every_rank_in_time);
    tcase_add_test(t, auto_takes_the_faster_plugin_to_another_host);
    tcase_add_test(t, auto_keeps_shm_on_one_host);
    tcase_add_test(t, auto_weighs_the_slower_end_of_a_pair);
    tcase_add_test(t, auto_reaches_a_rank_without_the_plugin_by_tcp);
    tcase_add_test(t, auto_takes_no_plugin_of_speed_0_to_another_host);
    tcase_add_test(t, a_plugin_of_another_version_is_refused_naming_both);
    tcase_add_test(t, a_plugin_with_a_short_table_is_refused);
    tcase_add_test(t, a_plugin_missing_an_operation_is_refused_naming_it);
    tcase_add_test(t, a_path_that_does_not_load_is_refused_with_dlerror);
    tcase_add_test(t, a_name_not_on_the_library_path_is_refused);
    tcase_add_test(t, two_plugins_of_one_name_are_refused);
    tcase_add_test(t, an_unknown_transport_lists_the_plugins);
    suite_add_tcase(s, t);
    return run_suite(s);
}
