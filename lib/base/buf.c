/* Growable kept buffers: see buf.h. */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

/* New memory is touched at once: a page's first touch traps (under some hypervisors for
 * ~20 us), and a staging slot that a collective needs only now and then would otherwise
 * put a 512 KiB slot's worth of such traps (3-10 ms) into a random later call. */
void *cl_buf_grow(cl_buf *b, size_t bytes)
{
    bytes = bytes < 64 ? 64 : bytes;
    b->asked = bytes > b->asked ? bytes : b->asked;
    if (bytes > b->bytes) {
        char *p = realloc(b->p, bytes);
        if (!p)
            return NULL;
        memset(p + b->bytes, 0, bytes - b->bytes);
        b->p = p;
        b->bytes = bytes;
    }
    return b->p;
}

void cl_buf_free(cl_buf *b)
{
    free(b->p);
    *b = (cl_buf){0};
}

void cl_buf_settle(cl_buf *b, size_t keep)
{
    b->calm = b->asked <= keep ? b->calm + 1 : 0;
    b->asked = 0;
    if (b->bytes > keep && b->calm >= CL_BUF_CALM)
        cl_buf_free(b);
}
