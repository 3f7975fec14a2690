/*
 * spec.h - speculative decoding by prompt lookup: an n-gram index over a
 * sequence's token history that drafts the tokens likely to come next, a
 * controller that sizes each draft from the recent acceptance, and the
 * verification of a draft against the model's rows of logits.
 *
 * Drafting (smol_lookup): the last n tokens of the history (n = 3, then 2,
 * then 1: the longest that occurred before) are looked up in a hash index
 * of every earlier n-gram; among the earlier occurrences (the 8 most recent
 * of that n-gram) the one whose preceding tokens match the history's
 * furthest back wins (ties: the most recent), and the tokens that followed
 * it are the draft.  A continuation that runs into the end of the history
 * repeats with the match's period (as an LZ77 copy).  The index is updated
 * incrementally, one hash insertion per order and token: a lookup costs O(1)
 * whatever the history's length (64K tokens included).
 *
 * Draft length (smol_spec_ctl): the evidence for a draft is its match
 * length m, the tokens ending the history that agree with what the draft
 * copies (a 1-token match of a common word is a guess; a quote followed
 * for 20 tokens is likely to go on).  Per class of m (1, 2, 3, 4-5, 6-8,
 * 9-15, 16-31, 32+) an exponential moving average r(m) of how often a
 * drafted token is accepted (a run of accepted tokens then the first
 * rejected one; tokens after it tell nothing): drafted token i is observed
 * in the class of m + i, as the match has grown by then; classes not seen
 * yet start from priors that rise with m.  A draft of k costs cost[k]
 * of a one-token step (measured) and yields 1 + sum_j prod_(i<j) r(m + i)
 * tokens; the controller picks the k in [0, k_max] that maximises the
 * ratio (k = 0 when drafting does not pay).  A stream that is not drafting
 * still looks up what it would have drafted and compares its first token
 * with the token that came (smol_spec_ctl_shadow): r follows the stream at no cost, so drafting
 * resumes when the output starts to copy its context.
 *
 * Verification (smol_spec_verify): row i of the logits is the model's
 * prediction after draft[0, i); it is sampled as plain decoding samples
 * (the caller's function), and draft[i] is accepted when it is the token
 * drawn; the first rejection ends the step with the token drawn there, and
 * if all are accepted, the last row gives one more token.  The output
 * (greedy, and seeded sampling too) is exactly that of decoding without
 * speculation, its distribution the model's.
 *
 * Constrained decoding: a draft filter ("may this token follow the draft so
 * far?") cuts the draft at the first token a grammar would not allow, so a
 * constrained request drafts only tokens its mask allows.
 *
 * Not thread-safe: one per sequence, used by the thread that decodes it.
 */
#ifndef SMOL_SPEC_H
#define SMOL_SPEC_H

#include <stdint.h>
#include "daemon/model/error.h"

struct smol_model;

#define SMOL_SPEC_MAX_DRAFT 7       /* k_max cap: a verify step of 8 positions streams the weights once */
#define SMOL_LOOKUP_MAX_ORDER 3     /* longest n-gram looked up */
#define SMOL_LOOKUP_MAX_VOCAB (1 << 20)
#define SMOL_SPEC_CLASSES 8         /* classes of match length the controller learns apart */

/* May token tok follow draft[0, i) (the tokens already drafted after the
 * history)?  Nonzero: yes.  The draft ends before the first token refused. */
typedef int (*smol_draft_filter_fn)(void *ctx, const int32_t *draft, int i, int32_t tok);

struct smol_lookup;

/* An empty index; SMOL_EINVAL if n_vocab is outside [1, SMOL_LOOKUP_MAX_VOCAB]. */
enum smol_err smol_lookup_new(struct smol_lookup **out, int32_t n_vocab, char *err);
void smol_lookup_free(struct smol_lookup **lk);
/* Forgets the history. */
void smol_lookup_reset(struct smol_lookup *lk);
/* Appends tokens to the history (SMOL_EINVAL for a token outside the
 * vocabulary, nothing appended then; SMOL_ENOMEM). */
enum smol_err smol_lookup_append(struct smol_lookup *lk, const int32_t *toks, int n, char *err);
/* Drops the history's tokens from position n on (n <= length). */
void smol_lookup_truncate(struct smol_lookup *lk, int n);
int smol_lookup_length(const struct smol_lookup *lk);

/* Up to k tokens predicted to follow the history, into draft[0, k); returns
 * how many (0: no earlier occurrence of the last token).  *order (may be
 * NULL) receives the length of the n-gram matched (1..3), 0 if none.
 * filter (may be NULL) can cut the draft short. */
int smol_lookup_draft(const struct smol_lookup *lk, int k, int32_t *draft, int *order,
                      smol_draft_filter_fn filter, void *filter_ctx);

