/*
 * check_main.c - the one main() of every Check suite.
 *
 * Each tests/test_NAME.c defines `Suite *test_suite(void)` and, when it needs
 * to set something up before the run (logging, fork mode), `void
 * test_init(SRunner *sr)`; the Makefile links this file into every suite.
 * The exit status is what CI reads: 0 only when every test ran and passed
 * (Check prints its own "N%: Checks: N, Failures: N, Errors: N" line).
 */
#include <check.h>

Suite *test_suite(void);
void test_init(SRunner *sr) __attribute__((weak));

int main(void)
{
    SRunner *sr = srunner_create(test_suite());
    if (test_init) test_init(sr);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
