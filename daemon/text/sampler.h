/*
 * sampler.h - per-request token sampling: penalties, temperature, top-k,
 * top-p, min-p, seeded RNG.
 *
 * One struct smol_sampler per request holds the parameters, a seeded
 * xoshiro256** generator and a bounded token history for the penalties.  The
 * vocabulary-sized work arrays live apart, in a struct smol_sampler_scratch
 * that the engine allocates once and shares between all the requests it
 * samples one after another on its thread; nothing is allocated per token.
 *
 * The pipeline (the order of Hugging Face transformers' logits warpers,
 * which is what the SmolLM3 model card's settings were tuned with):
 *
 *   logits -> logit_bias -> penalties -> greedy if temperature == 0
 *          -> / temperature -> top_k -> top_p -> min_p -> draw
 *
 *   - logit_bias (OpenAI): a per-request list of (token id, bias in
 *     [-100, 100]) added to the logits before anything else; -100 bans a
 *     token in practice, +100 all but forces it.
 *   - repetition_penalty (HF / llama.cpp): for every token seen in the last
 *     penalty_last_n tokens (prompt tokens fed with smol_sampler_accept and
 *     generated ones), a positive logit is divided by it, a negative or zero
 *     one multiplied by it.
 *   - presence_penalty, frequency_penalty (OpenAI): among the *generated*
 *     tokens of that same window, a token seen n > 0 times gets
 *     logit -= presence + n * frequency.  Set penalty_last_n >= max_tokens
 *     for OpenAI's whole-output semantics.  Applied after the repetition
 *     penalty.
 *   - top_k keeps exactly k tokens (ties broken towards the lower id); top_p
 *     keeps the smallest prefix, in descending probability, whose mass
 *     (renormalised over the top-k set) is >= top_p, the token that crosses
 *     the threshold included; min_p then drops tokens whose probability is
 *     below min_p times the most likely token's.
 *
 * Cost on a 128256-token vocabulary: a few linear passes, no sort of the
 * vocabulary.  Tokens whose probability relative to the most likely one is
 * below e^-40 (~4e-18) are treated as impossible, which is exact at float
 * precision and spares their exp().  top_k is a size-k heap kept during the
 * collecting pass; top_p finds the crossing point with a histogram of mass
 * over weight bins and an exact weighted quickselect inside one bin.
 *
 * Non-finite logits have defined behaviour: NaN and -inf are never sampled;
 * if any logit is +inf, the tokens at +inf share all the mass equally; if no
 * logit is samplable (all NaN / -inf) sampling fails with SMOL_EINVAL.
 *
 * Same parameters + same seed + same accepted tokens + same logits -> the
 * same token sequence, on every platform with IEEE floats and the same libm.
 */
#ifndef SMOL_SAMPLER_H
#define SMOL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"
#include "daemon/model/rules.h"

/* Largest accepted penalty_last_n (tokens): bounds the per-request history. */
#define SMOL_SAMPLER_MAX_WINDOW (1 << 17)

struct smol_sampler_params {
    /* ranges: the rules of daemon/model/rules.h */
    float temperature;          /* [0, 2]; 0 = greedy (argmax, ties -> lowest id) */
    int32_t top_k;              /* [-1, 2^20]; -1 and 0 = off */
    float top_p;                /* (0, 1]; 1 = off */
    float min_p;                /* [0, 1]; 0 = off */
    float repetition_penalty;   /* (0, 10]; 1 = off */
    float presence_penalty;     /* [-2, 2]; 0 = off */
    float frequency_penalty;    /* [-2, 2]; 0 = off */
    int32_t penalty_last_n;     /* [0, SMOL_SAMPLER_MAX_WINDOW] tokens of history the
                                   penalties look at; 0 = penalties off */
    uint64_t seed;              /* RNG seed; the caller picks one when the request has none */
};

/* The SmolLM3 model card's settings: temperature 0.6, top_p 0.95, top_k
 * and min_p off, penalties neutral (window 64, llama.cpp's default), seed 0. */
struct smol_sampler_params smol_sampler_defaults(void);

/* SMOL_OK, or SMOL_EINVAL with a message naming the field and its range. */
enum smol_err smol_sampler_params_check(const struct smol_sampler_params *p, char *err);

struct smol_sampler;            /* per request: params, RNG, history */
struct smol_sampler_scratch;    /* per engine thread: O(n_vocab) work arrays */

/* Allocates a sampler for a vocabulary of n_vocab tokens after checking p.
 * On error *out = NULL and err says why (SMOL_EINVAL, SMOL_ENOMEM). */
enum smol_err smol_sampler_new(struct smol_sampler **out, const struct smol_sampler_params *p,
                               int32_t n_vocab, char *err);
/* Frees; accepts NULL and *s == NULL; sets *s = NULL. */
void smol_sampler_free(struct smol_sampler **s);

