/*
 * rpc.c - the RPC loop of smollm3d (see rpc.h): the route tables, sending
 * with backpressure, client requests, engine events, the loop.  What a
 * request must satisfy before it is routed is checked in request.c.
 */
#include "daemon/server/rpc.h"
#include "daemon/server/curve.h"
#include "daemon/server/engine_wire.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <zmq.h>

#include "daemon/text/text.h"
#include "daemon/model/rules.h"
#include "daemon/server/log.h"

/* ================================================================ routes */

enum route_kind {
    ROUTE_GEN,      /* a generate stream: events until TERMINAL */
    ROUTE_QUERY,    /* stats / session query: one reply from the engine */
    ROUTE_REPLY,    /* a reply made here that could not be sent yet */
    ROUTE_PROBE,    /* watchdog stats probe: the reply is not forwarded */
};

struct route {
    uint64_t id;                /* internal id (engine side) */
    uint64_t client_id;         /* the client's request_id */
    enum route_kind kind;
    unsigned char ident[256];   /* ZeroMQ routing id of the client */
    uint8_t ident_len;
    uint8_t delim;              /* the client sent an empty delimiter: mirror it */
    uint8_t terminal;           /* the engine sent the last event */
    uint8_t paused;             /* PAUSE sent, RESUME not yet */
    uint8_t gone;               /* the client vanished: events are discarded */
    uint8_t keyed;              /* in the (identity, client_id) table */
    struct smol_request *parked;/* waiting for its grammar's index (grammar_cache.h), not yet submitted */
    zmq_msg_t *q;               /* ring of queued Event frames [q_cap] */
    size_t q_head, q_len, q_cap;
    struct route *next_id, *next_key;       /* hash chains */
    struct route *pend_prev, *pend_next;    /* list of routes with queued frames */
};

struct smol_rpc {
    void *zctx, *router, *engine;
    struct smol_rpc_config cfg;
    char model_name[256];
    char ipc_path[1024];        /* socket file, for chmod */
    uint64_t next_id;           /* internal ids: 1, 2, ... */
    struct route **by_id, **by_key;
    size_t n_buckets, n_routes, n_replies;
    struct route *pending;      /* routes with queued frames */
    int ready, draining, drained, quit;
    double drained_at, drain_started;
    double wd_last_alive, wd_next_tick;
    uint64_t wd_probe;          /* internal id of the outstanding probe, 0 = none */
    uint64_t *parked;           /* ids of routes with a parked request (stale ids are skipped) */
    size_t n_parked, cap_parked;
    struct smol_rpc_counters ctr;
};

#define RETRY_MS 5              /* queued frames are retried this often */
#define FLUSH_AFTER_DRAIN_S 2.0 /* after DRAINED, slow clients get this long to take their events */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static uint64_t key_hash(const unsigned char *ident, size_t n, uint64_t client_id)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ident[i]) * 0x100000001b3ull;
    return mix64(h ^ mix64(client_id));
}

static int tables_grow(struct smol_rpc *rpc)
{
    size_t nb = rpc->n_buckets ? rpc->n_buckets * 2 : 256;
    struct route **bi = calloc(nb, sizeof *bi), **bk = calloc(nb, sizeof *bk);
    if (!bi || !bk) { free(bi); free(bk); return -1; }
    for (size_t i = 0; i < rpc->n_buckets; i++) {
        for (struct route *r = rpc->by_id[i], *nx; r; r = nx) {
            nx = r->next_id;
            size_t b = mix64(r->id) & (nb - 1);
            r->next_id = bi[b]; bi[b] = r;
        }
        for (struct route *r = rpc->by_key[i], *nx; r; r = nx) {
            nx = r->next_key;
            size_t b = key_hash(r->ident, r->ident_len, r->client_id) & (nb - 1);
            r->next_key = bk[b]; bk[b] = r;
        }
    }
    free(rpc->by_id); free(rpc->by_key);
    rpc->by_id = bi; rpc->by_key = bk; rpc->n_buckets = nb;
    return 0;
}

static struct route *route_by_id(struct smol_rpc *rpc, uint64_t id)
{
    if (!rpc->n_buckets) return NULL;
    for (struct route *r = rpc->by_id[mix64(id) & (rpc->n_buckets - 1)]; r; r = r->next_id)
        if (r->id == id) return r;
    return NULL;
}

static struct route *route_by_key(struct smol_rpc *rpc, const unsigned char *ident, size_t n, uint64_t client_id)
{
    if (!rpc->n_buckets) return NULL;
    for (struct route *r = rpc->by_key[key_hash(ident, n, client_id) & (rpc->n_buckets - 1)]; r; r = r->next_key)
        if (r->client_id == client_id && r->ident_len == n && !memcmp(r->ident, ident, n)) return r;
    return NULL;
}

static void unkey(struct smol_rpc *rpc, struct route *rt)
{
    if (!rt->keyed) return;
    struct route **pp = &rpc->by_key[key_hash(rt->ident, rt->ident_len, rt->client_id) & (rpc->n_buckets - 1)];
    while (*pp != rt) pp = &(*pp)->next_key;
    *pp = rt->next_key;
    rt->keyed = 0;
}

/* A new route with a fresh internal id; keyed: findable by (ident, client_id). */
static struct route *route_new(struct smol_rpc *rpc, enum route_kind kind, const unsigned char *ident, size_t ilen,
                               int delim, uint64_t client_id, int keyed)
{
    if (rpc->n_routes + 1 > rpc->n_buckets && tables_grow(rpc)) return NULL;
    struct route *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->id = rpc->next_id++;
    rt->client_id = client_id;
    rt->kind = kind;
    memcpy(rt->ident, ident, ilen);
    rt->ident_len = (uint8_t)ilen;
    rt->delim = (uint8_t)delim;
    size_t b = mix64(rt->id) & (rpc->n_buckets - 1);
    rt->next_id = rpc->by_id[b]; rpc->by_id[b] = rt;
    if (keyed) {
        b = key_hash(ident, ilen, client_id) & (rpc->n_buckets - 1);
        rt->next_key = rpc->by_key[b]; rpc->by_key[b] = rt;
        rt->keyed = 1;
    }
    rpc->n_routes++;
    if (kind == ROUTE_REPLY) rpc->n_replies++;
    return rt;
}

