/* coll_status against a running job of 4 forked ranks in a loop of all-reduces, the way
 * an operator uses it: one rank stopped with SIGSTOP is named ("no answer (stopped?)")
 * with the others' current all-reduce and whom they wait on, within 5 s, in text and in
 * JSON (checked by Python's json); with rank 0 itself stopped, the tool says so within its
 * bound and another rank's endpoint (--rank-addr) answers for the job; with COLL_SECRET,
 * an ask without it or with another is refused, and garbage and a flood of asks at the
 * rendezvous's port neither stop the all-reduces nor the tool's next answer. The
 * timeouts are long (60 s): the survivors are still waiting when the tool asks. And the
 * diagnosis: when a rank stays in its own code instead of issuing the next all-reduce,
 * the others' operation timeout ends their wait with a sentence that names it and its
 * newest collective, from its answer to their survey. Every communicator of the
 * processes is listed: a split (its own links, or its root's) with its label, a stopped
 * rank of it named by its global rank; and a job met through a caller's store is asked
 * at MASTER_ADDR:MASTER_PORT. */
#include "base/util.h"
#include "common/harness.h"
#include "core/status.h"

#include "common/suite.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NP = 4, TIMEOUT_MS = 60000, COUNT = 1 << 14, ANSWER_MS = 5000 };

/* How the ranks meet and what they reduce over: coll_init's communicator; a split of it
 * (into even and odd ranks, its own links or, SPLIT_SHARED, its root's); or a
 * communicator made through a caller's store (a directory here, as torch's is its
 * TCPStore) with MASTER_ADDR and MASTER_PORT set, labelled as collective.torch does. */
enum { WORLD, SPLIT, SPLIT_SHARED, STORE, GROW };
static int mode;
static char store_dir[64];
static char *grow_id; /* GROW: rank 0's id for the newcomer, in memory shared with it */

static atomic_int *iters; /* per rank, in memory shared with the parent */
static char (*said)[600]; /* per rank: coll_last_error after its loop ended */
static pid_t pids[NP];
static char url[64];
static int port;

/* The caller's store: a file per key ('/' as '_'), written whole by a rename. */
static void key_path(const char *dir, const char *key, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, key);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        *p = *p == '/' ? '_' : *p;
}

static int dir_set(void *ctx, const char *key, const void *value, size_t len)
{
    char path[256], tmp[300];
    key_path(ctx, key, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(value, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0)
        return COLL_ESYS;
    return COLL_OK;
}

static int dir_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    char path[256];
    key_path(ctx, key, path, sizeof(path));
    for (int64_t end = cl_now_ms() + timeout_ms;; cl_sleep_ms(5)) {
        FILE *f = fopen(path, "rb");
        if (f) {
            *value = malloc(4096);
            *len = *value ? fread(*value, 1, 4096, f) : 0;
            fclose(f);
            return *value ? COLL_OK : COLL_ENOMEM;
        }
        if (cl_now_ms() >= end)
            return COLL_ETIMEDOUT;
    }
}

/* GROW's communicator: coll_init's NP - 1 ranks grown by the newcomer, rank NP - 1. */
static coll_comm *grow(int rank, coll_config *cfg)
{
    coll_comm *c = NULL, *g = NULL;
    if (rank == NP - 1) {
        while (!atomic_load((atomic_char *)grow_id))
            cl_sleep_ms(5);
        return coll_init_grow(&g, grow_id, cfg) == COLL_OK ? g : NULL;
    }
    char id[COLL_GROW_ID_BYTES];
    if (coll_init(&c, url, rank, NP - 1, cfg) != COLL_OK ||
        (rank == 0 && coll_grow_id(c, NP, id, sizeof(id)) != COLL_OK))
        return NULL;
    if (rank == 0) {
        memcpy(grow_id + 1, id + 1, sizeof(id) - 1);
        atomic_store((atomic_char *)grow_id, id[0]); /* the first byte last: it is whole */
    }
    return coll_grow(c, &g) == COLL_OK ? g : NULL; /* c stays */
}

