/* Addresses as text (base/addr.c) and the choice of an interface (transports/iface.c):
 * text read back as written for both families and a link-local scope; a host with a colon
 * needs brackets; the interface of the family asked for, global IPv6 before link-local,
 * IPv4 first when either will do; and, when nothing fits, a sentence naming the filter,
 * the family and what each interface lacked. The interfaces are a list made here, so
 * every case runs on any machine. */
#include "base/addr.h"
#include "transports/iface.h"

#include "common/suite.h"

#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static void round_trip(const char *text)
{
    cl_addr a;
    char back[CL_ADDR_TEXT];
    ck_assert_msg(cl_addr_parse(text, &a) == 0, "'%s' not parsed", text);
    cl_addr_text(&a, back, sizeof(back));
    ck_assert_str_eq(back, text);
}

START_TEST(addresses_read_back_as_written)
{
    round_trip("127.0.0.1:29500");
    round_trip("[::1]:1");
    round_trip("[fd00::2]:65535");
    round_trip("[fe80::1%lo]:80");
    cl_addr a;
    ck_assert_int_eq(cl_addr_parse("[fe80::1%lo]:80", &a), 0);
    ck_assert_int_eq(((struct sockaddr_in6 *)&a.sa)->sin6_scope_id, if_nametoindex("lo"));
}
END_TEST

START_TEST(a_host_with_a_colon_needs_brackets)
{
    char host[64], port[8];
    const char *bad[] = {"::1:80", "[::1]80", "[::1]:", "host:", ":80", "[]:80", "host", "[::1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(cl_addr_split(bad[i], host, sizeof(host), port, sizeof(port)) != 0,
                      "'%s' was split", bad[i]);
    ck_assert_int_eq(cl_addr_split("[fe80::1%eth0]:5", host, sizeof(host), port, sizeof(port)), 0);
    ck_assert_str_eq(host, "fe80::1%eth0");
    ck_assert_str_eq(port, "5");
    ck_assert_int_eq(cl_addr_split("node-7.example:29500", host, sizeof(host), port, sizeof(port)),
                     0);
    ck_assert_str_eq(host, "node-7.example");
    char joined[64];
    cl_addr_join("::1", "80", joined, sizeof(joined));
    ck_assert_str_eq(joined, "[::1]:80");
    cl_addr_join("10.0.0.1", "80", joined, sizeof(joined));
    ck_assert_str_eq(joined, "10.0.0.1:80");
}
END_TEST

/* ---- a made-up host's interfaces ---------------------------------------------------- */

typedef struct {
    struct ifaddrs ifa;
    struct sockaddr_storage sa, mask; /* every network here a /24 or a /64 */
} entry;

static entry list[10];
static int nlist;

static void add(const char *name, int up, const char *ip)
{
    entry *e = &list[nlist];
    memset(e, 0, sizeof(*e));
    e->ifa.ifa_name = (char *)name;
    e->ifa.ifa_flags = up ? IFF_UP | IFF_RUNNING : 0;
    if (ip && strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&e->sa;
        a->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &a->sin6_addr);
        /* getifaddrs gives a link-local address its interface's index; lo's is one any
         * machine has, so the text is the same everywhere */
        a->sin6_scope_id = IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) ? if_nametoindex("lo") : 0;
        e->ifa.ifa_addr = (struct sockaddr *)a;
        struct sockaddr_in6 *m = (struct sockaddr_in6 *)&e->mask;
        m->sin6_family = AF_INET6;
        memset(m->sin6_addr.s6_addr, 0xff, 8);
        e->ifa.ifa_netmask = (struct sockaddr *)m;
    } else if (ip) {
        struct sockaddr_in *a = (struct sockaddr_in *)&e->sa;
        a->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &a->sin_addr);
        e->ifa.ifa_addr = (struct sockaddr *)a;
        struct sockaddr_in *m = (struct sockaddr_in *)&e->mask;
        m->sin_family = AF_INET;
        inet_pton(AF_INET, "255.255.255.0", &m->sin_addr);
        e->ifa.ifa_netmask = (struct sockaddr *)m;
    }
    if (nlist)
        list[nlist - 1].ifa.ifa_next = &e->ifa;
    nlist++;
}

/* lo (both), eth0 (IPv4 and a link-local IPv6), eth1 (global and link-local IPv6),
 * eth2 down, docker0. */
static void host(void)
{
    nlist = 0;
    add("lo", 1, "127.0.0.1");
    add("lo", 1, "::1");
    add("eth0", 1, "10.0.0.5");
    add("eth0", 1, "fe80::5");
    add("eth1", 1, "fe80::6");
    add("eth1", 1, "fd00::6");
    add("eth2", 0, "10.0.2.5");
    add("docker0", 1, "172.17.0.1");
}

