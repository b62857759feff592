/* Connection set-up: every rank connects to every other rank once per channel and
 * accepts the same from each. The handshake (magic, protocol version, job id, secret,
 * communicator id, rank, channel) is checked here; a stray or hostile connection is
 * logged as a protocol error and dropped, and never takes a slot. */
#include "core/comm.h"

#include "base/log.h"
#include "base/util.h"
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cl_hello_expect expectation(const coll_comm *c)
{
    return (cl_hello_expect){c->job, c->secret, c->id, c->rank, c->size, CL_CHANNELS};
}

/* Which recv slot this hello claims, or -1 (with the reason logged) to refuse it. */
static int claim(coll_comm *c, const uint8_t raw[CL_HELLO_BYTES], cl_tr_conn *conn)
{
    cl_hello_expect e = expectation(c);
    const char *why;
    int slot = cl_hello_check(raw, &e, &why);
    if (slot >= 0 && c->conns[slot / c->size][1][slot % c->size])
        why = "duplicate connection";
    if (why) {
        cl_log(COLL_LOG_WARN, "rank %d: refused connection from %s: %s (%s)", c->rank,
               c->tr->peer_name(conn), coll_strerror(COLL_EPROTO), why);
        return -1;
    }
    return slot;
}

static int missing_ranks(coll_comm *c, char *out, size_t len)
{
    int n = 0, got = 0;
    out[0] = 0;
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank || (c->conns[0][1][p] && c->conns[1][1][p]))
            continue;
        got += snprintf(out + got, got < (int)len ? len - (size_t)got : 0, "%s%d", n ? "," : "", p);
        n++;
    }
    return n;
}

static int accept_all(coll_comm *c, cl_tr_listener *l)
{
    int want = 2 * (c->size - 1), have = 0;
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    while (have < want) {
        uint64_t seen = cl_notifier_events(&c->notifier);
        uint8_t raw[CL_HELLO_BYTES];
        cl_tr_conn *conn;
        int rc = c->tr->accept(l, raw, &conn);
        if (rc == COLL_OK) {
            int slot = claim(c, raw, conn);
            if (slot < 0) {
                c->tr->close_conn(conn);
            } else {
                c->conns[slot / c->size][1][slot % c->size] = conn;
                have++;
            }
            continue;
        }
        if (cl_now_ms() >= deadline) {
            char miss[256];
            missing_ranks(c, miss, sizeof(miss));
            cl_comm_fail(c, COLL_ETIMEDOUT,
                         "rank %d: connecting the communicator timed out after %d ms: no "
                         "connection from rank(s) %s",
                         c->rank, c->timeout_ms, miss);
            return COLL_ETIMEDOUT;
        }
        cl_notifier_wait(&c->notifier, seen, CL_MIN(deadline, cl_now_ms() + 100));
    }
    return COLL_OK;
}

/* One empty message over every link, both ways: init returns only once every link
 * carried data, so a rank that leaves right after init cannot strand its peers. */
static int exchange_first_message(coll_comm *c)
{
    int n = c->size, k = 0, rc = COLL_OK;
    cl_tr_req **reqs = calloc((size_t)(4 * n), sizeof(*reqs));
    cl_msg_hdr *in = calloc((size_t)(2 * n), sizeof(*in));
    cl_msg_hdr h = {.magic = CL_MSG_MAGIC};
    if (!reqs || !in)
        rc = COLL_ENOMEM;
    for (int ch = 0; ch < CL_CHANNELS && rc == COLL_OK; ch++)
        for (int p = 0; p < n && rc == COLL_OK; p++) {
            if (p == c->rank)
                continue;
            rc = c->tr->isend(c->conns[ch][0][p], &h, NULL, &reqs[k++]);
            if (rc == COLL_OK)
                rc = c->tr->irecv(c->conns[ch][1][p], &in[ch * n + p], NULL, 0, &reqs[k++]);
        }
    int64_t deadline = cl_now_ms() + c->timeout_ms;
    for (int i = 0; i < k; i++) {
        int done = 0, r = COLL_OK;
        while (reqs[i] && !done) {
            uint64_t seen = cl_notifier_events(&c->notifier);
            r = c->tr->test(reqs[i], &done, NULL);
            if (!done && cl_now_ms() >= deadline) {
                r = COLL_ETIMEDOUT;
                break;
            }
            if (!done)
                cl_notifier_wait(&c->notifier, seen, deadline);
        }
        if (r != COLL_OK && rc == COLL_OK) {
            int j = (i / 2) % (n - 1), peer = j < c->rank ? j : j + 1;
            cl_comm_fail(c, r, "rank %d: the first message with rank %d failed: %s", c->rank, peer,
                         coll_strerror(r));
            rc = r;
        }
    }
    free(reqs);
    free(in);
    return rc;
}

int cl_mesh_connect(coll_comm *c, cl_tr_listener *l, const char *handles)
{
    for (int ch = 0; ch < CL_CHANNELS; ch++) {
        for (int k = 1; k < c->size; k++) {
            int p = (c->rank + k) % c->size; /* spread the connects: not all at rank 0 */
            uint8_t raw[CL_HELLO_BYTES];
            cl_hello_expect me = expectation(c);
            cl_hello_make(&me, ch, raw);
            int rc = c->tr->connect(c->ctx, handles + (size_t)p * CL_HANDLE_BYTES, raw,
                                    &c->conns[ch][0][p]);
            if (rc != COLL_OK) {
                cl_comm_fail(c, rc, "rank %d: cannot connect to rank %d at '%.*s': %s", c->rank, p,
                             CL_HANDLE_BYTES, handles + (size_t)p * CL_HANDLE_BYTES,
                             coll_strerror(rc));
                return rc;
            }
        }
    }
    int rc = accept_all(c, l);
    c->tr->close_listener(l);
    if (rc == COLL_OK)
        rc = exchange_first_message(c);
    if (rc == COLL_OK && cl_log_enabled(COLL_LOG_INFO)) {
        int n = c->size, prev = (c->rank + n - 1) % n, next = (c->rank + 1) % n;
        cl_log(COLL_LOG_INFO,
               "rank %d/%d comm %llx: transport %s, ring %d -> %d -> %d: from %d "
               "via %s, to %d via %s; %d of %d ranks on this machine, %ld CPUs%s",
               c->rank, n, (unsigned long long)c->id, c->tr->name, prev, c->rank, next, prev,
               n > 1 ? c->tr->peer_name(c->conns[CL_CH_COLL][1][prev]) : "-", next,
               n > 1 ? c->tr->peer_name(c->conns[CL_CH_COLL][0][next]) : "-", c->local, n,
               sysconf(_SC_NPROCESSORS_ONLN), c->spin.crowded ? ": crowded, pollers yield" : "");
    }
    return rc;
}
