/* The real backend: libibverbs.so.1 through dlopen, as NCCL's ibvwrap does. Functions
 * that verbs.h makes inline (post_send, post_recv, poll_cq, req_notify_cq) dispatch
 * through the provider's ops in the context and need no symbol; macros (ibv_reg_mr,
 * ibv_query_port, ibv_get_device_list) wrap exported functions that we look up by name. */
#include "transports/ibverbs/verbs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static int dl_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return qp->context->ops.post_send(qp, wr, bad);
}

static int dl_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return qp->context->ops.post_recv(qp, wr, bad);
}

static int dl_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, n, wc);
}

static int dl_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

static cl_verbs table = {
    .name = "libibverbs",
    .post_send = dl_post_send,
    .post_recv = dl_post_recv,
    .poll_cq = dl_poll_cq,
    .req_notify_cq = dl_req_notify_cq,
};
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];

#define SYM(field, sym)                                                                     \
    do {                                                                                    \
        *(void **)&table.field = dlsym(h, sym);                                             \
        if (!table.field) {                                                                 \
            snprintf(load_error, sizeof(load_error), "libibverbs.so.1 lacks %s", sym);      \
            return;                                                                         \
        }                                                                                   \
    } while (0)

static void load(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof(load_error),
                 "cannot load libibverbs.so.1 (%s): install rdma-core's libibverbs1", dlerror());
        return;
    }
    SYM(get_device_list, "ibv_get_device_list");
    SYM(free_device_list, "ibv_free_device_list");
    SYM(get_device_name, "ibv_get_device_name");
    SYM(open_device, "ibv_open_device");
    SYM(close_device, "ibv_close_device");
    SYM(query_port, "ibv_query_port");
    SYM(query_gid, "ibv_query_gid");
    SYM(alloc_pd, "ibv_alloc_pd");
    SYM(dealloc_pd, "ibv_dealloc_pd");
    SYM(reg_mr, "ibv_reg_mr");
    SYM(dereg_mr, "ibv_dereg_mr");
    SYM(create_comp_channel, "ibv_create_comp_channel");
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
    SYM(create_cq, "ibv_create_cq");
    SYM(destroy_cq, "ibv_destroy_cq");
    SYM(get_cq_event, "ibv_get_cq_event");
    SYM(ack_cq_events, "ibv_ack_cq_events");
    SYM(create_qp, "ibv_create_qp");
    SYM(modify_qp, "ibv_modify_qp");
    SYM(destroy_qp, "ibv_destroy_qp");
    SYM(get_async_event, "ibv_get_async_event");
    SYM(ack_async_event, "ibv_ack_async_event");
    SYM(wc_status_str, "ibv_wc_status_str");
}

const cl_verbs *cl_verbs_dl(char *err, size_t errlen)
{
    pthread_once(&once, load);
    if (load_error[0]) {
        snprintf(err, errlen, "%s", load_error);
        return NULL;
    }
    return &table;
}
