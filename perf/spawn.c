/* Starting and supervising ranks, for coll_run and the tools' --np: see spawn.h. Linux
 * (signalfd, CPU affinity, PR_SET_PDEATHSIG). Every rank is a direct child of the
 * launcher, in a process group of its own (a terminal's ^C reaches the launcher alone,
 * which forwards it once); it must never return while a rank it started still runs. */
#include "spawn.h"

#include "base/bind.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* A rank's output line longer than this is passed on in pieces, each tagged. */
#define LINE_BYTES 4096
#define DEFAULT_GRACE_MS 5000
/* Output still open after the last rank ended (a grandchild holds it): read this long. */
#define DRAIN_MS 1000
/* NAME=VALUE of a rank's variable: MASTER_ADDR's host name is the longest. */
#define VAR_BYTES 300
#define MAX_VARS 9

typedef struct out_pipe {
    int fd; /* read end of a rank's stdout or stderr with tag_output; -1: none */
    size_t len;
    char buf[LINE_BYTES];
} out_pipe;

typedef struct rank_proc {
    pid_t pid; /* 0: not running */
    int restarts;
    int local_rank, local_size;
    out_pipe out[2];
} rank_proc;

typedef struct sup {
    const cl_launch *l;
    const char *who;
    rank_proc *rk;
    sigset_t old;      /* the signal mask ranks start with */
    int sfd;           /* signalfd: SIGCHLD and the signals forwarded */
    int port_fd;       /* holds MASTER_PORT for rank 0 (free_port); -1: none */
    int bind;          /* CL_BIND_CORE or CL_BIND_NONE */
    char job[4][VAR_BYTES]; /* NAME=VALUE the launcher made for every rank (job_vars) */
    int njob;
    int running;       /* ranks started and not yet reaped */
    int status;        /* the first failed rank's exit status; -1: none failed */
    int ending;        /* every rank is being ended: nothing restarts */
    long long kill_at; /* ms (monotonic): SIGKILL whoever is left; 0: not armed */
} sup;

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int launched(int *rank, int *size)
{
    static const char *pairs[][2] = { { "RANK", "WORLD_SIZE" },
                                      { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
                                      { "PMI_RANK", "PMI_SIZE" },
                                      { "SLURM_PROCID", "SLURM_NTASKS" } };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        if (getenv(pairs[i][0]) && getenv(pairs[i][1])) {
            *rank = atoi(getenv(pairs[i][0]));
            *size = atoi(getenv(pairs[i][1]));
            return 1;
        }
    return 0;
}

/* A host that names this machine runs its ranks without ssh. */
static int is_local(const char *host)
{
    char me[256] = "";
    gethostname(me, sizeof(me) - 1);
    return !host || !*host || strcmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0 ||
           strcmp(host, me) == 0;
}

static const char *host_of(const cl_launch *l, int r)
{
    return l->host && l->host[r] ? l->host[r] : "";
}

static int random_hex(char *out, size_t bytes)
{
    unsigned char raw[32];
    if (bytes > sizeof(raw) || getrandom(raw, bytes, 0) != (ssize_t)bytes)
        return -1;
    for (size_t i = 0; i < bytes; i++)
        sprintf(out + 2 * i, "%02x", raw[i]);
    return 0;
}

/* A port for rank 0's rendezvous, held by the launcher for the job's life (*held): bound
 * with SO_REUSEADDR and never listened on, it lets rank 0's listener (SO_REUSEADDR too)
 * bind it, while the kernel gives it to no other socket. Closed at once, as torchrun's
 * is, it was free for anyone until rank 0 came: a rank's own listener bound to port 0
 * meanwhile could take it, and rank 0 failed "Address already in use" (coll-perf-cli
 * once in a full run here). */
static int free_port(int *held)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
    socklen_t len = sizeof(a);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (port < 0 && fd >= 0)
        close(fd);
    *held = port < 0 ? -1 : fd;
    return port;
}

/* The job's variables, the same for every rank, where the caller's environment has none
 * (its own win); the launcher's environment stays as it was, for the next launch. */
