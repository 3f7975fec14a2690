/*
 * rules.h - the one set of input rules of smollm3d: what a request may be,
 * checked by the daemon (daemon/server/request.c, daemon/text/sampler.c,
 * the chat template and the tool grammar) and by the gateway
 * (gateway/params.c, openai.c, ui.c, completions.c) with these same
 * functions, so that an input one process accepts the other accepts too,
 * and an input one refuses the other refuses with the same error code.
 *
 * It lives at the bottom of the daemon's layers (beside error.h, open to
 * every layer above: see tests/check_layers.sh) because the text layer's
 * sampler and chat template call it as well as the server and the gateway.
 *
 * The rules (the stricter of what the two processes did before, within
 * OpenAI's API):
 *   temperature        [0, 2]                  0 = greedy
 *   top_p              (0, 1]                  1 = off
 *   top_k              integer [-1, 2^20]      -1 (vLLM) and 0 (llama.cpp) = off
 *   min_p              [0, 1]                  0 = off
 *   repetition_penalty (0, 10]                 1 = off
 *   presence_penalty   [-2, 2]
 *   frequency_penalty  [-2, 2]
 *   max_tokens         integer [1, 1000000]    (on the wire 0 = unset; capped to the context)
 *   n                  integer [1, 16]         (on the wire 0 = unset)
 *   top_logprobs       integer [0, 20]         > 0 needs logprobs
 *   logit_bias         at most 1024 entries, each bias in [-100, 100]
 *   stop               at most 8 strings, each 1..256 bytes of UTF-8
 *   messages           1..4096
 *   prompt             at most 512 KiB: the bytes of every message's content and
 *                      reasoning_content, or of a completion's prompt (413)
 *   session id         1..128 bytes of [A-Za-z0-9._:-]
 *   tenant             0..64 bytes of [A-Za-z0-9._-] ("" = the default tenant)
 *   tool name          1..64 bytes of [A-Za-z0-9_-] (OpenAI's function names)
 *   tools              at most 128
 *   constraint text    (schema, grammar, regex, tools) at most 1 MiB
 *   text               valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), no NUL
 * A NaN is outside every range.  A range violation, a count or length over
 * its limit, a bad id or name is SMOL_EINVAL (HTTP 400); bad UTF-8 is
 * SMOL_EUTF8 (400); only a whole request over its byte limit is
 * SMOL_ETOOLARGE (413).  Messages name the field and its range.
 */
#ifndef SMOL_RULES_H
#define SMOL_RULES_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

#define SMOL_RULE_SESSION_ID_MAX 128
#define SMOL_RULE_TENANT_MAX 64
#define SMOL_RULE_TOOL_NAME_MAX 64
#define SMOL_RULE_MAX_TOOLS 128
#define SMOL_RULE_MAX_STOPS 8
#define SMOL_RULE_STOP_MAX_LEN 256
#define SMOL_RULE_MAX_CHOICES 16            /* n; the daemon also needs n <= its max_running */
#define SMOL_RULE_MAX_TOP_LOGPROBS 20
#define SMOL_RULE_MAX_BIAS 1024
#define SMOL_RULE_BIAS_LIMIT 100            /* each bias in [-100, 100] */
#define SMOL_RULE_MAX_MESSAGES 4096
#define SMOL_RULE_MAX_TOKENS 1000000
#define SMOL_RULE_TOP_K_MAX (1 << 20)
#define SMOL_RULE_MAX_CONSTRAINT_BYTES ((size_t)1 << 20)
/* the text of all messages (or the prompt): twice the 64k-token context in
 * English, and well inside the transport limits (the gateway's 1 MiB body,
 * the daemon's 4 MiB frame) for JSON-escaped text */
#define SMOL_RULE_MAX_PROMPT_BYTES ((size_t)512 << 10)

/* The numeric fields, each with its range (rules.c's table). */
enum smol_rule_num {
    SMOL_RULE_TEMPERATURE,
    SMOL_RULE_TOP_P,
    SMOL_RULE_TOP_K,
    SMOL_RULE_MIN_P,
    SMOL_RULE_REPETITION_PENALTY,
    SMOL_RULE_PRESENCE_PENALTY,
    SMOL_RULE_FREQUENCY_PENALTY,
    SMOL_RULE_MAX_TOKENS_FIELD,     /* max_tokens / max_completion_tokens */
    SMOL_RULE_N,
    SMOL_RULE_TOP_LOGPROBS,
    SMOL_RULE_LOGIT_BIAS,           /* one bias value */
    SMOL_RULE_NUM_COUNT
};

