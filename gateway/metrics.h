/*
 * metrics.h - the gateway's counters (metrics.c): requests by endpoint and
 * status, tokens, time-to-first-token and time-per-output-token histograms,
 * refusals by reason, per API key; written in Prometheus's text format by
 * gw_metrics_text (the /metrics endpoint adds the gauges of the layers above:
 * routes.c).  Layer 2 of the gateway, beneath the stream registry
 * (tests/check_layers.sh): it knows endpoints by enum, streams by their
 * numbers (struct gw_metrics_done), never the types above it.
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stdint.h>
#include "gateway/util.h"

/* The endpoints (the label of the request counters; the route table maps
 * paths to them: routes.c). */
enum gw_endpoint {
    GW_EP_CHAT, GW_EP_MODELS, GW_EP_HEALTH, GW_EP_METRICS, GW_EP_UI_CHAT, GW_EP_UI_STREAM,
    GW_EP_UI_STOP, GW_EP_UI_CONFIG, GW_EP_OTHER, GW_EP_COMPLETIONS, GW_EP_TOKENIZE, GW_EP_DETOKENIZE,
    GW_EP_MODEL, GW_EP_MESSAGES, GW_EP_MESSAGES_COUNT_TOKENS, GW_EP_RESPONSES, GW_EP_RESPONSE, GW_EP_UI_SESSIONS,
    GW_EP_COUNT
};

/* Why a request was refused, or what it asked dropped, to protect the others (/metrics:
 * smollm3_gateway_refusals_total{reason}). */
enum gw_refusal {
    GW_REFUSE_INFLIGHT,         /* --max-inflight reached: 429 */
    GW_REFUSE_UI_UNCLAIMED,     /* --ui-unclaimed-max streams wait to be claimed: 429 */
    GW_REFUSE_UI_UNCLAIMED_KEY, /* the key's --ui-unclaimed-per-key wait: 429 */
    GW_REFUSE_DAEMON_FRAME,     /* the packed request is over the daemon's max_request_bytes: 413 */
    GW_REFUSE_STORE_SHARE,      /* a stored response alone is over its key's share: not kept */
    GW_REFUSE_INFLIGHT_KEY,     /* the key's share of --max-inflight (or its max_inflight=) reached: 429 */
    GW_REFUSE_COUNT
};

/* A finished stream's numbers. */
struct gw_metrics_done {
    int key;                    /* API key index, or < 0 */
    uint32_t n_tokens;          /* Token events */
    uint32_t prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens;
    uint32_t drafted_tokens, accepted_tokens, pred_accepted, pred_rejected;
    double t_first;             /* monotonic s of its first token, 0: none */
};

void gw_metrics_init(void);
void gw_metrics_request(enum gw_endpoint ep, int status, int key);
void gw_metrics_stream_done(const struct gw_metrics_done *d);
void gw_metrics_first_token(double ttft_s);
void gw_metrics_refusal(enum gw_refusal why, int key);
/* a stored response dropped to make room (the least recently used of its key's) */
void gw_metrics_store_evicted(void);
/* Appends the counters in the Prometheus text format (0.0.4). */
void gw_metrics_text(struct gw_buf *b);
/* Appends one sample with its HELP and TYPE lines (type: "counter" or "gauge"). */
void gw_metrics_one(struct gw_buf *b, const char *name, const char *type, const char *help, double v);

#endif
