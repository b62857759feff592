/* What every trainer reports the same way: the memory a rank holds, by kind. */
#ifndef EX_REPORT_H
#define EX_REPORT_H

#include <stdio.h>

typedef struct {
    double params, grads, optimizer, activations; /* bytes this rank keeps */
    /* bytes of whole layers held only while they run (FSDP's gathered parameters and
     * their gradients), 0 for strategies that keep whole layers anyway */
    double gathered;
} ex_memory;

/* "  memory per rank: params ... KiB, grads ..., optimizer ..., activations ...[,
 * gathered layers ...]" */
void ex_print_memory(const char *who, const ex_memory *m);
/* This process's peak resident set (VmHWM in /proc/self/status) in bytes, 0 where the
 * kernel does not say. */
double ex_peak_rss(void);
/* ,"memory":{"params":...,...} into an open JSON object. */
void ex_json_memory(FILE *f, const ex_memory *m);

#endif
