/* The flight recorder: each communicator's last few collectives (record.h), read through
 * coll_recorder_read and written as one JSON file per rank and communicator when a
 * collective fails, on coll_recorder_dump, or on the signal the user names. What it must
 * never do: slow a collective down (the hooks are record.h's few stores), or fail one: a
 * file that cannot be written is a warning. */
#include "core/record.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/beat.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/status.h"
#include "kernels/codec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Ticks as whole CLOCK_MONOTONIC microseconds (0 stays 0: not yet). */
static int64_t to_us(uint64_t t)
{
    return (int64_t)cl_clock_us(t);
}

/* ---- configuration and life --------------------------------------------------------- */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_rec *live; /* every open recorder: the signal's dump writes them all */

static int parse_signal(const char *v, int *sig)
{
    long n;
    if (!strcmp(v, "USR1") || !strcmp(v, "SIGUSR1"))
        *sig = SIGUSR1;
    else if (!strcmp(v, "USR2") || !strcmp(v, "SIGUSR2"))
        *sig = SIGUSR2;
    else if (cl_parse_long(v, 1, SIGRTMAX, &n) == 0 && n != SIGKILL && n != SIGSTOP)
        *sig = (int)n;
    else
        return -1;
    return 0;
}

int cl_rec_configure(const coll_config *user, cl_rec_config *out, char *err, size_t errlen)
{
    const char *ops = getenv("COLL_RECORDER_OPS"), *sig = getenv("COLL_RECORDER_SIGNAL");
    long n = CL_REC_DEFAULT_OPS;
    if (ops && *ops && cl_parse_long(ops, 0, CL_REC_MAX_OPS, &n)) {
        snprintf(err, errlen, "COLL_RECORDER_OPS must be 0 (off) to %d, not '%s'",
                 CL_REC_MAX_OPS, ops);
        return COLL_EINVAL;
    }
    int given = user ? user->recorder_ops : 0;
    out->ops = given < 0 ? 0 : given > 0 ? CL_MIN(given, CL_REC_MAX_OPS) : (int)n;
    out->dir = getenv("COLL_RECORDER_DIR");
    if (out->dir && !*out->dir)
        out->dir = NULL;
    out->signal = 0;
    out->job = NULL;
    if (sig && *sig && parse_signal(sig, &out->signal)) {
        snprintf(err, errlen, "COLL_RECORDER_SIGNAL must be USR1, USR2 or a signal number, "
                 "not '%s'", sig);
        return COLL_EINVAL;
    }
    if (!out->ops && cl_trace_dir()) {
        out->ops = CL_REC_DEFAULT_OPS;
        cl_log(COLL_LOG_INFO, "COLL_TRACE: the flight recorder stays on (the trace reads it)");
    }
    if (out->ops)
        cl_log(COLL_LOG_INFO, "flight recorder: %d collectives, files to %s%s%s", out->ops,
               out->dir ? out->dir : "(none: COLL_RECORDER_DIR is unset)",
               out->signal ? ", on signal " : "", out->signal ? sig : "");
    return COLL_OK;
}

static void listen_for_signal(int sig);

int cl_rec_open(coll_comm *c, const cl_rec_config *cfg, const char *job)
{
    if (cfg->ops <= 0)
        return COLL_OK;
    cl_clock_start();
    uint32_t n = 1;
    while (n < (uint32_t)cfg->ops)
        n <<= 1;
    cl_rec *r = calloc(1, sizeof(*r));
    if (!r || !(r->e = calloc(n, sizeof(*r->e))) || !(r->p2p = calloc(n, sizeof(*r->p2p)))) {
        if (r)
            free(r->e);
        free(r);
        return COLL_ENOMEM;
    }
    r->comm = c;
    r->mask = n - 1;
    r->cfg = *cfg;
    snprintf(r->job, sizeof(r->job), "%s", cfg->job ? cfg->job : job && *job ? job : "job");
    snprintf(r->dir, sizeof(r->dir), "%s", cfg->dir ? cfg->dir : "");
    r->cfg.job = r->job;
    r->cfg.dir = cfg->dir ? r->dir : NULL;
    pthread_mutex_lock(&live_mu);
    r->next = live;
    live = r;
    pthread_mutex_unlock(&live_mu);
    if (cfg->signal)
        listen_for_signal(cfg->signal);
    r->trace = cl_trace_open(r->job);
    r->run.spans = r->trace ? &r->spans : NULL;
    c->rec = r;
    return COLL_OK;
}

