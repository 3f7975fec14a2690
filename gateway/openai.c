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
#include "gateway/openai.h"
#include "gateway/fields.h"
#include "gateway/structured.h"
#include "gateway/params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- request parsing ---------------------------------------------------- */

static char *own(struct gw_openai_parsed *p, char *s)
{
    return gw_own(&p->strs, s);
}

void gw_openai_parsed_deinit(struct gw_openai_parsed *p)
{
    gw_owned_free(&p->strs);
    free(p->msgs);
    free(p->msgp);
    gw_params_deinit(&p->prm);
    json_decref(p->root);
    p->root = NULL;             /* the scalars of prm stay readable */
}

/* A refusal (params.h's convention) with code (FAILC) or SMOL_EINVAL (FAIL),
 * naming key; the message also goes to why. */
#define FAILC(code, key, ...)                                                 \
    do {                                                                      \
        gw_error_set(&p->prm.err, code, key, __VA_ARGS__);                    \
        snprintf(why, wn, "%s", p->prm.err.msg);                              \
        return -1;                                                            \
    } while (0)
#define FAIL(key, ...) FAILC(SMOL_EINVAL, key, __VA_ARGS__)
/* A rule of daemon/model/rules.h: call writes its message into m_. */
#define RULE(key, call)                                                       \
    do {                                                                      \
        char m_[SMOL_ERRLEN];                                                 \
        enum smol_err e_ = (call);                                            \
        if (e_) FAILC(e_, key, "%s", m_);                                     \
    } while (0)


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
                FAILC(SMOL_EUNSUPPORTED, "messages", "messages[%d].content[%zu]: only text parts are supported", i, k);
            }
            gw_buf_str(&b, json_string_value(t));
        }
        if (!b.p) gw_buf_add(&b, "", 0);
        if (!(*out = own(p, b.p))) FAILC(SMOL_ENOMEM, "", "out of memory");
        return 0;
    }
    FAIL("messages", "messages[%d].content must be a string, an array of parts or null", i);
}

static int parse_messages(struct gw_openai_parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs)) FAIL("messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(msgs), prompt_bytes = 0;
    RULE("messages", smol_rule_messages(n, m_));
    p->msgs = calloc(n, sizeof *p->msgs);
    p->msgp = calloc(n, sizeof *p->msgp);
    if (!p->msgs || !p->msgp) FAILC(SMOL_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        Smollm3__ChatMessage *cm = &p->msgs[i];
        smollm3__chat_message__init(cm);
        p->msgp[i] = cm;
        if (!json_is_object(m)) FAIL("messages", "messages[%zu] must be an object", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "tool") && strcmp(role, "developer")))
            FAIL("messages", "messages[%zu].role must be system, user, assistant or tool", i);
        cm->role = (char *)(strcmp(role, "developer") ? role : "system");
        const char *content;
        if (content_of(p, json_object_get(m, "content"), &content, why, wn, (int)i)) return -1;
        cm->content = (char *)content;
        prompt_bytes += strlen(content);
        json_t *rc = json_object_get(m, "reasoning_content");
        if (!rc || json_is_null(rc)) rc = json_object_get(m, "reasoning");
        if (rc && !json_is_null(rc)) {
            if (!json_is_string(rc)) FAIL("messages", "messages[%zu].reasoning_content must be a string", i);
            cm->reasoning_content = (char *)json_string_value(rc);
            prompt_bytes += strlen(cm->reasoning_content);
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) FAIL("messages", "messages[%zu].tool_calls must be an array", i);
            if (!(cm->tool_calls_json = own(p, json_dumps(tc, JSON_COMPACT)))) FAILC(SMOL_ENOMEM, "", "out of memory");
        }
        const char *fields[] = { "tool_call_id", "name" };
        for (int f = 0; f < 2; f++) {
            json_t *x = json_object_get(m, fields[f]);
            if (x && !json_is_null(x) && !json_is_string(x))
                FAIL("messages", "messages[%zu].%s must be a string", i, fields[f]);
            if (x && json_is_string(x)) {
                if (f == 0) cm->tool_call_id = (char *)json_string_value(x);
                else cm->name = (char *)json_string_value(x);
            }
        }
    }
    RULE("messages", smol_rule_prompt_bytes(prompt_bytes, m_));
    p->chat.n_messages = n;
    p->chat.messages = p->msgp;
    p->chat.append_to_session = 0;
    return 0;
}

