/* Socket addresses as text: see addr.h. Must never block (no name is resolved except in
 * cl_addr_resolve) and never write text that cl_addr_parse does not read back. */
#include "base/addr.h"

#include "base/log.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int cl_addr_split(const char *text, char *host, size_t hlen, char *port, size_t plen)
{
    const char *h = text, *end, *colon;
    if (text[0] == '[') {
        h = text + 1;
        end = strchr(h, ']');
        if (!end || end[1] != ':')
            return -1;
        colon = end + 1;
    } else {
        colon = strchr(text, ':');
        end = colon;
        if (!colon || strchr(colon + 1, ':'))
            return -1;
    }
    size_t n = (size_t)(end - h);
    if (n == 0 || n >= hlen || !colon[1] || strlen(colon + 1) >= plen)
        return -1;
    memcpy(host, h, n);
    host[n] = 0;
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

void cl_addr_join(const char *host, const char *port, char *out, size_t len)
{
    int v6 = strchr(host, ':') != NULL;
    snprintf(out, len, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

int cl_addr_parse(const char *text, cl_addr *a)
{
    char host[CL_ADDR_TEXT], port[8];
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM},
                    *res;
    if (cl_addr_split(text, host, sizeof(host), port, sizeof(port)) != 0 ||
        getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    memset(a, 0, sizeof(*a));
    memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static unsigned port_of(const cl_addr *a)
{
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)&a->sa;
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&a->sa;
    return ntohs(a->sa.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port);
}

/* getnameinfo writes a link-local address's scope as "%ifname", which getaddrinfo reads. */
void cl_addr_text(const cl_addr *a, char *out, size_t len)
{
    char host[CL_ADDR_TEXT], port[8];
    if (getnameinfo((const struct sockaddr *)&a->sa, a->len, host, sizeof(host), NULL, 0,
                    NI_NUMERICHOST) != 0)
        snprintf(host, sizeof(host), "?");
    snprintf(port, sizeof(port), "%u", port_of(a));
    cl_addr_join(host, port, out, len);
}

int cl_addr_is_loopback(const cl_addr *a)
{
    if (a->sa.ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)&a->sa)->sin6_addr);
    return (ntohl(((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr) >> 24) == 127;
}

static int fail_closing(int fd)
{
    int e = errno;
    if (fd >= 0)
        close(fd);
    errno = e;
    return -1;
}

int cl_addr_listen(cl_addr *a, int flags, int backlog)
{
    int one = 1, fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    a->len = sizeof(a->sa);
    if (bind(fd, (struct sockaddr *)&a->sa,
             a->sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                         : sizeof(struct sockaddr_in)) != 0 ||
        listen(fd, backlog) != 0 || getsockname(fd, (struct sockaddr *)&a->sa, &a->len) != 0)
        return fail_closing(fd);
    return fd;
}

int cl_addr_dial(const cl_addr *a, int flags)
{
    int one = 1, fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)&a->sa, a->len) != 0 &&
        !((flags & SOCK_NONBLOCK) && errno == EINPROGRESS))
        return fail_closing(fd);
    if (!(flags & SOCK_NONBLOCK) && cl_addr_self_dialed(fd)) {
        char at[CL_ADDR_TEXT];
        cl_addr_text(a, at, sizeof(at));
        cl_log(COLL_LOG_DEBUG, "dialing %s met itself: nobody listens there (yet)", at);
        errno = ECONNREFUSED;
        return fail_closing(fd);
    }
    return fd;
}

static int same_end(const struct sockaddr_storage *x, const struct sockaddr_storage *y)
{
    const struct sockaddr_in *x4 = (const void *)x, *y4 = (const void *)y;
    const struct sockaddr_in6 *x6 = (const void *)x, *y6 = (const void *)y;
    if (x->ss_family != y->ss_family)
        return 0;
    if (x->ss_family == AF_INET)
        return x4->sin_port == y4->sin_port && x4->sin_addr.s_addr == y4->sin_addr.s_addr;
    return x->ss_family == AF_INET6 && x6->sin6_port == y6->sin6_port &&
           memcmp(&x6->sin6_addr, &y6->sin6_addr, sizeof(x6->sin6_addr)) == 0;
}

int cl_addr_self_dialed(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    return getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
           getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && same_end(&me, &peer);
}

int cl_addr_resolve(const char *host, const char *port, int family, struct addrinfo **res,
                    char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(host, port, &hints, res);
    if (rc != 0)
        snprintf(err, errlen, "'%s' does not resolve%s%s%s: %s", host,
                 family != AF_UNSPEC ? " to an " : "",
                 family != AF_UNSPEC ? cl_family_name(family) : "",
                 family != AF_UNSPEC ? " address" : "",
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return rc;
}

const char *cl_family_name(int family)
{
    return family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "IPv4 or IPv6";
}

int cl_family_env(int *family, char *err, size_t errlen)
{
    const char *v = getenv("COLL_SOCKET_FAMILY");
    *family = AF_UNSPEC;
    if (!v || !*v)
        return 0;
    cl_log(COLL_LOG_INFO, "COLL_SOCKET_FAMILY=%s", v);
    if (strcasecmp(v, "AF_INET") == 0)
        *family = AF_INET;
    else if (strcasecmp(v, "AF_INET6") == 0)
        *family = AF_INET6;
    else {
        snprintf(err, errlen, "COLL_SOCKET_FAMILY must be AF_INET or AF_INET6, not '%s'", v);
        return -1;
    }
    return 0;
}
