/* Transports from plugins (include/collective_net.h): the loader, which opens what
 * COLL_NET_PLUGIN names and refuses what does not fit the ABI, and the adapter, which
 * serves a loaded plugin's coll_net_ops through the internal contract
 * (transports/transport.h) so every collective runs over it. */
#ifndef CL_NET_PLUGIN_H
#define CL_NET_PLUGIN_H

#include "collective_net.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#define CL_NET_MAX_PLUGINS 8

typedef struct cl_net_shared cl_net_shared;

typedef struct cl_net_plugin {
    cl_transport tr;  /* the adapter's operations under the plugin's name */
    coll_net_ops ops; /* the plugin's table, members past its size cleared */
    char name[COLL_NET_NAME_BYTES];
    char path[256];           /* as COLL_NET_PLUGIN (or the caller) named it */
    pthread_mutex_t share_mu; /* shared, and every init() and finalize() (shared.c) */
    cl_net_shared *shared;    /* the process's contexts of this plugin */
} cl_net_plugin;

/* One who wants to hear of the plugin's notify(): an adapter context. */
typedef struct cl_net_user {
    void (*wake)(void *arg);
    void *arg;
    struct cl_net_user *next;
} cl_net_user;

/* A plugin context of this process (shared.c), shared by every communicator that runs
 * the plugin on the same device choice; reference-counted. */
struct cl_net_shared {
    cl_net_plugin *p;
    cl_net_shared *next; /* p->shared's list */
    char *device;        /* the key: cl_tr_config's device, "" for none */
    pid_t pid;           /* the process that started it (a forked child starts its own) */
    int refs;            /* under p->share_mu */
    void *net;           /* the plugin's context */
    int dev;             /* its fastest device */
    uint32_t speed_mbps; /* dev's, as get_properties() said */
    /* Every call into the plugin on net, its comms or their requests, by any user: the
     * ABI promises a plugin its context's calls one at a time. Users keep their own
     * state under it too. */
    pthread_mutex_t mu;
    pthread_mutex_t users_mu; /* users: notify() may come from inside a call under mu */
    cl_net_user *users;
};

/* Loads every plugin COLL_NET_PLUGIN names (comma-separated), once per process; later
 * calls answer the same. COLL_OK, or a COLL_E* code with the sentence in err. */
int cl_net_load_env(char *err, size_t errlen);
/* Loads one plugin: `spec` is a path (it holds a '/') or NAME, which is opened as
 * libcollective-net-NAME.so from the library path. Its transport goes to *out (may be
 * NULL) and cl_transport_find finds it by its name from then on. */
int cl_net_open(const char *spec, const cl_transport **out, char *err, size_t errlen);
/* The loaded plugin's transport called name, or NULL. */
const cl_transport *cl_net_find(const char *name);
/* The i-th loaded plugin's transport (in load order), or NULL past the last. */
const cl_transport *cl_net_at(int i);
/* Appends ", NAME" for each loaded plugin to buf (a C string of room len). */
void cl_net_names(char *buf, size_t len);

/* The context of p for cfg's device, started (init(), the device's choice) by its first
 * user; errors go to cfg. COLL_OK with a reference the caller puts back. */
int cl_net_shared_get(cl_net_plugin *p, const cl_tr_config *cfg, cl_net_shared **out);
/* The last reference finalizes the context: its users' comms are closed before. */
void cl_net_shared_put(cl_net_shared *s);
/* u->wake(u->arg) on each of the plugin's notify() calls, until unwatched. */
void cl_net_shared_watch(cl_net_shared *s, cl_net_user *u);
void cl_net_shared_unwatch(cl_net_shared *s, cl_net_user *u);
/* pthread_atfork's three steps for one plugin's contexts (the loader calls them for
 * every plugin): a forked child keeps none of its parent's. */
void cl_net_shared_before_fork(cl_net_plugin *p);
void cl_net_shared_in_parent(cl_net_plugin *p);
void cl_net_shared_in_child(cl_net_plugin *p);
/* A coll_net_error as a COLL_E* code. */
int cl_net_status(int net_rc);

/* The adapter: a communicator's context of the internal contract over plugin p. */
int cl_net_ctx_create(cl_net_plugin *p, const cl_tr_config *cfg, cl_tr_ctx **out);
/* The adapter's operations; the loader copies them and sets name and ctx_create. */
extern const cl_transport cl_net_adapter;

#endif
