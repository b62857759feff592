/* The rendezvous stores (file, mem, tcp) behave alike: set then get, a missing key is
 * "not yet", waiting past the deadline times out; the tcp server survives garbage and
 * bounds what a client can take; a tcp client tells a connection the server dropped from
 * a server gone. */
#include "base/addr.h"
#include "base/util.h"
#include "core/config.h"
#include "core/terms.h"
#include "transports/transport.h"
#include "rdzv/store.h"
#include "rdzv/tcp_server.h"
#include "common/harness.h"

#include "common/suite.h"

#include <check.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static cl_store *open_kind(int kind, char *dir)
{
    cl_store *s = NULL;
    char err[256], where[64];
    if (kind == 0) {
        snprintf(dir, 64, "/tmp/coll_store.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_eq(cl_store_file_open(dir, &s, err, sizeof(err)), COLL_OK);
    } else if (kind == 1) {
        snprintf(where, sizeof(where), "unit-%d", (int)getpid());
        ck_assert_int_eq(cl_store_mem_open(where, &s), COLL_OK);
    } else {
        snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
        ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + 5000, &s, err, sizeof(err)),
                         COLL_OK);
    }
    return s;
}

/* Closes s and removes a file store's directory. */
static void close_kind(cl_store *s, const char *dir)
{
    s->ops->close(s);
    if (dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}

START_TEST(set_get_missing_and_timeout)
{
    char dir[64] = "";
    cl_store *s = open_kind(_i, dir);
    char buf[64];
    size_t len = 0;
    ck_assert_int_eq(s->ops->get(s, "absent", buf, sizeof(buf), &len), COLL_INPROGRESS);
    ck_assert_int_eq(s->ops->set(s, "a/b", "hello", 5), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, "a/b", buf, sizeof(buf), &len), COLL_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
    ck_assert_int_eq(s->ops->set(s, "a/b", "bye", 3), COLL_OK); /* overwrite */
    ck_assert_int_eq(cl_store_wait(s, "a/b", buf, sizeof(buf), &len, cl_now_ms() + 100), COLL_OK);
    ck_assert_uint_eq(len, 3);
    int64_t t0 = cl_now_ms();
    ck_assert_int_eq(cl_store_wait(s, "never", buf, sizeof(buf), &len, t0 + 200), COLL_ETIMEDOUT);
    ck_assert_int_ge(cl_now_ms() - t0, 190);
    close_kind(s, dir);
}
END_TEST

START_TEST(tcp_server_survives_garbage_clients)
{
    char where[64], err[256];
    int port = free_port();
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    cl_store *s;
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + 5000, &s, err, sizeof(err)), COLL_OK);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    for (int k = 0; k < 3; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        unsigned char junk[64];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)(i * 37 + (size_t)k);
        ck_assert_int_eq(send(fd, junk, sizeof(junk) - (size_t)k * 20, 0), (ssize_t)(sizeof(junk) - (size_t)k * 20));
        close(fd);
    }
    char buf[8];
    size_t len;
    ck_assert_int_eq(s->ops->set(s, "k", "v", 1), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, "k", buf, sizeof(buf), &len), COLL_OK);
    s->ops->close(s);
}
END_TEST

