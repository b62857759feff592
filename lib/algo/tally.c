/* The spans of a traced collective: its passes, their steps and per-peer transfers, as
 * a pass reports them (see tally.h). Stores into the recorder's storage, never a lock or
 * a call into the core. */
#include "algo/tally.h"

#include "base/clock.h"

#include <stdlib.h>

enum { SPANS_MAX = 1 << 16 }; /* per collective: what a huge all-to-all has past that is dropped */

uint64_t cl_span_clock(void)
{
    return cl_clock_ticks();
}

static cl_span *span_add(cl_spans *s)
{
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 64;
        cl_span *more = cap <= SPANS_MAX ? realloc(s->s, cap * sizeof(*more)) : NULL;
        if (!more) {
            s->dropped++;
            return NULL;
        }
        s->s = more;
        s->cap = cap;
    }
    return &s->s[s->n++];
}

/* A child of the open phase, named by it (NULL: dropped). */
static cl_span *span_in_phase(cl_spans *s, uint8_t what, int peer, int step, uint64_t start,
                              uint64_t end)
{
    const char *name = s->s[s->phase - 1].name, *scope = s->s[s->phase - 1].scope;
    cl_span *x = span_add(s);
    if (x)
        *x = (cl_span){.start = start, .end = end > start ? end : start, .name = name,
                       .scope = scope, .peer = peer, .step = step, .what = what};
    return x;
}

void cl_span_phase(cl_spans *s, const char *name, const char *scope)
{
    if (!s || s->depth++)
        return;
    uint64_t now = cl_clock_ticks();
    cl_span *x = span_add(s);
    if (x)
        *x = (cl_span){.start = now, .end = now, .name = name, .scope = scope ? scope : "",
                       .peer = -1, .step = -1, .what = CL_SPAN_PHASE};
    s->phase = x ? s->n : 0;
    s->step_from = now;
}

void cl_span_phase_end(cl_spans *s)
{
    if (!s || !s->depth || --s->depth)
        return;
    if (s->phase)
        s->s[s->phase - 1].end = cl_clock_ticks();
    s->phase = 0;
}

void cl_span_step(cl_spans *s, int step, uint64_t end)
{
    if (!s || !s->phase || s->depth != 1)
        return;
    cl_span *x = span_in_phase(s, CL_SPAN_STEP, -1, step, s->step_from, end);
    if (x)
        s->step_from = x->end;
}

void cl_span_transfer(cl_spans *s, int recv, int peer, int step, uint64_t start, uint64_t end,
                      uint64_t bytes)
{
    if (!s || !s->phase)
        return;
    uint8_t what = recv ? CL_SPAN_RECV : CL_SPAN_SEND;
    uint32_t i = s->n;
    while (i-- > 0 && !(s->s[i].what == what && s->s[i].peer == peer))
        ;
    cl_span *last = i < s->n ? &s->s[i] : NULL;
    if (last && last->step == step && i >= s->phase - 1) { /* more of this step */
        last->end = end > last->end ? end : last->end;
        last->bytes += bytes;
        last->messages++;
        return;
    }
    /* after the peer's span before it: the link carried that one first */
    cl_span *x = span_in_phase(s, what, peer, step, last && last->end > start ? last->end : start,
                               end);
    if (x) {
        x->bytes = bytes;
        x->messages = 1;
    }
}