static int job_vars(sup *s)
{
    char v[VAR_BYTES / 2];
    const char *host0 = host_of(s->l, 0);
    if (!getenv("MASTER_ADDR"))
        snprintf(s->job[s->njob++], VAR_BYTES, "MASTER_ADDR=%s",
                 is_local(host0) ? "127.0.0.1" : host0);
    if (!getenv("MASTER_PORT")) {
        int port = free_port(&s->port_fd);
        if (port < 0)
            return -1;
        snprintf(s->job[s->njob++], VAR_BYTES, "MASTER_PORT=%d", port);
    }
    if (!getenv("COLL_JOB_ID")) {
        if (random_hex(v, 8))
            return -1;
        snprintf(s->job[s->njob++], VAR_BYTES, "COLL_JOB_ID=run-%s", v);
    }
    if (s->l->secret && !getenv("COLL_SECRET")) {
        if (random_hex(v, 32))
            return -1;
        snprintf(s->job[s->njob++], VAR_BYTES, "COLL_SECRET=%s", v);
    }
    return 0;
}

/* LOCAL_RANK and LOCAL_WORLD_SIZE: a rank's place among the ranks of its host. */
static void layout(const cl_launch *l, rank_proc *rk)
{
    for (int r = 0; r < l->np; r++)
        for (int q = 0; q < l->np; q++)
            if (strcmp(host_of(l, q), host_of(l, r)) == 0) {
                rk[r].local_size++;
                rk[r].local_rank += q < r;
            }
}

/* Binds a rank to one CPU of those this process may use, round robin, as mpirun
 * --map-by core --bind-to core does: neighbours in the ring land on different cores.
 * With more ranks than cores and no binding, the scheduler often puts ring neighbours
 * on one core, where a sender and its receiver take turns instead of copying at once:
 * tcp all-reduces of 2-8 MiB on 4 ranks over 2 cores took 1.4-1.5x longer. */
static void bind_rank(int rank)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) || CPU_COUNT(&allowed) < 2)
        return;
    int nth = rank % CPU_COUNT(&allowed);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed) && nth-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof(one), &one))
                perror("sched_setaffinity");
            return;
        }
}

/* The variables the launcher gives rank r, as NAME=VALUE: its own and the job's. */
static int rank_vars(const sup *s, int r, char v[MAX_VARS][VAR_BYTES])
{
    const rank_proc *p = &s->rk[r];
    int n = 0;
    snprintf(v[n++], VAR_BYTES, "RANK=%d", r);
    snprintf(v[n++], VAR_BYTES, "WORLD_SIZE=%d", s->l->np);
    snprintf(v[n++], VAR_BYTES, "LOCAL_RANK=%d", p->local_rank);
    snprintf(v[n++], VAR_BYTES, "LOCAL_WORLD_SIZE=%d", p->local_size);
    if (p->restarts)
        snprintf(v[n++], VAR_BYTES, "COLL_RESTART=%d", p->restarts);
    for (int i = 0; i < s->njob; i++)
        memcpy(v[n++], s->job[i], VAR_BYTES);
    return n;
}

/* One word for sh: in single quotes, each ' as '\''. */
static void put_quoted(FILE *f, const char *word)
{
    fputc('\'', f);
    for (const char *c = word; *c; c++)
        if (*c == '\'')
            fputs("'\\''", f);
        else
            fputc(*c, f);
    fputs("' ", f);
}

/* The command a remote shell runs: here's directory, the rank's and the job's variables
 * (MASTER_*, every COLL_*: ssh passes no environment), then the program. */
static char *remote_command(const sup *s, int r)
{
    char *cmd = NULL, cwd[4096], v[MAX_VARS][VAR_BYTES];
    size_t len = 0;
    FILE *f = open_memstream(&cmd, &len);
    if (!f)
        return NULL;
    if (getcwd(cwd, sizeof(cwd))) {
        fputs("cd ", f);
        put_quoted(f, cwd);
        fputs("&& ", f);
    }
    fputs("exec env ", f);
    for (int i = 0, n = rank_vars(s, r, v); i < n; i++)
        put_quoted(f, v[i]);
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "COLL_", 5) == 0 || strncmp(*e, "MASTER_ADDR=", 12) == 0 ||
            strncmp(*e, "MASTER_PORT=", 12) == 0)
            put_quoted(f, *e);
    for (char *const *a = s->l->argv; *a; a++)
        put_quoted(f, *a);
    fclose(f);
    return cmd;
}

