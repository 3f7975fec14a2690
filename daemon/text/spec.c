/* spec.c - prompt-lookup drafting, draft-length control, verification (see spec.h). */
#include "daemon/text/spec.h"
#include "daemon/grammar/grammar.h"
#include "daemon/model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CANDIDATES 8    /* earlier occurrences of the n-gram compared */
#define MAX_BACK 64         /* tokens compared backwards to rank them */
#define RATE_WEIGHT 0.15f   /* EMA weight of one observation */
#define COPY_RULE_MAX 8     /* tokens on either side of a learned substitution */
#define COPY_RULES 16       /* substitutions kept (the latest) */
#define COPY_WINDOW 16      /* source tokens an edit may replace before the copy resumes */
#define COPY_RESYNC 2       /* tokens that must match the source again to resume the copy */
#define COPY_MAX_GAP 12     /* tokens written after a divergence before the copy is given up */
#define COPY_CATCH_UP 64    /* more new tokens than this at once (a prompt): not tracked */
#define COPY_SCORE 4        /* bound of the copy-vs-index score */

/* n-gram -> the position that followed its latest occurrence.  Keys hold
 * the order in bits 60..61 and up to 3 tokens of 20 bits: exact, never 0. */
struct ngram_map {
    uint64_t *key;
    int32_t *val;
    uint32_t mask, used;
};

/* A learned substitution of the copy: source tokens `from` are written as `to`. */
struct copy_rule {
    int32_t from[COPY_RULE_MAX], to[COPY_RULE_MAX];
    int n_from, n_to;
};

/* The copy tracker (smol_lookup_draft_edit): where in the history the output
 * is copying from, and the edits it has made to what it copies. */
struct copy {
    int tracked;        /* history tokens seen by the tracker */
    int src;            /* copying: the source position that comes next; -1: not copying */
    int rule, rule_at;  /* inside a rule's output: its index and the next `to` token; rule -1: not */
    int rule_src, rule_out; /* where that rule's source span and output began */
    int div_src, div_out; /* a divergence being resolved: the source position rejected, the history
                           * position of the first token written instead; div_out -1: none */
    int run;            /* tokens the output has followed the copy for (its evidence) */
    int draft_L, draft_src, draft_len; /* the last n-gram draft: history length then, the position it
                                        * copied, its match length */
    int pred_L;         /* the copy and the n-gram index disagreed on the token at pred_L: */
    int32_t pred_copy, pred_ngram; /* their first tokens */
    int score;          /* which of them was right of late: > 0 the copy, < 0 the index */
    struct copy_rule rules[COPY_RULES];
    int n_rules, next_rule;
};

struct smol_lookup {
    int32_t n_vocab;
    int32_t *tok;                               /* [cap] the history */
    int32_t *prev[SMOL_LOOKUP_MAX_ORDER];       /* [cap] previous continuation of the same n-gram, -1 */
    int n, cap;
    struct ngram_map map[SMOL_LOOKUP_MAX_ORDER];
    struct copy cp;
};

static inline uint64_t ngram_key(const int32_t *t, int order)
{
    uint64_t k = (uint64_t)order << 60;
    for (int i = 0; i < order; i++) k |= (uint64_t)t[order - 1 - i] << (20 * i);
    return k;
}

static inline uint32_t key_home(uint64_t k, uint32_t mask)
{
    k ^= k >> 29;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 32;
    return (uint32_t)k & mask;
}

static int map_find(const struct ngram_map *m, uint64_t k)
{
    if (!m->key) return -1;
    for (uint32_t i = key_home(k, m->mask);; i = (i + 1) & m->mask) {
        if (m->key[i] == k) return m->val[i];
        if (!m->key[i]) return -1;
    }
}

