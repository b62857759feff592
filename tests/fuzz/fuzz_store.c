/* libFuzzer target for the tcp store server (lib/rdzv/tcp_server.c), the one listener
 * any stranger who can reach MASTER_PORT talks to. Each input is what a client sends on
 * one connection, through a real socket to a real server thread; afterwards an honest
 * client's set and get must still work. Beyond "no crash, no sanitizer report, no hang",
 * that checks no input wedges the server or corrupts what it holds for others. */
#include "rdzv/tcp_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQUIRE(x)                                                                           \
    do {                                                                                     \
        if (!(x))                                                                            \
            __builtin_trap();                                                                \
    } while (0)

static struct sockaddr_in where;

static void start(void)
{
    static cl_store_server *server;
    if (server)
        return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof(where);
    where = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&where, sizeof(where)) == 0 &&
            listen(fd, 64) == 0 && getsockname(fd, (struct sockaddr *)&where, &len) == 0);
    REQUIRE(cl_store_server_start(&fd, 1, 2000, &server) == 0);
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&where, sizeof(where)) == 0);
    return fd;
}

/* Reads what comes back until the server closes or `ms` pass; returns the bytes read. */
static size_t drain(int fd, unsigned char *buf, size_t cap, int ms)
{
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, ms) > 0) {
        unsigned char sink[4096];
        unsigned char *to = got < cap ? buf + got : sink;
        ssize_t n = recv(fd, to, got < cap ? cap - got : sizeof(sink), 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void request(int fd, uint8_t op, const char *key, const char *val)
{
    unsigned char req[64];
    uint32_t klen = (uint32_t)strlen(key), vlen = (uint32_t)strlen(val);
    req[0] = op;
    memcpy(req + 1, &klen, 4);
    memcpy(req + 5, &vlen, 4);
    memcpy(req + CL_STORE_REQ_HDR, key, klen);
    memcpy(req + CL_STORE_REQ_HDR + klen, val, vlen);
    REQUIRE(send(fd, req, CL_STORE_REQ_HDR + klen + vlen, MSG_NOSIGNAL) > 0);
}

/* An honest client: set then get its own key, and the value must come back whole. Its
 * keys exist before any input runs and its values keep one length, so a server filled
 * to its key cap by the inputs still takes them (the cap refuses new keys only). */
static void still_serves(void)
{
    static unsigned round;
    char key[32], val[32];
    snprintf(key, sizeof(key), "honest/%u", round % 64);
    snprintf(val, sizeof(val), "v%08u", round++ % 100000000u);
    int fd = dial();
    request(fd, CL_STORE_OP_SET, key, val);
    request(fd, CL_STORE_OP_GET, key, "");
    unsigned char got[64];
    size_t want = 1 + 5 + strlen(val), n = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (n < want && poll(&p, 1, 5000) > 0) {
        ssize_t k = recv(fd, got + n, sizeof(got) - n, 0);
        REQUIRE(k > 0);
        n += (size_t)k;
    }
    uint32_t len;
    memcpy(&len, got + 2, 4);
    REQUIRE(n == want && got[0] == 1 && got[1] == 1 && len == strlen(val) &&
            memcmp(got + 6, val, len) == 0);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    start();
    for (; ready < 64; ready++)
        still_serves();
    int fd = dial();
    if (size)
        (void)!send(fd, data, size, MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    unsigned char back[256];
    drain(fd, back, sizeof(back), 200);
    close(fd);
    still_serves();
    return 0;
}
