/* The libfabric transport: a plugin of the public ABI (include/collective_net.h) built
 * from that header and libfabric alone, as libcollective-net-ofi.so. It must never use
 * the library's internals: a distribution packages it apart.
 *
 *   COLL_NET_PLUGIN=ofi COLL_TRANSPORT=ofi COLL_OFI_PROVIDER='tcp;ofi_rxm' ./my_program
 *
 * One reliable-datagram endpoint (FI_EP_RDM) per plugin context, with tagged messages,
 * one address vector and one completion queue, polled inside test() and accept() (the
 * ABI's "progress inside test()"). COLL_OFI_PROVIDER picks the provider (fi_getinfo's
 * FI_PROVIDER syntax; default "tcp;ofi_rxm"; "shm" for one host). Where an offer's
 * domain is a network interface (tcp's), the device the library passes selects it
 * (COLL_SOCKET_IFNAME's syntax); without one, the first offer that opens, those at an
 * IPv6 link-local address only last.
 *
 * Connections: RDM has none, so a comm is a 33-bit id drawn at random by the sender
 * (getrandom) and carried in the tag of every message; a per-comm sequence number in the
 * low 23 bits makes the n-th send match the n-th receive even where the provider does
 * not keep the matching order. The listen handle is the endpoint's address (fi_getname)
 * and a listen id; connect() inserts it into the address vector and sends a hello (its
 * own address, the comm's id) on the control tag, which accept() turns into a receive
 * comm. A close sends a bye (the comm's id and, from the sender, how many messages it
 * sent), so the peer's requests past that point fail with COLL_NET_ERR_REMOTE instead of
 * waiting for a message that never comes. The ABI takes messages of any size; a provider
 * may not (verbs;ofi_rxm: max_msg_size 8 MiB), so a message that is not below
 * max_msg_size goes as pieces of it, the last shorter, the piece's index in 7 tag bits
 * (post_pieces; at most 128 pieces). Memory: the hints leave FI_MR_LOCAL out, so rxm
 * registers (or copies) the buffers itself and the plugin passes no descriptors. */
#include <collective_net.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define OFI_CTRL_TAG (1ull << 63)
#define OFI_SEQ_BITS 23
#define OFI_SEQ_MASK ((1ull << OFI_SEQ_BITS) - 1)
#define OFI_PIECE_BITS 7 /* a message of up to 128 x max_msg_size */
#define OFI_PIECES_MAX (1u << OFI_PIECE_BITS)
#define OFI_ID_BITS (63 - OFI_PIECE_BITS - OFI_SEQ_BITS)
#define OFI_ID_MASK ((1ull << OFI_ID_BITS) - 1)
#define OFI_ADDR_MAX 54 /* what the 64-byte handle leaves for the address */
#define OFI_CTRL_POSTED 16 /* control receives kept posted */
#define OFI_MAGIC 0x4f464931u /* "OFI1" */

enum { OP_REQ, OP_PIECE, OP_CTRL_RECV, OP_CTRL_SEND }; /* what a completion's context is */
enum { CTRL_HELLO = 1, CTRL_BYE_FROM_SEND, CTRL_BYE_FROM_RECV };

/* The control message: a hello (connect to accept) or a bye (close to the peer). */
typedef struct ofi_ctrl {
    uint32_t magic, type;
    uint32_t listen_id; /* hello: the listener it is for */
    uint32_t addrlen;   /* hello: the sender's endpoint address */
    uint64_t id;        /* the comm's id */
    uint64_t count;     /* bye from the sender: the messages it sent */
    unsigned char addr[OFI_ADDR_MAX];
} ofi_ctrl;

typedef struct ofi_handle {
    uint32_t magic, listen_id;
    uint16_t addrlen;
    unsigned char addr[OFI_ADDR_MAX];
} ofi_handle;
_Static_assert(sizeof(ofi_handle) <= COLL_NET_HANDLE_BYTES, "the handle fits the ABI's");

typedef struct ofi_net ofi_net;
typedef struct ofi_comm ofi_comm;

/* A transfer: its first member is the context libfabric's completion gives back. It is
 * freed once libfabric is done with it (`queued` and `posted` 0, no `pieces` left) and
 * so is the library (`owned` 0). A request over max_msg_size is not posted itself: its
 * pieces are (kind OP_PIECE, `parent` the request). */
