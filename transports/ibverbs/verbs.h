/* Every libibverbs call the ibverbs transport makes goes through this table, so that
 * libcollective.so neither links against libibverbs (it is dlopen()ed on first use and
 * the library loads on machines with no RDMA stack) nor depends on real hardware in
 * tests: a second backend, the in-process fake, implements the same table. */
#ifndef CL_IB_VERBS_H
#define CL_IB_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>

typedef struct cl_verbs {
    const char *name;
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                struct ibv_comp_channel *ch, int vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
    int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
    void (*ack_async_event)(struct ibv_async_event *ev);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} cl_verbs;

/* libibverbs.so.1, loaded once; NULL with a reason in err when it cannot be. */
const cl_verbs *cl_verbs_dl(char *err, size_t errlen);

/* The in-process fake: one device "fake0" whose queue pairs are paired through a
 * registry, RDMA writes are bounds- and access-checked copies between registered
 * regions, completions go to CQ rings and wake completion channels (eventfds). */
const cl_verbs *cl_verbs_fake(void);

/* Faults for tests, counted over data-carrying RDMA writes of the whole process:
 * the `after`-th write from now fails. */
typedef enum {
    CL_FAKE_RETRY_EXCEEDED, /* completion IBV_WC_RETRY_EXC_ERR, the QP goes to error */
    CL_FAKE_REMOTE_ACCESS,  /* completion IBV_WC_REM_ACCESS_ERR, the QP goes to error */
    CL_FAKE_QP_FATAL,       /* IBV_EVENT_QP_FATAL is raised and the write flushed */
} cl_fake_fault;
void cl_verbs_fake_inject(cl_fake_fault fault, int after);

#endif
