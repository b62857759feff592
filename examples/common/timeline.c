/* The step timeline: see timeline.h. */
#include "timeline.h"

#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIELDS = 4, WIDTH = 96 };

int tl_init(timeline *t, int cap)
{
    *t = (timeline){ .cap = cap };
    t->ev = calloc((size_t)cap, sizeof(tl_event));
    return t->ev ? 0 : -1;
}

void tl_free(timeline *t)
{
    free(t->ev);
    t->ev = NULL;
}

int tl_begin(timeline *t, coll_comm *c)
{
    int rc = coll_barrier(c);
    t->base = ex_now_s();
    t->n = 0;
    t->on = rc == COLL_OK;
    return rc;
}

void tl_add(timeline *t, char kind, int id, double t0, double t1)
{
    if (t && t->on && t->n < t->cap)
        t->ev[t->n++] = (tl_event){ kind, id, t0, t1 };
}

static const char *long_name(char kind)
{
    switch (kind) {
    case 'F': return "forward";
    case 'B': return "backward";
    case 'A': return "all-reduce";
    case 'G': return "all-gather";
    case 'R': return "reduce-scatter";
    default: return "other";
    }
}

/* ev: per rank, cap events of (kind, id, start, end) relative to the step's start. */
static void draw(const double *ev, int ranks, int cap, double span, const char *row)
{
    printf("timeline of one step (%.2f ms; F forward, B backward, A all-reduce, "
           "G all-gather, R reduce-scatter, . idle):\n", span * 1e3);
    for (int r = 0; r < ranks; r++) {
        char line[WIDTH + 1];
        memset(line, '.', WIDTH);
        line[WIDTH] = 0;
        for (int e = 0; e < cap; e++) {
            const double *v = ev + ((size_t)r * cap + e) * FIELDS;
            int a = (int)(v[2] / span * WIDTH), b = (int)(v[3] / span * WIDTH);
            for (int x = a; v[0] != 0 && x <= b && x < WIDTH; x++)
                line[x] = (char)v[0];
        }
        printf("  %s %d |%s|\n", row, r, line);
    }
    fflush(stdout); /* training has begun: the elastic test waits for this to kill a rank */
}

static void write_trace(const double *ev, int ranks, int cap, const char *row, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    fprintf(f, "{\"traceEvents\":[\n");
    for (int r = 0; r < ranks; r++) {
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s %d\"}}", r ? ",\n" : "", r, row, r);
        for (int e = 0; e < cap; e++) {
            const double *v = ev + ((size_t)r * cap + e) * FIELDS;
            if (v[0] == 0)
                continue;
            char name[32];
            if (v[1] >= 0)
                snprintf(name, sizeof(name), "%c%d", (char)v[0], (int)v[1]);
            else
                snprintf(name, sizeof(name), "%s", long_name((char)v[0]));
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
                       "\"ts\":%.1f,\"dur\":%.1f}",
                    name, long_name((char)v[0]), r, v[2] * 1e6, (v[3] - v[2]) * 1e6);
        }
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    fclose(f);
}

int tl_end(timeline *t, coll_comm *c, const char *row, const char *path)
{
    int ranks = coll_size(c), cap = t->cap;
    t->on = 0;
    double *mine = calloc((size_t)cap * FIELDS, sizeof(double));
    double *all = calloc((size_t)cap * FIELDS * (size_t)ranks, sizeof(double));
    int rc = mine && all ? COLL_OK : COLL_ENOMEM;
    for (int e = 0; rc == COLL_OK && e < t->n; e++) {
        const tl_event *v = &t->ev[e];
        double *o = mine + (size_t)e * FIELDS;
        o[0] = v->kind, o[1] = v->id, o[2] = v->t0 - t->base, o[3] = v->t1 - t->base;
    }
    if (rc == COLL_OK)
        rc = coll_allgather(c, mine, all, (size_t)cap * FIELDS, COLL_F64);
    if (rc == COLL_OK && coll_rank(c) == 0) {
        double span = 1e-9;
        for (size_t e = 0; e < (size_t)cap * ranks; e++)
            span = all[e * FIELDS + 3] > span ? all[e * FIELDS + 3] : span;
        draw(all, ranks, cap, span, row);
        if (path)
            write_trace(all, ranks, cap, row, path);
    }
    free(mine);
    free(all);
    return rc;
}
