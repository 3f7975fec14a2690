/*
 * metrics.c - the gateway's counters in the Prometheus text format (0.0.4),
 * written by hand (metrics.h): requests by endpoint and status, tokens,
 * time-to-first-token and time-per-output-token histograms, refusals by
 * reason, per tenant (labelled by the tenant id, auth.c: never a key or a
 * key's name).  GET /metrics (routes.c) adds the gauges of the
 * layers above and the daemon's own numbers.  Checked with `promtool check
 * metrics` in the tests.
 */
#include "gateway/metrics.h"
#include "gateway/auth.h"
#include "daemon/model/rules.h"       /* smol_mono_s: the one clock */

#include <stdio.h>

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
    uint64_t refused[GW_REFUSE_COUNT];  /* gw_metrics_refusal */
    uint64_t store_evicted;
    /* per tenant (auth.c's interned tenant strings, compared by address), grown as tenants are
     * first counted */
    struct tenant_ctr {
        const char *tenant;
        uint64_t req, prompt, completion;
    } *tenant;
    int n_tenant;
};

static struct gw_metrics M;

static const char *ep_name[GW_EP_COUNT] = {
    [GW_EP_CHAT] = "/v1/chat/completions", [GW_EP_MODELS] = "/v1/models",
    [GW_EP_HEALTH] = "/health", [GW_EP_METRICS] = "/metrics", [GW_EP_UI_CHAT] = "/ui/chat",
    [GW_EP_UI_STREAM] = "/ui/stream", [GW_EP_UI_STOP] = "/ui/stop",
    [GW_EP_UI_CONFIG] = "/ui/config", [GW_EP_UI_SESSIONS] = "/ui/sessions", [GW_EP_OTHER] = "other",
    [GW_EP_COMPLETIONS] = "/v1/completions", [GW_EP_TOKENIZE] = "/tokenize",
    [GW_EP_DETOKENIZE] = "/detokenize", [GW_EP_MODEL] = "/v1/models/{id}",
    [GW_EP_MESSAGES] = "/v1/messages", [GW_EP_MESSAGES_COUNT_TOKENS] = "/v1/messages/count_tokens",
    [GW_EP_RESPONSES] = "/v1/responses", [GW_EP_RESPONSE] = "/v1/responses/{id}",
};

void gw_metrics_init(void)
{
    memset(&M, 0, sizeof M);
}

static void observe(struct hist *h, const double *le, double v)
{
    for (int i = 0; i < N_BUCKETS; i++)
        if (v <= le[i]) h->b[i]++;
    h->count++;
    h->sum += v;
}

/* The counters of tenant t (gw_auth_tenant's string), made on first use; NULL for the default
 * tenant "" (keys off, or none presented) and when out of memory. */
static struct tenant_ctr *tenant_ctr(const char *t)
{
    if (!t || !*t) return NULL;
    for (int i = 0; i < M.n_tenant; i++)
        if (M.tenant[i].tenant == t) return &M.tenant[i];
    struct tenant_ctr *n = realloc(M.tenant, (size_t)(M.n_tenant + 1) * sizeof *n);
    if (!n) return NULL;
    M.tenant = n;
    n[M.n_tenant] = (struct tenant_ctr){ .tenant = t };
    return &n[M.n_tenant++];
}

void gw_metrics_request(enum gw_endpoint ep, int status, int key)
{
    if (ep >= 0 && ep < GW_EP_COUNT && status >= 100 && status < N_STATUS) M.req[ep][status]++;
    struct tenant_ctr *t = tenant_ctr(gw_auth_tenant(key));
    if (t) t->req++;
}

void gw_metrics_refusal(enum gw_refusal why, int key)
{
    if (why >= 0 && why < GW_REFUSE_COUNT) M.refused[why]++;
    gw_log(7, "refused (%d) for tenant %s", (int)why, key >= 0 ? gw_auth_tenant(key) : "-");
}

void gw_metrics_store_evicted(void) { M.store_evicted++; }

void gw_metrics_first_token(double ttft_s)
{
    observe(&M.ttft, ttft_le, ttft_s);
}

