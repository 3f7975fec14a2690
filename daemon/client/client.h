/*
 * client.h - a small C client library for smollm3d's ZeroMQ + protobuf RPC
 * (proto/smollm3.proto), for smollm3ctl, the gateway and other services.
 *
 * One struct smol_client is one DEALER socket connected to the daemon's
 * ROUTER, with ZeroMQ heartbeats (a frozen or vanished daemon is noticed)
 * and ZMQ_IMMEDIATE (nothing is queued for a daemon that is not there).  A
 * socket monitor reports disconnects, so a stream in flight when the daemon
 * goes away fails at once with SMOL_EIO instead of waiting forever (on a
 * restart the daemon never sends the terminal event).
 *
 * Threads: thread-compatible, not thread-safe.  A client (and its ZeroMQ
 * socket) belongs to one thread at a time; use one client per thread.
 * Nothing here is global, nothing calls exit() or installs signal handlers.
 *
 * Request ids: every request gets a fresh 64-bit id from a per-client
 * counter started at a random value, so ids are never reused (0 is never
 * used: the daemon reserves it for errors about unparseable frames).
 *
 * Events that belong to another request than the one a call waits for
 * (several streams on one client, a cancel ack while streaming) are kept in
 * a FIFO and returned by the next smol_client_recv(); nothing is dropped.
 *
 * Errors: functions return enum smol_err (SMOL_OK == 0) and, where err is
 * non-NULL, write a message into it (SMOL_ERRLEN bytes).  An error *event*
 * from the daemon is not a library failure: the calls hand it back as an
 * Event and return the daemon's code mapped onto enum smol_err (the two
 * enums are the same numbers).  Timeouts return SMOL_EIO with "timed out".
 */
#ifndef SMOL_CLIENT_H
#define SMOL_CLIENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"
#include "smollm3.pb-c.h"

/* The daemon's default endpoint: ipc://$RUNTIME_DIRECTORY/smollm3d.sock
 * (first entry of the list), else ipc://$XDG_RUNTIME_DIR/smollm3d.sock,
 * else ipc:///run/smollm3d/smollm3d.sock.  Writes at most n bytes into buf
 * (NUL-terminated) and returns buf. */
char *smol_client_default_endpoint(char *buf, size_t n);

struct smol_client_opts {
    int heartbeat_ivl_ms;       /* ZMQ_HEARTBEAT_IVL; default 1000, 0 = off */
    int heartbeat_timeout_ms;   /* ZMQ_HEARTBEAT_TIMEOUT; default 5000 */
    int send_timeout_ms;        /* wait for a connection to send on; default 5000, -1 = forever */
    int64_t max_event_bytes;    /* ZMQ_MAXMSGSIZE on incoming frames; default 64 MiB */
    void *zmq_ctx;              /* borrowed context; NULL = the client owns a new one */
    /* CURVE (tcp:// to a daemon with curve_secret_key_file): both 40 Z85 characters, or NULL */
    const char *curve_server_key;   /* the daemon's public key */
    const char *curve_secret_key;   /* this client's secret key (its public key is derived) */
};

void smol_client_opts_default(struct smol_client_opts *o);

struct smol_client;

/* Creates a client connected to endpoint ("ipc://PATH", "tcp://…").  The
 * connection itself is asynchronous: opening succeeds even when no daemon
 * listens yet; sends then wait up to send_timeout_ms for one.  opts NULL =
 * defaults.  For ipc:// endpoints, a missing socket file is not an error
 * here (see smol_client_endpoint_exists).  Request ids start at a random
 * point drawn with getrandom(2); SMOL_EBUSY when the kernel has no
 * randomness to give (early boot). */
enum smol_err smol_client_open(struct smol_client **out, const char *endpoint,
                               const struct smol_client_opts *opts, char *err);
/* Closes the socket (pending outgoing messages are discarded), frees queued
 * events and the owned context; accepts NULL and *c == NULL, sets *c = NULL. */
void smol_client_close(struct smol_client **c);

/* 1 if endpoint is not ipc:// or its socket file exists, else 0. */
int smol_client_endpoint_exists(const char *endpoint);

/* 1 while the socket monitor reports a live connection to the daemon. */
int smol_client_connected(struct smol_client *c);

/* For event loops (the gateway): the file descriptor to watch (ZMQ_FD,
 * edge-triggered: after it fires, call smol_client_recv(c, 0, …) until it
 * returns "timed out"), or -1.  The socket itself stays the client's. */
int smol_client_fd(struct smol_client *c);

/* A fresh request id (never 0, never repeated on this client). */
uint64_t smol_client_next_id(struct smol_client *c);

/* ---- sending ----------------------------------------------------------- */

/* Packs and sends req.  Sets req->protocol_version to the current version
 * and, when req->request_id is 0, assigns smol_client_next_id().  The id is
 * stored in *id_out when non-NULL.  Waits up to send_timeout_ms for a
 * connection (SMOL_EIO "daemon not reachable" after it). */
enum smol_err smol_client_send(struct smol_client *c, Smollm3__Request *req, uint64_t *id_out,
                               char *err);
/* Sends raw bytes as one frame (tests of the daemon's input validation). */
enum smol_err smol_client_send_raw(struct smol_client *c, const void *data, size_t len, char *err);

/* Convenience senders: build the envelope around a body.  g is borrowed. */
enum smol_err smol_client_send_generate(struct smol_client *c, Smollm3__GenerateRequest *g,
                                        uint64_t *id_out, char *err);
enum smol_err smol_client_send_cancel(struct smol_client *c, uint64_t target_id,
                                      uint64_t *id_out, char *err);

/* ---- receiving --------------------------------------------------------- */

