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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "daemon/server/engine_internal.h"
#include "daemon/model/rules.h"
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
    char param[64];
    smol_err_param(msg, param, sizeof param);
    er.code = (Smollm3__ErrorCode)code;
    er.message = (char *)msg;
    er.param = param;
    ev.request_id = client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_ERROR;
    ev.error = &er;
    smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
}

const char *smol_unknown_session_msg(char msg[SMOL_UNKNOWN_SESSION_MSG], const char *session_id)
{
    snprintf(msg, SMOL_UNKNOWN_SESSION_MSG, "unknown session '%.128s'", session_id);
    return msg;
}

/* ---- a request's events ------------------------------------------------------------ */

int smol_engine_send_started(struct smol_engine *e, const struct req *q, int restored)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Started st = SMOLLM3__STARTED__INIT;
    st.prompt_tokens = (uint32_t)q->n_prompt;
    st.cached_tokens = (uint32_t)q->n_cached;
    st.restored_tokens = (uint32_t)restored;
    st.session_id = q->r->session;
    st.thinking = q->thinking;
    ev.request_id = q->r->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_STARTED;
    ev.started = &st;
    return smol_engine_send_event(e, q->r->id, 0, &ev);
}

int smol_engine_send_token(struct smol_engine *e, const struct req *q, const char *text, size_t len, int channel,
                           int32_t token_id)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Token tk = SMOLLM3__TOKEN__INIT;
    if (len + 1 > e->text_cap) {    /* protobuf-c strings end with a NUL: text need not (a reused buffer) */
        size_t cap = len + 1 > 256 ? len + 1 : 256;
        char *p = realloc(e->text_buf, cap);
        if (!p) return SMOL_WIRE_UNMADE;
        e->text_buf = p;
        e->text_cap = cap;
    }
    memcpy(e->text_buf, text, len);
    e->text_buf[len] = 0;
    tk.text = e->text_buf;
    tk.token_id = token_id;
    tk.channel = channel;
    tk.choice = (uint32_t)q->choice;
    Smollm3__TopLogprob top[SMOL_SAMPLER_MAX_TOP_LOGPROBS], *topp[SMOL_SAMPLER_MAX_TOP_LOGPROBS];
    if (q->r->logprobs && tk.token_id >= 0) {
        const struct smol_sampler_logprobs *lp = &q->cur_lp;
        size_t n;
        tk.logprob_opt_case = SMOLLM3__TOKEN__LOGPROB_OPT_LOGPROB;
        tk.logprob = lp->logprob;
        const char *pc = smol_tokenizer_piece(e->tok, q->cur_token, &n);
        tk.piece = (ProtobufCBinaryData){ .len = pc ? n : 0, .data = (uint8_t *)pc };
        for (int i = 0; i < lp->n_top; i++) {
            smollm3__top_logprob__init(&top[i]);
            top[i].token_id = lp->top_id[i];
            top[i].logprob = lp->top_logprob[i];
            pc = smol_tokenizer_piece(e->tok, lp->top_id[i], &n);
            top[i].piece = (ProtobufCBinaryData){ .len = pc ? n : 0, .data = (uint8_t *)pc };
            topp[i] = &top[i];
        }
        tk.n_top_logprobs = (size_t)lp->n_top;
        tk.top_logprobs = topp;
    }
    ev.request_id = q->r->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_TOKEN;
    ev.token = &tk;
    return smol_engine_send_event(e, q->r->id, 0, &ev);
}

int smol_engine_send_tool_call(struct smol_engine *e, const struct req *q, const struct smol_chat_event *pe,
                               const char *call_id)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__ToolCall tc = SMOLLM3__TOOL_CALL__INIT;
    tc.index = (uint32_t)pe->index;
    tc.id = (char *)call_id;
    tc.name = (char *)pe->name;
    tc.arguments_json = (char *)pe->arguments;
    ev.request_id = q->r->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_TOOL_CALL;
    ev.tool_call = &tc;
    return smol_engine_send_event(e, q->r->id, 0, &ev);
}

int smol_engine_send_handover(struct smol_engine *e, const struct req *q, uint32_t grace_ms)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Handover h = SMOLLM3__HANDOVER__INIT;
    h.grace_ms = grace_ms;
    ev.request_id = q->r->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_HANDOVER;
    ev.handover = &h;
    return smol_engine_send_event(e, q->r->id, 0, &ev);
}

