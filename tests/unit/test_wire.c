/* The handshake and header checks: a hello from a valid peer is accepted at the slot it
 * names; each wrong field is refused with its reason; header verdicts. */
#include "wire/wire.h"

#include "common/suite.h"

#include <check.h>
#include <string.h>

static const cl_hello_expect me = { 0x1234, 7, 2, 5, CL_CHANNELS, 1 };
static const uint8_t proof[CL_HELLO_PROOF] = { 1, 2, 3 };

START_TEST(valid_peers_are_accepted_at_their_slot)
{
    for (int r = 0; r < me.size; r++)
        for (int ch = 0; ch < CL_CHANNELS; ch++) {
            cl_hello_expect peer = me;
            peer.rank = r;
            uint8_t raw[CL_HELLO_BYTES];
            const char *why;
            cl_hello_make(&peer, ch, proof, raw);
            int slot = cl_hello_check(raw, &me, &why);
            ck_assert_int_eq(slot, r == me.rank ? -1 : ch * me.size + r);
        }
}
END_TEST

START_TEST(each_wrong_field_is_refused_with_its_reason)
{
    static const struct {
        size_t off;
        const char *why;
    } cases[] = { { offsetof(cl_hello, magic), "bad magic" },
                  { offsetof(cl_hello, proto), "protocol version" },
                  { offsetof(cl_hello, keyed), "COLL_SECRET" },
                  { offsetof(cl_hello, job), "another job" },
                  { offsetof(cl_hello, comm), "another job" },
                  { offsetof(cl_hello, rank), "out of range" },
                  { offsetof(cl_hello, channel), "out of range" },
                  { offsetof(cl_hello, size), "out of range" } };
    cl_hello_expect peer = me;
    peer.rank = 0;
    uint8_t raw[CL_HELLO_BYTES];
    const char *why;
    cl_hello_make(&peer, 0, proof, raw);
    raw[cases[_i].off] ^= 0x40;
    ck_assert_int_eq(cl_hello_check(raw, &me, &why), -1);
    ck_assert_msg(why && strstr(why, cases[_i].why), "got '%s', want '%s'", why, cases[_i].why);
}
END_TEST

START_TEST(header_verdicts)
{
    cl_msg_hdr want = { .magic = CL_MSG_MAGIC, .coll = CL_ALLREDUCE, .len = 64, .seq = 3 };
    cl_msg_hdr got = want, bye = { .magic = CL_MSG_MAGIC, .coll = CL_FAREWELL };
    ck_assert_int_eq(cl_header_check(&got, &want, 64), CL_WIRE_OK);
    ck_assert_int_eq(cl_header_check(&got, &want, 63), CL_WIRE_MISMATCH);
    got.seq = 4;
    ck_assert_int_eq(cl_header_check(&got, &want, 64), CL_WIRE_MISMATCH);
    ck_assert_int_eq(cl_header_check(&bye, &want, 0), CL_WIRE_FAREWELL);
}
END_TEST

START_TEST(farewell_says_what_it_was_made_with)
{
    cl_farewell sent = { .status = COLL_EPEER, .rank = 5, .seq = 9, .silent_ms = 1500 };
    cl_msg_hdr h = cl_farewell_make(&sent), want = { .magic = CL_MSG_MAGIC, .coll = CL_ALLREDUCE };
    ck_assert_int_eq(cl_header_check(&h, &want, 0), CL_WIRE_FAREWELL);
    cl_farewell got = cl_farewell_read(&h);
    ck_assert_msg(got.status == sent.status && got.rank == sent.rank && got.seq == sent.seq &&
                      got.silent_ms == sent.silent_ms,
                  "read %d rank %llu #%u silent %u, made %d rank %llu #%u silent %u", got.status,
                  (unsigned long long)got.rank, got.seq, got.silent_ms, sent.status,
                  (unsigned long long)sent.rank, sent.seq, sent.silent_ms);
}
END_TEST

START_TEST(farewell_with_a_stranger_status_reads_as_a_protocol_error)
{
    cl_msg_hdr h = cl_farewell_make(&(cl_farewell){ .status = COLL_EMISMATCH, .silent_ms = 7 });
    ck_assert_int_eq(cl_farewell_read(&h).status, COLL_EMISMATCH);
    ck_assert_int_eq(cl_farewell_read(&h).silent_ms, 0); /* silence is a COLL_EPEER's only */
    uint32_t tags[] = { 0, 0xffffffffu, (uint32_t)-(COLL_EPROTO - 1), 0x80000000u };
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        h.tag = tags[i];
        ck_assert_msg(cl_farewell_read(&h).status == COLL_EPROTO, "tag %#x read as %d", tags[i],
                      cl_farewell_read(&h).status);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire");
    TCase *t = tcase_create("wire");
    tcase_add_test(t, valid_peers_are_accepted_at_their_slot);
    tcase_add_loop_test(t, each_wrong_field_is_refused_with_its_reason, 0, 8);
    tcase_add_test(t, header_verdicts);
    tcase_add_test(t, farewell_says_what_it_was_made_with);
    tcase_add_test(t, farewell_with_a_stranger_status_reads_as_a_protocol_error);
    suite_add_tcase(s, t);
    return run_suite(s);
}
