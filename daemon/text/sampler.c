/*
 * sampler.c - per-request token sampling (see sampler.h for the contract).
 *
 * Shape of one draw at temperature T > 0 over V logits x[]:
 *   1. if a penalty applies, copy x into scratch and apply it to the few
 *      tokens in the history (the history is a hash of counts, so this costs
 *      O(window), not O(V));
 *   2. one SIMD pass for the max m;
 *   3. one pass collecting candidates with x >= m + T * cut, where cut is
 *      ln(min_p) when nothing later depends on the mass it drops, else
 *      NEGLIGIBLE_LOG (e^-40 relative to the best token: exact in float);
 *      with top_k, the same pass keeps only the k best in a size-k heap;
 *   4. weights w = exp((x - m) / T) by a SIMD exp, mass Z;
 *   5. top_p: a histogram of mass over the weights' float exponent bins
 *      finds the bin where the cumulative mass crosses top_p * Z; an exact
 *      weighted quickselect runs inside that bin only;
 *   6. min_p filter (when not already done in 3), one uniform draw in
 *      [0, sum w), a linear walk over the survivors.
 * No step sorts the vocabulary.  Candidates are ordered by (x desc, id asc),
 * a total order, so every step is deterministic and ties go to the lower id.
 *
 * Timing (tests/bench/bench_sampler.c, V = 128256, one loaded x86-64 core,
 * thread CPU time): greedy ~90 us, model-card defaults ~390 us on peaked
 * logits, ~1 ms on flat ones (the top-p worst case), top_k 40 ~140 us.
 */
#include "daemon/text/sampler.h"

#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEGLIGIBLE_LOG (-40.0f)   /* ln of the relative probability treated as zero */
#define HIST_BINS 1024            /* float bits >> 20 of a weight in [0, 1]: 8 bins per octave */

/* ---------------------------------------------------------------- RNG --- */

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64 so that any
 * 64-bit seed, 0 included, gives a well-mixed non-zero state. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t st[4])
{
    uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0]; st[3] ^= st[1]; st[1] ^= st[2]; st[0] ^= st[3];
    st[2] ^= t; st[3] = rotl(st[3], 45);
    return r;
}

/* ------------------------------------------------------------- structs --- */

struct hist_entry {
    int32_t tok;                /* -1 = empty slot */
    uint32_t n_all;             /* occurrences in the window (prompt + generated) */
    uint32_t n_gen;             /* of which generated */
};

struct smol_sampler {
    struct smol_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];            /* xoshiro256** state */
    /* history: the last `window` tokens, bit 31 set for generated ones */
    uint32_t *ring;             /* [window] */
    uint32_t window, head, count;
    /* counts of the tokens in the ring: linear probing, backward-shift delete */
    struct hist_entry *tab;     /* [tab_mask + 1], a power of two >= 2 * window */
    uint32_t tab_mask, tab_shift;
    /* logit_bias: bias[i] added to the logit of bias_id[i] */
    int32_t *bias_id;           /* [n_bias] */
    float *bias;                /* [n_bias] */
    uint32_t n_bias;
};

/* Candidates are two parallel arrays (so the exp pass is SIMD): key holds a
 * candidate's logit while it is collected, then its weight
 * w = exp((x - m) / T) in (0, 1]. */
struct smol_sampler_scratch {
    int32_t n_vocab;
    float *work;                /* [n_vocab] penalised logits */
    float *key;                 /* [n_vocab + 4] candidate logit, then weight */
    int32_t *id;                /* [n_vocab + 4] candidate token id */
    double *hist;               /* [HIST_BINS] top-p mass per weight bin */
};

/* ------------------------------------------------------------- params --- */

struct smol_sampler_params smol_sampler_defaults(void)
{
    return (struct smol_sampler_params){
        .temperature = 0.6f, .top_k = 0, .top_p = 0.95f, .min_p = 0.0f,
        .repetition_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .penalty_last_n = 64, .seed = 0,
    };
}

