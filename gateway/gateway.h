/*
 * gateway.h - the shared state of smollm3-gateway (the .c files of gateway/).
 *
 * One thread runs everything: libmicrohttpd in external-epoll mode and the
 * ZeroMQ DEALER to the daemon (daemon/client/client.h) share one epoll loop
 * (main.c).  An HTTP request that generates text owns a struct gw_stream:
 * the daemon request id, the pending output bytes of the response and the
 * accumulators of a non-streaming answer.  Daemon events are routed to
 * their stream by request id (daemon.c); the stream's protocol encoder
 * (gw_stream.proto, core.h: openai.c, responses.c, anthropic.c, ui.c)
 * formats them and the suspended HTTP connection is resumed (http.c).
 * core.h is the protocol-independent part every generating endpoint shares.
 *
 * Lifetimes: a gw_req lives as long as one HTTP request (MHD req_cls); a
 * gw_stream lives from its creation until its terminal event has been
 * written or its client went away (then it is freed at once; later daemon
 * events for its id are dropped).  UI streams exist before any connection
 * claims them (POST /ui/chat creates, GET /ui/stream/SID claims).
 */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>
#include <jansson.h>
#include "daemon/client/client.h"
#include "daemon/model/rules.h"
#include "gateway/params.h"
#include "gateway/util.h"

enum gw_kind {
    GW_OPENAI_SSE,              /* POST /v1/chat/completions (and /v1/responses: api), stream=true */
    GW_OPENAI_JSON,             /* POST /v1/chat/completions (and /v1/responses), stream=false */
    GW_UI,                      /* GET /ui/stream/SID */
    GW_QUERY,                   /* POST /tokenize, /detokenize: one reply */
    GW_ANTHROPIC_SSE,           /* POST /v1/messages, stream=true (anthropic.c) */
    GW_ANTHROPIC_JSON,          /* POST /v1/messages, stream=false */
    GW_ANTHROPIC_COUNT,         /* POST /v1/messages/count_tokens: cancelled at `started` */
};

/* Kinds whose response (SSE) starts at the daemon's `started`; the others
 * are answered once the daemon is done with them. */
static inline int gw_kind_sse(enum gw_kind k)
{
    return k == GW_OPENAI_SSE || k == GW_UI || k == GW_ANTHROPIC_SSE;
}

static inline int gw_kind_anthropic(enum gw_kind k)
{
    return k == GW_ANTHROPIC_SSE || k == GW_ANTHROPIC_JSON || k == GW_ANTHROPIC_COUNT;
}

enum gw_endpoint {
    GW_EP_CHAT, GW_EP_MODELS, GW_EP_HEALTH, GW_EP_METRICS, GW_EP_UI_CHAT, GW_EP_UI_STREAM,
    GW_EP_UI_STOP, GW_EP_UI_CONFIG, GW_EP_OTHER, GW_EP_COMPLETIONS, GW_EP_TOKENIZE, GW_EP_DETOKENIZE,
    GW_EP_MODEL, GW_EP_MESSAGES, GW_EP_MESSAGES_COUNT_TOKENS, GW_EP_RESPONSES, GW_EP_RESPONSE, GW_EP_COUNT
};

/* Endpoints whose errors are in Anthropic's shape (http.c). */
static inline int gw_ep_anthropic(enum gw_endpoint ep)
{
    return ep == GW_EP_MESSAGES || ep == GW_EP_MESSAGES_COUNT_TOKENS;
}

#define GW_API_RESPONSES 4      /* gw_stream.api of a /v1/responses stream (beside params.h's) */

struct gw_resp_state;
struct gw_proto;                /* a protocol's encoder (core.h) */

struct gw_conn;
struct gw_req;

/* One choice of an OpenAI answer (n > 1: several). */
struct gw_choice {
    struct gw_buf content, reasoning;   /* non-streaming accumulators */
    json_t *tool_calls;         /* non-streaming: array */
    json_t *lp;                 /* non-streaming logprobs: chat: entries; completions: the object */
    size_t text_offset;         /* completions: bytes of text so far */
    const char *finish;         /* its Done's finish reason */
};

