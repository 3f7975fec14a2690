/*
 * http.h - the HTTP transport of the gateway (http.c): libmicrohttpd set
 * up in external-epoll mode, requests and their bodies, responses (JSON,
 * text, SSE from a stream's bytes), suspend / resume while the daemon
 * answers, client-disconnect detection.  Which handler serves a URL is the
 * route table's (routes.c), handed in at start (gw_http_start): this layer
 * names no endpoint's code.  It registers the stream hooks (daemon.h) that
 * wake a request when its stream moves.
 *
 * Layer 3 of the gateway (tests/check_layers.sh): the stream registry and
 * everything beneath it.
 */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include <microhttpd.h>
#include <jansson.h>
#include "gateway/auth.h"
#include "gateway/daemon.h"
#include "gateway/error.h"
#include "gateway/metrics.h"
#include "gateway/util.h"

struct gw_req;

/* One route: what serves a path (routes.c's table). */
struct gw_route {
    enum gw_endpoint ep;        /* the counters' label */
    const char *method;         /* the one method taken (a GET route takes HEAD too; else 405);
                                   NULL: the handler checks */
    int open;                   /* served without an API key when keys are configured */
    /* the endpoint's error body (NULL: OpenAI's {"error": {...}}): status, message */
    json_t *(*error_body)(int status, const char *msg);
    /* arg: what follows the route's prefix ("" for an exact path) */
    enum MHD_Result (*handle)(struct gw_req *r, const char *method, const char *arg);
};

/* The route of url, never NULL (an unknown path has one that answers 404); *arg as above. */
typedef const struct gw_route *(*gw_router)(const char *url, const char **arg);

/* One HTTP request (MHD's req_cls). */
struct gw_req {
    struct gw_conn *conn;
    struct MHD_Connection *mc;
    const struct gw_route *route;
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

struct MHD_Daemon *gw_http_start(int listen_fd, gw_router route);
void gw_http_resume_all(void);
void gw_conn_rdhup(struct gw_conn *c);
/* 1 when an allocation counted by gw_oom_count (util.h) failed since MHD called the handler for
 * the request being served: what it parsed or built may lack bytes */
int gw_oom_in_request(void);

void gw_req_resume(struct gw_req *r);
enum MHD_Result gw_req_answer(struct gw_req *r);
enum MHD_Result gw_req_wait(struct gw_req *r);
/* Attaches stream s (its request packed) to r and sends it to the daemon, then waits as
 * gw_req_wait; a send that fails frees s and answers 503 (413 when over the daemon's limit). */
enum MHD_Result gw_req_send(struct gw_req *r, struct gw_stream *s);

enum MHD_Result gw_queue_json(struct gw_req *r, int status, json_t *body);
enum MHD_Result gw_queue_error(struct gw_req *r, int status, const char *type, const char *code,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
enum MHD_Result gw_queue_error_param(struct gw_req *r, int status, const char *type, const char *code,
                                     const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Queues e in the route's error shape with e's status. */
enum MHD_Result gw_queue_gw_error(struct gw_req *r, const struct gw_error *e);
enum MHD_Result gw_queue_text(struct gw_req *r, int status, const char *ctype, const char *text,
                              size_t len);
enum MHD_Result gw_queue_sse(struct gw_req *r, struct gw_stream *s);

#endif
