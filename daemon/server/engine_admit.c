/*
 * engine_admit.c - admission: a queued request becomes a running one.  Its
 * session looked up (tenant and id; read back from the spill directory), its
 * prompt rendered and tokenized, the limits checked, the prefix to reuse
 * found (its tenant's own), KV room made, and what generation needs set up
 * (sampler, grammar matcher, speculation, output parser); and, for n > 1,
 * the other choices started on the first one's prefilled prompt.  Which
 * queued request is tried next is engine_fair.c's (class, tenant's share,
 * arrival).
 */
#include "daemon/server/engine_internal.h"
#include "daemon/model/model.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/server/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        if (smol_engine_tok_push(q, ids.v[i])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
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
            if (smol_engine_tok_push(q, r->ids[i])) return smol_errf(err, SMOL_ENOMEM, "out of memory");
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
            if (smol_engine_tok_push(q, s->tokens[i])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
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
    /* a shared spill directory: the turn holds the session's lease, which
     * the session takes over at commit (given back if the request waits or
     * is refused before) */
    int leased;
    char tenant[SMOL_RULE_TENANT_MAX + 1], session[SMOL_SESSION_ID_MAX + 1];
};

/* Each step returns 1 (go on), 0 (q must wait: it stays queued) or -1
 * (refused: error sent, q freed). */

/* Step 1: the request's session, in memory or read back from the spill
 * directory (its file is read on the spill's thread first: the queue waits). */
static int admit_lookup(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    struct smol_request *r = q->r;
    if (!r->session[0]) return 1;
    if (smol_sessions_shared(&e->sessions)) {
        /* one node at a time: its lease first (a copy in memory that
         * another node has written past since is dropped: the file is read) */
        if (now < q->lease_ask_at) {    /* held elsewhere a moment ago */
            e->waiting_read = 1;
            q->waits_alone = 1;
            return 0;
        }
        /* (kept from the last try, which waited for the file: held) */
        const int lr = q->lease_kept ? SMOL_LEASE_HELD : smol_sessions_lease_async(&e->sessions, r->tenant, r->session);
        q->lease_kept = 0;
        if (lr == SMOL_LEASE_PENDING && now - r->t_received <= e->cfg.queue_timeout_s) {
            e->waiting_read = 1;    /* asked on the spill's lease thread: the answer next time */
            q->waits_alone = 1;
            return 0;
        }
        if (lr == SMOL_LEASE_ELSEWHERE && now - r->t_received <= e->cfg.queue_timeout_s) {
            e->waiting_read = 1;    /* its turn there ends soon: asked again, 2 ms doubling to 50 ms later */
            q->waits_alone = 1;
            q->lease_wait = q->lease_wait > 0 ? (q->lease_wait * 2 < 0.05 ? q->lease_wait * 2 : 0.05) : 0.002;
            q->lease_ask_at = now + q->lease_wait;
            return 0;
        }
        if (lr != SMOL_LEASE_HELD && lr != SMOL_LEASE_CHANGED) {
            char msg[SMOL_ERRLEN + 64];
            snprintf(msg, sizeof msg, "session '%s' %s", r->session,
                     lr == SMOL_LEASE_ELSEWHERE || lr == SMOL_LEASE_PENDING
                         ? "is held by another node (kv_spill_shared)"
                         : "cannot be locked in kv_spill_dir (kv_spill_shared)");
            smol_engine_reject(e, q, lr == SMOL_LEASE_ERROR ? SMOL_EIO : SMOL_EBUSY, msg);
            return -1;
        }
        a->leased = 1;
        snprintf(a->tenant, sizeof a->tenant, "%s", r->tenant);
        snprintf(a->session, sizeof a->session, "%s", r->session);
    }
    a->s = smol_sessions_find(&e->sessions, r->tenant, r->session);
    if (!a->s && !smol_sessions_prefetch(&e->sessions, r->tenant, r->session)) {
        e->waiting_read = 1;
        q->waits_alone = 1;
        return 0;
    }
    int reading = 0;
    if (!a->s)
        a->s = smol_sessions_restore(&e->sessions, r->tenant, r->session, e->cfg.max_sessions,
                                     e->cfg.max_sessions_per_key, now, &reading);
    if (!a->s && reading) { /* its read-ahead went (or never came): asked again; it waits alone */
        e->waiting_read = 1;
        q->waits_alone = 1;
        return 0;
    }
    if (!a->s && r->append && !r->create_session) {
        /* appending to a conversation the daemon does not hold (never made,
         * deleted, evicted without a file, or another tenant's: the same
         * answer) would silently start an empty one */
        char msg[SMOL_UNKNOWN_SESSION_MSG];
        e->n_unknown_session++;
        smol_engine_reject(e, q, SMOL_ENOSESSION, smol_unknown_session_msg(msg, r->session));
        return -1;
    }
    if (a->s && a->s->busy) {
        char msg[SMOL_ERRLEN + 64];
        snprintf(msg, sizeof msg, "session '%s' already has a request in progress", r->session);
        smol_engine_reject(e, q, SMOL_EBUSY, msg);
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
    if (rc) { smol_engine_reject(e, q, rc, err); return -1; }
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
    } else if (e->n_running - e->n_preempted + r->n_choices > e->cfg.max_running) {
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
        smol_engine_reject(e, q, code, msg);
        return -1;
    }
    a->n_prompt = n_prompt;
    a->max_gen = r->max_tokens ? r->max_tokens : e->cfg.default_max_tokens;
    if (a->max_gen > n_ctx - n_prompt) a->max_gen = n_ctx - n_prompt;
    if (a->max_gen > budget - n_prompt) a->max_gen = budget - n_prompt;
    return 1;
}

