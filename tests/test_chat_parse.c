/*
 * test_chat_parse.c - the incremental reasoning/content/tool-call parser.
 *
 * Each case is checked whole, then fed split at every byte (two pieces),
 * byte by byte, and with the tags as special pieces: the aggregated result
 * must not depend on how the text arrives, and every fragment must end on
 * a UTF-8 character boundary.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/text/chat_parse.h"

struct result {
    struct smol_chat_buf reasoning, content, calls;
    int n_events, bad_utf8, empty, order_bad;
    int last_kind;
};

static void collect(void *ud, const struct smol_chat_event *ev)
{
    struct result *r = ud;
    r->n_events++;
    switch (ev->kind) {
    case SMOL_CHAT_EV_REASONING:
    case SMOL_CHAT_EV_CONTENT:
        if (!ev->len) r->empty++;
        if (!smol_utf8_valid(ev->text, ev->len)) r->bad_utf8++;
        smol_chat_buf_append(ev->kind == SMOL_CHAT_EV_REASONING ? &r->reasoning : &r->content, ev->text, ev->len);
        if (ev->kind == SMOL_CHAT_EV_REASONING && r->last_kind != -1 && r->last_kind != SMOL_CHAT_EV_REASONING)
            r->order_bad++;   /* reasoning only comes first */
        break;
    case SMOL_CHAT_EV_TOOL_CALL: {
        char idx[16];
        snprintf(idx, sizeof idx, "%d:", ev->index);
        smol_chat_buf_puts(&r->calls, idx);
        smol_chat_buf_puts(&r->calls, ev->name);
        smol_chat_buf_puts(&r->calls, "|");
        smol_chat_buf_puts(&r->calls, ev->arguments);
        smol_chat_buf_puts(&r->calls, "\n");
        break;
    }
    }
    r->last_kind = (int)ev->kind;
}

static void result_init(struct result *r)
{
    memset(r, 0, sizeof *r);
    r->last_kind = -1;
    smol_chat_buf_init(&r->reasoning);
    smol_chat_buf_init(&r->content);
    smol_chat_buf_init(&r->calls);
}

static void result_deinit(struct result *r)
{
    smol_chat_buf_deinit(&r->reasoning);
    smol_chat_buf_deinit(&r->content);
    smol_chat_buf_deinit(&r->calls);
}

static const char *S(const struct smol_chat_buf *b) { return b->data ? b->data : ""; }

struct outcome {
    char *reasoning, *content, *calls;
    int unclosed, malformed, n_calls;
};

static void outcome_free(struct outcome *o)
{
    free(o->reasoning);
    free(o->content);
    free(o->calls);
}

/* Feeds text cut at the given byte offsets (sorted, inside (0, len)). */
static struct outcome run_cuts(enum smol_chat_start st, const char *text, const size_t *cuts, size_t n_cuts)
{
    struct result r;
    struct smol_chat_parser p;
    result_init(&r);
    smol_chat_parser_init(&p, st, collect, &r);
    size_t prev = 0, len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        ck_assert_int_eq(smol_chat_parser_feed(&p, text + prev, end - prev, 0), SMOL_OK);
        prev = end;
    }
    ck_assert_int_eq(smol_chat_parser_finish(&p), SMOL_OK);
    ck_assert_int_eq(r.bad_utf8, 0);
    ck_assert_int_eq(r.empty, 0);
    ck_assert_int_eq(r.order_bad, 0);
    struct outcome o = {strdup(S(&r.reasoning)), strdup(S(&r.content)), strdup(S(&r.calls)), p.unclosed_think,
                        p.n_malformed, p.n_tool_calls};
    smol_chat_parser_deinit(&p);
    result_deinit(&r);
    return o;
}

static void same(const struct outcome *a, const struct outcome *b, const char *what, size_t at)
{
    ck_assert_msg(!strcmp(a->reasoning, b->reasoning) && !strcmp(a->content, b->content) &&
                  !strcmp(a->calls, b->calls) && a->unclosed == b->unclosed && a->malformed == b->malformed,
                  "%s at %zu: reasoning \"%s\" vs \"%s\", content \"%s\" vs \"%s\", calls \"%s\" vs \"%s\"", what, at,
                  a->reasoning, b->reasoning, a->content, b->content, a->calls, b->calls);
}