static const char *chosen(const char *filter, int family)
{
    static char text[CL_ADDR_TEXT];
    char err[400];
    cl_addr a;
    if (cl_iface_choose(&list[0].ifa, filter, family, &a, err, sizeof(err)) != 0)
        ck_abort_msg("nothing chosen for '%s': %s", filter ? filter : "(none)", err);
    cl_addr_text(&a, text, sizeof(text));
    return text;
}

START_TEST(the_interface_of_the_family_asked_for_is_chosen)
{
    host();
    ck_assert_str_eq(chosen(NULL, AF_UNSPEC), "10.0.0.5:0");
    ck_assert_str_eq(chosen(NULL, AF_INET), "10.0.0.5:0");
    ck_assert_str_eq(chosen(NULL, AF_INET6), "[fd00::6]:0");
    ck_assert_str_eq(chosen("lo", AF_INET6), "[::1]:0");
    ck_assert_str_eq(chosen("lo", AF_UNSPEC), "127.0.0.1:0");
    /* eth0's only IPv6 address is link-local: it carries its scope */
    ck_assert_str_eq(chosen("eth0", AF_INET6), "[fe80::5%lo]:0");
    ck_assert_str_eq(chosen("^eth0,lo", AF_UNSPEC), "172.17.0.1:0");
}
END_TEST

/* The rails cl_iface_list takes, as "name address" pairs. */
static const char *rails(const char *filter, int family)
{
    static char text[400];
    char err[400];
    cl_iface r[4];
    int n = cl_iface_list(&list[0].ifa, filter, family, r, 4, err, sizeof(err));
    ck_assert_msg(n > 0, "no rails for '%s': %s", filter ? filter : "(none)", err);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        char a[CL_ADDR_TEXT];
        cl_addr_text(&r[k].addr, a, sizeof(a));
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%s %s", k ? ", " : "", r[k].name, a);
    }
    return text;
}

/* Whether `peer` is on the network of rail k of the made-up host (filter "eth"). */
static int on_net(int k, int family, const char *peer)
{
    char err[400];
    cl_iface r[4];
    cl_addr a;
    ck_assert_int_gt(cl_iface_list(&list[0].ifa, "eth", family, r, 4, err, sizeof(err)), k);
    ck_assert_int_eq(cl_addr_parse(peer, &a), 0);
    return cl_iface_on_net(&r[k], &a);
}

/* auto's test of a second NIC (a rail past the first only to a peer on its network):
 * the prefix comes from the interface's netmask. */
START_TEST(a_rail_reaches_the_peers_on_its_network)
{
    host();
    add("eth3", 1, "10.0.3.5");
    ck_assert_int_eq(on_net(1, AF_INET, "10.0.3.9:41000"), 1);
    ck_assert_int_eq(on_net(1, AF_INET, "10.0.4.9:41000"), 0);
    ck_assert_int_eq(on_net(1, AF_INET, "10.0.0.9:41000"), 0); /* eth0's network */
    ck_assert_int_eq(on_net(1, AF_INET, "[fd00::9]:41000"), 0); /* another family */
    ck_assert_int_eq(on_net(1, AF_INET, "10.0.3.5:41000"), 0);   /* eth3's own: virbr0's kind */
    ck_assert_int_eq(on_net(0, AF_INET6, "[fd00::1:2]:41000"), 1); /* eth1's /64 */
    ck_assert_int_eq(on_net(0, AF_INET6, "[fd00:0:0:1::6]:41000"), 0);
    cl_iface i = {.prefix = 20};
    cl_addr a;
    ck_assert_int_eq(cl_addr_parse("10.78.0.1:0", &i.addr), 0);
    ck_assert_int_eq(cl_addr_parse("10.78.15.200:1", &a), 0);
    ck_assert_int_eq(cl_iface_on_net(&i, &a), 1);
    ck_assert_int_eq(cl_addr_parse("10.78.16.1:1", &a), 0);
    ck_assert_int_eq(cl_iface_on_net(&i, &a), 0);
}
END_TEST

/* An interface up without a carrier (a cable out, libvirt's bridge with no guest) is no
 * rail, unless no interface has one (a virtual NIC that never says it has). */
START_TEST(a_rail_needs_a_carrier)
{
    host();
    add("eth3", 1, "10.0.3.5");
    list[nlist - 1].ifa.ifa_flags = IFF_UP;
    ck_assert_str_eq(rails(NULL, AF_INET), "eth0 10.0.0.5:0");
    ck_assert_str_eq(rails("eth3", AF_INET), "eth3 10.0.3.5:0"); /* none has one: taken */
}
END_TEST

