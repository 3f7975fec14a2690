/*
 * regex.c - regular expressions (the JSON Schema `pattern` dialect, an
 * ECMA-262 subset) to grammar expressions.
 *
 * Recursive descent over the pattern's UTF-8: alternation, concatenation,
 * groups ((...), (?:...), (?<name>...)), classes with ranges and negation,
 * ., \d \D \w \W \s \S, character escapes (\n \t \xHH \uHHHH ...),
 * quantifiers ? * + {m} {m,} {m,n} (lazy forms: the same language), and
 * anchors ^ / $ at the start / end of a top-level alternative.  A pattern
 * matches anywhere (ECMA search), so an end without its anchor takes any
 * characters.  Backreferences, lookaround and \b are SMOL_EUNSUPPORTED.
 *
 * In json_string mode the expression describes the body of a JSON string
 * as our grammars write it: '"' and '\' escaped, control characters as
 * \b \f \n \r \t or \u00XX, everything else raw UTF-8.
 */
#include "daemon/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_build.h"

struct rx {
    struct gb *b;
    const char *s;
    size_t n, i;
    int json;
    int depth;
};

struct cls {
    struct gb_range *r;
    size_t n, cap;
};

static int rx_fail(struct rx *x, enum smol_err code, const char *what)
{
    gb_fail(x->b, code, "regex: %s at offset %zu", what, x->i);
    return -1;
}

static int cls_add(struct rx *x, struct cls *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        struct gb_range *r = realloc(c->r, cap * sizeof *r);
        if (!r) { gb_fail(x->b, SMOL_ENOMEM, "out of memory"); return -1; }
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n++] = (struct gb_range){lo, hi};
    return 0;
}

static int has(const struct cls *c, uint32_t cp, int neg)
{
    int in = 0;
    for (size_t i = 0; i < c->n && !in; i++) in = cp >= c->r[i].lo && cp <= c->r[i].hi;
    return in != neg;
}

