/* One conformance suite for every transport (transports/transport.h is the contract):
 * handshake delivery, ordering, zero-length and large messages, many in flight, a
 * message longer than the receive, and a closed peer. Run once per transport. */
#include "base/addr.h"
#include "base/util.h"
#include "transports/transport.h"
#include "collective.h"

#include "common/suite.h"
#include "transport/conformance.h"
#include "transport/pair.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CL_HAVE_IBVERBS
#include "transports/ibverbs/ib_dev.h"
#include "transports/ibverbs/verbs.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *tname;
/* The socket transports' family (a second argument AF_INET6): the same suite over IPv6. */
static int family = AF_UNSPEC;

/* What pair_open's link asks to keep in flight (connect's want). */
static size_t pair_want = 1 << 20;

static void pair_open(pair *p)
{
    cl_tr_config cfg = {.device = "lo", .family = family, .timeout_ms = 5000};
    pair_start(p, tname, cfg);
    pair_listen_b(p, cfg);
    if (family == AF_INET6 && strcmp(tname, "tcp") == 0) /* its handle is its address */
        ck_assert_msg(strncmp(p->handle, "[::1]:", 6) == 0, "listens at %s", p->handle);
    uint8_t hello[CL_HELLO_BYTES], got[CL_HELLO_BYTES];
    for (int i = 0; i < CL_HELLO_BYTES; i++)
        hello[i] = (uint8_t)(i * 7 + 1);
    pair_connect(p, hello, pair_want, got);
    ck_assert_int_eq(memcmp(hello, got, CL_HELLO_BYTES), 0);
}

static cl_msg_hdr hdr(uint32_t len, uint32_t seq)
{
    return (cl_msg_hdr){ .magic = CL_MSG_MAGIC, .len = len, .seq = seq };
}

START_TEST(messages_arrive_in_posting_order)
{
    pair p;
    pair_open(&p);
    enum { M = 64 };
    uint32_t out[M], in[M];
    cl_msg_hdr h[M], got[M];
    cl_tr_req *s[M], *r[M];
    for (uint32_t i = 0; i < M; i++) {
        out[i] = i * 2654435761u;
        h[i] = hdr(4, i);
        if (i % 2 == 0) /* half the receives posted before their send, half after */
            ck_assert_int_eq(p.tr->irecv(p.recv, &got[i], &in[i], 4, &r[i]), COLL_OK);
        ck_assert_int_eq(p.tr->isend(p.send, &h[i], &out[i], &s[i]), COLL_OK);
        if (i % 2 == 1)
            ck_assert_int_eq(p.tr->irecv(p.recv, &got[i], &in[i], 4, &r[i]), COLL_OK);
    }
    for (uint32_t i = 0; i < M; i++) {
        size_t n = 0;
        ck_assert_int_eq(wait_req(&p, r[i], &n), COLL_OK);
        ck_assert_uint_eq(n, 4);
        ck_assert_uint_eq(got[i].seq, i);
        ck_assert_uint_eq(in[i], out[i]);
        ck_assert_int_eq(wait_req(&p, s[i], NULL), COLL_OK);
    }
    pair_close(&p);
}
END_TEST

START_TEST(zero_length_and_large_messages)
{
    pair p;
    pair_open(&p);
    size_t big = 24u << 20;
    unsigned char *out = malloc(big), *in = calloc(1, big);
    for (size_t i = 0; i < big; i++)
        out[i] = (unsigned char)(i * 31 + (i >> 13));
    cl_msg_hdr h0 = hdr(0, 1), h1 = hdr((uint32_t)big, 2), g0, g1;
    cl_tr_req *s0, *s1, *r0, *r1;
    ck_assert_int_eq(p.tr->isend(p.send, &h0, NULL, &s0), COLL_OK);
    ck_assert_int_eq(p.tr->isend(p.send, &h1, out, &s1), COLL_OK);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g0, NULL, 0, &r0), COLL_OK);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g1, in, big, &r1), COLL_OK);
    size_t n0 = 99, n1 = 0;
    ck_assert_int_eq(wait_req(&p, r0, &n0), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r1, &n1), COLL_OK);
    ck_assert_uint_eq(n0, 0);
    ck_assert_uint_eq(n1, big);
    ck_assert_int_eq(memcmp(in, out, big), 0);
    ck_assert_int_eq(wait_req(&p, s0, NULL), COLL_OK);
    ck_assert_int_eq(wait_req(&p, s1, NULL), COLL_OK);
    free(out);
    free(in);
    pair_close(&p);
}
END_TEST

/* A link that asked for little in flight (shm: a small ring; ibverbs: 16 KiB slots)
 * carries messages of every size around its buffer's, whole and in order, several in
 * flight at once. */
