/* Interface selection (NCCL syntax), shared by the socket-based transports, the lifeline
 * and the ibverbs bootstrap. */
#ifndef CL_IFACE_H
#define CL_IFACE_H

#include "base/addr.h"

#include <stddef.h>

struct ifaddrs;

/* The address (port 0) of the interface `filter` (NCCL syntax; NULL: any but loopback
 * and docker bridges, loopback as the last resort) accepts, of `family` (AF_UNSPEC:
 * IPv4 where there is one, else IPv6; a global IPv6 address before a link-local one, which
 * carries its interface as its scope). 0, or -1 with a sentence in err that names the
 * filter, the family and what each interface it tried lacked. */
int cl_pick_iface(const char *filter, int family, cl_addr *out, char *err, size_t errlen);
/* The same choice among `all` (getifaddrs' list), for tests. */
int cl_iface_choose(const struct ifaddrs *all, const char *filter, int family, cl_addr *out,
                    char *err, size_t errlen);

/* One rail: an interface, its address (port 0), its network's prefix length and its
 * link speed in Mb/s (/sys/class/net/NAME/speed; 0: not known, as for bridges and
 * many virtual NICs). */
typedef struct cl_iface {
    char name[16];
    cl_addr addr;
    int prefix;
    int mbps;
} cl_iface;
/* Every usable interface (up, accepted by `filter`, with an address of `family`; with no
 * filter not loopback or docker bridges, unless nothing else is), at most max, in
 * getifaddrs' order, each logged at info level with why it was taken or left. The
 * count (>= 1), or -1 with a sentence in err as cl_pick_iface. */
int cl_pick_ifaces(const char *filter, int family, cl_iface *out, int max, char *err,
                   size_t errlen);
/* 1 when peer (an address of the same family) is on the network of interface i: on its
 * link, no router between (auto's test of a second NIC, which may be a management
 * network that the peer's does not reach). Not at i's own address (but loopback's):
 * a network that every host has to itself, as libvirt's virbr0 at 192.168.122.1. */
int cl_iface_on_net(const cl_iface *i, const cl_addr *peer);
int cl_iface_list(const struct ifaddrs *all, const char *filter, int family, cl_iface *out,
                  int max, char *err, size_t errlen);

#endif
