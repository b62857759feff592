/* The process's side of the status endpoint (status.h): its live communicators, which
 * any of its endpoints lists (COMMS) and answers for (HEAD, PEERS of a communicator by
 * id), and the one UDP socket its communicators share, so that a process has one
 * endpoint whatever it made (a split with links of its own, a grown communicator, one
 * per torch process group): every rank's endpoint in any communicator's PEERS is its
 * process's, which is how coll_status tells which process a communicator's rank is.
 * The list's lock is held while an answer reads a communicator: destroy takes it
 * (cl_status_delist, before anything is freed), so no communicator goes while read. */
#include "core/status.h"

#include "base/util.h"
#include "core/beat.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/record.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static coll_comm **list; /* oldest first */
static int nlist, caplist;
static struct {
    int fd, refs;
    cl_addr at; /* its address, port 0: which lifelines' address it serves */
} shared = {.fd = -1};

void cl_status_enlist(coll_comm *c)
{
    pthread_mutex_lock(&mu);
    if (nlist == caplist) {
        int cap = caplist ? 2 * caplist : 8;
        coll_comm **l = realloc(list, (size_t)cap * sizeof(*l));
        if (l) {
            list = l;
            caplist = cap;
        }
    }
    if (nlist < caplist) /* without memory it is only not listed */
        list[nlist++] = c;
    pthread_mutex_unlock(&mu);
}

void cl_status_delist(coll_comm *c)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nlist; i++)
        if (list[i] == c) {
            memmove(list + i, list + i + 1, (size_t)(nlist - i - 1) * sizeof(*list));
            nlist--;
            break;
        }
    pthread_mutex_unlock(&mu);
}

void cl_status_list_lock(void)
{
    pthread_mutex_lock(&mu);
}

void cl_status_list_unlock(void)
{
    pthread_mutex_unlock(&mu);
}

coll_comm *cl_status_list_find(uint64_t job, uint64_t id, int rank)
{
    for (int i = 0; i < nlist; i++)
        if (!job || (list[i]->job == job && list[i]->id == id && (rank < 0 || list[i]->rank == rank)))
            return list[i];
    return NULL;
}

void cl_status_list_page(uint32_t first, cl_status_comms *p)
{
    int64_t now_us = cl_now_us();
    p->first = first;
    p->total = (uint32_t)nlist;
    p->n = first < (uint32_t)nlist ? (uint32_t)CL_MIN(CL_STATUS_COMMS_PAGE, nlist - (int)first) : 0;
    p->pid = (int32_t)getpid();
    gethostname(p->host, sizeof(p->host) - 1);
    for (uint32_t i = 0; i < p->n; i++) {
        coll_comm *c = list[first + i];
        cl_status_comm *e = &p->e[i];
        coll_record coll, p2p;
        e->job = c->job;
        e->id = c->id;
        e->rank = c->rank;
        e->size = c->size;
        e->parent = c->to_root && c->beat ? cl_beat_owner_id(c) : 0;
        e->parent_rank = c->to_root && c->beat ? c->to_root[c->rank] : -1;
        e->global = c->global;
        snprintf(e->label, sizeof(e->label), "%s", c->label);
        e->failed = cl_comm_state(c);
        e->issued = cl_engine_issued(c);
        e->recorder = c->rec != NULL;
        cl_rec_head(c, &coll, &p2p);
        cl_status_put_op(&coll, now_us, &e->coll);
    }
}

int coll_comm_set_label(coll_comm *comm, const char *label, int global_rank)
{
    if (!comm || !label || global_rank < -1)
        return COLL_EINVAL;
    pthread_mutex_lock(&mu);
    snprintf(comm->label, sizeof(comm->label), "%s", label);
    comm->global = global_rank;
    pthread_mutex_unlock(&mu);
    return COLL_OK;
}

/* ---- the shared socket ---------------------------------------------------------------- */

static int same_host(const cl_addr *a, const cl_addr *b)
{
    cl_addr x = *a, y = *b;
    cl_status_set_port(&x, 0);
    cl_status_set_port(&y, 0);
    return x.len == y.len && memcmp(&x.sa, &y.sa, x.len) == 0;
}

int cl_status_share(const cl_addr *at, int (*make)(const cl_addr *))
{
    int fd = -1;
    pthread_mutex_lock(&mu);
    if (shared.fd < 0 && (shared.fd = make(at)) >= 0) {
        shared.at = *at;
        shared.refs = 0;
    }
    if (shared.fd >= 0 && same_host(&shared.at, at)) {
        shared.refs++;
        fd = shared.fd;
    }
    pthread_mutex_unlock(&mu);
    return fd;
}

void cl_status_unshare(int fd)
{
    pthread_mutex_lock(&mu);
    if (fd == shared.fd && --shared.refs == 0) {
        close(shared.fd);
        shared.fd = -1;
    }
    pthread_mutex_unlock(&mu);
}
