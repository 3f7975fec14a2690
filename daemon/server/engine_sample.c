/*
 * engine_sample.c - the engine's sampling policy: how a request's next
 * token is drawn from its row of logits.  The structured-output grammar
 * (the mask, the shortest completion forced within the length limit), the
 * thinking budget (<think> opened, </think> forced), speculative
 * verification of a draft row by row, and the two batch paths besides the
 * serial one: rows the backend samples on its device (backend_sampling)
 * and rows the host draws on its thread pool, all of a step's together.
 * The scheduler (engine.c) calls it for each out row of a step.
 */
#include "daemon/server/engine_internal.h"
#include "daemon/model/model.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/server/log.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

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

/* Tokens kept beyond a pending grammar's shortest completion when thinking is
 * closed early for it (room for the newline after </think> and a little
 * slack before the shortest path is forced). */
#define SMOL_THINK_GRAMMAR_MARGIN 4

/* Samples one token of q from row i of its step (logits ours to modify):
 * the grammar applied, then advanced; *lp filled when the request asks for
 * logprobs.  Within the tokens max_tokens and the context still allow (row
 * i is the i-th of them), a token after which the grammar could not end in
 * time is drawn again among those that begin its shortest completion, so a
 * constrained output cut by length is still complete. */
enum smol_err smol_engine_sample_row(struct smol_engine *e, struct req *q, int i, float *logits, int32_t *t,
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

/* Resume (GenerateRequest.resume_tokens): the tokens a previous run of the request streamed,
 * whose KV its prefill just computed after the prompt, taken as sample_row and sample_and_emit
 * would have taken them had they been drawn one a step: one RNG draw each (none when greedy),
 * the penalties' history, the grammar, the thinking state, speculation's lookup; emit_token
 * sends nothing for them (emit_text).  The token after them is then drawn from the prefill's
 * last row as the first run drew it.  (Not reproduced: a seeded token the grammar drew twice
 * near the length limit, its first draw unknown here.)  0 when q ended (and was freed). */
int smol_engine_replay(struct smol_engine *e, struct req *q, double now)
{
    char err[SMOL_ERRLEN];
    enum smol_err rc = SMOL_OK;
    const int32_t think_end = smol_tokenizer_special(e->tok)->think_end;
    for (int g = 0; g < q->n_resume; g++) {
        const int32_t t = q->resume[g];
        if (q->gm_active && !smol_grammar_matcher_is_done(q->gm) && (rc = smol_grammar_matcher_accept_token(q->gm, t))) {
            smol_engine_fail(e, q, rc == SMOL_ENOMEM ? SMOL_ENOMEM : SMOL_EINVAL,
                             rc == SMOL_ENOMEM ? "structured output: out of memory"
                                               : "resume_tokens: a token the grammar does not allow there");
            return 0;
        }
        if ((rc = smol_sampler_accept(q->smp, &t, 1, true, err)) ||
            (q->lk && (rc = smol_lookup_append(q->lk, &t, 1, err)))) {
            smol_engine_fail(e, q, rc, err);
            return 0;
        }
        smol_sampler_skip(q->smp, 1);
        if (q->think_open && t == think_end) q->think_open = 0;
        if (q->gm && !q->gm_active && t == think_end) q->gm_active = 1;
        memset(&q->cur_lp, 0, sizeof q->cur_lp);
        if (!smol_engine_emit_token(e, q, t, now, q->n_prompt + g)) return 0;
    }
    return 1;
}

static enum smol_err spec_sample(void *ctx, int i, float *row, int32_t *t, char *err)
{
    struct spec_ctx *c = ctx;
    return smol_engine_sample_row(c->e, c->q, i, row, t, &c->lps[i], err);
}

/* Samples q's next tokens from its rows of logits (e->logits, ours to
 * modify): one row, or the q->n_draft + 1 rows verifying its draft
 * (drafts: the batch tokens after q's last one), then streams them.  The
 * KV of rejected draft positions is dropped.  May finish (and free) q. */
void smol_engine_sample_and_emit(struct smol_engine *e, struct req *q, float *logits, const int32_t *drafts, double now)
{
    char err[SMOL_ERRLEN];
    int32_t got[SMOL_SPEC_MAX_DRAFT + 1];
    struct smol_sampler_logprobs lps[SMOL_SPEC_MAX_DRAFT + 1];
    int n_got = 0, n_acc = 0;
    const int k = q->n_draft, kv_len = q->seq->n_tokens - k;
    struct spec_ctx c = {e, q, lps};
    enum smol_err rc = smol_spec_verify(logits, e->m->cfg.vocab, drafts, k, spec_sample, &c, got, &n_got, &n_acc, err);
    if (rc) { smol_engine_fail(e, q, rc, err); return; }
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
        if ((rc = smol_lookup_append(q->lk, got, n_got, err))) { smol_engine_fail(e, q, rc, err); return; }
    }
    q->n_draft = 0;
    for (int i = 0; i < n_got; i++) {
        q->cur_lp = lps[i];
        if (!smol_engine_emit_token(e, q, got[i], now, kv_len + i)) return;
    }
}

