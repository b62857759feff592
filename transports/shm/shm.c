/* The shm transport: ranks on one host. Each one-directional connection is a ring of
 * bytes in an anonymous shared mapping (memfd) that the sender creates and hands to the
 * receiver over a Unix-domain socket with SCM_RIGHTS, with the sender's eventfd; the
 * receiver answers with its own eventfd. Messages (header, then payload) are copied into
 * the ring and out of it: two copies, no system call per byte. After copying, a side
 * rings the other's eventfd so its progress thread wakes and moves what it can.
 * The socket stays open only as a lifeline: EOF on it means the peer closed or died (the
 * kernel closes it even after SIGKILL), and nothing is left behind on any exit path, as
 * memfds, eventfds and abstract socket names vanish with their last user.
 * One mutex per context guards its connections; callers copy directly when they can
 * (a send into free ring space, a receive from data already there) and the progress
 * thread does the rest, so nothing depends on the caller polling. */
#include "base/log.h"
#include "base/util.h"
#include "collective.h"
#include "transports/accept.h"
#include "transports/conn.h"
#include "transports/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Data bytes per connection: a power of two in [RING_MIN, RING_MAX], chosen by the
 * sender from what the link is asked to hold. */
#define RING_MIN ((uint64_t)16 << 10)
#define RING_MAX ((uint64_t)4 << 20)
#define RING_DATA 256 /* where the data starts in the mapping */
/* The small ring's bytes, after the main ring's data (see lanes, below). */
#define SMALL ((uint64_t)4 << 10)

