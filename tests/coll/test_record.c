/* The flight recorder through the public API on real processes: what coll_recorder_read
 * returns after real collectives (kinds, counts, roots, sequence numbers, states), how
 * many it keeps, the JSON file coll_recorder_dump writes (parsed by python3's json), the
 * file each survivor writes into COLL_RECORDER_DIR when a peer is killed or never comes,
 * and coll_analyze's verdict on those files; a directory that cannot be written is a
 * warning, never a failed collective, on a dump asked for by call or by signal. */
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <glob.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef ANALYZE
#define ANALYZE "tools/coll_analyze.py"
#endif

enum { MAXREC = 256 };

static int run(int n, rank_fn fn, void *arg, int op_timeout_ms)
{
    run_opts o = {.nranks = n, .rdzv = RDZV_FILE, .timeout_ms = 5000,
                  .op_timeout_ms = op_timeout_ms, .deadline_s = 60};
    return run_ranks(&o, fn, arg);
}

/* The records of this rank's collectives since `from` (a sequence number). */
static int records_since(coll_comm *c, uint32_t from, coll_record *out, int max)
{
    coll_record all[MAXREC];
    int n = coll_recorder_read(c, all, MAXREC), k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (all[i].seq >= from)
            out[k++] = all[i];
    return k;
}

/* The sequence number the next collective will get. */
static uint32_t next_seq(coll_comm *c)
{
    coll_record all[MAXREC];
    int n = coll_recorder_read(c, all, MAXREC);
    return n > 0 ? all[n - 1].seq + 1 : 1;
}

static int check_record(coll_comm *c, const coll_record *x, uint32_t seq, const char *kind,
                        size_t count, int root)
{
    FAIL_IF(x->seq != seq || strcmp(x->kind, kind) != 0 || x->count != count || x->root != root,
            "expected %s #%u of %zu root %d, got %s #%u of %zu root %d", kind, seq, count, root,
            x->kind, x->seq, x->count, x->root);
    FAIL_IF(x->state != COLL_REC_DONE || x->status != COLL_OK,
            "%s #%u: state %d status %d, expected done and ok", kind, seq, x->state, x->status);
    FAIL_IF(!x->algo[0], "%s #%u: no algorithm", kind, seq);
    FAIL_IF(!(x->issued_us > 0 && x->issued_us <= x->started_us && x->started_us <= x->ended_us),
            "%s #%u: times issued %lld started %lld ended %lld", kind, seq,
            (long long)x->issued_us, (long long)x->started_us, (long long)x->ended_us);
    FAIL_IF(x->progress_us != x->ended_us, "%s #%u: progress %lld, ended %lld", kind, seq,
            (long long)x->progress_us, (long long)x->ended_us);
    return 0;
}

/* Four collectives of different kinds, one non-blocking: each has its record, in order. */
static int read_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float f[16] = {1};
    int32_t b[8] = {0};
    uint32_t s = next_seq(c);
    coll_req *q;
    EXPECT_RC(coll_allreduce(c, f, f, 16, COLL_F32, COLL_SUM), COLL_OK);
    EXPECT_RC(coll_broadcast(c, b, 8, COLL_I32, 1), COLL_OK);
    EXPECT_RC(coll_iallreduce(c, f, f, 3, COLL_F32, COLL_MAX, &q), COLL_OK);
    EXPECT_RC(coll_wait(q), COLL_OK);
    EXPECT_RC(coll_barrier(c), COLL_OK);
    coll_record x[8];
    int n = records_since(c, s, x, 8);
    FAIL_IF(n != 4, "expected 4 records from #%u, got %d", s, n);
    if (check_record(c, &x[0], s, "allreduce", 16, -1) ||
        check_record(c, &x[1], s + 1, "broadcast", 8, 1) ||
        check_record(c, &x[2], s + 2, "allreduce", 3, -1) ||
        check_record(c, &x[3], s + 3, "barrier", 0, -1))
        return 1;
    FAIL_IF(x[0].dtype != COLL_F32 || x[0].op != COLL_SUM || x[1].dtype != COLL_I32 ||
                x[2].op != COLL_MAX,
            "dtype/op: %d %d %d %d", x[0].dtype, x[0].op, x[1].dtype, x[2].op);
    /* 16 floats each way at least, and a header */
    FAIL_IF(x[0].bytes < 2 * 16 * sizeof(float), "allreduce #%u moved %llu bytes", s,
            (unsigned long long)x[0].bytes);
    return 0;
}

