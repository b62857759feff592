/* The rails transport's own promises, beyond the conformance suite's: two rails on
 * loopback (COLL_RAILS_REPEAT=2), one process. The copies kept for a failover stay under
 * COLL_RAILS_KEEP_MIB while the peer acknowledges nothing, and go once it does; a control
 * connection whose receiving side dies (a bad frame) takes the copies with it while the
 * data goes on; a rails hello of another version, or of none (an older library), is
 * refused with a message naming both versions; a rail failed on purpose fails over to
 * the control connection, a rail that never comes is given up after 3 s at both ends
 * (messages still whole both ways), a listener gone while a rail is awaited fails the
 * dialer's sends at once, and a halt asked after a local close touches nothing. The
 * weighted cut (rails_cut.h): its arithmetic, each rail's bytes in proportion to the cut
 * its sender chose (the receiver reads it from the wire), the caller's tag kept, and a
 * failed rail's share spread over the rails left by their weights. */
#include "base/addr.h"
#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/tcp/rails_cut.h"
#include "transports/tcp/rails_test.h"
#include "transports/transport.h"

#include "common/suite.h"
#include "transport/pair.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MSG = 512 << 10, NMSG = 16, CAP_MIB = 1 };

/* ---- what the library logs -------------------------------------------------------- */

static char said[8192];
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_log(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    pthread_mutex_lock(&said_mu);
    size_t at = strlen(said);
    snprintf(said + at, sizeof(said) - at, "%s\n", msg);
    pthread_mutex_unlock(&said_mu);
}

static int log_says(const char *what)
{
    pthread_mutex_lock(&said_mu);
    int yes = strstr(said, what) != NULL;
    pthread_mutex_unlock(&said_mu);
    return yes;
}

/* ---- a pair of rails contexts ------------------------------------------------------ */

/* COLL_RAILS_REPEAT for the listening end, b, where it differs from a's (NULL: alike). */
static const char *b_rails;
/* The job's key of both ends (COLL_SECRET's), NULL: none. */
static const uint8_t *pair_key;
/* Both ends' peer timeout (cl_tr_config's timeout_ms), 0: 5 s. */
static int pair_timeout_ms;

static void pair_listen(pair *p)
{
    said[0] = 0;
    coll_set_log(keep_log, NULL, COLL_LOG_DEBUG);
    cl_tr_config cfg = {
        .device = "lo", .timeout_ms = pair_timeout_ms ? pair_timeout_ms : 5000, .key = pair_key};
    pair_start(p, "rails", cfg);
    char *a_rails = getenv("COLL_RAILS_REPEAT") ? strdup(getenv("COLL_RAILS_REPEAT")) : NULL;
    if (b_rails)
        setenv("COLL_RAILS_REPEAT", b_rails, 1);
    pair_listen_b(p, cfg);
    if (a_rails)
        setenv("COLL_RAILS_REPEAT", a_rails, 1);
    free(a_rails);
}

/* Waits up to 3 s for c's rails to be through their dials; whether they are. */
static int dialed_within_3_s(cl_tr_conn *c)
{
    for (int64_t end = cl_now_ms() + 3000; !cl_rails_dialed(c) && cl_now_ms() < end;)
        usleep(1000);
    return cl_rails_dialed(c);
}

/* b accepts a's connection, and a's rails are through their dials: b has every rail's
 * hello then, but a's tcp threads may not have taken the sockets over yet, and until
 * they have, a's cuts give those rails no share (send_code). */
