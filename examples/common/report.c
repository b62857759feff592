/* Trainer reports: see report.h. */
#include "report.h"

#include <stdlib.h>
#include <string.h>

void ex_print_memory(const char *who, const ex_memory *m)
{
    printf("  memory %s: params %.1f KiB, grads %.1f KiB, optimizer %.1f KiB, activations "
           "%.1f KiB", who, m->params / 1024, m->grads / 1024, m->optimizer / 1024,
           m->activations / 1024);
    if (m->gathered > 0)
        printf(", gathered layers %.1f KiB", m->gathered / 1024);
    printf("\n");
}

void ex_json_memory(FILE *f, const ex_memory *m)
{
    fprintf(f, ",\"memory\":{\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,"
               "\"activations\":%.0f,\"gathered\":%.0f}", m->params, m->grads, m->optimizer,
            m->activations, m->gathered);
}

double ex_peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = atof(line + 6);
    if (f)
        fclose(f);
    return kib * 1024;
}
