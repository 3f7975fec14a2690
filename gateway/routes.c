/*
 * routes.c - the route table of smollm3-gateway (routes.h): every path the
 * gateway serves, the one method it takes, whether it needs an API key when
 * keys are configured (the API, the UI and /tokenize, /detokenize do;
 * /health and /metrics do not; a UI stream is admitted by its SID: auth.c),
 * the shape of its errors, and the handler.  Also the two endpoints that
 * read every layer: /health and /metrics (the counters of metrics.c, the
 * stream registry's gauges, the store's and the UI's, the daemon's stats).
 *
 * The HTTP transport (http.c) looks a URL up here (gw_route, handed to
 * gw_http_start): it never names an endpoint.  Layer 6 of the gateway, with
 * main.c (tests/check_layers.sh).
 */
#include "gateway/routes.h"
#include "gateway/anthropic.h"
#include "gateway/completions.h"
#include "gateway/openai.h"
#include "gateway/responses.h"
#include "gateway/ui.h"

#include <stddef.h>
#include <string.h>

/* ---- /health, /metrics ------------------------------------------------------ */

static enum MHD_Result health(struct gw_req *r)
{
    json_t *b = json_pack("{s:s,s:b,s:b,s:s}", "status", G.daemon_ready ? "ok" : "unavailable",
                          "daemon_connected", G.daemon_connected, "ready", G.daemon_ready,
                          "model", G.model);
    json_t *pool = json_array();        /* each daemon of the pool: up, draining or down */
    for (unsigned i = 0; i < G.n_links; i++)
        json_array_append_new(pool, json_pack("{s:s,s:s}", "endpoint", G.links[i].endpoint, "state",
                                              gw_link_state(&G.links[i])));
    json_object_set_new(b, "daemons", pool);
    if (G.daemon_refused)
        json_object_set_new(b, "error", json_sprintf("--max-body-bytes %zu is over the daemon's max_request_bytes "
                                                     "%llu", G.cfg.max_body,
                                                     (unsigned long long)G.daemon_max_request));
    return gw_queue_json(r, G.daemon_ready ? 200 : 503, b);
}

/* The daemon's StatsReply (polled by daemon.c) as /metrics series: field, its C type (MS: a
 * double of milliseconds, shown in seconds), name, Prometheus type, help. */