/* Room for the descriptors a message carries, aligned for cmsghdr, zeroed by users. */
typedef union {
    char buf[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
} fd_ctl;

/* Shared between the two processes; each side writes only its own cache lines. A side's
 * wake flag says it has requests waiting and no thread polling: only then must the other
 * side ring its eventfd. With callers polling, a message costs no system call. The flags
 * have lines of their own, apart from head and tail, which change with every message:
 * the peer reads a flag after every move, and finds it in its cache. */
struct ring {
    _Alignas(64) _Atomic uint64_t head; /* bytes ever written, by the sender */
    _Alignas(64) _Atomic uint64_t tail; /* bytes ever consumed, by the receiver */
    _Atomic uint64_t small_tail;        /* the same, of the small ring */
    _Alignas(64) _Atomic uint32_t tx_wake;
    _Alignas(64) _Atomic uint32_t rx_wake;
    uint64_t key; /* the sender's stamp key (below), written before the ring is handed over */
};
_Static_assert(sizeof(struct ring) <= RING_DATA, "ring header fits before the data");

/* The mapping's bytes for a main ring of cap bytes: the shared page, then both rings. */
static size_t ring_bytes(uint64_t cap)
{
    return (size_t)(RING_DATA + cap + SMALL);
}

/* A connection carries two rings in one mapping. The main ring (`cap` bytes, a head
 * and stamps) takes any message, in pieces if need be. The small ring (SMALL bytes,
 * stamps only) takes whole messages of the fast path while the receiver keeps up: its
 * lines come round every few messages and stay in both cores' first-level caches, so
 * the sender's write only invalidates the receiver's copy. A raw ping-pong of 256-byte
 * messages here took 150 ns through a ring of 16 KiB or more and 100 ns through one of 4
 * KiB. The sender writes the small ring only while the main ring holds nothing unread,
 * so whatever is unread in the small ring was sent before whatever is unread in the main
 * ring: the receiver takes the small ring's first, and looks at it again after the main
 * ring and before it takes from there (a small message sent before what it found there
 * is then seen). The main ring stays for everything else: a full small ring never holds
 * a sender back. */
typedef struct lane {
    char *data;
    uint64_t cap;           /* data bytes: kept here, never read from the shared page */
    uint64_t pos;           /* our own count (sender: written, receiver: consumed) */
    uint64_t seen;          /* sender: the receiver's count when last read and found sane */
    _Atomic uint64_t *tail; /* the receiver's count on the shared page */
} lane;

struct cl_tr_conn {
    cl_conn base; /* first: the lifeline, the queue, the failure (conn.h) */
    cl_tr_ctx *ctx;
    int is_recv, peer_efd;
    struct ring *ring;
    lane big, small;
    unsigned small_wait; /* sender: fast-path sends before the main ring's tail is read again */
    uint64_t key;        /* the ring's stamp key, kept here */
    int peer_gone;       /* EOF on the lifeline: deliver what is in the ring, then fail */
    char name[CL_HANDLE_BYTES + 16];
};

struct cl_tr_listener {
    cl_listener base; /* first */
    cl_tr_ctx *ctx;
    char name[64];
};

struct cl_tr_ctx {
    cl_conns set; /* its progress mutex guards the connections */
    int pollers;  /* threads between CL_POLL_BEGIN and CL_POLL_END */
};

static _Atomic uint32_t *wake_flag(cl_tr_conn *c, int peer)
{
    return (c->is_recv ^ peer) ? &c->ring->rx_wake : &c->ring->tx_wake;
}

/* Our wake flag from our queue and pollers. Raised before the pump that follows it, with a
 * fence between (store flag, fence, read head/tail), pairing with ring_peer's (store
 * head/tail, fence, read flag): either the peer rings or our pump sees its bytes. */
static void update_wake(cl_tr_conn *c)
{
    if (!c->ring)
        return;
    /* Stored only on a change: the peer reads this flag after every move, and a store
     * would take its line away from the peer each poll. */
    uint32_t want = c->base.q.head && !c->ctx->pollers;
    if (atomic_load_explicit(wake_flag(c, 0), memory_order_relaxed) != want)
        atomic_store_explicit(wake_flag(c, 0), want, memory_order_relaxed);
}

/* After moving bytes: wakes the peer's thread if it waits with nobody polling. */
static void ring_peer(cl_tr_conn *c)
{
    uint64_t one = 1;
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(wake_flag(c, 1), memory_order_relaxed))
        return;
    if (c->peer_efd >= 0 && write(c->peer_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        cl_log(COLL_LOG_DEBUG, "shm: cannot wake %s: %s", c->name, strerror(errno));
}

/* Every message starts on a cache line of the ring: the sender writing the next message
 * never writes the line the receiver is still reading the last one from, and a header
 * never wraps. The bytes skipped to get there are never written nor read. The line
 * starts with a stamp, then the header: once a message is all in the ring, its sender
 * stamps it with its position mixed with the ring's random key, so a receiver that
 * finds the stamp has the whole message and need not read the head's line (a second
 * transfer between cores). A stale stamp names an older position and payload bytes
 * would have to guess the key. The head stays the truth for messages taken in pieces
 * (the general path) and for a message longer than the ring, never stamped. */
#define SHM_ALIGN 64u
#define STAMP 8u

/* The bytes before the header of a message that starts at or after pos. */
static uint64_t lead(uint64_t pos)
{
    return ((SHM_ALIGN - (pos & (SHM_ALIGN - 1))) & (SHM_ALIGN - 1)) + STAMP;
}

static _Atomic uint64_t *stamp_at(const lane *l, uint64_t header_pos)
{
    return (_Atomic uint64_t *)(void *)(l->data + ((header_pos - STAMP) & (l->cap - 1)));
}

/* The stamp of the header at stream position header_pos; never 0 (the key's top bit). */
static uint64_t stamp_of(const cl_tr_conn *c, uint64_t header_pos)
{
    return c->key ^ header_pos;
}

/* Sender: stamps the message of `total` bytes (header and payload) that ends at l->pos,
 * now all in the ring. Not one longer than the ring with its stamp: its own last bytes
 * may lie where the stamp goes. Its first bytes may have been read already: the slot is
 * then free, and this sender writes there next only a lap later. */
static void stamp(const cl_tr_conn *c, const lane *l, size_t total)
{
    uint64_t at = l->pos - total;
    if (STAMP + total <= l->cap)
        atomic_store_explicit(stamp_at(l, at), stamp_of(c, at), memory_order_release);
}

/* Copies n bytes between a buffer and a ring at stream position pos (wrapping). */
static void ring_copy(const lane *l, uint64_t pos, void *mem, size_t n, int into_ring)
{
    uint64_t cap = l->cap, at = pos & (cap - 1);
    size_t first = (size_t)(cap - at < n ? cap - at : n);
    if (into_ring) {
        memcpy(l->data + at, mem, first);
        memcpy(l->data, (char *)mem + first, n - first);
    } else {
        memcpy(mem, l->data + at, first);
        memcpy((char *)mem + first, l->data, n - first);
    }
}

/* Hands n payload bytes at stream position pos to r's sink. The payload starts aligned
 * (sink_fits) and n is whole elements, so the ring's end, a multiple of any element
 * size, never splits one. */
static void ring_take(cl_tr_conn *c, uint64_t pos, cl_tr_req *r, size_t n)
{
    const cl_tr_sink *s = r->sink;
    size_t off = r->moved - sizeof(cl_msg_hdr);
    uint64_t cap = c->big.cap, at = pos & (cap - 1);
    size_t first = (size_t)(cap - at < n ? cap - at : n);
    s->take(s->arg, off, c->big.data + at, first);
    if (first < n)
        s->take(s->arg, off + first, c->big.data, n - first);
}

/* The kernels behind a sink load whole typed elements: a payload the stream left off
 * its element alignment (after a message of odd length) is copied out instead. */
static int sink_fits(const cl_tr_conn *c, const cl_tr_req *r, uint64_t payload_pos)
{
    size_t a = r->sink->align;
    return a && (a & (a - 1)) == 0 && c->big.cap % a == 0 && payload_pos % a == 0;
}

/* The peer's counter on the shared page said what no peer could (more in the ring than
 * it holds): it drives memcpy lengths, so the link fails instead. */
static int lied(cl_tr_conn *c)
{
    cl_log(COLL_LOG_WARN, "shm: %s: the peer wrote an impossible ring position: %s", c->name,
           coll_strerror(COLL_EPROTO));
    cl_conn_fail(c, COLL_EPROTO);
    return -1;
}

/* Sender: the room to write in l, from the receiver's count re-read; -1 when it lied. */
static int lane_room(cl_tr_conn *c, lane *l, uint64_t *room)
{
    uint64_t tail = atomic_load_explicit(l->tail, memory_order_acquire);
    if (l->pos - tail > l->cap)
        return lied(c);
    l->seen = tail;
    *room = l->cap - (l->pos - tail);
    return 0;
}

/* Receiver: the bytes to read, from the sender's head; -1 when it lied. A head behind
 * our position is one a stamped message (below) was read past before the head moved. */
static int receiver_avail(cl_tr_conn *c, uint64_t *avail)
{
    uint64_t head = atomic_load_explicit(&c->ring->head, memory_order_acquire);
    if (head - c->big.pos > c->big.cap && c->big.pos - head > c->big.cap)
        return lied(c);
    *avail = head - c->big.pos > c->big.cap ? 0 : head - c->big.pos;
    return 0;
}

/* Sends: as much of the queued messages as fits. Returns the bytes moved. */
static size_t pump_send(cl_tr_conn *c)
{
    size_t moved = 0;
    while (c->base.q.head && !c->base.dead) {
        cl_tr_req *r = c->base.q.head;
        uint64_t skip = r->moved ? 0 : lead(c->big.pos), head = c->big.pos + skip;
        size_t total = sizeof(cl_msg_hdr) + r->len, n = total - r->moved;
        /* The tail's line is the receiver's: read it only when the room known is short. */
        uint64_t room = c->big.cap - (c->big.pos - c->big.seen);
        if (room < skip + n && lane_room(c, &c->big, &room) != 0)
            break;
        if (room <= skip)
            break;
        room -= skip;
        n = n < room ? n : (size_t)room;
        if (n == 0)
            break;
        size_t h = sizeof(cl_msg_hdr), done = 0;
        if (r->moved < h) {
            done = n < h - r->moved ? n : h - r->moved;
            ring_copy(&c->big, head, (char *)&r->hdr_out + r->moved, done, 1);
        }
        if (n > done)
            ring_copy(&c->big, head + done, (char *)r->buf + (r->moved + done - h), n - done, 1);
        r->moved += n;
        c->big.pos = head + n;
        if (r->moved == total)
            stamp(c, &c->big, total);
        atomic_store_explicit(&c->ring->head, c->big.pos, memory_order_release);
        moved += n;
        if (r->moved < total)
            break;
        cl_reqq_finish_head(&c->base.q, COLL_OK);
    }
    return moved;
}

/* A header arrived: sane, and does a payload fit in cap? Fails the connection if not. */
static int header_ok(cl_tr_conn *c, const cl_msg_hdr *h, size_t cap)
{
    if (h->magic != CL_MSG_MAGIC) {
        cl_conn_fail(c, COLL_EPROTO);
        return 0;
    }
    if (h->len > cap) {
        /* Debug only: the caller names a real mismatch, and a farewell probe (a 0-byte
         * receive) that meets a data message is no error. */
        cl_log(COLL_LOG_DEBUG, "shm: %s sent a %u-byte message for a %zu-byte receive", c->name,
               h->len, cap);
        cl_conn_fail(c, COLL_EMISMATCH);
        return 0;
    }
    return 1;
}

/* Whether l's next message is stamped there whole; its header's position in *at. */
static int stamped(const cl_tr_conn *c, const lane *l, uint64_t *at)
{
    uint64_t pos = __atomic_load_n(&l->pos, __ATOMIC_RELAXED);
    *at = pos + lead(pos);
    return atomic_load_explicit(stamp_at(l, *at), memory_order_acquire) == stamp_of(c, *at);
}

/* A whole message's payload (its header, at stream position `at`, is in *hdr) into buf;
 * the receiver's count moves past it. */
static void take_payload(lane *l, uint64_t at, const cl_msg_hdr *hdr, void *buf)
{
    if (hdr->len) /* an empty message may come with no buffer at all */
        ring_copy(l, at + sizeof(*hdr), buf, hdr->len, 0);
    l->pos = at + sizeof(*hdr) + hdr->len;
    atomic_store_explicit(l->tail, l->pos, memory_order_release);
}

/* A receive from the small ring, if its next message is there (COLL_INPROGRESS if not):
 * its payload into buf (cap bytes). A message longer than the ring fails the link. */
static int small_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    uint64_t at;
    if (!stamped(c, &c->small, &at))
        return COLL_INPROGRESS;
    ring_copy(&c->small, at, hdr, sizeof(*hdr), 0);
    if (!header_ok(c, hdr, cap))
        return c->base.dead;
    /* No sender writes a message longer than the ring: it would overlap itself. */
    if (STAMP + sizeof(*hdr) + hdr->len > c->small.cap) {
        cl_conn_fail(c, COLL_EPROTO);
        return c->base.dead;
    }
    take_payload(&c->small, at, hdr, buf);
    *nbytes = hdr->len;
    return COLL_OK; /* no ring_peer: no sender waits for the small ring's room */
}

/* The general path's receive r, not begun, takes the small ring's next message if there
 * is one (the main ring was looked at first). 1 when it did or the connection failed. */
static int small_into(cl_tr_conn *c, cl_tr_req *r, size_t *moved)
{
    size_t n;
    int rc = small_now(c, r->hdr_in, r->buf, r->len, &n);
    if (rc == COLL_INPROGRESS)
        return 0;
    if (rc == COLL_OK) {
        r->len = n;
        *moved += sizeof(*r->hdr_in) + n;
        cl_reqq_finish_head(&c->base.q, COLL_OK);
    }
    return 1;
}

/* Receives: fills posted receives from the rings. Returns the bytes moved. */
static size_t pump_recv(cl_tr_conn *c)
{
    size_t moved = 0;
    const size_t h = sizeof(cl_msg_hdr);
    while (c->base.q.head && !c->base.dead) {
        cl_tr_req *r = c->base.q.head;
        uint64_t skip = r->moved ? 0 : lead(c->big.pos), tail = c->big.pos + skip, avail;
        if (receiver_avail(c, &avail) != 0)
            break;
        if (!r->moved && small_into(c, r, &moved))
            continue;
        avail = avail > skip ? avail - skip : 0;
        size_t want = r->moved < h ? h - r->moved : h + r->hdr_in->len - r->moved;
        size_t n = want < avail ? want : (size_t)avail;
        if (r->sinking)
            n -= n % r->sink->align; /* whole elements only; the rest follows */
        if (n == 0)
            break;
        if (r->moved < h)
            ring_copy(&c->big, tail, (char *)r->hdr_in + r->moved, n, 0);
        else if (r->sinking)
            ring_take(c, tail, r, n);
        else
            ring_copy(&c->big, tail, (char *)r->buf + (r->moved - h), n, 0);
        r->moved += n;
        c->big.pos = tail + n;
        atomic_store_explicit(&c->ring->tail, c->big.pos, memory_order_release);
        moved += n;
        if (r->moved == h && !header_ok(c, r->hdr_in, r->len))
            break;
        if (r->moved == h && r->sink && sink_fits(c, r, tail + n))
            r->sinking = r->sink->accept(r->sink->arg, r->hdr_in);
        if (r->moved < h || r->moved < h + r->hdr_in->len)
            continue;
        r->len = r->hdr_in->len;
        cl_reqq_finish_head(&c->base.q, COLL_OK);
    }
    /* The sender is gone and the rings hold no more for the waiting receive. */
    uint64_t avail, at;
    if (c->peer_gone && c->base.q.head && !c->base.dead && receiver_avail(c, &avail) == 0 &&
        avail == 0 && !stamped(c, &c->small, &at))
        cl_conn_fail(c, COLL_EPEER);
    return moved;
}

/* Under the context's mutex. Returns the bytes moved. */
static size_t pump(cl_tr_conn *c)
{
    size_t moved = c->is_recv ? pump_recv(c) : pump_send(c);
    update_wake(c);
    if (moved)
        ring_peer(c);
    return moved;
}

/* The lifeline says something: the peer's eventfd (its answer to our hello) or EOF. */
static void on_lifeline(cl_tr_conn *c)
{
    char b;
    fd_ctl ctl = {{0}};
    struct iovec v = {&b, 1};
    struct msghdr m = {.msg_iov = &v,
                       .msg_iovlen = 1,
                       .msg_control = ctl.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int))};
    ssize_t n = recvmsg(c->base.sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n > 0) {
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        if (h && h->cmsg_type == SCM_RIGHTS && c->peer_efd < 0)
            memcpy(&c->peer_efd, CMSG_DATA(h), sizeof(int));
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    c->peer_gone = 1;
    cl_progress_unwatch(&c->ctx->set.pg, c->base.sock);
    if (!c->is_recv)
        cl_conn_fail(c, COLL_EPEER);
    cl_log(COLL_LOG_DEBUG, "shm: %s: peer closed", c->name);
}