enum smol_err smol_sampler_params_check(const struct smol_sampler_params *p, char *err)
{
    if (!p) return smol_errf(err, SMOL_EINVAL, "sampler: no parameters");
    /* the ranges are the one set of rules (daemon/model/rules.h) */
    const struct { enum smol_rule_num rule; double v; } f[] = {
        {SMOL_RULE_TEMPERATURE, p->temperature},
        {SMOL_RULE_TOP_K, p->top_k},
        {SMOL_RULE_TOP_P, p->top_p},
        {SMOL_RULE_MIN_P, p->min_p},
        {SMOL_RULE_REPETITION_PENALTY, p->repetition_penalty},
        {SMOL_RULE_PRESENCE_PENALTY, p->presence_penalty},
        {SMOL_RULE_FREQUENCY_PENALTY, p->frequency_penalty},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        enum smol_err e = smol_rule_number(f[i].rule, f[i].v, NULL, err);
        if (e) return e;
    }
    if (p->penalty_last_n < 0 || p->penalty_last_n > SMOL_SAMPLER_MAX_WINDOW)
        return smol_errf(err, SMOL_EINVAL, "penalty_last_n must be in [0, %d] (got %d)",
                         SMOL_SAMPLER_MAX_WINDOW, p->penalty_last_n);
    return SMOL_OK;
}

/* ------------------------------------------------------------ history --- */

static inline uint32_t hist_home(const struct smol_sampler *s, int32_t tok)
{
    return ((uint32_t)tok * 2654435761u) >> s->tab_shift;
}

static void hist_add(struct smol_sampler *s, int32_t tok, bool gen)
{
    uint32_t i = hist_home(s, tok);
    while (s->tab[i].tok != -1 && s->tab[i].tok != tok) i = (i + 1) & s->tab_mask;
    s->tab[i].tok = tok;
    s->tab[i].n_all++;
    s->tab[i].n_gen += gen;
}

static void hist_remove(struct smol_sampler *s, int32_t tok, bool gen)
{
    uint32_t i = hist_home(s, tok);
    while (s->tab[i].tok != tok) {
        SMOL_ASSERT(s->tab[i].tok != -1);
        i = (i + 1) & s->tab_mask;
    }
    s->tab[i].n_gen -= gen;
    if (--s->tab[i].n_all > 0) return;
    /* backward-shift deletion: pull later entries of the probe run into the hole
     * unless their home slot lies cyclically in (hole, j] */
    for (uint32_t j = i;;) {
        j = (j + 1) & s->tab_mask;
        if (s->tab[j].tok == -1) break;
        uint32_t k = hist_home(s, s->tab[j].tok);
        bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        s->tab[i] = s->tab[j];
        i = j;
    }
    s->tab[i] = (struct hist_entry){ .tok = -1 };
}

static void hist_push(struct smol_sampler *s, int32_t tok, bool gen)
{
    if (s->window == 0) return;
    if (s->count == s->window) {
        uint32_t old = s->ring[s->head];
        hist_remove(s, (int32_t)(old & 0x7fffffffu), old >> 31);
    } else {
        s->count++;
    }
    s->ring[s->head] = (uint32_t)tok | ((uint32_t)gen << 31);
    s->head = (s->head + 1) % s->window;
    hist_add(s, tok, gen);
}

/* ------------------------------------------------------- create, free --- */

void smol_sampler_reset(struct smol_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->head = s->count = 0;
    for (uint32_t i = 0; i <= s->tab_mask; i++) s->tab[i] = (struct hist_entry){ .tok = -1 };
}

enum smol_err smol_sampler_new(struct smol_sampler **out, const struct smol_sampler_params *p,
                               int32_t n_vocab, char *err)
{
    *out = NULL;
    enum smol_err rc = smol_sampler_params_check(p, err);
    if (rc) return rc;
    if (n_vocab <= 0) return smol_errf(err, SMOL_EINVAL, "sampler: n_vocab must be > 0 (got %d)", n_vocab);
    struct smol_sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->window = (uint32_t)p->penalty_last_n;
    uint32_t bits = 3;
    while ((1u << bits) < 2 * s->window) bits++;
    s->tab_mask = (1u << bits) - 1;
    s->tab_shift = 32 - bits;
    s->tab = malloc(((size_t)s->tab_mask + 1) * sizeof *s->tab);
    s->ring = malloc((s->window ? s->window : 1) * sizeof *s->ring);
    if (!s->tab || !s->ring) goto oom;
    smol_sampler_reset(s);
    *out = s;
    return SMOL_OK;
oom:
    smol_sampler_free(&s);
    return smol_errf(err, SMOL_ENOMEM, "sampler: out of memory (window %d)", p->penalty_last_n);
}

