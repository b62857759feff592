/* What the tcp transport offers rails.c beyond the contract (transport.h), on its own
 * connections and with its types opaque: a send that puts only part of its payload on
 * the stream, and a receive that learns at its header how much of the payload this
 * stream carries. */
#ifndef CL_TCP_SPAN_H
#define CL_TCP_SPAN_H

#include "transports/transport.h"

#include <stddef.h>

/* Called once a receive's header is in (on whichever thread reads it, under the
 * connection's lock): the payload bytes this stream carries for it, at most hdr->len. */
typedef size_t (*cl_tcp_hook)(void *arg, const cl_msg_hdr *hdr);

/* isend whose stream carries `span` bytes of buf (the header still says hdr->len). */
int cl_tcp_isend_span(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, size_t span,
                      cl_tr_req **out);
/* irecv whose stream carries on_hdr's answer of the payload (into buf from its start). */
int cl_tcp_irecv_hook(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tcp_hook on_hdr,
                      void *arg, cl_tr_req **out);

/* A receive that takes frame after frame and never completes (it fails only with the
 * connection): at each frame's header on_hdr says how many payload bytes follow and sets
 * where they go (*buf, at most 1 GiB), then on_frame has the whole frame. Both are called
 * under the connection's lock, on whichever thread reads: they must not call into c. */
typedef size_t (*cl_tcp_fhook)(void *arg, const cl_msg_hdr *hdr, void **buf);
typedef void (*cl_tcp_frame)(void *arg, const cl_msg_hdr *hdr, void *buf);
int cl_tcp_irecv_frames(cl_tr_conn *c, cl_msg_hdr *hdr, cl_tcp_fhook on_hdr, cl_tcp_frame on_frame,
                        void *arg, cl_tr_req **out);
/* Stops c at once, both ways: every queued request fails (COLL_EPEER), nothing moves
 * after it returns. Answers how many receives c completed whole before. */
size_t cl_tcp_halt(cl_tr_conn *c);
/* Bytes received on c so far (a stall is a count that stays), and sent by its queued
 * sends (isend's, not send_now's). */
size_t cl_tcp_rx_bytes(cl_tr_conn *c);
size_t cl_tcp_tx_bytes(cl_tr_conn *c);
/* 1 with the kernel's count of c's bytes acknowledged and of the time (us) c had data
 * to send and the peer room for it; 0 where it has none, or while c's lock is held
 * elsewhere (only tried: the caller may hold a lock that comes after it). c must not be
 * freed yet. */
int cl_tcp_busy(cl_tr_conn *c, uint64_t *acked, uint64_t *busy_us);
/* 0 while c works both ways, else the status that ended it or one way of it. */
int cl_tcp_broken(cl_tr_conn *c);
/* 1 once c's dial (or accept) is through, the hello sent, until c fails. */
int cl_tcp_ready(cl_tr_conn *c);

#endif
