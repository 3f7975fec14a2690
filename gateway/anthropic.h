/*
 * anthropic.h - Anthropic's Messages API (POST /v1/messages, POST
 * /v1/messages/count_tokens): the request parser without I/O (anthropic.c;
 * tests/fuzz/fuzz_gateway.c drives it too).
 *
 * A Messages body becomes the same GenerateRequest the chat endpoint builds:
 * `system` and the messages' blocks become chat messages (text, tool_use as
 * an assistant's tool_calls, tool_result as a tool message, thinking as
 * reasoning_content), `tools` become OpenAI function tools (input_schema as
 * parameters), tool_choice any / tool the constrained "required" / named
 * call.  Its endpoints and stream encoder are declared below too.
 *
 * Layer 5 of the gateway, the protocol front ends (tests/check_layers.sh):
 * the core and everything beneath it.
 */
#ifndef GW_ANTHROPIC_H
#define GW_ANTHROPIC_H

#include "gateway/core.h"

enum gw_anthropic_ep { GW_AN_MESSAGES = 1, GW_AN_COUNT_TOKENS = 2 };

/* A parsed Messages body.  Its strings point into root and strs: valid
 * until gw_anthropic_parsed_deinit. */
struct gw_anthropic_parsed {
    struct gw_params prm;       /* gen, sampling, stops, stream; prm.param: the field at fault */
    Smollm3__ChatInput chat;
    Smollm3__ChatMessage sys;   /* system + the messages' system turns, first when present */
    Smollm3__ChatMessage *msgs; /* the conversation as chat messages */
    size_t n_msgs, cap_msgs;
    Smollm3__ChatMessage **msgp;
    struct gw_owned strs;       /* owned strings */
    json_t *root;
    json_t *tool_names;         /* tool_use id -> name (tool_result's name) */
    int thinking_omitted;       /* thinking.display "omitted": blocks without their text */
    long long budget_tokens;    /* thinking.budget_tokens (0: none) */
};

enum { GW_AN_OK, GW_AN_BAD_JSON, GW_AN_BAD_VALUE };
/* Parses body[0..len) for ep: GW_AN_OK, or GW_AN_BAD_JSON /
 * GW_AN_BAD_VALUE with the reason in why (a 400).  Call
 * gw_anthropic_parsed_deinit in every case. */
int gw_anthropic_parse(struct gw_anthropic_parsed *p, const char *body, size_t len, enum gw_anthropic_ep ep,
                       char *why, size_t wn);
void gw_anthropic_parsed_deinit(struct gw_anthropic_parsed *p);

/* POST /v1/messages, /v1/messages/count_tokens */
enum MHD_Result gw_anthropic_messages(struct gw_req *r);
enum MHD_Result gw_anthropic_count_tokens(struct gw_req *r);
void gw_anthropic_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_anthropic_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_anthropic_finish(struct gw_req *r, struct gw_stream *s);
/* {"type": "error", "error": {"type", "message"}}, the type by HTTP status */
json_t *gw_anthropic_error_body(int status, const char *msg);

extern const struct gw_proto gw_proto_anthropic;

#endif