enum stat_kind { U32, U64, DBL, MS };
struct daemon_stat {
    size_t off;
    enum stat_kind kind;
    const char *name, *type, *help;
};
#define STAT(field, kind, name, type, help) { offsetof(Smollm3__StatsReply, field), kind, name, type, help }
static const struct daemon_stat daemon_stats[] = {
    STAT(requests_active, U32, "smollm3_daemon_requests_active", "gauge",
         "Requests the daemon is running."),
    STAT(requests_queued, U32, "smollm3_daemon_queue_depth", "gauge",
         "Requests waiting in the daemon's queue."),
    STAT(sessions, U32, "smollm3_daemon_sessions", "gauge",
         "Sessions the daemon keeps."),
    STAT(kv_tokens_used, U64, "smollm3_daemon_kv_tokens_used", "gauge",
         "KV cache tokens in use."),
    STAT(kv_tokens_total, U64, "smollm3_daemon_kv_tokens_capacity", "gauge",
         "KV cache capacity in tokens."),
    STAT(prefix_cache_hits, U64, "smollm3_daemon_prefix_cache_hits_total", "counter",
         "Requests that reused a cached prefix."),
    STAT(requests_total, U64, "smollm3_daemon_requests_total", "counter",
         "Requests the daemon accepted."),
    STAT(prefill_tokens_total, U64, "smollm3_daemon_prefill_tokens_total", "counter",
         "Prompt positions run through the model (cached ones are not)."),
    STAT(prompt_builds_total, U64, "smollm3_daemon_prompt_builds_total", "counter",
         "Prompts rendered and tokenized (a waiting request without a session is built once)."),
    STAT(backend_sampled_tokens, U64, "smollm3_daemon_backend_sampled_tokens_total", "counter",
         "Tokens drawn by the backend's batch sampler (backend_sampling)."),
    STAT(engine_steps, U64, "smollm3_daemon_engine_steps_total", "counter",
         "Engine steps that ran the model."),
    STAT(step_tokens_total, U64, "smollm3_daemon_step_tokens_total", "counter",
         "Tokens in those steps."),
    STAT(step_ms_total, MS, "smollm3_daemon_step_seconds_total", "counter",
         "Wall time of those steps."),
    STAT(forward_ms_total, MS, "smollm3_daemon_forward_seconds_total", "counter",
         "Of it, time in the model (the rest is the engine's own host time)."),
    STAT(prefill_steps, U64, "smollm3_daemon_prefill_steps_total", "counter",
         "Engine steps that read prompt tokens."),
    STAT(mixed_steps, U64, "smollm3_daemon_mixed_steps_total", "counter",
         "Of them, beside decode rows (their prompt chunk sized by step_budget_ms)."),
    STAT(step_budget_ms, MS, "smollm3_daemon_step_budget_seconds", "gauge",
         "The time an engine step may take (step_budget_ms; 0: off)."),
    STAT(step_prompt_token_ms, MS, "smollm3_daemon_step_prompt_token_seconds", "gauge",
         "The engine's estimate of a prompt token's time in a step."),
    STAT(step_row_ms, MS, "smollm3_daemon_step_row_seconds", "gauge",
         "The engine's estimate of a decode row's time in a step."),
    STAT(preemptions_total, U64, "smollm3_daemon_preemptions_total", "counter",
         "Requests paused (KV kept) to give another tenant its share of batch slots."),
    STAT(shared_choices_total, U64, "smollm3_daemon_shared_choices_total", "counter",
         "Choices (n > 1) started on another choice's prefilled prompt."),
    STAT(requests_rejected, U64, "smollm3_daemon_requests_rejected_total", "counter",
         "Requests the daemon refused."),
    STAT(requests_cancelled, U64, "smollm3_daemon_requests_cancelled_total", "counter",
         "Requests cancelled in the daemon."),
    STAT(uptime_s, DBL, "smollm3_daemon_uptime_seconds", "gauge",
         "Daemon uptime."),
    STAT(spec_drafted_tokens, U64, "smollm3_daemon_spec_drafted_tokens_total", "counter",
         "Tokens the daemon drafted by prompt lookup and verified."),
    STAT(spec_accepted_tokens, U64, "smollm3_daemon_spec_accepted_tokens_total", "counter",
         "Drafted tokens the daemon accepted."),
    STAT(spec_verify_steps, U64, "smollm3_daemon_spec_verify_steps_total", "counter",
         "Decode steps that verified a draft."),
    STAT(decode_steps, U64, "smollm3_daemon_decode_steps_total", "counter",
         "Decode steps of all requests."),
    STAT(sessions_evicted, U64, "smollm3_daemon_sessions_evicted_total", "counter",
         "Named sessions taken out of memory by eviction (max_sessions, the KV budget, per key)."),
    STAT(sessions_evicted_per_key, U64, "smollm3_daemon_sessions_evicted_per_key_total", "counter",
         "Of those, evicted by their own tenant's max_sessions_per_key."),
    STAT(unknown_session_refusals, U64, "smollm3_daemon_unknown_session_refusals_total", "counter",
         "Turns appended to a session the daemon does not hold, refused unknown_session."),
    STAT(spill_sessions_written, U64, "smollm3_daemon_spill_sessions_written_total", "counter",
         "Session files written to kv_spill_dir."),
    STAT(spill_sessions_restored, U64, "smollm3_daemon_spill_sessions_restored_total", "counter",
         "Sessions read back from kv_spill_dir."),
    STAT(spill_tokens_restored, U64, "smollm3_daemon_spill_tokens_restored_total", "counter",
         "KV tokens read back from kv_spill_dir instead of recomputed."),
    STAT(spill_restore_ms_total, MS, "smollm3_daemon_spill_restore_seconds_total", "counter",
         "Wall time of the sessions read back from kv_spill_dir."),
    STAT(spill_write_ms_total, MS, "smollm3_daemon_spill_write_seconds_total", "counter",
         "Wall time of the files written to kv_spill_dir."),
    STAT(spill_files_rejected, U64, "smollm3_daemon_spill_files_rejected_total", "counter",
         "Files in kv_spill_dir found corrupt, truncated, foreign or old."),
    STAT(spill_files, U32, "smollm3_daemon_spill_files", "gauge",
         "Files in kv_spill_dir (as this node indexes it)."),
    STAT(spill_bytes, U64, "smollm3_daemon_spill_bytes", "gauge",
         "Their size."),
    STAT(spill_lease_refusals, U64, "smollm3_daemon_spill_lease_refusals_total", "counter",
         "kv_spill_shared: session leases another node held when asked."),
    STAT(spill_leases_lost, U64, "smollm3_daemon_spill_leases_lost_total", "counter",
         "kv_spill_shared: writes dropped because the lease was lost meanwhile."),
    STAT(sessions_stale_dropped, U64, "smollm3_daemon_sessions_stale_dropped_total", "counter",
         "kv_spill_shared: copies in memory dropped, another node wrote the session since."),
};
#undef STAT

