/*
 * rpc.h - the RPC side of smollm3d: the ZeroMQ ROUTER socket clients talk
 * to, request decoding and validation (request.h), routing of engine events back to
 * their clients, and per-stream backpressure.
 *
 * Threads (zguide): the RPC loop owns the ROUTER socket and its end of the
 * inproc PAIR to the engine thread (daemon/server/engine.h); nothing else touches
 * them.  The loop is non-blocking everywhere: every send uses ZMQ_DONTWAIT.
 *
 * Requests.  Each client message is [identity][Request] or, from a client
 * that adds one, [identity][empty][Request]; replies mirror the delimiter.
 * The frame is size-checked before unpacking (max_request_bytes ->
 * ERROR_TOO_LARGE, request_id 0), unpacked (NULL -> ERROR_BAD_FORMAT,
 * request_id 0) and validated (smol_rpc_decode, smol_rpc_build_request).
 *   generate       -> struct smol_request, a new internal id (64-bit counter,
 *                     never reused), SUBMIT.  A request_id already in flight
 *                     for the same client -> ERROR_INVALID_ARGUMENT.
 *   cancel         -> CANCEL of the client's request with that id, answered
 *                     with Ack.  An unknown or finished id is also answered
 *                     with Ack and changes nothing: cancel is idempotent and
 *                     racing a request's natural end is normal, not an error.
 *                     The cancelled stream ends with its own terminal event.
 *   health         -> answered here (ready, model, status, protocol version,
 *                     max_request_bytes: the frame limit above).
 *   stats, session_get/list/delete -> QUERY to the engine, which answers.
 *   response_store/get/delete/list -> handed to the stored Responses'
 *                     thread (responses_store.h: small files under
 *                     kv_spill_dir, or memory), whose replies the loop
 *                     sends when its eventfd says they are done: neither
 *                     this loop nor the engine waits on those files.
 * While draining (SIGTERM) generate gets ERROR_SHUTTING_DOWN.
 *
 * Trust.  Clients on this socket are trusted: a request says which tenant
 * it acts for (GenerateRequest.tenant, the session queries' tenant) and the
 * daemon takes its word.  Tenants keep sessions and cached prefixes apart
 * (sessions.h); the gateway, which authenticates API keys, sets the tenant
 * from the key.  Whoever can reach the socket can act for any tenant, so it
 * stays a local socket (socket_mode) or a trusted network's.
 *
 * Events.  The engine sends [u64 id][u8 flags][Event]; the loop sends
 * [identity][Event] with ZMQ_DONTWAIT under ZMQ_ROUTER_MANDATORY.
 *   EAGAIN (the client's pipe is at its high-water mark): the frame joins
 *     the request's outbound queue (never dropped); past pause_frames queued
 *     frames the engine is told PAUSE for that request (it stops decoding
 *     it), and RESUME once the queue is empty.  Queues are retried every
 *     few milliseconds; other clients are never held up.
 *   EHOSTUNREACH (the client is gone): its queued frames are dropped and
 *     every unfinished request of that client is CANCELled.
 * A route is removed on its TERMINAL event once its queue is flushed.
 * A client that vanishes while none of its requests has anything to send is
 * noticed at the next event of one of them (with heartbeats on, ZeroMQ
 * drops a silent peer after heartbeat_timeout_ms).
 *
 * Watchdog.  With watchdog_usec > 0 the loop sends WATCHDOG=1 every half
 * interval, but only if the engine thread showed life within the last
 * interval: any message from it counts, and the loop sends it a stats QUERY
 * (a probe, answered by the engine between steps and never forwarded) each
 * half interval so an idle engine still answers.  A hung engine thread thus
 * stops the watchdog pings and systemd restarts the daemon.
 */
#ifndef SMOL_RPC_H
#define SMOL_RPC_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/server/engine.h"
#include "daemon/server/request.h"
#include "daemon/server/responses_store.h"
#include "daemon/model/error.h"
#include "smollm3.pb-c.h"     /* generated into $(BUILD)/gen */


/* ------------------------------------------------------------ the loop */

struct smol_rpc_config {
    struct smol_rpc_limits lim;
    int sndhwm, rcvhwm;         /* per-peer ZeroMQ high-water marks (messages) */
    int pause_frames;           /* queued events before PAUSE */
    int heartbeat_ivl_ms, heartbeat_timeout_ms;
    int socket_mode;            /* ipc socket file mode, e.g. 0660 */
    uint32_t drain_grace_ms;    /* sent with DRAIN */
    int max_routes;             /* in-flight requests + queued replies; beyond: ERROR_QUEUE_FULL */
    uint64_t watchdog_usec;     /* 0 = no systemd watchdog */
    const char *model_name;     /* health reply (copied) */
    int thinking;               /* health reply: the model has a thinking mode (SmolLM3's template) */
    struct smol_rstore *rstore; /* stored Responses (responses_store.h), its thread started; NULL:
                                   those requests are ERROR_UNSUPPORTED.  Not owned */
};

struct smol_rpc_counters {
    uint64_t routes;            /* live routes (requests in flight, queued replies) */
    uint64_t queued_frames;     /* events waiting for slow clients */
    uint64_t paused;            /* requests paused by backpressure now */
    uint64_t submitted, rejected, cancels_sent, peers_gone;
    uint64_t parked;            /* requests that waited for their grammar's index (grammar_cache.h) */
};

struct smol_rpc;

enum smol_err smol_rpc_new(struct smol_rpc **out, void *zctx, const struct smol_rpc_config *cfg, char *err);
/* Closes the sockets (linger 1 s for the ROUTER, so last events go out) and
 * frees every route; accepts NULL. */
void smol_rpc_free(struct smol_rpc **rpc);

/* Binds the inproc PAIR the engine thread connects to (call before
 * smol_engine_start). */
enum smol_err smol_rpc_bind_engine(struct smol_rpc *rpc, const char *endpoint, char *err);
/* Binds the ROUTER to endpoint; for ipc:// the socket file is created under
 * umask 0117 and then chmod'ed to socket_mode. */
enum smol_err smol_rpc_bind(struct smol_rpc *rpc, const char *endpoint, char *err);
/* The ROUTER as a CURVE server with c's key and ZAP check (curve.h); before smol_rpc_bind. */
struct smol_curve;
enum smol_err smol_rpc_secure(struct smol_rpc *rpc, struct smol_curve *c, char *err);

/* Ready flag reported by health (set once the engine runs). */
void smol_rpc_set_ready(struct smol_rpc *rpc, int ready);

/* SIGTERM: stop admitting, send DRAIN; the loop ends after DRAINED once the
 * outbound queues are flushed (or after a bounded wait). */
void smol_rpc_drain(struct smol_rpc *rpc);
/* A second SIGTERM: end the loop at once. */
void smol_rpc_quit(struct smol_rpc *rpc);

/* One loop iteration: waits up to timeout_ms (less when queues or timers
 * need it) for the sockets and extra_fd (-1 = none; when readable,
 * on_extra(rpc, user) is called), handles what arrived.  Returns 1 while
 * the loop should go on, 0 when it finished. */
int smol_rpc_poll_once(struct smol_rpc *rpc, int timeout_ms, int extra_fd,
                       void (*on_extra)(struct smol_rpc *rpc, void *user), void *user);
/* Runs poll_once until it returns 0. */
void smol_rpc_run(struct smol_rpc *rpc, int extra_fd, void (*on_extra)(struct smol_rpc *rpc, void *user),
                  void *user);

void smol_rpc_get_counters(const struct smol_rpc *rpc, struct smol_rpc_counters *c);

#endif