typedef struct ofi_op {
    struct fi_context2 ctx;
    int kind, send;
    int queued, posted, owned;
    int done, err;
    unsigned pieces;             /* a request's pieces not completed yet */
    unsigned piece;              /* a piece's index in its request */
    int ended;                   /* a receive request: its last piece came */
    struct ofi_op *parent;       /* a piece's request */
    void *buf;
    size_t size, len;
    fi_addr_t peer;
    uint64_t tag, seq;
    ofi_comm *comm;              /* a request's, NULL once its comm closed */
    struct ofi_op *prev, *next;  /* the context's list of live ops */
    struct ofi_op *queue_next;   /* the queue of transfers not posted yet */
    ofi_ctrl msg;                /* a control message's buffer */
} ofi_op;

/* A hello that arrived, waiting for accept(). */
typedef struct ofi_hello {
    struct ofi_hello *next;
    ofi_ctrl msg;
} ofi_hello;

struct ofi_comm {
    ofi_net *net;
    int kind;          /* 's' send, 'r' receive, 'l' listen */
    uint64_t id;       /* send/receive: the connection's; listen: the listen id */
    fi_addr_t peer;
    uint64_t posted;   /* messages posted (the next sequence number) */
    uint64_t peer_end; /* a receive comm whose sender closed: the messages it sent */
    int closed;        /* the peer closed (a receive comm: after peer_end messages) */
    ofi_hello *hellos; /* a listen comm's connections not yet accepted */
    ofi_comm *next;    /* the context's list of comms */
};

/* Addresses inserted once each: a provider reports one source per peer. */
typedef struct ofi_peer {
    struct ofi_peer *next;
    fi_addr_t fa;
    size_t len;
    unsigned char addr[OFI_ADDR_MAX];
} ofi_peer;

struct ofi_net {
    struct fi_info *infos; /* what fi_getinfo offered, in its order */
    struct fi_info *info;  /* the one of them the endpoint opened on */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    unsigned char addr[OFI_ADDR_MAX];
    size_t addrlen;
    uint32_t next_listen;
    size_t piece; /* a message's piece: max_msg_size, or less (COLL_OFI_PIECE_BYTES) */
    void (*log)(int level, const char *msg);
    ofi_op *ops;     /* every live op */
    ofi_comm *comms; /* every open comm */
    ofi_peer *peers;
    ofi_op *queue, **queue_tail; /* transfers the provider did not take yet, in order */
};

static void say(const ofi_net *n, void (*log)(int, const char *), int level, const char *fmt,
                ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n && n->log)
        n->log(level, line);
    else if (log)
        log(level, line);
    else
        fprintf(stderr, "%s\n", line);
}

static ofi_op *op_new(ofi_net *n, int kind)
{
    ofi_op *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->kind = kind;
    o->next = n->ops;
    if (n->ops)
        n->ops->prev = o;
    n->ops = o;
    return o;
}

static void op_release(ofi_net *n, ofi_op *o)
{
    if (o->queued || o->posted || o->owned || o->pieces)
        return;
    if (o->prev)
        o->prev->next = o->next;
    else
        n->ops = o->next;
    if (o->next)
        o->next->prev = o->prev;
    free(o);
}

/* Hands o to the provider: 0, -FI_EAGAIN (busy: try again later) or its error. */
static ssize_t post_now(ofi_net *n, ofi_op *o)
{
    ssize_t rc = o->send ? fi_tsend(n->ep, o->buf, o->size, NULL, o->peer, o->tag, &o->ctx)
                         : fi_trecv(n->ep, o->buf, o->size, NULL, o->peer, o->tag, 0, &o->ctx);
    o->posted = rc == 0;
    return rc;
}

static void piece_done(ofi_net *n, ofi_op *p, size_t len, int err);

/* Posts the queued transfers in order until the provider is busy. A request whose comm
 * closed or failed meanwhile (or a receive's piece past its message's end) is dropped
 * unposted. A transfer the provider refuses ends with COLL_NET_ERR_SYSTEM. */
static void post_queued(ofi_net *n)
{
    for (ofi_op *o; (o = n->queue);) {
        ofi_op *r = o->parent ? o->parent : o;
        int drop = r->kind == OP_REQ && (!r->comm || r->err || r->ended);
        ssize_t rc = drop ? 0 : post_now(n, o);
        if (rc == -FI_EAGAIN)
            return;
        n->queue = o->queue_next;
        if (!n->queue)
            n->queue_tail = &n->queue;
        o->queued = 0;
        if (o->kind == OP_PIECE && (drop || rc))
            piece_done(n, o, 0, drop ? -FI_ECANCELED : (int)rc);
        else if (rc)
            o->err = COLL_NET_ERR_SYSTEM;
        op_release(n, o);
    }
}

