/*
 * engine.c - the engine thread's scheduler: the loop, a request's life
 * (queued, running, finished) and one step of continuous batching with
 * chunked prefill (see engine.h for the protocol).  It only schedules:
 * admission (prompt, prefix, KV room) is engine_admit.c's, how a token is
 * sampled (grammar, thinking budget, verification, the batch samplers)
 * engine_sample.c's, drafting engine_draft.c's, the protobuf events and
 * command frames engine_wire.c's, the sessions' conversations sessions.c's,
 * and the spill directory is reached through sessions.c.
 *
 * One loop iteration:
 *   1. read every pending command (blocking only when there is no work);
 *   2. drop cancelled requests (their Done goes out now);
 *   3. admit queued requests while a slot is free and their KV fits, in
 *      fair order (engine_fair.c: class, the tenant least served, arrival),
 *      preempting a flex request or a tenant over its share for one that
 *      finds every slot taken;
 *   4. build one batch: a decode token for every running request, then
 *      prompt chunks of prefilling requests up to step_tokens, and with a
 *      step budget only as many as its time allows (step_budget.h);
 *   5. forward, then sample, detokenize and parse for each request whose
 *      row of logits came back, emitting events as text becomes final.
 * Requests own their memory.  The decode path allocates nothing per token:
 * the step's arrays, the packing buffer and a Token's text buffer are
 * reused, and what grows (a request's token history, libzmq's pipe chunks)
 * grows by doubling or in chunks; test_engine's t_allocs_per_token holds it
 * under 0.5 allocations per decoded token, all threads counted (0.013 on
 * the fixture model).
 */
#include "daemon/server/engine.h"
#include "daemon/text/text.h"
#include "daemon/model/model.h"
#include "daemon/server/log.h"
#include "daemon/server/sessions.h"
#include "daemon/server/grammar_cache.h"
#include "smollm3.pb-c.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "daemon/server/engine_internal.h"

void smol_engine_config_default(struct smol_engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_running = 16;
    c->max_queued = 64;
    c->step_tokens = 256;
    c->fair_share = 1;
    c->default_max_tokens = 2048;
    c->max_sessions = 1024;
    c->max_sessions_per_key = 0;
    c->session_ttl_s = 3600;
    c->max_cached_prefixes = 16;
    c->model_name = "smollm3";
    c->queue_timeout_s = 30;
    c->speculative = SMOL_SPEC_MAX_DRAFT;
    c->speculative_calibrate = 1;
    c->handover_grace_s = 10;
}

/* ---- request lifecycle ------------------------------------------------------ */

void smol_engine_req_free(struct req *q)
{
    if (!q) return;
    smol_sampler_free(&q->smp);
    smol_grammar_matcher_free(&q->gm);
    smol_lookup_free(&q->lk);
    free(q->pred);
    q->pred = NULL;
    smol_detok_deinit(&q->detok);
    smol_chat_parser_deinit(&q->parser);
    smol_chat_buf_deinit(&q->content);
    json_decref(q->tool_calls);
    smol_chat_buf_deinit(&q->rendered);
    free(q->tok);
    if (q->r && --q->r->refs > 0) q->r = NULL;     /* other choices still use it */
    smol_request_free(&q->r);
    free(q);
}

int smol_engine_tok_push(struct req *q, int32_t t)
{
    if (q->n_tok == q->cap) {
        int cap = q->cap ? q->cap * 2 : 256;
        int32_t *p = realloc(q->tok, (size_t)cap * sizeof *p);
        if (!p) return -1;
        q->tok = p;
        q->cap = cap;
    }
    q->tok[q->n_tok++] = t;
    return 0;
}

void smol_engine_list_remove(struct req **head, struct req *q)
{
    for (struct req **p = head; *p; p = &(*p)->next)
        if (*p == q) { *p = q->next; q->next = NULL; return; }
}

void smol_engine_list_append(struct req **head, struct req *q)
{
    q->next = NULL;
    struct req **p = head;
    while (*p) p = &(*p)->next;
    *p = q;
}

/* Part of q's stream is lost: it stops at the next step and ends with an error (finish). */
void smol_engine_lose(struct req *q)
{
    q->lost = 1;
    q->cancelled = 1;
}

static void emit_text(struct req *q, const char *text, size_t len, int channel)
{
    if (q->n_gen <= q->n_resume) return;     /* a resumed token: its client has it already */
    int rc = smol_engine_send_token(q->e, q, text, len, channel, q->seg_in_token ? -1 : q->cur_token);
    if (rc != SMOL_WIRE_UNMADE) q->seg_in_token++;
    if (rc) smol_engine_lose(q);
}

