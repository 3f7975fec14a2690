/*
 * request.c - what the RPC thread checks before a request reaches the
 * engine: frame size, unpacking, protocol version, the fields of every
 * request kind, and the struct smol_request built from a GenerateRequest
 * (see request.h).  Pure functions of their input, driven by the fuzzer
 * (tests/fuzz/fuzz_request.c) and by test_rpc's validation cases.
 */
#include "daemon/server/request.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "daemon/text/text.h"
#include "daemon/server/responses_store.h"

/* ============================================================ validation */

/* Every string field is checked with the rules' text check (UTF-8, no NUL). */
static enum smol_err text_ok(const char *s, const char *field, char *err)
{
    return smol_rule_text(s, strlen(s), field, err);
}

enum smol_err smol_rpc_decode(const void *buf, size_t len, const struct smol_rpc_limits *lim,
                              Smollm3__Request **out, uint64_t *request_id, char *err)
{
    enum smol_err e;
    *out = NULL;
    *request_id = 0;
    if (len > lim->max_request_bytes)
        return smol_errf(err, SMOL_ETOOLARGE, "request of %zu bytes exceeds max_request_bytes (%zu)", len,
                         lim->max_request_bytes);
    Smollm3__Request *rq = smollm3__request__unpack(NULL, len, buf);
    if (!rq) return smol_errf(err, SMOL_EFORMAT, "malformed Request (protobuf decoding failed)");
    *request_id = rq->request_id;
    if (rq->protocol_version > SMOL_PROTOCOL_VERSION) {
        e = smol_errf(err, SMOL_EUNSUPPORTED, "protocol_version %u is not supported (this daemon speaks %d)",
                      rq->protocol_version, SMOL_PROTOCOL_VERSION);
        goto fail;
    }
    switch (rq->kind_case) {
    case SMOLLM3__REQUEST__KIND_SESSION_LIST:
        if ((e = smol_rule_tenant(rq->session_list->tenant, "session_list.tenant", err))) goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_GENERATE:
    case SMOLLM3__REQUEST__KIND_CANCEL:
    case SMOLLM3__REQUEST__KIND_HEALTH:
    case SMOLLM3__REQUEST__KIND_STATS:
        break;
    case SMOLLM3__REQUEST__KIND_TOKENIZE:
        if ((e = text_ok(rq->tokenize->content, "tokenize.content", err))) goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_DETOKENIZE:
        for (size_t i = 0; i < rq->detokenize->n_ids; i++)
            if (rq->detokenize->ids[i] < 0 || rq->detokenize->ids[i] >= lim->n_vocab) {
                e = smol_errf(err, SMOL_EINVAL, "detokenize.ids[%zu] = %d is outside [0, %d)", i,
                              rq->detokenize->ids[i], lim->n_vocab);
                goto fail;
            }
        break;
    case SMOLLM3__REQUEST__KIND_SESSION_GET:
        if ((e = text_ok(rq->session_get->session_id, "session_get.session_id", err)) ||
            (e = smol_rule_session_id(rq->session_get->session_id, "session_get.session_id", err)) ||
            (e = smol_rule_tenant(rq->session_get->tenant, "session_get.tenant", err)))
            goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_RESPONSE_STORE:
        if (!rq->response_store->response || !rq->response_store->response->id ||
            !smol_rstore_id_ok(rq->response_store->response->id)) {
            e = smol_errf(err, SMOL_EINVAL, "response_store.response.id must be 1..64 of [A-Za-z0-9_-]");
            goto fail;
        }
        if (rq->response_store->response->previous_response_id && *rq->response_store->response->previous_response_id &&
            !smol_rstore_id_ok(rq->response_store->response->previous_response_id)) {
            e = smol_errf(err, SMOL_EINVAL, "response_store.response.previous_response_id must be 1..64 of [A-Za-z0-9_-]");
            goto fail;
        }
        if ((e = smol_rule_tenant(rq->response_store->tenant, "response_store.tenant", err))) goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_RESPONSE_GET:
        if ((e = text_ok(rq->response_get->id, "response_get.id", err)) ||
            (e = smol_rule_tenant(rq->response_get->tenant, "response_get.tenant", err)))
            goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_RESPONSE_DELETE:
        if ((e = text_ok(rq->response_delete->id, "response_delete.id", err)) ||
            (e = smol_rule_tenant(rq->response_delete->tenant, "response_delete.tenant", err)))
            goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_RESPONSE_LIST:
        if ((e = smol_rule_tenant(rq->response_list->tenant, "response_list.tenant", err))) goto fail;
        break;
    case SMOLLM3__REQUEST__KIND_SESSION_DELETE:
        if ((e = text_ok(rq->session_delete->session_id, "session_delete.session_id", err)) ||
            (e = smol_rule_session_id(rq->session_delete->session_id, "session_delete.session_id", err)) ||
            (e = smol_rule_tenant(rq->session_delete->tenant, "session_delete.tenant", err)))
            goto fail;
        break;
    default:
        e = smol_errf(err, SMOL_EINVAL, "request kind missing or unknown (field %d)", (int)rq->kind_case);
        goto fail;
    }
    *out = rq;
    return SMOL_OK;
fail:
    smollm3__request__free_unpacked(rq, NULL);
    return e;
}