static double stat_value(const Smollm3__StatsReply *s, const struct daemon_stat *d)
{
    const char *p = (const char *)s + d->off;
    switch (d->kind) {
    case U32: return (double)*(const uint32_t *)p;
    case U64: return (double)*(const uint64_t *)p;
    case DBL: return *(const double *)p;
    case MS:  return *(const double *)p / 1e3;
    }
    return 0.0;
}

/* The daemon's per-tenant shares, labelled by tenant id (never a key: the
 * id is what the daemon was told; "" is the default tenant). */
static void tenant_metrics(struct gw_buf *b)
{
    static const struct { const char *name, *type, *help; } m[] = {
        { "smollm3_daemon_tenant_queue_depth", "gauge", "Requests of the tenant waiting for admission." },
        { "smollm3_daemon_tenant_running_slots", "gauge", "Batch slots the tenant holds." },
        { "smollm3_daemon_tenant_preempted", "gauge", "Requests of the tenant paused now, their KV kept." },
        { "smollm3_daemon_tenant_preemptions_total", "counter", "Times the tenant's requests were preempted." },
        { "smollm3_daemon_tenant_kv_bytes", "gauge", "KV memory of the tenant's sessions and cached prefixes." },
        { "smollm3_daemon_tenant_tokens_total", "counter", "Prompt and decode tokens scheduled for the tenant." },
    };
    if (!G.n_stats_tenants) return;
    for (size_t k = 0; k < sizeof m / sizeof *m; k++) {
        gw_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name, m[k].type);
        for (int i = 0; i < G.n_stats_tenants; i++) {
            const struct gw_tenant_stats *t = &G.stats_tenants[i];
            const double v[] = { t->queued, t->running, t->preempted, (double)t->preemptions, (double)t->kv_bytes,
                                 (double)t->served };
            gw_buf_printf(b, "%s{tenant=\"%s\"} %.17g\n", m[k].name, t->id, v[k]);
        }
    }
}