void smol_engine_on_parse(void *ud, const struct smol_chat_event *pe)
{
    struct req *q = ud;
    if (pe->kind == SMOL_CHAT_EV_TOOL_CALL) {
        char id[64];
        if (q->r->n_choices > 1) {      /* the ToolCall belongs to the choice of the Token before it */
            emit_text(q, "", 0, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
            snprintf(id, sizeof id, "call_%llu_%d_%d", (unsigned long long)q->r->id, q->choice, pe->index);
        } else {
            /* its token's id goes out first, so that a gateway knows every output token (resume) */
            if (q->seg_in_token == 0) emit_text(q, "", 0, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
            snprintf(id, sizeof id, "call_%llu_%d", (unsigned long long)q->r->id, pe->index);
        }
        /* the history renders the call back as the model wrote it (chat_template.c) */
        if (!q->tool_calls) q->tool_calls = json_array();
        if (q->tool_calls)
            json_array_append_new(q->tool_calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                                           "function", "name", pe->name, "arguments", pe->arguments));
        if (q->n_gen > q->n_resume && smol_engine_send_tool_call(q->e, q, pe, id)) smol_engine_lose(q);
        q->seg_in_token++;
        return;
    }
    int reasoning = pe->kind == SMOL_CHAT_EV_REASONING;
    q->tok_reasoning |= reasoning;
    if (!reasoning) smol_chat_buf_append(&q->content, pe->text, pe->len);
    emit_text(q, pe->text, pe->len, reasoning ? SMOLLM3__CHANNEL__CHANNEL_REASONING : SMOLLM3__CHANNEL__CHANNEL_CONTENT);
}

/* A finished request's KV stays with its session (or its anonymous entry,
 * a cached prefix): history = what the KV holds plus the turn's end as the
 * template renders it, <|im_end|> (also when the answer was cut short or
 * ended on another end-of-generation token) and "\n"; and, for a chat turn,
 * the conversation as a client will send it back (sessions.c).  A history
 * that cannot be recorded whole (out of memory) is forgotten. */
static void keep_history(struct smol_engine *e, struct req *q, struct smol_session *s, int reason)
{
    const int32_t im_end = smol_tokenizer_special(e->tok)->im_end;
    const int chat = q->r->kind == SMOL_INPUT_CHAT && e->have_tpl;
    int bad = 0;
    if (chat && im_end >= 0 && q->n_gen > 0) {
        int32_t last = q->tok[q->n_tok - 1];
        if (last != im_end && smol_tokenizer_is_eog(e->tok, last)) q->tok[q->n_tok - 1] = im_end;
        else if (last != im_end && smol_engine_tok_push(q, im_end)) bad = 1;
        struct smol_ids ids = {0};
        if (smol_tokenizer_encode(e->tok, "\n", 1, 0, &ids, NULL)) bad = 1;
        else if (ids.n == 1 && smol_engine_tok_push(q, ids.v[0])) bad = 1;
        smol_ids_free(&ids);
    }
    if (q->seq->n_tokens > q->n_tok) smol_kv_seq_truncate(&e->m->kv, q->seq, q->n_tok);
    if (smol_session_set_tokens(s, q->tok, q->n_tok)) bad = 1;
    s->busy = 0;
    smol_sessions_touch(&e->sessions, s, smol_mono_s());
    smol_session_set_text(s, NULL, 0);
    if (chat && reason != SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED &&
        smol_session_record_turn(s, e->tpl, q->r, q->content.data, q->content.len, q->tool_calls))
        bad = 1;
    if (bad) smol_sessions_forget(&e->sessions, s);
    if (!s->id[0] && e->sessions.n_anon > e->cfg.max_cached_prefixes) smol_sessions_evict_one(&e->sessions, 1);
}

/* Ends a running (or queued) request: flushes text, sends Done, leaves its
 * KV to its session or as a cached prefix, frees it. */
void smol_engine_finish(struct smol_engine *e, struct req *q, int reason)
{
    if (q->state != RS_QUEUED) {
        struct smol_detok_out out;
        enum smol_err fr = smol_detok_flush(&q->detok, &out);
        if (!q->cancelled && (fr || (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0))))
            smol_engine_lose(q);
        if (smol_chat_parser_finish(&q->parser) && !q->cancelled) smol_engine_lose(q);
        /* calls the tool grammar may end after, reached on the last token
         * (its shortest completion forced by the length), are complete */
        if ((reason == SMOLLM3__FINISH_REASON__FINISH_REASON_STOP ||
             (reason == SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH && q->gm && q->gm_active &&
              smol_grammar_matcher_min_bytes(q->gm) == 0)) && q->parser.n_tool_calls > 0)
            reason = SMOLLM3__FINISH_REASON__FINISH_REASON_TOOL_CALLS;
    }
    q->finish_reason = reason;
    if (q->lost) {
        /* the client did not get the whole stream: it ends with an error (with n > 1, once,
         * when the last choice ends; the others stop) */
        for (struct req *o = e->running; o; o = o->next)
            if (o != q && o->r == q->r) smol_engine_lose(o);
        if (q->r->refs == 1)
            smol_engine_send_error(e, q->r->id, q->r->client_id, SMOL_ENOMEM, "out of memory: part of the stream was lost");
    } else {
        if (reason == SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED) e->n_cancelled++;
        smol_engine_send_done(e, q);
    }
    e->n_generated += (uint64_t)q->n_gen;

    struct smol_session *s = q->sess ? q->sess : q->anon;
    if (s && q->state != RS_QUEUED) {
        keep_history(e, q, s, reason);
    } else if (s) {
        s->busy = 0;
        if (!s->id[0]) smol_sessions_remove(&e->sessions, s);
    }
    if (q->state == RS_QUEUED) { smol_engine_list_remove(&e->queue, q); e->n_queued--; }
    else { smol_engine_list_remove(&e->running, q); e->n_running--; }
    if (q->lease_kept) smol_sessions_unlease(&e->sessions, q->r->tenant, q->r->session); /* (ended queued) */
    q->state = RS_DONE;
    smol_engine_req_free(q);
}

