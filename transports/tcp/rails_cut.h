/* How the rails transport cuts a striped message over its rails, and how it weighs
 * them by the speed each rail showed. Pure arithmetic on numbers rails.c hands in: no
 * connection, lock or clock here, so both ends cut alike and the tests can check it. */
#ifndef CL_RAILS_CUT_H
#define CL_RAILS_CUT_H

#include <stddef.h>
#include <stdint.h>

enum { CL_RAILS_MAX = 4, CL_RAILS_ALIGN = 4096 };

/* A cut's weights as they travel: 8 bits a rail, rail k's in bits 8k..8k+7. */
typedef uint32_t cl_rails_code;

/* The equal cut of n rails (what rails wire version 1 always used). */
cl_rails_code cl_rails_equal(int n);

/* The cut of a len-byte payload over n rails by code: part k's offset and length. Rail
 * 0 has the head (and the remainder), rails 1.. follow in order, each its weight's share
 * of whole CL_RAILS_ALIGN units and at least one unit, weight 0 too. 0, or -1 for a code
 * no sender makes (rail 0 weightless, a weight past rail n-1, parts past len). */
int cl_rails_cut(size_t len, int n, cl_rails_code code, size_t off[CL_RAILS_MAX],
                 size_t plen[CL_RAILS_MAX]);

/* A connection's sending speed per rail: bytes per second, 0 while unknown; the median
 * of its last three measures (of two, the lower), each the bytes acknowledged over the
 * time busy of a window of at least CL_RAILS_WINDOW_US busy. */
enum { CL_RAILS_WINDOW_US = 20000 };
typedef struct {
    double bps[CL_RAILS_MAX];
    double last[CL_RAILS_MAX][3];
    unsigned seen[CL_RAILS_MAX];
    uint64_t acked[CL_RAILS_MAX], busy_us[CL_RAILS_MAX]; /* the window's start */
} cl_rails_speed;

/* Rail k's counts now (the kernel's, as a part of it ended: bytes acknowledged, time
 * busy sending, both since the socket opened). */
void cl_rails_speed_add(cl_rails_speed *s, int k, uint64_t acked, uint64_t busy_us);

/* The code to cut by now: shares by speed over the rails with live[k] set, each at
 * least a floor (so a slow rail is still measured and can win its share back), 0 for
 * the others; equal over the live ones until each has been measured. */
cl_rails_code cl_rails_weigh(const cl_rails_speed *s, int n, const int live[CL_RAILS_MAX]);

/* The code to use of was (in use) and now (just weighed): was while every rail's share
 * is within CL_RAILS_BAND percent of now's and the same rails weigh 0, else now. Noise
 * in the speeds of rails alike would otherwise make the cut uneven, and the slowest
 * part sets a message's time. */
enum { CL_RAILS_BAND = 5 };
cl_rails_code cl_rails_settle(cl_rails_code was, cl_rails_code now, int n);

#endif
