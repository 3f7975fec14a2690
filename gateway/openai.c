/*
 * openai.c - POST /v1/chat/completions and GET /v1/models: the OpenAI
 * request (JSON) turned into a GenerateRequest, daemon events turned into
 * chat.completion.chunk SSE frames or one chat.completion object, exactly
 * as ../shared/docs/SERVING.md describes.
 *
 * Validation is strict and names the bad field: wrong types and values are
 * 400 before anything reaches the daemon.  OpenAI clients send the whole
 * history each turn, so a session_id maps to a daemon session with
 * append_to_session = false (the daemon reuses its KV for the common prefix).
 */
#include "gateway/gateway.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_MESSAGES 4096
#define MAX_STOPS 16

/* ---- request parsing ---------------------------------------------------- */

_Static_assert(GW_OPENAI_MAX_STOPS == MAX_STOPS, "gateway.h's stop array");

static char *own(struct gw_openai_parsed *p, char *s)
{
    if (!s) return NULL;
    char **n = realloc(p->strs, (p->n_strs + 1) * sizeof *n);
    if (!n) {
        free(s);
        return NULL;
    }
    p->strs = n;
    p->strs[p->n_strs++] = s;
    return s;
}

void gw_openai_parsed_deinit(struct gw_openai_parsed *p)
{
    for (size_t i = 0; i < p->n_strs; i++) free(p->strs[i]);
    free(p->strs);
    free(p->msgs);
    free(p->msgp);
    json_decref(p->root);
    memset(p, 0, sizeof *p);
}

/* Message content: a string, null, or an array of {type:"text", text}. */
static int content_of(struct gw_openai_parsed *p, json_t *c, const char **out, char *why, size_t wn, int i)
{
    if (!c || json_is_null(c)) {
        *out = "";
        return 0;
    }
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return 0;
    }
    if (json_is_array(c)) {
        struct gw_buf b = { 0 };
        size_t k;
        json_t *part;
        json_array_foreach(c, k, part) {
            json_t *t = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(t)) {
                gw_buf_deinit(&b);
                snprintf(why, wn, "messages[%d].content[%zu]: only text parts are supported", i, k);
                return -1;
            }
            gw_buf_str(&b, json_string_value(t));
        }
        if (!b.p) gw_buf_add(&b, "", 0);
        *out = own(p, b.p);
        return *out ? 0 : -1;
    }
    snprintf(why, wn, "messages[%d].content must be a string, an array of parts or null", i);
    return -1;
}

static int opt_number(json_t *root, const char *key, double lo, double hi, int *has, double *v,
                      char *why, size_t wn)
{
    json_t *x = json_object_get(root, key);
    *has = 0;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x)) {
        snprintf(why, wn, "'%s' must be a number", key);
        return -1;
    }
    *v = json_number_value(x);
    if (!(*v >= lo && *v <= hi)) {
        snprintf(why, wn, "'%s' must be in [%g, %g]", key, lo, hi);
        return -1;
    }
    *has = 1;
    return 0;
}

