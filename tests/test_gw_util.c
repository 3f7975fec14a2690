/*
 * test_gw_util.c - the gateway's random ids (gateway/util.c).  The UI stream
 * id admits whoever holds it to a stream without an API key, so it must come
 * from getrandom(2) and nothing weaker: when randomness fails the id is
 * refused (-1), never made up.  util.c has no dependency beyond libc and is
 * compiled into this test directly (the library holds no gateway code).
 *
 * Before the fix gw_random_alnum returned void and filled the id from rand()
 * when getrandom failed: random_alnum_failure_refuses does not compile
 * against that version, and the same check written against it (the id is
 * still filled) fails.
 */
#include <check.h>
#include <string.h>

#include "gateway/util.c"

static int in_alphabet(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

START_TEST(random_alnum_ids)
{
    enum { N = 200, LEN = 24 };
    static char ids[N][LEN + 1];
    int seen[62] = {0};
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < N; i++) {
        memset(ids[i], '#', sizeof ids[i]);
        ck_assert_int_eq(gw_random_alnum(ids[i], LEN), 0);
        ck_assert_uint_eq(strlen(ids[i]), LEN);
        ck_assert_msg(in_alphabet(ids[i], LEN), "id %s has a character outside [A-Za-z0-9]", ids[i]);
        for (int j = 0; j < i; j++) ck_assert_str_ne(ids[i], ids[j]);
        for (int k = 0; k < LEN; k++) seen[strchr(set, ids[i][k]) - set]++;
    }
    /* 4800 draws over 62 characters: each is expected ~77 times; one that
     * never shows (p ~ 1e-33) means a broken mapping */
    for (int c = 0; c < 62; c++) ck_assert_msg(seen[c] > 0, "character %c never drawn", set[c]);
    /* lengths other than the 64-byte refill size, and 0 */
    char big[301], none[1] = {'#'};
    ck_assert_int_eq(gw_random_alnum(big, 300), 0);
    ck_assert_uint_eq(strlen(big), 300);
    ck_assert(in_alphabet(big, 300));
    ck_assert_int_eq(gw_random_alnum(none, 0), 0);
    ck_assert_int_eq(none[0], 0);
}
END_TEST

START_TEST(random_alnum_failure_refuses)
{
    char id[25];
    memset(id, '#', sizeof id);
    gw_random_fail_next = 1;
    ck_assert_int_eq(gw_random_alnum(id, 24), -1);
    ck_assert_str_eq(id, "");           /* nothing usable is left behind */
    ck_assert_int_eq(gw_random_fail_next, 0);
    unsigned char b[8];
    gw_random_fail_next = 1;
    ck_assert_int_eq(gw_random_bytes(b, sizeof b), -1);
    ck_assert_int_eq(gw_random_bytes(b, sizeof b), 0);  /* the hook is spent: getrandom again */
    ck_assert_int_eq(gw_random_alnum(id, 24), 0);
    ck_assert_uint_eq(strlen(id), 24);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("gw_util");
    TCase *tc = tcase_create("random");
    tcase_add_test(tc, random_alnum_ids);
    tcase_add_test(tc, random_alnum_failure_refuses);
    suite_add_tcase(s, tc);
    return s;
}

void test_init(SRunner *sr)
{
    (void)sr;
}
