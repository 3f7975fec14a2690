/*
 * daemon.c - the gateway's link to smollm3d (daemon.h): one DEALER
 * (daemon/client/client.h) polled from the main epoll loop, stream
 * bookkeeping and routing of daemon events to their stream's encoder; the
 * HTTP side is reached only through the hooks it registered.
 *
 * ZMQ_FD is edge-triggered: gw_daemon_drain() reads until nothing is left,
 * and the loop calls it after every wake-up and after every send.  The
 * client never blocks: send_timeout_ms is 0, so with no daemon connected a
 * send fails at once (ZMQ_IMMEDIATE) and the request gets 503.
 *
 * Liveness: the socket monitor (smol_client_connected, looked at on every
 * tick) and ZeroMQ heartbeats report a vanished daemon; every stream in
 * flight is then failed, `ready` drops, and health probes run every second
 * until the daemon (reconnected by ZeroMQ on its own) answers ready again.
 * Stats are polled every 2 s for /metrics.
 */
#include "gateway/daemon.h"
#include "gateway/auth.h"

#include <stdlib.h>
#include <string.h>

#define GW_MAX_PENDING (8u << 20)   /* SSE bytes queued for one slow client */

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
    s->rid = smol_client_next_id(G.cli);
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

static void lost(struct gw_stream *s);

/* s's follow-up is answered (ev), or failed (ev NULL: the daemon went away). */
static void follow_reply(struct gw_stream *s, const Smollm3__Event *ev)
{
    Smollm3__Event lost_ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    if (!ev) {
        er.code = SMOLLM3__ERROR_CODE__ERROR_IO;
        er.message = G.daemon_connected ? "no answer from the daemon" : "the inference daemon went away";
        lost_ev.request_id = s->follow_rid;
        lost_ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
        lost_ev.error = &er;
        ev = &lost_ev;
    }
    s->follow_rid = 0;
    const unsigned oom = gw_oom_count;
    if (s->proto && s->proto->event) s->proto->event(s, ev);
    if (gw_oom_count != oom) lost(s);   /* its last bytes lost: closed, not ended as if whole */
    if (waiting(s)) wake(s);
    else gw_stream_push(s);
}

int gw_daemon_send_follow(struct gw_stream *s, Smollm3__Request *req)
{
    char err[SMOL_ERRLEN];
    uint64_t rid = smol_client_next_id(G.cli);
    req->protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req->request_id = rid;
    size_t n = smollm3__request__get_packed_size(req);
    if (G.daemon_max_request && n > G.daemon_max_request) {
        /* a frame the daemon would refuse, or drop with the link every stream shares */
        gw_metrics_refusal(GW_REFUSE_DAEMON_FRAME, s->key);
        return -1;
    }
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return -1;
    smollm3__request__pack(req, b);
    enum smol_err e = G.daemon_connected ? smol_client_send_raw(G.cli, b, n, err) : SMOL_EIO;
    free(b);
    if (e != SMOL_OK) return -1;
    s->follow_rid = rid;
    s->follow_sent = smol_mono_s();
    return 0;
}

void gw_streams_fail_all(const struct gw_error *e)
{
    struct gw_stream *s = G.streams, *next;
    for (; s; s = next) {
        next = s->next;
        if (s->follow_rid) {
            follow_reply(s, NULL);
            continue;
        }
        if (!s->sent) {
            if (!s->req) gw_stream_free(s);     /* unclaimed UI stream */
            continue;
        }
        if (!s->terminal) gw_stream_fail(s, e);
    }
}

/* ---- sending ------------------------------------------------------------ */

int gw_daemon_fits(const struct gw_stream *s)
{
    if (!G.daemon_max_request || s->packed_len <= G.daemon_max_request) return 1;
    gw_metrics_refusal(GW_REFUSE_DAEMON_FRAME, s->key);
    return 0;
}

/* Sends s->packed.  0 on success; else fails nothing and returns -1. */
int gw_daemon_send_stream(struct gw_stream *s)
{
    char err[SMOL_ERRLEN];
    if (smol_client_send_raw(G.cli, s->packed, s->packed_len, err) != SMOL_OK) {
        gw_log(4, "send to daemon failed: %s", err);
        gw_daemon_drain();
        return -1;
    }
    free(s->packed);
    s->packed = NULL;
    s->sent = 1;
    s->t_sent = smol_mono_s();
    gw_stream_hold(s);
    gw_daemon_drain();
    return 0;
}

void gw_daemon_cancel(struct gw_stream *s)
{
    if (!s->sent || s->terminal) return;
    char err[SMOL_ERRLEN];
    if (smol_client_send_cancel(G.cli, s->rid, NULL, err) != SMOL_OK)
        gw_log(4, "cancel of %llu not sent: %s", (unsigned long long)s->rid, err);
    mark_terminal(s);
    gw_daemon_drain();
}

static void send_probe(int kind_case, uint64_t *rid)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    Smollm3__HealthRequest h = SMOLLM3__HEALTH_REQUEST__INIT;
    Smollm3__StatsRequest st = SMOLLM3__STATS_REQUEST__INIT;
    req.kind_case = kind_case;
    if (kind_case == SMOLLM3__REQUEST__KIND_HEALTH) req.health = &h;
    else req.stats = &st;
    char err[SMOL_ERRLEN];
    uint64_t id = 0;
    if (smol_client_send(G.cli, &req, &id, err) == SMOL_OK) *rid = id;
    gw_daemon_drain();
}

/* ---- receiving ---------------------------------------------------------- */

