/* The kernel's account of a tcp socket's sending (TCP_INFO), for the rails transport's
 * weights. A file of its own: glibc's netinet/tcp.h lacks the fields, and linux/tcp.h
 * cannot share a file with it (uv.h brings it). Reads only; never blocks. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

int cl_tcp_sock_busy(int fd, uint64_t *acked, uint64_t *busy_us);

/* 1 with fd's bytes acknowledged so far and its time (us) spent sending as fast as the
 * network let it: busy with data to send, less the time the peer's receive window held
 * it (a receiver late to read says nothing of the rail); 0 where the kernel does not
 * say (before 4.10). */
int cl_tcp_sock_busy(int fd, uint64_t *acked, uint64_t *busy_us)
{
    struct tcp_info ti;
    socklen_t n = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
        n < offsetof(struct tcp_info, tcpi_rwnd_limited) + sizeof(ti.tcpi_rwnd_limited))
        return 0;
    *acked = ti.tcpi_bytes_acked;
    *busy_us = ti.tcpi_busy_time - ti.tcpi_rwnd_limited;
    return 1;
}