static enum MHD_Result metrics(struct gw_req *r)
{
    struct gw_buf b = { 0 };
    gw_metrics_text(&b);
    gw_metrics_one(&b, "smollm3_gateway_inflight_streams", "gauge", "Generation requests in flight.",
        (double)G.n_inflight);
    gw_metrics_one(&b, "smollm3_gateway_connections", "gauge", "Open HTTP connections.", (double)G.n_conns);
    gw_metrics_one(&b, "smollm3_gateway_responses_stored", "gauge",
        "Responses (/v1/responses, store: true) generating here, or waiting for the daemon to store them.",
        (double)gw_responses_store_count());
    gw_metrics_one(&b, "smollm3_gateway_responses_store_bytes", "gauge",
        "Memory those responses hold here (estimated from their JSON).", (double)gw_responses_store_bytes());
    gw_metrics_one(&b, "smollm3_gateway_ui_unclaimed_streams", "gauge", "Web UI streams waiting to be claimed.",
        (double)gw_ui_unclaimed_count());
    gw_metrics_one(&b, "smollm3_daemon_up", "gauge", "1 when the daemon is connected and ready.",
        (double)(G.daemon_connected && G.daemon_ready));
    gw_buf_str(&b, "# HELP smollm3_gateway_daemon_state The state of each daemon of the pool (1 for its state).\n"
                   "# TYPE smollm3_gateway_daemon_state gauge\n");
    for (unsigned i = 0; i < G.n_links; i++) {
        const char *st = gw_link_state(&G.links[i]), *states[] = { "up", "draining", "down" };
        for (int k = 0; k < 3; k++)
            gw_buf_printf(&b, "smollm3_gateway_daemon_state{daemon=\"%s\",state=\"%s\"} %d\n",
                          G.links[i].endpoint, states[k], !strcmp(st, states[k]));
    }
    gw_metrics_one(&b, "smollm3_gateway_streams_resumed_total", "counter",
        "Streams sent again to a daemon after theirs went away, continuing after the tokens already sent.",
        (double)G.n_resumed);
    gw_metrics_one(&b, "smollm3_gateway_streams_resume_failed_total", "counter",
        "Streams whose daemon went away and no daemon came back within --resume-timeout.",
        (double)G.n_resume_failed);
    gw_buf_str(&b, "# HELP smollm3_gateway_handovers_total Make-before-break hand-overs at a daemon's SIGTERM: "
                   "another daemon warmed up beside the draining one's run (started), the stream moved there "
                   "at one of that run's tokens (moved) or when it stopped first (taken_over).\n"
                   "# TYPE smollm3_gateway_handovers_total counter\n");
    gw_buf_printf(&b, "smollm3_gateway_handovers_total{result=\"started\"} %llu\n"
                      "smollm3_gateway_handovers_total{result=\"moved\"} %llu\n"
                      "smollm3_gateway_handovers_total{result=\"taken_over\"} %llu\n",
                  (unsigned long long)G.n_ho_started, (unsigned long long)G.n_ho_moved,
                  (unsigned long long)G.n_ho_taken);
    gw_metrics_one(&b, "smollm3_gateway_handover_rounds_total", "counter",
        "Warm-up rounds of make-before-break hand-overs: a hand-over's first, and one more each time the old "
        "daemon streamed more than a few tokens of a choice while the last round prefilled.",
        (double)G.n_ho_rounds);
    if (G.have_stats) {
        const Smollm3__StatsReply *s = &G.stats;
        for (size_t i = 0; i < sizeof daemon_stats / sizeof *daemon_stats; i++) {
            const struct daemon_stat *d = &daemon_stats[i];
            gw_metrics_one(&b, d->name, d->type, d->help, stat_value(s, d));
        }
        gw_metrics_one(&b, "smollm3_daemon_kv_usage_ratio", "gauge", "Fraction of the KV cache in use.",
            s->kv_tokens_total ? (double)s->kv_tokens_used / (double)s->kv_tokens_total : 0.0);
        tenant_metrics(&b);
    }
    enum MHD_Result ret =
        gw_queue_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
    gw_buf_deinit(&b);
    return ret;
}

/* ---- handlers in the table's shape --------------------------------------------- */

#define PLAIN(name, fn)                                                                   \
    static enum MHD_Result name(struct gw_req *r, const char *method, const char *arg)   \
    {                                                                                     \
        return fn(r);                                                                     \
    }
#define WITH_ARG(name, fn)                                                                \
    static enum MHD_Result name(struct gw_req *r, const char *method, const char *arg)   \
    {                                                                                     \
        return fn(r, arg);                                                                \
    }
PLAIN(h_chat, gw_openai_chat)
PLAIN(h_models, gw_openai_models)
PLAIN(h_completions, gw_completions)
PLAIN(h_messages, gw_anthropic_messages)
PLAIN(h_count_tokens, gw_anthropic_count_tokens)
PLAIN(h_tokenize, gw_tokenize)
PLAIN(h_detokenize, gw_detokenize)
PLAIN(h_responses, gw_responses_create)
PLAIN(h_health, health)
PLAIN(h_metrics, metrics)
PLAIN(h_ui_chat, gw_ui_chat)
PLAIN(h_ui_config, gw_ui_config)
WITH_ARG(h_model, gw_models_one)
WITH_ARG(h_ui_stream, gw_ui_stream)
WITH_ARG(h_ui_stop, gw_ui_stop)
WITH_ARG(h_ui_sessions, gw_ui_sessions)