static void pair_open(pair *p)
{
    pair_listen(p);
    uint8_t hello[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    pair_connect(p, hello, 1 << 20, got);
    ck_assert_msg(dialed_within_3_s(p->send), "a's rails not through in 3 s:\n%s", said);
}

/* Closes the pair and gives the log back. */
static void pair_done(pair *p)
{
    pair_close(p);
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
}

/* Waits up to 3 s for c's copies to be `want` bytes; what they are then. */
static size_t kept_settles(cl_tr_conn *c, size_t want)
{
    int64_t deadline = cl_now_ms() + 3000;
    while (cl_rails_kept_bytes(c) != want && cl_now_ms() < deadline)
        usleep(10000);
    return cl_rails_kept_bytes(c);
}

static char *pattern(int i)
{
    char *b = malloc(MSG);
    for (size_t j = 0; j < MSG; j++)
        b[j] = (char)(i * 31 + (int)(j % 251));
    return b;
}

/* NMSG striped messages from a to b, b's receives posted at once but tested (so
 * acknowledged) only after a's sends are done; every payload checked. */
static void send_all_acks_late(pair *p, size_t *kept_before_acks)
{
    char *out[NMSG], *in[NMSG];
    cl_msg_hdr h[NMSG], hin[NMSG];
    cl_tr_req *rs[NMSG], *rr[NMSG];
    for (int i = 0; i < NMSG; i++) {
        out[i] = pattern(i);
        in[i] = calloc(1, MSG);
        ck_assert_int_eq(p->tr->irecv(p->recv, &hin[i], in[i], MSG, &rr[i]), COLL_OK);
    }
    for (int i = 0; i < NMSG; i++) {
        h[i] = (cl_msg_hdr){
            .magic = CL_MSG_MAGIC, .len = MSG, .seq = (uint32_t)i, .tag = 0x7a90u + (uint32_t)i};
        ck_assert_int_eq(p->tr->isend(p->send, &h[i], out[i], &rs[i]), COLL_OK);
    }
    for (int i = 0; i < NMSG; i++)
        ck_assert_int_eq(wait_req(p, rs[i], NULL), COLL_OK);
    *kept_before_acks = cl_rails_kept_bytes(p->send);
    for (int i = 0; i < NMSG; i++) {
        size_t nb = 0;
        ck_assert_int_eq(wait_req(p, rr[i], &nb), COLL_OK);
        ck_assert_uint_eq(nb, MSG);
        ck_assert_msg(memcmp(in[i], out[i], MSG) == 0, "message %d arrived wrong", i);
        ck_assert_uint_eq(hin[i].tag, h[i].tag); /* rail 0's carried the cut */
        free(in[i]);
        free(out[i]);
    }
}

/* 16 messages of 512 KiB keep 256 KiB each past rail 0's part: 4 MiB unacknowledged,
 * against a cap of 1 MiB. */
START_TEST(copies_stay_under_the_cap_while_nothing_is_acknowledged)
{
    pair p;
    pair_open(&p);
    size_t before = 0;
    send_all_acks_late(&p, &before);
    ck_assert_msg(before > 0 && before <= (size_t)CAP_MIB << 20,
                  "%zu bytes kept before any ACK, want 1 to %d MiB", before, CAP_MIB);
    size_t after = kept_settles(p.send, 0);
    ck_assert_msg(after == 0, "%zu bytes still kept after every ACK", after);
    pair_done(&p);
}
END_TEST

/* b sends a frame of bad magic on its control connection: a's receiver of control
 * frames ends (EPROTO) while its sends go on. a drops its copies (no ACK can free them
 * now) and closes the control connection; messages still arrive whole. */
START_TEST(a_control_connection_that_cannot_receive_drops_the_copies)
{
    pair p;
    pair_open(&p);
    size_t before = 0;
    send_all_acks_late(&p, &before); /* copies made, then freed by the ACKs */
    cl_msg_hdr bad = {.magic = 0x0bad, .coll = 0xED};
    ck_assert_int_eq(cl_rails_ctl_send_raw(p.recv, &bad), COLL_OK);
    int64_t deadline = cl_now_ms() + 3000;
    while (!log_says("rails: the control connection to") && cl_now_ms() < deadline)
        usleep(10000);
    ck_assert_msg(log_says("rails: the control connection to"), "no word of it:\n%s", said);
    send_all_acks_late(&p, &before);
    ck_assert_msg(before == 0, "%zu bytes kept with no control connection", before);
    pair_done(&p);
}
END_TEST

static void wait_log(const char *what)
{
    int64_t deadline = cl_now_ms() + 3000;
    while (!log_says(what) && cl_now_ms() < deadline)
        usleep(10000);
    ck_assert_msg(log_says(what), "want '%s' in:\n%s", what, said);
}

/* Rail 1 taken as failed at a's end: both ends stop it (a warns, b is told by a's GOT),
 * and every later message's rail-1 part goes over the control connection, whole. */
START_TEST(a_failed_rail_s_parts_go_over_the_control_connection)
{
    pair p;
    pair_open(&p);
    cl_rails_fail_rail(p.send, 1, "failed by the test");
    wait_log("failed (failed by the test): its share goes to the other rails");
    wait_log("failed (its peer found it failed): its share goes to the other rails");
    size_t before = 0;
    send_all_acks_late(&p, &before);
    pair_done(&p);
}
END_TEST

/* The use-after-free of the review: a GOT for rail 1 that comes after b's connection
 * was closed here (a rail that never carried a request, which tcp frees as it closes it)
 * asks b's worker to halt it, as this does; the worker touches nothing of a closed
 * connection (ASan would say), and nothing is said of the rail. */
START_TEST(a_halt_asked_after_a_local_close_touches_nothing)
{
    pair p;
    pair_open(&p);
    p.tr->close_conn(p.recv);
    cl_rails_fail_rail(p.recv, 1, "asked after the close");
    usleep(500 * 1000); /* the grace and two turns of b's worker */
    ck_assert_msg(!log_says("asked after the close"), "b acted after its close:\n%s", said);
    pair_done(&p);
}
END_TEST

/* A raw connection to p's listener's rail 1 that sends hello: its socket. */
static int raw_hello(pair *p, const uint8_t hello[CL_HELLO_BYTES])
{
    const char *rail1 = p->handle + strlen(p->handle) + 1;
    cl_addr to;
    ck_assert_int_eq(cl_addr_parse(rail1, &to), 0);
    int fd = socket(to.sa.ss_family, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&to.sa, to.len), 0);
    ck_assert_int_eq(send(fd, hello, CL_HELLO_BYTES, 0), (ssize_t)CL_HELLO_BYTES);
    return fd;
}

