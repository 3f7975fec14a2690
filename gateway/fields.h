/*
 * fields.h - the request-field rules every protocol front end shares
 * (fields.c): each front end parses its own JSON shape into the same storage
 * (the GenerateRequest of a struct gw_params, chat messages, strings it owns
 * through a struct gw_owned) with these rules (tools / tool_choice ->
 * the request, parallel_tool_calls, thinking on/off and its budget from an
 * effort level, service_tier, ...).  Layer 1 of the gateway
 * (tests/check_layers.sh): pure functions, util.h and params.h beneath.
 */
#ifndef GW_FIELDS_H
#define GW_FIELDS_H

#include <stdio.h>
#include <jansson.h>
#include "daemon/client/client.h"
#include "gateway/error.h"
#include "gateway/util.h"

/* ---- storage ----------------------------------------------------------------- */

/* A present, non-null member of object o (else NULL). */
json_t *gw_get(json_t *o, const char *key);

/* ---- shared field rules ---------------------------------------------------------- */

/* A tool name the engine's tool-call grammar takes: 1-64 of [a-zA-Z0-9_-]. */
int gw_tool_name_ok(const char *s);

/* The tools the daemon gets and the forced call: tools (chat-shaped function
 * tools, an array; NULL or empty: none) rendered unless none, tool_choice
 * forced ("required" or a function name; NULL: the model chooses).  0, or -1
 * out of memory. */
int gw_field_tools(Smollm3__GenerateRequest *g, Smollm3__ChatInput *chat, struct gw_owned *o, json_t *tools,
                  const char *forced, int none);

/* parallel_tool_calls of root: absent, null or true; false is refused (the
 * model may call several tools in one answer).  0, or -1 with *e set. */
int gw_field_parallel_tool_calls(json_t *root, struct gw_error *e);

/* A forced tool_choice needs tools: 0, or -1 with *e set (param "tool_choice"). */
int gw_field_forced_needs_tools(const char *forced, size_t n_tools, struct gw_error *e);

/* service_tier of root into *tier (the scheduling class, as the daemon
 * has it): OpenAI's (anthropic 0) "auto" and "default" are DEFAULT, "flex"
 * FLEX, "priority" PRIORITY; Anthropic's "standard_only" is DEFAULT and
 * "auto" GW_SERVICE_TIER_AUTO_PRIORITY (priority where the key may have
 * it, else default: the core decides, gw_pack_generate).  Absent or null:
 * DEFAULT.  0, or -1 with *e set (param "service_tier"). */
#define GW_SERVICE_TIER_AUTO_PRIORITY 99
int gw_field_service_tier(json_t *root, int anthropic, Smollm3__ServiceTier *tier, struct gw_error *e);
/* The API's word for a scheduling class: OpenAI's "default" / "priority" /
 * "flex", Anthropic's "standard" / "priority" (flex is never asked there). */
const char *gw_field_service_tier_name(int tier, int anthropic);

/* An OpenAI reasoning effort (chat's reasoning_effort, Responses'
 * reasoning.effort) at key: *on (thinking mode) and *budget
 * (gw_effort_budget).  The levels none .. xhigh, and max when with_max. */
int gw_field_effort(json_t *v, const char *key, const char *param, int with_max, int *on, unsigned *budget,
                   struct gw_error *e);

/* The scalar fields Responses and Messages share (chat's come from
 * rules.h through params.c), each given its value x (present, non-null):
 * "model" a string; "stream" a boolean (into *on); a token limit at key, an
 * integer in [1, 1000000]; temperature a number in [0, hi]; top_p in (0, 1]. */
int gw_field_model(json_t *root, struct gw_error *e);
int gw_field_stream_flag(json_t *root, int *on, struct gw_error *e);
int gw_field_max_tokens(json_t *x, const char *key, Smollm3__GenerateRequest *g, struct gw_error *e);
int gw_field_temperature(json_t *x, double hi, Smollm3__SamplingParams *sp, struct gw_error *e);
int gw_field_top_p(json_t *x, Smollm3__SamplingParams *sp, struct gw_error *e);

/* Structured output (chat's response_format: structured.c; Responses'
 * text.format; Messages' output_config.format): any JSON object, or the
 * schema (an object or boolean; its compact dump, owned by o) as g's
 * constraint.  0, or -1 out of memory. */
void gw_field_json_object(Smollm3__GenerateRequest *g);
int gw_field_json_schema(Smollm3__GenerateRequest *g, struct gw_owned *o, json_t *schema);

/* A request turning thinking on (key: the field that did, param: its
 * error's param) for a model without a thinking mode (model_thinks 0: the
 * daemon's health reply, SmolLM2's) is refused: a 400 naming the field, as a
 * request with tools is, rather than an answer that silently did not think.
 * 0 when allowed (thinking off, or the model has the mode). */
int gw_field_thinking_supported(int on, int model_thinks, const char *key, const char *param, struct gw_error *e);

/* Thinking mode on / off, and its budget (0: the daemon's default). */
void gw_field_thinking(Smollm3__GenerateRequest *g, int on, unsigned budget);

/* In a front end's parser (locals p with p->prm, and why / wn): a refusal a field rule set in
 * p->prm.err, its message also into why, and the parser returns -1. */
#define GW_FIELD_REFUSE(call)                                                          \
    do {                                                                      \
        if (call) {                                                           \
            snprintf(why, wn, "%s", p->prm.err.msg);                          \
            return -1;                                                        \
        }                                                                     \
    } while (0)

#endif
