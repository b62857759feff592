/* libFuzzer target for the lifeline (lib/core/life.c): what anyone who reaches a rank's
 * lifeline sends during a shrink, through a real socket to the real gate and word
 * reader. Each input is one connection's bytes: a stranger's hello, or (flag) a rank's
 * genuine hello and sealed word followed by the input, the words of the shrink agreement.
 * Beyond "no crash, no sanitizer report, no hang", it checks that the gate admits only a
 * hello that names this agreement and this rank (with COLL_SECRET: only the genuine
 * one), that every word read is one of this agreement from the link's rank, that no
 * input leaves a connection at the gate, and that a rank's hello still passes after it. */
#include "core/life.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQUIRE(x)                                                                           \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

enum { SIZE = 4, ME = 1, CARD = 24 };

static cl_life life = {.fd = -1};
static struct sockaddr_in where;
static cl_life_gate gate;
static const uint8_t key[CL_KEY_BYTES] = "fuzzing key, not the job's own";

static void start(void)
{
    if (life.fd >= 0)
        return;
    char err[200];
    REQUIRE(cl_life_open("lo", AF_INET, &life, err, sizeof(err)) == 0);
    socklen_t len = sizeof(where);
    REQUIRE(getsockname(life.fd, (struct sockaddr *)&where, &len) == 0);
    REQUIRE(where.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
}

static cl_life_who who_of(int rank, int keyed)
{
    return (cl_life_who){0x1234, 77, 1, rank, SIZE, keyed, key, CARD};
}

/* Sends n bytes on a fresh connection and ends it (the receiver reads them, then EOF). */
static int send_all(const uint8_t *buf, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&where, sizeof(where)) == 0);
    for (size_t at = 0; at < n;) {
        ssize_t w = send(fd, buf + at, n - at, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        at += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    return fd;
}

/* No TIME_WAIT left behind per input: the fuzzer makes many connections. */
static void hang_up(int fd)
{
    struct linger now = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    close(fd);
}

/* Admits the one connection sent: its socket and *from, or -1 once the gate dropped it. */
static int admit_one(const cl_life_who *w, int *from)
{
    for (int tries = 0; tries < 200; tries++) {
        int fd = cl_life_admit(&gate, &life, w, from);
        if (fd >= 0 || (tries && gate.np == 0))
            return fd;
        struct pollfd p[CL_LIFE_PENDING + 1] = {{.fd = life.fd, .events = POLLIN}};
        for (int i = 0; i < gate.np; i++)
            p[i + 1] = (struct pollfd){.fd = gate.p[i].fd, .events = POLLIN};
        poll(p, (nfds_t)gate.np + 1, 10);
    }
    REQUIRE(0); /* a connection that sent everything and closed is still at the gate */
    return -1;
}

/* Rank from's word for round 0, sealed as a rank seals it. */
static size_t honest_word(const cl_life_who *w, int from, uint8_t *out)
{
    cl_life_who sender = *w;
    sender.rank = from;
    cl_life_msg m = {.magic = CL_LIFE_MAGIC, .attempt = w->attempt, .from = from, .size = SIZE,
                     .ncards = 1, .job = w->job, .id = w->id};
    size_t len = cl_life_msg_len(w, 1);
    memset(out, 0, len);
    memcpy(out, &m, sizeof(m));
    out[sizeof(m) + 3] = 1;
    if (w->keyed)
        cl_life_seal(&sender, out, len);
    return len;
}

/* Reads every word the link gives until it ends; returns how many came. */
static int read_words(cl_life_link *k, const cl_life_who *w, int from)
{
    int words = 0;
    const char *why;
    for (int tries = 0; tries < 200 && k->fd >= 0; tries++) {
        int got = cl_life_read(k, w, from, &why);
        if (got > 0) {
            cl_life_msg m;
            memcpy(&m, k->buf, sizeof(m));
            REQUIRE(m.magic == CL_LIFE_MAGIC && m.job == w->job && m.id == w->id &&
                    m.attempt == w->attempt && m.from == from && m.size == SIZE &&
                    m.ncards == (m.decided ? SIZE : 1));
            words++;
            continue;
        }
        if (got < 0)
            break;
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        poll(&p, 1, 10);
    }
    REQUIRE(k->fd < 0); /* the sender closed: the link must have seen it */
    return words;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    start();
    if (size < 1)
        return 0;
    int keyed = data[0] & 1, genuine = data[0] >> 1 & 1, sender = data[0] >> 2 & 3;
    sender = sender == ME ? 0 : sender;
    cl_life_who me = who_of(ME, keyed), them = who_of(sender, keyed);
    uint8_t *buf = malloc(size + 512);
    size_t n = 0;
    if (genuine) {
        cl_life_hello h;
        cl_life_hello_make(&them, ME, &h);
        memcpy(buf, &h, sizeof(h));
        n = sizeof(h) + honest_word(&me, sender, buf + sizeof(h));
    }
    memcpy(buf + n, data + 1, size - 1);
    n += size - 1;
    int client = send_all(buf, n), from = -1;
    int fd = admit_one(&me, &from);
    if (fd >= 0) {
        cl_life_hello h, want;
        memcpy(&h, buf, sizeof(h));
        cl_life_who claimed = who_of(h.from, keyed);
        cl_life_hello_make(&claimed, ME, &want);
        /* What passed names this agreement and this rank; with the key, it is genuine. */
        REQUIRE(from == h.from && from >= 0 && from < SIZE && from != ME);
        REQUIRE(memcmp(&h, &want, keyed ? sizeof(h) : offsetof(cl_life_hello, tag)) == 0);
        cl_life_link k = {.fd = fd, .taken = 1};
        int words = read_words(&k, &me, from);
        /* A word in another's name, or unsealed under the key, never reads. */
        REQUIRE(!keyed || words <= genuine);
        REQUIRE(!genuine || words >= 1);
        cl_life_link_close(&k);
    }
    REQUIRE(!genuine || fd >= 0);
    REQUIRE(gate.np == 0);
    hang_up(client);
    /* The gate still lets a rank in. */
    cl_life_hello h;
    cl_life_hello_make(&them, ME, &h);
    client = send_all((const uint8_t *)&h, sizeof(h));
    fd = admit_one(&me, &from);
    REQUIRE(fd >= 0 && from == sender);
    close(fd);
    hang_up(client);
    free(buf);
    return 0;
}
