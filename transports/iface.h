/* Interface selection (NCCL syntax), shared by the socket-based transports and the ibverbs bootstrap. */
#ifndef CL_IFACE_H
#define CL_IFACE_H

#include <stddef.h>

/* Writes the IPv4 address of the first interface accepted by `filter` (NCCL syntax) into
 * ip. Returns 0, or -1 when no interface matches. */
int cl_pick_iface(const char *filter, char *ip, size_t iplen);

#endif
