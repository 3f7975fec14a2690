/*
 * metrics.c - GET /metrics in the Prometheus text format (0.0.4), written
 * by hand: requests by endpoint and status, tokens, time-to-first-token and
 * time-per-output-token histograms, in-flight streams, and the daemon's
 * own numbers (queue depth, KV use, prefix-cache hits) from the stats reply
 * polled every 2 s.  Checked with `promtool check metrics` in the tests.
 */
#include "gateway/gateway.h"

#include <stdlib.h>
#include <string.h>

#define N_STATUS 600
#define N_BUCKETS 12

static const double ttft_le[N_BUCKETS] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
static const double tpot_le[N_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5, 1, 2.5, 5 };

struct hist {
    uint64_t b[N_BUCKETS];
    uint64_t count;
    double sum;
};

struct gw_metrics {
    uint64_t req[GW_EP_COUNT][N_STATUS];
    uint64_t prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
    uint64_t drafted_tokens, accepted_tokens;
    uint64_t pred_accepted, pred_rejected;
    uint64_t streams_done;
    struct hist ttft, tpot;
    /* per API key (auth.c index), grown as keys are first seen */
    uint64_t *key_req, *key_prompt, *key_completion;
    int n_key;
};

static struct gw_metrics M;

static const char *ep_name[GW_EP_COUNT] = {
    [GW_EP_CHAT] = "/v1/chat/completions", [GW_EP_MODELS] = "/v1/models",
    [GW_EP_HEALTH] = "/health", [GW_EP_METRICS] = "/metrics", [GW_EP_UI_CHAT] = "/ui/chat",
    [GW_EP_UI_STREAM] = "/ui/stream", [GW_EP_UI_STOP] = "/ui/stop",
    [GW_EP_UI_CONFIG] = "/ui/config", [GW_EP_OTHER] = "other",
    [GW_EP_COMPLETIONS] = "/v1/completions", [GW_EP_TOKENIZE] = "/tokenize",
    [GW_EP_DETOKENIZE] = "/detokenize", [GW_EP_MODEL] = "/v1/models/{id}",
    [GW_EP_MESSAGES] = "/v1/messages", [GW_EP_MESSAGES_COUNT_TOKENS] = "/v1/messages/count_tokens",
    [GW_EP_RESPONSES] = "/v1/responses", [GW_EP_RESPONSE] = "/v1/responses/{id}",
};

void gw_metrics_init(void)
{
    memset(&M, 0, sizeof M);
    G.metrics = &M;
}

static void observe(struct hist *h, const double *le, double v)
{
    for (int i = 0; i < N_BUCKETS; i++)
        if (v <= le[i]) h->b[i]++;
    h->count++;
    h->sum += v;
}

/* The per-key counters, sized for every configured key on first use. */
static int key_slot(int key)
{
    if (key < 0 || key >= gw_auth_n_keys()) return 0;
    if (!M.key_req) {
        int n = gw_auth_n_keys();
        M.key_req = calloc((size_t)n, sizeof *M.key_req);
        M.key_prompt = calloc((size_t)n, sizeof *M.key_prompt);
        M.key_completion = calloc((size_t)n, sizeof *M.key_completion);
        if (!M.key_req || !M.key_prompt || !M.key_completion) return 0;
        M.n_key = n;
    }
    return key < M.n_key;
}

void gw_metrics_request(enum gw_endpoint ep, int status, int key)
{
    if (ep >= 0 && ep < GW_EP_COUNT && status >= 100 && status < N_STATUS) M.req[ep][status]++;
    if (key_slot(key)) M.key_req[key]++;
}

void gw_metrics_first_token(double ttft_s)
{
    observe(&M.ttft, ttft_le, ttft_s);
}

void gw_metrics_stream_done(const struct gw_stream *s)
{
    M.streams_done++;
    M.prompt_tokens += s->prompt_tokens;
    M.completion_tokens += s->completion_tokens;
    M.cached_tokens += s->cached_tokens;
    M.reasoning_tokens += s->reasoning_tokens;
    M.drafted_tokens += s->drafted_tokens;
    M.accepted_tokens += s->accepted_tokens;
    M.pred_accepted += s->pred_accepted;
    M.pred_rejected += s->pred_rejected;
    if (key_slot(s->key)) {
        M.key_prompt[s->key] += s->prompt_tokens;
        M.key_completion[s->key] += s->completion_tokens;
    }
    if (s->t_first && s->n_tokens > 1) {
        double per = (smol_mono_s() - s->t_first) / (double)(s->n_tokens - 1);
        observe(&M.tpot, tpot_le, per);
    }
}

