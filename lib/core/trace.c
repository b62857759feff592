/* Traces (trace.h): the recorder's ended entries of every traced communicator of the
 * process, kept in one list and written as a Chrome trace-event file when the last of
 * them goes. Nothing here runs unless COLL_TRACE is set: the recorder's hooks test one
 * pointer. Times are written in rank 0's CLOCK_MONOTONIC microseconds: each process
 * measures its offset once, at init, NTP-style (the midpoint of the fastest of a few
 * round trips with rank 0). */
#include "core/trace.h"

#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/record.h"
#include "kernels/codec.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DEFAULT_MAX_EVENTS = 1 << 20 };
#define CL_TRACE_NAMED 64 /* communicators named in the file (the rest by number) */

struct cl_trace {
    int tid; /* its communicator's, in the file */
};

/* What the file shows of one entry: the entry as it ended, and its communicator. */
typedef struct {
    struct cl_rec_entry e;
    int tid;
} event;

/* A child of a collective, and its parent's times (a child is drawn inside them). */
typedef struct {
    cl_span s;
    uint64_t lo, hi;
    uint32_t seq;
    int tid;
} child;

static struct {
    pthread_mutex_t mu;
    event *evs;
    child *kids;
    size_t n, cap, max, dropped;
    size_t nk, capk; /* children: held to the same max */
    int open;           /* traced communicators not yet closed */
    int tids;           /* communicators traced so far: the next one's tid */
    int rank, size;     /* in the communicator that aligned (coll_init's); -1: none */
    double offset_us;   /* rank 0's clock less this process's */
    double rtt_us;      /* the round trip it was measured over */
    double skew_us;     /* COLL_TRACE_SKEW_US: a test's clock, off by this much */
    cl_timebase base; /* the file's conversion of ticks, one for all its times */
    char job[CL_JOB_NAME];
    char comms[CL_TRACE_NAMED][20]; /* the first communicators' ids, by tid, for their names */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .rank = -1};

const char *cl_trace_dir(void)
{
    const char *d = getenv("COLL_TRACE");
    return d && *d ? d : NULL;
}

/* Reads the limits once, with the first traced communicator (under g.mu). */
static void configure(void)
{
    const char *max = getenv("COLL_TRACE_MAX_EVENTS"), *skew = getenv("COLL_TRACE_SKEW_US");
    long n;
    g.max = max && cl_parse_long(max, 1, 1L << 28, &n) == 0 ? (size_t)n : DEFAULT_MAX_EVENTS;
    g.skew_us = skew ? strtod(skew, NULL) : 0;
}

cl_trace *cl_trace_open(const char *job)
{
    if (!cl_trace_dir())
        return NULL;
    cl_trace *t = calloc(1, sizeof(*t));
    if (!t) {
        cl_log(COLL_LOG_WARN, "COLL_TRACE: no memory: communicator not traced");
        return NULL;
    }
    pthread_mutex_lock(&g.mu);
    if (!g.tids)
        configure();
    if (!g.job[0])
        snprintf(g.job, sizeof(g.job), "%s", job);
    t->tid = g.tids++;
    g.open++;
    pthread_mutex_unlock(&g.mu);
    return t;
}

/* Room for one more in *a (n used of *cap, elements of `size`), up to g.max (under g.mu). */
static int room(void **a, size_t n, size_t *cap, size_t size)
{
    if (n == *cap && n < g.max) {
        size_t more_cap = *cap ? CL_MIN(2 * *cap, g.max) : 1024;
        void *more = realloc(*a, more_cap * size);
        if (more) {
            *a = more;
            *cap = more_cap;
        }
    }
    return n < *cap;
}

/* The collective's children, each with its times (under g.mu). */
static void add_kids(const event *ev, const cl_spans *kids)
{
    for (uint32_t i = 0; i < kids->n; i++) {
        if (!room((void **)&g.kids, g.nk, &g.capk, sizeof(*g.kids))) {
            g.dropped += kids->n - i;
            return;
        }
        g.kids[g.nk++] = (child){.s = kids->s[i], .lo = ev->e.issued, .hi = ev->e.ended,
                                 .seq = ev->e.seq, .tid = ev->tid};
    }
    g.dropped += kids->dropped;
}

