/* What the engine says of its choices (choose.c). */
#ifndef CL_CHOOSE_H
#define CL_CHOOSE_H

#include "collective.h"

#include "algo/algo.h"

/* At COLL_DEBUG=info, names the choice for op's collective and size class, once. */
void cl_tell_choice(coll_comm *c, const cl_algo *chosen, const cl_op *op);

#endif
