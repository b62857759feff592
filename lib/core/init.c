/* coll_init and coll_init_store: the rendezvous through a store. Every rank publishes
 * its card (transport handle, host, lifeline, nonce) and reads everyone's, then the
 * communicator connects; the store closes once every rank has read the cards. The store
 * also keeps two jobs apart: its "job" record names the job, and a rank's card can be
 * written once only. */
#include "core/comm.h"

#include "base/addr.h"
#include "base/auth.h"
#include "base/interrupt.h"
#include "base/log.h"
#include "base/util.h"
#include "core/beat.h"
#include "core/calibrate.h"
#include "core/config.h"
#include "core/connect.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/lifecycle.h"
#include "core/terms.h"
#include "rdzv/tcp_server.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What init knows besides the communicator. */
typedef struct {
    const cl_config *cfg;
    const cl_rdzv *rv;
    cl_store *plain; /* the store before any seal: the terms and their note live there */
    int noted;       /* a rank left a note (terms, or its failure): every rank fails with it */
    int owner; /* this rank wrote the job record: it removes the job's records at the end */
    int terms_owner; /* this rank wrote the terms: it removes them and the note */
} meeting;

/* This rank came after the job formed: rank 0 may be in a job with another job's rank,
 * so it is told (keep_serving). */
static int late(coll_comm *c, const meeting *m)
{
    char what[32];
    snprintf(what, sizeof(what), "rank %d", c->rank);
    m->plain->ops->set(m->plain, "clash", what, strlen(what) + 1);
    return COLL_EMISMATCH;
}

/* A note's answer as init's: a failed rank's is COLL_EPEER (it will not come). */
static int noted(meeting *m, int rc)
{
    m->noted |= rc == COLL_EMISMATCH || rc == CL_TERMS_FAILED;
    return rc == CL_TERMS_FAILED ? COLL_EPEER : rc;
}

/* A wait on the store that a note (terms.c) ends at once. */
static int await(coll_comm *c, meeting *m, const char *key, void *buf, size_t cap,
                 size_t *len, int64_t deadline)
{
    int rc = cl_terms_wait(c->store, m->plain, m->cfg->keyed ? m->cfg->key : NULL, key, buf,
                           cap, len, deadline, cl_init_err, sizeof(cl_init_err));
    return rc == CL_TERMS_LATE ? late(c, m) : noted(m, rc);
}

/* One look for every card not yet read, waiting until `until` for the first missing
 * one only; the ranks still missing go into list. Returns how many, or a COLL_E* code. */
static int sweep_cards(coll_comm *c, meeting *m, cl_card *cards, uint8_t *have,
                       int64_t until, char *list, size_t len, int *lost)
{
    int missing = 0;
    list[0] = 0;
    for (int p = 0; p < c->size; p++) {
        if (have[p])
            continue;
        char key[64];
        size_t n = 0, at = strlen(list);
        snprintf(key, sizeof(key), "addr/%d", p);
        int r = await(c, m, key, &cards[p], sizeof(cl_card), &n, missing ? cl_now_ms() : until);
        /* EPEER: rank 0 gave up first and its store went away; same story (unless a
         * failed rank's note said it first). */
        if ((r == COLL_ETIMEDOUT || r == COLL_EPEER) && !m->noted) {
            snprintf(list + at, len - at, "%s%d", missing++ ? "," : "", p);
            *lost |= r == COLL_EPEER;
        } else if (r != COLL_OK) {
            return r;
        } else {
            have[p] = 1;
        }
    }
    return missing;
}

/* Rank 0 reads every card and publishes them all, CARDS_PER_KEY to a value ("cards/K"),
 * so every other rank reads n/CARDS_PER_KEY values instead of n: O(n) requests on the
 * store in all, not n^2 (256 ranks made 65k on rank 0's store thread). */
enum { CARDS_PER_KEY = 128 };
/* A card that grows past this fails every job of more than CARDS_PER_KEY ranks at init. */
_Static_assert(CARDS_PER_KEY * sizeof(cl_card) <= CL_STORE_MAX_VALUE,
               "CARDS_PER_KEY cards fit in one store value");

