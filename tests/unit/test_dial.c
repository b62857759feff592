/* A dial that meets itself (base/addr.c): TCP's simultaneous open connects a socket
 * bound to 127.0.0.1:P that dials 127.0.0.1:P to itself, and a dial of a free port of
 * this host's ephemeral range is now and then given that port as its own, which the
 * rendezvous client then took as rank 0's store and waited on its own hello. The check
 * finds the first and not an ordinary connection; a blocking cl_addr_dial, driven until
 * it meets itself, fails as refused (nobody listens there) and never returns the socket. */
#include "base/addr.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include "common/suite.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static cl_addr loopback(int port)
{
    cl_addr a = {.len = sizeof(struct sockaddr_in)};
    struct sockaddr_in *in = (struct sockaddr_in *)&a.sa;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A socket bound to 127.0.0.1 at a port the kernel picks; its port in *port. */
static int bound(int *port)
{
    cl_addr a = loopback(0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a.sa, a.len), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a.sa, &a.len), 0);
    *port = ntohs(((struct sockaddr_in *)&a.sa)->sin_port);
    return fd;
}

START_TEST(a_socket_connected_to_itself_is_found_and_an_ordinary_one_is_not)
{
    int port, fd = bound(&port);
    cl_addr self = loopback(port);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&self.sa, self.len), 0);
    ck_assert_int_eq(cl_addr_self_dialed(fd), 1);
    close(fd);

    cl_addr at = loopback(0);
    int l = cl_addr_listen(&at, 0, 4);
    ck_assert_int_ge(l, 0);
    int d = cl_addr_dial(&at, 0);
    ck_assert_int_ge(d, 0);
    ck_assert_int_eq(cl_addr_self_dialed(d), 0);
    int s = accept(l, NULL, NULL);
    ck_assert_int_ge(s, 0);
    ck_assert_int_eq(cl_addr_self_dialed(s), 0);
    close(s);
    close(d);
    close(l);
    ck_assert_int_eq(cl_addr_self_dialed(l), 0); /* not a socket now: no */
}
END_TEST

static int met_itself;

static void count_meetings(coll_log_level level, const char *msg, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(msg, "met itself"))
        __atomic_add_fetch(&met_itself, 1, __ATOMIC_RELAXED);
}

/* A free port of the ephemeral range that the kernel gives dials: Linux's connect()
 * takes even ports first, and bind() to port 0 odd ones, so the even one below it. */
static int free_even_port(void)
{
    for (;;) {
        int port, fd = bound(&port);
        close(fd);
        cl_addr below = loopback(port - 1);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
        int ok = bind(fd, (struct sockaddr *)&below.sa, below.len) == 0;
        close(fd);
        if (ok && (port - 1) % 2 == 0)
            return port - 1;
    }
}

/* Dials 127.0.0.1:P where nobody listens until one dial meets itself (usually within a
 * second: the kernel walks its ephemeral ports with small random steps), at most 30 s.
 * Every dial fails ECONNREFUSED; one that connects is someone else's listener that took
 * P meanwhile, and the port is picked anew. */
START_TEST(a_blocking_dial_that_meets_itself_fails_as_refused)
{
    coll_set_log(count_meetings, NULL, COLL_LOG_DEBUG);
    int port = free_even_port();
    int64_t deadline = cl_now_ms() + 30000;
    long dials = 0;
    while (__atomic_load_n(&met_itself, __ATOMIC_RELAXED) == 0 && cl_now_ms() < deadline) {
        cl_addr to = loopback(port);
        int fd = cl_addr_dial(&to, 0);
        dials++;
        if (fd >= 0) {
            ck_assert_msg(!cl_addr_self_dialed(fd), "dial %ld: a socket met itself (port %d)",
                          dials, port);
            close(fd); /* a listener there now: not ours to test */
            port = free_even_port();
            continue;
        }
        ck_assert_msg(errno == ECONNREFUSED, "dial %ld: %s", dials, strerror(errno));
    }
    coll_set_log(NULL, NULL, COLL_LOG_WARN);
    ck_assert_msg(met_itself > 0, "no dial of port %d met itself in %ld dials", port, dials);
    printf("a dial met itself after %ld dials\n", dials);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dial");
    TCase *t = tcase_create("dial");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_socket_connected_to_itself_is_found_and_an_ordinary_one_is_not);
    tcase_add_test(t, a_blocking_dial_that_meets_itself_fails_as_refused);
    suite_add_tcase(s, t);
    return run_suite(s);
}
