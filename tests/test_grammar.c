/*
 * test_grammar.c - the grammar engine (daemon/text/): compilers on bytes,
 * token masks on the real SmolLM3 vocabulary, rollback, hostile input.
 *
 *   - GBNF: parse errors (with line/column), llama.cpp's grammars
 *     (tests/grammar/gbnf/) with example sentences accepted and near misses
 *     rejected.
 *   - regex: acceptance tables (JSON Schema `pattern` dialect).
 *   - JSON Schema: acceptance tables per keyword, unsupported keywords named,
 *     flexible whitespace; the official JSON-Schema-Test-Suite (draft
 *     2020-12, committed in tests/fixtures/jsts/; a missing copy fails):
 *     every case of a schema that compiles must be decided
 *     correctly (instances re-serialized the way the grammar writes JSON:
 *     compact, keys in schema property order, integral numbers as integers).
 *   - masks on fixture-t.Q8_0.gguf's 128256-token tokenizer: while a valid
 *     instance is fed token by token, the mask bit of every token (or a
 *     random sample) equals a brute-force accept-then-rollback; end-token
 *     forcing; rollback restores earlier masks exactly.
 *   - within a length limit: min_bytes against brute force; random walks
 *     under a token budget end complete.
 *   - hostile input: deep nesting, huge enums, recursive refs, 1 MB schemas,
 *     left recursion, repetition bombs, bounds at and over the limit, nested
 *     bounds: a clear error or a bounded compile and index.
 *   - bounded repetitions (maxLength below the longest token): the shared
 *     index's masks equal the unshared index's on every token and brute
 *     force on a sample, on walks to the bound; strings at boundary counts.
 */
#include "daemon/model/gguf.h"
#include "daemon/grammar/grammar.h"
#include "daemon/text/grammar_vocab.h"
#include "daemon/text/tokenizer.h"

#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define FIXTURE_T "models/fixture-t.Q8_0.gguf"

static struct smol_tokenizer *tok;
static struct smol_grammar_vocab *vocab;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 1 if the whole string is a sentence of g. */
static int accepts(const struct smol_grammar *g, const char *s, size_t n)
{
    char err[SMOL_ERRLEN];
    struct smol_grammar_matcher *m;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, NULL, err), SMOL_OK);
    int ok = smol_grammar_matcher_accept_bytes(m, s, n) == SMOL_OK && smol_grammar_matcher_can_end(m);
    smol_grammar_matcher_free(&m);
    return ok;
}

static struct smol_grammar *schema(const char *json, const struct smol_grammar_opts *o)
{
    char err[SMOL_ERRLEN] = "";
    struct smol_grammar *g = NULL;
    enum smol_err rc = smol_grammar_compile_json_schema(json, strlen(json), o, &g, err);
    ck_assert_msg(rc == SMOL_OK, "%s: %s", json, err);
    return g;
}

struct accept_case {
    const char *text;
    int ok;
};

static void check_cases(const struct smol_grammar *g, const char *what, const struct accept_case *c)
{
    for (; c->text; c++)
        ck_assert_msg(accepts(g, c->text, strlen(c->text)) == c->ok, "%s: '%s' should be %s", what, c->text,
                      c->ok ? "accepted" : "rejected");
}

/* ---- GBNF --------------------------------------------------------------------------- */

START_TEST(t_gbnf_errors)
{
    static const char *bad[] = {
        "root ::= \"abc",               /* unterminated literal */
        "root ::= [abc",                /* unterminated class */
        "root ::= (\"a\"",              /* missing ) */
        "root ::= foo",                 /* undefined rule */
        "rot ::= \"a\"",                /* no root */
        "root ::= root \"a\" | \"b\"",  /* left recursion */
        "root ::= a\na ::= b? a \"x\"\nb ::= \"y\"",   /* left recursion through a nullable prefix */
        "root ::= *",                   /* nothing to repeat */
        "root ::= \"a\"{3,1}",          /* bad bounds */
        "root = \"a\"",                 /* not ::= */
        "root ::= \"\\q\"",             /* unknown escape */
        "root ::= \"a\"{99999}",        /* over the repetition limit */
        NULL};
    for (int i = 0; bad[i]; i++) {
        char err[SMOL_ERRLEN] = "";
        struct smol_grammar *g = NULL;
        enum smol_err rc = smol_grammar_compile_gbnf(bad[i], strlen(bad[i]), NULL, &g, err);
        ck_assert_msg(rc != SMOL_OK && g == NULL && err[0], "'%s' compiled", bad[i]);
    }
    char err[SMOL_ERRLEN];
    struct smol_grammar *g;
    ck_assert_int_eq(smol_grammar_compile_gbnf("root ::= <think> \"x\"", 20, NULL, &g, err), SMOL_EUNSUPPORTED);
    ck_assert_int_eq(smol_grammar_compile_gbnf("root ::= \"a\"\n  \"b\" ::=", 23, NULL, &g, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "line 2"), "%s", err);
}
END_TEST

static struct smol_grammar *gbnf_file(const char *name)
{
    char rel[128], err[SMOL_ERRLEN] = "";
    snprintf(rel, sizeof rel, "../grammar/gbnf/%s", name);
    const char *p = fixture_path(rel);
    ck_assert_msg(p != NULL, "missing tests/grammar/gbnf/%s", name);
    size_t n = 0;
    char *text = read_file(p, &n);
    struct smol_grammar *g = NULL;
    ck_assert_msg(smol_grammar_compile_gbnf(text, n, NULL, &g, err) == SMOL_OK, "%s: %s", name, err);
    free(text);
    return g;
}

