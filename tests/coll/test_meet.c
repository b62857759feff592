/* The rendezvous keeps jobs apart and says why it fails: two jobs started at one port
 * fail together with a sentence saying so (never a silent mix of their ranks); jobs
 * with names are told apart at once; a rank after the job formed is told so (and stops
 * an unnamed job); ranks that disagree on a setting (world size, transport, socket
 * family, codec, secret, segment, algorithm) all fail at once naming it; a port held by
 * another program is named as such; loop over a tcp rendezvous and an interface that
 * does not exist are refused naming the cause; a file directory is reused after a job
 * (its records are removed) and refused while another job's records are there; a rank 0
 * that leaves after its tcp store served the others ends their init at once; an init
 * interrupted (coll_init_interrupt) ends at once, wherever it waits (a stopped rank 0, a
 * host dropping its dials, a grow's newcomer), and tells the ranks it met. */
#include "collective.h"

#include "common/harness.h"
#include "common/ipv6.h"
#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

enum { TIMEOUT_MS = 3000 };

/* One rank process: what it sets, when it starts, what init must say. */
typedef struct {
    int rank, size, delay_ms;
    const char *env;       /* "NAME=value" or NULL */
    int want;              /* COLL_OK: init, then an all-reduce that must add up */
    const char *says;      /* with an error: words coll_last_error must hold */
    int base;              /* the job's values: base + rank */
} who;

/* The library's timeout, and the time within which a rank's init must fail (0: any),
 * for the ranks run() starts next. */
static int timeout_ms = TIMEOUT_MS, fail_within_ms;
/* The rank whose init gets SIGUSR1 interrupt_ms after it began (its handler calls
 * coll_init_interrupt), for the ranks run() starts next; -1: none. With
 * interrupt_thread, another thread of it calls coll_init_interrupt instead. */
static int interrupt_rank = -1, interrupt_ms, interrupt_thread;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_usr1(int sig)
{
    (void)sig;
    coll_init_interrupt();
}

/* SIGUSR1 to this process in ms milliseconds, from the kernel (a timer): nothing of the
 * test's runs beside the init. */
static void interrupt_in(int ms)
{
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1};
    struct itimerspec at = {.it_value = {ms / 1000, (long)(ms % 1000) * 1000000L}};
    timer_t t;
    signal(SIGUSR1, on_usr1);
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0 || timer_settime(t, 0, &at, NULL) != 0)
        perror("interrupt_in");
}

static void *interrupter(void *ms)
{
    sleep_ms((int)(intptr_t)ms);
    coll_init_interrupt();
    return NULL;
}

/* coll_init_interrupt from another thread in ms milliseconds, as Python's signal thread
 * calls it: no signal lands on the init's thread, whose waits must look by themselves
 * (a handler there ends a blocking poll or connect early, with EINTR, and hides one
 * that never looks). */
static void interrupt_from_thread(int ms)
{
    pthread_t t;
    if (pthread_create(&t, NULL, interrupter, (void *)(intptr_t)ms) == 0)
        pthread_detach(t);
}

static int rank_main(const char *url, const who *w)
{
    /* a rank still in init by then is stopped: the test fails, not hangs. Check's own
     * handler, inherited through fork, would kill the whole test, with no word of which
     * rank or why */
    signal(SIGALRM, SIG_DFL);
    alarm(fail_within_ms ? (unsigned)(fail_within_ms / 1000 + 5) : 6 * TIMEOUT_MS / 1000);
    sleep_ms(w->delay_ms);
    if (w->env)
        putenv((char *)w->env);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    coll_comm *c = NULL;
    long long start = now_ms();
    if (w->rank == interrupt_rank)
        (interrupt_thread ? interrupt_from_thread : interrupt_in)(interrupt_ms);
    int rc = coll_init(&c, url, w->rank, w->size, &cfg);
    long long took = now_ms() - start;
    const char *e = coll_last_error(NULL);
    if (rc != w->want || (rc != COLL_OK && !strstr(e, w->says)) ||
        (rc != COLL_OK && fail_within_ms && took > fail_within_ms)) {
        fprintf(stderr, "rank %d of job %d: init %s after %lld ms, want %s with '%s'%s: %s\n",
                w->rank, w->base, coll_strerror(rc), took, coll_strerror(w->want),
                w->says ? w->says : "", fail_within_ms ? " soon" : "", e);
        return 1;
    }
    if (rc != COLL_OK)
        return 0;
    int v = w->base + w->rank, sum = -1, want = w->size * w->base + w->size * (w->size - 1) / 2;
    rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM);
    coll_destroy(c);
    if (rc != COLL_OK || sum != want) {
        fprintf(stderr, "rank %d of job %d: all-reduce %s, sum %d, want %d\n", w->rank, w->base,
                coll_strerror(rc), sum, want);
        return 1;
    }
    return 0;
}