/* The field's name ("temperature"), its bounds, whether a bound is open
 * and whether it must be an integer. */
struct smol_rule_range {
    const char *name;
    double lo, hi;
    int lo_open, hi_open;
    int integer;
};
const struct smol_rule_range *smol_rule_range(enum smol_rule_num which);

/* SMOL_OK if v is within which's range (and integral where it must be),
 * else SMOL_EINVAL: "'<field>' must be in [lo, hi] (got v)".  field names
 * the value in the message (NULL: the rule's own name). */
enum smol_err smol_rule_number(enum smol_rule_num which, double v, const char *field, char *err);

/* 1 if s[0..n) is valid UTF-8 (shortest forms, no surrogates, <= U+10FFFF);
 * NUL bytes are valid here (see smol_rule_text). */
int smol_utf8_valid(const char *s, size_t n);

/* SMOL_OK if s[0..n) is valid UTF-8 holding no NUL byte, else SMOL_EUTF8
 * naming field. */
enum smol_err smol_rule_text(const char *s, size_t n, const char *field, char *err);

/* A session id: 1..SMOL_RULE_SESSION_ID_MAX bytes of [A-Za-z0-9._:-]
 * (SMOL_EINVAL naming field otherwise). */
int smol_session_id_ok(const char *s);
enum smol_err smol_rule_session_id(const char *s, const char *field, char *err);

/* A tenant (the namespace of sessions and cached prefixes, proto
 * GenerateRequest.tenant): 0..SMOL_RULE_TENANT_MAX bytes of [A-Za-z0-9._-],
 * "" being the default tenant.  No ':' and no '/', so that a tenant and a
 * session id joined by '/' name one key (daemon/server/spill.h). */
int smol_tenant_ok(const char *s);
enum smol_err smol_rule_tenant(const char *s, const char *field, char *err);

/* A tool (function) name: 1..SMOL_RULE_TOOL_NAME_MAX bytes of [A-Za-z0-9_-]. */
int smol_tool_name_ok(const char *s);
enum smol_err smol_rule_tool_name(const char *s, const char *field, char *err);

/* Stop strings: n <= SMOL_RULE_MAX_STOPS (smol_rule_stop_count); each one
 * 1..SMOL_RULE_STOP_MAX_LEN bytes of UTF-8 (smol_rule_stop: i is its
 * index in the message).  smol_rule_stops checks both. */
enum smol_err smol_rule_stop_count(size_t n, char *err);
enum smol_err smol_rule_stop(const char *s, size_t i, char *err);
enum smol_err smol_rule_stops(const char *const *s, size_t n, char *err);

/* Counts: messages 1..SMOL_RULE_MAX_MESSAGES, logit_bias entries
 * <= SMOL_RULE_MAX_BIAS, tools <= SMOL_RULE_MAX_TOOLS, a constraint's text
 * <= SMOL_RULE_MAX_CONSTRAINT_BYTES (what names it: "json_schema", ...). */
enum smol_err smol_rule_messages(size_t n, char *err);
enum smol_err smol_rule_bias_count(size_t n, char *err);
enum smol_err smol_rule_tools(size_t n, char *err);
enum smol_err smol_rule_constraint_size(size_t n, const char *what, char *err);
/* The prompt's text: at most SMOL_RULE_MAX_PROMPT_BYTES (SMOL_ETOOLARGE). */
enum smol_err smol_rule_prompt_bytes(size_t n, char *err);

/* top_logprobs > 0 needs logprobs (OpenAI's rule). */
enum smol_err smol_rule_logprobs(int logprobs, long long top_logprobs, char *err);

/* The one map from an error code to the HTTP status and the OpenAI error
 * type ("invalid_request_error", "not_found_error", "rate_limit_error",
 * "server_error") a client sees for it; SMOL_OK is 200 "", an unknown code
 * SMOL_EINTERNAL's. */
struct smol_http_error {
    int status;
    const char *type;
};
struct smol_http_error smol_rule_http(enum smol_err e);

/* The one monotonic clock (CLOCK_MONOTONIC): seconds, milliseconds and
 * nanoseconds since an arbitrary start. */
double smol_mono_s(void);
double smol_mono_ms(void);
int64_t smol_mono_ns(void);

#endif
