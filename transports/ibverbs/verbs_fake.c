/* The fake verbs backend: enough of RC semantics, in one process, for the transport's
 * logic to run in every test run. QPs find their peer by QP number in a registry; an
 * RDMA write is a copy checked against the local and the remote registration (bounds and
 * access), a write with immediate consumes a posted receive at the peer, completions go
 * to CQ rings and wake completion channels, which are eventfds as in the real library.
 * One mutex guards everything: the fake is for correctness, not speed. */
#include "transports/ibverbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_QPS 4096
#define MAX_MRS 8192

typedef struct fake_channel {
    struct ibv_comp_channel ch;
    struct ibv_cq *events[1024]; /* CQs with an event waiting, FIFO */
    unsigned head, count;
} fake_channel;

typedef struct fake_cq {
    struct ibv_cq cq;
    struct ibv_wc *wc;
    int cap, head, count, armed;
} fake_cq;

typedef struct fake_qp {
    struct ibv_qp qp;
    uint32_t dest;
    uint64_t *recvs; /* posted receive wr_ids, FIFO */
    int rcap, rhead, rcount;
} fake_qp;

typedef struct fake_mr {
    struct ibv_mr mr;
    int access;
} fake_mr;

typedef struct fake_ctx {
    struct ibv_context ctx;
    struct ibv_async_event events[64];
    int nevents;
} fake_ctx;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_qp *qps[MAX_QPS];   /* by qp_num - 1 */
static fake_mr *mrs[MAX_MRS];   /* by key - 1 */
static uint32_t next_qpn = 1, next_key = 1;
static struct ibv_device device = { .name = "fake0", .dev_name = "uverbs-fake0" };
static struct {
    int armed;
    cl_fake_fault fault;
    int after;
} inject;

void cl_verbs_fake_inject(cl_fake_fault fault, int after)
{
    pthread_mutex_lock(&mu);
    inject.armed = 1;
    inject.fault = fault;
    inject.after = after < 1 ? 1 : after;
    pthread_mutex_unlock(&mu);
}

/* COLL_IB_FAKE_FAULT=retry:N, access:N or fatal:N arms a fault for programs that only
 * reach the fake through the public API (ranks as threads). */
static void fault_from_env(void)
{
    static const char *const names[] = { "retry", "access", "fatal" };
    const char *v = getenv("COLL_IB_FAKE_FAULT");
    for (int i = 0; v && i < 3; i++) {
        size_t n = strlen(names[i]);
        if (strncmp(v, names[i], n) == 0 && v[n] == ':')
            cl_verbs_fake_inject((cl_fake_fault)i, atoi(v + n + 1));
    }
}

static struct ibv_device **f_get_device_list(int *num)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fault_from_env);
    struct ibv_device **l = calloc(2, sizeof(*l));
    if (l)
        l[0] = &device;
    if (num)
        *num = l ? 1 : 0;
    return l;
}

static void f_free_device_list(struct ibv_device **l)
{
    free(l);
}

static const char *f_get_device_name(struct ibv_device *d)
{
    return d->name;
}

static struct ibv_context *f_open_device(struct ibv_device *d)
{
    fake_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx.device = d;
    c->ctx.async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    c->ctx.cmd_fd = -1;
    if (c->ctx.async_fd < 0) {
        free(c);
        return NULL;
    }
    return &c->ctx;
}

static int f_close_device(struct ibv_context *ctx)
{
    close(ctx->async_fd);
    free(ctx);
    return 0;
}

static int f_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
    (void)ctx;
    if (port != 1)
        return EINVAL;
    memset(a, 0, sizeof(*a));
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 2;
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    a->active_width = 2;  /* 4x */
    a->active_speed = 32; /* EDR: 100 Gb/s in all */
    return 0;
}

/* Index 0 a link-local GID, index 1 the IPv4-mapped RoCEv2 one, as rxe shows them. */
static int f_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    (void)ctx;
    if (port != 1 || index < 0 || index > 1)
        return EINVAL;
    memset(gid, 0, sizeof(*gid));
    if (index == 0) {
        gid->raw[0] = 0xfe, gid->raw[1] = 0x80, gid->raw[15] = 1;
    } else {
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 127, gid->raw[15] = 1;
    }
    return 0;
}

static struct ibv_pd *f_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd)
        pd->context = ctx;
    return pd;
}