/* The expression for one character of the class. */
static int cls_expr(struct rx *x, struct cls *c, int neg)
{
    struct gb *b = x->b;
    if (!x->json) return gb_cp_class(b, c->r, c->n, neg);
    /* raw characters: the class minus controls, '"' and '\' ... */
    struct cls raw = {0};
    int alts[40], k = 0;
    if (neg) {
        for (size_t i = 0; i < c->n; i++) cls_add(x, &raw, c->r[i].lo, c->r[i].hi);
        cls_add(x, &raw, 0, 0x1F);
        cls_add(x, &raw, '"', '"');
        cls_add(x, &raw, '\\', '\\');
    } else {
        for (size_t i = 0; i < c->n; i++) {
            uint32_t lo = c->r[i].lo, hi = c->r[i].hi;
            if (lo < 0x20) lo = 0x20;
            for (uint32_t s = lo; s <= hi;) {   /* cut out '"' and '\' */
                uint32_t e = hi;
                if (s <= '"' && e >= '"') e = s == '"' ? '"' : '"' - 1;
                if (s <= '\\' && e >= '\\') e = s == '\\' ? '\\' : '\\' - 1;
                if (s != '"' && s != '\\') cls_add(x, &raw, s, e);
                if (e == UINT32_MAX) break;
                s = e + 1;
            }
        }
    }
    if (gb_failed(b)) { free(raw.r); return -1; }
    /* an empty positive class has no raw part */
    int raw_empty = !neg && raw.n == 0;
    if (!raw_empty) alts[k++] = gb_cp_class(b, raw.r, raw.n, neg);
    free(raw.r);
    /* ... plus the escaped forms of what the class holds of those */
    if (has(c, '"', neg)) alts[k++] = gb_str(b, "\\\"");
    if (has(c, '\\', neg)) alts[k++] = gb_str(b, "\\\\");
    static const char *short_esc[32] = {[8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r"};
    for (uint32_t cp = 0; cp < 0x20; cp++) {
        if (!has(c, cp, neg)) continue;
        if (short_esc[cp]) { alts[k++] = gb_str(b, short_esc[cp]); continue; }
        /* \u00XX, hex digits of either case */
        static const char hx[] = "0123456789abcdef";
        int d1 = gb_str(b, (char[]){hx[cp >> 4], 0});
        char lo = hx[cp & 15];
        int d2 = lo >= 'a' ? gb_alt2(b, gb_bytes(b, &lo, 1), gb_bytes(b, (char[]){(char)(lo - 32)}, 1)) : gb_bytes(b, &lo, 1);
        alts[k++] = gb_seq3(b, gb_str(b, "\\u00"), d1, d2);
        if (k >= 38) break;
    }
    if (k == 0) return gb_byte_range(b, 1, 0);   /* matches nothing */
    return gb_alt(b, alts, (size_t)k);
}

static int utf8_dec(struct rx *x, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)x->s + x->i;
    size_t left = x->n - x->i;
    if (u[0] < 0x80) { *cp = u[0]; x->i++; return 0; }
    size_t l = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 0;
    if (!l || l > left) return rx_fail(x, SMOL_EINVAL, "invalid UTF-8");
    uint32_t c = u[0] & (0x7F >> l);
    for (size_t i = 1; i < l; i++) {
        if ((u[i] & 0xC0) != 0x80) return rx_fail(x, SMOL_EINVAL, "invalid UTF-8");
        c = c << 6 | (u[i] & 0x3F);
    }
    *cp = c;
    x->i += l;
    return 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex(struct rx *x, int digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (x->i >= x->n || hexval(x->s[x->i]) < 0) return rx_fail(x, SMOL_EINVAL, "bad hex escape");
        v = v * 16 + (uint32_t)hexval(x->s[x->i++]);
    }
    *cp = v;
    return 0;
}

/* After '\': a class escape adds to c and returns 1; a character sets *cp, returns 0. */
static int escape(struct rx *x, struct cls *c, uint32_t *cp, int *neg_class)
{
    if (x->i >= x->n) return rx_fail(x, SMOL_EINVAL, "trailing backslash");
    char e = x->s[x->i++];
    *neg_class = 0;
    switch (e) {
    case 'd': case 'D': *neg_class = e == 'D'; cls_add(x, c, '0', '9'); return 1;
    case 'w': case 'W':
        *neg_class = e == 'W';
        cls_add(x, c, 'a', 'z'); cls_add(x, c, 'A', 'Z'); cls_add(x, c, '0', '9'); cls_add(x, c, '_', '_');
        return 1;
    case 's': case 'S':
        *neg_class = e == 'S';
        cls_add(x, c, 9, 13); cls_add(x, c, ' ', ' '); cls_add(x, c, 0xA0, 0xA0); cls_add(x, c, 0x1680, 0x1680);
        cls_add(x, c, 0x2000, 0x200A); cls_add(x, c, 0x2028, 0x2029); cls_add(x, c, 0x202F, 0x202F);
        cls_add(x, c, 0x205F, 0x205F); cls_add(x, c, 0x3000, 0x3000); cls_add(x, c, 0xFEFF, 0xFEFF);
        return 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return read_hex(x, 2, cp) ? -1 : 0;
    case 'u':
        if (x->i < x->n && x->s[x->i] == '{') {
            x->i++;
            uint32_t v = 0;
            int nd = 0;
            while (x->i < x->n && hexval(x->s[x->i]) >= 0 && nd < 6) { v = v * 16 + (uint32_t)hexval(x->s[x->i++]); nd++; }
            if (!nd || x->i >= x->n || x->s[x->i] != '}') return rx_fail(x, SMOL_EINVAL, "bad \\u{...} escape");
            x->i++;
            *cp = v;
            return 0;
        }
        return read_hex(x, 4, cp) ? -1 : 0;
    case 'b': case 'B': return rx_fail(x, SMOL_EUNSUPPORTED, "word boundaries (\\b, \\B) are not supported");
    case 'p': case 'P': return rx_fail(x, SMOL_EUNSUPPORTED, "Unicode property classes (\\p) are not supported");
    default:
        if (e >= '1' && e <= '9') return rx_fail(x, SMOL_EUNSUPPORTED, "backreferences are not supported");
        if ((unsigned char)e >= 0x80 || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_fail(x, SMOL_EINVAL, "unknown escape");
        *cp = (uint32_t)(unsigned char)e;
        return 0;
    }
}

static int bracket(struct rx *x)
{
    struct cls c = {0};
    int neg = 0, r = -1;
    if (x->i < x->n && x->s[x->i] == '^') { neg = 1; x->i++; }
    int first = 1;
    while (1) {
        if (x->i >= x->n) { rx_fail(x, SMOL_EINVAL, "unterminated character class"); goto out; }
        if (x->s[x->i] == ']' && !first) { x->i++; break; }
        first = 0;
        uint32_t lo, hi;
        int cneg = 0;
        if (x->s[x->i] == '\\') {
            x->i++;
            struct cls sub = {0};
            int k = escape(x, &sub, &lo, &cneg);
            if (k < 0) { free(sub.r); goto out; }
            if (k == 1) {
                if (cneg) {   /* \D \W \S inside a class: add the complement */
                    uint32_t next = 0;
                    /* sort sub, then add its gaps */
                    for (size_t i = 0; i < sub.n; i++)
                        for (size_t j = i + 1; j < sub.n; j++)
                            if (sub.r[j].lo < sub.r[i].lo) { struct gb_range t = sub.r[i]; sub.r[i] = sub.r[j]; sub.r[j] = t; }
                    for (size_t i = 0; i < sub.n; i++) {
                        if (sub.r[i].lo > next) cls_add(x, &c, next, sub.r[i].lo - 1);
                        if (sub.r[i].hi + 1 > next) next = sub.r[i].hi + 1;
                    }
                    if (next <= 0x10FFFF) cls_add(x, &c, next, 0x10FFFF);
                } else {
                    for (size_t i = 0; i < sub.n; i++) cls_add(x, &c, sub.r[i].lo, sub.r[i].hi);
                }
                free(sub.r);
                continue;
            }
            free(sub.r);
        } else if (utf8_dec(x, &lo)) {
            goto out;
        }
        hi = lo;
        if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            if (x->s[x->i] == '\\') {
                x->i++;
                struct cls sub = {0};
                int k = escape(x, &sub, &hi, &cneg);
                free(sub.r);
                if (k != 0) { if (k > 0) rx_fail(x, SMOL_EINVAL, "class escape as a range end"); goto out; }
            } else if (utf8_dec(x, &hi)) {
                goto out;
            }
            if (hi < lo) { rx_fail(x, SMOL_EINVAL, "range out of order"); goto out; }
        }
        cls_add(x, &c, lo, hi);
    }
    r = c.n || neg ? cls_expr(x, &c, neg) : gb_byte_range(x->b, 1, 0);
out:
    free(c.r);
    return r;
}

static int any_char(struct rx *x, int dot)
{
    struct cls c = {0};
    if (dot) { cls_add(x, &c, '\n', '\n'); cls_add(x, &c, '\r', '\r'); cls_add(x, &c, 0x2028, 0x2029); }
    int r = cls_expr(x, &c, 1);
    free(c.r);
    return r;
}

static int alt(struct rx *x, int top);

static int atom(struct rx *x)
{
    char ch = x->s[x->i];
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            x->i++;
            if (x->i < x->n && x->s[x->i] == ':') x->i++;
            else if (x->i < x->n && x->s[x->i] == '<' && x->i + 1 < x->n && x->s[x->i + 1] != '=' && x->s[x->i + 1] != '!') {
                while (x->i < x->n && x->s[x->i] != '>') x->i++;
                x->i++;
            } else return rx_fail(x, SMOL_EUNSUPPORTED, "lookaround is not supported");
        }
        if (++x->depth > 200) return rx_fail(x, SMOL_ETOOLARGE, "groups nested too deeply");
        int e = alt(x, 0);
        x->depth--;
        if (e < 0) return -1;
        if (x->i >= x->n || x->s[x->i] != ')') return rx_fail(x, SMOL_EINVAL, "missing ')'");
        x->i++;
        return e;
    }
    if (ch == '[') { x->i++; return bracket(x); }
    if (ch == '.') { x->i++; return any_char(x, 1); }
    if (ch == '^' || ch == '$') return rx_fail(x, SMOL_EUNSUPPORTED, "anchor inside the pattern");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_fail(x, SMOL_EINVAL, "nothing to repeat");
    uint32_t cp;
    struct cls c = {0};
    if (ch == '\\') {
        x->i++;
        int neg;
        int k = escape(x, &c, &cp, &neg);
        if (k < 0) { free(c.r); return -1; }
        if (k == 1) { int r = cls_expr(x, &c, neg); free(c.r); return r; }
    } else if (utf8_dec(x, &cp)) {
        return -1;
    }
    cls_add(x, &c, cp, cp);
    int r = cls_expr(x, &c, 0);
    free(c.r);
    return r;
}

