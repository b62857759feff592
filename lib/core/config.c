/* Reads coll_config (as much of it as the caller's struct size covers) and the COLL_*
 * environment variables, and says which was used at info level. */
#include "core/config.h"

#include "core/record.h"

#include "base/addr.h"
#include "base/bind.h"
#include "base/log.h"
#include "base/util.h"
#include "kernels/codec.h"
#include "transports/plugin/plugin.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    if (v && *v) {
        cl_log(COLL_LOG_INFO, "%s=%s", name, v);
        return v;
    }
    return fallback;
}

/* A rendezvous on this host means the ranks are here too: use loopback by default. */
static const char *default_device(const cl_rdzv *rv)
{
    if (strcmp(rv->scheme, "tcp") != 0)
        return strcmp(rv->scheme, "mem") == 0 ? "lo" : NULL;
    return rv->loopback ? "lo" : NULL;
}

/* The first of the launchers' job names that is set; a slurm job's steps are told
 * apart by their step number. */
static void job_name(cl_config *out)
{
    static const char *vars[] = {"COLL_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                                 "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};
    out->job[0] = 0;
    out->job_from = NULL;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && !out->job_from; i++) {
        const char *v = env_or(vars[i], NULL);
        if (!v || (i == 2 && strcmp(v, "none") == 0)) /* torchrun's default: every job's */
            continue;
        const char *step = i == 1 ? getenv("SLURM_STEP_ID") : NULL;
        snprintf(out->job, sizeof(out->job), "%.40s%s%.20s", v, step ? "." : "",
                 step ? step : "");
        out->job_from = vars[i];
    }
}

/* loop joins threads of one process; tcp:// and env:// meet processes. */
static int pairing_ok(const cl_config *out, const cl_rdzv *rv, char *err, size_t errlen)
{
    if (strcmp(out->transport->name, "loop") != 0 || strcmp(rv->scheme, "tcp") != 0)
        return 1;
    snprintf(err, errlen,
             "transport loop joins ranks that are threads of one process; a tcp:// or "
             "env:// rendezvous is for processes: use mem://NAME, or another transport");
    return 0;
}

/* A bound in milliseconds: the caller's (> 0), else the variable's, else the default. The
 * largest, INT_MAX (24.8 days), is as good as no bound; every sum or difference of times
 * is taken in 64 bits, so it overflows nothing. */
static int env_ms(const char *var, int given, long def, int *out, char *err, size_t errlen)
{
    const char *t = env_or(var, NULL);
    long v = def;
    if (t && cl_parse_long(t, 1, INT_MAX, &v)) {
        snprintf(err, errlen, "%s must be a whole number of milliseconds from 1 to %d (the "
                 "largest: 24.8 days, in effect no limit), not '%s'", var, INT_MAX, t);
        return -1;
    }
    *out = given > 0 ? given : (int)v;
    return 0;
}

