/*
 * daemon.c - the gateway's link to its pool of smollm3d daemons (daemon.h):
 * one DEALER per daemon (daemon/client/client.h), all polled from the main
 * epoll loop, stream bookkeeping, routing of daemon events to their
 * stream's encoder, and resume; the HTTP side is reached only through the
 * hooks it registered.
 *
 * ZMQ_FD is edge-triggered: gw_daemon_drain() reads every socket until
 * nothing is left, and the loop calls it after every wake-up and after every
 * send.  The client never blocks: send_timeout_ms is 0, so with no daemon
 * connected a send fails at once (ZMQ_IMMEDIATE) and the request gets 503.
 *
 * The pool: each daemon is up (connected, health ready), draining
 * (connected, not ready) or down.  A request goes to the up daemon with the
 * highest rendezvous score of (its key, the daemon's endpoint), the key
 * being its tenant and session id, or its tenant and the start of its prompt
 * (the prefix a daemon may have cached): a conversation stays where its KV
 * is and moves only when that daemon is gone; removing a daemon moves only
 * its own keys.
 *
 * Liveness: the socket monitor (smol_client_connected, looked at on every
 * tick) and ZeroMQ heartbeats report a vanished daemon; its streams in flight
 * are then resumed (below), `ready` drops, and health probes run every
 * second until it (reconnected by ZeroMQ on its own) answers ready again.
 * Stats are polled every 2 s for /metrics.
 *
 * Resume (issue 48): a stream keeps its packed request and the token ids of
 * its output so far.  When its daemon goes away, the stream waits (its
 * client sees a pause) up to --resume-timeout for an up daemon, the same one
 * back or another, and is sent again there under the same request id with
 * GenerateRequest.resume_tokens: the daemon replays them silently and
 * continues, so the client's bytes go on where they stopped.  The second
 * Started is not shown to the encoder, and the usage keeps the first
 * daemon's prompt numbers (completion tokens: the last daemon's, which
 * counts the replayed ones).  Streams with n > 1 resume too: each choice's
 * tokens so far go in resume_tokens one choice after the other, their
 * numbers in resume_counts; a choice that had ended is replayed to its end
 * again and its second Done (and anything else of it) dropped here.
 * One-reply queries and token counts are not resumed.
 *
 * Make-before-break (a daemon's SIGTERM with another daemon up): the request
 * asks for it (GenerateRequest.handover_overlap), so the draining daemon sends
 * Event.handover and goes on generating for its grace.  While the client
 * still gets the old run's tokens, the pool's choice is warmed up: the
 * request under another id with the tokens so far (n > 1: one a choice, an
 * n = 1 request of the prompt and that choice's tokens), cancelled at its
 * first token, which leaves their KV in that daemon's prefix cache.  That
 * prefill is the slow part (a cold cache: the whole answer), and the old run
 * streams on meanwhile; so rounds follow, each with the tokens sent by then
 * and prefilling only what came since the last, while the last took more
 * than GW_HO_ROUND_S with more than GW_HO_LAG tokens of a choice streamed
 * meanwhile (up to GW_HO_ROUNDS).
 * Then, at the old run's next token (between two tokens, where each
 * choice's events are whole), the old run is cancelled and the stream moves:
 * the plain resume to the warmed daemon, which finds all but the last
 * round's few tokens cached (engine_admit.c: n > 1, each choice its own
 * warm-up's) and continues after the client's last token.  The client's
 * pause is one admission and a prefill of a few tokens there.  (A run sent
 * beside the old one and switched to at the front, this file until
 * 2026-11-29, never reaches the front: the two run at the same speed, and
 * the new one produced every token it was behind again, one decode step
 * each, after the switch: seconds on a busy daemon.)  No token is compared
 * or produced twice, so a backend that is not batch-invariant moves as
 * safely as the CPU's.  If the old run stops during the rounds (its grace
 * ended, its daemon died), the stream takes the same plain resume at once,
 * finding what the rounds prefilled; a warm-up refused (that daemon drains
 * too) ends the hand-over and another is tried once.  With no other daemon
 * up the stream is given back at once (cancelled there), as without
 * make-before-break, and held until one is.
 */
#include "gateway/daemon.h"
#include "gateway/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_MAX_PENDING (8u << 20)   /* SSE bytes queued for one slow client */
#define GW_HO_TRIES 2               /* hand-overs a stream starts (one whose warm-up was refused: once more) */
#define GW_HO_ROUNDS 8              /* warm-up rounds before the stream moves at the latest */
#define GW_HO_LAG 4                 /* tokens of a choice streamed during a round few enough to move */
#define GW_HO_ROUND_S 0.1           /* a round short enough to move (the move costs about one) */

/* A stream's make-before-break hand-over (below). */
struct gw_handover {
    int link;                   /* the daemon warmed up while the old run goes on, -1 = none */
    uint64_t warm_rid[GW_HO_CHOICES];   /* its warm-ups' request ids there (0 = none, or ended): n = 1
                                   one, n > 1 one a choice; each cancelled at its first token */
    unsigned n_warm;            /* of them, not ended */
    uint32_t warm_cancelled;    /* of them, those cancelled (their first token came), by choice */
    uint32_t warm_at[GW_HO_CHOICES];    /* per choice: the tokens sent when its last warm-up was */
    unsigned rounds;            /* warm-up rounds sent */
    double round_t;             /* when the last was */
    uint32_t lag;               /* the most tokens of a choice the old run streamed during the last round */
    int move;                   /* the rounds done: the stream moves at the old run's next token */
    unsigned tries;             /* hand-overs started */
};

/* Sends a Cancel of request rid to daemon li (no reply awaited: its Done or error is dropped). */
static void cancel_on(int li, uint64_t rid)
{
    char err[SMOL_ERRLEN];
    if (li >= 0 && smol_client_send_cancel(G.links[li].cli, rid, NULL, err) != SMOL_OK)
        gw_log(4, "cancel of %llu on %s not sent: %s", (unsigned long long)rid, G.links[li].endpoint, err);
}

/* The hand-over ends without moving the stream: its warm-ups are forgotten (their events dropped
 * from now), cancelled on h->link when `cancel`. */