/* Waits up to timeout_ms (-1 = forever, 0 = poll) for the next event of any
 * request.  SMOL_OK with *ev set: an event, free it with smol_client_event_free.
 * SMOL_EIO "timed out" (*ev NULL) on timeout; SMOL_EIO "disconnected" when
 * the monitor saw the daemon's connection drop since the last call (reported
 * once; pending streams are lost then); SMOL_ECANCELLED (*ev NULL) when
 * *interrupt became non-zero or a signal interrupted the wait while
 * *interrupt is set (interrupt may be NULL).  Frames that do not unpack as
 * an Event are skipped (counted in smol_client_bad_frames). */
enum smol_err smol_client_recv(struct smol_client *c, int timeout_ms,
                               const volatile sig_atomic_t *interrupt, Smollm3__Event **ev,
                               char *err);
void smol_client_event_free(Smollm3__Event **ev);
uint64_t smol_client_bad_frames(const struct smol_client *c);

/* 1 for the events that end a request (done, error, or any reply kind). */
int smol_client_event_is_terminal(const Smollm3__Event *ev);

/* ---- calls ------------------------------------------------------------- */

/* Sends req and waits up to timeout_ms for the one event answering it
 * (events of other requests are queued).  Returns SMOL_OK with *reply set,
 * or the daemon's error code with *reply set to the error event, or a
 * library error with *reply NULL. */
enum smol_err smol_client_call(struct smol_client *c, Smollm3__Request *req, int timeout_ms,
                               Smollm3__Event **reply, char *err);

/* One-shot requests built on smol_client_call; *reply as above. */
enum smol_err smol_client_health(struct smol_client *c, int timeout_ms, Smollm3__Event **reply,
                                 char *err);
enum smol_err smol_client_stats(struct smol_client *c, int timeout_ms, Smollm3__Event **reply,
                                char *err);
/* The session calls name their tenant (the sessions' namespace; NULL or "" = the default). */
enum smol_err smol_client_session_list(struct smol_client *c, const char *tenant, int timeout_ms,
                                       Smollm3__Event **reply, char *err);
enum smol_err smol_client_session_get(struct smol_client *c, const char *tenant, const char *session_id,
                                      int timeout_ms, Smollm3__Event **reply, char *err);
enum smol_err smol_client_session_delete(struct smol_client *c, const char *tenant, const char *session_id,
                                         int timeout_ms, Smollm3__Event **reply, char *err);

/* ---- streaming --------------------------------------------------------- */

/* Called once per event of the stream, in order, the terminal one included.
 * The event is only valid during the call.  Return 0 to go on, non-zero to
 * cancel the request (the stream then continues to its terminal event). */
typedef int (*smol_client_event_fn)(const Smollm3__Event *ev, void *user);

/* Sends g and delivers its events to fn until the terminal event.
 * idle_timeout_ms bounds the wait for each event (-1 = no bound: the stream
 * then ends only by an event, a cancel or a disconnect).  When *cancel
 * (may be NULL) becomes non-zero — e.g. set by a SIGINT handler — or fn
 * returns non-zero, a Cancel is sent once and the loop waits up to
 * cancel_wait_ms more for the terminal event.  *id_out (may be NULL) gets
 * the request id as soon as it is sent.
 * Returns SMOL_OK after `done` (whatever its finish reason), the daemon's
 * code after an `error` event, or SMOL_EIO on timeout / disconnect. */
enum smol_err smol_client_stream(struct smol_client *c, Smollm3__GenerateRequest *g,
                                 int idle_timeout_ms, int cancel_wait_ms,
                                 const volatile sig_atomic_t *cancel, smol_client_event_fn fn,
                                 void *user, uint64_t *id_out, char *err);

/* A simple chat turn: one optional system message and one user message.
 * Build with smol_client_chat_init, fill fields, then smol_client_chat_build
 * to get a GenerateRequest that points into p (valid while p lives and is
 * unchanged; no allocation). */
struct smol_client_chat {
    const char *session_id;     /* NULL/"" = no session; else the turn is appended to the
                                   conversation the daemon keeps for it */
    int create_session;         /* with session_id: 1 = this turn starts the conversation
                                   (ChatInput.create_session); 0 (the init default) = it continues
                                   one the daemon holds (else ERROR_UNKNOWN_SESSION) */
    const char *tenant;         /* GenerateRequest.tenant: NULL/"" = the default namespace */
    const char *system;         /* NULL = no system message */
    const char *user;           /* the user message (required) */
    int thinking;               /* -1 = daemon default, 0 = /no_think, 1 = think */
    int has_temperature;
    float temperature;
    int has_top_p;
    float top_p;
    int has_top_k;
    int32_t top_k;
    int has_seed;
    uint64_t seed;
    uint32_t max_tokens;        /* 0 = daemon default */
    const char *const *stops;   /* n_stops stop strings */
    size_t n_stops;
    int logprobs;
    int speculative;            /* -1 = the daemon's default, 0 = off, 1 = on */
    /* storage the built request points into */
    Smollm3__GenerateRequest gen;
    Smollm3__ChatInput chat;
    Smollm3__ChatMessage msg[2];
    Smollm3__ChatMessage *msgp[2];
    Smollm3__SamplingParams sampling;
};

void smol_client_chat_init(struct smol_client_chat *p);
Smollm3__GenerateRequest *smol_client_chat_build(struct smol_client_chat *p);

/* ---- naming ------------------------------------------------------------ */

/* "content"/"reasoning"; "stop"/"length"/"tool_calls"/"cancelled";
 * error code names as smol_err_name ("busy"); never NULL. */
const char *smol_client_channel_name(int channel);
const char *smol_client_finish_name(int finish_reason);
const char *smol_client_error_name(int code);

#endif
