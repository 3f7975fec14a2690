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

double smol_engine_now(void);   /* CLOCK_MONOTONIC seconds */
/* Sends [id][flags][packed ev] to the RPC thread. */
void smol_engine_send_event(struct smol_engine *e, uint64_t id, unsigned flags, const Smollm3__Event *ev);
/* Sends a terminal error event. */
void smol_engine_send_error(struct smol_engine *e, uint64_t id, uint64_t client_id, enum smol_err code,
                            const char *msg);
#endif
