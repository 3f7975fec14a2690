/*
 * test_template.c - the native chat template renderer against jinja2.
 *
 * Byte-identical renders: the 13 llama.cpp renders of the fixture set
 * (tests/fixtures/chat/chat_template_renders.json) and the 153 Python
 * jinja2 renders from tests/fixtures/gen_template_renders.py
 * (template_renders_jinja2.json, SmolLM3 and SmolLM2).  Then template
 * recognition, Python repr details and every rejected input.  Untrusted
 * spans (smol_chat_render_spans): exact on random conversations against an
 * independent model of the template's transformations.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/text/chat_template.h"
#include "daemon/model/gguf.h"
#include "daemon/text/chat_parse.h"
#include "daemon/text/tokenizer.h"

/* ------------------------------------------------------------ helpers */

static char *find_file(const char *rel)
{
    static const char *const pre[] = {"", "../", "../../", "../../../"};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s%s", pre[i], rel);
        FILE *f = fopen(p, "rb");
        if (f) {
            fclose(f);
            return strdup(p);
        }
    }
    return NULL;
}

static char *slurp(const char *rel, size_t *n)
{
    char *p = find_file(rel);
    ck_assert_msg(p, "fixture %s not found", rel);
    FILE *f = fopen(p, "rb");
    free(p);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    ck_assert(fread(buf, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    buf[sz] = '\0';
    *n = (size_t)sz;
    return buf;
}

static json_t *load_json(const char *rel)
{
    char *p = find_file(rel);
    ck_assert_msg(p, "fixture %s not found", rel);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j, "%s: %s (line %d)", p, je.text, je.line);
    free(p);
    return j;
}

/* Renders a request body; returns the code, output in out. */
static enum smol_err render_json(enum smol_chat_tpl tpl, const json_t *body, const char *date,
                                 struct smol_chat_buf *out, int *thinking, char *err)
{
    struct smol_chat_request req;
    enum smol_err e = smol_chat_request_from_json(&req, body, err);
    if (e) return e;
    req.date = date;
    e = smol_chat_render(tpl, &req, out, thinking, err);
    smol_chat_request_deinit(&req);
    return e;
}

static enum smol_err render_str(enum smol_chat_tpl tpl, const char *body_text, struct smol_chat_buf *out, char *err)
{
    json_error_t je;
    json_t *body = json_loads(body_text, JSON_ALLOW_NUL, &je);
    ck_assert_msg(body, "bad test JSON: %s", je.text);
    enum smol_err e = render_json(tpl, body, "09 July 2025", out, NULL, err);
    json_decref(body);
    return e;
}

static void report_mismatch(const char *name, const char *got, size_t got_len, const char *want)
{
    size_t i = 0, wl = strlen(want);
    while (i < got_len && i < wl && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "%s: first difference at byte %zu (got %zu bytes, want %zu)\n  got:  \"%.80s\"\n  want: \"%.80s\"\n",
            name, i, got_len, wl, got + from, want + from);
}

/* ------------------------------------------------------ golden renders */

/* Whether a SmolLM3 request has assistant tool_calls: the one place the
 * native render departs from the official Jinja template (it renders them,
 * chat_template.h).  *stripped = a copy without them, whose render must be
 * the Jinja one byte for byte. */
static int has_tool_calls(const json_t *body, json_t **stripped)
{
    json_t *msgs = json_object_get(body, "messages");
    int has = 0;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *tc = json_object_get(json_array_get(msgs, i), "tool_calls");
        has |= json_is_array(tc) && json_array_size(tc) > 0;
    }
    *stripped = NULL;
    if (!has) return 0;
    *stripped = json_deep_copy(body);
    msgs = json_object_get(*stripped, "messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) json_object_del(json_array_get(msgs, i), "tool_calls");
    return 1;
}

/* want (the Jinja render without tool calls) with each assistant turn's
 * calls inserted before its <|im_end|>, as chat_template.c writes them. */
static char *with_calls(const json_t *body, const char *want)
{
    json_t *msgs = json_object_get(body, "messages");
    struct smol_chat_buf o;
    smol_chat_buf_init(&o);
    const char *p = want;
    size_t n_asst = 0;
    /* the k-th "<|im_start|>assistant\n" of want is the k-th assistant message */
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        if (strcmp(json_string_value(json_object_get(m, "role")), "assistant")) continue;
        const char *a = strstr(p, "<|im_start|>assistant\n");
        ck_assert_ptr_nonnull(a);
        const char *end = strstr(a, "<|im_end|>");
        ck_assert_ptr_nonnull(end);
        smol_chat_buf_append(&o, p, (size_t)(end - p));
        json_t *tc = json_object_get(m, "tool_calls");
        int had = end[-1] != '\n' && strncmp(end - 18, "<think>\n\n</think>\n", 18) != 0;
        for (size_t k = 0; json_is_array(tc) && k < json_array_size(tc); k++) {
            json_t *fn = json_object_get(json_array_get(tc, k), "function");
            char tmp[512];
            snprintf(tmp, sizeof tmp, "%s<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
                     k || had ? "\n" : "", json_string_value(json_object_get(fn, "name")),
                     json_string_value(json_object_get(fn, "arguments")));
            smol_chat_buf_puts(&o, tmp);
        }
        p = end;
        n_asst++;
    }
    smol_chat_buf_puts(&o, p);
    return o.data;
}

