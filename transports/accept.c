/* Pending accepted sockets: see accept.h. */
#include "transports/accept.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <sys/socket.h>
#include <unistd.h>

static void drop(cl_listen_fd *l, int i, const char *why)
{
    cl_log(COLL_LOG_DEBUG, "dropped a connection that %s", why);
    close(l->p[i].fd);
    l->p[i] = l->p[--l->np];
}

static int oldest(const cl_listen_fd *l)
{
    int o = 0;
    for (int i = 1; i < l->np; i++)
        o = l->p[i].since < l->p[o].since ? i : o;
    return o;
}

/* Offers each pending socket to take: 1 once one made a connection. */
static int offer(cl_listen_fd *l, cl_pending_take take, void *arg)
{
    for (int i = 0; i < l->np; i++) {
        int got = take(arg, &l->p[i]);
        if (got == 0)
            continue;
        if (got < 0)
            close(l->p[i].fd);
        l->p[i] = l->p[--l->np];
        if (got > 0)
            return 1;
        i--;
    }
    return 0;
}

/* What arrived is offered before the bounds drop anything: a rank's introduction that
 * waited while nobody accepted is taken, not expired. */
int cl_listen_accept(cl_listen_fd *l, cl_pending_take take, void *arg)
{
    if (offer(l, take, arg))
        return COLL_OK;
    int64_t now = cl_now_ms();
    for (int i = l->np - 1; i >= 0; i--)
        if (now - l->p[i].since > CL_PENDING_MS)
            drop(l, i, "sent no introduction in time");
    int s;
    while ((s = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        if (l->np == CL_PENDING_MAX)
            drop(l, oldest(l), "was pushed out by a newer one (too many pending)");
        l->p[l->np++] = (cl_pending){.fd = s, .since = now};
    }
    return offer(l, take, arg) ? COLL_OK : COLL_INPROGRESS;
}

int cl_listen_vet(const cl_listen_fd *l, const uint8_t hello[CL_HELLO_BYTES], const char *tr)
{
    const char *why = l->vet ? l->vet(l->vet_arg, hello) : NULL;
    if (why)
        cl_log(COLL_LOG_WARN, "%s: refused connection: %s (%s)", tr, coll_strerror(COLL_EPROTO),
               why);
    return why == NULL;
}

void cl_listen_close(cl_listen_fd *l)
{
    for (int i = 0; i < l->np; i++)
        close(l->p[i].fd);
    l->np = 0;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
