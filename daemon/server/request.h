/*
 * request.h - a generate request as the engine receives it, and the checks
 * the RPC thread makes before building one.
 *
 * The RPC thread decodes every client frame with smol_rpc_decode, builds a
 * struct smol_request from a GenerateRequest with smol_rpc_build_request,
 * and hands it to the engine thread (ownership passes with SUBMIT, see
 * engine.h).  Nothing here touches a socket: the functions are pure, which
 * is what lets the fuzzer drive them.
 */
#ifndef SMOL_REQUEST_H
#define SMOL_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"
#include "daemon/model/rules.h"
#include "daemon/text/text.h"
#include "daemon/server/grammar_cache.h"
#include "smollm3.pb-c.h"     /* generated into $(BUILD)/gen */

#define SMOL_PROTOCOL_VERSION 1

/* the limits are the one set of rules (daemon/model/rules.h); short names here */
#define SMOL_SESSION_ID_MAX SMOL_RULE_SESSION_ID_MAX
#define SMOL_MAX_STOPS SMOL_RULE_MAX_STOPS
#define SMOL_STOP_MAX_LEN SMOL_RULE_STOP_MAX_LEN
#define SMOL_MAX_CHOICES SMOL_RULE_MAX_CHOICES

enum smol_input_kind { SMOL_INPUT_CHAT = 0, SMOL_INPUT_TEXT = 1, SMOL_INPUT_TOKENS = 2 };

/* A validated generate request, built by the RPC thread. */
struct smol_request {
    uint64_t id;                        /* internal, unique for the daemon's lifetime */
    uint64_t client_id;                 /* the client's request_id, echoed in events */
    char session[SMOL_SESSION_ID_MAX + 1]; /* "" = no session */
    char tenant[SMOL_RULE_TENANT_MAX + 1];  /* whose sessions and cached prefixes ("" = the default tenant);
                                               said by the client, which the daemon's socket trusts */
    enum smol_input_kind kind;
    /* kind == CHAT: the request as an OpenAI-style JSON body ({"messages":
     * [...], "tools": [...], "add_generation_prompt": bool}) owned by this
     * struct, and `chat` parsed from it by smol_chat_request_from_json
     * (its strings point into chat_body).  chat.date: NULL = the session's
     * frozen date (or today's, frozen, without a session); else a checked
     * "DD Month YYYY" string owned by this struct (date_buf). */
    json_t *chat_body;
    struct smol_chat_request chat;
    int append;                         /* chat + session: messages extend the session's stored conversation */
    int create_session;                 /* with append: a session the daemon does not hold starts empty
                                           (else the request is refused, SMOL_ENOSESSION) */
    char date_buf[32];
    char *text;                         /* kind == TEXT, NUL-terminated */
    size_t text_len;
    int32_t *ids;                       /* kind == TOKENS */
    int n_ids;
    int think_set, enable_thinking;     /* chat: explicit thinking flag */
    struct smol_sampler_params sp;
    int max_tokens;                     /* 0 = engine default */
    int thinking_budget;                /* tokens before a forced </think>; 0 = engine default */
    char *stops[SMOL_MAX_STOPS];
    int n_stops;
    int logprobs;
    int top_logprobs;                   /* [0, SMOL_SAMPLER_MAX_TOP_LOGPROBS]; > 0 implies logprobs */
    int32_t *bias_id;                   /* logit_bias: [n_bias] token ids (< n_vocab) */
    float *bias;                        /*             [n_bias] biases in [-100, 100] */
    int n_bias;
    int n_choices;                      /* [1, SMOL_MAX_CHOICES] continuations of one prompt */
    int32_t *resume;                    /* resume_tokens: [n_resume] output tokens to replay first (< n_vocab) */
    int n_resume;
    int *resume_counts;                 /* n > 1: [n_choices] resume tokens of each choice, in order (NULL: none) */
    int handover;                       /* ended at once with SMOL_ESHUTDOWN when the daemon drains */
    int background;                     /* GenerateRequest.background: its prompt chunks sized to a
                                           quarter of the step budget (engine.c step) */
    int handover_overlap;               /* with handover: generated on for handover_grace_s after an
                                           Event.handover first (make-before-break) */
    int refs;                           /* engine: the requests (choices) sharing this struct */
    int speculative;                    /* -1: the daemon's default, 0: off, 1: on */
    char *prediction;                   /* Predicted Outputs: UTF-8 text the drafts come from first, or NULL */
    size_t prediction_len;
    /* structured output: the compiled constraint (a cache reference,
     * released by smol_request_free), or NULL */
    enum smol_constraint_kind constraint;
    struct smol_grammar_entry *grammar;
    int tier;                           /* scheduling class, Smollm3__ServiceTier: DEFAULT, PRIORITY
                                           (admitted first), FLEX (idle capacity only, preempted first) */
    double t_received;                  /* CLOCK_MONOTONIC seconds */
    int cancelled;                      /* cancelled before the engine had it (parked): it ends at once, CANCELLED */
};