/* Issue 55's host: docker bridges, a down interface, loopback and two real NICs. */
START_TEST(the_rails_are_every_real_interface_up)
{
    host();
    add("eth3", 1, "10.0.3.5");
    add("docker1", 1, "172.18.0.1");
    ck_assert_str_eq(rails(NULL, AF_UNSPEC), "eth0 10.0.0.5:0, eth3 10.0.3.5:0");
    ck_assert_str_eq(rails("eth3", AF_UNSPEC), "eth3 10.0.3.5:0");
    /* a filter of one's own takes what it accepts, bridges too (as cl_iface_choose) */
    ck_assert_str_eq(rails("^eth0,lo", AF_UNSPEC),
                     "docker0 172.17.0.1:0, eth3 10.0.3.5:0, docker1 172.18.0.1:0");
    ck_assert_str_eq(rails(NULL, AF_INET6), "eth1 [fd00::6]:0");
    ck_assert_str_eq(rails("lo", AF_UNSPEC), "lo 127.0.0.1:0");
    /* eth0's IPv6 is link-local only: a rail with its scope, named as itself */
    ck_assert_str_eq(rails("eth0", AF_INET6), "eth0 [fe80::5%lo]:0");
    nlist = 0; /* two NICs of link-local IPv6 only: both are rails */
    add("lo", 1, "::1");
    add("eth0", 1, "fe80::5");
    add("eth1", 1, "fe80::6");
    ck_assert_str_eq(rails(NULL, AF_INET6), "eth0 [fe80::5%lo]:0, eth1 [fe80::6%lo]:0");
    nlist = 0; /* nothing but loopback and a bridge: loopback, the last resort */
    add("lo", 1, "127.0.0.1");
    add("docker0", 0, "172.17.0.1");
    ck_assert_str_eq(rails(NULL, AF_UNSPEC), "last-resort 127.0.0.1:0");
}
END_TEST

static const char *refusal(const char *filter, int family)
{
    static char err[400];
    cl_addr a;
    ck_assert_int_ne(cl_iface_choose(&list[0].ifa, filter, family, &a, err, sizeof(err)), 0);
    return err;
}

START_TEST(nothing_fits_and_the_sentence_says_what_was_tried)
{
    host();
    ck_assert_str_eq(refusal("ib", AF_UNSPEC),
                     "no network interface matches 'ib' (interfaces here: lo: IPv4 and IPv6, "
                     "eth0: IPv4 and IPv6, eth1: IPv6 only, eth2: down, docker0: IPv4 only)");
    ck_assert_str_eq(refusal("eth2,docker", AF_INET6),
                     "no network interface that matches 'eth2,docker' has an IPv6 address up "
                     "(eth2: down, docker0: IPv4 only)");
    nlist = 0;
    add("lo", 1, "127.0.0.1");
    add("eth0", 1, "10.0.0.5");
    ck_assert_str_eq(refusal(NULL, AF_INET6),
                     "no network interface has an IPv6 address up (lo: IPv4 only, eth0: IPv4 "
                     "only)");
}
END_TEST

START_TEST(coll_socket_family_takes_nccls_names)
{
    int f;
    char err[200];
    setenv("COLL_SOCKET_FAMILY", "AF_INET6", 1);
    ck_assert_int_eq(cl_family_env(&f, err, sizeof(err)), 0);
    ck_assert_int_eq(f, AF_INET6);
    setenv("COLL_SOCKET_FAMILY", "af_inet", 1);
    ck_assert_int_eq(cl_family_env(&f, err, sizeof(err)), 0);
    ck_assert_int_eq(f, AF_INET);
    setenv("COLL_SOCKET_FAMILY", "ipv6", 1);
    ck_assert_int_eq(cl_family_env(&f, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "COLL_SOCKET_FAMILY must be AF_INET or AF_INET6, not 'ipv6'");
    unsetenv("COLL_SOCKET_FAMILY");
    ck_assert_int_eq(cl_family_env(&f, err, sizeof(err)), 0);
    ck_assert_int_eq(f, AF_UNSPEC);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("addr");
    TCase *t = tcase_create("addr");
    tcase_add_test(t, addresses_read_back_as_written);
    tcase_add_test(t, a_host_with_a_colon_needs_brackets);
    tcase_add_test(t, the_interface_of_the_family_asked_for_is_chosen);
    tcase_add_test(t, nothing_fits_and_the_sentence_says_what_was_tried);
    tcase_add_test(t, the_rails_are_every_real_interface_up);
    tcase_add_test(t, a_rail_reaches_the_peers_on_its_network);
    tcase_add_test(t, a_rail_needs_a_carrier);
    tcase_add_test(t, coll_socket_family_takes_nccls_names);
    suite_add_tcase(s, t);
    return run_suite(s);
}
