/* See progress.h. */
#include "transports/progress.h"

#include "base/log.h"
#include "collective.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void *progress_main(void *arg)
{
    cl_progress *p = arg;
    struct epoll_event ev[16];
    while (!atomic_load(&p->stop)) {
        int n = epoll_wait(p->epfd, ev, 16, 100);
        cl_lock_take(&p->mu);
        for (int i = 0; i < n; i++) {
            uint64_t v;
            if (ev[i].data.ptr != NULL)
                p->on_ready(p->arg, ev[i].data.ptr);
            else if (read(p->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                cl_log(COLL_LOG_DEBUG, "progress: eventfd: %s", strerror(errno));
        }
        p->on_round(p->arg);
        cl_lock_give(&p->mu);
    }
    return NULL;
}

int cl_progress_start(cl_progress *p, void (*on_ready)(void *arg, void *tag),
                      void (*on_round)(void *arg), void *arg)
{
    p->on_ready = on_ready, p->on_round = on_round, p->arg = arg;
    atomic_init(&p->mu.v, 0);
    atomic_init(&p->stop, 0);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };
    if (p->efd >= 0 && p->epfd >= 0 && epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->efd, &e) == 0 &&
        pthread_create(&p->thread, NULL, progress_main, p) == 0)
        return COLL_OK;
    cl_progress_close(p);
    return COLL_ESYS;
}

void cl_progress_wake(cl_progress *p)
{
    uint64_t one = 1;
    if (write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        cl_log(COLL_LOG_DEBUG, "progress: cannot wake the thread: %s", strerror(errno));
}

void cl_progress_stop(cl_progress *p)
{
    atomic_store(&p->stop, 1);
    cl_progress_wake(p);
    pthread_join(p->thread, NULL);
}

void cl_progress_close(cl_progress *p)
{
    if (p->efd >= 0)
        close(p->efd);
    if (p->epfd >= 0)
        close(p->epfd);
    p->efd = p->epfd = -1;
}

int cl_progress_watch(cl_progress *p, int fd, void *tag)
{
    struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = tag };
    return epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &e);
}

void cl_progress_unwatch(cl_progress *p, int fd)
{
    epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
}
