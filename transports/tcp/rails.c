/* The rails transport: tcp over every usable interface at once (issue 55). A context
 * holds one tcp context per interface (a rail); a connection holds one tcp connection
 * per rail to the same peer.
 *
 * Where striping lives, and why here. It lives below the algorithms, inside the socket
 * transport's family (design (a) of the issue), not above it as one link per rail with
 * segments dealt out by the algorithms (design (b)): (b) would make every algorithm, the
 * links' sharing and the cost model learn about rails, and a rail that dies would fail a
 * link in the middle of an operation whose other segments went on other links, so the
 * recovery would have to live in every algorithm. Here the contract (transport.h) does
 * not change: one cl_tr_conn, messages in posting order.
 *
 * The wire. Rail 0 carries every message's header (the caller's: hdr.len is the whole
 * payload) and the first part of its payload; a message of STRIPE_MIN bytes or more puts
 * the rest on rails 1.. in parts sized by each rail's weight (rails_cut.c: whole ALIGN
 * units, rail 0 keeps the remainder), each part a message of its own on its rail with a
 * rails header (len: the part). The sender weighs the rails by their speeds, per
 * connection: as its parts on a rail end, the kernel's count of the rail's bytes
 * acknowledged over its time busy sending (TCP_INFO), in windows (cl_rails_speed). Not
 * the time a part took to send: a send is done once in a socket buffer of megabytes,
 * and the receiver's times hold its waits for the scheduler. Equal until every rail is
 * measured, with a floor for a slow rail, and kept while the speeds say about the same
 * (cl_rails_settle). The sender says its cut in rail 0's header: a striped message's
 * hdr.tag there is the cut's code (8 bits a rail), and the caller's tag travels in each
 * part's header (and MOVED's) instead, put back before the receive completes. The
 * receiver learns hdr.len
 * and the code from rail 0's header (tcp's header hook, tcp_span.h) and posts the parts'
 * receives then, into their places in the caller's buffer; each rail's stream stays in
 * order, so parts match in order too. Small messages (and the fast path,
 * send_now/recv_now) use rail 0 alone: the receiver posts on rail 0 before it knows a
 * message, and the order of a pair's messages lives there, so the fastest rail for
 * them would need the order told another way (sequence numbers and a reorder step).
 *
 * The set-up. The handle lists one address per rail ("a0\0a1\0", cl_addr text; the
 * first reads as a tcp handle). The dialer connects rail 0 with the caller's hello, which
 * the caller's vet judges as on tcp, and rails k > 0 with a hello of ours (RAIL_MAGIC, a
 * random 64-bit id, k, RAIL_VERSION), then, with two rails or more, a control
 * connection on rail 0's interface (the same hello, k = CTL); its first message on rail
 * 0 says the id and the rail count used. The acceptor holds a rail-0 connection until
 * that message and every connection it names are in, then hands the whole out; a rail
 * k > 0 still missing after RAIL_WAIT_MS is given up, failed from the start as below
 * (give_up_rail); until its dial is through, the dialer's cuts give it no share
 * (send_code), so a rail that never comes holds one copied ALIGN unit a message, not a
 * share past the copies' cap that could not be resent. A peer with one rail uses one.
 * A rails hello of another RAIL_VERSION is refused.
 *
 * A rail that fails. Rail k > 0 is taken as failed at either end when a part on it fails
 * (a socket error) or when a receive's part on it makes no progress (no byte on the rail)
 * for COLL_RAILS_STALL_MS (1000) while the part is posted, which is once rail 0's header
 * of its message came, so the sender has posted it too. The sender cannot know what TCP
 * delivered, so the receiver says it: each striped send's parts past rail 0's are copied
 * and kept until the receiver acknowledges the message (ACK on the control connection;
 * at most COLL_RAILS_KEEP_MIB a connection, see KEEP_MIB for past it); the end that
 * finds rail k failed (after GRACE_MS for a socket error, and only while rail 0 and the
 * control connection work) stops it at once (cl_tcp_halt: nothing moves on it after)
 * and sends GOT, how many of the peer's parts rail k delivered whole; the other end,
 * told so, stops its rail k too and sends its own GOT. Each end then sends its kept
 * parts of rail k that the peer did not get, and every later part of rail k, over the
 * control connection (MOVED frames, keyed by message number and rail); the receiver puts
 * each in place, or keeps it until its message's header comes on rail 0. A message's
 * cut does not change, only the path of rail k's parts (rail 0's interface carries
 * them), so both ends agree on it without a word, and the job goes on with a warning
 * naming the rail, its interface and the peer. The sender's later cuts give the failed
 * rail weight 0, so its share spreads over the rails left by their weights; a part of
 * one ALIGN unit still goes its way (over the control connection), as every striped
 * message keeps a part on each rail: the caller's tag rides on it, and the GOT's count
 * of a rail's parts stays the count of messages. Rail 0 failing still fails the
 * connection: a reset as tcp's does, the loss of its interface at the heartbeat's bound
 * (docs/transports.md, "Rail 0's interface lost"): the headers and the order live on
 * rail 0, and the control connection on its interface; the control connection's loss
 * fails a message that needed it, and closes a rail whose dial is not through (no GOT
 * can give it up now). A rail that comes back is not used again.
 *
 * Not done yet (see the closing note): small messages on the fastest rail (see
 * the wire above); the auto transport still uses plain tcp. */
#include "base/auth.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/iface.h"
#include "transports/tcp/rails_cut.h"
#include "transports/tcp/rails_test.h"
#include "transports/tcp/tcp_span.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { MAX_RAILS = CL_RAILS_MAX, STRIPE_MIN = 128 << 10, MAX_SPARE = 64 };
enum { CTL = MAX_RAILS, MAX_CTL_OUT = 64 }; /* hello[16] of the control connection */
/* A rail found failed here (not told by the peer) fails over only if rail 0 and the
 * control connection still work GRACE_MS later: a peer that dies or closes ends every
 * connection at once, and its other ends are seen within that time. */
enum { GRACE_MS = 100 };
/* The copies kept for a failover, per connection: what the peer has not acknowledged
 * yet, normally what the sockets and the receives posted hold (a few MiB). Past the cap
 * (or with the control connection gone: no ACK comes) a striped send keeps no copy and
 * nothing waits; if its rail then fails before the message is in, nothing can resend it,
 * so the connection fails (COLL_EPEER, with a warning) instead of losing it. */
enum { KEEP_MIB = 64 };
/* cl_msg_hdr.coll of the rails' own messages; on the control connection: ACK (count: a
 * striped message's number, received whole), GOT (unit: a rail, count: the parts it
 * delivered before it stopped) and MOVED (a part of rail `unit` of striped message
 * `count`, resent or sent over the control connection instead). */
enum { RAIL_PART = 0xEF, RAIL_ID = 0xEE, RAIL_ACK = 0xED, RAIL_GOT = 0xEC, RAIL_MOVED = 0xEB };
enum { LIVE, HALTED, ROUTED }; /* a rail k > 0 of a connection */
static const char RAIL_MAGIC[8] = "collrail";
/* hello[24..40) of a rails hello under COLL_SECRET: a tag under the job's key over the
 * id, the rail's number and the listener's rail-0 address (its port is fresh per job,
 * so a hello seen once passes no other listener); one without it is refused before it
 * holds a place, and so is a second of one id and rail (a replay on the same listener).
 * hello[17] of a rails hello: what this file's own messages (the id, ACK, GOT, MOVED)
 * and the hellos mean. A peer of another version is refused at its hello, naming both:
 * the rails of a version 0 peer (before the field) could not fail over, and its rail 0
 * waits for a control connection it never dials; a version 1 peer cuts equally and
 * reads rail 0's hdr.tag as the caller's. Raise it with any change of them. */
enum { RAIL_VERSION = 3, PROOF_AT = 24, PROOF_BYTES = 16 };

#define TCP (&cl_transport_tcp)

struct cl_tr_ctx {
    int n;
    cl_tr_ctx *rail[MAX_RAILS];
    cl_tr_vet vet; /* the caller's, for rail 0 (rails' own hellos pass) */
    void *vet_arg;
    cl_notifier *notifier;
    int stall_ms;
    size_t keep_cap; /* bytes of copies a connection keeps, at most (COLL_RAILS_KEEP_MIB) */
    pthread_t worker; /* failover work, and a wake-up for stall checks (n > 1) */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    int stop, has_worker, kick;
    cl_iface ifs[MAX_RAILS];
    int on_net; /* cl_tr_config's rails_on_net */
    int keyed;  /* cl_tr_config's key, in key */
    uint8_t key[CL_KEY_BYTES];
    pthread_mutex_t mu;
    cl_tr_conn *conns; /* every connection, freed with the context */
    cl_tr_req *reqs;   /* requests not yet tested done */
    cl_tr_listener *listeners;
};

