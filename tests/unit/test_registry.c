/* The table of transports (transports/registry.c): the list of names for an unknown
 * transport's message is whole and the same buffer on every thread (built once: a
 * thread-local one cost 512 bytes of the library's static TLS, tests/unit/static_tls.sh),
 * and a name not in the table is not found. */
#include "transports/transport.h"

#include "common/suite.h"

#include <check.h>
#include <pthread.h>
#include <string.h>

static void *names_here(void *arg)
{
    (void)arg;
    return (void *)cl_transport_names();
}

START_TEST(every_thread_reads_one_whole_list_of_names)
{
    const char *mine = cl_transport_names();
    pthread_t t;
    void *theirs = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, names_here, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &theirs), 0);
    ck_assert_ptr_eq(theirs, mine);
    ck_assert_msg(strncmp(mine, "auto, tcp, shm, loop, rails", 27) == 0, "names: '%s'", mine);
    ck_assert_str_eq(cl_transport_names(), mine);
}
END_TEST

START_TEST(a_name_not_in_the_table_is_not_found)
{
    ck_assert_ptr_null(cl_transport_find("no-such-transport"));
    ck_assert_ptr_nonnull(cl_transport_find("tcp"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *t = tcase_create("registry");
    tcase_add_test(t, every_thread_reads_one_whole_list_of_names);
    tcase_add_test(t, a_name_not_in_the_table_is_not_found);
    suite_add_tcase(s, t);
    return run_suite(s);
}