void smol_engine_reject(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg)
{
    e->n_rejected++;
    if (q->r->refs > 1)     /* the stream ends with this error: the other choices stop too */
        for (struct req *o = e->running; o; o = o->next)
            if (o != q && o->r == q->r) o->cancelled = 1;
    smol_engine_send_error(e, q->r->id, q->r->client_id, code, msg);
    if (q->sess) q->sess->busy = 0;
    if (q->anon) smol_sessions_remove(&e->sessions, q->anon);
    if (q->state == RS_QUEUED) { smol_engine_list_remove(&e->queue, q); e->n_queued--; }
    else if (q->state != RS_DONE) { smol_engine_list_remove(&e->running, q); e->n_running--; }
    if (q->lease_kept) smol_sessions_unlease(&e->sessions, q->r->tenant, q->r->session);
    smol_engine_req_free(q);
}

/* ---- one step ---------------------------------------------------------------------- */

void smol_engine_fail(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg)
{
    /* an error after Started: the error event is the terminal one */
    if (q->sess) { q->sess->busy = 0; smol_kv_seq_truncate(&e->m->kv, q->seq, 0); q->sess->n_tokens = 0; smol_session_set_text(q->sess, NULL, 0); }
    q->state = RS_PREFILL; /* so smol_engine_reject() takes it off the running list */
    smol_engine_reject(e, q, code, msg);
}

/* Streams token t of q (already sampled, the grammar advanced) and what it
 * makes final; kv_len: the tokens q's KV holds when t comes, as in plain
 * decoding.  Returns 0 when q finished (and was freed). */
int smol_engine_emit_token(struct smol_engine *e, struct req *q, int32_t t, double now, int kv_len)
{
    enum smol_err rc;
    if (smol_engine_tok_push(q, t)) { smol_engine_fail(e, q, SMOL_ENOMEM, "out of memory"); return 0; }
    q->n_gen++;
    if (!q->t_first_token) q->t_first_token = now;
    q->cur_token = t;
    q->seg_in_token = 0;
    if (smol_tokenizer_is_eog(e->tok, t)) {
        smol_engine_finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_STOP);
        return 0;
    }
    size_t len = 0;
    const char *piece = smol_tokenizer_piece(e->tok, t, &len);
    struct smol_detok_out out;
    q->tok_reasoning = 0;
    if (smol_tokenizer_is_special(e->tok, t)) {
        if (smol_detok_flush(&q->detok, &out) || (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0)))
            smol_engine_lose(q);
        if (smol_chat_parser_feed(&q->parser, piece ? piece : "", len, 1)) smol_engine_lose(q);
    } else {
        if ((rc = smol_detok_push(&q->detok, piece ? piece : "", len, &out))) { smol_engine_fail(e, q, rc, "detokenizer error"); return 0; }
        if (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0)) smol_engine_lose(q);
        if (out.stopped) {
            q->stop_index = out.stop_index;
            smol_engine_finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_STOP);
            return 0;
        }
    }
    if (q->seg_in_token == 0) emit_text(q, "", 0, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
    const struct smol_special_ids *sp = smol_tokenizer_special(e->tok);
    /* reasoning: <think> through </think> by token (a token whose bytes the
     * detokenizer holds back still counts), or what the parser calls it */
    if (q->tok_reasoning || q->in_think || t == sp->think || t == sp->think_end) q->n_reasoning++;
    if (t == sp->think) q->in_think = 1;
    else if (t == sp->think_end) q->in_think = 0;
    if (q->n_gen >= q->max_gen || kv_len + 1 >= e->m->cfg.n_ctx) {
        smol_engine_finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
        return 0;
    }
    return 1;
}

/* The rows of one step: tokens [0, n) for forward(), of which n_out
 * come back as rows of logits (e->b_out, e->b_req); n_rs of those the
 * backend samples. */
struct step_rows {
    int n, n_out, n_rs;
};

/* Cancelled requests end now (their Done goes out), running or queued. */
static void drop_cancelled(struct smol_engine *e)
{
    for (struct req *q = e->running, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancelled) smol_engine_finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    }
    for (struct req *q = e->queue, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancelled) smol_engine_finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    }
}

