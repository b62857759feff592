/* IPv6 and dual stack (issue 55), with real processes on this machine's loopback: jobs
 * that meet at tcp://[::1]:port or MASTER_ADDR=::1 (with or without brackets) run checked
 * all-reduces over tcp, and their transport and lifeline listen on ::1; a job that meets
 * at an IPv4 address, or at a name with both families, stays on IPv4; COLL_SOCKET_FAMILY
 * forces the family where the rendezvous names no host; survivors of a death shrink over
 * IPv6 lifelines; a link-local rendezvous address with its scope. Bad input fails at once
 * naming what was tried: a host that does not resolve, a family it lacks, a filter that
 * matches no interface, a family name that is none, an IPv6 URL without brackets.
 * Skips (77) where ::1 cannot be bound. */
#include "common/harness.h"

#include "common/ipv6.h"
#include "common/suite.h"
#include "fault/survivors.h"

#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { TIMEOUT_MS = 10000, QUICK_MS = 3000 };

/* ---- what a rank's library says about its addresses ----------------------------------- */

static char said[16384];
static size_t said_len;
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_addresses(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    if (!strstr(msg, "address") && !strstr(msg, "lifeline listens") &&
        !strstr(msg, "rendezvous at"))
        return;
    pthread_mutex_lock(&said_mu);
    int n = snprintf(said + said_len, sizeof(said) - said_len, "%s\n", msg);
    said_len += n > 0 && (size_t)n < sizeof(said) - said_len ? (size_t)n : 0;
    pthread_mutex_unlock(&said_mu);
}

/* A rank's environment: NULL-ended name, value pairs. */
typedef struct {
    const char *env[6];
    const char *want[3]; /* what the rank's log must say of its addresses */
} job;

static void setup(int rank, void *arg)
{
    (void)rank;
    const job *j = arg;
    for (int i = 0; j->env[i]; i += 2)
        setenv(j->env[i], j->env[i + 1], 1);
    coll_set_log(keep_addresses, NULL, COLL_LOG_DEBUG);
}

/* An all-reduce of several segments, checked, then the log's addresses. */
static int allreduce_and_addresses(coll_comm *c, void *arg)
{
    const job *j = arg;
    int n = coll_size(c), me = coll_rank(c);
    size_t count = 1u << 19;
    float *b = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        b[i] = (float)(me + (int)(i % 7));
    EXPECT_RC(coll_allreduce(c, b, b, count, COLL_F32, COLL_SUM), COLL_OK);
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += b[i] != (float)(n * (n - 1) / 2 + n * (int)(i % 7));
    free(b);
    FAIL_IF(wrong, "%zu of %zu sums wrong", wrong, count);
    for (int i = 0; i < 3 && j->want[i]; i++)
        FAIL_IF(!strstr(said, j->want[i]), "the log does not say '%s'; it says:\n%s", j->want[i],
                said);
    return 0;
}

static void run_job(int n, rdzv_kind rdzv, const char *host, const job *j)
{
    run_opts o = {.nranks = n,
                  .rdzv = rdzv,
                  .host = host,
                  .transport = "tcp",
                  .timeout_ms = TIMEOUT_MS,
                  .deadline_s = 40,
                  .setup = setup};
    ck_assert_int_eq(run_ranks(&o, allreduce_and_addresses, (void *)j), 0);
}

static const job on_v6 = {
    .want = {"using interface lo address [::1]:0", "lifeline listens at [::1]:"}};
static const job on_v4 = {
    .want = {"using interface lo address 127.0.0.1:0", "lifeline listens at 127.0.0.1:"}};

START_TEST(a_job_meets_at_a_bracketed_ipv6_url_and_runs_on_ipv6)
{
    run_job(3, RDZV_TCP, "::1", &on_v6);
}
END_TEST

/* MASTER_ADDR as torchrun users write it: bare, or in brackets. */
START_TEST(a_job_meets_at_an_ipv6_master_addr_and_runs_on_ipv6)
{
    run_job(2, RDZV_ENV, _i ? "[::1]" : "::1", &on_v6);
}
END_TEST