struct cl_tr_conn {
    cl_tr_ctx *ctx;
    int n; /* rails in use */
    cl_tr_conn *rail[MAX_RAILS];
    cl_tr_conn *next, *next_forming;
    pthread_mutex_t send_mu; /* a striped send posts all its parts before the next one */
    atomic_int sends;        /* sends not yet tested done: send_now must not overtake */
    uint8_t hello[CL_HELLO_BYTES];
    uint64_t id[2]; /* the id message's payload: id, rails */
    int have_id;
    int64_t since; /* forming (acceptor): when rail 0 came */
    int said_wait; /* forming (acceptor): the missing control connection was said */
    char name[CL_HANDLE_BYTES + 24];
    /* Failover (n > 1). ctl: a second connection on rail 0's interface, rails' own both
     * ways, with a frame receiver always posted. */
    cl_tr_conn *ctl;
    cl_tr_req *ctl_rx;
    cl_msg_hdr ctl_hdr;
    void *ctl_buf; /* a MOVED frame's payload being read (ctl's lock), until it is whole */
    pthread_mutex_t ctl_mu; /* ctl's sends: ctl_out */
    cl_tr_req *ctl_out[MAX_CTL_OUT];
    pthread_mutex_t fo_mu; /* the rest; taken under ctl's and rail 0's locks, never above */
    uint64_t ss, rs;       /* striped messages sent (send_mu) and received (rail 0's lock) */
    int state[MAX_RAILS];  /* changed under send_mu and fo_mu */
    int halt_asked[MAX_RAILS], ctl_dead, work;
    int64_t asked_ms[MAX_RAILS]; /* when the halt was asked */
    int closed;                  /* closed by the caller: no rail is touched again */
    int down;                    /* the whole connection is going down: no failover */
    int said_failed;             /* part_failed spoke */
    int shut[MAX_RAILS + 1];     /* tcp connection k (CTL: ctl) closed: once only */
    int64_t peer_n[MAX_RAILS]; /* the peer's GOT for rail k, -1 before */
    const char *why[MAX_RAILS];
    struct keep *kept;   /* striped sends' parts k > 0, until acknowledged */
    size_t nkept, kept_bytes;
    int64_t uncopied; /* the last striped message sent without a copy (-1: none) */
    int ctl_status;   /* the control connection's receiver's end (ctl_dead) */
    int ctl_gone;     /* ctl_check saw it: copies dropped, ctl closed */
    struct scrap *scraps; /* moved parts that came before their receive */
    cl_rails_speed speed; /* of our sends, per rail (fo_mu) */
    cl_rails_code cut;    /* the last striped send's (fo_mu) */
    cl_rails_code pinned; /* a cut set by a test (rails_test.h), 0: by speed (fo_mu) */
};

/* A striped send's payload past rail 0's part, copied: resent if its rail fails. */
typedef struct keep {
    struct keep *next;
    uint64_t s;
    size_t len;  /* the whole message's */
    size_t from; /* data's offset in it: rail 1's part's */
    cl_rails_code code;
    uint32_t tag; /* the caller's */
    char data[];
} keep;

typedef struct scrap {
    struct scrap *next;
    uint64_t s;
    int k;
    uint32_t tag; /* the caller's, from MOVED's header */
    size_t len;
    char *data;
} scrap;

typedef struct {
    cl_tr_conn *c;
    uint64_t id;
    int k;
    int64_t since; /* when it came (make_room) */
} spare;

struct cl_tr_listener {
    cl_tr_ctx *ctx;
    cl_tr_listener *rail[MAX_RAILS], *next;
    cl_tr_conn *forming; /* rail 0 in, waiting for its id or rails */
    spare spares[MAX_SPARE];
    int nspares;
    uint64_t gone[MAX_SPARE]; /* ids handed out without a rail, the latest (gave_up) */
    int ngone;
    char self[CL_HANDLE_BYTES]; /* rail 0's address, as its handle gives it (prove) */
};

struct cl_tr_req {
    cl_tr_req_head head;
    cl_tr_req *prev, *next;
    cl_tr_conn *conn;
    cl_msg_hdr *hdr_in; /* receives */
    size_t len;         /* the payload */
    char *buf;
    atomic_int nsub;    /* posted parts (a receive's grow at its header) */
    cl_tr_req *sub[MAX_RAILS];
    cl_msg_hdr part[MAX_RAILS];
    size_t part_len[MAX_RAILS];
    int fin[MAX_RAILS];
    size_t moved_done;
    int status, closed, is_send;
    int rc[MAX_RAILS];    /* each part's tcp status */
    uint64_t s;           /* a striped message's number */
    int striped;          /* s is set (receives: under fo_mu) */
    size_t off[MAX_RAILS];
    atomic_int via[MAX_RAILS]; /* a receive's part k came over ctl */
    size_t seen[MAX_RAILS];    /* stall check: the rail's bytes at `since` */
    int64_t since[MAX_RAILS];
    int64_t looked[MAX_RAILS]; /* the stall check's last look */
    atomic_int over_ctl; /* a part goes over the control connection: its bytes count */
    size_t ctl_base;     /* the control connection's bytes when r was made */
    cl_rails_code code;  /* the cut (0: not striped) */
    uint32_t tag;        /* a send's caller's tag; a receive's, when part 1 came moved */
    cl_tr_req *peek;     /* a receive too short: its message's part 1 header (too_long) */
    cl_msg_hdr peeked;
    int peeking;         /* 0: not asked yet, 1: peek under way, 2: over */
    int timed[MAX_RAILS]; /* a send's part k went on its own rail: a measure of it */
};

/* 1 when a len-byte message goes over every rail of c (both ends number those). */
static int striped(const cl_tr_conn *c, size_t len)
{
    return c->n > 1 && len >= STRIPE_MIN;
}

/* Part k's offset and length of a len-byte payload on c, by code when striped (else
 * rail 0 has it all); -1 for a code no sender makes. */
static int cut(const cl_tr_conn *c, size_t len, cl_rails_code code, size_t off[MAX_RAILS],
               size_t plen[MAX_RAILS])
{
    if (striped(c, len))
        return cl_rails_cut(len, c->n, code, off, plen);
    for (int k = 0; k < c->n; k++) {
        off[k] = k == 0 ? 0 : len;
        plen[k] = k == 0 ? len : 0;
    }
    return 0;
}

/* ---- contexts -------------------------------------------------------------------- */

static int is_rail_hello(const uint8_t hello[CL_HELLO_BYTES])
{
    return memcmp(hello, RAIL_MAGIC, sizeof(RAIL_MAGIC)) == 0;
}

/* NULL for a rails hello of our version, else why not (tcp's warning carries it). */
static const char *version_refused(const uint8_t hello[CL_HELLO_BYTES])
{
    static _Thread_local char why[200];
    if (hello[17] == RAIL_VERSION)
        return NULL;
    snprintf(why, sizeof(why), "a rails peer of rails wire version %d, this library's is %d: "
             "run the same library version on every host", hello[17], RAIL_VERSION);
    return why;
}

/* The tag a rails hello to the listener at `where` (its rail 0) carries, into hello. */
static void prove(const cl_tr_ctx *ctx, uint8_t hello[CL_HELLO_BYTES], const char *where)
{
    uint8_t tag[CL_TAG_BYTES];
    cl_auth_tag(ctx->key, tag, 3, "coll rail v3", (size_t)12, hello + 8, (size_t)9, where,
                strlen(where));
    memcpy(hello + PROOF_AT, tag, PROOF_BYTES);
}

/* Whether a rails hello to listener l has the job's proof (or the job has no key). */
static int proven(const cl_tr_listener *l, const uint8_t hello[CL_HELLO_BYTES])
{
    if (!l->ctx->keyed)
        return 1;
    uint8_t want[CL_HELLO_BYTES];
    memcpy(want, hello, CL_HELLO_BYTES);
    prove(l->ctx, want, l->self);
    return cl_auth_equal(want + PROOF_AT, hello + PROOF_AT, PROOF_BYTES);
}

static const char *rail_vet(void *arg, const uint8_t hello[CL_HELLO_BYTES])
{
    (void)arg;
    return is_rail_hello(hello) ? version_refused(hello) : "not a rail's hello";
}

/* Rail 0 takes the caller's hellos and the control connections. */
static const char *rail0_vet(void *arg, const uint8_t hello[CL_HELLO_BYTES])
{
    cl_tr_ctx *ctx = arg;
    if (is_rail_hello(hello))
        return hello[16] != CTL ? "a rail's hello on rail 0" : version_refused(hello);
    return ctx->vet ? ctx->vet(ctx->vet_arg, hello) : NULL;
}

static void *worker_main(void *arg);

/* 0, or -1 when several rails need the worker and it did not start (without it no
 * failover message would go and no stall be looked for: a failed rail would hang). */
static int start_worker(cl_tr_ctx *ctx)
{
    const char *e = getenv("COLL_RAILS_STALL_MS");
    ctx->stall_ms = e && atoi(e) > 0 ? atoi(e) : 1000;
    e = getenv("COLL_RAILS_KEEP_MIB");
    ctx->keep_cap = (size_t)(e && atoi(e) >= 0 ? atoi(e) : KEEP_MIB) << 20;
    pthread_mutex_init(&ctx->wmu, NULL);
    pthread_cond_init(&ctx->wcv, NULL);
    ctx->has_worker = ctx->n > 1 && pthread_create(&ctx->worker, NULL, worker_main, ctx) == 0;
    return ctx->n > 1 && !ctx->has_worker ? -1 : 0;
}

/* The thread ends here; its mutex and condition outlive it, for the tcp contexts: until
 * they are gone their threads may still read a control frame that wakes the worker. */
static void stop_worker(cl_tr_ctx *ctx)
{
    pthread_mutex_lock(&ctx->wmu);
    ctx->stop = 1;
    pthread_cond_signal(&ctx->wcv);
    pthread_mutex_unlock(&ctx->wmu);
    if (ctx->has_worker)
        pthread_join(ctx->worker, NULL);
}

/* Tests over one interface: COLL_RAILS_REPEAT=N uses the first one N times. */
static int repeat(cl_iface *ifs, int n)
{
    const char *e = getenv("COLL_RAILS_REPEAT");
    int want = e ? atoi(e) : 0;
    for (; n < want && n < MAX_RAILS; n++)
        ifs[n] = ifs[0];
    return n;
}

/* Whether interface b may stripe beside a (rail 0) under rails_on_net: both say their
 * speed and neither is over twice the other, or b is a again (COLL_RAILS_REPEAT). Every
 * rail keeps a floor of each striped message (rails_cut.c), so a 1 GbE management NIC
 * beside a 25 GbE one would slow them all; bridges and many virtual NICs say no speed. */
static int alike(const cl_iface *a, const cl_iface *b)
{
    if (strcmp(a->name, b->name) == 0)
        return 1;
    return a->mbps && b->mbps && a->mbps <= 2 * b->mbps && b->mbps <= 2 * a->mbps;
}