static enum MHD_Result h_response(struct gw_req *r, const char *method, const char *arg)
{
    return gw_responses_one(r, method, arg);    /* GET, DELETE, POST .../cancel: responses.c */
}

static enum MHD_Result h_unknown(struct gw_req *r, const char *method, const char *arg)
{
    return gw_queue_error(r, 404, "not_found_error", "not_found", "unknown route");
}

/* ---- the table -------------------------------------------------------------------- */

static const struct {
    const char *path;
    int prefix;                 /* the path is a prefix: what follows is the handler's arg */
    struct gw_route route;
} table[] = {
    { "/v1/chat/completions", 0, { GW_EP_CHAT, "POST", 0, NULL, h_chat } },
    { "/v1/models", 0, { GW_EP_MODELS, "GET", 0, NULL, h_models } },
    { "/v1/completions", 0, { GW_EP_COMPLETIONS, "POST", 0, NULL, h_completions } },
    { "/v1/messages", 0, { GW_EP_MESSAGES, "POST", 0, gw_anthropic_error_body, h_messages } },
    { "/v1/messages/count_tokens", 0,
      { GW_EP_MESSAGES_COUNT_TOKENS, "POST", 0, gw_anthropic_error_body, h_count_tokens } },
    { "/tokenize", 0, { GW_EP_TOKENIZE, "POST", 0, NULL, h_tokenize } },
    { "/v1/responses", 0, { GW_EP_RESPONSES, "POST", 0, NULL, h_responses } },
    { "/v1/responses/", 1, { GW_EP_RESPONSE, NULL, 0, NULL, h_response } },
    { "/detokenize", 0, { GW_EP_DETOKENIZE, "POST", 0, NULL, h_detokenize } },
    { "/v1/models/", 1, { GW_EP_MODEL, "GET", 0, NULL, h_model } },
    { "/health", 0, { GW_EP_HEALTH, "GET", 1, NULL, h_health } },
    { "/metrics", 0, { GW_EP_METRICS, "GET", 1, NULL, h_metrics } },
    { "/ui/chat", 0, { GW_EP_UI_CHAT, "POST", 0, NULL, h_ui_chat } },
    { "/ui/config", 0, { GW_EP_UI_CONFIG, "GET", 0, NULL, h_ui_config } },
    { "/ui/stream/", 1, { GW_EP_UI_STREAM, "GET", 1, NULL, h_ui_stream } },  /* its SID admits it */
    { "/ui/stop/", 1, { GW_EP_UI_STOP, "POST", 0, NULL, h_ui_stop } },
    { "/ui/sessions", 0, { GW_EP_UI_SESSIONS, "GET", 0, NULL, h_ui_sessions } },
    { "/ui/sessions/", 1, { GW_EP_UI_SESSIONS, "GET", 0, NULL, h_ui_sessions } },
};

/* Unknown paths: under /v1/ and /ui/ a key is asked for first (no path is told to a client
 * without one), elsewhere the 404 at once. */
static const struct gw_route unknown_keyed = { GW_EP_OTHER, NULL, 0, NULL, h_unknown };
static const struct gw_route unknown_open = { GW_EP_OTHER, NULL, 1, NULL, h_unknown };

const struct gw_route *gw_route(const char *url, const char **arg)
{
    *arg = "";
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        size_t n = strlen(table[i].path);
        if (table[i].prefix ? !strncmp(url, table[i].path, n) : !strcmp(url, table[i].path)) {
            if (table[i].prefix) *arg = url + n;
            return &table[i].route;
        }
    }
    return !strncmp(url, "/v1/", 4) || !strncmp(url, "/ui/", 4) ? &unknown_keyed : &unknown_open;
}