START_TEST(a_small_link_carries_every_size)
{
    pair_want = 16 << 10;
    pair p;
    pair_open(&p);
    pair_want = 1 << 20; /* the next test's, when they share a process (CK_FORK=no) */
    static const size_t sizes[] = {0, 1, (16 << 10) - 33, (16 << 10) - 32, 16 << 10,
                                   (16 << 10) + 1, 100000, 3 << 20};
    enum { M = sizeof(sizes) / sizeof(sizes[0]) };
    unsigned char *out[M], *in[M];
    cl_msg_hdr h[M], got[M];
    cl_tr_req *sq[M], *rq[M];
    for (size_t i = 0; i < M; i++) {
        out[i] = malloc(sizes[i] + 1), in[i] = calloc(1, sizes[i] + 1);
        for (size_t k = 0; k < sizes[i]; k++)
            out[i][k] = (unsigned char)(k * 131 + i);
        h[i] = hdr((uint32_t)sizes[i], (uint32_t)i);
        ck_assert_int_eq(p.tr->isend(p.send, &h[i], out[i], &sq[i]), COLL_OK);
        ck_assert_int_eq(p.tr->irecv(p.recv, &got[i], in[i], sizes[i], &rq[i]), COLL_OK);
    }
    for (size_t i = 0; i < M; i++) {
        size_t n = 0;
        ck_assert_int_eq(wait_req(&p, rq[i], &n), COLL_OK);
        ck_assert_uint_eq(n, sizes[i]);
        ck_assert_uint_eq(got[i].seq, i);
        ck_assert_int_eq(memcmp(in[i], out[i], sizes[i]), 0);
        ck_assert_int_eq(wait_req(&p, sq[i], NULL), COLL_OK);
        free(out[i]), free(in[i]);
    }
    pair_close(&p);
}
END_TEST

/* A receive with a sink (transports that have irecv_sink): payloads come in whole
 * elements at element-aligned addresses (the kernels behind a sink load typed values),
 * also where a message wraps around the transport's buffer; a payload the sink refuses
 * lands in the buffer. Message 7 is 4 bytes long, which may leave the later 8-byte
 * elements off their alignment in the stream: they must arrive intact either way. */
typedef struct {
    unsigned char *dst;
    size_t align, bad, calls;
    int accept;
} sink_state;

static int sink_accept(void *arg, const cl_msg_hdr *h)
{
    (void)h;
    return ((sink_state *)arg)->accept;
}

static void sink_take(void *arg, size_t off, const void *bytes, size_t n)
{
    sink_state *st = arg;
    st->bad += off % st->align || n % st->align || (uintptr_t)bytes % st->align;
    st->calls++;
    memcpy(st->dst + off, bytes, n);
}

START_TEST(sink_takes_aligned_whole_elements_across_the_buffer_end)
{
    pair p;
    pair_open(&p);
    if (!p.tr->irecv_sink) {
        pair_close(&p);
        return;
    }
    enum { M = 13, REFUSED = 5, ODD = 7 };
    size_t len[M], total = 0;
    for (int i = 0; i < M; i++)
        total += len[i] = i == ODD ? 4 : (1u << 20) + 8 * (size_t)(i * 37);
    unsigned char *out = malloc(total), *in = calloc(1, total);
    for (size_t k = 0; k < total; k++)
        out[k] = (unsigned char)(k * 131 + (k >> 11));
    sink_state st[M];
    cl_tr_sink sk[M];
    cl_msg_hdr h[M], got[M];
    cl_tr_req *sq[M], *rq[M];
    size_t at = 0;
    for (int i = 0; i < M; i++, at += len[i - 1]) {
        st[i] = (sink_state){ in + at, i == ODD ? 4 : 8, 0, 0, i != REFUSED };
        sk[i] = (cl_tr_sink){ sink_accept, sink_take, &st[i], st[i].align };
        h[i] = hdr((uint32_t)len[i], (uint32_t)i);
        ck_assert_int_eq(p.tr->irecv_sink(p.recv, &got[i], in + at, len[i], &sk[i], &rq[i]),
                         COLL_OK);
        ck_assert_int_eq(p.tr->isend(p.send, &h[i], out + at, &sq[i]), COLL_OK);
    }
    for (int i = 0; i < M; i++) {
        size_t n = 0;
        ck_assert_int_eq(wait_req(&p, rq[i], &n), COLL_OK);
        ck_assert_uint_eq(n, len[i]);
        ck_assert_msg(st[i].bad == 0, "message %d: %zu misaligned takes", i, st[i].bad);
        if (i < ODD)
            ck_assert_msg(i == REFUSED ? st[i].calls == 0 : st[i].calls > 0,
                          "message %d: %zu takes", i, st[i].calls);
        ck_assert_int_eq(wait_req(&p, sq[i], NULL), COLL_OK);
    }
    ck_assert_int_eq(memcmp(in, out, total), 0);
    free(out);
    free(in);
    pair_close(&p);
}
END_TEST

START_TEST(many_in_flight)
{
    pair p;
    pair_open(&p);
    enum { M = 512, SZ = 8192 };
    unsigned char *out = malloc((size_t)M * SZ), *in = calloc(M, SZ);
    cl_msg_hdr *h = calloc(M, sizeof(*h)), *g = calloc(M, sizeof(*g));
    cl_tr_req **s = calloc(M, sizeof(*s)), **r = calloc(M, sizeof(*r));
    for (size_t i = 0; i < (size_t)M * SZ; i++)
        out[i] = (unsigned char)(i % 251);
    for (int i = 0; i < M; i++) {
        h[i] = hdr(SZ, (uint32_t)i);
        ck_assert_int_eq(p.tr->isend(p.send, &h[i], out + (size_t)i * SZ, &s[i]), COLL_OK);
    }
    for (int i = 0; i < M; i++)
        ck_assert_int_eq(p.tr->irecv(p.recv, &g[i], in + (size_t)i * SZ, SZ, &r[i]), COLL_OK);
    for (int i = 0; i < M; i++) {
        ck_assert_int_eq(wait_req(&p, r[i], NULL), COLL_OK);
        ck_assert_int_eq(wait_req(&p, s[i], NULL), COLL_OK);
    }
    ck_assert_int_eq(memcmp(in, out, (size_t)M * SZ), 0);
    free(out), free(in), free(h), free(g), free(s), free(r);
    pair_close(&p);
}
END_TEST

