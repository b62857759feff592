/* Resolved configuration: coll_config fields, else COLL_* variables, else defaults. */
#ifndef CL_CONFIG_H
#define CL_CONFIG_H

#include "transports/transport.h"
#include "rdzv/store.h"
#include "base/auth.h"
#include "collective.h"

#include <stdint.h>

#define CL_DEFAULT_TIMEOUT_MS 30000
#define CL_DEFAULT_OP_TIMEOUT_MS 1800000
#define CL_DEFAULT_SEGMENT (512u * 1024u)
#define CL_MAX_SEGMENT (64u << 20)
/* A waiting collective polls this long before sleeping: a peer's answer to a small
 * message comes within tens of microseconds, a sleep and wake-up cost as much again. */
#define CL_DEFAULT_SPIN_US 100
/* A data-centre link between hosts until told otherwise: 10 us a message, 25 Gbit/s. */
#define CL_DEFAULT_NET_LATENCY_US 10
#define CL_DEFAULT_NET_GBPS 25
#define CL_JOB_NAME 64

/* The flight recorder's settings (record.c): entries kept per communicator (0: off), the
 * directory its files go to (NULL: none on failure or signal), the signal that asks for
 * them (0: none) and the job's name in their names (NULL: cl_config.job). */
typedef struct cl_rec_config {
    int ops;
    const char *dir;
    int signal;
    const char *job;
} cl_rec_config;

typedef struct cl_config {
    const cl_transport *transport;
    const char *device; /* NULL: transport's own choice */
    int family;         /* the sockets' (cl_rdzv.family; AF_UNSPEC: IPv4 where there is one) */
    int timeout_ms;    /* a peer that does not answer (coll_config.timeout_ms) */
    int op_timeout_ms; /* an operation without progress (coll_config.op_timeout_ms) */
    size_t segment_bytes;
    int keyed;                 /* COLL_SECRET is set */
    uint8_t key[CL_KEY_BYTES]; /* derived from it (base/auth.h) */
    coll_codec codec;
    int spin_us;      /* how long a waiting collective polls before it sleeps */
    const char *algo; /* COLL_ALGO, NULL: the library chooses */
    /* The link between hosts, for the cost model: COLL_NET_LATENCY_US, COLL_NET_GBPS. */
    double net_alpha_s, net_beta_s;
    int net_given; /* either was set: not measured at init */
    /* COLL_SPLIT_SHARE=1: coll_split's communicators use their parent's links (family.c). */
    int share;
    /* The job's name as its launcher gave it (COLL_JOB_ID, SLURM_JOB_ID, ...; "" when
     * none did) and the variable it came from: two jobs at one rendezvous never mix. */
    char job[CL_JOB_NAME];
    const char *job_from;
    cl_rec_config rec;
} cl_config;

int cl_config_resolve(const coll_config *user, const cl_rdzv *rv, cl_config *out, char *err,
                      size_t errlen);

#endif