START_TEST(records_name_each_collective_in_issue_order)
{
    ck_assert_int_eq(run(3, read_rank, NULL, 0), 0);
}
END_TEST

/* Sends and receives, blocking and not, have records of their own among the
 * collectives': kind, peer, tag, count, message number, state, bytes. */
static int p2p_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int32_t v[5] = {1, 2, 3, 4, 5};
    coll_req *q;
    int me = coll_rank(c), peer = 1 - me;
    EXPECT_RC(coll_barrier(c), COLL_OK);
    if (me == 0) {
        EXPECT_RC(coll_send(c, v, 5, COLL_I32, peer, 7), COLL_OK);
        EXPECT_RC(coll_isend(c, v, 3, COLL_I32, peer, 8, &q), COLL_OK);
    } else {
        EXPECT_RC(coll_recv(c, v, 5, COLL_I32, peer, 7), COLL_OK);
        EXPECT_RC(coll_irecv(c, v, 3, COLL_I32, peer, 8, &q), COLL_OK);
    }
    EXPECT_RC(coll_wait(q), COLL_OK);
    coll_record x[MAXREC];
    int n = coll_recorder_read(c, x, MAXREC);
    FAIL_IF(n < 3 || strcmp(x[n - 3].kind, "barrier") != 0, "%d records, the third last %s", n,
            n >= 3 ? x[n - 3].kind : "none");
    const char *kind = me == 0 ? "send" : "recv";
    for (int i = 0; i < 2; i++) {
        const coll_record *y = &x[n - 2 + i];
        FAIL_IF(strcmp(y->kind, kind) != 0 || y->root != peer || y->tag != 7u + (unsigned)i ||
                    y->count != (i ? 3u : 5u) || y->seq != 1u + (unsigned)i ||
                    y->dtype != COLL_I32,
                "record %d: %s peer %d tag %u count %zu #%u, expected %s peer %d tag %d", i,
                y->kind, y->root, y->tag, y->count, y->seq, kind, peer, 7 + i);
        FAIL_IF(y->state != COLL_REC_DONE || y->status != COLL_OK || y->ended_us < y->issued_us,
                "%s #%u: state %d status %d", y->kind, y->seq, y->state, y->status);
        FAIL_IF(y->bytes < (i ? 12u : 20u), "%s #%u moved %llu bytes", y->kind, y->seq,
                (unsigned long long)y->bytes);
    }
    return 0;
}

/* On tcp, and on shm, whose small blocking messages take the fast path. */
START_TEST(sends_and_receives_are_recorded_with_their_peer_and_tag)
{
    const char *transports[] = {"tcp", "shm"};
    for (int i = 0; i < 2; i++) {
        run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .transport = transports[i],
                      .timeout_ms = 5000, .deadline_s = 60};
        ck_assert_msg(run_ranks(&o, p2p_rank, NULL) == 0, "on %s", transports[i]);
    }
}
END_TEST

/* COLL_RECORDER_OPS=5: after 12 barriers, the last five. */
static int keep_rank(coll_comm *c, void *arg)
{
    (void)arg;
    for (int i = 0; i < 12; i++)
        EXPECT_RC(coll_barrier(c), COLL_OK);
    coll_record x[MAXREC];
    int n = coll_recorder_read(c, x, MAXREC);
    FAIL_IF(n != 5, "expected the last 5 records, got %d", n);
    for (int i = 1; i < n; i++)
        FAIL_IF(x[i].seq != x[i - 1].seq + 1, "records %u then %u", x[i - 1].seq, x[i].seq);
    n = coll_recorder_read(c, x, 2);
    FAIL_IF(n != 2 || strcmp(x[1].kind, "barrier") != 0, "max 2: got %d", n);
    EXPECT_RC(coll_recorder_read(c, NULL, 1), COLL_EINVAL);
    return 0;
}

START_TEST(the_recorder_keeps_the_last_n)
{
    setenv("COLL_RECORDER_OPS", "5", 1);
    ck_assert_int_eq(run(2, keep_rank, NULL, 0), 0);
}
END_TEST

