/* COLL_SECRET holds: ranks that share it run (and shrink, over lifelines that check the
 * secret too); a rank with another secret cannot read or write the store (every value
 * carries a tag), so it never joins and every rank's init times out naming it; an
 * address forged in the store by someone without the secret is ignored (the rank waits
 * for the rightful one, then times out naming it), never connected to. */
#include "base/util.h"
#include "collective.h"

#include "common/suite.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    strcpy(dir, "/tmp/coll_secret.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(url, len, "file://%s", dir);
}

static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
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
    int bad = 0;
    for (int r = 0; r < N; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    remove_dir(dir);
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
    remove_dir(dir);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 0 did not ignore the forgery");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("secret");
    TCase *t = tcase_create("secret");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, only_ranks_with_the_secret_connect, 0, 2);
    tcase_add_test(t, a_forged_address_is_ignored);
    suite_add_tcase(s, t);
    return run_suite(s);
}