/* The communicator the ranks reduce over, as mode says. */
static coll_comm *meet(int rank, coll_config *cfg)
{
    static const coll_store_ops dir_ops = {dir_set, dir_get};
    coll_comm *c = NULL, *s = NULL;
    cfg->split_share = mode == SPLIT_SHARED;
    if (mode == STORE) {
        char p[16];
        snprintf(p, sizeof(p), "%d", port);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", p, 1);
        if (coll_init_store(&c, &dir_ops, store_dir, rank, NP, cfg) != COLL_OK ||
            coll_comm_set_label(c, "0", rank) != COLL_OK)
            return NULL;
        return c;
    }
    if (mode == GROW) /* ranks 0..NP-2 grow to NP: rank NP-1 is the newcomer */
        return grow(rank, cfg);
    if (coll_init(&c, url, rank, NP, cfg) != COLL_OK || mode == WORLD)
        return c;
    if (c && coll_split(c, rank % 2, rank, &s) == COLL_OK &&
        coll_comm_set_label(s, rank % 2 ? "odd" : "even", -1) == COLL_OK)
        return s; /* c stays: the split's parent */
    return NULL;
}

/* skip: the all-reduce after which rank NP - 1 stays in its own code (0: never). */
static void rank_main(int rank, const char *secret, int skip)
{
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = "shm";
    cfg.timeout_ms = TIMEOUT_MS;
    cfg.op_timeout_ms = skip ? 2000 : TIMEOUT_MS;
    if (secret)
        setenv("COLL_SECRET", secret, 1);
    coll_comm *c = meet(rank, &cfg);
    if (!c) {
        fprintf(stderr, "rank %d: init: %s\n", rank, coll_last_error(NULL));
        _exit(2);
    }
    float *buf = calloc(COUNT, sizeof(float));
    while (buf && coll_allreduce(c, buf, buf, COUNT, COLL_F32, COLL_SUM) == COLL_OK)
        if (atomic_fetch_add(&iters[rank], 1) + 1 == skip && rank == NP - 1)
            pause(); /* busy elsewhere: its library thread still answers */
    snprintf(said[rank], sizeof(said[rank]), "%s", coll_last_error(c));
    _exit(3); /* the parent kills the ranks: ending on its own is a failure */
}

static void start_ranks_skipping(const char *secret, int skip)
{
    port = free_port();
    memset(grow_id, 0, COLL_GROW_ID_BYTES);
    if (mode == STORE) {
        snprintf(store_dir, sizeof(store_dir), "/tmp/coll-status-store-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(store_dir));
    }
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    for (int r = 0; r < NP; r++) {
        atomic_store(&iters[r], 0);
        said[r][0] = 0;
        if ((pids[r] = fork()) == 0)
            rank_main(r, secret, skip);
        ck_assert_int_gt(pids[r], 0);
    }
}

static void start_ranks(const char *secret)
{
    start_ranks_skipping(secret, 0);
}

static void end_ranks(void)
{
    for (int r = 0; r < NP; r++) {
        kill(pids[r], SIGKILL);
        kill(pids[r], SIGCONT);
        waitpid(pids[r], NULL, 0);
    }
    if (mode == STORE) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", store_dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    mode = WORLD;
}

/* Every rank did at least n more all-reduces than `from` (NULL: 0) within 30 s. */
static int progress(const int *from, int n)
{
    int64_t deadline = cl_now_ms() + 30000;
    for (int r = 0; r < NP; r++)
        while (atomic_load(&iters[r]) < (from ? from[r] : 0) + n)
            if (cl_now_ms() >= deadline)
                return 0;
            else
                cl_sleep_ms(5);
    return 1;
}

typedef struct run {
    int status;   /* the tool's exit status, -1 when it did not exit */
    int64_t took; /* ms */
    char out[16384];
} run;

/* Runs the tool with args (and COLL_SECRET=secret, or none), output and errors into r. */
static void status_tool(const char *args, const char *secret, run *r)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s%s %s %s 2>&1", secret ? "COLL_SECRET=" : "env -u COLL_SECRET",
             secret ? secret : "", COLL_STATUS, args);
    int64_t t0 = cl_now_ms();
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    size_t n = fread(r->out, 1, sizeof(r->out) - 1, p);
    r->out[n] = 0;
    int st = pclose(p);
    r->took = cl_now_ms() - t0;
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Python's verdict on the tool's JSON output: `check` is an expression over d (the
 * object); 1 when it parses and holds. */
