/* The public operations: check the arguments, build a request, hand it to the engine
 * (collectives) or the transport (point-to-point). Blocking = non-blocking + wait.
 * Bad input is a status and a log line, never a crash. */
#include "core/args.h"

#include "algo/algo.h"
#include "base/log.h"
#include "base/names.h"
#include "base/util.h"
#include "core/error.h"
#include "core/fail.h"
#include "kernels/codec.h"
#include "kernels/reduce.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each operation once, named by the call the user made (blocking or not). */
static int allreduce(const char *fn, coll_comm *c, const void *s, void *r, size_t count,
                     coll_dtype dt, coll_op op, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, s, r, count, 1, dt);
    size_t bytes = count * cl_dtype_size(dt);
    if (rc == COLL_OK)
        rc = cl_check_overlap(fn, c, s, bytes, r, bytes, s == r);
    if (rc == COLL_OK)
        rc = cl_check_op(fn, c, op, dt);
    if (rc == COLL_OK)
        rc = cl_check_algo(fn, c, CL_ALLREDUCE, count, dt, op);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_ALLREDUCE, s, r, count, dt, op, 0, 0, req) : rc;
}

/* In place: the result at the start of sendbuf, or in this rank's block of it. */
static int reduce_scatter(const char *fn, coll_comm *c, const void *s, void *r, size_t count,
                          coll_dtype dt, coll_op op, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, s, r, count, c ? (size_t)c->size : 1, dt);
    size_t bytes = count * cl_dtype_size(dt);
    if (rc == COLL_OK) {
        const char *own = (const char *)s + (size_t)c->rank * bytes;
        rc = cl_check_overlap(fn, c, s, bytes * (size_t)c->size, r, bytes,
                           r == s || (const char *)r == own);
    }
    if (rc == COLL_OK)
        rc = cl_check_op(fn, c, op, dt);
    if (rc == COLL_OK)
        rc = cl_check_algo(fn, c, CL_REDUCE_SCATTER, count, dt, op);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_REDUCE_SCATTER, s, r, count, dt, op, 0, 0, req) : rc;
}

/* In place: this rank's block at the start of recvbuf, or already at its place. */
static int allgather(const char *fn, coll_comm *c, const void *s, void *r, size_t count,
                     coll_dtype dt, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, s, r, count, c ? (size_t)c->size : 1, dt);
    size_t bytes = count * cl_dtype_size(dt);
    if (rc == COLL_OK) {
        const char *own = (const char *)r + (size_t)c->rank * bytes;
        rc = cl_check_overlap(fn, c, s, bytes, r, bytes * (size_t)c->size,
                           s == r || (const char *)s == own);
    }
    if (rc == COLL_OK)
        rc = cl_check_algo(fn, c, CL_ALLGATHER, count, dt, COLL_SUM);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_ALLGATHER, s, r, count, dt, COLL_SUM, 0, 0, req) : rc;
}

static int broadcast(const char *fn, coll_comm *c, void *buf, size_t count, coll_dtype dt,
                     int root, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, buf, buf, count, 1, dt);
    if (rc == COLL_OK)
        rc = cl_check_root(fn, c, root);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_BROADCAST, buf, buf, count, dt, COLL_SUM, root, 0, req) : rc;
}

static int p2p_check(const char *fn, coll_comm *c, const void *buf, size_t count, int dt,
                     int peer)
{
    int rc = cl_check(fn, c, buf, buf, count, 1, dt);
    if (rc == COLL_OK && (peer < 0 || peer >= c->size || peer == c->rank))
        rc = cl_bad(c, fn, "peer %d is out of range [0, %d) or this rank", peer, c->size);
    if (rc == COLL_OK && count * cl_dtype_size(dt) > (1u << 30)) {
        cl_log(COLL_LOG_WARN, "%s: messages above 1 GiB are not supported", fn);
        rc = COLL_ENOTSUP;
    }
    return rc;
}

static int p2p_start(coll_comm *c, int kind, const void *buf, size_t count, int dt, int peer,
                     uint32_t tag, coll_req **req)
{
    return kind == CL_SEND ? cl_start(c, CL_SEND, buf, NULL, count, dt, 0, peer, tag, req)
                           : cl_start(c, CL_RECV, NULL, (void *)buf, count, dt, 0, peer, tag, req);
}

