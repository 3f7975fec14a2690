/*
 * client.c - the smollm3d client library (see client.h for the contract).
 *
 * Design: one DEALER socket per client plus a PAIR socket reading that
 * DEALER's monitor (CONNECTED / DISCONNECTED).  Reading happens in one
 * place, wire_recv(), which unpacks one frame; callers that wait for a
 * particular request id park everything else in a FIFO that
 * smol_client_recv() drains first.  Replies to our own Cancel requests are
 * dropped on arrival (ignore ring), so a streaming loop leaves no litter.
 *
 * A disconnect seen by the monitor is latched and reported once by the next
 * receive after the frames already read from the socket are delivered: the
 * daemon never finishes a stream across a restart.  A successful send
 * clears the latch, since it went out on a new connection.
 */
#include "daemon/client/client.h"
#include "daemon/model/rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define IGNORE_RING 32
#define POLL_SLICE_MS 100        /* how often an interrupt flag is looked at */

struct evnode {
    Smollm3__Event *ev;
    struct evnode *next;
};

struct smol_client {
    void *ctx;                  /* ZeroMQ context (owned when own_ctx) */
    int own_ctx;
    void *sock;                 /* DEALER connected to the daemon */
    void *mon;                  /* PAIR reading sock's monitor events */
    uint64_t next_id;           /* next request id; starts random, never 0 */
    int connected;              /* monitor: a connection is up */
    int disconnect_latched;     /* monitor saw DISCONNECTED since the last send */
    struct evnode *qhead, *qtail; /* events parked for smol_client_recv */
    uint64_t ignore[IGNORE_RING]; /* request ids whose reply is dropped */
    unsigned ignore_pos;
    uint64_t bad_frames;        /* frames that did not unpack as an Event */
};

/* ---- small helpers ----------------------------------------------------- */

/* Milliseconds left until deadline (deadline < 0: forever = -1). */
static int left_ms(double deadline)
{
    if (deadline < 0) return -1;
    double l = deadline - smol_mono_ms();
    if (l <= 0) return 0;
    return l > 1e9 ? 1000000000 : (int)(l + 0.999);
}

static double deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? -1.0 : smol_mono_ms() + timeout_ms;
}

char *smol_client_default_endpoint(char *buf, size_t n)
{
    const char *rd = getenv("RUNTIME_DIRECTORY");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (rd && *rd) {
        size_t len = strcspn(rd, ":");   /* systemd lists several dirs with ':' */
        snprintf(buf, n, "ipc://%.*s/smollm3d.sock", (int)len, rd);
    } else if (xdg && *xdg) {
        snprintf(buf, n, "ipc://%s/smollm3d.sock", xdg);
    } else {
        snprintf(buf, n, "ipc:///run/smollm3d/smollm3d.sock");
    }
    return buf;
}

int smol_client_endpoint_exists(const char *endpoint)
{
    struct stat st;
    if (strncmp(endpoint, "ipc://", 6) != 0) return 1;
    const char *path = endpoint + 6;
    if (*path == '@') return 1;          /* Linux abstract namespace */
    return stat(path, &st) == 0;
}

void smol_client_opts_default(struct smol_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->heartbeat_ivl_ms = 1000;
    o->heartbeat_timeout_ms = 5000;
    o->send_timeout_ms = 5000;
    o->max_event_bytes = 64ll << 20;
    o->zmq_ctx = NULL;
}

const char *smol_client_channel_name(int channel)
{
    return channel == SMOLLM3__CHANNEL__CHANNEL_REASONING ? "reasoning" : "content";
}