static void queue_clear(struct smol_rpc *rpc, struct route *rt)
{
    for (size_t i = 0; i < rt->q_len; i++) zmq_msg_close(&rt->q[(rt->q_head + i) % rt->q_cap]);
    rpc->ctr.queued_frames -= rt->q_len;
    rt->q_head = rt->q_len = 0;
    if (rt->pend_prev || rpc->pending == rt) {          /* leave the pending list */
        if (rt->pend_prev) rt->pend_prev->pend_next = rt->pend_next; else rpc->pending = rt->pend_next;
        if (rt->pend_next) rt->pend_next->pend_prev = rt->pend_prev;
        rt->pend_prev = rt->pend_next = NULL;
    }
}

static void route_free(struct smol_rpc *rpc, struct route *rt)
{
    queue_clear(rpc, rt);
    unkey(rpc, rt);
    struct route **pp = &rpc->by_id[mix64(rt->id) & (rpc->n_buckets - 1)];
    while (*pp != rt) pp = &(*pp)->next_id;
    *pp = rt->next_id;
    if (rt->paused) rpc->ctr.paused--;
    if (rt->kind == ROUTE_REPLY) rpc->n_replies--;
    rpc->n_routes--;
    smol_request_free(&rt->parked);
    free(rt->q);
    free(rt);
}

/* ============================================================== sending */

/* Sends one Event frame to the route's client.  0: sent (m consumed);
 * else errno (EAGAIN, EHOSTUNREACH, ...) and m is untouched. */
