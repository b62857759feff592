/* What every trainer shares: its command-line flags and how it starts (local spawn or a
 * launcher, then the communicator). */
#ifndef EX_OPTIONS_H
#define EX_OPTIONS_H

#include "collective.h"
#include "mnist.h"

typedef struct {
    int np, stages, epochs, batch, micro, steps, check_serial, onef1b, cosine, prefetch;
    int recompute; /* pipelines: redo each micro-batch's forward in its backward */
    int elastic; /* survive a lost rank (shrink and go on) */
    int heal;    /* and take its replacement back (grow), see heal.h */
    int joined;  /* this process is such a replacement: it joined a grow */
    double started, joined_at; /* its process start and its grow's end (ex_wall_s) */
    int sweep[8], nsweep; /* micro-batch counts to sweep */
    float lr, momentum;
    unsigned long long seed;
    coll_codec codec;
    const char *data, *json, *trace;
} ex_opts;

/* Flags: --np --stages --epochs --batch --microbatches --steps --check-serial
 * --schedule gpipe|1f1b --lr --lr-schedule cosine|const --seed --codec none|fp16|bf16|int8
 * --data --json --trace --sweep M1,M2,... --prefetch 0|1 --recompute --elastic --heal. Returns 0, or -1 for an
 * unknown flag or value. */
int ex_parse(int argc, char **argv, ex_opts *o);

/* The learning rate of an epoch: --lr throughout (const), or a cosine from --lr down
 * towards zero over --epochs (cosine, the default), which steadies the final accuracy. */
float ex_lr(const ex_opts *o, int epoch);

/* Bytes one f32 value takes on the wire under a codec: 4, 2, or 1 + a 4-byte scale per
 * block of 256 for int8. */
double ex_wire_bytes(coll_codec codec);

/* Both halves of Fashion-MNIST from o->data (or the Debian package's directory), the test
 * half cut to its first $EX_TEST_SAMPLES images where that is set; on failure says why on
 * stderr, prefixed with prog, and returns -1. */
int ex_load_data(const ex_opts *o, const char *prog, dataset *train, dataset *test);

/* Parses argv; if valid() (NULL: any) accepts the options, spawns --np local ranks (or joins the
 * launcher's), creates the communicator with the codec and returns train()'s status;
 * otherwise prints usage and returns 2. With --heal, a process its launcher started
 * again joins the running job through a grow (o->joined set for train). */
int ex_main(int argc, char **argv, const char *usage, int (*valid)(const ex_opts *o),
            int (*train)(coll_comm *c, const ex_opts *o));

#endif