cl_stall *cl_rec_stall(coll_comm *c)
{
    return c->rec ? &c->rec->stall : NULL;
}

cl_running *cl_rec_running(coll_comm *c)
{
    return c->rec ? &c->rec->run : NULL;
}

cl_rec_config cl_rec_config_of(const coll_comm *c)
{
    return c->rec ? c->rec->cfg : (cl_rec_config){0};
}

/* Off the live list first, under its lock: a signal's dump in progress finishes before
 * the recorder goes. */
void cl_rec_close(coll_comm *c)
{
    cl_rec *r = c->rec;
    if (!r)
        return;
    pthread_mutex_lock(&live_mu);
    for (cl_rec **p = &live; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    c->rec = NULL;
    cl_trace_close(r->trace, c);
    free(r->spans.s);
    free(r->e);
    free(r->p2p);
    free(r);
}

/* ---- reading ------------------------------------------------------------------------ */

static int rooted(int kind)
{
    return kind == CL_BROADCAST || kind == CL_REDUCE || kind == CL_GATHER || kind == CL_SCATTER;
}

/* When the running collective last moved a byte: where its last wait began, if that was
 * its own (the wait's millisecond ends after it started) and nothing moved since; else
 * now (it is moving, or polling for less than a spin). */
static int64_t last_progress_us(const cl_rec *r, uint64_t moved_to, int64_t started_us)
{
    int64_t since_ms = atomic_load_explicit(&r->stall.since_ms, memory_order_acquire);
    uint64_t at = atomic_load_explicit(&r->stall.bytes, memory_order_relaxed);
    if ((since_ms + 1) * 1000 > started_us && at == moved_to)
        return since_ms * 1000 > started_us ? since_ms * 1000 : started_us;
    return cl_now_us();
}

static int is_p2p(int kind)
{
    return kind == CL_SEND || kind == CL_RECV;
}

/* A running collective's bytes so far and last progress, from the wire counters. */
static void running(const cl_rec *r, uint64_t bytes0, coll_record *out)
{
    uint64_t now = cl_rec_bytes(r->comm);
    out->bytes = now > bytes0 ? now - bytes0 : 0; /* coll_reset_stats may go below */
    out->progress_us = last_progress_us(r, now, out->started_us);
}

/* A collective's bytes by peer as they stand (the slots `used` counts are whole); a
 * send's or receive's, its peer's. */
static void moved_of(const struct cl_rec_entry *e, const coll_record *x, cl_moved *m)
{
    int kind = __atomic_load_n(&e->kind, __ATOMIC_RELAXED);
    memset(m, 0, sizeof(*m));
    if (is_p2p(kind)) {
        m->used = 1;
        m->who[0] = x->root;
        *(kind == CL_SEND ? &m->tx[0] : &m->rx[0]) = x->bytes;
        return;
    }
    m->used = CL_MIN(__atomic_load_n(&e->moved.used, __ATOMIC_ACQUIRE), (uint32_t)CL_PEER_SLOTS);
    for (uint32_t i = 0; i < m->used; i++) {
        m->who[i] = __atomic_load_n(&e->moved.who[i], __ATOMIC_RELAXED);
        m->tx[i] = __atomic_load_n(&e->moved.tx[i], __ATOMIC_RELAXED);
        m->rx[i] = __atomic_load_n(&e->moved.rx[i], __ATOMIC_RELAXED);
    }
    if (m->used) {
        m->other_tx = __atomic_load_n(&e->moved.other_tx, __ATOMIC_RELAXED);
        m->other_rx = __atomic_load_n(&e->moved.other_rx, __ATOMIC_RELAXED);
    }
}

/* Entry e as a coll_record, and its bytes by peer where m is not NULL: 0, or -1 when it
 * is not entry `id` (empty, or taken by a newer one meanwhile). A send's or receive's
 * bytes are known once it ended; while it runs, its last progress is not (0). */
static int snapshot(const cl_rec *r, const struct cl_rec_entry *e, uint32_t id,
                    coll_record *out, cl_moved *m)
{
    if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != id)
        return -1;
    int state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    int kind = __atomic_load_n(&e->kind, __ATOMIC_RELAXED), p2p = is_p2p(kind);
    uint64_t bytes0 = __atomic_load_n(&e->bytes0, __ATOMIC_RELAXED);
    *out = (coll_record){.seq = p2p ? __atomic_load_n(&e->msg, __ATOMIC_RELAXED) : id,
                         .kind = cl_kind_name(kind),
                         .count = __atomic_load_n(&e->count, __ATOMIC_RELAXED),
                         .dtype = __atomic_load_n(&e->dtype, __ATOMIC_RELAXED),
                         .op = p2p ? COLL_SUM : __atomic_load_n(&e->op, __ATOMIC_RELAXED),
                         .root = rooted(kind) || p2p ? __atomic_load_n(&e->root, __ATOMIC_RELAXED)
                                                     : -1,
                         .tag = p2p ? __atomic_load_n(&e->tag, __ATOMIC_RELAXED) : 0,
                         .codec = p2p ? COLL_CODEC_NONE : __atomic_load_n(&e->codec, __ATOMIC_RELAXED),
                         .algo = p2p ? "" : __atomic_load_n(&e->algo, __ATOMIC_RELAXED),
                         .state = (coll_rec_state)state,
                         .status = __atomic_load_n(&e->status, __ATOMIC_RELAXED),
                         .issued_us = to_us(__atomic_load_n(&e->issued, __ATOMIC_RELAXED)),
                         .started_us = to_us(__atomic_load_n(&e->started, __ATOMIC_RELAXED)),
                         .ended_us = to_us(__atomic_load_n(&e->ended, __ATOMIC_RELAXED)),
                         .bytes = __atomic_load_n(&e->bytes, __ATOMIC_RELAXED),
                         .progress_us = p2p ? 0 : __atomic_load_n(&e->progress_us, __ATOMIC_RELAXED)};
    if (state == COLL_REC_RUNNING && !p2p)
        running(r, bytes0, out);
    else if (state == COLL_REC_DONE || (state == COLL_REC_FAILED && p2p))
        out->progress_us = out->ended_us;
    if (m)
        moved_of(e, out, m);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == id ? 0 : -1;
}

