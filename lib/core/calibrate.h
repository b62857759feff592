/* The host link measured at init (calibrate.c). */
#ifndef CL_CALIBRATE_H
#define CL_CALIBRATE_H

#include "collective.h"

/* Measures the link between hosts for the cost model, on every rank at the end of
 * init (calibrate.c): nothing on one host or where the environment gave the link. */
int cl_calibrate(coll_comm *c);

#endif