START_TEST(message_longer_than_receive_is_emismatch)
{
    pair p;
    pair_open(&p);
    char out[64] = { 0 }, in[16];
    cl_msg_hdr h = hdr(64, 1), h2 = hdr(8, 2), g;
    cl_tr_req *s, *s2, *r;
    ck_assert_int_eq(p.tr->isend(p.send, &h, out, &s), COLL_OK);
    ck_assert_int_eq(p.tr->isend(p.send, &h2, out, &s2), COLL_OK);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, sizeof(in), &r), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EMISMATCH);
    ck_assert_uint_eq(g.len, 64); /* the header is there to explain the mismatch */
    /* as on a stream: nothing after a bad message is delivered */
    int rc = p.tr->irecv(p.recv, &g, in, sizeof(in), &r);
    ck_assert_int_ne(rc == COLL_OK ? wait_req(&p, r, NULL) : rc, COLL_OK);
    wait_req(&p, s, NULL);
    wait_req(&p, s2, NULL);
    pair_close(&p);
}
END_TEST

/* ---- the fast path (send_now, recv_now) ------------------------------------------ */

/* recv_now until it answers something else than COLL_INPROGRESS (bounded). */
static int recv_now_within(pair *p, cl_msg_hdr *g, void *buf, size_t cap, size_t *n)
{
    int64_t deadline = cl_now_ms() + 5000;
    int rc;
    while ((rc = p->tr->recv_now(p->recv, g, buf, cap, n)) == COLL_INPROGRESS)
        ck_assert_msg(cl_now_ms() < deadline, "recv_now never answered");
    return rc;
}

/* send_now until it goes: COLL_INPROGRESS may also mean the transport's own thread held
 * the connection at that moment. */
static int send_now_within(pair *p, const cl_msg_hdr *h, const void *buf)
{
    int64_t deadline = cl_now_ms() + 5000;
    int rc;
    while ((rc = p->tr->send_now(p->send, h, buf)) == COLL_INPROGRESS)
        ck_assert_msg(cl_now_ms() < deadline, "send_now never went");
    return rc;
}

/* Whole messages, in order with the posted ones: recv_now never takes a message a
 * posted receive is owed, send_now never overtakes a posted send, and a full ring makes
 * send_now wait (COLL_INPROGRESS) instead of overwriting. */
START_TEST(the_fast_path_keeps_messages_whole_and_in_order)
{
    pair p;
    pair_open(&p);
    uint64_t v = 0x0123456789abcdefull, got = 0;
    cl_msg_hdr g, h1 = hdr(8, 1), h2 = hdr(8, 2), h0 = hdr(0, 3);
    size_t n = 99;
    ck_assert_int_eq(p.tr->recv_now(p.recv, &g, &got, 8, &n), COLL_INPROGRESS);
    ck_assert_int_eq(send_now_within(&p, &h1, &v), COLL_OK);
    ck_assert_int_eq(recv_now_within(&p, &g, &got, 8, &n), COLL_OK);
    ck_assert(g.seq == 1 && n == 8 && got == v);
    cl_tr_req *r, *s;
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, &got, 8, &r), COLL_OK);
    ck_assert_int_eq(send_now_within(&p, &h2, &v), COLL_OK);
    ck_assert_int_eq(p.tr->recv_now(p.recv, &g, &got, 8, &n), COLL_INPROGRESS); /* owed to r */
    ck_assert_int_eq(wait_req(&p, r, &n), COLL_OK);
    ck_assert(g.seq == 2 && n == 8);
    ck_assert_int_eq(send_now_within(&p, &h0, NULL), COLL_OK); /* empty, no buffer */
    ck_assert_int_eq(recv_now_within(&p, &g, NULL, 0, &n), COLL_OK);
    ck_assert(g.seq == 3 && n == 0);
    size_t big = 8u << 20; /* larger than any ring: the send stays queued */
    char *out = calloc(1, big), *in = calloc(1, big);
    cl_msg_hdr hb = hdr((uint32_t)big, 4), h5 = hdr(8, 5);
    ck_assert_int_eq(p.tr->isend(p.send, &hb, out, &s), COLL_OK);
    ck_assert_int_eq(p.tr->send_now(p.send, &h5, &v), COLL_INPROGRESS);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, big, &r), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_OK);
    ck_assert_int_eq(wait_req(&p, s, NULL), COLL_OK);
    uint32_t sent = 0;
    char chunk[4096] = {0};
    /* Full: send_now answers COLL_INPROGRESS for as long as nothing is read. */
    int64_t full_since = 0;
    for (cl_msg_hdr hc = hdr(sizeof(chunk), 6); sent < 100000;) {
        if (p.tr->send_now(p.send, &hc, chunk) == COLL_OK)
            hc.seq++, sent++, full_since = 0;
        else if (!full_since)
            full_since = cl_now_ms();
        else if (cl_now_ms() - full_since > 500)
            break;
    }
    ck_assert_msg(sent > 0 && sent < 100000, "a ring took %u messages unread", sent);
    for (uint32_t k = 0; k < sent; k++) {
        ck_assert_int_eq(recv_now_within(&p, &g, in, sizeof(chunk), &n), COLL_OK);
        ck_assert_uint_eq(g.seq, 6 + k);
    }
    free(out), free(in);
    pair_close(&p);
}
END_TEST

