/*
 * core.h - the protocol-independent core of the gateway's generating
 * endpoints (Chat Completions and Completions: openai.c, completions.c;
 * Responses: responses.c; Anthropic Messages: anthropic.c).
 *
 * Each front end parses its own JSON shape into the same storage (the
 * GenerateRequest of a struct gw_params, chat messages, strings it owns
 * through a struct gw_owned), using the field rules every protocol shares
 * here (tools / tool_choice -> the request, parallel_tool_calls, thinking
 * on/off and its budget from an effort level, service_tier, ...).  Then one
 * path sends it: gw_core_admit (daemon up, in-flight limit), gw_core_stream
 * (a stream with its protocol, the packed request, its choices and a random
 * id), gw_req_send.  The daemon's events come back through one loop
 * (daemon.c) that calls the stream's protocol encoder, a struct gw_proto
 * (event, error, the non-streaming answer, per-protocol state to free).
 * The error mapping stays each protocol's (OpenAI's / Anthropic's error
 * objects), from the one struct gw_error of params.h.
 */
#ifndef GW_CORE_H
#define GW_CORE_H

#include "gateway/gateway.h"

/* ---- storage ----------------------------------------------------------------- */

/* struct gw_owned, gw_own, gw_owned_free: util.h */

/* A present, non-null member of object o (else NULL). */
json_t *gw_get(json_t *o, const char *key);

/* ---- shared field rules ---------------------------------------------------------- */

/* A tool name the engine's tool-call grammar takes: 1-64 of [a-zA-Z0-9_-]. */
int gw_tool_name_ok(const char *s);

/* The tools the daemon gets and the forced call: tools (chat-shaped function
 * tools, an array; NULL or empty: none) rendered unless none, tool_choice
 * forced ("required" or a function name; NULL: the model chooses).  0, or -1
 * out of memory. */
int gw_core_tools(Smollm3__GenerateRequest *g, Smollm3__ChatInput *chat, struct gw_owned *o, json_t *tools,
                  const char *forced, int none);

/* parallel_tool_calls of root: absent, null or true; false is refused (the
 * model may call several tools in one answer).  0, or -1 with *e set. */
int gw_core_parallel_tool_calls(json_t *root, struct gw_error *e);

/* A forced tool_choice needs tools: 0, or -1 with *e set (param "tool_choice"). */
int gw_core_forced_needs_tools(const char *forced, size_t n_tools, struct gw_error *e);

/* service_tier of root: absent, null, "auto" or other_tier (there is one). */
int gw_core_service_tier(json_t *root, const char *other_tier, struct gw_error *e);

/* An OpenAI reasoning effort (chat's reasoning_effort, Responses'
 * reasoning.effort) at key: *on (thinking mode) and *budget
 * (gw_effort_budget).  The levels none .. xhigh, and max when with_max. */
int gw_core_effort(json_t *v, const char *key, const char *param, int with_max, int *on, unsigned *budget,
                   struct gw_error *e);

/* The scalar fields Responses and Messages share (chat's come from
 * rules.h through params.c), each given its value x (present, non-null):
 * "model" a string; "stream" a boolean (into *on); a token limit at key, an
 * integer in [1, 1000000]; temperature a number in [0, hi]; top_p in (0, 1]. */
int gw_core_model(json_t *root, struct gw_error *e);
int gw_core_stream_flag(json_t *root, int *on, struct gw_error *e);
int gw_core_max_tokens(json_t *x, const char *key, Smollm3__GenerateRequest *g, struct gw_error *e);
int gw_core_temperature(json_t *x, double hi, Smollm3__SamplingParams *sp, struct gw_error *e);
int gw_core_top_p(json_t *x, Smollm3__SamplingParams *sp, struct gw_error *e);

/* Structured output (chat's response_format: structured.c; Responses'
 * text.format; Messages' output_config.format): any JSON object, or the
 * schema (an object or boolean; its compact dump, owned by o) as g's
 * constraint.  0, or -1 out of memory. */
void gw_core_json_object(Smollm3__GenerateRequest *g);
int gw_core_json_schema(Smollm3__GenerateRequest *g, struct gw_owned *o, json_t *schema);

/* Thinking mode on / off, and its budget (0: the daemon's default). */
void gw_core_thinking(Smollm3__GenerateRequest *g, int on, unsigned budget);

/* ---- one path to the daemon ------------------------------------------------------- */

/* The encoder of one protocol: what the daemon's events become. */
struct gw_proto {
    const char *name;
    void (*event)(struct gw_stream *s, const Smollm3__Event *ev);
    /* an error after the request was accepted (SSE: an error event; else kept in s->err) */
    void (*error)(struct gw_stream *s, const struct gw_error *e);
    /* the non-streaming answer, once the daemon is done (NULL: SSE only) */
    enum MHD_Result (*finish)(struct gw_req *r, struct gw_stream *s);
    /* frees the protocol's per-stream state (NULL: none) */
    void (*free)(struct gw_stream *s);
};
extern const struct gw_proto gw_proto_openai, gw_proto_responses, gw_proto_anthropic, gw_proto_ui;

/* A body refused by the Responses / Messages parsers: 400 with code
 * "invalid_json" (bad_json) or "invalid_value" naming param, in the
 * endpoint's error shape (http.c). */
enum MHD_Result gw_core_refuse(struct gw_req *r, int bad_json, const char *param, const char *why);

/* The daemon can take a request now: 1; else 0 with the 503 / 429 queued in *ret. */
int gw_core_admit(struct gw_req *r, enum MHD_Result *ret);

/* A new stream of proto and kind carrying g (packed now: g's storage may go
 * after), n_choices choices and the id prefix + idlen random characters
 * (noun names it in the refusal when the kernel has no randomness).  NULL
 * with the error (500 / 503) queued in *ret. */
struct gw_stream *gw_core_stream(struct gw_req *r, const struct gw_proto *proto, enum gw_kind kind,
                                 Smollm3__GenerateRequest *g, int n_choices, const char *prefix, int idlen,
                                 const char *noun, enum MHD_Result *ret);

/* The one event loop's hand-off (daemon.c) and the non-streaming answer (http.c). */
void gw_core_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_core_error(struct gw_stream *s, const struct gw_error *e);

/* In a front end's parser (locals p with p->prm, and why / wn): a refusal the core set in
 * p->prm.err, its message also into why, and the parser returns -1. */
#define GW_CORE_REFUSE(call)                                                          \
    do {                                                                      \
        if (call) {                                                           \
            snprintf(why, wn, "%s", p->prm.err.msg);                          \
            return -1;                                                        \
        }                                                                     \
    } while (0)

#endif
