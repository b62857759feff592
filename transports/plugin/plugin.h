/* Transports from plugins (include/collective_net.h): the loader, which opens what
 * COLL_NET_PLUGIN names and refuses what does not fit the ABI, and the adapter, which
 * serves a loaded plugin's coll_net_ops through the internal contract
 * (transports/transport.h) so every collective runs over it. */
#ifndef CL_NET_PLUGIN_H
#define CL_NET_PLUGIN_H

#include "collective_net.h"
#include "transports/transport.h"

#include <stddef.h>

#define CL_NET_MAX_PLUGINS 8

typedef struct cl_net_plugin {
    cl_transport tr;  /* the adapter's operations under the plugin's name */
    coll_net_ops ops; /* the plugin's table, members past its size cleared */
    char name[COLL_NET_NAME_BYTES];
    char path[256]; /* as COLL_NET_PLUGIN (or the caller) named it */
} cl_net_plugin;

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

/* The adapter: a context of the internal contract over plugin p. */
int cl_net_ctx_create(const cl_net_plugin *p, const cl_tr_config *cfg, cl_tr_ctx **out);
/* The adapter's operations; the loader copies them and sets name and ctx_create. */
extern const cl_transport cl_net_adapter;

#endif
