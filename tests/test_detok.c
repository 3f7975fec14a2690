/*
 * test_detok.c - the streaming detokenizer: UTF-8 held back across tokens,
 * invalid bytes as U+FFFD, stop strings across every token boundary, flush.
 *
 * Helpers feed a byte string split at given cut points and check, after
 * every push, that what came out is valid UTF-8 on its own and never part of
 * the matched stop string.  A randomized test compares against a direct
 * reference: the stop occurrence that ends first (ties: the longest).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/text/detok.h"

#define FFFD "\xEF\xBF\xBD"

/* An independent validator (the textbook table), not the module's. */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c <= 0x7F) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) k = 2;
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else return 0;
        if (i + k >= n) return 0;                       /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t j = 2; j <= k; j++) if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
        i += k + 1;
    }
    return 1;
}

struct result {
    char text[32768];
    size_t len;
    int stopped, stop_index;
    int bad_chunk;              /* some single output was not valid UTF-8 */
};

/* Pushes data[0, n) split at the sorted cut positions, then flushes if asked. */
static void feed(const char *const *stops, size_t n_stops, const char *data, size_t n,
                 const size_t *cuts, size_t n_cuts, int flush, struct result *r)
{
    struct smol_detok d;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_detok_init(&d, stops, n_stops, err), SMOL_OK);
    memset(r, 0, sizeof *r);
    r->stop_index = -1;
    size_t at = 0;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t to = c < n_cuts ? cuts[c] : n;
        struct smol_detok_out o;
        ck_assert_int_eq(smol_detok_push(&d, data + at, to - at, &o), SMOL_OK);
        if (!valid_utf8((const unsigned char *)o.text, o.len)) r->bad_chunk = 1;
        ck_assert_uint_le(r->len + o.len, sizeof r->text);
        memcpy(r->text + r->len, o.text, o.len);
        r->len += o.len;
        r->stopped = o.stopped;
        r->stop_index = o.stop_index;
        at = to;
    }
    if (flush) {
        struct smol_detok_out o;
        ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
        if (!valid_utf8((const unsigned char *)o.text, o.len)) r->bad_chunk = 1;
        memcpy(r->text + r->len, o.text, o.len);
        r->len += o.len;
        r->stopped = o.stopped;
        r->stop_index = o.stop_index;
    }
    smol_detok_deinit(&d);
}

static void expect_text(const struct result *r, const char *want)
{
    ck_assert_msg(r->len == strlen(want) && memcmp(r->text, want, r->len) == 0,
                  "got \"%.*s\" (%zu bytes), want \"%s\"", (int)r->len, r->text, r->len, want);
    ck_assert_msg(!r->bad_chunk, "an output chunk was not valid UTF-8");
}

/* ---------------------------------------------------------------- UTF-8 --- */

