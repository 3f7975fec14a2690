/*
 * params.h - the request fields /v1/chat/completions and /v1/completions
 * share, and the table that says what becomes of every field either
 * endpoint can receive: honoured (it reaches the daemon and changes the
 * answer), metadata (accepted, recorded nowhere, changes nothing: `user`,
 * `metadata`, `store`, ...), or refused (a 400 naming the field whenever
 * its value asks for something the service does not do).  A field in no
 * row is unknown: refused, unless the gateway runs with
 * --ignore-unknown-fields.  gateway/README.md's field table is this table.  Layer 1
 * of the gateway (tests/check_layers.sh): util.h and fields.h beside it.
 */
#ifndef GW_PARAMS_H
#define GW_PARAMS_H

#include <jansson.h>
#include "daemon/client/client.h"
#include "daemon/model/rules.h"
#include "gateway/error.h"

/* The limits are the one set of rules (daemon/model/rules.h), the daemon's too. */
#define GW_MAX_STOPS SMOL_RULE_MAX_STOPS

enum gw_api { GW_API_CHAT = 1, GW_API_COMPLETIONS = 2 };

/* The GenerateRequest under construction and the storage it points into. */
struct gw_params {
    Smollm3__GenerateRequest gen;
    Smollm3__SamplingParams sampling;
    Smollm3__LogitBias *bias;   /* [gen.n_logit_bias] */
    Smollm3__LogitBias **biasp;
    char *stops[GW_MAX_STOPS];
    char *prediction;           /* gen.prediction's storage (malloc'd), or NULL */
    int stream, include_usage;
    int logprobs;               /* logprobs asked (chat: true; completions: an integer) */
    struct gw_error err;        /* on error: status, type, code, the field at fault, the message */
};

/* Fills p->gen (input left to the caller) from root's shared fields after
 * checking every key against the table for api: unknown keys (unless
 * ignore_unknown), refused fields with a value, bad types or ranges.  Keys
 * the endpoint parses itself (messages, prompt, tools, ...) are in the
 * table and left alone here.  0, or -1 with p->err set (and its message
 * copied to why). */
int gw_params_parse(struct gw_params *p, json_t *root, enum gw_api api, int ignore_unknown,
                    char *why, size_t wn);
void gw_params_deinit(struct gw_params *p);

/* Predicted Outputs: the text of an OpenAI `prediction` value
 * ({"type": "content", "content": string | [{"type": "text", "text": ...}]},
 * the parts concatenated) into *out (malloc'd; "" possible).  0, or -1 with
 * why.  For any endpoint that takes a prediction (chat; Responses later). */
int gw_prediction_text(json_t *x, char **out, char *why, size_t wn);

#endif
