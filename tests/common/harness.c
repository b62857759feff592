/* The multi-rank test harness: see harness.h. */
#include "harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int last_exit[64];

int reap_all(const pid_t *pids, int n)
{
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}

/* Below the kernel's ephemeral range (32768 and up here), so no outgoing connection of
 * any process takes the port between this check and the rendezvous binding it. */
int free_port(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        int port = 20000 + (int)(rand_r(&seed) % 12000);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_ANY) };
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return port;
    }
    return -1;
}

int dir_url(char *dir, const char *stem, char *url, size_t len)
{
    snprintf(dir, 64, "/tmp/%s.XXXXXX", stem);
    if (!mkdtemp(dir))
        dir[0] = 0;
    snprintf(url, len, "file://%s", dir);
    return dir[0] ? 0 : -1;
}

int remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) == 0)
        return 0;
    fprintf(stderr, "cannot remove %s\n", dir);
    return -1;
}

static void make_url(const run_opts *o, char *url, size_t len, char *dir)
{
    static int seq;
    const char *host = o->host ? o->host : "127.0.0.1";
    switch (o->rdzv) {
    case RDZV_FILE:
        dir_url(dir, "coll_test", url, len);
        break;
    case RDZV_TCP: {
        int v6 = strchr(host, ':') && host[0] != '[';
        snprintf(url, len, "tcp://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", free_port());
        break;
    }
    case RDZV_ENV: {
        char port[16];
        snprintf(port, sizeof(port), "%d", free_port());
        setenv("MASTER_ADDR", host, 1);
        setenv("MASTER_PORT", port, 1);
        snprintf(url, len, "env://");
        break;
    }
    case RDZV_MEM:
        snprintf(url, len, "mem://test-%d-%d", (int)getpid(), seq++);
        break;
    }
}

static int rank_main(const run_opts *o, const char *url, int rank, rank_fn fn, void *arg)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = o->transport;
    cfg.timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    cfg.op_timeout_ms = o->op_timeout_ms;
    cfg.split_share = o->split_share;
    coll_comm *c = NULL;
    int r = o->rdzv == RDZV_ENV ? -1 : rank, n = o->rdzv == RDZV_ENV ? -1 : o->nranks;
    if (o->rdzv == RDZV_ENV) {
        char v[16];
        snprintf(v, sizeof(v), "%d", rank);
        setenv("RANK", v, 1);
        snprintf(v, sizeof(v), "%d", o->nranks);
        setenv("WORLD_SIZE", v, 1);
    }
    if (o->setup)
        o->setup(rank, arg);
    int rc = coll_init(&c, url, r, n, &cfg);
    if (rc != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init(%s): %s: %s\n", rank, url, coll_strerror(rc),
                coll_last_error(NULL));
        return 100;
    }
    int res = fn(c, arg);
    if (!o->fn_destroys)
        coll_destroy(c);
    fflush(NULL); /* forked ranks leave through _exit */
    return res;
}

typedef struct {
    const run_opts *o;
    const char *url;
    int rank;
    rank_fn fn;
    void *arg;
    int result;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *t = p;
    t->result = rank_main(t->o, t->url, t->rank, t->fn, t->arg);
    return NULL;
}

static int run_threads(const run_opts *o, const char *url, rank_fn fn, void *arg)
{
    pthread_t th[64];
    thread_arg ta[64];
    for (int r = 0; r < o->nranks; r++) {
        ta[r] = (thread_arg){ o, url, r, fn, arg, 0 };
        pthread_create(&th[r], NULL, thread_main, &ta[r]);
    }
    int failed = 0;
    for (int r = 0; r < o->nranks; r++) {
        pthread_join(th[r], NULL);
        last_exit[r] = ta[r].result;
        failed += ta[r].result != 0;
    }
    return failed;
}

/* Waits for every child until the deadline, then kills what is left. */
static int reap(pid_t *pids, int n, int deadline_s)
{
    int failed = 0, left = n;
    time_t end = time(NULL) + deadline_s;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p == 0 && time(NULL) < end) {
            usleep(2000);
            continue;
        }
        if (p == 0) {
            for (int r = 0; r < n; r++)
                if (pids[r] > 0) {
                    fprintf(stderr, "rank %d still running after %d s: killed\n", r, deadline_s);
                    kill(pids[r], SIGKILL);
                }
            end = time(NULL) + 60;
            continue;
        }
        if (p < 0)
            break;
        for (int r = 0; r < n; r++)
            if (pids[r] == p) {
                pids[r] = 0;
                last_exit[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                failed += last_exit[r] != 0;
                left--;
            }
    }
    return failed;
}

int run_ranks(const run_opts *o, rank_fn fn, void *arg)
{
    char url[256], dir[64] = "";
    make_url(o, url, sizeof(url), dir);
    if (o->rdzv == RDZV_MEM)
        return run_threads(o, url, fn, arg);
    pid_t pids[64];
    fflush(NULL);
    for (int r = 0; r < o->nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(rank_main(o, url, r, fn, arg));
    }
    int failed = reap(pids, o->nranks, o->deadline_s ? o->deadline_s : 120);
    if (dir[0])
        remove_dir(dir);
    return failed;
}

int sum_is(coll_comm *c, int mine, int want)
{
    int sum = 0;
    EXPECT_RC(coll_allreduce(c, &mine, &sum, 1, COLL_I32, COLL_SUM), COLL_OK);
    FAIL_IF(sum != want, "all-reduce %d, want %d", sum, want);
    return 0;
}

int identical_everywhere(coll_comm *c, const void *buf, size_t bytes)
{
    uint64_t h = 1469598103934665603ULL, first;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ULL;
    first = h; /* a broadcast: what COLL_ALGO forces may not run an all-gather here */
    return coll_broadcast(c, &first, 1, COLL_I64, 0) == COLL_OK && first == h;
}

int einval_on_split(coll_comm *c, misuse_fn fn, int k, void *arg, const char *what)
{
    coll_comm *s = NULL;
    float f = 0;
    EXPECT_RC(coll_split(c, 0, coll_rank(c), &s), COLL_OK);
    int rc = fn(s, k, arg);
    char said[512];
    snprintf(said, sizeof(said), "%s", coll_last_error(s));
    int after = coll_allreduce(s, &f, &f, 1, COLL_F32, COLL_SUM);
    coll_destroy(s);
    FAIL_IF(rc != COLL_EINVAL, "misuse %d: %s, not COLL_EINVAL", k, coll_strerror(rc));
    FAIL_IF(!strstr(said, what), "misuse %d: '%s' should name '%s'", k, said, what);
    FAIL_IF(after != COLL_ESTATE, "misuse %d: then %s, not COLL_ESTATE", k, coll_strerror(after));
    return 0;
}