START_TEST(llamacpp_renders)
{
    json_t *root = load_json("tests/fixtures/chat/chat_template_renders.json");
    const char *date = json_string_value(json_object_get(root, "date_used_for_strftime_now"));
    ck_assert_str_eq(date, "09 July 2025");
    json_t *cases = json_object_get(root, "cases");
    ck_assert_int_eq(json_array_size(cases), 13);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *want = json_string_value(json_object_get(c, "rendered"));
        struct smol_chat_buf out;
        char err[SMOL_ERRLEN] = "";
        smol_chat_buf_init(&out);
        enum smol_err e = render_json(SMOL_CHAT_TPL_SMOLLM3, json_object_get(c, "request"), date, &out, NULL, err);
        if (e) {
            fprintf(stderr, "%s: error %s: %s\n", name, smol_err_name(e), err);
            bad++;
        } else if (out.len != strlen(want) || memcmp(out.data, want, out.len)) {
            report_mismatch(name, out.data, out.len, want);
            bad++;
        }
        smol_chat_buf_deinit(&out);
    }
    json_decref(root);
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(jinja2_renders)
{
    json_t *root = load_json("tests/fixtures/chat/template_renders_jinja2.json");
    json_t *cases = json_object_get(root, "cases");
    size_t n = json_array_size(cases);
    ck_assert_uint_ge(n, 100);
    int bad = 0, n3 = 0, n2 = 0, n_departed = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *tname = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "expected");
        enum smol_chat_tpl tpl = !strcmp(tname, "smollm3") ? SMOL_CHAT_TPL_SMOLLM3 : SMOL_CHAT_TPL_SMOLLM2;
        if (tpl == SMOL_CHAT_TPL_SMOLLM3) n3++; else n2++;
        struct smol_chat_buf out;
        char err[SMOL_ERRLEN] = "";
        smol_chat_buf_init(&out);
        int thinking = -1;
        json_t *stripped = NULL;
        char *dep = NULL;
        if (tpl == SMOL_CHAT_TPL_SMOLLM3 && has_tool_calls(json_object_get(c, "request"), &stripped)) {
            /* without the calls: Jinja's bytes; with them: those plus the calls */
            struct smol_chat_buf o2;
            smol_chat_buf_init(&o2);
            enum smol_err e2 = render_json(tpl, stripped, json_string_value(json_object_get(c, "date")), &o2, NULL, err);
            if (e2 || o2.len != json_string_length(want) || memcmp(o2.data, json_string_value(want), o2.len)) {
                report_mismatch(name, o2.data ? o2.data : "", o2.len, json_string_value(want));
                bad++;
            }
            smol_chat_buf_deinit(&o2);
            json_decref(stripped);
            dep = with_calls(json_object_get(c, "request"), json_string_value(want));
            n_departed++;
        }
        const char *wanted = dep ? dep : json_string_value(want);
        enum smol_err e = render_json(tpl, json_object_get(c, "request"),
                                      json_string_value(json_object_get(c, "date")), &out, &thinking, err);
        if (e) {
            fprintf(stderr, "%s: error %s: %s\n", name, smol_err_name(e), err);
            bad++;
        } else if (out.len != strlen(wanted) || memcmp(out.data, wanted, out.len)) {
            report_mismatch(name, out.data, out.len, wanted);
            bad++;
        } else if (tpl == SMOL_CHAT_TPL_SMOLLM3) {
            /* the effective mode is what the header says */
            int says_think = strstr(out.data, "Reasoning Mode: /think\n") != NULL;
            if (strstr(out.data, "Reasoning Mode: ") && says_think != thinking) {
                fprintf(stderr, "%s: thinking=%d disagrees with the header\n", name, thinking);
                bad++;
            }
        }
        smol_chat_buf_deinit(&out);
        free(dep);
    }
    fprintf(stderr, "jinja2 renders: %d SmolLM3 + %d SmolLM2 cases (%d with tool calls rendered), %d mismatches\n",
            n3, n2, n_departed, bad);
    ck_assert_int_ge(n_departed, 4);
    json_decref(root);
    ck_assert_int_ge(n2, 5);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --------------------------------------------------------- recognition */

START_TEST(detect_templates)
{
    char err[SMOL_ERRLEN];
    enum smol_chat_tpl t;
    size_t n;
    char *s3 = slurp("tests/fixtures/chat/chat_template.smollm3.jinja", &n);
    ck_assert_int_eq(smol_chat_tpl_detect(s3, n, 0, &t, err), SMOL_OK);
    ck_assert_int_eq(t, SMOL_CHAT_TPL_SMOLLM3);
    /* a trailing newline (tokenizer_config vs .jinja file) does not matter */
    char *s3n = malloc(n + 2);
    memcpy(s3n, s3, n);
    memcpy(s3n + n, "\n", 2);
    ck_assert_int_eq(smol_chat_tpl_detect(s3n, n + 1, 0, &t, err), SMOL_OK);
    ck_assert_int_eq(t, SMOL_CHAT_TPL_SMOLLM3);
    /* one changed byte is another template */
    s3n[100] ^= 1;
    ck_assert_int_eq(smol_chat_tpl_detect(s3n, n, 0, &t, err), SMOL_ETEMPLATE);
    ck_assert_ptr_nonnull(strstr(err, "unrecognised chat template"));
    ck_assert_int_eq(smol_chat_tpl_detect(s3n, n, 1, &t, err), SMOL_OK);
    ck_assert_int_eq(t, SMOL_CHAT_TPL_CHATML);
    free(s3n);
    free(s3);
    char *s2 = slurp("tests/fixtures/chat/chat_template.smollm2.jinja", &n);
    ck_assert_int_eq(smol_chat_tpl_detect(s2, n, 0, &t, err), SMOL_OK);
    ck_assert_int_eq(t, SMOL_CHAT_TPL_SMOLLM2);
    free(s2);
    ck_assert_int_eq(smol_chat_tpl_detect("", 0, 0, &t, err), SMOL_ETEMPLATE);
    ck_assert_str_eq(smol_chat_tpl_name(SMOL_CHAT_TPL_SMOLLM3), "smollm3");
}
END_TEST

