/*
 * ui.c - the web UI's endpoints (gateway/UI_API.md): POST /ui/chat returns
 * an HTMX fragment naming a stream id; GET /ui/stream/SID claims the stream,
 * sends the Generate and relays named SSE events (reasoning, content, error,
 * done); POST /ui/stop/SID cancels; GET /ui/config.
 *
 * The form's sampling fields (temperature, top_p, max_tokens) keep the same
 * rules as the OpenAI endpoint's (daemon/model/rules.h).
 *
 * Every text that came from a user or the model is HTML-escaped before it
 * leaves here.  A stream id can be claimed once: a second GET (an
 * EventSource reconnect) is 404, so a generation never restarts.  Streams
 * nobody claims within 30 s are dropped (gw_ui_expire).
 *
 * A stream is its key's (gw_stream.tenant): a GET or stop that presents
 * another key gets the 404 of an unknown id, byte for byte.  It counts in
 * the in-flight limit from its creation (it holds its packed request and will
 * be sent when claimed), and the streams nobody claimed yet are capped in all
 * (--ui-unclaimed-max) and per key (--ui-unclaimed-per-key): one client
 * cannot park memory here, nor take the daemon past --max-inflight later.
 */
#include "gateway/ui.h"
#include "gateway/auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define UI_MAX_MESSAGE (64 * 1024)
#define UI_UNCLAIMED_S 30.0

/* ---- form parsing ------------------------------------------------------- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes application/x-www-form-urlencoded in place; returns the length. */
static size_t url_decode(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') s[o++] = ' ';
        else if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            s[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else s[o++] = s[i];
    }
    s[o] = 0;
    return o;
}

struct form {
    char *conversation, *history, *message, *think, *temperature, *top_p, *max_tokens, *system;
    size_t message_len, system_len;
};

static void form_parse(struct form *f, char *body, size_t n)
{
    char *p = body, *end = body + n;
    while (p < end) {
        char *amp = memchr(p, '&', (size_t)(end - p));
        if (!amp) amp = end;
        *amp = 0;
        char *eq = strchr(p, '=');
        if (eq) {
            *eq = 0;
            char *v = eq + 1;
            size_t vl = url_decode(v, (size_t)(amp - v));
            url_decode(p, strlen(p));
            if (!strcmp(p, "conversation")) f->conversation = v;
            else if (!strcmp(p, "history")) f->history = v;
            else if (!strcmp(p, "message")) { f->message = v; f->message_len = vl; }
            else if (!strcmp(p, "think")) f->think = v;
            else if (!strcmp(p, "temperature")) f->temperature = v;
            else if (!strcmp(p, "top_p")) f->top_p = v;
            else if (!strcmp(p, "max_tokens")) f->max_tokens = v;
            else if (!strcmp(p, "system")) { f->system = v; f->system_len = vl; }
        }
        p = amp + 1;
    }
}

static enum MHD_Result html_error(struct gw_req *r, int status, const char *msg)
{
    struct gw_buf b = { 0 };
    gw_buf_str(&b, "<div class=\"msg error\">");
    gw_buf_html(&b, msg, strlen(msg));
    gw_buf_str(&b, "</div>\n");
    enum MHD_Result ret = gw_queue_text(r, status, "text/html; charset=utf-8", b.p, b.len);
    gw_buf_deinit(&b);
    return ret;
}

static int valid_id(const char *s, size_t lo, size_t hi, int allow_punct)
{
    size_t n = s ? strlen(s) : 0;
    if (n < lo || n > hi) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (allow_punct && (c == '_' || c == '-'))))
            return 0;
    }
    return 1;
}

/* ---- POST /ui/chat ------------------------------------------------------ */

/* An optional numeric field: absent or empty leaves *out; else it must parse whole and keep
 * its rule (daemon/model/rules.h), as the OpenAI endpoint's field of the same name does. */