/* The payload of fast-path message seq: every size up to CL_NOW_BYTES comes up, those
 * around shm's windows (4 and 8 KiB with the 40 bytes before a payload) among them. */
static uint32_t now_len(uint32_t seq)
{
    static const uint32_t edges[] = {0, 1, 24, 25, 4056, 4057, 8152, 8153, CL_NOW_BYTES};
    return seq % 3 ? edges[seq % 9] : (seq * 2654435761u) % (CL_NOW_BYTES + 1);
}

/* Bursts of fast-path messages of every size, taken in turn by recv_now and by posted
 * receives: each whole and in order. A burst outruns the receiver; single messages keep
 * up with it. On shm that covers both ways a small message goes (pads back to the ring's
 * start while the receiver keeps up, straight on while it lags) and both receive paths
 * skipping a pad. */
START_TEST(the_fast_path_keeps_order_in_bursts_and_either_receive)
{
    pair p;
    pair_open(&p);
    static char out[CL_NOW_BYTES + 64], in[CL_NOW_BYTES];
    for (size_t i = 0; i < sizeof(out); i++)
        out[i] = (char)(i * 13 + 5);
    uint32_t sent = 0, taken = 0;
    for (int round = 0; round < 600; round++) {
        for (int k = round % 5 == 0 ? 12 : 1; k > 0; k--, sent++) {
            cl_msg_hdr h = hdr(now_len(sent), sent);
            ck_assert_int_eq(send_now_within(&p, &h, out + sent % 64), COLL_OK);
        }
        for (; taken < sent; taken++) {
            cl_msg_hdr g = {0};
            size_t n = 0;
            cl_tr_req *r;
            if (taken % 2) {
                ck_assert_int_eq(recv_now_within(&p, &g, in, sizeof(in), &n), COLL_OK);
            } else {
                ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, sizeof(in), &r), COLL_OK);
                ck_assert_int_eq(wait_req(&p, r, &n), COLL_OK);
            }
            ck_assert_uint_eq(g.seq, taken);
            ck_assert_uint_eq(n, now_len(taken));
            ck_assert_int_eq(memcmp(in, out + taken % 64, n), 0);
        }
    }
    pair_close(&p);
}
END_TEST

/* A message over the receive's room and a closed sender fail recv_now as they fail a
 * posted receive. */
START_TEST(the_fast_path_fails_as_a_receive_would)
{
    pair p;
    pair_open(&p);
    char out[64] = {0}, in[16];
    cl_msg_hdr h = hdr(64, 1), g;
    size_t n;
    ck_assert_int_eq(send_now_within(&p, &h, out), COLL_OK);
    ck_assert_int_eq(recv_now_within(&p, &g, in, sizeof(in), &n), COLL_EMISMATCH);
    ck_assert_uint_eq(g.len, 64); /* the header is there to explain the mismatch */
    pair_close(&p);
    pair_open(&p);
    p.tr->close_conn(p.send);
    ck_assert_int_eq(recv_now_within(&p, &g, in, sizeof(in), &n), COLL_EPEER);
    pair_close(&p);
}
END_TEST

START_TEST(closed_peer_fails_pending_and_later_receives)
{
    pair p;
    pair_open(&p);
    char in[8];
    cl_msg_hdr g;
    cl_tr_req *r, *r2;
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, sizeof(in), &r), COLL_OK);
    p.tr->close_conn(p.send);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EPEER);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, sizeof(in), &r2), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r2, NULL), COLL_EPEER);
    pair_close(&p);
}
END_TEST

START_TEST(shutdown_fails_pending_requests)
{
    pair p;
    pair_open(&p);
    char in[8];
    cl_msg_hdr g;
    cl_tr_req *r;
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, in, sizeof(in), &r), COLL_OK);
    p.tr->shutdown(p.b, COLL_EABORTED, NULL);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EABORTED);
    pair_close(&p);
}
END_TEST

START_TEST(shutdown_sends_farewell_at_a_message_boundary)
{
    pair p;
    pair_open(&p);
    cl_msg_hdr h = hdr(4, 1), g1, g2, bye = hdr(0, 9);
    bye.tag = 77;
    uint32_t out = 5, in = 0;
    cl_tr_req *s, *r1, *r2;
    ck_assert_int_eq(p.tr->isend(p.send, &h, &out, &s), COLL_OK);
    ck_assert_int_eq(wait_req(&p, s, NULL), COLL_OK);
    p.tr->shutdown(p.a, COLL_EMISMATCH, &bye);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g1, &in, 4, &r1), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r1, NULL), COLL_OK);
    ck_assert_uint_eq(in, 5);
    ck_assert_int_eq(p.tr->irecv(p.recv, &g2, &in, 4, &r2), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r2, NULL), COLL_OK);
    ck_assert_uint_eq(g2.tag, 77);
    pair_close(&p);
}
END_TEST

#ifdef CL_HAVE_IBVERBS
/* A fault on the fake's next RDMA write: later sends fail with COLL_EPEER, and once the
 * failing side shuts down (as a communicator does) the receive waiting for the lost
 * message fails too. */