START_TEST(detect_from_gguf)
{
    /* SmolLM2: the repository's copy, fetched by tests/get_smollm2.sh */
    static const char *const models[] = {"tests/fixtures/models/fixture-t.Q8_0.gguf",
                                         "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"};
    static const enum smol_chat_tpl want[] = {SMOL_CHAT_TPL_SMOLLM3, SMOL_CHAT_TPL_SMOLLM2};
    int seen = 0;
    for (size_t i = 0; i < 2; i++) {
        char *p = models[i][0] == '/' ? strdup(models[i]) : find_file(models[i]);
        FILE *f = p ? fopen(p, "rb") : NULL;
        if (!f) {
            printf("SKIPPED: detect_from_gguf: %s not found\n", models[i]);
            free(p);
            continue;
        }
        fclose(f);
        struct smol_gguf *g;
        char err[SMOL_ERRLEN];
        ck_assert_msg(smol_gguf_open(&g, p, err) == SMOL_OK, "%s", err);
        struct smol_gguf_str s = {0};
        ck_assert_int_eq(smol_gguf_get_str(g, "tokenizer.chat_template", &s, 1, err), SMOL_OK);
        enum smol_chat_tpl t;
        ck_assert_msg(smol_chat_tpl_detect(s.ptr, s.len, 0, &t, err) == SMOL_OK, "%s: %s", p, err);
        ck_assert_int_eq(t, want[i]);
        smol_gguf_close(&g);
        free(p);
        seen++;
    }
    ck_assert_int_ge(seen, 1);
}
END_TEST

/* -------------------------------------------------------- python repr */

START_TEST(pyrepr_values)
{
    static const struct { const char *json, *repr; } cases[] = {
        {"{\"a\": 1, \"b\": [true, false, null], \"c\": {}}", "{'a': 1, 'b': [True, False, None], 'c': {}}"},
        {"{\"z\": 1, \"a\": 2}", "{'z': 1, 'a': 2}"},
        {"[\"it's\"]", "[\"it's\"]"},
        {"[\"it's \\\"x\\\"\"]", "['it\\'s \"x\"']"},
        {"[\"say \\\"hi\\\"\"]", "['say \"hi\"']"},
        {"[\"a\\\\b\\n\\t\\r\\u0007\\u007f\"]", "['a\\\\b\\n\\t\\r\\x07\\x7f']"},
        {"[\"\\u0085\\u00a0\\u00ad\\u200b\\u2028\\ufeff\\ue000\"]", "['\\x85\\xa0\\xad\\u200b\\u2028\\ufeff\\ue000']"},
        {"[\"\\udb40\\udc01 \\ud83d\\ude00 é 日本\"]", "['\\U000e0001 \xf0\x9f\x98\x80 \xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac']"},
        {"[0.1, 1e-7, 1e16, 1e15, 100.0, -0.0, 0.0, 1e22, 2.5e-5, 0.0001, 123456789.125]",
         "[0.1, 1e-07, 1e+16, 1000000000000000.0, 100.0, -0.0, 0.0, 1e+22, 2.5e-05, 0.0001, 123456789.125]"},
        {"[1.7976931348623157e308, 5e-324, 3.141592653589793, 1.5e300, -2.5]",
         "[1.7976931348623157e+308, 5e-324, 3.141592653589793, 1.5e+300, -2.5]"},
        {"[0, -1, 9223372036854775807, -9223372036854775808]", "[0, -1, 9223372036854775807, -9223372036854775808]"},
        {"[[], [[]], \"\"]", "[[], [[]], '']"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY, &je);
        ck_assert_msg(v, "%s: %s", cases[i].json, je.text);
        struct smol_chat_buf b;
        smol_chat_buf_init(&b);
        ck_assert_int_eq(smol_chat_pyrepr(&b, v), 0);
        ck_assert_str_eq(b.data, cases[i].repr);
        smol_chat_buf_deinit(&b);
        json_decref(v);
    }
    /* json.dumps(ensure_ascii=False) form, used for tool-call arguments */
    json_t *v = json_loads("{\"s\": \"q\\\"\\\\\\n\\u0001é\", \"f\": 0.1, \"l\": [1, null]}", 0, NULL);
    struct smol_chat_buf b;
    smol_chat_buf_init(&b);
    ck_assert_int_eq(smol_chat_json_dump(&b, v), 0);
    ck_assert_str_eq(b.data, "{\"s\": \"q\\\"\\\\\\n\\u0001\xc3\xa9\", \"f\": 0.1, \"l\": [1, null]}");
    smol_chat_buf_deinit(&b);
    json_decref(v);
}
END_TEST

START_TEST(float_roundtrip)
{
    /* Shortest repr must parse back to the same double. */
    unsigned long long x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d)) continue;
        char s[32];
        smol_chat_fmt_double(d, s);
        ck_assert_msg(strtod(s, NULL) == d, "%s", s);
    }
}
END_TEST

/* ----------------------------------------------------------- behaviour */

START_TEST(dates)
{
    char d[32];
    ck_assert_int_eq(smol_chat_date_format(2025, 7, 9, d, sizeof d), 0);
    ck_assert_str_eq(d, "09 July 2025");
    ck_assert_int_eq(smol_chat_date_check(d), 0);
    ck_assert_int_eq(smol_chat_date_format(2025, 13, 9, d, sizeof d), -1);
    ck_assert_int_eq(smol_chat_date_format(2025, 1, 1, d, 5), -1);
    static const char *const bad[] = {NULL, "", "9 July 2025", "09 july 2025", "09 July 25", "09 July 2025\n",
                                      "00 July 2025", "32 July 2025", "09 Juli 2025", "09  July 2025", "2025-07-09"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) ck_assert_int_eq(smol_chat_date_check(bad[i]), -1);
    ck_assert_int_eq(smol_chat_date_check("31 December 1999"), 0);
}
END_TEST