/* Posts o after the transfers queued before it: rxm answers EAGAIN until its connection
 * is up, which needs the peer's progress, and the peer may be this very thread
 * (connect and accept in one process); progress() posts what waits. */
static void post(ofi_net *n, ofi_op *o)
{
    o->queued = 1;
    *n->queue_tail = o;
    n->queue_tail = &o->queue_next;
    post_queued(n);
}

static void post_ctrl_recv(ofi_net *n, ofi_op *o)
{
    o->buf = &o->msg, o->size = sizeof(o->msg), o->peer = FI_ADDR_UNSPEC, o->tag = OFI_CTRL_TAG;
    post(n, o);
}

static ofi_comm *comm_find(ofi_net *n, int kind, uint64_t id)
{
    for (ofi_comm *c = n->comms; c; c = c->next)
        if (c->kind == kind && c->id == id)
            return c;
    return NULL;
}

/* Stops a receive request's transfers in the provider: its own, or its pieces past
 * `after` (-1: all). Each ends with a cancelled completion; one not posted, nothing. */
static void cancel_recv(ofi_net *n, ofi_op *o, long after)
{
    if (o->posted)
        fi_cancel(&n->ep->fid, &o->ctx);
    for (ofi_op *p = n->ops; p; p = p->next)
        if (p->parent == o && (long)p->piece > after && p->posted)
            fi_cancel(&n->ep->fid, &p->ctx);
}

/* The sender closed after `count` messages: the receives past them cannot complete. */
static void recv_comm_ended(ofi_net *n, ofi_comm *c, uint64_t count)
{
    c->closed = 1, c->peer_end = count;
    for (ofi_op *o = n->ops; o; o = o->next)
        if (o->comm == c && o->kind == OP_REQ && !o->done && !o->err && o->seq >= count) {
            o->err = COLL_NET_ERR_REMOTE;
            cancel_recv(n, o, -1);
        }
}

/* The receiver closed: nothing sent on this comm will be taken. */
static void send_comm_ended(ofi_net *n, ofi_comm *c)
{
    c->closed = 1;
    for (ofi_op *o = n->ops; o; o = o->next)
        if (o->comm == c && o->kind == OP_REQ && !o->done && !o->err)
            o->err = COLL_NET_ERR_REMOTE;
}

static void on_ctrl(ofi_net *n, const ofi_ctrl *m)
{
    ofi_comm *c;
    if (m->magic != OFI_MAGIC)
        return;
    if (m->type == CTRL_HELLO && (c = comm_find(n, 'l', m->listen_id))) {
        ofi_hello *h = malloc(sizeof(*h)), **p = &c->hellos;
        if (!h)
            return; /* the sender's requests will time out in the library */
        h->msg = *m, h->next = NULL;
        while (*p)
            p = &(*p)->next;
        *p = h;
    } else if (m->type == CTRL_BYE_FROM_SEND && (c = comm_find(n, 'r', m->id))) {
        recv_comm_ended(n, c, m->count);
    } else if (m->type == CTRL_BYE_FROM_RECV && (c = comm_find(n, 's', m->id))) {
        send_comm_ended(n, c);
    }
}

static int net_error(int err)
{
    return err == -FI_ETRUNC ? COLL_NET_ERR_TRUNCATED
           : err == -FI_ECANCELED ? COLL_NET_ERR_REMOTE
                                  : COLL_NET_ERR_SYSTEM;
}

/* A piece ended (done, failed, or cancelled). Every piece but a message's last is
 * max_msg_size long, its last shorter (start() makes it so), so a received piece that
 * is shorter ends the message: the receive's later pieces are cancelled, and their
 * cancellation is no error. The request is done once no piece is left in the provider
 * (its buffer is the library's again). */
static void piece_done(ofi_net *n, ofi_op *p, size_t len, int err)
{
    ofi_op *r = p->parent;
    r->pieces--;
    if (!err) {
        r->len += len;
        if (!r->send && len < n->piece && !r->ended) {
            r->ended = 1;
            cancel_recv(n, r, (long)p->piece);
        }
    } else if (!r->err && (err != -FI_ECANCELED || !r->ended)) {
        r->err = net_error(err);
    }
    if (!r->pieces && !r->err)
        r->done = r->send || r->ended;
    op_release(n, r);
}

