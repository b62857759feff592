/* Communicators sharing their root's links (family.h): membership, turns, one fate. */
#include "core/family.h"

#include "core/comm.h"

#include "base/log.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>

struct cl_family {
    pthread_mutex_t mu; /* members; taken before any member's mu */
    coll_comm *root;
    int root_left; /* the root was destroyed: it stays, for its links, until the last member */
    coll_comm **members;
    int n, cap;
    /* Turns: a leaf lock, taken under a member's mu when it queues an operation. */
    pthread_mutex_t turn_mu;
    pthread_cond_t turn_cv;
    uint64_t issued, served;
};

static struct cl_family *family_new(coll_comm *root)
{
    struct cl_family *f = calloc(1, sizeof(*f));
    if (!f || !(f->members = calloc(4, sizeof(coll_comm *)))) {
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->turn_mu, NULL);
    pthread_cond_init(&f->turn_cv, NULL);
    f->root = root;
    f->members[f->n++] = root;
    f->cap = 4;
    return f;
}

static void family_free(struct cl_family *f)
{
    pthread_cond_destroy(&f->turn_cv);
    pthread_mutex_destroy(&f->turn_mu);
    pthread_mutex_destroy(&f->mu);
    free(f->members);
    free(f);
}

int cl_family_join(coll_comm *parent, coll_comm *child)
{
    if (!parent->fam) {
        /* Set before any member exists: the parent is between operations (in a split). */
        if (!(parent->fam = family_new(parent)))
            return COLL_ENOMEM;
    }
    struct cl_family *f = parent->fam;
    pthread_mutex_lock(&f->mu);
    int rc = COLL_OK;
    if (f->n == f->cap) {
        coll_comm **m = realloc(f->members, 2 * (size_t)f->cap * sizeof(*m));
        if (m) {
            f->members = m;
            f->cap *= 2;
        }
        rc = m ? COLL_OK : COLL_ENOMEM;
    }
    if (rc == COLL_OK) {
        f->members[f->n++] = child;
        child->fam = f;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

coll_comm *cl_family_root(const coll_comm *c)
{
    return c->fam ? c->fam->root : (coll_comm *)c;
}

int cl_family_rank(const coll_comm *c, int r)
{
    if (!c->to_root)
        return r;
    for (int i = 0; i < c->size; i++)
        if (c->to_root[i] == r)
            return i;
    return -1;
}

uint64_t cl_family_ticket(coll_comm *c)
{
    struct cl_family *f = c->fam;
    if (!f)
        return 0;
    pthread_mutex_lock(&f->turn_mu);
    uint64_t t = ++f->issued;
    pthread_mutex_unlock(&f->turn_mu);
    return t;
}

/* Every ticket runs: a queued operation of a failed member runs too (and fails at once),
 * so a turn is never skipped and no wait is left without an end. */
void cl_family_turn(coll_comm *c, uint64_t ticket)
{
    struct cl_family *f = c->fam;
    if (!ticket)
        return;
    pthread_mutex_lock(&f->turn_mu);
    while (f->served + 1 != ticket)
        pthread_cond_wait(&f->turn_cv, &f->turn_mu);
    pthread_mutex_unlock(&f->turn_mu);
}

void cl_family_done(coll_comm *c, uint64_t ticket)
{
    struct cl_family *f = c->fam;
    if (!ticket)
        return;
    pthread_mutex_lock(&f->turn_mu);
    f->served = ticket;
    pthread_cond_broadcast(&f->turn_cv);
    pthread_mutex_unlock(&f->turn_mu);
}

/* c's rank r in the root's numbering. */
static int root_rank(const coll_comm *c, int r)
{
    return c->to_root && r >= 0 && r < c->size ? c->to_root[r] : r;
}

coll_comm *cl_family_fail(coll_comm *c, int status, const char *msg)
{
    struct cl_family *f = c->fam;
    char other[512];
    snprintf(other, sizeof(other), "a communicator sharing these links failed: %.440s", msg);
    pthread_mutex_lock(&f->mu);
    int first = cl_comm_record(c, status, msg), cause, cause_status, silent;
    if (first)
        cl_log(COLL_LOG_ERROR, "%s", msg);
    cl_comm_cause(c, &cause, &cause_status, &silent);
    cause = root_rank(c, cause);
    int close = c == f->root && first;
    for (int i = 0; i < f->n; i++) {
        coll_comm *m = f->members[i];
        if (m == c)
            continue;
        cl_comm_blame(m, cl_family_rank(m, cause), cause_status, silent);
        int made = cl_comm_record(m, status, other);
        close |= made && m == f->root;
    }
    coll_comm *root = f->root;
    pthread_mutex_unlock(&f->mu);
    return close ? root : NULL; /* the root's state failed first here: once */
}

/* The root stays on the list after its coll_destroy (root_left): it fails with the
 * family, and goes with the last member. */
int cl_family_leave(coll_comm *c, coll_comm **last)
{
    struct cl_family *f = c->fam;
    int root = c == f->root;
    *last = NULL;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; !root && i < f->n; i++)
        if (f->members[i] == c)
            f->members[i--] = f->members[--f->n];
    f->root_left |= root;
    int over = f->n == 1 && f->root_left;
    pthread_mutex_unlock(&f->mu);
    if (!over)
        return !root;
    if (!root)
        *last = f->root;
    f->root->fam = NULL;
    c->fam = NULL;
    family_free(f);
    return 1;
}
