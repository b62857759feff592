/* A stranger at the lifeline (lib/core/life.c), the socket survivors meet on after a
 * failure. Before a rank dies, every rank's lifeline gets 3(2n + 4) connections that
 * close at once, garbage, hellos of another job, hellos that claim a live rank without
 * the job's COLL_SECRET, and connections that stay open and say nothing. The survivors
 * still agree on the one dead rank, all of them, and carry on together, with and without
 * COLL_SECRET. And a job that meets at 127.0.0.1 has its lifeline there, where the
 * transport listens, not on every interface. */
#include "common/harness.h"

#include "common/suite.h"
#include "core/comm.h"
#include "survivors.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { N = 3, TIMEOUT_MS = 2000, CLOSERS = 3 * (2 * N + 4), SILENT = 4 };

/* A lifeline hello as a stranger writes it from the layout's public description: who
 * dials whom in which agreement, and (COLL_SECRET) the proof. */
typedef struct {
    uint32_t magic, attempt;
    int32_t from, to;
    uint64_t job, id;
    uint8_t tag[32];
} life_hello;
#define LIFE_HELLO_MAGIC 0x4C494648u

typedef struct {
    int victim;
    int keyed;
} plan;

/* Lifeline refusals logged on this rank that say `why` (the log callback's arg). */
static int refusals;

static void count_refusals(coll_log_level level, const char *msg, void *why)
{
    (void)level;
    if (strstr(msg, "lifeline: refused") && strstr(msg, why))
        refusals++;
}

static int dial(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)a, sizeof(*a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void say_and_close(const struct sockaddr_in *a, const void *buf, size_t n)
{
    int fd = dial(a);
    if (fd < 0)
        return;
    (void)!send(fd, buf, n, MSG_NOSIGNAL);
    close(fd);
}

/* Everything a stranger does to the lifeline at a; the silent connections stay open in
 * silent[]. A keyed job also gets a hello that names this job, this communicator and a
 * live rank, with a tag made up: only the secret tells it from a rank's. */
static void harass(coll_comm *c, const struct sockaddr_in *a, int keyed, int *silent)
{
    for (int i = 0; i < CLOSERS; i++)
        close(dial(a));
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 131 + 7);
    say_and_close(a, junk, sizeof(junk));
    life_hello h = {LIFE_HELLO_MAGIC, 1, (c->rank + 1) % N, c->rank, c->job ^ 1, c->id, {0}};
    say_and_close(a, &h, sizeof(h)); /* another job */
    h.job = c->job;
    h.id = c->id + 1;
    say_and_close(a, &h, sizeof(h)); /* another communicator */
    if (keyed) {
        h.id = c->id;
        memset(h.tag, 0x5a, sizeof(h.tag));
        say_and_close(a, &h, sizeof(h));
        say_and_close(a, &h, sizeof(h) / 2);
    }
    for (int i = 0; i < SILENT; i++)
        silent[i] = dial(a);
}

/* Where this rank's lifeline listens; 1 (said why) unless it is on 127.0.0.1 as the
 * job's rendezvous is, and published as such. */
static int lifeline_where(coll_comm *c, struct sockaddr_in *a)
{
    socklen_t len = sizeof(*a);
    char ip[INET_ADDRSTRLEN] = "?";
    FAIL_IF(getsockname(c->life.fd, (struct sockaddr *)a, &len) != 0, "no lifeline socket");
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    FAIL_IF(a->sin_addr.s_addr != htonl(INADDR_LOOPBACK),
            "the lifeline listens on %s (published %s), want 127.0.0.1 as the transport", ip,
            c->life.addr);
    FAIL_IF(strncmp(c->life.addr, "127.0.0.1:", 10) != 0, "lifeline published as %s", c->life.addr);
    return 0;
}

static int hostile_rank(coll_comm *c, void *arg)
{
    const plan *k = arg;
    int me = coll_rank(c), silent[SILENT];
    struct sockaddr_in a;
    if (lifeline_where(c, &a) != 0)
        return 1;
    coll_set_log(count_refusals, k->keyed ? "failed authentication" : "another job", COLL_LOG_WARN);
    harass(c, &a, k->keyed, silent);
    /* Every lifeline has had its strangers before anyone dies. */
    EXPECT_RC(coll_barrier(c), COLL_OK);
    if (me == k->victim)
        raise(SIGKILL);
    float x[256] = {0};
    int rc = coll_allreduce(c, x, x, 256, COLL_F32, COLL_SUM);
    FAIL_IF(rc == COLL_OK, "nobody noticed rank %d die", k->victim);
    coll_comm *s = NULL;
    EXPECT_RC(coll_shrink(c, &s), COLL_OK);
    int failed[N], nf = coll_failed_ranks(c, failed, N);
    FAIL_IF(nf != 1 || failed[0] != k->victim, "%d ranks agreed failed (first %d), want rank %d",
            nf, nf ? failed[0] : -1, k->victim);
    /* The hellos of strangers were read and refused, not merely never reached. */
    FAIL_IF(refusals < 1, "no lifeline refusal logged");
    int r = survivors_check(s, me, ((1u << N) - 1) & ~(1u << k->victim));
    coll_destroy(s);
    for (int i = 0; i < SILENT; i++)
        if (silent[i] >= 0)
            close(silent[i]);
    return r != COLL_OK;
}

/* _i: bit 0 with COLL_SECRET, bit 1 which rank dies (1 or 2). */
START_TEST(strangers_at_the_lifeline_steer_nothing)
{
    plan k = {.victim = 1 + (_i >> 1), .keyed = _i & 1};
    if (k.keyed)
        setenv("COLL_SECRET", "s3cret", 1);
    else
        unsetenv("COLL_SECRET");
    signal(SIGPIPE, SIG_IGN);
    run_opts o = {.nranks = N,
                  .rdzv = RDZV_TCP,
                  .transport = "tcp",
                  .timeout_ms = TIMEOUT_MS,
                  .deadline_s = 40};
    run_ranks(&o, hostile_rank, &k);
    for (int r = 0; r < N; r++)
        if (r == k.victim)
            ck_assert_msg(last_exit[r] == -1, "victim %d was not killed", r);
        else
            ck_assert_msg(last_exit[r] == 0, "survivor %d (victim %d, %s) exit %d", r, k.victim,
                          k.keyed ? "COLL_SECRET" : "no secret", last_exit[r]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile-life");
    TCase *t = tcase_create("hostile-life");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, strangers_at_the_lifeline_steer_nothing, 0, 4);
    suite_add_tcase(s, t);
    return run_suite(s);
}
