/* The plugin loader: dlopen()s what COLL_NET_PLUGIN names, checks the table against the
 * ABI (version, size, every required operation, its name) and registers what passes as
 * a transport. Everything is refused at init with a sentence naming the plugin; nothing
 * is unloaded once registered (a communicator may hold its operations at any time). */
#include "transports/plugin/plugin.h"

#include "base/log.h"
#include "collective.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cl_net_plugin plugins[CL_NET_MAX_PLUGINS];
static int nplugins;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ctx_create gets no transport: one entry point per slot tells the adapter which. */
#define CREATE(i)                                                                        \
    static int create_##i(const cl_tr_config *cfg, cl_tr_ctx **out)                      \
    {                                                                                    \
        return cl_net_ctx_create(&plugins[i], cfg, out);                                 \
    }
CREATE(0) CREATE(1) CREATE(2) CREATE(3) CREATE(4) CREATE(5) CREATE(6) CREATE(7)
static int (*const creates[CL_NET_MAX_PLUGINS])(const cl_tr_config *, cl_tr_ctx **) = {
    create_0, create_1, create_2, create_3, create_4, create_5, create_6, create_7};

#define REQUIRED(m) {offsetof(coll_net_ops, m), #m}
static const struct {
    size_t off;
    const char *name;
} required[] = {REQUIRED(init),   REQUIRED(finalize),   REQUIRED(devices),
                REQUIRED(get_properties), REQUIRED(listen), REQUIRED(connect),
                REQUIRED(accept), REQUIRED(isend),      REQUIRED(irecv),
                REQUIRED(test),   REQUIRED(close_send), REQUIRED(close_recv),
                REQUIRED(close_listen)};

static int name_ok(const char *n)
{
    size_t len = n ? strlen(n) : 0;
    if (len == 0 || len >= COLL_NET_NAME_BYTES)
        return 0;
    return strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789_-") == len;
}

/* The table's faults, in the order a plugin author meets them; COLL_OK when it fits. */
static int check_table(const coll_net_ops *t, const char *path, char *err, size_t errlen)
{
    if (t->version < COLL_NET_ABI_OLDEST || t->version > COLL_NET_ABI_VERSION) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: plugin %s is built for transport ABI version %u; this "
                 "library loads versions %d to %d (collective_net.h)",
                 path, t->version, COLL_NET_ABI_OLDEST, COLL_NET_ABI_VERSION);
        return COLL_ENOTSUP;
    }
    if (t->size < COLL_NET_OPS_SIZE_V1) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: plugin %s declares a table of %u bytes, less than version "
                 "1's %zu: it was not built from collective_net.h",
                 path, t->size, (size_t)COLL_NET_OPS_SIZE_V1);
        return COLL_ENOTSUP;
    }
    if (!name_ok(t->name)) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: plugin %s has no valid name (1-%d of a-z, 0-9, '_', '-')",
                 path, COLL_NET_NAME_BYTES - 1);
        return COLL_ENOTSUP;
    }
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        void (*op)(void);
        memcpy(&op, (const char *)t + required[i].off, sizeof(op));
        if (!op) {
            snprintf(err, errlen,
                     "COLL_NET_PLUGIN: plugin '%s' (%s) lacks the required operation %s",
                     t->name, path, required[i].name);
            return COLL_ENOTSUP;
        }
    }
    if (!t->reg_mr != !t->dereg_mr) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: plugin '%s' (%s) has %s without %s (both or neither)",
                 t->name, path, t->reg_mr ? "reg_mr" : "dereg_mr",
                 t->reg_mr ? "dereg_mr" : "reg_mr");
        return COLL_ENOTSUP;
    }
    if (cl_transport_find(t->name)) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: plugin %s is called '%s', the name of a transport already "
                 "there",
                 path, t->name);
        return COLL_ENOTSUP;
    }
    return COLL_OK;
}

