/* The rendezvous attacked where it lives: a file:// directory others can write is
 * refused, naming it and why; a FIFO or a symbolic link planted under a name the store
 * reads or writes neither blocks a rank past its timeout nor lets the library write
 * through it; and the largest timeout (2147483647 ms, "forever") still lets a tcp://
 * job meet, its store dropping no one. Ranks are forked processes; a rank still waiting
 * long after its timeout is killed and counts as hung. */
#include "base/util.h"
#include "collective.h"

#include "common/harness.h"
#include "common/suite.h"

#include <check.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TIMEOUT_MS = 2000, HUNG = 99, MAX_RANKS = 4 };

/* What one rank saw: init's status (then an all-reduce's, when init passed), how long
 * it took, and the error text. */
typedef struct {
    int rc;
    int64_t ms;
    char err[400];
} outcome;

/* A rank: waits for one byte on hold (the test plants what it plants meanwhile), then
 * init (with cfg, or the environment's settings when cfg is NULL) and an all-reduce. */
static outcome rank_run(const char *url, int r, int n, const coll_config *cfg, int hold)
{
    outcome o = {0};
    char go;
    if (hold >= 0 && read(hold, &go, 1) != 1)
        o.rc = COLL_ESYS;
    int64_t t0 = cl_now_ms();
    coll_comm *c = NULL;
    if (o.rc == COLL_OK)
        o.rc = coll_init(&c, url, r, n, cfg);
    o.ms = cl_now_ms() - t0;
    snprintf(o.err, sizeof(o.err), "%s", coll_last_error(NULL));
    int v = r + 1, sum = 0;
    if (o.rc == COLL_OK && (o.rc = coll_allreduce(c, &v, &sum, 1, COLL_I32, COLL_SUM)) ==
                               COLL_OK && sum != n * (n + 1) / 2)
        o.rc = COLL_EMISMATCH;
    coll_destroy(c);
    return o;
}

/* Runs n ranks at url; plant(arg, pids) runs once every rank exists and before any
 * starts. Ranks still running after limit_ms are killed (rc HUNG). */
static void run_job(const char *url, int n, const coll_config *cfg, int limit_ms,
                    void (*plant)(void *arg, const pid_t *pids, int n), void *arg,
                    outcome *out)
{
    pid_t pids[MAX_RANKS];
    int back[MAX_RANKS][2], hold[2];
    ck_assert_int_eq(pipe(hold), 0);
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(pipe(back[r]), 0);
        if ((pids[r] = fork()) == 0) {
            close(hold[1]);
            outcome o = rank_run(url, r, n, cfg, hold[0]);
            _exit(write(back[r][1], &o, sizeof(o)) == (ssize_t)sizeof(o) ? 0 : 1);
        }
        close(back[r][1]);
    }
    close(hold[0]);
    if (plant)
        plant(arg, pids, n);
    char go[MAX_RANKS] = {0};
    ck_assert_int_eq(write(hold[1], go, (size_t)n), n);
    close(hold[1]);
    int64_t until = cl_now_ms() + limit_ms;
    for (int left = n; left > 0 && cl_now_ms() < until;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        left -= p > 0;
        if (p == 0)
            cl_sleep_ms(5);
    }
    for (int r = 0; r < n; r++) {
        out[r] = (outcome){.rc = HUNG};
        if (kill(pids[r], SIGKILL) == 0)
            waitpid(pids[r], NULL, 0);
        if (read(back[r][0], &out[r], sizeof(out[r])) != (ssize_t)sizeof(out[r]))
            out[r] = (outcome){.rc = HUNG, .ms = limit_ms};
        close(back[r][0]);
    }
}

static void fresh_dir(char *dir, char *url, size_t len)
{
    ck_assert_int_eq(dir_url(dir, "coll_rdzv", url, len), 0);
}

static coll_config short_timeout(void)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.timeout_ms = TIMEOUT_MS;
    return cfg;
}

/* A directory whose mode lets others plant names (world- or group-writable, not sticky)
 * fails init at once, the error naming the directory and the reason; a sticky one of
 * this user is taken, as is a private one. */