/* The last `kept` entries of ring e (entries numbered up to last) that are whole, and
 * their bytes by peer where m is not NULL. */
static int read_ring(const cl_rec *r, const struct cl_rec_entry *e, uint32_t last,
                     coll_record *out, cl_moved *m)
{
    uint32_t want = CL_MIN((uint32_t)r->cfg.ops, last);
    int n = 0;
    for (uint32_t id = last - want + 1; want && id <= last; id++)
        if (snapshot(r, &e[id & r->mask], id, &out[n], m ? &m[n] : NULL) == 0)
            n++;
    return n;
}

/* The newest min(max, kept) records of both rings, oldest first, and their bytes by
 * peer where m is not NULL: each ring's in issue order already, merged by the time they
 * were issued (each ring is a power of two; the recorder keeps what it was asked to of
 * each). */
static int read_records(const cl_rec *r, coll_record *out, cl_moved *m, int max)
{
    size_t kept = 2 * (size_t)r->cfg.ops;
    coll_record *all = malloc(kept * sizeof(*all));
    cl_moved *allm = m ? malloc(kept * sizeof(*allm)) : NULL;
    if (!all || (m && !allm)) {
        free(all);
        return COLL_ENOMEM;
    }
    int nc = read_ring(r, r->e, cl_engine_issued(r->comm), all, allm);
    int np = read_ring(r, r->p2p, __atomic_load_n(&r->p2p_n, __ATOMIC_RELAXED), all + nc,
                       allm ? allm + nc : NULL);
    int total = nc + np, skip = total > max ? total - max : 0, n = 0;
    const coll_record *a = all, *b = all + nc;
    for (int i = 0; i < total; i++) {
        int take_a = b == all + total || (a < all + nc && a->issued_us <= b->issued_us);
        const coll_record *x = take_a ? a++ : b++;
        if (i >= skip && m)
            m[n] = allm[x - all];
        if (i >= skip)
            out[n++] = *x;
    }
    free(all);
    free(allm);
    return n;
}

int coll_recorder_read(const coll_comm *comm, coll_record *out, int max)
{
    if (!comm || max < 0 || (max && !out))
        return COLL_EINVAL;
    return comm->rec ? read_records(comm->rec, out, NULL, max) : 0;
}

/* Entry `last` of ring e when it is whole; a writer that is rewriting it meanwhile
 * makes the caller look again (at the newer one). */
static int newest(const cl_rec *r, const struct cl_rec_entry *e, uint32_t last,
                  coll_record *out)
{
    return last && snapshot(r, &e[last & r->mask], last, out, NULL) == 0;
}

