/*
 * engine_wire.c - both ends of the inproc PAIR between the RPC thread and
 * the engine thread (the framing is in engine.h): the command senders the
 * RPC thread calls, and the event senders the engine thread calls.  Nothing
 * here knows about scheduling; engine.c and engine_query.c both send
 * through it, and it calls neither.
 */
#include "daemon/server/engine_wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <zmq.h>

#include "daemon/server/engine_internal.h"
#include "daemon/server/log.h"

/* ---- fault injection (tests) ------------------------------------------------- */

static atomic_int faults[SMOL_FAULT_N];

void smol_engine_fault_arm(enum smol_engine_fault point, int n)
{
    atomic_store(&faults[point], n);
}

/* 1 when this pass through point is to fail (and one fewer is left). */
static int fault_hit(enum smol_engine_fault point)
{
    int n = atomic_load_explicit(&faults[point], memory_order_relaxed);
    while (n > 0)
        if (atomic_compare_exchange_weak(&faults[point], &n, n - 1)) return 1;
    return 0;
}

#ifdef SMOL_TSAN
char smol_inproc_hb;    /* the object SMOL_HB_SEND / SMOL_HB_RECV synchronize on */
#endif

/* ---- messages to the RPC thread --------------------------------------------- */

/* One frame to the PAIR.  The PAIR has no high-water mark, so a failure is
 * transient (EINTR, EAGAIN, ENOMEM while the pipe grows) or final (ETERM:
 * the context is going away).  A frame is retried for up to ~100 ms: giving
 * up on a frame after the first of a message would leave the message half
 * sent, and the next one would be glued to it. */
static int send_frame(void *sock, const void *p, size_t n, int more)
{
    for (int tries = 0;; tries++) {
        int rc;
        if (fault_hit(SMOL_FAULT_EVENT_SEND)) {
            errno = EINTR;
            rc = -1;
        } else {
            SMOL_HB_SEND();
            rc = zmq_send(sock, p, n, more ? ZMQ_SNDMORE : 0);
        }
        if (rc >= 0) return 0;
        if (errno == ETERM || tries >= 100) return -1;
        if (errno != EINTR) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

/* The terminal event that stands in for one that could not be packed: an
 * out-of-memory error, packed on the stack (it is a few dozen bytes), so
 * the client's stream still ends. */
static size_t pack_fallback(uint64_t client_id, uint8_t *buf, size_t cap)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Error er = SMOLLM3__ERROR__INIT;
    er.code = (Smollm3__ErrorCode)SMOL_ENOMEM;
    er.message = "out of memory";
    ev.request_id = client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    ev.error = &er;
    size_t n = smollm3__event__get_packed_size(&ev);
    if (n > cap) return 0;      /* cannot happen: bounded by the fields above */
    return smollm3__event__pack(&ev, buf);
}

int smol_engine_send_event(struct smol_engine *e, uint64_t id, unsigned flags, const Smollm3__Event *ev)
{
    size_t n = smollm3__event__get_packed_size(ev);
    const uint8_t *data = e->pack;
    uint8_t fb[64];
    int have = !fault_hit(SMOL_FAULT_EVENT_PACK);
    if (have && n > e->pack_cap) {
        uint8_t *p = realloc(e->pack, n + 4096);
        if (p) {
            e->pack = p;
            e->pack_cap = n + 4096;
            data = p;
        } else {
            have = 0;
        }
    }
    if (have) {
        smollm3__event__pack(ev, e->pack);
    } else if (flags & SMOL_EV_TERMINAL) {
        /* the last event of a stream is never dropped: without it the route
         * in the RPC thread and the client's stream would stay open forever */
        smol_log_err("engine: out of memory packing the last event of request %llu: it ends with an error",
                     (unsigned long long)id);
        n = pack_fallback(ev->request_id, fb, sizeof fb);
        data = fb;
    } else {
        e->n_events_lost++;
        smol_log_err("engine: out of memory packing an event of request %llu: dropped (%llu so far)",
                     (unsigned long long)id, (unsigned long long)e->n_events_lost);
        return -1;
    }
    uint8_t fl = (uint8_t)flags;
    if (send_frame(e->sock, &id, sizeof id, 1) || send_frame(e->sock, &fl, 1, 1) || send_frame(e->sock, data, n, 0)) {
        e->n_events_lost++;
        smol_log_err("engine: cannot send an event of request %llu to the RPC thread: %s (%llu lost so far)",
                     (unsigned long long)id, zmq_strerror(errno), (unsigned long long)e->n_events_lost);
        return -1;
    }
    return 0;
}

int smol_engine_send_drained(struct smol_engine *e)
{
    uint64_t z = 0;
    uint8_t fl = SMOL_EV_DRAINED;
    if (send_frame(e->sock, &z, sizeof z, 1) || send_frame(e->sock, &fl, 1, 1) || send_frame(e->sock, "", 0, 0)) {
        smol_log_err("engine: cannot send DRAINED to the RPC thread: %s", zmq_strerror(errno));
        return -1;
    }
    return 0;
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

/* A command's frame; a send interrupted by a signal (EINTR) is sent again:
 * giving up would lose the command (a CANCEL the client was told was
 * accepted) or, after the first frame, glue the next command to this one. */
static int send_cmd_frame(void *sock, const void *p, size_t n, int flags)
{
    for (int tries = 0;; tries++) {
        if (zmq_send(sock, p, n, flags) >= 0) return 0;
        if (errno != EINTR || tries >= 100) return -1;
    }
}

static int send2(void *sock, uint8_t cmd, const void *p, size_t n)
{
    SMOL_HB_SEND();
    if (send_cmd_frame(sock, &cmd, 1, n || p ? ZMQ_SNDMORE : 0)) return -1;
    if ((n || p) && send_cmd_frame(sock, p, n, 0)) return -1;
    return 0;
}

int smol_engine_send_submit(void *sock, struct smol_request *r)
{
    if (fault_hit(SMOL_FAULT_SUBMIT)) {
        errno = ENOMEM;
        return -1;
    }
    return send2(sock, SMOL_CMD_SUBMIT, &r, sizeof r);
}
int smol_engine_send_id(void *sock, enum smol_engine_cmd cmd, uint64_t id) { return send2(sock, (uint8_t)cmd, &id, sizeof id); }
int smol_engine_send_drain(void *sock, uint32_t grace_ms) { return send2(sock, SMOL_CMD_DRAIN, &grace_ms, sizeof grace_ms); }
int smol_engine_send_stop(void *sock) { return send2(sock, SMOL_CMD_STOP, NULL, 0); }

int smol_engine_send_query(void *sock, uint64_t id, const void *packed, size_t len)
{
    uint8_t cmd = SMOL_CMD_QUERY;
    SMOL_HB_SEND();
    if (send_cmd_frame(sock, &cmd, 1, ZMQ_SNDMORE) || send_cmd_frame(sock, &id, sizeof id, ZMQ_SNDMORE)) return -1;
    return send_cmd_frame(sock, packed, len, 0);
}
