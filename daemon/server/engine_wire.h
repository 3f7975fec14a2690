/*
 * engine_wire.h - what both threads of the inproc PAIR (engine.h) need of
 * it beyond engine.h: the happens-before its messages carry, told to
 * ThreadSanitizer.  engine_wire.c implements both ends of the protocol: the
 * command senders the RPC thread calls (engine.h), and the engine thread's
 * event builders, event senders and command reader (engine_internal.h:
 * they read the engine's requests).
 */
#ifndef SMOL_ENGINE_WIRE_H
#define SMOL_ENGINE_WIRE_H

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
