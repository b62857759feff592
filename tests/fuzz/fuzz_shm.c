/* libFuzzer target for the shm transport's surface to another local process: its hello
 * (64 bytes with a ring memfd and an eventfd, sealed or not, of any size) and then the
 * ring itself, whose head and data a hostile sender writes as it likes. Each input is
 * one stranger's connection to a real listener: the transport must refuse it or take
 * it, and then deliver, refuse or fail what the ring holds, never read or write past
 * its mapping, crash or hang.
 *
 * Input: [flags][size][hello: 64][head: 8][ring data...]
 *   flags bit 0: seal the memfd; bit 1: send one descriptor only; bit 2: hang up first.
 *   size: the main ring's data bytes, 1 << (12 + size % 12), plus 100 if bit 7 is set;
 *   the small ring's 4 KiB follow them. The ring data goes into both rings. */
#include "transports/transport.h"
#include "collective.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum { PRE = 2 + CL_HELLO_BYTES + 8, RING_DATA_AT = 256, SMALL = 4096 };

static int dial(const char *handle)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    const char *name = handle + 4; /* "shm:" */
    memcpy(a.sun_path + 1, name, strlen(name));
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&a, len) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* The stranger's side: its ring (mapped here, written from the input) and its hello. */
static int stranger(const char *handle, const uint8_t *d, size_t n, void **map, size_t *bytes)
{
    uint8_t flags = d[0];
    size_t cap = ((size_t)1 << (12 + d[1] % 12)) + (d[1] & 0x80 ? 100 : 0);
    int s = dial(handle);
    int mfd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING), efd = eventfd(0, EFD_CLOEXEC);
    *bytes = RING_DATA_AT + cap + SMALL;
    *map = MAP_FAILED;
    if (s >= 0 && mfd >= 0 && efd >= 0 && ftruncate(mfd, (off_t)*bytes) == 0) {
        *map = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        if (flags & 1)
            (void)fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    }
    if (*map != MAP_FAILED) {
        memcpy(*map, d + 2 + CL_HELLO_BYTES, 8); /* the head */
        size_t k = n - PRE < cap ? n - PRE : cap;
        memcpy((char *)*map + RING_DATA_AT, d + PRE, k);
        memcpy((char *)*map + RING_DATA_AT + cap, d + PRE, k < SMALL ? k : SMALL);
        union {
            char buf[CMSG_SPACE(2 * sizeof(int))];
            struct cmsghdr align;
        } ctl = {{0}};
        int nfd = flags & 2 ? 1 : 2;
        struct iovec v = {(void *)(d + 2), CL_HELLO_BYTES};
        struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int))};
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
        memcpy(CMSG_DATA(h), (int[]){mfd, efd}, (size_t)nfd * sizeof(int));
        (void)!sendmsg(s, &m, MSG_NOSIGNAL);
    }
    if (mfd >= 0)
        close(mfd);
    if (efd >= 0)
        close(efd);
    if (s >= 0 && (flags & 4))
        shutdown(s, SHUT_RDWR);
    return s;
}

/* 1 when n bytes at stream position pos of the stranger's ring (cap data bytes, wrapping)
 * equal got: what the transport delivered is what the ring holds, read nowhere else. */
static int from_ring(const char *data, size_t cap, uint64_t pos, const void *got, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (data[(pos + i) % cap] != ((const char *)got)[i])
            return 0;
    return 1;
}

/* The header position of the message after stream position pos: on its own line, after
 * the stamp. */
static uint64_t header_at(uint64_t pos)
{
    return ((pos + 63) & ~(uint64_t)63) + 8;
}

/* Whether the small ring holds a message stamped at header position at: the key (0 in
 * this stranger's ring) XOR the position, in the 8 bytes before the header. */
static int small_stamped(const char *small, uint64_t at)
{
    uint64_t st;
    memcpy(&st, small + (at - 8) % SMALL, sizeof(st));
    return st == at;
}

/* Receives what the rings hold, as far as it goes without waiting, and checks it: each
 * message is the small ring's next if that is stamped, else the main ring's. */
static void drain(const cl_transport *tr, cl_tr_conn *c, const char *data, size_t cap)
{
    static char buf[1 << 16];
    static cl_msg_hdr h; /* a receive not done still owns it until ctx_destroy */
    const char *small = data + cap;
    uint64_t pos = 0, spos = 0;
    for (int i = 0; i < 8; i++) {
        cl_tr_req *r;
        int done = 0;
        size_t len = 0;
        if (i % 2) { /* the fast path, which trusts a stamp where it finds one */
            if (tr->recv_now(c, &h, buf, sizeof(buf), &len) != COLL_OK)
                return;
        } else {
            if (tr->irecv(c, &h, buf, sizeof(buf), &r) != COLL_OK)
                return;
            int rc = tr->test(r, &done, &len);
            if (!done || rc != COLL_OK)
                return; /* one not done is failed and freed by ctx_destroy */
        }
        int in_small = small_stamped(small, header_at(spos));
        const char *ring = in_small ? small : data;
        size_t rcap = in_small ? SMALL : cap;
        uint64_t *at = in_small ? &spos : &pos;
        *at = header_at(*at);
        if (len != h.len || !from_ring(ring, rcap, *at, &h, sizeof(h)) ||
            !from_ring(ring, rcap, *at + sizeof(h), buf, len))
            __builtin_trap();
        *at += sizeof(h) + len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < PRE)
        return 0;
    const cl_transport *tr = &cl_transport_shm;
    cl_notifier nf;
    cl_notifier_init(&nf);
    cl_tr_config cfg = {.device = "lo", .timeout_ms = 1000, .notifier = &nf};
    cl_tr_ctx *ctx;
    cl_tr_listener *l;
    char handle[CL_HANDLE_BYTES];
    if (tr->ctx_create(&cfg, &ctx) != COLL_OK)
        __builtin_trap();
    if (tr->listen(ctx, handle, &l) != COLL_OK)
        __builtin_trap();
    void *map;
    size_t bytes;
    int s = stranger(handle, d, n, &map, &bytes);
    uint8_t hello[CL_HELLO_BYTES];
    cl_tr_conn *c = NULL;
    if (tr->accept(l, hello, &c) == COLL_OK)
        drain(tr, c, (char *)map + RING_DATA_AT, bytes - RING_DATA_AT - SMALL);
    tr->ctx_destroy(ctx);
    cl_notifier_destroy(&nf);
    if (map != MAP_FAILED)
        munmap(map, bytes);
    if (s >= 0)
        close(s);
    return 0;
}