/* Starts one rank as a process. */
static pid_t start(const char *url, const who *w)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(rank_main(url, w));
    return pid;
}

/* Starts every rank as a process; returns how many did not behave. */
static int run(const char *url, const who *ws, int n)
{
    pid_t pids[16];
    for (int i = 0; i < n; i++)
        pids[i] = start(url, &ws[i]);
    return reap_all(pids, n);
}

static void env_url(char *url, size_t len)
{
    snprintf(url, len, "tcp://127.0.0.1:%d", free_port());
}

#define CLASH "another job is using this rendezvous"

/* Job A's ranks 0 and 1 come first (rank 0 serves the store); then job B's rank 1, which
 * finds rank 1's place taken; then the rest of job B: its rank 0 cannot bind the port,
 * its rank 2 takes rank 2's place. Rank 0 finds rank 1's note, and every rank that met
 * fails saying so: none computes with the other job's ranks. Job A's rank 2 comes after
 * the store closed and finds nobody. Each comes after the one it follows has ended, not
 * after a delay: under load, job B's rank 1 still on its way when the job formed found
 * the store closed, and job A's rank 2 started 1500 ms in found it still open. */
START_TEST(two_jobs_at_one_port_fail_together)
{
    char url[64];
    env_url(url, sizeof(url));
    who a[] = {{0, 3, 0, NULL, COLL_EMISMATCH, CLASH, 100},
               {1, 3, 0, NULL, COLL_EMISMATCH, CLASH, 100},
               {2, 3, 0, NULL, COLL_ETIMEDOUT, "did not answer", 100}};
    who b[] = {{0, 3, 0, NULL, COLL_ESYS, "another job", 200},
               {1, 3, 500, NULL, COLL_EMISMATCH, "rank 1 registered twice", 200},
               {2, 3, 0, NULL, COLL_EMISMATCH, CLASH, 200}};
    pid_t pids[] = {start(url, &a[0]), start(url, &a[1]), start(url, &b[1]), 0};
    int bad = reap_all(pids + 2, 1); /* its note is there before the job can form */
    pids[2] = start(url, &b[0]), pids[3] = start(url, &b[2]);
    bad += reap_all(pids, 4);
    bad += run(url, &a[2], 1); /* job A's rank 0 has ended: nothing serves the port */
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* With names (COLL_JOB_ID, or a launcher's job id), a rank of another job is refused at
 * once naming both, and the job that owns the rendezvous runs undisturbed. */
START_TEST(named_jobs_are_told_apart)
{
    char url[64];
    env_url(url, sizeof(url));
    who ws[] = {{0, 3, 0, "COLL_JOB_ID=alpha", COLL_OK, NULL, 10},
                {1, 3, 0, "COLL_JOB_ID=alpha", COLL_OK, NULL, 10},
                {1, 3, 300, "SLURM_JOB_ID=4711", COLL_EMISMATCH, "job 'alpha'", 20},
                {2, 3, 1000, "COLL_JOB_ID=alpha", COLL_OK, NULL, 10}};
    ck_assert_int_eq(run(url, ws, 4), 0);
    env_url(url, sizeof(url));
    who alone[] = {{0, 2, 0, "COLL_JOB_ID=alpha", COLL_ETIMEDOUT, "missing rank(s) 1", 0},
                   {1, 2, 300, "SLURM_JOB_ID=4711", COLL_EMISMATCH,
                    "this rank is of job '4711' from SLURM_JOB_ID", 0}};
    ck_assert_int_eq(run(url, alone, 2), 0);
}
END_TEST

START_TEST(ranks_on_different_transports_both_say_so)
{
    char url[64];
    env_url(url, sizeof(url));
    who ws[] = {{0, 2, 0, "COLL_TRANSPORT=shm", COLL_EMISMATCH, "rank 0 has shm, rank 1 has tcp", 0},
                {1, 2, 0, "COLL_TRANSPORT=tcp", COLL_EMISMATCH, "rank 0 has shm, rank 1 has tcp", 0}};
    ck_assert_int_eq(run(url, ws, 2), 0);
}
END_TEST

/* A setting that must agree and does not, on any rank (rank 0 too), ends every rank's
 * init with one sentence naming it, rank 0's value and the other's: COLL_EMISMATCH, not
 * the timeout (each rank here waits 3 s; the note ends it at once). A rank that comes
 * late reads the note too. */
static void differ(const char *env, int on, int late_ms, const char *says)
{
    char url[64];
    env_url(url, sizeof(url));
    who ws[3];
    for (int r = 0; r < 3; r++)
        ws[r] = (who){r, 3, r == 1 ? late_ms : 0, r == on ? env : NULL, COLL_EMISMATCH, says, 0};
    ck_assert_msg(run(url, ws, 3) == 0, "%s on rank %d", env, on);
}

START_TEST(settings_that_differ_are_named_on_every_rank)
{
    differ("COLL_CODEC=int8", 2, 0, "the codec (COLL_CODEC): rank 0 has none, rank 2 has int8");
    differ("COLL_SECRET=s3", 1, 0, "the secret (COLL_SECRET): rank 0 has none, rank 1 has one");
    differ("COLL_SECRET=s3", 0, 0, "the secret (COLL_SECRET): rank 0 has one, rank ");
    differ("COLL_SEGMENT_BYTES=4096", 2, 200, "rank 0 has 524288, rank 2 has 4096");
    differ("COLL_ALGO=ring", 0, 0, "the algorithm (COLL_ALGO): rank 0 has ring");
}
END_TEST

/* Ranks whose sockets are of two families (COLL_SOCKET_FAMILY on one rank; a file store
 * names no host, so the others take lo's IPv4) are named on every rank at once, not left
 * to dial addresses of a family their peers may not have (tests/cluster/family.sh's
 * input mode: the same over tcp://, between hosts with both families). */
START_TEST(ranks_on_different_families_are_named_on_every_rank)
{
    if (!have_ipv6_loopback()) /* a host without IPv6 has no family to disagree with */
        return;
    char dir[64] = "/tmp/coll_meet.XXXXXX", url[96], cmd[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    const char *says = "the socket family (COLL_SOCKET_FAMILY, else the rendezvous host's): "
                       "rank 0 has IPv4, rank 1 has IPv6";
    who ws[] = {{0, 3, 0, NULL, COLL_EMISMATCH, says, 0},
                {1, 3, 0, "COLL_SOCKET_FAMILY=AF_INET6", COLL_EMISMATCH, says, 0},
                {2, 3, 0, NULL, COLL_EMISMATCH, says, 0}};
    ck_assert_int_eq(run(url, ws, 3), 0);
    unsetenv("COLL_SOCKET_IFNAME");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(a_wrong_world_size_is_named_on_every_rank)
{
    char url[64];
    env_url(url, sizeof(url));
    const char *says = "the world size (WORLD_SIZE): rank 0 has 3, rank 2 has 4";
    who ws[] = {{0, 3, 0, NULL, COLL_EMISMATCH, says, 0},
                {1, 3, 0, NULL, COLL_EMISMATCH, says, 0},
                {2, 4, 0, NULL, COLL_EMISMATCH, says, 0}};
    ck_assert_int_eq(run(url, ws, 3), 0);
    env_url(url, sizeof(url));
    says = "the world size (WORLD_SIZE): rank 0 has 4, rank ";
    who first[] = {{0, 4, 0, NULL, COLL_EMISMATCH, says, 0},
                   {1, 3, 0, NULL, COLL_EMISMATCH, says, 0},
                   {2, 3, 0, NULL, COLL_EMISMATCH, says, 0}};
    ck_assert_int_eq(run(url, first, 3), 0);
}
END_TEST

/* A rank whose own init fails (here its interface: no such one) leaves a note on the
 * store, and every other rank's init ends within a moment with its error, not at the
 * timeout (60 s here; they must be done within 20 s) saying it is missing. The failing
 * rank may come before rank 0 serves. With COLL_SECRET its words are shown only where
 * the job's secret seals them. */
#define NO_IF "no network interface matches 'nonexistent0'"
#define FAILED "rank 2 failed at init (invalid argument), so the job cannot form: "

static void one_rank_fails(const char *url, int early_ms, const char *others_env,
                           const char *says)
{
    who ws[4];
    for (int r = 0; r < 4; r++)
        ws[r] = (who){r, 4, r == 2 ? 0 : early_ms,
                      r == 2 ? "COLL_SOCKET_IFNAME=nonexistent0" : others_env,
                      r == 2 ? COLL_EINVAL : COLL_EPEER, r == 2 ? NO_IF : says, 0};
    timeout_ms = 60000, fail_within_ms = 20000;
    int bad = run(url, ws, 4);
    timeout_ms = TIMEOUT_MS, fail_within_ms = 0;
    ck_assert_msg(bad == 0, "%s, the others %d ms later, %s", url, early_ms,
                  others_env ? others_env : "");
}

START_TEST(a_rank_that_fails_at_init_ends_every_rank_init_at_once)
{
    char url[64], dir[64] = "/tmp/coll_meet.XXXXXX", cmd[160];
    const char *words = FAILED "transport auto: " NO_IF;
    env_url(url, sizeof(url));
    one_rank_fails(url, 0, NULL, words);
    env_url(url, sizeof(url));
    one_rank_fails(url, 700, NULL, words); /* it waits for rank 0's store to say so */
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    one_rank_fails(url, 700, NULL, words);
    snprintf(cmd, sizeof(cmd), "cd %s && ls | wc -l | grep -qx 0 && cd / && rm -r %s", dir, dir);
    ck_assert_msg(system(cmd) == 0, "the job left records in %s", dir);
    setenv("COLL_SECRET", "s3", 1);
    env_url(url, sizeof(url));
    one_rank_fails(url, 0, NULL, words);
    setenv("COLL_SECRET", "other", 1); /* rank 2's; the others' is s3 */
    env_url(url, sizeof(url));
    one_rank_fails(url, 0, "COLL_SECRET=s3",
                   "rank 2 failed at init (invalid argument), says a note this job's "
                   "COLL_SECRET does not seal (its words are not shown)");
    unsetenv("COLL_SECRET");
}
END_TEST

/* Rank 0 leaves after its tcp store served the others (they read its terms): killed
 * while they wait for its cards (a world of 4, rank 3 never comes), or its own init
 * failing a second after it published them (COLL_FAULT_INIT=cards), while the others
 * connect and rank 1 waits for the link from it. Each other rank's init ends with
 * COLL_EPEER well within the timeout (30 s; they must be done within 10 s), rank 1 saying
 * that rank 0's store went away; before, they said "missing rank(s) 0,2" with
 * COLL_ETIMEDOUT, and rank 1 waited for its timeout for the link. */
#define GONE "rank 0's store at tcp://127.0.0.1:"
#define GONE_LINKING "rank 0's rendezvous store went away while the communicator connected"

static void rank_0_killed_while_the_others_wait(void)
{
    char url[64];
    env_url(url, sizeof(url));
    pid_t pids[3];
    for (int r = 0; r < 3; r++) {
        who w = {r, 4, 0, NULL, COLL_EPEER, GONE, 0};
        pids[r] = start(url, &w);
    }
    sleep_ms(2000); /* every rank has read the terms by then, even on a loaded machine */
    kill(pids[0], SIGKILL);
    ck_assert_msg(reap_all(pids + 1, 2) == 0, "the others' init did not fail soon naming it");
    waitpid(pids[0], NULL, 0);
}

START_TEST(rank_0_gone_after_its_store_served_ends_every_rank_init_at_once)
{
    timeout_ms = 30000, fail_within_ms = 10000;
    rank_0_killed_while_the_others_wait();
    char url[64];
    env_url(url, sizeof(url));
    who ws[] = {{0, 3, 0, "COLL_FAULT_INIT=cards", COLL_ESYS, "COLL_FAULT_INIT", 0},
                {1, 3, 0, NULL, COLL_EPEER, GONE_LINKING, 0},
                {2, 3, 0, NULL, COLL_EPEER, "", 0}};
    int bad = run(url, ws, 3);
    timeout_ms = TIMEOUT_MS, fail_within_ms = 0;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* An init interrupted (coll_init_interrupt, from a signal handler) ends within moments
 * at whatever it waits for: rank 0 waiting for a rank that never comes, a rank waiting
 * for rank 0's store that is not up, rank 1 or rank 0 of a job that waits for a third
 * (the other then fails too, naming it: tcp and file stores). The library's timeout is a
 * minute; each must be done within 10 s (about 1 s: the signal comes at 500-1000 ms). */
#define INTERRUPTED "init interrupted"
#define TOLD " failed at init (aborted), so the job cannot form: " INTERRUPTED

START_TEST(an_interrupted_init_ends_soon_and_the_others_learn_it)
{
    char url[96], dir[64] = "/tmp/coll_meet.XXXXXX", cmd[160];
    timeout_ms = 60000, fail_within_ms = 10000, interrupt_ms = 500;
    env_url(url, sizeof(url));
    who alone = {0, 2, 0, NULL, COLL_EABORTED, INTERRUPTED, 0};
    interrupt_rank = 0;
    ck_assert_int_eq(run(url, &alone, 1), 0);
    alone.rank = interrupt_rank = 1; /* nothing serves the port: it dials on */
    ck_assert_int_eq(run(url, &alone, 1), 0);
    interrupt_ms = 1000;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (interrupt_rank = 0; interrupt_rank < 2; interrupt_rank++) {
        int told = !interrupt_rank;
        who job[] = {{told, 3, 0, NULL, COLL_EPEER, told ? "rank 0" TOLD : "rank 1" TOLD, 0},
                     {!told, 3, 0, NULL, COLL_EABORTED, INTERRUPTED, 0}};
        env_url(url, sizeof(url));
        ck_assert_int_eq(run(url, job, 2), 0);
        snprintf(url, sizeof(url), "file://%s", dir);
        ck_assert_int_eq(run(url, job, 2), 0);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    timeout_ms = TIMEOUT_MS, fail_within_ms = 0, interrupt_rank = -1;
}
END_TEST

/* Interrupted from another thread (as Python does) at what a blocking call waited for:
 * rank 0's store stopped (SIGSTOP) after it served this rank, so a request's answer
 * never comes; a host that drops every connection attempt (a listener whose queue is
 * full, as a firewall), whose blocking connect waited out TCP's retries, two minutes,
 * past any timeout too; a newcomer of a grow whose id names a port nobody serves (it
 * dialed before its meeting began). Each must end within a few seconds. */
START_TEST(an_init_interrupted_inside_a_blocking_wait_ends_soon)
{
    char url[96], id[COLL_GROW_ID_BYTES];
    timeout_ms = 30000, fail_within_ms = 5000, interrupt_ms = 2000, interrupt_thread = 1;
    env_url(url, sizeof(url));
    who r0 = {0, 3, 0, NULL, COLL_ETIMEDOUT, "missing", 0};
    who r1 = {1, 3, 0, NULL, COLL_EABORTED, INTERRUPTED, 0};
    interrupt_rank = 1;
    pid_t p0 = start(url, &r0), p1 = (sleep_ms(200), start(url, &r1));
    sleep_ms(1000); /* rank 1 waits on rank 0's store for rank 2's card */
    kill(p0, SIGSTOP);
    int bad = reap_all(&p1, 1);
    kill(p0, SIGKILL);
    kill(p0, SIGCONT);
    waitpid(p0, NULL, 0);
    ck_assert_int_eq(bad, 0);

    int port = free_port(), full = socket(AF_INET, SOCK_STREAM, 0), fill[4];
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(full, (struct sockaddr *)&at, sizeof(at)), 0);
    ck_assert_int_eq(listen(full, 0), 0);
    for (int i = 0; i < 4; i++) { /* never accepted: the queue fills, then SYNs drop */
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[i], (struct sockaddr *)&at, sizeof(at));
    }
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    r1.size = 2, interrupt_ms = 500;
    ck_assert_int_eq(run(url, &r1, 1), 0);
    who late = {1, 2, 0, NULL, COLL_ETIMEDOUT, "did not answer", 0};
    timeout_ms = 2000, interrupt_rank = -1; /* and its timeout holds */
    ck_assert_int_eq(run(url, &late, 1), 0);
    for (int i = 0; i < 4; i++)
        close(fill[i]);
    close(full);

    coll_config cfg = COLL_CONFIG_INIT;
    coll_comm *c = NULL;
    cfg.timeout_ms = 30000;
    snprintf(id, sizeof(id), "grow1/127.0.0.1:%d/1/2/0123456789abcdef0123456789abcdef",
             free_port());
    interrupt_from_thread(500);
    long long start_ms = now_ms();
    int rc = coll_init_grow(&c, id, &cfg);
    ck_assert_msg(rc == COLL_EABORTED && strstr(coll_last_error(NULL), INTERRUPTED) &&
                      now_ms() - start_ms < fail_within_ms,
                  "coll_init_grow: %s after %lld ms: %s", coll_strerror(rc),
                  now_ms() - start_ms, coll_last_error(NULL));
    timeout_ms = TIMEOUT_MS, fail_within_ms = 0, interrupt_thread = 0;
}
END_TEST

/* An interrupt counts for the inits in progress only: one begun after it meets. */
START_TEST(an_init_after_an_interrupt_is_not_interrupted)
{
    coll_comm *c = NULL;
    ck_assert_int_eq(coll_init_interrupt(), COLL_OK);
    ck_assert_int_eq(coll_init(&c, "mem://after_interrupt", 0, 1, NULL), COLL_OK);
    ck_assert_int_eq(coll_barrier(c), COLL_OK);
    ck_assert_int_eq(coll_destroy(c), COLL_OK);
}
END_TEST

/* A rank of a job that formed: it meets, waits (the late rank comes meanwhile), then
 * all-reduces, which must fail where `fails` says, naming why, and add up otherwise. */
static int formed_rank(const char *url, int rank, int fails)
{
    alarm(6 * TIMEOUT_MS / 1000);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL;
    if (coll_init(&c, url, rank, 2, &cfg) != COLL_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, coll_last_error(NULL));
        return 1;
    }
    sleep_ms(1500);
    int v = 1, sum = 0, rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM);
    /* rank 0 says why; its farewell tells rank 1 where the failure began */
    const char *says = rank == 0 ? "after the job formed" : "rank 0 failed";
    int ok = fails ? rc != COLL_OK && strstr(coll_last_error(c), says) : rc == COLL_OK && sum == 2;
    if (!ok)
        fprintf(stderr, "rank %d: all-reduce %s, sum %d: %s\n", rank, coll_strerror(rc), sum,
                coll_last_error(c));
    coll_destroy(c);
    return !ok;
}

/* Rank 0 of an unnamed job serves the rendezvous for the job's life: a rank that comes
 * after the job formed is told so at once, and, as nothing tells a second job's rank from
 * this job's, the job stops (every rank, naming why) rather than go on with what may be
 * another job's rank. A named job lets the port go (a launcher restarting a rank finds it
 * free): the late rank finds nobody there, and the job goes on undisturbed. */
static void late_rank_case(const char *env, int job_fails)
{
    char url[64];
    env_url(url, sizeof(url));
    if (env)
        putenv((char *)env);
    pid_t pids[3];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0)
            _exit(formed_rank(url, r, job_fails));
    if ((pids[2] = fork()) == 0) {
        who late = {1, 2, 700, NULL, COLL_EMISMATCH, "formed without this rank", 0};
        if (!job_fails)
            late = (who){1, 2, 700, NULL, COLL_ETIMEDOUT, "did not answer", 0};
        _exit(rank_main(url, &late));
    }
    ck_assert_msg(reap_all(pids, 3) == 0, "%s", env ? env : "no job name");
    if (env) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(env, "="), env);
        unsetenv(name);
    }
}