/* Parses JSON text that must be an array; SMOL_OK with *out NULL for "". */
static enum smol_err parse_json_array(const char *text, const char *field, json_t **out, char *err)
{
    *out = NULL;
    if (!*text) return SMOL_OK;
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j) return smol_errf(err, SMOL_EINVAL, "%s: invalid JSON at %d:%d: %s", field, je.line, je.column, je.text);
    if (!json_is_array(j)) {
        json_decref(j);
        return smol_errf(err, SMOL_EINVAL, "%s must be a JSON array", field);
    }
    *out = j;
    return SMOL_OK;
}

static int known_role(const char *s)
{
    return !strcmp(s, "system") || !strcmp(s, "user") || !strcmp(s, "assistant") || !strcmp(s, "tool");
}

/* Sets obj[key] = string s (skipped when s is "" and skip_empty).  -1 on OOM. */
static int put_str(json_t *obj, const char *key, const char *s, int skip_empty)
{
    if (skip_empty && !*s) return 0;
    return json_object_set_new(obj, key, json_string(s));
}

/* The chat input as the OpenAI-style body engine.h specifies, then parsed by
 * smol_chat_request_from_json (the gateway's path too, so both front ends
 * accept exactly the same messages). */
static enum smol_err build_chat(struct smol_request *r, const Smollm3__ChatInput *ci, const char *date, char *err)
{
    enum smol_err e;
    if ((e = smol_rule_messages(ci->n_messages, err))) return e;
    size_t prompt_bytes = 0;
    json_t *body = json_object(), *msgs = json_array(), *tools = NULL;
    if (!body || !msgs) { json_decref(msgs); goto oom; }    /* (json_object_set_new frees msgs itself) */
    if (json_object_set_new(body, "messages", msgs)) goto oom;
    for (size_t i = 0; i < ci->n_messages; i++) {
        const Smollm3__ChatMessage *m = ci->messages[i];
        const char *fields[] = {m->role, m->content, m->reasoning_content, m->tool_calls_json, m->tool_call_id,
                                m->name};
        static const char *const names[] = {"role", "content", "reasoning_content", "tool_calls_json",
                                            "tool_call_id", "name"};
        for (int k = 0; k < 6; k++) {
            char field[64];
            snprintf(field, sizeof field, "chat.messages[%zu].%s", i, names[k]);
            if ((e = text_ok(fields[k], field, err))) goto fail;
        }
        prompt_bytes += strlen(m->content) + strlen(m->reasoning_content);
        if (!known_role(m->role)) {
            e = smol_errf(err, SMOL_EINVAL,
                          "chat.messages[%zu].role: unknown role \"%.32s\" (system, user, assistant, tool)", i,
                          m->role);
            goto fail;
        }
        json_t *o = json_object(), *tc = NULL;
        if (!o || json_array_append_new(msgs, o)) goto oom;
        char what[64];
        snprintf(what, sizeof what, "chat.messages[%zu].tool_calls_json", i);
        if ((e = parse_json_array(m->tool_calls_json, what, &tc, err))) goto fail;
        /* proto3 cannot tell "" from absent: content is always a string */
        if (put_str(o, "role", m->role, 0) || put_str(o, "content", m->content, 0) ||
            put_str(o, "reasoning_content", m->reasoning_content, 1) ||
            put_str(o, "tool_call_id", m->tool_call_id, 1) || put_str(o, "name", m->name, 1) ||
            (tc && json_object_set_new(o, "tool_calls", tc)))
            goto oom;
    }
    if ((e = smol_rule_prompt_bytes(prompt_bytes, err))) goto fail;
    if ((e = text_ok(ci->tools_json, "chat.tools_json", err))) goto fail;
    if ((e = parse_json_array(ci->tools_json, "chat.tools_json", &tools, err))) goto fail;
    if (tools && (e = smol_rule_tools(json_array_size(tools), err))) {
        json_decref(tools);
        goto fail;
    }
    for (size_t i = 0; tools && i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i))) {
            json_decref(tools);
            e = smol_errf(err, SMOL_EINVAL, "chat.tools_json[%zu] must be a JSON object", i);
            goto fail;
        }
    if (tools && json_object_set_new(body, "tools", tools)) goto oom;
    int agp = ci->add_generation_prompt_opt_case ==
                      SMOLLM3__CHAT_INPUT__ADD_GENERATION_PROMPT_OPT_ADD_GENERATION_PROMPT
                  ? ci->add_generation_prompt != 0 : 1;
    if (json_object_set_new(body, "add_generation_prompt", json_boolean(agp))) goto oom;
    json_t *kw = json_pack("{s:b}", "enable_thinking", r->enable_thinking);
    if (!kw || json_object_set_new(body, "chat_template_kwargs", kw)) goto oom;
    char e2[SMOL_ERRLEN];
    if ((e = smol_chat_request_from_json(&r->chat, body, e2))) {
        smol_errf(err, e, "chat: %s", e2);
        goto fail;
    }
    r->chat_body = body;
    r->append = ci->append_to_session != 0;
    r->create_session = ci->create_session != 0;
    if (*date) {
        snprintf(r->date_buf, sizeof r->date_buf, "%s", date);
        r->chat.date = r->date_buf;
    } else {
        r->chat.date = NULL;    /* the session's frozen date */
    }
    return SMOL_OK;
