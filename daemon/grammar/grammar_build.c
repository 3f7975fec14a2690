/*
 * grammar_build.c - expressions to per-rule NFAs (see grammar_build.h).
 *
 * Expressions live in one arena of nodes with their children in an int pool,
 * so a front end never frees anything and a failure anywhere only marks the
 * builder.  gb_finish builds each rule by Thompson construction (byte,
 * rule and epsilon edges), then removes the epsilon edges (a state takes the
 * byte and rule edges and the finality of its epsilon closure), keeps only the
 * states reachable from some rule start, and checks for left recursion: a
 * rule that can reach a reference to itself without consuming a byte would
 * make the matcher's closure push forever.
 */
#include "daemon/grammar/grammar_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar.h"
#include "daemon/grammar/grammar_impl.h"

enum { GX_EMPTY, GX_SET, GX_SEQ, GX_ALT, GX_REP, GX_REF };

struct gx {
    uint8_t kind;
    int32_t a, b;           /* SET: set index; REP: min, max; REF: rule */
    uint32_t kid0, n_kids;  /* children in gb.kids (SEQ, ALT; REP has one) */
    uint32_t size;          /* NFA states it expands to (saturating): the DAG copies shared parts */
};

struct gb {
    struct gx *x;
    size_t n_x, cap_x;
    int32_t *kids;
    size_t n_kids, cap_kids;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    char **names;
    int32_t *body;          /* [n_rules] expression, -1 while undefined */
    size_t n_rules, cap_rules;
    enum smol_err fail;
    char msg[SMOL_ERRLEN];
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

enum smol_err gb_new(struct gb **out, char *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? SMOL_OK : smol_errf(err, SMOL_ENOMEM, "grammar builder: out of memory");
}

void gb_free(struct gb **b)
{
    if (!b || !*b) return;
    struct gb *g = *b;
    for (size_t i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->body);
    free(g->x);
    free(g->kids);
    free(g->sets);
    free(g);
    *b = NULL;
}

void gb_fail(struct gb *b, enum smol_err code, const char *fmt, ...)
{
    if (b->fail) return;
    b->fail = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
}

int gb_failed(const struct gb *b) { return b->fail != SMOL_OK; }
uint32_t gb_size(const struct gb *b, int x) { return x < 0 ? 0 : b->x[x].size; }
size_t gb_n_exprs(const struct gb *b) { return b->n_x; }

static int node(struct gb *b, int kind, int a, int bb, const int *kids, size_t n)
{
    if (b->fail) return -1;
    for (size_t i = 0; i < n; i++)
        if (kids[i] < 0) return -1;
    if (b->n_x >= GB_MAX_EXPRS) {
        gb_fail(b, SMOL_ETOOLARGE, "grammar too large: over %d expression nodes", GB_MAX_EXPRS);
        return -1;
    }
    if (grow((void **)&b->x, &b->cap_x, b->n_x + 1, sizeof *b->x) ||
        grow((void **)&b->kids, &b->cap_kids, b->n_kids + n, sizeof *b->kids)) {
        gb_fail(b, SMOL_ENOMEM, "grammar builder: out of memory");
        return -1;
    }
    struct gx *x = &b->x[b->n_x];
    x->kind = (uint8_t)kind;
    x->a = a;
    x->b = bb;
    x->kid0 = (uint32_t)b->n_kids;
    x->n_kids = (uint32_t)n;
    if (n) memcpy(b->kids + b->n_kids, kids, n * sizeof *kids);
    b->n_kids += n;
    uint64_t sz = kind == GX_ALT ? 2 : kind == GX_SEQ ? 0 : 1;
    for (size_t i = 0; i < n; i++) sz += b->x[kids[i]].size;
    if (kind == GX_REP) sz = sz * (uint64_t)(bb == GB_INF ? a + 1 : bb) + 2;
    x->size = sz > UINT32_MAX ? UINT32_MAX : (uint32_t)sz;
    return (int)b->n_x++;
}

int gb_empty(struct gb *b) { return node(b, GX_EMPTY, 0, 0, NULL, 0); }

int gb_byteset(struct gb *b, const uint8_t bits[32])
{
    if (b->fail) return -1;
    /* the last few sets are often repeated (a literal's bytes, digits) */
    for (size_t i = b->n_sets, k = 0; i > 0 && k < 8; i--, k++)
        if (!memcmp(b->sets[i - 1], bits, 32)) return node(b, GX_SET, (int)(i - 1), 0, NULL, 0);
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, 32)) {
        gb_fail(b, SMOL_ENOMEM, "grammar builder: out of memory");
        return -1;
    }
    memcpy(b->sets[b->n_sets], bits, 32);
    return node(b, GX_SET, (int)b->n_sets++, 0, NULL, 0);
}