/* One decode row for every decoding request, and the rows of its draft:
 * within the step's budget and spare draft rows, its max_tokens and the
 * context (positions pos + 1 .. pos + k). */
static void add_decode_rows(struct smol_engine *e, struct step_rows *sr, int budget)
{
    struct smol_kv *kv = &e->m->kv;
    char err[SMOL_ERRLEN];
    int spec_rows = e->spec_rows;
    for (struct req *q = e->running, *nx; q && sr->n < budget; q = nx) {
        nx = q->next;
        if (q->state != RS_DECODE || q->paused || q->preempted) continue;
        const int pos = q->seq->n_tokens;
        int max = budget - sr->n - 1;
        if (max > spec_rows) max = spec_rows;
        if (max > q->max_gen - q->n_gen - 1) max = q->max_gen - q->n_gen - 1;
        if (max > e->m->cfg.n_ctx - pos - 2) max = e->m->cfg.n_ctx - pos - 2;
        smol_engine_plan_draft(e, q, max, e->b_tok + sr->n + 1);
        const int k = q->n_draft;
        if (smol_kv_seq_reserve(kv, q->seq, pos, pos + k + 1, err)) { q->n_draft = 0; smol_engine_fail(e, q, SMOL_EBUSY, err); continue; }
        spec_rows -= k;
        smol_engine_fair_charge(q, k + 1);
        e->b_tok[sr->n] = q->tok[q->n_tok - 1];
        for (int i = 0; i <= k; i++, sr->n++) {
            e->b_pos[sr->n] = pos + i;
            e->b_seq[sr->n] = q->seq;
            e->b_out[sr->n_out] = sr->n;
            e->b_req[sr->n_out++] = q;
        }
    }
}

/* Prompt chunks of prefilling requests, up to the step's budget (a
 * background request's, GenerateRequest.background, up to bg_budget); a
 * prompt's last token comes back as a row (out_idx ascends: decode rows
 * first). */
static void add_prefill_rows(struct smol_engine *e, struct step_rows *sr, int budget, int bg_budget, double now)
{
    struct smol_kv *kv = &e->m->kv;
    char err[SMOL_ERRLEN];
    for (struct req *q = e->running, *nx; q && sr->n < budget; q = nx) {
        nx = q->next;
        if (q->state != RS_PREFILL || q->paused || q->preempted) continue;
        const int lim = q->r->background && bg_budget < budget ? bg_budget : budget;
        if (sr->n >= lim) continue;
        /* a resumed request's replayed tokens are prefilled after its prompt (smol_engine_replay) */
        const int end = q->n_prompt + q->n_resume;
        int pos0 = q->seq->n_tokens, chunk = end - pos0;
        if (chunk > lim - sr->n) chunk = lim - sr->n;
        if (smol_kv_seq_reserve(kv, q->seq, pos0, pos0 + chunk, err)) { smol_engine_fail(e, q, SMOL_EBUSY, err); continue; }
        if (!q->t_first_step) q->t_first_step = now;
        e->n_prefilled += (uint64_t)chunk;
        smol_engine_fair_charge(q, chunk);
        for (int i = 0, p = pos0; i < chunk; i++, p++, sr->n++) {
            e->b_tok[sr->n] = p < q->n_prompt ? q->tok[p] : q->resume[p - q->n_prompt];
            e->b_pos[sr->n] = p;
            e->b_seq[sr->n] = q->seq;
        }
        if (pos0 + chunk == end) {
            e->b_out[sr->n_out] = sr->n - 1;
            e->b_req[sr->n_out++] = q;
        }
    }
}

/* Runs the model over the step's rows (the backend drawing its rows'
 * tokens); 0 when it failed (every request with a row failed with it). */
static int forward(struct smol_engine *e, struct step_rows *sr)
{
    char err[SMOL_ERRLEN];
    struct smol_batch b = {.n_tokens = sr->n, .tokens = e->b_tok, .pos = e->b_pos, .seq = e->b_seq,
                           .n_out = sr->n_out, .out_idx = e->b_out};
    sr->n_rs = smol_engine_backend_rows(e, sr->n_out);
    if (!smol_model_forward_sample(e->m, &b, e->logits, sr->n_rs ? e->b_rs : NULL, e->b_ids, err)) return 1;
    for (int i = 0, rows; i < sr->n_out; i += rows) {
        rows = e->b_req[i]->n_draft + 1;
        smol_engine_fail(e, e->b_req[i], SMOL_EINTERNAL, err);
    }
    return 0;
}

/* Each request with rows takes its tokens: drawn by the backend, by the
 * host's pool, or sampled now (its draft's rows follow its first); a
 * prompt just prefilled starts decoding, and its other choices with it. */