static void on_ready(void *arg, void *conn)
{
    (void)arg;
    on_lifeline(conn);
}

static size_t pump_all(cl_tr_ctx *ctx)
{
    size_t moved = 0;
    for (cl_tr_conn *c = ctx->set.all; c; c = c->base.next)
        moved += pump(c);
    return moved;
}

static void on_round(void *arg)
{
    pump_all(arg);
}

static int shm_listen(cl_tr_ctx *ctx, char handle[CL_HANDLE_BYTES], cl_tr_listener **out)
{
    static atomic_uint counter;
    cl_tr_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return COLL_ENOMEM;
    l->ctx = ctx;
    snprintf(l->name, sizeof(l->name), "libcollective-shm-%d-%u-%llx", (int)getpid(),
             atomic_fetch_add(&counter, 1), (unsigned long long)cl_now_ms());
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, l->name, strlen(l->name)); /* abstract: no file to clean up */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(l->name));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, len) || listen(fd, 128)) {
        if (fd >= 0)
            close(fd);
        free(l);
        return COLL_ESYS;
    }
    memset(handle, 0, CL_HANDLE_BYTES);
    snprintf(handle, CL_HANDLE_BYTES, "shm:%s", l->name);
    cl_conns_add_listener(&ctx->set, l, fd);
    *out = l;
    return COLL_OK;
}

