/*
 * engine_wire.h - the engine thread's side of the inproc protocol (engine.h):
 * events to the RPC thread.  The RPC side's command senders are declared in
 * engine.h, which is what the RPC thread includes; both are implemented in
 * engine_wire.c.
 */
#ifndef SMOL_ENGINE_WIRE_H
#define SMOL_ENGINE_WIRE_H

#include <stdint.h>
#include "daemon/model/error.h"
#include "smollm3.pb-c.h"

struct smol_engine;

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