void cl_rec_head(const coll_comm *c, coll_record *coll, coll_record *p2p)
{
    const cl_rec *r = c->rec;
    const coll_record none = {.kind = "", .algo = ""};
    int got = 0;
    for (int i = 0; r && !got && i < 4; i++)
        got = newest(r, r->e, cl_engine_issued(c), coll);
    if (!got)
        *coll = none;
    got = 0;
    for (int i = 0; r && !got && i < 4; i++)
        got = newest(r, r->p2p, __atomic_load_n(&r->p2p_n, __ATOMIC_RELAXED), p2p);
    if (!got)
        *p2p = none;
}

/* ---- the JSON file ------------------------------------------------------------------ */

static const char *state_name(int state)
{
    static const char *names[] = {"queued", "running", "done", "failed"};
    return state >= 0 && state <= COLL_REC_FAILED ? names[state] : "invalid";
}

void cl_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void cl_json_moved(FILE *f, const cl_moved *m)
{
    uint32_t used = CL_MIN(m->used, (uint32_t)CL_PEER_SLOTS);
    fputs(", \"peers\": [", f);
    for (uint32_t i = 0; i < used; i++)
        fprintf(f, "%s{\"rank\": %d, \"tx\": %llu, \"rx\": %llu}", i ? ", " : "", m->who[i],
                (unsigned long long)m->tx[i], (unsigned long long)m->rx[i]);
    fprintf(f, "], \"others_tx\": %llu, \"others_rx\": %llu",
            (unsigned long long)(used ? m->other_tx : 0), (unsigned long long)(used ? m->other_rx : 0));
}

static void put_record(FILE *f, const coll_record *x, const cl_moved *m)
{
    fprintf(f, "    {\"seq\": %u, \"kind\": \"%s\", \"count\": %zu, \"dtype\": \"%s\", "
               "\"op\": \"%s\", \"root\": %d, \"tag\": %u, \"algo\": \"%s\", \"codec\": \"%s\", "
               "\"state\": \"%s\", \"status\": \"%s\", \"issued_us\": %lld, "
               "\"started_us\": %lld, \"ended_us\": %lld, \"bytes\": %llu, "
               "\"progress_us\": %lld",
            x->seq, x->kind, x->count, cl_dtype_name(x->dtype), cl_op_name(x->op), x->root,
            x->tag, x->algo, cl_codec_name(x->codec), state_name(x->state),
            x->status == COLL_OK ? "ok" : coll_strerror(x->status), (long long)x->issued_us,
            (long long)x->started_us, (long long)x->ended_us, (unsigned long long)x->bytes,
            (long long)x->progress_us);
    cl_json_moved(f, m);
    fputc('}', f);
}

/* The whole file. Times are CLOCK_MONOTONIC microseconds; now_us and wall_s (the
 * realtime clock, seconds) are read together, so a reader can place them in the day. */