void smol_engine_send_done(struct smol_engine *e, const struct req *q)
{
    double t = smol_mono_s();
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Done dn = SMOLLM3__DONE__INIT;
    Smollm3__Usage us = SMOLLM3__USAGE__INIT;
    Smollm3__Timings tm = SMOLLM3__TIMINGS__INIT;
    us.prompt_tokens = (uint32_t)q->n_prompt;
    us.cached_tokens = (uint32_t)q->n_cached;
    us.completion_tokens = (uint32_t)q->n_gen;
    us.reasoning_tokens = (uint32_t)q->n_reasoning;
    us.choice = (uint32_t)q->choice;
    us.resume_cached_tokens = (uint32_t)q->n_resume_cached;
    us.drafted_tokens = (uint32_t)q->n_drafted;
    us.accepted_tokens = (uint32_t)q->n_accepted;
    us.decode_steps = (uint32_t)q->n_steps;
    us.prediction_accepted_tokens = (uint32_t)q->n_pred_accepted;
    us.prediction_rejected_tokens = (uint32_t)q->n_pred_rejected;
    double t0 = q->r->t_received;
    tm.queue_ms = q->t_first_step > 0 ? (q->t_first_step - t0) * 1e3 : 0;
    tm.prompt_ms = q->t_prefill_done > 0 ? (q->t_prefill_done - q->t_first_step) * 1e3 : 0;
    tm.generation_ms = q->t_prefill_done > 0 ? (t - q->t_prefill_done) * 1e3 : 0;
    tm.ttft_ms = q->t_first_token > 0 ? (q->t_first_token - t0) * 1e3 : 0;
    int computed = q->n_prompt - q->n_cached;
    tm.prompt_tokens_per_s = tm.prompt_ms > 0 ? computed / (tm.prompt_ms / 1e3) : 0;
    tm.generation_tokens_per_s = tm.generation_ms > 0 && q->n_gen > 1 ? (q->n_gen - 1) / (tm.generation_ms / 1e3) : 0;
    dn.finish_reason = q->finish_reason;
    dn.usage = &us;
    dn.timings = &tm;
    dn.stop_string = q->stop_index >= 0 ? q->r->stops[q->stop_index] : "";
    dn.service_tier = (Smollm3__ServiceTier)q->r->tier;
    dn.preemptions = (uint32_t)q->n_preempt;
    ev.request_id = q->r->client_id;
    ev.kind_case = SMOLLM3__EVENT__KIND_DONE;
    ev.done = &dn;
    /* with n > 1 the last choice to finish ends the stream */
    smol_engine_send_event(e, q->r->id, q->r->refs == 1 ? SMOL_EV_TERMINAL : 0, &ev);
}

/* ---- commands from the RPC thread ------------------------------------------------------ */

int smol_engine_recv_cmd(void *sock, struct smol_engine_cmd_msg *c)
{
    memset(c, 0, sizeof *c);
    int n = 0, more = 1;
    while (more) {
        if (n < 3) zmq_msg_init(&c->part[n]);
        zmq_msg_t *m = n < 3 ? &c->part[n] : &c->part[2];
        if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
            for (int i = 0; i < n && i < 3; i++) zmq_msg_close(&c->part[i]);
            if (n < 3) zmq_msg_close(&c->part[n]);
            return 0;
        }
        SMOL_HB_RECV();
        more = zmq_msg_more(m);
        if (n < 3) n++;
    }
    c->n = n;
    const uint8_t *p0 = zmq_msg_data(&c->part[0]);
    c->cmd = zmq_msg_size(&c->part[0]) ? p0[0] : 0;
    const size_t n1 = n > 1 ? zmq_msg_size(&c->part[1]) : 0;
    if (n1 == sizeof c->id) memcpy(&c->id, zmq_msg_data(&c->part[1]), sizeof c->id);
    if (c->cmd == SMOL_CMD_SUBMIT && n1 == sizeof c->r) memcpy(&c->r, zmq_msg_data(&c->part[1]), sizeof c->r);
    if (n1 == sizeof c->grace_ms) memcpy(&c->grace_ms, zmq_msg_data(&c->part[1]), sizeof c->grace_ms);
    if (n > 2) {
        c->data = zmq_msg_data(&c->part[2]);
        c->len = zmq_msg_size(&c->part[2]);
    }
    return 1;
}

void smol_engine_cmd_close(struct smol_engine_cmd_msg *c)
{
    for (int i = 0; i < c->n; i++) zmq_msg_close(&c->part[i]);
    c->n = 0;
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
