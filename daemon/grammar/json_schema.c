/*
 * json_schema.c - JSON Schema (draft 2020-12 subset) to grammar.
 *
 * The grammar generates one canonical serialization of each valid value:
 * compact JSON (or with optional whitespace between tokens), object keys in
 * the schema's `properties` order with the required ones mandatory and the
 * rest optional, then any additional keys.  Numbers and strings take every
 * JSON spelling.
 *
 * Keywords:
 *   types      type (one or a list; none = every type), enum, const
 *   objects    properties, required, additionalProperties (schema or bool;
 *              absent = none unless opts.extra_properties)
 *   arrays     items (schema or false), prefixItems, minItems, maxItems,
 *              uniqueItems false
 *   strings    minLength, maxLength, pattern (regex.c), format (date, time,
 *              date-time, uuid, email, ipv4, uri)
 *   numbers    integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *              exactly (digit-range automata); number: a lower bound >= 0
 *              (no minus sign)
 *   combining  anyOf, oneOf (as anyOf: exclusivity is not a grammar
 *              property), allOf (merged), $ref to "#..." JSON pointers,
 *              $defs / definitions, recursion through $ref
 *   ignored    annotations: title, description, $schema, $id, $anchor,
 *              examples, default, $comment, deprecated, readOnly, writeOnly,
 *              contentMediaType, contentEncoding
 * Anything else is SMOL_EUNSUPPORTED naming the keyword and where it is.
 * Limits (opts): input size, nesting depth, total enum values; the builder
 * bounds the automaton.
 *
 * This file walks the keywords (objects, arrays, references, allOf, the
 * type dispatch); the leaves (generic JSON, literals, strings, integers,
 * numbers) are built by json_values.c.
 */
#include "daemon/grammar/grammar.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_build.h"
#include "daemon/grammar/json_schema_impl.h"
#include "daemon/grammar/json_values.h"

static int sch(struct js *c, json_t *s, const char *at);

/* ---- objects ------------------------------------------------------------------------ */

/* Length of the key unit at s (an escape or one UTF-8 character). */
static size_t unit_len(const char *s, size_t n)
{
    if (s[0] == '\\') return n >= 6 && s[1] == 'u' ? 6 : 2;
    unsigned char ch = (unsigned char)s[0];
    size_t l = ch < 0x80 ? 1 : ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : 4;
    return l > n ? n : l;
}