/* Whether fd's peer closes it within 3 s, p's listener polled meanwhile. */
static int closed_by_listener(pair *p, int fd)
{
    uint8_t got[CL_HELLO_BYTES];
    cl_tr_conn *c;
    char byte;
    for (int64_t end = cl_now_ms() + 3000; cl_now_ms() < end; usleep(10000)) {
        ck_assert_int_eq(p->tr->accept(p->l, got, &c), COLL_INPROGRESS);
        if (recv(fd, &byte, 1, MSG_DONTWAIT) == 0)
            return 1;
    }
    return 0;
}

/* A raw connection to b's rail 1 with a rails hello of version v and no proof: closed at
 * once, and b's log says `want`. */
static void hello_refused(int v, const char *want)
{
    pair p;
    pair_listen(&p);
    uint8_t hello[CL_HELLO_BYTES] = {0};
    memcpy(hello, "collrail", 8);
    hello[16] = 1;
    hello[17] = (uint8_t)v;
    int fd = raw_hello(&p, hello);
    ck_assert_msg(closed_by_listener(&p, fd), "the connection was not closed");
    close(fd);
    ck_assert_msg(log_says(want), "want '%s' in:\n%s", want, said);
    pair_done(&p);
}

START_TEST(a_rails_hello_of_another_version_is_refused_naming_both)
{
    int v = _i; /* 1: the equal cut's, before the code in hdr.tag; 2: before the proof */
    char want[96];
    snprintf(want, sizeof(want), "rails wire version %d, this library's is 3", v);
    hello_refused(v, want);
}
END_TEST

/* Under COLL_SECRET a rails hello carries a tag under the job's key: one without (a
 * stranger's, who would hold the place of a rail to come) is refused at once, and ends
 * of one key connect and stripe. */
START_TEST(under_a_secret_a_rails_hello_needs_the_proof)
{
    static const uint8_t key[32] = {7, 1, 9};
    pair_key = key;
    hello_refused(3, "without the job's proof (COLL_SECRET)");
    pair p;
    pair_open(&p);
    pair_key = NULL;
    ck_assert_msg(strstr(p.tr->peer_name(p.send), "(2 rails)"), "%s", p.tr->peer_name(p.send));
    size_t before = 0;
    send_all_acks_late(&p, &before);
    pair_done(&p);
}
END_TEST

/* ---- the weighted cut ------------------------------------------------------------ */

static cl_rails_code code3(unsigned w0, unsigned w1, unsigned w2)
{
    return w0 | w1 << 8 | w2 << 16;
}

/* The equal code cuts as wire version 1 did: rails 1.. len/n rounded down to 4 KiB,
 * rail 0 the rest. */
START_TEST(the_equal_code_cuts_as_before)
{
    size_t off[CL_RAILS_MAX], plen[CL_RAILS_MAX], len = (1 << 20) + 12345;
    ck_assert_int_eq(cl_rails_cut(len, 3, cl_rails_equal(3), off, plen), 0);
    size_t each = len / 3 / CL_RAILS_ALIGN * CL_RAILS_ALIGN;
    ck_assert_uint_eq(plen[1], each);
    ck_assert_uint_eq(plen[2], each);
    ck_assert_uint_eq(plen[0], len - 2 * each);
    ck_assert_uint_eq(off[1], plen[0]);
    ck_assert_uint_eq(off[2], plen[0] + each);
}
END_TEST

/* Weights 3:1 give rail 1 a quarter in whole units; a weightless rail one unit; codes no
 * sender makes are refused. */
START_TEST(a_code_cuts_in_proportion_and_bad_codes_are_refused)
{
    size_t off[CL_RAILS_MAX], plen[CL_RAILS_MAX], len = 4 << 20;
    ck_assert_int_eq(cl_rails_cut(len, 2, code3(192, 64, 0), off, plen), 0);
    ck_assert_uint_eq(plen[1], len / 4);
    ck_assert_uint_eq(plen[0], len - len / 4);
    ck_assert_int_eq(cl_rails_cut(len, 3, code3(100, 0, 100), off, plen), 0);
    ck_assert_uint_eq(plen[1], CL_RAILS_ALIGN);
    ck_assert_uint_eq(plen[2], len / 2 / CL_RAILS_ALIGN * CL_RAILS_ALIGN);
    ck_assert_uint_eq(off[2], off[1] + plen[1]);
    ck_assert_int_eq(cl_rails_cut(len, 2, code3(0, 64, 0), off, plen), -1);
    ck_assert_int_eq(cl_rails_cut(len, 2, code3(1, 1, 1), off, plen), -1);
    ck_assert_int_eq(cl_rails_cut(2 * CL_RAILS_ALIGN, 4, 0x01000001u, off, plen), -1);
}
END_TEST