static int number(struct rx *x, int *v)
{
    if (x->i >= x->n || x->s[x->i] < '0' || x->s[x->i] > '9') return -1;
    long n = 0;
    while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') {
        n = n * 10 + (x->s[x->i++] - '0');
        if (n > GB_MAX_REPEAT) n = GB_MAX_REPEAT + 1;
    }
    *v = (int)n;
    return 0;
}

static int seq(struct rx *x, int top, int *anchored_end)
{
    struct gb *b = x->b;
    int acc = gb_empty(b);
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (top && x->s[x->i] == '$') {
            size_t j = x->i + 1;
            if (j == x->n || x->s[j] == '|') { x->i++; *anchored_end = 1; break; }
        }
        int a = atom(x);
        if (a < 0) return -1;
        while (x->i < x->n) {
            char q = x->s[x->i];
            int mn, mx;
            if (q == '*') { mn = 0; mx = GB_INF; x->i++; }
            else if (q == '+') { mn = 1; mx = GB_INF; x->i++; }
            else if (q == '?') { mn = 0; mx = 1; x->i++; }
            else if (q == '{') {
                size_t save = x->i++;
                if (number(x, &mn)) { x->i = save; break; }   /* a literal '{' */
                mx = mn;
                if (x->i < x->n && x->s[x->i] == ',') {
                    x->i++;
                    if (number(x, &mx)) mx = GB_INF;
                }
                if (x->i >= x->n || x->s[x->i] != '}') return rx_fail(x, SMOL_EINVAL, "bad {m,n}");
                x->i++;
                if (mx != GB_INF && mx < mn) return rx_fail(x, SMOL_EINVAL, "{m,n} with n < m");
            } else break;
            if (x->i < x->n && x->s[x->i] == '?') x->i++;   /* lazy: same language */
            a = gb_rep(b, a, mn, mx);
        }
        if (x->i < x->n && x->s[x->i] == '{' && a >= 0) {   /* literal '{' that did not parse as a quantifier */
            x->i++;
            a = gb_seq2(b, a, cls_expr(x, &(struct cls){&(struct gb_range){'{', '{'}, 1, 1}, 0));
        }
        acc = gb_seq2(b, acc, a);
    }
    return acc;
}