static int map_grow(struct ngram_map *m)
{
    uint32_t size = m->key ? (m->mask + 1) * 2 : 1024;
    uint64_t *key = calloc(size, sizeof *key);
    int32_t *val = malloc(size * sizeof *val);
    if (!key || !val) { free(key); free(val); return -1; }
    for (uint32_t j = 0; m->key && j <= m->mask; j++) {
        if (!m->key[j]) continue;
        uint32_t i = key_home(m->key[j], size - 1);
        while (key[i]) i = (i + 1) & (size - 1);
        key[i] = m->key[j];
        val[i] = m->val[j];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->mask = size - 1;
    return 0;
}

/* Sets k -> v; returns the previous value (-1 if none), -2 when out of memory. */
static int map_put(struct ngram_map *m, uint64_t k, int32_t v)
{
    if ((!m->key || 2 * (m->used + 1) > m->mask + 1) && map_grow(m)) return -2;
    uint32_t i = key_home(k, m->mask);
    while (m->key[i] && m->key[i] != k) i = (i + 1) & m->mask;
    int old = -1;
    if (m->key[i]) old = m->val[i];
    else { m->key[i] = k; m->used++; }
    m->val[i] = v;
    return old;
}

enum smol_err smol_lookup_new(struct smol_lookup **out, int32_t n_vocab, char *err)
{
    *out = NULL;
    if (n_vocab < 1 || n_vocab > SMOL_LOOKUP_MAX_VOCAB)
        return smol_errf(err, SMOL_EINVAL, "lookup: vocabulary of %d tokens (1..%d supported)", n_vocab,
                         SMOL_LOOKUP_MAX_VOCAB);
    struct smol_lookup *lk = calloc(1, sizeof *lk);
    if (!lk) return smol_errf(err, SMOL_ENOMEM, "lookup: out of memory");
    lk->n_vocab = n_vocab;
    smol_lookup_reset(lk);
    *out = lk;
    return SMOL_OK;
}

void smol_lookup_free(struct smol_lookup **lk)
{
    if (!lk || !*lk) return;
    struct smol_lookup *l = *lk;
    free(l->tok);
    for (int o = 0; o < SMOL_LOOKUP_MAX_ORDER; o++) {
        free(l->prev[o]);
        free(l->map[o].key);
        free(l->map[o].val);
    }
    free(l);
    *lk = NULL;
}

static void copy_stop(struct copy *c)
{
    c->src = c->rule = -1;
    c->div_out = -1;
}

void smol_lookup_reset(struct smol_lookup *lk)
{
    lk->n = 0;
    memset(&lk->cp, 0, sizeof lk->cp);
    copy_stop(&lk->cp);
    lk->cp.draft_L = lk->cp.pred_L = -1;
    for (int o = 0; o < SMOL_LOOKUP_MAX_ORDER; o++) {
        struct ngram_map *m = &lk->map[o];
        if (m->key) memset(m->key, 0, ((size_t)m->mask + 1) * sizeof *m->key);
        m->used = 0;
    }
}

int smol_lookup_length(const struct smol_lookup *lk) { return lk->n; }

static int reserve(struct smol_lookup *lk, int n)
{
    if (n <= lk->cap) return 0;
    int cap = lk->cap ? lk->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *t = realloc(lk->tok, (size_t)cap * sizeof *t);
    if (!t) return -1;
    lk->tok = t;
    for (int o = 0; o < SMOL_LOOKUP_MAX_ORDER; o++) {
        int32_t *p = realloc(lk->prev[o], (size_t)cap * sizeof *p);
        if (!p) return -1;
        lk->prev[o] = p;
    }
    lk->cap = cap;
    return 0;
}

enum smol_err smol_lookup_append(struct smol_lookup *lk, const int32_t *toks, int n, char *err)
{
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= lk->n_vocab)
            return smol_errf(err, SMOL_EINVAL, "lookup: token %d outside the vocabulary [0, %d)", toks[i], lk->n_vocab);
    if (reserve(lk, lk->n + n)) return smol_errf(err, SMOL_ENOMEM, "lookup: out of memory");
    for (int i = 0; i < n; i++) {
        int j = lk->n;
        lk->tok[j] = toks[i];
        /* the n-grams ending just before j now have a continuation: j */
        for (int o = 1; o <= SMOL_LOOKUP_MAX_ORDER; o++) {
            lk->prev[o - 1][j] = -1;
            if (j < o) continue;
            int old = map_put(&lk->map[o - 1], ngram_key(lk->tok + j - o, o), j);
            if (old == -2) return smol_errf(err, SMOL_ENOMEM, "lookup: out of memory");
            lk->prev[o - 1][j] = old;
        }
        lk->n++;
    }
    return SMOL_OK;
}