void cl_trace_add(cl_trace *t, const struct cl_rec_entry *e, const cl_spans *kids)
{
    event ev = {.e = *e, .tid = t->tid};
    if (ev.e.seq != __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) || !ev.e.seq)
        return; /* a newer operation took the entry meanwhile */
    pthread_mutex_lock(&g.mu);
    if (room((void **)&g.evs, g.n, &g.cap, sizeof(*g.evs))) {
        g.evs[g.n++] = ev;
        if (kids)
            add_kids(&ev, kids);
    } else {
        g.dropped += 1 + (kids ? kids->n : 0);
    }
    pthread_mutex_unlock(&g.mu);
}

double cl_trace_now_us(void)
{
    return cl_clock_us(cl_clock_ticks()) + g.skew_us;
}

int cl_trace_offset(const coll_comm *c, double *offset)
{
    if (!c->rec || !c->rec->trace)
        return 0;
    pthread_mutex_lock(&g.mu);
    *offset = g.offset_us;
    pthread_mutex_unlock(&g.mu);
    return 1;
}

/* Drops what traced communicator tid did so far (under g.mu). */
static void forget(int tid)
{
    size_t k = 0;
    for (size_t i = 0; i < g.n; i++)
        if (g.evs[i].tid != tid)
            g.evs[k++] = g.evs[i];
    g.n = k;
    k = 0;
    for (size_t i = 0; i < g.nk; i++)
        if (g.kids[i].tid != tid)
            g.kids[k++] = g.kids[i];
    g.nk = k;
}

void cl_trace_aligned(coll_comm *c, int rc, double offset, double rtt)
{
    cl_trace *t = c->rec->trace;
    if (rc != COLL_OK)
        cl_log(COLL_LOG_WARN, "rank %d: COLL_TRACE: clocks not aligned with rank 0 (%s): "
               "this rank's times are its own", c->rank, coll_strerror(rc));
    pthread_mutex_lock(&g.mu);
    if (g.rank < 0) { /* the first; a survivor of a grow keeps its own */
        g.rank = c->rank;
        g.size = c->size;
        g.offset_us = rc == COLL_OK ? offset : 0;
        g.rtt_us = rtt;
    }
    forget(t->tid); /* the library's own setup, the alignment's round trips among it */
    pthread_mutex_unlock(&g.mu);
    cl_log(COLL_LOG_INFO, "rank %d: COLL_TRACE: clock offset to rank 0 %.1f us (round trip "
           "%.1f us)", c->rank, offset, rtt);
}

/* ---- the file ----------------------------------------------------------------------- */

static const char *status_name(int status)
{
    return status == COLL_OK ? "ok" : coll_strerror(status);
}

static int is_p2p(int kind)
{
    return kind == CL_SEND || kind == CL_RECV;
}

/* Ticks in rank 0's timebase, to the nanosecond the file writes: a child's times and
 * its parent's rounded alike still nest (Perfetto reads whole nanoseconds). */
static double aligned_us(uint64_t t)
{
    double ns = (cl_timebase_us(&g.base, t) + g.skew_us + g.offset_us) * 1000;
    return (double)(int64_t)(ns + (ns < 0 ? -0.5 : 0.5)) / 1000;
}