const char *smol_client_finish_name(int f)
{
    switch (f) {
    case SMOLLM3__FINISH_REASON__FINISH_REASON_STOP: return "stop";
    case SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH: return "length";
    case SMOLLM3__FINISH_REASON__FINISH_REASON_TOOL_CALLS: return "tool_calls";
    case SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

const char *smol_client_error_name(int code)
{
    return smol_err_name((enum smol_err)code);
}

/* The daemon's code as our enum: the two enums are the same numbers; an
 * out-of-range code (newer daemon) becomes SMOL_EINTERNAL, never SMOL_OK. */
static enum smol_err code_of(const Smollm3__Event *ev)
{
    int code = ev->error ? (int)ev->error->code : SMOL_EINTERNAL;
    if (code <= 0 || code >= SMOL_ERR_COUNT) return SMOL_EINTERNAL;
    return (enum smol_err)code;
}

/* ---- open / close ------------------------------------------------------ */

static int set_int(void *s, int opt, int v)
{
    return zmq_setsockopt(s, opt, &v, sizeof v);
}

enum smol_err smol_client_open(struct smol_client **out, const char *endpoint,
                               const struct smol_client_opts *opts, char *err)
{
    struct smol_client_opts def;
    struct smol_client *c;
    char monep[96];
    uint64_t seed = 0;

    *out = NULL;
    if (!opts) {
        smol_client_opts_default(&def);
        opts = &def;
    }
    if (!endpoint || !*endpoint) return smol_errf(err, SMOL_EINVAL, "empty endpoint");
    c = calloc(1, sizeof *c);
    if (!c) return smol_errf(err, SMOL_ENOMEM, "out of memory");

    /* request ids come from getrandom(2), never from the clock: no randomness, no client */
    ssize_t got;
    while ((got = getrandom(&seed, sizeof seed, GRND_NONBLOCK)) < 0 && errno == EINTR) {}
    if (got != (ssize_t)sizeof seed) {
        free(c);
        return smol_errf(err, SMOL_EBUSY, "no randomness for request ids (getrandom: %s): retry later",
                         got < 0 ? strerror(errno) : "short read");
    }
    c->next_id = (seed >> 2) | 1;        /* < 2^62: no wrap to 0 in practice */

    c->ctx = opts->zmq_ctx;
    if (!c->ctx) {
        c->ctx = zmq_ctx_new();
        c->own_ctx = 1;
        if (!c->ctx) {
            free(c);
            return smol_errf(err, SMOL_ENOMEM, "zmq_ctx_new: %s", zmq_strerror(errno));
        }
    }
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!c->sock) goto zfail;
    int64_t maxmsg = opts->max_event_bytes > 0 ? opts->max_event_bytes : -1;
    if (set_int(c->sock, ZMQ_LINGER, 0) || set_int(c->sock, ZMQ_IMMEDIATE, 1) ||
        set_int(c->sock, ZMQ_SNDTIMEO, opts->send_timeout_ms) ||
        zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg))
        goto zfail;
    if (opts->heartbeat_ivl_ms > 0) {
        if (set_int(c->sock, ZMQ_HEARTBEAT_IVL, opts->heartbeat_ivl_ms) ||
            set_int(c->sock, ZMQ_HEARTBEAT_TIMEOUT, opts->heartbeat_timeout_ms) ||
            set_int(c->sock, ZMQ_HEARTBEAT_TTL, opts->heartbeat_timeout_ms))
            goto zfail;
    }
    if (opts->curve_server_key || opts->curve_secret_key) {
        char pub[41];
        if (!opts->curve_server_key || !opts->curve_secret_key || strlen(opts->curve_server_key) != 40 ||
            strlen(opts->curve_secret_key) != 40 || zmq_curve_public(pub, opts->curve_secret_key)) {
            smol_errf(err, SMOL_EINVAL, "CURVE needs the daemon's public key and a secret key, 40 Z85 characters each");
            smol_client_close(&c);
            return SMOL_EINVAL;
        }
        if (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, opts->curve_server_key, 40) ||
            zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, pub, 40) ||
            zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, opts->curve_secret_key, 40))
            goto zfail;
    }
    /* The monitor must exist before connect so no CONNECTED is missed. */
    snprintf(monep, sizeof monep, "inproc://smol-client-mon-%p-%llx", (void *)c,
             (unsigned long long)seed);
    if (zmq_socket_monitor(c->sock, monep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED))
        goto zfail;
    c->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (!c->mon || set_int(c->mon, ZMQ_LINGER, 0) || zmq_connect(c->mon, monep)) goto zfail;
    if (zmq_connect(c->sock, endpoint)) {
        smol_errf(err, SMOL_EINVAL, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
        smol_client_close(&c);
        return SMOL_EINVAL;
    }
    *out = c;
    return SMOL_OK;
zfail:
    smol_errf(err, SMOL_EIO, "zeromq setup: %s", zmq_strerror(errno));
    smol_client_close(&c);
    return SMOL_EIO;
}