/* q's first n_prompt prompt tokens and then its replayed ones (q->resume), one array to match
 * against cached prefixes; NULL without memory (or nothing to replay). */
static int32_t *with_resume(const struct req *q, int n_prompt)
{
    int32_t *all = q->n_resume > 0 ? malloc((size_t)(n_prompt + q->n_resume) * sizeof *all) : NULL;
    if (all) {
        memcpy(all, q->tok, (size_t)n_prompt * sizeof *all);
        memcpy(all + n_prompt, q->resume, (size_t)q->n_resume * sizeof *all);
    }
    return all;
}

/* A resumed n > 1 request every choice of which replays tokens: no choice
 * samples from the prompt's last logits, so its prompt may come from the
 * cache whole and its choices start at admission (smol_engine_try_admit). */
static int all_choices_resumed(const struct req *q)
{
    const int *counts = q->r->resume_counts;
    if (!counts || q->r->n_choices <= 1) return 0;
    for (int i = 0; i < q->r->n_choices; i++)
        if (counts[i] <= 0) return 0;
    return 1;
}

/* Step 4: the prefix to reuse (found before anything changes, so that the
 * request can still wait): the session's own history, else the longest
 * cached prefix, in memory or (a page or more longer) on disk, read back
 * on the spill's thread first like a session's file.  A resumed request
 * without a session (n <= 1) matches its prompt and the tokens it replays
 * after it: a run of the same request that ended there (a gateway's
 * make-before-break warm-up, gateway/daemon.c) leaves their KV, and only
 * the tokens past it are prefilled.  The last token is prefilled for its
 * logits, but for a resumed n > 1 request whose choices all replay tokens
 * (all_choices_resumed): its whole prompt may be cached. */
static int admit_prefix(struct smol_engine *e, struct req *q, double now, struct admit *a)
{
    int n = a->n_prompt;
    if (a->s) {
        int have = a->s->seq.n_tokens < a->s->n_tokens ? a->s->seq.n_tokens : a->s->n_tokens;
        a->lcp = smol_lcp(a->s->tokens, have, q->tok, n);
    } else {
        const char *tenant = q->r->tenant;   /* only its own prefixes */
        int32_t *all = with_resume(q, n);      /* (without memory: the prompt alone) */
        const int32_t *toks = all ? all : q->tok;
        if (all) n += q->n_resume;
        a->src = smol_sessions_best_prefix(&e->sessions, tenant, toks, n, &a->lcp);
        if (!smol_sessions_read_prefix(&e->sessions, tenant, toks, n, a->lcp, now)) {
            free(all);
            e->waiting_read = 1;
            q->waits_alone = 1;
            return 0;
        }
        /* again: what was read back, and making room for it may have evicted src */
        a->src = smol_sessions_best_prefix(&e->sessions, tenant, toks, n, &a->lcp);
        free(all);
    }
    const int keep = !a->s && all_choices_resumed(q) ? n : n - 1;
    if (a->lcp > keep) a->lcp = keep;     /* the last token prefilled is computed for its logits */
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
    while (kv->n_free < want && smol_engine_evict_heaviest(e)) {}   /* the heaviest tenant's first */
    if (a->s) a->s->busy = 0;
    if (a->src) a->src->busy = 0;
    if (kv->n_free >= want) return 1;
    if (e->n_running > 0 && now - q->r->t_received <= e->cfg.queue_timeout_s) return 0;
    char msg[SMOL_ERRLEN + 64];
    snprintf(msg, sizeof msg, "KV cache busy: request needs %d pages of %d tokens, %d free of %d", a->need,
             SMOL_KV_PAGE, kv->n_free - (want - a->need), kv->n_pages);
    smol_engine_reject(e, q, SMOL_EBUSY, msg);
    return -1;
}