static void take_rows(struct smol_engine *e, const struct step_rows *sr, double now)
{
    const size_t V = (size_t)e->m->cfg.vocab;
    for (int i = 0, rows; i < sr->n_out; i += rows) {
        struct req *q = e->b_req[i];
        rows = q->n_draft + 1;
        if (q->state == RS_PREFILL) {
            q->state = RS_DECODE;
            q->t_prefill_done = now;
            if (q->r->n_choices > 1 && q->choice == 0 && !q->spawned) {
                q->spawned = 1;
                smol_engine_spawn_choices(e, q, e->logits + i * V, now);
                if (q->state == RS_PREFILL) continue;  /* resumed: its own tokens are prefilled next */
            }
            if (q->n_resume && !smol_engine_replay(e, q, now)) continue;     /* finished there */
        }
        if (sr->n_rs && e->b_rs[i].on) smol_engine_emit_drawn(e, q, e->b_ids[i], now, 1);
        else if (e->spool && e->b_host[i]) smol_engine_emit_drawn(e, q, e->b_ids[i], now, 0);
        else smol_engine_sample_and_emit(e, q, e->logits + i * V, e->b_tok + e->b_out[i] + 1, now);
    }
}

/* After a step of n_rows decode rows (sr->n - n_rows prompt tokens) that
 * began at now, its model from t0 to t1: the budget learns its time, each
 * request's KV promise is brought up to date, the counters count. */
static void end_step(struct smol_engine *e, const struct step_rows *sr, int n_rows, double now, double t0, double t1)
{
    const int n_prompt = sr->n - n_rows;
    smol_step_budget_observe(&e->sb, n_rows, n_prompt,
                             e->cfg.step_ms_fn ? e->cfg.step_ms_fn(n_rows, n_prompt) : (smol_mono_s() - t0) * 1e3);
    if (n_prompt) { e->n_prefill_steps++; e->n_mixed_steps += n_rows > 0; }
    for (struct req *q = e->running; q; q = q->next)   /* what each may still allocate */
        q->kv_promise = smol_kv_seq_pages_needed(&e->m->kv, q->seq, q->seq->n_tokens, q->n_prompt + q->max_gen) +
                        (q->state == RS_PREFILL ? q->sib_pages : 0);
    e->n_steps++;
    e->n_step_tokens += (uint64_t)sr->n;
    e->forward_s += t1 - t0;
    e->step_s += smol_mono_s() - now;
}

/* One step: end the cancelled, admit in fair order (engine_fair.c: class,
 * tenant's share, arrival; the first that must wait for KV or its file
 * holds the others behind it), batch decode rows and the prompt chunk the
 * step's time budget leaves, run the model, let each request take its
 * tokens, and count (the step's time teaches the budget). */
static void step(struct smol_engine *e)
{
    const double now = smol_mono_s();
    drop_cancelled(e);
    e->waiting_read = 0;
    smol_engine_admit_fair(e, now);
    const int cap = e->cfg.step_tokens < e->m->s.max_tokens ? e->cfg.step_tokens : e->m->s.max_tokens;
    struct step_rows sr = {0};
    add_decode_rows(e, &sr, cap);
    const int n_rows = sr.n;    /* the prompt's chunk: what the time budget leaves beside them */
    /* background work (a warm-up no client waits on) within a share of it: the streams here, and
     * one moved here from a draining daemon, wait at most about that for a step while it is read */
    add_prefill_rows(e, &sr, n_rows + smol_step_budget_chunk(&e->sb, n_rows, cap - n_rows),
                     n_rows + smol_step_budget_chunk_within(&e->sb, SMOL_BACKGROUND_SHARE * e->sb.budget_ms, n_rows,
                                                            cap - n_rows), now);
    if (sr.n == 0) return;
    const double t0 = smol_mono_s();
    if (!forward(e, &sr)) return;
    const double t1 = smol_mono_s();
    smol_engine_host_rows(e, sr.n_out, sr.n_rs);
    take_rows(e, &sr, t1);
    end_step(e, &sr, n_rows, now, t0, t1);
}

/* ---- commands --------------------------------------------------------------------- */

static struct req *find_req(struct smol_engine *e, uint64_t id)
{
    for (struct req *q = e->running; q; q = q->next) if (q->r->id == id) return q;
    for (struct req *q = e->queue; q; q = q->next) if (q->r->id == id) return q;
    return NULL;
}

/* The next request after q (in its list) with the same id: another choice. */
static struct req *find_next(struct req *q, uint64_t id)
{
    for (q = q->next; q; q = q->next) if (q->r->id == id) return q;
    return NULL;
}

/* A request handed over by the RPC thread joins the queue (or is refused
 * at once: draining, queue full, out of memory). */