static int form_number(const char *v, enum smol_rule_num which, const char *field, double *out,
                       struct gw_error *e)
{
    char m[SMOL_ERRLEN], *end;
    if (!v || !*v) return 0;
    double x = strtod(v, &end);
    if (*end) return gw_error_set(e, SMOL_EINVAL, field, "'%s' must be a number", field);
    if (smol_rule_number(which, x, field, m)) return gw_error_set(e, SMOL_EINVAL, field, "%s", m);
    *out = x;
    return 0;
}

void gw_ui_parsed_deinit(struct gw_ui_parsed *p)
{
    free(p->msgs);
    free(p->msgp);
    json_decref(p->hist);
    memset(p, 0, sizeof *p);
}

int gw_ui_parse(struct gw_ui_parsed *p, char *body, size_t n, struct gw_error *e)
{
    struct form f = { 0 };
    char m[SMOL_ERRLEN];
    memset(p, 0, sizeof *p);
    memset(e, 0, sizeof *e);
    form_parse(&f, body, n);
    if (!valid_id(f.conversation, 1, 64, 1))
        return gw_error_set(e, SMOL_EINVAL, "conversation", "invalid conversation id");
    if (!f.message || !f.message_len)
        return gw_error_set(e, SMOL_EINVAL, "message", "the message must be non-empty UTF-8 text");
    if (smol_rule_text(f.message, f.message_len, "message", m))
        return gw_error_set(e, SMOL_EUTF8, "message", "the message must be non-empty UTF-8 text");
    if (f.message_len > UI_MAX_MESSAGE)
        return gw_error_set(e, SMOL_ETOOLARGE, "message",
                            "the message is too long: %zu bytes, the limit is %d bytes (%d KiB; UTF-8 bytes, not "
                            "characters)", f.message_len, UI_MAX_MESSAGE, UI_MAX_MESSAGE / 1024);
    if (f.system && smol_rule_text(f.system, f.system_len, "system", m))
        return gw_error_set(e, SMOL_EUTF8, "system", "the system prompt must be UTF-8 text");
    int think = 1;
    if (f.think) {
        if (!strcmp(f.think, "1")) think = 1;
        else if (!strcmp(f.think, "0")) think = 0;
        else return gw_error_set(e, SMOL_EINVAL, "think", "think must be 1 or 0");
    }
    double temp = 0.6;
    if (f.temperature && *f.temperature) {
        char *end;
        temp = strtod(f.temperature, &end);
        if (*end || smol_rule_number(SMOL_RULE_TEMPERATURE, temp, "temperature", m))
            return gw_error_set(e, SMOL_EINVAL, "temperature", "temperature must be in [0, 2]");
    }
    double top_p = -1, max_tokens = 0;     /* not sent: the daemon's defaults */
    if (form_number(f.top_p, SMOL_RULE_TOP_P, "top_p", &top_p, e) ||
        form_number(f.max_tokens, SMOL_RULE_MAX_TOKENS_FIELD, "max_tokens", &max_tokens, e))
        return -1;
    json_error_t je;
    p->hist = json_loads(f.history && *f.history ? f.history : "[]", JSON_REJECT_DUPLICATES, &je);
    if (!json_is_array(p->hist)) return gw_error_set(e, SMOL_EINVAL, "history", "history must be a JSON array");
    size_t nh = json_array_size(p->hist), nm = nh + 2, k = 0;
    if (smol_rule_messages(nm, m)) return gw_error_set(e, SMOL_EINVAL, "history", "%s", m);
    p->msgs = calloc(nm, sizeof *p->msgs);
    p->msgp = calloc(nm, sizeof *p->msgp);
    if (!p->msgs || !p->msgp) return gw_error_set(e, SMOL_ENOMEM, NULL, "out of memory");
    Smollm3__ChatMessage *msgs = p->msgs;
    if (f.system && *f.system) {
        smollm3__chat_message__init(&msgs[k]);
        msgs[k].role = "system";
        msgs[k].content = f.system;
        k++;
    }
    for (size_t i = 0; i < nh; i++) {
        json_t *m = json_array_get(p->hist, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !content || (strcmp(role, "user") && strcmp(role, "assistant")))
            return gw_error_set(e, SMOL_EINVAL, "history", "history entries must be {role: user|assistant, content}");
        smollm3__chat_message__init(&msgs[k]);
        msgs[k].role = (char *)role;
        msgs[k].content = (char *)content;
        k++;
    }
    smollm3__chat_message__init(&msgs[k]);
    msgs[k].role = "user";
    msgs[k].content = f.message;
    k++;
    for (size_t i = 0; i < k; i++) p->msgp[i] = &msgs[i];
    p->message = f.message;
    p->message_len = f.message_len;

    snprintf(p->session, sizeof p->session, "ui-%s", f.conversation);
    smollm3__chat_input__init(&p->chat);
    p->chat.n_messages = k;
    p->chat.messages = p->msgp;
    smollm3__sampling_params__init(&p->sampling);
    p->sampling.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    p->sampling.temperature = (float)temp;
    if (top_p >= 0) {
        p->sampling.top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
        p->sampling.top_p = (float)top_p;
    }
    smollm3__generate_request__init(&p->gen);
    p->gen.session_id = p->session;
    p->gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    p->gen.chat = &p->chat;
    p->gen.sampling = &p->sampling;
    p->gen.max_tokens = (uint32_t)max_tokens;
    p->gen.enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
    p->gen.enable_thinking = think;
    return 0;
}

