/* Pending accepted sockets: see accept.h. */
#include "transports/accept.h"

#include "collective.h"

#include <sys/socket.h>
#include <unistd.h>

int cl_listen_accept(cl_listen_fd *l, cl_pending_take take, void *arg)
{
    int s;
    while (l->np < CL_PENDING_MAX &&
           (s = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
        l->p[l->np++] = (cl_pending){.fd = s};
    for (int i = 0; i < l->np; i++) {
        int got = take(arg, &l->p[i]);
        if (got == 0)
            continue;
        if (got < 0)
            close(l->p[i].fd);
        l->p[i] = l->p[--l->np];
        if (got > 0)
            return COLL_OK;
        i--;
    }
    return COLL_INPROGRESS;
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