/* Forgets the history and reseeds the RNG from params.seed: the sampler then
 * behaves exactly as a freshly created one. */
void smol_sampler_reset(struct smol_sampler *s);

/* Records tokens the sampler did not pick itself: prompt tokens
 * (generated = false, seen by the repetition penalty only) or tokens the
 * caller forced into the output (generated = true).  Only the last
 * penalty_last_n matter.  SMOL_EINVAL if a token is outside [0, n_vocab). */
enum smol_err smol_sampler_accept(struct smol_sampler *s, const int32_t *tokens, size_t n,
                                  bool generated, char *err);

/* Allocates work arrays for vocabularies of up to n_vocab tokens
 * (about 16 bytes per token).  One per thread that samples. */
enum smol_err smol_sampler_scratch_new(struct smol_sampler_scratch **out, int32_t n_vocab,
                                       char *err);
void smol_sampler_scratch_free(struct smol_sampler_scratch **sc);

/* Draws the next token from logits[n_vocab] (read only) and records it as
 * generated in the history.  If logprob is non-NULL it receives the natural
 * log of the chosen token's probability under the distribution it was drawn
 * from: after penalties and temperature, renormalised over what top-k, top-p
 * and min-p kept.  At temperature 0 (a point mass) it is instead the
 * log-softmax of the penalised logits at temperature 1 (costs one extra exp
 * pass, only when asked).  Errors: SMOL_EINVAL if no logit is samplable or
 * the scratch is too small for the vocabulary; *token is then -1 and the
 * history is unchanged. */
enum smol_err smol_sampler_sample(struct smol_sampler *s, struct smol_sampler_scratch *sc,
                                  const float *logits, int32_t *token, float *logprob,
                                  char *err);

/* Logit bias: bias[i] is added to logits[ids[i]] before anything else on
 * every draw (an id listed twice adds up).  Replaces any earlier list.
 * SMOL_EINVAL naming the entry if an id is outside [0, n_vocab) or a bias
 * outside [-100, 100] (NaN included); the sampler is then unchanged. */
#define SMOL_SAMPLER_MAX_BIAS SMOL_RULE_MAX_BIAS
enum smol_err smol_sampler_set_logit_bias(struct smol_sampler *s, const int32_t *ids, const float *bias,
                                          size_t n, char *err);

/* Log-probabilities as OpenAI's API reports them: the log-softmax, at
 * temperature 1, of the processed logits (after logit_bias and the
 * penalties, before temperature, top-k, top-p and min-p), i.e. the model's
 * distribution as the request shaped it, whatever the sampling settings.
 * Tokens with a -inf (or NaN) logit get -INFINITY. */
#define SMOL_SAMPLER_MAX_TOP_LOGPROBS SMOL_RULE_MAX_TOP_LOGPROBS
struct smol_sampler_logprobs {
    int32_t n_top;                  /* in: alternatives wanted, [0, SMOL_SAMPLER_MAX_TOP_LOGPROBS] */
    float logprob;                  /* out: the chosen token's */
    int32_t top_id[SMOL_SAMPLER_MAX_TOP_LOGPROBS];      /* out: the n_top most likely, best first */
    float top_logprob[SMOL_SAMPLER_MAX_TOP_LOGPROBS];   /*      (ties to the lower id) */
};

/* smol_sampler_sample, then fills *lp (when non-NULL) for the token drawn,
 * from the same processed logits.  Costs one pass over the vocabulary for
 * the normaliser and one for the top n_top, only when asked. */
enum smol_err smol_sampler_sample_lp(struct smol_sampler *s, struct smol_sampler_scratch *sc,
                                     const float *logits, int32_t *token,
                                     struct smol_sampler_logprobs *lp, char *err);

/* Applies the logit bias, then the penalties the current history calls for,
 * to logits[n_vocab] in place, exactly as smol_sampler_sample does before
 * temperature (exposed for tests and for callers that report processed
 * logits). */
void smol_sampler_apply_penalties(const struct smol_sampler *s, float *logits);

/* The next uniform draw in [0, 1) (24 bits) from the sampler's RNG, for a caller that samples
 * elsewhere (the backend's batch sampler, smol_sample_row_ref's rule) but keeps the request's
 * seeded sequence: same seed, same draws. */
float smol_sampler_uniform(struct smol_sampler *s);

/* Advances the RNG as n draws would (none at temperature 0, which draws nothing): a resumed
 * request's replayed tokens keep the seeded sequence where it was. */
void smol_sampler_skip(struct smol_sampler *s, uint64_t n);

/* 1 if a draw needs nothing but temperature and top_p (no logit bias, penalties, top_k or min_p):
 * what the backend's batch sampler can do. */
int smol_sampler_is_plain(const struct smol_sampler *s);

/* The parameters the sampler was created with. */
const struct smol_sampler_params *smol_sampler_get_params(const struct smol_sampler *s);

#endif
