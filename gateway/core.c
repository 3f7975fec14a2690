/*
 * core.c - the protocol-independent core of the gateway's generating
 * endpoints (core.h): shared storage and field rules, admission, the
 * stream that carries a request to the daemon, the hand-off of its events
 * to the protocol's encoder.
 */
#include "gateway/core.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- storage ----------------------------------------------------------------- */

char *gw_own(struct gw_owned *o, char *s)
{
    if (!s) return NULL;
    char **n = realloc(o->v, (o->n + 1) * sizeof *n);
    if (!n) {
        free(s);
        return NULL;
    }
    o->v = n;
    o->v[o->n++] = s;
    return s;
}

void gw_owned_free(struct gw_owned *o)
{
    for (size_t i = 0; i < o->n; i++) free(o->v[i]);
    free(o->v);
    o->v = NULL;
    o->n = 0;
}

json_t *gw_get(json_t *o, const char *key)
{
    json_t *x = json_object_get(o, key);
    return x && !json_is_null(x) ? x : NULL;
}

/* ---- shared field rules ---------------------------------------------------------- */

int gw_tool_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

int gw_core_tools(Smollm3__GenerateRequest *g, Smollm3__ChatInput *chat, struct gw_owned *o, json_t *tools,
                  const char *forced, int none)
{
    if (forced && !(g->tool_choice = gw_own(o, strdup(forced)))) return -1;
    if (json_is_array(tools) && json_array_size(tools) && !none &&
        !(chat->tools_json = gw_own(o, json_dumps(tools, JSON_COMPACT))))
        return -1;
    return 0;
}

int gw_core_parallel_tool_calls(json_t *root, struct gw_error *e)
{
    json_t *ptc = gw_get(root, "parallel_tool_calls");
    if (!ptc) return 0;
    if (!json_is_boolean(ptc))
        return gw_error_set(e, SMOL_EINVAL, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (json_is_false(ptc))
        return gw_error_set(e, SMOL_EUNSUPPORTED, "parallel_tool_calls",
                            "'parallel_tool_calls': false is not supported (the model may call several tools in "
                            "one answer)");
    return 0;
}

int gw_core_forced_needs_tools(const char *forced, size_t n_tools, struct gw_error *e)
{
    if (forced && !n_tools)
        return gw_error_set(e, SMOL_EINVAL, "tool_choice", "'tool_choice' \"%.64s\" needs a non-empty 'tools' list",
                            forced);
    return 0;
}

int gw_core_service_tier(json_t *root, const char *other_tier, struct gw_error *e)
{
    json_t *x = gw_get(root, "service_tier");
    if (x && (!json_is_string(x) ||
              (strcmp(json_string_value(x), "auto") && strcmp(json_string_value(x), other_tier))))
        return gw_error_set(e, SMOL_EINVAL, "service_tier",
                            "'service_tier' must be \"auto\" or \"%s\" (there is one tier)", other_tier);
    return 0;
}

int gw_core_effort(json_t *v, const char *key, const char *param, int with_max, int *on, unsigned *budget,
                   struct gw_error *e)
{
    static const char *const levels[] = { "none", "minimal", "low", "medium", "high", "xhigh", "max" };
    const int n = with_max ? 7 : 6;
    const char *s = json_string_value(v);
    int lvl = -1;
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, levels[i])) lvl = i;
    if (lvl < 0)
        return gw_error_set(e, SMOL_EINVAL, param, "'%s' must be one of none, minimal, low, medium, high, xhigh%s",
                            key, with_max ? ", max" : "");
    *on = lvl >= 2;
    *budget = gw_effort_budget(s);
    return 0;
}

int gw_core_model(json_t *root, struct gw_error *e)
{
    json_t *x = gw_get(root, "model");
    if (x && !json_is_string(x)) return gw_error_set(e, SMOL_EINVAL, "model", "'model' must be a string");
    return 0;
}

int gw_core_stream_flag(json_t *root, int *on, struct gw_error *e)
{
    json_t *x = gw_get(root, "stream");
    if (x && !json_is_boolean(x)) return gw_error_set(e, SMOL_EINVAL, "stream", "'stream' must be a boolean");
    *on = json_is_true(x);
    return 0;
}

int gw_core_max_tokens(json_t *x, const char *key, Smollm3__GenerateRequest *g, struct gw_error *e)
{
    if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 1000000)
        return gw_error_set(e, SMOL_EINVAL, key, "'%s' must be an integer in [1, 1000000]", key);
    g->max_tokens = (uint32_t)json_integer_value(x);
    return 0;
}

int gw_core_temperature(json_t *x, double hi, Smollm3__SamplingParams *sp, struct gw_error *e)
{
    if (!json_is_number(x) || !(json_number_value(x) >= 0 && json_number_value(x) <= hi))
        return gw_error_set(e, SMOL_EINVAL, "temperature", "'temperature' must be a number in [0, %g]", hi);
    sp->temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    sp->temperature = (float)json_number_value(x);
    return 0;
}

