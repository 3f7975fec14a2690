/*
 * fuzz_gateway.c - libFuzzer harness for smollm3-gateway's request parsing:
 * what a client's HTTP body becomes before anything reaches the daemon.
 * The first input byte picks the target, the rest is the body:
 *
 *   0  POST /v1/chat/completions: gw_openai_parse (jansson, every field's
 *      type and range, content parts, tools, stops, session_id) -> the
 *      GenerateRequest, packed as the gateway sends it and unpacked again
 *   1  POST /ui/chat: gw_ui_parse (form decoding in place, ids, UTF-8,
 *      think, temperature, the history JSON) -> the same round trip, and the
 *      user message through gw_buf_html as the fragment echoes it
 *   2  gw_buf_html on raw bytes (every user/model text the UI sees), and the
 *      UI stream's event of it and of the raw bytes (gw_buf_sse_event)
 *   3  POST /v1/messages: gw_anthropic_parse (blocks -> chat messages, tools
 *      -> function tools, tool_choice, thinking, stop_sequences) -> the
 *      same round trip
 *   4  POST /v1/messages/count_tokens: the same parser, its own field set
 *   5  POST /v1/responses: gw_responses_parse (input items -> chat messages,
 *      function_call -> tool_calls JSON, tools in chat's shape, text.format,
 *      reasoning) -> the same invariants and round trip as 0
 *
 * A crash, a sanitizer report or a leak is a bug; a refusal is expected and
 * must come with a reason.  An accepted request must keep the invariants
 * the daemon side relies on (checked with __builtin_trap): at least one
 * message, known roles, stops <= 16 and non-empty, ranges of temperature /
 * top_p / penalties / max_tokens, session ids of [A-Za-z0-9_.:-], and the
 * packed bytes unpack to the same messages.  HTML output holds no raw
 * < > " ' CR and every & starts one of the six entities; an SSE event is one
 * event: `event: NAME`, `data: ` lines, one blank line at its end, no CR.
 *
 * The parsers do no I/O: every other gateway function is a stub here that
 * traps if it is ever called.  Build and run: tests/fuzz/run_gateway.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/anthropic.h"
#include "gateway/openai.h"
#include "gateway/responses.h"
#include "gateway/structured.h"
#include "gateway/ui.h"

/* ---- the rest of the gateway: never called by the parsers ---------------- */
struct gw G;
#define NEVER { __builtin_trap(); }
void gw_daemon_drain(void) NEVER
int gw_daemon_send_stream(struct gw_stream *s) NEVER
int gw_daemon_send_follow(struct gw_stream *s, Smollm3__Request *req) NEVER
enum MHD_Result gw_queue_error(struct gw_req *r, int status, const char *type, const char *code,
                               const char *fmt, ...) NEVER
enum MHD_Result gw_queue_error_param(struct gw_req *r, int status, const char *type, const char *code,
                                     const char *param, const char *fmt, ...) NEVER
enum MHD_Result gw_queue_json(struct gw_req *r, int status, json_t *body) NEVER
enum MHD_Result gw_queue_sse(struct gw_req *r, struct gw_stream *s) NEVER
enum MHD_Result gw_queue_text(struct gw_req *r, int status, const char *ctype, const char *text,
                              size_t len) NEVER
enum MHD_Result gw_req_wait(struct gw_req *r) NEVER
enum MHD_Result gw_req_send(struct gw_req *r, struct gw_stream *s) NEVER
void gw_daemon_cancel(struct gw_stream *s) NEVER
int gw_daemon_send_cancel(struct gw_stream *s) NEVER
void gw_stream_route(struct gw_stream *s, const Smollm3__GenerateRequest *g) NEVER
enum MHD_Result gw_queue_gw_error(struct gw_req *r, const struct gw_error *e) NEVER
void gw_stream_fail(struct gw_stream *s, const struct gw_error *e) NEVER
void gw_stream_free(struct gw_stream *s) NEVER
struct gw_stream *gw_stream_new(enum gw_kind kind) NEVER
void gw_req_resume(struct gw_req *r) NEVER
void gw_stream_hold(struct gw_stream *s) NEVER
int gw_daemon_fits(const struct gw_stream *s) NEVER
void gw_metrics_refusal(enum gw_refusal why, int key) NEVER
void gw_metrics_store_evicted(void) NEVER
const char *gw_auth_tenant(int i) NEVER
int gw_auth_n_keys(void) NEVER
int gw_auth_n_live(void) NEVER
unsigned gw_auth_max_inflight(int i, unsigned total) NEVER
int gw_auth_max_tier(int i) NEVER
unsigned gw_stream_inflight_of(int key) NEVER
const char *MHD_lookup_connection_value(struct MHD_Connection *c, enum MHD_ValueKind k, const char *key) NEVER
int gw_oom_in_request(void) { return 0; }
const char *smol_client_error_name(int code) NEVER
const char *smol_client_finish_name(int finish_reason) NEVER
enum smol_err smol_client_send_cancel(struct smol_client *c, uint64_t target_id, uint64_t *id_out,
                                      char *err) NEVER

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static int role_ok(const char *r)
{
    return r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
                 !strcmp(r, "tool"));
}