/* ifs without the interfaces unlike rail 0 (said at info); how many are left. */
static int keep_alike(cl_iface *ifs, int n)
{
    int kept = 1;
    for (int k = 1; k < n; k++) {
        if (alike(&ifs[0], &ifs[k]))
            ifs[kept++] = ifs[k];
        else
            cl_log(COLL_LOG_INFO,
                   "rails: not striping over interface %s (%d Mb/s) beside %s (%d Mb/s; 0: not "
                   "known): auto takes NICs of known speeds within 2x (COLL_TRANSPORT=rails "
                   "takes every one)",
                   ifs[k].name, ifs[k].mbps, ifs[0].name, ifs[0].mbps);
    }
    return kept;
}

static int rails_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_iface ifs[MAX_RAILS];
    char why[400];
    int n = cl_pick_ifaces(cfg->device, cfg->family, ifs, MAX_RAILS, why, sizeof(why));
    if (n < 0) {
        cl_tr_error(cfg, "%s; the filter is COLL_SOCKET_IFNAME's", why);
        return COLL_EINVAL;
    }
    n = repeat(ifs, n);
    if (cfg->rails_on_net)
        n = keep_alike(ifs, n);
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    pthread_mutex_init(&ctx->mu, NULL);
    ctx->vet = cfg->vet;
    ctx->vet_arg = cfg->vet_arg;
    ctx->notifier = cfg->notifier;
    ctx->on_net = cfg->rails_on_net;
    ctx->keyed = cfg->key != NULL;
    if (cfg->key)
        memcpy(ctx->key, cfg->key, CL_KEY_BYTES);
    for (int k = 0; k < n; k++) {
        char dev[24];
        snprintf(dev, sizeof(dev), "=%.15s", ifs[k].name);
        cl_tr_config sub = *cfg;
        /* one rail: tcp's own choice, as before rails (a name may hold a comma) */
        sub.device = n == 1 || strcmp(ifs[k].name, "last-resort") == 0 ? cfg->device : dev;
        sub.vet = k == 0 ? rail0_vet : rail_vet;
        sub.vet_arg = ctx;
        int rc = TCP->ctx_create(&sub, &ctx->rail[k]);
        if (rc != COLL_OK) {
            while (k-- > 0)
                TCP->ctx_destroy(ctx->rail[k]);
            free(ctx);
            return rc;
        }
        ctx->n = k + 1;
        ctx->ifs[k] = ifs[k];
    }
    if (start_worker(ctx) != 0) {
        cl_tr_error(cfg, "rails: cannot start the failover thread");
        for (int k = 0; k < n; k++)
            TCP->ctx_destroy(ctx->rail[k]);
        pthread_cond_destroy(&ctx->wcv);
        pthread_mutex_destroy(&ctx->wmu);
        pthread_mutex_destroy(&ctx->mu);
        free(ctx);
        return COLL_ESYS;
    }
    cl_log(COLL_LOG_INFO, "rails: %d rail%s", n, n == 1 ? "" : "s");
    *out = ctx;
    return COLL_OK;
}

static void free_kept(cl_tr_conn *c)
{
    free(c->ctl_buf); /* a frame cut short by the control connection's end */
    c->ctl_buf = NULL;
    for (keep *p = c->kept, *n; p; p = n) {
        n = p->next;
        free(p);
    }
    for (scrap *p = c->scraps, *n; p; p = n) {
        n = p->next;
        free(p->data);
        free(p);
    }
}