void smol_lookup_truncate(struct smol_lookup *lk, int n)
{
    if (n >= lk->n) return;
    if (n < 0) n = 0;
    /* undo the insertions of positions >= n, latest first: each map entry
     * goes back to the occurrence before it */
    for (int j = lk->n - 1; j >= n; j--)
        for (int o = 1; o <= SMOL_LOOKUP_MAX_ORDER && o <= j; o++) {
            struct ngram_map *m = &lk->map[o - 1];
            uint64_t k = ngram_key(lk->tok + j - o, o);
            uint32_t i = key_home(k, m->mask);
            while (m->key[i] != k) i = (i + 1) & m->mask;
            /* a key whose occurrences are all gone keeps -1: lookups treat it as absent */
            m->val[i] = lk->prev[o - 1][j];
        }
    lk->n = n;
    /* the copy forgets what it tracked past the cut (its rules stay) */
    if (lk->cp.tracked > n) {
        lk->cp.tracked = n;
        copy_stop(&lk->cp);
    }
    if (lk->cp.draft_L > n) lk->cp.draft_L = -1;
    if (lk->cp.pred_L >= n) lk->cp.pred_L = -1;
}

/* smol_lookup_draft; *from: the history position the draft copies (-1: none) */
static int ngram_draft(const struct smol_lookup *lk, int k, int32_t *draft, int *order, smol_draft_filter_fn filter,
                       void *filter_ctx, int *from, int *match)
{
    *from = -1;
    *match = 0;
    if (order) *order = 0;
    const int L = lk->n;
    const int32_t *t = lk->tok;
    if (k <= 0) return 0;
    for (int o = L - 1 < SMOL_LOOKUP_MAX_ORDER ? L - 1 : SMOL_LOOKUP_MAX_ORDER; o >= 1; o--) {
        int p = map_find(&lk->map[o - 1], ngram_key(t + L - o, o));
        int best = -1, best_len = -1;
        for (int c = 0; p >= 0 && c < MAX_CANDIDATES; c++, p = lk->prev[o - 1][p]) {
            int len = o;
            while (len < MAX_BACK && p - len - 1 >= 0 && t[p - len - 1] == t[L - len - 1]) len++;
            if (len > best_len) { best_len = len; best = p; }
        }
        if (best < 0) continue;
        int n = 0, period = L - best;
        for (; n < k; n++) {
            int32_t x = best + n < L ? t[best + n] : draft[n - period];
            if (filter && !filter(filter_ctx, draft, n, x)) break;
            draft[n] = x;
        }
        if (order) *order = o;
        *from = best;
        *match = best_len;
        return n;
    }
    return 0;
}

int smol_lookup_draft(const struct smol_lookup *lk, int k, int32_t *draft, int *order,
                      smol_draft_filter_fn filter, void *filter_ctx)
{
    int from, match;
    return ngram_draft(lk, k, draft, order, filter, filter_ctx, &from, &match);
}

/* ---- drafting for an output that copies and edits its context ------------------------ */

/* the rule whose source span starts at history position q (< end), -1 */
static int rule_at(const struct smol_lookup *lk, int q, int end)
{
    const struct copy *c = &lk->cp;
    for (int r = 0; r < c->n_rules; r++) {
        const struct copy_rule *ru = &c->rules[r];
        if (q + ru->n_from > end) continue;
        int i = 0;
        while (i < ru->n_from && lk->tok[q + i] == ru->from[i]) i++;
        if (i == ru->n_from) return r;
    }
    return -1;
}

static void rule_drop(struct copy *c, int r)
{
    c->rules[r] = c->rules[--c->n_rules];
    if (c->next_rule > c->n_rules) c->next_rule = c->n_rules;
}

/* Learns: source [s, s + nf) was written as the history's [o, o + nt). */
static void rule_learn(struct smol_lookup *lk, int s, int nf, int o, int nt)
{
    struct copy *c = &lk->cp;
    if (nf < 1 || nf > COPY_RULE_MAX || nt < 1 || nt > COPY_RULE_MAX) return;
    int r = rule_at(lk, s, s + nf);
    if (r >= 0 && c->rules[r].n_from != nf) r = -1;
    if (r < 0) {
        if (c->n_rules < COPY_RULES) r = c->n_rules++;
        else r = c->next_rule = (c->next_rule + 1) % COPY_RULES;
    }
    struct copy_rule *ru = &c->rules[r];
    memcpy(ru->from, lk->tok + s, nf * sizeof *ru->from);
    memcpy(ru->to, lk->tok + o, nt * sizeof *ru->to);
    ru->n_from = nf;
    ru->n_to = nt;
}

