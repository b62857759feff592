/* coll_init_store: ranks (threads here, each with its own communicator over real
 * sockets) meet through a store the test owns, as a framework's store would be: an
 * in-process table, the same table slowed down, and one where a rank never comes; the
 * sockets' family follows MASTER_ADDR, as torch's store path sets it. */
#include "collective.h"

#include "common/ipv6.h"
#include "common/suite.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_KEYS = 64 };

/* The caller's store: a table under a lock, gets wait on a condition variable. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char key[MAX_KEYS][64];
    void *val[MAX_KEYS];
    size_t len[MAX_KEYS];
    int n, delay_ms, sets, gets;
} table;

static void pause_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int t_set(void *ctx, const char *key, const void *value, size_t len)
{
    table *t = ctx;
    pause_ms(t->delay_ms);
    pthread_mutex_lock(&t->mu);
    int i = 0;
    while (i < t->n && strcmp(t->key[i], key) != 0)
        i++;
    if (i == MAX_KEYS) {
        pthread_mutex_unlock(&t->mu);
        return COLL_ENOMEM;
    }
    if (i == t->n)
        snprintf(t->key[t->n++], 64, "%s", key);
    free(t->val[i]);
    t->val[i] = malloc(len ? len : 1);
    memcpy(t->val[i], value, len);
    t->len[i] = len;
    t->sets++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return COLL_OK;
}

static int t_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    table *t = ctx;
    pause_ms(t->delay_ms);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&t->mu);
    t->gets++;
    for (;;) {
        for (int i = 0; i < t->n; i++)
            if (strcmp(t->key[i], key) == 0) {
                *value = malloc(t->len[i] ? t->len[i] : 1);
                memcpy(*value, t->val[i], t->len[i]);
                *len = t->len[i];
                pthread_mutex_unlock(&t->mu);
                return COLL_OK;
            }
        if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&t->mu);
            return COLL_ETIMEDOUT;
        }
    }
}

static const coll_store_ops ops = {t_set, t_get};

typedef struct {
    table *t;
    int rank, size, rc;
    const char *transport;
    float got;
    char err[512];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = a->transport;
    cfg.timeout_ms = 3000;
    coll_comm *c = NULL;
    a->rc = coll_init_store(&c, &ops, a->t, a->rank, a->size, &cfg);
    snprintf(a->err, sizeof(a->err), "%s", coll_last_error(c));
    if (a->rc == COLL_OK) {
        float v = (float)(a->rank + 1);
        a->rc = coll_allreduce(c, &v, &a->got, 1, COLL_F32, COLL_SUM);
        coll_destroy(c);
    }
    return NULL;
}

/* Runs `size` ranks of which `present` come; returns the table for inspection. */
static void run(table *t, int size, int present, const char *transport, rank_arg *args)
{
    pthread_t th[8];
    for (int r = 0; r < present; r++) {
        args[r] = (rank_arg){.t = t, .rank = r, .size = size, .transport = transport};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
    }
    for (int r = 0; r < present; r++)
        pthread_join(th[r], NULL);
}

static table *table_new(int delay_ms)
{
    table *t = calloc(1, sizeof(*t));
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->delay_ms = delay_ms;
    return t;
}

static void table_free(table *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->val[i]);
    free(t);
}

/* _i = 0: a quick store; 1: every call takes 40 ms. tcp and shm both. */
START_TEST(ranks_meet_through_the_callers_store)
{
    const char *tr[] = {"tcp", "shm"};
    for (int k = 0; k < 2; k++) {
        table *t = table_new(_i ? 40 : 0);
        rank_arg a[4];
        run(t, 4, 4, tr[k], a);
        for (int r = 0; r < 4; r++) {
            ck_assert_msg(a[r].rc == COLL_OK, "%s rank %d: %s (%s)", tr[k], r,
                          coll_strerror(a[r].rc), a[r].err);
            ck_assert_msg(a[r].got == 10.0f, "rank %d got %g", r, a[r].got);
        }
        /* the terms, the job id, one card per rank, rank 0's set of them */
        ck_assert_int_eq(t->sets, 7);
        table_free(t);
    }
}
END_TEST