/* No raw < > " ' CR and every & begins one of the entities gw_buf_html writes. */
static void check_html(const char *s, size_t n)
{
    static const char *const ent[] = { "&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#13;" };
    for (size_t i = 0; i < n; i++) {
        CHECK(s[i] != '<' && s[i] != '>' && s[i] != '"' && s[i] != '\'' && s[i] != '\r');
        if (s[i] == '&') {
            int ok = 0;
            for (int e = 0; e < 6 && !ok; e++) ok = !strncmp(s + i, ent[e], strlen(ent[e]));
            CHECK(ok);
        }
    }
}

/* data as one UI stream event (ui.c's ui_emit): it must stay one event whatever the bytes, as an
 * SSE parser reads it (CR, LF and CRLF end lines): `event: content`, then only `data: ` lines,
 * no CR, the one blank line at the end; its data lines hold the bytes but for the line ends. */
static void sse_of(const char *s, size_t n)
{
    struct gw_buf b = { 0 };
    if (gw_buf_sse_event(&b, "content", s, n) == 0 && b.p) {
        static const char head[] = "event: content\n";
        CHECK(b.len >= sizeof head - 1 + 8 && !memcmp(b.p, head, sizeof head - 1));
        CHECK(b.p[b.len - 1] == '\n' && b.p[b.len - 2] == '\n');
        CHECK(!memchr(b.p, '\r', b.len));
        size_t kept = 0, lines = 0, crlf = 0, breaks = 0;
        for (size_t i = sizeof head - 1; i < b.len - 1; lines++) {
            CHECK(!strncmp(b.p + i, "data: ", 6));
            const char *nl = memchr(b.p + i, '\n', b.len - i);
            kept += (size_t)(nl - (b.p + i)) - 6;
            i = (size_t)(nl - b.p) + 1;
        }
        for (size_t i = 0; i < n; i++) {
            breaks += s[i] == '\r' || s[i] == '\n';
            crlf += s[i] == '\r' && i + 1 < n && s[i + 1] == '\n';
        }
        CHECK(kept == n - breaks);              /* every byte but the line ends is kept */
        CHECK(lines == breaks - crlf + 1);      /* a data: line per line (CRLF one end) */
    }
    gw_buf_deinit(&b);
}

static void html_of(const char *s, size_t n)
{
    struct gw_buf b = { 0 };
    if (gw_buf_html(&b, s, n) == 0 && b.p) {
        CHECK(b.len >= n);
        check_html(b.p, b.len);
        sse_of(b.p, b.len);
    }
    gw_buf_deinit(&b);
}

/* Packs g as the gateway does (a Request with an id) and unpacks it again. */
static void round_trip(Smollm3__GenerateRequest *g)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req.request_id = 42;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    size_t n = smollm3__request__get_packed_size(&req);
    uint8_t *buf = malloc(n ? n : 1);
    CHECK(buf);
    CHECK(smollm3__request__pack(&req, buf) == n);
    Smollm3__Request *u = smollm3__request__unpack(NULL, n, buf);
    CHECK(u && u->kind_case == SMOLLM3__REQUEST__KIND_GENERATE && u->request_id == 42);
    Smollm3__GenerateRequest *ug = u->generate;
    CHECK(ug->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_CHAT);
    CHECK(ug->chat->n_messages == g->chat->n_messages);
    for (size_t i = 0; i < g->chat->n_messages; i++) {
        CHECK(!strcmp(ug->chat->messages[i]->role, g->chat->messages[i]->role));
        CHECK(!strcmp(ug->chat->messages[i]->content, g->chat->messages[i]->content));
    }
    CHECK(ug->n_stop == g->n_stop);
    CHECK(!strcmp(ug->session_id, g->session_id));
    smollm3__request__free_unpacked(u, NULL);
    free(buf);
}