static int card_values(coll_comm *c, meeting *m, cl_card *cards, int publish,
                       int64_t deadline)
{
    int rc = COLL_OK;
    for (int k = 0; rc == COLL_OK && k * CARDS_PER_KEY < c->size; k++) {
        char key[32];
        size_t k_cards = (size_t)CL_MIN(CARDS_PER_KEY, c->size - k * CARDS_PER_KEY), len = 0;
        cl_card *at = cards + (size_t)k * CARDS_PER_KEY;
        snprintf(key, sizeof(key), "cards/%d", k);
        rc = publish ? c->store->ops->set(c->store, key, at, k_cards * sizeof(cl_card))
                     : await(c, m, key, at, k_cards * sizeof(cl_card), &len, deadline);
        if (rc == COLL_OK && !publish && len != k_cards * sizeof(cl_card))
            rc = COLL_EPROTO;
    }
    return rc;
}

/* Every rank's card: rank 0 reads them one by one, then publishes them (card_values);
 * the others read what it published. While some are missing, rank 0 says every few
 * seconds (at info) who is here and who is not. Near the deadline (while rank 0's store
 * still answers) the others stop waiting for its values and read the cards themselves,
 * so every rank's timeout names who is missing. */
static int gather_cards(coll_comm *c, meeting *m, const cl_card *mine, cl_card *cards,
                        int64_t deadline)
{
    uint8_t *have = calloc((size_t)c->size, 1);
    char list[256];
    int64_t start = cl_now_ms();
    int missing = have ? 1 : COLL_ENOMEM, lost = 0;
    if (have && c->rank != 0) { /* EPEER: rank 0's store went away (say_rank0_gone says so) */
        int rc = card_values(c, m, cards, 0, deadline - CL_MIN(c->timeout_ms / 4, 2000));
        missing = rc == COLL_ETIMEDOUT && !m->noted ? 1 : rc;
    }
    if (have) { /* this rank is here, whatever the store says */
        have[c->rank] = 1;
        cards[c->rank] = *mine;
    }
    while (missing > 0) {
        missing =
            sweep_cards(c, m, cards, have, CL_MIN(deadline, cl_now_ms() + 5000), list,
                        sizeof(list), &lost);
        if (missing <= 0 || cl_now_ms() >= deadline || lost)
            break;
        cl_log(COLL_LOG_INFO,
               "rank %d: rendezvous: %d/%d ranks here after %lld ms; waiting "
               "for rank(s) %s",
               c->rank, c->size - missing, c->size, (long long)(cl_now_ms() - start), list);
    }
    free(have);
    if (missing > 0)
        snprintf(cl_init_err, sizeof(cl_init_err),
                 "rendezvous: %d/%d ranks joined after %lld ms: missing rank(s) %s%s",
                 c->size - missing, c->size, (long long)(cl_now_ms() - start), list,
                 lost ? " (rank 0 closed the store: it gave up or failed, its error says why)"
                      : "");
    if (missing == 0 && c->rank == 0)
        missing = card_values(c, m, cards, 1, deadline);
    return missing > 0 ? COLL_ETIMEDOUT : missing;
}

/* The store holds another job's records; `what` says how that showed. */
static int clash(const meeting *m, const char *what)
{
    if (strcmp(m->rv->scheme, "file") == 0)
        snprintf(cl_init_err, sizeof(cl_init_err),
                 "file://%.300s already holds another job's files (%s): use a fresh directory",
                 m->rv->where, what);
    else
        snprintf(cl_init_err, sizeof(cl_init_err),
                 "another job is using this rendezvous (%s://%.300s: %s): use another port "
                 "or store, or set COLL_JOB_ID",
                 m->rv->scheme, m->rv->where, what);
    return COLL_EMISMATCH;
}

/* The family this rank's sockets took: its lifeline's (the config's may be AF_UNSPEC,
 * the interfaces' choice). */
static int sockets_family(const coll_comm *c)
{
    cl_addr a;
    return cl_addr_parse(c->life.addr, &a) == 0 ? a.sa.ss_family : AF_UNSPEC;
}

/* The job's terms (terms.c): rank 0 writes them, and owns the job's records from then
 * on; the others compare theirs at once. */
