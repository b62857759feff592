/* Hostile network input while a job connects: stray connections to the ranks' listening
 * ports that send nothing, random bytes, a well-formed handshake with a wrong protocol
 * version or without the job's COLL_SECRET, half a handshake, or a megabyte of junk. Each
 * is refused with a protocol error in the log, and the job's collectives complete with
 * correct results. */
#include "base/util.h"
#include "perf/verify.h"
#include "common/harness.h"

#include <arpa/inet.h>
#include "common/stranger.h"
#include "common/suite.h"

#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 3 };

static int refusals;

static void count_refusals(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(msg, "refused connection") && strstr(msg, "protocol error"))
        refusals++;
}

/* A tcp handle "ip:port", or the auto transport's "auto KEY ip:port shm:NAME". */
static int connect_to(const char *handle)
{
    char ip[64];
    unsigned port;
    if (sscanf(handle, "auto %*s %63[^:]:%u", ip, &port) != 2 &&
        sscanf(handle, "%63[^:]:%u", ip, &port) != 2)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, ip, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Waits for rank r's published address and attacks it six ways; returns the fds that
 * stay open (the silent ones). */
static void attack(const char *dir, int r, int *keep)
{
    char path[256], addr[129] = { 0 };
    snprintf(path, sizeof(path), "%s/addr_%d", dir, r);
    for (int t = 0; t < 500; t++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t n = fread(addr, 1, 128, f);
            fclose(f);
            if (n)
                break;
        }
        cl_sleep_ms(10);
    }
    unsigned char junk[1 << 20];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    hello wrong_version = { STRANGER_HELLO_MAGIC, 99, 1, 42, 0, 1, 0, N, 0, { 0 } };
    hello wrong_secret = { STRANGER_HELLO_MAGIC, STRANGER_PROTO, 1, 42, 0, 1, 0, N, 1, { 0 } };
    int fd;
    keep[0] = connect_to(addr); /* silent */
    if ((fd = connect_to(addr)) >= 0)
        (void)!write(fd, junk, sizeof(hello)), close(fd);
    if ((fd = connect_to(addr)) >= 0)
        (void)!write(fd, &wrong_version, sizeof(hello)), close(fd);
    if ((fd = connect_to(addr)) >= 0)
        (void)!write(fd, &wrong_secret, sizeof(hello)), close(fd);
    if ((fd = connect_to(addr)) >= 0)
        (void)!write(fd, &wrong_secret, sizeof(hello) / 2), close(fd);
    if ((fd = connect_to(addr)) >= 0)
        (void)!write(fd, junk, sizeof(junk)), close(fd);
}

static int rank_body(const char *url, int r)
{
    coll_set_log(count_refusals, NULL, COLL_LOG_WARN);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = 8000;
    coll_comm *c = NULL;
    int rc = coll_init(&c, url, r, N, &cfg);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: init %s: %s\n", r, coll_strerror(rc), coll_last_error(NULL));
        return 1;
    }
    float *x = malloc(100003 * sizeof(float));
    cl_fill(x, 100003, COLL_F32, COLL_SUM, r, 0);
    rc = coll_allreduce(c, x, x, 100003, COLL_F32, COLL_SUM);
    size_t wrong = rc == COLL_OK ? cl_check_reduce(x, 100003, COLL_F32, COLL_SUM, N, 0) : 1;
    coll_destroy(c);
    free(x);
    /* wrong version, wrong secret and junk: at least three refusals logged here */
    if (rc != COLL_OK || wrong || (r < N - 1 && refusals < 3)) {
        fprintf(stderr, "rank %d: %s, %zu wrong, %d refusals\n", r, coll_strerror(rc), wrong,
                refusals);
        return 1;
    }
    return 0;
}

START_TEST(stray_and_hostile_connections_are_refused_and_the_job_completes)
{
    char dir[] = "/tmp/coll_hostile.XXXXXX", url[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    setenv("COLL_SECRET", "s3cret", 1);
    signal(SIGPIPE, SIG_IGN); /* the attacker writes to sockets the ranks close */
    pid_t pids[N];
    for (int r = 0; r < N; r++) {
        if ((pids[r] = fork()) == 0) {
            if (r == N - 1)
                cl_sleep_ms(1500); /* the others listen meanwhile: the attack window */
            _exit(rank_body(url, r));
        }
    }
    int keep[N] = { -1, -1, -1 };
    for (int r = 0; r < N - 1; r++)
        attack(dir, r, &keep[r]);
    int bad = 0;
    for (int r = 0; r < N; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    for (int r = 0; r < N; r++)
        if (keep[r] >= 0)
            close(keep[r]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(bad, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *t = tcase_create("hostile");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, stray_and_hostile_connections_are_refused_and_the_job_completes);
    suite_add_tcase(s, t);
    return run_suite(s);
}