static void ho_end(struct gw_handover *h, int cancel)
{
    for (int c = 0; c < GW_HO_CHOICES; c++)
        if (h->warm_rid[c]) {
            if (cancel) cancel_on(h->link, h->warm_rid[c]);
            h->warm_rid[c] = 0;
        }
    h->n_warm = 0;
    h->warm_cancelled = 0;
    h->link = -1;
    h->move = 0;
}

/* ---- streams ------------------------------------------------------------ */

static struct gw_stream_hooks H;

void gw_stream_hooks_set(const struct gw_stream_hooks *h) { H = *h; }

static int waiting(const struct gw_stream *s) { return s->req && H.waiting && H.waiting(s); }

static void wake(struct gw_stream *s)
{
    if (s->req && H.wake) H.wake(s);
}

struct gw_stream *gw_stream_new(enum gw_kind kind)
{
    struct gw_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->kind = kind;
    s->key = GW_AUTH_NONE;
    s->tenant = "";
    s->n_choices = 1;
    s->link = -1;
    s->follow_link = -1;
    s->rid = smol_client_next_id(G.links[0].cli);
    s->born = s->last_write = smol_mono_s();
    s->next = G.streams;
    if (G.streams) G.streams->prev = s;
    G.streams = s;
    return s;
}

/* In flight: counted against --max-inflight until terminal or freed. */
void gw_stream_hold(struct gw_stream *s)
{
    if (!s->counted) {
        s->counted = 1;
        G.n_inflight++;
    }
}

unsigned gw_stream_inflight_of(int key)
{
    unsigned n = 0;
    for (const struct gw_stream *s = G.streams; s; s = s->next) n += s->counted && s->key == key;
    return n;
}

static void release(struct gw_stream *s)
{
    if (s->counted) {
        s->counted = 0;
        G.n_inflight--;
    }
}

void gw_stream_free(struct gw_stream *s)
{
    if (!s) return;
    release(s);
    if (s->req && H.detach) H.detach(s);
    if (s->proto && s->proto->free) s->proto->free(s);
    if (s->prev) s->prev->next = s->next;
    else G.streams = s->next;
    if (s->next) s->next->prev = s->prev;
    gw_buf_deinit(&s->out);
    for (int i = 0; s->ch && i < s->n_choices; i++) {
        gw_buf_deinit(&s->ch[i].content);
        gw_buf_deinit(&s->ch[i].reasoning);
        json_decref(s->ch[i].tool_calls);
        json_decref(s->ch[i].lp);
    }
    free(s->ch);
    free(s->an_stop);
    json_decref(s->reply);
    free(s->packed);
    free(s->toks);
    free(s->tok_choice);
    free(s->ho);
    free(s);
}

struct gw_stream *gw_stream_by_rid(uint64_t rid)
{
    for (struct gw_stream *s = G.streams; s; s = s->next)
        if (s->rid == rid) return s;
    return NULL;
}

/* New bytes in s->out (or the end): wake the connection. */
void gw_stream_push(struct gw_stream *s)
{
    s->last_write = smol_mono_s();
    if (gw_buf_pending(&s->out) > GW_MAX_PENDING && !s->ended) {
        /* the client stopped reading: stop generating for it, never buffer without bound */
        gw_log(4, "client of request %llu not reading: cancelled", (unsigned long long)s->rid);
        gw_daemon_cancel(s);
        s->ended = 1;
    }
    if (s->req && !waiting(s)) wake(s);
}

static void mark_terminal(struct gw_stream *s)
{
    if (!s->terminal) {
        s->terminal = 1;
        release(s);
        if (s->ho && s->ho->link >= 0) ho_end(s->ho, 1);  /* its warm-ups: not needed any more */
        if (s->kind != GW_QUERY && s->kind != GW_ANTHROPIC_COUNT) {
            struct gw_metrics_done d = {
                .key = s->key, .n_tokens = s->n_tokens, .prompt_tokens = s->prompt_tokens,
                .cached_tokens = s->cached_tokens, .completion_tokens = s->completion_tokens,
                .reasoning_tokens = s->reasoning_tokens, .drafted_tokens = s->drafted_tokens,
                .accepted_tokens = s->accepted_tokens, .pred_accepted = s->pred_accepted,
                .pred_rejected = s->pred_rejected, .t_first = s->t_first,
            };
            gw_metrics_stream_done(&d);
        }
    }
}

/* The protocol's error (an SSE error event, or kept in s->err for the answer); a one-reply
 * query's is the HTTP error. */
static void encode_error(struct gw_stream *s, const struct gw_error *e)
{
    if (s->proto && s->proto->error) {
        s->proto->error(s, e);
    } else {
        s->err = *e;
        s->ended = 1;
    }
}

/* Ends s with an error, whatever state it is in. */
void gw_stream_fail(struct gw_stream *s, const struct gw_error *e)
{
    if (s->ended) return;
    mark_terminal(s);
    if (waiting(s) && !(gw_kind_sse(s->kind) && s->started)) {
        /* no response yet and not accepted: a plain HTTP error */
        s->err = *e;
        wake(s);
        return;
    }
    encode_error(s, e);
    gw_stream_push(s);
}

/* ---- the pool ------------------------------------------------------------ */

const char *gw_link_state(const struct gw_link *l)
{
    return !l->connected ? "down" : l->ready && !l->refused ? "up" : "draining";
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* The prompt's start a daemon may hold as a cached prefix: this many bytes of it. */
#define GW_ROUTE_PREFIX 512

void gw_stream_route(struct gw_stream *s, const Smollm3__GenerateRequest *g)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, s->tenant, strlen(s->tenant) + 1);
    if (g->session_id && *g->session_id) {
        h = fnv1a(h, "s", 1);
        h = fnv1a(h, g->session_id, strlen(g->session_id));
    } else if (g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_CHAT && g->chat && g->chat->n_messages) {
        /* the first message (the system prompt, usually): shared by a conversation's turns */
        const Smollm3__ChatMessage *m = g->chat->messages[0];
        size_t n = m->content ? strlen(m->content) : 0;
        h = fnv1a(h, m->role ? m->role : "", m->role ? strlen(m->role) : 0);
        h = fnv1a(h, m->content ? m->content : "", n < GW_ROUTE_PREFIX ? n : GW_ROUTE_PREFIX);
    } else if (g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_TEXT && g->text) {
        size_t n = strlen(g->text);
        h = fnv1a(h, g->text, n < GW_ROUTE_PREFIX ? n : GW_ROUTE_PREFIX);
    } else if (g->input_case == SMOLLM3__GENERATE_REQUEST__INPUT_TOKENS && g->tokens) {
        size_t n = g->tokens->n_ids < GW_ROUTE_PREFIX / 4 ? g->tokens->n_ids : GW_ROUTE_PREFIX / 4;
        h = fnv1a(h, g->tokens->ids, n * sizeof *g->tokens->ids);
    }
    s->route = h;
}

