/*
 * engine_wire.h - the engine thread's side of the inproc protocol (engine.h):
 * events to the RPC thread.  The RPC side's command senders are declared in
 * engine.h, which is what the RPC thread includes; both are implemented in
 * engine_wire.c.
 */
#ifndef SMOL_ENGINE_WIRE_H
#define SMOL_ENGINE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include "daemon/model/error.h"
#include "smollm3.pb-c.h"

struct smol_engine;
struct smol_request;
struct smol_chat_event;
struct req;                     /* a request on the engine (engine_internal.h) */

/* Sends [id][flags][packed ev] to the RPC thread; 0, or -1 when it was lost
 * (logged and counted in n_events_lost).  A terminal event is never lost to
 * a failed allocation: when ev cannot be packed, an ENOMEM error event ends
 * the stream in its place.  Only a socket that refuses it for ~100 ms
 * (ETERM: shutting down) loses one. */
int smol_engine_send_event(struct smol_engine *e, uint64_t id, unsigned flags, const Smollm3__Event *ev);
/* Sends [0][SMOL_EV_DRAINED][]; 0, or -1 (logged). */
int smol_engine_send_drained(struct smol_engine *e);
/* Sends a terminal error event. */
void smol_engine_send_error(struct smol_engine *e, uint64_t id, uint64_t client_id, enum smol_err code,
                            const char *msg);
/* ---- a request's events, built from its state (q is only read) ---- */

/* Started: the prompt's tokens, those from the cache (restored: of them,
 * read back from disk), the session, thinking.  0, or -1 when it was lost. */
int smol_engine_send_started(struct smol_engine *e, const struct req *q, int restored);
/* A Token carrying text[0, len) on channel (Smollm3__Channel); token_id:
 * q's current token on its first segment, -1 on the others (logprobs, when
 * asked, ride on the first).  0 sent; -1 lost; SMOL_WIRE_UNMADE: out of
 * memory before anything was made (the segment does not count). */
#define SMOL_WIRE_UNMADE (-2)
int smol_engine_send_token(struct smol_engine *e, const struct req *q, const char *text, size_t len, int channel,
                           int32_t token_id);
/* A ToolCall: the parser's call pe, named call_id.  0, or -1 when lost. */
int smol_engine_send_tool_call(struct smol_engine *e, const struct req *q, const struct smol_chat_event *pe,
                               const char *call_id);
/* Done: finish reason, usage and timings of q (terminal when q is the last
 * of its choices to end). */
void smol_engine_send_done(struct smol_engine *e, const struct req *q);

/* ---- commands from the RPC thread (the framing is in engine.h) ---- */

/* One command read off the PAIR, its frames held until
 * smol_engine_cmd_close (data points into them). */
struct smol_engine_cmd_msg {
    uint8_t cmd;                    /* enum smol_engine_cmd; 0: an empty first frame */
    uint64_t id;                    /* CANCEL, PAUSE, RESUME, QUERY: the request (0: none) */
    struct smol_request *r;         /* SUBMIT: the request handed over (NULL: malformed) */
    uint32_t grace_ms;              /* DRAIN */
    const uint8_t *data;            /* QUERY: the packed Request, len bytes (when n > 2) */
    size_t len;
    zmq_msg_t part[3];              /* frames past the third are read and dropped */
    int n;                          /* frames held */
};
/* Reads one multipart command without waiting: 1, or 0 when none was
 * pending (nothing to close). */
int smol_engine_recv_cmd(void *sock, struct smol_engine_cmd_msg *c);
void smol_engine_cmd_close(struct smol_engine_cmd_msg *c);

/* ZeroMQ orders an inproc message's send before its receive, but libzmq is not instrumented, so
 * ThreadSanitizer (make tsan) would take what rides on those messages (a request handed from the
 * RPC thread to the engine by pointer) for races.  Every send on the engine's PAIR says
 * SMOL_HB_SEND() first and every receive SMOL_HB_RECV() after: the happens-before the queue
 * gives, told to the sanitizer.  No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
#define SMOL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SMOL_TSAN 1
#endif
#endif
#ifdef SMOL_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char smol_inproc_hb;
#define SMOL_HB_SEND() __tsan_release(&smol_inproc_hb)
#define SMOL_HB_RECV() __tsan_acquire(&smol_inproc_hb)
#else
#define SMOL_HB_SEND() ((void)0)
#define SMOL_HB_RECV() ((void)0)
#endif

#endif