/* The output diverged from the copy at history position j. */
static void copy_diverge(struct copy *c, int src, int j)
{
    c->src = c->rule = -1;
    c->run = 0;
    c->div_src = src;
    c->div_out = j;
}

/* Token j of the history (already appended), seen by the tracker. */
static void copy_track(struct smol_lookup *lk, int j)
{
    struct copy *c = &lk->cp;
    const int32_t *t = lk->tok, y = t[j];
    if (c->src >= 0 && c->rule >= 0) { /* inside a rule's output */
        const struct copy_rule *ru = &c->rules[c->rule];
        if (y == ru->to[c->rule_at]) {
            if (++c->rule_at == ru->n_to) c->rule = -1;
            c->run++;
            return;
        }
        rule_drop(c, c->rule); /* written otherwise this time: not an edit to repeat */
        copy_diverge(c, c->rule_src, c->rule_out);
    } else if (c->src >= 0) {
        const int r = rule_at(lk, c->src, j);
        if (r >= 0 && y == c->rules[r].to[0]) {
            c->rule_src = c->src;
            c->rule_out = j;
            c->src += c->rules[r].n_from;
            if (c->rules[r].n_to > 1) { c->rule = r; c->rule_at = 1; }
            c->run++;
            return;
        }
        if (c->src < j && y == t[c->src]) {
            if (r >= 0) rule_drop(c, r); /* the source was copied as it is: the edit is not everywhere */
            c->src++;
            c->run++;
            return;
        }
        copy_diverge(c, c->src, j);
    }
    if (c->div_out < 0) return;
    /* resolving a divergence: the latest COPY_RESYNC tokens found again in
     * the source shortly after it resume the copy there, and what was
     * written in between replaced what was skipped (a substitution to
     * apply to the rest of the copy: a renamed identifier) */
    const int o1 = j - COPY_RESYNC + 1; /* the written span is [div_out, o1) */
    if (o1 - c->div_out > COPY_MAX_GAP) { c->div_out = -1; return; }
    if (o1 < c->div_out) return;
    for (int d = 0; d <= COPY_WINDOW; d++) {
        const int s1 = c->div_src + d; /* the skipped span is [div_src, s1) */
        if (s1 + COPY_RESYNC > c->div_out) break;
        int i = 0;
        while (i < COPY_RESYNC && t[s1 + i] == t[o1 + i]) i++;
        if (i < COPY_RESYNC) continue;
        rule_learn(lk, c->div_src, d, c->div_out, o1 - c->div_out);
        c->src = s1 + COPY_RESYNC;
        c->run = COPY_RESYNC;
        c->div_out = -1;
        return;
    }
}

/* draft[0, n) cut before the first token the filter refuses */
static int filter_draft(const int32_t *draft, int n, smol_draft_filter_fn filter, void *ctx)
{
    for (int i = 0; filter && i < n; i++)
        if (!filter(ctx, draft, i, draft[i])) return i;
    return n;
}

