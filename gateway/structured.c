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
 * the keyword, which the gateway answers with a 400.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

int gw_structured_parse(Smollm3__GenerateRequest *g, json_t *root, char **owned, char *why, size_t wn)
{
    *owned = NULL;
    json_t *rf = json_object_get(root, "response_format");
    json_t *gr = json_object_get(root, "grammar");
    int have_rf = 0;
    if (rf && !json_is_null(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !t) {
            snprintf(why, wn, "'response_format' must be an object with a 'type'");
            return -1;
        }
        if (!strcmp(t, "json_object")) {
            g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_OBJECT;
            g->json_object = 1;
            have_rf = 1;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *sch = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!json_is_object(js) || !json_is_string(json_object_get(js, "name"))) {
                snprintf(why, wn, "'response_format.json_schema' must be an object with a 'name'");
                return -1;
            }
            if (!json_is_object(sch) && !json_is_boolean(sch)) {
                snprintf(why, wn, "'response_format.json_schema.schema' must be a JSON Schema object");
                return -1;
            }
            json_t *strict = json_object_get(js, "strict");
            if (strict && !json_is_boolean(strict) && !json_is_null(strict)) {
                snprintf(why, wn, "'response_format.json_schema.strict' must be a boolean");
                return -1;
            }
            if (!(*owned = json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY))) {
                snprintf(why, wn, "out of memory");
                return -1;
            }
            g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
            g->json_schema = *owned;
            have_rf = 1;
        } else if (strcmp(t, "text")) {
            snprintf(why, wn, "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"%.20s\"",
                     t);
            return -1;
        }
    }
    if (gr && !json_is_null(gr)) {
        const char *s = json_string_value(gr);
        if (!s || !*s) {
            snprintf(why, wn, "'grammar' must be a non-empty GBNF string");
            return -1;
        }
        if (have_rf) {
            snprintf(why, wn, "'grammar' and a 'response_format' other than text cannot be combined");
            return -1;
        }
        g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_GBNF;
        g->gbnf = (char *)s;      /* points into the parsed body, which outlives the packing */
    }
    return 0;
}