/* Replaces this process with rank r's program: here, or through $COLL_RUN_SSH HOST. */
static void exec_rank(const sup *s, int r)
{
    const char *host = host_of(s->l, r);
    if (is_local(host)) {
        execvp(s->l->argv[0], s->l->argv);
        fprintf(stderr, "%s: rank %d: %s: %s\n", s->who, r, s->l->argv[0], strerror(errno));
        _exit(127);
    }
    const char *ssh = getenv("COLL_RUN_SSH");
    char *words = strdup(ssh && *ssh ? ssh : "ssh"), *argv[20], *save = NULL;
    int n = 0;
    for (char *w = strtok_r(words, " \t", &save); w && n < 17; w = strtok_r(NULL, " \t", &save))
        argv[n++] = w;
    argv[n++] = (char *)host;
    argv[n++] = remote_command(s, r);
    argv[n] = NULL;
    execvp(argv[0], argv);
    fprintf(stderr, "%s: rank %d: %s: %s\n", s->who, r, argv[0], strerror(errno));
    _exit(127);
}

/* In the new process: the launcher's signals, descriptors and memory are not the rank's. */
static void become_rank(sup *s, int r, pid_t launcher, const int rd[2], const int wr[2])
{
    sigprocmask(SIG_SETMASK, &s->old, NULL);
    setpgid(0, 0);
    /* A launcher killed outright leaves no rank behind (also one killed before this). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher)
        _exit(128 + SIGKILL);
    close(s->sfd);
    if (s->port_fd >= 0)
        close(s->port_fd);
    int null = open("/dev/null", O_RDONLY);
    if (null > 0) {
        dup2(null, 0);
        close(null);
    }
    for (int k = 0; k < 2 && wr[k] >= 0; k++) {
        dup2(wr[k], k + 1);
        close(wr[k]);
        close(rd[k]);
    }
    for (int q = 0; q < s->l->np; q++)
        for (int k = 0; k < 2; k++)
            if (s->rk[q].out[k].fd >= 0)
                close(s->rk[q].out[k].fd);
    char v[MAX_VARS][VAR_BYTES];
    for (int i = 0, n = rank_vars(s, r, v); i < n; i++)
        putenv(strdup(v[i]));
    if (s->bind == CL_BIND_CORE && is_local(host_of(s->l, r)))
        bind_rank(s->rk[r].local_rank);
}

/* Starts rank r. Returns 1 in the launcher, 0 in the rank (fork only: argv NULL), -1
 * when it could not. */
static int start_rank(sup *s, int r)
{
    int rd[2] = { -1, -1 }, wr[2] = { -1, -1 };
    for (int k = 0; k < 2 && s->l->tag_output; k++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC))
            return -1;
        rd[k] = p[0];
        wr[k] = p[1];
    }
    pid_t launcher = getpid(), pid = fork();
    if (pid == 0) {
        become_rank(s, r, launcher, rd, wr);
        if (s->l->argv)
            exec_rank(s, r);
        free(s->rk);
        return 0;
    }
    for (int k = 0; k < 2 && wr[k] >= 0; k++) {
        close(wr[k]);
        if (pid < 0)
            close(rd[k]);
        else
            fcntl(rd[k], F_SETFL, O_NONBLOCK);
        s->rk[r].out[k].fd = pid < 0 ? -1 : rd[k];
        s->rk[r].out[k].len = 0;
    }
    if (pid < 0)
        return -1;
    setpgid(pid, pid); /* also here: a signal sent before the child ran its own call */
    s->rk[r].pid = pid;
    s->running++;
    return 1;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Passes on the first n bytes of o's buffer as one line tagged with the rank (to the
 * launcher's stdout or stderr, as k), and drops them and `skip` more (the newline). */
static void emit(out_pipe *o, int r, int k, size_t n, size_t skip)
{
    char line[LINE_BYTES + 32];
    int at = snprintf(line, sizeof(line), "[%d] ", r);
    memcpy(line + at, o->buf, n);
    line[(size_t)at + n] = '\n';
    write_all(k + 1, line, (size_t)at + n + 1);
    o->len -= n + skip;
    memmove(o->buf, o->buf + n + skip, o->len);
}

