/*
 * engine.c - the engine thread's scheduler: admission, continuous batching
 * with chunked prefill, sampling, deciding what each request streams (see
 * engine.h for the protocol).  It only schedules: the protobuf events and
 * the command frames are engine_wire.c's, the sessions' conversations
 * sessions.c's, and the spill directory is reached through sessions.c.
 *
 * One loop iteration:
 *   1. read every pending command (blocking only when there is no work);
 *   2. drop cancelled requests (their Done goes out now);
 *   3. admit queued requests FIFO while a slot is free and their KV fits;
 *   4. build one batch: a decode token for every running request, then
 *      prompt chunks of prefilling requests up to step_tokens;
 *   5. forward, then sample, detokenize and parse for each request whose
 *      row of logits came back, emitting events as text becomes final.
 * Requests own their memory; nothing in the decode path allocates except
 * protobuf packing into a reused buffer and growth of reused arrays.
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
#include <unistd.h>
#include <time.h>
#include <zmq.h>

#include "daemon/server/engine_internal.h"

void smol_engine_config_default(struct smol_engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_running = 16;
    c->max_queued = 64;
    c->step_tokens = 256;
    c->default_max_tokens = 2048;
    c->max_sessions = 1024;
    c->max_sessions_per_key = 0;
    c->session_ttl_s = 3600;
    c->max_cached_prefixes = 16;
    c->model_name = "smollm3";
    c->queue_timeout_s = 30;
    c->speculative = SMOL_SPEC_MAX_DRAFT;
    c->speculative_calibrate = 1;
}

/* ---- request lifecycle ------------------------------------------------------ */

static void req_free(struct req *q)
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

static int tok_push(struct req *q, int32_t t)
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

static void list_remove(struct req **head, struct req *q)
{
    for (struct req **p = head; *p; p = &(*p)->next)
        if (*p == q) { *p = q->next; q->next = NULL; return; }
}

static void list_append(struct req **head, struct req *q)
{
    q->next = NULL;
    struct req **p = head;
    while (*p) p = &(*p)->next;
    *p = q;
}

/* Part of q's stream is lost: it stops at the next step and ends with an error (finish). */
static void lose(struct req *q)
{
    q->lost = 1;
    q->cancelled = 1;
}

static void emit_text(struct req *q, const char *text, size_t len, int channel)
{
    int rc = smol_engine_send_token(q->e, q, text, len, channel, q->seg_in_token ? -1 : q->cur_token);
    if (rc != SMOL_WIRE_UNMADE) q->seg_in_token++;
    if (rc) lose(q);
}