START_TEST(thinking_flag_and_append)
{
    struct smol_chat_msg m[2] = {{.role = SMOL_CHAT_SYSTEM, .content = "Be brief /no_think"},
                                 {.role = SMOL_CHAT_USER, .content = "hi"}};
    struct smol_chat_request req = {.msgs = m, .n_msgs = 2, .enable_thinking = 1, .add_generation_prompt = 1,
                                    .date = "01 January 2026"};
    struct smol_chat_buf out;
    char err[SMOL_ERRLEN];
    int th = -1;
    smol_chat_buf_init(&out);
    smol_chat_buf_puts(&out, "PREFIX");
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, &th, err), SMOL_OK);
    ck_assert_int_eq(th, 0);
    ck_assert(!strncmp(out.data, "PREFIX<|im_start|>system\n## Metadata", 36));
    ck_assert_ptr_nonnull(strstr(out.data, "Today Date: 01 January 2026\n"));
    ck_assert_ptr_nonnull(strstr(out.data, "\n\nBe brief\n\n<|im_start|>user\nhi<|im_end|>\n"));
    const char *tail = "<|im_start|>assistant\n<think>\n\n</think>\n";
    ck_assert_str_eq(out.data + out.len - strlen(tail), tail);
    /* an error leaves the buffer as it was */
    size_t before = out.len;
    m[1].content = "bad \xff utf8";
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, &th, err), SMOL_EUTF8);
    ck_assert_ptr_nonnull(strstr(err, "messages[1].content"));
    ck_assert_uint_eq(out.len, before);
    smol_chat_buf_deinit(&out);
    smol_chat_buf_deinit(&out);  /* idempotent */
}
END_TEST

START_TEST(chatml_fallback)
{
    struct smol_chat_buf out;
    char err[SMOL_ERRLEN];
    smol_chat_buf_init(&out);
    ck_assert_int_eq(render_str(SMOL_CHAT_TPL_CHATML,
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"},"
                                "{\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"tool\", \"content\": \"1\"}],"
                                "\"chat_template_kwargs\": {\"enable_thinking\": false}}", &out, err), SMOL_OK);
    ck_assert_str_eq(out.data, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
                               "<|im_start|>tool\n1<|im_end|>\n<|im_start|>assistant\n");
    smol_chat_buf_deinit(&out);
}
END_TEST

START_TEST(rejected_inputs)
{
    static const struct { enum smol_chat_tpl tpl; const char *body; enum smol_err code; const char *msg; } cases[] = {
        {SMOL_CHAT_TPL_SMOLLM3, "[]", SMOL_EINVAL, "JSON object"},
        {SMOL_CHAT_TPL_SMOLLM3, "{}", SMOL_EINVAL, "messages must be a non-empty list"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": []}", SMOL_EINVAL, "non-empty"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": {}}", SMOL_EINVAL, "non-empty"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [1]}", SMOL_EINVAL, "messages[0] must be an object"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"content\": \"x\"}]}", SMOL_EINVAL, "messages[0].role"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"developer\", \"content\": \"x\"}]}",
         SMOL_EINVAL, "unknown role \"developer\""},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}]}]}",
         SMOL_EINVAL, "list of content parts"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", SMOL_EINVAL, "string or null"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\", \"content\": {}}]}", SMOL_EINVAL, "string or null"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", SMOL_EINVAL, "NUL"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}", SMOL_EINVAL, "tool_calls"},
        /* the calls it renders (issue 29) must be renderable */
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": "
                                "[{\"function\": {\"name\": \"f\"}}]}]}", SMOL_EINVAL, "only assistant"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{}]}]}", SMOL_EINVAL,
         "tool_calls[0].function.name"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                                "{\"name\": \"f\", \"arguments\": 3}}]}]}", SMOL_EINVAL, "arguments"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"assistant\", \"reasoning\": 1}]}", SMOL_EINVAL, "reasoning"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}], \"tools\": {}}", SMOL_EINVAL, "'tools' must be a list"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}], \"tools\": \"x\"}", SMOL_EINVAL, "'tools' must be a list"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}], \"add_generation_prompt\": 1}", SMOL_EINVAL,
         "add_generation_prompt must be true or false"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}], \"chat_template_kwargs\": []}", SMOL_EINVAL,
         "chat_template_kwargs"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"user\"}], \"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}",
         SMOL_EINVAL, "chat_template_kwargs.enable_thinking"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"system\", \"content\": null}, {\"role\": \"user\"}]}",
         SMOL_ETEMPLATE, "messages[0].content"},
        {SMOL_CHAT_TPL_SMOLLM3, "{\"messages\": [{\"role\": \"system\"}]}", SMOL_ETEMPLATE, "system message"},
        {SMOL_CHAT_TPL_SMOLLM2, "{\"messages\": [{\"role\": \"user\", \"content\": null}]}", SMOL_ETEMPLATE, "smollm2"},
        {SMOL_CHAT_TPL_SMOLLM2, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}",
         SMOL_EUNSUPPORTED, "tools: the smollm2 chat template does not support tools"},
        /* and the refusal says how to try tools: the model that has them */
        {SMOL_CHAT_TPL_SMOLLM2, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}",
         SMOL_EUNSUPPORTED, "serve SmolLM3-3B: `make model` then `make run`, or MODEL=path to a SmolLM3 GGUF"},
        {SMOL_CHAT_TPL_CHATML, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": []}]}", SMOL_ETEMPLATE, "chatml"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct smol_chat_buf out;
        char err[SMOL_ERRLEN] = "";
        smol_chat_buf_init(&out);
        enum smol_err e = render_str(cases[i].tpl, cases[i].body, &out, err);
        ck_assert_msg(e == cases[i].code, "case %zu (%s): got %s (%s)", i, cases[i].body, smol_err_name(e), err);
        ck_assert_msg(strstr(err, cases[i].msg), "case %zu: message \"%s\" lacks \"%s\"", i, err, cases[i].msg);
        ck_assert_uint_eq(out.len, 0);
        smol_chat_buf_deinit(&out);
    }
}
END_TEST

