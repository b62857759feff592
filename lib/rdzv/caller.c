/* A store the caller already has (coll_init_store): a framework's store, etcd, Redis.
 * Its get waits on its own, so waiting goes straight to it instead of a polling loop.
 * The library never touches the caller's context after init returns. */
#include "rdzv/store.h"

#include "base/log.h"
#include "collective.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    cl_store base;
    coll_store_ops ops;
    void *ctx;
} caller_store;

/* The caller's code, as a status this library returns: anything not one of ours is
 * an error of the store itself. */
static int status_of(int rc)
{
    return rc == COLL_OK || (rc <= COLL_EINVAL && rc >= COLL_EPROTO) ? rc : COLL_ESYS;
}

static int caller_set(cl_store *s, const char *key, const void *val, size_t len)
{
    caller_store *c = (caller_store *)s;
    int rc = status_of(c->ops.set(c->ctx, key, val, len));
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "store: set '%s' failed: %s", key, coll_strerror(rc));
    return rc;
}

static int caller_wait(cl_store *s, const char *key, void *buf, size_t cap, size_t *len,
                       int timeout_ms)
{
    caller_store *c = (caller_store *)s;
    void *v = NULL;
    size_t n = 0;
    int got = c->ops.get(c->ctx, key, &v, &n, timeout_ms), rc = status_of(got);
    if (rc != COLL_OK && rc != COLL_ETIMEDOUT)
        cl_log(COLL_LOG_ERROR, "store: get '%s' returned %d (%s)", key, got, coll_strerror(rc));
    if (rc == COLL_OK && (n > cap || (n && !v))) {
        cl_log(COLL_LOG_ERROR, "store: '%s' holds %zu bytes, at most %zu expected", key, n, cap);
        rc = COLL_EPROTO;
    }
    if (rc == COLL_OK) {
        if (n)
            memcpy(buf, v, n);
        *len = n;
    }
    free(v);
    return rc;
}

/* Not there yet is what a get that may not wait reports. */
static int caller_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    int rc = caller_wait(s, key, buf, cap, len, 0);
    return rc == COLL_ETIMEDOUT ? COLL_INPROGRESS : rc;
}

static void caller_close(cl_store *s)
{
    free(s);
}

static const cl_store_ops ops = {
    .set = caller_set, .get = caller_get, .close = caller_close, .wait = caller_wait};

int cl_store_caller_open(const coll_store_ops *user, void *ctx, cl_store **out)
{
    caller_store *c = calloc(1, sizeof(*c));
    if (!c)
        return COLL_ENOMEM;
    c->base.ops = &ops;
    c->ops = *user;
    c->ctx = ctx;
    *out = &c->base;
    return COLL_OK;
}