static void complete(ofi_net *n, ofi_op *o, size_t len, int err)
{
    o->posted = 0;
    if (o->kind == OP_CTRL_RECV) {
        if (!err)
            on_ctrl(n, &o->msg);
        if (err != -FI_ECANCELED)
            post_ctrl_recv(n, o);
    } else if (o->kind == OP_REQ && !o->err) {
        o->done = !err, o->len = len;
        if (err)
            o->err = net_error(err);
    } else if (o->kind == OP_PIECE) {
        piece_done(n, o, len, err);
    }
    op_release(n, o);
}

/* Reads every completion there is; libfabric's manual progress happens here. */
static int progress(ofi_net *n)
{
    struct fi_cq_tagged_entry e[16];
    for (;;) {
        ssize_t k = fi_cq_read(n->cq, e, 16);
        if (k == -FI_EAGAIN) {
            post_queued(n);
            return COLL_NET_OK;
        }
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry ee = {0};
            if (fi_cq_readerr(n->cq, &ee, 0) != 1)
                return COLL_NET_ERR_SYSTEM;
            if (ee.err != FI_ECANCELED && ee.err != FI_ETRUNC)
                say(n, NULL, COLL_NET_LOG_INFO, "ofi: a transfer failed: %s",
                    fi_cq_strerror(n->cq, ee.prov_errno, ee.err_data, NULL, 0));
            complete(n, ee.op_context, ee.len, -ee.err);
            continue;
        }
        if (k < 0)
            return COLL_NET_ERR_SYSTEM;
        for (ssize_t i = 0; i < k; i++)
            complete(n, e[i].op_context, e[i].len, 0);
    }
}

/* The endpoint and what holds it, as far as open_fids got. */
static void close_fids(ofi_net *n)
{
    struct fid **f[] = {(struct fid **)&n->ep, (struct fid **)&n->av, (struct fid **)&n->cq,
                        (struct fid **)&n->domain, (struct fid **)&n->fabric};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (*f[i])
            fi_close(*f[i]), *f[i] = NULL;
}

static void net_close(ofi_net *n)
{
    close_fids(n);
    if (n->infos)
        fi_freeinfo(n->infos);
    for (ofi_op *o = n->ops, *x; o; o = x)
        x = o->next, free(o);
    for (ofi_peer *p = n->peers, *x; p; p = x)
        x = p->next, free(p);
    free(n);
}

/* rxm over verbs posts its receive buffers to one shared receive context, not to each
 * connection's endpoint. libfabric 1.17's rxm, when a peer's endpoint closes, closes the
 * connection's verbs endpoint and then drains the completion queue, where receives of
 * that endpoint may still complete; each buffer is posted again to the endpoint just
 * closed, and fi_cq_read dies of SIGSEGV (seen in the rdma-vm VM: 1 of 12 four-rank
 * jobs, in rxm_process_shutdown's path under the plugin's progress(); a rank that died so
 * is the "rank N has not answered" of a stalled matrix; docs/transports.md). The shared
 * context lives as long as our endpoint. rxm reads the setting from the environment at
 * every fi_getinfo; a user's own value stays. */
static void share_receive_buffers(const char *prov)
{
    if (strstr(prov, "verbs"))
        setenv("FI_OFI_RXM_USE_SRX", "1", 0);
}

/* The provider COLL_OFI_PROVIDER names, for reliable tagged datagrams. */
static int get_info(ofi_net *n, const char *prov, void (*log)(int, const char *))
{
    share_receive_buffers(prov);
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return COLL_NET_ERR_NOMEM;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    /* The library calls the plugin one call at a time (collective_net.h), and rxm starts
     * no thread of its own under manual data progress (its "stopping CM thread" at close
     * is said whether one ran or not; none does here, checked in the rdma-vm VM). */
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    hints->fabric_attr->prov_name = strdup(prov);
    int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &n->infos);
    fi_freeinfo(hints);
    if (rc) {
        say(NULL, log, COLL_NET_LOG_ERROR,
            "ofi: no libfabric provider '%s' (COLL_OFI_PROVIDER) offers reliable tagged "
            "datagrams (FI_EP_RDM, FI_TAGGED): fi_getinfo: %s",
            prov, fi_strerror(-rc));
        return COLL_NET_ERR_SYSTEM;
    }
    return COLL_NET_OK;
}