int gb_byte_range(struct gb *b, int lo, int hi)
{
    uint8_t s[32] = {0};
    for (int c = lo; c <= hi; c++) s[c >> 3] |= (uint8_t)(1u << (c & 7));
    return gb_byteset(b, s);
}

int gb_bytes(struct gb *b, const void *s, size_t n)
{
    const uint8_t *p = s;
    if (n == 0) return gb_empty(b);
    if (n == 1) return gb_byte_range(b, p[0], p[0]);
    int *xs = malloc(n * sizeof *xs);
    if (!xs) {
        gb_fail(b, SMOL_ENOMEM, "grammar builder: out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) xs[i] = gb_byte_range(b, p[i], p[i]);
    int r = gb_seq(b, xs, n);
    free(xs);
    return r;
}

int gb_str(struct gb *b, const char *s) { return gb_bytes(b, s, strlen(s)); }

int gb_seq(struct gb *b, const int *xs, size_t n)
{
    if (n == 0) return gb_empty(b);
    if (n == 1) return xs[0];
    return node(b, GX_SEQ, 0, 0, xs, n);
}

int gb_alt(struct gb *b, const int *xs, size_t n)
{
    if (n == 1) return xs[0];
    if (n == 0) {
        gb_fail(b, SMOL_EINVAL, "empty alternative set");
        return -1;
    }
    return node(b, GX_ALT, 0, 0, xs, n);
}

int gb_seq2(struct gb *b, int x, int y) { int k[2] = {x, y}; return gb_seq(b, k, 2); }
int gb_seq3(struct gb *b, int x, int y, int z) { int k[3] = {x, y, z}; return gb_seq(b, k, 3); }
int gb_alt2(struct gb *b, int x, int y) { int k[2] = {x, y}; return gb_alt(b, k, 2); }

int gb_rep(struct gb *b, int x, int min, int max)
{
    if (min < 0 || min > GB_MAX_REPEAT || (max != GB_INF && (max < min || max > GB_MAX_REPEAT))) {
        if (!b->fail) gb_fail(b, SMOL_ETOOLARGE, "repetition {%d,%d} out of range (at most %d)", min, max, GB_MAX_REPEAT);
        return -1;
    }
    if (min == 1 && max == 1) return x;
    if (max == 0) return gb_empty(b);
    return node(b, GX_REP, min, max, &x, 1);
}

int gb_ref(struct gb *b, int rule)
{
    if (rule < 0) return -1;
    return node(b, GX_REF, rule, 0, NULL, 0);
}

int gb_rule_find(const struct gb *b, const char *name, size_t len)
{
    for (size_t i = 0; i < b->n_rules; i++)
        if (strlen(b->names[i]) == len && !memcmp(b->names[i], name, len)) return (int)i;
    return -1;
}

int gb_rule_new(struct gb *b, const char *name, size_t len)
{
    if (b->fail) return -1;
    if (b->n_rules >= GB_MAX_RULES) {
        gb_fail(b, SMOL_ETOOLARGE, "grammar too large: over %d rules", GB_MAX_RULES);
        return -1;
    }
    if (grow((void **)&b->names, &b->cap_rules, b->n_rules + 1, sizeof *b->names)) goto oom;
    size_t cap = b->cap_rules;
    int32_t *body = realloc(b->body, cap * sizeof *body);
    if (!body) goto oom;
    b->body = body;
    char *nm = malloc(len + 1);
    if (!nm) goto oom;
    memcpy(nm, name, len);
    nm[len] = 0;
    b->names[b->n_rules] = nm;
    b->body[b->n_rules] = -1;
    return (int)b->n_rules++;
oom:
    gb_fail(b, SMOL_ENOMEM, "grammar builder: out of memory");
    return -1;
}

void gb_rule_set(struct gb *b, int rule, int expr)
{
    if (rule >= 0 && (size_t)rule < b->n_rules) b->body[rule] = expr;
}

/* ---- code point classes to UTF-8 ---------------------------------------------------- */

static int utf8_enc(uint32_t c, uint8_t *o)
{
    if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { o[0] = (uint8_t)(0xC0 | c >> 6); o[1] = (uint8_t)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12); o[1] = (uint8_t)(0x80 | ((c >> 6) & 63)); o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18); o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63)); o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

