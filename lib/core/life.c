/* Lifeline sockets: see life.h. */
#include "core/life.h"

#include "base/util.h"
#include "collective.h"
#include "transports/iface.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int cl_life_open(const char *device, cl_life *out)
{
    char ip[INET_ADDRSTRLEN];
    out->fd = -1;
    if (cl_pick_iface(device, ip, sizeof(ip)) != 0 && cl_pick_iface(NULL, ip, sizeof(ip)) != 0)
        return COLL_ESYS;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return COLL_ESYS;
    }
    out->fd = fd;
    snprintf(out->addr, sizeof(out->addr), "%s:%u", ip, ntohs(a.sin_port));
    return COLL_OK;
}

void cl_life_close(cl_life *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}

int cl_life_dial(const char *addr)
{
    char ip[CL_LIFE_ADDR];
    unsigned port;
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (!colon || (size_t)(colon - addr) >= sizeof(ip) || sscanf(colon + 1, "%u", &port) != 1)
        return -1;
    memcpy(ip, addr, (size_t)(colon - addr));
    ip[colon - addr] = 0;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

int cl_life_dialed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    int err = 0;
    socklen_t len = sizeof(err);
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 1 : -1;
}

int cl_life_accept(const cl_life *l)
{
    return accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
}

int cl_life_send(int fd, const void *buf, size_t n, int64_t deadline_ms)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return COLL_EPEER;
        int64_t left = deadline_ms - cl_now_ms();
        if (left <= 0)
            return COLL_ETIMEDOUT;
        struct pollfd q = {.fd = fd, .events = POLLOUT};
        poll(&q, 1, (int)CL_MIN(left, 100));
    }
    return COLL_OK;
}