/* Opens spec and finds its table; the handle stays open (see the top). */
static const coll_net_ops *open_table(const char *spec, char *path, size_t pathlen, char *err,
                                      size_t errlen)
{
    if (strchr(spec, '/'))
        snprintf(path, pathlen, "%s", spec);
    else
        snprintf(path, pathlen, "libcollective-net-%s.so", spec);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "COLL_NET_PLUGIN: cannot load plugin %s: %s", path, dlerror());
        return NULL;
    }
    const coll_net_ops *t = dlsym(h, COLL_NET_PLUGIN_SYMBOL);
    if (!t) {
        snprintf(err, errlen,
                 "COLL_NET_PLUGIN: %s exports no '%s' table: not a libcollective transport "
                 "plugin",
                 path, COLL_NET_PLUGIN_SYMBOL);
        dlclose(h);
    }
    return t;
}

/* A fork waits for a plugin's init() or finalize() under way on another thread (seconds,
 * with libfabric), so the child finds every plugin's list of contexts whole. */
static void before_fork(void)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nplugins; i++)
        cl_net_shared_before_fork(&plugins[i]);
}

static void in_parent(void)
{
    for (int i = 0; i < nplugins; i++)
        cl_net_shared_in_parent(&plugins[i]);
    pthread_mutex_unlock(&mu);
}

static void in_child(void)
{
    for (int i = 0; i < nplugins; i++)
        cl_net_shared_in_child(&plugins[i]);
    pthread_mutex_unlock(&mu);
}

static void watch_forks(void)
{
    pthread_atfork(before_fork, in_parent, in_child);
}

int cl_net_open(const char *spec, const cl_transport **out, char *err, size_t errlen)
{
    static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
    pthread_once(&fork_once, watch_forks);
    char path[sizeof(plugins[0].path)];
    const coll_net_ops *t = open_table(spec, path, sizeof(path), err, errlen);
    if (!t)
        return COLL_ENOTSUP;
    pthread_mutex_lock(&mu);
    int rc = nplugins < CL_NET_MAX_PLUGINS ? check_table(t, path, err, errlen) : COLL_ENOTSUP;
    if (nplugins == CL_NET_MAX_PLUGINS)
        snprintf(err, errlen, "COLL_NET_PLUGIN: at most %d plugins; %s is one more",
                 CL_NET_MAX_PLUGINS, path);
    if (rc == COLL_OK) {
        cl_net_plugin *p = &plugins[nplugins];
        memcpy(&p->ops, t, t->size < sizeof(p->ops) ? t->size : sizeof(p->ops));
        snprintf(p->name, sizeof(p->name), "%s", t->name);
        snprintf(p->path, sizeof(p->path), "%s", path);
        pthread_mutex_init(&p->share_mu, NULL);
        p->tr = cl_net_adapter;
        p->tr.name = p->name;
        p->tr.ctx_create = creates[nplugins];
        __atomic_store_n(&nplugins, nplugins + 1, __ATOMIC_RELEASE);
        cl_log(COLL_LOG_INFO, "transport plugin '%s' loaded from %s (ABI version %u)", p->name,
               path, t->version);
        if (out)
            *out = &p->tr;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int env_rc;
static char env_err[512];

static void load_env(void)
{
    const char *v = getenv("COLL_NET_PLUGIN");
    if (!v || !*v)
        return;
    cl_log(COLL_LOG_INFO, "COLL_NET_PLUGIN=%s", v);
    char *list = strdup(v), *save = NULL;
    if (!list) {
        env_rc = COLL_ENOMEM;
        snprintf(env_err, sizeof(env_err), "COLL_NET_PLUGIN: out of memory");
        return;
    }
    for (char *s = strtok_r(list, ",", &save); s && env_rc == COLL_OK;
         s = strtok_r(NULL, ",", &save))
        env_rc = cl_net_open(s, NULL, env_err, sizeof(env_err));
    free(list);
}

int cl_net_load_env(char *err, size_t errlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_env);
    if (env_rc != COLL_OK)
        snprintf(err, errlen, "%s", env_err);
    return env_rc;
}

const cl_transport *cl_net_find(const char *name)
{
    int n = __atomic_load_n(&nplugins, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (strcmp(plugins[i].name, name) == 0)
            return &plugins[i].tr;
    return NULL;
}

const cl_transport *cl_net_at(int i)
{
    return i >= 0 && i < __atomic_load_n(&nplugins, __ATOMIC_ACQUIRE) ? &plugins[i].tr : NULL;
}

void cl_net_names(char *buf, size_t len)
{
    int n = __atomic_load_n(&nplugins, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, ", %s (plugin)", plugins[i].name);
    }
}