struct altlist {
    int *v;
    size_t n, cap;
};

/* Appends the byte-range sequences encoding [lo, hi] (the classic split:
 * first by encoded length, then until every byte position spans a full
 * continuation range or the ranges agree above it). */
static void utf8_ranges(struct gb *b, uint32_t lo, uint32_t hi, struct altlist *out)
{
    if (lo > hi || b->fail) return;
    static const uint32_t lim[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i]) {
            utf8_ranges(b, lo, lim[i], out);
            utf8_ranges(b, lim[i] + 1, hi, out);
            return;
        }
    if (hi < 0x80) {
        int x = gb_byte_range(b, (int)lo, (int)hi);
        if (grow((void **)&out->v, &out->cap, out->n + 1, sizeof *out->v)) { gb_fail(b, SMOL_ENOMEM, "out of memory"); return; }
        out->v[out->n++] = x;
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_ranges(b, lo, lo | m, out);
                utf8_ranges(b, (lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_ranges(b, lo, (hi & ~m) - 1, out);
                utf8_ranges(b, hi & ~m, hi, out);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    int xs[4];
    for (int i = 0; i < n; i++) xs[i] = gb_byte_range(b, a[i], z[i]);
    int x = gb_seq(b, xs, (size_t)n);
    if (grow((void **)&out->v, &out->cap, out->n + 1, sizeof *out->v)) { gb_fail(b, SMOL_ENOMEM, "out of memory"); return; }
    out->v[out->n++] = x;
}

static int cmp_range(const void *x, const void *y)
{
    const struct gb_range *a = x, *c = y;
    return a->lo < c->lo ? -1 : a->lo > c->lo;
}

int gb_cp_class(struct gb *b, const struct gb_range *r, size_t n, int negate)
{
    if (b->fail) return -1;
    /* normalize: sorted, merged, surrogates and > U+10FFFF cut; then complement */
    struct gb_range *v = malloc((n + 2) * 2 * sizeof *v);
    if (!v) { gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi > 0x10FFFF ? 0x10FFFF : r[i].hi;
        if (lo > hi) continue;
        if (lo < 0xD800 && hi > 0xDFFF) {
            v[k++] = (struct gb_range){lo, 0xD7FF};
            v[k++] = (struct gb_range){0xE000, hi};
        } else if (lo >= 0xD800 && hi <= 0xDFFF) {
            continue;
        } else {
            if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
            if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
            if (lo <= hi) v[k++] = (struct gb_range){lo, hi};
        }
    }
    qsort(v, k, sizeof *v, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && v[i].lo <= v[m - 1].hi + 1) {
            if (v[i].hi > v[m - 1].hi) v[m - 1].hi = v[i].hi;
        } else {
            v[m++] = v[i];
        }
    }
    if (negate) {
        struct gb_range *w = malloc((m + 2) * 2 * sizeof *w);
        if (!w) { free(v); gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
        size_t j = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (v[i].lo > next) w[j++] = (struct gb_range){next, v[i].lo - 1};
            next = v[i].hi + 1;
        }
        if (next <= 0x10FFFF) w[j++] = (struct gb_range){next, 0x10FFFF};
        free(v);
        v = w;
        /* cut the surrogates again, into a fresh array (one range may split in two) */
        struct gb_range *u = malloc((j + 1) * sizeof *u);
        if (!u) { free(v); gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
        m = 0;
        for (size_t i = 0; i < j; i++) {
            if (v[i].lo <= 0xD800 && v[i].hi >= 0xDFFF) {
                if (v[i].lo < 0xD800) u[m++] = (struct gb_range){v[i].lo, 0xD7FF};
                if (v[i].hi > 0xDFFF) u[m++] = (struct gb_range){0xE000, v[i].hi};
            } else {
                u[m++] = v[i];
            }
        }
        free(v);
        v = u;
    }
    /* ASCII parts become one byte set; the rest UTF-8 sequences */
    uint8_t ascii[32] = {0};
    int has_ascii = 0;
    struct altlist alts = {0};
    for (size_t i = 0; i < m; i++) {
        uint32_t lo = v[i].lo, hi = v[i].hi;
        for (; lo <= hi && lo < 0x80; lo++) { ascii[lo >> 3] |= (uint8_t)(1u << (lo & 7)); has_ascii = 1; }
        if (lo <= hi) utf8_ranges(b, lo, hi, &alts);
    }
    free(v);
    if (has_ascii) {
        int x = gb_byteset(b, ascii);
        if (!grow((void **)&alts.v, &alts.cap, alts.n + 1, sizeof *alts.v)) alts.v[alts.n++] = x;
        else gb_fail(b, SMOL_ENOMEM, "out of memory");
    }
    int r2 = -1;
    if (alts.n == 0) {
        if (!b->fail) gb_fail(b, SMOL_EINVAL, "empty character class");
    } else {
        r2 = gb_alt(b, alts.v, alts.n);
    }
    free(alts.v);
    return r2;
}

/* ---- Thompson construction ---------------------------------------------------------- */

enum { E_BYTE, E_REF, E_EPS };

struct tedge {
    uint32_t from, to, arg;
    uint8_t kind;
};

struct nfa {
    struct tedge *e;
    size_t n_e, cap_e;
    uint32_t *rule_of;      /* [n_states] */
    uint8_t *final;
    uint32_t *twin;         /* [n_states] see smol_grammar.twin (UINT32_MAX: none) */
    size_t n_states, cap_states;
    struct gb *b;
};

static int new_state(struct nfa *a, uint32_t rule)
{
    if (a->n_states >= GB_MAX_STATES) {
        gb_fail(a->b, SMOL_ETOOLARGE, "grammar too large: over %d automaton states", GB_MAX_STATES);
        return -1;
    }
    size_t cap = a->cap_states, cap2 = a->cap_states;
    if (grow((void **)&a->rule_of, &cap, a->n_states + 1, sizeof *a->rule_of) ||
        grow((void **)&a->twin, &cap2, a->n_states + 1, sizeof *a->twin) ||
        grow((void **)&a->final, &a->cap_states, a->n_states + 1, 1)) {
        gb_fail(a->b, SMOL_ENOMEM, "out of memory");
        return -1;
    }
    if (cap != a->cap_states || cap2 != a->cap_states) {   /* keep the arrays the same capacity */
        uint32_t *r = realloc(a->rule_of, a->cap_states * sizeof *r);
        if (r) a->rule_of = r;
        uint32_t *t = r ? realloc(a->twin, a->cap_states * sizeof *t) : NULL;
        if (t) a->twin = t;
        if (!r || !t) { gb_fail(a->b, SMOL_ENOMEM, "out of memory"); return -1; }
    }
    a->rule_of[a->n_states] = rule;
    a->twin[a->n_states] = UINT32_MAX;
    a->final[a->n_states] = 0;
    return (int)a->n_states++;
}

static void add_edge(struct nfa *a, int from, int to, int kind, uint32_t arg)
{
    if (from < 0 || to < 0) return;
    if (grow((void **)&a->e, &a->cap_e, a->n_e + 1, sizeof *a->e)) { gb_fail(a->b, SMOL_ENOMEM, "out of memory"); return; }
    a->e[a->n_e++] = (struct tedge){(uint32_t)from, (uint32_t)to, arg, (uint8_t)kind};
}

/* A repetition built n_man copies of its body at states [man, man + n_man
 * * per) and then n_opt optional copies at [opt, opt + n_opt * per): each
 * copy is built the same way, so it makes the same states in the same
 * order.  Each state of a copy but the first gets the same state of the
 * copy before as its twin (a candidate for sharing its token class; the
 * index checks their futures).  The outermost repetition's twins win. */
static void mark_twins(struct nfa *a, size_t man, size_t man_end, int n_man, size_t opt, int n_opt)
{
    size_t per = n_opt > 0 ? (a->n_states - opt) / (size_t)n_opt : n_man > 0 ? (man_end - man) / (size_t)n_man : 0;
    if (!per || (man_end - man) != per * (size_t)n_man || (n_opt > 0 && a->n_states - opt != per * (size_t)n_opt)) return;
    size_t prev = SIZE_MAX;     /* start of the previous copy */
    for (int i = 0; i < n_man + n_opt; i++) {
        size_t c = i < n_man ? man + (size_t)i * per : opt + (size_t)(i - n_man) * per;
        if (prev != SIZE_MAX)
            for (size_t j = 0; j < per; j++) a->twin[c + j] = (uint32_t)(prev + j);
        prev = c;
    }
}

/* Adds the fragment for expression x starting at state from; returns its end state. */
static int build(struct nfa *a, int x, int from, uint32_t rule, int depth)
{
    struct gb *b = a->b;
    if (from < 0 || b->fail) return -1;
    if (depth > 2000) { gb_fail(b, SMOL_ETOOLARGE, "grammar nested too deeply"); return -1; }
    const struct gx *g = &b->x[x];
    const int32_t *k = b->kids + g->kid0;
    int t, end;
    switch (g->kind) {
    case GX_EMPTY:
        return from;
    case GX_SET:
        t = new_state(a, rule);
        add_edge(a, from, t, E_BYTE, (uint32_t)g->a);
        return t;
    case GX_REF:
        t = new_state(a, rule);
        add_edge(a, from, t, E_REF, (uint32_t)g->a);
        return t;
    case GX_SEQ:
        for (uint32_t i = 0; i < g->n_kids && from >= 0; i++) from = build(a, k[i], from, rule, depth + 1);
        return from;
    case GX_ALT:
        end = new_state(a, rule);
        for (uint32_t i = 0; i < g->n_kids; i++) {
            int s = new_state(a, rule);
            add_edge(a, from, s, E_EPS, 0);
            add_edge(a, build(a, k[i], s, rule, depth + 1), end, E_EPS, 0);
        }
        return end;
    case GX_REP: {
        int cur = new_state(a, rule);
        add_edge(a, from, cur, E_EPS, 0);
        size_t first = a->n_states;     /* the mandatory copies of x are built back to back from here */
        for (int i = 0; i < g->a && cur >= 0; i++) cur = build(a, k[0], cur, rule, depth + 1);
        size_t mid = a->n_states;
        if (g->b == GB_INF) {
            if (cur >= 0) mark_twins(a, first, mid, g->a, mid, 0);
            int s = new_state(a, rule);
            add_edge(a, cur, s, E_EPS, 0);
            add_edge(a, build(a, k[0], s, rule, depth + 1), s, E_EPS, 0);
            return s;
        }
        end = new_state(a, rule);
        add_edge(a, cur, end, E_EPS, 0);
        size_t opt = a->n_states;       /* the optional ones from here */
        for (int i = g->a; i < g->b && cur >= 0; i++) {
            cur = build(a, k[0], cur, rule, depth + 1);
            add_edge(a, cur, end, E_EPS, 0);
        }
        if (cur >= 0) mark_twins(a, first, mid, g->a, opt, g->b - g->a);
        return end;
    }
    }
    return -1;
}

static int cmp_tedge(const void *x, const void *y)
{
    const struct tedge *p = x, *q = y;
    if (p->from != q->from) return p->from < q->from ? -1 : 1;
    if (p->kind != q->kind) return p->kind < q->kind ? -1 : 1;
    if (p->arg != q->arg) return p->arg < q->arg ? -1 : 1;
    return p->to < q->to ? -1 : p->to > q->to;
}

/* Left recursion: some rule reaches a reference to itself before any byte.
 * Edges r -> callee for every reference reachable from r's start through
 * nullable references (a BFS over r's own states); a cycle in that graph is
 * left recursion.  Kahn's algorithm on both edge directions leaves exactly
 * the rules on cycles (and between them); returns one of them, or -1. */
static int left_recursion(const struct smol_grammar *g, const uint8_t *nullable, int *fail)
{
    uint32_t nr = g->n_rules;
    uint32_t *seen = calloc(g->n_states, sizeof *seen), *queue = malloc(g->n_states * sizeof *queue);
    uint32_t *ef = NULL, *et = NULL;
    size_t ne = 0, cap = 0;
    int res = -1;
    *fail = !seen || !queue;
    for (uint32_t r = 0; r < nr && !*fail; r++) {
        size_t qn = 0;
        queue[qn++] = g->rule_start[r];
        seen[g->rule_start[r]] = r + 1;
        for (size_t qi = 0; qi < qn; qi++) {
            const struct gstate *s = &g->states[queue[qi]];
            for (uint32_t e = s->e0 + s->n_byte; e < s->e0 + s->n_byte + s->n_ref; e++) {
                uint32_t callee = g->edges[e].arg, to = g->edges[e].to;
                size_t c2 = cap;
                if (grow((void **)&ef, &c2, ne + 1, sizeof *ef) || grow((void **)&et, &cap, ne + 1, sizeof *et)) { *fail = 1; break; }
                if (c2 != cap) { uint32_t *x = realloc(ef, cap * sizeof *ef); if (!x) { *fail = 1; break; } ef = x; }
                ef[ne] = r; et[ne++] = callee;
                if (nullable[callee] && seen[to] != r + 1) { seen[to] = r + 1; queue[qn++] = to; }
            }
        }
    }
    uint32_t *indeg = calloc(nr, sizeof *indeg), *outdeg = calloc(nr, sizeof *outdeg);
    uint32_t *o0 = calloc(nr + 1, sizeof *o0), *i0 = calloc(nr + 1, sizeof *i0);
    uint32_t *oadj = malloc((ne + 1) * sizeof *oadj), *iadj = malloc((ne + 1) * sizeof *iadj);
    uint32_t *q = malloc((nr + 1) * sizeof *q);
    uint8_t *gone = calloc(nr, 1);
    if (*fail || !indeg || !outdeg || !gone || !o0 || !i0 || !oadj || !iadj || !q) { *fail = 1; goto out2; }
    for (size_t i = 0; i < ne; i++) { indeg[et[i]]++; outdeg[ef[i]]++; o0[ef[i] + 1]++; i0[et[i] + 1]++; }
    for (uint32_t r = 0; r < nr; r++) { o0[r + 1] += o0[r]; i0[r + 1] += i0[r]; }
    for (size_t i = 0; i < ne; i++) { oadj[o0[ef[i]]++] = et[i]; iadj[i0[et[i]]++] = ef[i]; }
    for (uint32_t r = nr; r > 0; r--) { o0[r] = o0[r - 1]; i0[r] = i0[r - 1]; }
    o0[0] = i0[0] = 0;
    size_t qh = 0, qt = 0;
    for (uint32_t r = 0; r < nr; r++)
        if (!indeg[r] || !outdeg[r]) { gone[r] = 1; q[qt++] = r; }
    while (qh < qt) {
        uint32_t r = q[qh++];
        for (uint32_t i = o0[r]; i < o0[r + 1]; i++) {
            uint32_t t = oadj[i];
            if (!gone[t] && --indeg[t] == 0) { gone[t] = 1; q[qt++] = t; }
        }
        for (uint32_t i = i0[r]; i < i0[r + 1]; i++) {
            uint32_t f = iadj[i];
            if (!gone[f] && --outdeg[f] == 0) { gone[f] = 1; q[qt++] = f; }
        }
    }
    for (uint32_t r = 0; r < nr && res < 0; r++)
        if (!gone[r]) res = (int)r;
out2:
    free(o0); free(i0); free(oadj); free(iadj); free(q);
    free(seen); free(queue); free(ef); free(et); free(indeg); free(outdeg); free(gone);
    return res;
}

void smol_grammar_free(struct smol_grammar **gp)
{
    if (!gp || !*gp) return;
    struct smol_grammar *g = *gp;
    if (g->rule_names)
        for (uint32_t i = 0; i < g->n_rules; i++) free(g->rule_names[i]);
    free(g->rule_names);
    free(g->rule_start);
    free(g->twin);
    free(g->dist);
    free(g->states);
    free(g->edges);
    free(g->sets);
    free(g);
    *gp = NULL;
}

enum smol_err gb_finish(struct gb *b, int root, struct smol_grammar **out, char *err)
{
    *out = NULL;
    struct nfa a = {.b = b};
    struct smol_grammar *g = NULL;
    uint32_t *off = NULL, *stack = NULL, *stamp = NULL, *newid = NULL, *rstart = NULL;
    uint8_t *fin = NULL, *nullable = NULL;
    struct tedge *ne = NULL;
    size_t n_ne = 0, cap_ne = 0;
    enum smol_err rc;
    if (b->fail) goto failed;
    if (root < 0 || (size_t)root >= b->n_rules) { gb_fail(b, SMOL_EINVAL, "grammar has no root rule"); goto failed; }
    for (size_t r = 0; r < b->n_rules; r++)
        if (b->body[r] < 0) { gb_fail(b, SMOL_EINVAL, "rule '%s' is referenced but not defined", b->names[r]); goto failed; }
    rstart = malloc(b->n_rules * sizeof *rstart);
    if (!rstart) goto oom;
    for (size_t r = 0; r < b->n_rules; r++) {
        int s = new_state(&a, (uint32_t)r);
        rstart[r] = (uint32_t)s;
        int e = build(&a, b->body[r], s, (uint32_t)r, 0);
        if (e < 0 || b->fail) goto failed;
        a.final[e] = 1;
    }
    /* epsilon removal: CSR by source, then each state takes its closure's edges */
    size_t ns = a.n_states;
    qsort(a.e, a.n_e, sizeof *a.e, cmp_tedge);
    off = calloc(ns + 1, sizeof *off);
    stack = malloc(ns * sizeof *stack);
    stamp = calloc(ns, sizeof *stamp);
    fin = calloc(ns, 1);
    if (!off || !stack || !stamp || !fin) goto oom;
    for (size_t i = 0; i < a.n_e; i++) off[a.e[i].from + 1]++;
    for (size_t s = 0; s < ns; s++) off[s + 1] += off[s];
    for (size_t s = 0; s < ns; s++) {
        size_t sp = 0, first = n_ne;
        stack[sp++] = (uint32_t)s;
        stamp[s] = (uint32_t)s + 1;
        while (sp) {
            uint32_t u = stack[--sp];
            fin[s] |= a.final[u];
            for (uint32_t i = off[u]; i < off[u + 1]; i++) {
                const struct tedge *e = &a.e[i];
                if (e->kind == E_EPS) {
                    if (stamp[e->to] != s + 1) { stamp[e->to] = (uint32_t)s + 1; stack[sp++] = e->to; }
                } else {
                    if (n_ne >= (size_t)GB_MAX_STATES * 8) { gb_fail(b, SMOL_ETOOLARGE, "grammar too large: too many automaton edges"); goto failed; }
                    if (grow((void **)&ne, &cap_ne, n_ne + 1, sizeof *ne)) goto oom;
                    ne[n_ne] = *e;
                    ne[n_ne++].from = (uint32_t)s;
                }
            }
        }
        qsort(ne + first, n_ne - first, sizeof *ne, cmp_tedge);
        size_t w = first;   /* drop duplicates */
        for (size_t i = first; i < n_ne; i++)
            if (w == first || cmp_tedge(&ne[w - 1], &ne[i])) ne[w++] = ne[i];
        n_ne = w;
    }
    /* keep the states reachable from a rule start */
    free(off);
    off = calloc(ns + 1, sizeof *off);
    newid = malloc(ns * sizeof *newid);
    if (!off || !newid) goto oom;
    for (size_t i = 0; i < n_ne; i++) off[ne[i].from + 1]++;
    for (size_t s = 0; s < ns; s++) off[s + 1] += off[s];
    for (size_t s = 0; s < ns; s++) newid[s] = UINT32_MAX;
    size_t sp = 0, nk = 0;
    for (size_t r = 0; r < b->n_rules; r++)
        if (newid[rstart[r]] == UINT32_MAX) { newid[rstart[r]] = 0; stack[sp++] = rstart[r]; }
    while (sp) {
        uint32_t u = stack[--sp];
        for (uint32_t i = off[u]; i < off[u + 1]; i++)
            if (newid[ne[i].to] == UINT32_MAX) { newid[ne[i].to] = 0; stack[sp++] = ne[i].to; }
    }
    for (size_t s = 0; s < ns; s++)
        if (newid[s] != UINT32_MAX) newid[s] = (uint32_t)nk++;
    g = calloc(1, sizeof *g);
    if (!g) goto oom;
    g->n_states = (uint32_t)nk;
    g->states = calloc(nk, sizeof *g->states);
    g->edges = malloc((n_ne + 1) * sizeof *g->edges);
    g->sets = malloc((b->n_sets + 1) * 32);
    g->rule_start = malloc(b->n_rules * sizeof *g->rule_start);
    g->rule_names = calloc(b->n_rules, sizeof *g->rule_names);
    g->twin = malloc((nk + 1) * sizeof *g->twin);
    if (!g->states || !g->edges || !g->sets || !g->rule_start || !g->rule_names || !g->twin) goto oom;
    g->n_rules = (uint32_t)b->n_rules;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rule_start[r] = newid[rstart[r]];
        g->rule_names[r] = strdup(b->names[r]);
        if (!g->rule_names[r]) goto oom;
    }
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * 32);
    g->n_sets = (uint32_t)b->n_sets;
    g->root = (uint32_t)root;
    uint32_t ecount = 0;
    for (size_t s = 0; s < ns; s++) {
        if (newid[s] == UINT32_MAX) continue;
        struct gstate *st = &g->states[newid[s]];
        st->e0 = ecount;
        st->final = fin[s];
        st->rule = a.rule_of[s];
        uint32_t tw = a.twin[s];
        g->twin[newid[s]] = tw != UINT32_MAX && newid[tw] != UINT32_MAX ? newid[tw] : UINT32_MAX;
        for (uint32_t i = off[s]; i < off[s + 1]; i++) {   /* sorted: byte edges, then rule edges */
            g->edges[ecount].arg = ne[i].arg;
            g->edges[ecount].to = newid[ne[i].to];
            ecount++;
            if (ne[i].kind == E_BYTE) st->n_byte++;
            else st->n_ref++;
        }
    }
    g->n_edges = ecount;
    /* nullable rules (fixpoint), then left recursion */
    nullable = calloc(g->n_rules, 1);
    if (!nullable) goto oom;
    uint32_t tick = (uint32_t)ns + 1;   /* above every stamp the epsilon pass left */
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            size_t qn = 0;
            tick++;
            stack[qn++] = g->rule_start[r];
            stamp[g->rule_start[r]] = tick;
            for (size_t qi = 0; qi < qn && !nullable[r]; qi++) {
                const struct gstate *st = &g->states[stack[qi]];
                if (st->final) { nullable[r] = 1; changed = 1; break; }
                for (uint32_t e = st->e0 + st->n_byte; e < st->e0 + st->n_byte + st->n_ref; e++)
                    if (nullable[g->edges[e].arg] && stamp[g->edges[e].to] != tick) {
                        stamp[g->edges[e].to] = tick;
                        stack[qn++] = g->edges[e].to;
                    }
            }
        }
    }
    int lr_fail = 0, lr = left_recursion(g, nullable, &lr_fail);
    if (lr_fail) goto oom;
    if (lr >= 0) { gb_fail(b, SMOL_EINVAL, "left recursion in rule '%s'", g->rule_names[lr]); goto failed; }
    if (gr_shortest_init(g)) goto oom;
    rc = SMOL_OK;
    *out = g;
    g = NULL;
    goto done;
oom:
    gb_fail(b, SMOL_ENOMEM, "grammar: out of memory");
failed:
    rc = smol_errf(err, b->fail ? b->fail : SMOL_EINTERNAL, "%s", b->msg);
done:
    smol_grammar_free(&g);
    free(a.e); free(a.rule_of); free(a.final); free(a.twin);
    free(off); free(stack); free(stamp); free(fin); free(newid); free(rstart); free(ne); free(nullable);
    return rc;
}