static int json_holds(const char *json, const char *check)
{
    char path[] = "/tmp/coll-status-XXXXXX", cmd[1024];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import json,os,sys; d=json.load(open(sys.argv[1])); "
             "sys.exit(0 if eval(os.environ[\"CHECK\"]) else 1)' %s",
             path);
    setenv("CHECK", check, 1); /* no quoting to get wrong */
    int st = system(cmd), ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    unlink(path);
    if (!ok) /* here, not in the assertion: Check cuts a message past 4 KiB (and exits 2) */
        fprintf(stderr, "the JSON does not hold %s:\n%s\n", check, json);
    return ok;
}

/* Rank `victim` stopped: named as silent, the others' all-reduce and their wait on it. */
static void judge_stopped(const run *r, int victim)
{
    char check[700];
    ck_assert_msg(r->status == 1 && r->took < ANSWER_MS,
                  "exit %d after %lld ms, want 1 within %d ms:\n%s", r->status, (long long)r->took,
                  ANSWER_MS, r->out);
    snprintf(check, sizeof(check),
             "d['size'] == %d and d['stragglers'] == [%d] and "
             "d['ranks'][%d]['answered'] is False and "
             "d['ranks'][%d]['straggler'] == 'no answer (stopped?)' and "
             "all(x['answered'] and x['op']['kind'] == 'allreduce' and "
             "x['op']['state'] == 'running' and x['op']['count'] == %d and "
             "%d in x['waiting_on'] for x in d['ranks'] if x['rank'] != %d)",
             NP, victim, victim, victim, COUNT, victim, victim);
    ck_assert_msg(json_holds(r->out, check), "the JSON does not hold the check (on stderr)");
}

START_TEST(a_stopped_rank_is_named_with_the_others_operations_within_5_s)
{
    run r;
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    kill(pids[2], SIGSTOP);
    cl_sleep_ms(200); /* the others reach the all-reduce rank 2 is not in */
    char args[128];
    snprintf(args, sizeof(args), "--json %s", url);
    status_tool(args, NULL, &r);
    end_ranks();
    judge_stopped(&r, 2);
}
END_TEST

START_TEST(the_text_names_the_stopped_rank_and_the_others_all_reduce)
{
    run r;
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    kill(pids[1], SIGSTOP);
    cl_sleep_ms(200);
    status_tool(url, NULL, &r);
    end_ranks();
    ck_assert_msg(r.status == 1 && r.took < ANSWER_MS, "exit %d after %lld ms:\n%s", r.status,
                  (long long)r.took, r.out);
    ck_assert_msg(strstr(r.out, "rank 1: no answer (stopped?)") &&
                      strstr(r.out, "straggler: rank 1: no answer (stopped?)"),
                  "rank 1 is not named:\n%s", r.out);
    for (int k = 0; k < NP; k++) {
        char want[64];
        snprintf(want, sizeof(want), "rank %d (pid %d", k, (int)pids[k]);
        ck_assert_msg(k == 1 || strstr(r.out, want), "no '%s' in:\n%s", want, r.out);
    }
    ck_assert_msg(strstr(r.out, "allreduce #") && strstr(r.out, "waiting on rank 1"),
                  "no all-reduce waiting on rank 1 in:\n%s", r.out);
}
END_TEST

/* Rank 0 holds the address the ranks met at: stopped, it answers nothing, and the tool
 * says so within its bound (never a hang); any other rank tells the job's endpoints. */
