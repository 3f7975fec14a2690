/*
 * params.c - the field table of the OpenAI endpoints and the fields they
 * share (see params.h).  Every value is checked for type and range here,
 * so what reaches the daemon is well formed; what only the daemon can judge
 * (logit_bias ids against the vocabulary) comes back as its 400.
 */
#include "gateway/params.h"
#include "gateway/fields.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ----------------------------------------------------------- */

enum disp {
    HONOURED,                   /* parsed here: reaches the daemon */
    OWN,                        /* honoured, parsed by the endpoint itself */
    METADATA,                   /* accepted (type-checked), changes nothing */
    REFUSED,                    /* any non-null value: 400 */
};

#define CHAT GW_API_CHAT
#define COMP GW_API_COMPLETIONS
#define BOTH (GW_API_CHAT | GW_API_COMPLETIONS)

static const struct field {
    const char *name;
    unsigned apis;
    enum disp d;
} fields[] = {
    { "model", BOTH, HONOURED },            /* any name: the one model answers, and says so */
    { "stream", BOTH, HONOURED },
    { "stream_options", BOTH, HONOURED },
    { "max_tokens", BOTH, HONOURED },
    { "max_completion_tokens", CHAT, HONOURED },
    { "temperature", BOTH, HONOURED },
    { "top_p", BOTH, HONOURED },
    { "top_k", BOTH, HONOURED },            /* extension (llama.cpp, vLLM) */
    { "min_p", BOTH, HONOURED },            /* extension */
    { "repetition_penalty", BOTH, HONOURED },   /* extension */
    { "speculative", BOTH, HONOURED },          /* extension: false = no speculative decoding */
    { "presence_penalty", BOTH, HONOURED },
    { "frequency_penalty", BOTH, HONOURED },
    { "seed", BOTH, HONOURED },
    { "stop", BOTH, HONOURED },
    { "logit_bias", BOTH, HONOURED },
    { "logprobs", BOTH, HONOURED },
    { "top_logprobs", CHAT, HONOURED },
    { "n", BOTH, HONOURED },
    { "service_tier", CHAT, HONOURED },     /* auto, default, flex, priority: the scheduling class */
    { "messages", CHAT, OWN },
    { "tools", CHAT, OWN },
    { "tool_choice", CHAT, OWN },
    { "parallel_tool_calls", CHAT, OWN },
    { "response_format", CHAT, OWN },
    { "reasoning_effort", CHAT, OWN },
    { "chat_template_kwargs", CHAT, OWN },  /* extension: enable_thinking */
    { "session_id", CHAT, OWN },            /* extension: the daemon's KV session */
    { "modalities", CHAT, OWN },
    { "prompt", COMP, OWN },
    { "echo", COMP, OWN },
    { "suffix", COMP, OWN },
    { "best_of", COMP, OWN },
    { "user", BOTH, METADATA },
    { "metadata", CHAT, METADATA },
    { "store", CHAT, METADATA },
    { "safety_identifier", CHAT, METADATA },
    { "prompt_cache_key", CHAT, METADATA },         /* the prefix cache is automatic */
    { "prompt_cache_retention", CHAT, METADATA },
    { "prompt_cache_options", CHAT, METADATA },
    { "audio", CHAT, REFUSED },
    { "functions", CHAT, REFUSED },                 /* deprecated: use tools */
    { "function_call", CHAT, REFUSED },
    { "prediction", CHAT, HONOURED },               /* Predicted Outputs: the drafts' source */
    { "web_search_options", CHAT, REFUSED },
    { "verbosity", CHAT, REFUSED },
    { "moderation", CHAT, REFUSED },
    { "grammar", CHAT, OWN },                       /* extension (llama.cpp): GBNF, structured.c */
    { "grammar", COMP, REFUSED },                   /* not supported yet on completions */
};