static void fake_fault_fails_the_connection(cl_fake_fault fault)
{
    pair p;
    pair_open(&p);
    cl_msg_hdr h = hdr(4, 1), g;
    uint32_t out = 5, in = 0;
    cl_tr_req *s, *r;
    ck_assert_int_eq(p.tr->irecv(p.recv, &g, &in, 4, &r), COLL_OK);
    cl_verbs_fake_inject(fault, 1);
    int rc = COLL_OK;
    for (int i = 0; i < 100 && rc == COLL_OK; i++) {
        ck_assert_int_eq(p.tr->isend(p.send, &h, &out, &s), COLL_OK);
        rc = wait_req(&p, s, NULL);
    }
    ck_assert_int_eq(rc, COLL_EPEER);
    p.tr->shutdown(p.a, COLL_EPEER, NULL);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EPEER);
    pair_close(&p);
}

START_TEST(fake_retry_exceeded_fails_the_connection)
{
    fake_fault_fails_the_connection(CL_FAKE_RETRY_EXCEEDED);
}
END_TEST

START_TEST(fake_remote_access_error_fails_the_connection)
{
    fake_fault_fails_the_connection(CL_FAKE_REMOTE_ACCESS);
}
END_TEST

START_TEST(fake_qp_fatal_event_fails_the_connection)
{
    fake_fault_fails_the_connection(CL_FAKE_QP_FATAL);
}
END_TEST

/* The fake port is 4x EDR: auto weighs ibverbs against plugins by this figure. */
START_TEST(ib_reports_its_port_speed)
{
    pair p;
    pair_open(&p);
    ck_assert_ptr_nonnull(p.tr->speed_mbps);
    ck_assert_uint_eq(p.tr->speed_mbps(p.a), 100000);
    pair_close(&p);
}
END_TEST
#endif

/* A transport that cannot run here (ibverbs without a device) skips the suite. */
static int available(void)
{
    const cl_transport *tr = cl_transport_find(tname);
    if (!tr) {
        printf("transport %s is not built in: skipped\n", tname);
        return 0;
    }
    cl_notifier n;
    cl_notifier_init(&n);
    cl_tr_config c = {.device = "lo", .family = family, .timeout_ms = 5000, .notifier = &n};
    cl_tr_ctx *ctx;
    int rc = tr->ctx_create(&c, &ctx);
    if (rc == COLL_OK)
        tr->ctx_destroy(ctx);
    cl_notifier_destroy(&n);
    if (rc == COLL_ENOTSUP || (rc != COLL_OK && family == AF_INET6))
        printf("transport %s cannot run here (see the error above): skipped\n", tname);
    return rc == COLL_OK;
}

/* A listener alone (p->b, p->l), for what strangers send it; ctx a dials as a rank. */
static void listen_alone(pair *p, char handle[CL_HANDLE_BYTES], cl_tr_vet vet)
{
    memset(p, 0, sizeof(*p));
    p->tr = cl_transport_find(tname);
    cl_notifier_init(&p->na);
    cl_notifier_init(&p->nb);
    cl_tr_config ca = {.device = "lo", .family = family, .timeout_ms = 5000, .notifier = &p->na},
                 cb = {.device = "lo", .family = family, .timeout_ms = 5000, .notifier = &p->nb, .vet = vet};
    ck_assert_int_eq(p->tr->ctx_create(&ca, &p->a), COLL_OK);
    ck_assert_int_eq(p->tr->ctx_create(&cb, &p->b), COLL_OK);
    ck_assert_int_eq(p->tr->listen(p->b, handle, &p->l), COLL_OK);
}

/* A rank's connection with hello[0] = first: COLL_OK once the listener took it. */
static int dial_as_rank(pair *p, const char *handle, uint8_t first)
{
    uint8_t hello[CL_HELLO_BYTES] = {first}, got[CL_HELLO_BYTES];
    int rc = COLL_INPROGRESS;
    for (int64_t until = cl_now_ms() + 5000; rc == COLL_INPROGRESS && cl_now_ms() < until;) {
        if (!p->send && p->tr->connect(p->a, handle, hello, 1 << 16, &p->send) != COLL_OK)
            p->tr->accept(p->l, got, &p->recv); /* a full backlog: the listener makes room */
        rc = p->send ? p->tr->accept(p->l, got, &p->recv) : COLL_INPROGRESS;
        cl_sleep_ms(rc == COLL_INPROGRESS ? 1 : 0);
    }
    ck_assert(rc != COLL_OK || got[0] == first);
    return rc;
}

/* The abstract unix address of an shm handle "shm:NAME"; returns its length. */
static socklen_t abstract_addr(const char *handle, struct sockaddr_un *a)
{
    const char *name = handle + 4;
    *a = (struct sockaddr_un){.sun_family = AF_UNIX};
    memcpy(a->sun_path + 1, name, strlen(name));
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
}

/* A socket connected to a listener's handle, as any stranger can: "shm:NAME" (an
 * abstract unix name), "ib:ADDRESS" (ibverbs' bootstrap) or "ADDRESS" (tcp), an address as
 * base/addr.h writes it. */