/* The up daemon of highest rendezvous score for key, or -1. */
static int pick(uint64_t key)
{
    int best = -1;
    uint64_t best_score = 0;
    for (unsigned i = 0; i < G.n_links; i++) {
        const struct gw_link *l = &G.links[i];
        if (!l->connected || !l->ready || l->refused) continue;
        uint64_t sc = mix64(key ^ fnv1a(0xcbf29ce484222325ull, l->endpoint, strlen(l->endpoint)));
        if (best < 0 || sc > best_score) {
            best = (int)i;
            best_score = sc;
        }
    }
    return best;
}

/* The pool as one daemon, for the layers above (admission, /health, the UI's config). */
static void aggregate(void)
{
    G.daemon_connected = G.daemon_ready = G.daemon_refused = 0;
    G.daemon_max_request = 0;
    G.have_stats = 0;
    for (unsigned i = 0; i < G.n_links; i++) {
        const struct gw_link *l = &G.links[i];
        G.daemon_connected |= l->connected;
        G.daemon_refused |= l->refused;
        if (l->connected && l->ready && !l->refused) {
            G.daemon_ready = 1;
            if (l->max_request && (!G.daemon_max_request || l->max_request < G.daemon_max_request))
                G.daemon_max_request = l->max_request;
        }
        if (l->refused && l->max_request && !G.daemon_ready) G.daemon_max_request = l->max_request;
        if (!G.have_stats && l->have_stats) {
            G.stats = l->stats;
            memcpy(G.stats_tenants, l->stats_tenants, (size_t)l->n_stats_tenants * sizeof *l->stats_tenants);
            G.n_stats_tenants = l->n_stats_tenants;
            G.have_stats = 1;
        }
    }
}

static void lost(struct gw_stream *s);

/* s's follow-up is answered (ev), or failed (ev NULL: the daemon went away). */
static void follow_reply(struct gw_stream *s, const Smollm3__Event *ev)
{
    Smollm3__Event lost_ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    if (!ev) {
        er.code = SMOLLM3__ERROR_CODE__ERROR_IO;
        er.message = s->follow_link >= 0 && G.links[s->follow_link].connected ? "no answer from the daemon"
                                                                               : "the inference daemon went away";
        lost_ev.request_id = s->follow_rid;
        lost_ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
        lost_ev.error = &er;
        ev = &lost_ev;
    }
    s->follow_rid = 0;
    s->follow_link = -1;
    const unsigned oom = gw_oom_count;
    if (s->proto && s->proto->event) s->proto->event(s, ev);
    if (gw_oom_count != oom) lost(s);   /* its last bytes lost: closed, not ended as if whole */
    if (waiting(s)) wake(s);
    else gw_stream_push(s);
}

/* (on the stream's own daemon while it is up, else the pool's choice for its key) */
int gw_daemon_send_follow(struct gw_stream *s, Smollm3__Request *req)
{
    char err[SMOL_ERRLEN];
    int li = s->link;
    if (li < 0 || !G.links[li].connected || !G.links[li].ready || G.links[li].refused) li = pick(s->route);
    if (li < 0) return -1;
    struct gw_link *l = &G.links[li];
    uint64_t rid = smol_client_next_id(l->cli);
    req->protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req->request_id = rid;
    size_t n = smollm3__request__get_packed_size(req);
    if (l->max_request && n > l->max_request) {
        /* a frame the daemon would refuse, or drop with the link every stream shares */
        gw_metrics_refusal(GW_REFUSE_DAEMON_FRAME, s->key);
        return -1;
    }
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return -1;
    smollm3__request__pack(req, b);
    enum smol_err e = smol_client_send_raw(l->cli, b, n, err);
    free(b);
    if (e != SMOL_OK) return -1;
    s->follow_rid = rid;
    s->follow_link = li;
    s->follow_sent = smol_mono_s();
    return 0;
}

/* ---- sending ------------------------------------------------------------ */

int gw_daemon_fits(const struct gw_stream *s)
{
    if (!G.daemon_max_request || s->packed_len <= G.daemon_max_request) return 1;
    gw_metrics_refusal(GW_REFUSE_DAEMON_FRAME, s->key);
    return 0;
}

/* Sends buf to the daemon pick() chooses for s; 0 (s->link set) or -1. */
static int send_to_pool(struct gw_stream *s, const void *buf, size_t len)
{
    int i = pick(s->route);
    if (i < 0) return -1;
    char err[SMOL_ERRLEN];
    if (smol_client_send_raw(G.links[i].cli, buf, len, err) != SMOL_OK) {
        gw_log(4, "send to daemon %s failed: %s", G.links[i].endpoint, err);
        return -1;
    }
    s->link = i;
    return 0;
}

/* Sends s->packed (kept while resume is on: a resume sends it again).  0 on success; else
 * fails nothing and returns -1. */
int gw_daemon_send_stream(struct gw_stream *s)
{
    if (send_to_pool(s, s->packed, s->packed_len)) {
        gw_daemon_drain();
        return -1;
    }
    if (!G.cfg.resume_timeout) {        /* never sent again: its memory goes now, as before resume */
        free(s->packed);
        s->packed = NULL;
    }
    s->sent = 1;
    s->t_sent = smol_mono_s();
    gw_stream_hold(s);
    gw_daemon_drain();
    return 0;
}

int gw_daemon_send_cancel(struct gw_stream *s)
{
    if (s->link < 0) return s->resume_by > 0 ? 0 : -1;      /* waiting to resume: nothing runs */
    char err[SMOL_ERRLEN];
    if (smol_client_send_cancel(G.links[s->link].cli, s->rid, NULL, err) != SMOL_OK) {
        gw_log(4, "cancel of %llu not sent: %s", (unsigned long long)s->rid, err);
        return -1;
    }
    return 0;
}