/* tools, tool_choice ("auto": the model chooses; "none": the tools are not
 * rendered, so the model cannot see or call them; "required" and a named
 * function {"type": "function", "function": {"name": ..}}: the daemon
 * constrains the answer to tool calls whose arguments match the tool's
 * parameters), parallel_tool_calls (true only). */
static int parse_tools(struct gw_openai_parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) FAIL("tools", "'tools' must be an array");
    json_t *tc = json_object_get(root, "tool_choice");
    int none = 0;
    const char *forced = NULL;      /* "required" or the function's name */
    if (tc && !json_is_null(tc)) {
        const char *v = json_string_value(tc);
        if (v && !strcmp(v, "none")) none = 1;
        else if (v && !strcmp(v, "auto")) none = 0;
        else if (v && !strcmp(v, "required")) forced = "required";
        else if (json_is_object(tc)) {
            json_t *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !name)
                FAIL("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}");
            RULE("tool_choice", smol_rule_tool_name(name, "tool_choice.function.name", m_));
            forced = name;
        } else FAIL("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or an object");
    }
    GW_FIELD_REFUSE(gw_field_forced_needs_tools(forced, json_is_array(tools) ? json_array_size(tools) : 0, &p->prm.err));
    if (forced && !(p->prm.gen.tool_choice = own(p, strdup(forced)))) FAILC(SMOL_ENOMEM, "tool_choice", "out of memory");
    GW_FIELD_REFUSE(gw_field_parallel_tool_calls(root, &p->prm.err));
    /* the tools the daemon gets (none: not rendered, not sent) obey its limit */
    if (json_is_array(tools) && !none) RULE("tools", smol_rule_tools(json_array_size(tools), m_));
    if (gw_field_tools(&p->prm.gen, &p->chat, &p->strs, tools, NULL, none)) FAILC(SMOL_ENOMEM, "tools", "out of memory");
    return 0;
}

/* Thinking: chat_template_kwargs.enable_thinking and reasoning_effort
 * ("none" / "minimal" -> off, the others -> on) must agree when both come;
 * the effort sets the thinking budget (gw_effort_budget).  Thinking asked of
 * a model without the mode is a 400 (gw_field_thinking_supported). */
