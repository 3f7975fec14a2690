/*
 * http.c - libmicrohttpd side of the gateway (http.h): daemon setup, body
 * limits, suspend/resume, SSE responses and client-disconnect detection.
 *
 * Requests that need the daemon are answered asynchronously: the handler
 * sends the Generate, suspends the connection (r->waiting) and returns;
 * when the daemon's first event arrives (started or error) the connection is
 * resumed, MHD calls the handler again and it queues either the SSE response
 * (status 200) or the error with its mapped status.  A non-streaming request
 * waits the same way for its terminal event.
 *
 * SSE bodies come from a content-reader callback over the stream's `out`
 * buffer; with nothing pending it suspends the connection and returns 0, and
 * gw_stream_push() resumes it when bytes arrive.  MHD does not notice a
 * client closing a suspended connection, so every connection's fd is also
 * in our epoll set for EPOLLRDHUP (gw_conn_rdhup): the daemon request is
 * cancelled at once and the connection resumed so MHD closes it.
 */
#include "gateway/http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

/* ---- queueing responses ------------------------------------------------- */

static enum MHD_Result queue(struct gw_req *r, int status, struct MHD_Response *resp)
{
    if (!resp) return MHD_NO;
    r->status = status;
    r->responded = 1;
    enum MHD_Result ret = MHD_queue_response(r->mc, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* gw_oom_count when MHD last called the handler: a response built since then that saw an
 * allocation fail is replaced by queue_oom's (util.h) */
static unsigned oom_mark;

int gw_oom_in_request(void) { return gw_oom_count != oom_mark; }

/* The out-of-memory answer, from static bytes (nothing to allocate but MHD's response). */
static enum MHD_Result queue_oom(struct gw_req *r)
{
    static const char openai[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                 "\"param\":null,\"code\":\"out_of_memory\"}}";
    static const char anthropic[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                    "\"message\":\"out of memory\"}}";
    const int an = r->route && r->route->error_body;   /* the one other shape there is: Anthropic's */
    struct MHD_Response *resp = MHD_create_response_from_buffer(an ? sizeof anthropic - 1 : sizeof openai - 1,
                                                                (void *)(an ? anthropic : openai),
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    return queue(r, 500, resp);
}

enum MHD_Result gw_queue_text(struct gw_req *r, int status, const char *ctype, const char *text,
                              size_t len)
{
    if (gw_oom_count != oom_mark) return queue_oom(r);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    return queue(r, status, resp);
}

enum MHD_Result gw_queue_json(struct gw_req *r, int status, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(body);
    if (!s || gw_oom_count != oom_mark) {
        free(s);
        return queue_oom(r);
    }
    size_t n = strlen(s);
    s[n] = 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    return queue(r, status, resp);
}

/* OpenAI's error object: {"error": {"message", "type", "param", "code"}}. */
static enum MHD_Result queue_error(struct gw_req *r, int status, const char *type, const char *code,
                                   const char *param, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (r->route && r->route->error_body) return gw_queue_json(r, status, r->route->error_body(status, msg));
    json_t *e = json_pack("{s:{s:s,s:s,s:o,s:s}}", "error", "message", msg, "type", type, "param",
                          param && *param ? json_string(param) : json_null(), "code", code);
    return gw_queue_json(r, status, e);
}

enum MHD_Result gw_queue_error(struct gw_req *r, int status, const char *type, const char *code,
                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = queue_error(r, status, type, code, NULL, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result gw_queue_error_param(struct gw_req *r, int status, const char *type, const char *code,
                                     const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = queue_error(r, status, type, code, param, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result gw_queue_gw_error(struct gw_req *r, const struct gw_error *e)
{
    if (!e->status) return gw_queue_error(r, 500, "server_error", "internal", "a refusal without a status (a bug)");
    return gw_queue_error_param(r, e->status, e->type ? e->type : "server_error", e->code ? e->code : "internal",
                                e->param, "%s", e->msg);
}

/* ---- SSE ---------------------------------------------------------------- */

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct gw_req *r = cls;
    struct gw_stream *s = r->stream;
    if (!s) return MHD_CONTENT_READER_END_OF_STREAM;
    if (s->broken) return MHD_CONTENT_READER_END_WITH_ERROR;   /* lost bytes: close, do not end */
    size_t n = gw_buf_pending(&s->out);
    if (n) {
        if (n > max) n = max;
        memcpy(buf, s->out.p + s->out.off, n);
        s->out.off += n;
        return (ssize_t)n;
    }
    if (s->ended) {
        r->stream = NULL;
        s->req = NULL;
        gw_stream_free(s);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    MHD_suspend_connection(r->mc);
    r->suspended = 1;
    return 0;
}

enum MHD_Result gw_queue_sse(struct gw_req *r, struct gw_stream *s)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_reader, r, NULL);
    if (!resp) return MHD_NO;
    if (MHD_add_response_header(resp, "Content-Type", "text/event-stream") != MHD_YES) {
        /* a 200 the client cannot read as a stream: the connection is closed instead (its
         * stream cancelled and freed by request_completed) */
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return queue(r, 200, resp);
}

void gw_req_resume(struct gw_req *r)
{
    if (r && r->suspended) {
        r->suspended = 0;
        MHD_resume_connection(r->mc);
    }
}

void gw_http_resume_all(void)
{
    for (struct gw_stream *s = G.streams; s; s = s->next)
        if (s->req) gw_req_resume(s->req);
}

/* ---- disconnects -------------------------------------------------------- */

static void unwatch(struct gw_conn *c)
{
    if (c->watched) {
        epoll_ctl(G.epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->watched = 0;
    }
}

void gw_conn_rdhup(struct gw_conn *c)
{
    unwatch(c);                 /* level-triggered: once is enough */
    struct gw_req *r = c->req;
    if (!r || !r->stream) return;
    struct gw_stream *s = r->stream;
    gw_log(6, "client went away: cancelling request %llu", (unsigned long long)s->rid);
    gw_daemon_cancel(s);
    s->ended = 1;
    s->terminal = 1;
    gw_req_resume(r);
}

static void notify_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                              enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct gw_conn *c = calloc(1, sizeof *c);
        *socket_context = c;
        G.n_conns++;
        if (!c) return;
        c->mc = mc;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        if (c->fd >= 0) {
            struct epoll_event ev = { .events = EPOLLRDHUP, .data.ptr = c };
            c->watched = epoll_ctl(G.epfd, EPOLL_CTL_ADD, c->fd, &ev) == 0;
        }
    } else {
        struct gw_conn *c = *socket_context;
        G.n_conns--;
        if (!c) return;
        unwatch(c);
        if (c->req) c->req->conn = NULL;
        free(c);
        *socket_context = NULL;
    }
}

/* Called when MHD is done with a request (sent, failed or client gone). */
static void request_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
                              enum MHD_RequestTerminationCode toe)
{
    struct gw_req *r = *req_cls;
    if (!r) return;
    struct gw_stream *s = r->stream;
    if (s) {
        if (s->sent && !s->terminal) gw_daemon_cancel(s);
        s->req = NULL;
        gw_stream_free(s);
    }
    if (r->conn && r->conn->req == r) r->conn->req = NULL;
    gw_metrics_request(r->ep, r->responded ? r->status : 499, r->key);
    gw_buf_deinit(&r->body);
    free(r);
    *req_cls = NULL;
}

/* The daemon answered a request that waited for it: queue the response. */
enum MHD_Result gw_req_answer(struct gw_req *r)
{
    r->waiting = 0;
    struct gw_stream *s = r->stream;
    if (!s) return gw_queue_error(r, 500, "server_error", "internal", "stream lost");
    if (s->err.status) {
        struct gw_error e = s->err;     /* carried as the refusal came: status, type, code */
        r->stream = NULL;
        s->req = NULL;
        gw_stream_free(s);
        return gw_queue_gw_error(r, &e);
    }
    if (!gw_kind_sse(s->kind) && s->proto && s->proto->finish) return s->proto->finish(r, s);
    return gw_queue_sse(r, s);
}

/* After sending: answer now if the daemon already replied, else suspend. */
enum MHD_Result gw_req_wait(struct gw_req *r)
{
    struct gw_stream *s = r->stream;
    if (s && (s->err.status || gw_stream_done(s) ||
              (gw_kind_sse(s->kind) && s->started)))
        return gw_req_answer(r);
    r->suspended = 1;
    MHD_suspend_connection(r->mc);
    return MHD_YES;
}

/* Attaches stream s (its request packed) to r and sends it to the daemon,
 * then waits as gw_req_wait; a send that fails frees s and answers 503. */
enum MHD_Result gw_req_send(struct gw_req *r, struct gw_stream *s)
{
    if (gw_oom_count != oom_mark) {
        /* an allocation failed while this request was parsed or built (jansson's parser goes on
         * with what it has: a prompt can come out mangled): nothing goes to the daemon */
        gw_stream_free(s);
        return queue_oom(r);
    }
    if (!gw_daemon_fits(s)) {
        size_t n = s->packed_len;
        gw_stream_free(s);
        return gw_queue_error(r, 413, "invalid_request_error", "request_too_large",
                              "the request is %zu bytes for the daemon, over its limit of %llu", n,
                              (unsigned long long)G.daemon_max_request);
    }
    s->req = r;
    s->key = r->key;
    r->stream = s;
    r->waiting = 1;
    if (gw_daemon_send_stream(s)) {
        r->waiting = 0;
        r->stream = NULL;
        s->req = NULL;
        gw_stream_free(s);
        return gw_queue_error(r, 503, "server_error", "daemon_unavailable", "the inference daemon is not reachable");
    }
    return gw_req_wait(r);
}

/* ---- routing ------------------------------------------------------------ */

static gw_router router;

/* 401 in OpenAI's shape (Anthropic's on its endpoints), with the challenge
 * RFC 6750 asks for. */
static enum MHD_Result unauthorized(struct gw_req *r, int presented)
{
    const char *msg = presented ? "Incorrect API key provided."
                                : "You didn't provide an API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'.";
    json_t *e = r->route && r->route->error_body
                    ? r->route->error_body(401, msg)
                    : json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", "invalid_request_error",
                                "param", "code", presented ? "invalid_api_key" : "missing_api_key");
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (!s) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"smollm3\"");
    return queue(r, 401, resp);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *mc, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **req_cls)
{
    struct gw_req *r = *req_cls;
    oom_mark = gw_oom_count;
    if (!r) {                   /* first call: headers only */
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *req_cls = r;
        r->mc = mc;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->conn = ci ? ci->socket_context : NULL;
        if (r->conn) r->conn->req = r;
        const char *arg;
        r->route = router(url, &arg);
        r->ep = r->route->ep;
        r->key = gw_auth_check(mc);
        if (r->key == GW_AUTH_NONE && !r->route->open)
            return unauthorized(r, MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization") != NULL ||
                                       MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key") != NULL);
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        /* far over the limit: refuse before reading (the connection closes);
         * a little over: read and drop the body, then 413 (clients see it) */
        if (cl && strtoull(cl, NULL, 10) / 16 > G.cfg.max_body)
            return gw_queue_error(r, 413, "invalid_request_error", "request_too_large",
                                  "request body over %zu bytes", G.cfg.max_body);
        return MHD_YES;
    }
    if (*upload_size) {         /* body bytes */
        if (!r->too_large && r->body.len + *upload_size > G.cfg.max_body) {
            r->too_large = 1;
            gw_buf_deinit(&r->body);
        }
        if (!r->too_large && gw_buf_add(&r->body, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    if (r->waiting) return gw_req_answer(r);  /* resumed after the daemon answered */
    if (G.stopping)
        return gw_queue_error(r, 503, "server_error", "shutting_down", "gateway shutting down");
    if (r->too_large)
        return gw_queue_error(r, 413, "invalid_request_error", "request_too_large",
                              "request body over %zu bytes", G.cfg.max_body);
    const char *want = r->route->method;
    if (want && strcmp(method, want) && !(!strcmp(method, "HEAD") && !strcmp(want, "GET")))
        return gw_queue_error(r, 405, "invalid_request_error", "method_not_allowed",
                              "method %s not allowed on %s", method, url);
    if (G.n_conns > G.cfg.max_connections)
        return gw_queue_error(r, 503, "server_error", "too_many_connections",
                              "too many connections (limit %u)", G.cfg.max_connections);
    const char *arg;
    router(url, &arg);
    return r->route->handle(r, method, arg);
}

/* ---- the stream hooks (daemon.h) ------------------------------------------ */

static int stream_waiting(const struct gw_stream *s) { return s->req->waiting; }

static void stream_wake(struct gw_stream *s) { gw_req_resume(s->req); }

static void stream_detach(struct gw_stream *s) { s->req->stream = NULL; }

struct MHD_Daemon *gw_http_start(int listen_fd, gw_router route)
{
    static const struct gw_stream_hooks hooks = { stream_waiting, stream_wake, stream_detach };
    gw_stream_hooks_set(&hooks);
    router = route;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, handler, NULL,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
        /* a few over the limit so the excess gets a JSON 503, not a reset */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(G.cfg.max_connections + 64),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)G.cfg.request_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, NULL,
        MHD_OPTION_END);
}