void smol_sampler_free(struct smol_sampler **s)
{
    if (!s || !*s) return;
    free((*s)->tab);
    free((*s)->ring);
    free((*s)->bias_id);
    free((*s)->bias);
    free(*s);
    *s = NULL;
}

const struct smol_sampler_params *smol_sampler_get_params(const struct smol_sampler *s)
{
    return &s->p;
}

float smol_sampler_uniform(struct smol_sampler *s)
{
    return (float)(xoshiro_next(s->rng) >> 40) * 0x1.0p-24f;
}

void smol_sampler_skip(struct smol_sampler *s, uint64_t n)
{
    const float T = s->p.temperature;
    if (T == 0.0f || !(1.0f / T < INFINITY)) return;    /* greedy: draw() takes no number */
    while (n--) xoshiro_next(s->rng);
}

int smol_sampler_is_plain(const struct smol_sampler *s)
{
    const struct smol_sampler_params *p = &s->p;
    const int penalties = p->penalty_last_n > 0 && (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                                                    p->frequency_penalty != 0.0f);
    return s->n_bias == 0 && !penalties && (p->top_k == 0 || p->top_k >= s->n_vocab) && p->min_p == 0.0f;
}

enum smol_err smol_sampler_set_logit_bias(struct smol_sampler *s, const int32_t *ids, const float *bias,
                                          size_t n, char *err)
{
    enum smol_err e = smol_rule_bias_count(n, err);
    if (e) return e;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return smol_errf(err, SMOL_EINVAL, "logit_bias: token id %d is outside the vocabulary [0, %d)", ids[i],
                             s->n_vocab);
        char field[40];
        snprintf(field, sizeof field, "logit_bias[%d]", ids[i]);
        if ((e = smol_rule_number(SMOL_RULE_LOGIT_BIAS, bias[i], field, err))) return e;
    }
    int32_t *ni = NULL;
    float *nb = NULL;
    if (n && (!(ni = malloc(n * sizeof *ni)) || !(nb = malloc(n * sizeof *nb)))) {
        free(ni);
        return smol_errf(err, SMOL_ENOMEM, "logit_bias: out of memory");
    }
    if (n) {
        memcpy(ni, ids, n * sizeof *ni);
        memcpy(nb, bias, n * sizeof *nb);
    }
    free(s->bias_id);
    free(s->bias);
    s->bias_id = ni;
    s->bias = nb;
    s->n_bias = (uint32_t)n;
    return SMOL_OK;
}

enum smol_err smol_sampler_accept(struct smol_sampler *s, const int32_t *tokens, size_t n,
                                  bool generated, char *err)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return smol_errf(err, SMOL_EINVAL, "sampler: token %d at %zu outside the vocabulary [0, %d)",
                             tokens[i], i, s->n_vocab);
    size_t from = n > s->window ? n - s->window : 0;   /* older ones would be evicted anyway */
    for (size_t i = from; i < n; i++) hist_push(s, tokens[i], generated);
    return SMOL_OK;
}

enum smol_err smol_sampler_scratch_new(struct smol_sampler_scratch **out, int32_t n_vocab, char *err)
{
    *out = NULL;
    if (n_vocab <= 0)
        return smol_errf(err, SMOL_EINVAL, "sampler scratch: n_vocab must be > 0 (got %d)", n_vocab);
    struct smol_sampler_scratch *sc = calloc(1, sizeof *sc);
    if (sc) {
        sc->n_vocab = n_vocab;
        sc->work = malloc((size_t)n_vocab * sizeof *sc->work);
        sc->key = calloc((size_t)n_vocab + 4, sizeof *sc->key);   /* the SIMD tail reads up to 3 past n */
        sc->id = malloc(((size_t)n_vocab + 4) * sizeof *sc->id);
        sc->hist = malloc(HIST_BINS * sizeof *sc->hist);
    }
    if (!sc || !sc->work || !sc->key || !sc->id || !sc->hist) {
        smol_sampler_scratch_free(&sc);
        return smol_errf(err, SMOL_ENOMEM, "sampler scratch: out of memory (n_vocab %d)", n_vocab);
    }
    *out = sc;
    return SMOL_OK;
}