oom:
    e = smol_errf(err, SMOL_ENOMEM, "out of memory building the chat request");
fail:
    json_decref(body);
    return e;
}

/* A sampling seed from getrandom(2); -1 when the kernel has none to give
 * (never a time-derived stand-in: the request is refused instead). */
static int random_seed(uint64_t *s)
{
    for (;;) {
        ssize_t k = getrandom(s, sizeof *s, GRND_NONBLOCK);
        if (k == (ssize_t)sizeof *s) return 0;
        if (k < 0 && errno == EINTR) continue;
        return -1;
    }
}

static enum smol_err build_sampling(struct smol_request *r, const Smollm3__SamplingParams *s, char *err)
{
    struct smol_sampler_params p = smol_sampler_defaults();
    if (s) {
        if (s->temperature_opt_case) p.temperature = s->temperature;
        if (s->top_p_opt_case) p.top_p = s->top_p;
        if (s->top_k_opt_case) p.top_k = s->top_k;
        if (s->min_p_opt_case) p.min_p = s->min_p;
        if (s->repetition_penalty_opt_case) p.repetition_penalty = s->repetition_penalty;
        if (s->presence_penalty_opt_case) p.presence_penalty = s->presence_penalty;
        if (s->frequency_penalty_opt_case) p.frequency_penalty = s->frequency_penalty;
    }
    if (s && s->seed_opt_case) p.seed = s->seed;
    else if (random_seed(&p.seed))
        return smol_errf(err, SMOL_EBUSY, "no randomness for the sampling seed (getrandom: %s): retry later",
                         strerror(errno));
    char e2[SMOL_ERRLEN];
    enum smol_err e = smol_sampler_params_check(&p, e2);
    if (e) return smol_errf(err, e, "%s", e2);
    if (p.top_k < 0) p.top_k = 0;   /* -1 (vLLM's spelling) is off, as 0 is */
    r->sp = p;
    return SMOL_OK;
}

/* The request's constraint, compiled (or found in the cache) now so that a
 * schema we cannot express is refused before the request is queued; its
 * token index may still be building (grammar_cache.h: the RPC thread parks
 * the request until it is).  The
 * wire code is INVALID_ARGUMENT for every schema problem (unsupported
 * keyword, invalid schema, bad syntax); the message names it. */
