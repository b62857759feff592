/* Parses rendezvous URLs, and reads the variables torchrun, mpirun and Slurm set. */
#include "rdzv/store.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <limits.h>
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
        snprintf(out->where, sizeof(out->where), "%s:%s", a ? a : "127.0.0.1", p);
    } else if (strcmp(out->scheme, "tcp") && strcmp(out->scheme, "file") &&
               strcmp(out->scheme, "mem")) {
        snprintf(err, errlen, "unknown rendezvous scheme '%s' (env, tcp, file, mem)", out->scheme);
        return COLL_EINVAL;
    }
    const char *colon = strrchr(out->where, ':');
    long port;
    if (strcmp(out->scheme, "tcp") == 0 && (!colon || cl_parse_long(colon + 1, 1, 65535, &port))) {
        snprintf(err, errlen, "tcp:// wants host:port with a port 1 to 65535, not '%s'", out->where);
        return COLL_EINVAL;
    }
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
