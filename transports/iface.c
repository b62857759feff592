/* Interface selection for the socket transports and the lifeline, in NCCL's syntax:
 * "eth0,ib" are prefixes to accept, "^docker,lo" prefixes to reject, a leading "=" asks
 * for exact names. With no filter, loopback and docker bridges are the last resort, not
 * the first choice. A choice that finds nothing says at once what it tried: a rank that
 * publishes no address would leave its peers waiting out their timeout. */
#include "transports/iface.h"

#include "base/log.h"
#include "base/util.h"

#include <errno.h>
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

/* How fit an address is for `family`, lower is better: IPv4 first when either will do
 * (what every rank did before IPv6, so mixed versions agree), then a global IPv6 address,
 * then a link-local one (reachable on its own link only); -1: not of the family. */
static int fitness(const struct sockaddr *sa, int family)
{
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
        (family != AF_UNSPEC && sa->sa_family != family))
        return -1;
    if (sa->sa_family == AF_INET)
        return 0;
    return IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr) ? 2 : 1;
}

static const struct ifaddrs *best(const struct ifaddrs *all, const char *filter, int family)
{
    const struct ifaddrs *pick = NULL;
    int pick_fit = 3;
    for (const struct ifaddrs *i = all; i; i = i->ifa_next) {
        int fit = fitness(i->ifa_addr, family);
        if (fit >= 0 && fit < pick_fit && (i->ifa_flags & IFF_UP) &&
            accepted(i->ifa_name, filter)) {
            pick = i;
            pick_fit = fit;
        }
    }
    return pick;
}

static void take(const struct ifaddrs *i, cl_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (i->ifa_addr->sa_family == AF_INET) {
        out->len = sizeof(struct sockaddr_in);
        memcpy(&out->sa, i->ifa_addr, out->len);
        ((struct sockaddr_in *)&out->sa)->sin_port = 0;
        return;
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->sa;
    out->len = sizeof(*a);
    memcpy(a, i->ifa_addr, out->len);
    a->sin6_port = 0;
    if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) && !a->sin6_scope_id)
        a->sin6_scope_id = if_nametoindex(i->ifa_name);
}

/* An IPv6 address is tentative for a second or two after it comes (duplicate address
 * detection; Linux's IFA_F_TENTATIVE, and IFA_F_DADFAILED once a duplicate is seen):
 * bind() refuses it meanwhile ("Cannot assign requested address"), and a rank started
 * with its network (a container, a namespace just made) would fail at init. */
#define TENTATIVE 0x40
#define DAD_FAILED 0x08
#define SETTLE_MS 5000

/* 1 while the kernel still tests *a (/proc/net/if_inet6: address in hex, interface
 * index, prefix length, scope, flags, name); 0 where that file is not. */
static int tentative(const cl_addr *a)
{
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&a->sa;
    FILE *f = a->sa.ss_family == AF_INET6 ? fopen("/proc/net/if_inet6", "r") : NULL;
    char hex[33], name[IF_NAMESIZE + 1];
    unsigned index, plen, scope, flags;
    int found = 0;
    while (f && fscanf(f, "%32s %x %x %x %x %16s", hex, &index, &plen, &scope, &flags, name) == 6) {
        unsigned char b[16];
        for (int k = 0; k < 16; k++)
            sscanf(hex + 2 * k, "%2hhx", &b[k]);
        found |= memcmp(b, v6->sin6_addr.s6_addr, 16) == 0 &&
                 (!v6->sin6_scope_id || index == v6->sin6_scope_id) && (flags & TENTATIVE) &&
                 !(flags & DAD_FAILED);
    }
    if (f)
        fclose(f);
    return found;
}

/* Waits, at most SETTLE_MS, while *a is tentative: the usual detection takes 1-2 s. */
static void settle(const cl_addr *a)
{
    char text[CL_ADDR_TEXT];
    for (int ms = 0; tentative(a); ms += 50) {
        cl_addr_text(a, text, sizeof(text));
        if (ms == 0)
            cl_log(COLL_LOG_INFO,
                   "address %s is tentative (duplicate address detection): "
                   "waiting up to %d ms",
                   text, SETTLE_MS);
        if (ms >= SETTLE_MS) {
            cl_log(COLL_LOG_WARN, "address %s still tentative after %d ms", text, SETTLE_MS);
            return;
        }
        cl_sleep_ms(50);
    }
}

