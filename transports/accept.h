/* A listening socket's accepted connections whose opening bytes (a hello, an address)
 * have not all arrived: read without blocking, so one slow or silent connector never
 * holds up the others, and bounded so strangers cannot hold the listener: at most
 * CL_PENDING_MAX at once (a new one pushes out the oldest), each for CL_PENDING_MS (a
 * rank sends its opening bytes right after it connects). Shared by the transports that
 * accept on a plain socket (shm, ibverbs' bootstrap). */
#ifndef CL_ACCEPT_H
#define CL_ACCEPT_H

#include "transports/transport.h"

#include <stddef.h>
#include <stdint.h>

enum { CL_PENDING_MAX = 16, CL_PENDING_BYTES = 128, CL_PENDING_MS = 2000 };

typedef struct cl_pending {
    int fd;
    int64_t since; /* accepted then (ms) */
    size_t n; /* bytes of buf read so far (for a transport that reads them here) */
    uint8_t buf[CL_PENDING_BYTES];
} cl_pending;

typedef struct cl_listen_fd {
    int fd; /* the listening socket, non-blocking; -1 once closed */
    cl_tr_vet vet; /* the caller's judgement of a hello (cl_tr_config), or NULL */
    void *vet_arg;
    cl_pending p[CL_PENDING_MAX];
    int np;
} cl_listen_fd;

/* What a transport's accept() was asked for, handed to its cl_pending_take. */
typedef struct cl_accepting {
    cl_tr_listener *l;
    uint8_t *hello;
    cl_tr_conn **out;
} cl_accepting;

/* What a transport does with one pending socket: 1 made a connection (it owns fd now),
 * 0 nothing to do yet, -1 drop it (the helper closes fd). */
typedef int (*cl_pending_take)(void *arg, cl_pending *p);

/* Drops pending sockets past CL_PENDING_MS, accepts whatever waits, then offers each
 * pending socket to take until one makes a connection: COLL_OK then, else
 * COLL_INPROGRESS. */
int cl_listen_accept(cl_listen_fd *l, cl_pending_take take, void *arg);
/* 1 when the listener's vet takes hello (or it has none), else 0 with the refusal
 * logged under the transport's name. Called before anything is given to the connector. */
int cl_listen_vet(const cl_listen_fd *l, const uint8_t hello[CL_HELLO_BYTES], const char *tr);
/* Closes the pending sockets and the listening one. */
void cl_listen_close(cl_listen_fd *l);

#endif
