/* Store dispatch and the one waiting loop every backend shares. */
#include "rdzv/store.h"

#include "base/util.h"
#include "collective.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cl_store_open(const cl_rdzv *r, int timeout_ms, cl_store **out, char *err, size_t errlen)
{
    if (strcmp(r->scheme, "file") == 0)
        return cl_store_file_open(r->where, out, err, errlen);
    if (strcmp(r->scheme, "mem") == 0)
        return cl_store_mem_open(r->where, out);
    return cl_store_tcp_open(r->where, r->family, r->rank == 0, cl_now_ms() + timeout_ms, out, err, errlen);
}

int cl_store_ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - cl_now_ms();
    return (int)CL_MAX(CL_MIN(left, INT_MAX), 0);
}

int cl_store_wait(cl_store *s, const char *key, void *buf, size_t cap, size_t *len,
                  int64_t deadline_ms)
{
    if (s->ops->wait)
        return s->ops->wait(s, key, buf, cap, len, cl_store_ms_left(deadline_ms));
    int delay = 1;
    for (;;) {
        int rc = s->ops->get(s, key, buf, cap, len);
        if (rc != COLL_INPROGRESS)
            return rc;
        int left = cl_store_ms_left(deadline_ms);
        if (left <= 0)
            return COLL_ETIMEDOUT;
        cl_sleep_ms(CL_MIN(delay, left));
        delay = CL_MIN(delay * 2, 50);
    }
}

int cl_store_create(cl_store *s, const char *key, const void *val, size_t len)
{
    if (s->ops->create)
        return s->ops->create(s, key, val, len);
    size_t n = 0;
    void *probe = malloc(CL_STORE_MAX_VALUE + 64);
    int rc = probe ? s->ops->get(s, key, probe, CL_STORE_MAX_VALUE + 64, &n) : COLL_ENOMEM;
    free(probe);
    if (rc == COLL_OK)
        return CL_STORE_TAKEN;
    return rc == COLL_INPROGRESS ? s->ops->set(s, key, val, len) : rc;
}

void cl_store_remove(cl_store *s, const char *key)
{
    if (s->ops->remove)
        s->ops->remove(s, key);
}

int cl_store_pin(cl_store *s, const char *key, const void *val, size_t len)
{
    return s->ops->pin ? s->ops->pin(s, key, val, len) : COLL_OK;
}

int cl_store_renew(cl_store *s, int64_t deadline_ms)
{
    return s->ops->renew ? s->ops->renew(s, deadline_ms) : COLL_OK;
}
