/* collective_net.h: the transport plugin ABI of libcollective (pkg-config libcollective-net).
 *
 * A plugin is a shared object that exports one symbol, COLL_NET_PLUGIN_SYMBOL
 * ("coll_net_plugin"): a const coll_net_ops table. The library loads the plugins that
 * COLL_NET_PLUGIN names (a path, or NAME for libcollective-net-NAME.so on the library
 * path; several separated by ',' or ':') at the first coll_init of the process, and
 * COLL_TRANSPORT=<ops.name> runs a communicator over one. Plugins stay loaded until the
 * process ends.
 *
 * The model (taken from NCCL's net plugin): a plugin serves devices; a receiver listens
 * on a device and hands out an opaque handle of at most COLL_NET_HANDLE_BYTES; the
 * library carries the handle to the sender (through its rendezvous), which connects with
 * it. Connections are one-directional: connect() gives a send comm, accept() a receive
 * comm. isend()/irecv() start a message and give a request; test() completes it. Nothing
 * blocks: an operation that cannot go now says so and is asked again.
 *
 * Messages: every isend() is one message, matched by the peer's irecv() on the
 * connection in posting order (the plugin keeps the boundaries; a stream transport
 * frames them). irecv()'s size is the room for the message; the message may be shorter
 * (test() gives its size) but a longer one fails the receive with
 * COLL_NET_ERR_TRUNCATED. Sends and receives of one comm complete in posting order.
 * The library frames its own headers inside those messages; a plugin never reads them.
 *
 * Contexts: one per process and device choice, as NCCL up to its v10 net API inits its
 * plugin once per process. The first communicator that runs the plugin (auto's included) calls init(),
 * every later one of the same device choice shares its context, and the last one to end
 * calls finalize(); init() and finalize() of a plugin never run at once. An init() that
 * failed is not remembered: the next communicator that wants the plugin calls it again.
 *
 * Threads: the library calls a plugin context's operations (those given that context,
 * or a comm or request made from it) one at a time, whichever communicator they serve,
 * under a lock of its own: a plugin needs no locking for what it does inside them.
 * Progress may happen inside test() only (the library then calls test() from its own
 * thread while requests are pending); a plugin with a thread of its own calls init's
 * notify() when a request may be done, so the library looks at once instead of at its
 * next poll.
 *
 * Versions: `version` is the ABI version the plugin was built against
 * (COLL_NET_ABI_VERSION then) and `size` is sizeof(coll_net_ops) then. A later version
 * only appends operations, so a library of version N+1 loads a plugin of version N: the
 * members past the plugin's `size` count as absent (NULL). A change that is not an
 * append makes a new major version, and a library refuses plugins of a version it does
 * not speak (outside COLL_NET_ABI_OLDEST .. COLL_NET_ABI_VERSION) at coll_init, naming
 * both versions.
 *
 * Return values: every int-returning operation answers COLL_NET_OK or a coll_net_error. */
#ifndef COLLECTIVE_NET_H
#define COLLECTIVE_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLL_NET_ABI_VERSION 2 /* the version this header describes */
#define COLL_NET_ABI_OLDEST 1  /* the oldest version a library of this header still loads */
#define COLL_NET_HANDLE_BYTES 64
#define COLL_NET_NAME_BYTES 32 /* ops.name: 1-31 of [a-z0-9_-] */
#define COLL_NET_PLUGIN_SYMBOL "coll_net_plugin"

typedef enum coll_net_error {
    COLL_NET_OK = 0,
    COLL_NET_ERR_SYSTEM = 1,    /* an OS or library call failed (COLL_ESYS) */
    COLL_NET_ERR_INVALID = 2,   /* a bad argument or handle (COLL_EINVAL) */
    COLL_NET_ERR_NOMEM = 3,     /* (COLL_ENOMEM) */
    COLL_NET_ERR_REMOTE = 4,    /* the peer closed, reset or cannot be reached (COLL_EPEER) */
    COLL_NET_ERR_TRUNCATED = 5, /* a message longer than its receive (COLL_EMISMATCH) */
    COLL_NET_ERR_INTERNAL = 6,  /* the plugin's own fault (COLL_ESYS) */
} coll_net_error;

/* Log levels of init's log(): the library's own (COLL_DEBUG). */
enum { COLL_NET_LOG_ERROR = 0, COLL_NET_LOG_WARN, COLL_NET_LOG_INFO, COLL_NET_LOG_DEBUG };

/* What the library tells init(). Members may be appended in later versions: read only
 * those below `size`. */
typedef struct coll_net_init_args {
    size_t size;        /* sizeof(coll_net_init_args) of the library */
    const char *device; /* the user's device choice (COLL_SOCKET_IFNAME or coll_config's
                           device), NULL for the plugin's own; a plugin may ignore it.
                           Communicators of another choice get a context of their own */
    int timeout_ms;     /* the first communicator's bound on a silent peer, for the
                           plugin's own handshakes; the library times its operations */
    /* Any thread may call notify(notify_arg), also from inside an operation: a request
     * may have completed, or a connection arrived. Optional to use. */
    void (*notify)(void *notify_arg);
    void *notify_arg;
    /* The library's log, for the plugin's messages (one line, no newline). */
    void (*log)(int level, const char *msg);
} coll_net_init_args;