static uint32_t unit_cp(const char *s, size_t l)
{
    const unsigned char *u = (const unsigned char *)s;
    if (l == 1) return u[0];
    if (l == 2) return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (l == 3) return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

/* A quoted key (closing quote included, opening excluded) that is none of
 * keys[0..n) (escaped bodies), all sharing their first off bytes. */
static int key_not_in(struct js *c, char **keys, size_t n, size_t off, int depth)
{
    struct gb *b = c->b;
    if (depth > 256) return js_fail(c, SMOL_ETOOLARGE, "%s too long", "property name", "");
    size_t cap = n + 2;
    int *alts = malloc(cap * sizeof *alts);
    struct gb_range *ex = malloc((n + 3) * sizeof *ex);
    uint8_t escs[32] = {0};
    if (!alts || !ex) { free(alts); free(ex); gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
    size_t k = 0, ne = 0;
    int ends = 0;
    ex[ne++] = (struct gb_range){0, 0x1F};
    ex[ne++] = (struct gb_range){'"', '"'};
    ex[ne++] = (struct gb_range){'\\', '\\'};
    for (size_t i = 0; i < n;) {
        size_t len = strlen(keys[i]);
        if (len == off) { ends = 1; i++; continue; }
        size_t ul = unit_len(keys[i] + off, len - off), j = i + 1;
        while (j < n && strlen(keys[j]) >= off + ul && !memcmp(keys[j] + off, keys[i] + off, ul)) j++;
        if (keys[i][off] == '\\') escs[(uint8_t)keys[i][off + 1] >> 3] |= (uint8_t)(1u << (keys[i][off + 1] & 7));
        else { uint32_t cp = unit_cp(keys[i] + off, ul); ex[ne++] = (struct gb_range){cp, cp}; }
        alts[k++] = gb_seq2(b, gb_bytes(b, keys[i] + off, ul), key_not_in(c, keys + i, j - i, off + ul, depth + 1));
        i = j;
    }
    if (!ends) alts[k++] = gb_str(b, "\"");
    /* any other character, then anything */
    uint8_t esc[32] = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++)
        if (!((escs[(uint8_t)*p >> 3] >> (*p & 7)) & 1)) esc[(uint8_t)*p >> 3] |= (uint8_t)(1u << (*p & 7));
    struct gb_range hx[] = {{'0', '9'}, {'a', 'f'}, {'A', 'F'}};
    int u = gb_seq2(b, gb_str(b, "u"), gb_rep(b, gb_cp_class(b, hx, 3, 0), 4, 4));
    int other = gb_alt2(b, gb_cp_class(b, ex, ne, 1), gb_seq2(b, gb_str(b, "\\"), gb_alt2(b, gb_byteset(b, esc), u)));
    alts[k++] = gb_seq3(b, other, gb_rep(b, js_str_char(c), 0, GB_INF), gb_str(b, "\""));
    int r = gb_alt(b, alts, k);
    free(alts);
    free(ex);
    return r;
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static int object_expr(struct js *c, json_t *s, const char *at)
{
    struct gb *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return js_fail(c, SMOL_EINVAL, "'%s' must be an object", "properties", at);
    if (req && !json_is_array(req)) return js_fail(c, SMOL_EINVAL, "'%s' must be an array", "required", at);
    int extra = ap ? !(json_is_false(ap)) : c->o->extra_properties;
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0, n = 0;
    const char **names = malloc((np + nr + 1) * sizeof *names);
    json_t **schemas = malloc((np + nr + 1) * sizeof *schemas);
    int *kv = malloc((np + nr + 1) * sizeof *kv), *isreq = calloc(np + nr + 1, sizeof *isreq);
    char **esc = calloc(np + nr + 1, sizeof *esc);
    int r = -1;
    if (!names || !schemas || !kv || !isreq || !esc) { gb_fail(b, SMOL_ENOMEM, "out of memory"); goto out; }
    const char *key;
    json_t *val;
    if (props) json_object_foreach(props, key, val) { names[n] = key; schemas[n++] = val; }
    json_t *sreq = json_array();   /* required names, the undescribed ones sorted by name */
    for (size_t i = 0; i < nr; i++) json_array_append(sreq, json_array_get(req, i));
    for (size_t i = 1; i < nr; i++)
        for (size_t j = i; j > 0 && json_is_string(json_array_get(sreq, j)) && json_is_string(json_array_get(sreq, j - 1)) &&
                           strcmp(json_string_value(json_array_get(sreq, j - 1)), json_string_value(json_array_get(sreq, j))) > 0; j--) {
            json_t *t = json_incref(json_array_get(sreq, j));
            json_array_set(sreq, j, json_array_get(sreq, j - 1));
            json_array_set_new(sreq, j - 1, t);
        }
    for (size_t i = 0; i < nr; i++) {
        json_t *x = json_array_get(sreq, i);
        if (!json_is_string(x)) { json_decref(sreq); js_fail(c, SMOL_EINVAL, "'%s' must hold strings", "required", at); goto out; }
        size_t j = 0;
        while (j < n && strcmp(names[j], json_string_value(x))) j++;
        if (j == n) {   /* required but not described: any value (or the additional schema) */
            names[n] = json_string_value(x);
            schemas[n++] = json_is_object(ap) ? ap : NULL;
        }
        isreq[j] = 1;
    }
    json_decref(sreq);
    int value_extra = extra ? (json_is_object(ap) ? sch(c, ap, at) : js_value_rule(c)) : -1;
    for (size_t i = 0; i < n; i++) {
        char sub[SMOL_ERRLEN];
        snprintf(sub, sizeof sub, "%s/properties/%s", at, names[i]);
        json_t *ks = json_string(names[i]);
        esc[i] = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        if (!esc[i]) { gb_fail(b, SMOL_ENOMEM, "out of memory"); goto out; }
        int v = schemas[i] ? sch(c, schemas[i], sub) : js_value_rule(c);
        kv[i] = gb_seq3(b, gb_str(b, esc[i]), js_tok(c, ":"), v);
    }
    int kvx = -1;
    if (extra) {
        char **bodies = malloc((n + 1) * sizeof *bodies);
        if (!bodies) { gb_fail(b, SMOL_ENOMEM, "out of memory"); goto out; }
        for (size_t i = 0; i < n; i++) {   /* escaped key without its quotes */
            size_t l = strlen(esc[i]);
            memmove(esc[i], esc[i] + 1, l - 2);
            esc[i][l - 2] = 0;
            bodies[i] = esc[i];
        }
        qsort(bodies, n, sizeof *bodies, cmp_str);
        int key = gb_seq2(b, gb_str(b, "\""), key_not_in(c, bodies, n, 0, 0));
        free(bodies);
        kvx = gb_seq3(b, key, js_tok(c, ":"), value_extra);
    }
    /* after[i]: properties i.. once something was written; first[i]: nothing yet */
    int after = extra ? gb_rep(b, gb_seq2(b, js_tok(c, ","), kvx), 0, GB_INF) : gb_empty(b);
    int first = extra ? gb_rep(b, gb_seq2(b, kvx, after), 0, 1) : gb_empty(b);
    int *aft = malloc((n + 1) * sizeof *aft);
    if (!aft) { gb_fail(b, SMOL_ENOMEM, "out of memory"); goto out; }
    aft[n] = after;
    for (size_t i = n; i-- > 0;) {
        int x = gb_seq2(b, js_tok(c, ","), kv[i]);
        aft[i] = gb_seq2(b, isreq[i] ? x : gb_rep(b, x, 0, 1), aft[i + 1]);
    }
    for (size_t i = n; i-- > 0;) {
        int x = gb_seq2(b, kv[i], aft[i + 1]);
        first = isreq[i] ? x : gb_alt2(b, x, first);
    }
    free(aft);
    r = gb_seq3(b, js_tok(c, "{"), first, js_tok(c, "}"));
out:
    if (esc) for (size_t i = 0; i < np + nr + 1; i++) free(esc[i]);
    free(esc); free(names); free(schemas); free(kv); free(isreq);
    return r;
}

/* ---- arrays ------------------------------------------------------------------------- */

static int array_expr(struct js *c, json_t *s, const char *at)
{
    struct gb *b = c->b;
    json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems"), *uq = json_object_get(s, "uniqueItems");
    if (uq && json_is_true(uq)) return js_fail(c, SMOL_EUNSUPPORTED, "unsupported keyword '%s'", "uniqueItems", at);
    if (pre && !json_is_array(pre)) return js_fail(c, SMOL_EINVAL, "'%s' must be an array", "prefixItems", at);
    long long min = 0, max = GB_INF;
    if ((mn && !js_count_of(mn, &min)) || (mx && !js_count_of(mx, &max)))
        return js_fail(c, SMOL_EINVAL, "'%s' must be an integer", "minItems/maxItems", at);
    if (min < 0 || (mx && max < 0)) return js_fail(c, SMOL_EINVAL, "%s: negative", "minItems/maxItems", at);
    if (min > GB_MAX_REPEAT || max > GB_MAX_REPEAT) return js_fail(c, SMOL_ETOOLARGE, "%s over 10000", "minItems/maxItems", at);
    size_t k = pre ? json_array_size(pre) : 0;
    if (mx && (long long)k > max) k = (size_t)max;
    char sub[SMOL_ERRLEN];
    snprintf(sub, sizeof sub, "%s/items", at);
    int item = items ? (json_is_false(items) ? -2 : sch(c, items, sub)) : js_value_rule(c);
    /* elements k..: item with commas, count limits shifted by k */
    int tail;
    long long tmin = min > (long long)k ? min - (long long)k : 0;
    long long tmax = max == GB_INF ? GB_INF : max - (long long)k;
    if (item == -2 || tmax == 0) tail = tmin > 0 ? gb_byte_range(b, 1, 0) : gb_empty(b);
    else if (k == 0) {
        int rest = gb_rep(b, gb_seq2(b, js_tok(c, ","), item), tmin > 0 ? (int)tmin - 1 : 0,
                          tmax == GB_INF ? GB_INF : (int)tmax - 1);
        tail = gb_seq2(b, item, rest);
        if (tmin == 0) tail = gb_rep(b, tail, 0, 1);
    } else {
        tail = gb_rep(b, gb_seq2(b, js_tok(c, ","), item), (int)tmin, tmax == GB_INF ? GB_INF : (int)tmax);
    }
    for (size_t i = k; i-- > 0;) {
        snprintf(sub, sizeof sub, "%s/prefixItems/%zu", at, i);
        int e = sch(c, json_array_get(pre, i), sub);
        int x = gb_seq2(b, i ? gb_seq2(b, js_tok(c, ","), e) : e, tail);
        tail = (long long)i >= min ? gb_rep(b, x, 0, 1) : x;
    }
    return gb_seq3(b, js_tok(c, "["), tail, js_tok(c, "]"));
}

/* ---- references and allOf ----------------------------------------------------------- */

static json_t *resolve(struct js *c, const char *ref, const char *at)
{
    if (ref[0] != '#') { js_fail(c, SMOL_EUNSUPPORTED, "$ref '%s': only local references (#...) are supported", ref, at); return NULL; }
    json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') { js_fail(c, SMOL_EUNSUPPORTED, "$ref '%s': anchors are not supported", ref, at); return NULL; }
    while (*p == '/') {
        p++;
        char tok_[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok_) {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                char hx[3] = {p[0], p[1], 0};
                ch = (char)strtol(hx, NULL, 16);
                p += 2;
            }
            tok_[n++] = ch;
        }
        tok_[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok_);
        else if (json_is_array(cur)) cur = json_array_get(cur, (size_t)strtoul(tok_, NULL, 10));
        else cur = NULL;
        if (!cur) { js_fail(c, SMOL_EINVAL, "$ref '%s' does not resolve", ref, at); return NULL; }
    }
    return cur;
}

static int ref_expr(struct js *c, const char *ref, const char *at)
{
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_ptr[i], ref)) return gb_ref(c->b, c->ref_rule[i]);
    json_t *t = resolve(c, ref, at);
    if (!t) return -1;
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
        char **p = realloc(c->ref_ptr, cap * sizeof *p);
        if (p) c->ref_ptr = p;
        int *r = realloc(c->ref_rule, cap * sizeof *r);
        if (r) c->ref_rule = r;
        if (!p || !r) { gb_fail(c->b, SMOL_ENOMEM, "out of memory"); return -1; }
        c->cap_refs = cap;
    }
    int rule = gb_rule_new(c->b, ref, strlen(ref));
    char *dup = strdup(ref);
    if (rule < 0 || !dup) { free(dup); gb_fail(c->b, SMOL_ENOMEM, "out of memory"); return -1; }
    c->ref_ptr[c->n_refs] = dup;
    c->ref_rule[c->n_refs++] = rule;
    gb_rule_set(c->b, rule, sch(c, t, ref + 1));   /* after registering: recursion finds the rule */
    return gb_ref(c->b, rule);
}