START_TEST(rejected_struct_inputs)
{
    char err[SMOL_ERRLEN];
    struct smol_chat_buf out;
    smol_chat_buf_init(&out);
    struct smol_chat_msg m = {.role = SMOL_CHAT_USER, .content = "x"};
    struct smol_chat_request req = {.msgs = &m, .n_msgs = 1, .date = "09 July 2025"};
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, NULL, &out, NULL, err), SMOL_EINVAL);
    req.n_msgs = 0;
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, NULL, err), SMOL_EINVAL);
    req.n_msgs = 1;
    m.role = (enum smol_chat_role)7;
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, NULL, err), SMOL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "unknown role"));
    m.role = SMOL_CHAT_USER;
    static const char *const bad_utf8[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "abc\xe2\x82", "\x80"};
    for (size_t i = 0; i < 5; i++) {
        m.content = bad_utf8[i];
        ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, NULL, err), SMOL_EUTF8);
    }
    m.content = "ok";
    m.reasoning_content = "\xff";
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM2, &req, &out, NULL, err), SMOL_EUTF8);
    m.reasoning_content = NULL;
    req.date = NULL;
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, NULL, err), SMOL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "DD Month YYYY"));
    /* SmolLM2 needs no date */
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM2, &req, &out, NULL, err), SMOL_OK);
    ck_assert_int_eq(smol_chat_render((enum smol_chat_tpl)9, &req, &out, NULL, err), SMOL_EINVAL);
    /* deeply nested tools are refused, not recursed into */
    req.date = "09 July 2025";
    json_t *deep = json_array(), *cur = deep;
    for (int i = 0; i < 1000; i++) {
        json_t *nx = json_array();
        json_array_append_new(cur, nx);
        cur = nx;
    }
    json_t *tools = json_array();
    json_array_append_new(tools, deep);
    req.tools = tools;
    ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_SMOLLM3, &req, &out, NULL, err), SMOL_EINVAL);
    json_decref(tools);
    smol_chat_buf_deinit(&out);
    smol_chat_request_deinit(NULL);
}
END_TEST

/* ------------------------------------------------------ untrusted spans */

/* Python str.isspace(), written out again independently of the renderer. */
static int t_isspace(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x3000 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f;
}

/* s.rstrip() in place (s valid UTF-8). */
static void t_rstrip(char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        const unsigned char *u = (const unsigned char *)s + st;
        uint32_t cp = u[0] < 0x80 ? u[0] : (u[0] & 0xE0) == 0xC0 ? ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3F)
                    : (u[0] & 0xF0) == 0xE0 ? ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3F)
                    : 0x10000;
        if (!t_isspace(cp)) break;
        n = st;
    }
    s[n] = '\0';
}

/* s = s.replace(pat, "") in place. */
static void t_remove(char *s, const char *pat)
{
    size_t pl = strlen(pat);
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, pat, pl)) r += pl;
        else *w++ = *r++;
    }
    *w = '\0';
}

struct t_expect {
    int32_t msg, tool;
    enum smol_chat_field field;
    char text[1024];
};

/* The spans the template should produce, from the jinja source read again
 * (not from the renderer's code). */
