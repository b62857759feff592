/* The lifeline: a listening TCP socket every communicator keeps from init to destroy,
 * apart from its transport. A failure closes every transport link (that is how peers
 * learn of it); the lifeline stays, so the survivors can find each other afterwards and
 * agree on who is gone (coll_shrink). Plain sockets with deadlines: nothing here runs
 * unless a shrink does. */
#ifndef CL_LIFE_H
#define CL_LIFE_H

#include <stddef.h>
#include <stdint.h>

#define CL_LIFE_ADDR 64

typedef struct cl_life {
    int fd;                  /* listening, non-blocking; -1 when closed */
    char addr[CL_LIFE_ADDR]; /* "ip:port" peers dial */
} cl_life;

/* Listens on every address, published as the one `device` (NCCL syntax; NULL or no
 * match: the first usable interface) names. */
int cl_life_open(const char *device, cl_life *out);
void cl_life_close(cl_life *l);

/* Starts a non-blocking connect to addr: the socket, or -1 when it failed at once
 * (nobody listens there on this machine, or the address is bad). */
int cl_life_dial(const char *addr);
/* 1 once a dial completed, 0 while it is under way, -1 when it failed. */
int cl_life_dialed(int fd);
/* A pending connection from the listener (non-blocking), or -1 when none. */
int cl_life_accept(const cl_life *l);
/* Writes all n bytes before the deadline; COLL_OK, COLL_EPEER or COLL_ETIMEDOUT. */
int cl_life_send(int fd, const void *buf, size_t n, int64_t deadline_ms);

#endif