static int is_annotation(const char *k)
{
    static const char *ann[] = {"title", "description", "$schema", "$id", "$anchor", "examples", "default", "$comment",
                                "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
                                "$defs", "definitions", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return 1;
    return 0;
}

static json_t *types_of(json_t *t)
{
    if (!t) return NULL;
    if (json_is_string(t)) { json_t *a = json_array(); json_array_append(a, t); return a; }
    return json_deep_copy(t);
}

/* a := a AND b, as far as one schema object can say it. */
static int merge_into(struct js *c, json_t *a, json_t *b, const char *at, int depth)
{
    if (depth > 32) return js_fail(c, SMOL_ETOOLARGE, "%s nested too deeply", "allOf/$ref", at);
    while (json_is_object(b) && json_object_get(b, "$ref") && json_object_size(b) == 1) {
        b = resolve(c, json_string_value(json_object_get(b, "$ref")), at);
        if (!b || ++depth > 32) return b ? js_fail(c, SMOL_ETOOLARGE, "%s nested too deeply", "$ref", at) : -1;
    }
    if (json_is_true(b)) return 0;
    if (json_is_false(b)) { json_object_set_new(a, "$smol_false", json_true()); return 0; }
    if (!json_is_object(b)) return js_fail(c, SMOL_EINVAL, "a schema must be an object or a boolean (%s)", "allOf", at);
    json_t *sub = json_object_get(b, "allOf");
    if (sub) {
        size_t i;
        json_t *x;
        json_array_foreach(sub, i, x) if (merge_into(c, a, x, at, depth + 1)) return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) {
        json_t *old = json_object_get(a, k);
        if (!strcmp(k, "allOf")) continue;
        if (!strcmp(k, "properties") && (json_object_get(a, "additionalProperties") || json_object_get(b, "additionalProperties")) &&
            (old || json_object_get(a, "additionalProperties")))
            return js_fail(c, SMOL_EUNSUPPORTED, "allOf merging 'properties' with '%s'", "additionalProperties", at);
        if (!strcmp(k, "additionalProperties") && json_object_get(a, "properties"))
            return js_fail(c, SMOL_EUNSUPPORTED, "allOf merging 'properties' with '%s'", "additionalProperties", at);
        if (!old) { json_object_set(a, k, v); continue; }
        if (json_equal(old, v) || is_annotation(k)) continue;
        if (!strcmp(k, "properties") && (json_object_get(a, "additionalProperties") || json_object_get(b, "additionalProperties")))
            return js_fail(c, SMOL_EUNSUPPORTED, "allOf merging 'properties' with '%s'", "additionalProperties", at);
        if (!strcmp(k, "properties") && json_is_object(old) && json_is_object(v)) {
            json_t *np = json_deep_copy(old);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *o = json_object_get(np, pk);
                if (o) json_object_set_new(np, pk, json_pack("{s:[O,O]}", "allOf", o, pv));
                else json_object_set(np, pk, pv);
            }
            json_object_set_new(a, k, np);
        } else if (!strcmp(k, "required") && json_is_array(old) && json_is_array(v)) {
            json_t *u = json_deep_copy(old);
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) json_array_append(u, x);
            json_object_set_new(a, k, u);
        } else if (!strcmp(k, "type")) {
            json_t *ta = types_of(old), *tb = types_of(v), *r = json_array();
            size_t i, j;
            json_t *x, *y;
            json_array_foreach(ta, i, x) json_array_foreach(tb, j, y) {
                const char *p = json_string_value(x), *q = json_string_value(y);
                if (!p || !q) continue;
                if (!strcmp(p, q)) json_array_append(r, x);
                else if ((!strcmp(p, "integer") && !strcmp(q, "number")) || (!strcmp(q, "integer") && !strcmp(p, "number")))
                    json_array_append_new(r, json_string("integer"));
            }
            json_decref(ta);
            json_decref(tb);
            json_object_set_new(a, k, r);
        } else if (json_is_number(old) && json_is_number(v) &&
                   (!strncmp(k, "min", 3) || !strncmp(k, "exclusiveMin", 12))) {
            if (json_number_value(v) > json_number_value(old)) json_object_set(a, k, v);
        } else if (json_is_number(old) && json_is_number(v) &&
                   (!strncmp(k, "max", 3) || !strncmp(k, "exclusiveMax", 12))) {
            if (json_number_value(v) < json_number_value(old)) json_object_set(a, k, v);
        } else if (!strcmp(k, "additionalProperties") && (json_is_false(old) || json_is_false(v))) {
            json_object_set_new(a, k, json_false());
        } else {
            return js_fail(c, SMOL_EUNSUPPORTED, "allOf with conflicting '%s'", k, at);
        }
    }
    return 0;
}