/* The date frozen into a new session or cached prefix (the recorded
 * conversation, smol_engine_finish, is rendered with it). */
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
    if (room) { smol_engine_reject(e, q, SMOL_EBUSY, "too many sessions"); return NULL; }
    struct smol_session *s = smol_sessions_add(&e->sessions, q->r->tenant, q->r->session);
    if (!s) { smol_engine_reject(e, q, SMOL_ENOMEM, "out of memory"); return NULL; }
    set_date(s, q->r);
    start_from_prefix(e, s, a, now);
    return s;
}

/* A request without a session writes into an anonymous entry of its own
 * (which becomes a cached prefix when it ends); -1: refused. */
static int new_anon(struct smol_engine *e, struct req *q, struct admit *a, double now)
{
    struct smol_session *x = smol_sessions_add(&e->sessions, q->r->tenant, "");
    if (!x) { smol_engine_reject(e, q, SMOL_ENOMEM, "out of memory"); return -1; }
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
        if (a->leased) smol_sessions_attach_lease(&e->sessions, a->s);
        a->leased = 0;
        q->sess = a->s;
        q->seq = &a->s->seq;
    } else if (new_anon(e, q, a, now)) {
        return -1;
    }
    q->n_prompt = a->n_prompt;
    q->n_cached = a->lcp < a->n_prompt ? a->lcp : a->n_prompt;   /* (of the prompt; replayed ones too) */
    q->n_resume_cached = a->lcp > a->n_prompt ? a->lcp - a->n_prompt : 0;
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
        smol_engine_reject(e, q, rc, err);
        return -1;
    }
    q->gm_active = q->gm && !q->thinking;   /* thinking: constrained from </think> on */
    q->think_open = q->thinking;
    q->think_budget = r->thinking_budget ? r->thinking_budget : e->cfg.default_thinking_budget;
    q->sg.m = q->gm;
    if ((rc = smol_engine_start_speculation(e, q, err))) {
        smol_engine_reject(e, q, rc, err);
        return -1;
    }
    smol_chat_parser_init(&q->parser, parser_start(e, r), smol_engine_on_parse, q);
    return 1;
}

/* Admits the queue's head when it can run now: 1 admitted (Started sent),
 * 0 must wait, -1 refused (error sent, q freed).  A request that waits
 * returns before commit, so it leaves nothing of its own half done: the
 * steps before only look up, read back from disk or evict idle entries,
 * and its prompt stays built (admit_prompt). */
int smol_engine_try_admit(struct smol_engine *e, struct req *q, double now)
{
    struct admit a = {0};
    int rc;
    q->waits_alone = 0;
    if (q->r->grammar && !smol_grammar_entry_index(q->r->grammar)) {  /* the RPC thread submits only built ones */
        smol_engine_reject(e, q, SMOL_EINTERNAL, "structured output: the grammar's index is not built");
        return -1;
    }
    if ((rc = admit_lookup(e, q, now, &a)) <= 0 || (rc = admit_prompt(e, q, &a)) <= 0 ||
        (rc = admit_checks(e, q, &a)) <= 0 || (rc = admit_prefix(e, q, now, &a)) <= 0 ||
        (rc = admit_kv(e, q, now, &a)) <= 0 || (rc = admit_commit(e, q, now, &a)) <= 0 ||
        (rc = admit_start(e, q)) <= 0) {
        /* waiting for its file (read on the spill's writer thread): the
         * lease stays with the request, not given back and asked again
         * (a round trip each on a slow file server); else given back */
        if (a.leased && rc == 0 && q->waits_alone) q->lease_kept = 1;
        else if (a.leased) smol_sessions_unlease(&e->sessions, a.tenant, a.session);
        return rc;
    }
    smol_engine_list_remove(&e->queue, q);
    e->n_queued--;
    smol_engine_list_append(&e->running, q);
    e->n_running++;
    q->state = RS_PREFILL;
    if (q->sess && q->sess->restored_kv) {  /* a session just read back: reported once */
        a.restored = q->n_cached < q->sess->restored_kv ? q->n_cached : q->sess->restored_kv;
        q->sess->restored_kv = 0;
    }
    if (smol_engine_send_started(e, q, a.restored)) smol_engine_lose(q);
    if (all_choices_resumed(q) && q->seq->n_tokens == q->n_prompt) {
        /* its prompt all cached (a gateway's move after its warm-ups): the choices start now, each
         * on its own cached tokens, and the first step prefills what each replays past them: one
         * step, where prefilling the prompt's last token for logits none samples took another */
        q->spawned = 1;
        smol_engine_spawn_choices(e, q, NULL, now);
    }
    return 1;
}