static int parse_request(struct gw_openai_parsed *p, json_t *root, char *why, size_t wn)
{
    smollm3__generate_request__init(&p->gen);
    smollm3__chat_input__init(&p->chat);
    smollm3__sampling_params__init(&p->sampling);
    if (!json_is_object(root)) {
        snprintf(why, wn, "the request body must be a JSON object");
        return -1;
    }
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(why, wn, "'messages' must be a non-empty array");
        return -1;
    }
    size_t n = json_array_size(msgs);
    if (n > MAX_MESSAGES) {
        snprintf(why, wn, "too many messages (max %d)", MAX_MESSAGES);
        return -1;
    }
    p->msgs = calloc(n, sizeof *p->msgs);
    p->msgp = calloc(n, sizeof *p->msgp);
    if (!p->msgs || !p->msgp) {
        snprintf(why, wn, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        Smollm3__ChatMessage *cm = &p->msgs[i];
        smollm3__chat_message__init(cm);
        p->msgp[i] = cm;
        if (!json_is_object(m)) {
            snprintf(why, wn, "messages[%zu] must be an object", i);
            return -1;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "tool") && strcmp(role, "developer"))) {
            snprintf(why, wn, "messages[%zu].role must be system, user, assistant or tool", i);
            return -1;
        }
        cm->role = (char *)(strcmp(role, "developer") ? role : "system");
        const char *content;
        if (content_of(p, json_object_get(m, "content"), &content, why, wn, (int)i)) return -1;
        cm->content = (char *)content;
        json_t *rc = json_object_get(m, "reasoning_content");
        if (!rc || json_is_null(rc)) rc = json_object_get(m, "reasoning");
        if (rc && !json_is_null(rc)) {
            if (!json_is_string(rc)) {
                snprintf(why, wn, "messages[%zu].reasoning_content must be a string", i);
                return -1;
            }
            cm->reasoning_content = (char *)json_string_value(rc);
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) {
                snprintf(why, wn, "messages[%zu].tool_calls must be an array", i);
                return -1;
            }
            cm->tool_calls_json = own(p, json_dumps(tc, JSON_COMPACT));
        }
        const char *fields[] = { "tool_call_id", "name" };
        for (int f = 0; f < 2; f++) {
            json_t *x = json_object_get(m, fields[f]);
            if (x && !json_is_null(x) && !json_is_string(x)) {
                snprintf(why, wn, "messages[%zu].%s must be a string", i, fields[f]);
                return -1;
            }
            if (x && json_is_string(x)) {
                if (f == 0) cm->tool_call_id = (char *)json_string_value(x);
                else cm->name = (char *)json_string_value(x);
            }
        }
    }
    p->chat.n_messages = n;
    p->chat.messages = p->msgp;
    p->chat.append_to_session = 0;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            snprintf(why, wn, "'tools' must be an array");
            return -1;
        }
        if (json_array_size(tools)) p->chat.tools_json = own(p, json_dumps(tools, JSON_COMPACT));
    }
    p->gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    p->gen.chat = &p->chat;

    json_t *x = json_object_get(root, "model");
    if (x && !json_is_null(x) && !json_is_string(x)) {
        snprintf(why, wn, "'model' must be a string");
        return -1;
    }
    x = json_object_get(root, "stream");
    if (x && !json_is_null(x) && !json_is_boolean(x)) {
        snprintf(why, wn, "'stream' must be a boolean");
        return -1;
    }
    p->stream = json_is_true(x);
    x = json_object_get(root, "stream_options");
    if (x && !json_is_null(x)) {
        json_t *iu = json_object_get(x, "include_usage");
        if (!json_is_object(x) || (iu && !json_is_boolean(iu))) {
            snprintf(why, wn, "'stream_options.include_usage' must be a boolean");
            return -1;
        }
        p->include_usage = json_is_true(iu);
    }
    x = json_object_get(root, "n");
    if (x && !json_is_null(x) && !(json_is_integer(x) && json_integer_value(x) == 1)) {
        snprintf(why, wn, "'n' must be 1");
        return -1;
    }
    const char *mt_keys[] = { "max_completion_tokens", "max_tokens" };
    for (int k = 0; k < 2; k++) {
        x = json_object_get(root, mt_keys[k]);
        if (!x || json_is_null(x)) continue;
        if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 1000000) {
            snprintf(why, wn, "'%s' must be an integer in [1, 1000000]", mt_keys[k]);
            return -1;
        }
        if (!p->gen.max_tokens) p->gen.max_tokens = (uint32_t)json_integer_value(x);
    }
    int has;
    double v;
    if (opt_number(root, "temperature", 0, 2, &has, &v, why, wn)) return -1;
    if (has) {
        p->sampling.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
        p->sampling.temperature = (float)v;
    }
    if (opt_number(root, "top_p", 0, 1, &has, &v, why, wn)) return -1;
    if (has) {
        p->sampling.top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
        p->sampling.top_p = (float)v;
    }
    if (opt_number(root, "presence_penalty", -2, 2, &has, &v, why, wn)) return -1;
    if (has) {
        p->sampling.presence_penalty_opt_case =
            SMOLLM3__SAMPLING_PARAMS__PRESENCE_PENALTY_OPT_PRESENCE_PENALTY;
        p->sampling.presence_penalty = (float)v;
    }
    if (opt_number(root, "frequency_penalty", -2, 2, &has, &v, why, wn)) return -1;
    if (has) {
        p->sampling.frequency_penalty_opt_case =
            SMOLLM3__SAMPLING_PARAMS__FREQUENCY_PENALTY_OPT_FREQUENCY_PENALTY;
        p->sampling.frequency_penalty = (float)v;
    }
    x = json_object_get(root, "seed");
    if (x && !json_is_null(x)) {
        if (!json_is_integer(x)) {
            snprintf(why, wn, "'seed' must be an integer");
            return -1;
        }
        p->sampling.seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED;
        p->sampling.seed = (uint64_t)json_integer_value(x);
    }
    p->gen.sampling = &p->sampling;
    x = json_object_get(root, "stop");
    if (x && !json_is_null(x)) {
        if (json_is_string(x)) {
            p->stops[0] = (char *)json_string_value(x);
            p->gen.n_stop = 1;
        } else if (json_is_array(x) && json_array_size(x) <= MAX_STOPS) {
            size_t k;
            json_t *s;
            json_array_foreach(x, k, s) {
                if (!json_is_string(s) || !*json_string_value(s)) {
                    snprintf(why, wn, "'stop' entries must be non-empty strings");
                    return -1;
                }
                p->stops[p->gen.n_stop++] = (char *)json_string_value(s);
            }
        } else {
            snprintf(why, wn, "'stop' must be a string or an array of up to %d strings", MAX_STOPS);
            return -1;
        }
        p->gen.stop = p->stops;
    }
    x = json_object_get(root, "chat_template_kwargs");
    if (x && !json_is_null(x)) {
        json_t *et = json_object_get(x, "enable_thinking");
        if (!json_is_object(x) || (et && !json_is_boolean(et))) {
            snprintf(why, wn, "'chat_template_kwargs.enable_thinking' must be a boolean");
            return -1;
        }
        if (et) {
            p->gen.enable_thinking_opt_case =
                SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
            p->gen.enable_thinking = json_is_true(et);
        }
    }
    x = json_object_get(root, "session_id");
    if (x && !json_is_null(x)) {
        const char *sid = json_string_value(x);
        size_t len = sid ? strlen(sid) : 0;
        int ok = sid && len >= 1 && len <= 128;
        for (size_t i = 0; ok && i < len; i++)
            ok = (sid[i] >= 'a' && sid[i] <= 'z') || (sid[i] >= 'A' && sid[i] <= 'Z') ||
                 (sid[i] >= '0' && sid[i] <= '9') || strchr("_-.:", sid[i]);
        if (!ok) {
            snprintf(why, wn, "'session_id' must be 1-128 characters of [A-Za-z0-9_.:-]");
            return -1;
        }
        p->gen.session_id = (char *)sid;
    }
    char *owned = NULL;
    if (gw_structured_parse(&p->gen, root, &owned, why, wn)) { free(owned); return -1; }
    if (owned && !own(p, owned)) { snprintf(why, wn, "out of memory"); return -1; }
    return 0;
}