/* MAP_POPULATE fills the page tables, but under a hypervisor that shadows them (PVM) the
 * first touch of each page still traps to the host, ~10 us each: 2 KiB messages ran at
 * 8 us instead of 2 us until the ring had wrapped once. The creator writes every page
 * (they are zero anyway); the receiver only reads, as data may already be arriving. */
static void touch_pages(char *p, size_t bytes, int write)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < bytes; off += page) {
        if (write)
            ((volatile char *)p)[off] = 0;
        else
            (void)((volatile char *)p)[off];
    }
}

/* The ring size for a link asked to hold `want` bytes: the largest power of two not
 * above it, within [RING_MIN, RING_MAX]. */
static uint64_t ring_cap(size_t want)
{
    uint64_t cap = RING_MIN;
    while (cap < RING_MAX && cap * 2 <= want)
        cap *= 2;
    return cap;
}

/* A stamp key: random, its top bit set so that no stamp is 0 (a fresh ring's bytes) for
 * any position a ring reaches. Without getrandom, the clock and an address: stamps need
 * to be unlikely in payloads, not secret. */
static uint64_t new_key(void)
{
    uint64_t k;
    void *where = &k;
    if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k))
        k = cl_hash(&where, sizeof(where), (uint64_t)cl_now_us());
    return k | (uint64_t)1 << 63;
}