/* Checks a case whole and under every split; returns the whole outcome. */
static struct outcome check_case(enum smol_chat_start st, const char *text, const char *reasoning,
                                 const char *content, const char *calls)
{
    struct outcome whole = run_cuts(st, text, NULL, 0);
    ck_assert_msg(!strcmp(whole.reasoning, reasoning), "%s: reasoning \"%s\", want \"%s\"", text, whole.reasoning, reasoning);
    ck_assert_msg(!strcmp(whole.content, content), "%s: content \"%s\", want \"%s\"", text, whole.content, content);
    ck_assert_msg(!strcmp(whole.calls, calls), "%s: calls \"%s\", want \"%s\"", text, whole.calls, calls);
    size_t len = strlen(text);
    for (size_t c = 1; c < len; c++) {
        struct outcome o = run_cuts(st, text, &c, 1);
        same(&whole, &o, "split", c);
        outcome_free(&o);
    }
    size_t *all = calloc(len + 1, sizeof *all);
    for (size_t i = 0; i + 1 < len; i++) all[i] = i + 1;
    struct outcome o = run_cuts(st, text, all, len ? len - 1 : 0);
    same(&whole, &o, "byte by byte", 0);
    outcome_free(&o);
    /* every split into three */
    for (size_t a = 1; a + 1 < len && len < 120; a++)
        for (size_t b = a + 1; b < len; b++) {
            size_t cuts[2] = {a, b};
            struct outcome o3 = run_cuts(st, text, cuts, 2);
            same(&whole, &o3, "three pieces", a * 1000 + b);
            outcome_free(&o3);
        }
    free(all);
    return whole;
}

static void check(enum smol_chat_start st, const char *text, const char *reasoning, const char *content, const char *calls)
{
    struct outcome o = check_case(st, text, reasoning, content, calls);
    outcome_free(&o);
}

/* ------------------------------------------------------------- cases */

START_TEST(think_mode)
{
    check(SMOL_CHAT_START_CONTENT, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "Let me think.",
          "The answer is 4.", "");
    check(SMOL_CHAT_START_CONTENT, "\n\n<think>a\n\nb</think>c\n\nd\n", "a\n\nb", "c\n\nd", "");
    check(SMOL_CHAT_START_CONTENT, "<think></think>\n\nx", "", "x", "");
    check(SMOL_CHAT_START_CONTENT, "<think>\n\n</think>\n", "", "", "");
    /* the model skips thinking in think mode */
    check(SMOL_CHAT_START_CONTENT, "Just the answer.", "", "Just the answer.", "");
}
END_TEST

START_TEST(no_think_mode)
{
    check(SMOL_CHAT_START_CONTENT, "The answer is 4.\n", "", "The answer is 4.", "");
    check(SMOL_CHAT_START_CONTENT, "\nLine 1\n\n  Line 2\t\n", "", "Line 1\n\n  Line 2", "");
    /* <think> only opens reasoning at the start; later tags are literal */
    check(SMOL_CHAT_START_CONTENT, "Hello <think> world </think> x", "", "Hello <think> world </think> x", "");
    check(SMOL_CHAT_START_CONTENT, "a</think>b", "", "a</think>b", "");
}
END_TEST

START_TEST(prefilled_reasoning_and_plain)
{
    check(SMOL_CHAT_START_REASONING, "\nstill thinking\n</think>\n\nanswer", "still thinking", "answer", "");
    check(SMOL_CHAT_START_PLAIN, "\n<think>x</think>\n<tool_call>{}</tool_call> ", "",
          "\n<think>x</think>\n<tool_call>{}</tool_call> ", "");
}
END_TEST

