/* The transport conformance suite (test_conformance.c), for the tools that run it. */
#ifndef CL_CONFORMANCE_H
#define CL_CONFORMANCE_H

#include <check.h>

/* The suite for transport `name` (registered: built in, or a plugin loaded before) over
 * address family fam (AF_UNSPEC, AF_INET6), or NULL when it cannot run here. */
Suite *cl_conformance_suite(const char *name, int fam);

#endif