static int dial(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* 1 once the server closed fd, 0 if it was still open after 8 s. Nothing is read: a
 * client that read its replies would be taking them, and the server rightly keeps a
 * client that takes replies (reading the greedy client's 120 MB took over 20 s on a
 * loaded machine). */
static int closed_by_server(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 8000) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* What stopped or filled rank 0's store before: a client that pipelines gets of a large
 * value and never reads (the server blocked in send, and closing it waited for that
 * client), thousands of large junk values, connections that say nothing. Now the server
 * answers others throughout, refuses sets past its byte limit, drops the silent and the
 * unread after the idle bound (2 x the init timeout, 1 s at least), and closes at once. */
START_TEST(tcp_server_bounds_what_a_client_can_take)
{
    char where[64], err[256];
    int port = free_port();
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    cl_store *server, *s;
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + 400, &server, err, sizeof(err)),
                     COLL_OK);
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 0, cl_now_ms() + 60000, &s, err, sizeof(err)),
                     COLL_OK);
    static char big[60000], back[60000];
    memset(big, 7, sizeof(big));
    ck_assert_int_eq(s->ops->set(s, "big", big, sizeof(big)), COLL_OK);
    int greedy = dial(port), silent = dial(port);
    unsigned char get[12] = { 2, 3, 0, 0, 0, 0, 0, 0, 0, 'b', 'i', 'g' };
    for (int k = 0; k < 2000; k++) /* 120 MB of replies asked for, none read */
        ck_assert_int_eq(send(greedy, get, sizeof(get), MSG_NOSIGNAL), (ssize_t)sizeof(get));
    size_t len = 0;
    ck_assert_int_eq(s->ops->get(s, "big", back, sizeof(back), &len), COLL_OK);
    ck_assert_uint_eq(len, sizeof(big));
    int stored = 0, rc = COLL_OK;
    for (int k = 0; k < 2000 && rc == COLL_OK; k++) {
        char key[32];
        snprintf(key, sizeof(key), "junk/%d", k);
        if ((rc = s->ops->set(s, key, big, sizeof(big))) == COLL_OK)
            stored++;
    }
    ck_assert_int_eq(rc, COLL_ENOMEM);
    ck_assert_int_le((long)stored * (long)sizeof(big), (long)CL_STORE_MAX_BYTES);
    ck_assert_int_eq(s->ops->get(s, "big", back, sizeof(back), &len), COLL_OK);
    ck_assert_msg(closed_by_server(silent), "a silent client was not dropped");
    ck_assert_msg(closed_by_server(greedy), "a client that never reads was not dropped");
    int64_t t0 = cl_now_ms();
    server->ops->close(server);
    ck_assert_int_lt(cl_now_ms() - t0, 3000); /* it waited 27 s for the greedy client */
    s->ops->close(s);
    close(greedy);
    close(silent);
}
END_TEST

/* A client's renew (what init asks when its connection to rank 0's store ends): nothing
 * without a pin, or while the connection is up; a connection the server dropped (idle
 * past its bound, 1 s here) is replaced where the server still holds the pinned value;
 * a server gone (the port refused), or another one there (another value under the key),
 * is COLL_EPEER, and stays so. */
static void serve_at(const char *where, const char *terms, cl_store **server)
{
    char err[256];
    ck_assert_int_eq(
        cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + 400, server, err, sizeof(err)),
        COLL_OK);
    ck_assert_int_eq((*server)->ops->set(*server, "terms", terms, strlen(terms) + 1), COLL_OK);
}

/* A renew with init's time to spare (5 s). */
static int renew(cl_store *s)
{
    return cl_store_renew(s, cl_now_ms() + 5000);
}

START_TEST(tcp_renew_tells_a_dropped_connection_from_a_server_gone)
{
    char where[64], err[256], got[16];
    snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
    cl_store *server, *s, *other;
    size_t len = 0;
    serve_at(where, "one", &server);
    ck_assert_int_eq(
        cl_store_tcp_open(where, AF_UNSPEC, 0, cl_now_ms() + 60000, &s, err, sizeof(err)), COLL_OK);
    ck_assert_int_eq(renew(s), COLL_OK); /* no pin: never gone */
    ck_assert_int_eq(s->ops->get(s, "terms", got, sizeof(got), &len), COLL_OK);
    ck_assert_int_eq(cl_store_pin(s, "terms", got, len), COLL_OK);
    ck_assert_int_eq(renew(s), COLL_OK);
    usleep(2500 * 1000); /* the server drops the idle client; it serves on */
    ck_assert_int_eq(renew(s), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, "terms", got, sizeof(got), &len), COLL_OK);
    ck_assert_str_eq(got, "one");
    server->ops->close(server);
    ck_assert_int_eq(renew(s), COLL_EPEER); /* refused: the server went away */
    serve_at(where, "two", &other);
    ck_assert_int_eq(renew(s), COLL_EPEER); /* and stays so */
    s->ops->close(s);
    ck_assert_int_eq(
        cl_store_tcp_open(where, AF_UNSPEC, 0, cl_now_ms() + 60000, &s, err, sizeof(err)), COLL_OK);
    ck_assert_int_eq(cl_store_pin(s, "terms", "one", 4), COLL_OK);
    other->ops->close(other);
    serve_at(where, "two", &other); /* another server at the port: not the one pinned */
    ck_assert_int_eq(renew(s), COLL_EPEER);
    other->ops->close(other);
    s->ops->close(s);
}
END_TEST