/* Rank 0 of job A and rank 1 of job B meet and form a job (nothing tells them apart).
 * B's rank 0, which cannot bind the port, says so at A's rank 0's rendezvous: the mixed
 * job stops at once, though A's own rank 1 never comes to stop it. */
START_TEST(a_second_rank_0_at_the_port_stops_the_job_its_ranks_met)
{
    char url[64];
    env_url(url, sizeof(url));
    pid_t pids[3];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0)
            _exit(formed_rank(url, r, 1));
    if ((pids[2] = fork()) == 0) {
        who second = {0, 2, 700, NULL, COLL_ESYS, "cannot bind", 0};
        _exit(rank_main(url, &second));
    }
    ck_assert_int_eq(reap_all(pids, 3), 0);
}
END_TEST

START_TEST(a_rank_after_the_job_formed_is_told_and_an_unnamed_job_stops)
{
    late_rank_case(NULL, 1);
    late_rank_case("COLL_JOB_ID=named", 0);
    /* torchrun's run id is the word "none" in every job it starts without --rdzv-id: no
     * name that tells jobs apart */
    late_rank_case("TORCHELASTIC_RUN_ID=none", 1);
}
END_TEST

/* Rank 0 forks after init (a data loader's worker): the child, alive after the job,
 * must not hold the rendezvous port that rank 0 served for the job's life. */