struct gw_stream {
    struct gw_stream *next, *prev;  /* gw.streams list */
    enum gw_kind kind;
    uint64_t rid;               /* daemon request id (assigned at creation) */
    int sent;                   /* the Generate went to the daemon */
    int started;                /* `started` seen */
    int terminal;               /* terminal event seen (or forced): no more daemon events */
    int ended;                  /* the last bytes are in `out`: end after draining it */
    int broken;                 /* bytes of it were lost (out of memory) and its error could not be
                                   told either: the connection is closed, not ended */
    struct gw_req *req;         /* the HTTP request serving it; NULL while unclaimed (UI) */
    uint8_t *packed;            /* packed Request (UI: sent when claimed) */
    size_t packed_len;
    /* response */
    struct gw_buf out;          /* SSE bytes not yet handed to MHD */
    double last_write;          /* monotonic s of the last bytes queued (pings) */
    struct gw_error err;        /* refused before start (err.status != 0): what the client gets */
    /* OpenAI */
    char id[40];                /* chatcmpl-… */
    long long created;
    int include_usage;
    int api;                    /* GW_API_CHAT or GW_API_COMPLETIONS (params.h) */
    int logprobs;               /* logprobs asked */
    struct gw_choice *ch;       /* [n_choices] (OpenAI streams) */
    int n_choices;              /* 1, or the request's n */
    int n_done;                 /* Done events seen (the last one ends the stream) */
    int cur_choice;             /* choice of the last Token: a ToolCall belongs to it */
    json_t *reply;              /* GW_QUERY: the response body */
    /* UI */
    char sid[33];
    double born;                /* monotonic s of creation (unclaimed expiry) */
    /* accounting */
    double t_sent, t_first;     /* monotonic s */
    uint32_t n_tokens;
    uint32_t prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens;
    uint32_t drafted_tokens, accepted_tokens;   /* speculative decoding (all drafts) */
    uint32_t pred_accepted, pred_rejected;      /* of them, drafts from the request's prediction */
    uint32_t decode_steps;                      /* steps that produced the completion (each: its accepted drafts + 1) */
    const char *finish;         /* "stop", "length", "tool_calls", "cancelled" */
    /* Anthropic (anthropic.c); non-streaming: ch[0].tool_calls holds the content blocks */
    int an_block;               /* the open text / thinking block (0: none) */
    int an_next;                /* index of the next content block */
    int an_thinking_omitted;    /* thinking.display "omitted" */
    char *an_stop;              /* the stop sequence that ended it (malloc'd), or NULL */
    int key;                    /* API key of the request that made it (index), or < 0 */
    const char *tenant;         /* its owner, the key's tenant (gw_auth_tenant; "" with keys off): sent
                                   as GenerateRequest.tenant, checked when another request names it */
    int counted;                /* counted in G.n_inflight (sent and not terminal; UI: from creation) */
    struct gw_resp_state *rs;   /* /v1/responses: its items and store entry (responses.c) */
    const struct gw_proto *proto;   /* what its events become (core.h) */
};

/* One HTTP request (MHD's req_cls). */
struct gw_req {
    struct gw_conn *conn;
    struct MHD_Connection *mc;
    enum gw_endpoint ep;
    int status;                 /* HTTP status queued (metrics) */
    int key;                    /* the API key used (index, auth.c), or GW_AUTH_OPEN / GW_AUTH_NONE */
    struct gw_buf body;
    int too_large;
    int suspended;              /* suspended by us */
    int waiting;                /* suspended in the handler waiting for the daemon's first event */
    int responded;              /* a response was queued */
    struct gw_stream *stream;
};

/* One TCP / Unix connection (MHD socket_context). */
struct gw_conn {
    struct MHD_Connection *mc;
    int fd;
    int watched;                /* fd in our epoll for EPOLLRDHUP */
    struct gw_req *req;         /* current request */
};