/* A window of CL_RAILS_WINDOW_US busy on rail k at bps, on the kernel's running counts. */
static void busy_window(cl_rails_speed *sp, int k, double bps)
{
    static uint64_t acked[CL_RAILS_MAX], busy[CL_RAILS_MAX];
    if (busy[k] == 0) { /* the first look starts the count */
        busy[k] = 5000;
        cl_rails_speed_add(sp, k, acked[k], busy[k]);
    }
    cl_rails_speed_add(sp, k, acked[k] + 1000, busy[k] + CL_RAILS_WINDOW_US / 2); /* too short */
    acked[k] += (uint64_t)(bps * CL_RAILS_WINDOW_US / 1e6);
    busy[k] += CL_RAILS_WINDOW_US;
    cl_rails_speed_add(sp, k, acked[k], busy[k]);
}

/* Rails measured at 400 and 100 MB/s weigh 4:1; unmeasured, equal; a rail measured far
 * slower keeps the floor; a dead rail weighs 0; one odd window does not move a speed,
 * two do. */
START_TEST(weights_follow_the_measured_speeds_with_a_floor)
{
    cl_rails_speed sp = {0};
    int live[CL_RAILS_MAX] = {1, 1, 1, 1};
    ck_assert_uint_eq(cl_rails_weigh(&sp, 2, live), code3(16, 16, 0));
    busy_window(&sp, 0, 400e6);
    ck_assert_msg(sp.bps[0] > 399e6 && sp.bps[0] < 401e6, "%f, want 400e6", sp.bps[0]);
    ck_assert_uint_eq(cl_rails_weigh(&sp, 2, live), code3(16, 16, 0)); /* rail 1 unknown */
    busy_window(&sp, 1, 100e6);
    ck_assert_uint_eq(cl_rails_weigh(&sp, 2, live), code3(204, 51, 0));
    busy_window(&sp, 1, 100e6);
    busy_window(&sp, 1, 900e6); /* a burst */
    ck_assert_msg(sp.bps[1] > 99e6 && sp.bps[1] < 101e6, "%f after a burst, want 100e6", sp.bps[1]);
    busy_window(&sp, 1, 300e6);
    busy_window(&sp, 1, 300e6); /* faster for good */
    ck_assert_msg(sp.bps[1] > 299e6 && sp.bps[1] < 301e6, "%f, want 300e6", sp.bps[1]);
    busy_window(&sp, 2, 1e6);
    ck_assert_uint_eq(cl_rails_weigh(&sp, 3, live) >> 16, 16);
    live[2] = 0;
    ck_assert_uint_eq(cl_rails_weigh(&sp, 3, live) >> 16, 0);
}
END_TEST

/* A cut in use stays while the speeds say about the same (within 5 points of share),
 * and moves at once past that, or when a rail dies. */
START_TEST(a_cut_in_use_stays_within_the_band)
{
    ck_assert_uint_eq(cl_rails_settle(0, code3(16, 16, 0), 2), code3(16, 16, 0));
    ck_assert_uint_eq(cl_rails_settle(code3(16, 16, 0), code3(130, 125, 0), 2), code3(16, 16, 0));
    ck_assert_uint_eq(cl_rails_settle(code3(16, 16, 0), code3(150, 105, 0), 2), code3(150, 105, 0));
    ck_assert_uint_eq(cl_rails_settle(code3(16, 16, 16), code3(16, 0, 16), 3), code3(16, 0, 16));
}
END_TEST

/* Sends of one pair, their rails' tx bytes meanwhile. */
static void rails_tx(pair *p, int n, size_t tx[CL_RAILS_MAX])
{
    for (int k = 0; k < n; k++)
        tx[k] = cl_rails_rail_tx(p->send, k);
}

/* a cuts 4:1 (as speeds of 400 and 100 would): rail 1 carries a fifth of the bytes, b
 * reassembles each message whole in order, the caller's tag kept. */
START_TEST(each_rail_carries_its_weight_s_share)
{
    pair p;
    pair_open(&p);
    cl_rails_pin_cut(p.send, code3(200, 50, 0));
    ck_assert_uint_eq(cl_rails_next_cut(p.send), code3(200, 50, 0));
    size_t t0[CL_RAILS_MAX], t1[CL_RAILS_MAX], before = 0;
    rails_tx(&p, 2, t0);
    send_all_acks_late(&p, &before);
    rails_tx(&p, 2, t1);
    double r1 = (double)(t1[1] - t0[1]) / (double)(t1[0] - t0[0] + t1[1] - t0[1]);
    ck_assert_msg(r1 > 0.19 && r1 < 0.21, "rail 1 carried %.3f of the bytes, want 0.2", r1);
    pair_done(&p);
}
END_TEST

