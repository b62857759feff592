/* The flight recorder (record.c): each communicator's last few collectives in a ring of
 * entries indexed by sequence number, read through the API and written as JSON when an
 * operation fails, on request, or on a signal. The hooks below run on every collective,
 * so they take no lock, call nothing and read a clock at most twice (the TSC on x86):
 * one writer per entry at a time (the issuer, then the thread running it), readers on
 * any thread load the fields one by one. */
#ifndef CL_RECORD_H
#define CL_RECORD_H

#include "base/clock.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/trace.h"

#include <stdint.h>
#include <stdio.h>

#define CL_REC_DEFAULT_OPS 64
#define CL_REC_MAX_OPS (1 << 20)

/* One collective, send or receive. `state` is stored last with release: a reader that
 * loads it first sees the fields its writer stored before. */
struct cl_rec_entry {
    uint32_t seq; /* 0: empty, or being rewritten for a newer one; a send's or receive's
                   * number among them (`p2p_n`), its message number in `msg` */
    int32_t state, status;
    uint8_t kind, dtype, op, codec;
    int32_t root; /* p2p: the peer */
    uint32_t tag, msg;
    uint64_t count;
    const char *algo;
    uint64_t issued, started, ended; /* cl_clock_ticks ticks; 0: not yet */
    uint64_t bytes0, bytes;          /* the wire counters when it started; moved by its end */
    int64_t progress_us;             /* a failed one's last progress */
    cl_moved moved;                  /* a collective's bytes by peer (algo/tally.h) */
};

typedef struct cl_rec {
    coll_comm *comm;
    struct cl_rec_entry *e, *p2p; /* collectives by sequence number; sends and receives */
    uint32_t mask;  /* entries - 1 (each ring), a power of two */
    uint32_t p2p_n; /* sends and receives recorded: under the hub's p2p_mu (p2p.c) */
    cl_stall stall;
    atomic_int dumped;   /* the failure dump was written (once per communicator) */
    atomic_int surveyed; /* the others were asked about a failure (once, record.c) */
    cl_rec_config cfg;
    char job[CL_JOB_NAME];
    char dir[256];
    cl_trace *trace;     /* COLL_TRACE's consumer of ended entries (trace.h); NULL: off */
    cl_running run;      /* the running collective, where its passes count (cl_algo_ctx) */
    cl_spans spans;      /* its children while traced (run.spans points here then) */
    struct cl_rec *next; /* every live recorder, for the signal's dump */
} cl_rec;

#define CL_REC_PUT(f, v) __atomic_store_n(&(f), (v), __ATOMIC_RELAXED)

static inline uint64_t cl_rec_bytes(const coll_comm *c)
{
    return atomic_load_explicit(&c->ran.wire_tx, memory_order_relaxed) +
           atomic_load_explicit(&c->ran.wire_rx, memory_order_relaxed);
}

/* A collective issued (its seq just given): queued, or running at once on the caller's
 * thread (then it started when it was issued). */
static inline void cl_rec_issue(coll_comm *c, const cl_op *op, int running)
{
    cl_rec *r = c->rec;
    if (!r)
        return;
    struct cl_rec_entry *e = &r->e[op->seq & r->mask];
    uint64_t now = cl_clock_ticks();
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    CL_REC_PUT(e->kind, (uint8_t)op->kind);
    CL_REC_PUT(e->dtype, (uint8_t)op->dtype);
    CL_REC_PUT(e->op, (uint8_t)op->op);
    CL_REC_PUT(e->codec, (uint8_t)op->codec);
    CL_REC_PUT(e->root, op->root);
    CL_REC_PUT(e->count, (uint64_t)op->count);
    CL_REC_PUT(e->algo, (const char *)"");
    CL_REC_PUT(e->status, COLL_OK);
    CL_REC_PUT(e->issued, now);
    CL_REC_PUT(e->started, running ? now : 0);
    CL_REC_PUT(e->ended, (uint64_t)0);
    CL_REC_PUT(e->bytes0, cl_rec_bytes(c));
    CL_REC_PUT(e->bytes, (uint64_t)0);
    CL_REC_PUT(e->progress_us, (int64_t)0);
    CL_REC_PUT(e->moved.used, 0u);
    CL_REC_PUT(e->state, running ? COLL_REC_RUNNING : COLL_REC_QUEUED);
    __atomic_store_n(&e->seq, op->seq, __ATOMIC_RELEASE);
}

/* Its entry, unless a newer collective took the slot (more were issued behind it than
 * the recorder keeps). */
static inline struct cl_rec_entry *cl_rec_entry_of(const cl_rec *r, const cl_op *op)
{
    struct cl_rec_entry *e = &r->e[op->seq & r->mask];
    return __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == op->seq ? e : NULL;
}

/* A traced collective starts: no children yet (record.c). */
void cl_rec_spans_reset(cl_rec *r);