START_TEST(test_ascii_passthrough)
{
    struct smol_detok d;
    struct smol_detok_out o;
    ck_assert_int_eq(smol_detok_init(&d, NULL, 0, NULL), SMOL_OK);
    ck_assert_int_eq(smol_detok_push(&d, "Hello", 5, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 5);
    ck_assert(memcmp(o.text, "Hello", 5) == 0);
    ck_assert(!o.stopped);
    ck_assert_int_eq(o.stop_index, -1);
    ck_assert_int_eq(smol_detok_push(&d, " <|im", 5, &o), SMOL_OK);   /* no stops: nothing held */
    ck_assert_uint_eq(o.len, 5);
    ck_assert_int_eq(smol_detok_push(&d, "", 0, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 0);
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 0);
    smol_detok_deinit(&d);
    smol_detok_deinit(&d);                                              /* twice is safe */
}
END_TEST

/* Every way of splitting the string into tokens: the output is the input,
 * each chunk valid, and a character comes out exactly when its last byte does. */
START_TEST(test_multibyte_every_split)
{
    static const char *const cases[] = { "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                         "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80" "b" };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const char *s = cases[ci];
        size_t n = strlen(s);
        /* character boundaries */
        int boundary[32] = { 0 };
        for (size_t i = 0; i <= n; i++) boundary[i] = i == n || ((unsigned char)s[i] & 0xC0) != 0x80;
        for (uint32_t mask = 0; mask < (1u << (n - 1)); mask++) {
            struct smol_detok d;
            ck_assert_int_eq(smol_detok_init(&d, NULL, 0, NULL), SMOL_OK);
            char out[64];
            size_t out_len = 0, at = 0;
            for (size_t cut = 1; cut <= n; cut++) {
                if (cut < n && !(mask & (1u << (cut - 1)))) continue;
                struct smol_detok_out o;
                ck_assert_int_eq(smol_detok_push(&d, s + at, cut - at, &o), SMOL_OK);
                ck_assert(valid_utf8((const unsigned char *)o.text, o.len));
                memcpy(out + out_len, o.text, o.len);
                out_len += o.len;
                size_t want = cut;
                while (!boundary[want]) want--;
                ck_assert_uint_eq(out_len, want);
                at = cut;
            }
            struct smol_detok_out o;
            ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
            ck_assert_uint_eq(o.len, 0);
            ck_assert(out_len == n && memcmp(out, s, n) == 0);
            smol_detok_deinit(&d);
        }
    }
}
END_TEST

START_TEST(test_invalid_sequences)
{
    static const struct { const char *in, *want; } t[] = {
        { "\x80", FFFD },                                   /* stray continuation */
        { "a\xFF" "b", "a" FFFD "b" },                      /* never valid */
        { "\xC0\x80", FFFD FFFD },                          /* overlong lead */
        { "\xE0\x80\x80", FFFD FFFD FFFD },                 /* overlong 3-byte */
        { "\xED\xA0\x80", FFFD FFFD FFFD },                 /* surrogate */
        { "\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD },        /* above U+10FFFF */
        { "\xE2\x82" "A", FFFD "A" },                       /* truncated, then ASCII */
        { "\xF0\x9F\x98" "\xC3\xA9", FFFD "\xC3\xA9" },     /* truncated, then a valid char */
        { "\xF0\x9F\x98", FFFD },                           /* truncated at the end (flush) */
        { "\xC3\xA9\xF0\x9F\x98\x80", "\xC3\xA9\xF0\x9F\x98\x80" },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        size_t n = strlen(t[i].in);
        struct result r;
        feed(NULL, 0, t[i].in, n, NULL, 0, 1, &r);            /* one token */
        expect_text(&r, t[i].want);
        size_t cuts[8];
        for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
        feed(NULL, 0, t[i].in, n, cuts, n - 1, 1, &r);        /* one byte per token */
        expect_text(&r, t[i].want);
    }
    /* a broken sequence is decided by the byte that breaks it, without waiting for flush */
    struct smol_detok d;
    struct smol_detok_out o;
    ck_assert_int_eq(smol_detok_init(&d, NULL, 0, NULL), SMOL_OK);
    ck_assert_int_eq(smol_detok_push(&d, "\xE2\x82", 2, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 0);
    ck_assert_int_eq(smol_detok_push(&d, "A", 1, &o), SMOL_OK);
    ck_assert(o.len == 4 && memcmp(o.text, FFFD "A", 4) == 0);
    smol_detok_deinit(&d);
}
END_TEST

/* ---------------------------------------------------------------- stops --- */

/* All 1- and 2-cut splits of text; the output is want, stopped on stop `idx`,
 * and at no point does a byte of the stop come out. */
static void stop_every_split(const char *const *stops, size_t n_stops, const char *text,
                             const char *want, int idx)
{
    size_t n = strlen(text);
    struct result r;
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = i; j <= n; j++) {
            size_t cuts[2] = { i, j };
            feed(stops, n_stops, text, n, cuts, 2, 0, &r);
            expect_text(&r, want);
            ck_assert_msg(r.stopped && r.stop_index == idx, "cuts %zu,%zu: stopped %d index %d",
                          i, j, r.stopped, r.stop_index);
            feed(stops, n_stops, text, n, cuts, 2, 1, &r);    /* flush after a stop adds nothing */
            expect_text(&r, want);
        }
    }
    size_t cuts[256];
    for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
    feed(stops, n_stops, text, n, cuts, n - 1, 0, &r);
    expect_text(&r, want);
    ck_assert(r.stopped && r.stop_index == idx);
}

START_TEST(test_stop_every_split)
{
    const char *stops[] = { "<|im_end|>" };
    stop_every_split(stops, 1, "Hello<|im_end|>world", "Hello", 0);
    const char *mb[] = { "zz", "\xC2\xAB" "fin" "\xC2\xBB" };  /* «fin» */
    stop_every_split(mb, 2, "caf\xC3\xA9 \xC2\xAB" "fin" "\xC2\xBB" " x", "caf\xC3\xA9 ", 1);
}
END_TEST

START_TEST(test_stop_never_leaks)
{
    /* byte by byte, nothing of "<|im_end|>" may come out before the match */
    struct smol_detok d;
    struct smol_detok_out o;
    const char *stops[] = { "<|im_end|>" };
    const char *text = "ok<|im_end|>";
    ck_assert_int_eq(smol_detok_init(&d, stops, 1, NULL), SMOL_OK);
    size_t total = 0;
    for (size_t i = 0; text[i]; i++) {
        ck_assert_int_eq(smol_detok_push(&d, text + i, 1, &o), SMOL_OK);
        ck_assert(memchr(o.text, '<', o.len) == NULL);
        total += o.len;
        ck_assert_int_eq(o.stopped, text[i + 1] == 0);
    }
    ck_assert_uint_eq(total, 2);
    ck_assert_int_eq(smol_detok_push(&d, "more", 4, &o), SMOL_OK);    /* after a stop: nothing */
    ck_assert(o.len == 0 && o.stopped && o.stop_index == 0);
    smol_detok_deinit(&d);
}
END_TEST

START_TEST(test_overlapping_stops)
{
    const char *ab_abc[] = { "ab", "abc" }, *abc_ab[] = { "abc", "ab" };
    stop_every_split(ab_abc, 2, "aab", "a", 0);
    stop_every_split(abc_ab, 2, "aab", "a", 1);
    stop_every_split(abc_ab, 2, "aabc", "a", 1);     /* "ab" is complete first */
    /* the stop that ends first wins even if another started earlier */
    const char *abc_b[] = { "abc", "b" };
    stop_every_split(abc_b, 2, "xabc", "xa", 1);
    /* same end: the longest */
    const char *b_ab[] = { "b", "ab" };
    stop_every_split(b_ab, 2, "xab", "x", 1);
    /* self-overlapping prefix: "aa" is held, then one "a" released */
    const char *aab[] = { "aab" };
    stop_every_split(aab, 1, "aaab", "a", 0);
    /* duplicates: the first listed */
    const char *dup[] = { "q", "q" };
    stop_every_split(dup, 2, "pq", "p", 0);
}
END_TEST

START_TEST(test_stop_at_start)
{
    const char *stops[] = { "STOP" };
    struct smol_detok d;
    struct smol_detok_out o;
    ck_assert_int_eq(smol_detok_init(&d, stops, 1, NULL), SMOL_OK);
    ck_assert_int_eq(smol_detok_push(&d, "STOPxyz", 7, &o), SMOL_OK);
    ck_assert(o.len == 0 && o.stopped && o.stop_index == 0);
    smol_detok_deinit(&d);
    stop_every_split(stops, 1, "STOP", "", 0);
}
END_TEST

START_TEST(test_false_prefix_released)
{
    const char *stops[] = { "<|im_end|>" };
    struct smol_detok d;
    struct smol_detok_out o;
    ck_assert_int_eq(smol_detok_init(&d, stops, 1, NULL), SMOL_OK);
    ck_assert_int_eq(smol_detok_push(&d, "a<|im", 5, &o), SMOL_OK);
    ck_assert(o.len == 1 && o.text[0] == 'a');
    ck_assert_int_eq(smol_detok_push(&d, "_", 1, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 0);                      /* "<|im_" is still a prefix */
    ck_assert_int_eq(smol_detok_push(&d, "start|>", 7, &o), SMOL_OK);
    ck_assert(o.len == 12 && memcmp(o.text, "<|im_start|>", 12) == 0);
    ck_assert(!o.stopped);
    ck_assert_int_eq(smol_detok_push(&d, "<", 1, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 0);
    ck_assert_int_eq(smol_detok_push(&d, "<", 1, &o), SMOL_OK);  /* first '<' released, second held */
    ck_assert(o.len == 1 && o.text[0] == '<');
    ck_assert_int_eq(smol_detok_push(&d, "x", 1, &o), SMOL_OK);
    ck_assert(o.len == 2 && memcmp(o.text, "<x", 2) == 0);
    smol_detok_deinit(&d);
}
END_TEST

START_TEST(test_flush)
{
    const char *stops[] = { "<|im_end|>", FFFD };
    struct smol_detok d;
    struct smol_detok_out o;
    ck_assert_int_eq(smol_detok_init(&d, stops, 1, NULL), SMOL_OK);
    /* a held prefix comes out at flush */
    ck_assert_int_eq(smol_detok_push(&d, "x<|im_e", 7, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 1);
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
    ck_assert(o.len == 6 && memcmp(o.text, "<|im_e", 6) == 0 && !o.stopped);
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);          /* nothing twice */
    ck_assert_uint_eq(o.len, 0);
    /* usable after flush; a truncated character becomes U+FFFD */
    ck_assert_int_eq(smol_detok_push(&d, "y\xE2\x82", 3, &o), SMOL_OK);
    ck_assert(o.len == 1 && o.text[0] == 'y');
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
    ck_assert(o.len == 3 && memcmp(o.text, FFFD, 3) == 0);
    smol_detok_deinit(&d);

    /* the U+FFFD that flush produces can complete a stop: no text, stopped */
    ck_assert_int_eq(smol_detok_init(&d, stops, 2, NULL), SMOL_OK);
    ck_assert_int_eq(smol_detok_push(&d, "z\xF0\x9F", 3, &o), SMOL_OK);
    ck_assert_uint_eq(o.len, 1);
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
    ck_assert(o.len == 0 && o.stopped && o.stop_index == 1);
    ck_assert_int_eq(smol_detok_flush(&d, &o), SMOL_OK);
    ck_assert(o.len == 0 && o.stopped);
    smol_detok_deinit(&d);
}
END_TEST

START_TEST(test_init_errors)
{
    struct smol_detok d;
    char err[SMOL_ERRLEN];
    char long_stop[SMOL_DETOK_MAX_STOP_LEN + 2];
    memset(long_stop, 'x', sizeof long_stop - 1);
    long_stop[sizeof long_stop - 1] = 0;
    const char *empty[] = { "ok", "" }, *null_one[] = { NULL }, *too_long[] = { long_stop },
               *bad_utf8[] = { "a\xC3" }, *many[SMOL_DETOK_MAX_STOPS + 1];
    for (size_t i = 0; i <= SMOL_DETOK_MAX_STOPS; i++) many[i] = "s";
    const struct { const char *const *stops; size_t n; enum smol_err want; } t[] = {
        { NULL, 1, SMOL_EINVAL }, { empty, 2, SMOL_EINVAL }, { null_one, 1, SMOL_EINVAL },
        { too_long, 1, SMOL_EINVAL }, { bad_utf8, 1, SMOL_EUTF8 },
        { many, SMOL_DETOK_MAX_STOPS + 1, SMOL_EINVAL },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        err[0] = 0;
        ck_assert_int_eq(smol_detok_init(&d, t[i].stops, t[i].n, err), t[i].want);
        ck_assert_msg(err[0] != 0, "case %zu: no message", i);
        smol_detok_deinit(&d);
    }
    /* the longest allowed and the most allowed are fine */
    long_stop[SMOL_DETOK_MAX_STOP_LEN] = 0;
    ck_assert_int_eq(smol_detok_init(&d, too_long, 1, err), SMOL_OK);
    smol_detok_deinit(&d);
    ck_assert_int_eq(smol_detok_init(&d, many, SMOL_DETOK_MAX_STOPS, err), SMOL_OK);
    smol_detok_deinit(&d);
}
END_TEST

START_TEST(test_large_push)
{
    /* a push far larger than the initial buffer, held prefix and all */
    static char big[20001];
    for (size_t i = 0; i < 20000; i++) big[i] = (char)('a' + i % 7);
    big[19999] = '<';
    const char *stops[] = { "<|" };
    struct result r;
    feed(stops, 1, big, 20000, NULL, 0, 0, &r);
    ck_assert(r.len == 19999 && memcmp(r.text, big, 19999) == 0 && !r.stopped);
}
END_TEST

/* ------------------------------------------------------------ randomized --- */

static uint64_t rng_state = 0x1234567ull;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static const char *const ALPHA[] = { "a", "b", "c", "\xC3\xA9", "\xF0\x9F\x98\x80" };

static size_t rand_string(char *out, size_t max_chars)
{
    size_t n = 0, chars = 1 + rnd((uint32_t)max_chars);
    for (size_t i = 0; i < chars; i++) {
        const char *c = ALPHA[rnd(5)];
        memcpy(out + n, c, strlen(c));
        n += strlen(c);
    }
    out[n] = 0;
    return n;
}

START_TEST(test_random_against_reference)
{
    for (int iter = 0; iter < 3000; iter++) {
        char text[512], stop_mem[4][32];
        const char *stops[4];
        size_t n = rand_string(text, 40), ns = 1 + rnd(3);
        for (size_t i = 0; i < ns; i++) {
            rand_string(stop_mem[i], 3);
            stops[i] = stop_mem[i];
        }
        /* reference: the earliest end, then the longest, then the first listed */
        size_t want_len = n;
        int want_idx = -1;
        for (size_t e = 1; e <= n && want_idx < 0; e++) {
            size_t best_len = 0;
            for (size_t i = 0; i < ns; i++) {
                size_t l = strlen(stops[i]);
                if (l <= e && l > best_len && memcmp(text + e - l, stops[i], l) == 0) {
                    best_len = l;
                    want_idx = (int)i;
                }
            }
            if (want_idx >= 0) want_len = e - best_len;
        }
        size_t cuts[64], nc = rnd(10);
        for (size_t i = 0; i < nc; i++) cuts[i] = rnd((uint32_t)n + 1);
        for (size_t i = 1; i < nc; i++)                     /* sort */
            for (size_t j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                size_t t = cuts[j]; cuts[j] = cuts[j - 1]; cuts[j - 1] = t;
            }
        struct result r;
        feed(stops, ns, text, n, cuts, nc, 1, &r);
        ck_assert_msg(r.len == want_len && memcmp(r.text, text, want_len) == 0,
                      "iter %d: \"%s\" stops %zu: got %zu bytes, want %zu", iter, text, ns, r.len, want_len);
        ck_assert_int_eq(r.stop_index, want_idx);
        ck_assert_int_eq(r.stopped, want_idx >= 0);
        ck_assert(!r.bad_chunk);
    }
}
END_TEST

static Suite *detok_suite(void)
{
    Suite *s = suite_create("detok");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ascii_passthrough);
    tcase_add_test(tc, test_multibyte_every_split);
    tcase_add_test(tc, test_invalid_sequences);
    tcase_add_test(tc, test_stop_every_split);
    tcase_add_test(tc, test_stop_never_leaks);
    tcase_add_test(tc, test_overlapping_stops);
    tcase_add_test(tc, test_stop_at_start);
    tcase_add_test(tc, test_false_prefix_released);
    tcase_add_test(tc, test_flush);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_large_push);
    tcase_add_test(tc, test_random_against_reference);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return detok_suite();
}