static int parse_thinking(struct gw_openai_parsed *p, json_t *root, char *why, size_t wn)
{
    Smollm3__GenerateRequest *g = &p->prm.gen;
    json_t *x = json_object_get(root, "chat_template_kwargs");
    int has = 0, on = 1;
    if (x && !json_is_null(x)) {
        const char *k;
        json_t *v;
        if (!json_is_object(x)) FAIL("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        json_object_foreach(x, k, v) {
            if (strcmp(k, "enable_thinking"))
                FAILC(SMOL_EUNSUPPORTED, "chat_template_kwargs", "'chat_template_kwargs.%.40s' is not supported (only enable_thinking)", k);
            if (json_is_null(v)) continue;
            if (!json_is_boolean(v))
                FAIL("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
            has = 1;
            on = json_is_true(v);
        }
    }
    x = gw_get(root, "reasoning_effort");
    unsigned budget = 0;
    if (x) {
        int want;
        GW_FIELD_REFUSE(gw_field_effort(x, "reasoning_effort", "reasoning_effort", 1, &want, &budget, &p->prm.err));
        if (has && want != on)
            FAIL("reasoning_effort", "'reasoning_effort' \"%s\" contradicts chat_template_kwargs.enable_thinking: %s",
                 json_string_value(x), on ? "true" : "false");
        has = 1;
        on = want;
    }
    if (has)
        GW_FIELD_REFUSE(gw_field_thinking_supported(on, G.thinking, x ? "reasoning_effort" : "chat_template_kwargs."
                                                    "enable_thinking", x ? "reasoning_effort" : "chat_template_kwargs",
                                                    &p->prm.err));
    if (has) gw_field_thinking(g, on, budget);
    return 0;
}

static int parse_request(struct gw_openai_parsed *p, json_t *root, char *why, size_t wn)
{
    smollm3__chat_input__init(&p->chat);
    if (gw_params_parse(&p->prm, root, GW_API_CHAT, G.cfg.ignore_unknown, why, wn)) return -1;
    Smollm3__GenerateRequest *g = &p->prm.gen;
    if (parse_messages(p, root, why, wn) || parse_tools(p, root, why, wn) ||
        parse_thinking(p, root, why, wn))
        return -1;
    g->input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    g->chat = &p->chat;

    json_t *x = json_object_get(root, "modalities");
    if (x && !json_is_null(x)) {
        size_t k;
        json_t *m;
        if (!json_is_array(x)) FAIL("modalities", "'modalities' must be an array");
        json_array_foreach(x, k, m)
            if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
                FAILC(SMOL_EUNSUPPORTED, "modalities", "'modalities' may only hold \"text\"");
    }
    x = json_object_get(root, "session_id");
    if (x && !json_is_null(x)) {
        const char *sid = json_string_value(x);
        RULE("session_id", smol_rule_session_id(sid ? sid : "", "session_id", m_));
        g->session_id = (char *)sid;
        if (g->n > 1) FAIL("n", "'n' > 1 cannot be combined with 'session_id'");
    }
    char *owned = NULL;
    if (gw_structured_parse(g, root, &owned, &p->prm.err)) {
        free(owned);
        snprintf(why, wn, "%s", p->prm.err.msg);
        return -1;
    }
    if (owned && !own(p, owned)) FAILC(SMOL_ENOMEM, "", "out of memory");
    return 0;
}

#undef FAIL

/* ---- the endpoint ------------------------------------------------------- */

int gw_openai_parse(struct gw_openai_parsed *p, const char *body, size_t len, char *why, size_t wn)
{
    json_error_t je;
    memset(p, 0, sizeof *p);
    p->root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!p->root) {
        gw_error_json(&p->prm.err, &je);
        snprintf(why, wn, "%s", p->prm.err.msg);
        return -1;
    }
    return parse_request(p, p->root, why, wn) ? -1 : 0;
}

enum MHD_Result gw_openai_chat(struct gw_req *r)
{
    struct gw_openai_parsed p;
    char why[256];
    if (gw_openai_parse(&p, r->body.p ? r->body.p : "", r->body.len, why, sizeof why)) {
        enum MHD_Result ret = gw_queue_gw_error(r, &p.prm.err);
        gw_openai_parsed_deinit(&p);
        return ret;
    }
    enum MHD_Result ret = gw_openai_start(r, GW_API_CHAT, &p.prm);
    gw_openai_parsed_deinit(&p);
    return ret;
}

/* Sends prm's request (its storage may go after) as a new OpenAI stream of
 * api (chat or completions) and waits for the daemon. */
enum MHD_Result gw_openai_start(struct gw_req *r, int api, const struct gw_params *prm)
{
    enum MHD_Result ret;
    if (!gw_core_admit(r, &ret)) return ret;
    struct gw_stream *s = gw_core_stream(r, &gw_proto_openai, prm->stream ? GW_OPENAI_SSE : GW_OPENAI_JSON,
                                         (Smollm3__GenerateRequest *)&prm->gen, prm->gen.n > 1 ? (int)prm->gen.n : 1,
                                         api == GW_API_CHAT ? "chatcmpl-" : "cmpl-", 24, "completion", &ret);
    if (!s) return ret;
    s->api = api;
    s->include_usage = prm->include_usage;
    s->logprobs = prm->logprobs;
    return gw_req_send(r, s);
}