static void rails_ctx_destroy(cl_tr_ctx *ctx)
{
    stop_worker(ctx);
    for (int k = 0; k < ctx->n; k++)
        TCP->ctx_destroy(ctx->rail[k]);
    pthread_cond_destroy(&ctx->wcv);
    pthread_mutex_destroy(&ctx->wmu);
    for (cl_tr_conn *c = ctx->conns, *n; c; c = n) {
        n = c->next;
        free_kept(c);
        pthread_mutex_destroy(&c->send_mu);
        pthread_mutex_destroy(&c->fo_mu);
        pthread_mutex_destroy(&c->ctl_mu);
        free(c);
    }
    for (cl_tr_listener *l = ctx->listeners, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    for (cl_tr_req *r = ctx->reqs, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

static cl_tr_conn *conn_new(cl_tr_ctx *ctx)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx;
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_mutex_init(&c->fo_mu, NULL);
    pthread_mutex_init(&c->ctl_mu, NULL);
    for (int k = 0; k < MAX_RAILS; k++)
        c->peer_n[k] = -1;
    c->uncopied = -1;
    pthread_mutex_lock(&ctx->mu);
    c->next = ctx->conns;
    ctx->conns = c;
    pthread_mutex_unlock(&ctx->mu);
    return c;
}

static void name_conn(cl_tr_conn *c)
{
    snprintf(c->name, sizeof(c->name), "%s (%d rail%s)", TCP->peer_name(c->rail[0]), c->n,
             c->n == 1 ? "" : "s");
}

/* Closes tcp connection k of c (CTL: the control connection), once: tcp frees one that
 * never carried a request as it closes it, so nothing may touch it after. */
static void close_tcp(cl_tr_conn *c, int k)
{
    pthread_mutex_lock(&c->fo_mu);
    int first = !c->shut[k];
    c->shut[k] = 1;
    pthread_mutex_unlock(&c->fo_mu);
    if (first)
        TCP->close_conn(k == CTL ? c->ctl : c->rail[k]);
}

/* ---- listening and accepting ------------------------------------------------------- */

static int rails_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    memset(handle, 0, CL_HANDLE_BYTES);
    size_t at = 0;
    for (int k = 0; k < ctx->n; k++) {
        char h[CL_HANDLE_BYTES];
        int rc = TCP->listen(ctx->rail[k], h, &l->rail[k]);
        size_t len = strnlen(h, CL_HANDLE_BYTES);
        if (rc != COLL_OK || at + len + 2 > CL_HANDLE_BYTES) { /* no room: fewer rails */
            if (rc == COLL_OK)
                TCP->close_listener(l->rail[k]);
            l->rail[k] = NULL;
            if (k == 0) {
                free(l);
                return rc != COLL_OK ? rc : COLL_EINVAL;
            }
            break;
        }
        memcpy(handle + at, h, len);
        if (k == 0)
            memcpy(l->self, h, len);
        at += len + 1;
    }
    pthread_mutex_lock(&ctx->mu);
    l->next = ctx->listeners;
    ctx->listeners = l;
    pthread_mutex_unlock(&ctx->mu);
    *out = l;
    return COLL_OK;
}

static int listening(const cl_tr_listener *l)
{
    int n = 0;
    while (n < MAX_RAILS && l->rail[n])
        n++;
    return n;
}

/* How long a forming connection waits for its rails k > 0 after rail 0 came: the dialer
 * dials them all at once, so a rail that reaches this host comes within a round trip of
 * rail 0, or after a lost SYN's resends (1 s, then 3 s: Linux's first RTO, doubled);
 * later, its interface does not reach this host (another switch, a firewall), and the
 * job goes on without it rather than failing at the init timeout. */
enum { RAIL_WAIT_MS = 3000 };

/* A spare older than this that no forming connection names may make room for another
 * (make_room): twice RAIL_WAIT_MS, past which its connection was handed out without it. */
enum { SPARE_MS = 2 * RAIL_WAIT_MS };

static int find_spare(cl_tr_listener *l, uint64_t id, int k);

/* Whether a forming connection, its id read, is of id: its spares are claimed soon
 * (its control connection may come after them, late SYNs and all). */
static int forming_names(const cl_tr_listener *l, uint64_t id)
{
    for (const cl_tr_conn *c = l->forming; c; c = c->next_forming)
        if (c->have_id && c->id[0] == id)
            return 1;
    return 0;
}

/* Every place taken: the oldest spare older than SPARE_MS that no forming connection
 * names (a late rail whose id left `gone`, one whose rail 0 never came) is closed for
 * the one coming (1), or none is (0). Kept for good, such spares held the places, and
 * later connections waited for theirs until the init timeout; the dialer sees that rail
 * closed and fails it over. */
static int make_room(cl_tr_listener *l)
{
    int64_t now = cl_now_ms();
    int old = -1;
    for (int i = 0; i < l->nspares; i++) {
        const spare *s = &l->spares[i];
        if (now - s->since >= SPARE_MS && !forming_names(l, s->id) &&
            (old < 0 || s->since < l->spares[old].since))
            old = i;
    }
    if (old < 0)
        return 0;
    cl_log(COLL_LOG_INFO, "rails: closed rail %d from %s, unclaimed for %lld ms, for a newer one",
           l->spares[old].k, TCP->peer_name(l->spares[old].c),
           (long long)(now - l->spares[old].since));
    TCP->close_conn(l->spares[old].c);
    l->spares[old] = l->spares[--l->nspares];
    return 1;
}

/* Whether the connection of id was handed out without one of its rails: that rail
 * coming late is closed, so that the dialer finds it failed too (gave_up). */
static int gave_up(const cl_tr_listener *l, uint64_t id)
{
    for (int i = 0; i < CL_MIN(l->ngone, MAX_SPARE); i++)
        if (l->gone[i] == id)
            return 1;
    return 0;
}

/* Keeps t (a rail or control connection of hello's id) until its rail 0 claims it;
 * closes it without the job's proof, when the same id and rail are kept already, or
 * with no place left. */
static void add_spare(cl_tr_listener *l, cl_tr_conn *t, const uint8_t hello[CL_HELLO_BYTES])
{
    uint64_t id;
    memcpy(&id, hello + 8, 8);
    const char *why = !proven(l, hello)                   ? "without the job's proof (COLL_SECRET)"
                      : find_spare(l, id, hello[16]) >= 0 ? "a second of its id and rail"
                      : gave_up(l, id) ? "its connection was handed out without it (too late)"
                      : l->nspares == MAX_SPARE && !make_room(l) ? "no place left"
                                                          : NULL;
    if (why) {
        cl_log(COLL_LOG_INFO, "rails: refused a rails hello from %s: %s", TCP->peer_name(t), why);
        TCP->close_conn(t);
        return;
    }
    spare *s = &l->spares[l->nspares++];
    s->c = t;
    s->id = id;
    s->k = hello[16];
    s->since = cl_now_ms();
}

/* Rails k > 0 that came in, kept until their rail 0 claims them. */
static void take_spares(cl_tr_listener *l)
{
    for (int k = 1; k < listening(l); k++) {
        uint8_t hello[CL_HELLO_BYTES];
        cl_tr_conn *t;
        while (TCP->accept(l->rail[k], hello, &t) == COLL_OK)
            add_spare(l, t, hello);
    }
}

static int find_spare(cl_tr_listener *l, uint64_t id, int k)
{
    for (int i = 0; i < l->nspares; i++)
        if (l->spares[i].id == id && l->spares[i].k == k)
            return i;
    return -1;
}

/* c's id message, when in: COLL_OK, COLL_INPROGRESS, or the failure that drops c. */
static int read_id(cl_tr_conn *c)
{
    if (c->have_id)
        return COLL_OK;
    cl_msg_hdr h;
    size_t nb = 0;
    int rc = TCP->recv_now(c->rail[0], &h, c->id, sizeof(c->id), &nb);
    if (rc == COLL_OK && (h.coll != RAIL_ID || nb != sizeof(c->id) || c->id[1] < 1 ||
                          c->id[1] > MAX_RAILS))
        rc = COLL_EPROTO;
    c->have_id = rc == COLL_OK;
    return rc;
}

/* Spare k of c's id (CTL: the control connection), taken; NULL if not in. */
static cl_tr_conn *claim(cl_tr_listener *l, cl_tr_conn *c, int k, int take)
{
    int i = find_spare(l, c->id[0], k);
    if (i < 0 || !take)
        return i < 0 ? NULL : l->spares[i].c;
    cl_tr_conn *t = l->spares[i].c;
    l->spares[i] = l->spares[--l->nspares];
    return t;
}

static void ctl_start(cl_tr_conn *c, cl_tr_conn *ctl);
static int ctl_send(cl_tr_conn *c, cl_msg_hdr h, const void *buf, cl_tr_req **out);

/* Rail k of c (handed out now, its control connection started) did not come: failed from
 * the start, as the failover makes a rail, so both ends agree without a new message. c's
 * GOT says no part of the peer's came on it; the peer halts its rail k (a dial that
 * never completes, or one that came late: closed here, gave_up), answers with its GOT
 * and sends its parts of rail k over the control connection from then on (route_rail),
 * as does this end once that GOT is in. */
static void give_up_rail(cl_tr_listener *l, cl_tr_conn *c, int k)
{
    if (!gave_up(l, c->id[0]))
        l->gone[l->ngone++ % MAX_SPARE] = c->id[0];
    cl_log(COLL_LOG_WARN,
           "rails: rail %d (%s) from %s has not come in %d ms: going on without it, its share "
           "over the other rails (does that peer's interface for it reach this host? "
           "COLL_SOCKET_IFNAME restricts the interfaces)",
           k, c->ctx->ifs[k].name, TCP->peer_name(c->rail[0]), RAIL_WAIT_MS);
    ctl_send(c, (cl_msg_hdr){.coll = RAIL_GOT, .unit = (uint32_t)k, .count = 0}, NULL, NULL);
}

/* c is whole once every rail its id names is in, and the control connection: they
 * leave the spares for c. After RAIL_WAIT_MS, the control connection (rail 0's
 * interface) and the rails that came will do. */
static int complete_conn(cl_tr_listener *l, cl_tr_conn *c)
{
    int n = (int)c->id[1], late = cl_now_ms() - c->since >= RAIL_WAIT_MS;
    if (n > 1 && !claim(l, c, CTL, 0))
        return 0;
    for (int k = 1; k < n && !late; k++)
        if (!claim(l, c, k, 0))
            return 0;
    for (int k = 1; k < n; k++)
        c->rail[k] = claim(l, c, k, 1);
    cl_tr_conn *ctl = n > 1 ? claim(l, c, CTL, 1) : NULL; /* none where the dialer uses one */
    c->n = n;
    for (int k = 1; k < n; k++) /* before ctl_start: the peer's frames read them */
        if (!c->rail[k]) {
            c->state[k] = HALTED;
            c->shut[k] = 1; /* no tcp connection to close */
        }
    if (ctl)
        ctl_start(c, ctl);
    for (int k = 1; k < n; k++)
        if (!c->rail[k])
            give_up_rail(l, c, k);
    return 1;
}

/* Says once, after RAIL_WAIT_MS, that a forming connection still waits for its control
 * connection (rails k > 0 are given up then): a peer whose rail 0 came and its control
 * connection, on the same interface, not; the init timeout alone would not say why. */
static void say_wait(cl_tr_listener *l, cl_tr_conn *c)
{
    int n = (int)c->id[1];
    if (c->said_wait || cl_now_ms() - c->since < RAIL_WAIT_MS || claim(l, c, CTL, 0))
        return;
    c->said_wait = 1;
    cl_log(COLL_LOG_WARN,
           "rails: a connection from %s names %d rails, and its control connection has not "
           "come in %d ms: does that peer's interface for it reach this host? "
           "(COLL_SOCKET_IFNAME restricts the interfaces)",
           TCP->peer_name(c->rail[0]), n, RAIL_WAIT_MS);
}

/* A forming connection that is whole now, unlinked; NULL if none. */
static cl_tr_conn *whole_one(cl_tr_listener *l)
{
    for (cl_tr_conn **p = &l->forming; *p;) {
        cl_tr_conn *c = *p;
        int rc = read_id(c);
        if (rc != COLL_OK && rc != COLL_INPROGRESS) {
            cl_log(COLL_LOG_DEBUG, "rails: dropped %s: no rails id (%s)",
                   TCP->peer_name(c->rail[0]), coll_strerror(rc));
            TCP->close_conn(c->rail[0]);
            *p = c->next_forming;
            continue;
        }
        if (rc == COLL_OK && complete_conn(l, c)) {
            *p = c->next_forming;
            return c;
        }
        if (rc == COLL_OK)
            say_wait(l, c);
        p = &c->next_forming;
    }
    return NULL;
}

static int rails_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    int many = listening(l) > 1;
    if (many)
        take_spares(l);
    cl_tr_conn *t;
    uint8_t h[CL_HELLO_BYTES];
    while (TCP->accept(l->rail[0], h, &t) == COLL_OK) {
        if (is_rail_hello(h)) { /* a control connection (rail0_vet let only those in) */
            if (many)
                add_spare(l, t, h);
            else
                TCP->close_conn(t);
            continue;
        }
        cl_tr_conn *c = conn_new(l->ctx);
        if (!c) {
            TCP->close_conn(t);
            return COLL_ENOMEM;
        }
        c->rail[0] = t;
        c->n = 1;
        c->since = cl_now_ms();
        memcpy(c->hello, h, CL_HELLO_BYTES);
        if (!many) {
            name_conn(c);
            memcpy(hello, h, CL_HELLO_BYTES);
            *out = c;
            return COLL_OK;
        }
        c->next_forming = l->forming;
        l->forming = c;
    }
    cl_tr_conn *c = many ? whole_one(l) : NULL;
    if (!c)
        return COLL_INPROGRESS;
    name_conn(c);
    memcpy(hello, c->hello, CL_HELLO_BYTES);
    *out = c;
    return COLL_OK;
}

static void rails_close_listener(cl_tr_listener *l)
{
    for (int k = 0; k < MAX_RAILS && l->rail[k]; k++)
        TCP->close_listener(l->rail[k]);
    for (cl_tr_conn *c = l->forming; c; c = c->next_forming)
        TCP->close_conn(c->rail[0]);
    l->forming = NULL;
    for (int i = 0; i < l->nspares; i++)
        TCP->close_conn(l->spares[i].c);
    l->nspares = 0;
}

/* ---- connecting ------------------------------------------------------------------ */

/* The addresses of a handle, each as a tcp handle of its own; how many. */
static int split_handle(const char handle[CL_HANDLE_BYTES], char out[MAX_RAILS][CL_HANDLE_BYTES])
{
    int n = 0;
    for (size_t at = 0; at < CL_HANDLE_BYTES && handle[at] && n < MAX_RAILS; n++) {
        size_t len = strnlen(handle + at, CL_HANDLE_BYTES - at);
        memset(out[n], 0, CL_HANDLE_BYTES);
        memcpy(out[n], handle + at, len);
        at += len + 1;
    }
    return n;
}

/* How many rails to use with a peer that gives `theirs` addresses: as many as both
 * ends have; under rails_on_net, rails 1.. only while the peer's address is on the
 * network of ours (the first that is not ends them: rails are numbered alike). */
static int rails_with(const cl_tr_ctx *ctx, char h[MAX_RAILS][CL_HANDLE_BYTES], int theirs)
{
    int n = CL_MIN(theirs, ctx->n);
    for (int k = 1; k < n && ctx->on_net; k++) {
        cl_addr a;
        if (cl_addr_parse(h[k], &a) != 0 || !cl_iface_on_net(&ctx->ifs[k], &a)) {
            cl_log(COLL_LOG_INFO,
                   "rails: %s is not on the network of interface %s: %d rail%s to that peer",
                   h[k], ctx->ifs[k].name, k, k == 1 ? "" : "s");
            return k;
        }
    }
    return n;
}

static uint64_t fresh_id(void)
{
    uint64_t id;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
        id = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&id;
    return id;
}

/* Rails 1.. of c, its control connection (on rail 0's interface, last) and the id
 * message that binds them to rail 0 for the acceptor. */
