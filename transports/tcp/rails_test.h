/* What tests/transport/test_rails.c looks at and does inside a rails connection; the
 * library itself calls none of it. */
#ifndef CL_RAILS_TEST_H
#define CL_RAILS_TEST_H

#include "transports/transport.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of striped sends' copies c keeps for a failover now. */
size_t cl_rails_kept_bytes(cl_tr_conn *c);
/* Cuts c's striped sends by code (rails_cut.h; 0: by speed again), as measured speeds
 * would. */
void cl_rails_pin_cut(cl_tr_conn *c, uint32_t code);
/* The code c's next striped send would be cut by. */
uint32_t cl_rails_next_cut(cl_tr_conn *c);
/* Bytes c's rail k has sent by its queued sends (headers included); 0 once it closed. */
size_t cl_rails_rail_tx(cl_tr_conn *c, int k);
/* Whether every rail of c that is not halted is through its dial. A dialer's are a
 * moment after its peer accepted the connection, not at once: tcp sends the hello, then
 * takes the socket over. */
int cl_rails_dialed(cl_tr_conn *c);
/* Whether rail k of c is failed over: halted at both ends (the peer's GOT in), its
 * parts going over the control connection from now on. */
int cl_rails_routed(cl_tr_conn *c, int k);
/* Takes rail k of c as failed here (why: the warning's reason), as a part's error would. */
void cl_rails_fail_rail(cl_tr_conn *c, int k, const char *why);
/* Sends h (no payload, as it is: magic too) on c's control connection. */
int cl_rails_ctl_send_raw(cl_tr_conn *c, const cl_msg_hdr *h);

#endif