static enum smol_err build_constraint(struct smol_request *r, const Smollm3__GenerateRequest *g,
                                      const struct smol_rpc_limits *lim, char *err)
{
    const char *text = "";
    char *owned = NULL;
    if (*g->tool_choice && strcmp(g->tool_choice, "auto")) {
        if (!strcmp(g->tool_choice, "none"))
            return smol_errf(err, SMOL_EUNSUPPORTED, "tool_choice: \"none\" is not supported (leave the tools out)");
        if (g->constraint_case != SMOLLM3__GENERATE_REQUEST__CONSTRAINT__NOT_SET &&
            !(g->constraint_case == SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_OBJECT && !g->json_object))
            return smol_errf(err, SMOL_EINVAL, "tool_choice: \"%.64s\" and a response constraint cannot be combined",
                             g->tool_choice);
        if (g->input_case != SMOLLM3__GENERATE_REQUEST__INPUT_CHAT || !*g->chat->tools_json)
            return smol_errf(err, SMOL_EINVAL, "tool_choice: \"%.64s\" needs a chat request with tools", g->tool_choice);
        enum smol_err e;
        if (strcmp(g->tool_choice, "required") && (e = smol_rule_tool_name(g->tool_choice, "tool_choice", err)))
            return e;
        if ((e = text_ok(g->chat->tools_json, "chat.tools_json", err))) return e;
        size_t a = strlen(g->tool_choice), b = strlen(g->chat->tools_json);
        if (!(owned = malloc(a + b + 2))) return smol_errf(err, SMOL_ENOMEM, "out of memory");
        memcpy(owned, g->tool_choice, a);
        owned[a] = '\n';
        memcpy(owned + a + 1, g->chat->tools_json, b + 1);
        r->constraint = SMOL_CONSTRAINT_TOOL_CALLS;
        text = owned;
    } else {
        switch (g->constraint_case) {
        case SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA:
            r->constraint = SMOL_CONSTRAINT_JSON_SCHEMA, text = g->json_schema; break;
        case SMOLLM3__GENERATE_REQUEST__CONSTRAINT_GBNF: r->constraint = SMOL_CONSTRAINT_GBNF, text = g->gbnf; break;
        case SMOLLM3__GENERATE_REQUEST__CONSTRAINT_REGEX: r->constraint = SMOL_CONSTRAINT_REGEX, text = g->regex; break;
        case SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_OBJECT:
            if (!g->json_object) return SMOL_OK;
            r->constraint = SMOL_CONSTRAINT_JSON_OBJECT;
            break;
        default: return SMOL_OK;
        }
        enum smol_err e;
        if ((e = text_ok(text, "the constraint", err))) return e;
        if (r->constraint != SMOL_CONSTRAINT_JSON_OBJECT && !*text)
            return smol_errf(err, SMOL_EINVAL, "constraint text must not be empty");
        if ((e = smol_rule_constraint_size(strlen(text), "the constraint", err))) return e;
    }
    enum smol_err e = SMOL_OK;
    char e2[SMOL_ERRLEN];
    if (!lim->grammars) {
        e = smol_errf(err, SMOL_EUNSUPPORTED, "this daemon does not do constrained decoding");
    } else if ((e = smol_grammar_cache_get(lim->grammars, r->constraint, text, strlen(text), &r->grammar, e2))) {
        if (e != SMOL_ENOMEM) e = SMOL_EINVAL;
        smol_errf(err, e, "%s", e2);
    }
    free(owned);
    return e;
}

