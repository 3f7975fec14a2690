/*
 * json_values.c - the value builders of the JSON Schema front end: generic
 * JSON (any value, object, array), literals, strings (length bounds,
 * pattern, format), integers and numbers with their bounds.  json_schema.c
 * walks a schema's keywords and calls these for its leaves (see
 * json_values.h).
 */
#include "daemon/grammar/json_values.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar.h"
#include "daemon/grammar/grammar_build.h"

int js_fail(struct js *c, enum smol_err code, const char *fmt, const char *a, const char *at)
{
    char m[SMOL_ERRLEN];
    snprintf(m, sizeof m, fmt, a);
    gb_fail(c->b, code, "%s (at #%s)", m, at);
    return -1;
}

/* ---- generic JSON ------------------------------------------------------------------- */

static int ws(struct js *c)
{
    if (!c->flex) return gb_empty(c->b);
    static const char sp[] = " \t\n\r";
    uint8_t set[32] = {0};
    for (const char *p = sp; *p; p++) set[(uint8_t)*p >> 3] |= (uint8_t)(1u << (*p & 7));
    return gb_rep(c->b, gb_byteset(c->b, set), 0, 16);
}

/* A structural token with the whitespace policy around it. */
int js_tok(struct js *c, const char *t)
{
    return c->flex ? gb_seq3(c->b, ws(c), gb_str(c->b, t), ws(c)) : gb_str(c->b, t);
}

/* One character of a JSON string body: unescaped or an escape. */
int js_str_char(struct js *c)
{
    struct gb_range r[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    int plain = gb_cp_class(c->b, r, 3, 1);
    uint8_t esc[32] = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++) esc[(uint8_t)*p >> 3] |= (uint8_t)(1u << (*p & 7));
    struct gb_range hx[] = {{'0', '9'}, {'a', 'f'}, {'A', 'F'}};
    int hex = gb_cp_class(c->b, hx, 3, 0);
    int u = gb_seq2(c->b, gb_str(c->b, "u"), gb_rep(c->b, hex, 4, 4));
    int e = gb_seq2(c->b, gb_str(c->b, "\\"), gb_alt2(c->b, gb_byteset(c->b, esc), u));
    return gb_alt2(c->b, plain, e);
}

static int string_rule(struct js *c)
{
    if (c->r_string < 0) {
        c->r_string = gb_rule_new(c->b, "string", 6);
        gb_rule_set(c->b, c->r_string, gb_seq3(c->b, gb_str(c->b, "\""), gb_rep(c->b, js_str_char(c), 0, GB_INF),
                                                gb_str(c->b, "\"")));
    }
    return gb_ref(c->b, c->r_string);
}

static int digits(struct js *c, int min, int max)
{
    return gb_rep(c->b, gb_byte_range(c->b, '0', '9'), min, max);
}

/* Non-negative integer without leading zeros. */
static int uint_expr(struct js *c)
{
    return gb_alt2(c->b, gb_str(c->b, "0"), gb_seq2(c->b, gb_byte_range(c->b, '1', '9'), digits(c, 0, GB_INF)));
}

static int number_expr(struct js *c, int nonneg)
{
    struct gb *b = c->b;
    int sign = nonneg ? gb_empty(b) : gb_rep(b, gb_str(b, "-"), 0, 1);
    int frac = gb_rep(b, gb_seq2(b, gb_str(b, "."), digits(c, 1, GB_INF)), 0, 1);
    uint8_t e[32] = {0}, pm[32] = {0};
    e['e' >> 3] |= 1u << ('e' & 7); e['E' >> 3] |= 1u << ('E' & 7);
    pm['+' >> 3] |= 1u << ('+' & 7); pm['-' >> 3] |= 1u << ('-' & 7);
    int exp = gb_rep(b, gb_seq3(b, gb_byteset(b, e), gb_rep(b, gb_byteset(b, pm), 0, 1), digits(c, 1, GB_INF)), 0, 1);
    int xs[4] = {sign, uint_expr(c), frac, exp};
    return gb_seq(b, xs, 4);
}

static int object_generic(struct js *c, int value);
static int array_generic(struct js *c, int item, int min, int max);