void gw_daemon_cancel(struct gw_stream *s)
{
    if (!s->sent || s->terminal) return;
    gw_daemon_send_cancel(s);
    s->resume_by = 0;
    mark_terminal(s);
    gw_daemon_drain();
}

static void send_probe(struct gw_link *l, int kind_case, uint64_t *rid)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    Smollm3__HealthRequest h = SMOLLM3__HEALTH_REQUEST__INIT;
    Smollm3__StatsRequest st = SMOLLM3__STATS_REQUEST__INIT;
    req.kind_case = kind_case;
    if (kind_case == SMOLLM3__REQUEST__KIND_HEALTH) req.health = &h;
    else req.stats = &st;
    char err[SMOL_ERRLEN];
    uint64_t id = 0;
    if (smol_client_send(l->cli, &req, &id, err) == SMOL_OK) *rid = id;
    gw_daemon_drain();
}

/* ---- resume ------------------------------------------------------------- */

static int resumable(const struct gw_stream *s)
{
    if (!G.cfg.resume_timeout || !s->packed) return 0;
    if (s->kind == GW_QUERY || s->kind == GW_ANTHROPIC_COUNT) return 0;
    return s->n_choices <= 32;  /* (done_mask) */
}

/* s's request again to daemon li, with the tokens streamed so far; 0 or -1 (out of memory,
 * not sent).  warm_rid != 0: a hand-over's warm-up under that id instead (it leaves the prompt's
 * and those tokens' KV there, cancelled at its first token; not handed over itself); with n > 1
 * one of choice `choice`: an n = 1 request of the prompt and that choice's tokens (the daemon
 * matches each choice of the new run against the cache, engine_admit.c). */
static int resend_to(struct gw_stream *s, int li, uint64_t warm_rid, int choice)
{
    Smollm3__Request *req = smollm3__request__unpack(NULL, s->packed_len, s->packed);
    if (!req || req->kind_case != SMOLLM3__REQUEST__KIND_GENERATE) {
        smollm3__request__free_unpacked(req, NULL);
        return -1;
    }
    int32_t *toks = s->toks, *by_choice = NULL;
    uint32_t *counts = NULL;
    if (s->n_choices > 1 && s->n_toks) {
        /* each choice's tokens, one choice after the other (resume_counts) */
        by_choice = malloc(s->n_toks * sizeof *by_choice);
        counts = calloc((size_t)s->n_choices, sizeof *counts);
        if (!by_choice || !counts) {
            free(by_choice);
            free(counts);
            smollm3__request__free_unpacked(req, NULL);
            return -1;
        }
        uint32_t k = 0;
        for (int c = 0; c < s->n_choices; c++)
            for (uint32_t i = 0; i < s->n_toks; i++)
                if (s->tok_choice[i] == c) {
                    by_choice[k++] = s->toks[i];
                    counts[c]++;
                }
        toks = by_choice;
        if (!warm_rid) {
            req->generate->n_resume_counts = (size_t)s->n_choices;
            req->generate->resume_counts = counts;
        }
    }
    size_t n_toks = s->n_toks;
    if (warm_rid && s->n_choices > 1) {     /* choice `choice` alone */
        size_t off = 0;
        for (int c = 0; counts && c < choice; c++) off += counts[c];
        toks += off;
        n_toks = counts ? counts[choice] : 0;
        req->generate->n = 1;
        if (req->generate->max_tokens && n_toks >= req->generate->max_tokens)   /* (an ended choice) */
            req->generate->max_tokens = (uint32_t)n_toks + 1;
    }
    req->generate->n_resume_tokens = n_toks;
    req->generate->resume_tokens = toks;
    if (warm_rid) {
        req->request_id = warm_rid;
        req->generate->background = 1;      /* (no client waits on it: small chunks there) */
        req->generate->handover = req->generate->handover_overlap = 0;
        req->generate->logprobs = 0;
        req->generate->top_logprobs = 0;
    }
    size_t n = smollm3__request__get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    int rc = -1;
    if (buf) {
        smollm3__request__pack(req, buf);
        char err[SMOL_ERRLEN];
        rc = smol_client_send_raw(G.links[li].cli, buf, n, err) == SMOL_OK ? 0 : -1;
        if (rc) gw_log(4, "send to daemon %s failed: %s", G.links[li].endpoint, err);
    }
    req->generate->n_resume_tokens = 0;     /* ours, not the unpacker's */
    req->generate->resume_tokens = NULL;
    req->generate->n_resume_counts = 0;
    req->generate->resume_counts = NULL;
    smollm3__request__free_unpacked(req, NULL);
    free(buf);
    free(by_choice);
    free(counts);
    return rc;
}

/* The plain resume: s's request again to the pool's choice, which replays the tokens sent and
 * continues after them; 0 (s->link set) or -1.  Not where an abandoned new run of it may still be
 * (its request id is busy there). */
static int resend(struct gw_stream *s)
{
    const int li = pick(s->route);
    if (li < 0 || resend_to(s, li, 0, -1)) return -1;
    s->link = li;
    return 0;
}

/* Streams waiting for a daemon: sent again to the up one the pool picks, or failed once
 * their time is up. */
static void resume_waiting(double now)
{
    struct gw_stream *s = G.streams, *next;
    for (; s; s = next) {
        next = s->next;
        if (s->resume_by <= 0 || s->terminal) continue;
        if (!resend(s)) {
            s->resume_by = 0;
            s->resumes++;
            G.n_resumed++;
            gw_log(5, "request %llu resumed on %s after %u tokens (n = %d)", (unsigned long long)s->rid,
                   G.links[s->link].endpoint, s->n_toks, s->n_choices);
            continue;
        }
        if (now < s->resume_by) continue;
        s->resume_by = 0;
        G.n_resume_failed++;
        struct gw_error e;
        gw_error_http(&e, 503, "server_error", "daemon_unavailable", NULL,
                      "the inference daemon went away and none came back within --resume-timeout");
        gw_stream_fail(s, &e);
    }
}

/* ---- make-before-break hand-over ------------------------------------------ */

/* Daemon l is draining (SIGTERM): no new request goes there; health says when it is back. */
static void link_draining(struct gw_link *l)
{
    if (l->ready) gw_log(5, "daemon %s: draining", l->endpoint);
    l->ready = 0;
    l->next_health = smol_mono_s() + 1.0;
    aggregate();
}

