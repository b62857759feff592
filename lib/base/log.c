/* The log sink. Reads $COLL_DEBUG once; coll_set_log overrides it. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static coll_log_fn sink;
static void *sink_arg;
static int level_set;
static coll_log_level level = COLL_LOG_WARN;

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
    pthread_mutex_lock(&mu);
    if (!level_set) {
        level = level_from_env();
        level_set = 1;
    }
    coll_log_level l = level;
    pthread_mutex_unlock(&mu);
    return l;
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
    level = l;
    level_set = 1;
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