static int stranger_dial(const char *handle)
{
    if (strncmp(handle, "shm:", 4) == 0) {
        struct sockaddr_un a;
        socklen_t len = abstract_addr(handle, &a);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_eq(connect(s, (struct sockaddr *)&a, len), 0);
        return s;
    }
    cl_addr a;
    ck_assert_int_eq(cl_addr_parse(handle + (strncmp(handle, "ib:", 3) == 0 ? 3 : 0), &a), 0);
    int s = socket(a.sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(connect(s, (struct sockaddr *)&a.sa, a.len), 0);
    return s;
}

/* A one-iovec message with room for two descriptors (sent when fd0, fd1 >= 0). */
typedef struct {
    struct msghdr m;
    struct iovec v;
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
} fd_msg;

static void fd_msg_init(fd_msg *f, void *bytes, size_t n, int fd0, int fd1)
{
    memset(f, 0, sizeof(*f));
    f->v = (struct iovec){bytes, n};
    f->m = (struct msghdr){.msg_iov = &f->v, .msg_iovlen = 1, .msg_control = f->ctl.buf,
                           .msg_controllen = sizeof(f->ctl.buf)};
    if (fd0 >= 0) {
        struct cmsghdr *h = CMSG_FIRSTHDR(&f->m);
        h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(2 * sizeof(int));
        memcpy(CMSG_DATA(h), (int[]){fd0, fd1}, 2 * sizeof(int));
    }
}

/* shm's hello: 64 bytes with the ring's memfd (sealed or not) and an eventfd. */
static int raw_shm_hello(const char *handle, int seal, uint8_t first)
{
    int s = stranger_dial(handle);
    int mfd = memfd_create("stranger", MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0));
    int efd = eventfd(0, EFD_CLOEXEC);
    ck_assert_int_eq(ftruncate(mfd, 256 + (1 << 16)), 0);
    if (seal)
        ck_assert_int_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    uint8_t hello[CL_HELLO_BYTES] = {first};
    fd_msg m;
    fd_msg_init(&m, hello, sizeof(hello), mfd, efd);
    ck_assert_int_eq(sendmsg(s, &m.m, 0), CL_HELLO_BYTES);
    close(mfd);
    close(efd);
    return s; /* stays open: the listener decides, not our hanging up */
}

/* What a stranger sends as a rank's opening on this transport, hello[0] = first. */
static int raw_hello(const char *handle, uint8_t first)
{
    if (strncmp(handle, "shm:", 4) == 0)
        return raw_shm_hello(handle, 1, first);
    int s = stranger_dial(handle);
    uint8_t boot[CL_HELLO_BYTES + 64] = {first};
    size_t n = CL_HELLO_BYTES;
#ifdef CL_HAVE_IBVERBS
    if (strncmp(handle, "ib:", 3) == 0)
        n += sizeof(cl_ib_addr); /* its queue pair's address follows */
#endif
    ck_assert_int_eq(write(s, boot, n), (ssize_t)n);
    return s;
}

/* 1 once the listener closed stranger s (EOF or reset), watched as a rank would, with
 * accept() called meanwhile; nothing may have come back to it. */
static int closed_on(pair *p, int s, int within_ms)
{
    uint8_t got[CL_HELLO_BYTES], b[64];
    for (int64_t until = cl_now_ms() + within_ms; cl_now_ms() < until;) {
        ck_assert_int_eq(p->tr->accept(p->l, got, &p->recv), COLL_INPROGRESS);
        fd_msg m;
    fd_msg_init(&m, b, sizeof(b), -1, -1);
        ssize_t n = recvmsg(s, &m.m, MSG_DONTWAIT);
        ck_assert_msg(n <= 0 && (n < 0 || m.m.msg_controllen == 0),
                      "the listener answered a stranger");
        if (n == 0 || (n < 0 && errno != EAGAIN))
            return 1;
        cl_sleep_ms(10);
    }
    return 0;
}

/* shm: a stranger's hello with an unsealed memfd (it could shrink the ring under the
 * receiver's mapping: SIGBUS) is dropped, and the listener still takes a real one. */
START_TEST(shm_refuses_an_unsealed_ring)
{
    pair p;
    char handle[CL_HANDLE_BYTES];
    listen_alone(&p, handle, NULL);
    int s = raw_shm_hello(handle, 0, 1);
    ck_assert_msg(closed_on(&p, s, 5000), "an unsealed ring was held");
    close(s);
    ck_assert_int_eq(dial_as_rank(&p, handle, 1), COLL_OK);
    pair_close(&p);
}
END_TEST

/* shm's ring as a stranger sees it: head (the sender's count) at 0, tail at 64, the main
 * ring's data from 256, then the small ring's 4 KiB (transports/shm/shm.c). A peer can
 * write any of it. */
enum { RING_HEAD = 0, RING_TAIL = 64 / 8, RING_DATA_AT = 256, STRANGER_RING = 1 << 16,
       SMALL_RING = 4096, STRANGER_BYTES = RING_DATA_AT + STRANGER_RING + SMALL_RING };