static void on_parse(void *ud, const struct smol_chat_event *pe)
{
    struct req *q = ud;
    if (pe->kind == SMOL_CHAT_EV_TOOL_CALL) {
        char id[64];
        if (q->r->n_choices > 1) {      /* the ToolCall belongs to the choice of the Token before it */
            emit_text(q, "", 0, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
            snprintf(id, sizeof id, "call_%llu_%d_%d", (unsigned long long)q->r->id, q->choice, pe->index);
        } else {
            snprintf(id, sizeof id, "call_%llu_%d", (unsigned long long)q->r->id, pe->index);
        }
        /* the history renders the call back as the model wrote it (chat_template.c) */
        if (!q->tool_calls) q->tool_calls = json_array();
        if (q->tool_calls)
            json_array_append_new(q->tool_calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                                           "function", "name", pe->name, "arguments", pe->arguments));
        if (smol_engine_send_tool_call(q->e, q, pe, id)) lose(q);
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
        else if (last != im_end && tok_push(q, im_end)) bad = 1;
        struct smol_ids ids = {0};
        if (smol_tokenizer_encode(e->tok, "\n", 1, 0, &ids, NULL)) bad = 1;
        else if (ids.n == 1 && tok_push(q, ids.v[0])) bad = 1;
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
static void finish(struct smol_engine *e, struct req *q, int reason)
{
    if (q->state != RS_QUEUED) {
        struct smol_detok_out out;
        enum smol_err fr = smol_detok_flush(&q->detok, &out);
        if (!q->cancelled && (fr || (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0))))
            lose(q);
        if (smol_chat_parser_finish(&q->parser) && !q->cancelled) lose(q);
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
            if (o != q && o->r == q->r) lose(o);
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
    if (q->state == RS_QUEUED) { list_remove(&e->queue, q); e->n_queued--; }
    else { list_remove(&e->running, q); e->n_running--; }
    q->state = RS_DONE;
    req_free(q);
}

static void reject(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg)
{
    e->n_rejected++;
    if (q->r->refs > 1)     /* the stream ends with this error: the other choices stop too */
        for (struct req *o = e->running; o; o = o->next)
            if (o != q && o->r == q->r) o->cancelled = 1;
    smol_engine_send_error(e, q->r->id, q->r->client_id, code, msg);
    if (q->sess) q->sess->busy = 0;
    if (q->anon) smol_sessions_remove(&e->sessions, q->anon);
    if (q->state == RS_QUEUED) { list_remove(&e->queue, q); e->n_queued--; }
    else if (q->state != RS_DONE) { list_remove(&e->running, q); e->n_running--; }
    req_free(q);
}

/* ---- admission ------------------------------------------------------------------- */

static void today(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    smol_chat_date_format(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, out, 32);
}

/* Tokenizes text[0, len) with special tokens parsed, except CONTROL tokens
 * inside the untrusted spans (caller-provided text: message contents,
 * tools), whose offsets are relative to text + base.  Raw text requests
 * (no spans) are trusted caller input, as llama.cpp's /completion. */
static enum smol_err encode_rendered(struct smol_engine *e, struct req *q, const char *text, size_t len,
                                     const struct smol_chat_spans *sp, size_t base, char *err)
{
    struct smol_ids ids = {0};
    struct smol_span *v = NULL;
    size_t nv = 0;
    enum smol_err rc = SMOL_OK;
    if (sp && sp->n) {
        if (!(v = malloc(sp->n * sizeof *v))) return smol_errf(err, SMOL_ENOMEM, "out of memory");
        for (size_t i = 0; i < sp->n; i++) {
            size_t a = sp->v[i].off, b = a + sp->v[i].len;
            if (b <= base) continue;
            if (a < base) a = base;
            v[nv++] = (struct smol_span){a - base, b - a};
        }
    }
    rc = smol_tokenizer_encode_spans(e->tok, text, len, 1, v, nv, &ids, err);
    for (size_t i = 0; !rc && i < ids.n; i++)
        if (tok_push(q, ids.v[i])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
    smol_ids_free(&ids);
    free(v);
    return rc;
}

/* Fills q->tok with the prompt.  A chat turn on a session whose recorded
 * conversation text is a prefix of this render continues from the
 * session's actual tokens (which hold the reasoning the client dropped). */
static enum smol_err build_prompt(struct smol_engine *e, struct req *q, struct smol_session *s, char *err)
{
    struct smol_request *r = q->r;
    q->n_tok = 0;
    switch (r->kind) {
    case SMOL_INPUT_TOKENS:
        for (int i = 0; i < r->n_ids; i++)
            if (tok_push(q, r->ids[i])) return smol_errf(err, SMOL_ENOMEM, "out of memory");
        return SMOL_OK;
    case SMOL_INPUT_TEXT:
        return encode_rendered(e, q, r->text, r->text_len, NULL, 0, err);
    case SMOL_INPUT_CHAT:
        break;
    }
    if (!e->have_tpl) return smol_errf(err, SMOL_ETEMPLATE, "the model has no chat template this daemon recognises");
    if (r->append && s && s->msgs && json_array_size(s->msgs)) {
        /* server-side history: stored conversation + this turn's messages */
        json_t *body = json_deep_copy(r->chat_body), *all = json_deep_copy(s->msgs);
        if (!body || !all || json_array_extend(all, json_object_get(r->chat_body, "messages")) ||
            json_object_set_new(body, "messages", all)) {
            json_decref(body);
            return smol_errf(err, SMOL_ENOMEM, "out of memory");
        }
        struct smol_chat_request cr;
        enum smol_err rc = smol_chat_request_from_json(&cr, body, err);
        if (rc) { json_decref(body); return rc; }
        cr.date = r->chat.date;
        smol_chat_request_deinit(&r->chat);
        json_decref(r->chat_body);
        r->chat_body = body;
        r->chat = cr;
        r->append = 0;
    }
    char date[32];
    if (r->chat.date) snprintf(date, sizeof date, "%s", r->chat.date);
    else if (s && s->date[0]) snprintf(date, sizeof date, "%s", s->date);
    else today(date);
    if (s && !s->date[0]) snprintf(s->date, sizeof s->date, "%s", date);
    struct smol_chat_request cr = r->chat;
    cr.date = date;
    if (r->think_set) cr.enable_thinking = r->enable_thinking;
    struct smol_chat_spans spans;
    smol_chat_spans_init(&spans);
    enum smol_err rc = smol_chat_render_spans(e->tpl, &cr, &q->rendered, &spans, &q->thinking, err);
    /* no session: the longest cached prefix (anonymous, so stateless
     * requests only) whose recorded conversation starts this render is
     * continued the same way, so a client sending its history back (an
     * agent after a tool call) reuses the previous turn's KV even where the
     * model's tokens were not the canonical tokenization of its text */
    if (!rc && !s)
        for (struct smol_session *x = e->sessions.head; x; x = x->next)
            if (!x->id[0] && !x->busy && !strcmp(x->tenant, r->tenant) && x->hist_text && x->hist_len <= q->rendered.len && x->seq.n_tokens > 0 &&
                (!s || x->hist_len > s->hist_len) && !memcmp(x->hist_text, q->rendered.data, x->hist_len))
                s = x;
    if (!rc && s && s->hist_text && s->hist_len <= q->rendered.len && s->seq.n_tokens > 0 &&
        !memcmp(s->hist_text, q->rendered.data, s->hist_len)) {
        for (int i = 0; i < s->n_tokens && !rc; i++)
            if (tok_push(q, s->tokens[i])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
        if (!rc)
            rc = encode_rendered(e, q, q->rendered.data + s->hist_len, q->rendered.len - s->hist_len, &spans,
                                 s->hist_len, err);
    } else if (!rc) {
        rc = encode_rendered(e, q, q->rendered.data, q->rendered.len, &spans, 0, err);
    }
    smol_chat_spans_deinit(&spans);
    return rc;
}

static int outstanding_pages(struct smol_engine *e)
{
    int n = 0;
    for (struct req *q = e->running; q; q = q->next) n += q->kv_promise;
    return n;
}

/* How the output parser starts: raw text and token prompts get raw text
 * back (no tags are parsed); SmolLM3 chat output is split into reasoning,
 * content and tool calls. */
static enum smol_chat_start parser_start(const struct smol_engine *e, const struct smol_request *r)
{
    return r->kind == SMOL_INPUT_CHAT && e->have_tpl && e->tpl == SMOL_CHAT_TPL_SMOLLM3 ? SMOL_CHAT_START_CONTENT
                                                                                        : SMOL_CHAT_START_PLAIN;
}

/* What try_admit's steps find out and hand on, one step to the next. */
struct admit {
    struct smol_session *s;         /* the request's named session (NULL: none asked, or a new one) */
    struct smol_session *src;       /* the cached entry whose KV the prompt starts from, or NULL */
    int n_prompt, max_gen;
    int lcp;                        /* prompt tokens whose KV is reused */
    int restored;                   /* of lcp, read back from a cached prefix's file */
    int need;                       /* KV pages the request needs */
    int sib_pages;                  /* n > 1: pages the other choices will take */
};

/* Each step returns 1 (go on), 0 (q must wait: it stays queued) or -1
 * (refused: error sent, q freed). */

/* Step 1: the request's session, in memory or read back from the spill
 * directory (its file is read on the spill's thread first: the queue waits). */
static int admit_lookup(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    struct smol_request *r = q->r;
    if (!r->session[0]) return 1;
    a->s = smol_sessions_find(&e->sessions, r->tenant, r->session);
    if (!a->s && !smol_sessions_prefetch(&e->sessions, r->tenant, r->session)) {
        e->waiting_read = 1;
        return 0;
    }
    if (!a->s)
        a->s = smol_sessions_restore(&e->sessions, r->tenant, r->session, e->cfg.max_sessions,
                                     e->cfg.max_sessions_per_key, now);
    if (!a->s && r->append && !r->create_session) {
        /* appending to a conversation the daemon does not hold (never made,
         * deleted, evicted without a file, or another tenant's: the same
         * answer) would silently start an empty one */
        char msg[SMOL_UNKNOWN_SESSION_MSG];
        e->n_unknown_session++;
        reject(e, q, SMOL_ENOSESSION, smol_unknown_session_msg(msg, r->session));
        return -1;
    }
    if (a->s && a->s->busy) {
        char msg[SMOL_ERRLEN + 64];
        snprintf(msg, sizeof msg, "session '%s' already has a request in progress", r->session);
        reject(e, q, SMOL_EBUSY, msg);
        return -1;
    }
    return 1;
}

/* Step 2: the prompt, rendered and tokenized once per request.  It is kept
 * while the request waits; only a session that changed since it was built
 * (its history rewritten, or evicted and read back: a new stamp) has it
 * built again, since the prompt continues that session's tokens. */
static int admit_prompt(struct smol_engine *e, struct req *q, struct admit *a)
{
    const uint64_t stamp = a->s ? a->s->stamp : 0;
    if (q->prompt_built && q->prompt_stamp == stamp) return 1;
    char err[SMOL_ERRLEN];
    smol_chat_buf_reset(&q->rendered);
    e->n_prompt_builds++;
    enum smol_err rc = build_prompt(e, q, a->s, err);
    if (rc) { reject(e, q, rc, err); return -1; }
    q->prompt_built = 1;
    q->prompt_stamp = stamp;
    return 1;
}

/* Step 3: the limits (refused) and a free slot for every choice (wait);
 * sets n_prompt and max_gen. */
static int admit_checks(struct smol_engine *e, struct req *q, struct admit *a)
{
    const struct smol_request *r = q->r;
    const int n_ctx = e->m->cfg.n_ctx, budget = e->m->kv.n_pages * SMOL_KV_PAGE, n_prompt = q->n_tok;
    const int kv_tokens = n_prompt + (r->max_tokens ? r->max_tokens : 1);
    char msg[SMOL_ERRLEN + 64];
    enum smol_err code = SMOL_OK;
    if (n_prompt == 0) {
        code = SMOL_EINVAL;
        snprintf(msg, sizeof msg, "empty prompt");
    } else if (r->n_choices > e->cfg.max_running) {
        code = SMOL_EINVAL;
        snprintf(msg, sizeof msg, "n = %d choices exceed max_running (%d)", r->n_choices, e->cfg.max_running);
    } else if (e->n_running + r->n_choices > e->cfg.max_running) {
        return 0;   /* wait until all choices can run */
    } else if (n_prompt >= n_ctx) {
        code = SMOL_ECONTEXT;
        snprintf(msg, sizeof msg, "prompt of %d tokens does not fit the context of %d tokens", n_prompt, n_ctx);
    } else if (r->max_tokens && n_prompt + r->max_tokens > n_ctx) {
        code = SMOL_ECONTEXT;
        snprintf(msg, sizeof msg, "prompt of %d tokens + max_tokens %d exceed the context of %d tokens", n_prompt,
                 r->max_tokens, n_ctx);
    } else if (kv_tokens > budget) {
        code = SMOL_EBUSY;
        snprintf(msg, sizeof msg, "request needs %d tokens of KV cache; the budget holds %d", kv_tokens, budget);
    }
    if (code) {
        reject(e, q, code, msg);
        return -1;
    }
    a->n_prompt = n_prompt;
    a->max_gen = r->max_tokens ? r->max_tokens : e->cfg.default_max_tokens;
    if (a->max_gen > n_ctx - n_prompt) a->max_gen = n_ctx - n_prompt;
    if (a->max_gen > budget - n_prompt) a->max_gen = budget - n_prompt;
    return 1;
}

/* Step 4: the prefix to reuse (found before anything changes, so that the
 * request can still wait): the session's own history, else the longest
 * cached prefix, in memory or (a page or more longer) on disk, read back
 * on the spill's thread first like a session's file. */
static int admit_prefix(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    const int n = a->n_prompt;
    if (a->s) {
        int have = a->s->seq.n_tokens < a->s->n_tokens ? a->s->seq.n_tokens : a->s->n_tokens;
        a->lcp = smol_lcp(a->s->tokens, have, q->tok, n);
    } else {
        const char *tenant = q->r->tenant;   /* only its own prefixes */
        a->src = smol_sessions_best_prefix(&e->sessions, tenant, q->tok, n, &a->lcp);
        if (!smol_sessions_read_prefix(&e->sessions, tenant, q->tok, n, a->lcp, now)) {
            e->waiting_read = 1;
            return 0;
        }
        /* again: what was read back, and making room for it may have evicted src */
        a->src = smol_sessions_best_prefix(&e->sessions, tenant, q->tok, n, &a->lcp);
    }
    if (a->lcp > n - 1) a->lcp = n - 1;   /* the last prompt token is computed for its logits */
    return 1;
}

/* Step 5: room in the KV pool for the prompt past the prefix, max_gen
 * tokens and the other choices (their generated tokens, plus the copy of
 * the last prompt page they share when it is partly filled), idle entries
 * evicted for it; without room it waits while others run, up to the queue
 * timeout. */
static int admit_kv(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    struct smol_kv *kv = &e->m->kv;
    a->sib_pages = (q->r->n_choices - 1) * (smol_kv_pages_for(a->max_gen) + 1);
    a->need = smol_kv_pages_for(a->n_prompt + a->max_gen) - a->lcp / SMOL_KV_PAGE + a->sib_pages;
    const int want = a->need + outstanding_pages(e);
    if (a->s) a->s->busy = 1;               /* protect what we reuse from eviction */
    if (a->src) a->src->busy = 1;
    while (kv->n_free < want && smol_sessions_evict_one(&e->sessions, 1)) {}
    if (a->s) a->s->busy = 0;
    if (a->src) a->src->busy = 0;
    if (kv->n_free >= want) return 1;
    if (e->n_running > 0 && now - q->r->t_received <= e->cfg.queue_timeout_s) return 0;
    char msg[SMOL_ERRLEN + 64];
    snprintf(msg, sizeof msg, "KV cache busy: request needs %d pages of %d tokens, %d free of %d", a->need,
             SMOL_KV_PAGE, kv->n_free - (want - a->need), kv->n_pages);
    reject(e, q, SMOL_EBUSY, msg);
    return -1;
}

/* The date frozen into a new session or cached prefix (the recorded
 * conversation, finish, is rendered with it). */
static void set_date(struct smol_session *x, const struct smol_request *r)
{
    if (r->chat.date) snprintf(x->date, sizeof x->date, "%s", r->chat.date);
    else today(x->date);
}

/* x starts from the cached entry's KV: its first lcp positions shared
 * (none when that fails). */
static void start_from_prefix(struct smol_engine *e, struct smol_session *x, struct admit *a, double now)
{
    char err[SMOL_ERRLEN];
    if (a->src && a->lcp > 0 && smol_kv_seq_share(&e->m->kv, &x->seq, &a->src->seq, a->lcp, err)) a->lcp = 0;
    if (a->src && a->lcp > 0) smol_sessions_touch(&e->sessions, a->src, now);
    if (!a->src) a->lcp = 0;
}

/* The new named session q asked for (an idle one evicted when its tenant
 * or the table is full: smol_sessions_make_room), started from the best
 * cached prefix as a request without a session is; NULL: refused. */
static struct smol_session *new_session(struct smol_engine *e, struct req *q, struct admit *a, double now)
{
    if (a->src) a->src->busy = 1;           /* the prefix it starts from stays */
    const int room = smol_sessions_make_room(&e->sessions, q->r->tenant, e->cfg.max_sessions,
                                             e->cfg.max_sessions_per_key);
    if (a->src) a->src->busy = 0;
    if (room) { reject(e, q, SMOL_EBUSY, "too many sessions"); return NULL; }
    struct smol_session *s = smol_sessions_add(&e->sessions, q->r->tenant, q->r->session);
    if (!s) { reject(e, q, SMOL_ENOMEM, "out of memory"); return NULL; }
    set_date(s, q->r);
    start_from_prefix(e, s, a, now);
    return s;
}

/* A request without a session writes into an anonymous entry of its own
 * (which becomes a cached prefix when it ends); -1: refused. */
static int new_anon(struct smol_engine *e, struct req *q, struct admit *a, double now)
{
    struct smol_session *x = smol_sessions_add(&e->sessions, q->r->tenant, "");
    if (!x) { reject(e, q, SMOL_ENOMEM, "out of memory"); return -1; }
    x->busy = 1;
    set_date(x, q->r);
    start_from_prefix(e, x, a, now);
    if (a->src && !a->src->id[0] && a->src->restored_kv) { /* a prefix just read back: reported once */
        a->restored = a->lcp < a->src->restored_kv ? a->lcp : a->src->restored_kv;
        a->src->restored_kv = 0;
    }
    q->anon = x;
    q->seq = &x->seq;
    return 0;
}

/* Step 6: the request takes its session (or an anonymous entry) and the
 * reused prefix, and is counted. */
static int admit_commit(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    struct smol_kv *kv = &e->m->kv;
    if (q->r->session[0] && !a->s && !(a->s = new_session(e, q, a, now))) return -1;
    if (a->s) {
        smol_kv_seq_truncate(kv, &a->s->seq, a->lcp);
        a->s->busy = 1;
        q->sess = a->s;
        q->seq = &a->s->seq;
    } else if (new_anon(e, q, a, now)) {
        return -1;
    }
    q->n_prompt = a->n_prompt;
    q->n_cached = a->lcp;
    q->max_gen = a->max_gen;
    q->sib_pages = a->sib_pages;
    q->kv_promise = smol_kv_seq_pages_needed(kv, q->seq, a->lcp, a->n_prompt + a->max_gen) + a->sib_pages;
    q->tpl = e->tpl;
    q->stop_index = -1;
    q->t_admit = now;
    e->n_requests++;
    e->n_prompt_tokens += (uint64_t)a->n_prompt;
    e->n_cached_tokens += (uint64_t)a->lcp;
    if (a->lcp > 0) e->n_prefix_hits++;
    return 1;
}

/* Predicted Outputs: the prediction, tokenized as user text (no control
 * tokens), drafts with its own controller, trusted more than a lookup to
 * begin with; the rates follow what verification finds. */
static enum smol_err start_prediction(struct smol_engine *e, struct req *q, int spec_k, char *err)
{
    struct smol_ids ids = {0};
    enum smol_err rc = smol_tokenizer_encode(e->tok, q->r->prediction, q->r->prediction_len, 0, &ids, err);
    if (!rc && ids.n > 0 && !(q->pred = malloc(ids.n * sizeof *q->pred)))
        rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
    if (!rc) {
        if (ids.n > 0) memcpy(q->pred, ids.v, ids.n * sizeof *q->pred);
        q->n_pred = (int)ids.n;
        q->pred_pos = 0;
        q->pred_first = -1;
        smol_spec_ctl_init(&q->pctl, spec_k, e->spec_cost);
        for (int i = 0; i < SMOL_SPEC_CLASSES; i++) q->pctl.rate[i] = 0.9f;
        q->pred_seen = q->n_gen;
    }
    smol_ids_free(&ids);
    return rc;
}

/* Speculative decoding when the request and the daemon allow it: the
 * prompt's n-gram index, the draft-length controller, the prediction. */
static enum smol_err start_speculation(struct smol_engine *e, struct req *q, char *err)
{
    const struct smol_request *r = q->r;
    int spec_k = r->speculative == 0 ? 0 : e->cfg.speculative ? e->cfg.speculative
                                     : r->speculative > 0 || r->prediction ? SMOL_SPEC_MAX_DRAFT : 0;
    if (spec_k <= 0 || e->spec_rows <= 0) return SMOL_OK;
    enum smol_err rc;
    if ((rc = smol_lookup_new(&q->lk, e->m->cfg.vocab, err)) ||
        (rc = smol_lookup_append(q->lk, q->tok, q->n_prompt, err)))
        return rc;
    smol_spec_ctl_init(&q->ctl, spec_k, e->spec_cost);
    return r->prediction ? start_prediction(e, q, spec_k, err) : SMOL_OK;
}

/* Step 7: what generation needs: sampler, stop matcher, grammar matcher,
 * speculation, output parser. */
static int admit_start(struct smol_engine *e, struct req *q)
{
    const struct smol_request *r = q->r;
    char err[SMOL_ERRLEN];
    enum smol_err rc;
    if ((rc = smol_sampler_new(&q->smp, &r->sp, e->m->cfg.vocab, err)) ||
        (rc = smol_sampler_set_logit_bias(q->smp, r->bias_id, r->bias, (size_t)r->n_bias, err)) ||
        (rc = smol_sampler_accept(q->smp, q->tok, (size_t)q->n_prompt, false, err)) ||
        (rc = smol_detok_init(&q->detok, (const char *const *)r->stops, (size_t)r->n_stops, err)) ||
        (r->grammar && (rc = smol_grammar_matcher_new(&q->gm, smol_grammar_entry_grammar(r->grammar),
                                                      smol_grammar_entry_index(r->grammar), err)))) {
        reject(e, q, rc, err);
        return -1;
    }
    q->gm_active = q->gm && !q->thinking;   /* thinking: constrained from </think> on */
    q->think_open = q->thinking;
    q->think_budget = r->thinking_budget ? r->thinking_budget : e->cfg.default_thinking_budget;
    q->sg.m = q->gm;
    if ((rc = start_speculation(e, q, err))) {
        reject(e, q, rc, err);
        return -1;
    }
    smol_chat_parser_init(&q->parser, parser_start(e, r), on_parse, q);
    return 1;
}

/* Admits the queue's head when it can run now: 1 admitted (Started sent),
 * 0 must wait, -1 refused (error sent, q freed).  A request that waits
 * returns before commit, so it leaves nothing of its own half done: the
 * steps before only look up, read back from disk or evict idle entries,
 * and its prompt stays built (admit_prompt). */
static int try_admit(struct smol_engine *e, struct req *q, double now)
{
    struct admit a = {0};
    int rc;
    if (q->r->grammar && !smol_grammar_entry_index(q->r->grammar)) {  /* the RPC thread submits only built ones */
        reject(e, q, SMOL_EINTERNAL, "structured output: the grammar's index is not built");
        return -1;
    }
    if ((rc = admit_lookup(e, q, now, &a)) <= 0 || (rc = admit_prompt(e, q, &a)) <= 0 ||
        (rc = admit_checks(e, q, &a)) <= 0 || (rc = admit_prefix(e, q, now, &a)) <= 0 ||
        (rc = admit_kv(e, q, now, &a)) <= 0 || (rc = admit_commit(e, q, now, &a)) <= 0 ||
        (rc = admit_start(e, q)) <= 0)
        return rc;
    list_remove(&e->queue, q);
    e->n_queued--;
    list_append(&e->running, q);
    e->n_running++;
    q->state = RS_PREFILL;
    if (q->sess && q->sess->restored_kv) {  /* a session just read back: reported once */
        a.restored = q->n_cached < q->sess->restored_kv ? q->n_cached : q->sess->restored_kv;
        q->sess->restored_kv = 0;
    }
    if (smol_engine_send_started(e, q, a.restored)) lose(q);
    return 1;
}

/* ---- one step ---------------------------------------------------------------------- */

static void fail_request(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg)
{
    /* an error after Started: the error event is the terminal one */
    if (q->sess) { q->sess->busy = 0; smol_kv_seq_truncate(&e->m->kv, q->seq, 0); q->sess->n_tokens = 0; smol_session_set_text(q->sess, NULL, 0); }
    q->state = RS_PREFILL; /* so reject() takes it off the running list */
    reject(e, q, code, msg);
}

/* Structured output: sets the logits of the tokens q's grammar does not
 * allow here to -inf (the sampler never picks them).  Once the grammar is
 * done, only the end-of-turn token is left (<|im_end|> for chat, eos
 * otherwise). */
static void apply_grammar(struct smol_engine *e, struct req *q, float *logits)
{
    const int V = e->m->cfg.vocab, gV = smol_tokenizer_n_vocab(e->tok);
    if (smol_grammar_matcher_is_done(q->gm)) {
        const struct smol_special_ids *sp = smol_tokenizer_special(e->tok);
        int32_t end = q->r->kind == SMOL_INPUT_CHAT && sp->im_end >= 0 ? sp->im_end : sp->eos;
        if (end < 0 || end >= V) return;    /* no end token: the grammar's own mask applies below */
        float keep = logits[end];
        for (int i = 0; i < V; i++) logits[i] = -INFINITY;
        logits[end] = isfinite(keep) ? keep : 0.0f;
        return;
    }
    smol_grammar_matcher_fill_mask(q->gm, e->gmask);
    smol_grammar_mask_logits(e->gmask, gV, logits, V);
}

/* Speculative decoding: the verification's rows are sampled as plain
 * decoding samples its one row (the grammar, logprobs), into q->lps[i]; the
 * draft filter keeps a constrained request's draft inside its grammar (a
 * thinking request's draft ends at </think>: the constraint starts after
 * it). */
/* Tokens kept beyond a pending grammar's shortest completion when thinking is
 * closed early for it (room for the newline after </think> and a little
 * slack before the shortest path is forced). */
#define SMOL_THINK_GRAMMAR_MARGIN 4

struct spec_ctx {
    struct smol_engine *e;
    struct req *q;
    struct smol_sampler_logprobs *lps;
};

/* Samples one token of q from row i of its step (logits ours to modify):
 * the grammar applied, then advanced; *lp filled when the request asks for
 * logprobs.  Within the tokens max_tokens and the context still allow (row
 * i is the i-th of them), a token after which the grammar could not end in
 * time is drawn again among those that begin its shortest completion, so a
 * constrained output cut by length is still complete. */
static enum smol_err sample_row(struct smol_engine *e, struct req *q, int i, float *logits, int32_t *t,
                                struct smol_sampler_logprobs *lp, char *err)
{
    if (q->gm_active && smol_grammar_matcher_failed(q->gm))   /* is_done says 1: not "the end" */
        return smol_errf(err, SMOL_ENOMEM, "structured output: out of memory");
    const int32_t think_end = smol_tokenizer_special(e->tok)->think_end;
    const int32_t think_start = smol_tokenizer_special(e->tok)->think;
    int force_close = 0;
    int32_t forced = -1;
    if (q->think_open && think_end >= 0 && think_start >= 0 && (q->think_budget > 0 || q->gm) && q->n_gen + i == 0)
        forced = think_start;   /* a bounded thinking span opens with <think>, as SmolLM3's does */
    else if (q->think_open && think_end >= 0) {
        /* the thinking budget: the first think_budget generated tokens may
         * think, the next is </think>; a pending grammar closes it while
         * its shortest completion (+ a margin) still fits the tokens left */
        long done = (long)q->n_gen + i;
        if (q->think_budget > 0 && done >= q->think_budget) force_close = 1;
        if (q->gm && !force_close) {
            const int kv_len = q->seq->n_tokens - q->n_draft, by_ctx = e->m->cfg.n_ctx - kv_len;
            long left = (q->max_gen - q->n_gen < by_ctx ? q->max_gen - q->n_gen : by_ctx) - i;
            size_t need = smol_grammar_matcher_min_tokens(q->gm);
            if (need != SIZE_MAX && left - 1 <= (long)need + SMOL_THINK_GRAMMAR_MARGIN) force_close = 1;
        }
    }
    if (force_close) forced = think_end;
    if (forced >= 0) {
        const int V = e->m->cfg.vocab;
        for (int k = 0; k < V; k++)
            if (k != forced) logits[k] = -INFINITY;
        logits[forced] = 0.0f;
    }
    double tg = q->gm_active ? smol_mono_s() : 0;
    if (q->gm_active) apply_grammar(e, q, logits);
    if (q->gm_active) e->grammar_s += smol_mono_s() - tg;
    lp->n_top = q->r->top_logprobs;
    enum smol_err rc = smol_sampler_sample_lp(q->smp, e->sc, logits, t, q->r->logprobs ? lp : NULL, err);
    if (rc) return rc;
    if (forced >= 0) *t = forced;   /* whatever the sampler's filters did */
    if (q->gm_active && !smol_grammar_matcher_is_done(q->gm)) {
        const int kv_len = q->seq->n_tokens - q->n_draft, by_ctx = e->m->cfg.n_ctx - kv_len;
        long budget = (q->max_gen - q->n_gen < by_ctx ? q->max_gen - q->n_gen : by_ctx) - i;
        tg = smol_mono_s();
        if (!smol_grammar_matcher_fits(q->gm, *t, budget > 0 ? (size_t)budget : 0)) {
            smol_grammar_matcher_mask_shortest(q->gm, e->gmask, budget > 0 ? (size_t)budget : 0);
            smol_grammar_mask_logits(e->gmask, smol_tokenizer_n_vocab(e->tok), logits, e->m->cfg.vocab);
            e->n_grammar_forced++;
            rc = smol_sampler_sample_lp(q->smp, e->sc, logits, t, q->r->logprobs ? lp : NULL, err);
            if (rc) return rc;
        }
        e->grammar_s += smol_mono_s() - tg;
        if (smol_grammar_matcher_failed(q->gm)) return smol_errf(err, SMOL_ENOMEM, "structured output: out of memory");
        tg = smol_mono_s();
        rc = smol_grammar_matcher_accept_token(q->gm, *t);
        e->grammar_s += smol_mono_s() - tg;
        e->n_grammar_tokens++;
        if (rc == SMOL_ENOMEM) return smol_errf(err, SMOL_ENOMEM, "structured output: out of memory");
        if (rc) return smol_errf(err, SMOL_EINTERNAL, "structured output: the sampled token is outside the grammar");
    }
    if (q->think_open && *t == think_end) {
        q->think_open = 0;
        if (force_close) e->n_think_forced++;
    }
    if (q->gm && !q->gm_active && *t == think_end) q->gm_active = 1;
    return SMOL_OK;
}

static enum smol_err spec_sample(void *ctx, int i, float *row, int32_t *t, char *err)
{
    struct spec_ctx *c = ctx;
    return sample_row(c->e, c->q, i, row, t, &c->lps[i], err);
}

static int spec_filter(void *ctx, const int32_t *draft, int i, int32_t t)
{
    struct spec_ctx *c = ctx;
    struct req *q = c->q;
    if (!q->gm_active) return i == 0 || draft[i - 1] != smol_tokenizer_special(c->e->tok)->think_end;
    return smol_spec_grammar_filter(&q->sg, draft, i, t);
}

/* Predicted Outputs: brings q->pred_pos up to date with the tokens
 * generated since the last call.  A token equal to the prediction's next
 * one advances it; any other token (an edit) re-synchronises: pred_pos
 * follows the longest suffix of the output, at least 2 and at most 16
 * tokens, found in the prediction (of the longest, the earliest occurrence
 * past the point of departure, else the earliest: an output that repeats
 * a span is not sent back to the token it just refused); -1 if none. */
static void pred_sync(struct req *q)
{
    const int32_t *out = q->tok + q->n_tok - q->n_gen;    /* the generated tokens */
    for (int g = q->pred_seen; g < q->n_gen; g++) {
        const int32_t t = out[g];
        if (q->pred_pos >= 0 && q->pred_pos < q->n_pred && q->pred[q->pred_pos] == t) {
            q->pred_pos++;
            q->pred_run++;
            continue;
        }
        const int from = q->pred_pos > 0 ? q->pred_pos : 0, have = g + 1;
        int best = -1, best_len = 1;
        for (int j = 0; j < q->n_pred; j++) {
            int l = 0;
            while (l < 16 && l < have && j - l >= 0 && q->pred[j - l] == out[g - l]) l++;
            if (l > best_len || (l == best_len && best <= from && j + 1 > from)) {
                best = j + 1;
                best_len = l;
            }
        }
        q->pred_pos = best;
        q->pred_run = best >= 0 ? best_len : 0;
    }
    q->pred_seen = q->n_gen;
}

/* Plans q's draft for this step: up to max tokens, as many as the
 * controller finds worth verifying (q->n_draft; 0: a plain decode step),
 * written to draft[].  With a prediction the output follows, the draft is
 * the prediction's next tokens, as many as its own controller finds worth
 * it (evidence: the tokens followed since the last re-synchronisation;
 * rates starting high: the request said the output copies it); otherwise
 * the prompt lookup's. */
static void plan_draft(struct smol_engine *e, struct req *q, int max, int32_t *draft)
{
    q->n_draft = 0;
    q->draft_first = -1;
    q->draft_match = 0;
    q->draft_pred = 0;
    q->pred_first = -1;
    if (!q->lk) return;
    struct spec_ctx c = {e, q, NULL};
    if (q->pred) {
        pred_sync(q);
        if (q->pred_pos >= 0 && q->pred_pos < q->n_pred) {
            q->pred_first = q->pred[q->pred_pos];
            q->pred_match = q->pred_run > 0 ? q->pred_run : 1;
            int n = q->n_pred - q->pred_pos, kc = smol_spec_ctl_k(&q->pctl, q->pred_match);
            if (n > kc) n = kc;
            if (n > max) n = max;
            q->sg.pushed = 0;
            int k = 0;
            for (; k < n; k++) {
                if (q->gm && !spec_filter(&c, draft, k, q->pred[q->pred_pos + k])) break;
                draft[k] = q->pred[q->pred_pos + k];
            }
            if (q->gm) smol_spec_grammar_undo(&q->sg);
            if (k > 0) {
                q->n_draft = k;
                q->draft_pred = 1;
                return;
            }
        }
    }
    q->sg.pushed = 0;
    int n = smol_lookup_draft_edit(q->lk, SMOL_SPEC_MAX_DRAFT, draft, &q->draft_match, q->gm ? spec_filter : NULL, &c);
    if (q->gm) smol_spec_grammar_undo(&q->sg);
    if (n > 0) q->draft_first = draft[0];
    int k = smol_spec_ctl_k(&q->ctl, q->draft_match);
    if (k > n) k = n;
    if (k > max) k = max;
    q->n_draft = k > 0 ? k : 0;
}

/* Streams token t of q (already sampled, the grammar advanced) and what it
 * makes final; kv_len: the tokens q's KV holds when t comes, as in plain
 * decoding.  Returns 0 when q finished (and was freed). */
static int emit_token(struct smol_engine *e, struct req *q, int32_t t, double now, int kv_len)
{
    enum smol_err rc;
    if (tok_push(q, t)) { fail_request(e, q, SMOL_ENOMEM, "out of memory"); return 0; }
    q->n_gen++;
    if (!q->t_first_token) q->t_first_token = now;
    q->cur_token = t;
    q->seg_in_token = 0;
    if (smol_tokenizer_is_eog(e->tok, t)) {
        finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_STOP);
        return 0;
    }
    size_t len = 0;
    const char *piece = smol_tokenizer_piece(e->tok, t, &len);
    struct smol_detok_out out;
    q->tok_reasoning = 0;
    if (smol_tokenizer_is_special(e->tok, t)) {
        if (smol_detok_flush(&q->detok, &out) || (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0)))
            lose(q);
        if (smol_chat_parser_feed(&q->parser, piece ? piece : "", len, 1)) lose(q);
    } else {
        if ((rc = smol_detok_push(&q->detok, piece ? piece : "", len, &out))) { fail_request(e, q, rc, "detokenizer error"); return 0; }
        if (out.len && smol_chat_parser_feed(&q->parser, out.text, out.len, 0)) lose(q);
        if (out.stopped) {
            q->stop_index = out.stop_index;
            finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_STOP);
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
        finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
        return 0;
    }
    return 1;
}

/* Samples q's next tokens from its rows of logits (e->logits, ours to
 * modify): one row, or the q->n_draft + 1 rows verifying its draft
 * (drafts: the batch tokens after q's last one), then streams them.  The
 * KV of rejected draft positions is dropped.  May finish (and free) q. */
static void sample_and_emit(struct smol_engine *e, struct req *q, float *logits, const int32_t *drafts, double now)
{
    char err[SMOL_ERRLEN];
    int32_t got[SMOL_SPEC_MAX_DRAFT + 1];
    struct smol_sampler_logprobs lps[SMOL_SPEC_MAX_DRAFT + 1];
    int n_got = 0, n_acc = 0;
    const int k = q->n_draft, kv_len = q->seq->n_tokens - k;
    struct spec_ctx c = {e, q, lps};
    enum smol_err rc = smol_spec_verify(logits, e->m->cfg.vocab, drafts, k, spec_sample, &c, got, &n_got, &n_acc, err);
    if (rc) { fail_request(e, q, rc, err); return; }
    if (k > 0) smol_kv_seq_truncate(&e->m->kv, q->seq, kv_len + n_acc);   /* rollback of the rejected drafts */
    q->n_steps++;
    e->n_decode_steps++;
    if (q->lk) {
        if (k > 0) {
            q->n_drafted += k;
            q->n_accepted += n_acc;
            e->n_spec_drafted += (uint64_t)k;
            e->n_spec_accepted += (uint64_t)n_acc;
            e->n_spec_steps++;
            if (q->draft_pred) {
                q->n_pred_accepted += n_acc;
                q->n_pred_rejected += k - n_acc;
                smol_spec_ctl_update(&q->pctl, q->pred_match, k, n_acc);
            } else {
                smol_spec_ctl_update(&q->ctl, q->draft_match, k, n_acc);
            }
        }
        if (!q->draft_pred && q->pred_first >= 0)
            smol_spec_ctl_shadow(&q->pctl, q->pred_match, q->pred_first, got[0]); else if (q->draft_first >= 0) {
            smol_spec_ctl_shadow(&q->ctl, q->draft_match, q->draft_first, got[0]);
        }
        if ((rc = smol_lookup_append(q->lk, got, n_got, err))) { fail_request(e, q, rc, err); return; }
    }
    q->n_draft = 0;
    for (int i = 0; i < n_got; i++) {
        q->cur_lp = lps[i];
        if (!emit_token(e, q, got[i], now, kv_len + i)) return;
    }
}

/* backend_sampling: whether q's next token can be drawn by the backend's batch sampler
 * (temperature and top_p only: nothing that needs the logits on the host; not while a
 * thinking budget may force </think>). */
static int backend_samples(const struct req *q)
{
    const struct smol_request *r = q->r;
    return !q->gm && q->n_draft == 0 && r->n_choices <= 1 && !r->logprobs &&
           !(q->think_open && q->think_budget > 0) &&   /* the thinking budget forces tokens (sample_row) */
           smol_sampler_is_plain(q->smp);
}

/* Rows the host may sample on the pool, all of a step's together, before its emits: one row (no
 * draft), no grammar, no logprobs, one choice, no thinking budget (sample_row forces tokens
 * there); penalties, top_k, min_p and logit bias are the sampler's own.  Each request's sampler
 * is its own and each thread has its own scratch, so the draws are those of the serial path. */
static int host_samples(const struct req *q)
{
    const struct smol_request *r = q->r;
    return !q->gm && q->n_draft == 0 && r->n_choices <= 1 && !r->logprobs && !(q->think_open && q->think_budget > 0);
}

#define HOST_POOL_MIN_ROWS 4    /* fewer rows: serial (the pool's wake-up costs ~10 us) */

static void host_sample_task(void *arg, int i, int thread)
{
    struct smol_engine *e = arg;
    if (!e->b_host[i]) return;
    char err[SMOL_ERRLEN];
    struct req *q = e->b_req[i];
    if (smol_sampler_sample_lp(q->smp, e->scs[thread], e->logits + (size_t)i * e->m->cfg.vocab, &e->b_ids[i], NULL,
                               err))
        e->b_host[i] = 0;       /* the serial path draws it again and reports the error in its words */
}

/* Streams token t, drawn for q's one row (no draft, no grammar) outside sample_and_emit: by the
 * backend (its sampler's history does not have it yet) or on the host's pool (smol_sampler_sample
 * recorded it); the rest is sample_and_emit's one-row step.  May finish (and free) q. */
static void emit_drawn(struct smol_engine *e, struct req *q, int32_t t, double now, int by_backend)
{
    char err[SMOL_ERRLEN];
    enum smol_err rc;
    if (by_backend && (rc = smol_sampler_accept(q->smp, &t, 1, true, err))) { fail_request(e, q, rc, err); return; }
    if (by_backend) e->n_backend_sampled++;
    else e->n_host_pooled++;
    if (q->think_open && t == smol_tokenizer_special(e->tok)->think_end) q->think_open = 0;  /* as sample_row */
    q->n_steps++;
    e->n_decode_steps++;
    if (q->lk) {
        if (!q->draft_pred && q->pred_first >= 0) smol_spec_ctl_shadow(&q->pctl, q->pred_match, q->pred_first, t);
        else if (q->draft_first >= 0) smol_spec_ctl_shadow(&q->ctl, q->draft_match, q->draft_first, t);
        if ((rc = smol_lookup_append(q->lk, &t, 1, err))) { fail_request(e, q, rc, err); return; }
    }
    q->n_draft = 0;
    memset(&q->cur_lp, 0, sizeof q->cur_lp);
    emit_token(e, q, t, now, q->seq->n_tokens);
}

/* n > 1: once choice 0 has prefilled the prompt, choices 1..n-1 start
 * from its KV (pages shared, copied on write), its logits row and their own
 * sampler (seed + i), and stream their tokens with their choice index.
 * A choice that cannot start fails the whole request. */
static void spawn_choices(struct smol_engine *e, struct req *q, float *logits, double now)
{
    struct smol_kv *kv = &e->m->kv;
    char err[SMOL_ERRLEN];
    enum smol_err rc = SMOL_OK;
    q->sib_pages = 0;
    for (int i = 1; i < q->r->n_choices && !rc; i++) {
        struct req *c = calloc(1, sizeof *c);
        struct smol_session *a = c ? smol_sessions_add(&e->sessions, q->r->tenant, "") : NULL;
        if (!a) { free(c); rc = smol_errf(err, SMOL_ENOMEM, "out of memory"); break; }
        a->busy = 1;
        c->r = q->r;
        q->r->refs++;
        c->e = e;
        c->anon = a;
        c->seq = &a->seq;
        c->state = RS_DECODE;
        c->choice = i;
        c->n_prompt = q->n_prompt;
        c->n_cached = q->n_prompt;
        c->max_gen = q->max_gen;
        c->tpl = q->tpl;
        c->thinking = q->thinking;
        c->stop_index = -1;
        c->t_admit = q->t_admit;
        c->t_first_step = q->t_first_step;
        c->t_prefill_done = now;
        smol_chat_buf_init(&c->content);
        smol_chat_buf_init(&c->rendered);
        struct smol_sampler_params sp = q->r->sp;
        sp.seed += (uint64_t)i;
        for (int k = 0; k < q->n_prompt && !rc; k++)
            if (tok_push(c, q->tok[k])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
        if (!rc) rc = smol_kv_seq_share(kv, &a->seq, q->seq, q->n_prompt, err);
        if (!rc && !(rc = smol_sampler_new(&c->smp, &sp, e->m->cfg.vocab, err)) &&
            !(rc = smol_sampler_set_logit_bias(c->smp, q->r->bias_id, q->r->bias, (size_t)q->r->n_bias, err)) &&
            !(rc = smol_sampler_accept(c->smp, c->tok, (size_t)c->n_prompt, false, err)))
            rc = smol_detok_init(&c->detok, (const char *const *)q->r->stops, (size_t)q->r->n_stops, err);
        if (!rc && q->r->grammar)
            rc = smol_grammar_matcher_new(&c->gm, smol_grammar_entry_grammar(q->r->grammar),
                                          smol_grammar_entry_index(q->r->grammar), err);
        if (rc) {
            smol_sessions_remove(&e->sessions, a);
            req_free(c);
            break;
        }
        /* its own matcher, at the start like q's: the mask q's row gets is the same */
        c->gm_active = c->gm && !c->thinking;
        c->think_open = c->thinking;
        c->think_budget = q->think_budget;
        smol_chat_parser_init(&c->parser, parser_start(e, q->r), on_parse, c);
        list_append(&e->running, c);
        e->n_running++;
        e->n_shared_choices++;
        sample_and_emit(e, c, logits, NULL, now);
    }
    if (rc) {
        for (struct req *o = e->running, *nx; o; o = nx) {
            nx = o->next;
            if (o != q && o->r == q->r) o->cancelled = 1;
        }
        q->cancelled = 1;
        smol_log_warn("request %llu: choices could not start: %s", (unsigned long long)q->r->id, err);
    }
}

static void step(struct smol_engine *e)
{
    const double now = smol_mono_s();
    struct smol_kv *kv = &e->m->kv;
    char err[SMOL_ERRLEN];

    for (struct req *q = e->running, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancelled) finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    }
    for (struct req *q = e->queue, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancelled) finish(e, q, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    }
    /* FIFO admission: the head waits for KV (or its file), the others wait behind it */
    e->waiting_read = 0;
    while (e->queue && e->n_running < e->cfg.max_running && !e->draining)
        if (try_admit(e, e->queue, now) == 0) break;

    const int V = e->m->cfg.vocab;
    int budget = e->cfg.step_tokens < e->m->s.max_tokens ? e->cfg.step_tokens : e->m->s.max_tokens;
    int n = 0, n_out = 0, spec_rows = e->spec_rows;
    for (struct req *q = e->running, *nx; q && n < budget; q = nx) {
        nx = q->next;
        if (q->state != RS_DECODE || q->paused) continue;
        int pos = q->seq->n_tokens;
        /* a draft: within the step's budget and spare rows, the request's
         * max_tokens and the context (positions pos + 1 .. pos + k) */
        int max = budget - n - 1;
        if (max > spec_rows) max = spec_rows;
        if (max > q->max_gen - q->n_gen - 1) max = q->max_gen - q->n_gen - 1;
        if (max > e->m->cfg.n_ctx - pos - 2) max = e->m->cfg.n_ctx - pos - 2;
        plan_draft(e, q, max, e->b_tok + n + 1);
        const int k = q->n_draft;
        if (smol_kv_seq_reserve(kv, q->seq, pos, pos + k + 1, err)) { q->n_draft = 0; fail_request(e, q, SMOL_EBUSY, err); continue; }
        spec_rows -= k;
        e->b_tok[n] = q->tok[q->n_tok - 1];
        for (int i = 0; i <= k; i++) {
            e->b_pos[n] = pos + i;
            e->b_seq[n] = q->seq;
            e->b_out[n_out] = n;
            e->b_req[n_out++] = q;
            n++;
        }
    }
    for (struct req *q = e->running, *nx; q && n < budget; q = nx) {
        nx = q->next;
        if (q->state != RS_PREFILL || q->paused) continue;
        int pos0 = q->seq->n_tokens, chunk = q->n_prompt - pos0;
        if (chunk > budget - n) chunk = budget - n;
        if (smol_kv_seq_reserve(kv, q->seq, pos0, pos0 + chunk, err)) { fail_request(e, q, SMOL_EBUSY, err); continue; }
        if (!q->t_first_step) q->t_first_step = now;
        e->n_prefilled += (uint64_t)chunk;
        for (int i = 0; i < chunk; i++) {
            e->b_tok[n] = q->tok[pos0 + i];
            e->b_pos[n] = pos0 + i;
            e->b_seq[n] = q->seq;
            n++;
        }
        if (pos0 + chunk == q->n_prompt) {
            e->b_out[n_out] = n - 1;
            e->b_req[n_out++] = q;
        }
    }
    if (n == 0) return;
    struct smol_batch b = {.n_tokens = n, .tokens = e->b_tok, .pos = e->b_pos, .seq = e->b_seq, .n_out = n_out,
                           .out_idx = e->b_out};
    /* out_idx must ascend: decode rows come first, prefill rows after */
    int n_rs = 0;
    for (int i = 0, rows; e->cfg.backend_sampling && i < n_out; i += rows) {
        struct req *q = e->b_req[i];
        rows = q->n_draft + 1;
        n_rs += (e->b_rs[i].on = backend_samples(q));
        if (e->b_rs[i].on) {
            const struct smol_sampler_params *sp = smol_sampler_get_params(q->smp);
            e->b_rs[i].temp = sp->temperature;
            e->b_rs[i].top_p = sp->top_p;
            e->b_rs[i].u = smol_sampler_uniform(q->smp);
        }
        for (int k = 1; k < rows; k++) e->b_rs[i + k].on = 0;
    }
    const double t0 = smol_mono_s();
    enum smol_err rc = smol_model_forward_sample(e->m, &b, e->logits, n_rs ? e->b_rs : NULL, e->b_ids, err);
    if (rc) {
        for (int i = 0, rows; i < n_out; i += rows) {
            rows = e->b_req[i]->n_draft + 1;
            fail_request(e, e->b_req[i], SMOL_EINTERNAL, err);
        }
        return;
    }
    const double t1 = smol_mono_s();
    /* the host's plain rows drawn on the pool, all together, before any emit (an emit may free
     * its request) */
    int n_host = 0;
    for (int i = 0, rows; e->spool && i < n_out; i += rows) {
        struct req *q = e->b_req[i];
        rows = q->n_draft + 1;
        e->b_host[i] = !(n_rs && e->b_rs[i].on) && host_samples(q) && !(q->state == RS_PREFILL && q->r->n_choices > 1);
        n_host += e->b_host[i];
        for (int k = 1; k < rows; k++) e->b_host[i + k] = 0;
    }
    if (n_host >= HOST_POOL_MIN_ROWS) smol_pool_run(e->spool, n_out, host_sample_task, e);
    else if (e->spool && n_out > 0) memset(e->b_host, 0, (size_t)n_out);
    for (int i = 0, rows; i < n_out; i += rows) {
        struct req *q = e->b_req[i];
        rows = q->n_draft + 1;              /* its draft's rows follow its first */
        if (q->state == RS_PREFILL) {
            q->state = RS_DECODE;
            q->t_prefill_done = t1;
            if (q->r->n_choices > 1) spawn_choices(e, q, e->logits + (size_t)i * V, t1);
        }
        if (n_rs && e->b_rs[i].on) emit_drawn(e, q, e->b_ids[i], t1, 1);
        else if (e->spool && e->b_host[i]) emit_drawn(e, q, e->b_ids[i], t1, 0);
        else sample_and_emit(e, q, e->logits + (size_t)i * V, e->b_tok + e->b_out[i] + 1, t1);
    }
    for (struct req *q = e->running; q; q = q->next)
        q->kv_promise = smol_kv_seq_pages_needed(kv, q->seq, q->seq->n_tokens, q->n_prompt + q->max_gen) +
                        (q->state == RS_PREFILL ? q->sib_pages : 0);
    e->n_steps++;
    e->n_step_tokens += (uint64_t)n;
    e->forward_s += t1 - t0;
    e->step_s += smol_mono_s() - now;
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
    q->e = e;
    q->state = RS_QUEUED;
    q->cancelled = r->cancelled;    /* cancelled while parked: finished by the next step */
    smol_chat_buf_init(&q->content);
    smol_chat_buf_init(&q->rendered);
    list_append(&e->queue, q);
    e->n_queued++;
}

/* Stops admitting; the queue is refused now, what runs is cancelled after grace_ms. */
static void drain(struct smol_engine *e, uint32_t grace_ms)
{
    e->draining = 1;
    e->drain_deadline = smol_mono_s() + grace_ms / 1e3;
    while (e->queue) {
        struct req *q = e->queue;
        reject(e, q, SMOL_ESHUTDOWN, "the daemon is shutting down");
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
    int drained_sent = 0, spilled_one = 0;
    double last_expire = smol_mono_s();
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        int runnable = e->n_queued > 0 && !e->waiting_read;
        for (struct req *q = e->running; q && !runnable; q = q->next) runnable = !q->paused || q->cancelled;
        zmq_pollitem_t it = {.socket = e->sock, .events = ZMQ_POLLIN};
        long timeout = runnable || spilled_one ? 0 : e->waiting_read ? 2 : e->n_running ? 10 : 1000;
        if (zmq_poll(&it, 1, timeout) < 0 && zmq_errno() == ETERM) break;
        while (handle_cmd(e)) {}
        double now = smol_mono_s();
        if (e->draining && now > e->drain_deadline)
            for (struct req *q = e->running; q; q = q->next) q->cancelled = 1;
        if (now - last_expire > 1.0) {
            smol_sessions_expire(&e->sessions, now, e->cfg.session_ttl_s);
            last_expire = now;
        }
        step(e);
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

/* The host-sampling pool: up to 8 threads where the machine has more than one CPU (cfg
 * sample_threads: 0 = that, 1 = none, every row serial). */
static enum smol_err host_pool_new(struct smol_engine *e, int T, char *err)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = e->cfg.sample_threads > 0 ? e->cfg.sample_threads : cpus > 8 ? 8 : (int)cpus;
    if (n <= 1) return SMOL_OK;
    enum smol_err rc = smol_pool_new(&e->spool, n, err);
    if (rc) return rc;
    e->scs = calloc((size_t)n, sizeof *e->scs);
    e->b_host = calloc((size_t)T, 1);
    if (!e->scs || !e->b_host) return smol_errf(err, SMOL_ENOMEM, "engine: out of memory");
    for (int i = 0; i < n; i++)
        if ((rc = smol_sampler_scratch_new(&e->scs[i], e->m->cfg.vocab, err))) return rc;
    return SMOL_OK;
}

static void engine_free(struct smol_engine *e)
{
    while (e->running) { struct req *q = e->running; e->running = q->next; req_free(q); }
    while (e->queue) { struct req *q = e->queue; e->queue = q->next; req_free(q); }
    smol_sessions_deinit(&e->sessions);
    smol_sampler_scratch_free(&e->sc);
    for (int i = 0; e->scs && e->spool && i < smol_pool_threads(e->spool); i++) smol_sampler_scratch_free(&e->scs[i]);
    free(e->scs);
    smol_pool_free(&e->spool);
    free(e->b_host);
    if (e->sock) zmq_close(e->sock);
    free(e->b_tok); free(e->b_pos); free(e->b_out); free(e->gmask); free(e->b_seq); free(e->b_req); free(e->b_rs); free(e->b_ids); free(e->logits); free(e->pack);
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
    if (!rc) rc = host_pool_new(e, T, err);
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