static int alt(struct rx *x, int top)
{
    struct gb *b = x->b;
    int xs[256], k = 0;
    while (1) {
        int start = 0, end = 0;
        if (top && x->i < x->n && x->s[x->i] == '^') { x->i++; start = 1; }
        int s = seq(x, top, &end);
        if (s < 0) return -1;
        if (top) {   /* unanchored ends take anything */
            int any = gb_rep(b, any_char(x, 0), 0, GB_INF);
            if (!start) s = gb_seq2(b, any, s);
            if (!end) s = gb_seq2(b, s, any);
        }
        if (k == 256) return rx_fail(x, SMOL_ETOOLARGE, "over 256 alternatives in one group");
        xs[k++] = s;
        if (x->i < x->n && x->s[x->i] == '|') { x->i++; continue; }
        break;
    }
    return gb_alt(b, xs, (size_t)k);
}

int gb_regex(struct gb *b, const char *re, size_t len, int json_string)
{
    struct rx x = {.b = b, .s = re, .n = len, .json = json_string};
    if (gb_failed(b)) return -1;
    int e = alt(&x, 1);
    if (e >= 0 && x.i < x.n) return rx_fail(&x, SMOL_EINVAL, "unbalanced ')'");
    return e;
}

static const struct smol_grammar_opts defaults;

enum smol_err smol_grammar_compile_regex(const char *re, size_t len, const struct smol_grammar_opts *opts,
                                         struct smol_grammar **out, char *err)
{
    *out = NULL;
    if (!opts) opts = &defaults;
    size_t max_in = opts->max_input ? opts->max_input : SMOL_RULE_MAX_CONSTRAINT_BYTES;
    if (len > max_in) return smol_errf(err, SMOL_ETOOLARGE, "regex of %zu bytes is over the %zu-byte limit", len, max_in);
    struct gb *b;
    enum smol_err rc = gb_new(&b, err);
    if (rc) return rc;
    int root = gb_rule_new(b, "root", 4);
    gb_rule_set(b, root, gb_regex(b, re, len, 0));
    rc = gb_finish(b, root, out, err);
    gb_free(&b);
    return rc;
}