static size_t expected_spans(enum smol_chat_tpl tpl, const struct smol_chat_request *req, struct t_expect *ex)
{
    size_t n = 0;
#define ADD(M, T, F, S) (ex[n].msg = (M), ex[n].tool = (T), ex[n].field = (F), \
                         snprintf(ex[n].text, sizeof ex[n].text, "%s", (S)), n++)
    if (tpl != SMOL_CHAT_TPL_SMOLLM3) {
        for (size_t i = 0; i < req->n_msgs; i++) ADD((int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT, req->msgs[i].content);
        return n;
    }
    char ci[1024] = "";
    const char *sys = req->msgs[0].role == SMOL_CHAT_SYSTEM ? req->msgs[0].content : NULL;
    if (sys) {
        snprintf(ci, sizeof ci, "%s", sys);
        t_remove(ci, "/no_think");
        t_remove(ci, "/think");
        t_rstrip(ci);
    }
    if (sys && strstr(sys, "/system_override")) {
        t_remove(ci, "/system_override");
        t_rstrip(ci);
        ADD(0, -1, SMOL_CHAT_FIELD_SYSTEM, ci);
    } else {
        ADD(-1, -1, SMOL_CHAT_FIELD_DATE, req->date);
        if (ci[0]) ADD(0, -1, SMOL_CHAT_FIELD_SYSTEM, ci);
        for (size_t i = 0; req->tools && i < json_array_size(req->tools); i++) {
            const json_t *t = json_array_get(req->tools, i);
            struct smol_chat_buf b;
            smol_chat_buf_init(&b);
            if (json_is_string(t)) smol_chat_buf_puts(&b, json_string_value(t));
            else ck_assert_int_eq(smol_chat_pyrepr(&b, t), 0);
            ADD(-1, (int32_t)i, SMOL_CHAT_FIELD_TOOL, b.data);
            smol_chat_buf_deinit(&b);
        }
    }
    for (size_t i = 0; i < req->n_msgs; i++) {
        const char *c = req->msgs[i].content ? req->msgs[i].content : "";
        switch (req->msgs[i].role) {
        case SMOL_CHAT_USER:
        case SMOL_CHAT_TOOL: ADD((int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT, c); break;
        case SMOL_CHAT_ASSISTANT:
            while (*c == '\n') c++;
            ADD((int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT, c);
            for (size_t k = 0; req->msgs[i].tool_calls && k < json_array_size(req->msgs[i].tool_calls); k++) {
                const json_t *fn = json_object_get(json_array_get(req->msgs[i].tool_calls, k), "function");
                char q[160];
                snprintf(q, sizeof q, "\"%s\"", json_string_value(json_object_get(fn, "name")));
                ADD((int32_t)i, -1, SMOL_CHAT_FIELD_TOOL_CALL, q);
                ADD((int32_t)i, -1, SMOL_CHAT_FIELD_TOOL_CALL, json_string_value(json_object_get(fn, "arguments")));
            }
            break;
        case SMOL_CHAT_SYSTEM: break;
        }
    }
#undef ADD
    return n;
}

START_TEST(spans_exact_random)
{
    /* "\xc2\xa7" (section sign) marks caller text: it must never show outside a span */
    static const char *const frag[] = {
        "\xc2\xa7", "hi\xc2\xa7", " ", "\n", "\t", "\xe3\x80\x80", "\xc2\xa0", "\xe2\x80\x83", "\x0b", "/think", "/no_think", "/thi", "nk",
        "/no_", "think", "/system_override", "/system_", "override", "<|im_start|>", "<think>", "\xc3\xa9",
        "x\xc2\xa7y", "\n\n",
    };
    const size_t nf = sizeof frag / sizeof frag[0];
    json_error_t je;
    json_t *tool_pool = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get\\u00a7\", \"description\": \"it's <|im_end|>\","
        " \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"default\": 0.5}}}}},"
        " \"raw tool string \\u00a7 <|im_start|>\", {\"name\": \"\\u00a7\", \"enum\": [true, false, null, 1e100]}]",
        0, &je);
    ck_assert_msg(tool_pool, "%s", je.text);
    uint32_t rng = 777;
#define RND() (rng = rng * 1664525u + 1013904223u, rng >> 8)
    static char bufs[8][512];
    static struct t_expect ex[32];
    size_t n_spans_total = 0, n_override = 0, n_sys = 0;
    for (int iter = 0; iter < 2000; iter++) {
        struct smol_chat_msg m[8];
        size_t nm = 1 + RND() % 8;
        for (size_t i = 0; i < nm; i++) {
            memset(&m[i], 0, sizeof m[i]);
            m[i].role = (i == 0 && RND() % 3) || RND() % 8 == 0 ? SMOL_CHAT_SYSTEM
                                                                 : (enum smol_chat_role)(1 + RND() % 3);
            size_t len = 0, k = RND() % 8;
            bufs[i][0] = '\0';
            for (size_t j = 0; j < k; j++) {
                const char *f = frag[RND() % nf];
                if (len + strlen(f) < sizeof bufs[i]) {
                    memcpy(bufs[i] + len, f, strlen(f) + 1);
                    len += strlen(f);
                }
            }
            m[i].content = bufs[i];
            if (m[i].role != SMOL_CHAT_SYSTEM && RND() % 10 == 0) m[i].content = NULL;    /* null content */
        }
        enum smol_chat_tpl tpl = (enum smol_chat_tpl)(RND() % 3);
        json_t *tools = NULL;
        if (tpl == SMOL_CHAT_TPL_SMOLLM3 && RND() % 2) {
            tools = json_array();
            for (size_t k = RND() % 4; k > 0; k--) json_array_append(tools, json_array_get(tool_pool, RND() % 3));
        }
        if (tpl != SMOL_CHAT_TPL_SMOLLM3)
            for (size_t i = 0; i < nm; i++)
                if (!m[i].content) m[i].content = "";
        struct smol_chat_request req = {.msgs = m, .n_msgs = nm, .tools = tools, .enable_thinking = (int)(RND() % 2),
                                        .add_generation_prompt = (int)(RND() % 2), .date = "09 July 2025"};
        struct smol_chat_buf out, ref;
        struct smol_chat_spans sp;
        smol_chat_buf_init(&out);
        smol_chat_buf_init(&ref);
        smol_chat_spans_init(&sp);
        char err[SMOL_ERRLEN] = "";
        int pre = RND() % 2, th1 = -1, th2 = -2;
        if (pre) { /* appending: offsets are absolute, earlier spans are kept */
            smol_chat_buf_puts(&out, "PREFIX");
            smol_chat_buf_puts(&ref, "PREFIX");
        }
        size_t base_n = 0;
        if (pre) {
            struct smol_chat_msg m1 = {.role = SMOL_CHAT_USER, .content = "earlier"};
            struct smol_chat_request r1 = {.msgs = &m1, .n_msgs = 1, .date = "09 July 2025"};
            ck_assert_int_eq(smol_chat_render_spans(SMOL_CHAT_TPL_CHATML, &r1, &out, &sp, NULL, err), SMOL_OK);
            ck_assert_int_eq(smol_chat_render(SMOL_CHAT_TPL_CHATML, &r1, &ref, NULL, err), SMOL_OK);
            base_n = sp.n;
            ck_assert_uint_eq(base_n, 1);
            ck_assert_uint_eq(sp.v[0].off, 6 + strlen("<|im_start|>user\n"));
        }
        enum smol_err e1 = smol_chat_render_spans(tpl, &req, &out, &sp, &th1, err);
        enum smol_err e2 = smol_chat_render(tpl, &req, &ref, &th2, err);
        ck_assert_int_eq(e1, e2);
        ck_assert_msg(e1 == SMOL_OK, "iter %d: %s", iter, err);
        ck_assert_int_eq(th1, th2);
        ck_assert(out.len == ref.len && !memcmp(out.data, ref.data, out.len));
        size_t ne = expected_spans(tpl, &req, ex);
        ck_assert_uint_eq(sp.n - base_n, ne);
        size_t prev_end = 0;
        for (size_t i = 0; i < sp.n; i++) {
            ck_assert_uint_ge(sp.v[i].off, prev_end);    /* ascending, disjoint */
            ck_assert_uint_le(sp.v[i].off + sp.v[i].len, out.len);
            prev_end = sp.v[i].off + sp.v[i].len;
            if (i < base_n) continue;
            const struct t_expect *x = &ex[i - base_n];
            ck_assert_int_eq(sp.src[i].msg, x->msg);
            ck_assert_int_eq(sp.src[i].tool, x->tool);
            ck_assert_int_eq(sp.src[i].field, x->field);
            ck_assert_msg(sp.v[i].len == strlen(x->text) && !memcmp(out.data + sp.v[i].off, x->text, sp.v[i].len),
                          "iter %d span %zu: got \"%.*s\" want \"%s\"", iter, i, (int)sp.v[i].len,
                          out.data + sp.v[i].off, x->text);
            n_override += x->field == SMOL_CHAT_FIELD_SYSTEM && strstr(m[0].content, "/system_override");
            n_sys += x->field == SMOL_CHAT_FIELD_SYSTEM;
        }
        /* no caller byte outside a span: cut the spans out, no marker remains */
        size_t at = 0;
        for (size_t i = 0; i <= sp.n; i++) {
            size_t end = i < sp.n ? sp.v[i].off : out.len;
            for (size_t b = at; b + 1 < end; b++)
                ck_assert_msg(memcmp(out.data + b, "\xc2\xa7", 2), "iter %d: caller text at byte %zu outside spans",
                              iter, b);
            if (i < sp.n) at = sp.v[i].off + sp.v[i].len;
        }
        n_spans_total += sp.n;
        /* an error restores both */
        size_t len_before = out.len, n_before = sp.n;
        m[nm - 1].content = "bad \xff";
        m[nm - 1].role = SMOL_CHAT_USER;
        ck_assert_int_eq(smol_chat_render_spans(tpl, &req, &out, &sp, NULL, err), SMOL_EUTF8);
        ck_assert_uint_eq(out.len, len_before);
        ck_assert_uint_eq(sp.n, n_before);
        json_decref(tools);
        smol_chat_buf_deinit(&out);
        smol_chat_buf_deinit(&ref);
        smol_chat_spans_deinit(&sp);
    }
#undef RND
    json_decref(tool_pool);
    fprintf(stderr, "spans: %zu checked (%zu system, %zu under /system_override)\n", n_spans_total, n_sys, n_override);
    ck_assert_uint_gt(n_override, 20);
    ck_assert_uint_gt(n_sys, 200);
}
END_TEST

/* The spans on the golden renders name exactly the request's strings. */
START_TEST(spans_on_golden_renders)
{
    json_t *root = load_json("tests/fixtures/chat/template_renders_jinja2.json");
    json_t *cases = json_object_get(root, "cases");
    static struct t_expect ex[64];
    size_t n_checked = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        enum smol_chat_tpl tpl = !strcmp(json_string_value(json_object_get(c, "template")), "smollm3")
                                     ? SMOL_CHAT_TPL_SMOLLM3 : SMOL_CHAT_TPL_SMOLLM2;
        struct smol_chat_request req;
        char err[SMOL_ERRLEN] = "";
        ck_assert_int_eq(smol_chat_request_from_json(&req, json_object_get(c, "request"), err), SMOL_OK);
        req.date = json_string_value(json_object_get(c, "date"));
        struct smol_chat_buf out;
        struct smol_chat_spans sp;
        smol_chat_buf_init(&out);
        smol_chat_spans_init(&sp);
        ck_assert_int_eq(smol_chat_render_spans(tpl, &req, &out, &sp, NULL, err), SMOL_OK);
        json_t *want = json_object_get(c, "expected"), *stripped;
        char *dep = tpl == SMOL_CHAT_TPL_SMOLLM3 && has_tool_calls(json_object_get(c, "request"), &stripped)
                        ? with_calls(json_object_get(c, "request"), json_string_value(want)) : NULL;
        if (dep) json_decref(stripped);
        const char *wanted = dep ? dep : json_string_value(want);
        ck_assert(out.len == strlen(wanted) && !memcmp(out.data, wanted, out.len));
        free(dep);
        int fits = 1;   /* the model above handles strings up to 1 KiB */
        for (size_t k = 0; k < req.n_msgs; k++) fits &= !req.msgs[k].content || strlen(req.msgs[k].content) < 1000;
        if (fits && req.n_msgs < 40) {
            size_t ne = expected_spans(tpl, &req, ex);
            ck_assert_uint_eq(sp.n, ne);
            for (size_t k = 0; k < ne; k++) {
                ck_assert_int_eq(sp.src[k].msg, ex[k].msg);
                ck_assert_int_eq(sp.src[k].field, ex[k].field);
                if (strlen(ex[k].text) < sizeof ex[k].text - 1)
                    ck_assert_msg(sp.v[k].len == strlen(ex[k].text) &&
                                      !memcmp(out.data + sp.v[k].off, ex[k].text, sp.v[k].len),
                                  "%s: span %zu: got \"%.*s\" want \"%s\"",
                                  json_string_value(json_object_get(c, "name")), k, (int)sp.v[k].len,
                                  out.data + sp.v[k].off, ex[k].text);
            }
            n_checked++;
        }
        smol_chat_buf_deinit(&out);
        smol_chat_spans_deinit(&sp);
        smol_chat_request_deinit(&req);
    }
    json_decref(root);
    ck_assert_uint_ge(n_checked, 100);
}
END_TEST