START_TEST(t_gbnf_llama)
{
    struct { const char *file; struct accept_case c[8]; } t[] = {
        {"json.gbnf", {{"{\"a\": [1, 2.5e3, \"x\\n\", true, null, {}], \"b\":{\"c\":\"\\u00e9\"}}", 1}, {"{}", 1},
                       {"{\"a\":}", 0}, {"[1]", 0}, {"{\"a\": 01}", 0}, {NULL, 0}}},
        {"json_arr.gbnf", {{"[\n{\"a\": 1},\n\"x\"]", 1}, {"[\n]", 1}, {"[1]", 0}, {NULL, 0}}},
        {"arithmetic.gbnf", {{"x = 1\n", 1}, {"(a+b)*c-12/d=e\n", 1}, {"x=(1\n", 0}, {"=1\n", 0}, {NULL, 0}}},
        {"chess.gbnf", {{"1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n", 1}, {"1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n", 1},
                        {"1. e4 e5\n", 0}, {"1. e9 e5\n2. a3 a6\n", 0}, {NULL, 0}}},
        {"c.gbnf", {{"int main(){int x = 1;return x;}", 1},
                    {"float f(int a){while(a<10){a = a+1;}return a*2;}", 1}, {"int main(){", 0}, {NULL, 0}}},
        {"list.gbnf", {{"- milk\n- eggs\n", 1}, {"- \n", 0}, {"milk\n", 0}, {NULL, 0}}},
        {"english.gbnf", {{"Hello, world! 42 times.", 1}, {"Hello  world", 0}, {"héllo", 0}, {NULL, 0}}},
        {"japanese.gbnf", {{"こんにちは 世界", 1}, {"カタカナ、ひらがな", 1}, {"hello", 0}, {NULL, 0}}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct smol_grammar *g = gbnf_file(t[i].file);
        check_cases(g, t[i].file, t[i].c);
        smol_grammar_free(&g);
    }
}
END_TEST

/* ---- regex -------------------------------------------------------------------------- */

START_TEST(t_regex)
{
    struct { const char *re; struct accept_case c[8]; } t[] = {
        {"^[a-c]+\\d{2}$", {{"abc12", 1}, {"a00", 1}, {"abc1", 0}, {"d12", 0}, {"ab123", 0}, {NULL, 0}}},
        {"^(foo|ba[rz])?x*$", {{"", 1}, {"foo", 1}, {"bazxx", 1}, {"barfoo", 0}, {NULL, 0}}},
        {"^\\w+@\\w+\\.com$", {{"a_1@b.com", 1}, {"a@b.org", 0}, {"@b.com", 0}, {NULL, 0}}},
        {"ab", {{"xxabyy", 1}, {"ab", 1}, {"a b", 0}, {NULL, 0}}},          /* unanchored: a search */
        {"^a.c$", {{"abc", 1}, {"aéc", 1}, {"a\nc", 0}, {NULL, 0}}},
        {"^[^0-9\\s]{2,3}$", {{"ab", 1}, {"abc", 1}, {"a1", 0}, {"a b", 0}, {"abcd", 0}, {NULL, 0}}},
        {"^\\x41\\u00e9[\\-+]?$", {{"Aé", 1}, {"Aé-", 1}, {"Aé*", 0}, {NULL, 0}}},
        {"^a{2,}?b{0,2}$", {{"aa", 1}, {"aaaabb", 1}, {"ab", 0}, {"aabbb", 0}, {NULL, 0}}},
        {"^[\\d.]+$", {{"1.2", 1}, {"1a", 0}, {NULL, 0}}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char err[SMOL_ERRLEN] = "";
        struct smol_grammar *g = NULL;
        ck_assert_msg(smol_grammar_compile_regex(t[i].re, strlen(t[i].re), NULL, &g, err) == SMOL_OK, "%s: %s", t[i].re, err);
        check_cases(g, t[i].re, t[i].c);
        smol_grammar_free(&g);
    }
    static const struct { const char *re; enum smol_err rc; } bad[] = {
        {"(a", SMOL_EINVAL}, {"a)", SMOL_EINVAL}, {"[a", SMOL_EINVAL}, {"*a", SMOL_EINVAL}, {"a{3,1}", SMOL_EINVAL},
        {"(a)\\1", SMOL_EUNSUPPORTED}, {"(?=a)", SMOL_EUNSUPPORTED}, {"\\bword", SMOL_EUNSUPPORTED}, {"a^b", SMOL_EUNSUPPORTED},
        {NULL, 0}};
    for (int i = 0; bad[i].re; i++) {
        char err[SMOL_ERRLEN] = "";
        struct smol_grammar *g = NULL;
        enum smol_err rc = smol_grammar_compile_regex(bad[i].re, strlen(bad[i].re), NULL, &g, err);
        ck_assert_msg(rc == bad[i].rc, "%s: %d (%s)", bad[i].re, rc, err);
    }
}
END_TEST

/* ---- JSON Schema on bytes ----------------------------------------------------------- */

START_TEST(t_schema_bytes)
{
    struct { const char *schema; struct accept_case c[10]; } t[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":120},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
         {{"{\"a\":3}", 1}, {"{\"a\":120,\"b\":\"x\\\"y\"}", 1}, {"{\"a\":2}", 0}, {"{\"a\":121}", 0}, {"{\"b\":\"x\"}", 0},
          {"{\"b\":\"x\",\"a\":5}", 0 /* schema order */}, {"{\"a\":5,\"c\":1}", 0 /* no extras by default */}, {"{\"a\":007}", 0}, {NULL, 0}}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":-20,\"exclusiveMaximum\":1005}",
         {{"-19", 1}, {"-20", 0}, {"0", 1}, {"1004", 1}, {"1005", 0}, {"-0", 0}, {"99", 1}, {NULL, 0}}},
        {"{\"type\":\"integer\",\"minimum\":0}", {{"0", 1}, {"123456789012", 1}, {"-1", 0}, {"01", 0}, {NULL, 0}}},
        {"{\"type\":\"integer\",\"maximum\":-5}", {{"-5", 1}, {"-123", 1}, {"-4", 0}, {"0", 0}, {NULL, 0}}},
        {"{\"type\":\"number\",\"minimum\":0}", {{"0.5", 1}, {"1e10", 1}, {"-0.5", 0}, {NULL, 0}}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":3}",
         {{"[true]", 1}, {"[true,false,true]", 1}, {"[]", 0}, {"[true,true,true,true]", 0}, {"[1]", 0}, {NULL, 0}}},
        {"{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"items\":false,\"type\":\"array\"}",
         {{"[\"a\",null]", 1}, {"[\"a\"]", 1}, {"[]", 1}, {"[\"a\",null,1]", 0}, {"[null]", 0}, {NULL, 0}}},
        {"{\"enum\":[\"red\",1,null,{\"a\":[1]}]}", {{"\"red\"", 1}, {"1", 1}, {"1.0", 1}, {"null", 1}, {"{\"a\":[1]}", 1}, {"\"blue\"", 0}, {NULL, 0}}},
        {"{\"const\":\"x\\\"y\"}", {{"\"x\\\"y\"", 1}, {"\"xy\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {{"\"ab\"", 1}, {"\"é\\nx\"", 1}, {"\"a\"", 0}, {"\"abcd\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\$\"}", {{"\"a\\\"b\\\\\"", 1}, {"\"a\\\"b\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", {{"\"2025-07-14T09:30:00Z\"", 1}, {"\"2025-07-14T09:30:00.25+02:00\"", 1},
                                                            {"\"2025-13-14T09:30:00Z\"", 0}, {"\"2025-07-14 09:30:00Z\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {{"\"3f2b8c1e-9a4d-4e2b-8f61-2c9d0e7a5b13\"", 1}, {"\"3f2b8c1e-9a4d-4e2b-8f61\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {{"\"ada@example.org\"", 1}, {"\"ada@\"", 0}, {"\"a b@c.d\"", 0}, {NULL, 0}}},
        {"{\"type\":\"string\",\"format\":\"date\"}", {{"\"2024-02-29\"", 1}, {"\"2024-2-29\"", 0}, {NULL, 0}}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {{"5", 1}, {"\"a\"", 1}, {"\"ab\"", 0}, {"true", 0}, {NULL, 0}}},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"const\":1}},\"required\":[\"b\"]}],\"type\":\"object\"}",
         {{"{\"a\":4,\"b\":1}", 1}, {"{\"a\":4}", 0}, {"{\"a\":4,\"b\":2}", 0}, {NULL, 0}}},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
         {{"{\"v\":1}", 1}, {"{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}", 1}, {"{\"v\":1,\"next\":{}}", 0}, {NULL, 0}}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
         {{"{}", 1}, {"{\"a\":null,\"b\":1}", 1}, {"{\"b\":1,\"ab\":2}", 1}, {"{\"a\":1}", 0}, {"{\"b\":null}", 0}, {NULL, 0}}},
        {"{\"type\":\"object\",\"properties\":{\"x\":{},\"y\":{\"type\":\"boolean\"}}}",
         {{"{}", 1}, {"{\"x\":[1,{\"q\":\"r\"}]}", 1}, {"{\"y\":true}", 1}, {"{\"x\":1,\"y\":false}", 1}, {"{,\"y\":true}", 0}, {"{\"x\":1,}", 0}, {NULL, 0}}},
        {"true", {{"{\"a\":[1,2.5,-3e-2,\"s\",null,true]}", 1}, {"[]", 1}, {"nul", 0}, {NULL, 0}}},
        {"{\"type\":[\"string\",\"null\"],\"description\":\"annotations pass\",\"title\":\"t\",\"examples\":[\"a\"]}",
         {{"null", 1}, {"\"s\"", 1}, {"1", 0}, {NULL, 0}}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct smol_grammar *g = schema(t[i].schema, NULL);
        check_cases(g, t[i].schema, t[i].c);
        smol_grammar_free(&g);
    }
    /* flexible whitespace and the generic grammars */
    struct smol_grammar_opts o = {.flexible_ws = 1};
    struct smol_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"}},\"required\":[\"a\"]}", &o);
    static const struct accept_case flex[] = {{"{ \"a\" : [ 1 , 2 ] }", 1}, {"{\"a\":[]}", 1}, {"{\n  \"a\": []\n}", 1}, {" {\"a\":[]} ", 1 /* whitespace around every structural token */}, {"{\"a\":[]}x", 0}, {NULL, 0}};
    check_cases(g, "flexible", flex);
    smol_grammar_free(&g);
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_grammar_compile_json_any(1, NULL, &g, err), SMOL_OK);
    static const struct accept_case obj[] = {{"{\"k\":[1,{\"z\":null}]}", 1}, {"[1]", 0}, {"{}", 1}, {NULL, 0}};
    check_cases(g, "json_object", obj);
    smol_grammar_free(&g);
}
END_TEST

START_TEST(t_schema_errors)
{
    static const struct { const char *schema; enum smol_err rc; const char *needle; } t[] = {
        {"{\"type\":\"array\",\"uniqueItems\":true}", SMOL_EUNSUPPORTED, "uniqueItems"},
        {"{\"not\":{\"type\":\"string\"}}", SMOL_EUNSUPPORTED, "'not'"},
        {"{\"properties\":{\"a\":{\"if\":{}}}}", SMOL_EUNSUPPORTED, "#/properties/a"},
        {"{\"dependentRequired\":{}}", SMOL_EUNSUPPORTED, "dependentRequired"},
        {"{\"patternProperties\":{}}", SMOL_EUNSUPPORTED, "patternProperties"},
        {"{\"type\":\"string\",\"format\":\"hostname-ish\"}", SMOL_EUNSUPPORTED, "hostname-ish"},
        {"{\"type\":\"integer\",\"multipleOf\":3}", SMOL_EUNSUPPORTED, "multipleOf"},
        {"{\"$ref\":\"http://example.com/s.json\"}", SMOL_EUNSUPPORTED, "$ref"},
        {"{\"$ref\":\"#/$defs/missing\"}", SMOL_EINVAL, "missing"},
        {"{\"type\":\"object\",", SMOL_EFORMAT, "JSON"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", SMOL_EINVAL, "regex"},
        {"{\"type\":\"strin\"}", SMOL_EINVAL, "type"},
        {NULL, 0, NULL}};
    for (int i = 0; t[i].schema; i++) {
        char err[SMOL_ERRLEN] = "";
        struct smol_grammar *g = NULL;
        enum smol_err rc = smol_grammar_compile_json_schema(t[i].schema, strlen(t[i].schema), NULL, &g, err);
        ck_assert_msg(rc == t[i].rc && g == NULL, "%s: rc %d (%s)", t[i].schema, rc, err);
        ck_assert_msg(strstr(err, t[i].needle), "%s: '%s' lacks '%s'", t[i].schema, err, t[i].needle);
    }
}
END_TEST

/* ---- hostile input ------------------------------------------------------------------ */

static char *repeat(const char *a, const char *mid, const char *z, int n)
{
    size_t la = strlen(a), lz = strlen(z), lm = strlen(mid);
    char *s = malloc(n * (la + lz) + lm + 1), *p = s;
    for (int i = 0; i < n; i++) { memcpy(p, a, la); p += la; }
    memcpy(p, mid, lm); p += lm;
    for (int i = 0; i < n; i++) { memcpy(p, z, lz); p += lz; }
    *p = 0;
    return s;
}

START_TEST(t_hostile)
{
    char err[SMOL_ERRLEN];
    struct smol_grammar *g = NULL;
    double t0 = now_s();
    /* deep nesting: a clear error past max_depth */
    char *deep = repeat("{\"type\":\"array\",\"items\":", "{\"type\":\"integer\"}", "}", 1000);
    ck_assert_int_eq(smol_grammar_compile_json_schema(deep, strlen(deep), NULL, &g, err), SMOL_ETOOLARGE);
    ck_assert_msg(strstr(err, "deeper"), "%s", err);
    free(deep);
    deep = repeat("{\"type\":\"array\",\"items\":", "{\"type\":\"integer\"}", "}", 100000);   /* past jansson's own limit */
    ck_assert_int_ne(smol_grammar_compile_json_schema(deep, strlen(deep), NULL, &g, err), SMOL_OK);
    free(deep);
    deep = repeat("{\"type\":\"array\",\"items\":", "{\"type\":\"integer\"}", "}", 40);
    ck_assert_int_eq(smol_grammar_compile_json_schema(deep, strlen(deep), NULL, &g, err), SMOL_OK);
    smol_grammar_free(&g);
    free(deep);
    /* huge enum */
    size_t cap = 100000 * 12 + 64, n = 0;
    char *en = malloc(cap);
    n += (size_t)sprintf(en, "{\"enum\":[");
    for (int i = 0; i < 100000; i++) n += (size_t)sprintf(en + n, "%s\"v%d\"", i ? "," : "", i);
    n += (size_t)sprintf(en + n, "]}");
    ck_assert_int_eq(smol_grammar_compile_json_schema(en, n, NULL, &g, err), SMOL_ETOOLARGE);
    free(en);
    /* a 1 MB schema: over the input limit; 1 MB with a raised limit: bounded by the automaton limits */
    size_t big = (1 << 20) + 100;
    char *s = malloc(big + 64);
    n = (size_t)sprintf(s, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; n < big; i++) n += (size_t)sprintf(s + n, "%s\"p%d\":{\"type\":\"string\",\"maxLength\":50}", i ? "," : "", i);
    n += (size_t)sprintf(s + n, "}}");
    ck_assert_int_eq(smol_grammar_compile_json_schema(s, n, NULL, &g, err), SMOL_ETOOLARGE);
    struct smol_grammar_opts o = {.max_input = 4 << 20};
    enum smol_err rc = smol_grammar_compile_json_schema(s, n, &o, &g, err);
    ck_assert_msg(rc == SMOL_OK || rc == SMOL_ETOOLARGE, "1 MB schema: %d %s", rc, err);
    smol_grammar_free(&g);
    free(s);
    /* recursive refs: fine; a ref that only refers to itself: left recursion, an error */
    static const char *rec = "{\"$defs\":{\"a\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"}}]}},\"$ref\":\"#/$defs/a\"}";
    g = schema(rec, NULL);
    ck_assert(accepts(g, "[[[],null],[[[null]]]]", 22));
    smol_grammar_free(&g);
    static const char *self = "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}";
    ck_assert_int_ne(smol_grammar_compile_json_schema(self, strlen(self), NULL, &g, err), SMOL_OK);
    static const char *loop = "{\"allOf\":[{\"$ref\":\"#\"}]}";
    ck_assert_int_ne(smol_grammar_compile_json_schema(loop, strlen(loop), NULL, &g, err), SMOL_OK);
    /* repetition bombs */
    static const char *bomb = "root ::= ((((\"a\"{100}){100}){100}){100})";
    ck_assert_int_eq(smol_grammar_compile_gbnf(bomb, strlen(bomb), NULL, &g, err), SMOL_ETOOLARGE);
    static const char *maxlen = "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":10000},\"maxItems\":10000}";
    rc = smol_grammar_compile_json_schema(maxlen, strlen(maxlen), NULL, &g, err);
    ck_assert_msg(rc == SMOL_OK || rc == SMOL_ETOOLARGE, "%d %s", rc, err);
    smol_grammar_free(&g);
    /* deep GBNF parentheses and deep regex groups */
    char *par = repeat("(", "\"a\"", ")", 100000);
    char *gb = malloc(strlen(par) + 16);
    sprintf(gb, "root ::= %s", par);
    ck_assert_int_eq(smol_grammar_compile_gbnf(gb, strlen(gb), NULL, &g, err), SMOL_ETOOLARGE);
    free(gb);
    free(par);
    par = repeat("(", "a", ")", 100000);
    ck_assert_int_eq(smol_grammar_compile_regex(par, strlen(par), NULL, &g, err), SMOL_ETOOLARGE);
    free(par);
    /* a nondeterministic grammar with many live stacks stays bounded */
    static const char *amb = "root ::= x x x x x x x x x x x x\nx ::= \"a\"*";
    ck_assert_int_eq(smol_grammar_compile_gbnf(amb, strlen(amb), NULL, &g, err), SMOL_OK);
    ck_assert(accepts(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 39));
    smol_grammar_free(&g);
    ck_assert_msg(now_s() - t0 < 60, "hostile compiles took %.1f s", now_s() - t0);
}
END_TEST