/* Fabric, domain, completion queue, address vector, endpoint over n->info; its address. */
static int open_fids(ofi_net *n)
{
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .size = 0};
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    int rc = fi_fabric(n->info->fabric_attr, &n->fabric, NULL);
    if (!rc)
        rc = fi_domain(n->fabric, n->info, &n->domain, NULL);
    if (!rc)
        rc = fi_cq_open(n->domain, &cqa, &n->cq, NULL);
    if (!rc)
        rc = fi_av_open(n->domain, &ava, &n->av, NULL);
    if (!rc)
        rc = fi_endpoint(n->domain, n->info, &n->ep, NULL);
    if (!rc)
        rc = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV);
    if (!rc)
        rc = fi_ep_bind(n->ep, &n->av->fid, 0);
    if (!rc)
        rc = fi_enable(n->ep);
    n->addrlen = sizeof(n->addr);
    if (!rc)
        rc = fi_getname(&n->ep->fid, n->addr, &n->addrlen);
    return rc;
}

/* Whether interface `name` is one `spec` selects, in NCCL_SOCKET_IFNAME's syntax (as the
 * library reads COLL_SOCKET_IFNAME): a comma-separated list of prefixes, exact names
 * after a leading '=', and after a leading '^' the ones to leave out instead. */
static int iface_selected(const char *name, const char *spec)
{
    int out = spec[0] == '^';
    spec += out;
    int exact = spec[0] == '=';
    spec += exact;
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        if (len && (exact ? strlen(name) == len : 1) && strncmp(name, p, len) == 0)
            return !out;
        p += len + (p[len] == ',');
    }
    return out;
}

/* Whether offer i is worth a try on the first pass. Only offers whose domain is a network
 * interface (tcp's; not shm's "shm" nor a verbs device's "mlx5_0") are judged: by the
 * device the library passed (COLL_SOCKET_IFNAME, or its own choice, "lo" for a loopback
 * rendezvous) when there is one, else by their source address, which must not be IPv6
 * link-local only (a veth or a bridge without an address of its own: fi_getinfo lists
 * them first, and no peer reaches them). */
static int preferred(const struct fi_info *i, const char *device)
{
    const char *dom = i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "";
    if (if_nametoindex(dom) == 0)
        return 1;
    if (device && *device)
        return iface_selected(dom, device);
    const struct sockaddr_in6 *a = i->src_addr;
    return !(i->addr_format == FI_SOCKADDR_IN6 && a && IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr));
}

/* The first offer whose endpoint opens, preferred ones first: an interface that is
 * down, or an address that cannot be bound, fails its offer (EADDRNOTAVAIL) and the
 * next one is tried. */
static int open_endpoint(ofi_net *n, const char *device)
{
    int rc = -FI_ENODATA, passes = device && *device ? 1 : 2; /* a named one, or none */
    int tried = 0;
    for (int pass = 0; pass < passes && (!n->info || rc); pass++) {
        for (n->info = n->infos; n->info; n->info = n->info->next) {
            if (preferred(n->info, device) != !pass)
                continue;
            tried++;
            if ((rc = open_fids(n)) == 0)
                break;
            say(n, NULL, COLL_NET_LOG_INFO, "ofi: %s on %s did not open (%s): trying the next",
                n->info->fabric_attr->prov_name, n->info->domain_attr->name, fi_strerror(-rc));
            close_fids(n);
        }
    }
    if (!n->info && !tried) /* the device matched no offer */
        say(n, NULL, COLL_NET_LOG_ERROR, "ofi: provider '%s' offers no interface that "
            "'%s' selects (COLL_SOCKET_IFNAME, or the library's choice for the rendezvous)",
            n->infos->fabric_attr->prov_name, device);
    else if (!n->info)
        say(n, NULL, COLL_NET_LOG_ERROR, "ofi: cannot open an endpoint of provider '%s': %s",
            n->infos->fabric_attr->prov_name, fi_strerror(-rc));
    if (!n->info)
        return COLL_NET_ERR_SYSTEM;
    for (int i = 0; i < OFI_CTRL_POSTED; i++) {
        ofi_op *o = op_new(n, OP_CTRL_RECV);
        if (!o)
            return COLL_NET_ERR_NOMEM;
        post_ctrl_recv(n, o);
    }
    return COLL_NET_OK;
}

