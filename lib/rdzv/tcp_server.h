/* The TCP store's wire and its server (rank 0's thread). A request is op (1 byte), key
 * length and value length (4 bytes each, host order), the key, the value. A get is
 * answered found (1 byte), length (4) and the value; a set 1 (set) or 0 (refused: out of
 * memory or over the server's limits); a create 1, 2 (taken) or 0; a hello (no key, no
 * value) CL_STORE_MAGIC, so a client knows at once that it reached a rendezvous and not
 * another program that holds the port. */
#ifndef CL_RDZV_TCP_SERVER_H
#define CL_RDZV_TCP_SERVER_H

#include <stddef.h>
#include <stdint.h>

enum {
    CL_STORE_OP_SET = 1,
    CL_STORE_OP_GET = 2,
    CL_STORE_OP_CREATE = 3,
    CL_STORE_OP_HELLO = 4,
    CL_STORE_REQ_HDR = 9
};
#define CL_STORE_MAGIC "collrdz1"

/* What one server holds at most: a job of thousands of ranks stores a few small values
 * per rank; anything beyond is somebody filling rank 0's memory. */
enum { CL_STORE_MAX_CLIENTS = 4096, CL_STORE_MAX_KEYS = 65536 };
#define CL_STORE_MAX_BYTES (64u << 20)

typedef struct cl_store_server cl_store_server;

/* The listening sockets one server takes at most: one per address its host name has. */
enum { CL_STORE_LISTENERS = 4 };

/* Serves on the nl listening sockets lfd[] (1 to CL_STORE_LISTENERS, taken over, and
 * closed on failure too; another number of them is COLL_EINVAL) from a thread of its own. A client that sends no whole request
 * and takes no reply for idle_ms is dropped. */
int cl_store_server_start(const int *lfd, int nl, int64_t idle_ms, cl_store_server **out);
/* From now on, a value set under key is handed to fn(arg, value, length) on the server's
 * thread (once per set; a value of at most 255 bytes), until the server stops. */
void cl_store_server_watch(cl_store_server *s, const char *key,
                           void (*fn)(void *arg, const char *val, size_t len), void *arg);
/* Stops the thread (at once: it never blocks on a client) and frees everything. */
void cl_store_server_stop(cl_store_server *s);

#endif