/* ---- the official JSON-Schema-Test-Suite -------------------------------------------- */

/* Key ranks: the first place each property name appears in some "properties". */
static void rank_keys(json_t *s, json_t *ranks)
{
    if (json_is_object(s)) {
        const char *k;
        json_t *v;
        json_t *props = json_object_get(s, "properties");
        if (json_is_object(props))
            json_object_foreach(props, k, v)
                if (!json_object_get(ranks, k)) json_object_set_new(ranks, k, json_integer((json_int_t)json_object_size(ranks)));
        json_object_foreach(s, k, v) rank_keys(v, ranks);
    } else if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) rank_keys(v, ranks);
    }
}

/* The instance as our grammars write it: compact, keys by rank (unknown
 * keys after, by name), integral numbers as integers. */
static json_t *canon(json_t *v, json_t *ranks)
{
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15)
        return json_integer((json_int_t)json_real_value(v));
    if (json_is_array(v)) {
        json_t *a = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) json_array_append_new(a, canon(x, ranks));
        return a;
    }
    if (json_is_object(v)) {
        size_t n = json_object_size(v), k = 0;
        const char **keys = malloc((n + 1) * sizeof *keys);
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) keys[k++] = key;
        /* stable insertion sort by rank */
        for (size_t i = 1; i < n; i++) {
            const char *c = keys[i];
            json_t *rc = json_object_get(ranks, c);
            long long r = rc ? json_integer_value(rc) : 1LL << 40;
            size_t j = i;
            while (j > 0) {   /* unranked keys last, by name (as enum/const objects are written) */
                json_t *rp = json_object_get(ranks, keys[j - 1]);
                long long q = rp ? json_integer_value(rp) : 1LL << 40;
                if (q < r || (q == r && (rc || strcmp(keys[j - 1], c) <= 0))) break;
                keys[j] = keys[j - 1];
                j--;
            }
            keys[j] = c;
        }
        json_t *o = json_object();
        for (size_t i = 0; i < n; i++) json_object_set_new(o, keys[i], canon(json_object_get(v, keys[i]), ranks));
        free(keys);
        return o;
    }
    return json_incref(v);
}

