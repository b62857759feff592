/* Parses rendezvous URLs, and reads the variables torchrun, mpirun and Slurm set. */
#include "rdzv/store.h"

#include "base/addr.h"
#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first of the variable pairs that is set: torchrun, then Open MPI, then Slurm. */
static int launcher_rank_size(int *rank, int *size)
{
    static const char *pairs[][2] = { { "RANK", "WORLD_SIZE" },
                                      { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
                                      { "PMI_RANK", "PMI_SIZE" },
                                      { "SLURM_PROCID", "SLURM_NTASKS" } };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        const char *r = getenv(pairs[i][0]), *s = getenv(pairs[i][1]);
        long lr = -1, ls = -1;
        if (r && s) {
            if (cl_parse_long(r, 0, INT_MAX, &lr) || cl_parse_long(s, 1, INT_MAX, &ls))
                cl_log(COLL_LOG_ERROR, "%s=%s, %s=%s: not a rank and a size", pairs[i][0], r,
                       pairs[i][1], s);
            *rank = (int)lr;
            *size = (int)ls;
            cl_log(COLL_LOG_INFO, "rendezvous: rank %d of %d from %s/%s", *rank, *size,
                   pairs[i][0], pairs[i][1]);
            return 1;
        }
    }
    return 0;
}

/* A resolved host's family into out (unless COLL_SOCKET_FAMILY set one): IPv4 where it
 * has an IPv4 address, else IPv6; and whether every address is a loopback one. */
static void host_family(cl_rdzv *out, const struct addrinfo *res)
{
    int pick = out->family == AF_UNSPEC ? AF_INET6 : out->family;
    out->loopback = 1;
    for (const struct addrinfo *r = res; r; r = r->ai_next) {
        cl_addr a = {.len = r->ai_addrlen};
        memcpy(&a.sa, r->ai_addr, r->ai_addrlen);
        out->loopback &= cl_addr_is_loopback(&a);
        pick = out->family == AF_UNSPEC && r->ai_family == AF_INET ? AF_INET : pick;
    }
    out->family = pick;
}

/* The job's socket family: COLL_SOCKET_FAMILY's, else the tcp host's (IPv4 where it has
 * an IPv4 address: every rank resolves it alike, so all agree). A host that does not
 * resolve fails here, at once: the connect loop would retry it until the timeout. */
static int rdzv_family(cl_rdzv *out, const char *from, char *err, size_t errlen)
{
    char host[256], port[16], why[400];
    struct addrinfo *res;
    if (cl_family_env(&out->family, err, errlen) != 0)
        return COLL_EINVAL;
    if (strcmp(out->scheme, "tcp") != 0)
        return COLL_OK;
    cl_addr_split(out->where, host, sizeof(host), port, sizeof(port));
    if (cl_addr_resolve(host, port, out->family, &res, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "the rendezvous host (%s) %s%s", from, why,
                 out->family != AF_UNSPEC ? " (COLL_SOCKET_FAMILY)" : "");
        return COLL_EINVAL;
    }
    host_family(out, res);
    freeaddrinfo(res);
    cl_log(COLL_LOG_INFO, "rendezvous at %s over %s", out->where, cl_family_name(out->family));
    return COLL_OK;
}