/* One complete event ("ph": "X"): from issued to ended, the rest in args. */
static void put_event(FILE *f, const event *ev)
{
    const struct cl_rec_entry *e = &ev->e;
    int p2p = is_p2p(e->kind);
    double issued = aligned_us(e->issued), ended = aligned_us(e->ended);
    fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
               "\"dur\": %.3f, \"pid\": %d, \"tid\": %d, \"args\": {\"seq\": %u, "
               "\"kind\": \"%s\", \"count\": %llu, \"dtype\": \"%s\", ",
            cl_kind_name(e->kind), p2p ? "p2p" : "collective", issued,
            ended > issued ? ended - issued : 0, g.rank, ev->tid, p2p ? e->msg : e->seq,
            cl_kind_name(e->kind), (unsigned long long)e->count, cl_dtype_name(e->dtype));
    if (p2p)
        fprintf(f, "\"peer\": %d, \"tag\": %u, ", e->root, e->tag);
    else
        fprintf(f, "\"op\": \"%s\", \"root\": %d, \"algorithm\": \"%s\", \"codec\": \"%s\", "
                   "\"queued_us\": %.3f, ", cl_op_name(e->op), e->root, e->algo ? e->algo : "",
                cl_codec_name(e->codec),
                e->started > e->issued ? aligned_us(e->started) - issued : 0.0);
    fprintf(f, "\"bytes\": %llu, \"status\": \"%s\"", (unsigned long long)e->bytes,
            status_name(e->status));
    if (!p2p)
        cl_json_moved(f, &e->moved);
    fputs("}}", f);
}

/* A transfer's track: one per communicator, peer and direction, after the
 * communicator's own (tids 0, 1 ...). */
static int track_of(const child *k)
{
    return (k->tid + 1) * 1000000 + 2 * k->s.peer + (k->s.what == CL_SPAN_RECV);
}

/* ts and dur of [a, b] in rank 0's clock, within [lo, hi]: the conversion rounds, and
 * a child that stuck out of its parent by a rounding would not nest in Perfetto. */
static void put_times(FILE *f, uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
    double plo = aligned_us(lo), phi = aligned_us(hi);
    double ts = CL_MAX(aligned_us(a), plo), end = CL_MIN(aligned_us(b), phi);
    fprintf(f, "\"ts\": %.3f, \"dur\": %.3f", ts, end > ts ? end - ts : 0.0);
}

/* A phase or step on its collective's track, a transfer on its peer's. */
static void put_child(FILE *f, const child *k)
{
    const cl_span *s = &k->s;
    const char *sep = s->scope[0] ? " " : "";
    int transfer = s->what == CL_SPAN_SEND || s->what == CL_SPAN_RECV;
    static const char *cats[] = {"phase", "step", "transfer", "transfer"};
    fputs(",\n{\"name\": \"", f);
    if (s->what == CL_SPAN_PHASE)
        fprintf(f, "%s%s%s", s->scope, sep, s->name);
    else if (s->what == CL_SPAN_STEP)
        fprintf(f, "%s%s%s step %d", s->scope, sep, s->name, s->step);
    else
        fprintf(f, "%s rank %d", s->what == CL_SPAN_SEND ? "to" : "from", s->peer);
    fprintf(f, "\", \"cat\": \"%s\", \"ph\": \"X\", ", cats[s->what]);
    put_times(f, s->start, s->end, k->lo, k->hi);
    fprintf(f, ", \"pid\": %d, \"tid\": %d, \"args\": {\"seq\": %u, \"phase\": \"%s\", "
               "\"scope\": \"%s\"", g.rank, transfer ? track_of(k) : k->tid, k->seq, s->name,
            s->scope);
    if (s->what != CL_SPAN_PHASE)
        fprintf(f, ", \"step\": %d", s->step);
    if (transfer)
        fprintf(f, ", \"peer\": %d, \"direction\": \"%s\", \"bytes\": %llu, "
                   "\"messages\": %u", s->peer, s->what == CL_SPAN_SEND ? "send" : "recv",
                (unsigned long long)s->bytes, s->messages);
    fputs("}}", f);
}