/* COLL_RECORDER_OPS=0: nothing kept, a dump is refused, collectives run. */
static int off_rank(coll_comm *c, void *arg)
{
    (void)arg;
    coll_record x[4];
    EXPECT_RC(coll_barrier(c), COLL_OK);
    EXPECT_RC(coll_recorder_read(c, x, 4), 0);
    EXPECT_RC(coll_recorder_dump(c, "/tmp/never-written.json"), COLL_ENOTSUP);
    return 0;
}

START_TEST(zero_turns_the_recorder_off)
{
    setenv("COLL_RECORDER_OPS", "0", 1);
    ck_assert_int_eq(run(2, off_rank, NULL, 0), 0);
}
END_TEST

/* 1 when python3 running prog over files (a shell pattern) says its assertions hold. */
static int python_holds(const char *prog, const char *files)
{
    char script[] = "/tmp/coll_rec_check.XXXXXX", cmd[512];
    int fd = mkstemp(script);
    if (fd < 0 || write(fd, prog, strlen(prog)) != (ssize_t)strlen(prog)) {
        perror("the check's script");
        return 0;
    }
    close(fd);
    snprintf(cmd, sizeof(cmd), "python3 %s %s", script, files);
    int ok = system(cmd) == 0;
    unlink(script);
    return ok;
}

static int dump_rank(coll_comm *c, void *dir)
{
    float f[4] = {0};
    EXPECT_RC(coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM), COLL_OK);
    EXPECT_RC(coll_allgather(c, f, f, 1, COLL_F32), COLL_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s/mine-%d.json", (char *)dir, coll_rank(c));
    EXPECT_RC(coll_recorder_dump(c, path), COLL_OK);
    return 0;
}

START_TEST(a_dump_is_json_with_every_record)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    ck_assert_int_eq(run(2, dump_rank, dir, 0), 0);
    char files[256];
    snprintf(files, sizeof(files), "%s/mine-0.json %s/mine-1.json", dir, dir);
    ck_assert_msg(python_holds("import json, sys\n"
                               "for i, p in enumerate(sys.argv[1:]):\n"
                               "    d = json.load(open(p))\n"
                               "    assert d['rank'] == i and d['size'] == 2, d\n"
                               "    o = d['ops'][-2:]\n"
                               "    assert [x['kind'] for x in o] == ['allreduce', 'allgather'], o\n"
                               "    assert o[1]['seq'] == o[0]['seq'] + 1 == d['issued'], o\n"
                               "    assert o[0]['count'] == 4 and o[0]['dtype'] == 'float', o\n"
                               "    assert all(x['state'] == 'done' for x in o), o\n",
                               files),
                  "the dumps in %s do not parse or say otherwise", dir);
    remove_dir(dir);
}
END_TEST

/* Rank 2 is killed after two all-reduces; the others' third fails, and each writes its
 * file into COLL_RECORDER_DIR with the failed all-reduce last. */
static int killed_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float f[1024] = {0};
    for (int i = 0; i < 2; i++)
        EXPECT_RC(coll_allreduce(c, f, f, 1024, COLL_F32, COLL_SUM), COLL_OK);
    if (coll_rank(c) == 2)
        raise(SIGKILL);
    int rc = coll_allreduce(c, f, f, 1024, COLL_F32, COLL_SUM);
    FAIL_IF(rc == COLL_OK, "the all-reduce without rank 2 succeeded");
    return 0;
}

static void set_dir(const char *dir)
{
    setenv("COLL_RECORDER_DIR", dir, 1);
}

START_TEST(a_failed_collective_writes_the_file)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    set_dir(dir);
    run(3, killed_rank, NULL, 0);
    ck_assert_msg(last_exit[0] == 0 && last_exit[1] == 0, "survivors exited %d %d",
                  last_exit[0], last_exit[1]);
    char files[256];
    snprintf(files, sizeof(files), "%s/coll-recorder-*", dir);
    ck_assert_msg(python_holds("import json, sys\n"
                               "ds = sorted((json.load(open(p)) for p in sys.argv[1:]),"
                               " key=lambda d: d['rank'])\n"
                               "assert [d['rank'] for d in ds] == [0, 1], ds\n"
                               "for d in ds:\n"
                               "    last = d['ops'][-1]\n"
                               "    assert last['kind'] == 'allreduce' and last['state'] == 'failed', last\n"
                               "    assert last['seq'] == d['issued'], d\n"
                               "    assert 'failed' in d['reason'] and d['error'], d\n"
                               "    assert [o['state'] for o in d['ops'][-3:-1]] == ['done'] * 2, d\n",
                               files),
                  "the survivors' files in %s are missing or say otherwise", dir);
    remove_dir(dir);
}
END_TEST

