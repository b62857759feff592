/* A buffer that grows and is kept: the scratch and staging memory a collective reuses
 * call after call, so a pass neither maps nor faults in fresh memory each time. What one
 * large message grew it to is given back once calls stop needing it (cl_buf_settle). */
#ifndef CL_BUF_H
#define CL_BUF_H

#include <stddef.h>

typedef struct cl_buf {
    void *p;
    size_t bytes;
    size_t asked;  /* the most asked of it since the last cl_buf_settle */
    unsigned calm; /* settles in a row whose calls asked no more than their keep */
} cl_buf;

/* The buffer, grown (never shrunk) to at least `bytes` and never NULL for 0 bytes; new
 * memory is zeroed, which touches it now. NULL when out of memory (the old one stays). */
void *cl_buf_grow(cl_buf *b, size_t bytes);
void cl_buf_free(cl_buf *b);
/* After each call that may have used b: once CL_BUF_CALM calls in a row asked for no
 * more than `keep` bytes, memory past that is given back (freed; the next call grows it
 * again to what it needs). A loop of large messages keeps its buffer. */
void cl_buf_settle(cl_buf *b, size_t keep);

enum { CL_BUF_CALM = 16 };

#endif