static int by_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Names for the transfer tracks that have events, sorted after their communicator's. */
static void put_track_names(FILE *f)
{
    int *tracks = malloc((g.nk + 1) * sizeof(*tracks)), n = 0;
    for (size_t i = 0; tracks && i < g.nk; i++)
        if (g.kids[i].s.what == CL_SPAN_SEND || g.kids[i].s.what == CL_SPAN_RECV)
            tracks[n++] = track_of(&g.kids[i]);
    if (n)
        qsort(tracks, (size_t)n, sizeof(*tracks), by_int);
    for (int i = 0; i < n; i++) {
        int t = tracks[i], peer = (t % 1000000) / 2;
        if (i && t == tracks[i - 1])
            continue;
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                   "\"args\": {\"name\": \"comm %d %s rank %d\"}}",
                g.rank, t, t / 1000000 - 1, t % 2 ? "from" : "to", peer);
        fprintf(f, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                   "\"tid\": %d, \"args\": {\"sort_index\": %d}}", g.rank, t, t);
    }
    free(tracks);
}

/* Names for the process (the rank) and its threads (the communicators). */
static void put_names(FILE *f)
{
    char host[128] = "";
    gethostname(host, sizeof(host) - 1);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
               "\"args\": {\"name\": \"rank %d (%s, pid %d)\"}}",
            g.rank, g.rank, host, (int)getpid());
    fprintf(f, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
               "\"args\": {\"sort_index\": %d}}", g.rank, g.rank);
    for (int i = 0; i < g.tids && i < CL_TRACE_NAMED; i++)
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                   "\"args\": {\"name\": \"communicator %s\"}}", g.rank, i, g.comms[i]);
}

static void put_file(FILE *f)
{
    g.base = cl_timebase_now();
    fputs("{\"traceEvents\": [\n", f);
    put_names(f);
    put_track_names(f);
    for (size_t i = 0; i < g.n; i++)
        put_event(f, &g.evs[i]);
    for (size_t i = 0; i < g.nk; i++)
        put_child(f, &g.kids[i]);
    fputs("\n], \"displayTimeUnit\": \"ns\", \"otherData\": {\"version\": 1, \"job\": ", f);
    cl_json_string(f, g.job);
    fprintf(f, ", \"rank\": %d, \"size\": %d, \"clock_offset_us\": %.3f, "
               "\"clock_rtt_us\": %.3f, \"events\": %zu, \"children\": %zu, "
               "\"dropped\": %zu}}\n",
            g.rank, g.size, g.offset_us, g.rtt_us, g.n, g.nk, g.dropped);
}

/* DIR/coll-trace-<job>-<rank>.json, written beside and renamed (under g.mu). A file
 * that cannot be written is a warning. */
static void write_trace(void)
{
    const char *dir = cl_trace_dir();
    char path[4096], tmp[4200];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        cl_log(COLL_LOG_WARN, "COLL_TRACE: cannot make %s: %s", dir, strerror(errno));
    if (g.rank >= 0)
        snprintf(path, sizeof(path), "%s/coll-trace-%s-%d.json", dir, g.job, g.rank);
    else /* no coll_init in this process: nothing to name it by but the process */
        snprintf(path, sizeof(path), "%s/coll-trace-%s-pid%d.json", dir, g.job, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL, err = errno;
    if (f) {
        put_file(f);
        ok = !ferror(f);
        err = errno;
        if (fclose(f) != 0 && ok) {
            ok = 0;
            err = errno;
        }
        if (ok && rename(tmp, path) != 0) {
            ok = 0;
            err = errno;
        }
        if (!ok)
            unlink(tmp);
    }
    if (!ok)
        cl_log(COLL_LOG_WARN, "COLL_TRACE: cannot write %s: %s", path, strerror(err));
    else
        cl_log(COLL_LOG_INFO, "COLL_TRACE: %zu operations written to %s%s", g.n, path,
               g.dropped ? " (some dropped: COLL_TRACE_MAX_EVENTS)" : "");
}

void cl_trace_close(cl_trace *t, const coll_comm *c)
{
    if (!t)
        return;
    pthread_mutex_lock(&g.mu);
    if (t->tid < CL_TRACE_NAMED) /* its id is known by now (an init's is given late) */
        snprintf(g.comms[t->tid], sizeof(g.comms[0]), "%016llx", (unsigned long long)c->id);
    if (--g.open == 0)
        write_trace();
    pthread_mutex_unlock(&g.mu);
    free(t);
}