/* Reads what a rank wrote and passes on its whole lines; at the end of its output the
 * last unfinished line too. */
static void pump(out_pipe *o, int r, int k)
{
    for (;;) {
        ssize_t got = read(o->fd, o->buf + o->len, sizeof(o->buf) - o->len);
        if (got < 0 && errno == EINTR)
            continue;
        int ended = got == 0 || (got < 0 && errno != EAGAIN);
        if (got > 0)
            o->len += (size_t)got;
        char *nl;
        while ((nl = memchr(o->buf, '\n', o->len)) != NULL)
            emit(o, r, k, (size_t)(nl - o->buf), 1);
        if (o->len == sizeof(o->buf) || (ended && o->len))
            emit(o, r, k, o->len, 0);
        if (ended) {
            close(o->fd);
            o->fd = -1;
        }
        if (got <= 0)
            return;
    }
}

/* Passes on what rank r's ended process left in its pipes and closes them (a process
 * it started may hold them open: what it writes later is lost). */
static void drop_output(sup *s, int r)
{
    for (int k = 0; k < 2; k++) {
        out_pipe *o = &s->rk[r].out[k];
        if (o->fd >= 0)
            pump(o, r, k);
        if (o->fd >= 0)
            close(o->fd);
        o->fd = -1;
    }
}

/* Sends sig to every running rank's process group; the first time, arms the SIGKILL
 * that follows the grace period. */
static void end_all(sup *s, int sig)
{
    for (int r = 0; r < s->l->np; r++)
        if (s->rk[r].pid > 0 && kill(-s->rk[r].pid, sig) != 0)
            kill(s->rk[r].pid, sig);
    if (!s->ending && sig != SIGKILL)
        s->kill_at = now_ms() + (s->l->grace_ms > 0 ? s->l->grace_ms : DEFAULT_GRACE_MS);
    s->ending = 1;
}

static int exit_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void say_end(const sup *s, int r, pid_t pid, int st)
{
    if (WIFSIGNALED(st))
        fprintf(stderr, "%s: rank %d (pid %d) was killed by signal %d (%s)", s->who, r,
                (int)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        fprintf(stderr, "%s: rank %d (pid %d) exited with status %d", s->who, r, (int)pid,
                WEXITSTATUS(st));
}

/* A rank that failed: started again while it has restarts left, else it is the job's
 * status and (unless keep_going) every other rank is ended. */
static void failed(sup *s, int r, pid_t pid, int st)
{
    const cl_launch *l = s->l;
    rank_proc *p = &s->rk[r];
    if (!s->ending && l->argv && p->restarts < l->max_restarts) {
        say_end(s, r, pid, st);
        fprintf(stderr, ": restart %d of %d\n", p->restarts + 1, l->max_restarts);
        drop_output(s, r);
        p->restarts++;
        if (start_rank(s, r) > 0)
            return;
        fprintf(stderr, "%s: rank %d: restart failed: %s\n", s->who, r, strerror(errno));
    }
    if (s->status < 0)
        s->status = exit_code(st);
    if (s->ending)
        return;
    say_end(s, r, pid, st);
    fprintf(stderr, l->keep_going || s->running == 0 ? "\n" : ": ending the other ranks\n");
    if (!l->keep_going)
        end_all(s, SIGTERM);
}

static void reap(sup *s)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
        for (int r = 0; r < s->l->np; r++)
            if (s->rk[r].pid == pid) {
                s->rk[r].pid = 0;
                s->running--;
                if (exit_code(st) != 0)
                    failed(s, r, pid, st);
                break;
            }
}

static void take_signals(sup *s)
{
    struct signalfd_siginfo si;
    while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        fprintf(stderr, "%s: %s: passed on to every rank\n", s->who, strsignal((int)si.ssi_signo));
        end_all(s, (int)si.ssi_signo);
    }
    reap(s);
}

