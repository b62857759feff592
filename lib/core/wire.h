/* The wire formats every transport carries: the connection handshake (hello) and the
 * checks on received segment headers. Pure functions over untrusted bytes: no state, no
 * allocation, safe for any input (fuzzed in tests/fuzz). */
#ifndef CL_WIRE_H
#define CL_WIRE_H

#include "transports/transport.h"

#include <stdint.h>

typedef struct cl_hello {
    uint32_t magic;
    uint16_t proto, libver;
    uint64_t job, secret, comm;
    uint32_t rank, channel, size, pad;
} cl_hello;
_Static_assert(sizeof(cl_hello) == CL_HELLO_BYTES, "hello is CL_HELLO_BYTES");

/* What this rank accepts: its job, secret, communicator, own rank and size. */
typedef struct cl_hello_expect {
    uint64_t job, secret, comm;
    int rank, size, channels;
} cl_hello_expect;

void cl_hello_make(const cl_hello_expect *me, int channel, uint8_t out[CL_HELLO_BYTES]);

/* The slot (channel x size + peer rank) a received hello claims, or -1 with *why set. */
int cl_hello_check(const uint8_t raw[CL_HELLO_BYTES], const cl_hello_expect *e, const char **why);

typedef enum { CL_WIRE_OK, CL_WIRE_FAREWELL, CL_WIRE_MISMATCH } cl_wire_verdict;

/* A received header (with nbytes of payload) against the one this rank expects. */
cl_wire_verdict cl_header_check(const cl_msg_hdr *got, const cl_msg_hdr *want, size_t nbytes);

#endif