static void daemon_lost(void)
{
    if (G.daemon_ready || G.n_inflight) gw_log(3, "daemon connection lost");
    G.daemon_ready = 0;
    struct gw_error e;
    gw_error_http(&e, 503, "server_error", "daemon_unavailable", NULL, "the inference daemon went away");
    gw_streams_fail_all(&e);
    G.next_health = 0;
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

static void on_event(Smollm3__Event *ev)
{
    if (ev->request_id && ev->request_id == G.health_rid) {
        G.health_rid = 0;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_HEALTH) {
            int was = G.daemon_ready;
            G.daemon_max_request = ev->health->max_request_bytes;
            if (G.daemon_max_request && G.cfg.max_body > G.daemon_max_request) {
                /* a body the gateway accepts would be a frame the daemon drops, and with it the
                 * link every stream in flight shares: refuse to serve until configured right */
                if (!G.daemon_refused)
                    gw_log(3, "--max-body-bytes %zu is over what the daemon accepts (max_request_bytes %llu): "
                           "lower --max-body-bytes (or raise the daemon's max_request_bytes); not serving",
                           G.cfg.max_body, (unsigned long long)G.daemon_max_request);
                G.daemon_refused = 1;
                G.daemon_ready = 0;
                return;
            }
            G.daemon_refused = 0;
            G.daemon_ready = ev->health->ready;
            if (!G.cfg.model_name && ev->health->model && *ev->health->model)
                snprintf(G.model, sizeof G.model, "%s", ev->health->model);
            if (ev->health->ready) G.thinking = ev->health->thinking_supported;
            if (G.daemon_ready && !was) gw_log(6, "daemon ready, model %s", G.model);
        }
        return;
    }
    if (ev->request_id && ev->request_id == G.stats_rid) {
        G.stats_rid = 0;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_STATS) {
            G.stats = *ev->stats;       /* its strings go with ev: copied */
            snprintf(G.stats_kv_type, sizeof G.stats_kv_type, "%s", ev->stats->kv_type ? ev->stats->kv_type : "");
            G.stats.kv_type = G.stats_kv_type;
            G.stats.tenants = NULL;     /* copied too */
            G.stats.n_tenants = 0;
            G.n_stats_tenants = 0;
            for (size_t i = 0; i < ev->stats->n_tenants && G.n_stats_tenants < 64; i++) {
                const Smollm3__TenantStats *t = ev->stats->tenants[i];
                struct gw_tenant_stats *x = &G.stats_tenants[G.n_stats_tenants++];
                snprintf(x->id, sizeof x->id, "%s", t->tenant ? t->tenant : "");
                x->queued = t->queued;
                x->running = t->running;
                x->preempted = t->preempted;
                x->preemptions = t->preemptions_total;
                x->kv_bytes = t->kv_bytes;
                x->served = t->tokens_served;
            }
            G.have_stats = 1;
        }
        return;
    }
    struct gw_stream *s = gw_stream_by_rid(ev->request_id);
    if (!s && ev->request_id) {
        for (s = G.streams; s && s->follow_rid != ev->request_id; s = s->next) {}
        if (s) follow_reply(s, ev);
        return;
    }
    if (!s || s->terminal) return;      /* cancelled or gone */
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) {
        /* the daemon's code through the one map (rules.h), carried as it is */
        int code = ev->error ? (int)ev->error->code : SMOL_EINTERNAL;
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
        s->started = 1;
        s->prompt_tokens = ev->started->prompt_tokens;
        s->cached_tokens = ev->started->cached_tokens;
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {
        s->n_tokens++;
        if (!s->t_first) {
            s->t_first = smol_mono_s();
            gw_metrics_first_token(s->t_first - s->t_sent);
        }
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) {
        Smollm3__Done *d = ev->done;
        if (d->usage) {         /* n > 1: the prompt once (choice 0's), the outputs summed */
            if (d->usage->choice == 0) {
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
    for (;;) {
        Smollm3__Event *ev = NULL;
        char err[SMOL_ERRLEN];
        enum smol_err e = smol_client_recv(G.cli, 0, NULL, &ev, err);
        if (e == SMOL_OK && ev) {
            on_event(ev);
            smol_client_event_free(&ev);
            continue;
        }
        if (strstr(err, "disconnected")) {
            G.daemon_connected = 0;
            daemon_lost();
            continue;
        }
        break;                  /* timed out: nothing more now */
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
    int conn = smol_client_connected(G.cli);
    if (conn != G.daemon_connected) {
        G.daemon_connected = conn;
        if (conn) {
            gw_log(6, "connected to daemon %s", G.cfg.daemon);
            G.next_health = 0;
        } else {
            daemon_lost();
        }
    }
    if (!conn) G.daemon_ready = 0;
    if (conn && now >= G.next_health && (!G.daemon_ready || now >= G.next_health)) {
        if (!G.daemon_ready) {
            G.health_rid = 0;
            send_probe(SMOLLM3__REQUEST__KIND_HEALTH, &G.health_rid);
            G.next_health = now + 1.0;
        } else {
            G.next_health = now + 10.0;
            send_probe(SMOLLM3__REQUEST__KIND_HEALTH, &G.health_rid);
        }
    }
    if (conn && now >= G.next_stats) {
        G.next_stats = now + 2.0;
        send_probe(SMOLLM3__REQUEST__KIND_STATS, &G.stats_rid);
    }
}

void gw_daemon_open(void)
{
    struct smol_client_opts o;
    smol_client_opts_default(&o);
    o.send_timeout_ms = 0;
    o.heartbeat_ivl_ms = 1000;
    o.heartbeat_timeout_ms = 3000;
    char err[SMOL_ERRLEN];
    if (smol_client_open(&G.cli, G.cfg.daemon, &o, err) != SMOL_OK) {
        gw_log(3, "cannot open daemon client: %s", err);
        exit(1);
    }
}