static const struct field *field_of(const char *name, enum gw_api api)
{
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if ((fields[i].apis & api) && !strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

/* ---- helpers -------------------------------------------------------------- */

/* ---- the error convention (params.h) ------------------------------------- */

/* A refusal with code (FAILC) or SMOL_EINVAL (FAIL), naming key; the
 * message also goes to why. */
#define FAILC(p, code, key, ...)                                              \
    do {                                                                      \
        gw_error_set(&(p)->err, code, key, __VA_ARGS__);                      \
        snprintf(why, wn, "%s", (p)->err.msg);                                \
        return -1;                                                            \
    } while (0)
#define FAIL(p, key, ...) FAILC(p, SMOL_EINVAL, key, __VA_ARGS__)
/* A rule of daemon/model/rules.h: call writes its message into m_. */
#define RULE(p, key, call)                                                    \
    do {                                                                      \
        char m_[SMOL_ERRLEN];                                                 \
        enum smol_err e_ = (call);                                            \
        if (e_) FAILC(p, e_, key, "%s", m_);                                  \
    } while (0)

#define get gw_get
/* A refusal of the core's (core.h), already in p->err: its message to why. */
#define CORE(p, call)                                                         \
    do {                                                                      \
        if (call) {                                                           \
            snprintf(why, wn, "%s", (p)->err.msg);                            \
            return -1;                                                        \
        }                                                                     \
    } while (0)

/* A number within the rule's range (rules.h). */
static int number(struct gw_params *p, json_t *root, const char *key, enum smol_rule_num rule, int *has,
                  double *v, char *why, size_t wn)
{
    json_t *x = get(root, key);
    *has = 0;
    if (!x) return 0;
    if (!json_is_number(x)) FAIL(p, key, "'%s' must be a number", key);
    *v = json_number_value(x);
    RULE(p, key, smol_rule_number(rule, *v, key, m_));
    *has = 1;
    return 0;
}

/* An integer within the rule's range (rules.h). */
static int integer(struct gw_params *p, json_t *root, const char *key, enum smol_rule_num rule,
                   int *has, long long *v, char *why, size_t wn)
{
    json_t *x = get(root, key);
    *has = 0;
    if (!x) return 0;
    if (!json_is_integer(x)) FAIL(p, key, "'%s' must be an integer", key);
    *v = json_integer_value(x);
    RULE(p, key, smol_rule_number(rule, (double)*v, key, m_));
    *has = 1;
    return 0;
}

/* ---- parsing -------------------------------------------------------------- */

static int check_fields(struct gw_params *p, json_t *root, enum gw_api api, int ignore_unknown,
                        char *why, size_t wn)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const struct field *f = field_of(key, api);
        if (!f) {
            if (ignore_unknown) continue;
            FAIL(p, key, "unknown field '%.40s' (the gateway refuses fields it does not know; "
                 "--ignore-unknown-fields accepts them)", key);
        }
        if (f->d == REFUSED && !json_is_null(v))
            FAILC(p, SMOL_EUNSUPPORTED, key, "'%s' is not supported%s", key,
                 !strcmp(key, "grammar") ? " yet" : "");
        if (f->d != METADATA || json_is_null(v)) continue;
        if ((!strcmp(key, "user") || !strcmp(key, "safety_identifier") ||
             !strcmp(key, "prompt_cache_key") || !strcmp(key, "prompt_cache_retention")) &&
            !json_is_string(v))
            FAIL(p, key, "'%s' must be a string", key);
        if (!strcmp(key, "store") && !json_is_boolean(v)) FAIL(p, key, "'store' must be a boolean");
        if ((!strcmp(key, "metadata") || !strcmp(key, "prompt_cache_options")) && !json_is_object(v))
            FAIL(p, key, "'%s' must be an object", key);
    }
    return 0;
}

static int parse_stop(struct gw_params *p, json_t *root, char *why, size_t wn)
{
    json_t *x = get(root, "stop");
    if (!x) return 0;
    if (json_is_string(x)) {
        RULE(p, "stop", smol_rule_stop(json_string_value(x), 0, m_));
        p->stops[0] = (char *)json_string_value(x);
        p->gen.n_stop = 1;
    } else if (json_is_array(x)) {
        RULE(p, "stop", smol_rule_stop_count(json_array_size(x), m_));
        size_t k;
        json_t *s;
        json_array_foreach(x, k, s) {
            if (!json_is_string(s)) FAIL(p, "stop", "'stop' entries must be strings");
            RULE(p, "stop", smol_rule_stop(json_string_value(s), k, m_));
            p->stops[p->gen.n_stop++] = (char *)json_string_value(s);
        }
    } else {
        FAIL(p, "stop", "'stop' must be a string or an array of up to %d strings", GW_MAX_STOPS);
    }
    p->gen.stop = p->stops;
    return 0;
}

/* {"token id": bias, ...}: ids are decimal integers (checked against the
 * vocabulary by the daemon), biases numbers in [-100, 100]. */
static int parse_logit_bias(struct gw_params *p, json_t *root, char *why, size_t wn)
{
    json_t *x = get(root, "logit_bias");
    if (!x) return 0;
    if (!json_is_object(x)) FAIL(p, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(x);
    RULE(p, "logit_bias", smol_rule_bias_count(n, m_));
    if (!n) return 0;
    p->bias = calloc(n, sizeof *p->bias);
    p->biasp = calloc(n, sizeof *p->biasp);
    if (!p->bias || !p->biasp) FAILC(p, SMOL_ENOMEM, "logit_bias", "out of memory");
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(x, key, v) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id > INT32_MAX)
            FAIL(p, "logit_bias", "'logit_bias' keys must be token ids (non-negative integers), got '%.20s'",
                 key);
        char field[40];
        snprintf(field, sizeof field, "logit_bias[%ld]", id);
        if (!json_is_number(v)) FAIL(p, "logit_bias", "'%s' must be a number", field);
        RULE(p, "logit_bias", smol_rule_number(SMOL_RULE_LOGIT_BIAS, json_number_value(v), field, m_));
        smollm3__logit_bias__init(&p->bias[i]);
        p->bias[i].token_id = (int32_t)id;
        p->bias[i].bias = (float)json_number_value(v);
        p->biasp[i] = &p->bias[i];
        i++;
    }
    p->gen.n_logit_bias = i;
    p->gen.logit_bias = p->biasp;
    return 0;
}