/* Streams nobody has claimed yet: in all, and key's. */
static void unclaimed(int key, unsigned *all, unsigned *mine)
{
    *all = *mine = 0;
    for (struct gw_stream *s = G.streams; s; s = s->next)
        if (s->kind == GW_UI && !s->req && !s->sent) {
            ++*all;
            *mine += s->key == key;
        }
}

unsigned gw_ui_unclaimed_count(void)
{
    unsigned all, mine;
    unclaimed(GW_AUTH_NONE, &all, &mine);
    return all;
}

/* NULL when a new stream of key's may wait to be claimed; else the refusal (429), counted. */
static const char *admit_unclaimed(int key)
{
    if (G.n_inflight >= G.cfg.max_inflight) {
        gw_metrics_refusal(GW_REFUSE_INFLIGHT, key);
        return "too many requests: try again shortly";
    }
    if (key >= 0 && gw_stream_inflight_of(key) >= gw_auth_max_inflight(key, G.cfg.max_inflight)) {
        gw_metrics_refusal(GW_REFUSE_INFLIGHT_KEY, key);
        return "too many requests for this API key: try again shortly";
    }
    unsigned all, mine;
    unclaimed(key, &all, &mine);
    if (all >= G.cfg.ui_unclaimed_max) {
        gw_metrics_refusal(GW_REFUSE_UI_UNCLAIMED, key);
        return "too many chats waiting to be read: try again shortly";
    }
    if (key >= 0 && mine >= G.cfg.ui_unclaimed_per_key) {
        gw_metrics_refusal(GW_REFUSE_UI_UNCLAIMED_KEY, key);
        return "too many of your chats are waiting to be read: open them, or try again shortly";
    }
    return NULL;
}

/* s belongs to the request's key, or the request presents no valid key (a browser's EventSource
 * cannot send one: the SID admits it, auth.c); another valid key's request is refused. */
static int owns(const struct gw_req *r, const struct gw_stream *s)
{
    return r->key == GW_AUTH_NONE || !strcmp(s->tenant, gw_auth_tenant(r->key));
}

