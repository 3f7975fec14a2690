/*
 * daemon.h - the stream registry and the link to smollm3d (daemon.c).
 *
 * One thread runs everything: libmicrohttpd in external-epoll mode and the
 * ZeroMQ DEALER to the daemon (daemon/client/client.h) share one epoll loop
 * (main.c).  An HTTP request that generates text owns a struct gw_stream:
 * the daemon request id, the pending output bytes of the response and the
 * accumulators of a non-streaming answer.  Daemon events are routed to
 * their stream by request id; the stream's protocol encoder (a struct
 * gw_proto the front end set: openai.c, responses.c, anthropic.c, ui.c,
 * completions.c) formats them, and the HTTP layer is told through the hooks
 * it registered (gw_stream_hooks_set): this layer never names a request.
 *
 * Lifetimes: a gw_stream lives from its creation until its terminal event
 * has been written or its client went away (then it is freed at once; later
 * daemon events for its id are dropped).  UI streams exist before any
 * connection claims them (POST /ui/chat creates, GET /ui/stream/SID claims).
 *
 * Layer 2 of the gateway (tests/check_layers.sh): util, error, params, auth,
 * config and metrics beneath it; nothing above.
 */
#ifndef GW_DAEMON_H
#define GW_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>
#include <jansson.h>
#include "daemon/client/client.h"
#include "daemon/model/rules.h"
#include "gateway/config.h"
#include "gateway/error.h"
#include "gateway/metrics.h"
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

struct gw_resp_state;           /* responses.c's per-stream state */
struct gw_handover;             /* daemon.c's make-before-break state */
#define GW_HO_CHOICES 32        /* choices a resumable stream may have (done_mask's bits) */
struct gw_req;                  /* the HTTP request serving a stream (http.h): never dereferenced here */
struct gw_stream;

/* The encoder of one protocol: what the daemon's events become. */
struct gw_proto {
    const char *name;
    void (*event)(struct gw_stream *s, const Smollm3__Event *ev);
    /* an error after the request was accepted (SSE: an error event; else kept in s->err) */
    void (*error)(struct gw_stream *s, const struct gw_error *e);
    /* the non-streaming answer, once the daemon is done (NULL: SSE only) */
    enum MHD_Result (*finish)(struct gw_req *r, struct gw_stream *s);
    /* frees the protocol's per-stream state (NULL: none) */
    void (*free)(struct gw_stream *s);
};

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
    uint64_t rid;               /* daemon request id (assigned at creation; kept when resumed) */
    int sent;                   /* the Generate went to the daemon */
    int link;                   /* the daemon it was sent to (G.links index), -1 while none */
    uint64_t route;             /* its rendezvous key: tenant + session id, else the prompt's start */
    double resume_by;           /* > 0: its daemon went away; resumed on a live one before this
                                   monotonic s, else failed */
    int32_t *toks;              /* the output token ids streamed so far: resume_tokens */
    uint8_t *tok_choice;        /* n > 1: [n_toks] the choice of each (resume_counts) */
    uint32_t n_toks, cap_toks;
    uint32_t done_mask;         /* n > 1: the choices whose Done came (a resume's second one is dropped) */
    unsigned resumes;           /* times it was resumed */
    /* make-before-break hand-over (daemon.c): per choice (resumable streams have at most
       GW_HO_CHOICES), its tokens in toks */
    uint32_t ch_toks[GW_HO_CHOICES];
    struct gw_handover *ho;     /* a hand-over's state (daemon.c), allocated at the first; NULL = none */
    int started;                /* `started` seen */
    int terminal;               /* terminal event seen (or forced): no more daemon events */
    int ended;                  /* the last bytes are in `out`: end after draining it */
    int broken;                 /* bytes of it were lost (out of memory) and its error could not be
                                   told either: the connection is closed, not ended */
    struct gw_req *req;         /* the HTTP request serving it; NULL while unclaimed (UI) */
    uint8_t *packed;            /* packed Request (UI: sent when claimed; kept after: a resume sends it again) */
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
    int tier;                   /* its scheduling class (Smollm3__ServiceTier), as sent, then as Done says */
    const char *tenant;         /* its owner, the key's tenant (gw_auth_tenant; "" with keys off): sent
                                   as GenerateRequest.tenant, checked when another request names it */
    int counted;                /* counted in G.n_inflight (sent and not terminal; UI: from creation) */
    struct gw_resp_state *rs;   /* /v1/responses: its items and store entry (responses.c) */
    uint64_t follow_rid;        /* a one-reply request its encoder sent after the daemon's last event
                                   (a stored Response's write: gw_daemon_send_follow), 0 = none: its
                                   reply goes to the encoder too, and a non-streaming answer waits for it */
    int follow_link;            /* the daemon (G.links index) its follow-up went to, -1 = none */
    double follow_sent;         /* monotonic s it was sent: unanswered after --request-timeout, failed */
    const struct gw_proto *proto;   /* what its events become (core.h) */
};

/* One daemon of the pool (--daemon, in order). */
struct gw_tenant_stats {        /* a tenant's line of a daemon's stats (StatsReply.tenants) */
    char id[65];
    uint32_t queued, running, preempted;
    uint64_t preemptions, kv_bytes, served;
};

