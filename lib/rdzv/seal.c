/* A sealed store: with COLL_SECRET, every value carries an HMAC of its key and bytes,
 * and a reader takes only values that check. Whoever reaches the store without the
 * secret can still read what is there (addresses, the job id: nothing that lets them
 * in), but cannot write a rank's address or the job id: a forged value is ignored, as if
 * not there yet, and the rightful one (written later, or earlier and overwritten) is
 * waited for until the deadline. */
#include "rdzv/store.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    cl_store base;
    cl_store *inner;
    uint8_t key[CL_KEY_BYTES];
    int warned;
} sealed;

static void tag_of(const sealed *s, const char *key, const void *val, size_t len,
                   uint8_t tag[CL_TAG_BYTES])
{
    cl_auth_tag(s->key, tag, 3, "coll store v1", (size_t)13, key, strlen(key) + 1, val, len);
}

static int put(cl_store *st, const char *key, const void *val, size_t len, int create)
{
    sealed *s = (sealed *)st;
    uint8_t *buf = malloc(len + CL_TAG_BYTES);
    if (!buf)
        return COLL_ENOMEM;
    memcpy(buf, val, len);
    tag_of(s, key, val, len, buf + len);
    int rc = create ? cl_store_create(s->inner, key, buf, len + CL_TAG_BYTES)
                    : s->inner->ops->set(s->inner, key, buf, len + CL_TAG_BYTES);
    free(buf);
    return rc;
}

static int seal_set(cl_store *st, const char *key, const void *val, size_t len)
{
    return put(st, key, val, len, 0);
}

/* What the inner store gave (n bytes in buf), checked: COLL_OK with *len the value's
 * length, or COLL_INPROGRESS for a value that does not check. */
static int unseal(sealed *s, const char *key, uint8_t *buf, size_t n, size_t *len)
{
    uint8_t want[CL_TAG_BYTES];
    if (n >= CL_TAG_BYTES) {
        tag_of(s, key, buf, n - CL_TAG_BYTES, want);
        if (cl_auth_equal(want, buf + n - CL_TAG_BYTES, CL_TAG_BYTES)) {
            *len = n - CL_TAG_BYTES;
            return COLL_OK;
        }
    }
    if (!s->warned++)
        cl_log(COLL_LOG_WARN, "store: ignored a value of '%s' that does not carry this job's "
               "COLL_SECRET (written by someone without it, or a rank with another secret)", key);
    return COLL_INPROGRESS;
}

/* The inner store's value (waiting up to wait_ms, or not at all when < 0), checked. */
static int fetch(sealed *s, const char *key, void *out, size_t cap, size_t *len, int wait_ms)
{
    size_t n = 0, room = cap + CL_TAG_BYTES;
    uint8_t *buf = malloc(room);
    if (!buf)
        return COLL_ENOMEM;
    int rc = wait_ms < 0 ? s->inner->ops->get(s->inner, key, buf, room, &n)
                         : s->inner->ops->wait(s->inner, key, buf, room, &n, wait_ms);
    if (rc == COLL_OK && (rc = unseal(s, key, buf, n, len)) == COLL_OK)
        memcpy(out, buf, *len);
    free(buf);
    return rc;
}

static int seal_get(cl_store *st, const char *key, void *out, size_t cap, size_t *len)
{
    return fetch((sealed *)st, key, out, cap, len, -1);
}

/* Over a store that waits on its own: wait, check, and wait again past a forgery. */
static int seal_wait(cl_store *st, const char *key, void *out, size_t cap, size_t *len,
                     int timeout_ms)
{
    int64_t deadline = cl_now_ms() + timeout_ms;
    for (;;) {
        int left = cl_store_ms_left(deadline);
        int rc = fetch((sealed *)st, key, out, cap, len, left);
        if (rc != COLL_INPROGRESS)
            return rc;
        if (left <= 0)
            return COLL_ETIMEDOUT;
        cl_sleep_ms(CL_MIN(left, 20));
    }
}

/* A key taken by a value that does not check is not taken: a stranger cannot hold a
 * rank's place by writing first. */
static int seal_create(cl_store *st, const char *key, const void *val, size_t len)
{
    int rc = put(st, key, val, len, 1);
    size_t n = 0;
    uint8_t *probe = rc == CL_STORE_TAKEN ? malloc(CL_STORE_MAX_VALUE) : NULL;
    if (probe && seal_get(st, key, probe, CL_STORE_MAX_VALUE, &n) == COLL_INPROGRESS)
        rc = put(st, key, val, len, 0);
    free(probe);
    return rc;
}

static void seal_remove(cl_store *st, const char *key)
{
    cl_store_remove(((sealed *)st)->inner, key);
}

/* The connection is the inner store's, and so is what it pinned (the terms, unsealed). */
static int seal_renew(cl_store *st, int64_t deadline_ms)
{
    return cl_store_renew(((sealed *)st)->inner, deadline_ms);
}

static void seal_close(cl_store *st)
{
    sealed *s = (sealed *)st;
    s->inner->ops->close(s->inner);
    free(s);
}

static const cl_store_ops ops = {.set = seal_set,
                                 .get = seal_get,
                                 .close = seal_close,
                                 .create = seal_create,
                                 .remove = seal_remove,
                                 .renew = seal_renew};
static const cl_store_ops waiting_ops = {.set = seal_set,
                                         .get = seal_get,
                                         .close = seal_close,
                                         .wait = seal_wait,
                                         .create = seal_create,
                                         .remove = seal_remove,
                                         .renew = seal_renew};

int cl_store_seal(cl_store *inner, const uint8_t key[32], cl_store **out)
{
    sealed *s = calloc(1, sizeof(*s));
    if (!s)
        return COLL_ENOMEM;
    s->base.ops = inner->ops->wait ? &waiting_ops : &ops;
    s->inner = inner;
    memcpy(s->key, key, CL_KEY_BYTES);
    *out = &s->base;
    return COLL_OK;
}