int cl_config_resolve(const coll_config *user, const cl_rdzv *rv, cl_config *out, char *err,
                      size_t errlen)
{
    coll_config u = COLL_CONFIG_INIT;
    if (user) {
        if (user->size < sizeof(size_t) || user->size > 4096) {
            snprintf(err, errlen, "coll_config.size is %zu: start from COLL_CONFIG_INIT",
                     user->size);
            return COLL_EINVAL;
        }
        memcpy(&u, user, CL_MIN(user->size, sizeof(u)));
    }
    int loaded = cl_net_load_env(err, errlen); /* COLL_NET_PLUGIN, once per process */
    if (loaded != COLL_OK)
        return loaded;
    const char *tname = u.transport ? u.transport : env_or("COLL_TRANSPORT", "auto");
    out->transport = cl_transport_find(tname);
    if (!out->transport) {
        snprintf(err, errlen, "unknown transport '%s' (available: %s)", tname,
                 cl_transport_names());
        return COLL_ENOTSUP;
    }
    if (!pairing_ok(out, rv, err, errlen))
        return COLL_EINVAL;
    job_name(out);
    out->device = u.device ? u.device : env_or("COLL_SOCKET_IFNAME", default_device(rv));
    /* A store with no host (file, mem): only COLL_SOCKET_FAMILY can choose (a caller's
     * store: cl_rdzv_caller chose, from it or MASTER_ADDR). */
    out->family = rv->family;
    if (out->family == AF_UNSPEC && cl_family_env(&out->family, err, errlen) != 0)
        return COLL_EINVAL;
    /* A timeout the caller set bounds operations too, as it always did, unless the
     * operations' own is set: only the default changes (30 s for a silent peer, 30 min
     * for an operation whose peers are busy). */
    int told = u.timeout_ms > 0 || env_or("COLL_TIMEOUT_MS", NULL);
    if (env_ms("COLL_TIMEOUT_MS", u.timeout_ms, CL_DEFAULT_TIMEOUT_MS, &out->timeout_ms, err,
               errlen) ||
        env_ms("COLL_OP_TIMEOUT_MS", u.op_timeout_ms,
               told ? out->timeout_ms : CL_DEFAULT_OP_TIMEOUT_MS, &out->op_timeout_ms, err,
               errlen))
        return COLL_EINVAL;
    const char *dbg = getenv("COLL_DEBUG");
    if (dbg && cl_log_level_parse(dbg) < 0) {
        snprintf(err, errlen, "COLL_DEBUG must be error, warn, info, debug or trace, not '%s'",
                 dbg);
        return COLL_EINVAL;
    }
    const char *seg = env_or("COLL_SEGMENT_BYTES", NULL);
    char *end = NULL;
    unsigned long long env_seg = seg ? strtoull(seg, &end, 10) : CL_DEFAULT_SEGMENT;
    if (seg && (*end || env_seg == 0 || env_seg > CL_MAX_SEGMENT)) {
        snprintf(err, errlen, "COLL_SEGMENT_BYTES must be 1 to %u, not '%s'", CL_MAX_SEGMENT, seg);
        return COLL_EINVAL;
    }
    out->segment_bytes = u.segment_bytes ? u.segment_bytes : (size_t)env_seg;
    if (out->segment_bytes > CL_MAX_SEGMENT) {
        snprintf(err, errlen, "segment_bytes %zu is above the 64 MiB limit", out->segment_bytes);
        return COLL_EINVAL;
    }
    const char *codec = env_or("COLL_CODEC", "none");
    int env_codec = cl_codec_parse(codec);
    if (u.codec < COLL_CODEC_NONE || u.codec > COLL_CODEC_INT8 || env_codec < 0) {
        snprintf(err, errlen, "unknown codec (COLL_CODEC '%s'; want none, fp16, bf16, int8)",
                 codec);
        return COLL_EINVAL;
    }
    out->codec = u.codec != COLL_CODEC_NONE ? u.codec : (coll_codec)env_codec;
    const char *spin = env_or("COLL_SPIN_US", NULL);
    long env_spin = CL_DEFAULT_SPIN_US;
    if (spin && cl_parse_long(spin, 0, 1000000, &env_spin)) {
        snprintf(err, errlen, "COLL_SPIN_US must be 0 to 1000000, not '%s'", spin);
        return COLL_EINVAL;
    }
    out->spin_us = (int)env_spin;
    const char *lat = env_or("COLL_NET_LATENCY_US", NULL), *gbps = env_or("COLL_NET_GBPS", NULL);
    long us = CL_DEFAULT_NET_LATENCY_US, rate = CL_DEFAULT_NET_GBPS;
    if ((lat && cl_parse_long(lat, 0, 1000000, &us)) ||
        (gbps && cl_parse_long(gbps, 1, 100000, &rate))) {
        snprintf(err, errlen,
                 "COLL_NET_LATENCY_US must be 0 to 1000000 and COLL_NET_GBPS 1 to "
                 "100000 (whole numbers)");
        return COLL_EINVAL;
    }
    out->net_given = lat || gbps;
    out->net_alpha_s = (double)us * 1e-6;
    out->net_beta_s = 8.0 / ((double)rate * 1e9);
    out->algo = env_or("COLL_ALGO", NULL);
    if (out->algo && !cl_algo_name_valid(out->algo)) {
        snprintf(err, errlen,
                 "COLL_ALGO must be ring, doubling, rabenseifner, tree or hier, not '%s'",
                 out->algo);
        return COLL_EINVAL;
    }
    const char *share = env_or("COLL_SPLIT_SHARE", "0");
    if ((strcmp(share, "0") != 0 && strcmp(share, "1") != 0) ||
        (u.split_share != 0 && u.split_share != 1)) {
        snprintf(err, errlen, "COLL_SPLIT_SHARE and coll_config.split_share must be 0 or 1, "
                 "not '%s' and %d", share, u.split_share);
        return COLL_EINVAL;
    }
    out->share = u.split_share || share[0] == '1';
    /* Only launchers place ranks, but a bad value must not pass unseen under them. */
    if (cl_bind_parse(getenv("COLL_BIND"), err, errlen) < 0)
        return COLL_EINVAL;
    int rc = cl_rec_configure(&u, &out->rec, err, errlen);
    if (rc != COLL_OK)
        return rc;
    const char *secret = getenv("COLL_SECRET");
    out->keyed = secret != NULL;
    if (secret && cl_auth_key(secret, out->key) != 0) {
        snprintf(err, errlen, "COLL_SECRET: deriving the key failed (libcrypto)");
        return COLL_ESYS;
    }
    return COLL_OK;
}