/* Rank 1 never sends what rank 0 waits to receive: rank 0's receive times out and
 * writes its file with the receive failed last. */
static int silent_rank(coll_comm *c, void *arg)
{
    (void)arg;
    int32_t v[4] = {0};
    EXPECT_RC(coll_barrier(c), COLL_OK);
    if (coll_rank(c) == 1) {
        usleep(2500 * 1000);
        return 0;
    }
    FAIL_IF(coll_recv(c, v, 4, COLL_I32, 1, 9) == COLL_OK, "the receive succeeded");
    return 0;
}

START_TEST(a_receive_that_times_out_writes_the_file)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    set_dir(dir);
    ck_assert_int_eq(run(2, silent_rank, NULL, 1000), 0);
    char files[256];
    snprintf(files, sizeof(files), "%s/coll-recorder-*-0.json", dir);
    ck_assert_msg(python_holds("import json, sys\n"
                               "d = json.load(open(sys.argv[1]))\n"
                               "last = d[\"ops\"][-1]\n"
                               "assert last[\"kind\"] == \"recv\" and last[\"state\"] == \"failed\", last\n"
                               "assert last[\"root\"] == 1 and last[\"tag\"] == 9, last\n"
                               "assert \"recv #1 failed\" in d[\"reason\"], d\n",
                               files),
                  "rank 0's file in %s is missing or says otherwise", dir);
    remove_dir(dir);
}
END_TEST

/* Rank 2 never issues the third all-reduce: the others time out and write their files,
 * rank 2 writes its own on request; coll_analyze names rank 2 and the collective. */
static int absent_rank(coll_comm *c, void *arg)
{
    (void)arg;
    float f[8] = {0};
    for (int i = 0; i < 2; i++)
        EXPECT_RC(coll_allreduce(c, f, f, 8, COLL_F32, COLL_SUM), COLL_OK);
    if (coll_rank(c) != 2) {
        FAIL_IF(coll_allreduce(c, f, f, 8, COLL_F32, COLL_SUM) == COLL_OK, "no timeout");
        return 0;
    }
    usleep(2500 * 1000); /* past the others' operation timeout */
    EXPECT_RC(coll_recorder_dump(c, NULL), COLL_OK);
    return 0;
}

/* coll_analyze's output on dir (with its options args) into all; its wait status. */
static int analyze(const char *args, const char *dir, char *all, size_t len)
{
    char cmd[512], line[512];
    snprintf(cmd, sizeof(cmd), "python3 %s %s %s", ANALYZE, args, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    all[0] = 0;
    while (fgets(line, sizeof(line), p))
        strncat(all, line, len - strlen(all) - 1);
    return pclose(p);
}

START_TEST(coll_analyze_names_the_rank_that_never_issued)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    set_dir(dir);
    ck_assert_int_eq(run(3, absent_rank, NULL, 1000), 0);
    char all[4096];
    int st = analyze("", dir, all, sizeof(all));
    ck_assert_msg(strstr(all, "rank 2 never issued allreduce #") != NULL, "coll_analyze: %s", all);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit status %d: %s", st, all);
    remove_dir(dir);
}
END_TEST

/* Rank 2 comes 2 s late to an all-reduce: meanwhile the others' record says it runs and
 * has moved nothing since it began to wait (its last progress stays put), their files
 * and rank 2's say so to coll_analyze, and the all-reduce then completes. */