struct gw_link {
    const char *endpoint;
    struct smol_client *cli;
    int connected;              /* the monitor says connected */
    int ready;                  /* health replied ready */
    int refused;                /* --max-body-bytes is over its max_request_bytes: never used */
    uint64_t max_request;       /* its largest accepted Request frame (health); 0 = unknown */
    uint64_t health_rid, stats_rid;
    double next_health, next_stats;
    Smollm3__StatsReply stats;  /* last stats (scalars; kv_type points to stats_kv_type) */
    char stats_kv_type[16];
    struct gw_tenant_stats stats_tenants[64];   /* the last stats' tenants, the first 64 it listed */
    int n_stats_tenants;
    int have_stats;
    uint64_t n_lost;            /* times its connection was lost */
};

/* "up" (connected, ready), "draining" (connected, not ready) or "down" */
const char *gw_link_state(const struct gw_link *l);

/* The gateway's state. */
struct gw {
    struct gw_config cfg;
    struct MHD_Daemon *mhd;
    int epfd;
    struct gw_link links[GW_MAX_DAEMONS];
    unsigned n_links;
    uint64_t n_resumed, n_resume_failed;    /* streams resumed on a daemon; given up (/metrics) */
    /* make-before-break hand-overs (/metrics): started beside a draining daemon's run (its first
       warm-up round sent); streams moved at one of its tokens (it still generating), taken over
       when it stopped first; warm-up rounds (a hand-over's first and any later ones) */
    uint64_t n_ho_started, n_ho_moved, n_ho_taken, n_ho_rounds;
    /* the pool as one daemon (what the single-daemon gateway showed): */
    int daemon_connected;       /* some daemon connected */
    int daemon_ready;           /* some daemon ready */
    char model[256];
    int thinking;               /* the daemon's model has a thinking mode (its health reply); 1 until known */
    Smollm3__StatsReply stats;  /* the first daemon's with stats */
    struct gw_tenant_stats stats_tenants[64];   /* its tenants (StatsReply.tenants) */
    int n_stats_tenants;
    uint64_t daemon_max_request;    /* the smallest max_request_bytes of the ready daemons; 0 = unknown */
    int daemon_refused;         /* --max-body-bytes is over a daemon's: that one is never used (logged) */
    int have_stats;
    struct gw_stream *streams;  /* all live streams */
    unsigned n_inflight;        /* streams sent to the daemon, not terminal */
    unsigned n_conns;
    int stopping;
};

extern struct gw G;

/* What the HTTP layer does for a stream with a request (http.c registers them). */
struct gw_stream_hooks {
    /* the request waits for the daemon's first (SSE) or last event before it answers */
    int (*waiting)(const struct gw_stream *s);
    /* wake the request's connection (new bytes, the end, or the answer) */
    void (*wake)(struct gw_stream *s);
    /* s is being freed: the request forgets it */
    void (*detach)(struct gw_stream *s);
};
void gw_stream_hooks_set(const struct gw_stream_hooks *h);

void gw_daemon_open(void);
void gw_daemon_close(void);
void gw_daemon_drain(void);
void gw_daemon_tick(double now);
int gw_daemon_send_stream(struct gw_stream *s);
/* 1 when s's packed request is within the daemon's max_request_bytes (or that is unknown); else 0,
 * counted (a larger frame would be dropped by the daemon, closing the link of every stream). */
int gw_daemon_fits(const struct gw_stream *s);
void gw_daemon_cancel(struct gw_stream *s);
/* Sends req (a one-reply request: its request_id is set here) on behalf of s, whose encoder gets
 * the reply as an event (an ERROR event when the daemon fails it or goes away): 0, or -1 when it
 * could not be sent (nothing pending; a frame over the daemon's max_request_bytes is not sent,
 * counted as gw_daemon_fits counts one). */
int gw_daemon_send_follow(struct gw_stream *s, Smollm3__Request *req);
/* 1 while s waits for nothing more from the daemon (terminal, no follow-up pending). */
static inline int gw_stream_done(const struct gw_stream *s) { return s->terminal && !s->follow_rid; }
/* Sends a Cancel for s to its daemon (the daemon's Done ends it); 0 or -1. */
int gw_daemon_send_cancel(struct gw_stream *s);
/* s's rendezvous key from its request (core.c, at packing). */
void gw_stream_route(struct gw_stream *s, const Smollm3__GenerateRequest *g);
struct gw_stream *gw_stream_new(enum gw_kind kind);
/* Counts s in G.n_inflight now (a send does; a UI stream is counted from its creation, so
 * streams nobody claimed yet cannot take the daemon past --max-inflight when claimed). */
void gw_stream_hold(struct gw_stream *s);
/* Streams of API key index key in flight (held, not yet terminal or freed). */
unsigned gw_stream_inflight_of(int key);
void gw_stream_free(struct gw_stream *s);
struct gw_stream *gw_stream_by_rid(uint64_t rid);
void gw_stream_push(struct gw_stream *s);
/* Ends s with error e: an HTTP error if no response began, else the protocol's error event. */
void gw_stream_fail(struct gw_stream *s, const struct gw_error *e);

#endif