enum MHD_Result gw_ui_chat(struct gw_req *r)
{
    struct gw_ui_parsed p;
    struct gw_error e;
    if (!r->body.p) gw_buf_add(&r->body, "", 0);
    if (gw_ui_parse(&p, r->body.p, r->body.len, &e)) {
        gw_ui_parsed_deinit(&p);
        return html_error(r, e.status, e.msg);
    }
    if (gw_oom_in_request()) {   /* the form or its history may have been parsed without bytes */
        gw_ui_parsed_deinit(&p);
        return html_error(r, 500, "out of memory");
    }
    if (!G.daemon_connected || !G.daemon_ready) {
        gw_ui_parsed_deinit(&p);
        return html_error(r, 503, "the model is not available right now");
    }
    const char *full = admit_unclaimed(r->key);
    if (full) {
        gw_ui_parsed_deinit(&p);
        return html_error(r, 429, full);
    }
    struct gw_stream *s = gw_stream_new(GW_UI);
    if (s) {
        s->proto = &gw_proto_ui;
        s->key = r->key;
        s->tenant = gw_auth_tenant(r->key);
        gw_stream_hold(s);
    }
    if (!s || gw_pack_generate(s, &p.gen)) {
        gw_stream_free(s);
        gw_ui_parsed_deinit(&p);
        return html_error(r, 500, "out of memory");
    }
    if (!gw_daemon_fits(s)) {
        gw_stream_free(s);
        gw_ui_parsed_deinit(&p);
        return html_error(r, 413, "the conversation is too long for the model server");
    }
    if (gw_random_alnum(s->sid, 24)) {  /* the id admits its holder to the stream: never a guessable one */
        gw_log(3, "ui: no randomness for a stream id (getrandom: %s): request refused", strerror(errno));
        gw_stream_free(s);
        gw_ui_parsed_deinit(&p);
        return html_error(r, 503, "the server cannot make a stream id right now: try again shortly");
    }

    struct gw_buf b = { 0 };
    gw_buf_str(&b, "<div class=\"msg user\" data-role=\"user\">");
    gw_buf_html(&b, p.message, p.message_len);
    gw_ui_parsed_deinit(&p);
    gw_buf_printf(&b,
        "</div>\n"
        "<div class=\"msg assistant\" data-role=\"assistant\" data-stream=\"%s\"\n"
        "     hx-ext=\"sse\" sse-connect=\"/ui/stream/%s\" sse-close=\"done\">\n"
        "  <details class=\"thinking\"><summary>Thinking</summary>\n"
        "    <div class=\"reasoning\" sse-swap=\"reasoning\" hx-swap=\"beforeend\"></div></details>\n"
        "  <div class=\"content\" sse-swap=\"content\" hx-swap=\"beforeend\"></div>\n"
        "  <div class=\"error\" sse-swap=\"error\" hx-swap=\"innerHTML\"></div>\n"
        "  <button class=\"stop\" hx-post=\"/ui/stop/%s\" hx-swap=\"none\">Stop</button>\n"
        "</div>\n", s->sid, s->sid, s->sid);
    enum MHD_Result ret = gw_queue_text(r, 200, "text/html; charset=utf-8", b.p, b.len);
    gw_buf_deinit(&b);
    return ret;
}

/* ---- streams ------------------------------------------------------------ */

struct gw_stream *gw_ui_find(const char *sid)
{
    if (!sid || !*sid) return NULL;
    for (struct gw_stream *s = G.streams; s; s = s->next)
        if (s->kind == GW_UI && !strcmp(s->sid, sid)) return s;
    return NULL;
}

/* One named event; a payload with line breaks becomes several data: lines (gw_buf_sse_event:
 * CRLF, LF and a lone CR each end one, as the client's SSE parser reads them). */
static void ui_emit(struct gw_stream *s, const char *name, const char *data, size_t n)
{
    gw_buf_sse_event(&s->out, name, data, n);
}

static void ui_emit_html(struct gw_stream *s, const char *name, const char *text)
{
    struct gw_buf b = { 0 };
    gw_buf_html(&b, text, strlen(text));
    ui_emit(s, name, b.p ? b.p : "", b.len);
    gw_buf_deinit(&b);
}

static void ui_done(struct gw_stream *s, const char *finish)
{
    json_t *d = json_pack("{s:s,s:{s:i,s:i,s:i,s:i,s:i}}", "finish_reason", finish, "usage",
                          "prompt_tokens", (int)s->prompt_tokens, "completion_tokens",
                          (int)s->completion_tokens, "total_tokens",
                          (int)(s->prompt_tokens + s->completion_tokens), "cached_tokens",
                          (int)s->cached_tokens, "reasoning_tokens", (int)s->reasoning_tokens);
    char *txt = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    ui_emit(s, "done", txt ? txt : "{}", txt ? strlen(txt) : 2);
    free(txt);
    s->ended = 1;
}