static void check_sampling(const Smollm3__SamplingParams *s)
{
    if (s->temperature_opt_case) CHECK(s->temperature >= 0 && s->temperature <= 2);
    if (s->top_p_opt_case) CHECK(s->top_p >= 0 && s->top_p <= 1);
    if (s->presence_penalty_opt_case) CHECK(s->presence_penalty >= -2 && s->presence_penalty <= 2);
    if (s->frequency_penalty_opt_case) CHECK(s->frequency_penalty >= -2 && s->frequency_penalty <= 2);
}

static void fuzz_openai(const char *body, size_t n)
{
    struct gw_openai_parsed p;
    char why[256] = "";
    int rc = gw_openai_parse(&p, body, n, why, sizeof why);
    if (rc) {
        /* one error convention: a refusal carries its status, type and code */
        const struct gw_error *e = &p.prm.err;
        CHECK(rc == -1 && why[0] && e->msg[0] && e->type && e->code);
        CHECK(e->status == 400 || e->status == 413 || e->status == 503);
    } else {
        Smollm3__GenerateRequest *g = &p.prm.gen;
        CHECK(g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_CHAT && g->chat);
        CHECK(g->chat->n_messages >= 1 && g->chat->n_messages <= SMOL_RULE_MAX_MESSAGES);
        for (size_t i = 0; i < g->chat->n_messages; i++) {
            CHECK(role_ok(g->chat->messages[i]->role));
            CHECK(g->chat->messages[i]->content);
        }
        CHECK(g->n_stop <= GW_OPENAI_MAX_STOPS);
        for (size_t i = 0; i < g->n_stop; i++) CHECK(g->stop[i] && g->stop[i][0]);
        CHECK(g->max_tokens <= SMOL_RULE_MAX_TOKENS);
        for (size_t i = 0; i < g->n_stop; i++) CHECK(strlen(g->stop[i]) <= SMOL_RULE_STOP_MAX_LEN);
        check_sampling(g->sampling);
        if (g->session_id && g->session_id[0]) {
            size_t len = strlen(g->session_id);
            CHECK(len <= 128);
            for (size_t i = 0; i < len; i++) {
                char c = g->session_id[i];
                CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      strchr("_-.:", c));
            }
        } else {
            g->session_id = "";
        }
        round_trip(g);
    }
    gw_openai_parsed_deinit(&p);
}

static void check_responses(Smollm3__GenerateRequest *g)
{
    CHECK(g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_CHAT && g->chat);
    CHECK(g->chat->n_messages >= 1);
    for (size_t i = 0; i < g->chat->n_messages; i++) {
        Smollm3__ChatMessage *m = g->chat->messages[i];
        CHECK(role_ok(m->role) && m->content);
        CHECK(strcmp(m->role, "system") || i == 0);     /* the template has one system block */
        if (m->tool_calls_json && m->tool_calls_json[0]) {
            json_t *tc = json_loads(m->tool_calls_json, 0, NULL);
            CHECK(json_is_array(tc) && !strcmp(m->role, "assistant"));
            json_decref(tc);
        }
    }
    if (g->chat->tools_json && g->chat->tools_json[0]) {
        json_t *t = json_loads(g->chat->tools_json, 0, NULL);
        CHECK(json_is_array(t));
        json_decref(t);
    }
    CHECK(g->max_tokens <= 1000000);
    check_sampling(g->sampling);
    if (!g->session_id) g->session_id = "";
    round_trip(g);
}

static void fuzz_responses(const char *body, size_t n)
{
    char why[320] = "", param[64];
    if (gw_responses_parse(body, n, check_responses, param, sizeof param, why, sizeof why)) CHECK(why[0]);
}

static void fuzz_ui(const uint8_t *data, size_t n)
{
    char *body = malloc(n + 1);         /* decoded in place; body[n] becomes NUL */
    CHECK(body);
    memcpy(body, data, n);
    struct gw_ui_parsed p;
    struct gw_error e;
    if (gw_ui_parse(&p, body, n, &e)) {
        CHECK(e.status == 400 || e.status == 413 || e.status == 503);
        CHECK(e.msg[0] && e.type && e.code);
    } else {
        Smollm3__GenerateRequest *g = &p.gen;
        size_t k = g->chat->n_messages;
        CHECK(k >= 1);
        CHECK(!strcmp(g->chat->messages[k - 1]->role, "user"));
        CHECK(g->chat->messages[k - 1]->content == p.message);
        CHECK(p.message_len >= 1 && p.message_len <= 64 * 1024 && strlen(p.message) == p.message_len);
        for (size_t i = 0; i < k; i++) CHECK(role_ok(g->chat->messages[i]->role));
        CHECK(!strncmp(g->session_id, "ui-", 3) && strlen(g->session_id) <= 3 + 64);
        check_sampling(g->sampling);
        round_trip(g);
        html_of(p.message, p.message_len);
    }
    gw_ui_parsed_deinit(&p);
    free(body);
}