/* What an interface offers, for the sentence when nothing fits. */
typedef struct {
    char name[IF_NAMESIZE];
    int up, v4, v6;
} offer;

static int offers(const struct ifaddrs *all, const char *filter, offer *o, int max)
{
    int n = 0;
    for (const struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (filter && *filter && !accepted(i->ifa_name, filter))
            continue;
        int k = 0;
        while (k < n && strcmp(o[k].name, i->ifa_name) != 0)
            k++;
        if (k == n && n == max)
            continue;
        if (k == n) {
            n++;
            o[k] = (offer){.up = 0};
            snprintf(o[k].name, sizeof(o[k].name), "%s", i->ifa_name);
        }
        o[k].up |= (i->ifa_flags & IFF_UP) != 0;
        o[k].v4 |= fitness(i->ifa_addr, AF_INET) >= 0;
        o[k].v6 |= fitness(i->ifa_addr, AF_INET6) >= 0;
    }
    return n;
}

static void explain(const struct ifaddrs *all, const char *filter, int family, char *err,
                    size_t errlen)
{
    offer o[32];
    int n = offers(all, filter, o, 32);
    size_t at = 0;
    if (n == 0) {
        at += (size_t)snprintf(err, errlen,
                               "no network interface matches '%s' (interfaces here: ", filter);
        n = offers(all, NULL, o, 32);
    } else {
        int f = filter && *filter;
        at += (size_t)snprintf(err, errlen, "no network interface %s%s%shas an %s address up (",
                               f ? "that matches '" : "", f ? filter : "", f ? "' " : "",
                               cl_family_name(family));
    }
    for (int k = 0; k < n && at < errlen; k++)
        at += (size_t)snprintf(err + at, errlen - at, "%s%s: %s", k ? ", " : "", o[k].name,
                               !o[k].up             ? "down"
                               : o[k].v4 && o[k].v6 ? "IPv4 and IPv6"
                               : o[k].v4            ? "IPv4 only"
                               : o[k].v6            ? "IPv6 only"
                                                    : "no IP address");
    if (at < errlen)
        snprintf(err + at, errlen - at, ")");
}

int cl_iface_choose(const struct ifaddrs *all, const char *filter, int family, cl_addr *out,
                    char *err, size_t errlen)
{
    const struct ifaddrs *i = best(all, filter, family);
    if (!i && (!filter || !*filter))
        i = best(all, "lo", family);
    if (!i) {
        explain(all, filter, family, err, errlen);
        return -1;
    }
    take(i, out);
    char text[CL_ADDR_TEXT];
    cl_addr_text(out, text, sizeof(text));
    cl_log(COLL_LOG_INFO, "using interface %s address %s (filter '%s', %s)", i->ifa_name, text,
           filter ? filter : "", cl_family_name(family));
    return 0;
}

/* Why interface i (with an address of the family) is no rail, or NULL when it is one;
 * `carrier`: one without is not either. */
static const char *unfit(const struct ifaddrs *i, const char *filter, int carrier)
{
    if (!(i->ifa_flags & IFF_UP))
        return "down";
    if (carrier && !(i->ifa_flags & IFF_RUNNING))
        return "no carrier (its link is down)";
    if (!accepted(i->ifa_name, filter))
        return filter && *filter ? "not in the filter" : "loopback or docker bridge";
    return NULL;
}

static int listed(const cl_iface *out, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (strcmp(out[k].name, name) == 0)
            return 1;
    return 0;
}

/* The link speed the kernel gives interface `name`, in Mb/s; 0 where it gives none. */
static int speed_of(const char *name)
{
    char path[64];
    int mbps = 0;
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    FILE *f = fopen(path, "re");
    if (f && fscanf(f, "%d", &mbps) != 1)
        mbps = 0;
    if (f)
        fclose(f);
    return mbps > 0 ? mbps : 0;
}