/* Dual stack: an IPv4 rendezvous keeps every socket on IPv4; so does a name with both
 * families (localhost), so that every rank, whatever its resolver's order, agrees. */
START_TEST(a_job_at_an_ipv4_or_dual_stack_host_stays_on_ipv4)
{
    run_job(2, RDZV_ENV, _i ? "localhost" : "127.0.0.1", &on_v4);
}
END_TEST

START_TEST(coll_socket_family_forces_ipv6_where_the_rendezvous_names_no_host)
{
    job j = on_v6;
    j.env[0] = "COLL_SOCKET_FAMILY";
    j.env[1] = "AF_INET6";
    j.env[2] = "COLL_SOCKET_IFNAME";
    j.env[3] = "lo";
    run_job(2, RDZV_FILE, NULL, &j);
}
END_TEST

/* A link-local address with its scope, as MASTER_ADDR: the rendezvous finds the
 * interface by it (the first link-local address of an interface that is up). */
static int link_local(char *text, size_t len)
{
    struct ifaddrs *all;
    int found = 0;
    if (getifaddrs(&all) != 0)
        return 0;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)i->ifa_addr;
        if (!a || a->sin6_family != AF_INET6 || !IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) ||
            !(i->ifa_flags & IFF_UP))
            continue;
        char ip[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        snprintf(text, len, "%s%%%s", ip, i->ifa_name);
        found = 1;
    }
    freeifaddrs(all);
    return found;
}

START_TEST(a_job_meets_at_a_link_local_address_with_its_scope)
{
    char host[96];
    ck_assert(link_local(host, sizeof(host)));
    job j = {.want = {"rendezvous at [fe80:"}};
    run_opts o = {.nranks = 2,
                  .rdzv = RDZV_ENV,
                  .host = host,
                  .transport = "tcp",
                  .timeout_ms = TIMEOUT_MS,
                  .deadline_s = 40,
                  .setup = setup};
    ck_assert_int_eq(run_ranks(&o, allreduce_and_addresses, &j), 0);
}
END_TEST

/* ---- survivors over IPv6 lifelines ----------------------------------------------------- */

static int die_or_shrink(coll_comm *c, void *arg)
{
    (void)arg;
    float x[1024] = {0};
    int rc = COLL_OK;
    for (int it = 0; it < 100 && rc == COLL_OK; it++) {
        if (coll_rank(c) == 2 && it == 5)
            raise(SIGKILL);
        rc = coll_allreduce(c, x, x, 1024, COLL_F32, COLL_SUM);
    }
    FAIL_IF(rc == COLL_OK, "nobody noticed rank 2's death");
    coll_comm *s = NULL;
    EXPECT_RC(coll_shrink(c, &s), COLL_OK);
    int r = survivors_check(s, coll_rank(c), 0xb); /* ranks 0, 1 and 3 */
    coll_destroy(s);
    FAIL_IF(!strstr(said, "lifeline listens at [::1]:"), "no IPv6 lifeline:\n%s", said);
    return r != COLL_OK;
}

START_TEST(survivors_shrink_over_ipv6_lifelines)
{
    job j = {.env = {NULL}};
    run_opts o = {.nranks = 4,
                  .rdzv = RDZV_TCP,
                  .host = "::1",
                  .transport = "tcp",
                  .timeout_ms = 2000,
                  .deadline_s = 40,
                  .setup = setup};
    run_ranks(&o, die_or_shrink, &j);
    ck_assert_msg(last_exit[2] == -1, "rank 2 was not killed: %d", last_exit[2]);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(r == 2 || last_exit[r] == 0, "survivor %d exit %d", r, last_exit[r]);
}
END_TEST

/* ---- bad input: an error at once, naming what was tried ------------------------------- */

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* coll_init as rank 0 of 2 with these variables: its error, within QUICK_MS of a 30 s
 * timeout, contains `want`. */
