/* Communicator life cycle: create (transport, listener, lifeline), connect, split,
 * abort, destroy; the rendezvous of coll_init is init.c. Every acquire is released on
 * every exit through cl_comm_free. */
#include "core/comm.h"

#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "core/beat.h"
#include "core/config.h"
#include "core/connect.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/family.h"
#include "core/lifecycle.h"
#include "core/link.h"
#include "core/p2p.h"
#include "core/record.h"
#include "core/req.h"
#include "core/status.h"
#include "rdzv/tcp_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Everything c holds; its transport only when it is its own (not a family member's). */
static void free_all(coll_comm *c, int own_transport)
{
    cl_status_delist(c); /* before all: another rank's status answer may be reading c */
    cl_rec_close(c); /* first: a signal's dump may be reading c */
    cl_beat_close(c); /* its thread may be failing c */
    if (c->rdzv) /* first: its thread may be failing c */
        cl_store_server_stop(c->rdzv);
    if (c->grow) /* rank 0's, for the grow it made an id for (grow.c) */
        cl_store_server_stop(c->grow);
    if (c->listener && own_transport)
        c->tr->close_listener(c->listener);
    cl_life_close(&c->life);
    free(c->lives);
    free(c->failed);
    cl_topo_free(&c->topo);
    if (c->ctx && own_transport)
        c->tr->ctx_destroy(c->ctx);
    if (c->store)
        c->store->ops->close(c->store);
    for (int ch = 0; ch < CL_CHANNELS; ch++) {
        for (int d = 0; d < 2; d++)
            free(c->conns[ch][d]);
        free(c->share[ch]); /* its requests went with the transport's context */
    }
    free(c->gone);
    free(c->handles);
    free(c->nonces);
    free(c->to_root);
    free(c->p2p_seq[0]);
    free(c->p2p_seq[1]);
    cl_buf_free(&c->scratch);
    cl_buf_free(&c->staging);
    cl_notifier_destroy(&c->notifier);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->link_mu);
    free(c);
}

/* A family's root goes with its last member: until then they use its links. */
void cl_comm_free(coll_comm *c)
{
    if (!c->fam) {
        free_all(c, !c->to_root);
        return;
    }
    coll_comm *root = cl_family_root(c), *last;
    cl_p2p_forget(c);
    if (!cl_family_leave(c, &last))
        return;
    free_all(c, c == root);
    if (last)
        free_all(last, 1);
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
                         .wire = c->wire,
                         .link = {c, ch, {c->conns[ch][0], c->conns[ch][1]}, open_link,
                                  p2p_progress},
                         .notifier = c->note,
                         .timeout_ms = c->op_timeout_ms,
                         .segment_bytes = c->segment_bytes,
                         .scratch = &c->scratch,
                         .staging = &c->staging,
                         .wire_tx = &c->ran.wire_tx,
                         .wire_rx = &c->ran.wire_rx,
                         .quick = &c->ran.quick,
                         .aborted = &c->aborted,
                         .spin = &c->spin,
                         .fail = cl_comm_hooks(c),
                         .stall = cl_rec_stall(c),
                         .running = cl_rec_running(c)};
}

