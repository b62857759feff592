/* coll_grow: a communicator gains ranks. Rank 0 serves a rendezvous of the grow's own
 * (a store server on a fresh port where its transport listens), named by the id it
 * hands out; comm's ranks and the newcomers meet there as coll_init's ranks do (init.c:
 * the terms, the cards, the links), comm's ranks at their own numbers and each newcomer
 * at the first place after them it claims (written once in the store: two newcomers
 * never share one). The id's nonce is the meeting's job name, so a rank holding the id
 * of another grow, or of an old one, is refused by the terms; and a newcomer's settings
 * that must agree (transport, codec, segment, algorithm, secret) are compared there as
 * at init. Nothing of comm changes: a grow that fails leaves it as it was. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/interrupt.h"
#include "base/log.h"
#include "base/util.h"
#include "core/config.h"
#include "core/error.h"
#include "core/lifecycle.h"
#include "rdzv/store.h"
#include "rdzv/tcp_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_FORMAT "grow1/%s/%d/%d/%s"

/* What an id says: where the meeting is, comm's size and the grown one's, the nonce. */
typedef struct {
    char where[CL_LIFE_ADDR];
    int from, size;
    char nonce[2 * 16 + 1];
} grow_id;

static int parse_id(const char *id, grow_id *g)
{
    int end = 0;
    char form[64]; /* the address's width follows CL_LIFE_ADDR */
    snprintf(form, sizeof(form), "grow1/%%%d[^/]/%%d/%%d/%%32[0-9a-f]%%n", CL_LIFE_ADDR - 1);
    if (!id || strnlen(id, COLL_GROW_ID_BYTES) == COLL_GROW_ID_BYTES ||
        sscanf(id, form, g->where, &g->from, &g->size, g->nonce, &end) != 4 ||
        id[end] || strlen(g->nonce) != 32 || g->from < 1 || g->size <= g->from)
        return COLL_EINVAL;
    return COLL_OK;
}

/* Rank 0: stops the grow's rendezvous, if it serves one. */
static void grow_stop(coll_comm *c)
{
    if (c->grow)
        cl_store_server_stop(c->grow);
    c->grow = NULL;
    c->grow_id[0] = 0;
}