static int agree_terms(coll_comm *c, meeting *m, int64_t deadline)
{
    char why[CL_INIT_ERR_BYTES];
    int rc = cl_terms_agree(m->plain, m->cfg, c->rank, c->size, sockets_family(c), deadline, why,
                            sizeof(why));
    m->terms_owner = c->rank == 0 && rc == COLL_OK;
    if (rc == CL_TERMS_LATE) {
        snprintf(cl_init_err, sizeof(cl_init_err), "%s", why);
        return late(c, m);
    }
    if (rc == CL_TERMS_CLASH)
        return clash(m, why);
    if (rc == COLL_EMISMATCH || rc == CL_TERMS_FAILED)
        snprintf(cl_init_err, sizeof(cl_init_err), "%s", why);
    rc = noted(m, rc);
    if (rc == COLL_ETIMEDOUT)
        snprintf(cl_init_err, sizeof(cl_init_err),
                 "rendezvous at %s://%.300s: rank 0's terms were not there within %d ms: "
                 "rank 0 never came (start it, or check the URL), or its job formed without "
                 "this rank",
                 m->rv->scheme, m->rv->where, m->cfg->timeout_ms);
    return rc;
}

/* Rank 0 draws the job's id, which every hello carries, and writes it once; every other
 * rank reads it. */
static int agree_job(coll_comm *c, meeting *m, int64_t deadline)
{
    uint64_t id = 0;
    size_t len = 0;
    if (c->rank == 0) {
        if (cl_auth_nonce((uint8_t *)&id, sizeof(id)) != 0)
            return COLL_ESYS;
        c->job = id;
        int rc = cl_store_create(c->store, "job", &id, sizeof(id));
        m->owner = rc == COLL_OK;
        m->terms_owner = m->owner; /* else the place is another job's: its ranks read on */
        return rc == CL_STORE_TAKEN ? clash(m, "a job record is there already") : rc;
    }
    int rc = await(c, m, "job", &id, sizeof(id), &len, deadline);
    if (rc == COLL_OK && len != sizeof(id))
        rc = clash(m, "its job record is not this library's");
    c->job = id;
    return rc;
}

/* This rank's card, written once: a second writer of one rank's place (another job's
 * rank, or a rank started twice) is refused and leaves a note for rank 0. */
static int enroll(coll_comm *c, const meeting *m, const cl_card *mine)
{
    char key[64], what[64];
    snprintf(key, sizeof(key), "addr/%d", c->rank);
    int rc = cl_store_create(c->store, key, mine, sizeof(*mine));
    if (rc != CL_STORE_TAKEN)
        return rc;
    snprintf(what, sizeof(what), "rank %d registered twice", c->rank);
    c->store->ops->set(c->store, "clash", what, strlen(what) + 1);
    return clash(m, what);
}

/* This rank 0 found its port held. Where it is another unnamed job's rendezvous, ranks of
 * both jobs may be meeting there (this job's other ranks with that job's rank 0): it says
 * so as a late rank does, which fails that job's init, or stops it once formed, within
 * milliseconds rather than when that job's own last rank comes. A named or keyed job is
 * told apart by its name or key, and needs no word from it. */
static void tell_holder(const cl_config *cfg, const cl_rdzv *rv)
{
    cl_store *s;
    char err[256];
    if (cfg->job[0] || cfg->keyed ||
        cl_store_tcp_open(rv->where, rv->family, 0, cl_now_ms() + 1000, &s, err, sizeof(err)))
        return;
    s->ops->set(s, "clash", "rank 0", 7);
    s->ops->close(s);
}

/* The job is done with the store: the writer of its record removes what the job wrote
 * (stores whose records outlive it: a file directory, a process's table). */
/* A late rank's note on rank 0's server ("rank N", nothing else is taken): ranks of two
 * jobs started at one port may have met, so this job stops rather than reduce with a
 * stranger. */
static void late_rank(void *arg, const char *what, size_t len)
{
    coll_comm *c = arg;
    int r = -1, end = 0;
    if (len > 12 || sscanf(what, "rank %d%n", &r, &end) != 1 || what[end] || r < 0 ||
        r >= c->size)
        return;
    cl_comm_fail(c, COLL_EMISMATCH,
                 "a rank %d came to this job's rendezvous after the job formed: ranks of two "
                 "jobs started at one port may have met, so the job stops (give each job its "
                 "own port or COLL_JOB_ID; coll_run sets one)",
                 r);
}

/* Rank 0 of an unnamed job's tcp rendezvous serves on for the job's life: nothing else
 * tells two such jobs apart, and they mixed when one's rank 0 bound the port after the
 * other's let it go. Another job's rank 0 now cannot bind it while this one runs, and a
 * rank that comes later is told at once that the job formed; without a secret, it stops
 * the job. A named job lets the port go: names keep jobs apart, and a launcher that
 * restarts a rank (its job forming again) must find the port free. */