int smol_lookup_draft_edit(struct smol_lookup *lk, int k, int32_t *draft, int *match,
                           smol_draft_filter_fn filter, void *filter_ctx)
{
    struct copy *c = &lk->cp;
    const int L = lk->n;
    if (L - c->tracked > COPY_CATCH_UP) { /* a prompt: nothing was being copied */
        c->tracked = L;
        copy_stop(c);
    }
    /* an n-gram draft whose first token came starts a copy from there */
    if (c->src < 0 && c->div_out < 0 && c->draft_L == c->tracked && c->draft_L < L &&
        lk->tok[c->draft_L] == lk->tok[c->draft_src]) {
        c->src = c->draft_src;
        c->run = c->draft_len; /* the token that came is counted by the tracker */
    }
    c->draft_L = -1;
    if (c->pred_L == c->tracked && c->pred_L < L) {
        const int32_t y = lk->tok[c->pred_L];
        if (y == c->pred_copy && c->score < COPY_SCORE) c->score++;
        if (y == c->pred_ngram && c->score > -COPY_SCORE) c->score--;
    }
    c->pred_L = -1;
    for (; c->tracked < L; c->tracked++) copy_track(lk, c->tracked);
    if (match) *match = 0;
    if (k <= 0) return 0;
    /* both drafts unfiltered (a filter may keep state: a grammar's matcher
     * advances over what it allows), the chosen one filtered at the end */
    int from, ng_match, ng = ngram_draft(lk, k, draft, NULL, NULL, NULL, &from, &ng_match);
    if (match) *match = ng_match;
    if (c->src < 0 || c->src >= L) {
        if (ng > 0 && c->div_out < 0) {
            c->draft_L = L;
            c->draft_src = from;
            c->draft_len = ng_match;
        }
        return filter_draft(draft, ng, filter, filter_ctx);
    }
    /* copying: the source from the pointer on, with the learned
     * substitutions, unless the index's draft starts otherwise and was the
     * better guess of late when the two disagreed */
    int32_t cd[64];
    if (k > 64) k = 64;
    int n = 0, q = c->src, rule = c->rule, at = c->rule_at;
    while (n < k) {
        int32_t x;
        if (rule < 0 && q < L && (rule = rule_at(lk, q, L)) >= 0) {
            q += c->rules[rule].n_from;
            at = 0;
        }
        if (rule >= 0) {
            x = c->rules[rule].to[at];
            if (++at == c->rules[rule].n_to) rule = -1;
        } else if (q < L) {
            x = lk->tok[q++];
        } else {
            break;
        }
        cd[n++] = x;
    }
    if (n == 0) return filter_draft(draft, ng, filter, filter_ctx);
    if (ng > 0 && draft[0] != cd[0]) {
        c->pred_L = L;
        c->pred_ngram = draft[0];
        c->pred_copy = cd[0];
        if (c->score < 0) return filter_draft(draft, ng, filter, filter_ctx);
    }
    /* the copy's evidence: how long the output has followed it (and the
     * index's match, when that starts the same way) */
    if (match) *match = c->run > 0 ? c->run : 1;
    if (match && ng > 0 && draft[0] == cd[0] && ng_match > *match) *match = ng_match;
    memcpy(draft, cd, n * sizeof *draft);
    return filter_draft(draft, n, filter, filter_ctx);
}

/* ---- draft length ------------------------------------------------------------- */

/* a match of this many tokens -> its class: 1, 2, 3, 4-5, 6-8, 9-15, 16-31, 32+ */
static int match_class(int match)
{
    static const int lo[SMOL_SPEC_CLASSES] = {1, 2, 3, 4, 6, 9, 16, 32};
    int c = 0;
    while (c + 1 < SMOL_SPEC_CLASSES && match >= lo[c + 1]) c++;
    return c;
}

void smol_spec_ctl_init(struct smol_spec_ctl *c, int k_max, const float *cost)
{
    /* priors: a longer match is likelier to go on */
    static const float prior[SMOL_SPEC_CLASSES] = {0.2f, 0.3f, 0.5f, 0.6f, 0.75f, 0.85f, 0.9f, 0.95f};
    c->k_max = k_max < 0 ? 0 : k_max > SMOL_SPEC_MAX_DRAFT ? SMOL_SPEC_MAX_DRAFT : k_max;
    for (int k = 0; k <= SMOL_SPEC_MAX_DRAFT; k++)
        c->cost[k] = cost && k <= c->k_max ? cost[k] : 1.0f + 0.06f * k;
    memcpy(c->rate, prior, sizeof c->rate);
}

int smol_spec_ctl_k(const struct smol_spec_ctl *c, int match)
{
    if (c->k_max <= 0 || match < 1) return 0;
    /* expected tokens per step over its relative cost; k = 0 gives 1.
     * Drafted token i follows a match of match + i tokens if those before
     * it were accepted. */
    double best = 1.02, gain = 1.0, rk = 1.0;
    int k_best = 0;
    for (int k = 1; k <= c->k_max; k++) {
        rk *= c->rate[match_class(match + k - 1)];
        gain += rk;
        double v = gain / c->cost[k];
        if (v > best) { best = v; k_best = k; }
    }
    return k_best;
}

static void observe(struct smol_spec_ctl *c, int match, float x)
{
    float *r = &c->rate[match_class(match)];
    *r += RATE_WEIGHT * (x - *r);
}

