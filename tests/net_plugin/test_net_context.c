/* A plugin's context is the process's (transports/plugin/shared.c): every communicator
 * that runs the plugin, auto's included, shares one, started by the first and ended by
 * the last; a failed init is tried again by the next communicator; under auto a plugin
 * left out says its reasons at info, under COLL_TRANSPORT=<it> as errors; a forked child
 * starts its own context. The example
 * plugin says each init and finalize at info ("example: init 1, 1 open"), which the
 * ranks read from the log. NET_DIR is the folder of the example's builds. */
#include "collective.h"

#include "common/harness.h"
#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXAMPLE NET_DIR "/libcollective-net-example.so"

/* The log of this process, one "LEVEL message" line each; errors and warnings also go
 * to stderr, for a failure's reader. */
static char said[1 << 16];
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_line(coll_log_level level, const char *msg, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&said_mu);
    size_t at = strlen(said);
    snprintf(said + at, sizeof(said) - at, "%d %s\n", (int)level, msg);
    pthread_mutex_unlock(&said_mu);
    if (level <= COLL_LOG_WARN)
        fprintf(stderr, "%s\n", msg);
}

static void keep_log(void)
{
    said[0] = 0;
    coll_set_log(keep_line, NULL, COLL_LOG_INFO);
}

/* The last "example: WHAT N, M open" line's N and M: 1, or 0 when there is none. */
static int last_count(const char *what, int *n, int *open)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "example: %s ", what);
    int found = 0;
    pthread_mutex_lock(&said_mu);
    for (const char *p = said; (p = strstr(p, pat)); p += strlen(pat))
        found |= sscanf(p + strlen(pat), "%d, %d open", n, open) == 2;
    pthread_mutex_unlock(&said_mu);
    return found;
}

/* 1 when a line holding part was said at level. */
static int said_at(coll_log_level level, const char *part)
{
    char head[8];
    snprintf(head, sizeof(head), "%d ", (int)level);
    int found = 0;
    pthread_mutex_lock(&said_mu);
    for (const char *line = said; *line && !found;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char one[1024];
        snprintf(one, sizeof(one), "%.*s", (int)len, line);
        found = strncmp(one, head, strlen(head)) == 0 && strstr(one, part);
        line += len + (end != NULL);
    }
    pthread_mutex_unlock(&said_mu);
    return found;
}

/* ---- several communicators of a process on real ranks ------------------------------ */

static const char *host_b; /* COLL_HOST of rank 1, NULL: both on one host */

static void setup(int rank, void *arg)
{
    (void)arg;
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    setenv("COLL_HOST", rank == 1 && host_b ? host_b : "a", 1);
    keep_log();
}

/* The world and two splits of it, used interleaved; the first split destroyed while
 * the others go on: one init in each process, and its context still serves. */
static int three_communicators(coll_comm *c, void *arg)
{
    (void)arg;
    int n = coll_size(c), inits = 0, open = 0;
    coll_comm *s1 = NULL, *s2 = NULL;
    EXPECT_RC(coll_split(c, 0, coll_rank(c), &s1), COLL_OK);
    EXPECT_RC(coll_split(c, 0, coll_rank(c), &s2), COLL_OK);
    for (int i = 0; i < 20; i++)
        if (sum_is(c, 1, n) || sum_is(s1, 2, 2 * n) || sum_is(s2, 3, 3 * n))
            return 1;
    coll_destroy(s1);
    for (int i = 0; i < 20; i++)
        if (sum_is(s2, 4, 4 * n) || sum_is(c, 5, 5 * n))
            return 1;
    coll_destroy(s2);
    FAIL_IF(!last_count("init", &inits, &open), "no 'example: init' line in the log");
    FAIL_IF(inits != 1 || open != 1, "three communicators: %d inits, %d open; want 1 and 1", inits,
            open);
    FAIL_IF(last_count("finalize", &inits, &open), "finalized with a communicator left");
    return sum_is(c, 6, 6 * n);
}

static void run_three(const char *transport, const char *b)
{
    host_b = b;
    run_opts o = {.nranks = 2,
                  .rdzv = RDZV_FILE,
                  .transport = transport,
                  .timeout_ms = 20000,
                  .deadline_s = 60,
                  .setup = setup};
    ck_assert_int_eq(run_ranks(&o, three_communicators, NULL), 0);
}