/* Waits up to 3 s for a's rail k to be failed over, b's GOT in (b warned before it sent
 * it). Until then a's striped sends keep their parts past rail 0's for rail k's resend,
 * and one past the copies' cap has no copy, which fails the connection once the GOT
 * comes: the failover's limit (COLL_RAILS_KEEP_MIB), not what a test of the cut asks. */
static void wait_routed(pair *p, int k)
{
    for (int64_t end = cl_now_ms() + 3000; !cl_rails_routed(p->send, k) && cl_now_ms() < end;)
        usleep(1000);
    ck_assert_msg(cl_rails_routed(p->send, k), "a's rail %d not failed over in 3 s:\n%s", k, said);
}

/* Three rails cut 1:1:2; rail 1 fails: later sends give rail 1 one unit (over the
 * control connection: the rail itself is closed) and split the rest 1:2 between rails 0
 * and 2. */
START_TEST(a_failed_rail_s_share_goes_to_the_rails_left_by_weight)
{
    setenv("COLL_RAILS_REPEAT", "3", 1);
    pair p;
    pair_open(&p);
    cl_rails_pin_cut(p.send, code3(64, 64, 128));
    cl_rails_fail_rail(p.send, 1, "failed by the test");
    wait_log("failed (its peer found it failed): its share goes to the other rails");
    wait_routed(&p, 1);
    ck_assert_uint_eq(cl_rails_next_cut(p.send), code3(64, 0, 128));
    size_t t0[CL_RAILS_MAX], t1[CL_RAILS_MAX], before = 0;
    rails_tx(&p, 3, t0);
    send_all_acks_late(&p, &before);
    rails_tx(&p, 3, t1);
    double r2 = (double)(t1[2] - t0[2]) / (double)(t1[0] - t0[0] + t1[2] - t0[2]);
    ck_assert_msg(r2 > 0.64 && r2 < 0.69, "rail 2 carried %.3f of rails 0 and 2's, want 2/3", r2);
    ck_assert_uint_eq(t1[1], 0); /* closed at the failure: nothing went on it */
    pair_done(&p);
}
END_TEST

/* Ends of unlike rail counts use as many as both have, whichever dials: a dialer of
 * fewer names its count to the listener, which then hands out a connection of that
 * many (auto's connections to a host with one NIC, or whose second is on another
 * network); striped sizes arrive whole. */
START_TEST(ends_of_unlike_rail_counts_use_the_fewer)
{
    const char *counts[][2] = {{"1", "2"}, {"2", "1"}, {"2", "3"}, {"3", "2"}};
    for (int i = 0; i < 4; i++) {
        setenv("COLL_RAILS_REPEAT", counts[i][0], 1);
        b_rails = counts[i][1];
        pair p;
        pair_open(&p);
        b_rails = NULL;
        char want[16];
        int n = CL_MIN(atoi(counts[i][0]), atoi(counts[i][1]));
        snprintf(want, sizeof(want), "(%d rail%s)", n, n == 1 ? "" : "s");
        ck_assert_msg(strstr(p.tr->peer_name(p.send), want), "dialer %s: %s", counts[i][0],
                      p.tr->peer_name(p.send));
        ck_assert_msg(strstr(p.tr->peer_name(p.recv), want), "listener %s: %s", counts[i][1],
                      p.tr->peer_name(p.recv));
        size_t before = 0;
        send_all_acks_late(&p, &before);
        pair_done(&p);
    }
}
END_TEST

/* A striped message longer than the receive fails it (COLL_EMISMATCH) with the header
 * that came, for the caller to name: the caller's tag and length, never the cut's code
 * that rail 0's header carries in its tag. */
START_TEST(a_striped_message_too_long_fails_the_receive_naming_the_caller_s_tag)
{
    pair p;
    pair_open(&p);
    cl_rails_pin_cut(p.send, code3(192, 64, 0));
    char *out = pattern(1), *in = calloc(1, MSG);
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC, .len = MSG, .seq = 3, .tag = 0x7a90u}, hin;
    cl_tr_req *rs, *rr;
    ck_assert_int_eq(p.tr->irecv(p.recv, &hin, in, MSG / 2, &rr), COLL_OK);
    ck_assert_int_eq(p.tr->isend(p.send, &h, out, &rs), COLL_OK);
    ck_assert_int_eq(wait_req(&p, rr, NULL), COLL_EMISMATCH);
    ck_assert_uint_eq(hin.len, MSG);
    ck_assert_uint_eq(hin.seq, 3);
    ck_assert_msg(hin.tag == h.tag, "the failed receive says tag %#x, the caller's %#x", hin.tag,
                  h.tag);
    free(in);
    free(out);
    pair_done(&p);
}
END_TEST

/* A listening socket on loopback (its queue: backlog) in place of rail 1 in p's handle;
 * its fd. */
static int rail_1_aside(pair *p, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(at);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&at, len), 0);
    ck_assert_int_eq(listen(fd, backlog), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&at, &len), 0);
    char *rail1 = p->handle + strlen(p->handle) + 1;
    memset(rail1, 0, CL_HANDLE_BYTES - (size_t)(rail1 - p->handle));
    snprintf(rail1, 32, "127.0.0.1:%d", ntohs(at.sin_port));
    return fd;
}