static int choice_done(const struct gw_stream *s, unsigned c)
{
    return s->n_choices > 1 && (s->done_mask >> c & 1);
}

/* A round of warm-ups to h->link with the tokens sent so far: the first (rounds == 0) one for
 * each choice with tokens (choice 0 when none has), a later one for each unfinished choice that
 * streamed since its last; each an n = 1 request of the prompt and that choice's tokens, which
 * finds the last round's KV there and prefills only what came since.  0, or -1 (not sent; what
 * was sent of it is cancelled and the hand-over ended). */
static int ho_warm_round(struct gw_stream *s)
{
    struct gw_handover *h = s->ho;
    const int li = h->link;
    int any = 0;
    for (int c = 0; c < s->n_choices && c < GW_HO_CHOICES; c++) any |= s->ch_toks[c] > 0;
    for (int c = 0; c < s->n_choices && c < GW_HO_CHOICES; c++) {
        if (h->rounds ? choice_done(s, (unsigned)c) || s->ch_toks[c] <= h->warm_at[c] : any ? !s->ch_toks[c] : c > 0)
            continue;
        h->warm_rid[c] = smol_client_next_id(G.links[li].cli);
        h->warm_at[c] = s->ch_toks[c];
        h->n_warm++;
        if (resend_to(s, li, h->warm_rid[c], c)) {
            ho_end(h, 1);
            return -1;
        }
    }
    h->rounds++;
    h->round_t = smol_mono_s();
    G.n_ho_rounds++;
    return 0;
}

/* Starts warming the pool's choice up for s while its own daemon (draining) goes on generating
 * it: 0, or -1 when no other daemon is up, the stream's hand-overs are used up, or the send
 * failed. */
static int ho_start(struct gw_stream *s)
{
    if (!s->ho && (s->ho = calloc(1, sizeof *s->ho))) s->ho->link = -1;
    struct gw_handover *h = s->ho;
    if (!h || h->link >= 0 || h->tries >= GW_HO_TRIES) return -1;
    const int li = pick(s->route);
    if (li < 0 || li == s->link) return -1;
    h->link = li;
    h->rounds = 0;
    h->lag = 0;
    h->move = 0;
    memset(h->warm_at, 0, sizeof h->warm_at);
    if (ho_warm_round(s)) return -1;
    h->tries++;
    G.n_ho_started++;
    gw_log(6, "request %llu: make-before-break from %s to %s after %u tokens (n = %d)", (unsigned long long)s->rid,
           G.links[s->link].endpoint, G.links[li].endpoint, s->n_toks, s->n_choices);
    return 0;
}

/* The stream moves to the warmed daemon (the old run cancelled first unless `taken`: it stopped):
 * the plain resume there, with every token the client has, which prefills only what came since
 * the last round.  Called at a token boundary of the old run (its next token not sent), where
 * each choice's events are whole. */
static void ho_move(struct gw_stream *s, int taken)
{
    struct gw_handover *h = s->ho;
    const int li = h->link;
    if (!taken) cancel_on(s->link, s->rid);
    h->link = -1;
    h->move = 0;
    h->tries = 0;               /* (a later hand-over of it has its own) */
    if (!G.links[li].ready || resend_to(s, li, 0, -1)) {     /* (that one drains too): the pool's choice */
        s->link = -1;
        s->resume_by = smol_mono_s() + G.cfg.resume_timeout;
        resume_waiting(smol_mono_s());
        return;
    }
    gw_log(5, "request %llu resumed on %s after %u tokens (n = %d), make-before-break: %s after %u warm-up "
           "round%s, %u token%s streamed during the last", (unsigned long long)s->rid, G.links[li].endpoint, s->n_toks,
           s->n_choices, taken ? "taken over" : "moved", h->rounds, h->rounds == 1 ? "" : "s", h->lag,
           h->lag == 1 ? "" : "s");
    s->link = li;
    s->resumes++;
    G.n_resumed++;
    if (taken) G.n_ho_taken++;
    else G.n_ho_moved++;
}

/* The old run stopped (its grace ended, or its daemon went away) during the hand-over: the stream
 * moves to the warmed daemon now (`taken`), or, the rounds not done, its warm-ups are cancelled
 * and it waits for the plain resume, which finds what they prefilled where the pool sends it. */
static void ho_old_stopped(struct gw_stream *s)
{
    if (s->ho->move) {
        ho_move(s, 1);
        return;
    }
    ho_end(s->ho, 1);
    s->link = -1;
    s->resume_by = smol_mono_s() + G.cfg.resume_timeout;
    resume_waiting(smol_mono_s());
}

/* An event of a hand-over's warm-up of choice c: at its first token it is cancelled, and it has
 * ended at its Done, once the daemon has left its KV as a cached prefix (a request sent before
 * would not find it: a running request's KV is not offered).  Once every warm-up of the round
 * has ended, another round follows while the old run streamed more than
 * GW_HO_LAG tokens of a choice meanwhile and the round took more than GW_HO_ROUND_S, up to
 * GW_HO_ROUNDS: a cold cache's first round prefills the whole answer while hundreds of tokens may
 * stream on, the next only those, and so on.  Then the stream moves at the old run's next token:
 * the move is one more such round (an admission there and a prefill of what came since), the
 * client's pause.  A warm-up refused (that daemon drains too, or
 * has no room) ends the hand-over: the old run goes on, and another is tried once. */
