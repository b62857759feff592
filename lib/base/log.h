/* Library logging: one sink, levels, default from $COLL_DEBUG. */
#ifndef CL_LOG_H
#define CL_LOG_H

#include "collective.h"

void cl_log(coll_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cl_log_enabled(coll_log_level level);

#endif