static int send_frame(struct smol_rpc *rpc, struct route *rt, zmq_msg_t *m)
{
    if (zmq_send(rpc->router, rt->ident, rt->ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return errno;
    /* under ROUTER_MANDATORY only the first frame can fail; the rest follow */
    if (rt->delim) zmq_send(rpc->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (zmq_msg_send(m, rpc->router, ZMQ_DONTWAIT) < 0) {
        smol_log_err("rpc: sending an event frame failed after its routing frame: %s", zmq_strerror(errno));
        zmq_msg_close(m);
    }
    return 0;
}

static int enqueue(struct smol_rpc *rpc, struct route *rt, zmq_msg_t *m)
{
    if (rt->q_len == rt->q_cap) {
        size_t nc = rt->q_cap ? rt->q_cap * 2 : 16;
        zmq_msg_t *nq = malloc(nc * sizeof *nq);
        if (!nq) return -1;
        for (size_t i = 0; i < rt->q_len; i++) memcpy(&nq[i], &rt->q[(rt->q_head + i) % rt->q_cap], sizeof *nq);
        free(rt->q);
        rt->q = nq; rt->q_cap = nc; rt->q_head = 0;
    }
    zmq_msg_init(&rt->q[(rt->q_head + rt->q_len) % rt->q_cap]);
    zmq_msg_move(&rt->q[(rt->q_head + rt->q_len) % rt->q_cap], m);
    rt->q_len++;
    rpc->ctr.queued_frames++;
    if (rt->q_len == 1) {       /* join the pending list */
        rt->pend_prev = NULL;
        rt->pend_next = rpc->pending;
        if (rpc->pending) rpc->pending->pend_prev = rt;
        rpc->pending = rt;
    }
    if (rt->kind == ROUTE_GEN && !rt->paused && !rt->terminal && rt->q_len > (size_t)rpc->cfg.pause_frames) {
        smol_engine_send_id(rpc->engine, SMOL_CMD_PAUSE, rt->id);
        rt->paused = 1;
        rpc->ctr.paused++;
        smol_log_debug("rpc: request %llu paused (%zu events queued for a slow client)",
                       (unsigned long long)rt->id, rt->q_len);
    }
    return 0;
}

static void peer_gone(struct smol_rpc *rpc, struct route *rt);

/* Removes the route if nothing more will go through it. */
static void route_maybe_done(struct smol_rpc *rpc, struct route *rt)
{
    if (rt->q_len) return;
    if (rt->kind == ROUTE_REPLY || rt->terminal) route_free(rpc, rt);
}

/* Sends queued frames until the client's pipe is full.  May free rt. */
static void route_flush(struct smol_rpc *rpc, struct route *rt)
{
    while (rt->q_len) {
        int rc = send_frame(rpc, rt, &rt->q[rt->q_head]);
        if (rc == EAGAIN) return;
        if (rc) { peer_gone(rpc, rt); return; }
        zmq_msg_close(&rt->q[rt->q_head]);
        rt->q_head = (rt->q_head + 1) % rt->q_cap;
        rt->q_len--;
        rpc->ctr.queued_frames--;
    }
    queue_clear(rpc, rt);       /* leaves the pending list */
    if (rt->paused) {
        if (!rt->terminal) smol_engine_send_id(rpc->engine, SMOL_CMD_RESUME, rt->id);
        rt->paused = 0;
        rpc->ctr.paused--;
    }
    route_maybe_done(rpc, rt);
}

/* Sends m now, or queues it behind the route's earlier frames.  May free rt. */
static void route_push(struct smol_rpc *rpc, struct route *rt, zmq_msg_t *m)
{
    if (rt->gone) { zmq_msg_close(m); route_maybe_done(rpc, rt); return; }
    if (rt->q_len == 0) {
        int rc = send_frame(rpc, rt, m);
        if (rc == 0) { route_maybe_done(rpc, rt); return; }
        if (rc != EAGAIN) { zmq_msg_close(m); peer_gone(rpc, rt); return; }
    }
    if (enqueue(rpc, rt, m)) {
        smol_log_err("rpc: out of memory queueing an event for request %llu: cancelling it",
                     (unsigned long long)rt->id);
        zmq_msg_close(m);
        peer_gone(rpc, rt);
        return;
    }
    route_flush(rpc, rt);
}

/* Hands a generate request to the engine; 0, or an error in err.  r is
 * consumed either way; rt never is: on error the caller ends or frees the
 * route (it may be walking the route table, as peer_gone does). */
static enum smol_err submit(struct smol_rpc *rpc, struct route *rt, struct smol_request *r, char *err)
{
    r->id = rt->id;
    if (smol_engine_send_submit(rpc->engine, r)) {
        int saved = errno;
        smol_request_free(&r);
        return smol_errf(err, SMOL_EINTERNAL, "cannot hand the request to the engine: %s", zmq_strerror(saved));
    }
    rpc->ctr.submitted++;
    return SMOL_OK;
}

/* Packs ev into a message.  -1 when out of memory. */
static int pack_event(const Smollm3__Event *ev, zmq_msg_t *m)
{
    size_t n = smollm3__event__get_packed_size(ev);
    if (zmq_msg_init_size(m, n)) return -1;
    smollm3__event__pack(ev, zmq_msg_data(m));
    return 0;
}

/* Packs ev into m, or when that is out of memory an out-of-memory ERROR of
 * the same request in its place: at most 30 bytes, which libzmq keeps inside
 * the message without allocating (its "very small messages", up to 33), so
 * the client still gets its answer or its stream's end.  -1 if even that fails. */
static int pack_event_or_oom(const Smollm3__Event *ev, zmq_msg_t *m)
{
    if (!pack_event(ev, m)) return 0;
    Smollm3__Event fb = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    er.code = (Smollm3__ErrorCode)SMOL_ENOMEM;
    er.message = "out of memory";
    fb.request_id = ev->request_id;
    fb.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    fb.error = &er;
    return pack_event(&fb, m);
}

/* Ends a generate stream the engine never got: rt becomes terminal and its
 * client (unless gone) gets the error as the last event: sent now, or queued
 * behind what it has not read yet and sent by the loop's flush.  Never frees rt. */
static void end_with_error(struct smol_rpc *rpc, struct route *rt, enum smol_err code, const char *msg)
{
    rt->terminal = 1;
    if (rt->gone) return;
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    char param[64];
    smol_err_param(msg, param, sizeof param);
    er.code = (Smollm3__ErrorCode)code;
    er.message = (char *)msg;
    er.param = param;
    ev.request_id = rt->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    ev.error = &er;
    zmq_msg_t m;
    if (pack_event_or_oom(&ev, &m)) {
        smol_log_err("rpc: out of memory ending request %llu with an error", (unsigned long long)rt->id);
        return;
    }
    if (rt->q_len == 0) {       /* nothing ahead of it: sent now, without a queue to allocate */
        int rc = send_frame(rpc, rt, &m);
        if (rc == 0) return;
        if (rc != EAGAIN) { zmq_msg_close(&m); return; }   /* the client is gone (found by the next send) */
    }
    if (enqueue(rpc, rt, &m)) {
        smol_log_err("rpc: out of memory ending request %llu with an error", (unsigned long long)rt->id);
        zmq_msg_close(&m);
    }
}

/* Cancels a generate stream.  A parked request goes to the engine without
 * its grammar, marked cancelled, so the client gets the same terminal event
 * as for any cancelled request.  (A CANCEL sent behind it could come after
 * the engine had run the whole request.)  If that hand-off fails the route
 * ends here with the error (end_with_error).  Never frees rt: the caller
 * removes it once terminal and flushed (route_maybe_done, peer_gone). */
static void cancel_gen(struct smol_rpc *rpc, struct route *rt)
{
    if (rt->parked) {
        struct smol_request *r = rt->parked;
        char err[SMOL_ERRLEN];
        rt->parked = NULL;
        smol_grammar_entry_release(&r->grammar);
        r->constraint = SMOL_CONSTRAINT_NONE;
        r->cancelled = 1;
        enum smol_err e = submit(rpc, rt, r, err);
        if (e) {
            smol_log_err("rpc: %s", err);
            end_with_error(rpc, rt, e, err);
        } else {
            rpc->ctr.cancels_sent++;
        }
        return;
    }
    smol_engine_send_id(rpc->engine, SMOL_CMD_CANCEL, rt->id);
    rpc->ctr.cancels_sent++;
}

/* The client of rt is gone (EHOSTUNREACH): drop what was queued for it and
 * cancel every unfinished request of that client. */
static void peer_gone(struct smol_rpc *rpc, struct route *rt)
{
    unsigned char ident[256];
    size_t n = rt->ident_len;
    memcpy(ident, rt->ident, n);
    rpc->ctr.peers_gone++;
    smol_log_info("rpc: a client went away; cancelling its requests");
    for (size_t b = 0; b < rpc->n_buckets; b++) {
        for (struct route *r = rpc->by_id[b], *nx; r; r = nx) {
            nx = r->next_id;
            if (r->ident_len != n || memcmp(r->ident, ident, n) || r->kind == ROUTE_PROBE) continue;
            queue_clear(rpc, r);
            unkey(rpc, r);
            if (r->paused) { r->paused = 0; rpc->ctr.paused--; }
            int live = !r->terminal && !r->gone && r->kind == ROUTE_GEN;
            r->gone = 1;                            /* before cancel_gen: nothing is queued for it */
            if (live) cancel_gen(rpc, r);           /* never frees r (it may end it: terminal) */
            if (r->kind == ROUTE_REPLY || r->terminal) route_free(rpc, r);
        }
    }
}

static void reply_msg(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim, uint64_t rid,
                      zmq_msg_t *m);

/* A reply made by the RPC thread: sent now, or queued in a REPLY route. */
static void reply(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim, const Smollm3__Event *ev)
{
    zmq_msg_t m;
    if (pack_event_or_oom(ev, &m)) { smol_log_err("rpc: out of memory packing a reply"); return; }
    reply_msg(rpc, ident, ilen, delim, ev->request_id, &m);
}

/* A packed reply (m, taken): sent now, or queued in a REPLY route. */
static void reply_msg(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim, uint64_t rid,
                      zmq_msg_t *mp)
{
    zmq_msg_t m = *mp;
    struct route tmp;
    memcpy(tmp.ident, ident, ilen);
    tmp.ident_len = (uint8_t)ilen;
    tmp.delim = (uint8_t)delim;
    int rc = send_frame(rpc, &tmp, &m);
    if (rc == 0) return;
    if (rc != EAGAIN || rpc->n_replies >= (size_t)rpc->cfg.max_routes) {
        if (rc == EAGAIN) smol_log_warn("rpc: a client reads none of its replies; dropping one");
        zmq_msg_close(&m);
        return;
    }
    struct route *rt = route_new(rpc, ROUTE_REPLY, ident, ilen, delim, rid, 0);
    if (!rt) { zmq_msg_close(&m); return; }
    route_push(rpc, rt, &m);
}

static void reply_error(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim, uint64_t rid,
                        enum smol_err code, const char *msg)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    char param[64];
    smol_err_param(msg, param, sizeof param);
    er.code = (Smollm3__ErrorCode)code;
    er.message = (char *)msg;
    er.param = param;
    ev.request_id = rid;
    ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    ev.error = &er;
    smol_log_debug("rpc: request %llu refused: %s: %s", (unsigned long long)rid, smol_err_name(code), msg);
    reply(rpc, ident, ilen, delim, &ev);
}

/* ====================================================== stored Responses */

/* A response_store / get / delete / list request (responses_store.h), answered on the store's
 * thread: the RPC loop never waits on its files, a slow file server delays only these replies. */
struct rstore_job {
    struct smol_rstore_job base;        /* first */
    Smollm3__Request *rq;               /* the request (owned) */
    unsigned char ident[256];           /* the client's routing id */
    uint8_t ident_len, delim;
    uint8_t *reply;                     /* the packed Event, made on the store's thread; NULL: out of memory */
    size_t reply_len;
};

static void rstore_job_free_base(struct smol_rstore_job *b)
{
    struct rstore_job *j = (struct rstore_job *)b;
    smollm3__request__free_unpacked(j->rq, NULL);
    free(j->reply);
    free(j);
}

static void rstore_pack(struct rstore_job *j, const Smollm3__Event *ev)
{
    j->reply_len = smollm3__event__get_packed_size(ev);
    if ((j->reply = malloc(j->reply_len ? j->reply_len : 1))) smollm3__event__pack(ev, j->reply);
}

/* On the store's thread: the request's answer, packed into j->reply. */
static void rstore_run(struct smol_rstore *st, struct smol_rstore_job *b)
{
    struct rstore_job *j = (struct rstore_job *)b;
    const Smollm3__Request *rq = j->rq;
    char err[SMOL_ERRLEN];
    enum smol_err e = SMOL_OK;
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Ack ack = SMOLLM3__ACK__INIT;
    Smollm3__StoredResponses list = SMOLLM3__STORED_RESPONSES__INIT;
    enum { MAX_CHAIN = 4096 };
    struct smol_rstore_rec *recs = NULL;
    size_t n = 0;
    ev.request_id = rq->request_id;
    switch (rq->kind_case) {
    case SMOLLM3__REQUEST__KIND_RESPONSE_STORE: {
        const Smollm3__StoredResponse *in = rq->response_store->response;
        struct smol_rstore_rec r = { .data = in->record.data, .len = in->record.len };
        snprintf(r.id, sizeof r.id, "%s", in->id);
        snprintf(r.prev, sizeof r.prev, "%s", in->previous_response_id ? in->previous_response_id : "");
        e = smol_rstore_put(st, rq->response_store->tenant, &r, err);
        break;
    }
    case SMOLLM3__REQUEST__KIND_RESPONSE_DELETE:
        e = smol_rstore_delete(st, rq->response_delete->tenant, rq->response_delete->id, err);
        break;
    case SMOLLM3__REQUEST__KIND_RESPONSE_LIST:
        e = smol_rstore_list(st, rq->response_list->tenant, &recs, &n, err);
        break;
    default: {  /* get: the response, then up to `chain` predecessors */
        const uint32_t chain = rq->response_get->chain < MAX_CHAIN ? rq->response_get->chain : MAX_CHAIN;
        const char *id = rq->response_get->id;
        for (uint32_t i = 0; i <= chain && !e; i++) {
            struct smol_rstore_rec *g = realloc(recs, (n + 1) * sizeof *g);
            if (!g) { e = smol_errf(err, SMOL_ENOMEM, "out of memory"); break; }
            recs = g;
            enum smol_err ge = smol_rstore_get(st, rq->response_get->tenant, id, &recs[n], err);
            if (ge) {
                if (!n || ge != SMOL_ENOSESSION) e = ge;   /* a missing predecessor ends the walk */
                break;
            }
            id = recs[n++].prev;
            if (!*id) break;
        }
        break;
    }
    }
    Smollm3__StoredResponse *items = n ? calloc(n, sizeof *items) : NULL;
    Smollm3__StoredResponse **ptrs = n ? calloc(n, sizeof *ptrs) : NULL;
    if (!e && n && (!items || !ptrs)) e = smol_errf(err, SMOL_ENOMEM, "out of memory");
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    char param[64];
    if (e) {
        smol_err_param(err, param, sizeof param);
        er.code = (Smollm3__ErrorCode)e;
        er.message = err;
        er.param = param;
        ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
        ev.error = &er;
    } else if (rq->kind_case == SMOLLM3__REQUEST__KIND_RESPONSE_STORE ||
               rq->kind_case == SMOLLM3__REQUEST__KIND_RESPONSE_DELETE) {
        ev.kind_case = SMOLLM3__EVENT__KIND_ACK;
        ev.ack = &ack;
    } else {
        for (size_t i = 0; i < n; i++) {
            smollm3__stored_response__init(&items[i]);
            items[i].id = recs[i].id;
            items[i].previous_response_id = recs[i].prev;
            items[i].created_at = recs[i].created;
            items[i].record.data = recs[i].data;
            items[i].record.len = recs[i].data ? recs[i].len : 0;
            ptrs[i] = &items[i];
        }
        list.responses = ptrs;
        list.n_responses = n;
        ev.kind_case = SMOLLM3__EVENT__KIND_RESPONSES;
        ev.responses = &list;
    }
    rstore_pack(j, &ev);
    for (size_t i = 0; i < n; i++) free(recs[i].data);
    free(recs);
    free(items);
    free(ptrs);
}

/* Hands rq (taken: *rqp is NULLed) to the store's thread; refused at once when it cannot. */
static void handle_responses(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim,
                             Smollm3__Request **rqp)
{
    const uint64_t rid = (*rqp)->request_id;
    if (!rpc->cfg.rstore) {
        reply_error(rpc, ident, ilen, delim, rid, SMOL_EUNSUPPORTED, "this daemon stores no responses");
        return;
    }
    struct rstore_job *j = calloc(1, sizeof *j);
    if (!j) {
        reply_error(rpc, ident, ilen, delim, rid, SMOL_ENOMEM, "out of memory");
        return;
    }
    j->base.run = rstore_run;
    j->base.free = rstore_job_free_base;
    j->rq = *rqp;
    memcpy(j->ident, ident, ilen);
    j->ident_len = (uint8_t)ilen;
    j->delim = (uint8_t)delim;
    if (smol_rstore_submit(rpc->cfg.rstore, &j->base)) {
        j->rq = NULL;
        rstore_job_free_base(&j->base);
        reply_error(rpc, ident, ilen, delim, rid, SMOL_EQUEUE_FULL, "too many stored-response requests waiting");
        return;
    }
    *rqp = NULL;
}

/* The store's done jobs: their replies to their clients. */
static void rstore_replies(struct smol_rpc *rpc)
{
    struct smol_rstore_job *b;
    while ((b = smol_rstore_done(rpc->cfg.rstore))) {
        struct rstore_job *j = (struct rstore_job *)b;
        zmq_msg_t m;
        if (!j->reply) {
            reply_error(rpc, j->ident, j->ident_len, j->delim, j->rq->request_id, SMOL_ENOMEM,
                        "out of memory packing a reply");
        } else if (zmq_msg_init_size(&m, j->reply_len)) {
            smol_log_err("rpc: out of memory for a reply");
        } else {
            memcpy(zmq_msg_data(&m), j->reply, j->reply_len);
            reply_msg(rpc, j->ident, j->ident_len, j->delim, j->rq->request_id, &m);
        }
        rstore_job_free_base(b);
    }
}

/* ====================================================== client requests */

static enum smol_err park(struct smol_rpc *rpc, struct route *rt, struct smol_request *r, char *err);

/* *field = t (an unpacked string: the unpacker's allocator is malloc's); 0 or -1 */
static int set_string(char **field, const char *t)
{
    char *d = strdup(t);
    if (!d) return -1;
    if (*field && *field != protobuf_c_empty_string) free(*field);
    *field = d;
    return 0;
}

/* A CURVE client that is not a gateway acts for its configured tenant, whatever its
 * request says (curve.h); 0 or -1 (out of memory). */
static int force_tenant(Smollm3__Request *rq, const char *t)
{
    switch (rq->kind_case) {
    case SMOLLM3__REQUEST__KIND_GENERATE: return set_string(&rq->generate->tenant, t);
    case SMOLLM3__REQUEST__KIND_SESSION_GET: return set_string(&rq->session_get->tenant, t);
    case SMOLLM3__REQUEST__KIND_SESSION_LIST: return set_string(&rq->session_list->tenant, t);
    case SMOLLM3__REQUEST__KIND_SESSION_DELETE: return set_string(&rq->session_delete->tenant, t);
    case SMOLLM3__REQUEST__KIND_RESPONSE_STORE: return set_string(&rq->response_store->tenant, t);
    case SMOLLM3__REQUEST__KIND_RESPONSE_GET: return set_string(&rq->response_get->tenant, t);
    case SMOLLM3__REQUEST__KIND_RESPONSE_DELETE: return set_string(&rq->response_delete->tenant, t);
    case SMOLLM3__REQUEST__KIND_RESPONSE_LIST: return set_string(&rq->response_list->tenant, t);
    default: return 0;
    }
}

static void handle_request(struct smol_rpc *rpc, const unsigned char *ident, size_t ilen, int delim,
                           zmq_msg_t *payload)
{
    char err[SMOL_ERRLEN];
    uint64_t rid = 0;
    Smollm3__Request *rq = NULL;
    enum smol_err e = smol_rpc_decode(zmq_msg_data(payload), zmq_msg_size(payload), &rpc->cfg.lim, &rq, &rid, err);
    const char *tenant = e ? NULL : smol_curve_tenant_of(payload);
    if (tenant && force_tenant(rq, tenant)) {
        smollm3__request__free_unpacked(rq, NULL);
        rq = NULL;
        e = smol_errf(err, SMOL_ENOMEM, "out of memory");
    }
    if (e) {
        rpc->ctr.rejected++;
        reply_error(rpc, ident, ilen, delim, rid, e, err);
        return;
    }
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    ev.request_id = rid;
    switch (rq->kind_case) {
    case SMOLLM3__REQUEST__KIND_HEALTH: {
        Smollm3__HealthReply h = SMOLLM3__HEALTH_REPLY__INIT;
        h.ready = rpc->ready && !rpc->draining;
        h.model = rpc->model_name;
        h.thinking_supported = rpc->cfg.thinking != 0;
        h.status = rpc->draining ? "draining" : rpc->ready ? "serving" : "starting";
        h.protocol_version = SMOL_PROTOCOL_VERSION;
        /* what a client may send: over it ERROR_TOO_LARGE (over 2x + 64 KiB the socket drops it) */
        h.max_request_bytes = rpc->cfg.lim.max_request_bytes;
        ev.kind_case = SMOLLM3__EVENT__KIND_HEALTH;
        ev.health = &h;
        reply(rpc, ident, ilen, delim, &ev);
        break;
    }
    case SMOLLM3__REQUEST__KIND_CANCEL: {
        struct route *rt = route_by_key(rpc, ident, ilen, rq->cancel->target_request_id);
        if (rt && rt->kind == ROUTE_GEN && !rt->terminal && !rt->gone) {
            cancel_gen(rpc, rt);
            route_maybe_done(rpc, rt);          /* ended by a failed hand-off, nothing left to send */
        }
        Smollm3__Ack ack = SMOLLM3__ACK__INIT;     /* known or not: cancel is idempotent (rpc.h) */
        ev.kind_case = SMOLLM3__EVENT__KIND_ACK;
        ev.ack = &ack;
        reply(rpc, ident, ilen, delim, &ev);
        break;
    }
    case SMOLLM3__REQUEST__KIND_GENERATE: {
        struct smol_request *r = NULL;
        if (rpc->draining) {
            e = smol_errf(err, SMOL_ESHUTDOWN, "the daemon is shutting down");
        } else if (route_by_key(rpc, ident, ilen, rid)) {
            e = smol_errf(err, SMOL_EINVAL, "request_id %llu is already in flight on this connection",
                          (unsigned long long)rid);
        } else if (rpc->n_routes >= (size_t)rpc->cfg.max_routes) {
            e = smol_errf(err, SMOL_EQUEUE_FULL, "too many requests in flight (%zu)", rpc->n_routes);
        } else {
            e = smol_rpc_build_request(rq->generate, rid, &rpc->cfg.lim, &r, err);
        }
        if (!e) {
            struct route *rt = route_new(rpc, ROUTE_GEN, ident, ilen, delim, rid, 1);
            enum smol_err code;
            if (!rt) {
                e = smol_errf(err, SMOL_ENOMEM, "out of memory");
            } else if (r->grammar && !smol_grammar_entry_done(r->grammar, &code, NULL)) {
                e = park(rpc, rt, r, err);      /* the index is being built: wait without blocking */
                r = NULL;
            } else {
                e = submit(rpc, rt, r, err);    /* consumes r */
                r = NULL;
                if (e) route_free(rpc, rt);
            }
        }
        smol_request_free(&r);
        if (e) {
            rpc->ctr.rejected++;
            reply_error(rpc, ident, ilen, delim, rid, e, err);
        }
        break;
    }
    case SMOLLM3__REQUEST__KIND_RESPONSE_STORE:
    case SMOLLM3__REQUEST__KIND_RESPONSE_GET:
    case SMOLLM3__REQUEST__KIND_RESPONSE_DELETE:
    case SMOLLM3__REQUEST__KIND_RESPONSE_LIST:
        handle_responses(rpc, ident, ilen, delim, &rq);
        break;
    default: {  /* stats, session get/list/delete: the engine answers */
        struct route *rt = NULL;
        if (rpc->drained)
            e = smol_errf(err, SMOL_ESHUTDOWN, "the daemon is shutting down");
        else if (rpc->n_routes >= (size_t)rpc->cfg.max_routes)
            e = smol_errf(err, SMOL_EQUEUE_FULL, "too many requests in flight (%zu)", rpc->n_routes);
        else if (!(rt = route_new(rpc, ROUTE_QUERY, ident, ilen, delim, rid, 0)))
            e = smol_errf(err, SMOL_ENOMEM, "out of memory");
        else if (smol_engine_send_query(rpc->engine, rt->id, zmq_msg_data(payload), zmq_msg_size(payload))) {
            e = smol_errf(err, SMOL_EINTERNAL, "cannot hand the query to the engine: %s", zmq_strerror(errno));
            route_free(rpc, rt);
        }
        if (e) reply_error(rpc, ident, ilen, delim, rid, e, err);
        break;
    }
    }
    smollm3__request__free_unpacked(rq, NULL);
}

/* Parks r on its route until its grammar's index is built (the cache's fd
 * wakes the loop: unpark_ready).  On error the route is freed. */
static enum smol_err park(struct smol_rpc *rpc, struct route *rt, struct smol_request *r, char *err)
{
    if (rpc->n_parked == rpc->cap_parked) {
        size_t cap = rpc->cap_parked ? 2 * rpc->cap_parked : 16;
        uint64_t *p = realloc(rpc->parked, cap * sizeof *p);
        if (!p) {
            smol_request_free(&r);
            route_free(rpc, rt);
            return smol_errf(err, SMOL_ENOMEM, "out of memory");
        }
        rpc->parked = p;
        rpc->cap_parked = cap;
    }
    r->id = rt->id;
    rt->parked = r;
    rpc->parked[rpc->n_parked++] = rt->id;
    rpc->ctr.parked++;
    return SMOL_OK;
}

/* Submits the parked requests whose index is ready, refuses those whose
 * build failed (the same INVALID_ARGUMENT as a schema refused at once). */
static void unpark_ready(struct smol_rpc *rpc)
{
    smol_grammar_cache_ack(rpc->cfg.lim.grammars);
    size_t w = 0;
    for (size_t i = 0; i < rpc->n_parked; i++) {
        struct route *rt = route_by_id(rpc, rpc->parked[i]);
        if (!rt || !rt->parked) continue;
        enum smol_err code;
        char err[SMOL_ERRLEN];
        if (!smol_grammar_entry_done(rt->parked->grammar, &code, err)) { rpc->parked[w++] = rt->id; continue; }
        struct smol_request *r = rt->parked;
        rt->parked = NULL;
        uint64_t rid = r->client_id;
        if (!code) {
            if (!(code = submit(rpc, rt, r, err))) continue;    /* consumes r */
            smol_log_err("rpc: %s", err);
        } else {
            if (code != SMOL_ENOMEM && code != SMOL_ESHUTDOWN) code = SMOL_EINVAL;
            smol_request_free(&r);
        }
        unsigned char ident[256];
        size_t ilen = rt->ident_len;
        int delim = rt->delim, gone = rt->gone;
        memcpy(ident, rt->ident, ilen);
        route_free(rpc, rt);
        rpc->ctr.rejected++;
        if (!gone) reply_error(rpc, ident, ilen, delim, rid, code, err);
    }
    rpc->n_parked = w;
}

/* Reads one client message: [identity]([empty])[Request]. */
static int recv_client(struct smol_rpc *rpc)
{
    zmq_msg_t idm, f[2];
    int nf = 0, extra = 0;
    zmq_msg_init(&idm);
    if (zmq_msg_recv(&idm, rpc->router, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&idm); return 0; }
    while (zmq_msg_more(nf ? &f[nf - 1] : &idm)) {
        zmq_msg_t t;
        zmq_msg_init(&t);
        if (zmq_msg_recv(&t, rpc->router, 0) < 0) { zmq_msg_close(&t); break; }
        if (nf < 2) { memcpy(&f[nf++], &t, sizeof t); continue; }
        extra++;                /* drain and refuse */
        int more = zmq_msg_more(&t);
        zmq_msg_close(&t);
        if (!more) break;
    }
    const unsigned char *ident = zmq_msg_data(&idm);
    size_t ilen = zmq_msg_size(&idm);
    if (ilen == 0 || ilen > 255) {
        smol_log_warn("rpc: message with a %zu-byte routing id ignored", ilen);
    } else if (nf == 1 && !extra) {
        handle_request(rpc, ident, ilen, 0, &f[0]);
    } else if (nf == 2 && !extra && zmq_msg_size(&f[0]) == 0) {
        handle_request(rpc, ident, ilen, 1, &f[1]);
    } else {
        int delim = nf >= 1 && zmq_msg_size(&f[0]) == 0;
        rpc->ctr.rejected++;
        reply_error(rpc, ident, ilen, delim, 0, SMOL_EFORMAT,
                    "a request is one frame (a packed Request), optionally after an empty delimiter");
    }
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
    zmq_msg_close(&idm);
    return 1;
}

/* ======================================================== engine events */

static int recv_engine(struct smol_rpc *rpc)
{
    zmq_msg_t f[3];
    int nf = 0;
    zmq_msg_init(&f[0]);
    if (zmq_msg_recv(&f[0], rpc->engine, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&f[0]); return 0; }
    SMOL_HB_RECV();
    nf = 1;
    while (zmq_msg_more(&f[nf - 1])) {
        zmq_msg_t t;
        zmq_msg_init(&t);
        if (zmq_msg_recv(&t, rpc->engine, 0) < 0) { zmq_msg_close(&t); break; }
        if (nf < 3) { memcpy(&f[nf++], &t, sizeof t); continue; }
        zmq_msg_close(&t);      /* cannot happen with a correct engine */
    }
    double now = smol_mono_s();
    rpc->wd_last_alive = now;
    uint64_t id;
    uint8_t flags;
    if (nf < 2 || zmq_msg_size(&f[0]) != 8 || zmq_msg_size(&f[1]) != 1) {
        smol_log_err("rpc: malformed message from the engine (%d frames)", nf);
        goto out;
    }
    memcpy(&id, zmq_msg_data(&f[0]), 8);
    flags = *(const uint8_t *)zmq_msg_data(&f[1]);
    if (flags & SMOL_EV_DRAINED) {
        if (!rpc->drained) {
            smol_log_info("rpc: engine drained");
            rpc->drained = 1;
            rpc->drained_at = now;
        }
        goto out;
    }
    struct route *rt = route_by_id(rpc, id);
    if (!rt) {
        smol_log_debug("rpc: event for unknown request %llu dropped", (unsigned long long)id);
        goto out;
    }
    if (flags & SMOL_EV_TERMINAL) rt->terminal = 1;
    if (rt->kind == ROUTE_PROBE) {
        if (rpc->wd_probe == id) rpc->wd_probe = 0;
        if (rt->terminal) route_free(rpc, rt);
        goto out;
    }
    if (nf < 3) {
        smol_log_err("rpc: event without a payload for request %llu", (unsigned long long)id);
        route_maybe_done(rpc, rt);
        goto out;
    }
    route_push(rpc, rt, &f[2]);     /* consumes f[2] (closed below as empty) */
out:
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
    return 1;
}

/* ================================================================ loop */

static void watchdog_tick(struct smol_rpc *rpc, double now)
{
    if (!rpc->cfg.watchdog_usec || now < rpc->wd_next_tick) return;
    double ivl = rpc->cfg.watchdog_usec * 1e-6;
    rpc->wd_next_tick = now + ivl / 2;
    if (now - rpc->wd_last_alive < ivl)
        sd_notify(0, "WATCHDOG=1");
    else
        smol_log_warn("rpc: the engine thread has not answered for %.1f s; withholding WATCHDOG=1",
                      now - rpc->wd_last_alive);
    if (rpc->wd_probe || rpc->drained) return;
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__StatsRequest st = SMOLLM3__STATS_REQUEST__INIT;
    rq.protocol_version = SMOL_PROTOCOL_VERSION;
    rq.kind_case = SMOLLM3__REQUEST__KIND_STATS;
    rq.stats = &st;
    uint8_t buf[64];
    size_t n = smollm3__request__pack(&rq, buf);
    struct route *rt = route_new(rpc, ROUTE_PROBE, (const unsigned char *)"", 0, 0, 0, 0);
    if (!rt) return;
    if (smol_engine_send_query(rpc->engine, rt->id, buf, n)) { route_free(rpc, rt); return; }
    rpc->wd_probe = rt->id;
}

static void flush_pending(struct smol_rpc *rpc)
{
    uint64_t ids[256];
    size_t n = 0;
    for (struct route *r = rpc->pending; r && n < 256; r = r->pend_next) ids[n++] = r->id;
    for (size_t i = 0; i < n; i++) {        /* by id: a flush may free other routes */
        struct route *r = route_by_id(rpc, ids[i]);
        if (r && r->q_len) route_flush(rpc, r);
    }
}

static int finished(struct smol_rpc *rpc, double now)
{
    if (rpc->quit) return 1;
    if (!rpc->drained) return 0;
    return !rpc->pending || now - rpc->drained_at > FLUSH_AFTER_DRAIN_S;
}

int smol_rpc_poll_once(struct smol_rpc *rpc, int timeout_ms, int extra_fd,
                       void (*on_extra)(struct smol_rpc *rpc, void *user), void *user)
{
    double now = smol_mono_s();
    if (finished(rpc, now)) return 0;
    if (rpc->pending && timeout_ms > RETRY_MS) timeout_ms = RETRY_MS;
    if (rpc->cfg.watchdog_usec) {
        int wd = (int)((rpc->wd_next_tick - now) * 1000) + 1;
        if (wd < timeout_ms) timeout_ms = wd < 0 ? 0 : wd;
    }
    if (rpc->drained && timeout_ms > 100) timeout_ms = 100;
    const int rfd = smol_rstore_fd(rpc->cfg.rstore);
    zmq_pollitem_t it[5] = {
        {rpc->router, 0, ZMQ_POLLIN, 0},
        {rpc->engine, 0, ZMQ_POLLIN, 0},
        {NULL, rpc->cfg.lim.grammars ? smol_grammar_cache_fd(rpc->cfg.lim.grammars) : -1,
         rpc->cfg.lim.grammars ? ZMQ_POLLIN : 0, 0},
        {NULL, rfd, rfd >= 0 ? ZMQ_POLLIN : 0, 0},
        {NULL, extra_fd, ZMQ_POLLIN, 0},
    };
    int n_it = extra_fd >= 0 ? 5 : 4;
    if (zmq_poll(it, n_it, timeout_ms) < 0 && errno != EINTR) {
        smol_log_err("rpc: zmq_poll: %s", zmq_strerror(errno));
        return 0;
    }
    /* engine first: events free routes and relieve backpressure */
    if (it[1].revents & ZMQ_POLLIN)
        for (int k = 0; k < 1024 && recv_engine(rpc); k++) {}
    if (it[0].revents & ZMQ_POLLIN)
        for (int k = 0; k < 256 && recv_client(rpc); k++) {}
    if ((it[2].revents & ZMQ_POLLIN) && rpc->cfg.lim.grammars) unpark_ready(rpc);
    if ((it[3].revents & ZMQ_POLLIN) && rfd >= 0) rstore_replies(rpc);
    if (n_it == 5 && (it[4].revents & ZMQ_POLLIN) && on_extra) on_extra(rpc, user);
    if (rpc->pending) flush_pending(rpc);
    watchdog_tick(rpc, smol_mono_s());
    return !finished(rpc, smol_mono_s());
}

void smol_rpc_run(struct smol_rpc *rpc, int extra_fd, void (*on_extra)(struct smol_rpc *rpc, void *user), void *user)
{
    while (smol_rpc_poll_once(rpc, 1000, extra_fd, on_extra, user)) {}
}

void smol_rpc_drain(struct smol_rpc *rpc)
{
    if (rpc->draining) return;
    rpc->draining = 1;
    rpc->drain_started = smol_mono_s();
    smol_log_notice("rpc: draining: refusing new requests, %u ms for in-flight ones", rpc->cfg.drain_grace_ms);
    for (size_t i = 0; i < rpc->n_parked; i++) {   /* the engine refuses them behind DRAIN */
        struct route *rt = route_by_id(rpc, rpc->parked[i]);
        if (rt && rt->parked) {
            cancel_gen(rpc, rt);
            route_maybe_done(rpc, rt);
        }
    }
    rpc->n_parked = 0;
    if (smol_engine_send_drain(rpc->engine, rpc->cfg.drain_grace_ms)) {
        smol_log_err("rpc: cannot send DRAIN to the engine: stopping now");
        rpc->quit = 1;
    }
}

void smol_rpc_quit(struct smol_rpc *rpc) { rpc->quit = 1; }

void smol_rpc_set_ready(struct smol_rpc *rpc, int ready) { rpc->ready = ready; }

void smol_rpc_get_counters(const struct smol_rpc *rpc, struct smol_rpc_counters *c)
{
    *c = rpc->ctr;
    c->routes = rpc->n_routes;
}

/* ============================================================ lifecycle */

static int setopt_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

enum smol_err smol_rpc_new(struct smol_rpc **out, void *zctx, const struct smol_rpc_config *cfg, char *err)
{
    *out = NULL;
    struct smol_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    rpc->zctx = zctx;
    rpc->cfg = *cfg;
    if (rpc->cfg.max_routes <= 0) rpc->cfg.max_routes = 4096;
    if (rpc->cfg.pause_frames <= 0) rpc->cfg.pause_frames = 256;
    snprintf(rpc->model_name, sizeof rpc->model_name, "%s", cfg->model_name ? cfg->model_name : "");
    rpc->cfg.model_name = rpc->model_name;
    rpc->next_id = 1;
    rpc->wd_last_alive = rpc->wd_next_tick = smol_mono_s();
    if (tables_grow(rpc)) { free(rpc); return smol_errf(err, SMOL_ENOMEM, "out of memory"); }
    rpc->router = zmq_socket(zctx, ZMQ_ROUTER);
    rpc->engine = zmq_socket(zctx, ZMQ_PAIR);
    if (!rpc->router || !rpc->engine) {
        smol_errf(err, SMOL_EIO, "zmq_socket: %s", zmq_strerror(errno));
        smol_rpc_free(&rpc);
        return SMOL_EIO;
    }
    int lg = 0;
    /* ROUTER: never drop silently; report unroutable peers; detect dead ones */
    if (setopt_int(rpc->router, ZMQ_ROUTER_MANDATORY, 1) || setopt_int(rpc->router, ZMQ_SNDHWM, cfg->sndhwm) ||
        setopt_int(rpc->router, ZMQ_RCVHWM, cfg->rcvhwm) || setopt_int(rpc->router, ZMQ_BACKLOG, 1024) ||
        setopt_int(rpc->router, ZMQ_HEARTBEAT_IVL, cfg->heartbeat_ivl_ms) ||
        setopt_int(rpc->router, ZMQ_HEARTBEAT_TIMEOUT, cfg->heartbeat_timeout_ms) ||
        setopt_int(rpc->router, ZMQ_HEARTBEAT_TTL, cfg->heartbeat_timeout_ms) ||
        /* frames far beyond the request cap cost the peer its connection (no reply possible) */
        zmq_setsockopt(rpc->router, ZMQ_MAXMSGSIZE,
                       &(int64_t){(int64_t)cfg->lim.max_request_bytes * 2 + 65536}, sizeof(int64_t)) ||
        setopt_int(rpc->router, ZMQ_LINGER, 1000) ||
        /* inproc PAIR: unbounded both ways, so neither thread ever blocks on the other */
        setopt_int(rpc->engine, ZMQ_SNDHWM, 0) || setopt_int(rpc->engine, ZMQ_RCVHWM, 0) ||
        setopt_int(rpc->engine, ZMQ_LINGER, lg)) {
        smol_errf(err, SMOL_EIO, "zmq_setsockopt: %s", zmq_strerror(errno));
        smol_rpc_free(&rpc);
        return SMOL_EIO;
    }
    *out = rpc;
    return SMOL_OK;
}

enum smol_err smol_rpc_bind_engine(struct smol_rpc *rpc, const char *endpoint, char *err)
{
    if (zmq_bind(rpc->engine, endpoint))
        return smol_errf(err, SMOL_EIO, "cannot bind %s: %s", endpoint, zmq_strerror(errno));
    return SMOL_OK;
}

enum smol_err smol_rpc_secure(struct smol_rpc *rpc, struct smol_curve *c, char *err)
{
    return smol_curve_apply(c, rpc->router, err);
}

enum smol_err smol_rpc_bind(struct smol_rpc *rpc, const char *endpoint, char *err)
{
    int ipc = !strncmp(endpoint, "ipc://", 6);
    mode_t old = 0;
    if (ipc) {
        snprintf(rpc->ipc_path, sizeof rpc->ipc_path, "%s", endpoint + 6);
        old = umask(0117);      /* the socket file is born rw for user and group only */
    }
    int rc = zmq_bind(rpc->router, endpoint);
    int saved = errno;
    if (ipc) umask(old);
    if (rc) return smol_errf(err, SMOL_EIO, "cannot bind %s: %s", endpoint, zmq_strerror(saved));
    if (ipc && rpc->ipc_path[0] != '@' && chmod(rpc->ipc_path, (mode_t)rpc->cfg.socket_mode))
        return smol_errf(err, SMOL_EIO, "chmod %s to %o: %s", rpc->ipc_path, rpc->cfg.socket_mode, strerror(errno));
    return SMOL_OK;
}

void smol_rpc_free(struct smol_rpc **rp)
{
    if (!rp || !*rp) return;
    struct smol_rpc *rpc = *rp;
    for (size_t b = 0; b < rpc->n_buckets; b++)
        for (struct route *r = rpc->by_id[b], *nx; r; r = nx) {
            nx = r->next_id;
            route_free(rpc, r);
        }
    if (rpc->router) zmq_close(rpc->router);
    if (rpc->engine) zmq_close(rpc->engine);
    free(rpc->parked);
    free(rpc->by_id);
    free(rpc->by_key);
    free(rpc);
    *rp = NULL;
}