enum MHD_Result gw_openai_models(struct gw_req *r)
{
    json_t *m = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", G.model,
                          "object", "model", "created", (json_int_t)0, "owned_by", "smollm3d");
    return gw_queue_json(r, 200, m);
}

/* ---- logprobs ------------------------------------------------------------ */

/* JSON has no -inf: a banned token reports -9999, as OpenAI does. */
static double finite_lp(float v)
{
    return v > -9999.0f ? (double)v : -9999.0;
}

/* The token's text: its bytes as UTF-8, an invalid sequence (part of a
 * character split across tokens) as U+FFFD; "bytes" has the exact ones. */
static json_t *piece_str(const ProtobufCBinaryData *b)
{
    struct gw_buf t = { 0 };
    gw_utf8_lossy(&t, b->data, b->len);
    json_t *j = json_string(t.p ? t.p : "");
    gw_buf_deinit(&t);
    return j;
}

static json_t *piece_bytes(const ProtobufCBinaryData *b)
{
    json_t *a = json_array();
    for (size_t i = 0; i < b->len; i++) json_array_append_new(a, json_integer(b->data[i]));
    return a;
}

/* Chat: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}, and
 * "id", the token id, as llama.cpp's server adds it. */
static json_t *chat_lp_entry(const Smollm3__Token *t)
{
    json_t *top = json_array();
    for (size_t i = 0; i < t->n_top_logprobs; i++) {
        const Smollm3__TopLogprob *x = t->top_logprobs[i];
        json_array_append_new(top, json_pack("{s:i,s:o,s:f,s:o}", "id", (int)x->token_id, "token",
                                             piece_str(&x->piece), "logprob", finite_lp(x->logprob), "bytes",
                                             piece_bytes(&x->piece)));
    }
    return json_pack("{s:i,s:o,s:f,s:o,s:o}", "id", (int)t->token_id, "token", piece_str(&t->piece), "logprob",
                     finite_lp(t->logprob), "bytes", piece_bytes(&t->piece), "top_logprobs", top);
}

/* Completions: appends one token to {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
static void comp_lp_add(json_t *lp, const Smollm3__Token *t, size_t offset)
{
    json_array_append_new(json_object_get(lp, "tokens"), piece_str(&t->piece));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(finite_lp(t->logprob)));
    json_t *top = json_object();
    for (size_t i = 0; i < t->n_top_logprobs; i++) {
        const Smollm3__TopLogprob *x = t->top_logprobs[i];
        json_t *k = piece_str(&x->piece);
        if (!json_object_get(top, json_string_value(k)))
            json_object_set_new(top, json_string_value(k), json_real(finite_lp(x->logprob)));
        json_decref(k);
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *comp_lp_new(void)
{
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* ---- events → chunks ---------------------------------------------------- */

/* o with the service tier the request was scheduled in (OpenAI echoes it
 * in every chunk and in the completion). */
static json_t *with_tier(const struct gw_stream *s, json_t *o)
{
    if (o) json_object_set_new(o, "service_tier", json_string(gw_field_service_tier_name(s->tier, 0)));
    return o;
}

static void emit_json(struct gw_stream *s, json_t *c)
{
    char *txt = json_dumps(c, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(c);
    if (!txt) return;
    gw_buf_printf(&s->out, "data: %s\n\n", txt);
    free(txt);
}

/* One chunk with one choice (index ci): chat (delta) or completions
 * (text); lp is the choice's logprobs (NULL: null), consumed. */
static void emit_chunk(struct gw_stream *s, int ci, json_t *delta, const char *text, json_t *lp,
                       const char *finish)
{
    json_t *choice;
    if (s->api == GW_API_COMPLETIONS) {
        json_decref(delta);
        choice = json_pack("{s:i,s:s}", "index", ci, "text", text ? text : "");
    } else {
        choice = json_pack("{s:i,s:o}", "index", ci, "delta", delta);
    }
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    emit_json(s, with_tier(s, json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", s->id, "object",
                                        s->api == GW_API_COMPLETIONS ? "text_completion" : "chat.completion.chunk",
                                        "created", (json_int_t)s->created, "model", G.model, "choices", choice)));
}