int js_value_rule(struct js *c)
{
    if (c->r_value < 0) {
        struct gb *b = c->b;
        c->r_value = gb_rule_new(b, "value", 5);
        c->r_object = gb_rule_new(b, "object", 6);
        c->r_array = gb_rule_new(b, "array", 5);
        int v = gb_ref(b, c->r_value);
        gb_rule_set(b, c->r_object, object_generic(c, v));
        gb_rule_set(b, c->r_array, array_generic(c, v, 0, GB_INF));
        int xs[7] = {gb_ref(b, c->r_object), gb_ref(b, c->r_array), string_rule(c), number_expr(c, 0),
                     gb_str(b, "true"), gb_str(b, "false"), gb_str(b, "null")};
        gb_rule_set(b, c->r_value, gb_alt(b, xs, 7));
    }
    return gb_ref(c->b, c->r_value);
}

/* { "k": value, ... } with any keys (key: an expression for the quoted key). */
static int kv_list(struct js *c, int key, int value, int leading_comma)
{
    struct gb *b = c->b;
    int kv = gb_seq3(b, key, js_tok(c, ":"), value);
    int more = gb_rep(b, gb_seq2(b, js_tok(c, ","), kv), 0, GB_INF);
    if (leading_comma) return more;
    return gb_rep(b, gb_seq2(b, kv, more), 0, 1);
}

static int object_generic(struct js *c, int value)
{
    return gb_seq3(c->b, js_tok(c, "{"), kv_list(c, string_rule(c), value, 0), js_tok(c, "}"));
}

static int array_generic(struct js *c, int item, int min, int max)
{
    struct gb *b = c->b;
    int body;
    if (max == 0) {
        body = gb_empty(b);
    } else {
        int rest = gb_rep(b, gb_seq2(b, js_tok(c, ","), item), min > 0 ? min - 1 : 0, max == GB_INF ? GB_INF : max - 1);
        body = gb_seq2(b, item, rest);
        if (min == 0) body = gb_rep(b, body, 0, 1);
    }
    return gb_seq3(b, js_tok(c, "["), body, js_tok(c, "]"));
}

/* The canonical compact serialization of a JSON value, as a literal;
 * an integral number also in its ".0" spelling. */
int js_literal(struct js *c, json_t *v, const char *at)
{
    if (++c->n_enum > (c->o->max_enum ? c->o->max_enum : 4096))
        return js_fail(c, SMOL_ETOOLARGE, "over %s enum/const values", c->o->max_enum ? "max_enum" : "4096", at);
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    if (!s) { gb_fail(c->b, SMOL_ENOMEM, "out of memory"); return -1; }
    int x = gb_str(c->b, s);
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
        char t[64];
        snprintf(t, sizeof t, "%.0f", json_real_value(v));
        x = gb_alt2(c->b, x, gb_str(c->b, t));
    } else if (json_is_integer(v)) {
        char t[64];
        snprintf(t, sizeof t, "%lld.0", (long long)json_integer_value(v));
        x = gb_alt2(c->b, x, gb_str(c->b, t));
    }
    free(s);
    return x;
}

/* ---- strings ------------------------------------------------------------------------ */

/* A count keyword (minLength, ...): an integer, or a real with no fraction. */
int js_count_of(json_t *v, long long *out)
{
    if (json_is_integer(v)) { *out = json_integer_value(v); return 1; }
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 1e15) {
        *out = (long long)json_real_value(v);
        return 1;
    }
    return 0;
}

static int rx(struct js *c, const char *re)
{
    return gb_regex(c->b, re, strlen(re), 1);
}