/* ---- schemas ------------------------------------------------------------------------ */

static const char *const known[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "uniqueItems", "anyOf", "oneOf", "allOf", "$ref", "format", "pattern",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_NUM = 64, T_ALL = 127 };

static int type_bit(const char *t)
{
    static const char *nm[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, nm[i])) return 1 << i;
    return 0;
}

static int value_type(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJ;
    case JSON_ARRAY: return T_ARR;
    case JSON_STRING: return T_STR;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: return floor(json_real_value(v)) == json_real_value(v) ? T_INT | T_NUM : T_NUM;
    }
    return 0;
}

/* The types a branch can take (through one $ref). */
static int branch_types(struct js *c, json_t *s, const char *at)
{
    if (json_is_object(s) && json_is_string(json_object_get(s, "$ref")) && json_object_size(s) == 1)
        s = resolve(c, json_string_value(json_object_get(s, "$ref")), at);
    if (json_is_false(s)) return 0;
    if (!json_is_object(s)) return T_ALL;
    json_t *t = json_object_get(s, "type"), *cn = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cn) return value_type(cn);
    if (json_is_array(en)) {
        int m = 0;
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) m |= value_type(x);
        return m;
    }
    if (json_is_string(t)) { int m = type_bit(json_string_value(t)); return m == T_NUM ? T_NUM | T_INT : m; }
    if (json_is_array(t)) {
        int m = 0;
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) if (json_is_string(x)) m |= type_bit(json_string_value(x));
        return m & T_NUM ? m | T_INT : m;
    }
    return T_ALL;
}