static json_t *usage_json(const struct gw_stream *s)
{
    /* OpenAI's predicted-output counts only for a request's `prediction`
     * (drafts taken from it, accepted / rejected by verification; 0
     * without one); the daemon's own drafting in the x_smollm3 extension */
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i,s:i,s:i},s:{s:i,s:i,s:i}}", "prompt_tokens", (int)s->prompt_tokens,
                     "completion_tokens", (int)s->completion_tokens, "total_tokens",
                     (int)(s->prompt_tokens + s->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (int)s->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (int)s->reasoning_tokens, "accepted_prediction_tokens",
                     (int)s->pred_accepted, "rejected_prediction_tokens", (int)s->pred_rejected,
                     "x_smollm3", "drafted_tokens", (int)s->drafted_tokens, "accepted_draft_tokens",
                     (int)s->accepted_tokens, "decode_steps", (int)s->decode_steps);
}

static const char *openai_finish(const char *f)
{
    if (!f || !strcmp(f, "cancelled")) return "stop";
    return f;
}

static void on_token(struct gw_stream *s, const Smollm3__Token *tk, int sse)
{
    if (tk->choice >= (uint32_t)s->n_choices) return;
    const int ci = (int)tk->choice;
    struct gw_choice *c = &s->ch[ci];
    s->cur_choice = ci;
    const char *t = tk->text ? tk->text : "";
    int with_lp = s->logprobs && tk->token_id >= 0 &&
                  tk->logprob_opt_case == SMOLLM3__TOKEN__LOGPROB_OPT_LOGPROB;
    int reasoning = tk->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING;
    if (s->api == GW_API_COMPLETIONS) {         /* raw text: both channels are the text */
        if (sse) {
            if (!*t && !with_lp) return;
            json_t *lp = NULL;
            if (with_lp) comp_lp_add(lp = comp_lp_new(), tk, c->text_offset);
            emit_chunk(s, ci, NULL, t, lp, NULL);
        } else if (with_lp) {
            if (!c->lp) c->lp = comp_lp_new();
            comp_lp_add(c->lp, tk, c->text_offset);
        }
        c->text_offset += strlen(t);
        if (!sse) gw_buf_str(&c->content, t);
        return;
    }
    if (sse) {
        if (!*t && !with_lp) return;
        json_t *delta = *t ? json_pack("{s:s}", reasoning ? "reasoning_content" : "content", t) : json_object();
        emit_chunk(s, ci, delta, NULL, with_lp ? json_pack("{s:[o]}", "content", chat_lp_entry(tk)) : NULL, NULL);
        return;
    }
    if (with_lp) {
        if (!c->lp) c->lp = json_array();
        json_array_append_new(c->lp, chat_lp_entry(tk));
    }
    gw_buf_str(reasoning ? &c->reasoning : &c->content, t);
}

