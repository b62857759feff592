/* Interface selection for the tcp transport, in NCCL's syntax: "eth0,ib" are prefixes to
 * accept, "^docker,lo" prefixes to reject, a leading "=" asks for exact names. With no
 * filter, loopback and docker bridges are the last resort, not the first choice. */
#include "transports/iface.h"

#include "base/log.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static int name_in_list(const char *name, const char *list, int exact)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0)
            return 1;
    }
    return 0;
}

static int accepted(const char *name, const char *filter)
{
    if (!filter || !*filter)
        return strncmp(name, "lo", 2) != 0 && strncmp(name, "docker", 6) != 0;
    int neg = filter[0] == '^';
    const char *f = filter + neg;
    int exact = f[0] == '=';
    f += exact;
    return name_in_list(name, f, exact) != neg;
}

static int pick(const char *filter, char *ip, size_t iplen, char *ifname, size_t ifnlen)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0)
        return -1;
    int found = -1;
    for (struct ifaddrs *i = all; i && found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        if (!accepted(i->ifa_name, filter))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)iplen);
        snprintf(ifname, ifnlen, "%s", i->ifa_name);
        found = 0;
    }
    freeifaddrs(all);
    return found;
}

int cl_pick_iface(const char *filter, char *ip, size_t iplen)
{
    char ifname[64];
    int rc = pick(filter, ip, iplen, ifname, sizeof(ifname));
    if (rc != 0 && (!filter || !*filter))
        rc = pick("lo", ip, iplen, ifname, sizeof(ifname));
    if (rc != 0)
        return -1;
    cl_log(COLL_LOG_INFO, "tcp: using interface %s address %s (filter '%s')", ifname, ip,
           filter ? filter : "");
    return 0;
}