/* A stranger's sealed hello whose ring it keeps mapped (*ring). */
static int stranger_sender(const char *handle, uint64_t **ring)
{
    int s = stranger_dial(handle);
    int mfd = memfd_create("stranger", MFD_CLOEXEC | MFD_ALLOW_SEALING), efd = eventfd(0, 0);
    ck_assert_int_eq(ftruncate(mfd, STRANGER_BYTES), 0);
    ck_assert_int_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    *ring = mmap(NULL, STRANGER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    ck_assert(*ring != MAP_FAILED);
    uint8_t hello[CL_HELLO_BYTES] = {1};
    fd_msg m;
    fd_msg_init(&m, hello, sizeof(hello), mfd, efd);
    ck_assert_int_eq(sendmsg(s, &m.m, 0), CL_HELLO_BYTES);
    close(mfd);
    close(efd);
    return s;
}

/* A listener of p's that took a stranger's sealed hello (stranger_sender): p.recv reads
 * the ring the stranger keeps mapped (*ring). Returns the stranger's socket. */
static int stranger_accepted(pair *p, uint64_t **ring)
{
    char handle[CL_HANDLE_BYTES];
    listen_alone(p, handle, NULL);
    int s = stranger_sender(handle, ring);
    uint8_t got[CL_HELLO_BYTES];
    int rc = COLL_INPROGRESS;
    for (int64_t until = cl_now_ms() + 5000; rc == COLL_INPROGRESS && cl_now_ms() < until;)
        rc = p->tr->accept(p->l, got, &p->recv);
    ck_assert_int_eq(rc, COLL_OK);
    return s;
}

/* A stranger listening where ctx a dials: it maps the ring a sends with (*ring). */
static cl_tr_conn *stranger_receiver(pair *p, uint64_t **ring, int *keep)
{
    char handle[CL_HANDLE_BYTES] = "shm:libcollective-test-stranger";
    struct sockaddr_un a;
    socklen_t len = abstract_addr(handle, &a);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, len), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    uint8_t hello[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    cl_tr_conn *out = NULL;
    ck_assert_int_eq(p->tr->connect(p->a, handle, hello, STRANGER_RING, &out), COLL_OK);
    *keep = accept(l, NULL, NULL);
    close(l);
    fd_msg m;
    fd_msg_init(&m, got, sizeof(got), -1, -1);
    ck_assert_int_eq(recvmsg(*keep, &m.m, 0), CL_HELLO_BYTES);
    int mfd;
    memcpy(&mfd, CMSG_DATA(CMSG_FIRSTHDR(&m.m)), sizeof(int));
    struct stat st;
    ck_assert_int_eq(fstat(mfd, &st), 0);
    *ring = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    ck_assert(*ring != MAP_FAILED);
    close(mfd);
    return out;
}

/* shm: a peer that writes an impossible count into the shared ring (more written than
 * the ring holds, a tail ahead of the head) fails that link with COLL_EPROTO. Before,
 * the count drove memcpy lengths: reads and writes far past the mapping. */
START_TEST(shm_a_ring_that_lies_fails_the_link_not_the_rank)
{
    pair p;
    uint64_t *ring;
    int s = stranger_accepted(&p, &ring);
    size_t big = 8 << 20;
    cl_msg_hdr lie = {.magic = CL_MSG_MAGIC, .len = (uint32_t)big};
    memcpy((char *)ring + RING_DATA_AT, &lie, sizeof(lie));
    __atomic_store_n(&ring[RING_HEAD], (uint64_t)1 << 30, __ATOMIC_RELEASE);
    char *buf = malloc(big);
    cl_msg_hdr h;
    cl_tr_req *r;
    ck_assert_int_eq(p.tr->irecv(p.recv, &h, buf, big, &r), COLL_OK);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EPROTO);

    uint64_t *theirs;
    int keep;
    cl_tr_conn *out = stranger_receiver(&p, &theirs, &keep);
    __atomic_store_n(&theirs[RING_TAIL], (uint64_t)1 << 40, __ATOMIC_RELEASE);
    ck_assert_int_eq(p.tr->isend(out, &(cl_msg_hdr){.magic = CL_MSG_MAGIC, .len = 1 << 20}, buf,
                                 &r),
                     COLL_OK);
    ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EPROTO);
    free(buf);
    munmap(ring, STRANGER_BYTES);
    munmap(theirs, STRANGER_BYTES);
    close(s);
    close(keep);
    pair_close(&p);
}
END_TEST

/* shm: a message stamped in the small ring (the ring's key XOR its header's position:
 * this stranger's key is 0) that claims more than that ring holds fails the link with
 * COLL_EPROTO, taken by recv_now or by a posted receive, instead of being read past the
 * ring's end. */
START_TEST(shm_a_small_ring_message_longer_than_the_ring_fails_the_link)
{
    for (int fast = 0; fast < 2; fast++) {
        pair p;
        uint64_t *ring;
        int s = stranger_accepted(&p, &ring);
        uint64_t *small = ring + (RING_DATA_AT + STRANGER_RING) / 8;
        cl_msg_hdr big = {.magic = CL_MSG_MAGIC, .len = SMALL_RING};
        memcpy(small + 1, &big, sizeof(big));
        __atomic_store_n(&small[0], (uint64_t)8, __ATOMIC_RELEASE); /* the stamp */
        char *buf = malloc(2 * SMALL_RING);
        cl_msg_hdr h;
        size_t n;
        cl_tr_req *r;
        if (fast) {
            ck_assert_int_eq(recv_now_within(&p, &h, buf, 2 * SMALL_RING, &n), COLL_EPROTO);
        } else {
            ck_assert_int_eq(p.tr->irecv(p.recv, &h, buf, 2 * SMALL_RING, &r), COLL_OK);
            ck_assert_int_eq(wait_req(&p, r, NULL), COLL_EPROTO);
        }
        free(buf);
        munmap(ring, STRANGER_BYTES);
        close(s);
        pair_close(&p);
    }
}
END_TEST

/* Strangers that connect and say nothing neither fill the listener (a rank dialing
 * behind more of them than it holds is taken, the oldest are pushed out) nor hold it
 * (each is closed after the pending bound). Before, 16 of them made the shm listener
 * refuse every rank after, and tcp held any number for the whole timeout. */
