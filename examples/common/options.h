/* What every trainer shares: its command-line flags and how it starts (local spawn or a
 * launcher, then the communicator). */
#ifndef EX_OPTIONS_H
#define EX_OPTIONS_H

#include "collective.h"

typedef struct {
    int np, stages, epochs, batch, micro, steps, check_serial, onef1b;
    float lr, momentum;
    unsigned long long seed;
    coll_codec codec;
    const char *data, *json, *trace;
} ex_opts;

/* Flags: --np --stages --epochs --batch --microbatches --steps --check-serial
 * --schedule gpipe|1f1b --lr --seed --codec none|fp16|bf16|int8 --data --json --trace.
 * Returns 0, or -1 for an unknown flag or value. */
int ex_parse(int argc, char **argv, ex_opts *o);

/* Parses argv; if valid() accepts the options, spawns --np local ranks (or joins the
 * launcher's), creates the communicator with the codec and returns train()'s status;
 * otherwise prints usage and returns 2. */
int ex_main(int argc, char **argv, const char *usage, int (*valid)(const ex_opts *o),
            int (*train)(coll_comm *c, const ex_opts *o));

#endif