static void hist_out(struct gw_buf *b, const char *name, const char *help, const struct hist *h,
                     const double *le)
{
    gw_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < N_BUCKETS; i++)
        gw_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)h->b[i]);
    gw_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                  (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

static void one(struct gw_buf *b, const char *name, const char *type, const char *help, double v)
{
    gw_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

enum MHD_Result gw_metrics_serve(struct gw_req *r)
{
    struct gw_buf b = { 0 };
    gw_buf_str(&b, "# HELP smollm3_gateway_requests_total HTTP requests answered, by endpoint "
                   "and status.\n# TYPE smollm3_gateway_requests_total counter\n");
    for (int e = 0; e < GW_EP_COUNT; e++)
        for (int s = 100; s < N_STATUS; s++)
            if (M.req[e][s])
                gw_buf_printf(&b, "smollm3_gateway_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                              ep_name[e], s, (unsigned long long)M.req[e][s]);
    one(&b, "smollm3_gateway_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
        (double)M.prompt_tokens);
    if (gw_auth_n_keys()) {     /* label: the key's name from the key file, never the key */
        static const char *const what[3][2] = {
            { "smollm3_gateway_key_requests_total", "HTTP requests answered, by API key name." },
            { "smollm3_gateway_key_prompt_tokens_total", "Prompt tokens of finished requests, by API key name." },
            { "smollm3_gateway_key_completion_tokens_total", "Generated tokens, by API key name." },
        };
        key_slot(0);
        for (int w = 0; w < 3; w++) {
            gw_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n", what[w][0], what[w][1], what[w][0]);
            for (int k = 0; k < M.n_key; k++) {
                uint64_t v = w == 0 ? M.key_req[k] : w == 1 ? M.key_prompt[k] : M.key_completion[k];
                gw_buf_printf(&b, "%s{key=\"%s\"} %llu\n", what[w][0], gw_auth_key_name(k),
                              (unsigned long long)v);
            }
        }
    }
    one(&b, "smollm3_gateway_completion_tokens_total", "counter",
        "Generated tokens of finished requests.", (double)M.completion_tokens);
    one(&b, "smollm3_gateway_cached_tokens_total", "counter",
        "Prompt tokens reused from the KV cache.", (double)M.cached_tokens);
    one(&b, "smollm3_gateway_reasoning_tokens_total", "counter",
        "Generated tokens spent thinking.", (double)M.reasoning_tokens);
    one(&b, "smollm3_gateway_spec_drafted_tokens_total", "counter",
        "Tokens drafted by prompt lookup and verified (speculative decoding).", (double)M.drafted_tokens);
    one(&b, "smollm3_gateway_spec_accepted_tokens_total", "counter",
        "Drafted tokens accepted (each saved a decode step).", (double)M.accepted_tokens);
    one(&b, "smollm3_gateway_prediction_accepted_tokens_total", "counter",
        "Predicted Outputs: tokens drafted from a request's prediction and accepted.", (double)M.pred_accepted);
    one(&b, "smollm3_gateway_prediction_rejected_tokens_total", "counter",
        "Predicted Outputs: tokens drafted from a request's prediction and rejected.", (double)M.pred_rejected);
    hist_out(&b, "smollm3_gateway_time_to_first_token_seconds",
             "Time from sending a request to the daemon to its first token.", &M.ttft, ttft_le);
    hist_out(&b, "smollm3_gateway_time_per_output_token_seconds",
             "Mean time between output tokens of a finished request.", &M.tpot, tpot_le);
    one(&b, "smollm3_gateway_inflight_streams", "gauge", "Generation requests in flight.",
        (double)G.n_inflight);
    one(&b, "smollm3_gateway_connections", "gauge", "Open HTTP connections.", (double)G.n_conns);
    one(&b, "smollm3_daemon_up", "gauge", "1 when the daemon is connected and ready.",
        (double)(G.daemon_connected && G.daemon_ready));
    if (G.have_stats) {
        const Smollm3__StatsReply *s = &G.stats;
        one(&b, "smollm3_daemon_requests_active", "gauge", "Requests the daemon is running.",
            s->requests_active);
        one(&b, "smollm3_daemon_queue_depth", "gauge", "Requests waiting in the daemon's queue.",
            s->requests_queued);
        one(&b, "smollm3_daemon_sessions", "gauge", "Sessions the daemon keeps.", s->sessions);
        one(&b, "smollm3_daemon_kv_tokens_used", "gauge", "KV cache tokens in use.",
            (double)s->kv_tokens_used);
        one(&b, "smollm3_daemon_kv_tokens_capacity", "gauge", "KV cache capacity in tokens.",
            (double)s->kv_tokens_total);
        one(&b, "smollm3_daemon_kv_usage_ratio", "gauge", "Fraction of the KV cache in use.",
            s->kv_tokens_total ? (double)s->kv_tokens_used / (double)s->kv_tokens_total : 0.0);
        one(&b, "smollm3_daemon_prefix_cache_hits_total", "counter",
            "Requests that reused a cached prefix.", (double)s->prefix_cache_hits);
        one(&b, "smollm3_daemon_requests_total", "counter", "Requests the daemon accepted.",
            (double)s->requests_total);
        one(&b, "smollm3_daemon_prefill_tokens_total", "counter",
            "Prompt positions run through the model (cached ones are not).", (double)s->prefill_tokens_total);
        one(&b, "smollm3_daemon_prompt_builds_total", "counter",
            "Prompts rendered and tokenized (a waiting request without a session is built once).",
            (double)s->prompt_builds_total);
        one(&b, "smollm3_daemon_backend_sampled_tokens_total", "counter",
            "Tokens drawn by the backend's batch sampler (backend_sampling).", (double)s->backend_sampled_tokens);
        one(&b, "smollm3_daemon_engine_steps_total", "counter", "Engine steps that ran the model.",
            (double)s->engine_steps);
        one(&b, "smollm3_daemon_step_tokens_total", "counter", "Tokens in those steps.", (double)s->step_tokens_total);
        one(&b, "smollm3_daemon_step_seconds_total", "counter", "Wall time of those steps.", s->step_ms_total / 1e3);
        one(&b, "smollm3_daemon_forward_seconds_total", "counter",
            "Of it, time in the model (the rest is the engine's own host time).", s->forward_ms_total / 1e3);
        one(&b, "smollm3_daemon_shared_choices_total", "counter",
            "Choices (n > 1) started on another choice's prefilled prompt.", (double)s->shared_choices_total);
        one(&b, "smollm3_daemon_requests_rejected_total", "counter", "Requests the daemon refused.",
            (double)s->requests_rejected);
        one(&b, "smollm3_daemon_requests_cancelled_total", "counter",
            "Requests cancelled in the daemon.", (double)s->requests_cancelled);
        one(&b, "smollm3_daemon_uptime_seconds", "gauge", "Daemon uptime.", s->uptime_s);
        one(&b, "smollm3_daemon_spec_drafted_tokens_total", "counter",
            "Tokens the daemon drafted by prompt lookup and verified.", (double)s->spec_drafted_tokens);
        one(&b, "smollm3_daemon_spec_accepted_tokens_total", "counter",
            "Drafted tokens the daemon accepted.", (double)s->spec_accepted_tokens);
        one(&b, "smollm3_daemon_spec_verify_steps_total", "counter",
            "Decode steps that verified a draft.", (double)s->spec_verify_steps);
        one(&b, "smollm3_daemon_decode_steps_total", "counter",
            "Decode steps of all requests.", (double)s->decode_steps);
        one(&b, "smollm3_daemon_sessions_evicted_total", "counter",
            "Named sessions taken out of memory by eviction.", (double)s->sessions_evicted);
        one(&b, "smollm3_daemon_spill_sessions_written_total", "counter",
            "Session files written to kv_spill_dir.", (double)s->spill_sessions_written);
        one(&b, "smollm3_daemon_spill_sessions_restored_total", "counter",
            "Sessions read back from kv_spill_dir.", (double)s->spill_sessions_restored);
        one(&b, "smollm3_daemon_spill_tokens_restored_total", "counter",
            "KV tokens read back from kv_spill_dir instead of recomputed.", (double)s->spill_tokens_restored);
        one(&b, "smollm3_daemon_spill_restore_seconds_total", "counter",
            "Wall time of the sessions read back from kv_spill_dir.", s->spill_restore_ms_total / 1e3);
        one(&b, "smollm3_daemon_spill_write_seconds_total", "counter",
            "Wall time of the files written to kv_spill_dir.", s->spill_write_ms_total / 1e3);
        one(&b, "smollm3_daemon_spill_files_rejected_total", "counter",
            "Files in kv_spill_dir found corrupt, truncated, foreign or old.", (double)s->spill_files_rejected);
        one(&b, "smollm3_daemon_spill_files", "gauge", "Files in kv_spill_dir (as this node indexes it).",
            (double)s->spill_files);
        one(&b, "smollm3_daemon_spill_bytes", "gauge", "Their size.", (double)s->spill_bytes);
        one(&b, "smollm3_daemon_spill_lease_refusals_total", "counter",
            "kv_spill_shared: session leases another node held when asked.", (double)s->spill_lease_refusals);
        one(&b, "smollm3_daemon_spill_leases_lost_total", "counter",
            "kv_spill_shared: writes dropped because the lease was lost meanwhile.", (double)s->spill_leases_lost);
        one(&b, "smollm3_daemon_sessions_stale_dropped_total", "counter",
            "kv_spill_shared: copies in memory dropped, another node wrote the session since.",
            (double)s->sessions_stale_dropped);
    }
    enum MHD_Result ret =
        gw_queue_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
    gw_buf_deinit(&b);
    return ret;
}