static void put_file(FILE *f, const cl_rec *r, const char *reason, const coll_record *xs,
                     const cl_moved *ms, int n)
{
    const coll_comm *c = r->comm;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    char host[128] = "";
    gethostname(host, sizeof(host) - 1);
    fprintf(f, "{\n  \"version\": 1,\n  \"job\": ");
    cl_json_string(f, r->job);
    fprintf(f, ",\n  \"comm\": \"%016llx\",\n  \"rank\": %d,\n  \"size\": %d,\n  \"pid\": %d,\n"
               "  \"host\": ", (unsigned long long)c->id, c->rank, c->size, (int)getpid());
    cl_json_string(f, host);
    fprintf(f, ",\n  \"reason\": ");
    cl_json_string(f, reason);
    fprintf(f, ",\n  \"error\": ");
    cl_json_string(f, c->err);
    fprintf(f, ",\n  \"issued\": %u,\n  \"kept\": %u,\n  \"now_us\": %lld,\n  \"wall_s\": %.6f,\n"
               "  \"ops\": [\n", cl_engine_issued(c), (unsigned)r->cfg.ops, (long long)cl_now_us(),
            (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9);
    for (int i = 0; i < n; i++) {
        put_record(f, &xs[i], &ms[i]);
        fputs(i + 1 < n ? ",\n" : "\n", f);
    }
    fputs("  ]\n}\n", f);
}

/* Written beside path and renamed over it: a reader never sees half a file. */
static int write_file(const cl_rec *r, const char *path, const char *reason)
{
    uint32_t kept = 2 * (uint32_t)r->cfg.ops; /* collectives, sends and receives */
    coll_record *xs = malloc(kept * sizeof(*xs));
    cl_moved *ms = malloc(kept * sizeof(*ms));
    int n = xs && ms ? read_records(r, xs, ms, (int)kept) : COLL_ENOMEM;
    if (n < 0) {
        free(xs);
        free(ms);
        return COLL_ENOMEM;
    }
    /* the failure's dump and the signal's may write one path at once: a name each */
    static atomic_uint writes;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.%d.%u.tmp", path, (int)getpid(), atomic_fetch_add(&writes, 1));
    FILE *f = fopen(tmp, "w");
    int rc = COLL_ESYS, err = 0;
    if (f) {
        put_file(f, r, reason, xs, ms, n);
        rc = ferror(f) ? COLL_ESYS : COLL_OK;
        err = errno;
        if (fclose(f) != 0 && rc == COLL_OK) {
            rc = COLL_ESYS;
            err = errno;
        }
        if (rc == COLL_OK && rename(tmp, path) != 0) {
            rc = COLL_ESYS;
            err = errno;
        }
        if (rc != COLL_OK)
            unlink(tmp);
    } else {
        err = errno;
    }
    free(xs);
    free(ms);
    if (rc != COLL_OK)
        cl_log(COLL_LOG_WARN, "rank %d: flight recorder: cannot write %s: %s", r->comm->rank,
               path, strerror(err));
    else
        cl_log(COLL_LOG_INFO, "rank %d: flight recorder written to %s (%s)", r->comm->rank,
               path, reason);
    return rc;
}

/* The file in dir: coll-recorder-<job>-<communicator>-<rank>.json; dir made if missing. */
static int write_in(const cl_rec *r, const char *dir, const char *reason)
{
    char path[4096];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        cl_log(COLL_LOG_WARN, "rank %d: flight recorder: cannot make %s: %s", r->comm->rank,
               dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/coll-recorder-%s-%016llx-%d.json", dir, r->job,
             (unsigned long long)r->comm->id, r->comm->rank);
    return write_file(r, path, reason);
}

int coll_recorder_dump(coll_comm *comm, const char *path)
{
    if (!comm)
        return COLL_EINVAL;
    if (!comm->rec)
        return COLL_ENOTSUP;
    const cl_rec *r = comm->rec;
    return path ? write_file(r, path, "coll_recorder_dump")
                : write_in(r, r->cfg.dir ? r->cfg.dir : ".", "coll_recorder_dump");
}

/* Only the first failure writes: what follows on a failed communicator is its echo. */
static void failure_file(cl_rec *r, int kind, uint32_t seq, int status)
{
    if (!r->cfg.dir || atomic_exchange(&r->dumped, 1))
        return;
    char reason[160];
    snprintf(reason, sizeof(reason), "%s #%u failed: %s", cl_kind_name(kind), seq,
             coll_strerror(status));
    write_in(r, r->cfg.dir, reason);
}

/* How long a failure waits for the others' heads: what the diagnosis adds to it. */
enum { SURVEY_MS = 500 };

/* The diagnosis: the first collective of c that fails on a peer or a timeout asks the
 * other ranks what they are doing (status.c's survey) and adds what differs to c's
 * sentence, before the caller is handed the failure: "rank 3 never issued allreduce #88
 * (its newest: allreduce #87, done 31.0 s ago)" says more than the neighbour a ring
 * waited on. Not where the heartbeat found a rank silent: its sentence names that rank
 * already, and a survey would wait out the silent rank's answer for nothing. */
static void diagnose(coll_comm *c, cl_rec *r, const cl_op *op, int status)
{
    const cl_status *s = cl_beat_status(c);
    char said[400];
    int cause, why, silent_ms;
    if (!s || (status != COLL_ETIMEDOUT && status != COLL_EPEER) ||
        atomic_exchange(&r->surveyed, 1))
        return;
    cl_comm_cause(c, &cause, &why, &silent_ms);
    if (silent_ms > 0)
        return;
    /* A rank whose link closed (killed, or gone) answers nobody: asking it would hold
     * every survivor's failure, and so a shrink, for the whole wait. */
    int gone = why == COLL_EPEER && cause != c->rank ? cause : -1;
    cl_status_survey(s, c, op->kind, op->seq, gone, SURVEY_MS, said, sizeof(said));
    if (!said[0])
        return;
    cl_log(COLL_LOG_ERROR, "rank %d %s #%u: the others: %s", c->rank, cl_kind_name(op->kind),
           op->seq, said);
    pthread_mutex_lock(&c->mu);
    size_t n = strlen(c->err);
    snprintf(c->err + n, sizeof(c->err) - n, "; the others: %s", said);
    pthread_mutex_unlock(&c->mu);
}

void cl_rec_failed(coll_comm *c, const cl_op *op, int status)
{
    cl_rec *r = c->rec;
    struct cl_rec_entry *e = cl_rec_entry_of(r, op);
    if (e) {
        int64_t started_us = to_us(__atomic_load_n(&e->started, __ATOMIC_RELAXED));
        uint64_t now = cl_rec_bytes(c), bytes0 = __atomic_load_n(&e->bytes0, __ATOMIC_RELAXED);
        CL_REC_PUT(e->ended, cl_clock_ticks());
        CL_REC_PUT(e->bytes, started_us && now > bytes0 ? now - bytes0 : 0);
        CL_REC_PUT(e->progress_us, started_us ? last_progress_us(r, now, started_us) : 0);
        CL_REC_PUT(e->status, status);
        __atomic_store_n(&e->state, COLL_REC_FAILED, __ATOMIC_RELEASE);
        if (r->trace)
            cl_trace_add(r->trace, e, &r->spans);
    }
    diagnose(c, r, op, status);
    failure_file(r, op->kind, op->seq, status);
}

void cl_rec_p2p_end(coll_comm *c, uint32_t n, int status, uint64_t bytes)
{
    cl_rec *r = c->rec;
    struct cl_rec_entry *e = r && n ? &r->p2p[n & r->mask] : NULL;
    if (!e || __atomic_load_n(&e->seq, __ATOMIC_RELAXED) != n)
        return; /* off, or taken by a newer one */
    CL_REC_PUT(e->ended, cl_clock_ticks());
    CL_REC_PUT(e->bytes, bytes);
    CL_REC_PUT(e->status, status);
    __atomic_store_n(&e->state, status == COLL_OK ? COLL_REC_DONE : COLL_REC_FAILED,
                     __ATOMIC_RELEASE);
    if (r->trace)
        cl_trace_add(r->trace, e, NULL);
    if (status != COLL_OK)
        failure_file(r, __atomic_load_n(&e->kind, __ATOMIC_RELAXED),
                     __atomic_load_n(&e->msg, __ATOMIC_RELAXED), status);
}

/* ---- the signal --------------------------------------------------------------------- */

/* The handler writes a byte to a pipe (async-signal-safe); this thread reads it and
 * writes every live recorder's file. One thread and one handler per process. */
static int wake[2] = {-1, -1};
static pthread_once_t signal_once = PTHREAD_ONCE_INIT;
static int signal_wanted;

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    char b = 1;
    if (write(wake[1], &b, 1) < 0) { /* full: a dump is already due */
    }
    errno = saved;
}