static void ho_warm_event(struct gw_stream *s, int c, const Smollm3__Event *ev)
{
    struct gw_handover *h = s->ho;
    if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {   /* prefilled: cancelled, its Done follows */
        if (!(h->warm_cancelled >> c & 1)) cancel_on(h->link, h->warm_rid[c]);
        h->warm_cancelled |= 1u << c;
        return;
    }
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR && !(h->warm_cancelled >> c & 1)) {
        gw_log(5, "request %llu: a warm-up on %s failed: %s", (unsigned long long)s->rid, G.links[h->link].endpoint,
               ev->error && ev->error->message ? ev->error->message : "error");
        if (ev->error && (int)ev->error->code == SMOL_ESHUTDOWN) link_draining(&G.links[h->link]);
        h->warm_rid[c] = 0;     /* (ended there) */
        h->n_warm--;
        ho_end(h, 1);
        if (s->link >= 0 && !G.links[s->link].ready) ho_start(s);
        return;
    }
    if (ev->kind_case != SMOLLM3__EVENT__KIND_DONE && ev->kind_case != SMOLLM3__EVENT__KIND_ERROR) return;
    h->warm_rid[c] = 0;         /* ended: its KV is in the prefix cache there (engine.c keep_history) */
    h->warm_cancelled &= ~(1u << c);
    if (--h->n_warm) return;
    uint32_t lag = 0;
    for (int i = 0; i < s->n_choices && i < GW_HO_CHOICES; i++)
        if (!choice_done(s, (unsigned)i) && s->ch_toks[i] - h->warm_at[i] > lag) lag = s->ch_toks[i] - h->warm_at[i];
    h->lag = lag;
    const double took = smol_mono_s() - h->round_t;
    if (lag > GW_HO_LAG && took > GW_HO_ROUND_S && h->rounds < GW_HO_ROUNDS) {
        gw_log(6, "request %llu: warm-up round %u on %s: %u tokens streamed during the last (%.0f ms)",
               (unsigned long long)s->rid, h->rounds + 1, G.links[h->link].endpoint, lag, 1e3 * took);
        ho_warm_round(s);       /* (not sent: the hand-over ended, the old run goes on) */
        return;
    }
    h->move = 1;
}

/* Event.handover: s's daemon drains and generates on; the pool's choice is warmed up beside it,
 * or, with no other daemon up, s is given back now and held until one is. */
static void on_handover(struct gw_stream *s, struct gw_link *l)
{
    link_draining(l);
    if (!resumable(s) || !ho_start(s)) return;  /* (not resumable: it runs to the grace's end) */
    cancel_on(s->link, s->rid);
    s->link = -1;
    s->resume_by = smol_mono_s() + G.cfg.resume_timeout;
    resume_waiting(smol_mono_s());
}

/* ---- receiving ---------------------------------------------------------- */

/* Daemon l went away: its streams wait to be resumed (or fail, those that cannot be). */
static void daemon_lost(struct gw_link *l)
{
    const int li = (int)(l - G.links);
    if (l->ready || G.n_inflight) gw_log(3, "daemon %s: connection lost", l->endpoint);
    l->ready = 0;
    l->n_lost++;
    l->health_rid = l->stats_rid = 0;
    l->next_health = 0;
    aggregate();
    const double now = smol_mono_s();
    struct gw_error e;
    gw_error_http(&e, 503, "server_error", "daemon_unavailable", NULL, "the inference daemon went away");
    struct gw_stream *s = G.streams, *next;
    for (; s; s = next) {
        next = s->next;
        if (s->follow_rid && s->follow_link == li) {   /* its follow-up lost with the daemon */
            follow_reply(s, NULL);
            continue;
        }
        if (s->ho && s->ho->link == li) ho_end(s->ho, 0);  /* a hand-over's warm daemon: the old run goes on */
        if (!s->sent || s->terminal || s->link != li) continue;
        if (s->ho && s->ho->link >= 0) {        /* the old run of a hand-over */
            ho_old_stopped(s);
            continue;
        }
        s->link = -1;
        if (resumable(s)) s->resume_by = now + G.cfg.resume_timeout;
        else gw_stream_fail(s, &e);
    }
    resume_waiting(now);
}

/* The event's bytes (a token's text, a chunk, the reply's pieces) were lost to a failed
 * allocation: the answer would go on without them.  The daemon's request is cancelled and the
 * client told with the protocol's error (before any byte: an HTTP error); when the stream had
 * ended already, or telling it lost bytes too, its connection is closed instead of ended. */
static void lost(struct gw_stream *s)
{
    gw_log(4, "request %llu: out of memory while encoding its answer: failed", (unsigned long long)s->rid);
    if (s->sent && !s->terminal) gw_daemon_cancel(s);
    if (s->ended) {
        s->broken = 1;
    } else {
        struct gw_error e;
        gw_error_set(&e, SMOL_ENOMEM, NULL, "out of memory: the answer lost bytes");
        const unsigned oom = gw_oom_count;
        gw_stream_fail(s, &e);
        if (gw_oom_count != oom) s->broken = 1;
    }
    if (s->broken) s->ended = 1;
}

static void on_health(struct gw_link *l, const Smollm3__HealthReply *h)
{
    int was = l->ready;
    l->max_request = h->max_request_bytes;
    if (l->max_request && G.cfg.max_body > l->max_request) {
        /* a body the gateway accepts would be a frame the daemon drops, and with it the
         * link every stream in flight shares: refuse to serve until configured right */
        if (!l->refused)
            gw_log(3, "--max-body-bytes %zu is over what the daemon accepts (max_request_bytes %llu, daemon %s): "
                   "lower --max-body-bytes (or raise the daemon's max_request_bytes); not serving",
                   G.cfg.max_body, (unsigned long long)l->max_request, l->endpoint);
        l->refused = 1;
        l->ready = 0;
        aggregate();
        return;
    }
    l->refused = 0;
    l->ready = h->ready;
    if (!G.cfg.model_name && h->model && *h->model) snprintf(G.model, sizeof G.model, "%s", h->model);
    if (h->ready) G.thinking = h->thinking_supported;
    if (l->ready && !was) gw_log(6, "daemon %s ready, model %s", l->endpoint, G.model);
    aggregate();
    if (l->ready && !was) resume_waiting(smol_mono_s());
}

static void stream_event(struct gw_stream *s, struct gw_link *l, Smollm3__Event *ev);

