/* Hostile network input while a job connects: stray connections to the ranks' listening
 * ports that send nothing, random bytes, a well-formed handshake with a wrong protocol
 * version or without the job's COLL_SECRET, half a handshake, or a megabyte of junk. Each
 * is refused with a protocol error in the log, and the job's collectives complete with
 * correct results. Then a real rank's handshake, sniffed off the wire and replayed. */
#include "base/util.h"
#include "perf/verify.h"
#include "common/harness.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include "common/stranger.h"
#include "common/suite.h"

#include <check.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 3 };

/* Log lines of refused connections that also say `why` (the log callback's arg). */
static int refusals;

static void count_refusals(coll_log_level level, const char *msg, void *why)
{
    (void)level;
    if (strstr(msg, "refused connection") && strstr(msg, why))
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
    coll_set_log(count_refusals, "protocol error", COLL_LOG_WARN);
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
    int bad = reap_all(pids, N);
    for (int r = 0; r < N; r++)
        if (keep[r] >= 0)
            close(keep[r]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* ---- a sniffed hello, replayed ------------------------------------------------------ */

typedef struct {
    unsigned port;               /* where the first hello went (rank 1's listener) */
    uint8_t hello[sizeof(hello)]; /* that hello */
    int got;
    int fd;
    const char *dir; /* the job's file store: rank 1's address is its addr_1 */
} sniff;

/* The port of rank 1's published address in the store at dir; 0 while there is none. */
static unsigned rank1_port(const char *dir)
{
    char path[256], addr[129] = {0}, ip[64];
    unsigned port = 0;
    snprintf(path, sizeof(path), "%s/addr_1", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        (void)!fread(addr, 1, 128, f);
        fclose(f);
    }
    return sscanf(addr, "%63[^:]:%u", ip, &port) == 2 ? port : 0;
}

/* Reads IPv4 packets on lo until one to rank 1's listener carries a tcp payload of a
 * hello's size or more that starts as a hello does (as root can: AF_PACKET; other jobs'
 * hellos on lo, tests running beside this one, are passed by). Rank 0 dials rank 1: on
 * tcp a pair shares the connection the lower rank dials, so that is the pair's one hello. */
static void *sniffer(void *arg)
{
    sniff *w = arg;
    uint8_t pkt[65536];
    int64_t until = cl_now_ms() + 20000;
    while (!w->got && cl_now_ms() < until) {
        ssize_t n = recv(w->fd, pkt, sizeof(pkt), 0);
        struct iphdr *ip = (struct iphdr *)pkt;
        if (n < (ssize_t)sizeof(*ip) || ip->protocol != IPPROTO_TCP)
            continue;
        struct tcphdr *t = (struct tcphdr *)(pkt + ip->ihl * 4);
        size_t off = (size_t)ip->ihl * 4 + (size_t)t->doff * 4, len = ntohs(ip->tot_len);
        uint32_t magic = 0;
        if (len >= off + sizeof(hello) && (size_t)n >= len)
            memcpy(&magic, pkt + off, sizeof(magic));
        if (magic == CL_HELLO_MAGIC && ntohs(t->dest) == rank1_port(w->dir)) {
            memcpy(w->hello, pkt + off, sizeof(hello));
            w->port = ntohs(t->dest);
            w->got = 1;
        }
    }
    return NULL;
}

/* Both ranks: all-reduce, wait for the replay, then a point-to-point message (its new
 * link makes rank 1 take what waits on its listener) and another all-reduce. */
static int replay_rank(const char *url, const char *dir, int r)
{
    coll_set_log(count_refusals, "duplicate connection", COLL_LOG_WARN);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = 8000;
    cfg.transport = "tcp";
    coll_comm *c = NULL;
    if (r == 1)
        cl_sleep_ms(1000); /* the sniffer is listening by then */
    int rc = coll_init(&c, url, r, 2, &cfg);
    float x = 1, y = 0;
    if (rc == COLL_OK)
        rc = coll_allreduce(c, &x, &y, 1, COLL_F32, COLL_SUM);
    char go[256];
    snprintf(go, sizeof(go), "%s/replayed", dir);
    for (int t = 0; t < 1000 && access(go, F_OK) != 0; t++)
        cl_sleep_ms(10);
    int v = 7;
    if (rc == COLL_OK)
        rc = r ? coll_send(c, &v, 1, COLL_I32, 0, 3) : coll_recv(c, &v, 1, COLL_I32, 1, 3);
    if (rc == COLL_OK)
        rc = coll_allreduce(c, &x, &y, 1, COLL_F32, COLL_SUM);
    fprintf(stderr, "rank %d: %s: %s (sum %g, %d duplicates)\n", r, coll_strerror(rc),
            coll_last_error(c), y, refusals);
    coll_destroy(c);
    return rc != COLL_OK || y != 2 || v != 7 || (r == 1 && refusals < 1);
}

/* With COLL_SECRET, rank 0's hello to rank 1 is sniffed and replayed on a connection of
 * its own: its proof is genuine, and rank 1 still refuses it (that link was taken), and
 * the job goes on with the right sums. */
START_TEST(a_replayed_hello_is_refused)
{
    sniff w = {.fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP))};
    char dir[] = "/tmp/coll_replay.XXXXXX", url[64], path[128], addr[129] = {0};
    w.dir = dir;
    if (w.fd < 0) {
        printf("no AF_PACKET here (not root?): the replay was not tried\n");
        return;
    }
    struct sockaddr_ll lo = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
                             .sll_ifindex = (int)if_nametoindex("lo")};
    struct timeval tick = {0, 100000};
    ck_assert_int_eq(bind(w.fd, (struct sockaddr *)&lo, sizeof(lo)), 0);
    setsockopt(w.fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s", dir);
    setenv("COLL_SECRET", "s3cret", 1);
    signal(SIGPIPE, SIG_IGN);
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0)
            _exit(replay_rank(url, dir, r));
    snprintf(path, sizeof(path), "%s/addr_0", dir);
    for (int t = 0; t < 500 && !addr[0]; t++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            (void)!fread(addr, 1, 128, f);
            fclose(f);
        }
        cl_sleep_ms(10);
    }
    char ip[64], to[128];
    unsigned port0;
    ck_assert_int_eq(sscanf(addr, "%63[^:]:%u", ip, &port0), 2);
    pthread_t th;
    pthread_create(&th, NULL, sniffer, &w);
    pthread_join(th, NULL);
    close(w.fd);
    snprintf(to, sizeof(to), "%s:%u", ip, w.port);
    int fd = w.got ? connect_to(to) : -1;
    if (fd >= 0)
        (void)!write(fd, w.hello, sizeof(w.hello));
    snprintf(path, sizeof(path), "%s/replayed", dir);
    fclose(fopen(path, "w"));
    int bad = reap_all(pids, 2);
    if (fd >= 0)
        close(fd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(w.got, "no hello was seen");
    ck_assert_msg(fd >= 0, "the replay could not connect");
    ck_assert_int_eq(bad, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *t = tcase_create("hostile");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, stray_and_hostile_connections_are_refused_and_the_job_completes);
    tcase_add_test(t, a_replayed_hello_is_refused);
    suite_add_tcase(s, t);
    return run_suite(s);
}
