/*
 * structured.c - the OpenAI structured-output fields of a chat request, as
 * the daemon's GenerateRequest constraint (proto fields 30-33):
 *
 *   response_format {"type": "text"}                        none
 *   response_format {"type": "json_object"}                 json_object
 *   response_format {"type": "json_schema", "json_schema":
 *       {"name": ..., "schema": {...}, "strict": ...}}      json_schema (the schema, compact)
 *   grammar "<GBNF>"  (llama.cpp's extension)               gbnf
 *
 * Only the shape is checked here; the daemon compiles the schema or
 * grammar and refuses what it cannot express with INVALID_ARGUMENT naming
 * the keyword, which the gateway answers with a 400.  The text's size is
 * the rules' (daemon/model/rules.h), checked here too.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/structured.h"
#include "gateway/fields.h"

/* A refusal naming its field (response_format / grammar): SMOL_EINVAL. */
#define FAIL(key, ...) return gw_error_set(e, SMOL_EINVAL, key, __VA_ARGS__)

int gw_structured_parse(Smollm3__GenerateRequest *g, json_t *root, char **owned, struct gw_error *e)
{
    char m[SMOL_ERRLEN];
    *owned = NULL;
    json_t *rf = json_object_get(root, "response_format");
    json_t *gr = json_object_get(root, "grammar");
    int have_rf = 0;
    if (rf && !json_is_null(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !t)
            FAIL("response_format", "'response_format' must be an object with a 'type'");
        if (!strcmp(t, "json_object")) {
            gw_field_json_object(g);
            have_rf = 1;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *sch = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!json_is_object(js) || !json_is_string(json_object_get(js, "name")))
                FAIL("response_format", "'response_format.json_schema' must be an object with a 'name'");
            if (!json_is_object(sch) && !json_is_boolean(sch))
                FAIL("response_format", "'response_format.json_schema.schema' must be a JSON Schema object");
            json_t *strict = json_object_get(js, "strict");
            if (strict && !json_is_boolean(strict) && !json_is_null(strict))
                FAIL("response_format", "'response_format.json_schema.strict' must be a boolean");
            if (!(*owned = json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY)))
                return gw_error_set(e, SMOL_ENOMEM, "response_format", "out of memory");
            if (smol_rule_constraint_size(strlen(*owned), "the schema", m))
                FAIL("response_format", "%s", m);
            g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
            g->json_schema = *owned;
            have_rf = 1;
        } else if (strcmp(t, "text")) {
            FAIL("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", "
                 "not \"%.20s\"", t);
        }
    }
    if (gr && !json_is_null(gr)) {
        const char *s = json_string_value(gr);
        if (!s || !*s) FAIL("grammar", "'grammar' must be a non-empty GBNF string");
        if (have_rf) FAIL("grammar", "'grammar' and a 'response_format' other than text cannot be combined");
        if (smol_rule_constraint_size(strlen(s), "the grammar", m)) FAIL("grammar", "%s", m);
        g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_GBNF;
        g->gbnf = (char *)s;      /* points into the parsed body, which outlives the packing */
    }
    return 0;
}
