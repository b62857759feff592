/* COLL_SECRET holds: ranks that share it run (and shrink, over lifelines that check the
 * secret too); a rank with another secret cannot read or write the store (every value
 * carries a tag), so it never joins and every rank's init times out naming it; an
 * address forged in the store by someone without the secret is ignored (the rank waits
 * for the rightful one, then times out naming it), never connected to; a stranger who
 * connects first as a rank, with everything the store shows but no proof, fails init. */
#include "base/util.h"
#include "collective.h"

#include "common/harness.h"
#include "common/stranger.h"
#include "common/suite.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 3, TIMEOUT_MS = 2000 };

/* What a rank does with its secret: init, an all-reduce, a shrink of the healthy
 * communicator, an all-reduce on that; the init status is the exit code's story. */
static int rank_body(const char *url, int r, int n, const char *secret, int want_init)
{
    setenv("COLL_SECRET", secret, 1);
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    coll_comm *c = NULL, *s = NULL;
    int rc = coll_init(&c, url, r, n, &cfg);
    if (rc != want_init) {
        fprintf(stderr, "rank %d: init %s, want %s: %s\n", r, coll_strerror(rc),
                coll_strerror(want_init), coll_last_error(NULL));
        return 1;
    }
    if (rc != COLL_OK)
        return r < n - 1 && !strstr(coll_last_error(NULL), "missing rank(s) 2") ? 2 : 0;
    int v = r + 1, sum = 0;
    rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM);
    if (rc == COLL_OK)
        rc = coll_shrink(c, &s);
    if (rc == COLL_OK)
        rc = coll_allreduce(s, &v, &sum, 1, COLL_I32, COLL_SUM);
    coll_destroy(s);
    coll_destroy(c);
    if (rc != COLL_OK || sum != n * (n + 1) / 2) {
        fprintf(stderr, "rank %d: %s, sum %d\n", r, coll_strerror(rc), sum);
        return 1;
    }
    return 0;
}

static void fresh_dir(char *dir, char *url, size_t len)
{
    ck_assert_int_eq(dir_url(dir, "coll_secret", url, len), 0);
}

/* _i = 0: every rank has the secret; 1: rank 2 has another. */
START_TEST(only_ranks_with_the_secret_connect)
{
    char dir[64], url[96];
    fresh_dir(dir, url, sizeof(url));
    pid_t pids[N];
    for (int r = 0; r < N; r++)
        if ((pids[r] = fork()) == 0) {
            int odd = _i && r == N - 1;
            _exit(rank_body(url, r, N, odd ? "other" : "s3cret", _i ? COLL_ETIMEDOUT : COLL_OK));
        }
    int64_t t0 = cl_now_ms();
    int bad = reap_all(pids, N);
    ck_assert_int_eq(remove_dir(dir), 0);
    ck_assert_msg(bad == 0, "%d ranks behaved otherwise", bad);
    ck_assert_msg(cl_now_ms() - t0 < 4 * TIMEOUT_MS, "took %lld ms", (long long)(cl_now_ms() - t0));
}
END_TEST

/* Someone without the secret writes rank 1's address before rank 1 exists: rank 0
 * ignores it and times out naming rank 1, instead of connecting to the impostor. */
START_TEST(a_forged_address_is_ignored)
{
    char dir[64], url[96], path[128];
    fresh_dir(dir, url, sizeof(url));
    snprintf(path, sizeof(path), "%s/addr_1", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    char forged[256] = "127.0.0.1:9"; /* the shape of a card, no tag */
    fwrite(forged, 1, sizeof(forged), f);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("COLL_SECRET", "s3cret", 1);
        coll_config cfg = COLL_CONFIG_INIT;
        cfg.timeout_ms = TIMEOUT_MS;
        cfg.transport = "tcp";
        coll_comm *c = NULL;
        int rc = coll_init(&c, url, 0, 2, &cfg);
        const char *e = coll_last_error(NULL);
        _exit(rc == COLL_ETIMEDOUT && strstr(e, "missing rank(s) 1") ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_int_eq(remove_dir(dir), 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 0 did not ignore the forgery");
}
END_TEST

/* Reads a store file (the store's values are readable without the secret). */
static size_t read_value(const char *dir, const char *name, void *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int t = 0; t < 500; t++) {
        FILE *f = fopen(path, "rb");
        size_t n = f ? fread(buf, 1, cap, f) : 0;
        if (f)
            fclose(f);
        if (n)
            return n;
        cl_sleep_ms(10);
    }
    return 0;
}

/* Connects to rank 0 as rank 1 on channel 0, before the real rank 1, with the job id and
 * address read from the store, a hello that passes every other check, a made-up proof,
 * and a first message. */
static int impostor(const char *dir)
{
    uint64_t job = 0;
    char handle[129] = {0}, ip[64];
    unsigned port;
    if (read_value(dir, "job", &job, sizeof(job)) != sizeof(job) ||
        !read_value(dir, "addr_0", handle, 128) || sscanf(handle, "%63[^:]:%u", ip, &port) != 2)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        return -1;
    hello h = {STRANGER_HELLO_MAGIC, STRANGER_PROTO, 1, job, 0, 1, 0, 2, 1, {7}};
    header first = {.magic = STRANGER_MSG_MAGIC, .len = 32};
    uint8_t proof[32] = {42};
    (void)!write(fd, &h, sizeof(h));
    (void)!write(fd, &first, sizeof(first));
    (void)!write(fd, proof, sizeof(proof));
    return fd;
}

/* The impostor comes first and is refused (its link never takes rank 1's place): the real
 * rank 1's link is the one rank 0 receives from, so the all-reduce adds up. */
static int init_and_sum(int r, const char *url)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = 3000;
    cfg.transport = "tcp";
    coll_comm *c = NULL;
    int rc = coll_init(&c, url, r, 2, &cfg);
    float x = (float)(r + 1), sum = 0;
    if (rc == COLL_OK)
        rc = coll_allreduce(c, &x, &sum, 1, COLL_F32, COLL_SUM);
    fprintf(stderr, "rank %d: %s: %s (sum %g)\n", r, coll_strerror(rc), coll_last_error(c), sum);
    coll_destroy(c);
    return rc != COLL_OK || sum != 3.0f;
}

START_TEST(a_connection_without_the_proof_is_refused)
{
    char dir[64], url[96];
    fresh_dir(dir, url, sizeof(url));
    setenv("COLL_SECRET", "s3cret", 1);
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0) {
            char go[96];
            snprintf(go, sizeof(go), "%s/impostor_connected", dir);
            for (int t = 0; r == 1 && t < 1000 && access(go, F_OK) != 0; t++)
                cl_sleep_ms(10); /* the real rank 1 comes after the impostor */
            _exit(init_and_sum(r, url));
        }
    int fd = impostor(dir);
    char go[96];
    snprintf(go, sizeof(go), "%s/impostor_connected", dir);
    fclose(fopen(go, "w"));
    int bad = reap_all(pids, 2);
    if (fd >= 0)
        close(fd);
    ck_assert_int_eq(remove_dir(dir), 0);
    ck_assert_msg(fd >= 0, "the impostor could not connect");
    ck_assert_msg(bad == 0, "%d ranks behaved otherwise", bad);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("secret");
    TCase *t = tcase_create("secret");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, only_ranks_with_the_secret_connect, 0, 2);
    tcase_add_test(t, a_forged_address_is_ignored);
    tcase_add_test(t, a_connection_without_the_proof_is_refused);
    suite_add_tcase(s, t);
    return run_suite(s);
}