START_TEST(t_json_schema_test_suite)
{
    const char *dir = getenv("SMOL_JSTS");
    if (!dir) dir = fixture_path("jsts/draft2020-12");
    ck_assert_msg(dir != NULL, "tests/fixtures/jsts/draft2020-12 missing");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    /* format is an annotation in 2020-12 (we assert it by design); these need
     * remote documents, $id-relative or $anchor/$dynamicRef resolution */
    static const char *skip_files[] = {"format.json", "refRemote.json", "dynamicRef.json", "anchor.json", "vocabulary.json", NULL};
    int cases = 0, compiled = 0, unsupported = 0, tests = 0, correct = 0, wrong = 0;
    struct dirent *e;
    char unsup[4096] = "";
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        int skip = 0;
        for (int i = 0; skip_files[i]; i++) skip |= !strcmp(e->d_name, skip_files[i]);
        if (skip) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_error_t je;
        json_t *file = json_load_file(path, JSON_ALLOW_NUL, &je);
        ck_assert_msg(file != NULL, "%s: %s", path, je.text);
        size_t i;
        json_t *c;
        json_array_foreach(file, i, c) {
            cases++;
            json_t *sch = json_object_get(c, "schema");
            char *text = json_dumps(sch, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
            char err[SMOL_ERRLEN] = "";
            struct smol_grammar *g = NULL;
            struct smol_grammar_opts o = {.extra_properties = 1};
            enum smol_err rc = smol_grammar_compile_json_schema(text, strlen(text), &o, &g, err);
            free(text);
            if (rc) {
                unsupported++;
                if (getenv("SMOL_JSTS_VERBOSE")) printf("JSTS UNSUPPORTED %s / %s: %s\n", e->d_name,
                                                       json_string_value(json_object_get(c, "description")), err);
                ck_assert_msg(rc == SMOL_EUNSUPPORTED || rc == SMOL_EINVAL, "%s '%s': rc %d %s", e->d_name,
                              json_string_value(json_object_get(c, "description")), rc, err);
                if (strlen(unsup) + strlen(e->d_name) + 4 < sizeof unsup && !strstr(unsup, e->d_name)) {
                    strcat(unsup, e->d_name);
                    strcat(unsup, " ");
                }
                continue;
            }
            compiled++;
            json_t *ranks = json_object();
            rank_keys(sch, ranks);
            size_t j;
            json_t *t;
            json_array_foreach(json_object_get(c, "tests"), j, t) {
                json_t *inst = canon(json_object_get(t, "data"), ranks);
                char *bytes = json_dumps(inst, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
                int want = json_is_true(json_object_get(t, "valid"));
                int got = accepts(g, bytes, strlen(bytes));
                tests++;
                if (got == want) correct++;
                else {
                    wrong++;
                    printf("JSTS WRONG %s / %s / %s: %s -> %s\n", e->d_name, json_string_value(json_object_get(c, "description")),
                           json_string_value(json_object_get(t, "description")), bytes, got ? "accepted" : "rejected");
                }
                free(bytes);
                json_decref(inst);
            }
            json_decref(ranks);
            smol_grammar_free(&g);
        }
        json_decref(file);
    }
    closedir(d);
    printf("JSON-Schema-Test-Suite draft2020-12: %d schemas, %d compiled, %d unsupported (files: %s); "
           "%d/%d instances decided correctly, %d wrong\n", cases, compiled, unsupported, unsup, correct, tests, wrong);
    ck_assert_int_eq(wrong, 0);
}
END_TEST

/* ---- token masks on the real vocabulary --------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static int bit(const uint32_t *m, int32_t t) { return (m[t >> 5] >> (t & 31)) & 1; }

/* SMOL_TEST_QUICK (the sanitizer run): the brute-force comparisons sample
 * fewer steps and walks; make test runs them all, unsanitized. */
static int quick(void) { return getenv("SMOL_TEST_QUICK") != NULL; }

/* 1 if accept_token(t) succeeds (then undone). */
static int brute(struct smol_grammar_matcher *m, int32_t t)
{
    if (smol_grammar_matcher_accept_token(m, t) != SMOL_OK) return 0;
    ck_assert_int_eq(smol_grammar_matcher_rollback(m, 1), SMOL_OK);
    return 1;
}

static char *schema_file(const char *name, const char *ext)
{
    char rel[256];
    snprintf(rel, sizeof rel, "../grammar/schemas/%s%s", name, ext);
    const char *p = fixture_path(rel);
    ck_assert_msg(p != NULL, "missing tests/grammar/schemas/%s%s", name, ext);
    return read_file(p, NULL);
}

/* Walks the tokenized instance; at each step compares the mask with brute
 * force on every token (full) or on a random sample plus every allowed one. */
static void mask_walk(const char *name, int full)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN] = "";
    char *sch = schema_file(name, ".json"), *inst = schema_file(name, ".instance.json");
    struct smol_grammar *g = schema(sch, NULL);
    struct smol_grammar_index *ix = NULL;
    ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    struct smol_ids ids = {0};
    ck_assert_int_eq(smol_tokenizer_encode(tok, inst, strlen(inst), 0, &ids, err), SMOL_OK);
    int32_t nv = smol_grammar_vocab_size(vocab);
    uint32_t *mask = malloc(((nv + 31) / 32) * sizeof *mask);
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    for (size_t i = 0; i <= ids.n; i++) {
        smol_grammar_matcher_fill_mask(m, mask);
        int all = quick() ? i % 8 == 0 : full || i % 8 == 0;
        for (int32_t t = 0; t < nv; t++) {
            if (!all && !bit(mask, t) && rnd() % 64) continue;
            int b = brute(m, t);
            ck_assert_msg(bit(mask, t) == b, "%s step %zu token %d '%s': mask %d, brute force %d", name, i, t,
                          smol_tokenizer_piece(tok, t, &(size_t){0}), bit(mask, t), b);
        }
        if (i < ids.n) {
            ck_assert_msg(bit(mask, ids.v[i]), "%s step %zu: the instance's token %d not allowed", name, i, ids.v[i]);
            ck_assert_int_eq(smol_grammar_matcher_accept_token(m, ids.v[i]), SMOL_OK);
        }
    }
    /* the instance is complete: the end token is allowed, and for an object nothing else */
    ck_assert(smol_grammar_matcher_can_end(m));
    ck_assert(bit(mask, sp->im_end));
    ck_assert(smol_grammar_matcher_is_done(m));
    for (int32_t t = 0; t < nv; t++)
        ck_assert_msg(!bit(mask, t) || smol_tokenizer_is_eog(tok, t), "%s: token %d allowed after the end", name, t);
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, sp->think), SMOL_EINVAL);   /* special: never */
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, sp->im_end), SMOL_OK);
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, ids.v[0]), SMOL_EINVAL);
    smol_ids_free(&ids);
    free(mask);
    free(sch);
    free(inst);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}

START_TEST(t_mask_tool_args) { mask_walk("tool_args", 1); }
END_TEST
START_TEST(t_mask_person) { mask_walk("person", 0); }
END_TEST
START_TEST(t_mask_order) { mask_walk("order", 0); }
END_TEST
START_TEST(t_mask_enum) { mask_walk("enum_status", 0); }
END_TEST
START_TEST(t_mask_tree) { mask_walk("tree", 0); }
END_TEST
START_TEST(t_mask_event) { mask_walk("event", 0); }
END_TEST

/* Masks of a GBNF grammar, where the rule ends mid-token everywhere
 * (arithmetic: ws-separated terms), on random walks of allowed tokens. */