static void keep_serving(coll_comm *c, const meeting *m)
{
    if (c->rank != 0 || m->cfg->job[0] || !(c->rdzv = cl_store_tcp_keep_server(m->plain)))
        return;
    cl_terms_formed(m->plain);
    if (!m->cfg->keyed)
        cl_store_server_watch(c->rdzv, "clash", late_rank, c);
}

static void leave_store(coll_comm *c, const meeting *m, int formed)
{
    if (!c || !c->store)
        return;
    for (int p = 0; m->owner && p < c->size; p++) {
        char key[64];
        snprintf(key, sizeof(key), "addr/%d", p);
        cl_store_remove(c->store, key);
        if (p % CARDS_PER_KEY == 0) {
            snprintf(key, sizeof(key), "cards/%d", p / CARDS_PER_KEY);
            cl_store_remove(c->store, key);
        }
    }
    if (m->owner) {
        cl_store_remove(c->store, "clash");
        cl_store_remove(c->store, "job");
    }
    if (m->terms_owner)
        cl_terms_remove(m->plain);
    if (formed)
        keep_serving(c, m);
    c->store->ops->close(c->store);
    c->store = NULL;
}

/* Once every rank has read the cards (the first lap proved it), rank 0 looks whether
 * a rank was refused its place meanwhile, closes the store (nobody else registers after
 * the look) and says so once around the ring: every rank of a disturbed job fails. */
static int verdict(coll_comm *c, const meeting *m)
{
    char what[64] = "";
    size_t n = 0;
    int status = COLL_OK;
    if (c->rank == 0 && c->store->ops->get(c->store, "clash", what, sizeof(what) - 1, &n) == COLL_OK) {
        what[n] = 0;
        status = clash(m, what);
    }
    leave_store(c, m, status == COLL_OK);
    int rc = cl_link_verdict(c, status);
    if (rc == COLL_EMISMATCH && c->rank != 0)
        clash(m, "rank 0 found a rank registered twice");
    if (rc != COLL_OK)
        cl_comm_fail(c, rc, "%s", cl_init_err[0] ? cl_init_err : "rank 0's verdict did not come");
    return rc;
}

/* With COLL_SECRET, the store's values carry a tag: nobody without it writes an address. */
static int seal_store(coll_comm *c)
{
    cl_store *sealed;
    int rc = cl_store_seal(c->store, c->key, &sealed);
    if (rc == COLL_OK)
        c->store = sealed;
    return rc;
}

/* Without a secret, anyone who reaches the rendezvous can join the job: say so once
 * when it is reachable from beyond this machine. */
static void warn_unkeyed(const cl_config *cfg, const cl_rdzv *rv)
{
    static atomic_int told;
    if (cfg->keyed || strcmp(rv->scheme, "tcp") != 0 || rv->loopback || atomic_exchange(&told, 1))
        return;
    cl_log(COLL_LOG_WARN,
           "rendezvous at tcp://%s without COLL_SECRET: whoever reaches it can "
           "join this job or read its data (see the README, Security)",
           rv->where);
}

/* Where rank 0 answers coll_status for the job (status.h): a tcp:// rendezvous's
 * address; for a caller's store (torch's), MASTER_ADDR:MASTER_PORT where the environment
 * has them, for the first communicator the process makes through one (torch's default
 * group: its ranks are the global ones). The store there listens on TCP, so the UDP
 * port is free. */
static void serve_status_at(coll_comm *c, const cl_rdzv *rv)
{
    static atomic_int first_store;
    cl_rdzv env;
    char err[300];
    if (strcmp(rv->scheme, "store") != 0) {
        if (c->rank == 0)
            cl_beat_public(c, rv);
    } else if (!atomic_exchange(&first_store, 1) && c->rank == 0 && getenv("MASTER_PORT") &&
               cl_rdzv_parse("env://", 0, 1, &env, err, sizeof(err)) == COLL_OK) {
        cl_beat_public(c, &env);
    }
}

/* How long a rank whose init failed waits for rank 0's store to say so: ranks of a job
 * start within seconds of each other, and its own error waits meanwhile (where every
 * rank fails, rank 0 too, the others return this much later). */
enum { TELL_MS = 5000 };

/* This rank's init failed before it met (its transport, its interface): it says so
 * beside rank 0's terms (cl_terms_fail), and the others' waits end at once with its
 * error instead of at their timeout saying it is missing. Rank 0 says nothing: a note
 * stands beside its terms, and a tcp rendezvous's store is its own. Closes store (a
 * caller's; NULL: this rank opens rv's for the note). */
