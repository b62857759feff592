/* The rest of the collective set (API.md, additions of 2026-11-24): reduce, gather,
 * scatter, all-to-all and the uneven forms, blocking and not. Each checks its arguments
 * on the calling rank (a message naming the call and the argument) and its in-place
 * layouts, then runs as any collective: queued on the engine, in issue order. */
#include "core/args.h"

#include "kernels/reduce.h"

#include <stdint.h>

/* The sum of n counts, or SIZE_MAX when it (times the element size) overflows. */
static size_t total(const size_t *counts, int n, size_t es)
{
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (counts[i] > SIZE_MAX / es - sum)
            return SIZE_MAX;
        sum += counts[i];
    }
    return sum;
}

/* Arrays of size counts (and displacements): present, and their extent fits. */
static int check_counts(const char *fn, coll_comm *c, const char *what, const size_t *counts,
                        const size_t *displs, int need_displs, size_t es, size_t *extent)
{
    if (!counts || (need_displs && !displs))
        return cl_bad(c, fn, "%s is NULL", !counts ? what : "a displacement array");
    size_t end = total(counts, c->size, es);
    if (end == SIZE_MAX)
        return cl_bad(c, fn, "%s overflow with this dtype", what);
    for (int i = 0; displs && i < c->size; i++) {
        if (displs[i] > SIZE_MAX / es - counts[i])
            return cl_bad(c, fn, "displacement %d overflows with this dtype", i);
        end = displs[i] + counts[i] > end ? displs[i] + counts[i] : end;
    }
    *extent = end;
    return COLL_OK;
}

static int reduce(const char *fn, coll_comm *c, const void *s, void *r, size_t count,
                  coll_dtype dt, coll_op op, int root, coll_req **req)
{
    cl_clear_req(req);
    int rc = c ? cl_check_root(fn, c, root) : cl_check(fn, c, s, r, count, 1, dt);
    int at_root = rc == COLL_OK && c->rank == root;
    size_t bytes = count * cl_dtype_size(dt);
    if (rc == COLL_OK)
        rc = cl_check(fn, c, s, at_root ? r : s, count, 1, dt);
    if (rc == COLL_OK && at_root)
        rc = cl_check_overlap(fn, c, s, bytes, r, bytes, s == r);
    if (rc == COLL_OK)
        rc = cl_check_op(fn, c, op, dt);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_REDUCE, s, at_root ? r : NULL, count, dt, op, root, 0, req)
                         : rc;
}

/* gather (the root receives) and scatter (the root sends): `many` is the root's
 * size*count buffer, `one` every rank's count. */
static int rooted(const char *fn, int kind, coll_comm *c, const void *s, void *r, size_t count,
                  coll_dtype dt, int root, coll_req **req)
{
    cl_clear_req(req);
    int rc = c ? cl_check_root(fn, c, root) : cl_check(fn, c, s, r, count, 1, dt);
    int at_root = rc == COLL_OK && c->rank == root, gather = kind == CL_GATHER;
    const void *mine = gather ? s : r; /* what every rank has */
    if (rc == COLL_OK)
        rc = cl_check(fn, c, at_root ? s : mine, at_root ? r : mine, count, (size_t)c->size, dt);
    if (rc == COLL_OK && at_root) {
        size_t bytes = count * cl_dtype_size(dt), all = bytes * (size_t)c->size;
        const char *own = (const char *)(gather ? r : s) + (size_t)root * bytes;
        int in_place = s == r || (gather ? (const char *)s == own : (const char *)r == own);
        rc = gather ? cl_check_overlap(fn, c, s, bytes, r, all, in_place)
                    : cl_check_overlap(fn, c, s, all, r, bytes, in_place);
    }
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    if (rc != COLL_OK)
        return rc;
    return cl_start(c, kind, gather || at_root ? s : NULL, !gather || at_root ? r : NULL, count,
                    dt, COLL_SUM, root, 0, req);
}

static int alltoall(const char *fn, coll_comm *c, const void *s, void *r, size_t count,
                    coll_dtype dt, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, s, r, count, c ? (size_t)c->size : 1, dt);
    size_t all = count * cl_dtype_size(dt) * (c ? (size_t)c->size : 1);
    if (rc == COLL_OK)
        rc = cl_check_overlap(fn, c, s, all, r, all, s == r);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? cl_start(c, CL_ALLTOALL, s, r, count, dt, COLL_SUM, 0, 0, req) : rc;
}