void smol_client_close(struct smol_client **cp)
{
    struct smol_client *c = cp ? *cp : NULL;
    if (!c) return;
    while (c->qhead) {
        struct evnode *n = c->qhead;
        c->qhead = n->next;
        smollm3__event__free_unpacked(n->ev, NULL);
        free(n);
    }
    if (c->sock) {
        zmq_socket_monitor(c->sock, NULL, 0);
        zmq_close(c->sock);
    }
    if (c->mon) zmq_close(c->mon);
    if (c->own_ctx && c->ctx) zmq_ctx_term(c->ctx);
    free(c);
    *cp = NULL;
}

/* Reads every pending monitor event (never blocks). */
static void mon_drain(struct smol_client *c)
{
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&m) >= 2) memcpy(&event, zmq_msg_data(&m), 2);
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        while (more) {                   /* the endpoint frame */
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, c->mon, 0) < 0) more = 0;
            else more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        if (event == ZMQ_EVENT_CONNECTED) {
            c->connected = 1;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            c->connected = 0;
            c->disconnect_latched = 1;
        }
    }
}

int smol_client_connected(struct smol_client *c)
{
    mon_drain(c);
    return c->connected;
}

int smol_client_fd(struct smol_client *c)
{
    int fd = -1;
    size_t n = sizeof fd;
    if (zmq_getsockopt(c->sock, ZMQ_FD, &fd, &n)) return -1;
    return fd;
}

uint64_t smol_client_next_id(struct smol_client *c)
{
    uint64_t id = c->next_id++;
    if (id == 0) id = c->next_id++;
    return id;
}

uint64_t smol_client_bad_frames(const struct smol_client *c)
{
    return c->bad_frames;
}

static void ignore_id(struct smol_client *c, uint64_t id)
{
    c->ignore[c->ignore_pos++ % IGNORE_RING] = id;
}

/* 1 (and forgets the id) if ev answers a request whose reply is unwanted. */
static int ignored(struct smol_client *c, const Smollm3__Event *ev)
{
    if (ev->request_id == 0) return 0;
    for (unsigned i = 0; i < IGNORE_RING; i++) {
        if (c->ignore[i] == ev->request_id) {
            c->ignore[i] = 0;
            return 1;
        }
    }
    return 0;
}

/* ---- sending ----------------------------------------------------------- */

enum smol_err smol_client_send_raw(struct smol_client *c, const void *data, size_t len, char *err)
{
    for (;;) {
        if (zmq_send(c->sock, data, len, 0) >= 0) {
            mon_drain(c);
            c->disconnect_latched = 0;
            return SMOL_OK;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN)
            return smol_errf(err, SMOL_EIO, "daemon not reachable (no connection to send on)");
        return smol_errf(err, SMOL_EIO, "send: %s", zmq_strerror(errno));
    }
}

enum smol_err smol_client_send(struct smol_client *c, Smollm3__Request *req, uint64_t *id_out,
                               char *err)
{
    req->protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    if (req->request_id == 0) req->request_id = smol_client_next_id(c);
    size_t n = smollm3__request__get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return smol_errf(err, SMOL_ENOMEM, "out of memory packing %zu bytes", n);
    smollm3__request__pack(req, buf);
    enum smol_err r = smol_client_send_raw(c, buf, n, err);
    free(buf);
    if (r == SMOL_OK && id_out) *id_out = req->request_id;
    return r;
}

enum smol_err smol_client_send_generate(struct smol_client *c, Smollm3__GenerateRequest *g,
                                        uint64_t *id_out, char *err)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    return smol_client_send(c, &req, id_out, err);
}

enum smol_err smol_client_send_cancel(struct smol_client *c, uint64_t target_id,
                                      uint64_t *id_out, char *err)
{
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    Smollm3__CancelRequest cr = SMOLLM3__CANCEL_REQUEST__INIT;
    cr.target_request_id = target_id;
    req.kind_case = SMOLLM3__REQUEST__KIND_CANCEL;
    req.cancel = &cr;
    return smol_client_send(c, &req, id_out, err);
}

/* ---- receiving --------------------------------------------------------- */

/* Reads one message from the socket without blocking.  1: *ev set; 0:
 * nothing there.  Multipart messages (a daemon or proxy adding an empty
 * delimiter) are accepted: the last non-empty frame is the Event. */
