/* coll_status's view of every communicator of the processes it asks (status_comms.h):
 * each process lists its live communicators (COMMS pages: id, label, rank, size, newest
 * collective); they are grouped by id, and a group that lacks ranks asks one of its
 * members for its ranks' endpoints (PEERS of that id), which are their processes' (one
 * endpoint per process, status_list.c): a rank whose process is known but silent is named
 * with that process's rank in the entry communicator (torch's global rank), and a process
 * not yet asked (a grown communicator's newcomer) is asked in the next round. */
#include "status_comms.h"

#include "base/util.h"
#include "collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entries a process may list (pages asked), rounds of finding processes, ranks shown. */
enum { MAX_COMMS = 64, ROUNDS = 3, MAX_GROUP = 1 << 16 };

typedef struct proc {
    cl_addr to;
    char at[CL_ADDR_TEXT];
    int world;    /* its rank in the entry communicator, -1: found through another */
    int answered; /* to its first COMMS page: 1, 0 not, -1 refused */
    int asked;
} proc;

typedef struct member {
    int proc;                 /* -1: not known */
    const cl_status_comm *e;  /* its entry, NULL: its process did not list it */
    const char *straggler;
    char why[120];
} member;

typedef struct group {
    comm_id id;
    const cl_status_comm *any;
    member *m;
    int size, stragglers;
} group;

struct comms {
    proc *p;
    int np;
    cl_status_comm *e;
    int *eproc; /* per entry: its process */
    int ne;
    group *g;
    int ng;
    comm_id entry;
    double stall_s;
};

static int is(const cl_status_comm *e, comm_id c)
{
    return e->job == c.job && e->id == c.id;
}

static int add_proc(comms *m, const cl_addr *to, int world)
{
    proc *p = realloc(m->p, (size_t)(m->np + 1) * sizeof(*p));
    if (!p)
        return -1;
    m->p = p;
    p += m->np;
    *p = (proc){.to = *to, .world = world};
    cl_addr_text(to, p->at, sizeof(p->at));
    return m->np++;
}

static int find_proc(const comms *m, const char *at)
{
    for (int i = 0; i < m->np; i++)
        if (strcmp(m->p[i].at, at) == 0)
            return i;
    return -1;
}

static void add_entries(comms *m, int proc, const cl_status_comms *c)
{
    int n = (int)CL_MIN(c->n, CL_STATUS_COMMS_PAGE);
    cl_status_comm *e = realloc(m->e, (size_t)(m->ne + n) * sizeof(*e));
    int *ep = realloc(m->eproc, (size_t)(m->ne + n) * sizeof(*ep));
    if (e)
        m->e = e;
    if (ep)
        m->eproc = ep;
    for (int i = 0; e && ep && i < n; i++) {
        m->e[m->ne] = c->e[i];
        m->e[m->ne].label[CL_STATUS_LABEL - 1] = 0;
        m->eproc[m->ne++] = proc;
    }
}

/* Every page of the COMMS of the processes not asked yet. */
static void ask_comms(asker *k, comms *m)
{
    int from = m->np;
    for (int i = 0; i < m->np; i++)
        if (!m->p[i].asked && i < from)
            from = i;
    int n = m->np - from;
    rank_view *v = n > 0 ? calloc((size_t)n, sizeof(*v)) : NULL;
    uint32_t *total = n > 0 ? calloc((size_t)n, sizeof(*total)) : NULL;
    for (uint32_t first = 0; v && total && first < MAX_COMMS; first += CL_STATUS_COMMS_PAGE) {
        int any = 0;
        for (int i = 0; i < n; i++) {
            v[i] = (rank_view){.to = m->p[from + i].to,
                               .reachable = m->p[from + i].to.sa.ss_family == k->family &&
                                            (first == 0 || total[i] > first)};
            any |= v[i].reachable;
        }
        if (!any)
            break;
        ask_all(k, v, n, CL_STATUS_COMMS, first, (comm_id){0, 0});
        for (int i = 0; i < n; i++) {
            const cl_status_comms *c = &v[i].a.u.comms;
            if (first == 0)
                m->p[from + i].answered = v[i].answered;
            if (v[i].answered <= 0 || c->first != first)
                continue;
            total[i] = c->total;
            add_entries(m, from + i, c);
        }
    }
    for (int i = from; i < m->np; i++)
        m->p[i].asked = 1;
    free(v);
    free(total);
}

static void free_groups(comms *m)
{
    for (int i = 0; i < m->ng; i++)
        free(m->g[i].m);
    free(m->g);
    m->g = NULL;
    m->ng = 0;
}