/* Resumed n > 1: choice c, its prompt's KV in place, takes instead the
 * longest cached prefix of its prompt and its own tokens to replay where
 * one covers more than the prompt (a run of that choice alone that ended
 * there: a gateway's make-before-break warm-up, gateway/daemon.c), as
 * admit_prefix does for n = 1: only the tokens past it are prefilled.  The
 * KV is the same either way (prefill = decode); 0, or an error (c's KV
 * dropped: the request fails). */
static enum smol_err resume_from_cache(struct smol_engine *e, struct req *c, double now, char *err)
{
    if (c->sess || c->n_resume <= 0) return SMOL_OK;
    const int n = c->n_prompt + c->n_resume;
    int32_t *all = with_resume(c, c->n_prompt);
    if (!all) return SMOL_OK;               /* (without memory: the prompt's KV alone) */
    int lcp = 0;
    struct smol_session *src = smol_sessions_best_prefix(&e->sessions, c->r->tenant, all, n, &lcp);
    free(all);
    if (lcp > n - 1) lcp = n - 1;           /* the last token prefilled is computed for its logits */
    if (!src || lcp <= c->n_prompt) return SMOL_OK;
    smol_kv_seq_truncate(&e->m->kv, c->seq, 0);
    enum smol_err rc = smol_kv_seq_share(&e->m->kv, c->seq, &src->seq, lcp, err);
    if (rc) return rc;
    smol_sessions_touch(&e->sessions, src, now);
    c->n_resume_cached = lcp - c->n_prompt;
    e->n_cached_tokens += (uint64_t)c->n_resume_cached;
    return SMOL_OK;
}

/* n > 1: once choice 0 has prefilled the prompt, choices 1..n-1 start
 * from its KV (pages shared, copied on write), its logits row and their own
 * sampler (seed + i), and stream their tokens with their choice index.
 * A choice that cannot start fails the whole request.  Resumed
 * (resume_counts): a choice with tokens to replay, choice 0 included, goes
 * back to RS_PREFILL for them on the shared prompt's KV (or on a cached
 * prefix of the prompt and them: resume_from_cache), then replays them
 * (take_rows) and continues; one without starts from the logits row.
 * logits NULL: at admission, every choice replaying tokens and the prompt's
 * KV all cached (smol_engine_try_admit): no row is needed. */
void smol_engine_spawn_choices(struct smol_engine *e, struct req *q, float *logits, double now)
{
    struct smol_kv *kv = &e->m->kv;
    char err[SMOL_ERRLEN];
    enum smol_err rc = SMOL_OK;
    q->sib_pages = 0;
    const int *counts = q->r->resume_counts;    /* resumed: each choice's tokens, one after the other */
    int off = counts ? counts[0] : 0;
    for (int i = 1; i < q->r->n_choices && !rc; i++) {
        struct req *c = calloc(1, sizeof *c);
        struct smol_session *a = c ? smol_sessions_add(&e->sessions, q->r->tenant, "") : NULL;
        if (!a) { free(c); rc = smol_errf(err, SMOL_ENOMEM, "out of memory"); break; }
        a->busy = 1;
        c->r = q->r;
        q->r->refs++;
        c->e = e;
        c->acct = q->acct;
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
            if (smol_engine_tok_push(c, q->tok[k])) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
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
            smol_engine_req_free(c);
            break;
        }
        /* its own matcher, at the start like q's: the mask q's row gets is the same */
        c->gm_active = c->gm && !c->thinking;
        c->think_open = c->thinking;
        c->think_budget = q->think_budget;
        smol_chat_parser_init(&c->parser, parser_start(e, q->r), smol_engine_on_parse, c);
        smol_engine_list_append(&e->running, c);
        e->n_running++;
        e->n_shared_choices++;
        if (counts && counts[i] > 0) {  /* resumed: its own tokens are prefilled after the prompt first */
            c->resume = q->r->resume + off;
            c->n_resume = counts[i];
            off += counts[i];
            c->state = RS_PREFILL;
            rc = resume_from_cache(e, c, now, err);
            continue;
        }
        smol_engine_sample_and_emit(e, c, logits, NULL, now);
    }
    if (!rc && counts && counts[0] > 0) {   /* and so are choice 0's */
        q->resume = q->r->resume;
        q->n_resume = counts[0];
        q->state = RS_PREFILL;
        rc = resume_from_cache(e, q, now, err);
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