static int wire_recv(struct smol_client *c, Smollm3__Event **ev)
{
    for (;;) {
        zmq_msg_t m, next;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return 0;
        }
        int more = zmq_msg_more(&m);
        while (more) {                   /* keep the last non-empty frame */
            zmq_msg_init(&next);
            if (zmq_msg_recv(&next, c->sock, 0) < 0) {
                zmq_msg_close(&next);
                break;
            }
            more = zmq_msg_more(&next);
            if (zmq_msg_size(&next) > 0) {
                zmq_msg_close(&m);
                zmq_msg_init(&m);
                zmq_msg_move(&m, &next);
            }
            zmq_msg_close(&next);
        }
        Smollm3__Event *e = smollm3__event__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
        if (!e) {
            c->bad_frames++;
            continue;
        }
        if (ignored(c, e)) {
            smollm3__event__free_unpacked(e, NULL);
            continue;
        }
        *ev = e;
        return 1;
    }
}

static int enqueue(struct smol_client *c, Smollm3__Event *ev)
{
    struct evnode *n = malloc(sizeof *n);
    if (!n) return -1;
    n->ev = ev;
    n->next = NULL;
    if (c->qtail) c->qtail->next = n;
    else c->qhead = n;
    c->qtail = n;
    return 0;
}

/* Removes and returns the first parked event with request id `id` (any id
 * when want_any), or NULL. */
static Smollm3__Event *dequeue(struct smol_client *c, int want_any, uint64_t id)
{
    struct evnode *prev = NULL;
    for (struct evnode *n = c->qhead; n; prev = n, n = n->next) {
        if (!want_any && n->ev->request_id != id) continue;
        if (prev) prev->next = n->next;
        else c->qhead = n->next;
        if (c->qtail == n) c->qtail = prev;
        Smollm3__Event *ev = n->ev;
        free(n);
        return ev;
    }
    return NULL;
}

/* The one waiting loop: returns the next event for `id` (or any event when
 * want_any), parking events of other requests. */
static enum smol_err wait_event(struct smol_client *c, int want_any, uint64_t id, double deadline,
                                const volatile sig_atomic_t *interrupt, Smollm3__Event **out,
                                char *err)
{
    *out = NULL;
    for (;;) {
        Smollm3__Event *ev = dequeue(c, want_any, id);
        if (ev) {
            *out = ev;
            return SMOL_OK;
        }
        mon_drain(c);
        while (wire_recv(c, &ev)) {
            if (want_any || ev->request_id == id) {
                *out = ev;
                return SMOL_OK;
            }
            if (enqueue(c, ev)) {
                smollm3__event__free_unpacked(ev, NULL);
                return smol_errf(err, SMOL_ENOMEM, "out of memory queueing an event");
            }
        }
        if (c->disconnect_latched) {
            c->disconnect_latched = 0;
            return smol_errf(err, SMOL_EIO, "disconnected from the daemon");
        }
        if (interrupt && *interrupt) return smol_errf(err, SMOL_ECANCELLED, "interrupted");
        int left = left_ms(deadline);
        if (left == 0) return smol_errf(err, SMOL_EIO, "timed out waiting for the daemon");
        if (interrupt && (left < 0 || left > POLL_SLICE_MS)) left = POLL_SLICE_MS;
        zmq_pollitem_t items[2] = {
            { .socket = c->sock, .events = ZMQ_POLLIN },
            { .socket = c->mon, .events = ZMQ_POLLIN },
        };
        if (zmq_poll(items, 2, left) < 0 && errno != EINTR)
            return smol_errf(err, SMOL_EIO, "poll: %s", zmq_strerror(errno));
    }
}

enum smol_err smol_client_recv(struct smol_client *c, int timeout_ms,
                               const volatile sig_atomic_t *interrupt, Smollm3__Event **ev,
                               char *err)
{
    return wait_event(c, 1, 0, deadline_of(timeout_ms), interrupt, ev, err);
}

void smol_client_event_free(Smollm3__Event **ev)
{
    if (!ev || !*ev) return;
    smollm3__event__free_unpacked(*ev, NULL);
    *ev = NULL;
}