void smol_sampler_scratch_free(struct smol_sampler_scratch **sc)
{
    if (!sc || !*sc) return;
    free((*sc)->work);
    free((*sc)->key);
    free((*sc)->id);
    free((*sc)->hist);
    free(*sc);
    *sc = NULL;
}

/* ---------------------------------------------------------- penalties --- */

static bool penalties_active(const struct smol_sampler *s)
{
    return s->count > 0 && (s->p.repetition_penalty != 1.0f || s->p.presence_penalty != 0.0f ||
                            s->p.frequency_penalty != 0.0f);
}

/* Whether the logits are changed before temperature (then they are copied). */
static bool processing_active(const struct smol_sampler *s)
{
    return s->n_bias > 0 || penalties_active(s);
}

void smol_sampler_apply_penalties(const struct smol_sampler *s, float *logits)
{
    for (uint32_t i = 0; i < s->n_bias; i++) logits[s->bias_id[i]] += s->bias[i];
    if (!penalties_active(s)) return;
    const float rep = s->p.repetition_penalty, pres = s->p.presence_penalty,
                freq = s->p.frequency_penalty;
    for (uint32_t i = 0; i <= s->tab_mask; i++) {
        const struct hist_entry *e = &s->tab[i];
        if (e->tok < 0) continue;
        float l = logits[e->tok];
        if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
        if (e->n_gen > 0) l -= pres + freq * (float)e->n_gen;
        logits[e->tok] = l;
    }
}

/* ------------------------------------------------------------ kernels --- */

/* GCC vector extensions: SSE2 on x86-64, NEON on arm64, no -march needed. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4_select(v4i mask, v4f a, v4f b)
{
    return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

/* exp(x) for x <= 0 (Cephes expf: round-to-nearest range reduction, degree-6
 * polynomial; ~1 ulp).  x below -87 gives exp(-87), never a subnormal. */
static inline v4f exp4(v4f x)
{
    x = v4_select(x < -87.0f, (v4f){ -87.0f, -87.0f, -87.0f, -87.0f }, x);
    v4f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round(x / ln 2) */
    v4f r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v4f y = r * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    v4i e = (__builtin_convertvector(n, v4i) + 127) << 23;                /* 2^n */
    return y * (v4f)e;
}

/* Largest logit, ignoring NaN (-inf if there is none). */
static float max_logit(const float *x, int32_t n)
{
    v4f mv = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f v;
        memcpy(&v, x + i, sizeof v);
        mv = v4_select(v > mv, v, mv);              /* NaN compares false: never taken */
    }
    float m = -INFINITY;
    for (int k = 0; k < 4; k++) m = mv[k] > m ? mv[k] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* key[0, n) := exp((key - m) * inv_t); returns the sum (double).  key has
 * room for n rounded up to 4.  Sums run in float over blocks of 64 weights
 * (<= 1 each), then in double. */
static double exp_weights(float *key, size_t n, float m, float inv_t)
{
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        v4f acc = { 0, 0, 0, 0 };
        size_t end = n - i > 64 ? i + 64 : n;
        for (; i + 4 <= end; i += 4) {
            v4f v;
            memcpy(&v, key + i, sizeof v);
            v = exp4((v - m) * inv_t);
            memcpy(key + i, &v, sizeof v);
            acc += v;
        }
        if (i < end) {                          /* the last 1-3 */
            v4f v;
            memcpy(&v, key + i, sizeof v);
            v = exp4((v - m) * inv_t);
            for (size_t l = 0; i < end; l++, i++) { key[i] = v[l]; acc[l] += v[l]; }
        }
        total += (double)((acc[0] + acc[1]) + (acc[2] + acc[3]));
    }
    return total;
}