void smol_spec_ctl_update(struct smol_spec_ctl *c, int match, int drafted, int accepted)
{
    if (match < 1) return;
    for (int i = 0; i < accepted; i++) observe(c, match + i, 1.0f);
    if (accepted < drafted) observe(c, match + accepted, 0.0f);
}

void smol_spec_ctl_shadow(struct smol_spec_ctl *c, int match, int32_t predicted, int32_t actual)
{
    if (match < 1) return;
    observe(c, match, predicted == actual ? 1.0f : 0.0f);
}

enum smol_err smol_spec_calibrate(struct smol_model *m, int k_max, int reps, float *cost, char *err)
{
    enum { CTX = 64 };
    if (k_max > SMOL_SPEC_MAX_DRAFT) k_max = SMOL_SPEC_MAX_DRAFT;
    cost[0] = 1.0f;
    if (k_max < 1) return SMOL_OK;
    const int V = m->cfg.vocab;
    int32_t ids[CTX + SMOL_SPEC_MAX_DRAFT + 1], pos[SMOL_SPEC_MAX_DRAFT + 1], idx[SMOL_SPEC_MAX_DRAFT + 1];
    struct smol_kv_seq *sp[SMOL_SPEC_MAX_DRAFT + 1];
    double best[SMOL_SPEC_MAX_DRAFT + 1];
    for (int i = 0; i < CTX + SMOL_SPEC_MAX_DRAFT + 1; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    float *logits = malloc((size_t)(k_max + 1) * V * sizeof *logits);
    if (!logits) return smol_errf(err, SMOL_ENOMEM, "calibrate: out of memory");
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    enum smol_err rc = smol_model_eval(m, &seq, ids, CTX, 0, NULL, err);
    for (int k = 0; k <= k_max; k++) best[k] = 1e30;
    for (int r = 0; r < reps && !rc; r++)
        for (int k = 0; k <= k_max && !rc; k++) {
            for (int i = 0; i <= k; i++) { pos[i] = CTX + i; sp[i] = &seq; idx[i] = i; }
            const struct smol_batch b = {.n_tokens = k + 1, .tokens = ids + CTX, .pos = pos, .seq = sp,
                                         .n_out = k + 1, .out_idx = idx};
            double t0 = smol_mono_s();
            if ((rc = smol_kv_seq_reserve(&m->kv, &seq, CTX, CTX + k + 1, err)) ||
                (rc = smol_model_forward(m, &b, logits, err)))
                break;
            double dt = smol_mono_s() - t0;
            if (dt < best[k]) best[k] = dt;
            smol_kv_seq_truncate(&m->kv, &seq, CTX);
        }
    for (int k = 1; k <= k_max && !rc; k++) {
        double c = best[k] / best[0];
        cost[k] = (float)(c > cost[k - 1] ? c : cost[k - 1]);
    }
    smol_kv_seq_deinit(&m->kv, &seq);
    free(logits);
    return rc;
}

/* ---- verification ---------------------------------------------------------------- */

enum smol_err smol_spec_verify(float *logits, int32_t n_vocab, const int32_t *draft, int n_draft,
                               smol_spec_sample_fn sample, void *ctx, int32_t *out, int *n_out, int *n_accepted,
                               char *err)
{
    *n_out = 0;
    *n_accepted = 0;
    for (int i = 0; i <= n_draft; i++) {
        int32_t t;
        enum smol_err rc = sample(ctx, i, logits + (size_t)i * n_vocab, &t, err);
        if (rc) return rc;
        out[(*n_out)++] = t;
        if (i == n_draft || t != draft[i]) break;
        ++*n_accepted;
    }
    return SMOL_OK;
}

int smol_spec_grammar_filter(void *ctx, const int32_t *draft, int i, int32_t tok)
{
    (void)draft;
    (void)i;
    struct smol_spec_grammar *g = ctx;
    if (smol_grammar_matcher_is_done(g->m) || smol_grammar_matcher_accept_token(g->m, tok)) return 0;
    g->pushed++;
    return 1;
}

void smol_spec_grammar_undo(struct smol_spec_grammar *g)
{
    if (g->pushed) smol_grammar_matcher_rollback(g->m, (size_t)g->pushed);
    g->pushed = 0;
}