START_TEST(with_rank_0_stopped_another_rank_answers_for_the_job)
{
    run r;
    char args[160], ep[80];
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    snprintf(args, sizeof(args), "--json %s", url);
    status_tool(args, NULL, &r);
    const char *at = strstr(r.out, "\"rank\": 1, \"endpoint\": \"");
    ck_assert_msg(at && sscanf(at + strlen("\"rank\": 1, \"endpoint\": \""), "%71[^\"]", ep) == 1,
                  "no endpoint of rank 1 in:\n%s", r.out);
    kill(pids[0], SIGSTOP);
    cl_sleep_ms(200);
    status_tool(url, NULL, &r);
    ck_assert_msg(r.status == 2 && r.took < 2000 + 1000 && strstr(r.out, "no answer from") &&
                      strstr(r.out, "--rank-addr"),
                  "exit %d after %lld ms, want 2 within 3 s saying so:\n%s", r.status,
                  (long long)r.took, r.out);
    snprintf(args, sizeof(args), "--json --rank-addr %s", ep);
    status_tool(args, NULL, &r);
    end_ranks();
    judge_stopped(&r, 0);
}
END_TEST

/* Datagrams at the rendezvous's port: garbage of every length, then a flood of asks. */
static void pelt(int count)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    char junk[2048];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)(i * 131 + 7);
    for (int i = 0; i < count; i++)
        (void)sendto(fd, junk, (size_t)(i % 200), 0, (struct sockaddr *)&to, sizeof(to));
    /* A well-formed ask without the tag: the length and magic of the real thing. */
    cl_status_ask ask = {
        .magic = CL_STATUS_MAGIC, .version = CL_STATUS_VERSION, .kind = CL_STATUS_HEAD};
    for (int i = 0; i < count; i++)
        (void)sendto(fd, &ask, sizeof(ask), 0, (struct sockaddr *)&to, sizeof(to));
    close(fd);
}

/* The length of the answer to `len` bytes of ask (tagless, for HEAD) sent to the
 * rendezvous's port: 0 when none came within 500 ms. */
static long answer_to(size_t len)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval wait = {.tv_usec = 500000};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    cl_status_ask ask = {
        .magic = CL_STATUS_MAGIC, .version = CL_STATUS_VERSION, .kind = CL_STATUS_HEAD};
    cl_status_answer a;
    (void)sendto(fd, &ask, len, 0, (struct sockaddr *)&to, sizeof(to));
    ssize_t got = recv(fd, &a, sizeof(a), 0);
    close(fd);
    return got > 0 ? (long)got : 0;
}

/* Where the job has no secret, the endpoint answers whoever asks, a forged source too:
 * an answer is never longer than the ask that asked for it (a short ask is dropped). */
START_TEST(an_answer_is_never_longer_than_its_ask)
{
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 1), "the ranks did not reduce");
    long to_short = answer_to(64), to_whole = answer_to(sizeof(cl_status_ask));
    end_ranks();
    ck_assert_msg(to_short == 0, "a 64-byte ask got %ld bytes back", to_short);
    ck_assert_msg(to_whole > 0 && to_whole <= (long)sizeof(cl_status_ask),
                  "a %zu-byte ask got %ld bytes back", sizeof(cl_status_ask), to_whole);
}
END_TEST