/* Where the port's new holder takes the connection and never answers, renew gives up by
 * its caller's deadline (300 ms here): COLL_EPEER, the server that served is not there.
 * Before, it waited GREET_MS (5 s) whatever the caller's timeout. */
START_TEST(tcp_renew_returns_by_its_deadline)
{
    char where[64], err[256];
    int port = free_port();
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    cl_store *server, *s;
    serve_at(where, "one", &server);
    ck_assert_int_eq(
        cl_store_tcp_open(where, AF_UNSPEC, 0, cl_now_ms() + 60000, &s, err, sizeof(err)), COLL_OK);
    ck_assert_int_eq(cl_store_pin(s, "terms", "one", 4), COLL_OK);
    server->ops->close(server);
    cl_addr at;
    ck_assert_int_eq(cl_addr_parse(where, &at), 0);
    int silent = cl_addr_listen(&at, 0, 8); /* takes connections (the backlog), says nothing */
    ck_assert_int_ge(silent, 0);
    int64_t start = cl_now_ms();
    ck_assert_int_eq(cl_store_renew(s, start + 300), COLL_EPEER);
    ck_assert_int_lt(cl_now_ms() - start, 1500);
    close(silent);
    s->ops->close(s);
}
END_TEST

START_TEST(tcp_client_times_out_without_server)
{
    char where[64], err[256];
    snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
    cl_store *s;
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 0, cl_now_ms() + 300, &s, err, sizeof(err)),
                     COLL_ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(err, "(rank 0)"));
}
END_TEST

START_TEST(rendezvous_urls_parse_or_explain)
{
    cl_rdzv r;
    char err[256];
    ck_assert_int_eq(cl_rdzv_parse("tcp://10.0.0.1:4000", 1, 4, &r, err, sizeof(err)), COLL_OK);
    ck_assert_str_eq(r.scheme, "tcp");
    ck_assert_str_eq(r.where, "10.0.0.1:4000");
    ck_assert_int_eq(cl_rdzv_parse("bogus", 0, 1, &r, err, sizeof(err)), COLL_EINVAL);
    ck_assert_int_eq(cl_rdzv_parse("ftp://x", 0, 1, &r, err, sizeof(err)), COLL_EINVAL);
    ck_assert_int_eq(cl_rdzv_parse("file:///tmp/x", 4, 4, &r, err, sizeof(err)), COLL_EINVAL);
    unsetenv("RANK");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_NTASKS", "3", 1);
    setenv("MASTER_PORT", "1234", 1);
    unsetenv("MASTER_ADDR");
    ck_assert_int_eq(cl_rdzv_parse("env://", -1, -1, &r, err, sizeof(err)), COLL_OK);
    ck_assert_int_eq(r.rank, 2);
    ck_assert_int_eq(r.size, 3);
    ck_assert_str_eq(r.where, "127.0.0.1:1234");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    ck_assert_int_eq(cl_rdzv_parse("env://", -1, -1, &r, err, sizeof(err)), COLL_OK);
    ck_assert_int_eq(r.rank, 1); /* mpirun's variables come before Slurm's */
}
END_TEST

/* create writes only where nothing is (the first writer wins, a set still overwrites);
 * remove forgets a key where the store can (file, mem; tcp forgets all at close). A
 * sealed store's create takes a place held by a forgery, not one held by a real value. */
START_TEST(create_is_first_wins_and_remove_forgets)
{
    char dir[64] = "";
    cl_store *s = open_kind(_i % 3, dir);
    if (_i >= 3) {
        cl_store *inner = s;
        uint8_t key[32] = {5};
        ck_assert_int_eq(inner->ops->set(inner, "once", "forged-by-a-stranger-0123456789", 31),
                         COLL_OK);
        ck_assert_int_eq(cl_store_seal(inner, key, &s), COLL_OK);
    }
    char buf[64];
    size_t len = 0;
    ck_assert_int_eq(cl_store_create(s, "once", "first", 5), COLL_OK);
    ck_assert_int_eq(cl_store_create(s, "once", "second", 6), CL_STORE_TAKEN);
    ck_assert_int_eq(s->ops->get(s, "once", buf, sizeof(buf), &len), COLL_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(buf, "first", 5), 0);
    if (_i % 3 != 2) {
        cl_store_remove(s, "once");
        ck_assert_int_eq(s->ops->get(s, "once", buf, sizeof(buf), &len), COLL_INPROGRESS);
        ck_assert_int_eq(cl_store_create(s, "once", "again", 5), COLL_OK);
    }
    close_kind(s, dir);
}
END_TEST

