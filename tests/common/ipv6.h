/* Whether this machine runs IPv6 on its loopback (::1 can be bound): tests of IPv6 paths
 * skip their cases where it does not. */
#ifndef CL_TEST_IPV6_H
#define CL_TEST_IPV6_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int have_ipv6_loopback(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

#endif
