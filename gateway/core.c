/*
 * core.c - the protocol-independent core of the gateway's generating
 * endpoints (core.h): admission, the stream that carries a request to the
 * daemon, the refusal of a parsed request.
 */
#include "gateway/core.h"
#include "gateway/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    const unsigned mine = gw_auth_max_inflight(r->key, G.cfg.max_inflight);
    if (r->key >= 0 && gw_stream_inflight_of(r->key) >= mine) {  /* one key cannot take another's room */
        gw_metrics_refusal(GW_REFUSE_INFLIGHT_KEY, r->key);
        *ret = gw_queue_error(r, 429, "rate_limit_error", "too_many_requests",
                              "too many requests in flight for this API key (limit %u)", mine);
        return 0;
    }
    return 1;
}

/* The class a request is scheduled in: what it asked, capped by its key's
 * max_tier; Anthropic's "auto" is priority where the key may have it. */
static Smollm3__ServiceTier effective_tier(int asked, int key)
{
    static const int rank[] = { [SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX] = GW_TIER_FLEX,
                                [SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT] = GW_TIER_DEFAULT,
                                [SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY] = GW_TIER_PRIORITY };
    const int cap = gw_auth_max_tier(key);
    if (asked == GW_SERVICE_TIER_AUTO_PRIORITY)
        return key >= 0 && cap == GW_TIER_PRIORITY ? SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY
                                                   : SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT;
    if (asked < 0 || asked > SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX) return SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT;
    if (rank[asked] <= cap) return (Smollm3__ServiceTier)asked;
    return cap == GW_TIER_FLEX ? SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX : SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT;
}

int gw_pack_generate(struct gw_stream *s, Smollm3__GenerateRequest *g)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req.request_id = s->rid;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    g->tenant = (char *)s->tenant;      /* sessions and cached prefixes are the key's own (auth.c) */
    g->service_tier = effective_tier((int)g->service_tier, s->key);
    s->tier = (int)g->service_tier;
    gw_stream_route(s, g);              /* which daemon of the pool (daemon.c) */
    /* a request without a seed gets one here, not from the daemon: a resumed stream
     * (daemon.c) continues with the draws of the same seed */
    Smollm3__SamplingParams own = SMOLLM3__SAMPLING_PARAMS__INIT, *was = g->sampling;
    uint64_t seed;
    int pinned = 0;
    if (!g->sampling) g->sampling = &own;
    if (g->sampling->seed_opt_case != SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED && !gw_random_bytes(&seed, sizeof seed)) {
        g->sampling->seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED;
        g->sampling->seed = seed;
        pinned = 1;
    }
    g->handover = G.cfg.resume_timeout > 0;     /* a draining daemon gives it back */
    g->handover_overlap = g->handover;          /* after generating on while it moves (daemon.c) */
    s->packed_len = smollm3__request__get_packed_size(&req);
    s->packed = malloc(s->packed_len ? s->packed_len : 1);
    if (s->packed) smollm3__request__pack(&req, s->packed);
    g->handover = 0;
    g->handover_overlap = 0;
    if (pinned) g->sampling->seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT__NOT_SET;
    g->sampling = was;
    return s->packed ? 0 : -1;
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

enum MHD_Result gw_params_error(struct gw_req *r, const struct gw_params *p, const char *why)
{
    struct gw_error e = p->err;
    if (!e.status) gw_error_set(&e, SMOL_EINVAL, "", "%s", why && *why ? why : "invalid request");
    if (why && *why) snprintf(e.msg, sizeof e.msg, "%s", why);
    return gw_queue_gw_error(r, &e);
}
