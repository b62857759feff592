/* In-process store shared by threads that meet under one name; entries live until the
 * job that wrote them removes them (its rank 0 does, once every rank has read them). */
#include "rdzv/store.h"

#include "collective.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *next;
    char key[CL_STORE_MAX_KEY + 520];
    size_t len;
    unsigned char val[];
};

typedef struct {
    cl_store base;
    char name[512];
} mem_store;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;

static void full_key(mem_store *m, const char *key, char *out, size_t len)
{
    snprintf(out, len, "%s|%s", m->name, key);
}

/* The newest entry of key (full name), under mu. */
static struct entry *find(const char *k)
{
    for (struct entry *e = table; e; e = e->next)
        if (strcmp(e->key, k) == 0)
            return e;
    return NULL;
}

static int put(cl_store *s, const char *key, const void *val, size_t len, int create)
{
    struct entry *e = calloc(1, sizeof(*e) + len);
    if (!e)
        return COLL_ENOMEM;
    full_key((mem_store *)s, key, e->key, sizeof(e->key));
    e->len = len;
    memcpy(e->val, val, len);
    pthread_mutex_lock(&mu);
    int taken = create && find(e->key);
    if (!taken) {
        e->next = table;
        table = e;
    }
    pthread_mutex_unlock(&mu);
    if (taken)
        free(e);
    return taken ? CL_STORE_TAKEN : COLL_OK;
}

static int mem_set(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, key, val, len, 0);
}

static int mem_create(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, key, val, len, 1);
}

static void mem_remove(cl_store *s, const char *key)
{
    char k[sizeof(((struct entry *)0)->key)];
    full_key((mem_store *)s, key, k, sizeof(k));
    pthread_mutex_lock(&mu);
    for (struct entry **at = &table; *at;) {
        struct entry *e = *at;
        if (strcmp(e->key, k) == 0) {
            *at = e->next;
            free(e);
        } else {
            at = &e->next;
        }
    }
    pthread_mutex_unlock(&mu);
}

static int mem_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    char k[sizeof(((struct entry *)0)->key)];
    full_key((mem_store *)s, key, k, sizeof(k));
    int rc = COLL_INPROGRESS;
    pthread_mutex_lock(&mu);
    struct entry *e = find(k);
    if (e) {
        *len = e->len < cap ? e->len : cap;
        memcpy(buf, e->val, *len);
        rc = COLL_OK;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static void mem_close(cl_store *s)
{
    free(s);
}

static const cl_store_ops ops = {.set = mem_set,
                                 .get = mem_get,
                                 .close = mem_close,
                                 .create = mem_create,
                                 .remove = mem_remove};

int cl_store_mem_open(const char *name, cl_store **out)
{
    mem_store *m = calloc(1, sizeof(*m));
    if (!m)
        return COLL_ENOMEM;
    m->base.ops = &ops;
    snprintf(m->name, sizeof(m->name), "%s", name);
    *out = &m->base;
    return COLL_OK;
}
