/* Two contexts of one transport in one process, as the transport tests open them
 * (test_conformance.c, test_rails.c): a dials, b listens, each with its own notifier.
 * Static, as common/suite.h is: coll_net_check compiles test_conformance.c without the
 * tests' build. Never a promise of a transport's own: that is what the tests check. */
#ifndef CL_TEST_PAIR_H
#define CL_TEST_PAIR_H

#include "base/util.h"
#include "collective.h"
#include "transports/transport.h"

#include <check.h>
#include <string.h>

typedef struct {
    const cl_transport *tr;
    cl_notifier na, nb;
    cl_tr_ctx *a, *b;
    cl_tr_listener *l;
    cl_tr_conn *send, *recv;
    char handle[CL_HANDLE_BYTES]; /* b's listener's */
} pair;

/* Finds transport `name` and makes a's context from cfg (its notifier is p's). */
static inline void pair_start(pair *p, const char *name, cl_tr_config cfg)
{
    memset(p, 0, sizeof(*p));
    p->tr = cl_transport_find(name);
    ck_assert_ptr_nonnull(p->tr);
    cl_notifier_init(&p->na);
    cl_notifier_init(&p->nb);
    cfg.notifier = &p->na;
    ck_assert_int_eq(p->tr->ctx_create(&cfg, &p->a), COLL_OK);
}

/* Makes b's context from cfg and listens on it. A separate step so that a test can
 * change the environment b is made in. */
static inline void pair_listen_b(pair *p, cl_tr_config cfg)
{
    cfg.notifier = &p->nb;
    ck_assert_int_eq(p->tr->ctx_create(&cfg, &p->b), COLL_OK);
    ck_assert_int_eq(p->tr->listen(p->b, p->handle, &p->l), COLL_OK);
}

/* a connects to b with hello, asking to keep `want` bytes in flight; b accepts within
 * 5 s, the hello it read in got. */
static inline void pair_connect(pair *p, const uint8_t hello[CL_HELLO_BYTES], size_t want,
                                uint8_t got[CL_HELLO_BYTES])
{
    ck_assert_int_eq(p->tr->connect(p->a, p->handle, hello, want, &p->send), COLL_OK);
    int64_t deadline = cl_now_ms() + 5000;
    while (p->tr->accept(p->l, got, &p->recv) == COLL_INPROGRESS) {
        ck_assert_msg(cl_now_ms() < deadline, "no connection accepted");
        cl_notifier_wait(&p->nb, cl_notifier_events(&p->nb), cl_now_ms() + 5);
    }
}

/* Waits up to 10 s for r; its status. */
static inline int wait_req(pair *p, cl_tr_req *r, size_t *nbytes)
{
    int64_t deadline = cl_now_ms() + 10000;
    for (;;) {
        int done = 0, rc = p->tr->test(r, &done, nbytes);
        if (done)
            return rc;
        ck_assert_msg(cl_now_ms() < deadline, "request never completed");
        /* Completions may signal either side's notifier: poll with a short sleep. */
        cl_notifier_wait(&p->nb, cl_notifier_events(&p->nb), cl_now_ms() + 2);
    }
}

static inline void pair_close(pair *p)
{
    p->tr->ctx_destroy(p->a);
    if (p->b) /* NULL: a test destroyed it (b gone first) */
        p->tr->ctx_destroy(p->b);
    cl_notifier_destroy(&p->na);
    cl_notifier_destroy(&p->nb);
}

#endif