/* The entries grouped by communicator, the entry communicator's aside. */
static void build_groups(comms *m)
{
    free_groups(m);
    for (int i = 0; i < m->ne; i++) {
        const cl_status_comm *e = &m->e[i];
        int j = 0;
        while (j < m->ng && !is(e, m->g[j].id))
            j++;
        if (is(e, m->entry) || e->size <= 0 || e->size > MAX_GROUP || e->rank < 0 ||
            e->rank >= e->size)
            continue;
        if (j == m->ng) {
            group *g = realloc(m->g, (size_t)(m->ng + 1) * sizeof(*g));
            member *mm = calloc((size_t)e->size, sizeof(*mm));
            if (!g || !mm) {
                m->g = g ? g : m->g;
                free(mm);
                continue;
            }
            m->g = g;
            m->g[m->ng++] = (group){.id = {e->job, e->id}, .any = e, .m = mm, .size = e->size};
            for (int r = 0; r < e->size; r++)
                mm[r].proc = -1;
        }
        if (e->size == m->g[j].size) {
            m->g[j].m[e->rank].e = e;
            m->g[j].m[e->rank].proc = m->eproc[i];
        }
    }
}

/* A group's ranks that no process listed: their processes from a member's PEERS of the
 * group (new ones added, to be asked); how many processes were new. */
static int find_missing(asker *k, comms *m, group *g)
{
    int missing = 0, added = 0, size = 0, holder = -1;
    for (int r = 0; r < g->size; r++)
        missing += !g->m[r].e;
    for (int r = 0; r < g->size && holder < 0; r++)
        holder = g->m[r].e ? g->m[r].proc : -1;
    if (!missing || holder < 0)
        return 0;
    comm_id id = g->id;
    rank_view *v = learn_ranks(k, &m->p[holder].to, m->p[holder].at, &id, &size);
    for (int r = 0; v && r < g->size && r < size; r++) {
        char at[CL_ADDR_TEXT];
        if (g->m[r].e || !v[r].reachable)
            continue;
        cl_addr_text(&v[r].to, at, sizeof(at));
        if ((g->m[r].proc = find_proc(m, at)) < 0) {
            g->m[r].proc = add_proc(m, &v[r].to, -1);
            added += g->m[r].proc >= 0;
        }
    }
    free(v);
    return added;
}

/* Whether a member has waited in collective #seq for the stall (one behind it lags). */
static int group_waited(const comms *m, const group *g, uint32_t seq)
{
    for (int r = 0; r < g->size; r++)
        if (g->m[r].e && op_waited(&g->m[r].e->coll, seq, m->stall_s))
            return 1;
    return 0;
}

/* Marks a group's stragglers, as the entry communicator's are: silent, behind the
 * newest collective (while another has waited in it for the stall, or it has been in
 * none for the stall), or (none such) stuck in one. */
static void judge_group(comms *m, group *g)
{
    uint32_t newest = 0;
    for (int r = 0; r < g->size; r++)
        if (g->m[r].e && g->m[r].e->issued > newest)
            newest = g->m[r].e->issued;
    for (int r = 0; r < g->size; r++) {
        member *x = &g->m[r];
        const proc *p = x->proc >= 0 ? &m->p[x->proc] : NULL;
        if (!x->e)
            x->straggler = !p ? "no process of it answered, nor told its endpoint"
                         : p->answered < 0 ? "refused the ask"
                         : p->answered ? "its process no longer lists it (destroyed?)"
                                       : "no answer (stopped?)";
        else if (x->e->issued + 1 < newest &&
                 (group_waited(m, g, newest) || op_idle(&x->e->coll, m->stall_s))) {
            snprintf(x->why, sizeof(x->why), "behind: its newest collective is #%u, others' #%u",
                     x->e->issued, newest);
            x->straggler = x->why;
        }
        g->stragglers += x->straggler != NULL;
    }
    for (int r = 0; !g->stragglers && r < g->size; r++) {
        member *x = &g->m[r];
        if (x->e && op_stuck(&x->e->coll, m->stall_s)) {
            snprintf(x->why, sizeof(x->why), "stuck: no byte moved for %.1f s",
                     x->e->coll.progress_ago_us / 1e6);
            x->straggler = x->why;
        }
    }
    g->stragglers = 0;
    for (int r = 0; r < g->size; r++)
        g->stragglers += g->m[r].straggler != NULL;
}

comms *comms_learn(asker *k, const rank_view *v, int n, comm_id entry, double stall_s)
{
    comms *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->entry = entry;
    m->stall_s = stall_s;
    for (int r = 0; r < n; r++)
        if (v[r].reachable)
            add_proc(m, &v[r].to, r);
    for (int round = 0; round < ROUNDS; round++) {
        int added = 0;
        ask_comms(k, m);
        build_groups(m);
        for (int i = 0; i < m->ng; i++)
            added += find_missing(k, m, &m->g[i]);
        if (!added)
            break;
    }
    for (int i = 0; i < m->ng; i++)
        judge_group(m, &m->g[i]);
    return m;
}