/* A sealed store takes only values with the key's tag: a forged or truncated value, or
 * one sealed under another key, is not there (and waiting for it times out). */
START_TEST(sealed_store_ignores_forgeries)
{
    char dir[64] = "";
    cl_store *inner = open_kind(_i, dir), *s = NULL, *other_inner = open_kind(_i, dir), *other;
    uint8_t key[32] = { 1, 2, 3 }, key2[32] = { 9 };
    ck_assert_int_eq(cl_store_seal(inner, key, &s), COLL_OK);
    ck_assert_int_eq(cl_store_seal(other_inner, key2, &other), COLL_OK);
    char buf[64];
    size_t len = 0;
    ck_assert_int_eq(s->ops->set(s, "k", "value", 5), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, "k", buf, sizeof(buf), &len), COLL_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(buf, "value", 5), 0);
    char forged[40] = "imposter";
    ck_assert_int_eq(inner->ops->set(inner, "f", forged, sizeof(forged)), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, "f", buf, sizeof(buf), &len), COLL_INPROGRESS);
    ck_assert_int_eq(inner->ops->set(inner, "g", "x", 1), COLL_OK); /* shorter than a tag */
    ck_assert_int_eq(s->ops->get(s, "g", buf, sizeof(buf), &len), COLL_INPROGRESS);
    if (_i != 0) { /* file stores are per directory: the other key's store shares mem/tcp */
        ck_assert_int_eq(other->ops->set(other, "o", "value", 5), COLL_OK);
        ck_assert_int_eq(s->ops->get(s, "o", buf, sizeof(buf), &len), COLL_INPROGRESS);
    }
    ck_assert_int_eq(cl_store_wait(s, "f", buf, sizeof(buf), &len, cl_now_ms() + 100),
                     COLL_ETIMEDOUT);
    other->ops->close(other);
    s->ops->close(s);
}
END_TEST

/* A file store's directory that others can write, not sticky, is refused, the error
 * naming it and why; a sticky one is taken. */