int gw_openai_parse(struct gw_openai_parsed *p, const char *body, size_t len, char *why, size_t wn)
{
    json_error_t je;
    memset(p, 0, sizeof *p);
    p->root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!p->root) {
        snprintf(why, wn, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return GW_PARSE_BAD_JSON;
    }
    return parse_request(p, p->root, why, wn) ? GW_PARSE_BAD_VALUE : GW_PARSE_OK;
}

/* Packs the request with the stream's id into s->packed. */
static int pack_into(struct gw_stream *s, Smollm3__GenerateRequest *g)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req.request_id = s->rid;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    s->packed_len = smollm3__request__get_packed_size(&req);
    s->packed = malloc(s->packed_len ? s->packed_len : 1);
    if (!s->packed) return -1;
    smollm3__request__pack(&req, s->packed);
    return 0;
}

int gw_pack_generate(struct gw_stream *s, Smollm3__GenerateRequest *g)
{
    return pack_into(s, g);
}

/* ---- the endpoint ------------------------------------------------------- */

enum MHD_Result gw_openai_chat(struct gw_req *r)
{
    struct gw_openai_parsed p;
    char why[256];
    int rc = gw_openai_parse(&p, r->body.p ? r->body.p : "", r->body.len, why, sizeof why);
    if (rc) {
        gw_openai_parsed_deinit(&p);
        return gw_queue_error(r, 400, "invalid_request_error",
                              rc == GW_PARSE_BAD_JSON ? "invalid_json" : "invalid_value", "%s", why);
    }
    if (!G.daemon_connected || !G.daemon_ready) {
        gw_openai_parsed_deinit(&p);
        return gw_queue_error(r, 503, "server_error", "daemon_unavailable",
                              "the inference daemon is not %s",
                              G.daemon_connected ? "ready" : "connected");
    }
    if (G.n_inflight >= G.cfg.max_inflight) {
        gw_openai_parsed_deinit(&p);
        return gw_queue_error(r, 429, "rate_limit_error", "too_many_requests",
                              "too many requests in flight (limit %u)", G.cfg.max_inflight);
    }
    struct gw_stream *s = gw_stream_new(p.stream ? GW_OPENAI_SSE : GW_OPENAI_JSON);
    int bad = !s || pack_into(s, &p.gen);
    int include_usage = p.include_usage;
    gw_openai_parsed_deinit(&p);
    if (bad) {
        gw_stream_free(s);
        return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    }
    s->include_usage = include_usage;
    snprintf(s->id, sizeof s->id, "chatcmpl-");
    gw_random_alnum(s->id + 9, 24);
    s->created = (long long)time(NULL);
    s->req = r;
    r->stream = s;
    r->waiting = 1;
    if (gw_daemon_send_stream(s)) {
        r->waiting = 0;
        r->stream = NULL;
        s->req = NULL;
        gw_stream_free(s);
        return gw_queue_error(r, 503, "server_error", "daemon_unavailable",
                              "the inference daemon is not reachable");
    }
    return gw_req_wait(r);
}