/* oneOf is a grammar only when at most one branch can match: branches of
 * disjoint types, or objects told apart by a required property whose const
 * differs (a discriminator). */
static int one_disjoint(struct js *c, json_t *arr, const char *at)
{
    size_t n = json_array_size(arr), i, j;
    int ok = 1;
    for (i = 0; i < n && ok; i++)
        for (j = i + 1; j < n && ok; j++) {
            int ti = branch_types(c, json_array_get(arr, i), at), tj = branch_types(c, json_array_get(arr, j), at);
            if (ti & T_INT && tj & T_NUM) tj |= T_INT;
            if (tj & T_INT && ti & T_NUM) ti |= T_INT;
            ok = !(ti & tj);
        }
    if (ok) return 1;
    json_t *b0 = json_array_get(arr, 0), *req = json_is_object(b0) ? json_object_get(b0, "required") : NULL;
    json_t *key;
    json_array_foreach(req, i, key) {
        const char *k = json_string_value(key);
        if (!k) continue;
        int disc = 1;
        for (j = 0; j < n && disc; j++) {
            json_t *bj = json_array_get(arr, j);
            json_t *p = json_is_object(bj) ? json_object_get(json_object_get(bj, "properties"), k) : NULL;
            json_t *cj = p ? json_object_get(p, "const") : NULL;
            disc = cj != NULL;
            for (size_t q = 0; q < j && disc; q++) {
                json_t *pq = json_object_get(json_object_get(json_array_get(arr, q), "properties"), k);
                disc = !json_equal(json_object_get(pq, "const"), cj);
            }
        }
        if (disc) return 1;
    }
    return 0;
}