int coll_grow_id(coll_comm *c, int size, char *id, size_t len)
{
    if (!c || !id || c->rank != 0 || size <= c->size || len < COLL_GROW_ID_BYTES) {
        cl_comm_init_error("coll_grow_id: rank 0 of the communicator only, to a size above "
                           "its %d, into %d bytes or more (rank %d, size %d, %zu bytes)",
                           c ? c->size : 0, COLL_GROW_ID_BYTES, c ? c->rank : -1, size, len);
        return COLL_EINVAL;
    }
    grow_stop(c);
    uint8_t raw[16];
    char nonce[2 * sizeof(raw) + 1];
    cl_life l;
    char why[256] = "";
    if (cl_auth_nonce(raw, sizeof(raw)) != 0 ||
        cl_life_open(c->device[0] ? c->device : NULL, c->family, &l, why, sizeof(why)) != COLL_OK) {
        cl_comm_init_error("coll_grow_id: no port for the grow's rendezvous: %s", why);
        return COLL_ESYS;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(nonce + 2 * i, 3, "%02x", raw[i]);
    int rc = cl_store_server_start(&l.fd, 1, c->timeout_ms, &c->grow); /* takes l.fd */
    if (rc != COLL_OK) {
        cl_comm_init_error("coll_grow_id: the grow's rendezvous did not start");
        return rc;
    }
    snprintf(c->grow_id, sizeof(c->grow_id), ID_FORMAT, l.addr, c->size, size, nonce);
    snprintf(id, len, "%s", c->grow_id);
    return COLL_OK;
}

/* The meeting's place as a rendezvous (its address family, whether it is loopback). */
static int place(const grow_id *g, int rank, cl_rdzv *rv)
{
    char url[sizeof(g->where) + 8], err[256] = "";
    snprintf(url, sizeof(url), "tcp://%s", g->where);
    int rc = cl_rdzv_parse(url, rank, g->size, rv, err, sizeof(err));
    if (rc != COLL_OK)
        cl_comm_init_error("the grow's rendezvous %s: %s", g->where, err);
    return rc;
}

/* Meets at the grow's rendezvous through store (the meeting's from now on), with the
 * settings this rank brings. */
static int meet(const grow_id *g, const cl_rdzv *rv, cl_config *cfg, cl_store *store,
                coll_comm **out)
{
    snprintf(cfg->job, sizeof(cfg->job), "grow-%s", g->nonce);
    cfg->job_from = "the grow's id";
    return cl_init_meet(out, cfg, rv, store);
}

static int open_store(const cl_rdzv *rv, int timeout_ms, cl_store **out)
{
    char err[256] = "";
    int rc = cl_store_tcp_open(rv->where, rv->family, 0, cl_now_ms() + timeout_ms, out, err,
                               sizeof(err));
    if (rc != COLL_OK)
        cl_comm_init_error("the grow's rendezvous at %s: %s", rv->where, err);
    return rc;
}

int coll_grow(coll_comm *c, coll_comm **out)
{
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    if (!c)
        return COLL_EINVAL;
    /* Marked from here, as a newcomer's init: an interrupt while the id goes round
     * (quick: every rank of c calls this) must still end the meeting after it */
    int armed = cl_interrupt_arm();
    /* Rank 0 hands its id to the others over c; "" (none made) fails every rank alike. */
    char id[COLL_GROW_ID_BYTES] = "";
    if (c->rank == 0)
        snprintf(id, sizeof(id), "%s", c->grow_id);
    int rc = coll_broadcast(c, id, sizeof(id), COLL_U8, 0);
    grow_id g;
    if (rc != COLL_OK) {
        cl_comm_init_error("coll_grow: rank 0's id did not come: %s", coll_last_error(c));
    } else if (parse_id(id, &g) != COLL_OK || g.from != c->size) {
        cl_comm_init_error("coll_grow: rank 0 made no id for this communicator (coll_grow_id "
                           "first)");
        rc = COLL_EINVAL;
    } else {
        cl_config cfg = cl_comm_config(c);
        cfg.net_given = c->net_given; /* the grown one measures its host link again */
        cl_store *s = NULL;
        cl_rdzv rv;
        if ((rc = place(&g, c->rank, &rv)) == COLL_OK &&
            (rc = open_store(&rv, cfg.timeout_ms, &s)) == COLL_OK)
            rc = meet(&g, &rv, &cfg, s, out);
    }
    if (c->rank == 0)
        grow_stop(c); /* every rank has read what it needs, or the grow failed */
    rc = cl_init_end(rc, out);
    cl_interrupt_disarm(armed);
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_grow: %s", coll_last_error(NULL));
    return rc;
}

/* The first place after comm's ranks that nobody claimed yet. */
static int claim(const grow_id *g, cl_store *s, int *rank)
{
    for (int r = g->from; r < g->size; r++) {
        char key[32];
        snprintf(key, sizeof(key), "grow/place/%d", r);
        int rc = cl_store_create(s, key, "", 1);
        if (rc == COLL_OK)
            *rank = r;
        if (rc != CL_STORE_TAKEN)
            return rc;
    }
    cl_comm_init_error("every place of the grow (ranks %d to %d) is taken",
                       g->from, g->size - 1);
    return COLL_EMISMATCH;
}

int coll_init_grow(coll_comm **out, const char *id, const coll_config *user)
{
    cl_comm_init_error("%s", "");
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    grow_id g;
    cl_config cfg;
    cl_store *s = NULL;
    /* Marked from here, not from the meeting on: the dials to the grow's rendezvous come
     * first, and a newcomer given an id nobody serves (any more) dials until its timeout */
    int armed = cl_interrupt_arm();
    int rank = -1, rc = parse_id(id, &g);
    if (rc != COLL_OK) {
        cl_comm_init_error("'%.60s' is not an id coll_grow_id made", id ? id : "");
    } else {
        cl_rdzv rv;
        char err[512] = "";
        if ((rc = place(&g, g.from, &rv)) == COLL_OK &&
            (rc = cl_config_resolve(user, &rv, &cfg, err, sizeof(err))) != COLL_OK)
            cl_comm_init_error("%s", err);
        if (rc == COLL_OK && (rc = open_store(&rv, cfg.timeout_ms, &s)) == COLL_OK &&
            (rc = claim(&g, s, &rank)) == COLL_OK) {
            /* Fault injection for the tests: COLL_FAULT_GROW=claimed kills a newcomer
             * that has its place and has said nothing else: one dying mid-grow. */
            const char *f = getenv("COLL_FAULT_GROW");
            if (f && strcmp(f, "claimed") == 0)
                raise(SIGKILL);
            rv.rank = rank;
            rc = meet(&g, &rv, &cfg, s, out);
            s = NULL; /* the meeting's now, closed by it */
        }
    }
    if (s)
        s->ops->close(s);
    rc = cl_init_end(rc, out);
    cl_interrupt_disarm(armed);
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_init_grow: %s", coll_last_error(NULL));
    return rc;
}