START_TEST(t_mask_gbnf_random)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    const char *files[] = {"arithmetic.gbnf", "json.gbnf", "chess.gbnf"};
    int32_t nv = smol_grammar_vocab_size(vocab);
    uint32_t *mask = malloc(((nv + 31) / 32) * sizeof *mask);
    for (int f = 0; f < 3; f++) {
        struct smol_grammar *g = gbnf_file(files[f]);
        struct smol_grammar_index *ix = NULL;
        ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
        struct smol_grammar_matcher *m = NULL;
        ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
        for (int step = 0; step < 40 && !smol_grammar_matcher_is_done(m); step++) {
            smol_grammar_matcher_fill_mask(m, mask);
            int32_t allowed[4096];
            int na = 0;
            for (int32_t t = 0; t < nv; t++) {
                int bm = bit(mask, t);
                if (bm && na < 4096 && !smol_tokenizer_is_eog(tok, t)) allowed[na++] = t;
                if (!bm && rnd() % 16) continue;
                ck_assert_msg(bm == brute(m, t), "%s step %d token %d: mask %d", files[f], step, t, bm);
            }
            if (!na) break;
            ck_assert_int_eq(smol_grammar_matcher_accept_token(m, allowed[rnd() % na]), SMOL_OK);
        }
        smol_grammar_matcher_free(&m);
        smol_grammar_index_free(&ix);
        smol_grammar_free(&g);
    }
    free(mask);
}
END_TEST

/* A long bounded repetition: most of its copies take their twin's class
 * (smol_grammar_index_shared); masks still equal brute force all the way to
 * the bound, where the shared and the walked copies meet. */
START_TEST(t_mask_shared_repetition)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    const char *re = "[a-z]{0,60}x";
    struct smol_grammar *g = NULL;
    ck_assert_msg(smol_grammar_compile_regex(re, strlen(re), NULL, &g, err) == SMOL_OK, "%s", err);
    struct smol_grammar_index *ix = NULL;
    ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
    printf("[a-z]{0,60}x: %u states, %u classes shared with a twin\n", smol_grammar_n_states(g),
           smol_grammar_index_shared(ix));
    ck_assert_uint_gt(smol_grammar_index_shared(ix), 20);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    int32_t nv = smol_grammar_vocab_size(vocab);
    uint32_t *mask = malloc(((nv + 31) / 32) * sizeof *mask);
    int steps = 0;
    for (; steps < 200 && !smol_grammar_matcher_is_done(m); steps++) {
        smol_grammar_matcher_fill_mask(m, mask);
        int32_t allowed[4096];
        int na = 0;
        for (int32_t t = 0; t < nv; t++) {
            int bm = bit(mask, t);
            if (bm && na < 4096 && !smol_tokenizer_is_eog(tok, t)) allowed[na++] = t;
            if (rnd() % (bm ? 4 : 64)) continue;   /* a sample of both kinds */
            ck_assert_msg(bm == brute(m, t), "step %d token %d: mask %d", steps, t, bm);
        }
        if (!na) break;
        ck_assert_int_eq(smol_grammar_matcher_accept_token(m, allowed[rnd() % na]), SMOL_OK);
    }
    ck_assert_msg(smol_grammar_matcher_can_end(m), "the walk ended after %d steps without reaching the end", steps);
    free(mask);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}
END_TEST

/* Bounded repetitions below the longest token (128 bytes), where the copies
 * near the end take the short tokens' verdicts from their twin and walk only
 * the long ones, and states with the same edges share a class: the index
 * must give the masks of the index that walks every state in full (all
 * 128256 tokens, every step) and of brute force (a sample), on walks that
 * run each repetition to its bound (long tokens first half of the time). */
START_TEST(t_mask_bounded)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    static const struct { int regex; const char *text; } cases[] = {
        {0, "{\"type\":\"string\",\"minLength\":3,\"maxLength\":40}"},
        {0, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":20},"
            "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":6},\"maxItems\":4}},"
            "\"required\":[\"a\",\"b\"]}"},
        {1, "^[a-z ]{5,90}x$"},
        {1, "^(ab|c){2,30}[0-9]{0,3}$"},
    };
    int32_t nv = smol_grammar_vocab_size(vocab);
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask), *ref = malloc(words * sizeof *ref);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct smol_grammar *g = NULL;
        const char *x = cases[c].text;
        enum smol_err rc = cases[c].regex ? smol_grammar_compile_regex(x, strlen(x), NULL, &g, err)
                                          : smol_grammar_compile_json_schema(x, strlen(x), NULL, &g, err);
        ck_assert_msg(rc == SMOL_OK, "%s: %s", x, err);
        struct smol_grammar_index *ix = NULL, *full = NULL;
        double t0 = now_s();
        ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
        double t1 = now_s();
        ck_assert_msg(smol_grammar_index_new_unshared(&full, g, vocab, err) == SMOL_OK, "%s", err);
        printf("%s: %u states, %u shared, %u partial; index %.0f ms, unshared %.0f ms\n", x, smol_grammar_n_states(g),
               smol_grammar_index_shared(ix), smol_grammar_index_partial(ix), (t1 - t0) * 1e3, (now_s() - t1) * 1e3);
        fflush(stdout);
        ck_assert_uint_gt(smol_grammar_index_shared(ix) + smol_grammar_index_partial(ix), 0);
        struct smol_grammar_matcher *m = NULL, *mf = NULL;
        ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
        ck_assert_int_eq(smol_grammar_matcher_new(&mf, g, full, err), SMOL_OK);
        for (int walk = 0; walk < (quick() ? 1 : 3); walk++) {
            smol_grammar_matcher_reset(m);
            smol_grammar_matcher_reset(mf);
            int steps = 0;
            for (; steps < 120 && !smol_grammar_matcher_is_done(m); steps++) {
                smol_grammar_matcher_fill_mask(m, mask);
                smol_grammar_matcher_fill_mask(mf, ref);
                int32_t allowed[4096], longest = -1;
                size_t best = 0;
                int na = 0;
                for (int32_t t = 0; t < nv; t++) {
                    int bm = bit(mask, t);
                    ck_assert_msg(bm == bit(ref, t), "%s walk %d step %d token %d '%s': mask %d, unshared index %d", x,
                                  walk, steps, t, smol_tokenizer_piece(tok, t, &(size_t){0}), bm, bit(ref, t));
                    if (bm && !smol_tokenizer_is_eog(tok, t)) {
                        size_t len = 0;
                        smol_tokenizer_piece(tok, t, &len);
                        if (len > best) { best = len; longest = t; }
                        if (na < 4096) allowed[na++] = t;
                    }
                    if (rnd() % (bm ? 16 : 256)) continue;
                    ck_assert_msg(bm == brute(m, t), "%s step %d token %d: mask %d", x, steps, t, bm);
                }
                if (!na) break;
                int32_t pick = (walk == 0 || rnd() % 2) && longest >= 0 ? longest : allowed[rnd() % na];
                ck_assert_int_eq(smol_grammar_matcher_accept_token(m, pick), SMOL_OK);
                ck_assert_int_eq(smol_grammar_matcher_accept_token(mf, pick), SMOL_OK);
            }
            ck_assert_msg(smol_grammar_matcher_can_end(m), "%s: walk %d ended after %d steps without reaching the end",
                          x, walk, steps);
        }
        smol_grammar_matcher_free(&m);
        smol_grammar_matcher_free(&mf);
        smol_grammar_index_free(&ix);
        smol_grammar_index_free(&full);
        smol_grammar_free(&g);
    }
    free(mask);
    free(ref);
}
END_TEST

/* Strings at the boundary counts of minLength/maxLength, in characters
 * (a 2-byte character and an escape count one each). */
START_TEST(t_bounded_counts)
{
    static const char *sch = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":64}";
    struct smol_grammar *g = schema(sch, NULL);
    char buf[1024];
    static const char *units[] = {"a", "\xc3\xa9", "\\n", "\\u00e9", "\xf0\x9f\x98\x80"};
    for (size_t u = 0; u < sizeof units / sizeof *units; u++)
        for (int n = 0; n <= 66; n++) {
            size_t k = 0;
            buf[k++] = '"';
            for (int i = 0; i < n; i++) { strcpy(buf + k, units[u]); k += strlen(units[u]); }
            buf[k++] = '"';
            int want = n >= 2 && n <= 64;
            ck_assert_msg(accepts(g, buf, k) == want, "%d x '%s': want %d", n, units[u], want);
        }
    smol_grammar_free(&g);
}
END_TEST

/* Hostile bounded repetitions, through the index: bounds over the limit are
 * refused when compiled, naming the keyword; the largest bounds allowed,
 * nested bounds and many bounded properties index in bounded time and
 * memory; an index over its memory budget is a clear error. */
