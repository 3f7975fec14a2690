/*
 * tool_grammar.c - the grammar of SmolLM3 tool calls, for tool_choice
 * "required" or a named function (see smol_grammar_compile_tool_calls).
 *
 * The chat template asks the model for
 *     <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>
 * and that is exactly what the grammar generates: the two tags are special
 * tokens, which the grammar vocabulary spells as the pseudo bytes
 * SMOL_GRAMMAR_TOOL_CALL / _END (grammar.h), so the token mask admits those
 * token ids at the places the tags go and nowhere else; the arguments are
 * the tool's `parameters` JSON Schema (json_schema.c, compact).  "required"
 * takes one or more calls of any of the tools (parallel calls: the chat
 * parser reports each block), a name exactly one call of that function.
 */
#include "daemon/grammar/grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "daemon/grammar/grammar_build.h"
#include "daemon/grammar/json_schema_impl.h"

/* One call's body for tool i: \n{"name": "NAME", "arguments": ARGS}\n */
static int call_body(struct gb *b, json_t *fn, size_t i, const char *name, const struct smol_grammar_opts *opts)
{
    json_t *params = json_object_get(fn, "parameters"), *own = NULL;
    if (!params || json_is_null(params)) params = own = json_pack("{s:s}", "type", "object");
    if (!params) { gb_fail(b, SMOL_ENOMEM, "out of memory"); return -1; }
    char at[64], head[128];
    snprintf(at, sizeof at, "/tools/%zu/function/parameters", i);
    int args = js_schema_expr(b, params, opts, at);
    json_decref(own);
    snprintf(head, sizeof head, "\n{\"name\": \"%s\", \"arguments\": ", name);
    return gb_seq3(b, gb_str(b, head), args, gb_str(b, "}\n"));
}

enum smol_err smol_grammar_compile_tool_calls(const char *tools_json, size_t len, const char *choice,
                                              const struct smol_grammar_opts *opts, struct smol_grammar **out,
                                              char *err)
{
    *out = NULL;
    size_t max_in = opts && opts->max_input ? opts->max_input : SMOL_RULE_MAX_CONSTRAINT_BYTES;
    if (len > max_in) return smol_errf(err, SMOL_ETOOLARGE, "tools of %zu bytes are over the %zu-byte limit", len, max_in);
    int required = !strcmp(choice, "required");
    if (!required && smol_rule_tool_name(choice, "tool_choice", err)) return SMOL_EINVAL;
    json_error_t je;
    json_t *tools = json_loadb(tools_json, len, 0, &je);
    if (!tools) return smol_errf(err, SMOL_EFORMAT, "tools: %s at line %d column %d", je.text, je.line, je.column);
    enum smol_err rc = SMOL_OK;
    struct gb *b = NULL;
    int alts[SMOL_RULE_MAX_TOOLS], n = 0;
    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        rc = smol_errf(err, SMOL_EINVAL, "tool_choice: \"%.64s\" needs a non-empty tools list", choice);
        goto out;
    }
    if ((rc = smol_rule_tools(json_array_size(tools), err))) goto out;
    if ((rc = gb_new(&b, err))) goto out;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        json_t *nm = json_object_get(fn, "name");
        if ((type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) || !json_is_object(fn) ||
            !json_is_string(nm) || !smol_tool_name_ok(json_string_value(nm))) {
            rc = smol_errf(err, SMOL_EINVAL, "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": "
                           "1-64 of [a-zA-Z0-9_-], \"parameters\": {...}}}", i);
            goto out;
        }
        const char *name = json_string_value(nm);
        if (!required && (strcmp(name, choice) || n > 0)) continue;
        alts[n++] = call_body(b, fn, i, name, opts);
    }
    if (n == 0) {
        rc = smol_errf(err, SMOL_EINVAL, "tool_choice: names function \"%.64s\", which is not among the tools", choice);
        goto out;
    }
    int call = gb_rule_new(b, "tool_call", 9);
    gb_rule_set(b, call, gb_seq3(b, gb_str(b, SMOL_GRAMMAR_TOOL_CALL), gb_alt(b, alts, (size_t)n),
                                 gb_str(b, SMOL_GRAMMAR_TOOL_CALL_END)));
    int body = gb_ref(b, call);
    if (required)   /* parallel calls: more blocks, a newline between allowed */
        body = gb_seq2(b, body, gb_rep(b, gb_seq2(b, gb_rep(b, gb_str(b, "\n"), 0, 1), gb_ref(b, call)), 0, GB_INF));
    int root = gb_rule_new(b, "root", 4);
    gb_rule_set(b, root, body);
    rc = gb_finish(b, root, out, err);
out:
    gb_free(&b);
    json_decref(tools);
    return rc;
}