/* The uneven forms carry their arrays in the request; their count is 0 (ranks' totals
 * differ, so the header compares each message's length instead). */
static int launch_v(coll_comm *c, cl_op *o, coll_req **req)
{
    o->count = 0;
    o->codec = cl_codec_for(c, o->kind, o->dtype, o->op);
    return cl_launch(c, o, req);
}

static int alltoallv(const char *fn, coll_comm *c, cl_op *o, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, o->sbuf, o->rbuf, 0, 1, o->dtype);
    size_t es = cl_dtype_size(o->dtype), sext = 0, rext = 0;
    if (rc == COLL_OK)
        rc = check_counts(fn, c, "sendcounts", o->scounts, o->sdispls, 1, es, &sext);
    if (rc == COLL_OK)
        rc = check_counts(fn, c, "recvcounts", o->rcounts, o->rdispls, 1, es, &rext);
    if (rc == COLL_OK && ((sext && !o->sbuf) || (rext && !o->rbuf)))
        rc = cl_bad(c, fn, "%s is NULL with counts", sext && !o->sbuf ? "sendbuf" : "recvbuf");
    if (rc == COLL_OK && o->scounts[c->rank] != o->rcounts[c->rank])
        rc = cl_bad(c, fn, "sendcounts[%d] is %zu but recvcounts[%d] is %zu (this rank's own block)",
                    c->rank, o->scounts[c->rank], c->rank, o->rcounts[c->rank]);
    if (rc == COLL_OK)
        rc = cl_check_overlap(fn, c, o->sbuf, sext * es, o->rbuf, rext * es, o->sbuf == o->rbuf);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? launch_v(c, o, req) : rc;
}

static int allgatherv(const char *fn, coll_comm *c, cl_op *o, size_t sendcount, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, o->sbuf, o->sbuf, sendcount, 1, o->dtype);
    size_t es = cl_dtype_size(o->dtype), ext = 0;
    if (rc == COLL_OK)
        rc = check_counts(fn, c, "recvcounts", o->rcounts, o->rdispls, 1, es, &ext);
    if (rc == COLL_OK && ext && !o->rbuf)
        rc = cl_bad(c, fn, "recvbuf is NULL with counts");
    if (rc == COLL_OK && sendcount != o->rcounts[c->rank])
        rc = cl_bad(c, fn, "sendcount %zu differs from recvcounts[%d] = %zu", sendcount, c->rank,
                    o->rcounts[c->rank]);
    if (rc == COLL_OK) {
        const char *own = (const char *)o->rbuf + o->rdispls[c->rank] * es;
        rc = cl_check_overlap(fn, c, o->sbuf, sendcount * es, o->rbuf, ext * es,
                              o->sbuf == o->rbuf || (const char *)o->sbuf == own);
    }
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? launch_v(c, o, req) : rc;
}

static int reduce_scatterv(const char *fn, coll_comm *c, cl_op *o, coll_req **req)
{
    cl_clear_req(req);
    int rc = cl_check(fn, c, o->sbuf, o->rbuf, 0, 1, o->dtype);
    size_t es = cl_dtype_size(o->dtype), all = 0;
    if (rc == COLL_OK)
        rc = check_counts(fn, c, "recvcounts", o->rcounts, NULL, 0, es, &all);
    if (rc == COLL_OK && ((all && !o->sbuf) || (o->rcounts[c->rank] && !o->rbuf)))
        rc = cl_bad(c, fn, "%s is NULL with counts", all && !o->sbuf ? "sendbuf" : "recvbuf");
    if (rc == COLL_OK) {
        size_t before = total(o->rcounts, c->rank, es), mine = o->rcounts[c->rank] * es;
        const char *own = (const char *)o->sbuf + before * es;
        rc = cl_check_overlap(fn, c, o->sbuf, all * es, o->rbuf, mine,
                              o->rbuf == o->sbuf || (const char *)o->rbuf == own);
    }
    if (rc == COLL_OK)
        rc = cl_check_op(fn, c, o->op, o->dtype);
    if (rc == COLL_OK)
        rc = cl_check_req(fn, c, req);
    return rc == COLL_OK ? launch_v(c, o, req) : rc;
}