/* Routes a daemon's event. */
static void on_event(struct gw_link *l, Smollm3__Event *ev)
{
    if (ev->request_id && ev->request_id == l->health_rid) {
        l->health_rid = 0;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_HEALTH) on_health(l, ev->health);
        return;
    }
    if (ev->request_id && ev->request_id == l->stats_rid) {
        l->stats_rid = 0;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_STATS) {
            l->stats = *ev->stats;       /* its strings go with ev: copied */
            snprintf(l->stats_kv_type, sizeof l->stats_kv_type, "%s", ev->stats->kv_type ? ev->stats->kv_type : "");
            l->stats.kv_type = l->stats_kv_type;
            l->stats.tenants = NULL;    /* copied too */
            l->stats.n_tenants = 0;
            l->n_stats_tenants = 0;
            for (size_t i = 0; i < ev->stats->n_tenants && l->n_stats_tenants < 64; i++) {
                const Smollm3__TenantStats *t = ev->stats->tenants[i];
                struct gw_tenant_stats *x = &l->stats_tenants[l->n_stats_tenants++];
                snprintf(x->id, sizeof x->id, "%s", t->tenant ? t->tenant : "");
                x->queued = t->queued;
                x->running = t->running;
                x->preempted = t->preempted;
                x->preemptions = t->preemptions_total;
                x->kv_bytes = t->kv_bytes;
                x->served = t->tokens_served;
            }
            l->have_stats = 1;
            aggregate();
        }
        return;
    }
    const int li = (int)(l - G.links);
    struct gw_stream *s = gw_stream_by_rid(ev->request_id);
    if (!s && ev->request_id) {         /* a hand-over's warm-up, or a follow-up */
        for (s = G.streams; s; s = s->next)
            if (s->ho && s->ho->n_warm && s->ho->link == li)
                for (int c = 0; c < s->n_choices && c < GW_HO_CHOICES; c++)
                    if (s->ho->warm_rid[c] == ev->request_id) {
                        ho_warm_event(s, c, ev);
                        return;
                    }
        for (s = G.streams; s && !(s->follow_rid == ev->request_id && s->follow_link == (int)(l - G.links)); s = s->next) {}
        if (s) follow_reply(s, ev);
        return;
    }
    if (!s || s->terminal) return;
    if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE && ev->done->usage &&
        s->resumes && s->link == li)      /* a resumed run's: what the warm-ups saved */
        gw_log(5, "request %llu choice %u: the resumed run found %u of its replayed tokens cached (n = %d)",
               (unsigned long long)s->rid, ev->done->usage->choice, ev->done->usage->resume_cached_tokens, s->n_choices);
    if (s->link != li) return;  /* cancelled, or moved */
    if (s->ho && s->ho->link >= 0) {            /* the old run of a hand-over */
        if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN && ev->token->token_id >= 0 && s->ho->move) {
            ho_move(s, 0);                      /* (its token not sent: the new run makes it) */
            return;
        }
        if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR && ev->error && (int)ev->error->code == SMOL_ESHUTDOWN) {
            link_draining(l);                   /* its grace ended */
            ho_old_stopped(s);
            return;
        }
    }
    if (ev->kind_case == SMOLLM3__EVENT__KIND_HANDOVER) {
        on_handover(s, l);
        return;
    }
    stream_event(s, l, ev);
}

/* An event of s's own run: to the stream's encoder (the resume's and a hand-over's bookkeeping
 * first). */
static void stream_event(struct gw_stream *s, struct gw_link *l, Smollm3__Event *ev)
{
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) {
        /* the daemon's code through the one map (rules.h), carried as it is */
        int code = ev->error ? (int)ev->error->code : SMOL_EINTERNAL;
        if (code == SMOL_ESHUTDOWN && resumable(s)) {
            /* the daemon is draining (SIGTERM) and gives the stream back: resumed on another
             * one now, or on this one when it is back */
            link_draining(l);
            s->link = -1;
            s->resume_by = smol_mono_s() + G.cfg.resume_timeout;
            resume_waiting(smol_mono_s());
            return;
        }
        if (code <= 0 || code >= SMOL_ERR_COUNT) code = SMOL_EINTERNAL;
        struct gw_error e;
        /* and the field it names (Error.param, smol_err_param) */
        gw_error_set(&e, (enum smol_err)code, ev->error && ev->error->param && *ev->error->param ? ev->error->param : NULL, "%s",
                     ev->error && ev->error->message && *ev->error->message ? ev->error->message
                                                                            : smol_err_name(code));
        gw_stream_fail(s, &e);
        return;
    }
    if (s->kind == GW_QUERY) {          /* one reply: the response */
        if (s->proto && s->proto->event) s->proto->event(s, ev);
        mark_terminal(s);
        if (waiting(s)) wake(s);
        return;
    }
    if (ev->kind_case == SMOLLM3__EVENT__KIND_STARTED) {
        if (s->resumes) return;         /* its client had the first daemon's */
        s->started = 1;
        s->prompt_tokens = ev->started->prompt_tokens;
        s->cached_tokens = ev->started->cached_tokens;
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {
        const uint32_t ci = ev->token->choice;
        if (s->n_choices > 1 && ci < 32 && (s->done_mask >> ci & 1)) return;   /* a choice ended already */
        s->n_tokens++;
        if (ci < GW_HO_CHOICES && ev->token->token_id >= 0 && s->packed && (int)ci < s->n_choices)
            s->ch_toks[ci]++;               /* (a hand-over's rounds: what streamed since the last) */
        if (ev->token->token_id >= 0 && s->packed && (int)ci < s->n_choices) {  /* what a resume replays */
            if (s->n_toks == s->cap_toks) {
                uint32_t cap = s->cap_toks ? 2 * s->cap_toks : 64;
                int32_t *t = realloc(s->toks, cap * sizeof *t);
                if (t) s->toks = t;
                uint8_t *c = s->n_choices > 1 ? realloc(s->tok_choice, cap) : NULL;
                if (c) s->tok_choice = c;
                if (t && (c || s->n_choices == 1)) s->cap_toks = cap;
            }
            if (s->n_toks < s->cap_toks) {
                if (s->n_choices > 1) s->tok_choice[s->n_toks] = (uint8_t)ci;
                s->toks[s->n_toks++] = ev->token->token_id;
            } else {
                free(s->packed);        /* a token lost: this stream cannot be resumed */
                s->packed = NULL;
            }
        }
        if (!s->t_first) {
            s->t_first = smol_mono_s();
            gw_metrics_first_token(s->t_first - s->t_sent);
        }
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) {
        Smollm3__Done *d = ev->done;
        if (s->n_choices > 1) {         /* a resume replays an ended choice to its end again: its Done once */
            const uint32_t ci = d->usage ? d->usage->choice : 0;
            if (ci < 32 && (s->done_mask >> ci & 1)) return;
            if (ci < 32) s->done_mask |= 1u << ci;
        }
        if (d->usage) {         /* n > 1: the prompt once (choice 0's), the outputs summed */
            if (d->usage->choice == 0 && !s->resumes) {
                s->prompt_tokens = d->usage->prompt_tokens;
                s->cached_tokens = d->usage->cached_tokens;
            }
            s->completion_tokens += d->usage->completion_tokens;
            s->reasoning_tokens += d->usage->reasoning_tokens;
            s->drafted_tokens += d->usage->drafted_tokens;
            s->accepted_tokens += d->usage->accepted_tokens;
            s->pred_accepted += d->usage->prediction_accepted_tokens;
            s->pred_rejected += d->usage->prediction_rejected_tokens;
            s->decode_steps += d->usage->decode_steps;
        }
        s->finish = smol_client_finish_name(d->finish_reason);
        s->tier = d->service_tier;
        if (++s->n_done >= s->n_choices) mark_terminal(s);
    }
    const unsigned oom = gw_oom_count;
    if (s->proto && s->proto->event) s->proto->event(s, ev);  /* the stream's protocol encoder */
    if (gw_oom_count != oom) lost(s);   /* then answered as any failed stream: resumed below */
    if (waiting(s)) {
        /* streaming: answer once started; non-streaming: once finished */
        if ((gw_kind_sse(s->kind) && s->started) || gw_stream_done(s)) wake(s);
    } else {
        gw_stream_push(s);
    }
}

