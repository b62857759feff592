/* Communicator life cycle: init (rendezvous, listen, publish, connect), split, abort,
 * destroy. Every acquire is released on every exit through cl_comm_free. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "core/config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static __thread char init_err[512];

void cl_comm_init_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_err, sizeof(init_err), fmt, ap);
    va_end(ap);
}

void cl_comm_free(coll_comm *c)
{
    if (c->listener)
        c->tr->close_listener(c->listener);
    cl_life_close(&c->life);
    free(c->lives);
    free(c->failed);
    cl_topo_free(&c->topo);
    if (c->ctx)
        c->tr->ctx_destroy(c->ctx);
    if (c->store)
        c->store->ops->close(c->store);
    for (int ch = 0; ch < CL_CHANNELS; ch++)
        for (int d = 0; d < 2; d++)
            free(c->conns[ch][d]);
    free(c->handles);
    free(c->nonces);
    free(c->p2p_seq[0]);
    free(c->p2p_seq[1]);
    cl_buf_free(&c->scratch);
    cl_buf_free(&c->staging);
    cl_notifier_destroy(&c->notifier);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->link_mu);
    pthread_mutex_destroy(&c->p2p_mu);
    free(c);
}

static int open_link(void *owner, int ch, int dir, int rank)
{
    return cl_link_open(owner, ch, dir, rank);
}

static int p2p_progress(void *owner)
{
    return cl_p2p_progress(owner);
}

static cl_algo_ctx algo_ctx(coll_comm *c, int ch)
{
    return (cl_algo_ctx){.rank = c->rank,
                         .size = c->size,
                         .tr = c->tr,
                         .tctx = c->ctx,
                         .link = {c, ch, {c->conns[ch][0], c->conns[ch][1]}, open_link,
                                  p2p_progress},
                         .notifier = &c->notifier,
                         .timeout_ms = c->timeout_ms,
                         .segment_bytes = c->segment_bytes,
                         .scratch = &c->scratch,
                         .staging = &c->staging,
                         .wire_tx = &c->wire_tx,
                         .wire_rx = &c->wire_rx,
                         .aborted = &c->aborted,
                         .spin = &c->spin,
                         .fail = cl_comm_hooks(c)};
}

int cl_comm_create(const cl_config *cfg, int rank, int size, uint64_t id, coll_comm **out,
                   cl_tr_listener **l, cl_card *mine)
{
    coll_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return COLL_ENOMEM;
    c->life.fd = -1;
    memset(mine, 0, sizeof(*mine));
    mine->machine = cl_machine_id();
    mine->host = cl_host_id();
    c->rank = rank;
    c->size = size;
    c->id = id;
    c->timeout_ms = cfg->timeout_ms;
    c->segment_bytes = cfg->segment_bytes;
    c->spin.spin_us = cfg->spin_us;
    atomic_init(&c->spin.boost, 1);
    c->codec = cfg->codec;
    c->net_alpha_s = cfg->net_alpha_s;
    c->net_beta_s = cfg->net_beta_s;
    snprintf(c->force, sizeof(c->force), "%s", cfg->algo ? cfg->algo : "");
    c->keyed = cfg->keyed;
    memcpy(c->key, cfg->key, sizeof(c->key));
    c->tr = cfg->transport;
    snprintf(c->device, sizeof(c->device), "%s", cfg->device ? cfg->device : "");
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->link_mu, NULL);
    pthread_mutex_init(&c->p2p_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    cl_notifier_init(&c->notifier);
    int rc = COLL_ENOMEM;
    for (int ch = 0; ch < CL_CHANNELS; ch++)
        for (int d = 0; d < 2; d++)
            if (!(c->conns[ch][d] = calloc((size_t)size, sizeof(cl_tr_conn *))))
                goto fail;
    c->p2p_seq[0] = calloc((size_t)size, sizeof(uint32_t));
    c->p2p_seq[1] = calloc((size_t)size, sizeof(uint32_t));
    c->lives = calloc((size_t)size, CL_LIFE_ADDR);
    c->failed = calloc((size_t)size, 1);
    if (!c->p2p_seq[0] || !c->p2p_seq[1] || !c->lives || !c->failed)
        goto fail;
    rc = COLL_ESYS;
    if (cl_auth_nonce(c->nonce, sizeof(c->nonce)) != 0)
        goto fail;
    memcpy(mine->nonce, c->nonce, sizeof(c->nonce));
    if ((rc = cl_life_open(cfg->device, &c->life)) != COLL_OK)
        goto fail;
    snprintf(mine->life, sizeof(mine->life), "%s", c->life.addr);
    cl_tr_config tc = {cfg->device, cfg->timeout_ms, &c->notifier};
    if ((rc = c->tr->ctx_create(&tc, &c->ctx)) != COLL_OK)
        goto fail;
    for (int ch = 0; ch < CL_CHANNELS; ch++)
        c->algo[ch] = algo_ctx(c, ch);
    if ((rc = c->tr->listen(c->ctx, mine->handle, l)) != COLL_OK)
        goto fail;
    *out = c;
    return COLL_OK;
fail:
    cl_comm_free(c);
    return rc;
}

/* Ranks on one machine share its CPUs: more of them than CPUs, and pollers must yield. */
static void count_local(coll_comm *c, const cl_card *cards)
{
    c->local = 0;
    for (int p = 0; p < c->size; p++)
        c->local += cards[p].machine == cards[c->rank].machine;
    c->spin.crowded = c->local > sysconf(_SC_NPROCESSORS_ONLN);
}