static int forking_rank(const char *url, int rank, pid_t *child)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL;
    if (coll_init(&c, url, rank, 2, &cfg) != COLL_OK)
        return 1;
    if (rank == 0 && (*child = fork()) == 0) {
        sleep_ms(4000);
        _exit(0);
    }
    int v = 1, sum = 0, rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM);
    coll_destroy(c);
    return rc != COLL_OK || sum != 2;
}

START_TEST(a_child_forked_after_init_leaves_the_port)
{
    char url[64];
    env_url(url, sizeof(url));
    pid_t pids[2], child = -1;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0) {
            int bad = forking_rank(url, r, &child);
            if (r == 0 && write(fds[1], &child, sizeof(child)) < 0)
                bad = 1;
            _exit(bad);
        }
    ck_assert_int_eq(reap_all(pids, 2), 0);
    ck_assert_int_eq(read(fds[0], &child, sizeof(child)), (ssize_t)sizeof(child));
    close(fds[0]), close(fds[1]);
    who next[] = {{0, 2, 0, NULL, COLL_OK, NULL, 5}, {1, 2, 0, NULL, COLL_OK, NULL, 5}};
    int bad = run(url, next, 2); /* the forked child is still alive meanwhile */
    kill(child, SIGKILL);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* A stranger's set on rank 0's store, as the tcp store's wire has it (op 1, key and value
 * lengths, key, value); its answer is read and dropped. */
