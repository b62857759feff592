/* The wire formats every transport carries: the connection handshake (hello), what a
 * header's `coll` names, the checks on received headers, and the farewell. Pure functions over
 * untrusted bytes: no state, no allocation, safe for any input (fuzzed in tests/fuzz). */
#ifndef CL_WIRE_H
#define CL_WIRE_H

#include "base/names.h"
#include "transports/transport.h"

#include <stdint.h>

/* What a message belongs to (cl_msg_hdr.coll): enum cl_coll_kind, in base/names.h. */

/* The header-only frame a failing rank sends on its way out (cl_farewell below). */
enum { CL_FAREWELL = 0x7f };
/* The first frame a rank sends on a connection it took and now sends on too (link.c),
 * its payload the proof that it is the rank the dialer meant. */
enum { CL_SHARE = 0x7e };
#define CL_PROTO_VERSION 6u
#define CL_HELLO_MAGIC 0x4c4c4f43u /* "COLL" */

enum { CL_HELLO_PROOF = 24 };

/* The channels a hello may name: a communicator has a link per channel, peer and
 * direction, one channel for its collectives and one for its point-to-point. */
enum { CL_CH_COLL = 0, CL_CH_P2P = 1, CL_CHANNELS = 2 };

typedef struct cl_hello {
    uint32_t magic;
    uint16_t proto, libver;
    uint64_t job, comm;
    uint32_t rank, channel, size;
    uint32_t keyed; /* 1: the sender has COLL_SECRET and will prove it */
    /* With a secret: the link's proof, a tag under the job's key over the link and the
     * nonce on its receiver's card (drawn for this communicator), truncated; else 0. */
    uint8_t proof[CL_HELLO_PROOF];
} cl_hello;
_Static_assert(sizeof(cl_hello) == CL_HELLO_BYTES, "hello is CL_HELLO_BYTES");

/* What this rank accepts: its job, communicator, own rank and size, and whether it
 * has a secret (so must its peers). */
typedef struct cl_hello_expect {
    uint64_t job, comm;
    int rank, size, channels, keyed;
} cl_hello_expect;

void cl_hello_make(const cl_hello_expect *me, int channel, const uint8_t proof[CL_HELLO_PROOF],
                   uint8_t out[CL_HELLO_BYTES]);
/* The proof a hello carries. */
void cl_hello_proof(const uint8_t raw[CL_HELLO_BYTES], uint8_t proof[CL_HELLO_PROOF]);

/* The slot (channel x size + peer rank) a received hello claims, or -1 with *why set. */
int cl_hello_check(const uint8_t raw[CL_HELLO_BYTES], const cl_hello_expect *e, const char **why);

typedef enum { CL_WIRE_OK, CL_WIRE_FAREWELL, CL_WIRE_MISMATCH } cl_wire_verdict;

/* A received header (with nbytes of payload) against the one this rank expects. */
cl_wire_verdict cl_header_check(const cl_msg_hdr *got, const cl_msg_hdr *want, size_t nbytes);

/* What a farewell says, so that every rank reports the cause the failing rank saw. */
typedef struct cl_farewell {
    int status;         /* why: a COLL_E* status; anything else is read as COLL_EPROTO */
    uint64_t rank;      /* where the failure began, in the numbering of the links' owner */
    uint32_t seq;       /* the operation the sender was running (0: none, at init) */
    uint32_t silent_ms; /* COLL_EPEER only: the heartbeat found that rank silent this long */
} cl_farewell;

/* The farewell's header: coll = CL_FAREWELL, tag = -status, count = rank, seq, unit =
 * silent_ms, no payload. */
cl_msg_hdr cl_farewell_make(const cl_farewell *f);
/* What a received farewell (a header whose coll is CL_FAREWELL) says, any bytes taken. */
cl_farewell cl_farewell_read(const cl_msg_hdr *h);

#endif