static int f_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    fake_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_lock(&mu);
    uint32_t key = 0;
    for (uint32_t i = 0; i < MAX_MRS && !key; i++, next_key = next_key % MAX_MRS + 1)
        if (!mrs[next_key - 1])
            key = next_key;
    if (key)
        mrs[key - 1] = m;
    pthread_mutex_unlock(&mu);
    if (!key) {
        free(m);
        errno = ENOMEM;
        return NULL;
    }
    m->mr = (struct ibv_mr){ .context = pd->context, .pd = pd, .addr = addr, .length = len,
                             .lkey = key, .rkey = key };
    m->access = access;
    return &m->mr;
}

static int f_dereg_mr(struct ibv_mr *mr)
{
    pthread_mutex_lock(&mu);
    mrs[mr->lkey - 1] = NULL;
    pthread_mutex_unlock(&mu);
    free(mr);
    return 0;
}

static struct ibv_comp_channel *f_create_comp_channel(struct ibv_context *ctx)
{
    fake_channel *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ch.context = ctx;
    c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    if (c->ch.fd < 0) {
        free(c);
        return NULL;
    }
    return &c->ch;
}

static int f_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    close(ch->fd);
    free(ch);
    return 0;
}

static struct ibv_cq *f_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                  struct ibv_comp_channel *ch, int vector)
{
    (void)vector;
    fake_cq *c = calloc(1, sizeof(*c));
    if (!c || !(c->wc = calloc((size_t)cqe, sizeof(*c->wc)))) {
        free(c);
        return NULL;
    }
    c->cap = cqe;
    c->cq = (struct ibv_cq){ .context = ctx, .channel = ch, .cq_context = cq_context, .cqe = cqe };
    return &c->cq;
}

static void channel_drop(struct ibv_cq *cq);

static int f_destroy_cq(struct ibv_cq *cq)
{
    fake_cq *c = (fake_cq *)cq;
    pthread_mutex_lock(&mu);
    channel_drop(cq);
    pthread_mutex_unlock(&mu);
    free(c->wc);
    free(c);
    return 0;
}

static int f_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    (void)solicited_only;
    pthread_mutex_lock(&mu);
    ((fake_cq *)cq)->armed = 1;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* Under mu: forget a CQ's waiting events (it is being destroyed). */
static void channel_drop(struct ibv_cq *cq)
{
    fake_channel *ch = (fake_channel *)cq->channel;
    if (!ch)
        return;
    for (unsigned i = 0; i < ch->count; i++)
        if (ch->events[(ch->head + i) % 1024] == cq)
            ch->events[(ch->head + i) % 1024] = NULL;
}

static int f_get_cq_event(struct ibv_comp_channel *chan, struct ibv_cq **cq, void **cq_context)
{
    fake_channel *ch = (fake_channel *)chan;
    uint64_t v;
    pthread_mutex_lock(&mu);
    struct ibv_cq *got = NULL;
    while (!got && ch->count && read(chan->fd, &v, sizeof(v)) == sizeof(v)) {
        got = ch->events[ch->head];
        ch->head = (ch->head + 1) % 1024;
        ch->count--;
    }
    pthread_mutex_unlock(&mu);
    if (!got) {
        errno = EAGAIN;
        return -1;
    }
    *cq = got;
    *cq_context = got->cq_context;
    return 0;
}

static void f_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
    (void)cq, (void)n;
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    fake_cq *c = (fake_cq *)cq;
    pthread_mutex_lock(&mu);
    int got = 0;
    for (; got < n && c->count; got++, c->count--) {
        wc[got] = c->wc[c->head];
        c->head = (c->head + 1) % c->cap;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

static void raise_async(struct ibv_context *ctx, enum ibv_event_type type, struct ibv_qp *qp)
{
    fake_ctx *c = (fake_ctx *)ctx;
    uint64_t one = 1;
    if (c->nevents == 64 || write(ctx->async_fd, &one, sizeof(one)) != sizeof(one))
        return;
    c->events[c->nevents++] = (struct ibv_async_event){ .element.qp = qp, .event_type = type };
}

/* Under mu: adds a completion and, if the CQ is armed, an event on its channel. */
static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc)
{
    fake_cq *c = (fake_cq *)cq;
    if (c->count == c->cap) {
        raise_async(cq->context, IBV_EVENT_CQ_ERR, NULL);
        return;
    }
    c->wc[(c->head + c->count++) % c->cap] = *wc;
    fake_channel *ch = (fake_channel *)cq->channel;
    uint64_t one = 1;
    if (c->armed && ch && ch->count < 1024 && write(ch->ch.fd, &one, sizeof(one)) == sizeof(one)) {
        c->armed = 0;
        ch->events[(ch->head + ch->count++) % 1024] = cq;
    }
}