static void *signal_main(void *arg)
{
    (void)arg;
    char b[64];
    for (;;) {
        ssize_t got = read(wake[0], b, sizeof(b));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return NULL;
        pthread_mutex_lock(&live_mu);
        for (cl_rec *r = live; r; r = r->next)
            write_in(r, r->cfg.dir ? r->cfg.dir : ".", "signal");
        pthread_mutex_unlock(&live_mu);
    }
}

static void signal_setup(void)
{
    pthread_t t;
    pthread_attr_t a;
    if (pipe(wake) != 0) {
        cl_log(COLL_LOG_WARN, "flight recorder: no pipe for the signal: %s", strerror(errno));
        return;
    }
    for (int i = 0; i < 2; i++)
        fcntl(wake[i], F_SETFD, FD_CLOEXEC);
    fcntl(wake[1], F_SETFL, O_NONBLOCK);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, signal_main, NULL);
    pthread_attr_destroy(&a);
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (rc != 0 || sigaction(signal_wanted, &sa, NULL) != 0)
        cl_log(COLL_LOG_WARN, "flight recorder: cannot listen for signal %d", signal_wanted);
}

/* The first signal asked for is the one listened to, for the process's life. */
static void listen_for_signal(int sig)
{
    signal_wanted = sig;
    pthread_once(&signal_once, signal_setup);
}

/* ---- a traced collective's children (algo/tally.h) ---------------------------------- */

void cl_rec_spans_reset(cl_rec *r)
{
    r->spans.n = r->spans.dropped = r->spans.phase = r->spans.depth = 0;
}