/* A ring's size can never change: a peer that shrank it under our mapping would make our
 * next access SIGBUS. The creator seals it; the receiver maps only a sealed one. */
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

/* Maps the ring of memfd: `cap` data bytes when creating it (and sealing it), else the
 * size the creator gave it, which must be sealed and one a sender could have chosen. */
static int map_ring(cl_tr_conn *c, int memfd, uint64_t cap)
{
    int create = cap != 0;
    struct stat st;
    if (create && (ftruncate(memfd, (off_t)ring_bytes(cap)) != 0 ||
                   fcntl(memfd, F_ADD_SEALS, RING_SEALS | F_SEAL_SEAL) != 0))
        return -1;
    if (!create) {
        int seals = fcntl(memfd, F_GET_SEALS);
        if (seals < 0 || (seals & RING_SEALS) != RING_SEALS)
            return -1; /* it could shrink under us */
        if (fstat(memfd, &st) != 0 || st.st_size < (off_t)ring_bytes(RING_MIN))
            return -1; /* not a ring of ours */
        cap = (uint64_t)st.st_size - ring_bytes(0);
        if (cap > RING_MAX || (cap & (cap - 1)) != 0)
            return -1;
    }
    size_t bytes = ring_bytes(cap);
    /* Populated now: no page faults on the data path later (each costs microseconds),
     * and the memory a connection holds is all there from the start. */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
    if (p == MAP_FAILED)
        return -1;
    touch_pages(p, bytes, create);
    c->ring = p;
    c->big = (lane){.data = (char *)p + RING_DATA, .cap = cap, .tail = &c->ring->tail};
    c->small = (lane){.data = c->big.data + cap, .cap = SMALL, .tail = &c->ring->small_tail};
    if (create)
        c->ring->key = new_key();
    c->key = c->ring->key; /* the receiver's: whatever the sender wrote, read once */
    return 0;
}

static cl_tr_conn *conn_new(cl_tr_ctx *ctx, int sock, int is_recv)
{
    cl_tr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->base.set = &ctx->set;
    c->base.sock = sock;
    c->ctx = ctx;
    c->peer_efd = -1;
    c->is_recv = is_recv;
    return c;
}

/* The two descriptors a hello carries (ring, eventfd) into fds; any other number of
 * them, or anything else, is closed and leaves fds at -1. */
static void take_fds(struct msghdr *m, int fds[2])
{
    for (struct cmsghdr *ch = CMSG_FIRSTHDR(m); ch; ch = CMSG_NXTHDR(m, ch)) {
        if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        memcpy(got, CMSG_DATA(ch), CL_MIN(k, (size_t)8) * sizeof(int));
        for (size_t i = 0; i < CL_MIN(k, (size_t)8); i++) {
            if (k == 2 && fds[i] < 0)
                fds[i] = got[i];
            else
                close(got[i]);
        }
    }
}

/* Only a process of this user may hand us memory to map: the kernel says who connected. */
static int same_user(int s, const cl_tr_listener *l)
{
    struct ucred who;
    socklen_t len = sizeof(who);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &who, &len) == 0 && who.uid == geteuid())
        return 1;
    cl_log(COLL_LOG_WARN, "shm: refused a connection to %s from uid %d (this process: %d)",
           l->name, len == sizeof(who) ? (int)who.uid : -1, (int)geteuid());
    return 0;
}