static int late_rank(coll_comm *c, void *dir)
{
    float f[256] = {0};
    EXPECT_RC(coll_allreduce(c, f, f, 256, COLL_F32, COLL_SUM), COLL_OK);
    if (coll_rank(c) == 2) {
        usleep(2000 * 1000);
        EXPECT_RC(coll_recorder_dump(c, NULL), COLL_OK);
        EXPECT_RC(coll_allreduce(c, f, f, 256, COLL_F32, COLL_SUM), COLL_OK);
        return 0;
    }
    coll_req *q;
    EXPECT_RC(coll_iallreduce(c, f, f, 256, COLL_F32, COLL_SUM, &q), COLL_OK);
    usleep(1200 * 1000);
    coll_record x[MAXREC];
    int n = coll_recorder_read(c, x, MAXREC);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t now = (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
    const coll_record *last = &x[n - 1];
    FAIL_IF(n < 2 || last->state != COLL_REC_RUNNING || strcmp(last->kind, "allreduce") != 0,
            "expected a running allreduce, got %s #%u in state %d", last->kind, last->seq,
            last->state);
    FAIL_IF(last->progress_us < last->started_us || now - last->progress_us < 1000000,
            "started %lld, last progress %lld, now %lld: not 1 s without progress",
            (long long)last->started_us, (long long)last->progress_us, (long long)now);
    EXPECT_RC(coll_recorder_dump(c, NULL), COLL_OK);
    EXPECT_RC(coll_wait(q), COLL_OK);
    (void)dir;
    return 0;
}

START_TEST(a_waiting_collective_shows_when_it_last_moved)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    set_dir(dir);
    ck_assert_int_eq(run(3, late_rank, dir, 10000), 0);
    char all[4096];
    analyze("--stall 1", dir, all, sizeof(all));
    ck_assert_msg(strstr(all, "rank 2 never issued allreduce #") != NULL &&
                      strstr(all, "rank 0 is in allreduce #") != NULL &&
                      strstr(all, "but has moved no byte for 1 s") != NULL,
                  "coll_analyze: %s", all);
    remove_dir(dir);
}
END_TEST

/* A warning that the recorder could not write, from any thread. */
static atomic_int warned;

static void catch_log(coll_log_level level, const char *msg, void *arg)
{
    (void)arg;
    if (level == COLL_LOG_WARN && strstr(msg, "flight recorder: cannot write"))
        atomic_store(&warned, 1);
}

static void log_setup(int rank, void *arg)
{
    (void)rank;
    (void)arg;
    coll_set_log(catch_log, NULL, COLL_LOG_WARN);
}

/* A path under a regular file: unwritable even for root. */
static int unwritable_rank(coll_comm *c, void *bad)
{
    float f[4] = {0};
    char path[256];
    snprintf(path, sizeof(path), "%s/x.json", (char *)bad);
    EXPECT_RC(coll_recorder_dump(c, path), COLL_ESYS);
    FAIL_IF(!atomic_load(&warned), "no warning for the call's dump");
    atomic_store(&warned, 0);
    raise(SIGUSR1);
    for (int i = 0; i < 200 && !atomic_load(&warned); i++)
        usleep(10 * 1000);
    FAIL_IF(!atomic_load(&warned), "no warning for the signal's dump");
    EXPECT_RC(coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM), COLL_OK);
    return 0;
}

START_TEST(an_unwritable_directory_is_a_warning_not_a_failure)
{
    char dir[64], url[256], bad[128];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    snprintf(bad, sizeof(bad), "%s/file", dir);
    FILE *f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    strcat(bad, "/sub");
    set_dir(bad);
    setenv("COLL_RECORDER_SIGNAL", "USR1", 1);
    run_opts o = {.nranks = 2, .rdzv = RDZV_FILE, .timeout_ms = 5000, .deadline_s = 60,
                  .setup = log_setup};
    ck_assert_int_eq(run_ranks(&o, unwritable_rank, bad), 0);
    remove_dir(dir);
}
END_TEST

/* The signal writes every rank's file while collectives go on: on the library's thread,
 * so the rank waits for it before it destroys its communicator. */
static int signal_rank(coll_comm *c, void *arg)
{
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s/coll-recorder-job-*-%d.json", (char *)arg,
             coll_rank(c));
    float f[4] = {0};
    EXPECT_RC(coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM), COLL_OK);
    raise(SIGUSR2);
    EXPECT_RC(coll_allreduce(c, f, f, 4, COLL_F32, COLL_SUM), COLL_OK);
    glob_t g = {0};
    for (int i = 0; i < 500 && glob(pattern, 0, NULL, &g) != 0; i++)
        usleep(10 * 1000);
    FAIL_IF(g.gl_pathc != 1, "no %s after 5 s", pattern);
    globfree(&g);
    return 0;
}