/* It starts running with algorithm `algo`: its passes count into its entry from now. */
static inline void cl_rec_start(coll_comm *c, const cl_op *op, const char *algo)
{
    struct cl_rec_entry *e = c->rec ? cl_rec_entry_of(c->rec, op) : NULL;
    if (c->rec)
        c->rec->run.moved = e ? &e->moved : NULL;
    if (c->rec && c->rec->run.spans)
        cl_rec_spans_reset(c->rec);
    if (!e)
        return;
    CL_REC_PUT(e->algo, algo);
    if (!__atomic_load_n(&e->started, __ATOMIC_RELAXED)) { /* it was queued */
        CL_REC_PUT(e->started, cl_clock_ticks());
        CL_REC_PUT(e->bytes0, cl_rec_bytes(c));
    }
    __atomic_store_n(&e->state, COLL_REC_RUNNING, __ATOMIC_RELEASE);
}

/* A failed collective's end, and the failure dump (record.c). */
void cl_rec_failed(coll_comm *c, const cl_op *op, int status);

/* It ended with status. */
static inline void cl_rec_end(coll_comm *c, const cl_op *op, int status)
{
    if (!c->rec)
        return;
    c->rec->run.moved = NULL;
    if (status != COLL_OK) {
        cl_rec_failed(c, op, status);
        return;
    }
    struct cl_rec_entry *e = cl_rec_entry_of(c->rec, op);
    if (!e)
        return;
    CL_REC_PUT(e->ended, cl_clock_ticks());
    CL_REC_PUT(e->bytes, cl_rec_bytes(c) - __atomic_load_n(&e->bytes0, __ATOMIC_RELAXED));
    __atomic_store_n(&e->state, COLL_REC_DONE, __ATOMIC_RELEASE);
    if (c->rec->trace)
        cl_trace_add(c->rec->trace, e, &c->rec->spans);
}

/* Sends and receives (p2p.c, under the hub's p2p_mu): one posted (running), or one done
 * at once on the fast path with status and bytes; returns its entry's number for
 * cl_rec_p2p_end (0: the recorder is off). */
static inline uint32_t cl_rec_p2p(coll_comm *c, const cl_op *op, int status, uint64_t bytes,
                                  int done)
{
    cl_rec *r = c->rec;
    if (!r)
        return 0;
    uint32_t n = ++r->p2p_n;
    struct cl_rec_entry *e = &r->p2p[n & r->mask];
    uint64_t now = cl_clock_ticks();
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    CL_REC_PUT(e->kind, (uint8_t)op->kind);
    CL_REC_PUT(e->dtype, (uint8_t)op->dtype);
    CL_REC_PUT(e->root, op->root);
    CL_REC_PUT(e->tag, op->tag);
    CL_REC_PUT(e->msg, op->seq);
    CL_REC_PUT(e->count, (uint64_t)op->count);
    CL_REC_PUT(e->status, status);
    CL_REC_PUT(e->issued, now);
    CL_REC_PUT(e->started, now);
    CL_REC_PUT(e->ended, done ? now : 0);
    CL_REC_PUT(e->bytes, bytes);
    CL_REC_PUT(e->state, !done ? COLL_REC_RUNNING : status ? COLL_REC_FAILED : COLL_REC_DONE);
    __atomic_store_n(&e->seq, n, __ATOMIC_RELEASE);
    if (done && r->trace)
        cl_trace_add(r->trace, e, NULL);
    return n;
}

/* A posted send or receive (entry n) ended; its failure writes the file. */
void cl_rec_p2p_end(coll_comm *c, uint32_t n, int status, uint64_t bytes);

/* The newest collective and the newest send or receive of c, as coll_recorder_read
 * gives them (seq 0, kind "", where there is none or the recorder is off): what the
 * status endpoint answers (status.c). Any thread. */
void cl_rec_head(const coll_comm *c, coll_record *coll, coll_record *p2p);

/* s as a JSON string: quotes, backslashes and control characters escaped (the files
 * here and trace.c's). */
void cl_json_string(FILE *f, const char *s);

/* A collective's bytes by peer as JSON members (the dump's and the trace's): ,
 * "peers": [{"rank": r, "tx": bytes, "rx": bytes} ...], "others_tx": .., "others_rx": ..
 * (headers included, as `bytes`). */
void cl_json_moved(FILE *f, const cl_moved *m);

/* Reads the COLL_RECORDER_* variables and coll_config.recorder_ops into out. */
int cl_rec_configure(const coll_config *user, cl_rec_config *out, char *err, size_t errlen);
/* The recorder of a new communicator c (none when cfg->ops is 0): COLL_OK or
 * COLL_ENOMEM. job: the job's name when cfg has none. */
int cl_rec_open(coll_comm *c, const cl_rec_config *cfg, const char *job);
/* Where c's passes note their waits (NULL when the recorder is off). */
cl_stall *cl_rec_stall(coll_comm *c);
/* Where c's passes count their bytes by peer and, traced, their steps (NULL: off). */
cl_running *cl_rec_running(coll_comm *c);
/* The settings a communicator derived from c inherits. */
cl_rec_config cl_rec_config_of(const coll_comm *c);
void cl_rec_close(coll_comm *c);

#endif