START_TEST(file_store_refuses_a_directory_others_can_write)
{
    char dir[64] = "", err[256] = "";
    cl_store *s = NULL;
    snprintf(dir, sizeof(dir), "/tmp/coll_store.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0777), 0);
    ck_assert_int_eq(cl_store_file_open(dir, &s, err, sizeof(err)), COLL_EINVAL);
    ck_assert_msg(strstr(err, dir) && strstr(err, "others can write"), "err: %s", err);
    ck_assert_int_eq(chmod(dir, 01777), 0);
    ck_assert_int_eq(cl_store_file_open(dir, &s, err, sizeof(err)), COLL_OK);
    close_kind(s, dir);
}
END_TEST

/* What someone else put under a key name: a FIFO (opening it blocked until a writer came)
 * or a link to a file of theirs (read as the value). Neither is a value, neither blocks,
 * and waiting for the key ends at its deadline; a set replaces it without writing
 * through it. */
static void count_planted(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    if (strstr(msg, "is not a regular file"))
        ++*(int *)arg;
}

START_TEST(file_store_ignores_a_planted_fifo_or_link)
{
    char dir[64] = "", path[128], victim[] = "/tmp/coll_victim.XXXXXX", buf[64];
    cl_store *s = open_kind(0, dir);
    int fd = mkstemp(victim);
    ck_assert_int_eq(write(fd, "victim", 6), 6);
    close(fd);
    snprintf(path, sizeof(path), "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    snprintf(path, sizeof(path), "%s/link", dir);
    ck_assert_int_eq(symlink(victim, path), 0);
    size_t len = 0;
    int said = 0;
    coll_set_log(count_planted, &said, COLL_LOG_WARN);
    ck_assert_int_eq(s->ops->get(s, _i ? "link" : "fifo", buf, sizeof(buf), &len),
                     COLL_INPROGRESS);
    ck_assert_int_eq(said, 1);
    int64_t t0 = cl_now_ms();
    ck_assert_int_eq(cl_store_wait(s, _i ? "link" : "fifo", buf, sizeof(buf), &len, t0 + 200),
                     COLL_ETIMEDOUT);
    ck_assert_int_lt(cl_now_ms() - t0, 1000);
    ck_assert_int_eq(s->ops->set(s, _i ? "link" : "fifo", "mine", 4), COLL_OK);
    ck_assert_int_eq(s->ops->get(s, _i ? "link" : "fifo", buf, sizeof(buf), &len), COLL_OK);
    ck_assert_uint_eq(len, 4);
    FILE *f = fopen(victim, "rb");
    len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    unlink(victim);
    ck_assert_msg(len == 6 && memcmp(buf, "victim", 6) == 0, "the victim holds '%.*s'",
                  (int)len, buf);
    close_kind(s, dir);
}
END_TEST

/* The largest timeout: the server's idle bound (twice the time left) overflowed an int,
 * and it dropped every client at its first request. */
START_TEST(tcp_store_serves_with_the_largest_timeout)
{
    char where[64], err[256], buf[8];
    snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
    cl_store *s;
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + INT_MAX, &s, err, sizeof(err)),
                     COLL_OK);
    size_t len = 0;
    ck_assert_int_eq(s->ops->set(s, "k", "v", 1), COLL_OK);
    cl_sleep_ms(1100); /* the server looks at idle clients every second */
    ck_assert_int_eq(s->ops->get(s, "k", buf, sizeof(buf), &len), COLL_OK);
    ck_assert_uint_eq(len, 1);
    s->ops->close(s);
}
END_TEST

/* Whether a connection to ip (IPv4 or IPv6 text) at port is taken. */
static int reaches(const char *ip, int port)
{
    cl_addr a;
    char text[80];
    snprintf(text, sizeof(text), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
    if (cl_addr_parse(text, &a) != 0)
        return 0;
    int fd = cl_addr_dial(&a, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* This machine's first up, non-loopback address of family, as text; 0 if none. */
static int own_address(int family, char *out, size_t len)
{
    struct ifaddrs *all;
    int found = 0;
    if (getifaddrs(&all) != 0)
        return 0;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == family && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK) &&
            !(family == AF_INET6 &&
              IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr)))
            found = getnameinfo(i->ifa_addr, family == AF_INET ? sizeof(struct sockaddr_in)
                                                                : sizeof(struct sockaddr_in6),
                                out, (socklen_t)len, NULL, 0, NI_NUMERICHOST) == 0;
    freeifaddrs(all);
    return found;
}

/* Rank 0's store listens at the addresses MASTER_ADDR names, not on every address of
 * both families: at one of this machine's IPv4 addresses it is not reached at 127.0.0.1
 * nor ::1 (it was, through a wildcard IPv6 listener); at "localhost" it is reached at
 * 127.0.0.1 and not at this machine's IPv4 address. */
START_TEST(tcp_store_listens_where_it_is_named)
{
    char ip[64], where[96], err[256];
    cl_store *s;
    int port = free_port();
    snprintf(where, sizeof(where), "localhost:%d", port);
    ck_assert_int_eq(cl_store_tcp_open(where, AF_UNSPEC, 1, cl_now_ms() + 5000, &s, err,
                                       sizeof(err)), COLL_OK);
    ck_assert(reaches("127.0.0.1", port));
    if (own_address(AF_INET, ip, sizeof(ip)))
        ck_assert_msg(!reaches(ip, port), "a store at localhost was reached at %s", ip);
    s->ops->close(s);
    if (!own_address(AF_INET, ip, sizeof(ip))) {
        printf("tcp_store_listens_where_it_is_named: no IPv4 address but loopback: "
               "the named-address half is not run\n");
        return;
    }
    port = free_port();
    snprintf(where, sizeof(where), "%s:%d", ip, port);
    ck_assert_int_eq(cl_store_tcp_open(where, AF_INET, 1, cl_now_ms() + 5000, &s, err,
                                       sizeof(err)), COLL_OK);
    ck_assert(reaches(ip, port));
    ck_assert_msg(!reaches("127.0.0.1", port), "a store at %s was reached at 127.0.0.1", ip);
    ck_assert_msg(!reaches("::1", port), "a store at %s was reached at ::1", ip);
    s->ops->close(s);
}
END_TEST