START_TEST(t_hostile_index)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    struct smol_grammar *g = NULL;
    static const char *over[] = {"{\"type\":\"string\",\"maxLength\":100000}", "{\"type\":\"string\",\"minLength\":10001}",
                                 "{\"type\":\"array\",\"maxItems\":100000}", "{\"type\":\"string\",\"pattern\":\"^a{0,100000}$\"}"};
    for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
        ck_assert_int_eq(smol_grammar_compile_json_schema(over[i], strlen(over[i]), NULL, &g, err), SMOL_ETOOLARGE);
        ck_assert_msg(strstr(err, "10000"), "%s: %s", over[i], err);
    }
    ck_assert_int_eq(smol_grammar_compile_regex("a{0,100000}", 11, NULL, &g, err), SMOL_ETOOLARGE);
    static const char *big[] = {
        "{\"type\":\"string\",\"maxLength\":10000}",
        "{\"type\":\"string\",\"minLength\":9000,\"maxLength\":10000}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":10000},\"maxItems\":10000}",
        "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":100},\"maxItems\":100},\"maxItems\":100}",
        "{\"type\":\"string\",\"pattern\":\"^(([a-z]{0,100}[0-9]){0,100}x){0,20}$\"}",
    };
    for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        double t0 = now_s();
        enum smol_err rc = smol_grammar_compile_json_schema(big[i], strlen(big[i]), NULL, &g, err);
        double t1 = now_s();
        struct smol_grammar_index *ix = NULL;
        if (rc == SMOL_OK) rc = smol_grammar_index_new(&ix, g, vocab, (size_t)256 << 20, err);
        printf("%s: %s, compile %.0f ms, index %.0f ms, %.1f MiB\n", big[i], rc ? err : "ok", (t1 - t0) * 1e3,
               (now_s() - t1) * 1e3, ix ? smol_grammar_index_bytes(ix) / 1048576.0 : 0.0);
        fflush(stdout);
        ck_assert_msg(rc == SMOL_OK || rc == SMOL_ETOOLARGE, "%s: %d %s", big[i], rc, err);
        ck_assert_msg(now_s() - t0 < 30, "%s: %.1f s", big[i], now_s() - t0);
        smol_grammar_index_free(&ix);
        smol_grammar_free(&g);
    }
    /* 300 strings with distinct bounds (one rule each): over the automaton's or a 64 MiB index's
     * limit, a clear error, at once */
    size_t cap = 300 * 64 + 64, n = 0;
    char *s = malloc(cap);
    n += (size_t)sprintf(s, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 300; i++) n += (size_t)sprintf(s + n, "%s\"p%d\":{\"type\":\"string\",\"maxLength\":%d}", i ? "," : "", i, 20 + i);
    n += (size_t)sprintf(s + n, "}}");
    struct smol_grammar_opts o = {.max_input = 1 << 20};
    double t0 = now_s();
    enum smol_err rc = smol_grammar_compile_json_schema(s, n, &o, &g, err);
    if (rc == SMOL_OK) {
        struct smol_grammar_index *ix = NULL;
        rc = smol_grammar_index_new(&ix, g, vocab, (size_t)64 << 20, err);
        smol_grammar_index_free(&ix);
    }
    printf("300 distinct maxLength: %s in %.0f ms\n", rc ? err : "ok", (now_s() - t0) * 1e3);
    ck_assert_int_eq(rc, SMOL_ETOOLARGE);
    ck_assert_msg(strstr(err, "MiB") || strstr(err, "too large"), "%s", err);
    ck_assert_msg(now_s() - t0 < 60, "%.1f s", now_s() - t0);
    smol_grammar_free(&g);
    free(s);
}
END_TEST

START_TEST(t_rollback)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    char *sch = schema_file("order", ".json"), *inst = schema_file("order", ".instance.json");
    struct smol_grammar *g = schema(sch, NULL);
    struct smol_grammar_index *ix = NULL;
    ck_assert_int_eq(smol_grammar_index_new(&ix, g, vocab, 0, err), SMOL_OK);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    struct smol_ids ids = {0};
    ck_assert_int_eq(smol_tokenizer_encode(tok, inst, strlen(inst), 0, &ids, err), SMOL_OK);
    size_t words = (smol_grammar_vocab_size(vocab) + 31) / 32;
    uint32_t *masks = malloc((ids.n + 1) * words * sizeof *masks), *cur = malloc(words * sizeof *cur);
    for (size_t i = 0; i <= ids.n; i++) {
        smol_grammar_matcher_fill_mask(m, masks + i * words);
        if (i < ids.n) ck_assert_int_eq(smol_grammar_matcher_accept_token(m, ids.v[i]), SMOL_OK);
    }
    ck_assert_int_eq(smol_grammar_matcher_steps(m), ids.n);
    ck_assert_int_eq(smol_grammar_matcher_rollback(m, ids.n + 1), SMOL_EINVAL);
    /* roll back by random amounts, compare, go forward again */
    size_t at = ids.n;
    for (int r = 0; r < 30; r++) {
        size_t k = rnd() % (at + 1);
        ck_assert_int_eq(smol_grammar_matcher_rollback(m, k), SMOL_OK);
        at -= k;
        smol_grammar_matcher_fill_mask(m, cur);
        ck_assert_msg(!memcmp(cur, masks + at * words, words * sizeof *cur), "mask after rollback to %zu differs", at);
        size_t fwd = rnd() % (ids.n - at + 1);
        for (size_t i = 0; i < fwd; i++) ck_assert_int_eq(smol_grammar_matcher_accept_token(m, ids.v[at++]), SMOL_OK);
    }
    /* a rejected token leaves the matcher unchanged */
    smol_grammar_matcher_reset(m);
    smol_grammar_matcher_fill_mask(m, cur);
    ck_assert(!memcmp(cur, masks, words * sizeof *cur));
    int32_t bad = smol_tokenizer_find(tok, "]");
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, bad), SMOL_EINVAL);
    smol_grammar_matcher_fill_mask(m, cur);
    ck_assert(!memcmp(cur, masks, words * sizeof *cur));
    smol_ids_free(&ids);
    free(masks); free(cur); free(sch); free(inst);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}
END_TEST

/* A grammar that may end but need not: the end token and more digits both allowed. */
START_TEST(t_end_optional)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    char err[SMOL_ERRLEN];
    struct smol_grammar *g = schema("{\"type\":\"integer\",\"minimum\":0}", NULL);
    struct smol_grammar_index *ix = NULL;
    ck_assert_int_eq(smol_grammar_index_new(&ix, g, vocab, 0, err), SMOL_OK);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    size_t words = (smol_grammar_vocab_size(vocab) + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    smol_grammar_matcher_fill_mask(m, mask);
    ck_assert(!bit(mask, sp->im_end));       /* nothing written yet: may not end */
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, smol_tokenizer_find(tok, "4")), SMOL_OK);
    smol_grammar_matcher_fill_mask(m, mask);
    ck_assert(bit(mask, sp->im_end));
    ck_assert(bit(mask, smol_tokenizer_find(tok, "2")));
    ck_assert(!bit(mask, smol_tokenizer_find(tok, "a")));
    ck_assert(!smol_grammar_matcher_is_done(m));
    free(mask);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}
END_TEST

/* smol_grammar_mask_logits against a plain per-token loop: random masks
 * with empty, full and mixed words, a vocabulary that is not a multiple of
 * 32, and more logits than mask bits (the rest is -inf). */
START_TEST(t_mask_logits)
{
    const int32_t nm = 1000, nl = 1010;
    uint32_t mask[32];
    float got[1010], want[1010];
    for (int round = 0; round < 200; round++) {
        for (int w = 0; w < 32; w++) {
            uint32_t r = rnd();
            mask[w] = r % 4 == 0 ? 0 : r % 4 == 1 ? UINT32_MAX : rnd();
        }
        for (int32_t i = 0; i < nl; i++) got[i] = want[i] = (float)(rnd() % 1000) - 500.0f;
        for (int32_t i = 0; i < nl; i++)
            if (i >= nm || !((mask[i >> 5] >> (i & 31)) & 1u)) want[i] = -INFINITY;
        smol_grammar_mask_logits(mask, round % 2 ? nm : nl, got, round % 2 ? nl : nm);
        for (int32_t i = 0; i < (round % 2 ? nl : nm); i++)
            ck_assert_msg(got[i] == want[i] || (isinf(got[i]) && isinf(want[i])), "round %d logit %d: %g, want %g",
                          round, i, got[i], want[i]);
        if (round % 2 == 0)   /* n_mask > n_logits: only n_logits written */
            for (int32_t i = nm; i < nl; i++) ck_assert(!isinf(got[i]));
    }
}
END_TEST