START_TEST(the_signal_writes_every_ranks_file)
{
    char dir[64], url[256];
    ck_assert_int_eq(dir_url(dir, "coll_rec", url, sizeof(url)), 0);
    set_dir(dir);
    setenv("COLL_RECORDER_SIGNAL", "USR2", 1);
    unsetenv("COLL_JOB_ID");
    ck_assert_int_eq(run(2, signal_rank, dir, 0), 0);
    char files[256];
    snprintf(files, sizeof(files), "%s/coll-recorder-job-*-[01].json", dir);
    ck_assert_msg(python_holds("import json, sys\n"
                               "ds = [json.load(open(p)) for p in sys.argv[1:]]\n"
                               "assert sorted(d['rank'] for d in ds) == [0, 1], ds\n"
                               "assert all(d['reason'] == 'signal' for d in ds), ds\n"
                               "assert all(d['ops'][-1]['kind'] == 'allreduce' for d in ds), ds\n",
                               files),
                  "no file per rank in %s", dir);
    remove_dir(dir);
}
END_TEST

/* A one-rank world with coll_config.recorder_ops = ops: the records after 6 barriers. */
static int config_world(int ops, int *records)
{
    char dir[64], url[256];
    if (dir_url(dir, "coll_rec", url, sizeof(url)) != 0)
        return -1;
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.transport = "tcp";
    cfg.recorder_ops = ops;
    coll_comm *c = NULL;
    int rc = coll_init(&c, url, 0, 1, &cfg);
    if (rc == COLL_OK) {
        for (int i = 0; i < 6; i++)
            coll_barrier(c);
        coll_record x[16];
        *records = coll_recorder_read(c, x, 16);
        coll_destroy(c);
    }
    remove_dir(dir);
    return rc;
}

/* coll_config.recorder_ops: above the variable; negative turns it off; 0 leaves it. */
START_TEST(coll_config_sets_what_the_recorder_keeps)
{
    int n = -1;
    setenv("COLL_RECORDER_OPS", "100", 1);
    ck_assert_int_eq(config_world(3, &n), COLL_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(config_world(-1, &n), COLL_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(config_world(0, &n), COLL_OK);
    ck_assert_int_eq(n, 6);
}
END_TEST

START_TEST(a_bad_variable_fails_init_saying_so)
{
    int n;
    setenv("COLL_RECORDER_SIGNAL", "NOPE", 1);
    ck_assert_int_eq(config_world(0, &n), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "COLL_RECORDER_SIGNAL") != NULL, "%s",
                  coll_last_error(NULL));
    unsetenv("COLL_RECORDER_SIGNAL");
    setenv("COLL_RECORDER_OPS", "-3", 1);
    ck_assert_int_eq(config_world(0, &n), COLL_EINVAL);
    ck_assert_msg(strstr(coll_last_error(NULL), "COLL_RECORDER_OPS") != NULL, "%s",
                  coll_last_error(NULL));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("record");
    TCase *t = tcase_create("record");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, records_name_each_collective_in_issue_order);
    tcase_add_test(t, sends_and_receives_are_recorded_with_their_peer_and_tag);
    tcase_add_test(t, the_recorder_keeps_the_last_n);
    tcase_add_test(t, zero_turns_the_recorder_off);
    tcase_add_test(t, a_dump_is_json_with_every_record);
    tcase_add_test(t, a_failed_collective_writes_the_file);
    tcase_add_test(t, coll_analyze_names_the_rank_that_never_issued);
    tcase_add_test(t, a_receive_that_times_out_writes_the_file);
    tcase_add_test(t, a_waiting_collective_shows_when_it_last_moved);
    tcase_add_test(t, an_unwritable_directory_is_a_warning_not_a_failure);
    tcase_add_test(t, the_signal_writes_every_ranks_file);
    tcase_add_test(t, coll_config_sets_what_the_recorder_keeps);
    tcase_add_test(t, a_bad_variable_fails_init_saying_so);
    suite_add_tcase(s, t);
    return run_suite(s);
}