/* c's transport context and listener (*l); a shared split has none of its own. */
static int open_transport(coll_comm *c, const cl_config *cfg, cl_tr_listener **l, cl_card *mine)
{
    char why[256] = "";
    cl_tr_config tc = {.device = cfg->device, .timeout_ms = cfg->timeout_ms,
                       .notifier = &c->notifier, .err = why, .errlen = sizeof(why),
                       .vet = cl_link_vet, .vet_arg = c, .family = cfg->family,
                       .key = cfg->keyed ? cfg->key : NULL};
    int rc = c->tr->ctx_create(&tc, &c->ctx);
    if (rc != COLL_OK) {
        cl_comm_init_error("transport %s: %s", c->tr->name, why[0] ? why : coll_strerror(rc));
        return rc;
    }
    if ((rc = c->tr->listen(c->ctx, mine->handle, l)) != COLL_OK)
        return rc;
    c->listener = *l;
    return COLL_OK;
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
    c->op_timeout_ms = cfg->op_timeout_ms;
    c->segment_bytes = cfg->segment_bytes;
    c->spin.spin_us = cfg->spin_us;
    atomic_init(&c->spin.boost, 1);
    c->codec = cfg->codec;
    c->topo = (cl_topo){.plain = &c->algo[CL_CH_COLL],
                        .net_alpha_s = cfg->net_alpha_s,
                        .net_beta_s = cfg->net_beta_s};
    c->net_given = cfg->net_given;
    snprintf(c->force, sizeof(c->force), "%s", cfg->algo ? cfg->algo : "");
    c->keyed = cfg->keyed;
    memcpy(c->key, cfg->key, sizeof(c->key));
    c->tr = cfg->transport;
    snprintf(c->device, sizeof(c->device), "%s", cfg->device ? cfg->device : "");
    c->family = cfg->family;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->link_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    cl_notifier_init(&c->notifier);
    c->note = &c->notifier;
    c->split_share = cfg->share;
    c->global = -1;
    int rc = COLL_ENOMEM;
    for (int ch = 0; ch < CL_CHANNELS; ch++) {
        for (int d = 0; d < 2; d++)
            if (!(c->conns[ch][d] = calloc((size_t)size, sizeof(cl_tr_conn *))))
                goto fail;
        if (l && c->tr->duplex && !(c->share[ch] = calloc((size_t)size, sizeof(struct cl_share))))
            goto fail;
    }
    c->p2p_seq[0] = calloc((size_t)size, sizeof(uint32_t));
    c->p2p_seq[1] = calloc((size_t)size, sizeof(uint32_t));
    c->lives = calloc((size_t)size, CL_LIFE_ADDR);
    c->failed = calloc((size_t)size, 1);
    c->gone = calloc((size_t)size, sizeof(struct cl_gone));
    if (!c->p2p_seq[0] || !c->p2p_seq[1] || !c->lives || !c->failed || !c->gone)
        goto fail;
    rc = COLL_ESYS;
    if (cl_auth_nonce(c->nonce, sizeof(c->nonce)) != 0)
        goto fail;
    memcpy(mine->nonce, c->nonce, sizeof(c->nonce));
    if ((rc = cl_rec_open(c, &cfg->rec, cfg->job)) != COLL_OK)
        goto fail;
    char why[400];
    if ((rc = cl_life_open(cfg->device, cfg->family, &c->life, why, sizeof(why))) != COLL_OK) {
        cl_comm_init_error("lifeline: %s", why);
        goto fail;
    }
    snprintf(mine->life, sizeof(mine->life), "%s", c->life.addr);
    if (l && (rc = cl_beat_open(c, &mine->beat, &mine->status)) != COLL_OK)
        goto fail;
    if (l && (rc = open_transport(c, cfg, l, mine)) != COLL_OK)
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

void cl_comm_place(coll_comm *c, int rank, int size, uint64_t id)
{
    c->rank = rank;
    c->size = size;
    c->id = id;
}

/* The topology from the cards' hosts. */
static int topo_order(coll_comm *c, const cl_card *cards)
{
    uint64_t *hosts = malloc((size_t)c->size * sizeof(*hosts));
    if (!hosts)
        return COLL_ENOMEM;
    for (int p = 0; p < c->size; p++)
        hosts[p] = cards[p].host;
    int rc = cl_topo_order(&c->topo, hosts);
    free(hosts);
    return rc;
}

int cl_comm_connect(coll_comm *c, cl_tr_listener *l, const cl_card *cards)
{
    for (int ch = 0; ch < CL_CHANNELS; ch++)
        c->algo[ch] = algo_ctx(c, ch);
    for (int p = 0; p < c->size; p++) {
        memcpy(c->lives[p], cards[p].life, CL_LIFE_ADDR);
        c->lives[p][CL_LIFE_ADDR - 1] = 0;
    }
    count_local(c, cards);
    fd_room(c);
    int rc = topo_order(c, cards);
    if (rc == COLL_OK)
        rc = cl_beat_start(c, cards);
    if (rc == COLL_OK) {
        cl_topo_contexts(&c->topo);
        rc = cl_link_start(c, l, cards);
    }
    if (rc == COLL_OK)
        rc = cl_engine_start(c);
    return rc;
}

/* ---- split ----------------------------------------------------------------------- */

/* What each rank says in a split's one exchange: its color and key, and (a member) the
 * card of its rank in the new communicator, made before anyone knows who the members
 * are. */
typedef struct {
    int color, key;
    cl_card card;
} split_word;

typedef struct {
    int key, rank;
} member;

static int by_key(const void *a, const void *b)
{
    const member *x = a, *y = b;
    return x->key != y->key ? (x->key > y->key) - (x->key < y->key) : x->rank - y->rank;
}

/* The ranks sharing `color`, ordered by (key, old rank); returns how many. */
static int members_of(const split_word *all, int n, int color, member *out)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (all[i].color == color)
            out[m++] = (member){all[i].key, i};
    qsort(out, (size_t)m, sizeof(*out), by_key);
    return m;
}