/* A connection to listening socket fd left in its queue of one (backlog 0): a dial to fd
 * after it is never answered, its SYNs dropped, as where a firewall drops them. */
static int fill_queue(int fd)
{
    struct sockaddr_in at;
    socklen_t len = sizeof(at);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&at, &len), 0);
    int in_queue = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(in_queue, (struct sockaddr *)&at, len), 0);
    return in_queue;
}

/* Connects p with rail 1 of the handle at a listening socket of the test's whose queue
 * is full: the dial is never answered, neither through nor failed, as where a firewall
 * drops its SYNs. (A port where nobody listens refuses it at once: a rail the dialer
 * finds failed, not one that never comes.) The two sockets to close go into aside. */
static void connect_without_rail_1(pair *p, int aside[2])
{
    aside[0] = rail_1_aside(p, 0);
    aside[1] = fill_queue(aside[0]);
    uint8_t hello[CL_HELLO_BYTES] = {1};
    ck_assert_int_eq(p->tr->connect(p->a, p->handle, hello, 1 << 20, &p->send), COLL_OK);
}

/* send_all_acks_late one way, then the other. */
static void both_ways(pair *p)
{
    size_t kept = 0;
    send_all_acks_late(p, &kept);
    cl_tr_conn *t = p->send;
    p->send = p->recv;
    p->recv = t;
    send_all_acks_late(p, &kept);
}

/* Rails hellos whose ids no connection ever claims (their rail 0 never came, or came
 * after the connection was handed out and the id left the listener's list) fill the
 * listener's 64 places; past 6 s the oldest makes room for a newer one. Kept for good,
 * they held every place, and later connections waited for theirs until the timeout. */
START_TEST(unclaimed_rails_make_room_after_a_while)
{
    pair p;
    pair_listen(&p);
    int fds[65];
    for (int i = 0; i < 65; i++) {
        uint8_t hello[CL_HELLO_BYTES] = {0}, got[CL_HELLO_BYTES];
        uint64_t id = 0x5eed0000ULL + (uint64_t)i;
        cl_tr_conn *c;
        for (int64_t end = cl_now_ms() + (i == 64 ? 6500 : 0); cl_now_ms() < end;
             usleep(20000)) /* the 64 taken in, and old enough */
            ck_assert_int_eq(p.tr->accept(p.l, got, &c), COLL_INPROGRESS);
        memcpy(hello, "collrail", 8);
        memcpy(hello + 8, &id, 8);
        hello[16] = 1;
        hello[17] = 3; /* RAIL_VERSION */
        fds[i] = raw_hello(&p, hello);
    }
    ck_assert_msg(!closed_by_listener(&p, fds[64]) && log_says("for a newer one") &&
                      !log_says("no place left"), "no room made:\n%s", said);
    for (int i = 0; i < 65; i++)
        close(fds[i]);
    pair_done(&p);
}
END_TEST

/* Accepts p's connection, which must come within 4.5 s (a rail given up at 3 s). */
static void accept_within_4_5_s(pair *p)
{
    uint8_t got[CL_HELLO_BYTES];
    int64_t start = cl_now_ms();
    while (p->tr->accept(p->l, got, &p->recv) == COLL_INPROGRESS) {
        ck_assert_msg(cl_now_ms() - start < 4500, "not handed out in 4.5 s:\n%s", said);
        usleep(20000);
    }
}

/* A rail of the dialer's that never reaches the listener (connect_without_rail_1):
 * after RAIL_WAIT_MS (3 s), well before the init timeout, the listener hands the
 * connection out without it, saying so, and tells the dialer (a GOT), which stops its
 * rail 1 too. Striped messages then go both ways whole, rail 1's parts over the control
 * connection. */
START_TEST(a_rail_that_never_comes_is_given_up)
{
    pair p;
    pair_listen(&p);
    int aside[2];
    connect_without_rail_1(&p, aside);
    accept_within_4_5_s(&p);
    ck_assert_msg(log_says("rails: rail 1 (lo) from 127.0.0.1:") &&
                      log_says("has not come in 3000 ms: going on without it"), "%s", said);
    wait_log("failed (its peer found it failed): its share goes to the other rails");
    both_ways(&p);
    close(aside[1]);
    close(aside[0]);
    pair_done(&p);
}
END_TEST

/* A striped message posted right after connecting, its rail 1 never coming, 4 MiB
 * against copies capped at 1 MiB: a share of rail 1 would have no copy to resend when
 * the listener gives the rail up (3 s later), and the connection failed then ("not
 * acknowledged and not copied"). A rail whose dial is not through carries no share, so
 * the message arrives whole. The ends' peer timeout is the library's default, 30 s: the
 * receive is posted at the hand-out, and until it drains rail 0 the sender's 4 MiB keep
 * that window shut, which TCP_USER_TIMEOUT at the peer timeout ended as a peer gone; at
 * 5 s, a receive drained 2 s after the hand-out (a loaded machine) reset rail 0 (tcp
 * sets no TCP_USER_TIMEOUT since: docs/faults.md). */