static void stranger_sets(int port, const char *key, const char *val)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint32_t klen = (uint32_t)strlen(key), vlen = (uint32_t)strlen(val) + 1;
    unsigned char req[256] = {1}, ok;
    memcpy(req + 1, &klen, 4);
    memcpy(req + 5, &vlen, 4);
    memcpy(req + 9, key, klen);
    memcpy(req + 9 + klen, val, vlen);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(write(fd, req, 9 + klen + vlen), (ssize_t)(9 + klen + vlen));
    ck_assert_int_eq(read(fd, &ok, 1), 1);
    close(fd);
}

/* The store before the seal is open to whoever reaches it: a note a stranger writes there
 * in words of its own is no note (a rank writes no text there), and the job meets. */
START_TEST(a_stranger_cannot_word_the_notes)
{
    char url[64];
    int port = free_port();
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    who ws[] = {{0, 2, 0, NULL, COLL_OK, NULL, 1}, {1, 2, 800, NULL, COLL_OK, NULL, 1}};
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0)
            _exit(rank_main(url, &ws[r]));
    sleep_ms(400); /* rank 0 serves by then; rank 1 comes later */
    stranger_sets(port, "abort", "forged: the ranks disagree, ask the admin");
    stranger_sets(port, "formed", "forged: run this command");
    ck_assert_int_eq(reap_all(pids, 2), 0);
}
END_TEST