static void tell_failure(const cl_config *cfg, const cl_rdzv *rv, cl_store *store, int code)
{
    int wait_ms = CL_MIN(cfg->timeout_ms, TELL_MS);
    char err[300];
    if (rv->rank != 0) /* its own error now, not after the wait for rank 0's store */
        cl_log(COLL_LOG_WARN, "rank %d: init failed: %s; telling the other ranks (up to %d ms)",
               rv->rank, cl_init_err, wait_ms);
    if (rv->rank != 0 &&
        (store || cl_store_open(rv, wait_ms, &store, err, sizeof(err)) == COLL_OK))
        cl_terms_fail(store, cfg, rv->rank, code, cl_init_err, cl_now_ms() + wait_ms);
    if (store)
        store->ops->close(store);
}

/* A rank that rank 0's tcp store served (it read the terms, which pin it) and whose
 * connection then ended while it waited on rank 0 (the terms' nonce, the job, the cards):
 * no server with those terms answers there now, so rank 0 failed, gave up or was killed,
 * and this rank says so at once instead of naming every rank missing at its timeout. A
 * healthy rank 0 closes its store only once every rank has passed the first token, after
 * its last read. Nothing is written anywhere: the look is one dial. */
static void say_rank0_gone(const meeting *m, int rc, int64_t deadline)
{
    if (rc == COLL_EPEER && !m->noted && m->plain &&
        cl_store_renew(m->plain, deadline) == COLL_EPEER)
        snprintf(cl_init_err, sizeof(cl_init_err),
                 "rendezvous: rank 0's store at %s://%.300s went away during init: rank 0 "
                 "failed, gave up or ended (its own error says why)",
                 m->rv->scheme, m->rv->where);
}

static const char INTERRUPTED[] =
    "init interrupted (coll_init_interrupt: Ctrl-C in Python calls it)";

/* Fault injection for the tests: COLL_FAULT_INIT=cards fails rank 0's init a second
 * after it published the cards (the others have read them and connect meanwhile), its
 * store closed as on any failure. */
static int fault_after_cards(const coll_comm *c)
{
    const char *f = getenv("COLL_FAULT_INIT");
    if (c->rank != 0 || !f || strcmp(f, "cards") != 0)
        return COLL_OK;
    cl_sleep_ms(1000);
    snprintf(cl_init_err, sizeof(cl_init_err),
             "a fault injected after the cards (COLL_FAULT_INIT)");
    return COLL_ESYS;
}

static int meet(coll_comm **out, const cl_config *cfg, const cl_rdzv *rv, cl_store *store)
{
    int64_t deadline = cl_now_ms() + cfg->timeout_ms;
    meeting m = {.cfg = cfg, .rv = rv};
    cl_card mine;
    cl_tr_listener *l = NULL;
    coll_comm *c = NULL;
    cl_card *cards = NULL;
    int rc = cl_comm_create(cfg, rv->rank, rv->size, 0, &c, &l, &mine);
    if (rc != COLL_OK) {
        if (!cl_init_err[0])
            snprintf(cl_init_err, sizeof(cl_init_err), "transport %s: %s", cfg->transport->name,
                     coll_strerror(rc));
        tell_failure(cfg, rv, store, rc);
        return rc;
    }
    c->store = store;
    if (!store && (rc = cl_store_open(rv, cfg->timeout_ms, &c->store, cl_init_err,
                                      sizeof(cl_init_err))) == CL_STORE_HELD) {
        tell_holder(cfg, rv);
        rc = COLL_ESYS;
    }
    if (rc != COLL_OK ||
        (m.plain = c->store, rc = agree_terms(c, &m, deadline)) ||
        (cfg->keyed && (rc = seal_store(c))) || (rc = agree_job(c, &m, deadline)) ||
        (rc = enroll(c, &m, &mine)))
        goto fail;
    if (!(cards = calloc((size_t)c->size, sizeof(cl_card)))) {
        rc = COLL_ENOMEM;
        goto fail;
    }
    if ((rc = gather_cards(c, &m, &mine, cards, deadline)) != COLL_OK ||
        (rc = fault_after_cards(c)) != COLL_OK)
        goto fail;
    serve_status_at(c, rv); /* coll_status asks the job where its ranks met */
    if ((rc = cl_comm_connect(c, l, cards)) != COLL_OK) {
        snprintf(cl_init_err, sizeof(cl_init_err), "%.500s", c->err);
        goto fail;
    }
    free(cards);
    if ((rc = verdict(c, &m)) != COLL_OK) {
        snprintf(cl_init_err, sizeof(cl_init_err), "%.500s", c->err);
        coll_destroy(c); /* its engine runs already */
        return rc;
    }
    if ((rc = cl_calibrate(c)) != COLL_OK) {
        snprintf(cl_init_err, sizeof(cl_init_err), "measuring the host link: %.480s", c->err);
        coll_destroy(c);
        return rc;
    }
    cl_calibrate_clock(c);
    *out = c;
    return COLL_OK;
fail:
    /* the others' waits end at once, naming this rank (rank 0's store stays up a while
     * for them to read it: a tcp:// store is its own, a file's terms go with it) */
    int told = cl_interrupted() && m.plain &&
               cl_terms_fail(m.plain, cfg, c->rank, COLL_EABORTED, INTERRUPTED, cl_now_ms()) ==
                   COLL_OK;
    if (!cl_init_err[0]) /* a store's EPEER says nothing; a failed connect said its own */
        say_rank0_gone(&m, rc, deadline);
    if (!cl_init_err[0])
        snprintf(cl_init_err, sizeof(cl_init_err), "rendezvous at %s://%.300s: %s", rv->scheme,
                 rv->where, coll_strerror(rc));
    free(cards);
    if (m.terms_owner && (m.noted || told))
        cl_sleep_ms(CL_TERMS_LINGER_MS); /* the others read the note while the store is up */
    leave_store(c, &m, 0);
    cl_comm_free(c);
    return rc;
}