int gw_core_top_p(json_t *x, Smollm3__SamplingParams *sp, struct gw_error *e)
{
    if (!json_is_number(x) || !(json_number_value(x) > 0 && json_number_value(x) <= 1))
        return gw_error_set(e, SMOL_EINVAL, "top_p", "'top_p' must be a number in (0, 1]");
    sp->top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
    sp->top_p = (float)json_number_value(x);
    return 0;
}

void gw_core_json_object(Smollm3__GenerateRequest *g)
{
    g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_OBJECT;
    g->json_object = 1;
}

int gw_core_json_schema(Smollm3__GenerateRequest *g, struct gw_owned *o, json_t *schema)
{
    char *s = gw_own(o, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!s) return -1;
    g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
    g->json_schema = s;
    return 0;
}

void gw_core_thinking(Smollm3__GenerateRequest *g, int on, unsigned budget)
{
    g->enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
    g->enable_thinking = on;
    if (budget) g->thinking_budget = budget;
}

/* ---- one path to the daemon ------------------------------------------------------- */

enum MHD_Result gw_core_refuse(struct gw_req *r, int bad_json, const char *param, const char *why)
{
    return gw_queue_error_param(r, 400, "invalid_request_error", bad_json ? "invalid_json" : "invalid_value",
                                bad_json ? NULL : param, "%s", why);
}

int gw_core_admit(struct gw_req *r, enum MHD_Result *ret)
{
    if (!G.daemon_connected || !G.daemon_ready) {
        *ret = gw_queue_error(r, 503, "server_error", "daemon_unavailable", "the inference daemon is not %s",
                              G.daemon_connected ? "ready" : "connected");
        return 0;
    }
    if (G.n_inflight >= G.cfg.max_inflight) {
        gw_metrics_refusal(GW_REFUSE_INFLIGHT, r->key);
        *ret = gw_queue_error(r, 429, "rate_limit_error", "too_many_requests",
                              "too many requests in flight (limit %u)", G.cfg.max_inflight);
        return 0;
    }
    return 1;
}

int gw_pack_generate(struct gw_stream *s, Smollm3__GenerateRequest *g)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req.request_id = s->rid;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    g->tenant = (char *)s->tenant;      /* sessions and cached prefixes are the key's own (auth.c) */
    s->packed_len = smollm3__request__get_packed_size(&req);
    s->packed = malloc(s->packed_len ? s->packed_len : 1);
    if (!s->packed) return -1;
    smollm3__request__pack(&req, s->packed);
    return 0;
}

struct gw_stream *gw_core_stream(struct gw_req *r, const struct gw_proto *proto, enum gw_kind kind,
                                 Smollm3__GenerateRequest *g, int n_choices, const char *prefix, int idlen,
                                 const char *noun, enum MHD_Result *ret)
{
    struct gw_stream *s = gw_stream_new(kind);
    if (s) {
        s->proto = proto;
        s->key = r->key;
        s->tenant = gw_auth_tenant(r->key);
    }
    if (!s || gw_pack_generate(s, g) || !(s->ch = calloc((size_t)n_choices, sizeof *s->ch))) {
        gw_stream_free(s);
        *ret = gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
        return NULL;
    }
    s->n_choices = n_choices;
    size_t pl = strlen(prefix);
    if (pl + (size_t)idlen >= sizeof s->id) idlen = (int)(sizeof s->id - pl - 1);
    memcpy(s->id, prefix, pl);
    if (gw_random_alnum(s->id + pl, (size_t)idlen)) {
        gw_log(3, "%s: no randomness for a %s id (getrandom: %s): request refused", proto->name, noun,
               strerror(errno));
        gw_stream_free(s);
        *ret = gw_queue_error(r, 503, "server_error", "no_randomness",
                              "the server cannot make a %s id right now: try again shortly", noun);
        return NULL;
    }
    s->created = (long long)time(NULL);
    return s;
}

void gw_core_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    if (s->proto && s->proto->event) s->proto->event(s, ev);
}

void gw_core_error(struct gw_stream *s, const struct gw_error *e)
{
    if (s->proto && s->proto->error) {
        s->proto->error(s, e);
    } else {                    /* a one-reply query: the HTTP error */
        s->err = *e;
        s->ended = 1;
    }
}

/* ---- the web UI's encoder (ui.c) ---------------------------------------------------- */

static void ui_error(struct gw_stream *s, const struct gw_error *e)
{
    gw_ui_error(s, e->msg);
}

const struct gw_proto gw_proto_ui = { "ui", gw_ui_event, ui_error, NULL, NULL };