START_TEST(tool_calls)
{
    check(SMOL_CHAT_START_CONTENT,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"opts\": {\"units\": [\"c\", 1.5, "
          "null, true], \"q\": \"a\\\"b\\\\c\\n\"}}}\n</tool_call>",
          "", "", "0:get_weather|{\"city\": \"Paris\", \"opts\": {\"units\": [\"c\", 1.5, null, true], \"q\": \"a\\\"b\\\\c\\n\"}}\n");
    check(SMOL_CHAT_START_CONTENT,
          "<think>\nI should call two tools. <tool_call> here is only a thought.\n</think>\n\nChecking.\n"
          "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
          "\"arguments\": {\"x\": [1, {\"y\": \"日本\"}]}}\n</tool_call>\n",
          "I should call two tools. <tool_call> here is only a thought.", "Checking.",
          "0:a|{}\n1:b|{\"x\": [1, {\"y\": \"日本\"}]}\n");
    /* arguments already serialised, absent, and text around calls */
    check(SMOL_CHAT_START_CONTENT,
          "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"k\\\": 1}\"}</tool_call> then <tool_call>{\"name\": \"n\"}</tool_call>",
          "", "then", "0:s|{\"k\": 1}\n1:n|{}\n");
    /* arguments come back byte for byte as written (compact, as the tool
     * grammar makes them; odd spacing; number spellings), so the call
     * renders back to the same tokens (chat_template.c, issue 29) */
    check(SMOL_CHAT_START_CONTENT,
          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1.50,\"b\":[1 ,2],\"c\":\"\\u00e9\"} }\n</tool_call>",
          "", "", "0:f|{\"a\":1.50,\"b\":[1 ,2],\"c\":\"\\u00e9\"}\n");
    /* unclosed at the end but complete JSON: still a call */
    check(SMOL_CHAT_START_CONTENT, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "", "",
          "0:f|{\"a\": 1}\n");
}
END_TEST

START_TEST(malformed_tool_calls)
{
    struct outcome o = check_case(SMOL_CHAT_START_CONTENT, "Try: <tool_call>{not json}</tool_call> done", "",
                                  "Try:<tool_call>{not json}</tool_call>done", "");
    ck_assert_int_eq(o.malformed, 1);
    outcome_free(&o);
    check(SMOL_CHAT_START_CONTENT, "<tool_call>{\"arguments\": {}}</tool_call>", "",
          "<tool_call>{\"arguments\": {}}</tool_call>", "");
    check(SMOL_CHAT_START_CONTENT, "<tool_call>{\"name\": 3}</tool_call>", "", "<tool_call>{\"name\": 3}</tool_call>", "");
    check(SMOL_CHAT_START_CONTENT, "<tool_call>[1, 2]</tool_call>", "", "<tool_call>[1, 2]</tool_call>", "");
    /* unclosed and incomplete: raw text, no closing tag invented */
    o = check_case(SMOL_CHAT_START_CONTENT, "<tool_call>\n{\"name\": \"f\", \"argu", "", "<tool_call>\n{\"name\": \"f\", \"argu", "");
    ck_assert_int_eq(o.malformed, 1);
    outcome_free(&o);
}
END_TEST

START_TEST(unclosed_think)
{
    struct outcome o = check_case(SMOL_CHAT_START_CONTENT, "<think>\nhmm, still going\n", "hmm, still going", "", "");
    ck_assert_int_eq(o.unclosed, 1);
    outcome_free(&o);
    o = check_case(SMOL_CHAT_START_CONTENT, "<think>x</think>y", "x", "y", "");
    ck_assert_int_eq(o.unclosed, 0);
    outcome_free(&o);
    /* a tag prefix left at the end is text */
    check(SMOL_CHAT_START_CONTENT, "<think>a </thi", "a </thi", "", "");
    check(SMOL_CHAT_START_CONTENT, "ok <tool_ca", "", "ok <tool_ca", "");
    check(SMOL_CHAT_START_CONTENT, "<thin", "", "<thin", "");
}
END_TEST

START_TEST(utf8_boundaries)
{
    /* every split in the middle of a character is held, fragments stay valid */
    check(SMOL_CHAT_START_CONTENT, "<think>héllo 日本 🙂</think>\n\nçà 🇫🇷 ok", "héllo 日本 🙂", "çà 🇫🇷 ok", "");
    check(SMOL_CHAT_START_PLAIN, "é🙂日", "", "é🙂日", "");
}
END_TEST

/* Pieces with a special flag, as the detokenizer delivers them. */
struct piece { const char *s; int special; };

