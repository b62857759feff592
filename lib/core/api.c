/* The public operations: check the arguments, build a request, hand it to the engine
 * (collectives) or the transport (point-to-point). Blocking = non-blocking + wait.
 * Bad input is a status and a log line, never a crash. */
#include "comm.h"

#include "log.h"
#include "util.h"
#include "../kernels/reduce.h"

#include <stdint.h>
#include <stdlib.h>

static int bad(const char *fn, const char *what)
{
    cl_log(COLL_LOG_WARN, "%s: %s", fn, what);
    return COLL_EINVAL;
}

/* Checks shared by every operation; `blocks` elements of `count` move per rank. */
static int check(const char *fn, coll_comm *c, const void *s, const void *r, size_t count,
                 size_t blocks, int dtype)
{
    if (!c)
        return bad(fn, "communicator is NULL");
    size_t es = cl_dtype_size(dtype);
    if (!es)
        return bad(fn, "invalid dtype");
    if (count > SIZE_MAX / es / blocks)
        return bad(fn, "count x dtype size overflows");
    if (count && (!s || !r))
        return bad(fn, "buffer is NULL");
    return cl_comm_state(c);
}

static int start(coll_comm *c, int kind, const void *s, void *r, size_t count, int dtype, int op,
                 int root, uint32_t tag, coll_req **out)
{
    coll_req *q = calloc(1, sizeof(*q));
    if (!q)
        return COLL_ENOMEM;
    *q = (coll_req){ .comm = c, .kind = kind, .sbuf = s, .rbuf = r, .count = count,
                     .dtype = (coll_dtype)dtype, .op = (coll_op)op, .root = root, .tag = tag };
    atomic_fetch_add(&c->bytes_in, count * cl_dtype_size(dtype));
    if (kind == CL_SEND || kind == CL_RECV) {
        int rc = cl_p2p_post(c, q);
        if (rc != COLL_OK) {
            free(q);
            return rc;
        }
    } else {
        cl_engine_submit(c, q);
    }
    *out = q;
    return COLL_OK;
}

static int finish_blocking(int rc, coll_req *q)
{
    return rc == COLL_OK ? coll_wait(q) : rc;
}

static int check_op(const char *fn, int op)
{
    return cl_op_valid(op) ? COLL_OK : bad(fn, "invalid reduction op");
}

int coll_iallreduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                    coll_op op, coll_req **req)
{
    int rc = check(__func__, c, s, r, count, 1, dt);
    if (rc == COLL_OK)
        rc = check_op(__func__, op);
    if (rc == COLL_OK && !req)
        rc = bad(__func__, "req is NULL");
    return rc == COLL_OK ? start(c, CL_ALLREDUCE, s, r, count, dt, op, 0, 0, req) : rc;
}

int coll_ireduce_scatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                         coll_op op, coll_req **req)
{
    int rc = check(__func__, c, s, r, count, c ? (size_t)c->size : 1, dt);
    if (rc == COLL_OK)
        rc = check_op(__func__, op);
    if (rc == COLL_OK && !req)
        rc = bad(__func__, "req is NULL");
    return rc == COLL_OK ? start(c, CL_REDUCE_SCATTER, s, r, count, dt, op, 0, 0, req) : rc;
}

int coll_iallgather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                    coll_req **req)
{
    int rc = check(__func__, c, s, r, count, c ? (size_t)c->size : 1, dt);
    if (rc == COLL_OK && !req)
        rc = bad(__func__, "req is NULL");
    return rc == COLL_OK ? start(c, CL_ALLGATHER, s, r, count, dt, COLL_SUM, 0, 0, req) : rc;
}

int coll_ibroadcast(coll_comm *c, void *buf, size_t count, coll_dtype dt, int root,
                    coll_req **req)
{
    int rc = check(__func__, c, buf, buf, count, 1, dt);
    if (rc == COLL_OK && (root < 0 || root >= c->size))
        rc = bad(__func__, "root out of range");
    if (rc == COLL_OK && !req)
        rc = bad(__func__, "req is NULL");
    return rc == COLL_OK ? start(c, CL_BROADCAST, buf, buf, count, dt, COLL_SUM, root, 0, req)
                         : rc;
}