void gw_daemon_drain(void)
{
    static int depth;           /* a resume sends, and a send drains: once is enough */
    if (depth) return;
    depth++;
    for (unsigned i = 0; i < G.n_links; i++) {
        struct gw_link *l = &G.links[i];
        for (;;) {
            Smollm3__Event *ev = NULL;
            char err[SMOL_ERRLEN];
            enum smol_err e = smol_client_recv(l->cli, 0, NULL, &ev, err);
            if (e == SMOL_OK && ev) {
                on_event(l, ev);
                smol_client_event_free(&ev);
                continue;
            }
            if (strstr(err, "disconnected")) {
                l->connected = 0;
                daemon_lost(l);
                continue;
            }
            break;              /* timed out: nothing more now */
        }
    }
    depth--;
}

static void tick_link(struct gw_link *l, double now)
{
    int conn = smol_client_connected(l->cli);
    if (conn != l->connected) {
        l->connected = conn;
        if (conn) {
            gw_log(6, "connected to daemon %s", l->endpoint);
            l->next_health = 0;
            aggregate();
        } else {
            daemon_lost(l);
        }
    }
    if (!conn) l->ready = 0;
    if (conn && now >= l->next_health) {
        if (!l->ready) {
            l->health_rid = 0;
            send_probe(l, SMOLLM3__REQUEST__KIND_HEALTH, &l->health_rid);
            l->next_health = now + 1.0;
        } else {
            l->next_health = now + 10.0;
            send_probe(l, SMOLLM3__REQUEST__KIND_HEALTH, &l->health_rid);
        }
    }
    if (conn && now >= l->next_stats) {
        l->next_stats = now + 2.0;
        send_probe(l, SMOLLM3__REQUEST__KIND_STATS, &l->stats_rid);
    }
}

void gw_daemon_tick(double now)
{
    /* a follow-up the daemon never answers (a frame it refused unparsed gets request_id 0) fails
     * after --request-timeout: its stream ends instead of waiting forever */
    for (struct gw_stream *s = G.streams, *next; s; s = next) {
        next = s->next;
        if (s->follow_rid && now - s->follow_sent > G.cfg.request_timeout) follow_reply(s, NULL);
    }
    for (unsigned i = 0; i < G.n_links; i++) tick_link(&G.links[i], now);
    aggregate();
    resume_waiting(now);
}

/* The first word of path into out[41] (a Z85 key); 0 or -1 (logged). */
static int read_key(const char *path, char *out)
{
    FILE *f = fopen(path, "r");
    char buf[64] = "";
    int ok = f && fscanf(f, "%63s", buf) == 1 && strlen(buf) == 40;
    if (f) fclose(f);
    if (!ok) {
        gw_log(3, "--curve-key-file %s: expected a secret key of 40 Z85 characters", path);
        return -1;
    }
    memcpy(out, buf, 41);
    return 0;
}

/* The public key --curve-server-keys gives endpoint, into out[41]; 1 found, 0 not, -1 bad file (logged). */
static int server_key(const char *endpoint, char *out)
{
    if (!G.cfg.curve_server_keys) return 0;
    FILE *f = fopen(G.cfg.curve_server_keys, "r");
    if (!f) {
        gw_log(3, "--curve-server-keys %s: %s", G.cfg.curve_server_keys, strerror(errno));
        return -1;
    }
    char line[1024], ep[900], key[64];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%899s %63s", ep, key) != 2) continue;
        if (!strcmp(ep, endpoint) && strlen(key) == 40) {
            memcpy(out, key, 41);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

void gw_daemon_open(void)
{
    struct smol_client_opts o;
    smol_client_opts_default(&o);
    o.send_timeout_ms = 0;
    o.heartbeat_ivl_ms = 1000;
    o.heartbeat_timeout_ms = 3000;
    char secret[41] = "", server[41];
    if (G.cfg.curve_key_file && read_key(G.cfg.curve_key_file, secret)) exit(1);
    G.n_links = G.cfg.n_daemons;
    for (unsigned i = 0; i < G.n_links; i++) {
        char err[SMOL_ERRLEN];
        G.links[i].endpoint = G.cfg.daemons[i];
        o.curve_server_key = o.curve_secret_key = NULL;
        if (!strncmp(G.cfg.daemons[i], "tcp://", 6)) {
            /* between nodes: authenticated unless explicitly not (issue 48 item 4) */
            int k = secret[0] ? server_key(G.cfg.daemons[i], server) : 0;
            if (k < 0) exit(1);
            if (k) {
                o.curve_server_key = server;
                o.curve_secret_key = secret;
            } else if (!G.cfg.allow_plain_tcp) {
                gw_log(3, "daemon %s: tcp:// needs CURVE (--curve-key-file and its key in --curve-server-keys) "
                          "or --allow-plain-tcp", G.cfg.daemons[i]);
                exit(1);
            }
        }
        if (smol_client_open(&G.links[i].cli, G.cfg.daemons[i], &o, err) != SMOL_OK) {
            gw_log(3, "cannot open the client of daemon %s: %s", G.cfg.daemons[i], err);
            exit(1);
        }
    }
}

void gw_daemon_close(void)
{
    for (unsigned i = 0; i < G.n_links; i++) smol_client_close(&G.links[i].cli);
}