START_TEST(a_directory_others_can_write_is_refused)
{
    static const struct {
        mode_t mode;
        int ok;
    } cases[] = {{0777, 0}, {0770, 0}, {0722, 0}, {01777, 1}, {0700, 1}, {0755, 1}};
    coll_config cfg = short_timeout();
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char dir[64], url[96];
        outcome o;
        fresh_dir(dir, url, sizeof(url));
        ck_assert_int_eq(chmod(dir, cases[k].mode), 0);
        run_job(url, 1, &cfg, 10 * TIMEOUT_MS, NULL, NULL, &o);
        ck_assert_int_eq(remove_dir(dir), 0);
        printf("mode %04o: %s in %lld ms: %s\n", (unsigned)cases[k].mode, coll_strerror(o.rc),
               (long long)o.ms, o.err);
        if (cases[k].ok) {
            ck_assert_int_eq(o.rc, COLL_OK);
            continue;
        }
        ck_assert_int_eq(o.rc, COLL_EINVAL);
        ck_assert_int_lt(o.ms, TIMEOUT_MS / 2);
        ck_assert_ptr_nonnull(strstr(o.err, dir));
        ck_assert_ptr_nonnull(strstr(o.err, "others can write"));
    }
}
END_TEST

/* Another user's directory: its owner can plant names whatever the mode (only where the
 * test may give a directory away, as root). */
START_TEST(a_directory_of_another_user_is_refused)
{
    char dir[64], url[96];
    outcome o;
    coll_config cfg = short_timeout();
    fresh_dir(dir, url, sizeof(url));
    if (chown(dir, 65534, 65534) != 0) {
        printf("cannot chown (not root?): not tried\n");
        ck_assert_int_eq(remove_dir(dir), 0);
        return;
    }
    ck_assert_int_eq(chmod(dir, 0755), 0);
    run_job(url, 1, &cfg, 10 * TIMEOUT_MS, NULL, NULL, &o);
    ck_assert_int_eq(remove_dir(dir), 0);
    printf("owned by 65534: %s: %s\n", coll_strerror(o.rc), o.err);
    ck_assert_int_eq(o.rc, COLL_EINVAL);
    ck_assert_ptr_nonnull(strstr(o.err, dir));
    ck_assert_ptr_nonnull(strstr(o.err, "uid 65534"));
}
END_TEST

typedef struct {
    const char *dir;
    const char *const *names;
} planting;

static void plant_fifos(void *arg, const pid_t *pids, int n)
{
    (void)pids, (void)n;
    const planting *p = arg;
    for (int k = 0; p->names[k]; k++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", p->dir, p->names[k]);
        ck_assert_int_eq(mkfifo(path, 0600), 0);
    }
}

/* A FIFO under a key name: opening it used to block for good. Under the cards rank 0
 * sets (renamed over the FIFO), the job meets; under the job's record, which is created
 * only where nothing is, it fails, every rank within its timeout. */
START_TEST(a_fifo_at_a_key_name_never_blocks_past_the_timeout)
{
    static const char *const cards[] = {"cards_0", NULL}, *const job[] = {"job", NULL};
    char dir[64], url[96];
    outcome o[2];
    coll_config cfg = short_timeout();
    fresh_dir(dir, url, sizeof(url));
    planting p = {dir, _i == 0 ? cards : job};
    run_job(url, 2, &cfg, 5 * TIMEOUT_MS, plant_fifos, &p, o);
    ck_assert_int_eq(remove_dir(dir), 0);
    for (int r = 0; r < 2; r++) {
        printf("fifo at %s: rank %d: %s in %lld ms: %s\n", p.names[0], r,
               coll_strerror(o[r].rc), (long long)o[r].ms, o[r].err);
        ck_assert_int_ne(o[r].rc, HUNG);
        ck_assert_int_le(o[r].ms, TIMEOUT_MS + 1500);
        if (_i == 0)
            ck_assert_int_eq(o[r].rc, COLL_OK);
        else
            ck_assert_int_ne(o[r].rc, COLL_OK);
    }
}
END_TEST

/* Every name a 2-rank job's store writes or reads, and the temporary names it used to
 * write through (<name>.tmp.<pid>, predictable from outside). */
static const char *const store_names[] = {"job", "addr_0", "addr_1", "cards_0", "clash", NULL};

typedef struct {
    const char *dir;
    const char *victim;
} aim;