static int dial_rails(cl_tr_conn *c, char h[MAX_RAILS][CL_HANDLE_BYTES], int theirs, size_t want)
{
    cl_tr_conn *t = NULL; /* the control connection, c's once ctl_start publishes it */
    c->id[0] = fresh_id();
    c->id[1] = (uint64_t)c->n;
    for (int k = 1; k <= c->n && c->n > 1; k++) {
        int ctl = k == c->n;
        uint8_t hello[CL_HELLO_BYTES] = {0};
        memcpy(hello, RAIL_MAGIC, sizeof(RAIL_MAGIC));
        memcpy(hello + 8, &c->id[0], 8);
        hello[16] = (uint8_t)(ctl ? CTL : k);
        hello[17] = RAIL_VERSION;
        if (c->ctx->keyed)
            prove(c->ctx, hello, h[0]);
        int rc = TCP->connect(c->ctx->rail[ctl ? 0 : k], h[ctl ? 0 : k], hello, want,
                              ctl ? &t : &c->rail[k]);
        if (rc != COLL_OK)
            return rc;
    }
    if (t)
        ctl_start(c, t);
    if (theirs < 2)
        return COLL_OK;
    cl_msg_hdr idh = {.magic = CL_MSG_MAGIC, .coll = RAIL_ID, .len = sizeof(c->id)};
    cl_tr_req *r; /* tested by nobody: freed with the tcp context */
    return TCP->isend(c->rail[0], &idh, c->id, &r);
}

static int rails_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                         const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    char h[MAX_RAILS][CL_HANDLE_BYTES];
    int theirs = split_handle(handle, h);
    if (theirs == 0)
        return COLL_EINVAL;
    cl_tr_conn *c = conn_new(ctx);
    if (!c)
        return COLL_ENOMEM;
    c->n = rails_with(ctx, h, theirs);
    int rc = TCP->connect(ctx->rail[0], h[0], hello, want, &c->rail[0]);
    if (rc == COLL_OK)
        rc = dial_rails(c, h, theirs, want);
    if (rc != COLL_OK) {
        pthread_mutex_lock(&c->fo_mu);
        c->closed = 1; /* the worker passes it by */
        pthread_mutex_unlock(&c->fo_mu);
        for (int k = 0; k < c->n; k++)
            if (c->rail[k])
                close_tcp(c, k);
        if (c->ctl)
            close_tcp(c, CTL);
        c->n = 0;
        return rc;
    }
    name_conn(c);
    *out = c;
    return COLL_OK;
}

/* ---- requests -------------------------------------------------------------------- */

/* Bytes the control connection moved either way (moved(): a part resent over it). */
static size_t ctl_bytes(cl_tr_conn *c)
{
    return c->ctl ? cl_tcp_rx_bytes(c->ctl) + cl_tcp_tx_bytes(c->ctl) : 0;
}

static cl_tr_req *req_new(cl_tr_conn *c)
{
    cl_tr_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->head.tr = &cl_transport_rails;
    r->conn = c;
    r->ctl_base = ctl_bytes(c);
    cl_tr_ctx *ctx = c->ctx;
    pthread_mutex_lock(&ctx->mu);
    r->next = ctx->reqs;
    if (r->next)
        r->next->prev = r;
    ctx->reqs = r;
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

static void req_free(cl_tr_req *r)
{
    cl_tr_ctx *ctx = r->conn->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        ctx->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    pthread_mutex_unlock(&ctx->mu);
    free(r);
}

/* ---- a rail that fails (the header says how) -------------------------------------- *
 * Locks, outer first: send_mu, then fo_mu; rail 0's and ctl's io locks (hooks run under
 * them), then fo_mu, then ctx->mu. Nothing is sent on ctl under fo_mu. */

static void wake_worker(cl_tr_ctx *ctx)
{
    pthread_mutex_lock(&ctx->wmu);
    ctx->kick = 1;
    pthread_cond_signal(&ctx->wcv);
    pthread_mutex_unlock(&ctx->wmu);
}

static const char NO_PROGRESS[] = "no progress"; /* a stall: no grace (halt_rail) */

static void ask_halt_locked(cl_tr_conn *c, int k, const char *why)
{
    if (c->state[k] == LIVE && !c->halt_asked[k]) {
        c->halt_asked[k] = 1;
        c->why[k] = why;
        c->asked_ms[k] = cl_now_ms();
    }
    c->work = 1;
}

static void ask_halt(cl_tr_conn *c, int k, const char *why)
{
    pthread_mutex_lock(&c->fo_mu);
    int new = c->state[k] == LIVE && !c->halt_asked[k];
    ask_halt_locked(c, k, why);
    pthread_mutex_unlock(&c->fo_mu);
    if (new)
        wake_worker(c->ctx);
}

/* Control sends done are let go; those not tracked (the table full) go with the context. */
static void reap_ctl(cl_tr_conn *c)
{
    for (int i = 0; i < MAX_CTL_OUT; i++) {
        int d = 0;
        if (c->ctl_out[i] && (TCP->test(c->ctl_out[i], &d, NULL), d))
            c->ctl_out[i] = NULL;
    }
}

/* A frame on the control connection; *out, if given, gets its request to test. */
static int ctl_send(cl_tr_conn *c, cl_msg_hdr h, const void *buf, cl_tr_req **out)
{
    h.magic = CL_MSG_MAGIC;
    pthread_mutex_lock(&c->ctl_mu);
    reap_ctl(c);
    cl_tr_req *r = NULL;
    int rc = cl_tcp_isend_span(c->ctl, &h, buf, h.len, &r);
    for (int i = 0; rc == COLL_OK && !out && i < MAX_CTL_OUT; i++)
        if (!c->ctl_out[i]) {
            c->ctl_out[i] = r;
            break;
        }
    pthread_mutex_unlock(&c->ctl_mu);
    if (out)
        *out = rc == COLL_OK ? r : NULL;
    return rc;
}

/* 1 when no rail can fail over any more: the control connection ended, or the whole
 * connection is going down (halt_rail). */
static int ctl_dead(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->fo_mu);
    int d = 0;
    if (!c->ctl_dead && c->ctl_rx && (c->ctl_status = TCP->test(c->ctl_rx, &d, NULL), d)) {
        c->ctl_rx = NULL; /* no hook runs after: a frame it cut short is ours to free */
        free(c->ctl_buf);
        c->ctl_buf = NULL;
    }
    c->ctl_dead |= d;
    d = c->ctl_dead || c->down;
    pthread_mutex_unlock(&c->fo_mu);
    return d;
}