struct gw_config {
    const char *listen;
    const char *daemon;
    const char *model_name;     /* NULL = from health */
    size_t max_body;
    unsigned max_connections;
    unsigned request_timeout;   /* s */
    unsigned max_inflight;
    unsigned ping_interval;     /* s of silence before ': ping' on a stream */
    int ignore_unknown;         /* --ignore-unknown-fields: accept (and ignore) unknown request fields */
    const char *api_key_file;   /* --api-key-file: NULL = no keys */
    size_t responses_store;     /* --responses-store: stored /v1/responses kept (LRU), count */
    size_t responses_store_bytes;   /* --responses-store-mb: the memory they may hold, bytes */
    unsigned ui_unclaimed_max;      /* --ui-unclaimed-max: UI streams waiting to be claimed, in all */
    unsigned ui_unclaimed_per_key;  /* --ui-unclaimed-per-key: of them, one key's */
};

struct gw_metrics;

struct gw {
    struct gw_config cfg;
    struct MHD_Daemon *mhd;
    int epfd;
    struct smol_client *cli;
    int daemon_connected;       /* the monitor says connected */
    int daemon_ready;           /* health replied ready */
    char model[256];
    int thinking;               /* the daemon's model has a thinking mode (its health reply); 1 until known */
    uint64_t health_rid, stats_rid;
    double next_health, next_stats;
    Smollm3__StatsReply stats;  /* last stats (scalars; kv_type points to stats_kv_type) */
    char stats_kv_type[16];
    uint64_t daemon_max_request;    /* the daemon's largest accepted Request frame (health); 0 = unknown */
    int daemon_refused;         /* --max-body-bytes is over daemon_max_request: never ready (logged) */
    int have_stats;
    struct gw_stream *streams;  /* all live streams */
    unsigned n_inflight;        /* streams sent to the daemon, not terminal */
    unsigned n_conns;
    int stopping;
    struct gw_metrics *metrics;
};

extern struct gw G;