int smol_client_event_is_terminal(const Smollm3__Event *ev)
{
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
    case SMOLLM3__EVENT__KIND_TOKEN:
    case SMOLLM3__EVENT__KIND_TOOL_CALL:
        return 0;
    default:
        return 1;
    }
}

/* ---- calls ------------------------------------------------------------- */

enum smol_err smol_client_call(struct smol_client *c, Smollm3__Request *req, int timeout_ms,
                               Smollm3__Event **reply, char *err)
{
    uint64_t id;
    double deadline = deadline_of(timeout_ms);
    enum smol_err r;

    *reply = NULL;
    req->request_id = 0;
    if ((r = smol_client_send(c, req, &id, err))) return r;
    for (;;) {
        Smollm3__Event *ev;
        if ((r = wait_event(c, 0, id, deadline, NULL, &ev, err))) return r;
        if (!smol_client_event_is_terminal(ev)) {   /* not a one-shot reply: skip */
            smollm3__event__free_unpacked(ev, NULL);
            continue;
        }
        *reply = ev;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) {
            smol_errf(err, code_of(ev), "%s: %s", smol_client_error_name(ev->error->code),
                      ev->error->message ? ev->error->message : "");
            return code_of(ev);
        }
        return SMOL_OK;
    }
}

#define SIMPLE_CALL(kindconst, field, type, INIT)                         \
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;                        \
    type body = INIT;                                                     \
    req.kind_case = kindconst;                                            \
    req.field = &body;

enum smol_err smol_client_health(struct smol_client *c, int timeout_ms, Smollm3__Event **reply,
                                 char *err)
{
    SIMPLE_CALL(SMOLLM3__REQUEST__KIND_HEALTH, health, Smollm3__HealthRequest,
                SMOLLM3__HEALTH_REQUEST__INIT)
    return smol_client_call(c, &req, timeout_ms, reply, err);
}

enum smol_err smol_client_stats(struct smol_client *c, int timeout_ms, Smollm3__Event **reply,
                                char *err)
{
    SIMPLE_CALL(SMOLLM3__REQUEST__KIND_STATS, stats, Smollm3__StatsRequest,
                SMOLLM3__STATS_REQUEST__INIT)
    return smol_client_call(c, &req, timeout_ms, reply, err);
}

enum smol_err smol_client_session_list(struct smol_client *c, const char *tenant, int timeout_ms,
                                       Smollm3__Event **reply, char *err)
{
    SIMPLE_CALL(SMOLLM3__REQUEST__KIND_SESSION_LIST, session_list, Smollm3__SessionListRequest,
                SMOLLM3__SESSION_LIST_REQUEST__INIT)
    if (tenant && *tenant) body.tenant = (char *)tenant;
    return smol_client_call(c, &req, timeout_ms, reply, err);
}

enum smol_err smol_client_session_get(struct smol_client *c, const char *tenant, const char *session_id,
                                      int timeout_ms, Smollm3__Event **reply, char *err)
{
    SIMPLE_CALL(SMOLLM3__REQUEST__KIND_SESSION_GET, session_get, Smollm3__SessionGetRequest,
                SMOLLM3__SESSION_GET_REQUEST__INIT)
    body.session_id = (char *)session_id;
    if (tenant && *tenant) body.tenant = (char *)tenant;
    return smol_client_call(c, &req, timeout_ms, reply, err);
}

enum smol_err smol_client_session_delete(struct smol_client *c, const char *tenant, const char *session_id,
                                         int timeout_ms, Smollm3__Event **reply, char *err)
{
    SIMPLE_CALL(SMOLLM3__REQUEST__KIND_SESSION_DELETE, session_delete,
                Smollm3__SessionDeleteRequest, SMOLLM3__SESSION_DELETE_REQUEST__INIT)
    body.session_id = (char *)session_id;
    if (tenant && *tenant) body.tenant = (char *)tenant;
    return smol_client_call(c, &req, timeout_ms, reply, err);
}

/* ---- streaming --------------------------------------------------------- */