enum smol_err smol_rpc_build_request(const Smollm3__GenerateRequest *g, uint64_t client_id,
                                     const struct smol_rpc_limits *lim, struct smol_request **out, char *err)
{
    enum smol_err e;
    *out = NULL;
    struct smol_request *r = calloc(1, sizeof *r);
    if (!r) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    r->client_id = client_id;
    r->t_received = smol_mono_s();

    if ((e = text_ok(g->session_id, "session_id", err))) goto fail;
    if (g->session_id[0]) {
        if ((e = smol_rule_session_id(g->session_id, "session_id", err))) goto fail;
        strcpy(r->session, g->session_id);
    }
    if ((e = smol_rule_tenant(g->tenant, "tenant", err))) goto fail;
    strcpy(r->tenant, g->tenant);
    if (g->service_tier != SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT &&
        g->service_tier != SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY &&
        g->service_tier != SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX) {
        e = smol_errf(err, SMOL_EINVAL, "'service_tier' %d is not a ServiceTier", (int)g->service_tier);
        goto fail;
    }
    r->tier = (int)g->service_tier;
    if ((e = text_ok(g->date, "date", err))) goto fail;
    if (g->date[0] && (strlen(g->date) >= sizeof r->date_buf || smol_chat_date_check(g->date))) {
        e = smol_errf(err, SMOL_EINVAL, "'date' must read \"DD Month YYYY\" (e.g. \"09 July 2025\"), got \"%.40s\"",
                      g->date);
        goto fail;
    }
    if (g->enable_thinking_opt_case == SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING) {
        r->think_set = 1;
        r->enable_thinking = g->enable_thinking != 0;
    } else {
        r->enable_thinking = 1;
    }
    if ((e = build_sampling(r, g->sampling, err))) goto fail;

    if ((e = smol_rule_stops((const char *const *)g->stop, g->n_stop, err))) goto fail;
    for (size_t i = 0; i < g->n_stop; i++) {
        if (!(r->stops[r->n_stops] = strdup(g->stop[i]))) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
        r->n_stops++;
    }
    /* proto3: 0 is "unset" for max_tokens and n */
    if (g->max_tokens && (e = smol_rule_number(SMOL_RULE_MAX_TOKENS_FIELD, g->max_tokens, NULL, err))) goto fail;
    r->thinking_budget = g->thinking_budget > (uint32_t)INT32_MAX ? INT32_MAX : (int)g->thinking_budget;
    r->max_tokens = g->max_tokens > (uint32_t)lim->n_ctx && lim->n_ctx > 0 ? lim->n_ctx
                  : g->max_tokens > (uint32_t)INT32_MAX ? INT32_MAX : (int)g->max_tokens;
    r->logprobs = g->logprobs != 0;
    if ((e = smol_rule_logprobs(r->logprobs, g->top_logprobs, err))) goto fail;
    r->top_logprobs = (int)g->top_logprobs;
    r->refs = 1;
    r->n_choices = g->n ? (int)g->n : 1;
    if (g->n && (e = smol_rule_number(SMOL_RULE_N, g->n, NULL, err))) goto fail;
    if (r->n_choices > 1 && r->session[0]) {
        e = smol_errf(err, SMOL_EINVAL, "'n' > 1 cannot be combined with 'session_id'");
        goto fail;
    }
    if (g->n_resume_counts && (r->n_choices <= 1 || g->n_resume_counts != (size_t)r->n_choices)) {
        e = smol_errf(err, SMOL_EINVAL, "resume_counts: %zu counts for n = %d (one a choice, only with n > 1)",
                      g->n_resume_counts, r->n_choices);
        goto fail;
    }
    if (g->n_resume_tokens && r->n_choices > 1) {
        size_t sum = 0;
        for (size_t i = 0; i < g->n_resume_counts; i++) {
            /* a choice may have ended already: all of max_tokens (it is replayed to its end) */
            if ((lim->n_ctx > 0 && g->resume_counts[i] >= (uint32_t)lim->n_ctx) ||
                (r->max_tokens && g->resume_counts[i] > (uint32_t)r->max_tokens)) {
                e = smol_errf(err, SMOL_EINVAL, "resume_counts[%zu] = %u is over max_tokens", i, g->resume_counts[i]);
                goto fail;
            }
            sum += g->resume_counts[i];
        }
        if (!g->n_resume_counts || sum != g->n_resume_tokens) {
            e = smol_errf(err, SMOL_EINVAL, "'resume_tokens' with 'n' > 1 needs resume_counts summing to their number");
            goto fail;
        }
        if (!(r->resume_counts = malloc(g->n_resume_counts * sizeof *r->resume_counts))) {
            e = smol_errf(err, SMOL_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < g->n_resume_counts; i++) r->resume_counts[i] = (int)g->resume_counts[i];
    }
    if (g->n_resume_tokens) {
        if (r->n_choices <= 1 &&
            ((lim->n_ctx > 0 && g->n_resume_tokens >= (size_t)lim->n_ctx) ||
             (r->max_tokens && g->n_resume_tokens >= (size_t)r->max_tokens))) {
            e = smol_errf(err, SMOL_EINVAL, "resume_tokens: %zu tokens leave nothing to generate",
                          g->n_resume_tokens);
            goto fail;
        }
        for (size_t i = 0; i < g->n_resume_tokens; i++)
            if (g->resume_tokens[i] < 0 || g->resume_tokens[i] >= lim->n_vocab) {
                e = smol_errf(err, SMOL_EINVAL, "resume_tokens[%zu] = %d is outside [0, %d)", i,
                              g->resume_tokens[i], lim->n_vocab);
                goto fail;
            }
        if (!(r->resume = malloc(g->n_resume_tokens * sizeof *r->resume))) {
            e = smol_errf(err, SMOL_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(r->resume, g->resume_tokens, g->n_resume_tokens * sizeof *r->resume);
        r->n_resume = (int)g->n_resume_tokens;
    }
    r->handover = g->handover && !r->session[0];
    r->handover_overlap = r->handover && g->handover_overlap;
    r->background = g->background;
    if ((e = smol_rule_bias_count(g->n_logit_bias, err))) goto fail;
    if (g->n_logit_bias) {
        r->bias_id = malloc(g->n_logit_bias * sizeof *r->bias_id);
        r->bias = malloc(g->n_logit_bias * sizeof *r->bias);
        if (!r->bias_id || !r->bias) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
    }
    for (size_t i = 0; i < g->n_logit_bias; i++) {
        const Smollm3__LogitBias *lb = g->logit_bias[i];
        if (lb->token_id < 0 || lb->token_id >= lim->n_vocab) {
            e = smol_errf(err, SMOL_EINVAL, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                          lb->token_id, lim->n_vocab);
            goto fail;
        }
        char field[40];
        snprintf(field, sizeof field, "logit_bias[%d]", lb->token_id);
        if ((e = smol_rule_number(SMOL_RULE_LOGIT_BIAS, lb->bias, field, err))) goto fail;
        r->bias_id[i] = lb->token_id;
        r->bias[i] = lb->bias;
        r->n_bias++;
    }
    r->speculative = g->speculative_opt_case == SMOLLM3__GENERATE_REQUEST__SPECULATIVE_OPT_SPECULATIVE ? g->speculative != 0 : -1;

    if (g->prediction && *g->prediction) {
        r->prediction_len = strlen(g->prediction);
        if (!smol_utf8_valid(g->prediction, r->prediction_len)) {
            e = smol_errf(err, SMOL_EUTF8, "prediction is not valid UTF-8");
            goto fail;
        }
        if (!(r->prediction = strdup(g->prediction))) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
    }

    if ((e = build_constraint(r, g, lim, err))) goto fail;

    switch (g->input_case) {
    case SMOLLM3__GENERATE_REQUEST__INPUT_CHAT:
        r->kind = SMOL_INPUT_CHAT;
        if ((e = build_chat(r, g->chat, g->date, err))) goto fail;
        break;
    case SMOLLM3__GENERATE_REQUEST__INPUT_TEXT:
        r->kind = SMOL_INPUT_TEXT;
        r->text_len = strlen(g->text);
        if (r->text_len == 0) { e = smol_errf(err, SMOL_EINVAL, "text must not be empty"); goto fail; }
        if ((e = smol_rule_text(g->text, r->text_len, "text", err)) ||
            (e = smol_rule_prompt_bytes(r->text_len, err)))
            goto fail;
        if (!(r->text = strdup(g->text))) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
        break;
    case SMOLLM3__GENERATE_REQUEST__INPUT_TOKENS: {
        r->kind = SMOL_INPUT_TOKENS;
        size_t n = g->tokens->n_ids;
        if (n == 0) { e = smol_errf(err, SMOL_EINVAL, "tokens.ids must not be empty"); goto fail; }
        if (lim->n_ctx > 0 && n >= (size_t)lim->n_ctx) {
            e = smol_errf(err, SMOL_ECONTEXT, "%zu prompt tokens do not fit the context of %d", n, lim->n_ctx);
            goto fail;
        }
        for (size_t i = 0; i < n; i++)
            if (g->tokens->ids[i] < 0 || g->tokens->ids[i] >= lim->n_vocab) {
                e = smol_errf(err, SMOL_EINVAL, "tokens.ids[%zu] = %d is outside [0, %d)", i, g->tokens->ids[i],
                              lim->n_vocab);
                goto fail;
            }
        if (!(r->ids = malloc(n * sizeof *r->ids))) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
        memcpy(r->ids, g->tokens->ids, n * sizeof *r->ids);
        r->n_ids = (int)n;
        break;
    }
    default:
        e = smol_errf(err, SMOL_EINVAL, "the generate request has no input (chat, text or tokens)");
        goto fail;
    }
    *out = r;
    return SMOL_OK;
fail:
    smol_request_free(&r);
    return e;
}

/* ================================================================ freeing */

void smol_request_free(struct smol_request **rp)
{
    if (!rp || !*rp) return;
    struct smol_request *r = *rp;
    smol_chat_request_deinit(&r->chat);
    if (r->chat_body) json_decref(r->chat_body);
    free(r->text);
    free(r->prediction);
    free(r->ids);
    free(r->resume);
    free(r->resume_counts);
    free(r->bias_id);
    free(r->bias);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    smol_grammar_entry_release(&r->grammar);
    free(r);
    *rp = NULL;
}