/* Links are opened as they are used, and some collectives (all-to-all, direct
 * all-gather) use every peer: per peer a socket per channel and direction and (shm) the
 * peer's eventfd with each, 8 descriptors, more than the usual soft limit of 1024 allows
 * from 128 ranks on. */
static void fd_room(coll_comm *c)
{
    long need = 8L * (c->size - 1) + 64, limit;
    if (cl_fd_room(need, &limit) != 0)
        cl_log(COLL_LOG_WARN,
               "rank %d: %d ranks may need %ld more open descriptors and the "
               "limit is %ld: connections may fail (raise it: ulimit -n)",
               c->rank, c->size, need, limit);
}

int cl_comm_connect(coll_comm *c, cl_tr_listener *l, const cl_card *cards)
{
    for (int p = 0; p < c->size; p++) {
        memcpy(c->lives[p], cards[p].life, CL_LIFE_ADDR);
        c->lives[p][CL_LIFE_ADDR - 1] = 0;
    }
    count_local(c, cards);
    fd_room(c);
    int rc = cl_topo_order(c, cards);
    if (rc == COLL_OK) {
        cl_topo_contexts(c);
        rc = cl_link_start(c, l, cards);
    } else {
        c->tr->close_listener(l);
    }
    if (rc == COLL_OK)
        rc = cl_engine_start(c);
    return rc;
}

/* One look for every card not yet read, waiting until `until` for the first missing
 * one only; the ranks still missing go into list. Returns how many, or a COLL_E* code. */
