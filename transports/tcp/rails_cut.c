/* The rails transport's cut of a striped message and its weights (rails_cut.h). It must
 * stay a pure function of its arguments: the receiver cuts by the code it reads, and
 * the two ends agree only because the same arithmetic runs at both. */
#include "transports/tcp/rails_cut.h"

/* Each live rail's weight is at least FLOOR of about 255: a rail that looked slow still
 * carries ~6% and keeps being measured. */
enum { FLOOR = 16 };

cl_rails_code cl_rails_equal(int n)
{
    cl_rails_code code = 0;
    for (int k = 0; k < n && k < CL_RAILS_MAX; k++)
        code |= (cl_rails_code)1 << (8 * k);
    return code;
}

int cl_rails_cut(size_t len, int n, cl_rails_code code, size_t off[CL_RAILS_MAX],
                 size_t plen[CL_RAILS_MAX])
{
    if (n < 1 || n > CL_RAILS_MAX || (code & 0xff) == 0 ||
        (n < CL_RAILS_MAX && code >> (8 * n) != 0))
        return -1;
    size_t sum = 0, units = len / CL_RAILS_ALIGN, rest = 0;
    for (int k = 0; k < n; k++)
        sum += code >> (8 * k) & 0xff;
    for (int k = 1; k < n; k++) {
        size_t u = units * (code >> (8 * k) & 0xff) / sum;
        plen[k] = (u ? u : 1) * CL_RAILS_ALIGN;
        rest += plen[k];
    }
    if (rest > len)
        return -1;
    plen[0] = len - rest;
    off[0] = 0;
    for (int k = 1; k < n; k++)
        off[k] = off[k - 1] + plen[k - 1];
    return 0;
}

static double median3(double a, double b, double c)
{
    double lo = a < b ? a : b, hi = a < b ? b : a;
    return c < lo ? lo : c > hi ? hi : c;
}

/* Bytes over busy time, not the kernel's delivery rate (a sample of the last few ACKs,
 * stale or off by 10x where a shaper lets a burst through), nor a part's time (a send
 * is done once in a socket buffer of megabytes): time idle, waiting for the caller,
 * does not count. The median of three windows: one odd (a loss, a burst) does not move
 * the cut; a change that lasts moves it in two. */
void cl_rails_speed_add(cl_rails_speed *s, int k, uint64_t acked, uint64_t busy_us)
{
    if (busy_us < s->busy_us[k] || acked < s->acked[k] || s->busy_us[k] == 0) {
        s->acked[k] = acked; /* the first look, or a socket anew: a window starts */
        s->busy_us[k] = busy_us ? busy_us : 1;
        return;
    }
    if (busy_us - s->busy_us[k] < CL_RAILS_WINDOW_US)
        return;
    double bps = (double)(acked - s->acked[k]) * 1e6 / (double)(busy_us - s->busy_us[k]);
    s->acked[k] = acked;
    s->busy_us[k] = busy_us;
    double *l = s->last[k];
    l[s->seen[k]++ % 3] = bps;
    s->bps[k] = s->seen[k] == 1   ? l[0]
                : s->seen[k] == 2 ? (l[0] < l[1] ? l[0] : l[1])
                                  : median3(l[0], l[1], l[2]);
}

static double share(cl_rails_code code, int n, int k)
{
    unsigned sum = 0;
    for (int j = 0; j < n; j++)
        sum += code >> (8 * j) & 0xff;
    return sum ? (double)(code >> (8 * k) & 0xff) / sum : 0;
}

cl_rails_code cl_rails_settle(cl_rails_code was, cl_rails_code now, int n)
{
    if (!was)
        return now;
    for (int k = 0; k < n; k++) {
        int dead_was = (was >> (8 * k) & 0xff) == 0, dead_now = (now >> (8 * k) & 0xff) == 0;
        double d = 100 * (share(was, n, k) - share(now, n, k));
        if (dead_was != dead_now || d > CL_RAILS_BAND || d < -CL_RAILS_BAND)
            return now;
    }
    return was;
}

cl_rails_code cl_rails_weigh(const cl_rails_speed *s, int n, const int live[CL_RAILS_MAX])
{
    double sum = 0;
    int known = 1;
    for (int k = 0; k < n; k++)
        if (live[k]) {
            sum += s->bps[k];
            known &= s->bps[k] > 0;
        }
    cl_rails_code code = 0;
    for (int k = 0; k < n; k++) {
        unsigned w = 0;
        if (live[k]) {
            w = known ? (unsigned)(255.0 * s->bps[k] / sum + 0.5) : FLOOR;
            w = w < FLOOR ? FLOOR : w > 255 ? 255 : w;
        }
        code |= (cl_rails_code)w << (8 * k);
    }
    return code;
}