START_TEST(communicators_of_a_process_share_one_plugin_context)
{
    run_three("example", NULL);
}
END_TEST

/* Under auto, with the ranks on two hosts, the plugin carries the pair's traffic. */
START_TEST(auto_s_communicators_share_one_plugin_context)
{
    run_three("auto", "b");
}
END_TEST

/* ---- in one process (Check forks each test) ---------------------------------------- */

static int init_one(coll_comm **c, const char *url, const char *transport)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = transport;
    return coll_init(c, url, 0, 1, &cfg);
}

typedef struct maker {
    pthread_barrier_t *go;
    char url[64];
    coll_comm *c;
    int rc;
} maker;

static void *make(void *arg)
{
    maker *m = arg;
    pthread_barrier_wait(m->go);
    m->rc = init_one(&m->c, m->url, "example");
    return NULL;
}

/* Two threads make a communicator each at once: one context; both destroyed, it ends;
 * the next communicator starts a new one. */
START_TEST(communicators_made_at_once_on_two_threads_share_one_context)
{
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    keep_log();
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    maker m[2] = {{&go, "mem://net-context-0", NULL, 0}, {&go, "mem://net-context-1", NULL, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, make, &m[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    int inits = 0, open = 0;
    for (int i = 0; i < 2; i++)
        ck_assert_msg(m[i].rc == COLL_OK, "thread %d: %s (%s)", i, coll_strerror(m[i].rc),
                      coll_last_error(NULL));
    ck_assert_msg(last_count("init", &inits, &open) && inits == 1 && open == 1,
                  "two communicators at once: %d inits, %d open; want 1 and 1", inits, open);
    coll_destroy(m[0].c);
    ck_assert_msg(!last_count("finalize", &inits, &open), "finalized with one left");
    coll_destroy(m[1].c);
    ck_assert_msg(last_count("finalize", &inits, &open) && open == 0,
                  "the last communicator gone: %d open, want 0", open);
    coll_comm *c = NULL;
    ck_assert_int_eq(init_one(&c, "mem://net-context-2", "example"), COLL_OK);
    ck_assert_msg(last_count("init", &inits, &open) && inits == 2 && open == 1,
                  "a communicator after the last: %d inits, %d open; want 2 and 1", inits, open);
    coll_destroy(c);
    pthread_barrier_destroy(&go);
}
END_TEST

/* The example's init fails on an address that is none (an error it logs itself). Over
 * COLL_TRANSPORT=example that is the user's error and fails coll_init; the next
 * coll_init, the address mended, inits again and works: the failure was not kept. */
START_TEST(a_failed_init_is_an_error_and_tried_again_by_the_next_communicator)
{
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    setenv("COLL_NET_EXAMPLE_ADDR", "nowhere", 1);
    keep_log();
    coll_comm *c = NULL;
    int rc = init_one(&c, "mem://net-context-bad", "example");
    ck_assert_msg(rc == COLL_EINVAL, "coll_init: %s, want %s", coll_strerror(rc),
                  coll_strerror(COLL_EINVAL));
    ck_assert_msg(strstr(coll_last_error(NULL), "init failed"), "%s", coll_last_error(NULL));
    ck_assert_msg(said_at(COLL_LOG_ERROR, "ADDR is no IPv4 address"),
                  "the plugin's error is not an error:\n%s", said);
    unsetenv("COLL_NET_EXAMPLE_ADDR");
    ck_assert_int_eq(init_one(&c, "mem://net-context-good", "example"), COLL_OK);
    int inits = 0, open = 0;
    ck_assert_msg(last_count("init", &inits, &open) && inits == 1 && open == 1,
                  "after a failed init: %d inits, %d open; want 1 and 1", inits, open);
    ck_assert_int_eq(sum_is(c, 7, 7), 0);
    coll_destroy(c);
}
END_TEST

/* The same failure under auto: the plugin is left out, auto says so at info, and so is
 * the plugin's own error; nothing about it at warning or error. */
START_TEST(a_plugin_auto_leaves_out_says_its_errors_at_info)
{
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    setenv("COLL_NET_EXAMPLE_ADDR", "nowhere", 1);
    keep_log();
    coll_comm *c = NULL;
    ck_assert_int_eq(init_one(&c, "mem://net-context-auto", "auto"), COLL_OK);
    ck_assert_msg(said_at(COLL_LOG_INFO, "ADDR is no IPv4 address") &&
                      said_at(COLL_LOG_INFO, "auto: example is not used"),
                  "the plugin's error and auto's verdict are not both at info:\n%s", said);
    ck_assert_msg(!said_at(COLL_LOG_ERROR, "example") && !said_at(COLL_LOG_WARN, "example"),
                  "said as an error or a warning:\n%s", said);
    ck_assert_int_eq(sum_is(c, 8, 8), 0);
    coll_destroy(c);
}
END_TEST

/* A warning from an init that succeeds under auto is said as a warning: the plugin is
 * used, and every communicator after shares the context it warned of. */
START_TEST(a_plugin_auto_starts_says_its_warnings_as_warnings)
{
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    setenv("COLL_NET_EXAMPLE_WARN", "example: a warning at init", 1);
    keep_log();
    coll_comm *c = NULL;
    ck_assert_int_eq(init_one(&c, "mem://net-context-warn", "auto"), COLL_OK);
    ck_assert_msg(said_at(COLL_LOG_WARN, "example: a warning at init"),
                  "the started plugin's warning is not a warning:\n%s", said);
    ck_assert_int_eq(sum_is(c, 11, 11), 0);
    coll_destroy(c);
    unsetenv("COLL_NET_EXAMPLE_WARN");
}
END_TEST

#if !defined(__SANITIZE_ADDRESS__)
/* Not under ASan: its allocator (GCC 12's) is not fork-safe. A child forked while a
 * parent thread holds the allocator's lock waits on it for good in its first malloc
 * (every thread of the child in SizeClassAllocator64::GetFromAllocator; 2 hangs in 6
 * runs of the ASan pass here). The first pass runs this case. */
/* In a forked child: a communicator of its own over the plugin, in a context of its own
 * (the parent's holds the parent's sockets, and its lock may have been held by a parent
 * thread at the fork). 0, or what went wrong; SIGALRM kills a child that hangs. */
static int child_own_context(int k)
{
    alarm(30);
    keep_log();
    char url[64];
    snprintf(url, sizeof(url), "mem://net-context-child-%d", k);
    coll_comm *c = NULL;
    if (init_one(&c, url, "example") != COLL_OK)
        return 2;
    int bad = sum_is(c, 9, 9) ? 3 : !said_at(COLL_LOG_INFO, "context started") ? 4 : 0;
    coll_destroy(c);
    return bad;
}

/* Children forked while the parent holds a communicator over the plugin: each child
 * inits a context of its own and the parent's communicator serves on. Before, a child
 * took the parent's context (and, with parent threads busy in it, hung in about half
 * the forks on its lock). */
START_TEST(a_forked_child_starts_a_context_of_its_own)
{
    setenv("COLL_NET_PLUGIN", EXAMPLE, 1);
    keep_log();
    coll_comm *c = NULL;
    ck_assert_int_eq(init_one(&c, "mem://net-context-parent", "example"), COLL_OK);
    for (int k = 0; k < 10; k++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(child_own_context(k));
        int st = 0;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "child %d: %s %d (2: init failed, 3: wrong sum, 4: no context of its "
                      "own; SIGALRM: it hung)",
                      k, WIFEXITED(st) ? "exit" : "signal",
                      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        ck_assert_int_eq(sum_is(c, 10, 10), 0);
    }
    coll_destroy(c);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("net-plugin-context");
    TCase *t = tcase_create("net-plugin-context");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, communicators_of_a_process_share_one_plugin_context);
    tcase_add_test(t, auto_s_communicators_share_one_plugin_context);
    tcase_add_test(t, communicators_made_at_once_on_two_threads_share_one_context);
    tcase_add_test(t, a_failed_init_is_an_error_and_tried_again_by_the_next_communicator);
    tcase_add_test(t, a_plugin_auto_leaves_out_says_its_errors_at_info);
    tcase_add_test(t, a_plugin_auto_starts_says_its_warnings_as_warnings);
#if !defined(__SANITIZE_ADDRESS__)
    tcase_add_test(t, a_forked_child_starts_a_context_of_its_own);
#endif
    suite_add_tcase(s, t);
    return run_suite(s);
}
