/* The registration cache: a small table searched linearly (a communicator uses a handful
 * of buffers), page-aligned registrations so neighbouring uses share one, reference
 * counts so an entry in use is never evicted. */
#include "transports/ibverbs/mr_cache.h"

#include "base/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ENTRIES 64
#define PAGE ((uintptr_t)4096)

typedef struct entry {
    struct ibv_mr *mr;
    int access, refs;
    uint64_t used;
} entry;

struct cl_mr_cache {
    const cl_verbs *v;
    struct ibv_pd *pd;
    int enabled;
    uint64_t tick;
    entry e[ENTRIES];
};

cl_mr_cache *cl_mr_cache_new(const cl_verbs *v, struct ibv_pd *pd)
{
    cl_mr_cache *mc = calloc(1, sizeof(*mc));
    if (!mc)
        return NULL;
    mc->v = v, mc->pd = pd;
    const char *on = getenv("COLL_IB_REG_CACHE");
    mc->enabled = on && strcmp(on, "1") == 0;
    if (mc->enabled)
        cl_log(COLL_LOG_INFO, "COLL_IB_REG_CACHE=1: registrations are kept");
    return mc;
}

void cl_mr_cache_free(cl_mr_cache *mc)
{
    for (int i = 0; i < ENTRIES; i++)
        if (mc->e[i].mr)
            mc->v->dereg_mr(mc->e[i].mr);
    free(mc);
}

static int covers(const entry *x, uintptr_t lo, uintptr_t hi, int access)
{
    uintptr_t a = (uintptr_t)x->mr->addr;
    return (x->access & access) == access && a <= lo && hi <= a + x->mr->length;
}

/* A free slot, or the least recently used idle one (deregistered); -1 if all are busy. */
static int victim(cl_mr_cache *mc)
{
    int best = -1;
    for (int i = 0; i < ENTRIES; i++) {
        if (!mc->e[i].mr)
            return i;
        if (mc->e[i].refs == 0 && (best < 0 || mc->e[i].used < mc->e[best].used))
            best = i;
    }
    if (best >= 0) {
        mc->v->dereg_mr(mc->e[best].mr);
        mc->e[best].mr = NULL;
    }
    return best;
}

struct ibv_mr *cl_mr_get(cl_mr_cache *mc, void *addr, size_t len, int access)
{
    uintptr_t lo = (uintptr_t)addr, hi = lo + len;
    if (!mc->enabled)
        return mc->v->reg_mr(mc->pd, addr, len, access);
    for (int i = 0; i < ENTRIES; i++)
        if (mc->e[i].mr && covers(&mc->e[i], lo, hi, access)) {
            mc->e[i].refs++;
            mc->e[i].used = ++mc->tick;
            return mc->e[i].mr;
        }
    uintptr_t plo = lo & ~(PAGE - 1), phi = (hi + PAGE - 1) & ~(PAGE - 1);
    struct ibv_mr *mr = mc->v->reg_mr(mc->pd, (void *)plo, phi - plo, access);
    int i = mr ? victim(mc) : -1;
    if (i >= 0)
        mc->e[i] = (entry){ mr, access, 1, ++mc->tick };
    return mr;
}

void cl_mr_put(cl_mr_cache *mc, struct ibv_mr *mr)
{
    for (int i = 0; mc->enabled && i < ENTRIES; i++)
        if (mc->e[i].mr == mr) {
            mc->e[i].refs--;
            return;
        }
    mc->v->dereg_mr(mr);
}