cl_config cl_comm_config(const coll_comm *c)
{
    cl_config cfg = {.transport = c->tr,
                     .device = c->device[0] ? c->device : NULL,
                     .family = c->family,
                     .timeout_ms = c->timeout_ms,
                     .op_timeout_ms = c->op_timeout_ms,
                     .segment_bytes = c->segment_bytes,
                     .keyed = c->keyed,
                     .codec = c->codec,
                     .spin_us = c->spin.spin_us,
                     .algo = c->force[0] ? c->force : NULL,
                     .net_alpha_s = c->topo.net_alpha_s,
                     .net_beta_s = c->topo.net_beta_s,
                     .net_given = 1,
                     .share = c->split_share,
                     .rec = cl_rec_config_of(c)};
    memcpy(cfg.key, c->key, sizeof(cfg.key));
    return cfg;
}

/* A shared split's c uses its family root's transport and links; mem: its members. */
static int share_links(coll_comm *parent, coll_comm *c, const member *mem)
{
    coll_comm *root = cl_family_root(parent);
    if (!(c->to_root = malloc((size_t)c->size * sizeof(int))))
        return COLL_ENOMEM;
    for (int i = 0; i < c->size; i++)
        c->to_root[i] = parent->to_root ? parent->to_root[mem[i].rank] : mem[i].rank;
    c->tr = root->tr;
    c->ctx = root->ctx;
    c->note = root->note;
    /* Its mark on the wire: never the root's 0, so no member takes another's message. */
    c->wire = (uint16_t)(c->id ^ c->id >> 16 ^ c->id >> 32 ^ c->id >> 48);
    c->wire += c->wire == 0;
    return cl_family_join(parent, c);
}

/* Places c (made for up to n ranks) among the members of its color and connects it. */
static int split_connect(coll_comm *parent, coll_comm *c, cl_tr_listener *l,
                         const split_word *all, int color)
{
    int n = parent->size, m, me = 0;
    member *mem = calloc((size_t)n, sizeof(member));
    cl_card *cards = calloc((size_t)n, sizeof(cl_card));
    int rc = mem && cards ? COLL_OK : COLL_ENOMEM;
    if (rc == COLL_OK) {
        m = members_of(all, n, color, mem);
        for (int i = 0; i < m; i++) {
            cards[i] = all[mem[i].rank].card;
            me = mem[i].rank == parent->rank ? i : me;
        }
        uint64_t seed[3] = {parent->id, parent->splits, (uint64_t)(int64_t)color};
        cl_comm_place(c, me, m, cl_hash(seed, sizeof(seed), parent->job));
        c->job = parent->job;
        if (!l)
            rc = share_links(parent, c, mem);
        if (rc == COLL_OK && (rc = cl_comm_connect(c, l, cards)) != COLL_OK)
            cl_comm_init_error("split: %.480s", c->err);
    }
    free(mem);
    free(cards);
    return rc;
}

int coll_split(coll_comm *comm, int color, int key, coll_comm **out)
{
    if (!comm || !out)
        return COLL_EINVAL;
    *out = NULL;
    int n = comm->size;
    split_word mine;
    memset(&mine, 0, sizeof(mine)); /* padding too: every byte goes on the wire */
    mine.color = color < 0 ? -1 : color;
    mine.key = key;
    split_word *all = calloc((size_t)n, sizeof(split_word));
    coll_comm *c = NULL;
    cl_tr_listener *l = NULL;
    cl_config cfg = cl_comm_config(comm);
    int rc = all ? COLL_OK : cl_comm_no_memory(comm, __func__);
    /* A member's communicator exists before the exchange, sized for every rank: who
     * else is in it, and where this rank stands, is what the exchange tells. */
    if (rc == COLL_OK && mine.color >= 0)
        rc = cl_comm_create(&cfg, 0, n, 0, &c, comm->split_share ? NULL : &l, &mine.card);
    /* Everyone takes part in the exchange, even on failure, so nobody is left waiting. */
    int rc2 = all ? coll_allgather(comm, &mine, all, sizeof(mine), COLL_U8) : rc;
    rc = rc != COLL_OK ? rc : rc2;
    comm->splits++;
    if (rc == COLL_OK && c)
        rc = split_connect(comm, c, l, all, mine.color);
    free(all);
    if (rc != COLL_OK && c) {
        cl_comm_free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

/* ---- the rest of the life cycle -------------------------------------------------- */

int coll_abort(coll_comm *comm)
{
    if (!comm)
        return COLL_EINVAL;
    cl_comm_abort(comm);
    return COLL_OK;
}

int coll_destroy(coll_comm *comm)
{
    if (!comm)
        return COLL_OK;
    if (cl_comm_settle(comm) != COLL_OK) {
        cl_log(COLL_LOG_ERROR, "coll_destroy: a thread stayed inside an operation on the "
                               "communicator for %d ms after it was aborted: not freed",
               comm->timeout_ms);
        return COLL_ETIMEDOUT;
    }
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
