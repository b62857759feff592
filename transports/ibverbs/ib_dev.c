/* Device, port and GID selection, and queue pair transitions. RoCE has no LIDs: the
 * address handle must carry a global route header with the peer's GID and our GID index,
 * or the QP cannot reach RTR. */
#include "transports/ibverbs/ib_dev.h"

#include "base/log.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int port_usable(cl_ib_dev *d, uint8_t port, struct ibv_port_attr *pa)
{
    memset(pa, 0, sizeof(*pa));
    return d->v->query_port(d->ctx, port, pa) == 0 && pa->state == IBV_PORT_ACTIVE;
}

/* The first IPv4-mapped GID (::ffff:a.b.c.d), which is how RoCEv2 shows an address. */
static int pick_gid(cl_ib_dev *d, const struct ibv_port_attr *pa)
{
    const char *want = getenv("COLL_IB_GID_INDEX");
    if (want && *want) {
        cl_log(COLL_LOG_INFO, "COLL_IB_GID_INDEX=%s", want);
        return atoi(want);
    }
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        union ibv_gid g;
        static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (d->v->query_gid(d->ctx, d->port, i, &g) == 0 && memcmp(g.raw, v4, 12) == 0)
            return i;
    }
    return 0;
}

/* Opens devices in turn until one named `want` (or any, if NULL) has an active port. */
static int open_named(cl_ib_dev *d, struct ibv_device **list, int n, const char *want, int port,
                      struct ibv_port_attr *pa)
{
    for (int i = 0; i < n; i++) {
        const char *name = d->v->get_device_name(list[i]);
        if (want && strcmp(name, want) != 0)
            continue;
        if (!(d->ctx = d->v->open_device(list[i])))
            continue;
        d->port = (uint8_t)(port > 0 ? port : 1);
        if (port_usable(d, d->port, pa)) {
            snprintf(d->name, sizeof(d->name), "%s:%d", name, d->port);
            return 0;
        }
        d->v->close_device(d->ctx);
        d->ctx = NULL;
    }
    return -1;
}

/* The port's speed from its width and lane rate (ibv_port_attr's codes, as
 * ibv_devinfo prints them), 0 for a code this does not know. */
static uint32_t port_mbps(const struct ibv_port_attr *pa)
{
    static const struct {
        uint8_t code;
        uint32_t mbps;
    } lane[] = {{1, 2500}, {2, 5000}, {4, 10000}, {8, 10000}, {16, 14000},
                {32, 25000}, {64, 50000}, {128, 100000}},
      width[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
    uint32_t rate = 0, lanes = 0;
    for (size_t i = 0; i < sizeof(lane) / sizeof(lane[0]); i++)
        rate = lane[i].code == pa->active_speed ? lane[i].mbps : rate;
    for (size_t i = 0; i < sizeof(width) / sizeof(width[0]); i++)
        lanes = width[i].code == pa->active_width ? width[i].mbps : lanes;
    return rate * lanes;
}

static int fail(cl_ib_dev *d, char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "ibverbs: %s", what);
    cl_ib_dev_close(d);
    return COLL_ENOTSUP;
}

int cl_ib_dev_open(const cl_verbs *v, cl_ib_dev *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    d->v = v;
    char want[64] = "";
    int port = 0;
    const char *hca = getenv("COLL_IB_HCA");
    if (hca && *hca) {
        cl_log(COLL_LOG_INFO, "COLL_IB_HCA=%s", hca);
        snprintf(want, sizeof(want), "%s", hca);
        char *colon = strchr(want, ':');
        if (colon) {
            *colon = 0;
            port = atoi(colon + 1);
        }
    }
    int n = 0;
    struct ibv_device **list = v->get_device_list(&n);
    struct ibv_port_attr pa;
    int found = list && n > 0 ? open_named(d, list, n, want[0] ? want : NULL, port, &pa) : -1;
    if (list)
        v->free_device_list(list);
    if (found != 0) {
        snprintf(err, errlen, "ibverbs: %s", !list || n == 0 ? "no RDMA device found"
                 : want[0] ? "COLL_IB_HCA names no device with an active port"
                           : "no RDMA device has an active port");
        return COLL_ENOTSUP;
    }
    d->lid = pa.lid;
    d->mtu = pa.active_mtu;
    d->speed_mbps = port_mbps(&pa);
    d->gid_index = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? -1 : pick_gid(d, &pa);
    if (d->gid_index >= 0 && d->v->query_gid(d->ctx, d->port, d->gid_index, &d->gid) != 0)
        return fail(d, err, errlen, "cannot read the GID");
    if (!(d->pd = v->alloc_pd(d->ctx)) || !(d->channel = v->create_comp_channel(d->ctx)))
        return fail(d, err, errlen, "cannot allocate a protection domain or completion channel");
    /* Both are polled from an epoll loop: never block in get_cq_event/get_async_event. */
    fcntl(d->channel->fd, F_SETFL, fcntl(d->channel->fd, F_GETFL) | O_NONBLOCK);
    fcntl(d->ctx->async_fd, F_SETFL, fcntl(d->ctx->async_fd, F_GETFL) | O_NONBLOCK);
    cl_log(COLL_LOG_INFO, "ibverbs: %s (%s), %s, GID index %d, MTU %d, %u Mb/s", d->name,
           v->name, d->gid_index < 0 ? "InfiniBand" : "RoCE", d->gid_index, 128 << d->mtu,
           d->speed_mbps);
    return COLL_OK;
}

void cl_ib_dev_close(cl_ib_dev *d)
{
    if (d->channel)
        d->v->destroy_comp_channel(d->channel);
    if (d->pd)
        d->v->dealloc_pd(d->pd);
    if (d->ctx)
        d->v->close_device(d->ctx);
    d->channel = NULL, d->pd = NULL, d->ctx = NULL;
}

struct ibv_qp *cl_ib_qp_create(cl_ib_dev *d, struct ibv_cq *cq, int send_depth, int recv_depth,
                               void *qp_context)
{
    struct ibv_qp_init_attr ia = {
        .qp_context = qp_context, .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = (uint32_t)send_depth, .max_recv_wr = (uint32_t)recv_depth,
                 .max_send_sge = 1, .max_recv_sge = 1 },
    };
    struct ibv_qp *qp = d->v->create_qp(d->pd, &ia);
    if (!qp)
        return NULL;
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = d->port,
                             .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE };
    if (d->v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    IBV_QP_ACCESS_FLAGS) != 0) {
        d->v->destroy_qp(qp);
        return NULL;
    }
    return qp;
}

int cl_ib_qp_connect(cl_ib_dev *d, struct ibv_qp *qp, const cl_ib_addr *r, uint32_t psn)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR, .path_mtu = d->mtu, .dest_qp_num = r->qpn,
        .rq_psn = r->psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
        .ah_attr = { .dlid = r->lid, .sl = 0, .src_path_bits = 0, .port_num = d->port },
    };
    if (d->gid_index >= 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    int rc = d->v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;
    /* timeout 14 is 67 ms per try; software RoCE under emulation needs the slack. */
    struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                             .rnr_retry = 7, .sq_psn = psn, .max_rd_atomic = 1 };
    return d->v->modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

void cl_ib_local_addr(const cl_ib_dev *d, struct ibv_qp *qp, uint32_t psn, cl_ib_addr *out)
{
    memset(out, 0, sizeof(*out));
    out->qpn = qp->qp_num;
    out->psn = psn;
    out->lid = d->lid;
    memcpy(out->gid, d->gid.raw, 16);
}
