/* coll_run: starts N ranks of a program, here or on other hosts over ssh, with the
 * variables coll_init("env://") reads. The starting, binding and supervising are
 * perf/spawn.c's, the same the bundled tools' --np use; this file reads the command line
 * and the host list only.
 *   coll_run --np N [--host H1[:SLOTS],H2...] [--hostfile FILE] [--max-restarts K]
 *            [--tag-output] [--secret] [--keep-going] [--grace SECONDS] PROG [ARGS...] */
#include "perf/spawn.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HOSTS 1024

typedef struct hosts {
    int n, slotted; /* slotted: some host gave its slots (ranks fill hosts in order) */
    char *name[MAX_HOSTS];
    int slots[MAX_HOSTS];
} hosts;

static const char usage[] =
    "usage: coll_run --np N [--host H1[:SLOTS],H2,... | --hostfile FILE] [--max-restarts K]\n"
    "                [--tag-output] [--secret] [--keep-going] [--grace SECONDS] PROG [ARGS...]\n"
    "  Starts N ranks of PROG with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "  MASTER_ADDR, MASTER_PORT (a free port unless set), a fresh COLL_JOB_ID (unless set).\n"
    "  --host, --hostfile  ranks on these hosts (other machines through ssh, or\n"
    "                      $COLL_RUN_SSH); round robin, or by slots where given\n"
    "                      (hostfile lines: HOST [slots=N]; IPv6: [ADDR]:SLOTS)\n"
    "  --max-restarts K    start a failed rank again up to K times (COLL_RESTART=n)\n"
    "  --tag-output        prefix each line a rank writes with \"[RANK] \"\n"
    "  --secret            a generated COLL_SECRET for the job (unless set)\n"
    "  --keep-going        a failed rank does not end the others (programs that shrink)\n"
    "  --grace SECONDS     from SIGTERM to SIGKILL when ranks are ended (default 5)\n"
    "  Ranks on this machine are bound to cores per COLL_BIND (core|none, default core).\n"
    "  Exits with the first failed rank's status (128+signal for a signal death).\n";

/* Where spec's ":SLOTS" begins, or NULL; an IPv6 literal is bare (no slots: every ':'
 * is its own) or in brackets, which *name is set past and the ']' cut off (a '[' left
 * open, or followed by anything but ":SLOTS" or " slots=N", leaves *name at spec). */
static char *slots_colon(char *spec, char **name)
{
    *name = spec;
    if (*spec != '[') {
        char *colon = strchr(spec, ':');
        return colon && !strchr(colon + 1, ':') ? colon : NULL;
    }
    char *close = strchr(spec, ']');
    if (!close || (close[1] && !strchr(": \t", close[1])))
        return NULL;
    *close = 0;
    *name = spec + 1;
    return close[1] == ':' ? close + 1 : NULL;
}

/* "HOST" or "HOST:SLOTS" (an IPv6 literal as "fe80::1%eth0", or "[::1]:SLOTS");
 * "HOST slots=N" from a hostfile. */
static int add_host(hosts *h, char *spec)
{
    char *eq = strstr(spec, "slots="), *name, *colon = slots_colon(spec, &name), *end = NULL;
    if (h->n == MAX_HOSTS || (*spec == '[' && name == spec))
        return -1;
    int slots = 1;
    if (colon || eq) {
        slots = (int)strtol(colon ? colon + 1 : eq + 6, &end, 10);
        if (slots < 1 || *end)
            return -1;
        h->slotted = 1;
        *(colon ? colon : eq) = 0;
    }
    name[strcspn(name, " \t")] = 0;
    if (!*name)
        return -1;
    h->name[h->n] = strdup(name);
    h->slots[h->n++] = slots;
    return 0;
}

static int host_list(hosts *h, char *list)
{
    char *save = NULL;
    for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save))
        if (add_host(h, s))
            return -1;
    return 0;
}

/* A hostfile: one host a line, "HOST [slots=N]"; '#' starts a comment. */
static int host_file(hosts *h, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f) {
        perror(path);
        return -1;
    }
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "#\n")] = 0;
        char *s = line + strspn(line, " \t"), *end = s + strlen(s);
        while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = 0;
        if (*s)
            rc = add_host(h, s);
    }
    fclose(f);
    return rc;
}

/* Rank r's host: round robin, or (slots given) each host's slots in turn, then again. */
static const char **place(const hosts *h, int np)
{
    const char **at = calloc((size_t)np, sizeof(*at));
    int host = 0, used = 0;
    for (int r = 0; at && r < np; r++) {
        if (!h->slotted) {
            at[r] = h->name[r % h->n];
            continue;
        }
        at[r] = h->name[host];
        if (++used == h->slots[host]) {
            host = (host + 1) % h->n;
            used = 0;
        }
    }
    return at;
}

static int parse(int argc, char **argv, cl_launch *l, hosts *h)
{
    enum { NP = 1, HOST, HOSTFILE, RESTARTS, TAG, SECRET, KEEP, GRACE, HELP };
    static const struct option opts[] = {
        { "np", required_argument, 0, NP },     { "host", required_argument, 0, HOST },
        { "hostfile", required_argument, 0, HOSTFILE },
        { "max-restarts", required_argument, 0, RESTARTS },
        { "tag-output", no_argument, 0, TAG },  { "secret", no_argument, 0, SECRET },
        { "keep-going", no_argument, 0, KEEP }, { "grace", required_argument, 0, GRACE },
        { "help", no_argument, 0, HELP },       { 0, 0, 0, 0 }
    };
    int c;
    char *end = NULL;
    while ((c = getopt_long(argc, argv, "+n:H:", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
        case NP: l->np = (int)strtol(optarg, &end, 10); break;
        case 'H':
        case HOST: if (host_list(h, optarg)) return -1; break;
        case HOSTFILE: if (host_file(h, optarg)) return -1; break;
        case RESTARTS: l->max_restarts = (int)strtol(optarg, &end, 10); break;
        case TAG: l->tag_output = 1; break;
        case SECRET: l->secret = 1; break;
        case KEEP: l->keep_going = 1; break;
        case GRACE: l->grace_ms = (int)(strtod(optarg, &end) * 1000); break;
        case HELP: return 1;
        default: return -1;
        }
        if (end && *end)
            return -1;
        end = NULL;
    }
    l->argv = argv + optind;
    return l->np >= 1 && l->max_restarts >= 0 && l->grace_ms >= 0 && optind < argc ? 0 : -1;
}

static void hosts_free(hosts *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->name[i]);
}

int main(int argc, char **argv)
{
    cl_launch l = { .who = "coll_run" };
    hosts h = { 0 };
    int asked = parse(argc, argv, &l, &h);
    if (asked || (h.n && !(l.host = place(&h, l.np)))) {
        hosts_free(&h);
        if (asked)
            fputs(usage, asked > 0 ? stdout : stderr);
        return asked > 0 ? 0 : 2;
    }
    int rank, status = 0;
    int rc = cl_launch_run(&l, &rank, &status);
    free((void *)l.host);
    hosts_free(&h);
    return rc < 0 ? 2 : status;
}