/* The hello and two descriptors (ring, the sender's eventfd) from an accepted socket,
 * mapped and answered only once the sender's user and the hello pass:
 * 1 when a connection was made, 0 when nothing has arrived yet, -1 to drop it. */
static int take_hello(void *arg, cl_pending *p)
{
    cl_accepting *a = arg;
    cl_tr_listener *l = a->l;
    int s = p->fd;
    uint8_t h[CL_HELLO_BYTES];
    fd_ctl ctl = {{0}};
    struct iovec v = {h, sizeof(h)};
    struct msghdr m = {
        .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    int fds[2] = {-1, -1};
    take_fds(&m, fds);
    cl_tr_conn *c = n == CL_HELLO_BYTES && fds[0] >= 0 && fds[1] >= 0 && same_user(s, l) &&
                            cl_listen_vet(&l->base.lfd, h, "shm")
                        ? conn_new(l->ctx, s, 1)
                        : NULL;
    int ok = c && map_ring(c, fds[0], 0) == 0;
    if (fds[0] >= 0)
        close(fds[0]); /* the mapping keeps the ring */
    char b = 0;
    fd_ctl rctl = {{0}};
    struct iovec rv = {&b, 1};
    struct msghdr r = {.msg_iov = &rv,
                       .msg_iovlen = 1,
                       .msg_control = rctl.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int))};
    struct cmsghdr *rh = CMSG_FIRSTHDR(&r);
    rh->cmsg_level = SOL_SOCKET, rh->cmsg_type = SCM_RIGHTS, rh->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(rh), &l->ctx->set.pg.efd, sizeof(int));
    /* A sender whose messages all fit in the ring may have finished and left before we
     * took its link: nobody waits for our eventfd then, and the ring still holds them. */
    if (ok && sendmsg(s, &r, MSG_NOSIGNAL) != 1 && errno != EPIPE && errno != ECONNRESET)
        ok = 0;
    if (!ok) {
        if (fds[1] >= 0)
            close(fds[1]);
        if (c && c->ring)
            munmap(c->ring, ring_bytes(c->big.cap));
        free(c);
        cl_log(COLL_LOG_WARN, "shm: dropped a connection to %s without a valid hello", l->name);
        return -1;
    }
    c->peer_efd = fds[1];
    snprintf(c->name, sizeof(c->name), "%s/in", l->name);
    memcpy(a->hello, h, sizeof(h));
    cl_conn_link(c);
    *a->out = c;
    return 1;
}

static int shm_accept(cl_tr_listener *l, uint8_t hello[CL_HELLO_BYTES], cl_tr_conn **out)
{
    cl_accepting a = {l, hello, out};
    return cl_listen_accept(&l->base.lfd, take_hello, &a);
}

static int shm_connect(cl_tr_ctx *ctx, const char handle[CL_HANDLE_BYTES],
                       const uint8_t hello[CL_HELLO_BYTES], size_t want, cl_tr_conn **out)
{
    char name[CL_HANDLE_BYTES + 1];
    memcpy(name, handle, CL_HANDLE_BYTES);
    name[CL_HANDLE_BYTES] = 0;
    if (strncmp(name, "shm:", 4) != 0 ||
        strlen(name + 4) >= sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
        return COLL_EINVAL;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, name + 4, strlen(name + 4));
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name + 4));
    /* Never blocks: a listener whose backlog is full says EAGAIN, and the caller accepts
     * its own connections before it tries again (ranks that all dial first would
     * otherwise wait on each other for good). */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return COLL_ESYS;
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        int busy = errno == EAGAIN;
        close(s);
        return busy ? COLL_INPROGRESS : COLL_EPEER;
    }
    int memfd = memfd_create("libcollective-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    cl_tr_conn *c = conn_new(ctx, s, 0);
    int ok = c && memfd >= 0 && map_ring(c, memfd, ring_cap(want)) == 0;
    fd_ctl ctl = {{0}};
    struct iovec v = {(void *)hello, CL_HELLO_BYTES};
    struct msghdr m = {
        .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(h), (int[]){memfd, ctx->set.pg.efd}, 2 * sizeof(int));
    ok = ok && sendmsg(s, &m, MSG_NOSIGNAL) == CL_HELLO_BYTES;
    if (memfd >= 0)
        close(memfd);
    if (!ok) {
        if (c && c->ring)
            munmap(c->ring, ring_bytes(c->big.cap));
        free(c);
        close(s);
        return COLL_EPEER;
    }
    snprintf(c->name, sizeof(c->name), "%s/out", name + 4);
    cl_conn_link(c);
    *out = c;
    return COLL_OK;
}

/* A request joined c's queue (cl_conn_enqueue): our wake flag goes up before the pump,
 * with the fence update_wake asks for, so the peer rings if the pump misses its bytes. */
