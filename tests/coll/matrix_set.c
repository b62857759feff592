/* See matrix_set.h. Ragged counts: rank i sends rank j cnt(i, j) elements; blocks sit one
 * element apart, so a displacement that is ignored shows. */
#include "coll/matrix_set.h"

#include "common/harness.h"
#include "perf/verify.h"

#include <string.h>

static const size_t esz[] = {4, 8, 2, 2, 1, 1, 4, 8};

static size_t cnt(size_t count, int i, int j)
{
    return count ? (count + (size_t)i + 2 * (size_t)j) % (count + 3) : 0;
}

/* displs for counts with one element of gap after each block; returns the extent. */
static size_t lay_out(const size_t *counts, int n, size_t *displs)
{
    size_t at = 0;
    for (int i = 0; i < n; i++)
        displs[i] = at, at += counts[i] + 1;
    return at;
}

static int reduce_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, coll_op op,
                       int root, int inplace)
{
    int n = coll_size(c), me = coll_rank(c), at_root = me == root;
    char *in = inplace && at_root ? r : s;
    cl_fill(in, count, dt, op, me, 0);
    EXPECT_RC(coll_reduce(c, in, at_root ? r : NULL, count, dt, op, root), COLL_OK);
    size_t w = at_root ? cl_check_reduce(r, count, dt, op, n, 0) : 0;
    FAIL_IF(w, "reduce count %zu dtype %d op %d root %d inplace %d: %zu wrong", count, dt, op,
            root, inplace, w);
    return 0;
}

static int gather_scatter_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt,
                               int root, int inplace)
{
    int n = coll_size(c), me = coll_rank(c), at_root = me == root;
    size_t es = esz[dt], w;
    char *own = r + (size_t)me * count * es;
    memset(r, 0xee, (size_t)n * count * es);
    cl_fill(inplace && at_root ? own : s, count, dt, COLL_SUM, me, 0);
    EXPECT_RC(coll_gather(c, inplace && at_root ? own : s, at_root ? r : NULL, count, dt, root),
              COLL_OK);
    w = at_root ? cl_check_gather(r, count, dt, COLL_SUM, n) : 0;
    FAIL_IF(w, "gather count %zu dtype %d root %d inplace %d: %zu wrong", count, dt, root,
            inplace, w);
    /* scatter: block j of the root's buffer is what rank j gets. */
    if (at_root)
        cl_fill(s, (size_t)n * count, dt, COLL_SUM, root, 0);
    char *out = inplace && at_root ? s + (size_t)root * count * es : r;
    EXPECT_RC(coll_scatter(c, at_root ? s : NULL, out, count, dt, root), COLL_OK);
    w = cl_check_from(out, count, dt, COLL_SUM, root, (size_t)me * count);
    FAIL_IF(w, "scatter count %zu dtype %d root %d inplace %d: %zu wrong", count, dt, root,
            inplace, w);
    return 0;
}

static int alltoall_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t es = esz[dt];
    char *in = inplace ? r : s;
    cl_fill(in, (size_t)n * count, dt, COLL_SUM, me, 0);
    EXPECT_RC(coll_alltoall(c, in, r, count, dt), COLL_OK);
    for (int i = 0; i < n; i++) {
        size_t w = cl_check_from(r + (size_t)i * count * es, count, dt, COLL_SUM, i,
                                 (size_t)me * count);
        FAIL_IF(w, "alltoall count %zu dtype %d inplace %d: block %d %zu wrong", count, dt,
                inplace, i, w);
    }
    return 0;
}

/* inplace 2: in place in MPI's layout (every block comes back where it went out from),
 * counts symmetric between each pair. */
static int alltoallv_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t es = esz[dt], sc[64], sd[64], rc[64], rd[64];
    for (int j = 0; j < n; j++)
        sc[j] = inplace == 2 ? cnt(count, me < j ? me : j, me < j ? j : me) : cnt(count, me, j),
        rc[j] = inplace == 2 ? sc[j] : cnt(count, j, me);
    lay_out(sc, n, sd);
    lay_out(rc, n, rd);
    char *in = inplace ? r : s;
    for (int j = 0; j < n; j++)
        cl_fill(in + sd[j] * es, sc[j], dt, COLL_SUM, me, (size_t)j * 1000);
    EXPECT_RC(coll_alltoallv(c, in, sc, sd, r, rc, rd, dt), COLL_OK);
    for (int i = 0; i < n; i++) {
        size_t w = cl_check_from(r + rd[i] * es, rc[i], dt, COLL_SUM, i, (size_t)me * 1000);
        FAIL_IF(w, "alltoallv count %zu dtype %d inplace %d: block %d %zu wrong", count, dt,
                inplace, i, w);
    }
    return 0;
}

static int allgatherv_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t es = esz[dt], rc[64], rd[64];
    for (int i = 0; i < n; i++)
        rc[i] = cnt(count, i, i);
    memset(r, 0xee, lay_out(rc, n, rd) * es);
    char *in = inplace ? r + rd[me] * es : s;
    cl_fill(in, rc[me], dt, COLL_SUM, me, 0);
    EXPECT_RC(coll_allgatherv(c, in, rc[me], r, rc, rd, dt), COLL_OK);
    for (int i = 0; i < n; i++) {
        size_t w = cl_check_from(r + rd[i] * es, rc[i], dt, COLL_SUM, i, 0);
        FAIL_IF(w, "allgatherv count %zu dtype %d inplace %d: block %d %zu wrong", count, dt,
                inplace, i, w);
    }
    return 0;
}

static int reduce_scatterv_case(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt,
                                coll_op op, int inplace)
{
    int n = coll_size(c), me = coll_rank(c);
    size_t es = esz[dt], rc[64], total = 0, mine = 0;
    for (int i = 0; i < n; i++) {
        rc[i] = cnt(count, i, 0);
        mine += i < me ? rc[i] : 0;
        total += rc[i];
    }
    cl_fill(s, total, dt, op, me, 0);
    char *out = inplace ? s + mine * es : r;
    EXPECT_RC(coll_reduce_scatterv(c, s, out, rc, dt, op), COLL_OK);
    size_t w = cl_check_reduce(out, rc[me], dt, op, n, mine);
    FAIL_IF(w, "reduce_scatterv count %zu dtype %d op %d inplace %d: %zu wrong", count, dt, op,
            inplace, w);
    return 0;
}

int set_cases(coll_comm *c, char *s, char *r, size_t count, coll_dtype dt, int nops)
{
    int n = coll_size(c), fails = 0;
    for (int op = 0; op < nops && !fails; op++)
        for (int ip = 0; ip < 2 && !fails && cl_op_fits(dt, (coll_op)op); ip++)
            fails = reduce_case(c, s, r, count, dt, (coll_op)op, (op + ip) % n, ip) ||
                    reduce_scatterv_case(c, s, r, count, dt, (coll_op)op, ip);
    for (int ip = 0; ip < 2 && !fails; ip++)
        fails = gather_scatter_case(c, s, r, count, dt, (int)((count + (size_t)ip) % (size_t)n), ip) ||
                alltoall_case(c, s, r, count, dt, ip) || alltoallv_case(c, s, r, count, dt, ip) ||
                allgatherv_case(c, s, r, count, dt, ip);
    return fails || alltoallv_case(c, s, r, count, dt, 2);
}
