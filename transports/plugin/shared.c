/* A plugin's contexts in this process: one per device choice (cl_tr_config's device),
 * shared by every communicator that runs the plugin, auto's included, as NCCL inits its
 * net plugin once per process. A libfabric context (an endpoint, its queues and the
 * provider's buffers) costs seconds and tens of MiB: one per communicator made every
 * split pay it again.
 *
 * The first user calls init() and picks the device, the last one calls finalize(); both
 * under the plugin's share_mu, so a second thread that wants the context while the first
 * inits waits for it. A failed init is not remembered: nothing is registered, the one
 * user that asked gets the error, and the next one calls init() again (a fabric that
 * comes up later, a device choice that changed). While it keeps failing, each
 * communicator pays init()'s time, as before contexts were shared.
 *
 * A process forked meanwhile (a data loader's worker that makes a communicator of its
 * own) starts its own contexts: the parent's hold the parent's endpoints, queues and
 * threads, which the child must not touch, and locks a parent thread held at the fork.
 * The child forgets them (they stay allocated there, unfinalized) and its share_mu is
 * free; a parent's context a child lets go of is dropped untouched.
 *
 * This file must never hold per-communicator state: listeners, connections, requests
 * and where errors go stay in the adapter's context of each communicator. */
#include "transports/plugin/plugin.h"