/* ---------------------------------------------------------- selection --- */

/* The order of candidates: higher logit (or weight) first, ties to the lower id. */
static inline bool better(float ka, int32_t ia, float kb, int32_t ib)
{
    return ka > kb || (ka == kb && ia < ib);
}

static inline void swap2(float *key, int32_t *id, size_t a, size_t b)
{
    float k = key[a]; key[a] = key[b]; key[b] = k;
    int32_t t = id[a]; id[a] = id[b]; id[b] = t;
}

/* Min-heap (worst candidate at the root) over key/id[0, n). */
static void heap_sift_down(float *key, int32_t *id, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, w = i;
        if (l < n && better(key[w], id[w], key[l], id[l])) w = l;
        if (l + 1 < n && better(key[w], id[w], key[l + 1], id[l + 1])) w = l + 1;
        if (w == i) return;
        swap2(key, id, i, w);
        i = w;
    }
}

/* The k best of x[0, V) with x >= thr, into key/id[0, return): one pass
 * with a size-k heap; a token enters only if it beats the heap's worst, so a
 * typical pass is one compare per token. */
static size_t collect_top_k(const float *x, int32_t V, float thr, size_t k, float *key, int32_t *id)
{
    size_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        float v = x[i];
        if (!(v >= thr)) continue;
        if (n < k) {
            key[n] = v; id[n] = i;
            for (size_t j = n++; j > 0;) {                      /* sift up */
                size_t p = (j - 1) / 2;
                if (!better(key[p], id[p], key[j], id[j])) break;
                swap2(key, id, p, j);
                j = p;
            }
        } else if (v > key[0]) {        /* equal loses: a later token has a higher id */
            key[0] = v; id[0] = i;
            heap_sift_down(key, id, n, 0);
        }
    }
    return n;
}

/* Rearranges key/id[0, n) so that the first r are the best r, r the least
 * count whose weight reaches target; returns r (n if the total falls short,
 * which only rounding can cause).  Quickselect that recurses into the side
 * holding the boundary, with a pseudo-random pivot: expected O(n). */
static size_t weighted_select(float *key, int32_t *id, size_t n, double target)
{
    size_t lo = 0, hi = n;
    double acc = 0.0;                   /* weight of [0, lo) */
    uint64_t r = 0x9E3779B97F4A7C15ull ^ n;
    if (target <= 0.0) return 0;
    while (hi - lo > 1) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        swap2(key, id, lo + (size_t)(r % (hi - lo)), hi - 1);
        const float pk = key[hi - 1];
        const int32_t pi = id[hi - 1];
        size_t store = lo;
        double mass = 0.0;
        for (size_t i = lo; i < hi - 1; i++)
            if (better(key[i], id[i], pk, pi)) {
                mass += key[i];
                swap2(key, id, i, store++);
            }
        swap2(key, id, store, hi - 1);
        if (acc + mass >= target) {
            hi = store;
        } else if (acc + mass + pk >= target) {
            return store + 1;
        } else {
            acc += mass + pk;
            lo = store + 1;
        }
    }
    return lo < hi ? lo + 1 : lo;
}

static inline uint32_t weight_bin(float w)
{
    uint32_t b;
    memcpy(&b, &w, sizeof b);
    return b >> 20;                     /* w in [0, 1]: 0 .. 0x3F8 */
}

/* Keeps the smallest best-first prefix of key/id[0, n) (weights, total z)
 * whose mass is >= top_p * z, rearranged to the front; returns its size.
 * Weight bins are monotone in the weight: a histogram of mass per bin finds
 * the bin where the mass crosses the target; bins above it are all in,
 * below it all out (their mass is at most (1 - top_p) * z), and only the
 * crossing bin needs an exact weighted selection. */