void gw_ui_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_TOKEN:
        if (ev->token->text && *ev->token->text)
            ui_emit_html(s, ev->token->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING
                                ? "reasoning" : "content", ev->token->text);
        break;
    case SMOLLM3__EVENT__KIND_TOOL_CALL: {
        struct gw_buf b = { 0 };
        gw_buf_printf(&b, "\n[tool call %s(%s)]\n", ev->tool_call->name ? ev->tool_call->name : "",
                      ev->tool_call->arguments_json ? ev->tool_call->arguments_json : "");
        ui_emit_html(s, "content", b.p);
        gw_buf_deinit(&b);
        break;
    }
    case SMOLLM3__EVENT__KIND_DONE:
        ui_done(s, s->finish ? s->finish : "stop");
        break;
    default:
        break;
    }
}

void gw_ui_error(struct gw_stream *s, const char *msg)
{
    ui_emit_html(s, "error", msg);
    ui_done(s, "error");
}

enum MHD_Result gw_ui_stream(struct gw_req *r, const char *sid)
{
    struct gw_stream *s = gw_ui_find(sid);
    if (!s || !owns(r, s) || s->req || s->sent || s->ended)
        return gw_queue_error(r, 404, "not_found_error", "unknown_stream",
                              "unknown or already claimed stream");
    s->req = r;
    r->stream = s;
    s->last_write = smol_mono_s();
    if (!G.daemon_connected || !G.daemon_ready) {
        s->terminal = 1;
        gw_ui_error(s, "the model is not available right now");
    } else if (gw_daemon_send_stream(s)) {
        s->terminal = 1;
        gw_ui_error(s, "the inference daemon is not reachable");
    }
    return gw_queue_sse(r, s);
}

enum MHD_Result gw_ui_stop(struct gw_req *r, const char *sid)
{
    struct gw_stream *s = gw_ui_find(sid);
    if (!s || !owns(r, s)) return gw_queue_error(r, 404, "not_found_error", "unknown_stream", "unknown stream");
    if (!s->sent && !s->req) {
        gw_stream_free(s);      /* never claimed: nothing runs */
    } else if (s->sent && !s->terminal) {
        /* not terminal yet: the daemon's done(cancelled) ends the stream */
        if (gw_daemon_send_cancel(s)) {
            struct gw_error e;
            gw_error_http(&e, 503, "server_error", "daemon_unavailable", NULL, "the inference daemon is not reachable");
            gw_stream_fail(s, &e);
        }
        gw_daemon_drain();
    }
    return gw_queue_text(r, 204, "text/plain", "", 0);
}

enum MHD_Result gw_ui_config(struct gw_req *r)
{
    /* context_length: the daemon's, from its last stats reply (0 until the first, 2 s after connecting) */
    return gw_queue_json(r, 200, json_pack("{s:s,s:b,s:f,s:i}", "model", G.model,
                                           "thinking_supported", G.thinking, "default_temperature", 0.6,
                                           "context_length", G.have_stats ? (int)G.stats.context_length : 0));
}

/* ---- GET /ui/sessions, /ui/sessions/CONV ---------------------------------- */

/* With API keys on, the conversations kept by the daemon for the request's key: the list
 * (its sessions named ui-CONV) and one conversation's messages (what the daemon recorded
 * after its last turn: SessionInfo.messages_json), so another browser with the same key
 * can show and continue it.  With keys off there is no shared list ({"shared": false}):
 * each browser keeps its own, and one visitor never sees another's.  One daemon reply,
 * kept in s->reply as the JSON body (a GW_QUERY stream, as /tokenize's). */