START_TEST(a_big_message_sent_before_a_rail_is_given_up_arrives_whole)
{
    enum { BIG = 4 << 20 };
    pair p;
    pair_timeout_ms = 30000;
    pair_listen(&p);
    pair_timeout_ms = 0;
    int aside[2];
    connect_without_rail_1(&p, aside);
    char *out = malloc(BIG), *in = calloc(1, BIG);
    for (size_t j = 0; j < BIG; j++)
        out[j] = (char)(j % 251);
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC, .len = BIG, .tag = 0x5a17u}, hin;
    cl_tr_req *rs, *rr;
    ck_assert_int_eq(p.tr->isend(p.send, &h, out, &rs), COLL_OK);
    accept_within_4_5_s(&p);
    ck_assert_int_eq(p.tr->irecv(p.recv, &hin, in, BIG, &rr), COLL_OK);
    size_t nb = 0;
    int sent = wait_req(&p, rs, NULL), got = wait_req(&p, rr, &nb);
    ck_assert_msg(sent == COLL_OK && got == COLL_OK, "send: %s, receive: %s\n%s",
                  coll_strerror(sent), coll_strerror(got), said);
    ck_assert_uint_eq(nb, BIG);
    ck_assert_uint_eq(hin.tag, h.tag);
    ck_assert_msg(memcmp(in, out, BIG) == 0, "the message arrived wrong");
    free(in);
    free(out);
    close(aside[1]);
    close(aside[0]);
    pair_done(&p);
}
END_TEST

/* The race of a rail given up: the dialer's rail 1 (held here, in a socket of the test's
 * own, until the listener handed the connection out without it) reaches the listener
 * late. The listener closes it at once, and messages still go whole both ways: the
 * dialer stops its rail 1 on the listener's GOT and stripes nothing onto it. */
