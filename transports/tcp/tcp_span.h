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

#endif