static void queued(cl_tr_conn *c)
{
    update_wake(c);
    atomic_thread_fence(memory_order_seq_cst);
    pump(c);
}

static int shm_irecv_sink(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap,
                          const cl_tr_sink *sink, cl_tr_req **out)
{
    cl_tr_req *r = cl_req_recv(&c->ctx->set.reqs, hdr, buf, cap);
    if (r)
        r->sink = sink;
    return cl_conn_enqueue(c, r, out);
}

/* The fast path (transport.h): a caller that finds the connection idle copies a whole
 * message in or out under the context's mutex, if nobody else holds it. */
static int now_ok(cl_tr_conn *c)
{
    if (!cl_lock_try(&c->ctx->set.pg.mu))
        return COLL_INPROGRESS;
    int rc = c->base.dead ? c->base.dead : c->base.q.head || !c->ring ? COLL_INPROGRESS : COLL_OK;
    if (rc != COLL_OK)
        cl_lock_give(&c->ctx->set.pg.mu);
    return rc;
}

/* A whole message into l, room known to be there, published with its stamp and, in the
 * main ring, one head store (the fast path's sends and the farewell). */
static void put_whole(cl_tr_conn *c, lane *l, const cl_msg_hdr *hdr, const void *buf)
{
    /* The stamp's line is the one the receiver polls: written last and at once (one
     * transfer of the line away from the poller), its stamp after everything else. */
    size_t h = sizeof(*hdr), in_line = SHM_ALIGN - STAMP - h;
    size_t first = hdr->len < in_line ? hdr->len : in_line;
    l->pos += lead(l->pos);
    if (hdr->len > first)
        ring_copy(l, l->pos + h + first, (char *)buf + first, hdr->len - first, 1);
    char *at = l->data + (l->pos & (l->cap - 1)); /* the header never wraps */
    memcpy(at, hdr, h);
    if (first) /* an empty message may come with no buffer at all */
        memcpy(at + h, buf, first);
    l->pos += h + hdr->len;
    stamp(c, l, h + hdr->len);
    if (l == &c->big)
        atomic_store_explicit(&c->ring->head, l->pos, memory_order_release);
    ring_peer(c);
}

/* Whether the small ring takes a message of `total` bytes (header and payload): room for
 * it, and nothing unread in the main ring. While the receiver lags there, its tail is
 * read again only every 16th send: each read takes the line from the receiver. */
static int small_takes(cl_tr_conn *c, size_t total)
{
    lane *l = &c->small;
    uint64_t n = lead(l->pos) + total, room = l->cap - (l->pos - l->seen);
    if (n > l->cap)
        return 0;
    if (c->big.pos != c->big.seen) {
        uint64_t big_room;
        if (c->small_wait) {
            c->small_wait--;
            return 0;
        }
        if (lane_room(c, &c->big, &big_room) != 0)
            return 0;
        if (c->big.pos != c->big.seen) {
            c->small_wait = 15;
            return 0;
        }
    }
    return room >= n || (lane_room(c, l, &room) == 0 && room >= n);
}

static int shm_send_now(cl_tr_conn *c, const cl_msg_hdr *hdr, const void *buf)
{
    int rc = now_ok(c);
    if (rc != COLL_OK)
        return rc;
    size_t h = sizeof(*hdr), n = lead(c->big.pos) + h + hdr->len;
    lane *l = small_takes(c, h + hdr->len) ? &c->small : &c->big;
    uint64_t room = c->big.cap - (c->big.pos - c->big.seen);
    if (c->base.dead)
        rc = c->base.dead;
    else if (l == &c->big && room < n && lane_room(c, l, &room) != 0)
        rc = c->base.dead;
    else if (l == &c->big && room < n)
        rc = COLL_INPROGRESS;
    if (rc == COLL_OK)
        put_whole(c, l, hdr, buf);
    cl_lock_give(&c->ctx->set.pg.mu);
    return rc;
}

/* Not whole yet: a sender that is gone sends no more. */
static int not_whole(cl_tr_conn *c)
{
    if (!c->peer_gone)
        return COLL_INPROGRESS;
    cl_conn_fail(c, COLL_EPEER);
    return COLL_EPEER;
}

/* Whether a poll may find something whole (a stamp in either ring, the peer gone, a
 * failure), by loads of lines that stay in this core's cache until the sender writes
 * them, so that a poll that finds nothing takes no lock. Not the head: its line read at
 * every poll costs the sender one more transfer per message. (pos changes only under
 * the mutex, and a stale read only sends this poll on to the locked check.) */
static int news(cl_tr_conn *c)
{
    uint64_t at;
    return !c->ring || stamped(c, &c->big, &at) || stamped(c, &c->small, &at) || c->peer_gone ||
           c->base.dead;
}

/* The fast path's receive, under the mutex: the small ring's next message if there is
 * one, else the main ring's if it is whole. Whatever is unread in the small ring was sent
 * first; the small ring is looked at again once the main ring was, so that a small
 * message sent before what the main ring showed is seen. */
