/* Runs a Check suite (each test forked, Check's default) and turns the result into the
 * process exit status meson reads. */
#ifndef CL_TEST_SUITE_H
#define CL_TEST_SUITE_H

#include <check.h>

static inline int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif
