/* The device side of the ibverbs transport: which HCA, port and GID, and the queue
 * pair state machine (RESET -> INIT -> RTR -> RTS) for InfiniBand and RoCE. */
#ifndef CL_IB_DEV_H
#define CL_IB_DEV_H

#include "transports/ibverbs/verbs.h"

typedef struct cl_ib_dev {
    const cl_verbs *v;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    uint8_t port;
    int gid_index; /* -1 on InfiniBand: LIDs route, no GRH */
    union ibv_gid gid;
    uint16_t lid;
    enum ibv_mtu mtu;
    uint32_t speed_mbps; /* the port's, lanes x lane rate; 0: not known */
    char name[64];
} cl_ib_dev;

/* What one end of a queue pair tells the other, through the bootstrap socket. */
typedef struct cl_ib_addr {
    uint32_t qpn, psn;
    uint16_t lid;
    uint16_t slot_kib; /* a sender's address: its slots' size, KiB (ib_conn.h) */
    uint32_t rkey;
    uint64_t addr; /* the region the peer may write into */
    uint8_t gid[16];
} cl_ib_addr;

/* Opens the device named by COLL_IB_HCA ("rxe0" or "rxe0:1"; default: the first with an
 * active port), its PD and one completion channel. COLL_IB_GID_INDEX overrides the GID:
 * by default the first IPv4-mapped (RoCEv2) one on Ethernet ports. */
int cl_ib_dev_open(const cl_verbs *v, cl_ib_dev *d, char *err, size_t errlen);
void cl_ib_dev_close(cl_ib_dev *d);

/* An RC queue pair in INIT on cq (send and receive) with room for the given numbers of
 * send and receive work requests, or NULL. */
struct ibv_qp *cl_ib_qp_create(cl_ib_dev *d, struct ibv_cq *cq, int send_depth, int recv_depth,
                               void *qp_context);

/* Moves qp to RTS against the remote end; returns 0 or an errno. */
int cl_ib_qp_connect(cl_ib_dev *d, struct ibv_qp *qp, const cl_ib_addr *remote, uint32_t psn);

/* This end's address for qp: QP number, psn, LID, GID. */
void cl_ib_local_addr(const cl_ib_dev *d, struct ibv_qp *qp, uint32_t psn, cl_ib_addr *out);

#endif
