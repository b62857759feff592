/* The log sink. Reads $COLL_DEBUG once; coll_set_log overrides it. */
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static coll_log_fn sink;
static void *sink_arg;
/* 0 until first read: a level check is one atomic load, cheap enough per segment. */
static _Atomic int level;

int cl_log_level_parse(const char *name)
{
    static const char *names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; name && i < 5; i++)
        if (strcasecmp(name, names[i]) == 0)
            return i + 1;
    return -1;
}

/* A bad value stays at warn here; coll_init refuses it with the variable's name. */
static coll_log_level level_from_env(void)
{
    int l = cl_log_level_parse(getenv("COLL_DEBUG"));
    return l > 0 ? (coll_log_level)l : COLL_LOG_WARN;
}

static coll_log_level current(void)
{
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l == 0) {
        int none = 0;
        atomic_compare_exchange_strong(&level, &none, (int)level_from_env());
        l = atomic_load(&level);
    }
    return (coll_log_level)l;
}

int cl_log_enabled(coll_log_level l)
{
    return l <= current();
}

void coll_set_log(coll_log_fn fn, void *arg, coll_log_level l)
{
    pthread_mutex_lock(&mu);
    sink = fn;
    sink_arg = arg;
    atomic_store(&level, (int)l);
    pthread_mutex_unlock(&mu);
}

void cl_log(coll_log_level l, const char *fmt, ...)
{
    static const char *tags[] = {"", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
    if (!cl_log_enabled(l))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&mu);
    coll_log_fn fn = sink;
    void *arg = sink_arg;
    pthread_mutex_unlock(&mu);
    if (fn)
        fn(l, msg, arg);
    else
        fprintf(stderr, "coll %s: %s\n", tags[l], msg);
}