/* A moved part into its receive's place (fo_mu held); 0 when no receive is there. */
static int place(cl_tr_conn *c, int k, uint64_t s, uint32_t tag, const char *data, size_t len)
{
    cl_tr_ctx *ctx = c->ctx;
    int found = 0;
    pthread_mutex_lock(&ctx->mu);
    for (cl_tr_req *r = ctx->reqs; r && !found; r = r->next) {
        if (r->conn != c || r->is_send || !r->striped || r->s != s)
            continue;
        memcpy(r->buf + r->off[k], data, CL_MIN(len, r->part_len[k]));
        r->tag = tag;
        atomic_store(&r->via[k], 1);
        found = 1;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (found)
        cl_notify(ctx->notifier);
    return found;
}

static void moved_in(cl_tr_conn *c, int k, uint64_t s, uint32_t tag, char *data, size_t len)
{
    if (place(c, k, s, tag, data, len)) {
        free(data);
        return;
    }
    scrap *p = malloc(sizeof(*p));
    if (!p)
        abort(); /* a small allocation failing leaves nothing sane to do */
    *p = (scrap){.next = c->scraps, .s = s, .k = k, .tag = tag, .len = len, .data = data};
    c->scraps = p;
}

/* Part k of receive r (just numbered, fo_mu held) came before it: into place. */
static void take_scrap(cl_tr_conn *c, cl_tr_req *r, int k)
{
    for (scrap **pp = &c->scraps; *pp; pp = &(*pp)->next) {
        scrap *p = *pp;
        if (p->s != r->s || p->k != k)
            continue;
        memcpy(r->buf + r->off[k], p->data, CL_MIN(p->len, r->part_len[k]));
        r->tag = p->tag;
        atomic_store(&r->via[k], 1);
        *pp = p->next;
        free(p->data);
        free(p);
        return;
    }
}

static void drop_kept(cl_tr_conn *c, uint64_t s)
{
    for (keep **pp = &c->kept; *pp; pp = &(*pp)->next)
        if ((*pp)->s == s) {
            keep *p = *pp;
            *pp = p->next;
            c->nkept--;
            c->kept_bytes -= p->len - p->from;
            free(p);
            return;
        }
}

/* The payload's buffer is the connection's until the frame is whole (ctl_frame_cb takes
 * it): a frame cut short leaves it to ctl_dead or the context's end. */
static size_t ctl_hdr_cb(void *arg, const cl_msg_hdr *h, void **buf)
{
    cl_tr_conn *c = arg;
    *buf = NULL;
    if (h->coll != RAIL_MOVED || h->len == 0)
        return 0;
    if (!(*buf = malloc(h->len)))
        abort();
    c->ctl_buf = *buf;
    return h->len;
}

/* A control frame, under ctl's lock: nothing is sent from here (the worker does). */
static void ctl_frame_cb(void *arg, const cl_msg_hdr *h, void *buf)
{
    cl_tr_conn *c = arg;
    int k = (int)h->unit, rail = k > 0 && k < c->n, kick = 0;
    c->ctl_buf = NULL;
    pthread_mutex_lock(&c->fo_mu);
    if (h->coll == RAIL_ACK)
        drop_kept(c, h->count);
    if (h->coll == RAIL_GOT && rail) {
        c->peer_n[k] = (int64_t)h->count;
        ask_halt_locked(c, k, "its peer found it failed");
        kick = 1;
    }
    if (h->coll == RAIL_MOVED && rail)
        moved_in(c, k, h->count, h->tag, buf, h->len), buf = NULL;
    pthread_mutex_unlock(&c->fo_mu);
    free(buf);
    if (kick)
        wake_worker(c->ctx);
}

/* Sets c's control connection, then posts its frame receiver, each under fo_mu: the
 * worker looks at every listed connection, forming ones too (ctl_check). The connection
 * first: once the receiver is up, the peer's frames may wake the worker to send on it. */
static void ctl_start(cl_tr_conn *c, cl_tr_conn *ctl)
{
    pthread_mutex_lock(&c->fo_mu);
    c->ctl = ctl;
    pthread_mutex_unlock(&c->fo_mu);
    cl_tr_req *rx = NULL;
    int rc = cl_tcp_irecv_frames(ctl, &c->ctl_hdr, ctl_hdr_cb, ctl_frame_cb, c, &rx);
    pthread_mutex_lock(&c->fo_mu);
    c->ctl_rx = rx;
    c->ctl_dead = rc != COLL_OK;
    pthread_mutex_unlock(&c->fo_mu);
}

/* Rail k's end, if it may fail over: 1 to look again soon (the grace has not passed). A
 * halt asked here goes only if rail 0 and the control connection still work, after
 * GRACE_MS for a socket error (a stall has waited long enough); otherwise the whole
 * connection is going down, it fails on its own, and a warning that one rail failed
 * would mislead. The peer's GOT says the peer is alive. */
static int halt_rail(cl_tr_conn *c, int k)
{
    pthread_mutex_lock(&c->send_mu); /* rails_close_conn waits: the rail is not freed */
    pthread_mutex_lock(&c->fo_mu);
    int go = c->halt_asked[k] && c->state[k] == LIVE && !c->closed && !c->shut[k];
    int told = c->peer_n[k] >= 0, early = c->why[k] != NO_PROGRESS &&
                                          cl_now_ms() - c->asked_ms[k] < GRACE_MS;
    pthread_mutex_unlock(&c->fo_mu);
    if (go && !told && early) {
        pthread_mutex_unlock(&c->send_mu);
        return 1;
    }
    int down = go && !told && (ctl_dead(c) || cl_tcp_broken(c->rail[0]));
    pthread_mutex_lock(&c->fo_mu);
    if (down) /* a failed part fails the connection from now on (part_over) */
        c->down = 1;
    else if (go)
        c->state[k] = HALTED;
    pthread_mutex_unlock(&c->fo_mu);
    if (down)
        cl_log(COLL_LOG_DEBUG, "rails: rail %d to %s failed (%s) as the whole connection ends",
               k, c->name, c->why[k]);
    size_t got = go && !down ? cl_tcp_halt(c->rail[k]) : 0;
    if (go && !down)
        cl_log(COLL_LOG_WARN, "rails: rail %d (%s) to %s failed (%s): its share goes to the "
               "other rails from now on (and one 4 KiB part a message over rail 0's interface, "
               "%s)", k, c->ctx->ifs[k].name, TCP->peer_name(c->rail[k]), c->why[k],
               c->ctx->ifs[0].name);
    pthread_mutex_unlock(&c->send_mu);
    if (!go || down)
        return 0;
    close_tcp(c, k);
    ctl_send(c, (cl_msg_hdr){.coll = RAIL_GOT, .unit = (uint32_t)k, .count = got}, NULL, NULL);
    return 0;
}

/* Part k of striped message s (len bytes cut by code, `rest` its bytes from rail 1's
 * part on, tag the caller's) over the control connection; *out as ctl_send's. */
static int send_moved(cl_tr_conn *c, uint64_t s, size_t len, cl_rails_code code, uint32_t tag,
                      const char *rest, int k, cl_tr_req **out)
{
    size_t off[MAX_RAILS], plen[MAX_RAILS];
    cut(c, len, code, off, plen);
    cl_msg_hdr h = {.coll = RAIL_MOVED, .unit = (uint32_t)k, .count = s, .len = (uint32_t)plen[k],
                    .tag = tag};
    return ctl_send(c, h, rest + (off[k] - off[1]), out);
}

/* Rail k halted here and the peer's GOT in: our parts it did not get go again, and the
 * later ones follow them (isend sees ROUTED). */
static void route_rail(cl_tr_conn *c, int k)
{
    pthread_mutex_lock(&c->send_mu);
    pthread_mutex_lock(&c->fo_mu);
    int go = c->state[k] == HALTED && c->peer_n[k] >= 0 && !c->closed, n = 0;
    if (go && c->uncopied >= c->peer_n[k]) { /* a message it lacks has no copy */
        c->down = 1;
        pthread_mutex_unlock(&c->fo_mu);
        pthread_mutex_unlock(&c->send_mu);
        cl_log(COLL_LOG_WARN, "rails: rail %d to %s failed with a message of its not acknowledged "
               "and not copied (copies kept: %zu MiB, COLL_RAILS_KEEP_MIB %zu): the connection "
               "fails", k, c->name, c->kept_bytes >> 20, c->ctx->keep_cap >> 20);
        for (int j = 0; j < c->n; j++)
            close_tcp(c, j);
        return;
    }
    keep **again = go && c->nkept ? malloc(sizeof(*again) * c->nkept) : NULL;
    if (go && c->nkept && !again)
        abort(); /* a small allocation failing leaves nothing sane to do */
    for (keep *p = again ? c->kept : NULL; p; p = p->next)
        if (p->s >= (uint64_t)c->peer_n[k])
            again[n++] = p;
    if (go)
        c->state[k] = ROUTED;
    pthread_mutex_unlock(&c->fo_mu);
    for (int i = 0; i < n; i++) /* not acknowledged before they are in: they stay */
        send_moved(c, again[i]->s, again[i]->len, again[i]->code, again[i]->tag, again[i]->data,
                   k, NULL);
    pthread_mutex_unlock(&c->send_mu);
    free(again);
}

/* Rails k > 0 of c whose dial is not through, closed once the control connection ended:
 * the peer's GOT that gives such a rail up cannot come now, and a dial the peer never
 * answers (its listener gone while the connection formed: a coll_destroy there, SYNs
 * dropped on the way) would hold a part posted on it until the kernel gives up the dial
 * (minutes) or the operation's timeout. Closed, the rail fails that part at once, and
 * the message with it (COLL_EPEER), as any rail failing without the control connection;
 * halted first, as one that never came (complete_conn), so that no later part is posted
 * on it: tcp frees a closed connection that never carried a request. */
static void close_undialed(cl_tr_conn *c)
{
    for (int k = 1; k < c->n; k++) {
        pthread_mutex_lock(&c->send_mu); /* sends read the state, then post on the rail */
        pthread_mutex_lock(&c->fo_mu);
        int undialed =
            c->state[k] == LIVE && !c->closed && !c->shut[k] && !cl_tcp_ready(c->rail[k]);
        if (undialed)
            c->state[k] = HALTED;
        pthread_mutex_unlock(&c->fo_mu);
        pthread_mutex_unlock(&c->send_mu);
        if (undialed)
            close_tcp(c, k);
    }
}

/* The control connection ended (or the whole connection goes down): no rail can fail
 * over now, so the copies are of no use, and no ACK would free them. It closes, so that
 * the peer stops counting on it too (its receiver may have died alone: a bad frame). */
static void ctl_check(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->fo_mu); /* set as the connection forms (ctl_start) */
    int has_ctl = c->ctl != NULL;
    pthread_mutex_unlock(&c->fo_mu);
    if (!has_ctl || !ctl_dead(c))
        return;
    pthread_mutex_lock(&c->send_mu); /* rail 0 stays (rails_close_conn) */
    pthread_mutex_lock(&c->fo_mu);
    keep *p = c->kept;
    int first = !c->ctl_gone, status = c->ctl_status, down = c->down || c->closed || !first;
    c->kept = NULL;
    c->nkept = c->kept_bytes = 0;
    c->ctl_gone = 1;
    pthread_mutex_unlock(&c->fo_mu);
    for (keep *n; p; p = n) {
        n = p->next;
        free(p);
    }
    /* A warning only where the rest works: the peer's end (EPEER), a shutdown, rail 0's
     * failure are the whole connection's. */
    down = down || status == COLL_EPEER || cl_tcp_broken(c->rail[0]);
    pthread_mutex_unlock(&c->send_mu);
    if (!first)
        return;
    cl_log(down ? COLL_LOG_DEBUG : COLL_LOG_WARN, "rails: the control connection to %s ended "
           "(%s): a rail that fails from now on fails the connection", c->name,
           coll_strerror(status));
    close_tcp(c, CTL);
    close_undialed(c);
}

/* 1 when c wants another look soon. */
static int conn_work(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->fo_mu);
    int work = c->work, later = 0;
    c->work = 0;
    pthread_mutex_unlock(&c->fo_mu);
    for (int k = 1; work && k < c->n; k++) {
        later |= halt_rail(c, k);
        route_rail(c, k);
    }
    if (later) {
        pthread_mutex_lock(&c->fo_mu);
        c->work = 1;
        pthread_mutex_unlock(&c->fo_mu);
    }
    ctl_check(c);
    return later;
}

/* Failover work, and every 200 ms a wake-up for waiters, whose tests look for stalls. */
static void *worker_main(void *arg)
{
    cl_tr_ctx *ctx = arg;
    int later = 0;
    pthread_mutex_lock(&ctx->wmu);
    while (!ctx->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (later ? GRACE_MS / 4 : 200) * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (!ctx->kick)
            pthread_cond_timedwait(&ctx->wcv, &ctx->wmu, &ts);
        ctx->kick = 0;
        pthread_mutex_unlock(&ctx->wmu);
        pthread_mutex_lock(&ctx->mu);
        cl_tr_conn *c = ctx->conns;
        pthread_mutex_unlock(&ctx->mu);
        for (later = 0; c; c = c->next)
            later |= conn_work(c);
        cl_notify(ctx->notifier);
        pthread_mutex_lock(&ctx->wmu);
    }
    pthread_mutex_unlock(&ctx->wmu);
    return NULL;
}

/* A receive's part k > 0 that has not moved for stall_ms: its rail is taken as failed.
 * A look long after the last one (the worker wakes waiters every 200 ms, so this process
 * was not running) starts the count again: bytes may wait in the socket unread. */
static void stall_check(cl_tr_req *r, int k)
{
    cl_tr_conn *c = r->conn;
    if (r->is_send || k == 0 || !c->ctl)
        return;
    size_t rx = cl_tcp_rx_bytes(c->rail[k]);
    int64_t now = cl_now_ms();
    int away = r->looked[k] && now - r->looked[k] > 500;
    r->looked[k] = now;
    if (!r->since[k] || rx != r->seen[k] || away) {
        r->seen[k] = rx;
        r->since[k] = now;
    } else if (now - r->since[k] >= c->ctx->stall_ms) {
        ask_halt(c, k, NO_PROGRESS);
    }
}