/* Every init meets here, marked for coll_init_interrupt on its thread: one interrupted
 * fails whatever it had come to (a communicator formed meanwhile is destroyed, as its
 * peers learn at their next operation), so the caller's answer does not depend on
 * where the interrupt found it. */
int cl_init_meet(coll_comm **out, const cl_config *cfg, const cl_rdzv *rv, cl_store *store)
{
    int armed = cl_interrupt_arm();
    int rc = cl_init_end(meet(out, cfg, rv, store), out);
    cl_interrupt_disarm(armed);
    return rc;
}

int cl_init_end(int rc, coll_comm **out)
{
    if (!cl_interrupted())
        return rc;
    if (rc == COLL_OK)
        coll_destroy(*out);
    *out = NULL;
    snprintf(cl_init_err, sizeof(cl_init_err), "%s", INTERRUPTED);
    return COLL_EABORTED;
}

int coll_init_interrupt(void)
{
    cl_interrupt_raise();
    return COLL_OK;
}

int coll_init(coll_comm **out, const char *url, int rank, int size, const coll_config *cfg)
{
    cl_init_err[0] = 0;
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    cl_rdzv rv;
    cl_config conf;
    int rc = cl_rdzv_parse(url, rank, size, &rv, cl_init_err, sizeof(cl_init_err));
    if (rc == COLL_OK)
        rc = cl_config_resolve(cfg, &rv, &conf, cl_init_err, sizeof(cl_init_err));
    if (rc == COLL_OK) {
        warn_unkeyed(&conf, &rv);
        rc = cl_init_meet(out, &conf, &rv, NULL);
    }
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_init: %s", cl_init_err);
    return rc;
}

int coll_init_store(coll_comm **out, const coll_store_ops *ops, void *ctx, int rank, int size,
                    const coll_config *cfg)
{
    cl_init_err[0] = 0;
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    cl_rdzv rv;
    cl_config conf;
    cl_store *s = NULL;
    int rc = COLL_EINVAL;
    if (!ops || !ops->set || !ops->get)
        snprintf(cl_init_err, sizeof(cl_init_err), "the store's ops, set or get is NULL");
    else if (size < 1 || rank < 0 || rank >= size)
        snprintf(cl_init_err, sizeof(cl_init_err), "rank %d is not within a world of %d", rank,
                 size);
    else if ((rc = cl_rdzv_caller(rank, size, &rv, cl_init_err, sizeof(cl_init_err))) == COLL_OK)
        rc = cl_config_resolve(cfg, &rv, &conf, cl_init_err, sizeof(cl_init_err));
    if (rc == COLL_OK)
        rc = cl_store_caller_open(ops, ctx, &s);
    if (rc == COLL_OK) {
        rc = cl_init_meet(out, &conf, &rv, s);
    }
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_init_store: %s", cl_init_err);
    return rc;
}