/* Rank 3 never comes: every other rank times out within its timeout, naming it. */
START_TEST(a_missing_rank_times_out_naming_it)
{
    table *t = table_new(0);
    rank_arg a[4];
    run(t, 4, 3, "tcp", a);
    for (int r = 0; r < 3; r++) {
        ck_assert_msg(a[r].rc == COLL_ETIMEDOUT, "rank %d: %s", r, coll_strerror(a[r].rc));
        ck_assert_msg(strstr(a[r].err, "missing rank(s) 3"), "rank %d: '%s'", r, a[r].err);
    }
    table_free(t);
}
END_TEST

static int failing_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    (void)ctx, (void)key, (void)value, (void)len, (void)timeout_ms;
    return -1000; /* not a COLL_E code: the store's own failure */
}

START_TEST(bad_arguments_and_a_failing_store_are_errors)
{
    coll_comm *c = (coll_comm *)1;
    coll_store_ops none = {NULL, NULL}, broken = {t_set, failing_get};
    table *t = table_new(0);
    ck_assert_int_eq(coll_init_store(&c, NULL, t, 0, 1, NULL), COLL_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(coll_init_store(&c, &none, t, 0, 1, NULL), COLL_EINVAL);
    ck_assert_int_eq(coll_init_store(&c, &ops, t, 2, 2, NULL), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "rank 2"), "%s", coll_last_error(NULL));
    ck_assert_int_eq(coll_init_store(NULL, &ops, t, 0, 1, NULL), COLL_EINVAL);
    ck_assert_int_eq(coll_init_store(&c, &broken, t, 1, 2, NULL), COLL_ESYS);
    table_free(t);
    /* One rank alone needs nothing but its own entries. */
    t = table_new(0);
    ck_assert_int_eq(coll_init_store(&c, &ops, t, 0, 1, NULL), COLL_OK);
    float v = 2, w = 0;
    ck_assert_int_eq(coll_allreduce(c, &v, &w, 1, COLL_F32, COLL_SUM), COLL_OK);
    ck_assert(w == 2.0f);
    coll_destroy(c);
    table_free(t);
}
END_TEST

/* ---- the socket family from MASTER_ADDR (issue 55) ----------------------------------- */

static char said[16384];
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_addresses(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    if (!strstr(msg, "address"))
        return;
    pthread_mutex_lock(&said_mu);
    size_t at = strlen(said);
    snprintf(said + at, sizeof(said) - at, "%s\n", msg);
    pthread_mutex_unlock(&said_mu);
}

/* torch's store path: MASTER_ADDR as torchrun users write it (bare, in brackets), no
 * COLL_SOCKET_FAMILY; lo as the interface, so the family alone picks the address. An
 * IPv4 MASTER_ADDR stays on IPv4. */
START_TEST(the_callers_store_takes_the_family_of_master_addr)
{
    const char *addr[] = {"::1", "[::1]", "127.0.0.1"};
    const char *v6 = "using interface lo address [::1]:0";
    const char *want[] = {v6, v6, "using interface lo address 127.0.0.1:0"};
    if (_i < 2 && !have_ipv6_loopback()) {
        printf("::1 cannot be bound (no IPv6 on loopback): skipped\n");
        return;
    }
    said[0] = 0;
    setenv("MASTER_ADDR", addr[_i], 1);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    unsetenv("COLL_SOCKET_FAMILY");
    coll_set_log(keep_addresses, NULL, COLL_LOG_DEBUG);
    table *t = table_new(0);
    rank_arg a[2];
    run(t, 2, 2, "tcp", a);
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    unsetenv("MASTER_ADDR");
    unsetenv("COLL_SOCKET_IFNAME");
    for (int r = 0; r < 2; r++)
        ck_assert_msg(a[r].rc == COLL_OK && a[r].got == 3.0f, "rank %d: %s (%s), got %g", r,
                      coll_strerror(a[r].rc), a[r].err, a[r].got);
    ck_assert_msg(strstr(said, want[_i]), "MASTER_ADDR=%s: want '%s' in:\n%s", addr[_i],
                  want[_i], said);
    table_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("init_store");
    TCase *t = tcase_create("init_store");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, ranks_meet_through_the_callers_store, 0, 2);
    tcase_add_test(t, a_missing_rank_times_out_naming_it);
    tcase_add_test(t, bad_arguments_and_a_failing_store_are_errors);
    tcase_add_loop_test(t, the_callers_store_takes_the_family_of_master_addr, 0, 3);
    suite_add_tcase(s, t);
    return run_suite(s);
}