/* ------------------------------------------------ tool history round trip */

struct rt_calls {
    json_t *calls;              /* OpenAI tool_calls, as the gateway passes them on */
    struct smol_chat_buf content;
};

static void rt_collect(void *ud, const struct smol_chat_event *ev)
{
    struct rt_calls *r = ud;
    if (ev->kind == SMOL_CHAT_EV_CONTENT) smol_chat_buf_append(&r->content, ev->text, ev->len);
    if (ev->kind != SMOL_CHAT_EV_TOOL_CALL) return;
    char id[32];
    snprintf(id, sizeof id, "call_7_%d", ev->index);
    json_array_append_new(r->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function",
                                              "name", ev->name, "arguments", ev->arguments));
}

/* Tokens of a rendered request as the daemon makes them (untrusted spans). */
static void rt_encode(const struct smol_tokenizer *t, const json_t *body, int think, struct smol_ids *ids)
{
    struct smol_chat_request req;
    char err[SMOL_ERRLEN] = "";
    ck_assert_msg(smol_chat_request_from_json(&req, body, err) == SMOL_OK, "%s", err);
    req.date = "09 July 2025";
    req.enable_thinking = think;
    struct smol_chat_buf out;
    struct smol_chat_spans sp;
    smol_chat_buf_init(&out);
    smol_chat_spans_init(&sp);
    ck_assert_msg(smol_chat_render_spans(SMOL_CHAT_TPL_SMOLLM3, &req, &out, &sp, NULL, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(smol_tokenizer_encode_spans(t, out.data, out.len, 1, sp.v, sp.n, ids, err), SMOL_OK);
    smol_chat_spans_deinit(&sp);
    smol_chat_buf_deinit(&out);
    smol_chat_request_deinit(&req);
}

/* Issue 29: an agent's turn 2, sent statelessly with turn 1's tool calls and
 * their results, must start with exactly the tokens of turn 1 (prompt and
 * output), so the daemon's KV of turn 1 is reused.  The output is what the
 * tool grammar makes the model write (compact arguments, as json_schema.c
 * generates them), parsed as the engine parses it; the history is rebuilt
 * from the parsed calls as a client sends it back. */
START_TEST(tool_history_roundtrip)
{
    char err[SMOL_ERRLEN] = "";
    char *path = find_file("tests/fixtures/models/fixture-t.Q8_0.gguf");
    ck_assert_ptr_nonnull(path);
    struct smol_gguf *g = NULL;
    struct smol_tokenizer *t = NULL;
    ck_assert_msg(smol_gguf_open(&g, path, err) == SMOL_OK && smol_tokenizer_new(&t, g, err) == SMOL_OK, "%s", err);
    free(path);
    static const char *const outputs[] = {
        /* forced call (tool_choice "required" / named), no content */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}\n</tool_call><|im_end|>",
        /* parallel calls, in order */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"exact\": true}}\n</tool_call><|im_end|>",
        /* content, then a call */
        "Let me check that.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}\n</tool_call><|im_end|>",
    };
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}, "
                        "{\"type\": \"function\", \"function\": {\"name\": \"calc\"}}]";
    for (size_t k = 0; k < sizeof outputs / sizeof *outputs; k++) {
        json_t *t1 = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:o}", "messages", "role", "system", "content", "Use tools.",
                               "role", "user", "content", "Weather in Paris? And 2+2?", "tools", json_loads(tools, 0, NULL));
        ck_assert_ptr_nonnull(t1);
        struct smol_ids p1 = {0}, out = {0}, p2 = {0};
        rt_encode(t, t1, 0, &p1);
        ck_assert_int_eq(smol_tokenizer_encode(t, outputs[k], strlen(outputs[k]), 1, &out, err), SMOL_OK);
        /* the engine's parse of the output */
        struct rt_calls rc = {.calls = json_array()};
        smol_chat_buf_init(&rc.content);
        struct smol_chat_parser ps;
        smol_chat_parser_init(&ps, SMOL_CHAT_START_CONTENT, rt_collect, &rc);
        /* <|im_end|> ends generation: the engine never feeds it to the parser */
        ck_assert_int_eq(smol_chat_parser_feed(&ps, outputs[k], strlen(outputs[k]) - strlen("<|im_end|>"), 0), SMOL_OK);
        ck_assert_int_eq(smol_chat_parser_finish(&ps), SMOL_OK);
        smol_chat_parser_deinit(&ps);
        ck_assert_uint_ge(json_array_size(rc.calls), 1);
        /* turn 2: the history with the calls and their results */
        json_t *msgs = json_object_get(t1, "messages");
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:O}", "role", "assistant", "content",
                                              rc.content.data ? rc.content.data : "", "tool_calls", rc.calls));
        for (size_t c = 0; c < json_array_size(rc.calls); c++)
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", "x", "content",
                                                  c ? "4" : "{\"temp_c\": 21}"));
        rt_encode(t, t1, 0, &p2);
        ck_assert_uint_gt(p2.n, p1.n + out.n);
        if (getenv("RT_DEBUG"))
            for (size_t i = p1.n - 6; i < p1.n + out.n && i < p2.n; i++)
                fprintf(stderr, "%zu: p1 %d out %d p2 %d\n", i, i < p1.n ? p1.v[i] : -1, i >= p1.n ? out.v[i - p1.n] : -1,
                        p2.v[i]);
        for (size_t i = 0; i < p1.n; i++) ck_assert_int_eq(p2.v[i], p1.v[i]);
        for (size_t i = 0; i < out.n; i++)
            ck_assert_msg(p2.v[p1.n + i] == out.v[i], "output %zu: token %zu of turn 1's output is %d, turn 2 has %d",
                          k, i, out.v[i], p2.v[p1.n + i]);
        json_decref(rc.calls);
        smol_chat_buf_deinit(&rc.content);
        smol_ids_free(&p1);
        smol_ids_free(&out);
        smol_ids_free(&p2);
        json_decref(t1);
    }
    smol_tokenizer_free(&t);
    smol_gguf_close(&g);
}
END_TEST

static Suite *template_suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, llamacpp_renders);
    tcase_add_test(tc, jinja2_renders);
    tcase_add_test(tc, detect_templates);
    tcase_add_test(tc, detect_from_gguf);
    tcase_add_test(tc, pyrepr_values);
    tcase_add_test(tc, float_roundtrip);
    tcase_add_test(tc, dates);
    tcase_add_test(tc, thinking_flag_and_append);
    tcase_add_test(tc, chatml_fallback);
    tcase_add_test(tc, rejected_inputs);
    tcase_add_test(tc, rejected_struct_inputs);
    tcase_add_test(tc, spans_exact_random);
    tcase_add_test(tc, spans_on_golden_renders);
    tcase_add_test(tc, tool_history_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return template_suite();
}
