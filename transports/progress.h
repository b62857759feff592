/* A transport's progress thread (shm, ibverbs): it sleeps in epoll on the descriptors it
 * is given and on its own eventfd, then, holding the context's mutex, hands each ready
 * descriptor's tag to on_ready and runs on_round once per wake-up. The 100 ms timeout only
 * guards against a lost wake-up. */
#ifndef CL_PROGRESS_H
#define CL_PROGRESS_H

#include "base/lock.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct cl_progress {
    cl_lock mu;         /* the context's mutex: held while the callbacks run */
    int efd;            /* write 1 to wake the thread (shm hands it to peers) */
    int epfd;
    pthread_t thread;
    atomic_int stop;
    void (*on_ready)(void *arg, void *tag);
    void (*on_round)(void *arg);
    void *arg;
} cl_progress;

/* Starts the thread; COLL_OK, or COLL_ESYS with nothing left behind. */
int cl_progress_start(cl_progress *p, void (*on_ready)(void *arg, void *tag),
                      void (*on_round)(void *arg), void *arg);
/* Stops and joins the thread (the mutex stays usable). */
void cl_progress_stop(cl_progress *p);
/* After stop: closes the descriptors. */
void cl_progress_close(cl_progress *p);
/* Watches fd for input (and hang-up); tag goes to on_ready. tag must not be NULL. */
int cl_progress_watch(cl_progress *p, int fd, void *tag);
void cl_progress_unwatch(cl_progress *p, int fd);
void cl_progress_wake(cl_progress *p);

#endif