const char *comms_label(const comms *m)
{
    for (int i = 0; m && i < m->ne; i++)
        if (is(&m->e[i], m->entry) && m->e[i].label[0])
            return m->e[i].label;
    return "";
}

int comms_stragglers(const comms *m)
{
    int n = 0;
    for (int i = 0; m && i < m->ng; i++)
        n += m->g[i].stragglers;
    return n;
}

/* A rank's global number: its label's, else its process's rank in the entry
 * communicator (torch's global rank where that is torch's default group); -1. */
static int global_of(const comms *m, const member *x)
{
    if (x->e && x->e->global >= 0)
        return x->e->global;
    return x->proc >= 0 ? m->p[x->proc].world : -1;
}

void comms_print_text(const comms *m)
{
    for (int i = 0; m && i < m->ng; i++) {
        const group *g = &m->g[i];
        /* job.id: every communicator coll_init or a store made has id 0 */
        printf("communicator %016llx.%llx", (unsigned long long)g->id.job,
               (unsigned long long)g->id.id);
        if (g->any->label[0])
            printf(" '%s'", g->any->label);
        printf(", %d ranks", g->size);
        if (g->any->parent_rank >= 0)
            printf(", a split sharing the links of %016llx", (unsigned long long)g->any->parent);
        printf(":\n");
        for (int r = 0; r < g->size; r++) {
            const member *x = &g->m[r];
            int global = global_of(m, x);
            printf("  rank %d", r);
            if (global >= 0)
                printf(" (global %d)", global);
            if (x->e && x->e->recorder && x->e->coll.seq) {
                printf(": ");
                print_op(&x->e->coll);
            } else if (x->e) {
                printf(": %u collectives issued", x->e->issued);
            } else {
                printf(": %s [endpoint %s]", x->straggler,
                       x->proc >= 0 ? m->p[x->proc].at : "?");
            }
            if (x->e && x->e->failed != COLL_OK)
                printf("; failed: %s", coll_strerror(x->e->failed));
            if (x->e && x->straggler)
                printf("  <- %s", x->straggler);
            printf("\n");
        }
        for (int r = 0; r < g->size; r++)
            if (g->m[r].straggler)
                printf("straggler: communicator %016llx.%llx rank %d: %s\n",
                       (unsigned long long)g->id.job, (unsigned long long)g->id.id, r,
                       g->m[r].straggler);
    }
}

void comms_print_json(const comms *m)
{
    printf(",\n  \"communicators\": [");
    for (int i = 0; m && i < m->ng; i++) {
        const group *g = &m->g[i];
        printf("%s\n    {\"comm\": \"%016llx\", \"label\": ", i ? "," : "",
               (unsigned long long)g->id.id);
        put_string(g->any->label, CL_STATUS_LABEL);
        printf(", \"size\": %d, \"job\": \"%016llx\", \"parent\": ", g->size,
               (unsigned long long)g->id.job);
        if (g->any->parent_rank >= 0)
            printf("\"%016llx\"", (unsigned long long)g->any->parent);
        else
            printf("null");
        printf(", \"ranks\": [");
        for (int r = 0; r < g->size; r++) {
            const member *x = &g->m[r];
            printf("%s\n      {\"rank\": %d, \"global\": %d, \"world\": %d, \"endpoint\": ",
                   r ? "," : "", r, global_of(m, x), x->proc >= 0 ? m->p[x->proc].world : -1);
            put_string(x->proc >= 0 ? m->p[x->proc].at : "", CL_ADDR_TEXT);
            printf(", \"answered\": %s, \"straggler\": ", x->e ? "true" : "false");
            if (x->straggler)
                put_string(x->straggler, 200);
            else
                printf("null");
            if (x->e) {
                printf(", \"parent_rank\": %d, \"issued\": %u", x->e->parent_rank, x->e->issued);
                put_op("op", &x->e->coll);
            }
            printf("}");
        }
        printf("],\n     \"stragglers\": [");
        for (int r = 0, n = 0; r < g->size; r++)
            if (g->m[r].straggler)
                printf("%s%d", n++ ? ", " : "", r);
        printf("]}");
    }
    printf("\n  ]");
}

void comms_free(comms *m)
{
    if (!m)
        return;
    free_groups(m);
    free(m->p);
    free(m->e);
    free(m->eproc);
    free(m);
}