START_TEST(a_rail_that_comes_after_it_was_given_up_is_closed)
{
    pair p;
    pair_listen(&p);
    char *rail1 = p.handle + strlen(p.handle) + 1, real[CL_HANDLE_BYTES];
    snprintf(real, sizeof(real), "%s", rail1);
    int hold = rail_1_aside(&p, 1);
    uint8_t hello[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    ck_assert_int_eq(p.tr->connect(p.a, p.handle, hello, 1 << 20, &p.send), COLL_OK);
    strcpy(rail1, real); /* raw_hello's way to the listener's rail 1 */
    accept_within_4_5_s(&p);
    int in = accept(hold, NULL, NULL);
    ck_assert_int_ge(in, 0);
    ck_assert_int_eq(recv(in, got, CL_HELLO_BYTES, MSG_WAITALL), (ssize_t)CL_HELLO_BYTES);
    int late = raw_hello(&p, got);
    ck_assert_msg(closed_by_listener(&p, late), "the late rail was kept:\n%s", said);
    ck_assert_msg(log_says("handed out without it"), "%s", said);
    both_ways(&p);
    close(late);
    close(in);
    close(hold);
    pair_done(&p);
}
END_TEST

/* The listener goes (its coll_destroy: the listener closed, then the context) while a
 * connection forms, waiting for a rail 1 whose dial it never answers: a striped send of
 * the dialer's, posted before the listener goes (0: a part waits on rail 1) or after the
 * dialer saw its control connection end (1), fails with COLL_EPEER within a second.
 * Before, such a part waited for the dial until the kernel gave it up (about two
 * minutes) or the operation's timeout. */
START_TEST(a_listener_gone_while_a_rail_is_awaited_fails_the_dialer_s_sends)
{
    enum { SIZE = 256 << 10 }; /* striped, and within the socket buffers: rail 0's part goes */
    pair p;
    pair_listen(&p);
    int hold = rail_1_aside(&p, 0), in_queue = fill_queue(hold);
    uint8_t hello[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    ck_assert_int_eq(p.tr->connect(p.a, p.handle, hello, 1 << 20, &p.send), COLL_OK);
    char *out = calloc(1, SIZE);
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC, .len = SIZE, .tag = 0x5a18u};
    cl_tr_req *rs;
    if (_i == 0)
        ck_assert_int_eq(p.tr->isend(p.send, &h, out, &rs), COLL_OK);
    for (int64_t end = cl_now_ms() + 500; cl_now_ms() < end; usleep(20000)) /* it forms */
        ck_assert_int_eq(p.tr->accept(p.l, got, &p.recv), COLL_INPROGRESS);
    int64_t gone = cl_now_ms();
    p.tr->close_listener(p.l);
    p.tr->ctx_destroy(p.b);
    p.b = NULL;
    if (_i == 1) {
        wait_log("rails: the control connection to");
        ck_assert_int_eq(p.tr->isend(p.send, &h, out, &rs), COLL_OK);
    }
    int rc = wait_req(&p, rs, NULL);
    long long ms = (long long)(cl_now_ms() - gone);
    ck_assert_msg(rc == COLL_EPEER && ms < 1000, "the send: %s after %lld ms, want %s in 1 s\n%s",
                  coll_strerror(rc), ms, coll_strerror(COLL_EPEER), said);
    free(out);
    close(in_queue);
    close(hold);
    pair_done(&p);
}
END_TEST

/* A hello with the proof, seen once (on the wire) and sent again and again to the
 * listener it was for: the first copy takes a place, the others are refused at once,
 * and a keyed pair still forms (before, 63 copies filled the places and it never did). */
START_TEST(a_replayed_rails_hello_holds_one_place)
{
    static const uint8_t key[32] = {7, 1, 9};
    pair_key = key;
    pair p;
    pair_listen(&p);
    uint8_t hello[CL_HELLO_BYTES] = {0};
    memcpy(hello, "collrail", 8);
    memset(hello + 8, 0x42, 8); /* some id */
    hello[16] = 1;
    hello[17] = 3;
    uint8_t tag[CL_TAG_BYTES];
    cl_auth_tag(key, tag, 3, "coll rail v3", (size_t)12, hello + 8, (size_t)9, p.handle,
                strlen(p.handle));
    memcpy(hello + 24, tag, 16);
    int first = raw_hello(&p, hello);
    ck_assert_msg(!closed_by_listener(&p, first), "the first copy was refused:\n%s", said);
    for (int i = 0; i < 70; i++) {
        int fd = raw_hello(&p, hello);
        ck_assert_msg(closed_by_listener(&p, fd), "copy %d was kept", i + 1);
        close(fd);
    }
    ck_assert(log_says("a second of its id and rail"));
    uint8_t h1[CL_HELLO_BYTES] = {1}, got[CL_HELLO_BYTES];
    ck_assert_int_eq(p.tr->connect(p.a, p.handle, h1, 1 << 20, &p.send), COLL_OK);
    int64_t end = cl_now_ms() + 5000;
    while (p.tr->accept(p.l, got, &p.recv) == COLL_INPROGRESS) {
        ck_assert_msg(cl_now_ms() < end, "the keyed pair never formed:\n%s", said);
        usleep(5000);
    }
    pair_key = NULL;
    close(first);
    pair_done(&p);
}
END_TEST

/* Each test a case of its own, named as the test: CK_RUN_CASE=<name> runs it alone (a
 * loop of one case under load is how a rare failure is found). */
static void add_case(Suite *s, const char *name, const TTest *test, int from, int to)
{
    TCase *t = tcase_create(name);
    tcase_set_timeout(t, 30);
    tcase_add_loop_test(t, test, from, to);
    suite_add_tcase(s, t);
}
#define CASE(s, test) add_case(s, #test, test, 0, 1)
#define LOOP_CASE(s, test, from, to) add_case(s, #test, test, from, to)

int main(void)
{
    setenv("COLL_RAILS_REPEAT", "2", 1);
    char cap[16];
    snprintf(cap, sizeof(cap), "%d", CAP_MIB);
    setenv("COLL_RAILS_KEEP_MIB", cap, 1);
    Suite *s = suite_create("rails");
    CASE(s, copies_stay_under_the_cap_while_nothing_is_acknowledged);
    CASE(s, a_control_connection_that_cannot_receive_drops_the_copies);
    LOOP_CASE(s, a_rails_hello_of_another_version_is_refused_naming_both, 0, 3);
    CASE(s, under_a_secret_a_rails_hello_needs_the_proof);
    CASE(s, a_replayed_rails_hello_holds_one_place);
    CASE(s, a_rail_that_never_comes_is_given_up);
    CASE(s, unclaimed_rails_make_room_after_a_while);
    CASE(s, a_big_message_sent_before_a_rail_is_given_up_arrives_whole);
    CASE(s, a_rail_that_comes_after_it_was_given_up_is_closed);
    LOOP_CASE(s, a_listener_gone_while_a_rail_is_awaited_fails_the_dialer_s_sends, 0, 2);
    CASE(s, a_failed_rail_s_parts_go_over_the_control_connection);
    CASE(s, a_halt_asked_after_a_local_close_touches_nothing);
    CASE(s, the_equal_code_cuts_as_before);
    CASE(s, a_code_cuts_in_proportion_and_bad_codes_are_refused);
    CASE(s, weights_follow_the_measured_speeds_with_a_floor);
    CASE(s, a_cut_in_use_stays_within_the_band);
    CASE(s, each_rail_carries_its_weight_s_share);
    CASE(s, ends_of_unlike_rail_counts_use_the_fewer);
    CASE(s, a_failed_rail_s_share_goes_to_the_rails_left_by_weight);
    CASE(s, a_striped_message_too_long_fails_the_receive_naming_the_caller_s_tag);
    return run_suite(s);
}
