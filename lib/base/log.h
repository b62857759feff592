/* Library logging: one sink, levels, default from $COLL_DEBUG. */
#ifndef CL_LOG_H
#define CL_LOG_H

#include "collective.h"

void cl_log(coll_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cl_log_enabled(coll_log_level level);
/* The level a COLL_DEBUG value names (error, warn, info, debug, trace; any case), or -1. */
int cl_log_level_parse(const char *name);

#endif