static int take_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    const size_t h = sizeof(*hdr);
    int rc = small_now(c, hdr, buf, cap, nbytes);
    if (rc != COLL_INPROGRESS)
        return rc;
    /* Stamped: whole, as far as the ring can hold it (a larger claim is left to the head). */
    uint64_t at, avail = c->big.cap;
    int whole = stamped(c, &c->big, &at);
    if (!whole && receiver_avail(c, &avail) != 0)
        return c->base.dead;
    if ((rc = small_now(c, hdr, buf, cap, nbytes)) != COLL_INPROGRESS)
        return rc;
    uint64_t skip = at - c->big.pos;
    if (avail < skip + h)
        return not_whole(c);
    avail -= skip;
    ring_copy(&c->big, at, hdr, h, 0);
    if (!header_ok(c, hdr, cap))
        return c->base.dead;
    if (avail < h + hdr->len)
        return not_whole(c);
    take_payload(&c->big, at, hdr, buf);
    *nbytes = hdr->len;
    ring_peer(c);
    return COLL_OK;
}

static int shm_recv_now(cl_tr_conn *c, cl_msg_hdr *hdr, void *buf, size_t cap, size_t *nbytes)
{
    if (!news(c))
        return COLL_INPROGRESS;
    int rc = now_ok(c);
    if (rc != COLL_OK)
        return rc;
    rc = take_now(c, hdr, buf, cap, nbytes);
    cl_lock_give(&c->ctx->set.pg.mu);
    return rc;
}

/* Only a send connection with no message half written may carry the farewell. It is in
 * the ring when this returns: nothing to wait for (0). */
static int say_farewell(cl_tr_conn *c, const cl_msg_hdr *h)
{
    uint64_t room;
    if (c->is_recv || c->base.dead || c->base.q.head || !c->ring ||
        lane_room(c, &c->big, &room) != 0 || room < lead(c->big.pos) + sizeof(*h))
        return 0;
    put_whole(c, &c->big, h, NULL); /* header only: its len is 0 */
    return 0;
}

static void shm_shutdown(cl_tr_ctx *ctx, int status, const cl_msg_hdr *farewell)
{
    cl_conns_shutdown(&ctx->set, status, farewell);
}

/* A poller never waits for the mutex: the progress thread holding it is moving bytes. */
static size_t shm_poll(cl_tr_ctx *ctx, int mode)
{
    if (mode == CL_POLL) {
        if (!cl_lock_try(&ctx->set.pg.mu))
            return 0;
        size_t moved = pump_all(ctx);
        cl_lock_give(&ctx->set.pg.mu);
        return moved;
    }
    cl_lock_take(&ctx->set.pg.mu);
    ctx->pollers += mode == CL_POLL_BEGIN ? 1 : -1;
    for (cl_tr_conn *c = ctx->set.all; c; c = c->base.next)
        update_wake(c);
    if (mode == CL_POLL_END && ctx->pollers == 0) {
        atomic_thread_fence(memory_order_seq_cst);
        pump_all(ctx);
    }
    cl_lock_give(&ctx->set.pg.mu);
    return 0;
}

static const char *shm_peer_name(cl_tr_conn *c)
{
    return c->name;
}

/* At destroy, after the progress thread stopped. */
static void conn_free(cl_tr_conn *c)
{
    cl_conn_close_sock(c);
    if (c->peer_efd >= 0)
        close(c->peer_efd);
    if (c->ring)
        munmap(c->ring, ring_bytes(c->big.cap));
    free(c);
}

static const cl_conn_ops shm_ops = {
    .fail = cl_conn_fail,
    .queued = queued,
    .farewell = say_farewell,
    .release = conn_free,
};

static int shm_ctx_create(const cl_tr_config *cfg, cl_tr_ctx **out)
{
    cl_tr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return COLL_ENOMEM;
    cl_conns_init(&ctx->set, &shm_ops, &cl_transport_shm, cfg);
    if (cl_progress_start(&ctx->set.pg, on_ready, on_round, ctx) != COLL_OK) {
        free(ctx);
        return COLL_ESYS;
    }
    *out = ctx;
    return COLL_OK;
}

static void shm_ctx_destroy(cl_tr_ctx *ctx)
{
    cl_progress_stop(&ctx->set.pg);
    cl_conns_free(&ctx->set);
    free(ctx);
}

const cl_transport cl_transport_shm = {
    .name = "shm",
    .ctx_create = shm_ctx_create,
    .ctx_destroy = shm_ctx_destroy,
    .listen = shm_listen,
    .accept = shm_accept,
    .close_listener = cl_listener_close,
    .connect = shm_connect,
    .isend = cl_conn_isend,
    .irecv = cl_conn_irecv,
    .irecv_sink = shm_irecv_sink,
    .test = cl_req_test,
    .moved = cl_req_moved,
    .close_conn = cl_conn_close,
    .shutdown = shm_shutdown,
    .poll = shm_poll,
    .send_now = shm_send_now,
    .recv_now = shm_recv_now,
    .peer_name = shm_peer_name,
};