enum smol_err smol_client_stream(struct smol_client *c, Smollm3__GenerateRequest *g,
                                 int idle_timeout_ms, int cancel_wait_ms,
                                 const volatile sig_atomic_t *cancel, smol_client_event_fn fn,
                                 void *user, uint64_t *id_out, char *err)
{
    uint64_t id, cancel_id;
    int cancelled = 0;
    double cancel_deadline = -1;
    enum smol_err r;

    if ((r = smol_client_send_generate(c, g, &id, err))) return r;
    if (id_out) *id_out = id;
    for (;;) {
        Smollm3__Event *ev;
        double deadline = cancelled ? cancel_deadline : deadline_of(idle_timeout_ms);
        r = wait_event(c, 0, id, deadline, cancelled ? NULL : cancel, &ev, err);
        if (r == SMOL_ECANCELLED && !cancelled) {
            goto send_cancel;
        }
        if (r) {
            if (r == SMOL_EIO && cancelled && left_ms(deadline) == 0)
                smol_errf(err, SMOL_EIO, "no terminal event %d ms after cancel", cancel_wait_ms);
            else if (r == SMOL_EIO && left_ms(deadline) == 0)
                smol_errf(err, SMOL_EIO, "no event from the daemon for %d ms", idle_timeout_ms);
            return r;
        }
        int stop = fn ? fn(ev, user) : 0;
        if (smol_client_event_is_terminal(ev)) {
            r = SMOL_OK;
            if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) {
                r = code_of(ev);
                smol_errf(err, r, "%s: %s", smol_client_error_name(ev->error->code),
                          ev->error->message ? ev->error->message : "");
            }
            smollm3__event__free_unpacked(ev, NULL);
            return r;
        }
        smollm3__event__free_unpacked(ev, NULL);
        if (!stop || cancelled) continue;
send_cancel:
        if ((r = smol_client_send_cancel(c, id, &cancel_id, err))) return r;
        ignore_id(c, cancel_id);
        cancelled = 1;
        cancel_deadline = deadline_of(cancel_wait_ms);
    }
}

/* ---- chat helper ------------------------------------------------------- */

void smol_client_chat_init(struct smol_client_chat *p)
{
    memset(p, 0, sizeof *p);
    p->thinking = -1;
    p->speculative = -1;
}

Smollm3__GenerateRequest *smol_client_chat_build(struct smol_client_chat *p)
{
    size_t n = 0;
    smollm3__generate_request__init(&p->gen);
    smollm3__chat_input__init(&p->chat);
    smollm3__sampling_params__init(&p->sampling);
    if (p->system) {
        smollm3__chat_message__init(&p->msg[n]);
        p->msg[n].role = "system";
        p->msg[n].content = (char *)p->system;
        p->msgp[n] = &p->msg[n];
        n++;
    }
    smollm3__chat_message__init(&p->msg[n]);
    p->msg[n].role = "user";
    p->msg[n].content = (char *)(p->user ? p->user : "");
    p->msgp[n] = &p->msg[n];
    n++;
    p->chat.n_messages = n;
    p->chat.messages = p->msgp;

    p->gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    p->gen.chat = &p->chat;
    if (p->session_id && *p->session_id) {
        /* one new turn of a conversation the daemon keeps (server-side history) */
        p->gen.session_id = (char *)p->session_id;
        p->chat.append_to_session = 1;
        p->chat.create_session = p->create_session != 0;
    }
    if (p->tenant && *p->tenant) p->gen.tenant = (char *)p->tenant;
    if (p->thinking >= 0) {
        p->gen.enable_thinking_opt_case =
            SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
        p->gen.enable_thinking = p->thinking != 0;
    }
    if (p->has_temperature) {
        p->sampling.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
        p->sampling.temperature = p->temperature;
    }
    if (p->has_top_p) {
        p->sampling.top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
        p->sampling.top_p = p->top_p;
    }
    if (p->has_top_k) {
        p->sampling.top_k_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_K_OPT_TOP_K;
        p->sampling.top_k = p->top_k;
    }
    if (p->has_seed) {
        p->sampling.seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED;
        p->sampling.seed = p->seed;
    }
    p->gen.sampling = &p->sampling;
    p->gen.max_tokens = p->max_tokens;
    p->gen.n_stop = p->n_stops;
    p->gen.stop = (char **)p->stops;
    p->gen.logprobs = p->logprobs != 0;
    if (p->speculative >= 0) {
        p->gen.speculative_opt_case = SMOLLM3__GENERATE_REQUEST__SPECULATIVE_OPT_SPECULATIVE;
        p->gen.speculative = p->speculative != 0;
    }
    return &p->gen;
}