/* backend_sampling: whether q's next token can be drawn by the backend's batch sampler
 * (temperature and top_p only: nothing that needs the logits on the host; not while a
 * thinking budget may force </think>). */
static int backend_samples(const struct req *q)
{
    const struct smol_request *r = q->r;
    return !q->gm && q->n_draft == 0 && r->n_choices <= 1 && !r->logprobs && q->n_gen >= q->n_resume &&
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
    return !q->gm && q->n_draft == 0 && r->n_choices <= 1 && !r->logprobs && q->n_gen >= q->n_resume &&
           !(q->think_open && q->think_budget > 0);
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
void smol_engine_emit_drawn(struct smol_engine *e, struct req *q, int32_t t, double now, int by_backend)
{
    char err[SMOL_ERRLEN];
    enum smol_err rc;
    if (by_backend && (rc = smol_sampler_accept(q->smp, &t, 1, true, err))) { smol_engine_fail(e, q, rc, err); return; }
    if (by_backend) e->n_backend_sampled++;
    else e->n_host_pooled++;
    if (q->think_open && t == smol_tokenizer_special(e->tok)->think_end) q->think_open = 0;  /* as sample_row */
    q->n_steps++;
    e->n_decode_steps++;
    if (q->lk) {
        if (!q->draft_pred && q->pred_first >= 0) smol_spec_ctl_shadow(&q->pctl, q->pred_match, q->pred_first, t);
        else if (q->draft_first >= 0) smol_spec_ctl_shadow(&q->ctl, q->draft_match, q->draft_first, t);
        if ((rc = smol_lookup_append(q->lk, &t, 1, err))) { smol_engine_fail(e, q, rc, err); return; }
    }
    q->n_draft = 0;
    memset(&q->cur_lp, 0, sizeof q->cur_lp);
    smol_engine_emit_token(e, q, t, now, q->seq->n_tokens);
}

/* The host-sampling pool: up to 8 threads where the machine has more than one CPU (cfg
 * sample_threads: 0 = that, 1 = none, every row serial). */
enum smol_err smol_engine_host_pool_new(struct smol_engine *e, int T, char *err)
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

/* backend_sampling: marks the out rows [0, n_out) the backend draws (e->b_rs, with each
 * one's temperature, top_p and uniform draw); returns how many. */
int smol_engine_backend_rows(struct smol_engine *e, int n_out)
{
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
    return n_rs;
}

/* The host's plain rows (e->b_host: those the backend did not draw, n_rs > 0) drawn on the
 * pool, all together, before any emit (an emit may free its request); a row that stays 0
 * is sampled serially. */
void smol_engine_host_rows(struct smol_engine *e, int n_out, int n_rs)
{
    if (!e->spool) return;
    int n_host = 0;
    for (int i = 0, rows; i < n_out; i += rows) {
        struct req *q = e->b_req[i];
        rows = q->n_draft + 1;
        e->b_host[i] = !(n_rs && e->b_rs[i].on) && host_samples(q) && !(q->state == RS_PREFILL && q->r->n_choices > 1);
        n_host += e->b_host[i];
        for (int k = 1; k < rows; k++) e->b_host[i + k] = 0;
    }
    if (n_host >= HOST_POOL_MIN_ROWS) smol_pool_run(e->spool, n_out, host_sample_task, e);
    else if (n_out > 0) memset(e->b_host, 0, (size_t)n_out);
}
