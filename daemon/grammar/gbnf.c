/*
 * gbnf.c - GBNF (llama.cpp's grammar format) to grammar.
 *
 * The dialect of llama.cpp's grammars/ (see its grammars/README.md):
 *   name ::= alternatives            rules; "root" is the start
 *   "lit"  [a-z] [^"\\]  .           literals, classes, any character (code points)
 *   name  ( ... )  a | b              references, groups, alternatives
 *   x?  x*  x+  x{m}  x{m,}  x{m,n}   repetition
 *   # comment                         to the end of the line
 * Escapes: \xHH \uHHHH \UHHHHHHHH \t \n \r \\ \" \[ \] \-.  Newlines end a
 * rule except inside parentheses and right after '|'.  A rule defined twice
 * keeps its last definition, as llama.cpp does.  Token references (<[id]>,
 * <think>, !<...>) are SMOL_EUNSUPPORTED: a byte grammar has no tokens.
 * Errors carry the line and column.
 */
#include "daemon/grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_build.h"

struct gp {
    struct gb *b;
    const char *s, *end, *p;
    int depth;
};

static int perr(struct gp *g, enum smol_err code, const char *what)
{
    int line = 1, col = 1;
    for (const char *q = g->s; q < g->p && q < g->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    gb_fail(g->b, code, "GBNF line %d column %d: %s", line, col, what);
    return -1;
}

static void space(struct gp *g, int newline_ok)
{
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) g->p++;
        else if (c == '#') { while (g->p < g->end && *g->p != '\n') g->p++; }
        else break;
    }
}

static int word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character (code point) of a literal or class; -1 on error. */
static long pchar(struct gp *g)
{
    if (g->p >= g->end) return perr(g, SMOL_EINVAL, "unexpected end of input");
    unsigned char c = (unsigned char)*g->p;
    if (c == '\\') {
        g->p++;
        if (g->p >= g->end) return perr(g, SMOL_EINVAL, "unexpected end of input");
        char e = *g->p++;
        int nd = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nd) {
            long v = 0;
            for (int i = 0; i < nd; i++) {
                if (g->p >= g->end || hexv(*g->p) < 0) return perr(g, SMOL_EINVAL, "bad hex escape");
                v = v * 16 + hexv(*g->p++);
            }
            if (v > 0x10FFFF) return perr(g, SMOL_EINVAL, "code point out of range");
            return v;
        }
        switch (e) {
        case 't': return '\t';
        case 'n': return '\n';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return e;
        default: g->p--; return perr(g, SMOL_EINVAL, "unknown escape");
        }
    }
    int l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!l || g->end - g->p < l) return perr(g, SMOL_EINVAL, "invalid UTF-8");
    long v = l == 1 ? c : c & (0x7F >> l);
    for (int i = 1; i < l; i++) {
        unsigned char d = (unsigned char)g->p[i];
        if ((d & 0xC0) != 0x80) return perr(g, SMOL_EINVAL, "invalid UTF-8");
        v = v << 6 | (d & 0x3F);
    }
    g->p += l;
    return v;
}

static int utf8(long c, char *o)
{
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) { o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 63)); o[2] = (char)(0x80 | (c & 63)); return 3; }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 63));
    o[2] = (char)(0x80 | ((c >> 6) & 63)); o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static int rule_ref(struct gp *g, const char *name, size_t n)
{
    int r = gb_rule_find(g->b, name, n);
    if (r < 0) r = gb_rule_new(g->b, name, n);
    return r;
}

static int alternates(struct gp *g, int nested);