static struct outcome run_pieces(enum smol_chat_start st, const struct piece *pc, size_t n)
{
    struct result r;
    struct smol_chat_parser p;
    result_init(&r);
    smol_chat_parser_init(&p, st, collect, &r);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(smol_chat_parser_feed(&p, pc[i].s, strlen(pc[i].s), pc[i].special), SMOL_OK);
    ck_assert_int_eq(smol_chat_parser_finish(&p), SMOL_OK);
    ck_assert_int_eq(smol_chat_parser_feed(&p, "x", 1, 0), SMOL_EINVAL);
    ck_assert_int_eq(smol_chat_parser_finish(&p), SMOL_OK);
    struct outcome o = {strdup(S(&r.reasoning)), strdup(S(&r.content)), strdup(S(&r.calls)), p.unclosed_think,
                        p.n_malformed, p.n_tool_calls};
    smol_chat_parser_deinit(&p);
    result_deinit(&r);
    return o;
}

START_TEST(special_pieces)
{
    const struct piece a[] = {{"<think>", 1}, {"\n", 0}, {"Let", 0}, {" me", 0}, {" see", 0}, {".\n", 0},
                              {"</think>", 1}, {"\n\n", 0}, {"Call", 0}, {"ing", 0}, {".\n", 0}, {"<tool_call>", 1},
                              {"\n{\"name\": \"f\", ", 0}, {"\"arguments\": {\"x\": 1}}\n", 0}, {"</tool_call>", 1},
                              {"<|im_end|>", 1}};
    struct outcome o = run_pieces(SMOL_CHAT_START_CONTENT, a, sizeof a / sizeof a[0]);
    ck_assert_str_eq(o.reasoning, "Let me see.");
    ck_assert_str_eq(o.content, "Calling.");
    ck_assert_str_eq(o.calls, "0:f|{\"x\": 1}\n");
    ck_assert_int_eq(o.n_calls, 1);
    outcome_free(&o);
    /* a partial text tag before a special piece is text; specials out of place are literal */
    const struct piece b[] = {{"x <thi", 0}, {"</think>", 1}, {"<think>", 1}, {"<|im_end|>", 1}, {" y", 0}};
    o = run_pieces(SMOL_CHAT_START_CONTENT, b, sizeof b / sizeof b[0]);
    ck_assert_str_eq(o.reasoning, "");
    ck_assert_str_eq(o.content, "x <thi</think><think> y");
    outcome_free(&o);
    /* no-think generation: starts after "</think>\n" */
    const struct piece c[] = {{"\n", 0}, {"Paris", 0}, {".", 0}, {"<|im_end|>", 1}};
    o = run_pieces(SMOL_CHAT_START_CONTENT, c, 4);
    ck_assert_str_eq(o.content, "Paris.");
    outcome_free(&o);
    /* reasoning that mentions a tool call tag as a special piece keeps it as text */
    const struct piece d[] = {{"<think>", 1}, {"use ", 0}, {"<tool_call>", 1}, {" maybe", 0}, {"</think>", 1}, {"ok", 0}};
    o = run_pieces(SMOL_CHAT_START_CONTENT, d, 6);
    ck_assert_str_eq(o.reasoning, "use <tool_call> maybe");
    ck_assert_str_eq(o.content, "ok");
    outcome_free(&o);
    /* plain mode drops specials */
    const struct piece e[] = {{"a", 0}, {"<|im_end|>", 1}, {" b", 0}};
    o = run_pieces(SMOL_CHAT_START_PLAIN, e, 3);
    ck_assert_str_eq(o.content, "a b");
    outcome_free(&o);
}
END_TEST

START_TEST(deinit_safe)
{
    smol_chat_parser_deinit(NULL);
    struct result r;
    struct smol_chat_parser p;
    result_init(&r);
    smol_chat_parser_init(&p, SMOL_CHAT_START_CONTENT, collect, &r);
    ck_assert_int_eq(smol_chat_parser_feed(&p, "<tool_call>{\"na", 15, 0), SMOL_OK);
    smol_chat_parser_deinit(&p);   /* without finish: no leak, no event */
    ck_assert_int_eq(r.n_events, 0);
    result_deinit(&r);
}
END_TEST

static Suite *parse_suite(void)
{
    Suite *s = suite_create("chat_parse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, think_mode);
    tcase_add_test(tc, no_think_mode);
    tcase_add_test(tc, prefilled_reasoning_and_plain);
    tcase_add_test(tc, tool_calls);
    tcase_add_test(tc, malformed_tool_calls);
    tcase_add_test(tc, unclosed_think);
    tcase_add_test(tc, utf8_boundaries);
    tcase_add_test(tc, special_pieces);
    tcase_add_test(tc, deinit_safe);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return parse_suite();
}