static int p2p(const char *fn, coll_comm *c, int kind, const void *buf, size_t count, int dt,
               int peer, uint32_t tag, coll_req **req)
{
    cl_clear_req(req);
    int rc = p2p_check(fn, c, buf, count, dt, peer);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? p2p_start(c, kind, buf, count, dt, peer, tag, req) : rc;
}

/* dst == src == this rank: the message is the copy, matched as a receive would be. */
static int sendrecv_self(const char *fn, coll_comm *c, const void *s, size_t sn, void *r,
                         size_t rn, int dt)
{
    int rc = cl_check(fn, c, s, r, CL_MAX(sn, rn), 1, dt);
    if (rc == COLL_OK && sn != rn)
        return cl_refuse(c, fn, COLL_EMISMATCH, "sends a count the receive does not expect");
    if (rc == COLL_OK && sn && s != r)
        memmove(r, s, sn * cl_dtype_size(dt));
    return rc;
}

int coll_sendrecv(coll_comm *c, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                  coll_dtype dt, uint32_t tag)
{
    const char *fn = __func__;
    if (c && dst == c->rank && src == c->rank)
        return sendrecv_self(fn, c, s, sn, r, rn, dt);
    int rc = p2p_check(fn, c, s, sn, dt, dst);
    if (rc == COLL_OK)
        rc = p2p_check(fn, c, r, rn, dt, src);
    coll_req *rq = NULL, *sq = NULL;
    /* The receive is posted first: whatever order the peers use, each one's message has
     * a place to go, so neither send waits on the other. */
    if (rc == COLL_OK)
        rc = p2p_start(c, CL_RECV, r, rn, dt, src, tag, &rq);
    if (rc != COLL_OK)
        return rc;
    int sent = p2p_start(c, CL_SEND, s, sn, dt, dst, tag, &sq);
    if (sq)
        sent = coll_wait(sq);
    int rrc = coll_wait(rq);
    return sent != COLL_OK ? sent : rrc;
}

int coll_iallreduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, coll_op op,
                    coll_req **req)
{
    return allreduce(__func__, c, s, r, count, dt, op, req);
}

int coll_ireduce_scatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                         coll_op op, coll_req **req)
{
    return reduce_scatter(__func__, c, s, r, count, dt, op, req);
}

int coll_iallgather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                    coll_req **req)
{
    return allgather(__func__, c, s, r, count, dt, req);
}

int coll_ibroadcast(coll_comm *c, void *buf, size_t count, coll_dtype dt, int root, coll_req **req)
{
    return broadcast(__func__, c, buf, count, dt, root, req);
}

int coll_isend(coll_comm *c, const void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag,
               coll_req **req)
{
    return p2p(__func__, c, CL_SEND, buf, count, dt, peer, tag, req);
}

int coll_irecv(coll_comm *c, void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag,
               coll_req **req)
{
    return p2p(__func__, c, CL_RECV, buf, count, dt, peer, tag, req);
}

int coll_allreduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, coll_op op)
{
    return allreduce(__func__, c, s, r, count, dt, op, CL_BLOCKING);
}

int coll_reduce_scatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                        coll_op op)
{
    return reduce_scatter(__func__, c, s, r, count, dt, op, CL_BLOCKING);
}

int coll_allgather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    return allgather(__func__, c, s, r, count, dt, CL_BLOCKING);
}

int coll_broadcast(coll_comm *c, void *buf, size_t count, coll_dtype dt, int root)
{
    return broadcast(__func__, c, buf, count, dt, root, CL_BLOCKING);
}

static int barrier(const char *fn, coll_comm *c, coll_req **req)
{
    cl_clear_req(req);
    if (!c)
        return cl_bad(c, fn, "communicator is NULL");
    int rc = cl_comm_state(c);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    if (rc != COLL_OK)
        return rc;
    return cl_start(c, CL_BARRIER, NULL, NULL, 0, COLL_U8, COLL_SUM, 0, 0, req);
}

int coll_barrier(coll_comm *c)
{
    return barrier(__func__, c, CL_BLOCKING);
}

int coll_ibarrier(coll_comm *c, coll_req **req)
{
    return barrier(__func__, c, req);
}

int coll_send(coll_comm *c, const void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag)
{
    return p2p(__func__, c, CL_SEND, buf, count, dt, peer, tag, CL_BLOCKING);
}

int coll_recv(coll_comm *c, void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag)
{
    return p2p(__func__, c, CL_RECV, buf, count, dt, peer, tag, CL_BLOCKING);
}

/* Collective: every rank learns every rank's choice, so a disagreement is
 * COLL_EMISMATCH on all of them and the codec stays as it was. */
