/* Handshake, header checks and the farewell: see wire.h. */
#include "wire/wire.h"

#include "base/util.h"
#include "collective.h"

#include <stddef.h>
#include <string.h>

void cl_hello_make(const cl_hello_expect *me, int channel, const uint8_t proof[CL_HELLO_PROOF],
                   uint8_t out[CL_HELLO_BYTES])
{
    cl_hello h = {.magic = CL_HELLO_MAGIC,
                  .proto = CL_PROTO_VERSION,
                  .libver = COLL_VERSION_MAJOR * 100 + COLL_VERSION_MINOR,
                  .job = me->job,
                  .comm = me->comm,
                  .rank = (uint32_t)me->rank,
                  .channel = (uint32_t)channel,
                  .size = (uint32_t)me->size,
                  .keyed = me->keyed != 0};
    memcpy(h.proof, proof, sizeof(h.proof));
    memcpy(out, &h, sizeof(h));
}

void cl_hello_proof(const uint8_t raw[CL_HELLO_BYTES], uint8_t proof[CL_HELLO_PROOF])
{
    memcpy(proof, raw + offsetof(cl_hello, proof), CL_HELLO_PROOF);
}

int cl_hello_check(const uint8_t raw[CL_HELLO_BYTES], const cl_hello_expect *e, const char **why)
{
    cl_hello h;
    memcpy(&h, raw, sizeof(h));
    *why = NULL;
    if (h.magic != CL_HELLO_MAGIC)
        *why = "bad magic";
    else if (h.proto != CL_PROTO_VERSION)
        *why = "protocol version differs";
    else if (h.keyed != (uint32_t)(e->keyed != 0))
        *why = "COLL_SECRET set on one side only";
    else if (h.job != e->job || h.comm != e->comm)
        *why = "belongs to another job or communicator";
    else if (h.rank >= (uint32_t)e->size || h.rank == (uint32_t)e->rank ||
             h.channel >= (uint32_t)e->channels || h.size != (uint32_t)e->size)
        *why = "rank, size or channel out of range";
    return *why ? -1 : (int)(h.channel * (uint32_t)e->size + h.rank);
}

cl_wire_verdict cl_header_check(const cl_msg_hdr *got, const cl_msg_hdr *want, size_t nbytes)
{
    if (got->magic == CL_MSG_MAGIC && got->coll == CL_FAREWELL && got->len == 0)
        return CL_WIRE_FAREWELL;
    if (memcmp(got, want, sizeof(*want)) != 0 || nbytes != want->len)
        return CL_WIRE_MISMATCH;
    return CL_WIRE_OK;
}

cl_msg_hdr cl_farewell_make(const cl_farewell *f)
{
    return (cl_msg_hdr){.magic = CL_MSG_MAGIC,
                        .coll = CL_FAREWELL,
                        .seq = f->seq,
                        .unit = f->silent_ms,
                        .tag = (uint32_t)-f->status,
                        .count = f->rank};
}

cl_farewell cl_farewell_read(const cl_msg_hdr *h)
{
    int status = h->tag >= 1 && h->tag <= (uint32_t)-COLL_EPROTO ? -(int)h->tag : COLL_EPROTO;
    /* A rank the heartbeat found silent did not fail: it stopped answering. */
    uint32_t silent = status == COLL_EPEER ? CL_MIN(h->unit, INT32_MAX) : 0;
    return (cl_farewell){.status = status, .rank = h->count, .seq = h->seq, .silent_ms = silent};
}
