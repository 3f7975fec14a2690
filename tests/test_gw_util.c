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
 *
 * The UI stream's events (gw_buf_sse_event, gw_buf_html): model text with a bare CR once broke
 * the stream, since ui_emit split the data only at LF while an SSE parser also ends a line at CR
 * (text after it read as a field of its own and dropped, or a blank line ending the event early:
 * "x\r\revent: done" gave the client a `done`).  sse_* read the gateway's bytes back with the
 * parser of the WHATWG spec (sse_parse below) and require the original text, CRs included, back
 * byte for byte; against the old split both fail.
 */
#include <check.h>
#include <stdlib.h>
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

/* ---- server-sent events ------------------------------------------------- */

/* The event stream parser of the WHATWG HTML spec (9.2.6, "Interpreting an event stream") as a
 * browser's EventSource runs it: lines end at CRLF, LF or CR; a blank line dispatches the event
 * (when its data buffer is not empty); `:` starts a comment; a field's value loses one leading
 * space; data lines are joined with LF.  Writes up to max events (type, data) and returns how many
 * were dispatched; an unterminated last event is dropped, as the spec does at end of stream. */
struct sse_ev { char type[32]; char data[512]; };

static int sse_parse(const char *s, size_t n, struct sse_ev *out, int max)
{
    char type[32] = "", data[512];
    size_t dlen = 0;
    int nev = 0;
    size_t i = 0;
    while (i < n) {
        size_t ls = i;
        while (i < n && s[i] != '\r' && s[i] != '\n') i++;
        if (i == n) break;                          /* no line end: not a line yet */
        size_t le = i;
        i += (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n') ? 2 : 1;
        if (le == ls) {                             /* blank line: dispatch */
            if (dlen > 0) {
                ck_assert_int_lt(nev, max);
                dlen--;                             /* the last LF */
                snprintf(out[nev].type, sizeof out[nev].type, "%s", type[0] ? type : "message");
                memcpy(out[nev].data, data, dlen);
                out[nev].data[dlen] = 0;
                nev++;
            }
            dlen = 0;
            type[0] = 0;
            continue;
        }
        if (s[ls] == ':') continue;
        const char *colon = memchr(s + ls, ':', le - ls);
        size_t flen = colon ? (size_t)(colon - (s + ls)) : le - ls;
        const char *v = colon ? colon + 1 : s + le;
        if (v < s + le && *v == ' ') v++;
        size_t vlen = (size_t)(s + le - v);
        if (flen == 5 && !memcmp(s + ls, "event", 5)) {
            ck_assert_uint_lt(vlen, sizeof type);
            memcpy(type, v, vlen);
            type[vlen] = 0;
        } else if (flen == 4 && !memcmp(s + ls, "data", 4)) {
            ck_assert_uint_lt(dlen + vlen + 1, sizeof data);
            memcpy(data + dlen, v, vlen);
            dlen += vlen;
            data[dlen++] = '\n';
        }                                           /* id, retry, anything else: ignored */
    }
    return nev;
}

/* The entities gw_buf_html writes, decoded as an HTML parser does (&#13; is a CR). */
static size_t html_unescape(const char *s, char *out)
{
    static const struct { const char *ent; char c; } t[] = {
        { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&#39;", '\'' },
        { "&#13;", '\r' } };
    size_t o = 0;
    while (*s) {
        size_t k = 0;
        for (; k < sizeof t / sizeof t[0]; k++)
            if (!strncmp(s, t[k].ent, strlen(t[k].ent))) break;
        if (k < sizeof t / sizeof t[0]) {
            out[o++] = t[k].c;
            s += strlen(t[k].ent);
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = 0;
    return o;
}

/* Model text as the UI stream sends it (ui.c: gw_buf_html, then one event), read back. */
static void ui_round_trip(const char *text)
{
    struct gw_buf h = { 0 }, b = { 0 };
    ck_assert_int_eq(gw_buf_html(&h, text, strlen(text)), 0);
    ck_assert_int_eq(gw_buf_str(&b, "event: content\ndata: before\n\n"), 0);
    ck_assert_int_eq(gw_buf_sse_event(&b, "content", h.p ? h.p : "", h.len), 0);
    ck_assert_int_eq(gw_buf_sse_event(&b, "done", "{}", 2), 0);
    struct sse_ev ev[4];
    int n = sse_parse(b.p, b.len, ev, 4);
    ck_assert_msg(n == 3, "%d events, not 3, for %s", n, b.p);
    ck_assert_str_eq(ev[0].type, "content");
    ck_assert_str_eq(ev[0].data, "before");
    ck_assert_str_eq(ev[1].type, "content");
    ck_assert_str_eq(ev[2].type, "done");
    ck_assert_str_eq(ev[2].data, "{}");
    char back[512];
    size_t len = html_unescape(ev[1].data, back);
    ck_assert_msg(len == strlen(text) && !memcmp(back, text, len), "text not read back as sent: %zu bytes of %zu", len, strlen(text));
    ck_assert_msg(!memchr(b.p, '\r', b.len), "a raw CR in the stream");
    gw_buf_deinit(&h);
    gw_buf_deinit(&b);
}

START_TEST(sse_cr_round_trip)
{
    static const char *const texts[] = {
        "plain", "a\r\nb", "a\rb", "\r", "\r\n", "\n", "a\r", "\ra", "a\r\r\nb", "a\n\rb", "\r\r",
        "\n\n", "a\r\n\r\nb", "x\r\revent: done\rdata: {}\r\r", "<b>\"it's\" & \r</b>",
        "trailing\r\n", "\r\n\r\n\r\n" };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) ui_round_trip(texts[i]);
}
END_TEST

START_TEST(sse_line_ends)
{
    /* every line end of the data (CRLF, LF, lone CR) is its own data: line; nothing else changes */
    struct gw_buf b = { 0 };
    ck_assert_int_eq(gw_buf_sse_event(&b, "done", "a\r\nb\rc\nd\r\re", 11), 0);
    ck_assert_str_eq(b.p, "event: done\ndata: a\ndata: b\ndata: c\ndata: d\ndata: \ndata: e\n\n");
    gw_buf_reset(&b);
    ck_assert_int_eq(gw_buf_sse_event(&b, "content", "", 0), 0);
    ck_assert_str_eq(b.p, "event: content\ndata: \n\n");
    gw_buf_reset(&b);
    ck_assert_int_eq(gw_buf_sse_event(&b, "content", "x\r", 2), 0);
    ck_assert_str_eq(b.p, "event: content\ndata: x\ndata: \n\n");
    struct sse_ev ev[2];
    ck_assert_int_eq(sse_parse(b.p, b.len, ev, 2), 1);
    ck_assert_str_eq(ev[0].data, "x\n");
    /* CR in HTML: an entity, never a raw byte */
    gw_buf_reset(&b);
    ck_assert_int_eq(gw_buf_html(&b, "a\r\nb\r", 5), 0);
    ck_assert_str_eq(b.p, "a&#13;\nb&#13;");
    gw_buf_deinit(&b);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("gw_util");
    TCase *tc = tcase_create("random");
    tcase_add_test(tc, random_alnum_ids);
    tcase_add_test(tc, random_alnum_failure_refuses);
    suite_add_tcase(s, tc);
    tc = tcase_create("sse");
    tcase_add_test(tc, sse_cr_round_trip);
    tcase_add_test(tc, sse_line_ends);
    suite_add_tcase(s, tc);
    return s;
}

void test_init(SRunner *sr)
{
    (void)sr;
}
