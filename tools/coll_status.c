/* coll_status: what every rank of a running job is doing now. It asks the job where its
 * ranks met (MASTER_ADDR and MASTER_PORT, or the URL: rank 0 answers there, over UDP,
 * from a library thread) for every rank's status endpoint, then asks each rank for the
 * newest entries of its flight recorder, with a deadline: a rank that is stopped or
 * wedged in its own code answers nothing and is named for it, while the others say
 * which collective they wait in, since when, and on whom. With rank 0 itself stopped,
 * --rank-addr asks any other rank (which knows every endpoint) instead. Then every other
 * communicator of the processes asked (status_comms.c). The wire is lib/core/status.h's;
 * what it can and cannot tell is in docs/faults.md.
 *   coll_status [--json] [--timeout S] [--stall S] [--rank-addr HOST:PORT] [URL] */
#include "base/addr.h"
#include "base/auth.h"
#include "base/util.h"
#include "collective.h"
#include "core/status.h"
#include "status_comms.h"
#include "rdzv/store.h"

#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { RESEND_MS = 250, MAX_RANKS = 1 << 20, SHOW_WAITED = 8 };

static const char usage[] =
    "usage: coll_status [--json] [--timeout S] [--stall S] [--rank-addr HOST:PORT] [URL]\n"
    "  Asks a running job what each rank is doing: its current collective (the flight\n"
    "  recorder's newest: number, kind, count, type, algorithm, state), since when, its\n"
    "  bytes and rate, and on whom it waits; marks the ranks that lag, are stuck or do\n"
    "  not answer (stopped?). Then every other communicator of those processes (splits,\n"
    "  grown ones, torch's process groups: their label, each rank's global rank), its\n"
    "  stragglers marked within it.\n"
    "  URL          where the ranks met: tcp://HOST:PORT, or env:// (the default:\n"
    "               MASTER_ADDR, MASTER_PORT); COLL_SECRET must be the job's, if it has one\n"
    "  --rank-addr  ask this rank's status endpoint instead (when rank 0 does not answer;\n"
    "               every rank's is in this tool's output)\n"
    "  --timeout S  how long a rank has to answer (default 2)\n"
    "  --stall S    a collective that moved no byte for S seconds is stuck (default 2)\n"
    "  --json       one JSON object, for scripts\n"
    "  Exits 0 when every rank answered and none lags or is stuck, 1 when one does,\n"
    "  2 when the job could not be asked.\n";

/* ---- asking ------------------------------------------------------------------------- */

/* Asks every reachable view without an answer (kind, page `first`) every RESEND_MS
 * until all answered or the timeout: answers into views; how many were refused. */
int ask_all(asker *k, rank_view *v, int n, uint32_t kind, uint32_t first, comm_id c)
{
    int64_t deadline = cl_now_ms() + k->timeout_ms, resend = 0;
    int left = 0, refusals = 0;
    for (int i = 0; i < n; i++)
        left += v[i].reachable && !v[i].answered;
    while (left > 0) {
        int64_t now = cl_now_ms();
        if (now >= deadline)
            break;
        if (now >= resend) {
            for (int i = 0; i < n; i++) {
                cl_status_ask q;
                if (!v[i].reachable || v[i].answered)
                    continue;
                /* HEAD: the rank of comm asked is the view's */
                uint32_t f = kind == CL_STATUS_HEAD ? (uint32_t)i : first;
                cl_status_ask_make(k->keyed ? k->key : NULL, k->base, kind, f, c.job, c.id,
                                   (uint32_t)i, &q);
                (void)sendto(k->fd, &q, sizeof(q), MSG_NOSIGNAL,
                             (const struct sockaddr *)&v[i].to.sa, v[i].to.len);
            }
            resend = now + RESEND_MS;
        }
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(CL_MIN(resend, deadline) - now)) <= 0)
            continue;
        cl_status_answer a;
        int refused;
        ssize_t got = recv(k->fd, &a, sizeof(a), MSG_DONTWAIT);
        int i = cl_status_answer_check(k->keyed ? k->key : NULL, k->base, &a, (long)got, kind, n,
                                       &refused);
        if (i < 0 || v[i].answered)
            continue;
        v[i].answered = refused ? -1 : 1;
        refusals += refused;
        if (!refused)
            v[i].a = a;
        left--;
    }
    return refusals;
}