START_TEST(with_a_secret_an_ask_without_it_is_refused_and_a_flood_changes_nothing)
{
    run r;
    int before[NP];
    start_ranks("status-secret");
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    status_tool(url, NULL, &r);
    ck_assert_msg(r.status == 2 && strstr(r.out, "refused") && strstr(r.out, "has none"),
                  "without the secret: exit %d:\n%s", r.status, r.out);
    status_tool(url, "another-secret", &r);
    ck_assert_msg(r.status == 2 && strstr(r.out, "refused") && strstr(r.out, "not the job's"),
                  "with another secret: exit %d:\n%s", r.status, r.out);
    for (int k = 0; k < NP; k++)
        before[k] = atomic_load(&iters[k]);
    pelt(20000);
    ck_assert_msg(progress(before, 10), "the all-reduces stopped under the flood");
    char args[128];
    snprintf(args, sizeof(args), "--json %s", url);
    status_tool(args, "status-secret", &r);
    end_ranks();
    ck_assert_msg(r.status == 0 || r.status == 1, "with the secret: exit %d:\n%s", r.status, r.out);
    ck_assert_msg(json_holds(r.out, "d['size'] == 4 and all(x['answered'] for x in d['ranks'])"),
                  "with the secret, not every rank answered:\n%s", r.out);
}
END_TEST

START_TEST(a_rank_that_never_issued_the_collective_is_named_in_the_others_error)
{
    enum { SKIP = 5 };
    start_ranks_skipping(NULL, SKIP);
    int64_t deadline = cl_now_ms() + 30000;
    for (int r = 0; r < NP - 1; r++) /* the survivors end their loop by the op timeout */
        while (waitpid(pids[r], NULL, WNOHANG) == 0 && cl_now_ms() < deadline)
            cl_sleep_ms(10);
    end_ranks();
    char want[128];
    snprintf(want, sizeof(want),
             "rank %d never issued allreduce #%d (its newest: allreduce #%d, done", NP - 1,
             SKIP + 1, SKIP);
    for (int r = 0; r < NP - 1; r++)
        ck_assert_msg(strstr(said[r], want), "rank %d: '%s' does not say '%s'", r, said[r], want);
}
END_TEST

/* A split (its own links, _i 0, or its root's, _i 1) is listed by every process with its
 * label, grouped per communicator: rank 2, stopped, is rank 1 of 'even', named there
 * with its global rank (its process's in coll_init's) while rank 0 of 'even' is shown in
 * its all-reduce; 'odd' has no straggler. */
START_TEST(a_split_is_listed_with_its_stopped_rank_and_the_others_operation)
{
    run r, text;
    char args[128];
    mode = _i ? SPLIT_SHARED : SPLIT;
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    kill(pids[2], SIGSTOP);
    cl_sleep_ms(200);
    snprintf(args, sizeof(args), "--json %s", url);
    status_tool(args, NULL, &r);
    status_tool(url, NULL, &text);
    end_ranks();
    ck_assert_msg(strstr(text.out, "communicator ") && strstr(text.out, " 'even', 2 ranks") &&
                      strstr(text.out, "rank 1 (global 2): no answer (stopped?)"),
                  "the text does not name rank 1 of 'even' (global 2):\n%s", text.out);
    ck_assert_msg(r.status == 1 && r.took < ANSWER_MS, "exit %d after %lld ms:\n%s", r.status,
                  (long long)r.took, r.out);
    char check[1400];
    snprintf(check, sizeof(check),
        "len(d['communicators']) == 2 and "
        "all((c['parent'] is not None) == %d for c in d['communicators']) and "
        "[(c['label'], c['size'], c['stragglers']) for c in d['communicators']] in "
        "([('even', 2, [1]), ('odd', 2, [])], [('odd', 2, []), ('even', 2, [1])]) and "
        "all(x['answered'] and x['op']['kind'] == 'allreduce' and x['global'] == x['rank'] * 2 + "
        "(c['label'] == 'odd') for c in d['communicators'] for x in c['ranks'] "
        "if (c['label'], x['rank']) != ('even', 1)) and "
        "[(x['answered'], x['global'], x['straggler']) for c in d['communicators'] "
        "for x in c['ranks'] if (c['label'], x['rank']) == ('even', 1)] == "
        "[(False, 2, 'no answer (stopped?)')] and "
        "[x['op']['state'] for c in d['communicators'] for x in c['ranks'] "
        "if (c['label'], x['rank']) == ('even', 0)] == ['running']", _i);
    ck_assert_msg(json_holds(r.out, check), "the JSON does not hold the check (on stderr)");
}
END_TEST