static size_t top_p_filter(float *key, int32_t *id, size_t n, double z, float top_p, double *hist)
{
    const double target = (double)top_p * z;
    memset(hist, 0, HIST_BINS * sizeof *hist);
    for (size_t i = 0; i < n; i++) hist[weight_bin(key[i])] += key[i];
    uint32_t edge = 0;
    double cum = 0.0;
    for (uint32_t b = HIST_BINS; b-- > 0;) {
        cum += hist[b];
        if (cum >= target) { edge = b; break; }
    }
    size_t n_in = 0, n_sure = 0;
    for (size_t i = 0; i < n; i++)      /* keep bins >= edge, in place */
        if (weight_bin(key[i]) >= edge) { key[n_in] = key[i]; id[n_in] = id[i]; n_in++; }
    double sure = 0.0;
    for (size_t i = 0; i < n_in; i++)   /* bins above the edge first */
        if (weight_bin(key[i]) > edge) { sure += key[i]; swap2(key, id, i, n_sure++); }
    return n_sure + weighted_select(key + n_sure, id + n_sure, n_in - n_sure, target - sure);
}

/* ------------------------------------------------------------ sampling --- */

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = -1;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > bv) { bv = x[i]; best = i; }   /* strict: ties keep the lower id; NaN never wins */
    return best;
}

/* log-softmax at temperature 1 of x[best], x[best] being the max. */
static float greedy_logprob(const float *x, int32_t n, int32_t best)
{
    float m = x[best];
    double z = 0.0;
    if (m == INFINITY) {
        for (int32_t i = 0; i < n; i++) z += x[i] == INFINITY;
    } else {
        float thr = m + NEGLIGIBLE_LOG;
        for (int32_t i = 0; i < n; i++)
            if (x[i] >= thr) z += exp((double)x[i] - m);
    }
    return (float)-log(z);
}

/* One draw; *xp receives the processed logits it drew from (logits itself
 * or sc->work), still valid after the return. */