void gw_metrics_stream_done(const struct gw_metrics_done *s)
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
    struct tenant_ctr *t = tenant_ctr(gw_auth_tenant(s->key));
    if (t) {
        t->prompt += s->prompt_tokens;
        t->completion += s->completion_tokens;
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

void gw_metrics_one(struct gw_buf *b, const char *name, const char *type, const char *help, double v)
{
    gw_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void gw_metrics_text(struct gw_buf *out)
{
    gw_buf_str(out, "# HELP smollm3_gateway_requests_total HTTP requests answered, by endpoint "
                   "and status.\n# TYPE smollm3_gateway_requests_total counter\n");
    for (int e = 0; e < GW_EP_COUNT; e++)
        for (int s = 100; s < N_STATUS; s++)
            if (M.req[e][s])
                gw_buf_printf(out, "smollm3_gateway_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                              ep_name[e], s, (unsigned long long)M.req[e][s]);
    gw_metrics_one(out, "smollm3_gateway_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
        (double)M.prompt_tokens);
    if (gw_auth_n_keys()) {     /* label: the tenant id (auth.c), never a key or a key's name */
        static const char *const what[3][2] = {
            { "smollm3_gateway_tenant_requests_total", "HTTP requests answered, by tenant." },
            { "smollm3_gateway_tenant_prompt_tokens_total", "Prompt tokens of finished requests, by tenant." },
            { "smollm3_gateway_tenant_completion_tokens_total", "Generated tokens, by tenant." },
        };
        for (int i = 0; i < gw_auth_n_tenants(); i++) tenant_ctr(gw_auth_tenant_at(i));  /* 0s shown */
        for (int w = 0; w < 3; w++) {
            gw_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", what[w][0], what[w][1], what[w][0]);
            for (int k = 0; k < M.n_tenant; k++) {
                const struct tenant_ctr *t = &M.tenant[k];
                uint64_t v = w == 0 ? t->req : w == 1 ? t->prompt : t->completion;
                gw_buf_printf(out, "%s{tenant=\"%s\"} %llu\n", what[w][0], t->tenant, (unsigned long long)v);
            }
        }
    }
    gw_metrics_one(out, "smollm3_gateway_completion_tokens_total", "counter",
        "Generated tokens of finished requests.", (double)M.completion_tokens);
    gw_metrics_one(out, "smollm3_gateway_cached_tokens_total", "counter",
        "Prompt tokens reused from the KV cache.", (double)M.cached_tokens);
    gw_metrics_one(out, "smollm3_gateway_reasoning_tokens_total", "counter",
        "Generated tokens spent thinking.", (double)M.reasoning_tokens);
    gw_metrics_one(out, "smollm3_gateway_spec_drafted_tokens_total", "counter",
        "Tokens drafted by prompt lookup and verified (speculative decoding).", (double)M.drafted_tokens);
    gw_metrics_one(out, "smollm3_gateway_spec_accepted_tokens_total", "counter",
        "Drafted tokens accepted (each saved a decode step).", (double)M.accepted_tokens);
    gw_metrics_one(out, "smollm3_gateway_prediction_accepted_tokens_total", "counter",
        "Predicted Outputs: tokens drafted from a request's prediction and accepted.", (double)M.pred_accepted);
    gw_metrics_one(out, "smollm3_gateway_prediction_rejected_tokens_total", "counter",
        "Predicted Outputs: tokens drafted from a request's prediction and rejected.", (double)M.pred_rejected);
    hist_out(out, "smollm3_gateway_time_to_first_token_seconds",
             "Time from sending a request to the daemon to its first token.", &M.ttft, ttft_le);
    hist_out(out, "smollm3_gateway_time_per_output_token_seconds",
             "Mean time between output tokens of a finished request.", &M.tpot, tpot_le);
    static const char *const reason[GW_REFUSE_COUNT] = {
        [GW_REFUSE_INFLIGHT] = "max_inflight", [GW_REFUSE_UI_UNCLAIMED] = "ui_unclaimed",
        [GW_REFUSE_UI_UNCLAIMED_KEY] = "ui_unclaimed_per_key", [GW_REFUSE_DAEMON_FRAME] = "daemon_frame",
        [GW_REFUSE_STORE_SHARE] = "responses_store_share", [GW_REFUSE_INFLIGHT_KEY] = "max_inflight_per_key",
    };
    gw_buf_str(out, "# HELP smollm3_gateway_refusals_total Requests refused (or a stored response not kept) "
                   "to keep within a limit, by reason.\n# TYPE smollm3_gateway_refusals_total counter\n");
    for (int i = 0; i < GW_REFUSE_COUNT; i++)
        gw_buf_printf(out, "smollm3_gateway_refusals_total{reason=\"%s\"} %llu\n", reason[i],
                      (unsigned long long)M.refused[i]);
    gw_metrics_one(out, "smollm3_gateway_responses_evicted_total", "counter",
        "Stored responses dropped to keep their key within its share of the store.", (double)M.store_evicted);
}