/* COLL_OFI_PIECE_BYTES (a test's knob) cuts messages smaller than the provider needs,
 * so that tcp and shm, which take any size, run the piece path too. */
static void set_piece(ofi_net *n)
{
    const char *e = getenv("COLL_OFI_PIECE_BYTES");
    size_t want = e && *e ? strtoull(e, NULL, 10) : 0;
    n->piece = n->info->ep_attr->max_msg_size ? n->info->ep_attr->max_msg_size : SIZE_MAX;
    if (want && want < n->piece)
        n->piece = want;
}

static int ofi_init(const coll_net_init_args *args, void **net)
{
    ofi_net *n = calloc(1, sizeof(*n));
    if (!n)
        return COLL_NET_ERR_NOMEM;
    const char *prov = getenv("COLL_OFI_PROVIDER");
    void (*log)(int, const char *) = args->log;
    n->queue_tail = &n->queue;
    int rc = get_info(n, prov && *prov ? prov : "tcp;ofi_rxm", log);
    n->log = log;
    if (!rc)
        rc = open_endpoint(n, args->device);
    if (!rc)
        set_piece(n);
    if (rc) {
        net_close(n);
        return rc;
    }
    *net = n;
    return COLL_NET_OK;
}

static void ofi_finalize(void *net)
{
    net_close(net);
}

static int ofi_devices(void *net, int *ndev)
{
    (void)net;
    *ndev = 1;
    return COLL_NET_OK;
}

/* The speed in Mb/s the kernel gives a network interface (/sys/class/net/IF/speed), 0
 * where it gives none (a virtual interface says -1) or dom is no interface (shm's). */
static uint32_t iface_speed(const char *dom)
{
    char path[64 + IF_NAMESIZE];
    long v = 0;
    if (if_nametoindex(dom) == 0)
        return 0;
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", dom);
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%ld", &v) != 1)
        v = 0;
    if (f)
        fclose(f);
    return v > 0 ? (uint32_t)v : 0;
}

/* The provider's link speed, else its interface's: a speed of 0 keeps auto from taking
 * the plugin to other hosts (collective_net.h), right for shm's, which reaches this host
 * only, but not for tcp's over a NIC, which libfabric 1.17 gives no speed. */
static int ofi_get_properties(void *net, int dev, coll_net_props *props)
{
    ofi_net *n = net;
    if (dev != 0)
        return COLL_NET_ERR_INVALID;
    struct fi_info *i = n->info;
    snprintf(props->name, sizeof(props->name), "%s:%s", i->fabric_attr->prov_name,
             i->domain_attr->name);
    if (i->nic && i->nic->link_attr && i->nic->link_attr->speed)
        props->speed_mbps = (uint32_t)(i->nic->link_attr->speed / 1000000);
    else
        props->speed_mbps = iface_speed(i->domain_attr->name);
    return COLL_NET_OK;
}

static int peer_of(ofi_net *n, const void *addr, size_t len, fi_addr_t *fa)
{
    if (len > OFI_ADDR_MAX)
        return COLL_NET_ERR_INVALID;
    for (ofi_peer *p = n->peers; p; p = p->next)
        if (p->len == len && memcmp(p->addr, addr, len) == 0) {
            *fa = p->fa;
            return COLL_NET_OK;
        }
    ofi_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return COLL_NET_ERR_NOMEM;
    if (fi_av_insert(n->av, addr, 1, &p->fa, 0, NULL) != 1) {
        free(p);
        return COLL_NET_ERR_REMOTE;
    }
    memcpy(p->addr, addr, len);
    p->len = len, p->next = n->peers, n->peers = p;
    *fa = p->fa;
    return COLL_NET_OK;
}

static ofi_comm *comm_new(ofi_net *n, int kind, uint64_t id, fi_addr_t peer)
{
    ofi_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    *c = (ofi_comm){.net = n, .kind = kind, .id = id, .peer = peer, .next = n->comms};
    n->comms = c;
    return c;
}