/* ---- the entry points, blocking and not ------------------------------------------ */

int coll_ireduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, coll_op op,
                 int root, coll_req **req)
{
    return reduce(__func__, c, s, r, count, dt, op, root, req);
}

int coll_reduce(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, coll_op op,
                int root)
{
    return reduce(__func__, c, s, r, count, dt, op, root, CL_BLOCKING);
}

int coll_igather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, int root,
                 coll_req **req)
{
    return rooted(__func__, CL_GATHER, c, s, r, count, dt, root, req);
}

int coll_gather(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, int root)
{
    return rooted(__func__, CL_GATHER, c, s, r, count, dt, root, CL_BLOCKING);
}

int coll_iscatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, int root,
                  coll_req **req)
{
    return rooted(__func__, CL_SCATTER, c, s, r, count, dt, root, req);
}

int coll_scatter(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt, int root)
{
    return rooted(__func__, CL_SCATTER, c, s, r, count, dt, root, CL_BLOCKING);
}

int coll_ialltoall(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt,
                   coll_req **req)
{
    return alltoall(__func__, c, s, r, count, dt, req);
}

int coll_alltoall(coll_comm *c, const void *s, void *r, size_t count, coll_dtype dt)
{
    return alltoall(__func__, c, s, r, count, dt, CL_BLOCKING);
}

int coll_ialltoallv(coll_comm *c, const void *s, const size_t *scounts, const size_t *sdispls,
                    void *r, const size_t *rcounts, const size_t *rdispls, coll_dtype dt,
                    coll_req **req)
{
    cl_op o = {.kind = CL_ALLTOALLV, .sbuf = s, .rbuf = r, .dtype = dt, .scounts = scounts,
               .sdispls = sdispls, .rcounts = rcounts, .rdispls = rdispls};
    return alltoallv(__func__, c, &o, req);
}

int coll_alltoallv(coll_comm *c, const void *s, const size_t *scounts, const size_t *sdispls,
                   void *r, const size_t *rcounts, const size_t *rdispls, coll_dtype dt)
{
    cl_op o = {.kind = CL_ALLTOALLV, .sbuf = s, .rbuf = r, .dtype = dt, .scounts = scounts,
               .sdispls = sdispls, .rcounts = rcounts, .rdispls = rdispls};
    return alltoallv(__func__, c, &o, CL_BLOCKING);
}

int coll_iallgatherv(coll_comm *c, const void *s, size_t count, void *r, const size_t *rcounts,
                     const size_t *displs, coll_dtype dt, coll_req **req)
{
    cl_op o = {.kind = CL_ALLGATHERV, .sbuf = s, .rbuf = r, .dtype = dt, .rcounts = rcounts,
               .rdispls = displs};
    return allgatherv(__func__, c, &o, count, req);
}

int coll_allgatherv(coll_comm *c, const void *s, size_t count, void *r, const size_t *rcounts,
                    const size_t *displs, coll_dtype dt)
{
    cl_op o = {.kind = CL_ALLGATHERV, .sbuf = s, .rbuf = r, .dtype = dt, .rcounts = rcounts,
               .rdispls = displs};
    return allgatherv(__func__, c, &o, count, CL_BLOCKING);
}

int coll_ireduce_scatterv(coll_comm *c, const void *s, void *r, const size_t *rcounts,
                          coll_dtype dt, coll_op op, coll_req **req)
{
    cl_op o = {.kind = CL_REDUCE_SCATTERV, .sbuf = s, .rbuf = r, .dtype = dt, .op = op,
               .rcounts = rcounts};
    return reduce_scatterv(__func__, c, &o, req);
}

int coll_reduce_scatterv(coll_comm *c, const void *s, void *r, const size_t *rcounts,
                         coll_dtype dt, coll_op op)
{
    cl_op o = {.kind = CL_REDUCE_SCATTERV, .sbuf = s, .rbuf = r, .dtype = dt, .op = op,
               .rcounts = rcounts};
    return reduce_scatterv(__func__, c, &o, CL_BLOCKING);
}