/* The ranks of `m` reduce, rank `victim` is stopped, and the tool asks as JSON (into *r)
 * within its bound, naming one straggler (exit 1). */
static void stop_and_ask(int m, int victim, run *r)
{
    char args[128];
    mode = m;
    start_ranks(NULL);
    ck_assert_msg(progress(NULL, 10), "the ranks did not reduce");
    kill(pids[victim], SIGSTOP);
    cl_sleep_ms(200);
    snprintf(args, sizeof(args), "--json %s", url);
    status_tool(args, NULL, r);
    end_ranks();
    ck_assert_msg(r->status == 1 && r->took < ANSWER_MS, "exit %d after %lld ms:\n%s",
                  r->status, (long long)r->took, r->out);
}

/* Ranks that met through a caller's store (as torch's) with MASTER_ADDR and MASTER_PORT
 * set: coll_status at that address answers, names the stopped rank, shows the label. */
START_TEST(a_job_met_through_a_callers_store_is_asked_at_master_port)
{
    run r;
    stop_and_ask(STORE, 1, &r);
    const char *check = "d['label'] == '0' and d['stragglers'] == [1] and d['size'] == 4 and "
                        "d['communicators'] == [] and "
                        "all(x['op']['kind'] == 'allreduce' for x in d['ranks'] if x['rank'] != 1)";
    ck_assert_msg(json_holds(r.out, check), "the JSON does not hold the check (on stderr)");
}
END_TEST

/* A grown communicator: its newcomer is in no communicator the tool reaches first, so
 * the tool finds it through the grown one's endpoints and asks it; rank 1, stopped, is
 * named there too. */
START_TEST(a_grown_communicators_newcomer_is_found_and_shown)
{
    run r;
    stop_and_ask(GROW, 1, &r);
    const char *check =
        "d['size'] == 3 and d['stragglers'] == [1] and len(d['communicators']) == 1 and "
        "d['communicators'][0]['size'] == 4 and d['communicators'][0]['stragglers'] == [1] and "
        "[(x['answered'], x['world']) for x in d['communicators'][0]['ranks']] == "
        "[(True, 0), (False, 1), (True, 2), (True, -1)] and "
        "d['communicators'][0]['ranks'][3]['op']['kind'] == 'allreduce'";
    ck_assert_msg(json_holds(r.out, check), "the JSON does not hold the check (on stderr)");
}
END_TEST

int main(void)
{
    iters =
        mmap(NULL, NP * sizeof(*iters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    said =
        mmap(NULL, NP * sizeof(*said), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    grow_id =
        mmap(NULL, COLL_GROW_ID_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (iters == MAP_FAILED || said == MAP_FAILED || grow_id == MAP_FAILED)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("status");
    TCase *t = tcase_create("status");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_stopped_rank_is_named_with_the_others_operations_within_5_s);
    tcase_add_test(t, the_text_names_the_stopped_rank_and_the_others_all_reduce);
    tcase_add_test(t, with_rank_0_stopped_another_rank_answers_for_the_job);
    tcase_add_test(t, with_a_secret_an_ask_without_it_is_refused_and_a_flood_changes_nothing);
    tcase_add_test(t, a_rank_that_never_issued_the_collective_is_named_in_the_others_error);
    tcase_add_test(t, an_answer_is_never_longer_than_its_ask);
    tcase_add_loop_test(t, a_split_is_listed_with_its_stopped_rank_and_the_others_operation, 0, 2);
    tcase_add_test(t, a_job_met_through_a_callers_store_is_asked_at_master_port);
    suite_add_tcase(s, t);
    TCase *g = tcase_create("grow"); /* a case of its own: CK_RUN_CASE=grow runs it alone */
    tcase_set_timeout(g, 60);
    tcase_add_test(g, a_grown_communicators_newcomer_is_found_and_shown);
    suite_add_tcase(s, g);
    return run_suite(s);
}