/* A device, as get_properties() describes it. */
typedef struct coll_net_props {
    char name[64];         /* for logs: "eth0", "mlx5_0:1", "example" */
    uint32_t speed_mbps;   /* link speed; the library picks the fastest. 0 (unknown) keeps
                              auto from taking it to other hosts: report 0 for a device
                              that reaches this host only (auto uses shm there anyway) */
    float latency_us;      /* one-way latency (0: unknown) */
    uint32_t max_requests; /* requests one comm takes in flight (0: no limit) */
} coll_net_props;

/* The operations. "Required" ones must be set; a plugin without one is refused at load,
 * naming it. Optional ones may be NULL. */
typedef struct coll_net_ops {
    uint32_t version; /* COLL_NET_ABI_VERSION the plugin was built with */
    uint32_t size;    /* sizeof(coll_net_ops) the plugin was built with */
    const char *name; /* COLL_TRANSPORT's name for it: 1-31 of [a-z0-9_-], not a built-in's */

    /* Required. Starts a plugin context and returns it in *net: once per process and
     * device choice, shared by every communicator (see Contexts above); a process may
     * hold several at once, of several device choices. */
    int (*init)(const coll_net_init_args *args, void **net);
    /* Required. Ends a context; its comms were closed before. */
    void (*finalize)(void *net);
    /* Required. The number of devices (at least 1 for the plugin to be used). */
    int (*devices)(void *net, int *ndev);
    /* Required. Describes device dev (0 .. ndev-1) into *props (zeroed by the caller). */
    int (*get_properties)(void *net, int dev, coll_net_props *props);

    /* Required. Listens on device dev: writes at most COLL_NET_HANDLE_BYTES into handle
     * (zeroed by the caller) for connect() to find it, and returns the listen comm. */
    int (*listen)(void *net, int dev, void *handle, void **listen_comm);
    /* Required. Connects to the listener of `handle` (from another process, maybe
     * another host) and returns a send comm at once: sends posted before the connection
     * is up wait in the plugin. A peer that cannot be reached fails its requests with
     * COLL_NET_ERR_REMOTE (or connect() itself, where it knows at once). */
    int (*connect)(void *net, int dev, const void *handle, void **send_comm);
    /* Required. A receive comm of a connection that arrived, or COLL_NET_OK with
     * *recv_comm NULL when none is waiting (never blocks). */
    int (*accept)(void *listen_comm, void **recv_comm);

    /* Optional, both or neither. Registers [data, data + size) for comm's transfers;
     * the library registers the buffers it owns (its headers' staging) once per comm
     * and passes the handle to isend/irecv. A NULL mhandle means unregistered memory,
     * which the plugin must take too (copy it, or register it itself). */
    int (*reg_mr)(void *comm, void *data, size_t size, void **mhandle);
    int (*dereg_mr)(void *comm, void *mhandle);

    /* Required. Starts sending size bytes of data (which stays valid and unchanged until
     * the request completes) as one message. *request NULL with COLL_NET_OK: the plugin
     * cannot take another request now (max_requests); the library asks again later. */
    int (*isend)(void *send_comm, const void *data, size_t size, void *mhandle, void **request);
    /* Required. Starts receiving the next message, of at most size bytes, into data.
     * *request NULL with COLL_NET_OK: as isend's. */
    int (*irecv)(void *recv_comm, void *data, size_t size, void *mhandle, void **request);
    /* Required. *done = 1 once the request completed: the plugin then frees it, and
     * *size holds the message's bytes (a receive's; a send's may give its own). An error
     * ends the request too (done or not): the library then fails the connection and
     * closes it. */
    int (*test)(void *request, int *done, size_t *size);

    /* Required. Close a comm. Its pending requests end with it (they are never tested
     * again, and the plugin stops touching their buffers before returning). close_send
     * should still let out, without blocking, what was posted and fits the plugin's
     * buffers (a socket's): the library's last message before a close explains it. */
    int (*close_send)(void *send_comm);
    int (*close_recv)(void *recv_comm);
    int (*close_listen)(void *listen_comm);

    /* Version 2. */

    /* Optional. *bytes: how many bytes of request's message moved so far (sent into the
     * network, or received), while it is not done. The library's operation timeout
     * counts time without progress: without this, a message that takes longer than
     * COLL_OP_TIMEOUT_MS on a slow link fails though its bytes flow. Called from any
     * thread, never at once with test() on the same request. */
    int (*progress)(void *request, size_t *bytes);
} coll_net_ops;

/* The size of version 1's table: a plugin's `size` is at least this. */
#define COLL_NET_OPS_SIZE_V1 (offsetof(coll_net_ops, close_listen) + sizeof(void (*)(void)))

/* What a plugin defines, e.g.
 *   COLL_NET_EXPORT const coll_net_ops coll_net_plugin = {
 *       .version = COLL_NET_ABI_VERSION, .size = sizeof(coll_net_ops), .name = "mynet", ...};
 */
#define COLL_NET_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
}
#endif

#endif
