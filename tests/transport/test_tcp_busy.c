/* tcp's measure of a socket's sending for rails' weights (cl_tcp_busy, tcp_span.h): read
 * under the connection's lock, which keeps its socket open, so a socket closed and its
 * number taken again is never measured; only tried, so a caller holding a lock that
 * comes after it (rails' fo_mu) never waits, and gets no measure while the lock is held. */
#include "base/util.h"
#include "collective.h"
#include "transports/tcp/tcp_conn.h"
#include "transports/transport.h"

#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static int wait_req(cl_notifier *n, cl_tr_req *r)
{
    int64_t deadline = cl_now_ms() + 5000;
    for (;;) {
        int done = 0, rc = cl_transport_tcp.test(r, &done, NULL);
        if (done)
            return rc;
        ck_assert_msg(cl_now_ms() < deadline, "request never completed");
        cl_notifier_wait(n, cl_notifier_events(n), cl_now_ms() + 2);
    }
}

START_TEST(the_measure_is_taken_under_the_lock_and_never_waits_for_it)
{
    const cl_transport *tr = &cl_transport_tcp;
    cl_notifier na, nb;
    cl_notifier_init(&na);
    cl_notifier_init(&nb);
    cl_tr_config ca = {.device = "lo", .timeout_ms = 5000, .notifier = &na},
                 cb = {.device = "lo", .timeout_ms = 5000, .notifier = &nb};
    cl_tr_ctx *a, *b;
    cl_tr_listener *l;
    cl_tr_conn *send, *recv;
    char handle[CL_HANDLE_BYTES];
    ck_assert_int_eq(tr->ctx_create(&ca, &a), COLL_OK);
    ck_assert_int_eq(tr->ctx_create(&cb, &b), COLL_OK);
    ck_assert_int_eq(tr->listen(b, handle, &l), COLL_OK);
    uint8_t hello[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    ck_assert_int_eq(tr->connect(a, handle, hello, 1 << 16, &send), COLL_OK);
    int64_t deadline = cl_now_ms() + 5000;
    while (tr->accept(l, got, &recv) == COLL_INPROGRESS) {
        ck_assert_msg(cl_now_ms() < deadline, "no connection accepted");
        cl_notifier_wait(&nb, cl_notifier_events(&nb), cl_now_ms() + 5);
    }
    static char out[1 << 16], in[1 << 16];
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC, .len = sizeof(out)}, hin;
    cl_tr_req *rs, *rr;
    ck_assert_int_eq(tr->irecv(recv, &hin, in, sizeof(in), &rr), COLL_OK);
    ck_assert_int_eq(tr->isend(send, &h, out, &rs), COLL_OK);
    ck_assert_int_eq(wait_req(&na, rs), COLL_OK);
    ck_assert_int_eq(wait_req(&nb, rr), COLL_OK);

    uint64_t acked = 0, busy = 0;
    pthread_mutex_lock(&send->io); /* as the loop thread's progress would */
    int64_t t0 = cl_now_ms();
    ck_assert_int_eq(cl_tcp_busy(send, &acked, &busy), 0);
    ck_assert_msg(cl_now_ms() - t0 < 100, "cl_tcp_busy waited %lld ms for the lock",
                  (long long)(cl_now_ms() - t0));
    pthread_mutex_unlock(&send->io);
    ck_assert_int_eq(cl_tcp_busy(send, &acked, &busy), 1); /* Linux >= 4.10 */
    ck_assert_msg(acked > 0, "no byte acknowledged after a %zu-byte send", sizeof(out));

    tr->ctx_destroy(a);
    tr->ctx_destroy(b);
    cl_notifier_destroy(&na);
    cl_notifier_destroy(&nb);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcp-busy");
    TCase *t = tcase_create("tcp-busy");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, the_measure_is_taken_under_the_lock_and_never_waits_for_it);
    suite_add_tcase(s, t);
    return run_suite(s);
}
