/*
 * engine_draft.c - speculative decoding's drafting: a request's prompt
 * lookup (n-gram index of its history) and Predicted Outputs (the
 * prediction's tokens), each with its draft-length controller; before each
 * step the draft a request's rows will verify (engine_sample.c verifies).
 */
#include "daemon/server/engine_internal.h"
#include "daemon/model/model.h"

#include <stdlib.h>
#include <string.h>

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
enum smol_err smol_engine_start_speculation(struct smol_engine *e, struct req *q, char *err)
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
void smol_engine_plan_draft(struct smol_engine *e, struct req *q, int max, int32_t *draft)
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
