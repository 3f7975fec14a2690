/*
 * json_values.h - the JSON Schema front end's shared state and its value
 * builders (json_values.c), for json_schema.c, which walks a schema's
 * keywords.  Internal to daemon/text/.
 *
 * Every builder returns an expression id of the builder b (grammar_build.h),
 * or -1 with b failed, the keyword and the place (a JSON pointer, "at")
 * named in the message.
 */
#ifndef SMOL_JSON_VALUES_H
#define SMOL_JSON_VALUES_H

#include <jansson.h>
#include <stddef.h>

#include "daemon/model/error.h"

struct gb;
struct smol_grammar_opts;

struct js {
    struct gb *b;
    json_t *root;
    const struct smol_grammar_opts *o;
    int flex;
    size_t n_enum;
    int depth;
    /* rules made for $ref targets, by pointer */
    char **ref_ptr;
    int *ref_rule;
    size_t n_refs, cap_refs;
    int r_value, r_string, r_object, r_array;   /* the generic rules, -1 until used */
};

/* Fails the builder with fmt (one %s: a) at the place at; returns -1. */
int js_fail(struct js *c, enum smol_err code, const char *fmt, const char *a, const char *at);
/* A structural token (",", ":", "{" ...) with the whitespace policy around it. */
int js_tok(struct js *c, const char *t);
/* One character of a JSON string's body: unescaped or an escape. */
int js_str_char(struct js *c);
/* Any JSON value (the generic rule, made on first use). */
int js_value_rule(struct js *c);
/* Exactly the JSON value v (enum, const), serialized compactly. */
int js_literal(struct js *c, json_t *v, const char *at);
/* A count keyword (minLength, ...): an integer, or a real with no fraction; 0 if not. */
int js_count_of(json_t *v, long long *out);
/* A string valid against s's pattern, format or minLength/maxLength. */
int js_string_expr(struct js *c, json_t *s, const char *at);
/* An integer within s's minimum/maximum/exclusive bounds. */
int js_integer_expr(struct js *c, json_t *s, const char *at);
/* A number, with s's bounds where a grammar can hold them (a minimum of 0). */
int js_number_bounded(struct js *c, json_t *s, const char *at);

#endif