static void link_at(const aim *a, const char *name)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/%s", a->dir, name);
    ck_assert_int_eq(symlink(a->victim, path), 0);
}

static void plant_links(void *arg, const pid_t *pids, int n)
{
    const aim *a = arg;
    for (int k = 0; store_names[k]; k++)
        for (int r = 0; r < n; r++) {
            char name[64];
            snprintf(name, sizeof(name), "%s.tmp.%d", store_names[k], (int)pids[r]);
            link_at(a, name);
        }
    link_at(a, "cards_0"); /* read by rank 1 before rank 0 sets it */
}

/* Symbolic links to a victim file under every name the library writes: the victim is
 * never written (nor read as a value), and the job meets. */
START_TEST(a_symlink_at_a_name_it_writes_is_not_followed)
{
    char dir[64], url[96], victim[] = "/tmp/coll_victim.XXXXXX", got[64] = {0};
    static const char precious[] = "the victim's own bytes";
    int fd = mkstemp(victim);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, precious, sizeof(precious)), (ssize_t)sizeof(precious));
    close(fd);
    fresh_dir(dir, url, sizeof(url));
    aim a = {dir, victim};
    outcome o[2];
    coll_config cfg = short_timeout();
    run_job(url, 2, &cfg, 5 * TIMEOUT_MS, plant_links, &a, o);
    ck_assert_int_eq(remove_dir(dir), 0);
    FILE *f = fopen(victim, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(got, 1, sizeof(got), f);
    fclose(f);
    unlink(victim);
    for (int r = 0; r < 2; r++)
        printf("links planted: rank %d: %s in %lld ms: %s\n", r, coll_strerror(o[r].rc),
               (long long)o[r].ms, o[r].err);
    ck_assert_msg(n == sizeof(precious) && memcmp(got, precious, n) == 0,
                  "the victim file now holds %zu bytes: '%.*s'", n, (int)n, got);
    ck_assert_int_eq(o[0].rc, COLL_OK);
    ck_assert_int_eq(o[1].rc, COLL_OK);
}
END_TEST

/* COLL_TIMEOUT_MS=2147483647 (and the operations' own): twice the remaining time
 * overflowed an int in the tcp store, whose server then dropped every client at once.
 * One more is refused, the variable and the largest named. */
START_TEST(the_largest_timeout_lets_a_tcp_job_meet)
{
    char url[64], big[16];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    coll_comm *c = NULL;
    setenv("COLL_TIMEOUT_MS", "2147483648", 1);
    ck_assert_int_eq(coll_init(&c, url, 0, 2, NULL), COLL_EINVAL);
    const char *why = coll_last_error(NULL);
    ck_assert_msg(strstr(why, "COLL_TIMEOUT_MS") && strstr(why, "2147483647"), "%s", why);
    snprintf(big, sizeof(big), "%d", INT_MAX);
    setenv("COLL_TIMEOUT_MS", big, 1);
    setenv("COLL_OP_TIMEOUT_MS", big, 1);
    outcome o[2];
    run_job(url, 2, NULL, 20000, NULL, NULL, o);
    unsetenv("COLL_TIMEOUT_MS");
    unsetenv("COLL_OP_TIMEOUT_MS");
    for (int r = 0; r < 2; r++) {
        printf("timeout %s: rank %d: %s in %lld ms: %s\n", big, r, coll_strerror(o[r].rc),
               (long long)o[r].ms, o[r].err);
        ck_assert_int_eq(o[r].rc, COLL_OK);
    }
}
END_TEST

int main(void)
{
    setbuf(stdout, NULL); /* what a failing test printed is not lost with its process */
    Suite *s = suite_create("hostile-rdzv");
    TCase *t = tcase_create("hostile-rdzv");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_directory_others_can_write_is_refused);
    tcase_add_test(t, a_directory_of_another_user_is_refused);
    tcase_add_loop_test(t, a_fifo_at_a_key_name_never_blocks_past_the_timeout, 0, 2);
    tcase_add_test(t, a_symlink_at_a_name_it_writes_is_not_followed);
    tcase_add_test(t, the_largest_timeout_lets_a_tcp_job_meet);
    suite_add_tcase(s, t);
    return run_suite(s);
}