/* Waits until every rank has ended and its output is passed on. */
static void supervise(sup *s)
{
    int np = s->l->np;
    int who[2 * np + 1];
    struct pollfd p[2 * np + 1];
    long long drain_until = 0;
    for (;;) {
        int n = 0;
        p[n++] = (struct pollfd){ .fd = s->sfd, .events = POLLIN };
        for (int i = 0; i < 2 * np; i++)
            if (s->rk[i / 2].out[i % 2].fd >= 0) {
                who[n] = i;
                p[n++] = (struct pollfd){ .fd = s->rk[i / 2].out[i % 2].fd, .events = POLLIN };
            }
        long long now = now_ms();
        if (s->running == 0 && (n == 1 || (drain_until && now >= drain_until)))
            break;
        if (s->running == 0 && !drain_until)
            drain_until = now + DRAIN_MS;
        long long until = s->running ? s->kill_at : drain_until;
        int timeout = until ? (int)(until > now ? until - now : 0) : -1;
        if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            take_signals(s);
        for (int j = 1; j < n; j++)
            if (p[j].revents && s->rk[who[j] / 2].out[who[j] % 2].fd == p[j].fd)
                pump(&s->rk[who[j] / 2].out[who[j] % 2], who[j] / 2, who[j] % 2);
        if (s->kill_at && now_ms() >= s->kill_at) {
            end_all(s, SIGKILL);
            s->kill_at = 0;
        }
    }
    for (int r = 0; r < np; r++)
        drop_output(s, r);
}

/* Starts every rank; in a forked rank returns 0 with *rank set. */
static int start_all(sup *s, int *rank)
{
    for (int r = 0; r < s->l->np; r++) {
        int got = start_rank(s, r);
        if (got == 0) {
            *rank = r;
            return 0;
        }
        if (got < 0) {
            fprintf(stderr, "%s: starting rank %d: %s\n", s->who, r, strerror(errno));
            s->status = 1;
            end_all(s, SIGTERM);
            break;
        }
    }
    return 1;
}

int cl_launch_run(const cl_launch *l, int *rank, int *status)
{
    char err[160];
    sup s = { .l = l, .who = l->who ? l->who : "launch", .sfd = -1, .port_fd = -1,
              .status = -1 };
    s.bind = cl_bind_parse(getenv("COLL_BIND"), err, sizeof(err));
    if (s.bind < 0 || l->np < 1) {
        fprintf(stderr, "%s: %s\n", s.who, s.bind < 0 ? err : "no ranks to start");
        errno = EINVAL;
        return -1;
    }
    if (job_vars(&s) || !(s.rk = calloc((size_t)l->np, sizeof(*s.rk)))) {
        fprintf(stderr, "%s: %s\n", s.who, strerror(errno));
        if (s.port_fd >= 0)
            close(s.port_fd);
        return -1;
    }
    for (int r = 0; r < l->np; r++)
        s.rk[r].out[0].fd = s.rk[r].out[1].fd = -1;
    layout(l, s.rk);
    /* A signal ignored at start (nohup, a shell's background job) stays ignored, by the
     * launcher and the ranks: taken and passed on, the ranks would ignore it too and be
     * killed after the grace, ending a job nohup was to keep. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (int i = 0, sigs[] = { SIGINT, SIGTERM, SIGHUP }; i < 3; i++) {
        struct sigaction was;
        if (sigaction(sigs[i], NULL, &was) == 0 && was.sa_handler != SIG_IGN)
            sigaddset(&set, sigs[i]);
    }
    sigprocmask(SIG_BLOCK, &set, &s.old);
    s.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s.sfd >= 0 && start_all(&s, rank) == 0)
        return 0;
    if (s.sfd >= 0)
        supervise(&s);
    int rc = s.sfd >= 0 ? 1 : -1;
    if (s.sfd >= 0)
        close(s.sfd);
    if (s.port_fd >= 0)
        close(s.port_fd);
    sigprocmask(SIG_SETMASK, &s.old, NULL);
    free(s.rk);
    *status = s.status < 0 ? 0 : s.status;
    return rc;
}

int cl_spawn(int np, int keep_going, int *rank, int *size, char *url, unsigned long urllen,
             int *status)
{
    snprintf(url, urllen, "env://");
    if (launched(rank, size)) {
        setenv("MASTER_ADDR", "127.0.0.1", 0);
        return 0;
    }
    *size = np;
    cl_launch l = { .np = np, .keep_going = keep_going, .who = program_invocation_short_name };
    return cl_launch_run(&l, rank, status);
}
