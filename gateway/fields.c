/*
 * fields.c - the request-field rules every protocol front end shares
 * (fields.h): tools and tool_choice, parallel_tool_calls, service_tier,
 * reasoning effort, model, stream, token limits, temperature, top_p,
 * structured output, thinking mode.  Pure functions of the JSON and the
 * GenerateRequest: no I/O, no state.
 */
#include "gateway/fields.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

json_t *gw_get(json_t *o, const char *key)
{
    json_t *x = json_object_get(o, key);
    return x && !json_is_null(x) ? x : NULL;
}

/* ---- shared field rules ---------------------------------------------------------- */

int gw_tool_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

int gw_field_tools(Smollm3__GenerateRequest *g, Smollm3__ChatInput *chat, struct gw_owned *o, json_t *tools,
                  const char *forced, int none)
{
    if (forced && !(g->tool_choice = gw_own(o, strdup(forced)))) return -1;
    if (json_is_array(tools) && json_array_size(tools) && !none &&
        !(chat->tools_json = gw_own(o, json_dumps(tools, JSON_COMPACT))))
        return -1;
    return 0;
}

int gw_field_parallel_tool_calls(json_t *root, struct gw_error *e)
{
    json_t *ptc = gw_get(root, "parallel_tool_calls");
    if (!ptc) return 0;
    if (!json_is_boolean(ptc))
        return gw_error_set(e, SMOL_EINVAL, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (json_is_false(ptc))
        return gw_error_set(e, SMOL_EUNSUPPORTED, "parallel_tool_calls",
                            "'parallel_tool_calls': false is not supported (the model may call several tools in "
                            "one answer)");
    return 0;
}

int gw_field_forced_needs_tools(const char *forced, size_t n_tools, struct gw_error *e)
{
    if (forced && !n_tools)
        return gw_error_set(e, SMOL_EINVAL, "tool_choice", "'tool_choice' \"%.64s\" needs a non-empty 'tools' list",
                            forced);
    return 0;
}

int gw_field_service_tier(json_t *root, int anthropic, Smollm3__ServiceTier *tier, struct gw_error *e)
{
    static const struct { const char *word; int tier; } openai[] = {
        { "auto", SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT },
        { "default", SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT },
        { "flex", SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX },
        { "priority", SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY },
    }, claude[] = {
        { "auto", GW_SERVICE_TIER_AUTO_PRIORITY },
        { "standard_only", SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT },
    };
    *tier = SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT;
    json_t *x = gw_get(root, "service_tier");
    if (!x || json_is_null(x)) return 0;
    const char *w = json_string_value(x);
    const size_t n = anthropic ? sizeof claude / sizeof *claude : sizeof openai / sizeof *openai;
    for (size_t i = 0; w && i < n; i++)
        if (!strcmp(w, anthropic ? claude[i].word : openai[i].word)) {
            *tier = (Smollm3__ServiceTier)(anthropic ? claude[i].tier : openai[i].tier);
            return 0;
        }
    return anthropic ? gw_error_set(e, SMOL_EINVAL, "service_tier", "'service_tier' must be \"auto\" or \"standard_only\"")
                     : gw_error_set(e, SMOL_EINVAL, "service_tier",
                                    "'service_tier' must be \"auto\", \"default\", \"flex\" or \"priority\"");
}

const char *gw_field_service_tier_name(int tier, int anthropic)
{
    if (tier == SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY) return "priority";
    if (anthropic) return "standard";
    return tier == SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX ? "flex" : "default";
}

int gw_field_effort(json_t *v, const char *key, const char *param, int with_max, int *on, unsigned *budget,
                   struct gw_error *e)
{
    static const char *const levels[] = { "none", "minimal", "low", "medium", "high", "xhigh", "max" };
    const int n = with_max ? 7 : 6;
    const char *s = json_string_value(v);
    int lvl = -1;
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, levels[i])) lvl = i;
    if (lvl < 0)
        return gw_error_set(e, SMOL_EINVAL, param, "'%s' must be one of none, minimal, low, medium, high, xhigh%s",
                            key, with_max ? ", max" : "");
    *on = lvl >= 2;
    *budget = gw_effort_budget(s);
    return 0;
}

int gw_field_model(json_t *root, struct gw_error *e)
{
    json_t *x = gw_get(root, "model");
    if (x && !json_is_string(x)) return gw_error_set(e, SMOL_EINVAL, "model", "'model' must be a string");
    return 0;
}

int gw_field_stream_flag(json_t *root, int *on, struct gw_error *e)
{
    json_t *x = gw_get(root, "stream");
    if (x && !json_is_boolean(x)) return gw_error_set(e, SMOL_EINVAL, "stream", "'stream' must be a boolean");
    *on = json_is_true(x);
    return 0;
}

int gw_field_max_tokens(json_t *x, const char *key, Smollm3__GenerateRequest *g, struct gw_error *e)
{
    if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 1000000)
        return gw_error_set(e, SMOL_EINVAL, key, "'%s' must be an integer in [1, 1000000]", key);
    g->max_tokens = (uint32_t)json_integer_value(x);
    return 0;
}

int gw_field_temperature(json_t *x, double hi, Smollm3__SamplingParams *sp, struct gw_error *e)
{
    if (!json_is_number(x) || !(json_number_value(x) >= 0 && json_number_value(x) <= hi))
        return gw_error_set(e, SMOL_EINVAL, "temperature", "'temperature' must be a number in [0, %g]", hi);
    sp->temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    sp->temperature = (float)json_number_value(x);
    return 0;
}

int gw_field_top_p(json_t *x, Smollm3__SamplingParams *sp, struct gw_error *e)
{
    if (!json_is_number(x) || !(json_number_value(x) > 0 && json_number_value(x) <= 1))
        return gw_error_set(e, SMOL_EINVAL, "top_p", "'top_p' must be a number in (0, 1]");
    sp->top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
    sp->top_p = (float)json_number_value(x);
    return 0;
}

void gw_field_json_object(Smollm3__GenerateRequest *g)
{
    g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_OBJECT;
    g->json_object = 1;
}

int gw_field_json_schema(Smollm3__GenerateRequest *g, struct gw_owned *o, json_t *schema)
{
    char *s = gw_own(o, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!s) return -1;
    g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
    g->json_schema = s;
    return 0;
}

int gw_field_thinking_supported(int on, int model_thinks, const char *key, const char *param, struct gw_error *e)
{
    if (!on || model_thinks) return 0;
    return gw_error_set(e, SMOL_EUNSUPPORTED, param,
                        "'%s' asks for thinking, and the model served has no thinking mode: leave it out or turn "
                        "thinking off; thinking needs a SmolLM3 model (`make model`, or MODEL=path)", key);
}

void gw_field_thinking(Smollm3__GenerateRequest *g, int on, unsigned budget)
{
    g->enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
    g->enable_thinking = on;
    if (budget) g->thinking_budget = budget;
}