int cl_rdzv_parse(const char *url, int rank, int size, cl_rdzv *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!url) {
        snprintf(err, errlen, "rendezvous URL is NULL");
        return COLL_EINVAL;
    }
    const char *sep = strstr(url, "://");
    size_t slen = sep ? (size_t)(sep - url) : 0;
    if (!sep || slen == 0 || slen >= sizeof(out->scheme) ||
        strlen(sep + 3) >= sizeof(out->where)) {
        snprintf(err, errlen,
                 "bad rendezvous URL '%s' (want env://, tcp://host:port, file:///dir, mem://name)",
                 url);
        return COLL_EINVAL;
    }
    memcpy(out->scheme, url, slen);
    snprintf(out->where, sizeof(out->where), "%s", sep + 3);
    if (strcmp(out->scheme, "env") == 0) {
        const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        long port;
        if (!p) {
            snprintf(err, errlen, "env:// needs MASTER_PORT (and MASTER_ADDR, default 127.0.0.1)");
            return COLL_EINVAL;
        }
        if (cl_parse_long(p, 1, 65535, &port)) {
            snprintf(err, errlen, "MASTER_PORT must be a port number 1 to 65535, not '%s'", p);
            return COLL_EINVAL;
        }
        snprintf(out->scheme, sizeof(out->scheme), "tcp");
        a = a ? a : "127.0.0.1";
        if (a[0] == '[')
            snprintf(out->where, sizeof(out->where), "%s:%s", a, p);
        else
            cl_addr_join(a, p, out->where, sizeof(out->where));
    } else if (strcmp(out->scheme, "tcp") && strcmp(out->scheme, "file") &&
               strcmp(out->scheme, "mem")) {
        snprintf(err, errlen, "unknown rendezvous scheme '%s' (env, tcp, file, mem)", out->scheme);
        return COLL_EINVAL;
    }
    char host[256], port[16];
    long pnum;
    if (strcmp(out->scheme, "tcp") == 0 &&
        (cl_addr_split(out->where, host, sizeof(host), port, sizeof(port)) ||
         cl_parse_long(port, 1, 65535, &pnum))) {
        snprintf(err, errlen, "tcp:// wants host:port ([host]:port for an IPv6 address) with a "
                 "port 1 to 65535, not '%s'", out->where);
        return COLL_EINVAL;
    }
    if (rdzv_family(out, strncmp(url, "env:", 4) == 0 ? "MASTER_ADDR" : url, err, errlen))
        return COLL_EINVAL;
    if ((rank < 0 || size < 0) && !launcher_rank_size(&rank, &size)) {
        snprintf(err, errlen, "rank/size not given and no RANK/WORLD_SIZE, OMPI_COMM_WORLD_* "
                              "or SLURM_PROCID/SLURM_NTASKS in the environment");
        return COLL_EINVAL;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        snprintf(err, errlen, "rank %d is not within a world of %d", rank, size);
        return COLL_EINVAL;
    }
    out->rank = rank;
    out->size = size;
    return COLL_OK;
}

/* A caller's store names no host, but the launcher's MASTER_ADDR does (torch's store
 * listens there; issue 55): the family is COLL_SOCKET_FAMILY's, else MASTER_ADDR's by
 * rdzv_family's rule, else AF_UNSPEC (the interfaces choose). A MASTER_ADDR that does
 * not resolve here chooses nothing: the caller's store met already, it is not ours to
 * judge. loopback stays 0: the ranks of a caller's store may be anywhere. */
int cl_rdzv_caller(int rank, int size, cl_rdzv *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->scheme, sizeof(out->scheme), "store");
    snprintf(out->where, sizeof(out->where), "caller");
    out->rank = rank;
    out->size = size;
    if (cl_family_env(&out->family, err, errlen) != 0)
        return COLL_EINVAL;
    const char *a = getenv("MASTER_ADDR");
    if (out->family != AF_UNSPEC || !a || !*a)
        return COLL_OK;
    char host[256], why[400];
    size_t len = strlen(a);
    if (a[0] == '[' && len > 2 && a[len - 1] == ']') /* as torchrun users may write it */
        snprintf(host, sizeof(host), "%.*s", (int)(len - 2), a + 1);
    else
        snprintf(host, sizeof(host), "%s", a);
    struct addrinfo *res;
    if (cl_addr_resolve(host, NULL, AF_UNSPEC, &res, why, sizeof(why)) != 0) {
        cl_log(COLL_LOG_INFO, "MASTER_ADDR: %s: the interfaces choose the socket family", why);
        return COLL_OK;
    }
    host_family(out, res);
    freeaddrinfo(res);
    out->loopback = 0;
    cl_log(COLL_LOG_INFO, "the caller's store: sockets over %s (MASTER_ADDR %s)",
           cl_family_name(out->family), a);
    return COLL_OK;
}
