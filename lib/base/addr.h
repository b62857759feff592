/* Socket addresses as text, written and read one way everywhere (the rendezvous, the
 * transports' handles, the lifeline): "1.2.3.4:5", "[::1]:5", "[fe80::1%eth0]:5". An IPv6
 * host is always in brackets, and a link-local one carries its interface (the scope), as
 * getaddrinfo and getnameinfo write it. Nothing here resolves a name except
 * cl_addr_resolve; the rest takes numeric addresses only. */
#ifndef CL_ADDR_H
#define CL_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* The longest text an address takes: a 45-character IPv6 address, "%" and an interface
 * name, brackets, ":" and a port. */
#define CL_ADDR_TEXT 72

typedef struct cl_addr {
    struct sockaddr_storage sa; /* sockaddr_in or sockaddr_in6 */
    socklen_t len;
} cl_addr;

/* "host:port" or "[host]:port" into host (without brackets) and port: 0, or -1 when it is
 * neither (a host with a colon and no brackets is refused: where would its port begin?). */
int cl_addr_split(const char *text, char *host, size_t hlen, char *port, size_t plen);
/* host and port as text, in brackets where host has a colon (an IPv6 address). */
void cl_addr_join(const char *host, const char *port, char *out, size_t len);
/* A numeric address ("ip:port", "[ip%scope]:port") into *a: 0, or -1. */
int cl_addr_parse(const char *text, cl_addr *a);
/* *a as text (CL_ADDR_TEXT), the way cl_addr_parse reads it. */
void cl_addr_text(const cl_addr *a, char *out, size_t len);
/* 1 when *a is a loopback address (127.0.0.0/8, ::1). */
int cl_addr_is_loopback(const cl_addr *a);

/* A listening socket (SOCK_CLOEXEC | flags, SO_REUSEADDR) bound to *a, which gets the
 * port the kernel chose: the socket, or -1 with errno set. */
int cl_addr_listen(cl_addr *a, int flags, int backlog);
/* A TCP_NODELAY socket (SOCK_CLOEXEC | flags) connecting to *a: the socket (with
 * SOCK_NONBLOCK its connect may be in progress), or -1. */
int cl_addr_dial(const cl_addr *a, int flags);
/* 1 when connected socket fd is connected to itself: TCP's simultaneous open lets a dial
 * of a port of this host's ephemeral range where nobody listens be given that very port
 * as its own (rarely; source port == destination port), and it then reads what it
 * writes. A blocking cl_addr_dial takes that as ECONNREFUSED; a non-blocking one's
 * caller asks once its connect completes. */
int cl_addr_self_dialed(int fd);

/* getaddrinfo for a stream socket, of `family` (AF_UNSPEC: any): 0, or getaddrinfo's
 * error with a sentence in err naming host and, where one was asked for, the family. */
struct addrinfo;
int cl_addr_resolve(const char *host, const char *port, int family, struct addrinfo **res,
                    char *err, size_t errlen);

/* "IPv4", "IPv6" or "IPv4 or IPv6" (AF_UNSPEC). */
const char *cl_family_name(int family);
/* COLL_SOCKET_FAMILY (NCCL's NCCL_SOCKET_FAMILY): AF_INET or AF_INET6 into *family, or
 * AF_UNSPEC when unset; -1 and a sentence in err when it is neither. */
int cl_family_env(int *family, char *err, size_t errlen);

#endif
