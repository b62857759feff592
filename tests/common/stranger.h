/* The wire as a stranger writes it, from the public knowledge of its layout
 * (lib/wire/wire.h's hello, transports/transport.h's header): what hostile-peer tests
 * send without going through the library. */
#ifndef CL_TEST_STRANGER_H
#define CL_TEST_STRANGER_H

#include <stdint.h>

#define STRANGER_HELLO_MAGIC 0x4c4c4f43u
#define STRANGER_PROTO 3
#define STRANGER_MSG_MAGIC 0xC011

typedef struct {
    uint32_t magic;
    uint16_t proto, libver;
    uint64_t job, comm;
    uint32_t rank, channel, size, keyed;
    uint8_t proof[24];
} hello;

typedef struct {
    uint16_t magic;
    uint8_t coll, dtype, op, codec;
    uint16_t flags;
    uint32_t len, seq, unit, tag;
    uint64_t count;
} header;

#endif
