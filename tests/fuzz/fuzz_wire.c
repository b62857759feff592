/* libFuzzer target for the parsers of untrusted wire input: the connection handshake, the
 * segment header checks and the farewell (lib/wire/wire.c). Beyond "no crash, no sanitizer report",
 * it checks that nothing is accepted that differs from what was expected. */
#include "wire/wire.h"

#include <stdint.h>
#include <string.h>

#define REQUIRE(x)                                                                           \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t raw[CL_HELLO_BYTES] = { 0 };
    memcpy(raw, data, size < sizeof(raw) ? size : sizeof(raw));
    cl_hello_expect e = { 0x1234, 7, 2, 5, CL_CHANNELS, 1 };
    const char *why;
    int slot = cl_hello_check(raw, &e, &why);
    if (slot >= 0) {
        cl_hello h;
        memcpy(&h, raw, sizeof(h));
        REQUIRE(h.magic == CL_HELLO_MAGIC && h.proto == CL_PROTO_VERSION && h.job == e.job &&
                h.keyed == 1u && h.comm == e.comm && h.size == (uint32_t)e.size &&
                h.rank < (uint32_t)e.size && h.rank != (uint32_t)e.rank &&
                h.channel < (uint32_t)e.channels);
        REQUIRE(slot == (int)(h.channel * (uint32_t)e.size + h.rank));
    } else {
        REQUIRE(why != NULL);
    }
    cl_msg_hdr got = { 0 }, want = { .magic = CL_MSG_MAGIC, .coll = CL_ALLREDUCE, .len = 64,
                                      .seq = 3, .unit = 1, .count = 1000 };
    size_t off = sizeof(raw);
    if (size > off)
        memcpy(&got, data + off, size - off < sizeof(got) ? size - off : sizeof(got));
    size_t nbytes = size > 80 ? data[80] : 64;
    cl_wire_verdict v = cl_header_check(&got, &want, nbytes);
    if (v == CL_WIRE_OK)
        REQUIRE(memcmp(&got, &want, sizeof(got)) == 0 && nbytes == want.len);
    if (v == CL_WIRE_FAREWELL) {
        REQUIRE(got.coll == CL_FAREWELL && got.len == 0);
        /* Whatever its bytes, a farewell reads as a failure status, silence as EPEER's. */
        cl_farewell f = cl_farewell_read(&got);
        REQUIRE(f.status >= COLL_EPROTO && f.status < COLL_OK);
        REQUIRE(f.silent_ms <= INT32_MAX && (f.status == COLL_EPEER || f.silent_ms == 0));
    }
    return 0;
}