/* ---- tool calls ---------------------------------------------------------------------- */

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12}, "
    "\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"a\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 999}, "
    "\"b\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 999}}, \"required\": [\"a\", \"b\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

/* Checks one generated output (token ids) of a tool-call grammar: one or
 * more <tool_call> blocks (exactly one for a named choice), each
 * \n{"name": NAME, "arguments": {...}}\n with a known name (the named one)
 * and only that tool's parameters among the arguments (their values are
 * checked against the schemas with Python's jsonschema in the daemon
 * tests). */
static void check_calls(const int32_t *ids, size_t n, const char *named)
{
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    json_t *tools = json_loads(TOOLS, 0, NULL);
    size_t i = 0, calls = 0;
    char body[8192];
    while (i < n) {
        ck_assert_msg(ids[i] == sp->tool_call, "output token %zu is %d, not <tool_call>", i, ids[i]);
        size_t len = 0;
        for (i++; i < n && ids[i] != sp->tool_call_end; i++) {
            size_t pl;
            const char *pc = smol_tokenizer_piece(tok, ids[i], &pl);
            ck_assert(pc && len + pl < sizeof body);
            memcpy(body + len, pc, pl);
            len += pl;
        }
        ck_assert_msg(i < n, "unterminated call");
        i++;
        body[len] = 0;
        ck_assert_msg(len > 2 && body[0] == '\n' && body[len - 1] == '\n', "call body %s", body);
        json_error_t je;
        json_t *j = json_loads(body, 0, &je);
        ck_assert_msg(j, "call body is not JSON: %s (%s)", body, je.text);
        const char *name = json_string_value(json_object_get(j, "name"));
        json_t *args = json_object_get(j, "arguments");
        ck_assert_msg(name && json_is_object(args) && json_object_size(j) == 2, "call %s", body);
        if (named) ck_assert_str_eq(name, named);
        json_t *params = NULL;
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t)
            if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name))
                params = json_object_get(json_object_get(json_object_get(t, "function"), "parameters"), "properties");
        ck_assert_msg(params || !strcmp(name, "now"), "unknown tool %s", name);
        const char *key;
        json_t *val;
        json_object_foreach(args, key, val) ck_assert_msg(params && json_object_get(params, key), "argument %s of %s", key, name);
        json_decref(j);
        calls++;
        if (i < n && ids[i] != sp->tool_call) {  /* a newline between parallel calls */
            size_t pl;
            const char *pc = smol_tokenizer_piece(tok, ids[i], &pl);
            ck_assert_msg(pl == 1 && pc[0] == '\n', "between calls: token %d", ids[i]);
            i++;
        }
    }
    ck_assert_uint_gt(calls, 0);
    if (named) ck_assert_uint_eq(calls, 1);
    json_decref(tools);
}

/* The mask admits only tool calls: the first token can only be <tool_call>,
 * masks equal brute force on random walks (the tags are special tokens),
 * and every complete walk parses as calls of the given tools. */
static void tool_walks(const char *choice, int walks)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    ck_assert(smol_grammar_vocab_has_tool_tags(vocab));
    char err[SMOL_ERRLEN];
    struct smol_grammar *g = NULL;
    ck_assert_msg(smol_grammar_compile_tool_calls(TOOLS, strlen(TOOLS), choice, NULL, &g, err) == SMOL_OK, "%s", err);
    struct smol_grammar_index *ix = NULL;
    ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    int32_t nv = smol_grammar_vocab_size(vocab);
    uint32_t *mask = malloc(((nv + 31) / 32) * sizeof *mask);
    int32_t out[600];
    for (int w = 0; w < walks; w++) {
        smol_grammar_matcher_reset(m);
        size_t n = 0;
        for (int step = 0; step < 600; step++) {
            smol_grammar_matcher_fill_mask(m, mask);
            int32_t allowed[4096];
            int na = 0, ends = 0;
            for (int32_t t = 0; t < nv; t++) {
                int bm = bit(mask, t);
                if (bm && smol_tokenizer_is_eog(tok, t)) ends++;
                else if (bm && na < 4096) allowed[na++] = t;
                if (!bm && rnd() % 32) continue;
                ck_assert_msg(bm == brute(m, t), "%s step %d token %d: mask %d", choice, step, t, bm);
            }
            if (step == 0) ck_assert_msg(na == 1 && allowed[0] == sp->tool_call && !ends, "first mask: %d tokens", na);
            if (ends && (!na || rnd() % 3 == 0)) break;     /* may end: end now and then */
            ck_assert_msg(na > 0, "%s: a dead end after %d tokens", choice, step);
            int32_t t = allowed[rnd() % na];
            ck_assert_int_eq(smol_grammar_matcher_accept_token(m, t), SMOL_OK);
            out[n++] = t;
        }
        ck_assert_msg(smol_grammar_matcher_can_end(m), "walk %d did not complete in 600 tokens", w);
        check_calls(out, n, strcmp(choice, "required") ? choice : NULL);
    }
    free(mask);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}

START_TEST(t_tool_calls_required) { tool_walks("required", 6); }
END_TEST
START_TEST(t_tool_calls_named) { tool_walks("add", 3); }
END_TEST

START_TEST(t_tool_calls_errors)
{
    char err[SMOL_ERRLEN];
    struct smol_grammar *g = NULL;
    ck_assert_int_eq(smol_grammar_compile_tool_calls(TOOLS, strlen(TOOLS), "nope", NULL, &g, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "nope") && strstr(err, "not among"), "%s", err);
    ck_assert_int_eq(smol_grammar_compile_tool_calls("[]", 2, "required", NULL, &g, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_grammar_compile_tool_calls("[", 1, "required", NULL, &g, err), SMOL_EFORMAT);
    ck_assert_int_eq(smol_grammar_compile_tool_calls(TOOLS, strlen(TOOLS), "bad name!", NULL, &g, err), SMOL_EINVAL);
    const char *bad = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                      "{\"type\": \"number\", \"multipleOf\": 3}}}]";
    ck_assert_int_eq(smol_grammar_compile_tool_calls(bad, strlen(bad), "f", NULL, &g, err), SMOL_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "multipleOf") && strstr(err, "/tools/0/function/parameters"), "%s", err);
    const char *notfn = "[{\"type\": \"retrieval\"}]";
    ck_assert_int_eq(smol_grammar_compile_tool_calls(notfn, strlen(notfn), "required", NULL, &g, err), SMOL_EINVAL);
    ck_assert_ptr_null(g);
    /* a JSON grammar never takes the tags, nor any token holding byte 0xFF */
    if (!vocab) { printf("SKIPPED: %s missing (the JSON grammar against its vocabulary)\n", FIXTURE_T); return; }
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    g = schema("{\"type\": \"string\"}", NULL);
    struct smol_grammar_matcher *m = NULL;
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, NULL, err), SMOL_OK);
    ck_assert_int_eq(smol_grammar_matcher_accept_bytes(m, "\"", 1), SMOL_OK);
    ck_assert_int_eq(smol_grammar_matcher_accept_bytes(m, "\xff", 1), SMOL_EINVAL);
    smol_grammar_matcher_free(&m);
    struct smol_grammar_index *ix = NULL;
    ck_assert_int_eq(smol_grammar_index_new(&ix, g, vocab, 0, err), SMOL_OK);
    ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
    ck_assert_int_eq(smol_grammar_matcher_accept_token(m, sp->tool_call), SMOL_EINVAL);
    smol_grammar_matcher_free(&m);
    smol_grammar_index_free(&ix);
    smol_grammar_free(&g);
}
END_TEST

/* ---- within a length limit (grammar_budget.c) ---------------------------------------- */

/* The shortest completion by brute force: iterative deepening over the
 * bytes of alpha (accept_bytes, then rollback), up to max bytes; -1: none. */
static int brute_shortest(struct smol_grammar_matcher *m, const char *alpha, int max)
{
    for (int d = 0; d <= max; d++) {
        /* odometer over alpha^d */
        int idx[16] = {0}, na = (int)strlen(alpha);
        for (;;) {
            char buf[16];
            for (int i = 0; i < d; i++) buf[i] = alpha[idx[i]];
            if (smol_grammar_matcher_accept_bytes(m, buf, (size_t)d) == SMOL_OK) {
                int end = smol_grammar_matcher_can_end(m);
                smol_grammar_matcher_rollback(m, 1);
                if (end) return d;
            }
            int i = d - 1;
            while (i >= 0 && ++idx[i] == na) idx[i--] = 0;
            if (i < 0) break;
        }
    }
    return -1;
}