/* http.c */
void gw_req_resume(struct gw_req *r);
enum MHD_Result gw_req_answer(struct gw_req *r);
enum MHD_Result gw_req_wait(struct gw_req *r);
enum MHD_Result gw_req_send(struct gw_req *r, struct gw_stream *s);
void gw_conn_rdhup(struct gw_conn *c);
struct MHD_Daemon *gw_http_start(int listen_fd);
void gw_http_resume_all(void);
enum MHD_Result gw_queue_json(struct gw_req *r, int status, json_t *body);
enum MHD_Result gw_queue_error(struct gw_req *r, int status, const char *type, const char *code,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
enum MHD_Result gw_queue_error_param(struct gw_req *r, int status, const char *type, const char *code,
                                     const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
enum MHD_Result gw_queue_text(struct gw_req *r, int status, const char *ctype, const char *text,
                              size_t len);
enum MHD_Result gw_queue_sse(struct gw_req *r, struct gw_stream *s);

/* daemon.c */
void gw_daemon_open(void);
void gw_daemon_drain(void);
void gw_daemon_tick(double now);
int gw_daemon_send_stream(struct gw_stream *s);
/* 1 when s's packed request is within the daemon's max_request_bytes (or that is unknown); else 0,
 * counted (a larger frame would be dropped by the daemon, closing the link of every stream). */
int gw_daemon_fits(const struct gw_stream *s);
void gw_daemon_cancel(struct gw_stream *s);
/* 1 when an allocation counted by gw_oom_count (util.h) failed since MHD called the handler for
 * the request being served: what it parsed or built may lack bytes (http.c) */
int gw_oom_in_request(void);
struct gw_stream *gw_stream_new(enum gw_kind kind);
/* Counts s in G.n_inflight now (a send does; a UI stream is counted from its creation, so
 * streams nobody claimed yet cannot take the daemon past --max-inflight when claimed). */
void gw_stream_hold(struct gw_stream *s);
void gw_stream_free(struct gw_stream *s);
struct gw_stream *gw_stream_by_rid(uint64_t rid);
void gw_stream_push(struct gw_stream *s);
/* Ends s (every live stream) with error e: an HTTP error if no response
 * began, else the flavour's error event. */
void gw_stream_fail(struct gw_stream *s, const struct gw_error *e);
void gw_streams_fail_all(const struct gw_error *e);

/* ---- request parsing without I/O (openai.c, ui.c; tests/fuzz/fuzz_gateway.c) */

#define GW_OPENAI_MAX_STOPS GW_MAX_STOPS

/* An OpenAI chat body as a GenerateRequest (prm.gen; params.h holds the
 * shared fields).  Its strings point into root (the parsed JSON) and strs:
 * valid until gw_openai_parsed_deinit. */
struct gw_openai_parsed {
    struct gw_params prm;       /* shared fields; prm.gen is the request; prm.err the refusal */
    Smollm3__ChatInput chat;
    Smollm3__ChatMessage *msgs;
    Smollm3__ChatMessage **msgp;
    struct gw_owned strs;       /* owned strings (JSON dumps, joined parts) */
    json_t *root;
};
/* Parses body[0..len) (POST /v1/chat/completions): 0, or -1 with the
 * refusal in p->prm.err (invalid JSON: 400 "invalid_json"; a rule: as
 * gw_error_set) and its message in why.  Call gw_openai_parsed_deinit in
 * every case. */
int gw_openai_parse(struct gw_openai_parsed *p, const char *body, size_t len, char *why, size_t wn);
void gw_openai_parsed_deinit(struct gw_openai_parsed *p);
/* response_format / grammar of a chat body as g's constraint (structured.c).
 * *owned: a string g points to that the caller must keep and free (or NULL).
 * -1 with the refusal in *e. */
int gw_structured_parse(Smollm3__GenerateRequest *g, json_t *root, char **owned, struct gw_error *e);

/* A POST /ui/chat form as a GenerateRequest for session "ui-<conversation>".
 * Strings point into the body (decoded in place), hist and session. */
struct gw_ui_parsed {
    Smollm3__GenerateRequest gen;
    Smollm3__ChatInput chat;
    Smollm3__SamplingParams sampling;
    Smollm3__ChatMessage *msgs;
    Smollm3__ChatMessage **msgp;
    json_t *hist;
    const char *message;        /* the new user message (the fragment echoes it) */
    size_t message_len;
    char session[80];
};
/* Parses the form body[0..n), which it decodes in place: body must hold
 * n + 1 bytes (body[n] is overwritten with NUL).  Returns 0, or -1 with the
 * refusal in *e (status 400, 413 or 503; the message for the page).  Call
 * gw_ui_parsed_deinit in every case. */
int gw_ui_parse(struct gw_ui_parsed *p, char *body, size_t n, struct gw_error *e);
void gw_ui_parsed_deinit(struct gw_ui_parsed *p);

/* openai.c */
enum MHD_Result gw_openai_chat(struct gw_req *r);
enum MHD_Result gw_openai_models(struct gw_req *r);
struct gw_params;
/* Admits and sends prm's request as a new chat / completions stream (core.h). */
enum MHD_Result gw_openai_start(struct gw_req *r, int api, const struct gw_params *prm);
void gw_openai_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_openai_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_openai_finish_json(struct gw_req *r, struct gw_stream *s);
/* core.c: g packed with s's request id into s->packed; 0 or -1 (out of memory) */
int gw_pack_generate(struct gw_stream *s, Smollm3__GenerateRequest *g);

/* completions.c */
enum MHD_Result gw_completions(struct gw_req *r);
enum MHD_Result gw_tokenize(struct gw_req *r);
enum MHD_Result gw_detokenize(struct gw_req *r);
enum MHD_Result gw_models_one(struct gw_req *r, const char *id);
void gw_query_event(struct gw_stream *s, const Smollm3__Event *ev);
enum MHD_Result gw_query_finish(struct gw_req *r, struct gw_stream *s);

/* responses.c: /v1/responses */
enum MHD_Result gw_responses_create(struct gw_req *r);
enum MHD_Result gw_responses_one(struct gw_req *r, const char *method, const char *arg);
void gw_responses_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_responses_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_responses_finish_json(struct gw_req *r, struct gw_stream *s);
void gw_responses_stream_free(struct gw_stream *s);
void gw_responses_store_clear(void);
/* Stored responses and the bytes they hold (the accounting of --responses-store-mb). */
size_t gw_responses_store_count(void);
size_t gw_responses_store_bytes(void);
/* Parses a POST /v1/responses body without I/O (previous_response_id looks
 * in the store) and hands the GenerateRequest to check (the fuzz harness);
 * 0, or -1 with the reason in why and the field at fault in param. */
int gw_responses_parse(const char *body, size_t len, void (*check)(Smollm3__GenerateRequest *g), char *param,
                       size_t pn, char *why, size_t wn);

/* ui.c */
enum MHD_Result gw_ui_chat(struct gw_req *r);
enum MHD_Result gw_ui_stream(struct gw_req *r, const char *sid);
enum MHD_Result gw_ui_stop(struct gw_req *r, const char *sid);
enum MHD_Result gw_ui_config(struct gw_req *r);
void gw_ui_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_ui_error(struct gw_stream *s, const char *msg);
struct gw_stream *gw_ui_find(const char *sid);
void gw_ui_expire(double now);
unsigned gw_ui_unclaimed_count(void);

/* anthropic.c: POST /v1/messages, /v1/messages/count_tokens (anthropic.h) */
enum MHD_Result gw_anthropic_messages(struct gw_req *r);
enum MHD_Result gw_anthropic_count_tokens(struct gw_req *r);
void gw_anthropic_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_anthropic_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_anthropic_finish(struct gw_req *r, struct gw_stream *s);
/* {"type": "error", "error": {"type", "message"}}, the type by HTTP status */
json_t *gw_anthropic_error_body(int status, const char *msg);

/* auth.c: API keys */
#define GW_AUTH_OPEN (-2)       /* no keys configured: everything is open */
#define GW_AUTH_NONE (-1)       /* keys configured, none (or a wrong one) presented */
int gw_auth_load(const char *path);
/* The key index the request's Authorization: Bearer header (else its
 * x-api-key header, Anthropic's) matches, or one of the above. */
int gw_auth_check(struct MHD_Connection *mc);
int gw_auth_n_keys(void);
const char *gw_auth_key_name(int i);
/* The tenant of key index i (auth.c: an id derived from the key, never the
 * key): "" for GW_AUTH_OPEN / GW_AUTH_NONE.  Valid until exit. */
const char *gw_auth_tenant(int i);

/* config.c: --config FILE as flags ("--name", "value", ...; malloc'd), 0 or -1 (logged) */
int gw_config_args(const char *path, char ***args, int *n);

/* metrics.c */
/* Why a request was refused, or what it asked dropped, to protect the others (/metrics:
 * smollm3_gateway_refusals_total{reason}). */
enum gw_refusal {
    GW_REFUSE_INFLIGHT,         /* --max-inflight reached: 429 */
    GW_REFUSE_UI_UNCLAIMED,     /* --ui-unclaimed-max streams wait to be claimed: 429 */
    GW_REFUSE_UI_UNCLAIMED_KEY, /* the key's --ui-unclaimed-per-key wait: 429 */
    GW_REFUSE_DAEMON_FRAME,     /* the packed request is over the daemon's max_request_bytes: 413 */
    GW_REFUSE_STORE_SHARE,      /* a stored response alone is over its key's share: not kept */
    GW_REFUSE_COUNT
};
void gw_metrics_refusal(enum gw_refusal why, int key);
/* a stored response dropped to make room (the least recently used of its key's) */
void gw_metrics_store_evicted(void);
void gw_metrics_init(void);
void gw_metrics_request(enum gw_endpoint ep, int status, int key);
void gw_metrics_stream_done(const struct gw_stream *s);
void gw_metrics_first_token(double ttft_s);
enum MHD_Result gw_metrics_serve(struct gw_req *r);

#endif
