/* The link between hosts, measured at init for the cost model (choose.c) unless
 * COLL_NET_LATENCY_US or COLL_NET_GBPS says what it is: rank 0 and the first rank of
 * the next host ping-pong a few small messages (latency: half the fastest round trip)
 * and three of 2 MiB (time per byte: the fastest, less two latencies; the first pays
 * TCP's slow start), then rank 0 broadcasts what it measured, so every rank prices alike
 * and chooses alike. Once per job: a few round trips and 6 MiB (about 60 ms over
 * 1 Gbit/s), left out of the communicator's counters. And, where COLL_TRACE is set, the
 * clock offset to rank 0 that the trace's times are written in (trace.h): measured here,
 * over the public point-to-point calls, so that the trace, which the engine feeds, never
 * calls back up into them. */
#include "core/calibrate.h"
#include "core/comm.h"

#include "base/log.h"
#include "base/util.h"
#include "core/trace.h"

#include <stdlib.h>

enum { PINGS = 10, BIG_SENDS = 3, TAG = 0x7fffffff };
enum { ALIGN_ROUNDS = 8, ALIGN_TAG = 0x7ffffffe };
#define BIG_BYTES ((size_t)2 << 20)

/* Round trips of `bytes` out and 8 back, this rank leading (lead) or answering: the
 * fastest in microseconds on the leader. */
static int bounce(coll_comm *c, int peer, int lead, char *buf, size_t bytes, int times,
                  int64_t *best)
{
    int rc = COLL_OK;
    for (int i = 0; i < times && rc == COLL_OK; i++) {
        int64_t t0 = cl_now_us();
        rc = lead ? coll_send(c, buf, bytes, COLL_U8, peer, TAG)
                  : coll_recv(c, buf, bytes, COLL_U8, peer, TAG);
        if (rc == COLL_OK)
            rc = lead ? coll_recv(c, buf, 8, COLL_U8, peer, TAG)
                      : coll_send(c, buf, 8, COLL_U8, peer, TAG);
        int64_t t = cl_now_us() - t0;
        *best = i == 0 || t < *best ? t : *best;
    }
    return rc;
}

/* The pair's measurement: rank 0 leads, `other` answers; link[] set on rank 0. */
static int measure(coll_comm *c, int other, double link[2])
{
    char *buf = calloc(1, BIG_BYTES);
    int64_t rtt = 0, big = 0;
    int lead = c->rank == 0, rc = buf ? COLL_OK : COLL_ENOMEM;
    if (rc == COLL_OK)
        rc = bounce(c, other, lead, buf, 8, PINGS, &rtt);
    if (rc == COLL_OK)
        rc = bounce(c, other, lead, buf, BIG_BYTES, BIG_SENDS, &big);
    free(buf);
    double alpha = (double)rtt / 2 * 1e-6, beta = ((double)big * 1e-6 - 2 * alpha) / BIG_BYTES;
    link[0] = CL_MAX(alpha, 1e-7);
    link[1] = CL_MAX(beta, 8.0 / 1e13); /* 10 Tbit/s: timer noise, not a link */
    return rc;
}

int cl_calibrate(coll_comm *c)
{
    const cl_topo *t = &c->topo;
    if (!t->ring || c->net_given)
        return COLL_OK;
    int peer = t->ring[t->start[1]]; /* the first position of the second host */
    double link[2] = {t->net_alpha_s, t->net_beta_s};
    int rc = c->rank == 0 || c->rank == peer ? measure(c, c->rank ? 0 : peer, link) : COLL_OK;
    if (rc == COLL_OK)
        rc = coll_broadcast(c, link, 2, COLL_F64, 0);
    if (rc != COLL_OK)
        return rc;
    c->topo.net_alpha_s = link[0];
    c->topo.net_beta_s = link[1];
    coll_reset_stats(c);
    if (c->rank == 0)
        cl_log(COLL_LOG_INFO,
               "host link measured between ranks 0 and %d: %.1f us, %.2f Gbit/s (the cost "
               "model's; COLL_NET_LATENCY_US and COLL_NET_GBPS set it instead)",
               peer, link[0] * 1e6, 8.0 / link[1] / 1e9);
    return COLL_OK;
}

/* Rank 0 answers each of `peer`'s pings with its clock, aligned: where c is a grown
 * communicator, its rank 0 may be any rank of the first, whose offset it has. */
static int answer(coll_comm *c, int peer, double mine)
{
    int rc = COLL_OK;
    for (int i = 0; i < ALIGN_ROUNDS && rc == COLL_OK; i++) {
        char ping;
        rc = coll_recv(c, &ping, 1, COLL_U8, peer, ALIGN_TAG);
        double now = cl_trace_now_us() + mine;
        if (rc == COLL_OK)
            rc = coll_send(c, &now, 1, COLL_F64, peer, ALIGN_TAG);
    }
    return rc;
}

/* A rank other than 0 pings it: the offset from the fastest round trip, whose midpoint
 * is the likeliest moment rank 0 read its clock. */
static int ask(coll_comm *c, double *offset, double *rtt)
{
    int rc = COLL_OK;
    *rtt = -1;
    for (int i = 0; i < ALIGN_ROUNDS && rc == COLL_OK; i++) {
        char ping = 0;
        double theirs = 0, t1 = cl_trace_now_us();
        rc = coll_send(c, &ping, 1, COLL_U8, 0, ALIGN_TAG);
        if (rc == COLL_OK)
            rc = coll_recv(c, &theirs, 1, COLL_F64, 0, ALIGN_TAG);
        double t2 = cl_trace_now_us();
        if (rc == COLL_OK && (*rtt < 0 || t2 - t1 < *rtt)) {
            *rtt = t2 - t1;
            *offset = theirs - (t1 + t2) / 2;
        }
    }
    return rc;
}

void cl_calibrate_clock(coll_comm *c)
{
    double offset, rtt = 0;
    if (!cl_trace_offset(c, &offset))
        return;
    int rc = COLL_OK;
    for (int p = 1; c->rank == 0 && p < c->size && rc == COLL_OK; p++)
        rc = answer(c, p, offset);
    if (c->rank != 0)
        rc = ask(c, &offset, &rtt);
    cl_trace_aligned(c, rc, offset, rtt);
}