/* A copy of striped send s's bytes from `from` on, kept until the peer acknowledges s;
 * NULL (s noted as uncopied) past the cap, with the control connection gone, or without
 * memory. Under send_mu. */
static keep *keep_copy(cl_tr_conn *c, const cl_tr_req *r, const char *buf, size_t from)
{
    uint64_t s = r->s;
    size_t len = r->len, bytes = len - from;
    pthread_mutex_lock(&c->fo_mu);
    int ok = !c->ctl_gone && !c->down && c->kept_bytes + bytes <= c->ctx->keep_cap;
    c->kept_bytes += ok ? bytes : 0;
    pthread_mutex_unlock(&c->fo_mu);
    keep *p = ok ? malloc(sizeof(*p) + bytes) : NULL;
    pthread_mutex_lock(&c->fo_mu);
    if (p) {
        *p = (keep){.next = c->kept, .s = s, .len = len, .from = from, .code = r->code,
                    .tag = r->tag};
        memcpy(p->data, buf + from, bytes);
        c->kept = p;
        c->nkept++;
    } else {
        c->kept_bytes -= ok ? bytes : 0;
        c->uncopied = (int64_t)s;
    }
    pthread_mutex_unlock(&c->fo_mu);
    return p;
}

/* Part k of send r: on its rail, or where its rail's parts go now. */
static int post_part(cl_tr_conn *c, cl_tr_req *r, int k, const char *buf, const size_t *off)
{
    int st = k > 0 && c->ctl ? c->state[k] : LIVE;
    if (st != LIVE)
        atomic_store(&r->over_ctl, 1);
    r->timed[k] = st == LIVE;
    if (st == HALTED) /* sent with the others when the peer's GOT comes (or fails then) */
        return COLL_OK;
    if (st == ROUTED) /* r is done when this is sent: the caller's buffer will do */
        return send_moved(c, r->s, r->len, r->code, r->tag, buf + off[1], k, &r->sub[k]);
    return cl_tcp_isend_span(c->rail[k], &r->part[k], buf + off[k], r->part_len[k], &r->sub[k]);
}

/* The cut of the next striped send (under send_mu, which state changes under): by the
 * rails' speeds, a failed rail weightless so that its share goes to the others. So is a
 * rail whose dial is not through (or that broke): the listener may give it up (after
 * RAIL_WAIT_MS), and a share of it past the copies' cap could not be resent then. The
 * receiver reads the cut from rail 0's header, so the ends agree whatever we choose. */
static cl_rails_code send_code(cl_tr_conn *c)
{
    int live[MAX_RAILS] = {1};
    for (int k = 1; k < c->n; k++)
        live[k] = !c->ctl || (c->state[k] == LIVE && cl_tcp_ready(c->rail[k]));
    pthread_mutex_lock(&c->fo_mu);
    cl_rails_code code = cl_rails_weigh(&c->speed, c->n, live);
    for (int k = 0; c->pinned && k < c->n; k++)
        code = (code & ~(0xffu << (8 * k))) | (live[k] ? c->pinned & 0xffu << (8 * k) : 0);
    code = c->cut = cl_rails_settle(c->cut, code, c->n);
    pthread_mutex_unlock(&c->fo_mu);
    return code;
}

/* Part k of send r, its header: rail 0's is the caller's, the cut's code in place of its
 * tag when striped (the top of this file); the others are ours and carry that tag. */
static cl_msg_hdr part_hdr(const cl_tr_req *r, const cl_msg_hdr *hdr, int k)
{
    cl_msg_hdr h = *hdr;
    if (k == 0 && r->code)
        h.tag = r->code;
    if (k > 0)
        h = (cl_msg_hdr){.magic = CL_MSG_MAGIC, .coll = RAIL_PART, .len = (uint32_t)r->part_len[k],
                         .seq = hdr->seq, .unit = (uint32_t)k, .tag = hdr->tag};
    return h;
}

static int rails_isend(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf, cl_tr_req **out)
{
    cl_tr_req *r = req_new(c);
    if (!r)
        return COLL_ENOMEM;
    size_t off[MAX_RAILS];
    int parts = striped(c, hdr->len) ? c->n : 1, rc = COLL_OK;
    r->len = hdr->len;
    r->tag = hdr->tag;
    r->is_send = 1;
    pthread_mutex_lock(&c->send_mu);
    r->code = parts > 1 ? send_code(c) : 0;
    if (cut(c, hdr->len, r->code, off, r->part_len) != 0) { /* one the receiver refuses */
        pthread_mutex_unlock(&c->send_mu);
        req_free(r);
        return COLL_EINVAL;
    }
    if (parts > 1 && c->ctl) { /* numbered as the receiver numbers it, copied or not */
        r->s = c->ss++;
        keep_copy(c, r, buf, off[1]);
    }
    for (int k = 0; k < parts && rc == COLL_OK; k++) {
        r->part[k] = part_hdr(r, hdr, k);
        rc = post_part(c, r, k, buf, off);
        if (rc == COLL_OK)
            atomic_store(&r->nsub, k + 1);
    }
    pthread_mutex_unlock(&c->send_mu);
    atomic_fetch_add(&c->sends, 1);
    if (rc != COLL_OK && atomic_load(&r->nsub) == 0) {
        atomic_fetch_sub(&c->sends, 1);
        req_free(r);
        return rc;
    }
    r->status = rc;
    *out = r;
    return COLL_OK;
}

/* Rail 0's header is in (under rail 0's lock): the other parts' receives go up now, in
 * the order of rail 0's headers, which is each rail's order of parts. */
static size_t on_header(void *arg, const cl_msg_hdr *hdr)
{
    cl_tr_req *r = arg;
    cl_tr_conn *c = r->conn;
    r->code = striped(c, hdr->len) ? hdr->tag : 0;
    r->len = hdr->len; /* the caller's header may be another receive's too by test() */
    if (cut(c, hdr->len, r->code, r->off, r->part_len) != 0) {
        r->status = COLL_EPROTO; /* rail 0's stream is lost: its next header fails it */
        return 0;
    }
    int parts = r->code ? c->n : 1, fo = parts > 1 && c->ctl;
    if (fo) {
        pthread_mutex_lock(&c->fo_mu);
        r->s = c->rs++;
        r->striped = 1;
    }
    for (int k = 1; k < parts; k++) {
        int rc = COLL_OK;
        if (fo && c->state[k] != LIVE) { /* its part comes over the control connection */
            atomic_store(&r->over_ctl, 1);
            take_scrap(c, r, k);
        }
        else
            rc = cl_tcp_irecv_hook(c->rail[k], &r->part[k], r->buf + r->off[k],
                                   r->part_len[k], NULL, NULL, &r->sub[k]);
        if (rc != COLL_OK) {
            r->status = rc;
            break;
        }
        atomic_store(&r->nsub, k + 1);
    }
    if (fo)
        pthread_mutex_unlock(&c->fo_mu);
    return r->part_len[0];
}

static int rails_irecv(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, cl_tr_req **out)
{
    cl_tr_req *r = req_new(c);
    if (!r)
        return COLL_ENOMEM;
    r->hdr_in = hdr;
    r->buf = buf;
    atomic_store(&r->nsub, 1);
    cl_tr_req *sub;
    int rc = cl_tcp_irecv_hook(c->rail[0], hdr, buf, cap, on_header, r, &sub);
    if (rc != COLL_OK) {
        req_free(r);
        return rc;
    }
    r->sub[0] = sub;
    *out = r;
    return COLL_OK;
}

/* A part failed: the others may never come, so every rail of the connection closes and
 * fails them (they must be done before the caller's buffer goes back). A warning only
 * where one rail (k > 0) takes down a connection that would go on: rail 0's failure, or
 * the peer's end (the control connection's too), is the connection's own, which its
 * caller reports; said once per connection. */
static void part_failed(cl_tr_req *r, int k, int rc)
{
    cl_tr_conn *c = r->conn;
    if (r->status == COLL_OK)
        r->status = rc;
    if (r->closed || atomic_load(&r->nsub) < 2) /* one part: tcp's failure as it is */
        return;
    r->closed = 1;
    int rail0 = cl_tcp_broken(c->rail[0]); /* a request of r is on it: it is there */
    pthread_mutex_lock(&c->fo_mu);
    int warn = k > 0 && !c->down && !c->said_failed && !rail0 &&
               (rc == COLL_EPROTO || c->ctl_status != COLL_EPEER);
    c->said_failed = 1;
    pthread_mutex_unlock(&c->fo_mu);
    cl_log(warn ? COLL_LOG_WARN : COLL_LOG_DEBUG, "rails: part %d of a message on %s failed "
           "(%s): closing its rails", k, c->name, coll_strerror(rc));
    for (int j = 0; j < c->n; j++)
        close_tcp(c, j);
}

/* Send r's part k went on its rail and is done: the rail's speed, measured. Under
 * fo_mu, while the rail is not closed (tcp frees a closed one later). */
static void timed_part(cl_tr_req *r, int k)
{
    cl_tr_conn *c = r->conn;
    uint64_t acked, busy;
    pthread_mutex_lock(&c->fo_mu);
    if (!c->shut[k] && cl_tcp_busy(c->rail[k], &acked, &busy))
        cl_rails_speed_add(&c->speed, k, acked, busy);
    pthread_mutex_unlock(&c->fo_mu);
}

