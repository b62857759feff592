/* The static table of transports, picked by name. Registration checks every operation
 * is filled in so a half-written transport fails at lookup, not at its first call. */
#include "transports/transport.h"
#include "transports/plugin/plugin.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const cl_transport *const table[] = {
    &cl_transport_auto, &cl_transport_tcp, &cl_transport_shm, &cl_transport_loop, &cl_transport_rails,
#ifdef CL_HAVE_IBVERBS
    &cl_transport_ibverbs, &cl_transport_ibverbs_fake,
#endif
};

static int complete(const cl_transport *t)
{
    return t->ctx_create && t->ctx_destroy && t->listen && t->accept && t->close_listener &&
           t->connect && t->isend && t->irecv && t->test && t->close_conn && t->shutdown &&
           t->peer_name;
}

const cl_transport *cl_transport_find(const char *name)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(table[i]->name, name) == 0)
            return complete(table[i]) ? table[i] : NULL;
    return cl_net_find(name); /* a plugin's (COLL_NET_PLUGIN) */
}

/* Built once, not per thread: a _Thread_local buffer here was 512 of the library's static
 * TLS, which a dlopen from Python cannot grow past ~1.3 KB. The list does not change
 * after COLL_NET_PLUGIN's plugins load (cl_net_load_env, which config.c runs first). */
static char names[512];

static void list_names(void)
{
#ifdef CL_HAVE_IBVERBS
    snprintf(names, sizeof(names), "auto, tcp, shm, loop, rails, ibverbs, ibverbs-fake");
#else
    snprintf(names, sizeof(names), "auto, tcp, shm, loop, rails");
#endif
    cl_net_names(names, sizeof(names));
#ifndef CL_HAVE_IBVERBS
    size_t at = strlen(names);
    snprintf(names + at, sizeof(names) - at, " (built without ibverbs: no infiniband/verbs.h)");
#endif
}

const char *cl_transport_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_names);
    return names;
}

void cl_tr_error(const cl_tr_config *cfg, const char *fmt, ...)
{
    if (!cfg->err || !cfg->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->err, cfg->errlen, fmt, ap);
    va_end(ap);
}
