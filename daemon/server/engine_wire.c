/*
 * engine_wire.c - both ends of the inproc PAIR between the RPC thread and
 * the engine thread (the framing is in engine.h): the command senders the
 * RPC thread calls, and the event senders the engine thread calls.  Nothing
 * here knows about scheduling; engine.c and engine_query.c both send
 * through it, and it calls neither.
 */
#include "daemon/server/engine_wire.h"

#include <stdlib.h>
#include <time.h>
#include <zmq.h>

#include "daemon/server/engine_internal.h"

double smol_engine_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- messages to the RPC thread --------------------------------------------- */

void smol_engine_send_event(struct smol_engine *e, uint64_t id, unsigned flags, const Smollm3__Event *ev)
{
    size_t n = smollm3__event__get_packed_size(ev);
    if (n > e->pack_cap) {
        uint8_t *p = realloc(e->pack, n + 4096);
        if (!p) return; /* out of memory: the event is lost, but nothing is corrupted */
        e->pack = p;
        e->pack_cap = n + 4096;
    }
    smollm3__event__pack(ev, e->pack);
    uint8_t fl = (uint8_t)flags;
    zmq_send(e->sock, &id, sizeof id, ZMQ_SNDMORE);
    zmq_send(e->sock, &fl, 1, ZMQ_SNDMORE);
    zmq_send(e->sock, e->pack, n, 0);
}

void smol_engine_send_error(struct smol_engine *e, uint64_t id, uint64_t client_id, enum smol_err code, const char *msg)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    er.code = (Smollm3__ErrorCode)code;
    er.message = (char *)msg;
    ev.request_id = client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    ev.error = &er;
    smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
}

/* ---- command senders (RPC side) ------------------------------------------------------ */

static int send2(void *sock, uint8_t cmd, const void *p, size_t n)
{
    if (zmq_send(sock, &cmd, 1, n || p ? ZMQ_SNDMORE : 0) < 0) return -1;
    if ((n || p) && zmq_send(sock, p, n, 0) < 0) return -1;
    return 0;
}

int smol_engine_send_submit(void *sock, struct smol_request *r) { return send2(sock, SMOL_CMD_SUBMIT, &r, sizeof r); }
int smol_engine_send_id(void *sock, enum smol_engine_cmd cmd, uint64_t id) { return send2(sock, (uint8_t)cmd, &id, sizeof id); }
int smol_engine_send_drain(void *sock, uint32_t grace_ms) { return send2(sock, SMOL_CMD_DRAIN, &grace_ms, sizeof grace_ms); }
int smol_engine_send_stop(void *sock) { return send2(sock, SMOL_CMD_STOP, NULL, 0); }

int smol_engine_send_query(void *sock, uint64_t id, const void *packed, size_t len)
{
    uint8_t cmd = SMOL_CMD_QUERY;
    if (zmq_send(sock, &cmd, 1, ZMQ_SNDMORE) < 0 || zmq_send(sock, &id, sizeof id, ZMQ_SNDMORE) < 0) return -1;
    return zmq_send(sock, packed, len, 0) < 0 ? -1 : 0;
}
