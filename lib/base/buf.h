/* A buffer that grows and is kept: the scratch and staging memory a collective reuses
 * call after call, so a pass neither maps nor faults in fresh memory each time. */
#ifndef CL_BUF_H
#define CL_BUF_H

#include <stddef.h>

typedef struct cl_buf {
    void *p;
    size_t bytes;
} cl_buf;

/* The buffer, grown (never shrunk) to at least `bytes` and never NULL for 0 bytes; new
 * memory is zeroed, which touches it now. NULL when out of memory (the old one stays). */
void *cl_buf_grow(cl_buf *b, size_t bytes);
void cl_buf_free(cl_buf *b);

#endif