static int ofi_listen(void *net, int dev, void *handle, void **listen_comm)
{
    ofi_net *n = net;
    if (dev != 0)
        return COLL_NET_ERR_INVALID;
    if (n->addrlen > OFI_ADDR_MAX) {
        say(n, NULL, COLL_NET_LOG_ERROR, "ofi: an endpoint address of %zu bytes is over %d",
            n->addrlen, OFI_ADDR_MAX);
        return COLL_NET_ERR_INTERNAL;
    }
    ofi_comm *c = comm_new(n, 'l', ++n->next_listen, FI_ADDR_UNSPEC);
    if (!c)
        return COLL_NET_ERR_NOMEM;
    ofi_handle h = {.magic = OFI_MAGIC, .listen_id = (uint32_t)c->id,
                    .addrlen = (uint16_t)n->addrlen};
    memcpy(h.addr, n->addr, n->addrlen);
    memcpy(handle, &h, sizeof(h));
    *listen_comm = c;
    return COLL_NET_OK;
}

/* Sends a control message (a hello or a bye), now or from a later progress(). */
static int send_ctrl(ofi_net *n, fi_addr_t to, const ofi_ctrl *m)
{
    ofi_op *o = op_new(n, OP_CTRL_SEND);
    if (!o)
        return COLL_NET_ERR_NOMEM;
    o->msg = *m, o->send = 1, o->buf = &o->msg, o->size = sizeof(o->msg), o->peer = to;
    o->tag = OFI_CTRL_TAG;
    post(n, o);
    return COLL_NET_OK;
}

static int ofi_connect(void *net, int dev, const void *handle, void **send_comm)
{
    ofi_net *n = net;
    ofi_handle h;
    memcpy(&h, handle, sizeof(h));
    if (dev != 0 || h.magic != OFI_MAGIC || h.addrlen > OFI_ADDR_MAX)
        return COLL_NET_ERR_INVALID;
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != sizeof(id))
        return COLL_NET_ERR_SYSTEM;
    fi_addr_t fa;
    int rc = peer_of(n, h.addr, h.addrlen, &fa);
    if (rc)
        return rc;
    ofi_ctrl m = {.magic = OFI_MAGIC, .type = CTRL_HELLO, .listen_id = h.listen_id,
                  .addrlen = (uint32_t)n->addrlen, .id = id & OFI_ID_MASK};
    memcpy(m.addr, n->addr, n->addrlen);
    rc = send_ctrl(n, fa, &m);
    ofi_comm *c = rc ? NULL : comm_new(n, 's', m.id, fa);
    if (!c)
        return rc ? rc : COLL_NET_ERR_NOMEM;
    *send_comm = c;
    return COLL_NET_OK;
}

static int ofi_accept(void *listen_comm, void **recv_comm)
{
    ofi_comm *l = listen_comm;
    ofi_net *n = l->net;
    *recv_comm = NULL;
    int rc = progress(n);
    ofi_hello *h = l->hellos;
    if (rc || !h)
        return rc;
    fi_addr_t fa;
    rc = peer_of(n, h->msg.addr, h->msg.addrlen, &fa);
    if (rc)
        return rc;
    ofi_comm *c = comm_new(n, 'r', h->msg.id, fa);
    if (!c)
        return COLL_NET_ERR_NOMEM;
    l->hellos = h->next;
    free(h);
    *recv_comm = c;
    return COLL_NET_OK;
}

/* A message's tag: the comm's id, the piece (0 for a message in one piece) and the
 * message's sequence number. */
static uint64_t tag_of(const ofi_comm *c, uint64_t seq)
{
    return (c->id << (OFI_PIECE_BITS + OFI_SEQ_BITS)) | (seq & OFI_SEQ_MASK);
}

/* Posts request r as `count` pieces of max_msg_size, the last one shorter (perhaps
 * empty), each with its index in the tag. A receive's room is cut the same way, so a
 * sender's piece i meets the receiver's piece i, and a message longer than the room
 * truncates the receiver's last piece. */
static void post_pieces(ofi_net *n, ofi_op *r, size_t count)
{
    size_t max = n->piece;
    for (size_t i = 0; i < count; i++) {
        ofi_op *p = op_new(n, OP_PIECE);
        if (!p) { /* the pieces posted end; the request fails */
            r->err = COLL_NET_ERR_NOMEM;
            return;
        }
        p->send = r->send, p->buf = (char *)r->buf + i * max, p->peer = r->peer;
        p->size = i + 1 < count ? max : r->size - i * max;
        p->tag = r->tag | (uint64_t)i << OFI_SEQ_BITS, p->parent = r, p->piece = (unsigned)i;
        r->pieces++;
        post(n, p);
    }
}