int coll_set_codec(coll_comm *c, coll_codec codec)
{
    if (!c || codec < COLL_CODEC_NONE || codec > COLL_CODEC_INT8)
        return cl_bad(c, __func__, "communicator is NULL or codec %d invalid", (int)codec);
    int32_t mine = (int32_t)codec, *all = calloc((size_t)c->size, sizeof(int32_t));
    if (!all)
        return cl_comm_no_memory(c, __func__);
    int rc = coll_allgather(c, &mine, all, 1, COLL_I32);
    for (int p = 0; rc == COLL_OK && p < c->size; p++)
        if (all[p] != mine) {
            cl_log(COLL_LOG_ERROR, "coll_set_codec: rank %d asks for %s, rank %d for %s", c->rank,
                   cl_codec_name(mine), p, cl_codec_name(all[p]));
            rc = COLL_EMISMATCH;
        }
    free(all);
    if (rc == COLL_OK)
        c->codec = codec; /* read only by the engine, after this rank's next submit */
    return rc;
}

int coll_iallreduce_ef(coll_comm *c, const float *s, float *r, size_t count, coll_op op,
                       coll_codec codec, float *residual, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(__func__, c, s, r, count, 1, COLL_F32);
    if (rc == COLL_OK && (op != COLL_SUM && op != COLL_AVG)) {
        cl_log(COLL_LOG_WARN, "%s: codecs reduce f32 with sum or avg only, not %s", __func__,
               cl_op_name(op));
        rc = COLL_ENOTSUP;
    }
    if (rc == COLL_OK &&
        (codec < COLL_CODEC_NONE || codec > COLL_CODEC_INT8 || !req || (count && !residual)))
        rc = cl_bad(c, __func__, "invalid codec, or residual or req is NULL");
    if (rc != COLL_OK)
        return rc;
    cl_op o = {.kind = CL_ALLREDUCE, .sbuf = s, .rbuf = r, .count = count, .dtype = COLL_F32,
               .op = op, .codec = codec,
               .residual = codec == COLL_CODEC_NONE ? NULL : residual};
    return cl_launch(c, &o, req);
}

int coll_allreduce_ef(coll_comm *c, const float *s, float *r, size_t count, coll_op op,
                      coll_codec codec, float *residual)
{
    return coll_iallreduce_ef(c, s, r, count, op, codec, residual, CL_BLOCKING);
}

size_t coll_allreduce_wire_bytes(const coll_comm *c, size_t count, coll_dtype dt)
{
    size_t es = cl_dtype_size(dt);
    if (!c || !es || count > SIZE_MAX / es / 2)
        return 0;
    char why[256];
    cl_op op = {.kind = CL_ALLREDUCE, .count = count, .dtype = dt, .op = COLL_SUM};
    const cl_algo *a = cl_choose(&c->topo, c->force, &op, why, sizeof(why));
    return a ? a->cost(cl_topo_ctx(&c->topo, a, &op), &op).bytes : 0;
}

int coll_get_stats(const coll_comm *c, coll_stats *out)
{
    if (!c || !out)
        return COLL_EINVAL;
    coll_comm *m = (coll_comm *)c;
    *out = (coll_stats){atomic_load(&m->ops) + atomic_load(&m->ran.ops) + atomic_load(&m->now.ops),
                        atomic_load(&m->bytes_in) + atomic_load(&m->now.bytes_in),
                        atomic_load(&m->wire_tx) + atomic_load(&m->ran.wire_tx) +
                            atomic_load(&m->now.wire_tx),
                        atomic_load(&m->wire_rx) + atomic_load(&m->ran.wire_rx) +
                            atomic_load(&m->now.wire_rx),
                        atomic_load(&m->errors)};
    return COLL_OK;
}

void coll_reset_stats(coll_comm *c)
{
    if (!c)
        return;
    atomic_store(&c->ops, 0);
    atomic_store(&c->bytes_in, 0);
    atomic_store(&c->wire_tx, 0);
    atomic_store(&c->wire_rx, 0);
    atomic_store(&c->errors, 0);
    atomic_store(&c->ran.ops, 0);
    atomic_store(&c->ran.wire_tx, 0);
    atomic_store(&c->ran.wire_rx, 0);
    atomic_store(&c->now.ops, 0);
    atomic_store(&c->now.bytes_in, 0);
    atomic_store(&c->now.wire_tx, 0);
    atomic_store(&c->now.wire_rx, 0);
}