static void refused_at_once(const char *url, const char *const *env, const char *want)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", free_port());
    setenv("MASTER_PORT", port, 1);
    for (int i = 0; env[i]; i += 2)
        setenv(env[i], env[i + 1], 1);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = 30000;
    cfg.transport = "tcp";
    coll_comm *c = NULL;
    int64_t t0 = now_ms();
    int rc = coll_init(&c, url, 0, 2, &cfg);
    int64_t took = now_ms() - t0;
    ck_assert_int_ne(rc, COLL_OK);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(coll_last_error(NULL), want), "want '%s' in: %s", want,
                  coll_last_error(NULL));
    ck_assert_msg(took < QUICK_MS, "took %lld ms", (long long)took);
}

START_TEST(a_master_addr_that_does_not_resolve_is_named_at_once)
{
    const char *env[] = {"MASTER_ADDR", "no-such-host.invalid", NULL};
    refused_at_once("env://", env,
                    "the rendezvous host (MASTER_ADDR) 'no-such-host.invalid' does not resolve: ");
}
END_TEST

START_TEST(a_family_the_rendezvous_host_lacks_is_named_at_once)
{
    const char *env[] = {"MASTER_ADDR", "127.0.0.1", "COLL_SOCKET_FAMILY", "AF_INET6", NULL};
    refused_at_once("env://", env, "'127.0.0.1' does not resolve to an IPv6 address: ");
    ck_assert_msg(strstr(coll_last_error(NULL), "(COLL_SOCKET_FAMILY)"), "%s",
                  coll_last_error(NULL));
}
END_TEST

START_TEST(an_interface_filter_that_matches_nothing_lists_the_interfaces)
{
    const char *env[] = {"MASTER_ADDR", "::1", "COLL_SOCKET_IFNAME", "=nosuch0", NULL};
    refused_at_once("env://", env, "no network interface matches '=nosuch0' (interfaces here: ");
    ck_assert_msg(strstr(coll_last_error(NULL), "lo: IPv4 and IPv6") ||
                      strstr(coll_last_error(NULL), "lo: IPv6 only"),
                  "%s", coll_last_error(NULL));
}
END_TEST

START_TEST(a_family_that_is_none_is_refused)
{
    const char *env[] = {"MASTER_ADDR", "::1", "COLL_SOCKET_FAMILY", "AF_INET5", NULL};
    refused_at_once("env://", env,
                    "COLL_SOCKET_FAMILY must be AF_INET or AF_INET6, not 'AF_INET5'");
}
END_TEST

START_TEST(an_ipv6_url_without_brackets_is_refused)
{
    const char *env[] = {NULL};
    refused_at_once("tcp://::1:29500", env, "([host]:port for an IPv6 address)");
}
END_TEST


int main(void)
{
    if (!have_ipv6_loopback()) {
        printf("::1 cannot be bound (no IPv6 on loopback): skipped\n");
        return 77;
    }
    char host[96];
    Suite *s = suite_create("ipv6");
    TCase *t = tcase_create("ipv6");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_job_meets_at_a_bracketed_ipv6_url_and_runs_on_ipv6);
    tcase_add_loop_test(t, a_job_meets_at_an_ipv6_master_addr_and_runs_on_ipv6, 0, 2);
    tcase_add_loop_test(t, a_job_at_an_ipv4_or_dual_stack_host_stays_on_ipv4, 0, 2);
    tcase_add_test(t, coll_socket_family_forces_ipv6_where_the_rendezvous_names_no_host);
    if (link_local(host, sizeof(host)))
        tcase_add_test(t, a_job_meets_at_a_link_local_address_with_its_scope);
    else
        printf("no link-local IPv6 address up here: its test is left out\n");
    tcase_add_test(t, survivors_shrink_over_ipv6_lifelines);
    tcase_add_test(t, a_master_addr_that_does_not_resolve_is_named_at_once);
    tcase_add_test(t, a_family_the_rendezvous_host_lacks_is_named_at_once);
    tcase_add_test(t, an_interface_filter_that_matches_nothing_lists_the_interfaces);
    tcase_add_test(t, a_family_that_is_none_is_refused);
    tcase_add_test(t, an_ipv6_url_without_brackets_is_refused);
    suite_add_tcase(s, t);
    return run_suite(s);
}