/* ---- where to ask ------------------------------------------------------------------- */

/* A numeric address, or a name:port resolved. */
static int endpoint(const char *text, int family, cl_addr *a, char *err, size_t len)
{
    char host[256], port[16];
    struct addrinfo *res;
    if (cl_addr_parse(text, a) == 0)
        return 0;
    if (cl_addr_split(text, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, len, "'%s' is not HOST:PORT ([HOST]:PORT for IPv6)", text);
        return -1;
    }
    if (cl_addr_resolve(host, port, family, &res, err, len) != 0)
        return -1;
    memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* The job's entry: --rank-addr's, or where the URL says the ranks met. */
static int entry(const char *url, const char *rank_addr, cl_addr *a, char *err, size_t len)
{
    cl_rdzv rv;
    if (rank_addr)
        return endpoint(rank_addr, AF_UNSPEC, a, err, len);
    if (cl_rdzv_parse(url, 0, 1, &rv, err, len) != COLL_OK)
        return -1;
    if (strcmp(rv.scheme, "tcp") != 0) {
        snprintf(err, len,
                 "a job that met at %s:// has no address to ask: give one rank's "
                 "endpoint with --rank-addr (COLL_DEBUG=info logs it)",
                 rv.scheme);
        return -1;
    }
    return endpoint(rv.where, rv.family, a, err, len);
}

static const char *refusal(const asker *k)
{
    return k->keyed ? "COLL_SECRET here is not the job's"
                    : "the job has a COLL_SECRET and this process has none";
}

/* Every rank's endpoint, a page at a time from the entry (views[0] while asking):
 * the views of the job's ranks, or NULL with the reason on stderr. */
rank_view *learn_ranks(asker *k, const cl_addr *at, const char *where, comm_id *c, int *size)
{
    rank_view first = {.to = *at, .reachable = 1};
    ask_all(k, &first, 1, CL_STATUS_PEERS, 0, *c);
    if (first.answered < 0) {
        fprintf(stderr, "coll_status: %s refused to answer: %s\n", where, refusal(k));
        return NULL;
    }
    if (!first.answered) {
        fprintf(stderr,
                "coll_status: no answer from %s within %.1f s: the rank there (rank 0 where "
                "the ranks met) is stopped or wedged, or the job is gone or met elsewhere. Ask "
                "another rank: coll_status --rank-addr HOST:PORT (every rank's endpoint is in "
                "this tool's output while rank 0 answers, and in each rank's log at "
                "COLL_DEBUG=info)\n",
                where, k->timeout_ms / 1000.0);
        return NULL;
    }
    int n = first.a.size;
    rank_view *v = n > 0 && n <= MAX_RANKS ? calloc((size_t)n, sizeof(*v)) : NULL;
    if (!v) {
        fprintf(stderr, "coll_status: %s says the job has %d ranks\n", where, n);
        return NULL;
    }
    for (int r = 0; r < n; r += CL_STATUS_PAGE) {
        rank_view page = {.to = *at, .reachable = 1};
        if (r == 0)
            page = first;
        else
            ask_all(k, &page, 1, CL_STATUS_PEERS, (uint32_t)r,
                    (comm_id){first.a.job, first.a.comm});
        const cl_status_peers *p = &page.a.u.peers;
        if (page.answered <= 0 || p->first != (uint32_t)r || p->n > CL_STATUS_PAGE) {
            fprintf(stderr, "coll_status: %s did not tell ranks %d on\n", where, r);
            free(v);
            return NULL;
        }
        for (uint32_t i = 0; i < p->n && r + (int)i < n; i++) {
            char text[CL_ADDR_TEXT];
            rank_view *x = &v[r + (int)i];
            snprintf(text, sizeof(text), "%.*s", CL_ADDR_TEXT - 1, p->addr[i]);
            x->reachable = cl_addr_parse(text, &x->to) == 0 && x->to.sa.ss_family == k->family;
        }
    }
    *size = n;
    *c = (comm_id){first.a.job, first.a.comm};
    return v;
}

/* ---- the verdict -------------------------------------------------------------------- */

const char *state_name(int state)
{
    static const char *names[] = {"queued", "running", "done", "failed"};
    return state >= 0 && state <= COLL_REC_FAILED ? names[state] : "unknown";
}

static uint32_t issued_max(const rank_view *v, int n)
{
    uint32_t m = 0;
    for (int r = 0; r < n; r++)
        if (v[r].answered > 0 && v[r].a.u.head.issued > m)
            m = v[r].a.u.head.issued;
    return m;
}

static int stuck(const rank_view *x, double stall_s)
{
    return x->answered > 0 && op_stuck(&x->a.u.head.coll, stall_s);
}

int op_stuck(const cl_status_op *o, double stall_s)
{
    return o->seq && o->state == COLL_REC_RUNNING &&
           o->progress_ago_us >= (int64_t)(stall_s * 1e6);
}

static int waiting(const cl_status_op *o)
{
    return o->seq && (o->state == COLL_REC_RUNNING || o->state == COLL_REC_QUEUED);
}

int op_idle(const cl_status_op *o, double stall_s)
{
    return o->seq && !waiting(o) && o->issued_ago_us >= (int64_t)(stall_s * 1e6);
}

int op_waited(const cl_status_op *o, uint32_t seq, double stall_s)
{
    return o->seq == seq && waiting(o) && o->issued_ago_us >= (int64_t)(stall_s * 1e6);
}

/* Whether a rank that answered has waited in collective #seq for the stall or longer. */
static int waited_long(const rank_view *v, int n, uint32_t seq, double stall_s)
{
    for (int r = 0; r < n; r++)
        if (v[r].answered > 0 && op_waited(&v[r].a.u.head.coll, seq, stall_s))
            return 1;
    return 0;
}

/* Why x lags the newest collective #m: a collective ends on each rank at its own time,
 * so one behind is in step, unless it is not in a collective at all while the others
 * have waited in #m for the stall. Two or more behind lags only while another has
 * waited in #m for the stall, or while x itself has been in no call for the stall: the
 * asks reach a communicator's ranks at different times, and a healthy one that runs
 * thousands of collectives a second shows gaps of dozens between them. NULL: it does
 * not lag. */
static const char *lag(rank_view *x, const rank_view *v, int n, uint32_t m, double stall_s)
{
    const cl_status_head *h = &x->a.u.head;
    if (h->issued + 1 < m && (waited_long(v, n, m, stall_s) ||
                              (op_idle(&h->coll, stall_s) && !waiting(&h->p2p))))
        snprintf(x->why, sizeof(x->why), "behind: its newest collective is #%u, others' #%u",
                 h->issued, m);
    else if (h->issued < m && !waiting(&h->coll) && !waiting(&h->p2p) &&
             waited_long(v, n, m, stall_s))
        snprintf(x->why, sizeof(x->why), "never issued collective #%u (its newest: #%u, %s)", m,
                 h->issued,
                 h->coll.seq ? (h->coll.state == COLL_REC_DONE ? "done" : "failed")
                             : "none recorded");
    else
        return NULL;
    return x->why;
}

/* Marks the stragglers: ranks that do not answer or lag the others' newest collective;
 * where there is none, the ranks stuck in a collective. Returns how many. */
static int judge(rank_view *v, int n, double stall_s)
{
    uint32_t m = issued_max(v, n);
    int count = 0;
    for (int r = 0; r < n; r++) {
        rank_view *x = &v[r];
        if (!x->reachable)
            x->straggler = "no endpoint reachable from here";
        else if (x->answered < 0)
            x->straggler = "refused the ask";
        else if (!x->answered)
            x->straggler = "no answer (stopped?)";
        else
            x->straggler = lag(x, v, n, m, stall_s);
        count += x->straggler != NULL;
    }
    for (int r = 0; !count && r < n; r++)
        if (stuck(&v[r], stall_s)) {
            snprintf(v[r].why, sizeof(v[r].why), "stuck: no byte moved for %.1f s",
                     v[r].a.u.head.coll.progress_ago_us / 1e6);
            v[r].straggler = v[r].why;
        }
    count = 0;
    for (int r = 0; r < n; r++)
        count += v[r].straggler != NULL;
    return count;
}

/* The ranks a collective #seq waits on: those not in it yet (or silent). */
static int waits_on(const rank_view *v, int self, uint32_t seq, int r)
{
    return r != self && (v[r].answered <= 0 || v[r].a.u.head.issued < seq);
}

/* ---- text --------------------------------------------------------------------------- */

static double rate(const cl_status_op *o)
{
    double s = o->started_ago_us > 0 ? o->started_ago_us / 1e6 : 0;
    return s > 0 ? (double)o->bytes / s : 0;
}

/* bytes in B, KiB, MiB or GiB. */
static const char *size_text(double bytes, char *out, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (bytes >= 1024 && u < 3) {
        bytes /= 1024;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return out;
}

void print_op(const cl_status_op *o)
{
    char moved[32], speed[32];
    printf("%s #%u (%llu %s", o->kind, o->seq, (unsigned long long)o->count, o->dtype);
    if (!strcmp(o->kind, "send") || !strcmp(o->kind, "recv"))
        printf(", peer %d", o->root);
    else if (strcmp(o->kind, "allreduce") == 0 || strcmp(o->kind, "reduce") == 0 ||
             strcmp(o->kind, "reduce_scatter") == 0)
        printf(" %s", o->op);
    if (o->algo[0])
        printf(", %s", o->algo);
    printf(") %s", state_name(o->state));
    if (o->state == COLL_REC_QUEUED)
        printf(" for %.1f s", o->issued_ago_us / 1e6);
    else if (o->state == COLL_REC_RUNNING && o->started_ago_us >= 0)
        printf(" for %.1f s, %s at %s/s", o->started_ago_us / 1e6,
               size_text((double)o->bytes, moved, sizeof(moved)),
               size_text(rate(o), speed, sizeof(speed)));
    if (o->state == COLL_REC_RUNNING && o->progress_ago_us >= 0)
        printf(", last byte %.1f s ago", o->progress_ago_us / 1e6);
    else if (o->state == COLL_REC_DONE && o->progress_ago_us >= 0)
        printf(" %.1f s ago", o->progress_ago_us / 1e6);
    else if (o->state == COLL_REC_FAILED)
        printf(": %s", coll_strerror(o->status));
}

static void print_rank(const rank_view *v, int n, int r)
{
    const rank_view *x = &v[r];
    char at[CL_ADDR_TEXT] = "?";
    if (x->reachable)
        cl_addr_text(&x->to, at, sizeof(at));
    printf("rank %d", r);
    if (x->answered <= 0) {
        printf(": %s [endpoint %s]\n", x->straggler, at);
        return;
    }
    const cl_status_head *h = &x->a.u.head;
    printf(" (pid %d on %s, endpoint %s): ", h->pid, h->host, at);
    if (!h->recorder)
        printf("%u collectives issued (the flight recorder is off)", h->issued);
    else if (!h->coll.seq)
        printf("no collective yet");
    else
        print_op(&h->coll);
    if (h->p2p.seq && waiting(&h->p2p)) {
        printf("; ");
        print_op(&h->p2p);
    }
    if (h->recorder && waiting(&h->coll)) {
        int shown = 0, more = 0;
        for (int p = 0; p < n; p++)
            if (waits_on(v, r, h->coll.seq, p) && (shown < SHOW_WAITED || !++more))
                printf("%s%d", shown++ ? ", " : "; waiting on rank ", p);
        if (more)
            printf(" and %d more", more);
    }
    if (h->failed != COLL_OK)
        printf("; failed: %s", h->err);
    if (x->straggler)
        printf("  <- %s", x->straggler);
    printf("\n");
}

static void print_text(const rank_view *v, int n, comm_id comm, const comms *m,
                       const char *where, int stragglers)
{
    const cl_status_head *h = NULL;
    const char *label = comms_label(m);
    for (int r = 0; r < n && !h; r++)
        h = v[r].answered > 0 ? &v[r].a.u.head : NULL;
    printf("job '%s', communicator %016llx", h ? h->job : "?", (unsigned long long)comm.id);
    if (label[0])
        printf(" '%s'", label);
    printf(", %d ranks, asked through %s\n", n, where);
    for (int r = 0; r < n; r++)
        print_rank(v, n, r);
    for (int r = 0; r < n; r++)
        if (v[r].straggler)
            printf("straggler: rank %d: %s\n", r, v[r].straggler);
    comms_print_text(m);
    if (!stragglers)
        printf("no straggler\n");
}

/* ---- JSON --------------------------------------------------------------------------- */

void put_string(const char *s, size_t max)
{
    putchar('"');
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f) /* bytes of a cut UTF-8 sequence too */
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

void put_op(const char *name, const cl_status_op *o)
{
    printf(", \"%s\": ", name);
    if (!o->seq) {
        printf("null");
        return;
    }
    printf("{\"seq\": %u, \"kind\": ", o->seq);
    put_string(o->kind, sizeof(o->kind));
    printf(", \"count\": %llu, \"dtype\": ", (unsigned long long)o->count);
    put_string(o->dtype, sizeof(o->dtype));
    printf(", \"op\": ");
    put_string(o->op, sizeof(o->op));
    printf(", \"root\": %d, \"algo\": ", o->root);
    put_string(o->algo, sizeof(o->algo));
    printf(", \"state\": \"%s\", \"status\": ", state_name(o->state));
    put_string(o->status == COLL_OK ? "ok" : coll_strerror(o->status), 64);
    printf(", \"issued_s_ago\": %.6f, \"started_s_ago\": %.6f, \"progress_s_ago\": %.6f, "
           "\"bytes\": %llu, \"rate_bytes_s\": %.1f}",
           o->issued_ago_us / 1e6, o->started_ago_us / 1e6, o->progress_ago_us / 1e6,
           (unsigned long long)o->bytes, rate(o));
}

static void put_rank(const rank_view *v, int n, int r)
{
    const rank_view *x = &v[r];
    char at[CL_ADDR_TEXT] = "";
    if (x->reachable)
        cl_addr_text(&x->to, at, sizeof(at));
    printf("    {\"rank\": %d, \"endpoint\": \"%s\", \"answered\": %s, \"straggler\": ", r, at,
           x->answered > 0 ? "true" : "false");
    if (x->straggler)
        put_string(x->straggler, 200);
    else
        printf("null");
    if (x->answered > 0) {
        const cl_status_head *h = &x->a.u.head;
        printf(", \"pid\": %d, \"host\": ", h->pid);
        put_string(h->host, sizeof(h->host));
        printf(", \"issued\": %u, \"recorder\": %s, \"failed\": ", h->issued,
               h->recorder ? "true" : "false");
        put_string(h->failed == COLL_OK ? "" : h->err, sizeof(h->err));
        put_op("op", &h->coll);
        put_op("p2p", &h->p2p);
        printf(", \"waiting_on\": [");
        for (int p = 0, k = 0; waiting(&h->coll) && p < n; p++)
            if (waits_on(v, r, h->coll.seq, p))
                printf("%s%d", k++ ? ", " : "", p);
        printf("]");
    }
    printf("}");
}

static void print_json(const rank_view *v, int n, comm_id comm, const comms *m,
                       const char *where)
{
    const rank_view *any = NULL;
    for (int r = 0; r < n && !any; r++)
        any = v[r].answered > 0 ? &v[r] : NULL;
    printf("{\n  \"asked\": ");
    put_string(where, 512);
    printf(",\n  \"job\": ");
    put_string(any ? any->a.u.head.job : "", sizeof(v->a.u.head.job));
    printf(",\n  \"comm\": \"%016llx\",\n  \"label\": ", (unsigned long long)comm.id);
    put_string(comms_label(m), CL_STATUS_LABEL);
    printf(",\n  \"size\": %d,\n  \"ranks\": [\n", n);
    for (int r = 0; r < n; r++) {
        put_rank(v, n, r);
        printf(r + 1 < n ? ",\n" : "\n");
    }
    printf("  ],\n  \"stragglers\": [");
    for (int r = 0, k = 0; r < n; r++)
        if (v[r].straggler)
            printf("%s%d", k++ ? ", " : "", r);
    printf("]");
    comms_print_json(m);
    printf("\n}\n");
}

/* ---- main --------------------------------------------------------------------------- */

static int seconds(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return *end || *out <= 0 || *out > 3600 ? -1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},        {"timeout", required_argument, 0, 't'},
        {"stall", required_argument, 0, 's'}, {"rank-addr", required_argument, 0, 'a'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int json = 0, c;
    double timeout_s = 2, stall_s = 2;
    const char *rank_addr = NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 't' && seconds(optarg, &timeout_s) == 0)
            continue;
        else if (c == 's' && seconds(optarg, &stall_s) == 0)
            continue;
        else if (c == 'a')
            rank_addr = optarg;
        else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind + 1 < argc) {
        fputs(usage, stderr);
        return 2;
    }
    const char *url = optind < argc ? argv[optind] : "env://";
    const char *secret = getenv("COLL_SECRET");
    asker k = {.timeout_ms = (int)(timeout_s * 1000), .keyed = secret && *secret};
    char err[600], where[CL_ADDR_TEXT];
    cl_addr at;
    if (k.keyed && cl_auth_key(secret, k.key) != 0) {
        fprintf(stderr, "coll_status: cannot derive the key from COLL_SECRET\n");
        return 2;
    }
    if (entry(url, rank_addr, &at, err, sizeof(err)) != 0) {
        fprintf(stderr, "coll_status: %s\n", err);
        return 2;
    }
    cl_addr_text(&at, where, sizeof(where));
    k.family = at.sa.ss_family;
    k.fd = socket(k.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (k.fd < 0 || cl_auth_nonce(k.base, sizeof(k.base)) != 0) {
        perror("coll_status: socket");
        return 2;
    }
    int n = 0;
    comm_id comm = {0, 0};
    rank_view *v = learn_ranks(&k, &at, where, &comm, &n);
    if (!v)
        return 2;
    if (ask_all(&k, v, n, CL_STATUS_HEAD, 0, comm) == n) {
        fprintf(stderr, "coll_status: every rank refused to answer: %s\n", refusal(&k));
        return 2;
    }
    int stragglers = judge(v, n, stall_s);
    comms *m = comms_learn(&k, v, n, comm, stall_s);
    stragglers += comms_stragglers(m);
    if (json)
        print_json(v, n, comm, m, where);
    else
        print_text(v, n, comm, m, where, stragglers);
    comms_free(m);
    free(v);
    close(k.fd);
    return stragglers ? 1 : 0;
}