START_TEST(silent_strangers_neither_fill_nor_hold_the_listener)
{
    pair p;
    char handle[CL_HANDLE_BYTES];
    listen_alone(&p, handle, NULL);
    enum { SILENT = 80 }; /* more than any transport holds pending (16 shm, 64 tcp) */
    int silent[SILENT];
    uint8_t got[CL_HELLO_BYTES];
    for (int i = 0; i < SILENT; i++) {
        silent[i] = stranger_dial(handle);
        ck_assert_int_eq(p.tr->accept(p.l, got, &p.recv), COLL_INPROGRESS);
    }
    ck_assert_int_eq(dial_as_rank(&p, handle, 1), COLL_OK);
    ck_assert_msg(closed_on(&p, silent[0], 2000), "the oldest stranger was not pushed out");
    ck_assert_msg(closed_on(&p, silent[SILENT - 1], 10000), "a silent stranger was held past 10 s");
    for (int i = 0; i < SILENT; i++)
        close(silent[i]);
    pair_close(&p);
}
END_TEST

/* The caller's vet sees the hello before the transport gives anything back (shm's
 * eventfd, ibverbs' queue pair address) or holds it for accept() (tcp): a refused one is
 * closed at once with nothing sent, and the listener takes the next rank. */
static const char *only_ones(void *arg, const uint8_t hello[CL_HELLO_BYTES])
{
    (void)arg;
    return hello[0] == 1 ? NULL : "not a one";
}

/* A stranger's raw hello whose first byte is `first` is closed with nothing sent back
 * (`what` it was), and the listener takes a rank's dial after it. */
static void stranger_dropped(uint8_t first, const char *what)
{
    pair p;
    char handle[CL_HANDLE_BYTES];
    listen_alone(&p, handle, only_ones);
    int s = raw_hello(handle, first);
    ck_assert_msg(closed_on(&p, s, 3000), "%s was held", what);
    close(s);
    ck_assert_int_eq(dial_as_rank(&p, handle, 1), COLL_OK);
    pair_close(&p);
}

START_TEST(a_hello_the_vet_refuses_gets_nothing)
{
    stranger_dropped(2, "a refused hello");
}
END_TEST

#ifdef CL_HAVE_IBVERBS
/* A sender whose address asks for slots of no size the transport makes (raw_hello's:
 * 0 KiB) is dropped once its hello passed the vet, with nothing registered or sent back. */
START_TEST(ib_a_sender_asking_for_odd_slots_is_dropped)
{
    stranger_dropped(1, "a connection asking for 0-byte slots");
}
END_TEST
#endif

/* coll_net_check runs it on a plugin (CL_CONFORMANCE_NO_MAIN). */
Suite *cl_conformance_suite(const char *name, int fam)
{
    tname = name;
    family = fam;
    if (!available())
        return NULL;
    Suite *s = suite_create(tname);
    TCase *t = tcase_create("conformance");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, messages_arrive_in_posting_order);
    tcase_add_test(t, zero_length_and_large_messages);
    tcase_add_test(t, a_small_link_carries_every_size);
    tcase_add_test(t, many_in_flight);
    tcase_add_test(t, sink_takes_aligned_whole_elements_across_the_buffer_end);
    tcase_add_test(t, message_longer_than_receive_is_emismatch);
    tcase_add_test(t, closed_peer_fails_pending_and_later_receives);
    tcase_add_test(t, shutdown_fails_pending_requests);
    tcase_add_test(t, shutdown_sends_farewell_at_a_message_boundary);
    if (cl_transport_find(tname)->send_now) {
        tcase_add_test(t, the_fast_path_keeps_messages_whole_and_in_order);
        tcase_add_test(t, the_fast_path_fails_as_a_receive_would);
        tcase_add_test(t, the_fast_path_keeps_order_in_bursts_and_either_receive);
    }
    if (strcmp(tname, "shm") == 0) {
        tcase_add_test(t, shm_refuses_an_unsealed_ring);
        tcase_add_test(t, shm_a_ring_that_lies_fails_the_link_not_the_rank);
        tcase_add_test(t, shm_a_small_ring_message_longer_than_the_ring_fails_the_link);
    }
    if (strcmp(tname, "shm") == 0 || strcmp(tname, "tcp") == 0 ||
        strcmp(tname, "ibverbs-fake") == 0) {
        tcase_add_test(t, silent_strangers_neither_fill_nor_hold_the_listener);
        tcase_add_test(t, a_hello_the_vet_refuses_gets_nothing);
    }
#ifdef CL_HAVE_IBVERBS
    if (strcmp(tname, "ibverbs-fake") == 0) {
        tcase_add_test(t, fake_retry_exceeded_fails_the_connection);
        tcase_add_test(t, fake_remote_access_error_fails_the_connection);
        tcase_add_test(t, fake_qp_fatal_event_fails_the_connection);
        tcase_add_test(t, ib_a_sender_asking_for_odd_slots_is_dropped);
        tcase_add_test(t, ib_reports_its_port_speed);
    }
#endif
    suite_add_tcase(s, t);
    return s;
}

#ifndef CL_CONFORMANCE_NO_MAIN
int main(int argc, char **argv)
{
    Suite *s = cl_conformance_suite(argc > 1 ? argv[1] : "loop",
                                    argc > 2 && strcmp(argv[2], "AF_INET6") == 0 ? AF_INET6
                                                                                : AF_UNSPEC);
    return s ? run_suite(s) : 77;
}
#endif