static int sweep_cards(coll_comm *c, cl_card *cards, uint8_t *have, int64_t until, char *list,
                       size_t len)
{
    int missing = 0;
    list[0] = 0;
    for (int p = 0; p < c->size; p++) {
        if (have[p])
            continue;
        char key[64];
        size_t n = 0, at = strlen(list);
        snprintf(key, sizeof(key), "addr/%d", p);
        int r = cl_store_wait(c->store, key, &cards[p], sizeof(cl_card), &n,
                              missing ? cl_now_ms() : until);
        /* EPEER: rank 0 gave up first and its store went away; same story. */
        if (r == COLL_ETIMEDOUT || r == COLL_EPEER) {
            snprintf(list + at, len - at, "%s%d", missing++ ? "," : "", p);
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
enum { CARDS_PER_KEY = 256 };

static int card_values(coll_comm *c, cl_card *cards, int publish, int64_t deadline)
{
    int rc = COLL_OK;
    for (int k = 0; rc == COLL_OK && k * CARDS_PER_KEY < c->size; k++) {
        char key[32];
        size_t m = (size_t)CL_MIN(CARDS_PER_KEY, c->size - k * CARDS_PER_KEY), len = 0;
        cl_card *at = cards + (size_t)k * CARDS_PER_KEY;
        snprintf(key, sizeof(key), "cards/%d", k);
        rc = publish ? c->store->ops->set(c->store, key, at, m * sizeof(cl_card))
                     : cl_store_wait(c->store, key, at, m * sizeof(cl_card), &len, deadline);
        if (rc == COLL_OK && !publish && len != m * sizeof(cl_card))
            rc = COLL_EPROTO;
    }
    return rc;
}

/* Every rank's card: rank 0 reads them one by one, then publishes them (card_values);
 * the others read what it published. While some are missing, rank 0 says every few
 * seconds (at info) who is here and who is not. Near the deadline (while rank 0's store
 * still answers) the others stop waiting for its values and read the cards themselves,
 * so every rank's timeout names who is missing. */
static int gather_cards(coll_comm *c, cl_card *cards, int64_t deadline)
{
    uint8_t *have = calloc((size_t)c->size, 1);
    char list[256];
    int64_t start = cl_now_ms();
    int missing = have ? 1 : COLL_ENOMEM;
    if (have && c->rank != 0) {
        int rc = card_values(c, cards, 0, deadline - CL_MIN(c->timeout_ms / 4, 2000));
        missing = rc == COLL_ETIMEDOUT || rc == COLL_EPEER ? 1 : rc;
    }
    while (missing > 0) {
        missing =
            sweep_cards(c, cards, have, CL_MIN(deadline, cl_now_ms() + 5000), list, sizeof(list));
        if (missing <= 0 || cl_now_ms() >= deadline)
            break;
        cl_log(COLL_LOG_INFO,
               "rank %d: rendezvous: %d/%d ranks here after %lld ms; waiting "
               "for rank(s) %s",
               c->rank, c->size - missing, c->size, (long long)(cl_now_ms() - start), list);
    }
    free(have);
    if (missing > 0)
        snprintf(init_err, sizeof(init_err),
                 "rendezvous: %d/%d ranks joined after %d ms: missing rank(s) %s",
                 c->size - missing, c->size, c->timeout_ms, list);
    if (missing == 0 && c->rank == 0)
        missing = card_values(c, cards, 1, deadline);
    return missing > 0 ? COLL_ETIMEDOUT : missing;
}

/* Rank 0 draws a job id and publishes it: two jobs that share a store never connect. */
static int agree_job(coll_comm *c, int64_t deadline)
{
    size_t len = 0;
    if (c->rank == 0) {
        uint64_t t = (uint64_t)cl_now_us();
        c->job = cl_hash(&t, sizeof(t), (uint64_t)getpid());
        return c->store->ops->set(c->store, "job", &c->job, sizeof(c->job));
    }
    return cl_store_wait(c->store, "job", &c->job, sizeof(c->job), &len, deadline);
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
    int local = strncmp(rv->where, "127.", 4) == 0 || strncmp(rv->where, "localhost:", 10) == 0;
    if (cfg->keyed || strcmp(rv->scheme, "tcp") != 0 || local || atomic_exchange(&told, 1))
        return;
    cl_log(COLL_LOG_WARN,
           "rendezvous at tcp://%s without COLL_SECRET: whoever reaches it can "
           "join this job or read its data (see the README, Security)",
           rv->where);
}

/* store: the caller's, or NULL to open the one rv names; the communicator owns it. */
static int init_comm(coll_comm **out, const cl_config *cfg, const cl_rdzv *rv, cl_store *store)
{
    int64_t deadline = cl_now_ms() + cfg->timeout_ms;
    cl_card mine;
    cl_tr_listener *l = NULL;
    coll_comm *c = NULL;
    cl_card *cards = NULL;
    int rc = cl_comm_create(cfg, rv->rank, rv->size, 0, &c, &l, &mine);
    if (rc != COLL_OK) {
        snprintf(init_err, sizeof(init_err), "transport %s: %s", cfg->transport->name,
                 coll_strerror(rc));
        if (store)
            store->ops->close(store);
        return rc;
    }
    char key[64];
    snprintf(key, sizeof(key), "addr/%d", rv->rank);
    c->store = store;
    if ((!store &&
         (rc = cl_store_open(rv, cfg->timeout_ms, &c->store, init_err, sizeof(init_err)))) ||
        (cfg->keyed && (rc = seal_store(c))) || (rc = agree_job(c, deadline)) ||
        (rc = c->store->ops->set(c->store, key, &mine, sizeof(mine))))
        goto fail;
    if (!(cards = calloc((size_t)c->size, sizeof(cl_card)))) {
        rc = COLL_ENOMEM;
        goto fail;
    }
    if ((rc = gather_cards(c, cards, deadline)) != COLL_OK)
        goto fail;
    if ((rc = cl_comm_connect(c, l, cards)) != COLL_OK) {
        snprintf(init_err, sizeof(init_err), "%.500s", c->err);
        goto fail;
    }
    free(cards);
    /* Every rank has read every card once this rank's links all carried a first
     * message: the store has served its purpose (rank 0's server closes now). */
    c->store->ops->close(c->store);
    c->store = NULL;
    *out = c;
    return COLL_OK;
fail:
    if (!init_err[0])
        snprintf(init_err, sizeof(init_err), "rendezvous at %s://%.300s: %s", rv->scheme, rv->where,
                 coll_strerror(rc));
    free(cards);
    cl_comm_free(c);
    return rc;
}

int coll_init(coll_comm **out, const char *url, int rank, int size, const coll_config *cfg)
{
    init_err[0] = 0;
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    cl_rdzv rv;
    cl_config conf;
    int rc = cl_rdzv_parse(url, rank, size, &rv, init_err, sizeof(init_err));
    if (rc == COLL_OK)
        rc = cl_config_resolve(cfg, &rv, &conf, init_err, sizeof(init_err));
    if (rc == COLL_OK) {
        warn_unkeyed(&conf, &rv);
        rc = init_comm(out, &conf, &rv, NULL);
    }
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_init: %s", init_err);
    return rc;
}

int coll_init_store(coll_comm **out, const coll_store_ops *ops, void *ctx, int rank, int size,
                    const coll_config *cfg)
{
    init_err[0] = 0;
    if (!out)
        return COLL_EINVAL;
    *out = NULL;
    cl_rdzv rv = {.scheme = "store", .where = "caller", .rank = rank, .size = size};
    cl_config conf;
    cl_store *s = NULL;
    int rc = COLL_EINVAL;
    if (!ops || !ops->set || !ops->get)
        snprintf(init_err, sizeof(init_err), "the store's ops, set or get is NULL");
    else if (size < 1 || rank < 0 || rank >= size)
        snprintf(init_err, sizeof(init_err), "rank %d is not within a world of %d", rank, size);
    else
        rc = cl_config_resolve(cfg, &rv, &conf, init_err, sizeof(init_err));
    if (rc == COLL_OK)
        rc = cl_store_caller_open(ops, ctx, &s);
    if (rc == COLL_OK) {
        rc = init_comm(out, &conf, &rv, s);
    }
    if (rc != COLL_OK)
        cl_log(COLL_LOG_ERROR, "coll_init_store: %s", init_err);
    return rc;
}

const char *coll_last_error(const coll_comm *comm)
{
    return comm ? comm->err : init_err;
}

/* ---- split ----------------------------------------------------------------------- */

typedef struct {
    int color, key, rank;
} member;

static int by_key(const void *a, const void *b)
{
    const member *x = a, *y = b;
    return x->key != y->key ? (x->key > y->key) - (x->key < y->key) : x->rank - y->rank;
}

/* The members sharing `color`, ordered by (key, old rank); returns how many. */
static int members_of(const int *ck, int n, int color, member *out)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ck[2 * i] == color)
            out[m++] = (member){color, ck[2 * i + 1], i};
    qsort(out, (size_t)m, sizeof(*out), by_key);
    return m;
}

cl_config cl_comm_config(const coll_comm *c)
{
    cl_config cfg = {.transport = c->tr,
                     .device = c->device[0] ? c->device : NULL,
                     .timeout_ms = c->timeout_ms,
                     .segment_bytes = c->segment_bytes,
                     .keyed = c->keyed,
                     .codec = c->codec,
                     .spin_us = c->spin.spin_us,
                     .algo = c->force[0] ? c->force : NULL,
                     .net_alpha_s = c->net_alpha_s,
                     .net_beta_s = c->net_beta_s};
    memcpy(cfg.key, c->key, sizeof(cfg.key));
    return cfg;
}

static int split_connect(coll_comm *parent, const member *mem, int m, int newrank, int color,
                         coll_comm **out)
{
    cl_config cfg = cl_comm_config(parent);
    cl_card me = {0};
    cl_card *all = calloc((size_t)parent->size, sizeof(cl_card));
    cl_card *mine = calloc((size_t)(m ? m : 1), sizeof(cl_card));
    uint64_t seed[3] = {parent->id, parent->splits, (uint64_t)(int64_t)color};
    uint64_t id = cl_hash(seed, sizeof(seed), parent->job);
    coll_comm *c = NULL;
    cl_tr_listener *l = NULL;
    int rc = all && mine ? COLL_OK : COLL_ENOMEM;
    if (rc == COLL_OK && newrank >= 0)
        rc = cl_comm_create(&cfg, newrank, m, id, &c, &l, &me);
    /* Everyone takes part in the exchange, even on failure, so nobody is left waiting. */
    int rc2 = coll_allgather(parent, &me, all, sizeof(cl_card), COLL_U8);
    rc = rc != COLL_OK ? rc : rc2;
    if (rc == COLL_OK && c) {
        for (int i = 0; i < m; i++)
            mine[i] = all[mem[i].rank];
        c->job = parent->job;
        rc = cl_comm_connect(c, l, mine);
        if (rc != COLL_OK)
            snprintf(init_err, sizeof(init_err), "split: %.480s", c->err);
    }
    free(all);
    free(mine);
    if (rc != COLL_OK && c) {
        cl_comm_free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

int coll_split(coll_comm *comm, int color, int key, coll_comm **out)
{
    if (!comm || !out)
        return COLL_EINVAL;
    *out = NULL;
    int n = comm->size, ck[2] = {color < 0 ? -1 : color, key};
    int *all = calloc((size_t)n * 2, sizeof(int));
    member *mem = calloc((size_t)n, sizeof(member));
    int rc = all && mem ? coll_allgather(comm, ck, all, 2, COLL_I32) : COLL_ENOMEM;
    int m = 0, newrank = -1;
    if (rc == COLL_OK && color >= 0) {
        m = members_of(all, n, color, mem);
        for (int i = 0; i < m; i++)
            if (mem[i].rank == comm->rank)
                newrank = i;
    }
    comm->splits++;
    if (rc == COLL_OK)
        rc = split_connect(comm, mem, m, newrank, color, out);
    free(all);
    free(mem);
    return rc;
}

/* ---- the rest of the life cycle -------------------------------------------------- */

int coll_abort(coll_comm *comm)
{
    if (!comm)
        return COLL_EINVAL;
    atomic_store(&comm->aborted, 1);
    cl_comm_fail(comm, COLL_EABORTED, "rank %d: aborted by the application", comm->rank);
    return COLL_OK;
}

int coll_destroy(coll_comm *comm)
{
    if (!comm)
        return COLL_OK;
    pthread_mutex_lock(&comm->mu);
    int pending = comm->qhead != NULL;
    pthread_mutex_unlock(&comm->mu);
    if (pending)
        coll_abort(comm);
    cl_engine_stop(comm);
    cl_comm_free(comm);
    return COLL_OK;
}

int coll_rank(const coll_comm *comm)
{
    return comm ? comm->rank : COLL_EINVAL;
}

int coll_size(const coll_comm *comm)
{
    return comm ? comm->size : COLL_EINVAL;
}