/* The port is another program's (it accepts and closes, or answers other bytes): rank 0
 * cannot bind it and the others say at once whom they reached. */
START_TEST(a_port_held_by_another_program_is_named_at_once)
{
    for (int garbage = 0; garbage < 2; garbage++) {
        int port = free_port();
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        ck_assert_int_eq(listen(lfd, 16), 0);
        pid_t other = fork();
        if (other == 0) {
            for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (garbage && write(fd, "HTTP/1.0 400 Bad Request\r\n\r\n", 28) < 0)
                    _exit(1);
                close(fd);
            }
        }
        close(lfd);
        char url[64];
        snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
        who ws[] = {{0, 2, 0, NULL, COLL_ESYS, "cannot bind", 0},
                    {1, 2, 0, NULL, COLL_EPROTO, "is not a libcollective rendezvous", 0}};
        int bad = run(url, ws, 2);
        kill(other, SIGKILL);
        waitpid(other, NULL, 0);
        ck_assert_int_eq(bad, 0);
    }
}
END_TEST

/* Refused in the calling process before anything is sent, naming the cause. */
START_TEST(loop_over_tcp_and_a_missing_interface_say_why)
{
    char url[64];
    env_url(url, sizeof(url));
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL;
    cfg.transport = "loop";
    ck_assert_int_eq(coll_init(&c, url, 0, 2, &cfg), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "use mem://NAME"), "%s", coll_last_error(NULL));
    cfg.transport = "tcp";
    cfg.device = "eth9";
    ck_assert_int_eq(coll_init(&c, url, 0, 2, &cfg), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "no network interface matches 'eth9'"), "%s",
                  coll_last_error(NULL));
    ck_assert_ptr_null(c);
}
END_TEST