/* Drafting for an output that copies and edits its context (code being
 * edited, a document being quoted): as smol_lookup_draft, and besides, a
 * tracker follows the tokens appended since the last call.  Once an n-gram
 * draft's first token comes, the output is taken to copy from there; while
 * it does, the draft is the source from that point on, whatever the n-gram
 * index's ranking.  When the output departs from the source, the copy
 * resumes where its latest 2 tokens occur again within 16 source tokens of
 * the departure, and the edit is learned: the source tokens skipped (1..8)
 * and the ones written instead (1..8) become a substitution applied to the
 * rest of the copy (a renamed identifier is drafted renamed at its next
 * occurrences); a substitution the output does not follow is forgotten.
 * Nothing is tracked across more than 64 tokens appended at once (a prompt).
 * *match (may be NULL) receives the draft's evidence for smol_spec_ctl:
 * for an n-gram draft its match length (the n-gram and the tokens before
 * it that agree, up to 64), for a draft from the copy the tokens the output
 * has followed the copy for (since it started, or resumed after an edit;
 * learned substitutions count as followed), 0 if no draft. */
int smol_lookup_draft_edit(struct smol_lookup *lk, int k, int32_t *draft, int *match,
                           smol_draft_filter_fn filter, void *filter_ctx);

struct smol_spec_ctl {
    int k_max;                      /* 0: speculation off; at most SMOL_SPEC_MAX_DRAFT */
    float cost[SMOL_SPEC_MAX_DRAFT + 1]; /* a step of k + 1 positions relative to a 1-token step */
    float rate[SMOL_SPEC_CLASSES];  /* EMA of acceptance per drafted token, per class of match length */
};

/* k_max (clamped to [0, SMOL_SPEC_MAX_DRAFT]), the step costs (cost[0..k_max],
 * cost[0] = 1; NULL: 1 + 0.06 k, the CPU's batched kernels streaming a 3B's
 * weights once for up to 8 positions) and initial rates that let a fresh
 * stream try short drafts, rising with the match length. */
void smol_spec_ctl_init(struct smol_spec_ctl *c, int k_max, const float *cost);
/* Draft length worth verifying for a draft with a match of `match` tokens (0: none). */
int smol_spec_ctl_k(const struct smol_spec_ctl *c, int match);
/* After a verification: `drafted` tokens of a draft with a match of
 * `match` were proposed, the first `accepted` of them were accepted. */
void smol_spec_ctl_update(struct smol_spec_ctl *c, int match, int drafted, int accepted);
/* A step without a draft: the lookup would have proposed `predicted` (with
 * a match of `match`) and `actual` came. */
void smol_spec_ctl_shadow(struct smol_spec_ctl *c, int match, int32_t predicted, int32_t actual);

/* Measures cost[k] for k = 0..k_max on m: the best of `reps` steps of
 * k + 1 positions of a scratch sequence (after 64 tokens of context),
 * relative to a 1-token step; cost[0] = 1, and costs never decrease with k.
 * Needs KV room for 64 + k_max + 1 positions. */
enum smol_err smol_spec_calibrate(struct smol_model *m, int k_max, int reps, float *cost, char *err);

/* Samples the token of row i of a verification (row: after the history
 * and draft[0, i), the caller's to modify: a grammar's mask) exactly as
 * decoding without speculation samples a token, into *token.  The caller
 * records what it needs (logprobs, the grammar's advance) per row. */
typedef enum smol_err (*smol_spec_sample_fn)(void *ctx, int i, float *row, int32_t *token, char *err);

/* Verifies draft[0, n_draft) against n_draft + 1 rows of logits (row i:
 * after the history and draft[0, i); rows n_vocab floats apart): row i is
 * sampled by sample(ctx, i, ...), and draft[i] is accepted when it is the
 * token drawn.  That is the speculative sampling rule for a point-mass
 * draft (accepted with probability p(draft[i]); otherwise the token is a
 * draw from p without it, renormalised), coupled with plain sampling: with
 * the same sampler state (seed) the tokens are those of decoding without
 * speculation, greedy or not.  Writes the tokens produced, out[0, *n_out),
 * *n_out = accepted + 1 (the accepted drafts, then the token drawn at the
 * first rejection, or after the last draft), and the number accepted to
 * *n_accepted.  On error the tokens produced before it are in out[0, *n_out). */
enum smol_err smol_spec_verify(float *logits, int32_t n_vocab, const int32_t *draft, int n_draft,
                               smol_spec_sample_fn sample, void *ctx, int32_t *out, int *n_out, int *n_accepted,
                               char *err);

/* A grammar as a draft filter: each token it allows advances the matcher
 * (pushed counts them); smol_spec_grammar_undo rolls them back once the
 * draft is made.  Once the grammar is done, the draft ends. */
struct smol_grammar_matcher;
struct smol_spec_grammar {
    struct smol_grammar_matcher *m;
    int pushed;
};
int smol_spec_grammar_filter(void *ctx, const int32_t *draft, int i, int32_t tok);
void smol_spec_grammar_undo(struct smol_spec_grammar *g);

#endif