void gw_openai_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    int sse = s->kind == GW_OPENAI_SSE;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
        if (sse && s->api == GW_API_CHAT)
            for (int i = 0; i < s->n_choices; i++)
                emit_chunk(s, i, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL, NULL);
        break;
    case SMOLLM3__EVENT__KIND_TOKEN:
        on_token(s, ev->token, sse);
        break;
    case SMOLLM3__EVENT__KIND_TOOL_CALL: {
        Smollm3__ToolCall *tc = ev->tool_call;
        if (s->api == GW_API_COMPLETIONS) break;    /* the engine parses no tags in raw text */
        struct gw_choice *c = &s->ch[s->cur_choice];
        json_t *call = json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", (int)tc->index, "id",
                                 tc->id ? tc->id : "", "type", "function", "function", "name",
                                 tc->name ? tc->name : "", "arguments",
                                 tc->arguments_json ? tc->arguments_json : "");
        if (sse) {
            emit_chunk(s, s->cur_choice, json_pack("{s:[o]}", "tool_calls", call), NULL, NULL, NULL);
        } else {
            if (!c->tool_calls) c->tool_calls = json_array();
            json_object_del(call, "index");
            json_array_append_new(c->tool_calls, call);
        }
        break;
    }
    case SMOLLM3__EVENT__KIND_DONE: {
        uint32_t ci = ev->done->usage ? ev->done->usage->choice : 0;
        if (ci >= (uint32_t)s->n_choices) break;
        s->ch[ci].finish = openai_finish(smol_client_finish_name(ev->done->finish_reason));
        if (!sse) break;
        emit_chunk(s, (int)ci, json_object(), "", NULL, s->ch[ci].finish);
        if (!s->terminal) break;                    /* other choices still running */
        if (s->include_usage)
            emit_json(s, with_tier(s, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", s->id, "object",
                                                s->api == GW_API_COMPLETIONS ? "text_completion"
                                                                             : "chat.completion.chunk",
                                                "created", (json_int_t)s->created, "model", G.model, "choices",
                                                "usage", usage_json(s))));
        gw_buf_str(&s->out, "data: [DONE]\n\n");
        s->ended = 1;
        break;
    }
    default:
        break;
    }
}

/* An error after the response started: SSE error chunk then [DONE]. */
void gw_openai_error(struct gw_stream *s, const struct gw_error *e)
{
    if (s->kind == GW_OPENAI_SSE) {
        json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", e->msg, "type", e->type, "code", e->code);
        char *txt = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (txt) gw_buf_printf(&s->out, "data: %s\n\n", txt);
        free(txt);
        gw_buf_str(&s->out, "data: [DONE]\n\n");
    } else {
        s->err = *e;
    }
    s->ended = 1;
}

/* Non-streaming: the finished answer as one chat.completion / text_completion. */
enum MHD_Result gw_openai_finish_json(struct gw_req *r, struct gw_stream *s)
{
    json_t *choices = json_array();
    for (int i = 0; i < s->n_choices; i++) {
        struct gw_choice *c = &s->ch[i];
        const char *fin = c->finish ? c->finish : openai_finish(s->finish);
        if (s->api == GW_API_COMPLETIONS) {
            json_t *lp = s->logprobs ? (c->lp ? json_incref(c->lp) : comp_lp_new()) : json_null();
            json_array_append_new(choices, json_pack("{s:i,s:s,s:o,s:s}", "index", i, "text",
                                                     c->content.p ? c->content.p : "", "logprobs", lp,
                                                     "finish_reason", fin));
        } else {
            json_t *msg = json_pack("{s:s,s:s}", "role", "assistant", "content", c->content.p ? c->content.p : "");
            if (c->reasoning.len) json_object_set_new(msg, "reasoning_content", json_string(c->reasoning.p));
            if (c->tool_calls) json_object_set(msg, "tool_calls", c->tool_calls);
            json_t *lp = s->logprobs ? json_pack("{s:o}", "content", c->lp ? json_incref(c->lp) : json_array())
                                     : json_null();
            json_array_append_new(choices, json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message", msg, "logprobs",
                                                     lp, "finish_reason", fin));
        }
    }
    json_t *body = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", s->id, "object",
                             s->api == GW_API_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                             (json_int_t)s->created, "model", G.model, "choices", choices, "usage", usage_json(s));
    with_tier(s, body);
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    return gw_queue_json(r, 200, body);
}

const struct gw_proto gw_proto_openai = { "openai", gw_openai_event, gw_openai_error, gw_openai_finish_json, NULL };