static int sch_inner(struct js *c, json_t *s, const char *at)
{
    struct gb *b = c->b;
    if (json_is_true(s)) return js_value_rule(c);
    if (json_is_false(s) || (json_is_object(s) && json_object_get(s, "$smol_false")))
        return gb_byte_range(b, 1, 0);   /* matches nothing */
    if (!json_is_object(s)) return js_fail(c, SMOL_EINVAL, "a schema must be an object or a boolean, not %s", "this", at);
    const char *k;
    json_t *v;
    int n_constraints = 0;
    json_object_foreach(s, k, v) {
        if (is_annotation(k)) continue;
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k, known[i]);
        if (!ok) return js_fail(c, SMOL_EUNSUPPORTED, "unsupported keyword '%s'", k, at);
        n_constraints++;
    }
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (ref && !json_is_string(ref)) return js_fail(c, SMOL_EINVAL, "'%s' must be a string", "$ref", at);
    if (ref && n_constraints == 1) return ref_expr(c, json_string_value(ref), at);
    if (ref || all) {   /* merge into one schema (a $ref beside other keywords is an allOf) */
        json_t *m = json_object(), *rest = json_copy(s);
        json_object_del(rest, "allOf");
        json_object_del(rest, "$ref");
        int r = -1;
        json_t *rs = ref ? json_pack("{s:O}", "$ref", ref) : NULL, *as = all ? json_pack("{s:O}", "allOf", all) : NULL;
        if (!merge_into(c, m, rest, at, c->depth) && !(ref && merge_into(c, m, rs, at, c->depth)) &&
            !(all && merge_into(c, m, as, at, c->depth)))
            r = sch(c, m, at);
        json_decref(rs);
        json_decref(as);
        json_decref(m);
        json_decref(rest);
        return r;
    }
    if (any && one) return js_fail(c, SMOL_EUNSUPPORTED, "%s together", "anyOf and oneOf", at);
    if (one && json_is_array(one) && !one_disjoint(c, one, at))
        return js_fail(c, SMOL_EUNSUPPORTED, "%s: branches that may overlap (exclusivity is not expressible; use anyOf)", "oneOf", at);
    if (any || one) {
        json_t *arr = any ? any : one;
        if (!json_is_array(arr) || !json_array_size(arr)) return js_fail(c, SMOL_EINVAL, "'%s' must be a non-empty array", any ? "anyOf" : "oneOf", at);
        json_t *rest = json_copy(s);
        json_object_del(rest, any ? "anyOf" : "oneOf");
        int sib = json_object_size(rest) > 0;
        size_t n = json_array_size(arr), i;
        int *xs = malloc(n * sizeof *xs);
        json_t *x;
        if (!xs) { json_decref(rest); gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
        json_array_foreach(arr, i, x) {
            char sub[SMOL_ERRLEN];
            snprintf(sub, sizeof sub, "%s/%s/%zu", at, any ? "anyOf" : "oneOf", i);
            if (sib) {
                json_t *m = json_object();
                xs[i] = (merge_into(c, m, rest, sub, c->depth) || merge_into(c, m, x, sub, c->depth)) ? -1 : sch(c, m, sub);
                json_decref(m);
            } else {
                xs[i] = sch(c, x, sub);
            }
        }
        json_decref(rest);
        int r = gb_alt(b, xs, n);
        free(xs);
        return r;
    }
    /* the types allowed */
    int types = T_ALL;
    json_t *t = json_object_get(s, "type");
    if (t) {
        types = 0;
        if (json_is_string(t)) types = type_bit(json_string_value(t));
        else if (json_is_array(t)) {
            size_t i;
            json_t *x;
            json_array_foreach(t, i, x) types |= json_is_string(x) ? type_bit(json_string_value(x)) : 0;
        }
        if (!types) return js_fail(c, SMOL_EINVAL, "bad '%s'", "type", at);
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        if (en && !json_is_array(en)) return js_fail(c, SMOL_EINVAL, "'%s' must be an array", "enum", at);
        json_t *vals = en ? json_copy(en) : json_array();
        if (cn) {   /* const and enum: the const if the enum has it */
            int in = !en;
            size_t i;
            json_t *x;
            if (en) json_array_foreach(en, i, x) in |= json_equal(x, cn);
            json_array_clear(vals);
            if (in) json_array_append(vals, cn);
        }
        size_t n = json_array_size(vals), i, k = 0;
        int *xs = malloc((n + 1) * sizeof *xs);
        json_t *x;
        if (!xs) { json_decref(vals); gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
        json_array_foreach(vals, i, x) if (value_type(x) & types) xs[k++] = js_literal(c, x, at);
        json_decref(vals);
        int r = k ? gb_alt(b, xs, k) : gb_byte_range(b, 1, 0);
        free(xs);
        return r;
    }
    if (types == T_ALL && n_constraints == 0) return js_value_rule(c);
    int xs[7], nk = 0;
    if (types & T_NULL) xs[nk++] = gb_str(b, "null");
    if (types & T_BOOL) xs[nk++] = gb_alt2(b, gb_str(b, "true"), gb_str(b, "false"));
    if (types & T_OBJ) xs[nk++] = object_expr(c, s, at);
    if (types & T_ARR) xs[nk++] = array_expr(c, s, at);
    if (types & T_STR) xs[nk++] = js_string_expr(c, s, at);
    if (types & T_NUM) xs[nk++] = js_number_bounded(c, s, at);
    else if (types & T_INT) xs[nk++] = js_integer_expr(c, s, at);
    return gb_alt(b, xs, (size_t)nk);
}

/* A subschema; a large one becomes a rule of its own, so the places that
 * repeat it (optional-property chains, {m,n}) share one copy. */
static int sch(struct js *c, json_t *s, const char *at)
{
    int max_depth = c->o->max_depth ? c->o->max_depth : 64;
    if (gb_failed(c->b)) return -1;
    if (++c->depth > max_depth) {
        c->depth--;
        char d[16];
        snprintf(d, sizeof d, "%d", max_depth);
        return js_fail(c, SMOL_ETOOLARGE, "schema nested deeper than %s", d, at);
    }
    int x = sch_inner(c, s, at);
    c->depth--;
    if (x >= 0 && gb_size(c->b, x) > 400) {
        int r = gb_rule_new(c->b, at, strlen(at));
        gb_rule_set(c->b, r, x);
        x = gb_ref(c->b, r);
    }
    return x;
}

static enum smol_err finish(struct js *c, int root_expr, struct smol_grammar **out, char *err)
{
    int root = gb_rule_new(c->b, "root", 4);
    gb_rule_set(c->b, root, root_expr);
    enum smol_err rc = gb_finish(c->b, root, out, err);
    gb_free(&c->b);
    for (size_t i = 0; i < c->n_refs; i++) free(c->ref_ptr[i]);
    free(c->ref_ptr);
    free(c->ref_rule);
    return rc;
}

static const struct smol_grammar_opts defaults;

/* ---- one schema inside a larger grammar (json_schema_impl.h) ---------------------- */

int js_schema_expr(struct gb *b, json_t *schema, const struct smol_grammar_opts *opts, const char *at)
{
    if (!opts) opts = &defaults;
    struct js c = {.b = b, .root = schema, .o = opts, .flex = opts->flexible_ws, .r_value = -1, .r_string = -1};
    int x = sch(&c, schema, at);
    for (size_t i = 0; i < c.n_refs; i++) free(c.ref_ptr[i]);
    free(c.ref_ptr);
    free(c.ref_rule);
    return x;
}

enum smol_err smol_grammar_compile_json_schema(const char *json, size_t len, const struct smol_grammar_opts *opts,
                                               struct smol_grammar **out, char *err)
{
    *out = NULL;
    if (!opts) opts = &defaults;
    size_t max_in = opts->max_input ? opts->max_input : SMOL_RULE_MAX_CONSTRAINT_BYTES;
    if (len > max_in) return smol_errf(err, SMOL_ETOOLARGE, "JSON schema of %zu bytes is over the %zu-byte limit", len, max_in);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) return smol_errf(err, SMOL_EFORMAT, "JSON schema: %s at line %d column %d", je.text, je.line, je.column);
    struct js c = {.root = root, .o = opts, .flex = opts->flexible_ws, .r_value = -1, .r_string = -1};
    enum smol_err rc = gb_new(&c.b, err);
    if (rc) { json_decref(root); return rc; }
    int x = sch(&c, root, "");
    rc = finish(&c, x, out, err);
    json_decref(root);
    return rc;
}

enum smol_err smol_grammar_compile_json_any(int object_only, const struct smol_grammar_opts *opts,
                                            struct smol_grammar **out, char *err)
{
    *out = NULL;
    if (!opts) opts = &defaults;
    struct js c = {.o = opts, .flex = opts->flexible_ws, .r_value = -1, .r_string = -1};
    enum smol_err rc = gb_new(&c.b, err);
    if (rc) return rc;
    int v = js_value_rule(&c);
    int x = object_only ? gb_ref(c.b, c.r_object) : v;
    return finish(&c, x, out, err);
}