static int parse_logprobs(struct gw_params *p, json_t *root, enum gw_api api, char *why, size_t wn)
{
    json_t *x = get(root, "logprobs");
    int has;
    long long v;
    if (api == GW_API_COMPLETIONS) {    /* an integer: how many alternatives */
        if (integer(p, root, "logprobs", SMOL_RULE_TOP_LOGPROBS, &has, &v, why, wn)) return -1;
        if (has) {
            p->logprobs = 1;
            p->gen.logprobs = 1;
            p->gen.top_logprobs = (uint32_t)v;
        }
        return 0;
    }
    if (x && !json_is_boolean(x)) FAIL(p, "logprobs", "'logprobs' must be a boolean");
    p->logprobs = json_is_true(x);
    p->gen.logprobs = p->logprobs;
    if (integer(p, root, "top_logprobs", SMOL_RULE_TOP_LOGPROBS, &has, &v, why, wn)) return -1;
    if (has) RULE(p, "top_logprobs", smol_rule_logprobs(p->logprobs, v, m_));
    if (has) p->gen.top_logprobs = (uint32_t)v;
    return 0;
}

int gw_params_parse(struct gw_params *p, json_t *root, enum gw_api api, int ignore_unknown,
                    char *why, size_t wn)
{
    memset(&p->err, 0, sizeof p->err);
    smollm3__generate_request__init(&p->gen);
    smollm3__sampling_params__init(&p->sampling);
    p->gen.sampling = &p->sampling;
    if (!json_is_object(root)) FAIL(p, "", "the request body must be a JSON object");
    if (check_fields(p, root, api, ignore_unknown, why, wn)) return -1;

    CORE(p, gw_field_model(root, &p->err));
    CORE(p, gw_field_stream_flag(root, &p->stream, &p->err));
    json_t *x = get(root, "stream_options");
    if (x) {
        const char *k;
        json_t *v;
        if (!json_is_object(x)) FAIL(p, "stream_options", "'stream_options' must be an object");
        json_object_foreach(x, k, v) {
            if (!strcmp(k, "include_usage")) {
                if (!json_is_boolean(v) && !json_is_null(v))
                    FAIL(p, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
                p->include_usage = json_is_true(v);
            } else if (!strcmp(k, "include_obfuscation")) {
                if (json_is_true(v))
                    FAILC(p, SMOL_EUNSUPPORTED, "stream_options.include_obfuscation",
                         "'stream_options.include_obfuscation' is not supported");
            } else if (!ignore_unknown) {
                FAIL(p, "stream_options", "unknown field 'stream_options.%.40s'", k);
            }
        }
    }
    int has;
    long long iv;
    if (integer(p, root, "n", SMOL_RULE_N, &has, &iv, why, wn)) return -1;
    if (has) p->gen.n = (uint32_t)iv;
    const char *mt_keys[] = { "max_completion_tokens", "max_tokens" };
    for (int k = 0; k < 2; k++) {
        if (integer(p, root, mt_keys[k], SMOL_RULE_MAX_TOKENS_FIELD, &has, &iv, why, wn)) return -1;
        if (has && !p->gen.max_tokens) p->gen.max_tokens = (uint32_t)iv;
    }
    double v;
    Smollm3__SamplingParams *sp = &p->sampling;
    if (number(p, root, "temperature", SMOL_RULE_TEMPERATURE, &has, &v, why, wn)) return -1;
    if (has) {
        sp->temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
        sp->temperature = (float)v;
    }
    if (number(p, root, "top_p", SMOL_RULE_TOP_P, &has, &v, why, wn)) return -1;
    if (has) {
        sp->top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
        sp->top_p = (float)v;
    }
    if (integer(p, root, "top_k", SMOL_RULE_TOP_K, &has, &iv, why, wn)) return -1;
    if (has) {                  /* -1 (vLLM) and 0 (llama.cpp) both mean off: sent as is */
        sp->top_k_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_K_OPT_TOP_K;
        sp->top_k = (int32_t)iv;
    }
    if (number(p, root, "min_p", SMOL_RULE_MIN_P, &has, &v, why, wn)) return -1;
    if (has) {
        sp->min_p_opt_case = SMOLLM3__SAMPLING_PARAMS__MIN_P_OPT_MIN_P;
        sp->min_p = (float)v;
    }
    if (number(p, root, "repetition_penalty", SMOL_RULE_REPETITION_PENALTY, &has, &v, why, wn)) return -1;
    if (has) {
        sp->repetition_penalty_opt_case = SMOLLM3__SAMPLING_PARAMS__REPETITION_PENALTY_OPT_REPETITION_PENALTY;
        sp->repetition_penalty = (float)v;
    }
    if (number(p, root, "presence_penalty", SMOL_RULE_PRESENCE_PENALTY, &has, &v, why, wn)) return -1;
    if (has) {
        sp->presence_penalty_opt_case = SMOLLM3__SAMPLING_PARAMS__PRESENCE_PENALTY_OPT_PRESENCE_PENALTY;
        sp->presence_penalty = (float)v;
    }
    if (number(p, root, "frequency_penalty", SMOL_RULE_FREQUENCY_PENALTY, &has, &v, why, wn)) return -1;
    if (has) {
        sp->frequency_penalty_opt_case = SMOLLM3__SAMPLING_PARAMS__FREQUENCY_PENALTY_OPT_FREQUENCY_PENALTY;
        sp->frequency_penalty = (float)v;
    }
    x = get(root, "seed");
    if (x) {
        if (!json_is_integer(x)) FAIL(p, "seed", "'seed' must be an integer");
        sp->seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED;
        sp->seed = (uint64_t)json_integer_value(x);
    }
    x = get(root, "speculative");
    if (x && !json_is_boolean(x)) FAIL(p, "speculative", "'speculative' must be a boolean");
    if (x) {
        p->gen.speculative_opt_case = SMOLLM3__GENERATE_REQUEST__SPECULATIVE_OPT_SPECULATIVE;
        p->gen.speculative = json_is_true(x);
    }
    x = get(root, "prediction");
    if (x) {
        char *t = NULL;
        char pw[256];
        if (gw_prediction_text(x, &t, pw, sizeof pw)) FAIL(p, "prediction", "%s", pw);
        free(p->prediction);
        p->prediction = t;
        if (*t) p->gen.prediction = t;
    }
    CORE(p, gw_field_service_tier(root, 0, &p->gen.service_tier, &p->err));
    if (parse_stop(p, root, why, wn) || parse_logit_bias(p, root, why, wn) ||
        parse_logprobs(p, root, api, why, wn))
        return -1;
    return 0;
}

int gw_prediction_text(json_t *x, char **out, char *why, size_t wn)
{
    *out = NULL;
    json_t *type = json_is_object(x) ? json_object_get(x, "type") : NULL;
    if (!type || !json_is_string(type) || strcmp(json_string_value(type), "content")) {
        snprintf(why, wn, "'prediction' must be {\"type\": \"content\", \"content\": ...}");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(x, key, v) {
        if (strcmp(key, "type") && strcmp(key, "content")) {
            snprintf(why, wn, "'prediction.%.64s' is not supported", key);
            return -1;
        }
    }
    json_t *c = json_object_get(x, "content");
    if (c && json_is_string(c)) {
        *out = strdup(json_string_value(c));
    } else if (c && json_is_array(c)) {
        size_t i, n = 0;
        json_array_foreach(c, i, v) {
            json_t *ty = json_object_get(v, "type"), *tx = json_object_get(v, "text");
            if (!json_is_object(v) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
                !json_is_string(tx)) {
                snprintf(why, wn, "'prediction.content[%zu]' must be {\"type\": \"text\", \"text\": \"...\"}", i);
                return -1;
            }
            n += json_string_length(tx);
        }
        if ((*out = malloc(n + 1))) {
            n = 0;
            json_array_foreach(c, i, v) {
                json_t *tx = json_object_get(v, "text");
                memcpy(*out + n, json_string_value(tx), json_string_length(tx));
                n += json_string_length(tx);
            }
            (*out)[n] = 0;
        }
    } else {
        snprintf(why, wn, "'prediction.content' must be a string or an array of text parts");
        return -1;
    }
    if (!*out) {
        snprintf(why, wn, "out of memory");
        return -1;
    }
    if (strlen(*out) != (c && json_is_string(c) ? json_string_length(c) : strlen(*out))) {
        free(*out);
        *out = NULL;
        snprintf(why, wn, "'prediction.content' must not contain NUL characters");
        return -1;
    }
    return 0;
}

void gw_params_deinit(struct gw_params *p)
{
    free(p->prediction);
    p->prediction = NULL;
    free(p->bias);
    free(p->biasp);
    p->bias = NULL;
    p->biasp = NULL;
}