static void sessions_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    if (ev->kind_case == SMOLLM3__EVENT__KIND_SESSIONS) {
        json_t *a = json_array();
        for (size_t i = 0; ev->sessions && i < ev->sessions->n_sessions; i++) {
            const Smollm3__SessionInfo *si = ev->sessions->sessions[i];
            if (!si->session_id || strncmp(si->session_id, "ui-", 3) || !valid_id(si->session_id + 3, 1, 64, 1))
                continue;
            json_array_append_new(a, json_pack("{s:s,s:i,s:f,s:b}", "id", si->session_id + 3, "tokens",
                                               (int)si->tokens, "idle_s", si->idle_s, "busy", si->busy));
        }
        s->reply = json_pack("{s:b,s:o}", "shared", 1, "conversations", a);
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_SESSION) {
        const Smollm3__SessionInfo *si = ev->session;
        json_t *all = si->messages_json && *si->messages_json ? json_loads(si->messages_json, 0, NULL) : NULL;
        json_t *out = json_array();
        for (size_t i = 0; i < json_array_size(all); i++) {     /* user and assistant turns, as the UI keeps them */
            json_t *m = json_array_get(all, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            json_t *content = json_object_get(m, "content");
            if (role && json_is_string(content) && (!strcmp(role, "user") || !strcmp(role, "assistant")))
                json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", content));
        }
        json_decref(all);
        s->reply = json_pack("{s:s,s:i,s:o}", "id", si->session_id ? si->session_id + 3 : "", "tokens",
                             (int)si->tokens, "messages", out);
    } else {
        gw_error_http(&s->err, 500, "server_error", "internal", NULL, "unexpected reply from the daemon");
    }
}

static enum MHD_Result sessions_finish(struct gw_req *r, struct gw_stream *s)
{
    json_t *body = s->reply ? json_incref(s->reply) : NULL;
    struct gw_error e = s->err;
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    if (!body) return gw_queue_gw_error(r, &e);
    return gw_queue_json(r, 200, body);
}

static const struct gw_proto ui_sessions_proto = { "ui-sessions", sessions_event, NULL, sessions_finish, NULL };

enum MHD_Result gw_ui_sessions(struct gw_req *r, const char *conv)
{
    enum MHD_Result ret;
    if (r->key < 0)             /* keys off (GW_AUTH_OPEN): each browser keeps its own list */
        return gw_queue_json(r, 200, json_pack("{s:b,s:[]}", "shared", 0, "conversations"));
    if (*conv && !valid_id(conv, 1, 64, 1))
        return gw_queue_error(r, 404, "not_found_error", "unknown_session", "unknown conversation");
    char sid[80];
    snprintf(sid, sizeof sid, "ui-%s", conv);
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    Smollm3__SessionGetRequest get = SMOLLM3__SESSION_GET_REQUEST__INIT;
    Smollm3__SessionListRequest list = SMOLLM3__SESSION_LIST_REQUEST__INIT;
    if (*conv) {
        get.session_id = sid;
        get.tenant = (char *)gw_auth_tenant(r->key);
        req.kind_case = SMOLLM3__REQUEST__KIND_SESSION_GET;
        req.session_get = &get;
    } else {
        list.tenant = (char *)gw_auth_tenant(r->key);
        req.kind_case = SMOLLM3__REQUEST__KIND_SESSION_LIST;
        req.session_list = &list;
    }
    if (!gw_core_admit(r, &ret)) return ret;
    struct gw_stream *s = gw_stream_new(GW_QUERY);
    if (!s) return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    s->proto = &ui_sessions_proto;
    req.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req.request_id = s->rid;
    s->packed_len = smollm3__request__get_packed_size(&req);
    s->packed = malloc(s->packed_len ? s->packed_len : 1);
    if (!s->packed) {
        gw_stream_free(s);
        return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    }
    smollm3__request__pack(&req, s->packed);
    return gw_req_send(r, s);
}

void gw_ui_expire(double now)
{
    struct gw_stream *s = G.streams, *next;
    for (; s; s = next) {
        next = s->next;
        if (s->kind == GW_UI && !s->req && !s->sent && now - s->born > UI_UNCLAIMED_S)
            gw_stream_free(s);
    }
}

/* ---- the encoder ------------------------------------------------------------------ */

static void ui_error(struct gw_stream *s, const struct gw_error *e)
{
    gw_ui_error(s, e->msg);
}

const struct gw_proto gw_proto_ui = { "ui", gw_ui_event, ui_error, NULL, NULL };