#include "base/log.h"
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* While an optional user's (auto's) init() runs on this thread, the plugin's lines wait
 * in that call's held_lines: if the plugin then fails, auto leaves it out and says so
 * itself, and its errors are said at info; if it starts, they are said as the plugin
 * meant them (a warning of a context every communicator will share). Only a pointer is
 * thread-local: the library is dlopen()ed (Python's ctypes), where static TLS is a few
 * KiB for every library together, and kilobytes of it made the load fail ("cannot
 * allocate memory in static TLS block"). */
enum { HELD_LINES = 8, HELD_BYTES = 256 };
typedef struct {
    int n;
    coll_log_level level[HELD_LINES];
    char msg[HELD_LINES][HELD_BYTES];
} held_lines;
static __thread held_lines *held;

static void plugin_log(int level, const char *msg)
{
    coll_log_level l = level <= COLL_NET_LOG_ERROR  ? COLL_LOG_ERROR
                       : level == COLL_NET_LOG_WARN ? COLL_LOG_WARN
                       : level == COLL_NET_LOG_INFO ? COLL_LOG_INFO
                                                    : COLL_LOG_DEBUG;
    if (held && l < COLL_LOG_INFO && held->n < HELD_LINES) {
        held->level[held->n] = l;
        snprintf(held->msg[held->n++], HELD_BYTES, "%s", msg);
        return;
    }
    cl_log(l, "plugin: %s", msg);
}

/* The held lines, at their own levels if the plugin started, else at info. */
static void release_held(int started)
{
    held_lines *h = held;
    held = NULL;
    for (int i = 0; h && i < h->n; i++)
        cl_log(started ? h->level[i] : COLL_LOG_INFO, "plugin: %s", h->msg[i]);
}

/* The plugin's notify(): every user may have a request done. */
static void on_notify(void *arg)
{
    cl_net_shared *s = arg;
    pthread_mutex_lock(&s->users_mu);
    for (cl_net_user *u = s->users; u; u = u->next)
        u->wake(u->arg);
    pthread_mutex_unlock(&s->users_mu);
}

/* The device with the highest speed (the first of equals). */
static int pick_device(cl_net_shared *s, const cl_tr_config *cfg)
{
    const coll_net_ops *o = &s->p->ops;
    int n = 0, rc = o->devices(s->net, &n);
    if (rc != COLL_NET_OK || n < 1) {
        cl_tr_error(cfg, "transport plugin '%s': devices() found none (%d)", s->p->name, rc);
        return rc != COLL_NET_OK ? cl_net_status(rc) : COLL_ENOTSUP;
    }
    for (int d = 0; d < n; d++) {
        coll_net_props pr = {0};
        if ((rc = o->get_properties(s->net, d, &pr)) != COLL_NET_OK) {
            cl_tr_error(cfg, "transport plugin '%s': get_properties(%d) failed (%d)", s->p->name, d,
                        rc);
            return cl_net_status(rc);
        }
        pr.name[sizeof(pr.name) - 1] = 0;
        cl_log(COLL_LOG_INFO, "transport plugin '%s': device %d %s, %u Mb/s, %.1f us", s->p->name,
               d, pr.name, pr.speed_mbps, (double)pr.latency_us);
        if (d == 0 || pr.speed_mbps > s->speed_mbps)
            s->dev = d, s->speed_mbps = pr.speed_mbps;
    }
    return COLL_OK;
}

static void shared_free(cl_net_shared *s)
{
    pthread_mutex_destroy(&s->users_mu);
    pthread_mutex_destroy(&s->mu);
    free(s->device);
    free(s);
}

/* A new context of p for cfg's device: init() and the device's choice. */
static int shared_start(cl_net_plugin *p, const cl_tr_config *cfg, cl_net_shared **out)
{
    cl_net_shared *s = calloc(1, sizeof(*s));
    char *device = strdup(cfg->device ? cfg->device : "");
    if (!s || !device) {
        free(s), free(device);
        return COLL_ENOMEM;
    }
    s->p = p, s->device = device, s->pid = getpid();
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->users_mu, NULL);
    coll_net_init_args a = {.size = sizeof(a),
                            .device = cfg->device,
                            .timeout_ms = cfg->timeout_ms,
                            .notify = on_notify,
                            .notify_arg = s,
                            .log = plugin_log};
    held_lines lines = {0};
    held = cfg->optional ? &lines : NULL;
    int rc = p->ops.init(&a, &s->net);
    if (rc != COLL_NET_OK)
        cl_tr_error(cfg, "transport plugin '%s' (%s): init failed (%d)", p->name, p->path, rc);
    rc = rc != COLL_NET_OK ? cl_net_status(rc) : pick_device(s, cfg);
    release_held(rc == COLL_OK);
    if (rc != COLL_OK) {
        if (s->net)
            p->ops.finalize(s->net);
        shared_free(s);
        return rc;
    }
    cl_log(COLL_LOG_INFO, "transport plugin '%s': context started for device '%s'", p->name,
           device);
    *out = s;
    return COLL_OK;
}

int cl_net_shared_get(cl_net_plugin *p, const cl_tr_config *cfg, cl_net_shared **out)
{
    const char *device = cfg->device ? cfg->device : "";
    int rc = COLL_OK;
    pthread_mutex_lock(&p->share_mu);
    cl_net_shared *s = p->shared;
    while (s && strcmp(s->device, device) != 0)
        s = s->next;
    if (!s && (rc = shared_start(p, cfg, &s)) == COLL_OK) {
        s->next = p->shared;
        p->shared = s;
    }
    if (rc == COLL_OK) {
        s->refs++;
        *out = s;
    }
    pthread_mutex_unlock(&p->share_mu);
    return rc;
}

void cl_net_shared_put(cl_net_shared *s)
{
    cl_net_plugin *p = s->p;
    if (s->pid != getpid())
        return; /* the parent's, in a forked child: not ours to end (above) */
    pthread_mutex_lock(&p->share_mu);
    if (--s->refs == 0) {
        cl_net_shared **at = &p->shared;
        while (*at != s)
            at = &(*at)->next;
        *at = s->next;
        p->ops.finalize(s->net); /* its users closed their comms before they let go */
        cl_log(COLL_LOG_INFO, "transport plugin '%s': context ended for device '%s'", p->name,
               s->device);
        shared_free(s);
    }
    pthread_mutex_unlock(&p->share_mu);
}

void cl_net_shared_watch(cl_net_shared *s, cl_net_user *u)
{
    pthread_mutex_lock(&s->users_mu);
    u->next = s->users;
    s->users = u;
    pthread_mutex_unlock(&s->users_mu);
}

void cl_net_shared_unwatch(cl_net_shared *s, cl_net_user *u)
{
    pthread_mutex_lock(&s->users_mu);
    cl_net_user **at = &s->users;
    while (*at && *at != u)
        at = &(*at)->next;
    if (*at)
        *at = u->next;
    pthread_mutex_unlock(&s->users_mu);
}

void cl_net_shared_before_fork(cl_net_plugin *p)
{
    pthread_mutex_lock(&p->share_mu);
}

void cl_net_shared_in_parent(cl_net_plugin *p)
{
    pthread_mutex_unlock(&p->share_mu);
}

void cl_net_shared_in_child(cl_net_plugin *p)
{
    p->shared = NULL;
    pthread_mutex_unlock(&p->share_mu);
}