static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq) {
        errno = EINVAL;
        return NULL;
    }
    fake_qp *q = calloc(1, sizeof(*q));
    if (!q || !(q->recvs = calloc(a->cap.max_recv_wr + 1, sizeof(uint64_t)))) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->rcap = (int)a->cap.max_recv_wr + 1;
    pthread_mutex_lock(&mu);
    uint32_t qpn = 0;
    for (uint32_t i = 0; i < MAX_QPS && !qpn; i++, next_qpn = next_qpn % MAX_QPS + 1)
        if (!qps[next_qpn - 1])
            qpn = next_qpn;
    if (qpn)
        qps[qpn - 1] = q;
    pthread_mutex_unlock(&mu);
    if (!qpn) {
        free(q->recvs);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->qp = (struct ibv_qp){ .context = pd->context, .qp_context = a->qp_context, .pd = pd,
                             .send_cq = a->send_cq, .recv_cq = a->recv_cq, .qp_num = qpn,
                             .state = IBV_QPS_RESET, .qp_type = IBV_QPT_RC };
    return &q->qp;
}

/* Under mu: the QP enters the error state and its posted receives are flushed. */
static void qp_error(fake_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    for (; q->rcount; q->rcount--, q->rhead = (q->rhead + 1) % q->rcap) {
        struct ibv_wc wc = { .wr_id = q->recvs[q->rhead], .status = IBV_WC_WR_FLUSH_ERR,
                             .opcode = IBV_WC_RECV, .qp_num = q->qp.qp_num };
        cq_push(q->qp.recv_cq, &wc);
    }
}