/* The set bits of a netmask (IPv4 or IPv6); a missing one counts as a host's own. */
static int prefix_of(const struct sockaddr *mask)
{
    const uint8_t *b = NULL;
    int bytes = 0, bits = 0;
    if (mask && mask->sa_family == AF_INET)
        b = (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr, bytes = 4;
    else if (mask && mask->sa_family == AF_INET6)
        b = ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr, bytes = 16;
    for (int k = 0; k < bytes; k++)
        bits += __builtin_popcount(b[k]);
    return b ? bits : 128;
}

/* The address bytes of a, and how many. */
static const uint8_t *addr_bytes(const cl_addr *a, int *len)
{
    if (a->sa.ss_family == AF_INET6) {
        *len = 16;
        return ((const struct sockaddr_in6 *)&a->sa)->sin6_addr.s6_addr;
    }
    *len = 4;
    return (const uint8_t *)&((const struct sockaddr_in *)&a->sa)->sin_addr;
}

int cl_iface_on_net(const cl_iface *i, const cl_addr *peer)
{
    int len, plen;
    const uint8_t *a = addr_bytes(&i->addr, &len), *b = addr_bytes(peer, &plen);
    if (i->addr.sa.ss_family != peer->sa.ss_family || len != plen)
        return 0;
    if (memcmp(a, b, (size_t)len) == 0 && !cl_addr_is_loopback(peer))
        return 0; /* the peer has our address: each host has that network to itself */
    int bits = CL_MIN(i->prefix, len * 8), whole = bits / 8, rest = bits % 8;
    uint8_t mask = (uint8_t)(0xff00 >> rest);
    return memcmp(a, b, (size_t)whole) == 0 && (!rest || ((a[whole] ^ b[whole]) & mask) == 0);
}

/* Rails are interfaces whose best address (IPv4, else global IPv6, else link-local IPv6)
 * is of the family; one address per interface, the first one of that fitness. Link-local
 * rails are for a network with nothing else (issue 55): each address carries its
 * interface's name as its scope, which the peer reads as its own interface of that name,
 * so such rails join hosts that name their NICs alike. Interfaces with a carrier first:
 * only where none has one are those without taken (some virtual NICs never say). */
static int rails_of(const struct ifaddrs *all, const char *filter, int family, cl_iface *out,
                    int max)
{
    int n = 0;
    for (int fit = 0; fit < 6 && n == 0; fit++) /* with a carrier; then, if none, any */
        for (const struct ifaddrs *i = all; i && n < max; i = i->ifa_next) {
            if (!i->ifa_addr || listed(out, n, i->ifa_name))
                continue;
            if (fitness(i->ifa_addr, family) != fit % 3)
                continue;
            const char *why = unfit(i, filter, fit < 3);
            if (why) {
                cl_log(COLL_LOG_INFO, "rails: not using interface %s: %s", i->ifa_name, why);
                continue;
            }
            take(i, &out[n].addr);
            out[n].prefix = prefix_of(i->ifa_netmask);
            out[n].mbps = strchr(i->ifa_name, '/') ? 0 : speed_of(i->ifa_name);
            snprintf(out[n].name, sizeof(out[n].name), "%s", i->ifa_name);
            n++;
        }
    return n;
}

int cl_iface_list(const struct ifaddrs *all, const char *filter, int family, cl_iface *out,
                  int max, char *err, size_t errlen)
{
    int n = rails_of(all, filter, family, out, max);
    if (n == 0) { /* loopback, as cl_iface_choose's last resort */
        cl_addr a;
        if (cl_iface_choose(all, filter, family, &a, err, errlen) != 0)
            return -1;
        snprintf(out[0].name, sizeof(out[0].name), "%s", "last-resort");
        out[0].addr = a;
        out[0].prefix = 128; /* the host's own */
        n = 1;
    }
    for (int k = 0; k < n; k++) {
        char text[CL_ADDR_TEXT];
        cl_addr_text(&out[k].addr, text, sizeof(text));
        cl_log(COLL_LOG_INFO, "rails: rail %d is interface %s address %s (up, %s, filter '%s')", k,
               out[k].name, text, cl_family_name(family), filter ? filter : "");
    }
    return n;
}

int cl_pick_ifaces(const char *filter, int family, cl_iface *out, int max, char *err,
                   size_t errlen)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0) {
        snprintf(err, errlen, "cannot list the network interfaces (getifaddrs): %s",
                 strerror(errno));
        return -1;
    }
    int n = cl_iface_list(all, filter, family, out, max, err, errlen);
    freeifaddrs(all);
    for (int k = 0; k < n; k++)
        settle(&out[k].addr);
    return n;
}

int cl_pick_iface(const char *filter, int family, cl_addr *out, char *err, size_t errlen)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0) {
        snprintf(err, errlen, "cannot list the network interfaces (getifaddrs): %s",
                 strerror(errno));
        return -1;
    }
    int rc = cl_iface_choose(all, filter, family, out, err, errlen);
    freeifaddrs(all);
    if (rc == 0)
        settle(out);
    return rc;
}