/* Whether the tools JSON the parser wrote names `name` (function tools). */
static int tools_name(const char *tools_json, const char *name)
{
    json_t *t = json_loads(tools_json, 0, NULL);
    int found = 0;
    size_t i;
    json_t *x;
    CHECK(json_is_array(t) && json_array_size(t) >= 1);
    json_array_foreach(t, i, x) {
        json_t *fn = json_object_get(x, "function");
        CHECK(!strcmp(json_string_value(json_object_get(x, "type")), "function") && json_is_object(fn));
        CHECK(json_is_string(json_object_get(fn, "name")) && json_is_object(json_object_get(fn, "parameters")));
        found |= !strcmp(json_string_value(json_object_get(fn, "name")), name);
    }
    json_decref(t);
    return found;
}

static void fuzz_anthropic(const char *body, size_t n, enum gw_anthropic_ep ep)
{
    struct gw_anthropic_parsed p;
    char why[256] = "";
    int rc = gw_anthropic_parse(&p, body, n, ep, why, sizeof why);
    if (rc) {
        CHECK(rc == GW_AN_BAD_JSON || rc == GW_AN_BAD_VALUE);
        CHECK(why[0]);
    } else {
        Smollm3__GenerateRequest *g = &p.prm.gen;
        CHECK(g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_CHAT && g->chat);
        size_t k = g->chat->n_messages;
        CHECK(k >= 1 && k <= 16384 + 1);
        for (size_t i = 0; i < k; i++) {
            const Smollm3__ChatMessage *m = g->chat->messages[i];
            CHECK(role_ok(m->role) && m->content);
            CHECK(strcmp(m->role, "system") || i == 0);     /* one system turn, first */
            if (!strcmp(m->role, "tool")) CHECK(m->tool_call_id && m->tool_call_id[0]);
            if (m->tool_calls_json && m->tool_calls_json[0]) {     /* [{id, type, function: {name, arguments}}] */
                json_t *a = json_loads(m->tool_calls_json, 0, NULL);
                size_t j;
                json_t *c;
                CHECK(!strcmp(m->role, "assistant") && json_is_array(a) && json_array_size(a) >= 1);
                json_array_foreach(a, j, c) {
                    json_t *args = json_loads(json_string_value(json_object_get(json_object_get(c, "function"),
                                                                                "arguments")), 0, NULL);
                    CHECK(json_is_object(args));
                    json_decref(args);
                }
                json_decref(a);
            }
        }
        CHECK(strcmp(g->chat->messages[k - 1]->role, "assistant"));
        CHECK(g->n_stop <= GW_MAX_STOPS);
        for (size_t i = 0; i < g->n_stop; i++) CHECK(g->stop[i] && g->stop[i][0]);
        CHECK(ep == GW_AN_MESSAGES ? g->max_tokens >= 1 && g->max_tokens <= 1000000 : g->max_tokens == 0);
        const Smollm3__SamplingParams *s = g->sampling;
        if (s->temperature_opt_case) CHECK(s->temperature >= 0 && s->temperature <= 1);
        if (s->top_p_opt_case) CHECK(s->top_p > 0 && s->top_p <= 1);
        if (s->top_k_opt_case) CHECK(s->top_k >= 0);
        CHECK(g->enable_thinking_opt_case == SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING);
        if (g->tool_choice && g->tool_choice[0]) {
            CHECK(g->chat->tools_json && g->chat->tools_json[0]);
            CHECK(!strcmp(g->tool_choice, "required") || tools_name(g->chat->tools_json, g->tool_choice));
        }
        if (g->chat->tools_json && g->chat->tools_json[0]) tools_name(g->chat->tools_json, "");
        round_trip(g);
    }
    gw_anthropic_parsed_deinit(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t sel = data[0] % 6;
    data++;
    size--;
    if (sel == 0) fuzz_openai((const char *)data, size);
    else if (sel == 1) fuzz_ui(data, size);
    else if (sel == 2) {
        html_of((const char *)data, size);
        sse_of((const char *)data, size);
    }
    else if (sel == 5) fuzz_responses((const char *)data, size);
    else fuzz_anthropic((const char *)data, size, sel == 3 ? GW_AN_MESSAGES : GW_AN_COUNT_TOKENS);
    return 0;
}
