/* COLL_BIND, read by the launchers that place ranks (perf/spawn.c: coll_run and the
 * tools' --np) and checked by coll_init: one parser, so a value is refused everywhere
 * with the same sentence instead of being ignored by programs that call coll_init.
 * Header-only because the launchers link the public library, whose internal symbols
 * are hidden. */
#ifndef CL_BIND_H
#define CL_BIND_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum { CL_BIND_NONE = 0, CL_BIND_CORE = 1 };

/* CL_BIND_CORE (unset or empty: the default), CL_BIND_NONE, or -1 with the reason in
 * err for anything else. */
static inline int cl_bind_parse(const char *how, char *err, size_t errlen)
{
    if (!how || !*how || strcmp(how, "core") == 0)
        return CL_BIND_CORE;
    if (strcmp(how, "none") == 0)
        return CL_BIND_NONE;
    snprintf(err, errlen, "COLL_BIND must be core or none, not '%s'", how);
    return -1;
}

#endif
