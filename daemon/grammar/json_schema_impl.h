/*
 * json_schema_impl.h - the JSON Schema front end (json_schema.c) as a part
 * of a larger grammar, for the grammars that embed schemas (tool calls,
 * tool_grammar.c).  Internal to daemon/text/.
 */
#ifndef SMOL_JSON_SCHEMA_IMPL_H
#define SMOL_JSON_SCHEMA_IMPL_H

#include <jansson.h>

struct gb;
struct smol_grammar_opts;

/* The expression of the values valid against schema, built in b; schema is
 * also the document its "#..." references resolve in.  at names the place
 * in messages (e.g. "/tools/0/function/parameters").  opts may be NULL.
 * Returns -1 with b failed (the keyword and place named) on error. */
int js_schema_expr(struct gb *b, json_t *schema, const struct smol_grammar_opts *opts, const char *at);

#endif
