/* Interface selection for the tcp transport. */
#ifndef CL_TCP_IFACE_H
#define CL_TCP_IFACE_H

#include <stddef.h>

/* Writes the IPv4 address of the first interface accepted by `filter` (NCCL syntax) into
 * ip. Returns 0, or -1 when no interface matches. */
int cl_tcp_pick_iface(const char *filter, char *ip, size_t iplen);

#endif