enum MHD_Result gw_openai_models(struct gw_req *r)
{
    json_t *m = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", G.model,
                          "object", "model", "created", (json_int_t)0, "owned_by", "smollm3d");
    return gw_queue_json(r, 200, m);
}

/* ---- events → chunks ---------------------------------------------------- */

static void emit_chunk(struct gw_stream *s, json_t *delta, const char *finish)
{
    json_t *choice = json_pack("{s:i,s:o,s:n}", "index", 0, "delta", delta, "logprobs");
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", s->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)s->created, "model",
                          G.model, "choices", choice);
    char *txt = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!txt) return;
    gw_buf_printf(&s->out, "data: %s\n\n", txt);
    free(txt);
}

static json_t *usage_json(const struct gw_stream *s)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i}}", "prompt_tokens", (int)s->prompt_tokens,
                     "completion_tokens", (int)s->completion_tokens, "total_tokens",
                     (int)(s->prompt_tokens + s->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (int)s->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (int)s->reasoning_tokens);
}

static const char *openai_finish(const char *f)
{
    if (!f || !strcmp(f, "cancelled")) return "stop";
    return f;
}

void gw_openai_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    int sse = s->kind == GW_OPENAI_SSE;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
        if (sse) emit_chunk(s, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL);
        break;
    case SMOLLM3__EVENT__KIND_TOKEN: {
        const char *t = ev->token->text;
        if (!t || !*t) break;
        int reasoning = ev->token->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING;
        if (sse) emit_chunk(s, json_pack("{s:s}", reasoning ? "reasoning_content" : "content", t),
                            NULL);
        else gw_buf_str(reasoning ? &s->reasoning : &s->content, t);
        break;
    }
    case SMOLLM3__EVENT__KIND_TOOL_CALL: {
        Smollm3__ToolCall *tc = ev->tool_call;
        json_t *call = json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", (int)tc->index, "id",
                                 tc->id ? tc->id : "", "type", "function", "function", "name",
                                 tc->name ? tc->name : "", "arguments",
                                 tc->arguments_json ? tc->arguments_json : "");
        if (sse) {
            emit_chunk(s, json_pack("{s:[o]}", "tool_calls", call), NULL);
        } else {
            if (!s->tool_calls) s->tool_calls = json_array();
            json_object_del(call, "index");
            json_array_append_new(s->tool_calls, call);
        }
        break;
    }
    case SMOLLM3__EVENT__KIND_DONE:
        if (!sse) break;
        emit_chunk(s, json_object(), openai_finish(s->finish));
        if (s->include_usage) {
            json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", s->id, "object",
                                  "chat.completion.chunk", "created", (json_int_t)s->created,
                                  "model", G.model, "choices", "usage", usage_json(s));
            char *txt = json_dumps(c, JSON_COMPACT);
            json_decref(c);
            if (txt) gw_buf_printf(&s->out, "data: %s\n\n", txt);
            free(txt);
        }
        gw_buf_str(&s->out, "data: [DONE]\n\n");
        s->ended = 1;
        break;
    default:
        break;
    }
}

/* An error after the response started: SSE error chunk then [DONE]. */
void gw_openai_error(struct gw_stream *s, const char *code, const char *msg)
{
    if (s->kind == GW_OPENAI_SSE) {
        const char *type;
        int st = 500;
        for (int c = 1; c < SMOL_ERR_COUNT; c++)
            if (!strcmp(smol_client_error_name(c), code)) st = gw_http_status_of(c, &type);
        json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                              st == 429 ? "rate_limit_error" : st >= 500 ? "server_error"
                                                                         : "invalid_request_error",
                              "code", code);
        char *txt = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        if (txt) gw_buf_printf(&s->out, "data: %s\n\n", txt);
        free(txt);
        gw_buf_str(&s->out, "data: [DONE]\n\n");
    } else {
        s->err_status = 503;
        snprintf(s->err_code, sizeof s->err_code, "%s", code);
        snprintf(s->err_msg, sizeof s->err_msg, "%s", msg);
    }
    s->ended = 1;
}

/* Non-streaming: the finished answer as one chat.completion. */
enum MHD_Result gw_openai_finish_json(struct gw_req *r, struct gw_stream *s)
{
    json_t *msg = json_pack("{s:s,s:s}", "role", "assistant", "content",
                            s->content.p ? s->content.p : "");
    if (s->reasoning.len) json_object_set_new(msg, "reasoning_content", json_string(s->reasoning.p));
    if (s->tool_calls) json_object_set(msg, "tool_calls", s->tool_calls);
    json_t *body = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:o}", "id", s->id, "object",
                             "chat.completion", "created", (json_int_t)s->created, "model",
                             G.model, "choices", "index", 0, "message", msg, "logprobs",
                             "finish_reason", openai_finish(s->finish), "usage", usage_json(s));
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    return gw_queue_json(r, 200, body);
}
