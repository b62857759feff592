/* coll_net_check PLUGIN.so: the transport conformance suite (tests/transport/, the same
 * checks every built-in transport passes) run on a plugin, through the adapter that
 * serves it to the library: ordering, empty and large messages, every size around the
 * adapter's framing, many in flight, a message longer than its receive, a closed peer,
 * shutdown and its farewell. A plugin init refuses is refused here with the same
 * sentence. Exit status: 0 all passed, 1 a check failed, 2 not loaded, 77 cannot run here.
 *   coll_net_check ./libcollective-net-mynet.so     (or NAME, as COLL_NET_PLUGIN takes it) */
#include "transports/plugin/plugin.h"
#include "transport/conformance.h"

#include "collective.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fprintf(argc == 2 ? stdout : stderr, "usage: coll_net_check PLUGIN.so|NAME\n");
        return argc == 2 ? 0 : 2;
    }
    const cl_transport *tr = NULL;
    char err[512];
    if (cl_net_open(argv[1], &tr, err, sizeof(err)) != COLL_OK) {
        fprintf(stderr, "coll_net_check: %s\n", err);
        return 2;
    }
    const cl_net_plugin *p = (const cl_net_plugin *)tr; /* its first member */
    printf("coll_net_check: transport plugin '%s' from %s, ABI version %u (this library: "
           "%d to %d)\n",
           tr->name, p->path, p->ops.version, COLL_NET_ABI_OLDEST, COLL_NET_ABI_VERSION);
    fflush(stdout);
    Suite *s = cl_conformance_suite(tr->name, AF_UNSPEC);
    if (!s)
        return 77;
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), run = srunner_ntests_run(sr);
    srunner_free(sr);
    printf("coll_net_check: %s: %d of %d checks passed\n", tr->name, run - failed, run);
    return failed ? 1 : 0;
}
