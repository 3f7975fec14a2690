/*
 * test_rules.c - the one set of input rules (daemon/model/rules.h) that the
 * gateway and the daemon both call: every numeric rule at, just inside and
 * just outside its bounds (and NaN / infinities); UTF-8 against Unicode's own
 * table of well-formed byte sequences (Table 3-7), exhaustively for every
 * sequence of up to three bytes and for a dense sample of four-byte ones;
 * session ids, tool names, stop strings, counts; the error -> HTTP map; the
 * clock.  The same inputs through both processes end to end:
 * tests/gateway/test_rules.py.
 */
#include <check.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "daemon/model/rules.h"

/* ---- numbers ------------------------------------------------------------- */

START_TEST(numbers_at_their_bounds)
{
    static const struct { enum smol_rule_num r; double v; int ok; } t[] = {
        {SMOL_RULE_TEMPERATURE, 0, 1}, {SMOL_RULE_TEMPERATURE, 2, 1}, {SMOL_RULE_TEMPERATURE, 0.6, 1},
        {SMOL_RULE_TEMPERATURE, -1e-9, 0}, {SMOL_RULE_TEMPERATURE, 2.0000001, 0},
        {SMOL_RULE_TOP_P, 1, 1}, {SMOL_RULE_TOP_P, 1e-9, 1}, {SMOL_RULE_TOP_P, 0, 0}, {SMOL_RULE_TOP_P, 1.0000001, 0},
        {SMOL_RULE_TOP_K, -1, 1}, {SMOL_RULE_TOP_K, 0, 1}, {SMOL_RULE_TOP_K, 1 << 20, 1},
        {SMOL_RULE_TOP_K, -2, 0}, {SMOL_RULE_TOP_K, (1 << 20) + 1, 0}, {SMOL_RULE_TOP_K, 1.5, 0},
        {SMOL_RULE_MIN_P, 0, 1}, {SMOL_RULE_MIN_P, 1, 1}, {SMOL_RULE_MIN_P, -1e-9, 0}, {SMOL_RULE_MIN_P, 1.0000001, 0},
        {SMOL_RULE_REPETITION_PENALTY, 10, 1}, {SMOL_RULE_REPETITION_PENALTY, 1e-9, 1},
        {SMOL_RULE_REPETITION_PENALTY, 0, 0}, {SMOL_RULE_REPETITION_PENALTY, 10.0000001, 0},
        {SMOL_RULE_PRESENCE_PENALTY, -2, 1}, {SMOL_RULE_PRESENCE_PENALTY, 2, 1},
        {SMOL_RULE_PRESENCE_PENALTY, -2.0000001, 0}, {SMOL_RULE_PRESENCE_PENALTY, 2.0000001, 0},
        {SMOL_RULE_FREQUENCY_PENALTY, -2, 1}, {SMOL_RULE_FREQUENCY_PENALTY, 2, 1},
        {SMOL_RULE_FREQUENCY_PENALTY, -2.0000001, 0}, {SMOL_RULE_FREQUENCY_PENALTY, 2.0000001, 0},
        {SMOL_RULE_MAX_TOKENS_FIELD, 1, 1}, {SMOL_RULE_MAX_TOKENS_FIELD, 1000000, 1},
        {SMOL_RULE_MAX_TOKENS_FIELD, 0, 0}, {SMOL_RULE_MAX_TOKENS_FIELD, 1000001, 0},
        {SMOL_RULE_N, 1, 1}, {SMOL_RULE_N, 16, 1}, {SMOL_RULE_N, 0, 0}, {SMOL_RULE_N, 17, 0},
        {SMOL_RULE_TOP_LOGPROBS, 0, 1}, {SMOL_RULE_TOP_LOGPROBS, 20, 1}, {SMOL_RULE_TOP_LOGPROBS, -1, 0},
        {SMOL_RULE_TOP_LOGPROBS, 21, 0},
        {SMOL_RULE_LOGIT_BIAS, -100, 1}, {SMOL_RULE_LOGIT_BIAS, 100, 1}, {SMOL_RULE_LOGIT_BIAS, -100.001, 0},
        {SMOL_RULE_LOGIT_BIAS, 100.001, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        char err[SMOL_ERRLEN] = "";
        enum smol_err e = smol_rule_number(t[i].r, t[i].v, NULL, err);
        ck_assert_msg(e == (t[i].ok ? SMOL_OK : SMOL_EINVAL), "case %zu: %s = %.10g gave %d (%s)", i,
                      smol_rule_range(t[i].r)->name, t[i].v, e, err);
        if (!t[i].ok)
            ck_assert_msg(strstr(err, smol_rule_range(t[i].r)->name), "case %zu: \"%s\" does not name the field", i, err);
    }
    /* NaN and the infinities are outside every range */
    for (int r = 0; r < SMOL_RULE_NUM_COUNT; r++) {
        char err[SMOL_ERRLEN];
        ck_assert_int_eq(smol_rule_number(r, NAN, NULL, err), SMOL_EINVAL);
        ck_assert_int_eq(smol_rule_number(r, INFINITY, NULL, err), SMOL_EINVAL);
        ck_assert_int_eq(smol_rule_number(r, -INFINITY, NULL, err), SMOL_EINVAL);
    }
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_rule_number(SMOL_RULE_MAX_TOKENS_FIELD, 2e6, "max_completion_tokens", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "'max_completion_tokens' must be an integer in [1, 1000000] (got 2000000)"), "%s", err);
    ck_assert_int_eq(smol_rule_number(SMOL_RULE_NUM_COUNT, 0, NULL, err), SMOL_EINVAL);
    ck_assert_ptr_null(smol_rule_range(SMOL_RULE_NUM_COUNT));
    /* top_logprobs > 0 needs logprobs */
    ck_assert_int_eq(smol_rule_logprobs(0, 0, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_logprobs(1, 20, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_logprobs(0, 1, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_logprobs(1, 21, err), SMOL_EINVAL);
}
END_TEST

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Unicode 15, Table 3-7 "Well-Formed UTF-8 Byte Sequences": the length of
 * the well-formed sequence at s[0..n), or 0 if none starts there. */
static int wf_len(const unsigned char *s, size_t n)
{
    static const struct { unsigned char lo[4], hi[4]; int len; } rows[] = {
        {{0x00}, {0x7F}, 1},
        {{0xC2, 0x80}, {0xDF, 0xBF}, 2},
        {{0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}, 3},
        {{0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}, 3},
        {{0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}, 3},
        {{0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}, 3},
        {{0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}, 4},
        {{0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}, 4},
        {{0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}, 4},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        if ((size_t)rows[r].len > n) continue;
        int ok = 1;
        for (int k = 0; k < rows[r].len && ok; k++) ok = s[k] >= rows[r].lo[k] && s[k] <= rows[r].hi[k];
        if (ok) return rows[r].len;
    }
    return 0;
}

static int wf(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = wf_len(s + i, n - i);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

START_TEST(utf8_against_unicode_table)
{
    unsigned char b[4];
    long checked = 0;
    for (unsigned x = 0; x < (1u << 24); x++) {   /* every 1-, 2- and 3-byte sequence */
        b[0] = (unsigned char)(x >> 16), b[1] = (unsigned char)(x >> 8), b[2] = (unsigned char)x;
        if (x < 256) {
            ck_assert_int_eq(smol_utf8_valid((char *)b + 2, 1), wf(b + 2, 1));
            checked++;
        }
        if (x < 65536) {
            ck_assert_int_eq(smol_utf8_valid((char *)b + 1, 2), wf(b + 1, 2));
            checked++;
        }
        if (smol_utf8_valid((char *)b, 3) != wf(b, 3))
            ck_abort_msg("%02x %02x %02x: rules say %d, Unicode says %d", b[0], b[1], b[2],
                         smol_utf8_valid((char *)b, 3), wf(b, 3));
        checked++;
    }
    /* four bytes: every lead byte with the boundary values of the others */
    static const unsigned char edge[] = {0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2,
                                         0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
    const size_t ne = sizeof edge;
    for (unsigned lead = 0; lead < 256; lead++)
        for (size_t i = 0; i < ne; i++)
            for (size_t j = 0; j < ne; j++)
                for (size_t k = 0; k < ne; k++) {
                    b[0] = (unsigned char)lead, b[1] = edge[i], b[2] = edge[j], b[3] = edge[k];
                    if (smol_utf8_valid((char *)b, 4) != wf(b, 4))
                        ck_abort_msg("%02x %02x %02x %02x: rules say %d, Unicode says %d", b[0], b[1], b[2], b[3],
                                     smol_utf8_valid((char *)b, 4), wf(b, 4));
                    checked++;
                }
    ck_assert_int_gt(checked, 16000000);
    /* the text rule: NUL is refused as well (no C string can carry it whole) */
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_rule_text("a\0b", 3, "content", err), SMOL_EUTF8);
    ck_assert_msg(strstr(err, "content") && strstr(err, "NUL"), "%s", err);
    ck_assert_int_eq(smol_rule_text("\xf0\x9f\x98\x80", 4, "content", err), SMOL_OK);
    ck_assert_int_eq(smol_rule_text("\xed\xa0\x80", 3, "stop[1]", err), SMOL_EUTF8);
    ck_assert_msg(strstr(err, "stop[1]"), "%s", err);
}
END_TEST

/* ---- ids, names, stops, counts -------------------------------------------- */

START_TEST(session_ids_and_tool_names)
{
    char s[300], err[SMOL_ERRLEN];
    memset(s, 'a', sizeof s);
    s[128] = 0;
    ck_assert(smol_session_id_ok(s));
    s[128] = 'a', s[129] = 0;
    ck_assert(!smol_session_id_ok(s));
    ck_assert_int_eq(smol_rule_session_id(s, "session_id", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "'session_id' must be 1-128 characters of [A-Za-z0-9._:-]"), "%s", err);
    ck_assert(smol_session_id_ok("a.B_9:z-"));
    static const char *const bad_ids[] = {"", "a b", "../x", "a/b", "\xc3\xa9", "a\tb", "a+b", "a@b", "a,b"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++)
        ck_assert_msg(!smol_session_id_ok(bad_ids[i]), "session id \"%s\" accepted", bad_ids[i]);
    /* every byte: exactly [A-Za-z0-9._:-] */
    for (int c = 1; c < 256; c++) {
        char one[2] = {(char)c, 0};
        int want = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                   c == '_' || c == ':' || c == '-';
        ck_assert_msg(smol_session_id_ok(one) == want, "session byte 0x%02x", c);
        int want_tool = want && c != '.' && c != ':';
        ck_assert_msg(smol_tool_name_ok(one) == want_tool, "tool byte 0x%02x", c);
        int want_tenant = want && c != ':';    /* [A-Za-z0-9._-]: no ':' and no '/' */
        ck_assert_msg(smol_tenant_ok(one) == want_tenant, "tenant byte 0x%02x", c);
    }
    /* tenants: "" is the default one; 64 bytes at most */
    ck_assert(smol_tenant_ok(""));
    ck_assert(smol_tenant_ok("key-1f.a_B"));
    memset(s, 't', sizeof s);
    s[64] = 0;
    ck_assert(smol_tenant_ok(s));
    s[64] = 't', s[65] = 0;
    ck_assert(!smol_tenant_ok(s));
    ck_assert_int_eq(smol_rule_tenant(s, "tenant", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "'tenant' must be at most 64 characters of [A-Za-z0-9._-]"), "%s", err);
    ck_assert_int_eq(smol_rule_tenant("a/b", "tenant", err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_tenant("", "tenant", err), SMOL_OK);
    memset(s, 'f', sizeof s);
    s[64] = 0;
    ck_assert(smol_tool_name_ok(s));
    s[64] = 'f', s[65] = 0;
    ck_assert(!smol_tool_name_ok(s));
    ck_assert(!smol_tool_name_ok(""));
    ck_assert_int_eq(smol_rule_tool_name("a.b", "tool_choice", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "tool_choice") && strstr(err, "a.b"), "%s", err);
    ck_assert_int_eq(smol_rule_tool_name("get-weather_1", "tool_choice", err), SMOL_OK);
}
END_TEST

START_TEST(stops_and_counts)
{
    char err[SMOL_ERRLEN], s[300];
    const char *eight[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    ck_assert_int_eq(smol_rule_stops(eight, 8, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_stops(eight, 9, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_stop_count(0, err), SMOL_OK);
    memset(s, 'x', sizeof s);
    s[256] = 0;
    ck_assert_int_eq(smol_rule_stop(s, 0, err), SMOL_OK);
    s[256] = 'x', s[257] = 0;
    ck_assert_int_eq(smol_rule_stop(s, 3, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "'stop[3]' is 257 bytes (at most 256)"), "%s", err);
    ck_assert_int_eq(smol_rule_stop("", 0, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_stop("\xff", 0, err), SMOL_EUTF8);
    const char *bad[2] = {"ok", "\xc3"};
    ck_assert_int_eq(smol_rule_stops(bad, 2, err), SMOL_EUTF8);

    ck_assert_int_eq(smol_rule_messages(0, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_messages(1, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_messages(SMOL_RULE_MAX_MESSAGES, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_messages(SMOL_RULE_MAX_MESSAGES + 1, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_bias_count(SMOL_RULE_MAX_BIAS, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_bias_count(SMOL_RULE_MAX_BIAS + 1, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_tools(SMOL_RULE_MAX_TOOLS, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_tools(SMOL_RULE_MAX_TOOLS + 1, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_rule_constraint_size(SMOL_RULE_MAX_CONSTRAINT_BYTES, "the schema", err), SMOL_OK);
    ck_assert_int_eq(smol_rule_constraint_size(SMOL_RULE_MAX_CONSTRAINT_BYTES + 1, "the schema", err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "the schema"), "%s", err);
    /* only a whole prompt over its size is 413 */
    ck_assert_int_eq(smol_rule_prompt_bytes(SMOL_RULE_MAX_PROMPT_BYTES, err), SMOL_OK);
    ck_assert_int_eq(smol_rule_prompt_bytes(SMOL_RULE_MAX_PROMPT_BYTES + 1, err), SMOL_ETOOLARGE);
}
END_TEST

/* ---- the HTTP map and the clock -------------------------------------------- */

START_TEST(http_map_and_clock)
{
    static const struct { enum smol_err e; int status; const char *type; } t[] = {
        {SMOL_OK, 200, ""},
        {SMOL_EINVAL, 400, "invalid_request_error"}, {SMOL_EUTF8, 400, "invalid_request_error"},
        {SMOL_ETOOLARGE, 413, "invalid_request_error"}, {SMOL_ECONTEXT, 400, "invalid_request_error"},
        {SMOL_EUNSUPPORTED, 400, "invalid_request_error"}, {SMOL_ENOSESSION, 404, "not_found_error"},
        {SMOL_EBUSY, 429, "rate_limit_error"}, {SMOL_EQUEUE_FULL, 429, "rate_limit_error"},
        {SMOL_ENOMEM, 503, "server_error"}, {SMOL_ESHUTDOWN, 503, "server_error"},
        {SMOL_EINTERNAL, 500, "server_error"}, {(enum smol_err)999, 500, "server_error"},
        {(enum smol_err)-1, 500, "server_error"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct smol_http_error h = smol_rule_http(t[i].e);
        ck_assert_int_eq(h.status, t[i].status);
        ck_assert_str_eq(h.type, t[i].type);
    }
    /* every code has an entry: a 4xx is the client's, a 5xx the server's */
    for (int e = 1; e < SMOL_ERR_COUNT; e++) {
        struct smol_http_error h = smol_rule_http(e);
        ck_assert_msg(h.status >= 400 && h.status < 600 && *h.type, "code %d unmapped", e);
        ck_assert_int_eq(!strcmp(h.type, "server_error"), h.status >= 500);
    }
    /* the clock: monotonic, in step across its three units */
    int64_t a = smol_mono_ns();
    double s0 = smol_mono_s(), m0 = smol_mono_ms();
    usleep(20000);
    int64_t b = smol_mono_ns();
    double s1 = smol_mono_s(), m1 = smol_mono_ms();
    ck_assert(b - a >= 20000000);
    ck_assert(s1 - s0 >= 0.02 && s1 - s0 < 5);
    ck_assert(m1 - m0 >= 20 && m1 - m0 < 5000);
    ck_assert(fabs(s0 * 1e3 - m0) < 1);   /* one time base */
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, numbers_at_their_bounds);
    tcase_add_test(tc, utf8_against_unicode_table);
    tcase_add_test(tc, session_ids_and_tool_names);
    tcase_add_test(tc, stops_and_counts);
    tcase_add_test(tc, http_map_and_clock);
    suite_add_tcase(s, tc);
    return s;
}

void test_init(SRunner *sr)
{
    (void)sr;
}