static int check_p2p(const char *fn, coll_comm *c, const void *buf, size_t count, int dt,
                     int peer, coll_req **req)
{
    int rc = check(fn, c, buf, buf, count, 1, dt);
    if (rc == COLL_OK && (peer < 0 || peer >= c->size || peer == c->rank))
        rc = bad(fn, "peer out of range or this rank");
    if (rc == COLL_OK && count * cl_dtype_size(dt) > (1u << 30)) {
        cl_log(COLL_LOG_WARN, "%s: messages above 1 GiB are not supported", fn);
        rc = COLL_ENOTSUP;
    }
    if (rc == COLL_OK && !req)
        rc = bad(fn, "req is NULL");
    return rc;
}

int coll_isend(coll_comm *c, const void *buf, size_t count, coll_dtype dt, int peer,
               uint32_t tag, coll_req **req)
{
    int rc = check_p2p(__func__, c, buf, count, dt, peer, req);
    return rc == COLL_OK ? start(c, CL_SEND, buf, NULL, count, dt, 0, peer, tag, req) : rc;
}

int coll_irecv(coll_comm *c, void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag,
               coll_req **req)
{
    int rc = check_p2p(__func__, c, buf, count, dt, peer, req);
    return rc == COLL_OK ? start(c, CL_RECV, NULL, buf, count, dt, 0, peer, tag, req) : rc;
}

int coll_allreduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, coll_op op)
{
    coll_req *q = NULL;
    int rc = coll_iallreduce(c, s, r, count, dt, op, &q);
    return finish_blocking(rc, q);
}

int coll_reduce_scatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                        coll_op op)
{
    coll_req *q = NULL;
    int rc = coll_ireduce_scatter(c, s, r, count, dt, op, &q);
    return finish_blocking(rc, q);
}

int coll_allgather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    coll_req *q = NULL;
    int rc = coll_iallgather(c, s, r, count, dt, &q);
    return finish_blocking(rc, q);
}

int coll_broadcast(coll_comm *c, void *buf, size_t count, coll_dtype dt, int root)
{
    coll_req *q = NULL;
    int rc = coll_ibroadcast(c, buf, count, dt, root, &q);
    return finish_blocking(rc, q);
}

int coll_barrier(coll_comm *c)
{
    if (!c)
        return bad(__func__, "communicator is NULL");
    int rc = cl_comm_state(c);
    coll_req *q = NULL;
    if (rc == COLL_OK)
        rc = start(c, CL_BARRIER, NULL, NULL, 0, COLL_U8, COLL_SUM, 0, 0, &q);
    return finish_blocking(rc, q);
}

int coll_send(coll_comm *c, const void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag)
{
    coll_req *q = NULL;
    int rc = coll_isend(c, buf, count, dt, peer, tag, &q);
    return finish_blocking(rc, q);
}

int coll_recv(coll_comm *c, void *buf, size_t count, coll_dtype dt, int peer, uint32_t tag)
{
    coll_req *q = NULL;
    int rc = coll_irecv(c, buf, count, dt, peer, tag, &q);
    return finish_blocking(rc, q);
}

int coll_set_codec(coll_comm *c, coll_codec codec)
{
    if (!c || codec < COLL_CODEC_NONE || codec > COLL_CODEC_INT8)
        return bad(__func__, "communicator is NULL or codec invalid");
    if (codec != COLL_CODEC_NONE) {
        cl_log(COLL_LOG_WARN, "coll_set_codec: wire codecs are not available in this build");
        return COLL_ENOTSUP;
    }
    return cl_comm_state(c);
}

int coll_get_stats(const coll_comm *c, coll_stats *out)
{
    if (!c || !out)
        return COLL_EINVAL;
    coll_comm *m = (coll_comm *)c;
    *out = (coll_stats){ atomic_load(&m->ops), atomic_load(&m->bytes_in),
                         atomic_load(&m->wire_tx), atomic_load(&m->wire_rx),
                         atomic_load(&m->errors) };
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
}