/* min_bytes is the shortest completion: checked by brute force on small
 * grammars, at the start and after each byte of a sentence. */
START_TEST(t_budget_min_bytes)
{
    static const struct { const char *gbnf, *walk; } cases[] = {
        {"root ::= \"ab\" | \"c\" \"de\"", "cde"},
        {"root ::= x x x\nx ::= \"q\" | \"rr\"", "rrqrr"},
        {"root ::= \"(\" root \")\" | \"z\"", "(((z)))"},
        {"root ::= [a-c]+ \"d\"? (\"(\" root \")\")*", "ab(c(ad)(b))"},
        {"root ::= \"e\"*", "eee"},
    };
    char err[SMOL_ERRLEN];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct smol_grammar *g = NULL;
        ck_assert_msg(smol_grammar_compile_gbnf(cases[c].gbnf, strlen(cases[c].gbnf), NULL, &g, err) == SMOL_OK,
                      "%s", err);
        struct smol_grammar_matcher *m = NULL;
        ck_assert_int_eq(smol_grammar_matcher_new(&m, g, NULL, err), SMOL_OK);
        for (size_t i = 0; i <= strlen(cases[c].walk); i++) {
            int want = brute_shortest(m, "abcdeqrz()", 9);
            size_t got = smol_grammar_matcher_min_bytes(m);
            ck_assert_msg(want >= 0 && got == (size_t)want, "%s after %zu bytes: min_bytes %zu, brute force %d",
                          cases[c].gbnf, i, got, want);
            if (i < strlen(cases[c].walk))
                ck_assert_int_eq(smol_grammar_matcher_accept_bytes(m, cases[c].walk + i, 1), SMOL_OK);
        }
        smol_grammar_matcher_free(&m);
        smol_grammar_free(&g);
    }
}
END_TEST

/* Random walks of allowed tokens (long ones preferred, the way a model that
 * never closes a string would go) under a budget of B tokens, the sampler's
 * rule applied (fits, else mask_shortest): every walk ends complete within
 * B tokens, whenever B >= the fewest tokens that spell the shortest
 * sentence (smol_grammar_matcher_min_tokens; a third of its bytes or so). */
START_TEST(t_budget_walks)
{
    if (!vocab) { printf("SKIPPED: %s missing\n", FIXTURE_T); return; }
    static const char *unbounded =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\","
        "\"items\":{\"type\":\"string\"}},\"n\":{\"type\":\"number\"}},\"required\":[\"name\",\"tags\",\"n\"]}";
    const char *names[] = {"person", "order", "tree", "tool_args", NULL};
    char err[SMOL_ERRLEN];
    int32_t nv = smol_grammar_vocab_size(vocab);
    uint32_t *mask = malloc(((nv + 31) / 32) * sizeof *mask);
    int32_t *allowed = malloc(nv * sizeof *allowed);
    int forced = 0;
    for (int f = 0; f < 5; f++) {
        char *sch = names[f] ? schema_file(names[f], ".json") : strdup(unbounded);
        struct smol_grammar *g = schema(sch, NULL);
        struct smol_grammar_index *ix = NULL;
        ck_assert_msg(smol_grammar_index_new(&ix, g, vocab, 0, err) == SMOL_OK, "%s", err);
        struct smol_grammar_matcher *m = NULL;
        ck_assert_int_eq(smol_grammar_matcher_new(&m, g, ix, err), SMOL_OK);
        const size_t min0 = smol_grammar_matcher_min_bytes(m), tok0 = smol_grammar_matcher_min_tokens(m);
        ck_assert_msg(min0 > 0 && min0 < 1000, "%s: shortest sentence %zu bytes", sch, min0);
        ck_assert_msg(tok0 > 0 && tok0 < min0, "%s: shortest sentence in %zu tokens (%zu bytes)", sch, tok0, min0);
        const size_t budgets[] = {tok0, tok0 + 1, tok0 + 7, min0, 2 * min0 + 20};
        for (int bi = 0; bi < 5; bi += quick() ? 4 : 1) {
            const size_t B = budgets[bi];
            smol_grammar_matcher_reset(m);
            size_t step = 0;
            for (; step < B && !smol_grammar_matcher_is_done(m); step++) {
                smol_grammar_matcher_fill_mask(m, mask);
                int na = 0;
                for (int32_t t = 0; t < nv; t++)
                    if (bit(mask, t) && !smol_tokenizer_is_eog(tok, t)) allowed[na++] = t;
                int32_t t = -1;
                for (int k = 0; k < 4 && na; k++) {   /* the longest of 4 random draws */
                    int32_t c = allowed[rnd() % na];
                    size_t lc, lt;
                    if (t < 0 || (smol_tokenizer_piece(tok, c, &lc), smol_tokenizer_piece(tok, t, &lt), lc > lt)) t = c;
                }
                if (t < 0 || !smol_grammar_matcher_fits(m, t, B - step)) {
                    forced++;
                    smol_grammar_matcher_mask_shortest(m, mask, B - step);
                    na = 0;
                    for (int32_t c = 0; c < nv; c++)
                        if (bit(mask, c)) allowed[na++] = c;
                    ck_assert_msg(na > 0, "%s B=%zu step %zu: no token starts the shortest completion", sch, B, step);
                    t = allowed[rnd() % na];
                    ck_assert_msg(smol_grammar_matcher_fits(m, t, B - step), "%s B=%zu step %zu: forced token %d "
                                  "does not fit", sch, B, step, t);
                }
                ck_assert_int_eq(smol_grammar_matcher_accept_token(m, t), SMOL_OK);
            }
            ck_assert_msg(smol_grammar_matcher_can_end(m), "%s: budget %zu tokens (shortest %zu tokens): not "
                          "complete after %zu tokens", sch, B, tok0, step);
        }
        smol_grammar_matcher_free(&m);
        smol_grammar_index_free(&ix);
        smol_grammar_free(&g);
        free(sch);
    }
    ck_assert_msg(forced > 0, "no walk needed the length limit: the test exercises nothing");
    free(mask);
    free(allowed);
}
END_TEST

static void setup(void)
{
    const char *p = fixture_path(FIXTURE_T);
    char err[SMOL_ERRLEN] = "";
    struct smol_gguf *gg = NULL;
    if (!p || smol_gguf_open(&gg, p, err) || smol_tokenizer_new(&tok, gg, err) || smol_grammar_vocab_new(&vocab, tok, err)) {
        fprintf(stderr, "%s: %s\n", FIXTURE_T, err);
        vocab = NULL;
    }
    smol_gguf_close(&gg);
}

static void teardown(void)
{
    smol_grammar_vocab_free(&vocab);
    smol_tokenizer_free(&tok);
}

Suite *test_suite(void)
{
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("bytes");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, t_gbnf_errors);
    tcase_add_test(tc, t_gbnf_llama);
    tcase_add_test(tc, t_regex);
    tcase_add_test(tc, t_schema_bytes);
    tcase_add_test(tc, t_schema_errors);
    tcase_add_test(tc, t_hostile);
    tcase_add_test(tc, t_bounded_counts);
    tcase_add_test(tc, t_json_schema_test_suite);
    tcase_add_test(tc, t_mask_logits);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("masks");
    tcase_set_timeout(tm, 600);
    tcase_add_unchecked_fixture(tm, setup, teardown);
    tcase_add_test(tm, t_mask_tool_args);
    tcase_add_test(tm, t_mask_person);
    tcase_add_test(tm, t_mask_order);
    tcase_add_test(tm, t_mask_enum);
    tcase_add_test(tm, t_mask_tree);
    tcase_add_test(tm, t_mask_event);
    tcase_add_test(tm, t_mask_gbnf_random);
    TCase *tt = tcase_create("shared+tools");
    tcase_set_timeout(tt, 600);
    tcase_add_unchecked_fixture(tt, setup, teardown);
    tcase_add_test(tt, t_mask_shared_repetition);
    tcase_add_test(tt, t_mask_bounded);
    tcase_add_test(tt, t_hostile_index);
    tcase_add_test(tt, t_tool_calls_required);
    tcase_add_test(tt, t_tool_calls_named);
    tcase_add_test(tt, t_tool_calls_errors);
    suite_add_tcase(s, tt);
    tcase_add_test(tm, t_rollback);
    tcase_add_test(tm, t_budget_min_bytes);
    tcase_add_test(tm, t_budget_walks);
    tcase_add_test(tm, t_end_optional);
    suite_add_tcase(s, tm);
    return s;
}