static enum smol_err draw(struct smol_sampler *s, struct smol_sampler_scratch *sc, const float *logits,
                          int32_t *token, float *logprob, const float **xp, char *err)
{
    *token = -1;
    const int32_t V = s->n_vocab;
    if (!sc || sc->n_vocab < V)
        return smol_errf(err, SMOL_EINVAL, "sampler: scratch for %d tokens, vocabulary has %d",
                         sc ? sc->n_vocab : 0, V);
    const float *x = logits;
    *xp = logits;
    if (processing_active(s)) {
        memcpy(sc->work, logits, (size_t)V * sizeof *x);
        smol_sampler_apply_penalties(s, sc->work);
        x = sc->work;
        *xp = x;
    }
    const struct smol_sampler_params *p = &s->p;
    const float T = p->temperature, inv_t = 1.0f / T;

    if (T == 0.0f || !(inv_t < INFINITY)) {     /* greedy (or T so small it is the same) */
        int32_t best = argmax(x, V);
        if (best < 0) return smol_errf(err, SMOL_EINVAL, "sampler: no samplable logit (all NaN or -inf)");
        if (logprob) *logprob = greedy_logprob(x, V, best);
        hist_push(s, best, true);
        *token = best;
        return SMOL_OK;
    }

    const float m = max_logit(x, V);
    if (m == -INFINITY) return smol_errf(err, SMOL_EINVAL, "sampler: no samplable logit (all NaN or -inf)");

    /* collect candidates; min_p can cut here unless top_p needs the mass it drops */
    float *key = sc->key;
    int32_t *id = sc->id;
    size_t n = 0;
    const size_t k = p->top_k > 0 && p->top_k < V ? (size_t)p->top_k : (size_t)V;
    const float thr_minp = p->min_p > 0.0f ? m + T * logf(p->min_p) : -INFINITY;
    double z;
    if (m == INFINITY) {                        /* the +inf tokens share the mass */
        for (int32_t i = 0; i < V && n < k; i++)
            if (x[i] == INFINITY) { key[n] = 1.0f; id[n] = i; n++; }
        z = (double)n;
    } else {
        float thr = m + T * NEGLIGIBLE_LOG;
        if (p->top_p >= 1.0f && thr_minp > thr) thr = thr_minp;
        if (thr < -FLT_MAX) thr = -FLT_MAX;     /* never collect -inf */
        if (k < (size_t)V) {
            n = collect_top_k(x, V, thr, k, key, id);
        } else {
            for (int32_t i = 0; i < V; i++) {   /* branch-free compaction */
                key[n] = x[i];
                id[n] = i;
                n += x[i] >= thr;
            }
        }
        z = exp_weights(key, n, m, inv_t);
    }
    SMOL_ASSERT(n > 0);                         /* the max itself is always collected */

    if (p->top_p < 1.0f) {
        n = top_p_filter(key, id, n, z, p->top_p, sc->hist);
        if (p->min_p > 0.0f) {
            size_t kept = 0;
            for (size_t i = 0; i < n; i++)
                if (x[id[i]] >= thr_minp) { key[kept] = key[i]; id[kept] = id[i]; kept++; }
            n = kept;
        }
        z = 0.0;
        for (size_t i = 0; i < n; i++) z += key[i];
    }
    SMOL_ASSERT(n > 0 && z >= 1.0);             /* the max (weight 1) survives every filter */

    double u = (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53 * z;
    double acc = 0.0;
    size_t pick = n;
    for (size_t i = 0; i < n; i++) {
        acc += key[i];
        if (u < acc) { pick = i; break; }
    }
    if (pick == n)                              /* rounding at the very top: last non-zero one */
        for (pick = n - 1; pick > 0 && key[pick] == 0.0f; pick--) {}
    if (logprob) *logprob = (float)(log((double)key[pick]) - log(z));
    hist_push(s, id[pick], true);
    *token = id[pick];
    return SMOL_OK;
}

enum smol_err smol_sampler_sample(struct smol_sampler *s, struct smol_sampler_scratch *sc,
                                  const float *logits, int32_t *token, float *logprob, char *err)
{
    const float *x;
    return draw(s, sc, logits, token, logprob, &x, err);
}

/* ------------------------------------------------------------ logprobs --- */

enum smol_err smol_sampler_sample_lp(struct smol_sampler *s, struct smol_sampler_scratch *sc,
                                     const float *logits, int32_t *token,
                                     struct smol_sampler_logprobs *lp, char *err)
{
    const float *x;
    if (lp && (lp->n_top < 0 || lp->n_top > SMOL_SAMPLER_MAX_TOP_LOGPROBS))
        return smol_errf(err, SMOL_EINVAL, "top_logprobs must be in [0, %d] (got %d)",
                         SMOL_SAMPLER_MAX_TOP_LOGPROBS, lp->n_top);
    enum smol_err rc = draw(s, sc, logits, token, NULL, &x, err);
    if (rc || !lp) return rc;
    const int32_t V = s->n_vocab;
    /* log-softmax at temperature 1: x - m - log(sum exp(x - m)), in double */
    const float m = max_logit(x, V);
    double z = 0.0;
    if (m == INFINITY) {
        for (int32_t i = 0; i < V; i++) z += x[i] == INFINITY;
    } else {
        for (int32_t i = 0; i < V; i++)
            if (x[i] > -INFINITY) z += exp((double)x[i] - (double)m);
    }
    const double lz = log(z);
#define LOGPROB_OF(v) ((m == INFINITY) ? ((v) == INFINITY ? (float)-lz : -INFINITY) \
                                       : ((v) > -INFINITY ? (float)((double)(v) - (double)m - lz) : -INFINITY))
    lp->logprob = LOGPROB_OF(x[*token]);
    /* the n_top best (the draw is over: key/id are free), then best first */
    size_t n = lp->n_top ? collect_top_k(x, V, -FLT_MAX, (size_t)lp->n_top, sc->key, sc->id) : 0;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && better(sc->key[j], sc->id[j], sc->key[j - 1], sc->id[j - 1]); j--)
            swap2(sc->key, sc->id, j, j - 1);
    for (size_t i = 0; i < n; i++) {
        lp->top_id[i] = sc->id[i];
        lp->top_logprob[i] = LOGPROB_OF(x[sc->id[i]]);
    }
#undef LOGPROB_OF
    lp->n_top = (int32_t)n;
    return SMOL_OK;
}