static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    fake_qp *q = (fake_qp *)qp;
    pthread_mutex_lock(&mu);
    if (mask & IBV_QP_DEST_QPN)
        q->dest = attr->dest_qp_num;
    if (mask & IBV_QP_STATE) {
        if (attr->qp_state == IBV_QPS_ERR)
            qp_error(q);
        else
            qp->state = attr->qp_state;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static int f_destroy_qp(struct ibv_qp *qp)
{
    fake_qp *q = (fake_qp *)qp;
    pthread_mutex_lock(&mu);
    qps[qp->qp_num - 1] = NULL;
    pthread_mutex_unlock(&mu);
    free(q->recvs);
    free(q);
    return 0;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    fake_qp *q = (fake_qp *)qp;
    int rc = 0;
    pthread_mutex_lock(&mu);
    for (; wr; wr = wr->next) {
        if (qp->state == IBV_QPS_RESET || q->rcount == q->rcap - 1) {
            rc = ENOMEM;
            *bad = wr;
            break;
        }
        q->recvs[(q->rhead + q->rcount++) % q->rcap] = wr->wr_id;
        if (qp->state == IBV_QPS_ERR)
            qp_error(q);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* Under mu: the registration behind (key, addr, len) if it allows `access`. */
static fake_mr *mr_check(uint32_t key, uint64_t addr, uint64_t len, int access)
{
    fake_mr *m = key >= 1 && key <= MAX_MRS ? mrs[key - 1] : NULL;
    uint64_t lo = m ? (uint64_t)(uintptr_t)m->mr.addr : 0;
    if (!m || (access && !(m->access & access)) || addr < lo || len > m->mr.length ||
        addr - lo > m->mr.length - len)
        return NULL;
    return m;
}

/* Under mu: carries out one RDMA write; returns the completion status. */
static enum ibv_wc_status do_write(fake_qp *q, struct ibv_send_wr *wr)
{
    fake_qp *peer = q->dest >= 1 && q->dest <= MAX_QPS ? qps[q->dest - 1] : NULL;
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++) {
        if (!mr_check(wr->sg_list[i].lkey, wr->sg_list[i].addr, wr->sg_list[i].length, 0))
            return IBV_WC_LOC_PROT_ERR;
        total += wr->sg_list[i].length;
    }
    if (inject.armed && --inject.after == 0) {
        inject.armed = 0;
        if (inject.fault == CL_FAKE_QP_FATAL) { /* the QP goes to error: work is flushed */
            raise_async(q->qp.context, IBV_EVENT_QP_FATAL, &q->qp);
            return IBV_WC_WR_FLUSH_ERR;
        }
        return inject.fault == CL_FAKE_RETRY_EXCEEDED ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
    }
    if (!peer || peer->qp.state < IBV_QPS_RTR || peer->qp.state == IBV_QPS_ERR ||
        peer->dest != q->qp.qp_num)
        return IBV_WC_RETRY_EXC_ERR; /* nobody answers: the requester gives up */
    int imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (total && !mr_check(wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, total, IBV_ACCESS_REMOTE_WRITE))
        return IBV_WC_REM_ACCESS_ERR;
    if (imm && peer->rcount == 0)
        return IBV_WC_RNR_RETRY_EXC_ERR;
    char *dst = (char *)(uintptr_t)wr->wr.rdma.remote_addr;
    for (int i = 0; i < wr->num_sge; i++) {
        memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
    }
    if (imm) {
        struct ibv_wc wc = { .wr_id = peer->recvs[peer->rhead], .status = IBV_WC_SUCCESS,
                             .opcode = IBV_WC_RECV_RDMA_WITH_IMM, .byte_len = (uint32_t)total,
                             .imm_data = wr->imm_data, .wc_flags = IBV_WC_WITH_IMM,
                             .qp_num = peer->qp.qp_num, .src_qp = q->qp.qp_num };
        peer->rhead = (peer->rhead + 1) % peer->rcap;
        peer->rcount--;
        cq_push(peer->qp.recv_cq, &wc);
    }
    return IBV_WC_SUCCESS;
}

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fake_qp *q = (fake_qp *)qp;
    int rc = 0;
    pthread_mutex_lock(&mu);
    for (; wr; wr = wr->next) {
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
            rc = EINVAL;
            *bad = wr;
            break;
        }
        if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
            rc = EOPNOTSUPP;
            *bad = wr;
            break;
        }
        enum ibv_wc_status st = qp->state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR : do_write(q, wr);
        if ((wr->send_flags & IBV_SEND_SIGNALED) || st != IBV_WC_SUCCESS) {
            struct ibv_wc wc = { .wr_id = wr->wr_id, .status = st, .opcode = IBV_WC_RDMA_WRITE,
                                 .qp_num = qp->qp_num };
            cq_push(qp->send_cq, &wc);
        }
        if (st != IBV_WC_SUCCESS && qp->state != IBV_QPS_ERR)
            qp_error(q);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static int f_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    fake_ctx *c = (fake_ctx *)ctx;
    uint64_t v;
    pthread_mutex_lock(&mu);
    int ok = c->nevents > 0 && read(ctx->async_fd, &v, sizeof(v)) == sizeof(v);
    if (ok) {
        *ev = c->events[0];
        memmove(c->events, c->events + 1, (size_t)--c->nevents * sizeof(c->events[0]));
    }
    pthread_mutex_unlock(&mu);
    if (!ok)
        errno = EAGAIN;
    return ok ? 0 : -1;
}

static void f_ack_async_event(struct ibv_async_event *ev)
{
    (void)ev;
}

static const char *f_wc_status_str(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    default: return "unknown";
    }
}

static const cl_verbs table = {
    .name = "fake",
    .get_device_list = f_get_device_list,
    .free_device_list = f_free_device_list,
    .get_device_name = f_get_device_name,
    .open_device = f_open_device,
    .close_device = f_close_device,
    .query_port = f_query_port,
    .query_gid = f_query_gid,
    .alloc_pd = f_alloc_pd,
    .dealloc_pd = f_dealloc_pd,
    .reg_mr = f_reg_mr,
    .dereg_mr = f_dereg_mr,
    .create_comp_channel = f_create_comp_channel,
    .destroy_comp_channel = f_destroy_comp_channel,
    .create_cq = f_create_cq,
    .destroy_cq = f_destroy_cq,
    .req_notify_cq = f_req_notify_cq,
    .get_cq_event = f_get_cq_event,
    .ack_cq_events = f_ack_cq_events,
    .poll_cq = f_poll_cq,
    .create_qp = f_create_qp,
    .modify_qp = f_modify_qp,
    .destroy_qp = f_destroy_qp,
    .post_send = f_post_send,
    .post_recv = f_post_recv,
    .get_async_event = f_get_async_event,
    .ack_async_event = f_ack_async_event,
    .wc_status_str = f_wc_status_str,
};

const cl_verbs *cl_verbs_fake(void)
{
    return &table;
}