static void enqueue(struct smol_engine *e, struct smol_request *r)
{
    if (e->draining) { smol_engine_send_error(e, r->id, r->client_id, SMOL_ESHUTDOWN, "the daemon is shutting down"); smol_request_free(&r); return; }
    if (e->n_queued >= e->cfg.max_queued) {
        e->n_rejected++;
        smol_engine_send_error(e, r->id, r->client_id, SMOL_EQUEUE_FULL, "admission queue is full; retry later");
        smol_request_free(&r);
        return;
    }
    struct req *q = calloc(1, sizeof *q);
    if (!q) { smol_engine_send_error(e, r->id, r->client_id, SMOL_ENOMEM, "out of memory"); smol_request_free(&r); return; }
    if (r->n_choices < 1) r->n_choices = 1;     /* requests built by hand (tests) leave these 0 */
    r->refs = 1;
    q->r = r;
    if (r->n_choices <= 1) {    /* n > 1: each choice's own, once they are spawned */
        q->resume = r->resume;
        q->n_resume = r->n_resume;
    }
    q->e = e;
    q->state = RS_QUEUED;
    q->cancelled = r->cancelled;    /* cancelled while parked: finished by the next step */
    smol_chat_buf_init(&q->content);
    smol_chat_buf_init(&q->rendered);
    smol_engine_list_append(&e->queue, q);
    e->n_queued++;
    smol_engine_fair_enqueue(e, q);
}

/* Make-before-break applies to q's request: asked for, a grace configured, and every choice of
 * it decoding (its client has had Started and sees each token from here on: one still reading
 * its prompt is as cheap to start elsewhere, and is given back at once). */
static int can_hand_over(struct smol_engine *e, const struct req *q)
{
    if (!q->r->handover_overlap || e->cfg.handover_grace_s <= 0) return 0;
    for (const struct req *o = e->running; o; o = o->next)
        if (o->r == q->r && (o->state != RS_DECODE || o->cancelled)) return 0;
    return q->r->n_choices <= 1 || q->spawned || q->choice > 0;
}

/* Stops admitting; the queue is refused now, what runs is cancelled after grace_ms; what its
 * client resumes elsewhere (GenerateRequest.handover) ends now, handed over, or, make-before-break
 * (handover_overlap), is told so (Event.handover) and generated on until handover_deadline while
 * its client starts it elsewhere and cancels it here. */
static void drain(struct smol_engine *e, uint32_t grace_ms)
{
    const double now = smol_mono_s();
    e->draining = 1;
    e->drain_deadline = now + grace_ms / 1e3;
    e->handover_deadline = now + e->cfg.handover_grace_s;
    while (e->queue) {
        struct req *q = e->queue;
        smol_engine_reject(e, q, SMOL_ESHUTDOWN, "the daemon is shutting down");
    }
    int handing = 0, given = 0;
    for (struct req *q = e->running; q; q = q->next) {     /* decided per request, before any fails */
        if (!q->r->handover || q->cancelled || q->handing || !can_hand_over(e, q)) continue;
        for (struct req *o = q; o; o = o->next)
            if (o->r == q->r) o->handing = 1;
        handing++;
        if (smol_engine_send_handover(e, q, (uint32_t)(e->cfg.handover_grace_s * 1e3))) smol_engine_lose(q);
    }
    for (struct req *q = e->running, *nx; q; q = nx) {
        nx = q->next;           /* (n > 1: the other choices are cancelled by the first one's failure) */
        if (q->r->handover && !q->cancelled && !q->handing) {
            given++;    /* (its other choices, cancelled by this, are not counted again) */
            smol_engine_fail(e, q, SMOL_ESHUTDOWN, "the daemon is shutting down: handed over");
        }
    }
    if (handing || given)
        smol_log_notice("drain: %d requests handed over make-before-break (generated on for up to %.0f s), "
                        "%d given back at once", handing, e->cfg.handover_grace_s, given);
}

/* Draining: what runs past drain_grace_ms is cancelled, what is handed over make-before-break
 * and still here at handover_deadline is given back (its client resumes it elsewhere). */
static void drain_expire(struct smol_engine *e, double now)
{
    for (struct req *q = e->running; q; q = q->next)
        if (now > e->drain_deadline && !q->handing) q->cancelled = 1;
    if (now <= e->handover_deadline) return;
    for (struct req *q = e->running, *nx; q; q = nx) {
        nx = q->next;
        if (q->handing && !q->cancelled) {
            for (struct req *o = e->running; o; o = o->next)
                if (o->r == q->r) o->handing = 0;
            smol_engine_fail(e, q, SMOL_ESHUTDOWN, "the daemon is shutting down: handed over");
        }
    }
}

/* Carries out one command; 0 when none was pending. */
static int handle_cmd(struct smol_engine *e)
{
    struct smol_engine_cmd_msg c;
    if (!smol_engine_recv_cmd(e->sock, &c)) return 0;
    const uint64_t id = c.id;
    switch (c.cmd) {
    case SMOL_CMD_SUBMIT: if (c.r) enqueue(e, c.r); break;
    /* every choice of the request (n > 1 shares the id) */
    case SMOL_CMD_CANCEL: for (struct req *q = find_req(e, id); q; q = find_next(q, id)) q->cancelled = 1; break;
    case SMOL_CMD_PAUSE: for (struct req *q = find_req(e, id); q; q = find_next(q, id)) q->paused = 1; break;
    case SMOL_CMD_RESUME: for (struct req *q = find_req(e, id); q; q = find_next(q, id)) q->paused = 0; break;
    case SMOL_CMD_QUERY: if (c.n > 2) smol_engine_handle_query(e, id, c.data, c.len); break;
    case SMOL_CMD_DRAIN: drain(e, c.grace_ms); break;
    case SMOL_CMD_STOP: atomic_store_explicit(&e->stop, 1, memory_order_release); break;
    default: break;
    }
    smol_engine_cmd_close(&c);
    return 1;
}