/* Frees everything the request owns (chat_body, chat, text, ids, stops)
 * and the struct; accepts NULL and *r == NULL. */
void smol_request_free(struct smol_request **r);

/* ------------------------------------------------ decoding and validation */

struct smol_rpc_limits {
    size_t max_request_bytes;   /* frames above are refused unparsed */
    int32_t n_vocab;            /* token ids must be < n_vocab */
    int n_ctx;                  /* max_tokens is capped to it; token inputs must fit */
    struct smol_grammar_cache *grammars;  /* compiles constraints; NULL: constrained requests are refused */
};

/* Size check, unpack, protocol version, request kind, and the fields of the
 * non-generate kinds (session ids).  *request_id gets the request's id once
 * it parsed (0 before).  On success *out is the unpacked request (free with
 * smollm3__request__free_unpacked(*out, NULL)); on error *out is NULL.
 * Errors: SMOL_ETOOLARGE, SMOL_EFORMAT, SMOL_EUNSUPPORTED (protocol version),
 * SMOL_EINVAL, SMOL_EUTF8. */
enum smol_err smol_rpc_decode(const void *buf, size_t len, const struct smol_rpc_limits *lim,
                              Smollm3__Request **out, uint64_t *request_id, char *err);

/* Validates a GenerateRequest and builds the engine's struct smol_request
 * (client_id set, id 0: the caller assigns it).  Checks, with the rules of
 * daemon/model/rules.h (the gateway's too): UTF-8 of every string, the
 * session id, the message count and prompt bytes, chat roles, tools_json /
 * tool_calls_json (JSON arrays, parsed with jansson; at most
 * SMOL_RULE_MAX_TOOLS tools), the date, sampling ranges
 * (smol_sampler_params_check; top_k -1 becomes 0, off), stop strings,
 * max_tokens, n, top_logprobs (needs logprobs), logit_bias, token ids
 * (< n_vocab), the tenant, max_tokens (capped to n_ctx), the constraint (json_schema / gbnf / regex / json_object,
 * compiled through lim->grammars: an inexpressible keyword is SMOL_EINVAL
 * naming it).  A missing seed is drawn with getrandom().
 * The chat input becomes the JSON body engine.h describes (chat_body) and is
 * parsed with smol_chat_request_from_json, as the gateway's JSON is.
 * Free the result with smol_request_free (request.c).
 * Errors: SMOL_EINVAL, SMOL_EUTF8, SMOL_ETOOLARGE, SMOL_ECONTEXT, SMOL_ENOMEM. */
enum smol_err smol_rpc_build_request(const Smollm3__GenerateRequest *g, uint64_t client_id,
                                     const struct smol_rpc_limits *lim, struct smol_request **out,
                                     char *err);

#endif