static int literal(struct gp *g)
{
    g->p++;
    size_t cap = 64, n = 0;
    char *buf = malloc(cap);
    if (!buf) { gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
    while (g->p < g->end && *g->p != '"') {
        long c = pchar(g);
        if (c < 0) { free(buf); return -1; }
        if (n + 4 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
            buf = nb;
        }
        n += (size_t)utf8(c, buf + n);
    }
    if (g->p >= g->end) { free(buf); return perr(g, SMOL_EINVAL, "unterminated string literal"); }
    g->p++;
    int x = gb_bytes(g->b, buf, n);
    free(buf);
    return x;
}

static int charclass(struct gp *g)
{
    g->p++;
    int neg = 0;
    if (g->p < g->end && *g->p == '^') { neg = 1; g->p++; }
    size_t cap = 16, n = 0;
    struct gb_range *r = malloc(cap * sizeof *r);
    if (!r) { gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
    while (g->p < g->end && *g->p != ']') {
        long lo = pchar(g), hi;
        if (lo < 0) { free(r); return -1; }
        hi = lo;
        if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            hi = pchar(g);
            if (hi < 0) { free(r); return -1; }
        }
        if (n == cap) {
            struct gb_range *nr = realloc(r, (cap *= 2) * sizeof *r);
            if (!nr) { free(r); gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
            r = nr;
        }
        r[n++] = (struct gb_range){(uint32_t)lo, (uint32_t)hi};
    }
    if (g->p >= g->end) { free(r); return perr(g, SMOL_EINVAL, "unterminated character class"); }
    g->p++;
    int x = n || neg ? gb_cp_class(g->b, r, n, neg) : gb_byte_range(g->b, 1, 0);
    free(r);
    return x;
}

static int int_at(struct gp *g, int *v)
{
    if (g->p >= g->end || *g->p < '0' || *g->p > '9') return -1;
    long n = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        n = n * 10 + (*g->p++ - '0');
        if (n > GB_MAX_REPEAT) n = GB_MAX_REPEAT + 1;
    }
    *v = (int)n;
    return 0;
}

static int sequence(struct gp *g, int nested)
{
    struct gb *b = g->b;
    int acc = gb_empty(b), last = -1, have_last = 0;
    while (g->p < g->end) {
        char c = *g->p;
        int x;
        if (c == '"') x = literal(g);
        else if (c == '[') x = charclass(g);
        else if (c == '.') {
            g->p++;
            struct gb_range all = {0, 0x10FFFF};
            x = gb_cp_class(b, &all, 1, 0);
        } else if (word_char(c)) {
            const char *s = g->p;
            while (g->p < g->end && word_char(*g->p)) g->p++;
            x = gb_ref(b, rule_ref(g, s, (size_t)(g->p - s)));
        } else if (c == '(') {
            g->p++;
            if (++g->depth > 200) return perr(g, SMOL_ETOOLARGE, "groups nested too deeply");
            space(g, 1);
            x = alternates(g, 1);
            g->depth--;
            if (x < 0) return -1;
            if (g->p >= g->end || *g->p != ')') return perr(g, SMOL_EINVAL, "expecting ')'");
            g->p++;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have_last) return perr(g, SMOL_EINVAL, "expecting preceding item to */+/?/{");
            int mn, mx;
            g->p++;
            if (c == '*') { mn = 0; mx = GB_INF; }
            else if (c == '+') { mn = 1; mx = GB_INF; }
            else if (c == '?') { mn = 0; mx = 1; }
            else {
                space(g, 0);
                if (int_at(g, &mn)) return perr(g, SMOL_EINVAL, "expecting an integer in {m,n}");
                space(g, 0);
                mx = mn;
                if (g->p < g->end && *g->p == ',') {
                    g->p++;
                    space(g, 0);
                    if (int_at(g, &mx)) mx = GB_INF;
                    space(g, 0);
                }
                if (g->p >= g->end || *g->p != '}') return perr(g, SMOL_EINVAL, "expecting '}'");
                g->p++;
                if (mx != GB_INF && mx < mn) return perr(g, SMOL_EINVAL, "{m,n} with n < m");
            }
            last = gb_rep(b, last, mn, mx);
            if (last < 0 && gb_failed(b)) return -1;
            space(g, nested);
            continue;
        } else if (c == '<' || c == '!') {
            return perr(g, SMOL_EUNSUPPORTED, "token references (<...>, !<...>) are not supported");
        } else {
            break;
        }
        if (x < 0) return -1;
        if (have_last) acc = gb_seq2(b, acc, last);
        last = x;
        have_last = 1;
        space(g, nested);
    }
    if (have_last) acc = gb_seq2(b, acc, last);
    return acc;
}

static int alternates(struct gp *g, int nested)
{
    int cap = 8, n = 0;
    int *xs = malloc((size_t)cap * sizeof *xs);
    if (!xs) { gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
    while (1) {
        int s = sequence(g, nested);
        if (s < 0) { free(xs); return -1; }
        if (n == cap) {
            int *nx = realloc(xs, (size_t)(cap *= 2) * sizeof *xs);
            if (!nx) { free(xs); gb_fail(g->b, SMOL_ENOMEM, "out of memory"); return -1; }
            xs = nx;
        }
        xs[n++] = s;
        if (g->p < g->end && *g->p == '|') {
            g->p++;
            space(g, 1);
            continue;
        }
        break;
    }
    int r = gb_alt(g->b, xs, (size_t)n);
    free(xs);
    return r;
}

static const struct smol_grammar_opts defaults;

enum smol_err smol_grammar_compile_gbnf(const char *text, size_t len, const struct smol_grammar_opts *opts,
                                        struct smol_grammar **out, char *err)
{
    *out = NULL;
    if (!opts) opts = &defaults;
    size_t max_in = opts->max_input ? opts->max_input : SMOL_RULE_MAX_CONSTRAINT_BYTES;
    if (len > max_in) return smol_errf(err, SMOL_ETOOLARGE, "GBNF of %zu bytes is over the %zu-byte limit", len, max_in);
    struct gp g = {.s = text, .end = text + len, .p = text};
    enum smol_err rc = gb_new(&g.b, err);
    if (rc) return rc;
    space(&g, 1);
    while (g.p < g.end && !gb_failed(g.b)) {
        const char *name = g.p;
        while (g.p < g.end && word_char(*g.p)) g.p++;
        if (g.p == name) { perr(&g, SMOL_EINVAL, "expecting a rule name"); break; }
        size_t nl = (size_t)(g.p - name);
        space(&g, 0);
        if (g.end - g.p < 3 || memcmp(g.p, "::=", 3)) { perr(&g, SMOL_EINVAL, "expecting ::="); break; }
        g.p += 3;
        space(&g, 1);
        int r = rule_ref(&g, name, nl);
        int x = alternates(&g, 0);
        if (x < 0) break;
        gb_rule_set(g.b, r, x);
        if (g.p < g.end && *g.p != '\n' && *g.p != '\r') { perr(&g, SMOL_EINVAL, "expecting newline or end"); break; }
        space(&g, 1);
    }
    int root = gb_rule_find(g.b, "root", 4);
    if (root < 0 && !gb_failed(g.b)) gb_fail(g.b, SMOL_EINVAL, "GBNF: grammar does not contain a 'root' rule");
    rc = gb_finish(g.b, root, out, err);
    gb_free(&g.b);
    return rc;
}
