/* Trainer flags and start-up: see options.h. */
#include "options.h"

#include "batch.h"
#include "heal.h"

#include "perf/spawn.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int codec_of(const char *s)
{
    static const char *names[] = { "none", "fp16", "bf16", "int8" };
    for (int k = 0; k < 4; k++)
        if (strcmp(s, names[k]) == 0)
            return k;
    return -1;
}

/* "2,4,8" -> {2, 4, 8}: positive numbers, at most max of them. */
static int parse_list(const char *s, int *out, int max, int *n)
{
    char *end;
    for (*n = 0; *n < max; s = end + 1) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end != ',' && *end != 0))
            return -1;
        out[(*n)++] = (int)v;
        if (*end == 0)
            return 0;
    }
    return -1;
}

float ex_lr(const ex_opts *o, int epoch)
{
    if (!o->cosine)
        return o->lr;
    return (float)(o->lr * 0.5 * (1.0 + cos(3.141592653589793 * epoch / o->epochs)));
}

double ex_wire_bytes(coll_codec codec)
{
    switch (codec) {
    case COLL_CODEC_FP16:
    case COLL_CODEC_BF16: return 2.0;
    case COLL_CODEC_INT8: return 1.0 + 4.0 / 256;
    default: return 4.0;
    }
}

int ex_parse(int argc, char **argv, ex_opts *o)
{
    static struct option longs[] = {
        { "np", 1, 0, 'N' },      { "stages", 1, 0, 'K' },       { "epochs", 1, 0, 'e' },
        { "batch", 1, 0, 'b' },   { "microbatches", 1, 0, 'm' }, { "steps", 1, 0, 's' },
        { "lr", 1, 0, 'l' },      { "seed", 1, 0, 'S' },         { "codec", 1, 0, 'z' },
        { "data", 1, 0, 'd' },    { "json", 1, 0, 'j' },         { "trace", 1, 0, 't' },
        { "schedule", 1, 0, 'k' }, { "check-serial", 1, 0, 'c' }, { "lr-schedule", 1, 0, 'L' },
        { "sweep", 1, 0, 'w' },   { "prefetch", 1, 0, 'p' },     { "elastic", 0, 0, 'E' },
        { "heal", 0, 0, 'H' },    { "recompute", 0, 0, 'r' }, { 0, 0, 0, 0 } };
    *o = (ex_opts){ .np = 2, .stages = 2, .epochs = 10, .batch = 64, .micro = 4, .onef1b = 1,
                    .cosine = 1, .prefetch = 1, .lr = 0.05f, .momentum = 0.9f, .seed = 1,
                    .codec = COLL_CODEC_NONE };
    int c, k;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'N': o->np = atoi(optarg); break;
        case 'K': o->stages = atoi(optarg); break;
        case 'e': o->epochs = atoi(optarg); break;
        case 'b': o->batch = atoi(optarg); break;
        case 'm': o->micro = atoi(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'c': o->check_serial = atoi(optarg); break;
        case 'p': o->prefetch = atoi(optarg) != 0; break;
        case 'r': o->recompute = 1; break;
        case 'E': o->elastic = 1; break;
        case 'H': o->elastic = o->heal = 1; break;
        case 'l': o->lr = (float)atof(optarg); break;
        case 'S': o->seed = strtoull(optarg, NULL, 10); break;
        case 'd': o->data = optarg; break;
        case 'j': o->json = optarg; break;
        case 't': o->trace = optarg; break;
        case 'z':
            if ((k = codec_of(optarg)) < 0)
                return -1;
            o->codec = (coll_codec)k;
            break;
        case 'L':
            if (strcmp(optarg, "cosine") && strcmp(optarg, "const"))
                return -1;
            o->cosine = strcmp(optarg, "cosine") == 0;
            break;
        case 'w':
            if (parse_list(optarg, o->sweep, 8, &o->nsweep) != 0)
                return -1;
            break;
        case 'k':
            if (strcmp(optarg, "gpipe") && strcmp(optarg, "1f1b"))
                return -1;
            o->onef1b = strcmp(optarg, "1f1b") == 0;
            break;
        default: return -1;
        }
    }
    return o->np >= 1 && o->epochs >= 1 && o->batch >= 1 && o->micro >= 1 ? 0 : -1;
}

/* A replacement (--heal) loads its data before it joins (ex_main): the survivors wait for
 * it in the grow, and would otherwise wait again, in the hand-over, for its data load
 * (seconds on a loaded machine, past their timeout). The trainer's call takes it. */
static dataset preloaded[2];
static int have_preloaded;

int ex_load_data(const ex_opts *o, const char *prog, dataset *train, dataset *test)
{
    char err[1200];
    if (have_preloaded) {
        *train = preloaded[0], *test = preloaded[1], have_preloaded = 0;
        return 0;
    }
    if (mnist_load(o->data, 1, train, err, sizeof(err)) == 0) {
        if (mnist_load(o->data, 0, test, err, sizeof(err)) == 0) {
            /* EX_TEST_SAMPLES=N: the accuracy on the first N test images only (CI's
             * sanitized pass, where evaluating all 10000 is most of a short run). */
            const char *limit = getenv("EX_TEST_SAMPLES");
            long n = limit ? strtol(limit, NULL, 10) : 0;
            test->n = n > 0 && (size_t)n < test->n ? (size_t)n : test->n;
            return 0;
        }
        mnist_free(train);
    }
    fprintf(stderr, "%s: %s\n", prog, err);
    return -1;
}

int ex_main(int argc, char **argv, const char *usage, int (*valid)(const ex_opts *o),
            int (*train)(coll_comm *c, const ex_opts *o))
{
    ex_opts o;
    double started = ex_wall_s();
    if (ex_parse(argc, argv, &o) != 0 || (valid && !valid(&o))) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    int rank, size, status = 0;
    char url[600];
    int who = cl_spawn(o.np, o.elastic, &rank, &size, url, sizeof(url), &status);
    if (who != 0)
        return who < 0 ? 2 : status;
    coll_config cfg = COLL_CONFIG_INIT;
    cfg.codec = o.codec;
    coll_comm *c;
    const char *to = getenv("COLL_TIMEOUT_MS");
    o.joined = o.heal && ex_heal_is_replacement();
    if (o.joined && ex_load_data(&o, argv[0], &preloaded[0], &preloaded[1]) != 0)
        return 2;
    have_preloaded = o.joined;
    if (o.joined && ex_heal_join(&cfg, 3 * (to ? atoi(to) : 30000), &c) != COLL_OK)
        return 2; /* ex_heal_join said why: each failed grow, then the wait's end */
    if (!o.joined && coll_init(&c, url, rank, size, &cfg) != COLL_OK) {
        fprintf(stderr, "rank %d: coll_init: %s\n", rank, coll_last_error(NULL));
        return 2;
    }
    o.started = started, o.joined_at = ex_wall_s();
    int rc = train(c, &o);
    coll_destroy(c);
    return rc;
}