static int format_expr(struct js *c, const char *f, const char *at)
{
    static const char *date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
    static const char *time = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    char re[512];
    if (!strcmp(f, "date")) snprintf(re, sizeof re, "^%s$", date);
    else if (!strcmp(f, "time")) snprintf(re, sizeof re, "^%s$", time);
    else if (!strcmp(f, "date-time")) snprintf(re, sizeof re, "^%s[Tt]%s$", date, time);
    else if (!strcmp(f, "uuid")) snprintf(re, sizeof re, "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
    else if (!strcmp(f, "email"))
        snprintf(re, sizeof re, "^[A-Za-z0-9!#$%%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%%&'*+/=?^_`{|}~-]+)*"
                 "@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$");
    else if (!strcmp(f, "ipv4"))
        snprintf(re, sizeof re, "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$");
    else if (!strcmp(f, "uri")) snprintf(re, sizeof re, "^[A-Za-z][A-Za-z0-9+.-]*:[^ <>\"{}|\\\\^`]*$");
    else return js_fail(c, SMOL_EUNSUPPORTED, "unsupported string format '%s'", f, at);
    return rx(c, re);
}

/* A string with a pattern, format or length bounds is a rule of its own,
 * one per distinct constraint (its name is the constraint): the token index
 * walks its states once however many properties use it, and what follows the
 * closing quote is the caller's (the mask reads it from the real stack). */
int js_string_expr(struct js *c, json_t *s, const char *at)
{
    struct gb *b = c->b;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    int n_kinds = !!pat + !!fmt + !!(mn || mx);
    if (n_kinds > 1) return js_fail(c, SMOL_EUNSUPPORTED, "%s: combining pattern, format and min/maxLength", "string", at);
    if (!n_kinds) return string_rule(c);
    long long lo = 0, hi = GB_INF;
    char name[96];
    const char *key;
    size_t klen;
    if (pat) {
        if (!json_is_string(pat)) return js_fail(c, SMOL_EINVAL, "'%s' must be a string", "pattern", at);
        key = json_string_value(pat);
        klen = json_string_length(pat);
    } else if (fmt) {
        if (!json_is_string(fmt)) return js_fail(c, SMOL_EINVAL, "'%s' must be a string", "format", at);
        snprintf(name, sizeof name, "format %.80s", json_string_value(fmt));
        key = name;
        klen = strlen(name);
    } else {
        if ((mn && !js_count_of(mn, &lo)) || (mx && !js_count_of(mx, &hi)))
            return js_fail(c, SMOL_EINVAL, "'%s' must be an integer", "minLength/maxLength", at);
        if (lo < 0 || (mx && hi < lo)) return js_fail(c, SMOL_EINVAL, "%s: bad bounds", "minLength/maxLength", at);
        if (lo > GB_MAX_REPEAT || hi > GB_MAX_REPEAT)
            return js_fail(c, SMOL_ETOOLARGE, "%s over 10000", "minLength/maxLength", at);
        snprintf(name, sizeof name, "string{%lld,%lld}", lo, mx ? hi : -1LL);
        key = name;
        klen = strlen(name);
    }
    int r = gb_rule_find(b, key, klen);
    if (r >= 0) return gb_ref(b, r);
    int body;
    if (pat) body = gb_regex(b, key, klen, 1);
    else if (fmt) body = format_expr(c, json_string_value(fmt), at);
    else body = gb_rep(b, js_str_char(c), (int)lo, mx ? (int)hi : GB_INF);
    r = gb_rule_new(b, key, klen);
    gb_rule_set(b, r, gb_seq3(b, gb_str(b, "\""), body, gb_str(b, "\"")));
    return gb_ref(b, r);
}

/* ---- integers ----------------------------------------------------------------------- */

/* Decimal strings lo..hi of the same length (no sign). */
static int same_len(struct js *c, const char *lo, const char *hi, size_t n)
{
    struct gb *b = c->b;
    if (n == 0) return gb_empty(b);
    if (n == 1) return gb_byte_range(b, lo[0], hi[0]);
    if (lo[0] == hi[0]) return gb_seq2(b, gb_byte_range(b, lo[0], lo[0]), same_len(c, lo + 1, hi + 1, n - 1));
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    int xs[3], k = 0;
    xs[k++] = gb_seq2(b, gb_byte_range(b, lo[0], lo[0]), same_len(c, lo + 1, nines, n - 1));
    if (hi[0] - lo[0] > 1) xs[k++] = gb_seq2(b, gb_byte_range(b, lo[0] + 1, hi[0] - 1), digits(c, (int)n - 1, (int)n - 1));
    xs[k++] = gb_seq2(b, gb_byte_range(b, hi[0], hi[0]), same_len(c, zeros, hi + 1, n - 1));
    return gb_alt(b, xs, (size_t)k);
}

/* Unsigned integers in [lo, hi]; hi < 0 means unbounded. */
static int uint_range(struct js *c, long long lo, long long hi)
{
    struct gb *b = c->b;
    int xs[24], k = 0;
    char a[24], z[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lz = hi >= 0 ? snprintf(z, sizeof z, "%lld", hi) : la;
    for (int len = la; len <= lz && k < 22; len++) {
        char from[24], to[24];
        if (len == la) memcpy(from, a, (size_t)len);
        else { memset(from, '0', (size_t)len); from[0] = '1'; }
        if (hi >= 0 && len == lz) memcpy(to, z, (size_t)len);
        else memset(to, '9', (size_t)len);
        xs[k++] = same_len(c, from, to, (size_t)len);
    }
    if (hi < 0)   /* and every longer number */
        xs[k++] = gb_seq2(b, gb_byte_range(b, '1', '9'), digits(c, lz, GB_INF));
    return gb_alt(b, xs, (size_t)k);
}

int js_integer_expr(struct js *c, json_t *s, const char *at)
{
    struct gb *b = c->b;
    int has_lo = 0, has_hi = 0;
    double lo = 0, hi = 0;
    const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, keys[i]);
        if (!v) continue;
        if (!json_is_number(v)) return js_fail(c, SMOL_EINVAL, "'%s' must be a number", keys[i], at);
        double x = json_number_value(v);
        if (fabs(x) > 1e18) return js_fail(c, SMOL_EUNSUPPORTED, "'%s' beyond +-1e18", keys[i], at);
        if (i < 2) {
            double l = i == 0 ? ceil(x) : floor(x) + 1;
            if (!has_lo || l > lo) lo = l;
            has_lo = 1;
        } else {
            double h = i == 2 ? floor(x) : ceil(x) - 1;
            if (!has_hi || h < hi) hi = h;
            has_hi = 1;
        }
    }
    if (json_object_get(s, "multipleOf")) return js_fail(c, SMOL_EUNSUPPORTED, "unsupported keyword '%s'", "multipleOf", at);
    if (has_lo && has_hi && lo > hi) return gb_byte_range(b, 1, 0);   /* nothing */
    long long l = (long long)lo, h = (long long)hi;
    int neg = gb_str(b, "-");
    if (!has_lo && !has_hi)
        return gb_seq2(b, gb_rep(b, neg, 0, 1), uint_expr(c));
    if (has_lo && !has_hi) {
        if (l >= 0) return uint_range(c, l, -1);
        /* -|l|..-1, then 0.. */
        return gb_alt2(b, gb_seq2(b, neg, uint_range(c, 1, -l)), uint_range(c, 0, -1));
    }
    if (!has_lo) {
        if (h < 0) return gb_seq2(b, neg, uint_range(c, -h, -1));
        return gb_alt2(b, gb_seq2(b, neg, uint_range(c, 1, -1)), uint_range(c, 0, h));
    }
    if (l >= 0) return uint_range(c, l, h);
    if (h < 0) return gb_seq2(b, neg, uint_range(c, -h, -l));
    return gb_alt2(b, gb_seq2(b, neg, uint_range(c, 1, -l)), uint_range(c, 0, h));
}

int js_number_bounded(struct js *c, json_t *s, const char *at)
{
    json_t *mn = json_object_get(s, "minimum"), *xmn = json_object_get(s, "exclusiveMinimum");
    const char *bad[] = {"maximum", "exclusiveMaximum", "multipleOf"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(s, bad[i])) return js_fail(c, SMOL_EUNSUPPORTED, "'%s' on a non-integer number", bad[i], at);
    if (xmn) return js_fail(c, SMOL_EUNSUPPORTED, "'%s' on a non-integer number", "exclusiveMinimum", at);
    if (mn && !json_is_number(mn)) return js_fail(c, SMOL_EINVAL, "'%s' must be a number", "minimum", at);
    if (mn && json_number_value(mn) != 0)
        return js_fail(c, SMOL_EUNSUPPORTED, "'%s' other than 0 on a non-integer number", "minimum", at);
    return number_expr(c, mn != NULL);
}