/* A note written beside earlier terms (a file directory keeps what a failing rank wrote
 * just after rank 0 cleaned up) ends no later job at that store: a note counts beside the
 * terms whose nonce it carries (and names a rank 1..size-1 of it). Before, the next
 * healthy job failed at once with the earlier job's "rank 2 failed at init". */
START_TEST(a_note_of_earlier_terms_ends_no_later_job)
{
    cl_store *s;
    cl_config cfg;
    cl_transport tcp;
    char where[64], why[400], note[1024];
    size_t len = 0;
    memset(&cfg, 0, sizeof(cfg));
    memset(&tcp, 0, sizeof(tcp));
    tcp.name = "tcp";
    cfg.transport = &tcp;
    snprintf(where, sizeof(where), "terms-%d", (int)getpid());
    ck_assert_int_eq(cl_store_mem_open(where, &s), COLL_OK);
    int64_t soon = cl_now_ms() + 2000;
    ck_assert_int_eq(cl_terms_agree(s, &cfg, 0, 3, AF_INET, soon, why, sizeof(why)), COLL_OK);
    ck_assert_int_eq(cl_terms_fail(s, &cfg, 2, COLL_EINVAL, "no interface", soon), COLL_OK);
    ck_assert_int_eq(cl_terms_agree(s, &cfg, 1, 3, AF_INET, soon, why, sizeof(why)),
                     CL_TERMS_FAILED);
    ck_assert_ptr_nonnull(strstr(why, "no interface"));
    ck_assert_int_eq(s->ops->get(s, "abort", note, sizeof(note), &len), COLL_OK);
    cl_terms_remove(s); /* the job is over; the next one comes to the same store */
    ck_assert_int_eq(cl_terms_agree(s, &cfg, 0, 3, AF_INET, soon, why, sizeof(why)), COLL_OK);
    ck_assert_int_eq(s->ops->set(s, "abort", note, len), COLL_OK); /* the late write */
    ck_assert_int_eq(cl_terms_agree(s, &cfg, 1, 3, AF_INET, soon, why, sizeof(why)), COLL_OK);
    /* nor does a note naming a rank the job does not have */
    ck_assert_int_eq(cl_terms_fail(s, &cfg, 7, COLL_EINVAL, "forged", soon), COLL_OK);
    ck_assert_int_eq(cl_terms_agree(s, &cfg, 2, 3, AF_INET, soon, why, sizeof(why)), COLL_OK);
    s->ops->close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stores");
    TCase *t = tcase_create("stores");
    tcase_set_timeout(t, 20);
    tcase_add_loop_test(t, set_get_missing_and_timeout, 0, 3);
    tcase_add_loop_test(t, sealed_store_ignores_forgeries, 0, 2);
    tcase_add_loop_test(t, create_is_first_wins_and_remove_forgets, 0, 6);
    tcase_add_test(t, tcp_server_survives_garbage_clients);
    tcase_add_test(t, tcp_server_bounds_what_a_client_can_take);
    tcase_add_test(t, tcp_client_times_out_without_server);
    tcase_add_test(t, tcp_renew_tells_a_dropped_connection_from_a_server_gone);
    tcase_add_test(t, tcp_renew_returns_by_its_deadline);
    tcase_add_test(t, rendezvous_urls_parse_or_explain);
    tcase_add_test(t, file_store_refuses_a_directory_others_can_write);
    tcase_add_loop_test(t, file_store_ignores_a_planted_fifo_or_link, 0, 2);
    tcase_add_test(t, tcp_store_serves_with_the_largest_timeout);
    tcase_add_test(t, tcp_store_listens_where_it_is_named);
    tcase_add_test(t, a_note_of_earlier_terms_ends_no_later_job);
    suite_add_tcase(s, t);
    return run_suite(s);
}
