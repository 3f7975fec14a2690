/*
 * params.h - the request fields /v1/chat/completions and /v1/completions
 * share, and the table that says what becomes of every field either
 * endpoint can receive: honoured (it reaches the daemon and changes the
 * answer), metadata (accepted, recorded nowhere, changes nothing: `user`,
 * `metadata`, `store`, ...), or refused (a 400 naming the field whenever
 * its value asks for something the service does not do).  A field in no
 * row is unknown: refused, unless the gateway runs with
 * --ignore-unknown-fields.  gateway/README.md's field table is this table.
 */
#ifndef GW_PARAMS_H
#define GW_PARAMS_H

#include <jansson.h>
#include <microhttpd.h>
#include "daemon/client/client.h"
#include "daemon/model/rules.h"

/* The limits are the one set of rules (daemon/model/rules.h), the daemon's too. */
#define GW_MAX_STOPS SMOL_RULE_MAX_STOPS

/* The one error convention of the gateway's parsers: a refusal carries what
 * the client gets, never re-derived later from a name.  From a rule (an
 * error code of daemon/model/error.h: gw_error_set) the status and type
 * come from smol_rule_http and the code is smol_err_name's ("invalid_argument",
 * "invalid_utf8", "too_large", "unsupported"), exactly as when the daemon
 * refuses the request itself; the gateway's own conditions (invalid JSON,
 * 503 without a daemon, ...) use gw_error_http. */
struct gw_error {
    int status;                 /* HTTP status; 0 = no error */
    const char *type;           /* OpenAI error type (static string) */
    const char *code;           /* OpenAI error code (static string) */
    char param[64];             /* the field at fault ("" = the body / none) */
    char msg[256];
};
/* Both return -1, for `return gw_error_set(...)` in a parser. */
int gw_error_set(struct gw_error *e, enum smol_err code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int gw_error_http(struct gw_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A body jansson could not parse: invalid UTF-8 is the rules' SMOL_EUTF8
 * (what the daemon says of bad UTF-8), anything else 400 "invalid_json". */
int gw_error_json(struct gw_error *e, const json_error_t *je);

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

/* Queues p->err (status, type, code, param; message why, else p->err.msg). */
struct gw_req;
enum MHD_Result gw_params_error(struct gw_req *r, const struct gw_params *p, const char *why);
/* Queues e as OpenAI's error object with e's status. */
enum MHD_Result gw_queue_gw_error(struct gw_req *r, const struct gw_error *e);

#endif