static void *engine_main(void *arg)
{
    struct smol_engine *e = arg;
    pthread_setname_np(pthread_self(), "smol-engine"); /* (tests/spill/slowfs.c logs calls by thread name) */
    int drained_sent = 0, spilled_one = 0;
    double last_expire = smol_mono_s(), last_sweep = 0; /* (a sweep at start) */
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        int runnable = e->n_queued > 0 && !e->waiting_read;
        for (struct req *q = e->running; q && !runnable; q = q->next) runnable = (!q->paused && !q->preempted) || q->cancelled;
        zmq_pollitem_t it = {.socket = e->sock, .events = ZMQ_POLLIN};
        long timeout = runnable || spilled_one ? 0 : e->waiting_read || e->n_deletes ? 2 : e->n_running ? 10 : 1000;
        if (zmq_poll(&it, 1, timeout) < 0 && zmq_errno() == ETERM) break;
        while (handle_cmd(e)) {}
        if (e->n_deletes) smol_engine_poll_deletes(e);
        double now = smol_mono_s();
        if (e->draining) drain_expire(e, now);
        if (now - last_expire > 1.0) {
            smol_sessions_expire(&e->sessions, now, e->cfg.session_ttl_s);
            last_expire = now;
        }
        if (e->cfg.spill && (!last_sweep || now - last_sweep > 60)) {
            /* files no node uses expire too (never before this node's idle copies would) */
            const double ttl = e->cfg.spill_ttl_s > e->cfg.session_ttl_s ? e->cfg.spill_ttl_s : e->cfg.session_ttl_s;
            smol_sessions_sweep_files(&e->sessions, ttl);
            last_sweep = now;
        }
        step(e);
        if (e->sessions.n_leased) smol_sessions_settle(&e->sessions); /* shared spill: written through */
        if (e->cfg.spill && e->cfg.spill_when_idle && !e->n_running && !e->n_queued && !e->draining)
            spilled_one = smol_sessions_spill_one(&e->sessions, 0); /* write-behind, one per turn of the loop */
        if (e->draining && !drained_sent && !e->n_running && !e->n_queued) {
            /* a clean stop loses no session: every changed one goes to disk,
             * and so do the cached prefixes */
            while (smol_sessions_spill_one(&e->sessions, 1)) {}
            smol_engine_send_drained(e);
            drained_sent = 1;
        }
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void engine_free(struct smol_engine *e)
{
    while (e->running) { struct req *q = e->running; e->running = q->next; smol_engine_req_free(q); }
    while (e->queue) { struct req *q = e->queue; e->queue = q->next; smol_engine_req_free(q); }
    smol_sessions_deinit(&e->sessions);
    smol_engine_fair_deinit(e);
    smol_sampler_scratch_free(&e->sc);
    for (int i = 0; e->scs && e->spool && i < smol_pool_threads(e->spool); i++) smol_sampler_scratch_free(&e->scs[i]);
    free(e->scs);
    smol_pool_free(&e->spool);
    free(e->b_host);
    if (e->sock) zmq_close(e->sock);
    free(e->b_tok); free(e->b_pos); free(e->b_out); free(e->gmask); free(e->b_seq); free(e->b_req); free(e->b_rs); free(e->b_ids); free(e->logits); free(e->pack); free(e->text_buf);
    free(e);
}

enum smol_err smol_engine_start(struct smol_engine **out, void *zmq_ctx, const char *endpoint, struct smol_model *m,
                                struct smol_tokenizer *tok, const struct smol_engine_config *cfg, char *err)
{
    *out = NULL;
    struct smol_engine *e = calloc(1, sizeof *e);
    if (!e) return smol_errf(err, SMOL_ENOMEM, "engine: out of memory");
    if (cfg) e->cfg = *cfg; else smol_engine_config_default(&e->cfg);
    if (e->cfg.max_running < 1) e->cfg.max_running = 1;
    if (e->cfg.step_tokens < e->cfg.max_running) e->cfg.step_tokens = e->cfg.max_running;
    if (e->cfg.step_tokens > m->s.max_tokens) e->cfg.step_tokens = m->s.max_tokens;
    if (e->cfg.max_running > e->cfg.step_tokens) e->cfg.max_running = e->cfg.step_tokens;
    e->m = m;
    e->tok = tok;
    e->t_start = smol_mono_s();
    smol_step_budget_init(&e->sb, e->cfg.step_budget_ms);
    smol_sessions_init(&e->sessions, &m->kv);
    e->sessions.spill = e->cfg.spill;
    e->sessions.vocab = m->cfg.vocab;
    struct smol_gguf_str tpl = {0}; /* an optional key: left untouched when absent */
    if (smol_gguf_get_str(m->gguf, "tokenizer.chat_template", &tpl, 0, NULL) == SMOL_OK && tpl.ptr &&
        smol_chat_tpl_detect(tpl.ptr, tpl.len, 0, &e->tpl, NULL) == SMOL_OK)
        e->have_tpl = 1;
    const int T = m->s.max_tokens, R = e->cfg.max_running;
    if (e->cfg.speculative < 0) e->cfg.speculative = 0;
    if (e->cfg.speculative > SMOL_SPEC_MAX_DRAFT) e->cfg.speculative = SMOL_SPEC_MAX_DRAFT;
    /* draft rows of a step, all requests together: full drafts for up to 8 */
    e->spec_rows = SMOL_SPEC_MAX_DRAFT * (R < 8 ? R : 8);
    e->max_out = R + e->spec_rows;
    e->b_tok = malloc((size_t)T * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)T * sizeof *e->b_pos);
    e->b_out = malloc((size_t)T * sizeof *e->b_out);
    const int gv = smol_tokenizer_n_vocab(tok) > m->cfg.vocab ? smol_tokenizer_n_vocab(tok) : m->cfg.vocab;
    e->gmask = malloc(((size_t)gv + 31) / 32 * sizeof *e->gmask);
    e->b_seq = malloc((size_t)T * sizeof *e->b_seq);
    e->b_req = malloc((size_t)T * sizeof *e->b_req);
    e->b_rs = calloc((size_t)T, sizeof *e->b_rs);
    e->b_ids = malloc((size_t)T * sizeof *e->b_ids);
    e->logits = malloc((size_t)e->max_out * m->cfg.vocab * sizeof *e->logits);
    /* what a verify step of k + 1 positions costs here (the default costs
     * when the KV cannot hold the measurement) */
    struct smol_spec_ctl dflt;
    smol_spec_ctl_init(&dflt, SMOL_SPEC_MAX_DRAFT, NULL);
    memcpy(e->spec_cost, dflt.cost, sizeof e->spec_cost);
    char cerr[SMOL_ERRLEN];
    float cost[SMOL_SPEC_MAX_DRAFT + 1];
    if (e->cfg.speculative_calibrate && smol_spec_calibrate(m, SMOL_SPEC_MAX_DRAFT, 2, cost, cerr) == SMOL_OK)
        memcpy(e->spec_cost, cost, sizeof cost);
    enum smol_err rc = smol_sampler_scratch_new(&e->sc, m->cfg.vocab, err);
    if (!rc) rc = smol_engine_fair_init(e, err);
    if (!rc) rc = smol_engine_host_pool_new(e, T, err);
    if (!rc && (!e->b_tok || !e->b_pos || !e->b_out || !e->gmask || !e->b_seq || !e->b_req || !e->b_rs || !e->b_ids ||
                !e->logits))
        rc = smol_errf(err, SMOL_ENOMEM, "engine: out of memory");
    if (!rc) {
        e->sock = zmq_socket(zmq_ctx, ZMQ_PAIR);
        int unlimited = 0; /* never block or drop between the two threads */
        if (e->sock) {
            zmq_setsockopt(e->sock, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
            zmq_setsockopt(e->sock, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
        }
        if (!e->sock || zmq_connect(e->sock, endpoint))
            rc = smol_errf(err, SMOL_EINTERNAL, "engine: cannot connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
    }
    if (!rc && pthread_create(&e->thread, NULL, engine_main, e))
        rc = smol_errf(err, SMOL_EINTERNAL, "engine: cannot start thread");
    if (rc) { engine_free(e); return rc; }
    *out = e;
    return SMOL_OK;
}

void smol_engine_stop(struct smol_engine **ep)
{
    if (!ep || !*ep) return;
    struct smol_engine *e = *ep;
    atomic_store_explicit(&e->stop, 1, memory_order_release); /* the thread polls at least every second */
    pthread_join(e->thread, NULL);
    engine_free(e);
    *ep = NULL;
}

enum smol_err smol_engine_warmup(struct smol_model *m, char *err)
{
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    int32_t ids[2] = {0, 1};
    float *lg = malloc((size_t)m->cfg.vocab * sizeof *lg);
    if (!lg) return smol_errf(err, SMOL_ENOMEM, "warm-up: out of memory");
    enum smol_err rc = smol_model_eval(m, &seq, ids, 2, 0, lg, err);
    if (!rc)
        for (int i = 0; i < m->cfg.vocab; i++)
            if (!isfinite(lg[i])) { rc = smol_errf(err, SMOL_EINTERNAL, "warm-up: non-finite logits"); break; }
    smol_kv_seq_deinit(&m->kv, &seq);
    free(lg);
    return rc;
}
