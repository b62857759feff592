/* Every algorithm the engine may choose from. A new one is a file in lib/algo defining
 * its cl_algo, and a line here. */
#include "algo/algo.h"

#include <string.h>

const cl_algo *const cl_algos[] = {
    &cl_algo_ring,
    &cl_algo_doubling,
    &cl_algo_chain,
    &cl_algo_codec,
    &cl_algo_direct,
    &cl_algo_ring_gather,
    &cl_algo_hier,
    &cl_algo_rabenseifner,
    &cl_algo_bruck,
    &cl_algo_binomial,
    &cl_algo_tree,
    NULL,
};

const cl_algo *cl_algo_named(const char *name)
{
    for (int i = 0; cl_algos[i]; i++)
        if (strcmp(cl_algos[i]->name, name) == 0)
            return cl_algos[i];
    return NULL;
}