/* Part k's tcp request, tested (none: its rail had halted); 0 while not done. */
static int reap_part(cl_tr_req *r, int k)
{
    int d = 1, rc = COLL_EPEER;
    size_t nb = 0;
    if (r->sub[k])
        rc = TCP->test(r->sub[k], &d, &nb);
    if (!d) {
        stall_check(r, k);
        return 0;
    }
    r->fin[k] = 1;
    /* tcp's nb of rail 0's part is the header's len: the whole message's */
    r->moved_done += r->sub[k] ? CL_MIN(nb, r->part_len[k]) + sizeof(cl_msg_hdr) : 0;
    if (r->is_send && rc == COLL_OK && r->timed[k] && r->code)
        timed_part(r, k);
    /* A part is a rails part of its cut's length, or the stream is not ours: a short
     * one would leave stale bytes in the caller's buffer, reported as received. */
    if (rc == COLL_OK && !r->is_send && k > 0 &&
        (nb != r->part_len[k] || r->part[k].coll != RAIL_PART))
        rc = COLL_EPROTO;
    r->rc[k] = rc;
    return 1;
}

/* 1 once part k is over: in place (a receive's), handed on or kept (a send's), or
 * failed; a part of a failed rail k > 0 is over when it came another way. */
static int part_over(cl_tr_req *r, int k)
{
    if (!r->fin[k] && !reap_part(r, k))
        return 0;
    int rc = r->rc[k];
    cl_tr_conn *c = r->conn;
    if (rc == COLL_OK)
        return 1;
    if (k > 0 && c->ctl && rc != COLL_EPROTO && !ctl_dead(c)) {
        atomic_store(&r->over_ctl, 1);
        ask_halt(c, k, coll_strerror(rc));
        return r->is_send || atomic_load(&r->via[k]);
    }
    part_failed(r, k, rc);
    return 1;
}

/* The caller's tag into a striped receive's header, where a part brought it (rail 0's
 * header has the cut's code there), whatever the receive's status. */
static void callers_tag(cl_tr_req *r)
{
    if (atomic_load(&r->via[1]))
        r->hdr_in->tag = r->tag;
    else if (r->fin[1] && r->rc[1] == COLL_OK)
        r->hdr_in->tag = r->part[1].tag;
}

/* A receive too short for a striped message fails at rail 0's header (COLL_EMISMATCH)
 * before any part is posted, and the caller is told that header, whose tag is the cut's
 * code: the caller's comes in the header of the message's part on rail 1, the next on
 * that rail's stream, read alone (cap 0: rail 1 then receives nothing more, as rail 0
 * does not). Left as it is where rail 1 failed over (the part comes over ctl) or the
 * header never comes (the peer gone, the rail halted). 0 while that header is due. */
static int too_long(cl_tr_req *r)
{
    cl_tr_conn *c = r->conn;
    if (r->peeking == 0) {
        r->peeking = 2;
        if (r->rc[0] != COLL_EMISMATCH || r->code || !striped(c, r->hdr_in->len))
            return 1;
        pthread_mutex_lock(&c->fo_mu);
        int live = !c->closed && !c->shut[1] && (!c->ctl || c->state[1] == LIVE);
        pthread_mutex_unlock(&c->fo_mu);
        if (!live || cl_tcp_irecv_hook(c->rail[1], &r->peeked, NULL, 0, NULL, NULL, &r->peek))
            return 1;
        r->peeking = 1;
    }
    int done = 1;
    int rc = r->peeking == 1 ? TCP->test(r->peek, &done, NULL) : COLL_OK;
    if (!done)
        return 0;
    if (r->peeking == 1 && rc == COLL_EMISMATCH && r->peeked.magic == CL_MSG_MAGIC &&
        r->peeked.coll == RAIL_PART)
        r->hdr_in->tag = r->peeked.tag;
    r->peeking = 2;
    return 1;
}

static int rails_test(cl_tr_req *r, int *done, size_t *nbytes)
{
    int all = 1;
    /* nsub is read afresh each time: a receive's parts are posted at rail 0's header,
     * before rail 0's part can complete, so once sub[0] is done nsub is final */
    for (int k = 0; k < atomic_load(&r->nsub); k++)
        all &= part_over(r, k);
    if (!all || (!r->is_send && !too_long(r))) {
        *done = 0;
        return COLL_INPROGRESS;
    }
    *done = 1;
    int status = r->status;
    if (r->striped && status == COLL_OK) /* the sender may drop its copy */
        ctl_send(r->conn, (cl_msg_hdr){.coll = RAIL_ACK, .count = r->s}, NULL, NULL);
    if (!r->is_send && r->code)
        callers_tag(r);
    if (r->is_send)
        atomic_fetch_sub(&r->conn->sends, 1);
    if (nbytes)
        *nbytes = status == COLL_OK ? r->len : 0;
    req_free(r);
    return status;
}

/* A part over the control connection counts its bytes: a resend of several messages
 * ahead of r's part there is progress, not a stall. */
static size_t rails_moved(cl_tr_req *r)
{
    size_t m = r->moved_done;
    if (atomic_load(&r->over_ctl))
        m += ctl_bytes(r->conn) - r->ctl_base;
    for (int k = 0; k < atomic_load(&r->nsub); k++)
        if (!r->fin[k] && r->sub[k])
            m += TCP->moved(r->sub[k]);
    return m;
}

/* ---- the rest of the contract ---------------------------------------------------- */

/* Under send_mu: the worker halts a rail under it, so it never touches a rail that tcp
 * may free once closed (one that never carried a request). */
static void rails_close_conn(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->send_mu);
    pthread_mutex_lock(&c->fo_mu);
    c->closed = 1;
    pthread_mutex_unlock(&c->fo_mu);
    for (int k = 0; k < c->n; k++)
        close_tcp(c, k);
    if (c->ctl)
        close_tcp(c, CTL);
    pthread_mutex_unlock(&c->send_mu);
}

static void rails_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    for (int k = 0; k < ctx->n; k++)
        TCP->shutdown(ctx->rail[k], status, k == 0 ? farewell : NULL);
}

static size_t rails_poll(cl_tr_ctx *ctx, int mode)
{
    size_t moved = 0;
    for (int k = 0; k < ctx->n; k++)
        moved += TCP->poll(ctx->rail[k], mode);
    return moved;
}

/* Rail 0 alone: not a message the cut stripes (the caller posts it instead), and not
 * while a send is out, as a tcp send_now never overtakes a queued send (its rail-0 part
 * may be out while the rest is still queued). */
static int rails_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf)
{
    if (c->n > 1 && (hdr->len >= STRIPE_MIN || atomic_load(&c->sends) > 0))
        return COLL_INPROGRESS;
    return TCP->send_now(c->rail[0], hdr, buf);
}

static int rails_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    return TCP->recv_now(c->rail[0], hdr, buf, cap, nbytes);
}

static const char *rails_peer_name(cl_tr_conn *c)
{
    return c->name;
}

const cl_transport cl_transport_rails = {
    .name = "rails",
    .duplex = 1,
    .ctx_create = rails_ctx_create,
    .ctx_destroy = rails_ctx_destroy,
    .listen = rails_listen,
    .accept = rails_accept,
    .close_listener = rails_close_listener,
    .connect = rails_connect,
    .isend = rails_isend,
    .irecv = rails_irecv,
    .test = rails_test,
    .moved = rails_moved,
    .close_conn = rails_close_conn,
    .shutdown = rails_shutdown,
    .poll = rails_poll,
    .send_now = rails_send_now,
    .recv_now = rails_recv_now,
    .peer_name = rails_peer_name,
};

void cl_rails_keep(cl_tr_listener *l, int n)
{
    for (int k = CL_MAX(n, 1); k < MAX_RAILS && l->rail[k]; k++) {
        TCP->close_listener(l->rail[k]);
        l->rail[k] = NULL;
    }
}

cl_tr_conn *cl_rails_sole(cl_tr_conn *c)
{
    if (c->n != 1 || c->ctl)
        return NULL;
    pthread_mutex_lock(&c->fo_mu);
    c->closed = 1;  /* the worker passes it by */
    c->shut[0] = 1; /* and nothing here closes rail 0: the caller owns it now */
    pthread_mutex_unlock(&c->fo_mu);
    return c->rail[0];
}

/* ---- for tests only (rails_test.h) -------------------------------------------------- */

size_t cl_rails_kept_bytes(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->fo_mu);
    size_t n = c->kept_bytes;
    pthread_mutex_unlock(&c->fo_mu);
    return n;
}

void cl_rails_pin_cut(cl_tr_conn *c, uint32_t code)
{
    pthread_mutex_lock(&c->fo_mu);
    c->pinned = code;
    pthread_mutex_unlock(&c->fo_mu);
}

uint32_t cl_rails_next_cut(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->send_mu);
    cl_rails_code code = c->n > 1 ? send_code(c) : 0;
    pthread_mutex_unlock(&c->send_mu);
    return code;
}

size_t cl_rails_rail_tx(cl_tr_conn *c, int k)
{
    pthread_mutex_lock(&c->fo_mu); /* a closed tcp connection may be freed */
    size_t n = k < c->n && !c->shut[k] ? cl_tcp_tx_bytes(c->rail[k]) : 0;
    pthread_mutex_unlock(&c->fo_mu);
    return n;
}

int cl_rails_dialed(cl_tr_conn *c)
{
    pthread_mutex_lock(&c->send_mu); /* as close_undialed reads it */
    pthread_mutex_lock(&c->fo_mu);
    int yes = 1;
    for (int k = 1; k < c->n && c->ctl && !c->closed; k++)
        yes &= c->state[k] != LIVE || c->shut[k] || cl_tcp_ready(c->rail[k]);
    pthread_mutex_unlock(&c->fo_mu);
    pthread_mutex_unlock(&c->send_mu);
    return yes;
}

int cl_rails_routed(cl_tr_conn *c, int k)
{
    pthread_mutex_lock(&c->fo_mu);
    int yes = k < c->n && c->state[k] == ROUTED;
    pthread_mutex_unlock(&c->fo_mu);
    return yes;
}

void cl_rails_fail_rail(cl_tr_conn *c, int k, const char *why)
{
    ask_halt(c, k, why);
}

int cl_rails_ctl_send_raw(cl_tr_conn *c, const cl_msg_hdr *h)
{
    cl_tr_req *r; /* freed with the tcp context */
    return c->ctl ? cl_tcp_isend_span(c->ctl, h, NULL, 0, &r) : COLL_EINVAL;
}