/* Two jobs one after the other in one directory run (the first's records are gone when
 * it is built); a directory holding a crashed job's records is refused on every rank. */
START_TEST(a_file_directory_is_reused_or_refused)
{
    char dir[64] = "/tmp/coll_meet.XXXXXX", url[96], cmd[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    for (int job = 1; job <= 2; job++) {
        who ws[] = {{0, 2, 0, NULL, COLL_OK, NULL, job}, {1, 2, 0, NULL, COLL_OK, NULL, job}};
        ck_assert_int_eq(run(url, ws, 2), 0);
    }
    snprintf(cmd, sizeof(cmd), "cd %s && ls | wc -l | grep -qx 0", dir);
    ck_assert_msg(system(cmd) == 0, "the jobs left records in %s", dir);
    snprintf(cmd, sizeof(cmd), "cd %s && head -c 88 /dev/zero > job && touch addr_0 addr_1", dir);
    ck_assert_int_eq(system(cmd), 0);
    who ws[] = {{0, 2, 0, NULL, COLL_EMISMATCH, "already holds another job's files", 0},
                {1, 2, 0, NULL, COLL_EMISMATCH, "already holds another job's files", 0}};
    ck_assert_int_eq(run(url, ws, 2), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("meet");
    TCase *t = tcase_create("meet");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, two_jobs_at_one_port_fail_together);
    tcase_add_test(t, named_jobs_are_told_apart);
    tcase_add_test(t, ranks_on_different_transports_both_say_so);
    tcase_add_test(t, settings_that_differ_are_named_on_every_rank);
    tcase_add_test(t, ranks_on_different_families_are_named_on_every_rank);
    tcase_add_test(t, a_wrong_world_size_is_named_on_every_rank);
    tcase_add_test(t, a_rank_that_fails_at_init_ends_every_rank_init_at_once);
    tcase_add_test(t, rank_0_gone_after_its_store_served_ends_every_rank_init_at_once);
    tcase_add_test(t, a_rank_after_the_job_formed_is_told_and_an_unnamed_job_stops);
    tcase_add_test(t, a_second_rank_0_at_the_port_stops_the_job_its_ranks_met);
    tcase_add_test(t, a_port_held_by_another_program_is_named_at_once);
    tcase_add_test(t, a_child_forked_after_init_leaves_the_port);
    tcase_add_test(t, a_stranger_cannot_word_the_notes);
    tcase_add_test(t, loop_over_tcp_and_a_missing_interface_say_why);
    tcase_add_test(t, a_file_directory_is_reused_or_refused);
    suite_add_tcase(s, t);
    TCase *i = tcase_create("interrupt");
    tcase_set_timeout(i, 60);
    tcase_add_test(i, an_interrupted_init_ends_soon_and_the_others_learn_it);
    tcase_add_test(i, an_init_interrupted_inside_a_blocking_wait_ends_soon);
    tcase_add_test(i, an_init_after_an_interrupt_is_not_interrupted);
    suite_add_tcase(s, i);
    return run_suite(s);
}