/* Starts one transfer of c: posted now, or queued behind others until the provider
 * takes it (progress() posts it). */
static int start(ofi_comm *c, void *data, size_t size, void **request)
{
    ofi_net *n = c->net;
    size_t pieces = size / n->piece + 1;
    if (pieces > OFI_PIECES_MAX) {
        say(n, NULL, COLL_NET_LOG_ERROR, "ofi: a message of %zu bytes is over %u pieces of "
            "%zu, the most one message takes over this provider", size, OFI_PIECES_MAX,
            n->piece);
        return COLL_NET_ERR_INVALID;
    }
    if (c->closed && (c->kind == 's' || c->posted >= c->peer_end))
        return COLL_NET_ERR_REMOTE;
    ofi_op *o = op_new(n, OP_REQ);
    if (!o)
        return COLL_NET_ERR_NOMEM;
    *o = (ofi_op){.kind = OP_REQ, .send = c->kind == 's', .owned = 1, .buf = data,
                  .size = size, .peer = c->peer, .tag = tag_of(c, c->posted),
                  .seq = c->posted, .comm = c, .prev = o->prev, .next = o->next};
    c->posted++;
    if (pieces == 1)
        post(n, o);
    else
        post_pieces(n, o, pieces);
    *request = o;
    return COLL_NET_OK;
}

static int ofi_isend(void *send_comm, const void *data, size_t size, void *mhandle,
                     void **request)
{
    (void)mhandle;
    return start(send_comm, (void *)data, size, request);
}

static int ofi_irecv(void *recv_comm, void *data, size_t size, void *mhandle, void **request)
{
    (void)mhandle;
    return start(recv_comm, data, size, request);
}

static int ofi_test(void *request, int *done, size_t *size)
{
    ofi_op *o = request;
    ofi_net *n = o->comm->net;
    int rc = o->done || o->err ? COLL_NET_OK : progress(n);
    *done = o->done;
    if (rc || o->err || o->done) {
        *size = o->len;
        rc = rc ? rc : o->err;
        o->owned = 0;
        op_release(n, o);
    }
    return rc;
}

/* Ends c's requests: posted receives are cancelled (their buffers untouched from then
 * on); posted sends are left to the provider, which frees nothing of ours later. */
static void comm_free(ofi_comm *c)
{
    ofi_net *n = c->net;
    for (ofi_op *o = n->ops, *x; o; o = x) {
        x = o->next;
        if (o->kind != OP_REQ || o->comm != c)
            continue;
        if (c->kind == 'r')
            cancel_recv(n, o, -1);
        o->comm = NULL, o->owned = 0;
        op_release(n, o);
    }
    for (ofi_comm **p = &n->comms; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    for (ofi_hello *h = c->hellos, *x; h; h = x)
        x = h->next, free(h);
    free(c);
}

static int close_with_bye(void *comm, int type)
{
    ofi_comm *c = comm;
    ofi_ctrl m = {.magic = OFI_MAGIC, .type = (uint32_t)type, .id = c->id, .count = c->posted};
    if (!c->closed)
        send_ctrl(c->net, c->peer, &m); /* a peer gone already needs no bye */
    progress(c->net);
    comm_free(c);
    return COLL_NET_OK;
}

static int ofi_close_send(void *send_comm)
{
    return close_with_bye(send_comm, CTRL_BYE_FROM_SEND);
}

static int ofi_close_recv(void *recv_comm)
{
    return close_with_bye(recv_comm, CTRL_BYE_FROM_RECV);
}

static int ofi_close_listen(void *listen_comm)
{
    comm_free(listen_comm);
    return COLL_NET_OK;
}

COLL_NET_EXPORT const coll_net_ops coll_net_plugin = {
    .version = COLL_NET_ABI_VERSION,
    .size = sizeof(coll_net_ops),
    .name = "ofi",
    .init = ofi_init,
    .finalize = ofi_finalize,
    .devices = ofi_devices,
    .get_properties = ofi_get_properties,
    .listen = ofi_listen,
    .connect = ofi_connect,
    .accept = ofi_accept,
    .isend = ofi_isend,
    .irecv = ofi_irecv,
    .test = ofi_test,
    .close_send = ofi_close_send,
    .close_recv = ofi_close_recv,
    .close_listen = ofi_close_listen,
};
