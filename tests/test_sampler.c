/*
 * test_sampler.c - the sampler: distributions with a fixed seed over many
 * draws (chi-square against the softmax the pipeline specifies), top-k /
 * top-p / min-p sets including their boundaries, exact penalty arithmetic,
 * determinism, greedy, bad parameters, non-finite logits.
 *
 * Draws use fixed seeds, so a passing test passes every time; each
 * statistical check is paired with a check that the same statistic rejects
 * a plausible wrong distribution, so the test has the power to fail.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/text/sampler.h"
#include "kernels/ops_ref.h"

/* ------------------------------------------------------------- helpers --- */

static struct smol_sampler_params plain(float temperature)
{
    struct smol_sampler_params p = smol_sampler_defaults();
    p.temperature = temperature;
    p.top_p = 1.0f;
    return p;
}

static struct smol_sampler *make(const struct smol_sampler_params *p, int32_t n_vocab)
{
    struct smol_sampler *s = NULL;
    char err[SMOL_ERRLEN] = "";
    ck_assert_msg(smol_sampler_new(&s, p, n_vocab, err) == SMOL_OK, "%s", err);
    return s;
}

static struct smol_sampler_scratch *make_scratch(int32_t n_vocab)
{
    struct smol_sampler_scratch *sc = NULL;
    ck_assert_int_eq(smol_sampler_scratch_new(&sc, n_vocab, NULL), SMOL_OK);
    return sc;
}

/* Draws n tokens from the same logits (penalties must be off) into counts[]. */
static void draw(const struct smol_sampler_params *p, const float *logits, int32_t V, int n,
                 long *counts)
{
    struct smol_sampler *s = make(p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t t;
        char err[SMOL_ERRLEN] = "";
        ck_assert_msg(smol_sampler_sample(s, sc, logits, &t, NULL, err) == SMOL_OK, "%s", err);
        ck_assert(t >= 0 && t < V);
        counts[t]++;
    }
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}

/* Chi-square of counts against probs (which sum to 1); a token with
 * probability 0 that was drawn makes it infinite. */
static double chi2(const long *counts, const double *probs, int32_t V, long n)
{
    double x = 0.0;
    for (int32_t i = 0; i < V; i++) {
        if (probs[i] == 0.0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        double e = probs[i] * (double)n, d = (double)counts[i] - e;
        x += d * d / e;
    }
    return x;
}

/* A bound that a correct sampler exceeds with probability ~1e-6. */
static double chi2_crit(int dof) { return dof + 7.0 * sqrt(2.0 * dof); }

/* softmax(logits / T) restricted to mask (NULL: all), in double. */
static void softmax(const float *logits, int32_t V, double T, const int *mask, double *out)
{
    double m = -INFINITY, z = 0.0;
    for (int32_t i = 0; i < V; i++) if ((!mask || mask[i]) && logits[i] > m) m = logits[i];
    for (int32_t i = 0; i < V; i++) {
        out[i] = (!mask || mask[i]) ? exp((logits[i] - m) / T) : 0.0;
        z += out[i];
    }
    for (int32_t i = 0; i < V; i++) out[i] /= z;
}

static uint64_t lcg = 88172645463325252ull;
static double urand(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1.0p-53;
}

/* ------------------------------------------------------------- params --- */

START_TEST(test_defaults)
{
    struct smol_sampler_params p = smol_sampler_defaults();
    ck_assert_float_eq(p.temperature, 0.6f);
    ck_assert_float_eq(p.top_p, 0.95f);
    ck_assert_int_eq(p.top_k, 0);
    ck_assert_float_eq(p.min_p, 0.0f);
    ck_assert_float_eq(p.repetition_penalty, 1.0f);
    ck_assert_float_eq(p.presence_penalty, 0.0f);
    ck_assert_float_eq(p.frequency_penalty, 0.0f);
    ck_assert_int_eq(smol_sampler_params_check(&p, NULL), SMOL_OK);
    struct smol_sampler *s = make(&p, 10);
    ck_assert(memcmp(smol_sampler_get_params(s), &p, sizeof p) == 0);
    smol_sampler_free(&s);
    ck_assert_ptr_null(s);
    smol_sampler_free(&s);
    smol_sampler_free(NULL);
}
END_TEST

START_TEST(test_bad_params)
{
    struct { const char *field; struct smol_sampler_params p; } t[16];
    int n = 0;
#define BAD(name, stmt) do { t[n].field = name; t[n].p = smol_sampler_defaults(); \
                             { struct smol_sampler_params *q = &t[n].p; stmt; } n++; } while (0)
    BAD("temperature", q->temperature = NAN);
    BAD("temperature", q->temperature = -0.1f);
    BAD("temperature", q->temperature = INFINITY);
    BAD("top_k", q->top_k = -1);
    BAD("top_p", q->top_p = 0.0f);
    BAD("top_p", q->top_p = 1.01f);
    BAD("top_p", q->top_p = NAN);
    BAD("min_p", q->min_p = -0.1f);
    BAD("min_p", q->min_p = 1.5f);
    BAD("min_p", q->min_p = NAN);
    BAD("repetition_penalty", q->repetition_penalty = 0.0f);
    BAD("repetition_penalty", q->repetition_penalty = NAN);
    BAD("presence_penalty", q->presence_penalty = 2.5f);
    BAD("frequency_penalty", q->frequency_penalty = NAN);
    BAD("penalty_last_n", q->penalty_last_n = -1);
    BAD("penalty_last_n", q->penalty_last_n = SMOL_SAMPLER_MAX_WINDOW + 1);
#undef BAD
    for (int i = 0; i < n; i++) {
        char err[SMOL_ERRLEN] = "";
        struct smol_sampler *s = (struct smol_sampler *)1;
        ck_assert_int_eq(smol_sampler_params_check(&t[i].p, err), SMOL_EINVAL);
        ck_assert_msg(strstr(err, t[i].field), "case %d: \"%s\" does not name %s", i, err, t[i].field);
        ck_assert_int_eq(smol_sampler_new(&s, &t[i].p, 10, err), SMOL_EINVAL);
        ck_assert_ptr_null(s);
    }
    /* edges that are valid */
    struct smol_sampler_params p = smol_sampler_defaults();
    p.temperature = 0.0f; p.top_p = 1.0f; p.min_p = 1.0f; p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f; p.penalty_last_n = 0;
    ck_assert_int_eq(smol_sampler_params_check(&p, NULL), SMOL_OK);
    /* bad vocabulary sizes */
    struct smol_sampler *s = NULL;
    struct smol_sampler_scratch *sc = NULL;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_sampler_new(&s, &p, 0, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_sampler_scratch_new(&sc, -5, err), SMOL_EINVAL);
    /* a scratch smaller than the vocabulary */
    s = make(&p, 100);
    sc = make_scratch(10);
    float logits[100] = { 0 };
    int32_t tok = 7;
    ck_assert_int_eq(smol_sampler_sample(s, sc, logits, &tok, NULL, err), SMOL_EINVAL);
    ck_assert_int_eq(tok, -1);
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* -------------------------------------------------------------- greedy --- */

START_TEST(test_greedy)
{
    struct smol_sampler_params p = plain(0.0f);
    struct smol_sampler *s = make(&p, 6);
    struct smol_sampler_scratch *sc = make_scratch(6);
    int32_t t;
    float lp;
    float a[6] = { 1.0f, 4.0f, -2.0f, 4.0f, 3.5f, 0.0f };       /* tie 1/3: lowest id */
    for (int seed = 0; seed < 3; seed++) {
        ck_assert_int_eq(smol_sampler_sample(s, sc, a, &t, &lp, NULL), SMOL_OK);
        ck_assert_int_eq(t, 1);
    }
    double pr[6];
    softmax(a, 6, 1.0, NULL, pr);
    ck_assert_double_eq_tol(lp, log(pr[1]), 1e-5);             /* log-softmax at T = 1 */
    float b[6] = { NAN, 1.0f, NAN, 2.0f, -INFINITY, 1.5f };     /* NaN never wins */
    ck_assert_int_eq(smol_sampler_sample(s, sc, b, &t, NULL, NULL), SMOL_OK);
    ck_assert_int_eq(t, 3);
    float c[6] = { 1.0f, INFINITY, 2.0f, INFINITY, 0.0f, 0.0f };
    ck_assert_int_eq(smol_sampler_sample(s, sc, c, &t, &lp, NULL), SMOL_OK);
    ck_assert_int_eq(t, 1);
    ck_assert_double_eq_tol(lp, -log(2.0), 1e-6);
    float d[6] = { NAN, NAN, -INFINITY, NAN, NAN, NAN };
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(smol_sampler_sample(s, sc, d, &t, NULL, err), SMOL_EINVAL);
    ck_assert_int_eq(t, -1);
    ck_assert(err[0]);
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* ------------------------------------------------------- distributions --- */

START_TEST(test_temperature_matches_softmax)
{
    const float logits[8] = { 1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, 1.5f };
    const float temps[] = { 0.7f, 1.0f, 1.8f };
    const int n = 200000;
    long counts[8];
    for (size_t k = 0; k < sizeof temps / sizeof *temps; k++) {
        struct smol_sampler_params p = plain(temps[k]);
        p.seed = 1000 + k;
        draw(&p, logits, 8, n, counts);
        double want[8], wrong[8];
        softmax(logits, 8, temps[k], NULL, want);
        softmax(logits, 8, temps[k] * 1.1, NULL, wrong);          /* a 10% error in T */
        double x = chi2(counts, want, 8, n);
        ck_assert_msg(x < chi2_crit(7), "T=%g: chi2 %g >= %g", temps[k], x, chi2_crit(7));
        ck_assert_msg(chi2(counts, wrong, 8, n) > chi2_crit(7), "T=%g: the test cannot tell T*1.1", temps[k]);
    }
}
END_TEST

START_TEST(test_top_k)
{
    enum { V = 1000, K = 10 };
    static float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(urand() * 6.0);
    /* K + 5 strong tokens 0.3 apart, scattered: the top K spread enough for
     * temperature to matter, the next 5 just outside */
    for (int j = 0; j < K + 5; j++) logits[(j * 337 + 11) % V] = 6.0f + 0.3f * (float)j;
    /* the reference top K */
    static int mask[V];
    memset(mask, 0, sizeof mask);
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!mask[i] && (best < 0 || logits[i] > logits[best])) best = i;
        mask[best] = 1;
    }
    struct smol_sampler_params p = plain(1.0f);
    p.top_k = K;
    p.seed = 7;
    static long counts[V];
    const int n = 100000;
    draw(&p, logits, V, n, counts);
    static double want[V], wrong[V];
    softmax(logits, V, 1.0, mask, want);                           /* renormalised over the top K */
    for (int i = 0; i < V; i++) ck_assert_msg(mask[i] || counts[i] == 0, "token %d outside the top k", i);
    double x = chi2(counts, want, V, n);
    ck_assert_msg(x < chi2_crit(K - 1), "chi2 %g", x);
    softmax(logits, V, 1.2, mask, wrong);
    ck_assert(chi2(counts, wrong, V, n) > chi2_crit(K - 1));

    /* ties at the k-th value: exactly k kept, the lower ids */
    const float tie[5] = { 1.0f, 5.0f, 5.0f, 5.0f, 0.0f };
    long c5[5];
    p.top_k = 2;
    draw(&p, tie, 5, 20000, c5);
    ck_assert(c5[1] > 0 && c5[2] > 0);
    ck_assert(c5[0] == 0 && c5[3] == 0 && c5[4] == 0);
    /* k = 1 is greedy whatever the temperature */
    p.top_k = 1;
    p.temperature = 5.0f;
    draw(&p, logits, V, 1000, counts);
    int best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    ck_assert_int_eq(counts[best], 1000);
}
END_TEST

START_TEST(test_top_p_boundary)
{
    /* probabilities 0.1 (id 0), 0.4 (id 1), 0.2 (id 2), 0.3 (id 3) */
    const float logits[4] = { logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f) };
    struct smol_sampler_params p = plain(1.0f);
    p.seed = 3;
    long counts[4];
    const int n = 100000;
    /* 0.4 + 0.3 = 0.7 < 0.85 <= 0.9: the 0.2 token crosses the threshold and is kept */
    p.top_p = 0.85f;
    draw(&p, logits, 4, n, counts);
    double want[4] = { 0.0, 0.4 / 0.9, 0.2 / 0.9, 0.3 / 0.9 };
    ck_assert_msg(counts[0] == 0, "token outside the top-p set drawn %ld times", counts[0]);
    ck_assert_msg(counts[2] > 0, "the boundary token was never drawn");
    ck_assert_msg(chi2(counts, want, 4, n) < chi2_crit(2), "chi2 %g", chi2(counts, want, 4, n));
    double wrong[4] = { 0.1, 0.4, 0.2, 0.3 };
    ck_assert(chi2(counts, wrong, 4, n) > chi2_crit(3));
    /* 0.65: {0.4, 0.3}; 0.35: the best token alone */
    p.top_p = 0.65f;
    draw(&p, logits, 4, n, counts);
    ck_assert(counts[0] == 0 && counts[2] == 0 && counts[1] > 0 && counts[3] > 0);
    double want2[4] = { 0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7 };
    ck_assert(chi2(counts, want2, 4, n) < chi2_crit(1));
    p.top_p = 0.35f;
    draw(&p, logits, 4, 1000, counts);
    ck_assert_int_eq(counts[1], 1000);

    /* several tokens within one weight bin (ratios < 1.09): the crossing
     * token is found by the exact selection inside the bin, not the histogram.
     * Weights 1, .99, .98, .97, .96, .95 (cumulative .171 .340 .508 .673 ...):
     * top_p 0.6 keeps the first four, the .97 one crossing. */
    const float w6[6] = { 0.96f, 1.0f, 0.95f, 0.98f, 0.97f, 0.99f };
    float l6[6];
    for (int i = 0; i < 6; i++) l6[i] = logf(w6[i]);
    long c6[6];
    p.top_p = 0.6f;
    draw(&p, l6, 6, n, c6);
    ck_assert_msg(c6[0] == 0 && c6[2] == 0, "beyond the boundary: %ld %ld", c6[0], c6[2]);
    ck_assert_msg(c6[4] > 0, "the boundary token (inside a shared bin) was never drawn");
    double want6[6] = { 0, 1.0 / 3.94, 0, 0.98 / 3.94, 0.97 / 3.94, 0.99 / 3.94 };
    ck_assert(chi2(c6, want6, 6, n) < chi2_crit(3));

    /* logprob under the truncated distribution */
    p.top_p = 0.85f;
    struct smol_sampler *s = make(&p, 4);
    struct smol_sampler_scratch *sc = make_scratch(4);
    for (int i = 0; i < 50; i++) {
        int32_t t;
        float lp;
        ck_assert_int_eq(smol_sampler_sample(s, sc, logits, &t, &lp, NULL), SMOL_OK);
        ck_assert_double_eq_tol(lp, log(want[t]), 1e-5);
    }
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* Large flat vocabulary: the top-p set spans thousands of tokens, so the
 * chunked partial sort has to expand several times. */
START_TEST(test_top_p_large_set)
{
    enum { V = 5000 };
    static float logits[V];
    static int order[V];
    for (int i = 0; i < V; i++) { logits[i] = (float)(urand() * 2.0); order[i] = i; }
    const double T = 0.8, top_p = 0.5;
    /* reference: sort descending (ties: lower id), accumulate */
    for (int i = 1; i < V; i++)
        for (int j = i; j > 0 && (logits[order[j]] > logits[order[j - 1]] ||
                                  (logits[order[j]] == logits[order[j - 1]] && order[j] < order[j - 1])); j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    double z = 0.0, cum = 0.0, m = logits[order[0]];
    for (int i = 0; i < V; i++) z += exp((logits[i] - m) / T);
    static int rank[V];
    int n_set = 0;
    for (int i = 0; i < V; i++) rank[order[i]] = i;
    for (; n_set < V; n_set++) {
        cum += exp((logits[order[n_set]] - m) / T);
        if (cum >= top_p * z) { n_set++; break; }
    }
    ck_assert_int_gt(n_set, 1000);                  /* several chunks */
    struct smol_sampler_params p = plain((float)T);
    p.top_p = (float)top_p;
    p.seed = 11;
    static long counts[V];
    const int n = 60000;
    draw(&p, logits, V, n, counts);
    int late = 0;
    for (int i = 0; i < V; i++) {
        ck_assert_msg(counts[i] == 0 || rank[i] < n_set, "token of rank %d >= %d drawn", rank[i], n_set);
        if (counts[i] && rank[i] >= n_set - n_set / 20) late++;
    }
    ck_assert_msg(late > n_set / 40, "the tail of the top-p set is missing (%d)", late);
}
END_TEST

START_TEST(test_min_p)
{
    /* probabilities 0.15, 0.5, 0.1, 0.25; min_p 0.25 -> keep p >= 0.125 */
    const float logits[4] = { logf(0.15f), logf(0.5f), logf(0.1f), logf(0.25f) };
    const double want[4] = { 0.15 / 0.9, 0.5 / 0.9, 0.0, 0.25 / 0.9 };
    long counts[4];
    const int n = 100000;
    /* top_p = 1 (cut while collecting) and top_p < 1 (filter after top-p): same set */
    const float top_ps[2] = { 1.0f, 0.99f };
    for (int k = 0; k < 2; k++) {
        struct smol_sampler_params p = plain(1.0f);
        p.min_p = 0.25f;
        p.top_p = top_ps[k];
        p.seed = 5 + k;
        draw(&p, logits, 4, n, counts);
        ck_assert_msg(counts[2] == 0, "top_p %g: token below min_p drawn", top_ps[k]);
        ck_assert(counts[0] > 0);
        ck_assert_msg(chi2(counts, want, 4, n) < chi2_crit(2), "chi2 %g", chi2(counts, want, 4, n));
    }
    /* min_p = 1: only the most likely */
    struct smol_sampler_params p = plain(2.0f);
    p.min_p = 1.0f;
    draw(&p, logits, 4, 1000, counts);
    ck_assert_int_eq(counts[1], 1000);
    /* min_p is relative to the tempered distribution: at T = 2 the ratios are
     * square roots, 0.1/0.5 -> 0.447 >= 0.25, so token 2 comes back */
    p.min_p = 0.25f;
    draw(&p, logits, 4, 20000, counts);
    ck_assert(counts[2] > 0);
}
END_TEST

/* ----------------------------------------------------------- penalties --- */

START_TEST(test_penalties_exact)
{
    const float base[8] = { 2.0f, -2.0f, 0.0f, 1.0f, -1.0f, 3.0f, 0.5f, -0.5f };
    struct smol_sampler_params p = plain(1.0f);
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 16;
    struct smol_sampler *s = make(&p, 8);
    float l[8];
    memcpy(l, base, sizeof l);
    smol_sampler_apply_penalties(s, l);                     /* empty history: unchanged */
    ck_assert(memcmp(l, base, sizeof l) == 0);

    const int32_t prompt[3] = { 0, 1, 2 }, gen[3] = { 3, 3, 4 };
    ck_assert_int_eq(smol_sampler_accept(s, prompt, 3, false, NULL), SMOL_OK);
    ck_assert_int_eq(smol_sampler_accept(s, gen, 3, true, NULL), SMOL_OK);
    memcpy(l, base, sizeof l);
    smol_sampler_apply_penalties(s, l);
    float want[8];
    memcpy(want, base, sizeof want);
    want[0] = 2.0f / 1.5f;                                  /* positive: divided */
    want[1] = -2.0f * 1.5f;                                 /* negative: multiplied */
    want[2] = 0.0f;                                         /* zero stays */
    want[3] = 1.0f / 1.5f - (0.5f + 0.25f * 2.0f);          /* generated twice */
    want[4] = -1.0f * 1.5f - (0.5f + 0.25f * 1.0f);         /* generated once */
    for (int i = 0; i < 8; i++)
        ck_assert_msg(fabsf(l[i] - want[i]) < 1e-6f, "token %d: %g, want %g", i, l[i], want[i]);
    /* prompt tokens get no presence/frequency penalty */
    struct smol_sampler_params q = p;
    q.repetition_penalty = 1.0f;
    struct smol_sampler *s2 = make(&q, 8);
    ck_assert_int_eq(smol_sampler_accept(s2, prompt, 3, false, NULL), SMOL_OK);
    memcpy(l, base, sizeof l);
    smol_sampler_apply_penalties(s2, l);
    ck_assert(memcmp(l, base, sizeof l) == 0);
    /* bad token ids are refused and leave the history alone */
    const int32_t bad[2] = { 5, 8 };
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(smol_sampler_accept(s2, bad, 2, true, err), SMOL_EINVAL);
    ck_assert(err[0]);
    smol_sampler_apply_penalties(s2, l);
    ck_assert(memcmp(l, base, sizeof l) == 0);
    /* reset forgets */
    smol_sampler_reset(s);
    memcpy(l, base, sizeof l);
    smol_sampler_apply_penalties(s, l);
    ck_assert(memcmp(l, base, sizeof l) == 0);
    smol_sampler_free(&s2);
    smol_sampler_free(&s);
}
END_TEST

/* The window against a brute force over a random stream (exercises the
 * hash table's deletions on a small table with many collisions). */
START_TEST(test_penalty_window)
{
    enum { V = 300, W = 7, STEPS = 3000 };
    struct smol_sampler_params p = plain(1.0f);
    p.repetition_penalty = 1.25f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = -0.25f;
    p.penalty_last_n = W;
    struct smol_sampler *s = make(&p, V);
    static int32_t hist[STEPS];
    static int genf[STEPS];
    static float base[V], l[V], want[V];
    for (int i = 0; i < V; i++) base[i] = (float)(urand() * 4.0 - 2.0);
    for (int step = 0; step < STEPS; step++) {
        hist[step] = (int32_t)(urand() * (step % 3 ? 20 : V));   /* many repeats, some spread */
        genf[step] = urand() < 0.6;
        ck_assert_int_eq(smol_sampler_accept(s, &hist[step], 1, genf[step], NULL), SMOL_OK);
        memcpy(l, base, sizeof l);
        smol_sampler_apply_penalties(s, l);
        int n_all[V] = { 0 }, n_gen[V] = { 0 };
        for (int k = step >= W - 1 ? step - W + 1 : 0; k <= step; k++) {
            n_all[hist[k]]++;
            n_gen[hist[k]] += genf[k];
        }
        for (int i = 0; i < V; i++) {
            float x = base[i];
            if (n_all[i]) x = x > 0 ? x / 1.25f : x * 1.25f;
            if (n_gen[i]) x -= -0.25f + 0.5f * (float)n_gen[i];
            want[i] = x;
        }
        ck_assert_msg(memcmp(l, want, sizeof l) == 0, "step %d differs", step);
    }
    smol_sampler_free(&s);
}
END_TEST

START_TEST(test_penalties_in_sampling)
{
    /* greedy alternates once the repeated token is penalised; sample() records its tokens */
    struct smol_sampler_params p = plain(0.0f);
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = 1;
    struct smol_sampler *s = make(&p, 3);
    struct smol_sampler_scratch *sc = make_scratch(3);
    const float l[3] = { 3.0f, 2.9f, -1.0f };
    int32_t seq[6];
    for (int i = 0; i < 6; i++) ck_assert_int_eq(smol_sampler_sample(s, sc, l, &seq[i], NULL, NULL), SMOL_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(seq[i], i % 2);
    /* the caller's logits are never written */
    ck_assert(l[0] == 3.0f && l[1] == 2.9f);
    /* frequency penalty pushes probability away from a repeated token */
    struct smol_sampler_params q = plain(1.0f);
    q.frequency_penalty = 2.0f;
    q.penalty_last_n = 64;
    struct smol_sampler *s2 = make(&q, 3);
    const float flat[3] = { 0.0f, 0.0f, 0.0f };
    long counts[3] = { 0 };
    for (int i = 0; i < 60; i++) {
        int32_t t;
        ck_assert_int_eq(smol_sampler_sample(s2, sc, flat, &t, NULL, NULL), SMOL_OK);
        counts[t]++;
    }
    for (int i = 0; i < 3; i++) ck_assert(counts[i] >= 15 && counts[i] <= 25);  /* forced near-even */
    smol_sampler_free(&s2);
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* --------------------------------------------------------- determinism --- */

static void sequence(uint64_t seed, struct smol_sampler *reuse, const float *logits, int32_t V,
                     int32_t *out, int n)
{
    struct smol_sampler_params p = smol_sampler_defaults();
    p.seed = seed;
    p.repetition_penalty = 1.1f;                     /* history takes part too */
    struct smol_sampler *s = reuse ? reuse : make(&p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    for (int i = 0; i < n; i++) ck_assert_int_eq(smol_sampler_sample(s, sc, logits, &out[i], NULL, NULL), SMOL_OK);
    smol_sampler_scratch_free(&sc);
    if (!reuse) smol_sampler_free(&s);
}

START_TEST(test_seed_determinism)
{
    enum { V = 2000, N = 1000 };
    static float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(urand() * 5.0);
    static int32_t a[N], b[N], c[N], d[N];
    sequence(42, NULL, logits, V, a, N);
    sequence(42, NULL, logits, V, b, N);
    sequence(43, NULL, logits, V, c, N);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, c, sizeof a) != 0);
    /* reset: the same sampler replays the sequence */
    struct smol_sampler_params p = smol_sampler_defaults();
    p.seed = 42;
    p.repetition_penalty = 1.1f;
    struct smol_sampler *s = make(&p, V);
    sequence(42, s, logits, V, d, N);
    smol_sampler_reset(s);
    sequence(42, s, logits, V, d, N);
    ck_assert(memcmp(a, d, sizeof a) == 0);
    smol_sampler_free(&s);
}
END_TEST

/* ---------------------------------------------------------- non-finite --- */

START_TEST(test_nonfinite_logits)
{
    enum { V = 64 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (i % 3 == 0) ? NAN : (float)(i % 7);
    l[5] = -INFINITY;
    struct smol_sampler_params p = smol_sampler_defaults();
    p.top_k = 0;
    p.temperature = 3.0f;
    long counts[V];
    draw(&p, l, V, 20000, counts);
    for (int i = 0; i < V; i++)
        ck_assert_msg(!(counts[i] && (isnan(l[i]) || isinf(l[i]))), "non-finite token %d drawn", i);
    /* all NaN / -inf: an error, not a crash */
    for (int i = 0; i < V; i++) l[i] = i % 2 ? NAN : -INFINITY;
    struct smol_sampler *s = make(&p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    int32_t t = 0;
    char err[SMOL_ERRLEN] = "";
    ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_EINVAL);
    ck_assert_int_eq(t, -1);
    ck_assert(strstr(err, "NaN"));
    /* +inf takes all the mass, shared equally */
    for (int i = 0; i < V; i++) l[i] = (float)i;
    l[9] = INFINITY;
    float lp = 1.0f;
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, &lp, NULL), SMOL_OK);
        ck_assert_int_eq(t, 9);
        ck_assert_float_eq(lp, 0.0f);
    }
    l[40] = INFINITY;
    l[41] = NAN;
    p.top_p = 1.0f;
    draw(&p, l, V, 4000, counts);
    ck_assert(counts[9] + counts[40] == 4000 && counts[9] > 1800 && counts[40] > 1800);
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

START_TEST(test_logprob)
{
    const float logits[4] = { logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f) };
    const double probs[4] = { 0.1, 0.4, 0.2, 0.3 };
    struct smol_sampler_params p = plain(1.0f);
    struct smol_sampler *s = make(&p, 4);
    struct smol_sampler_scratch *sc = make_scratch(4);
    for (int i = 0; i < 100; i++) {
        int32_t t;
        float lp;
        ck_assert_int_eq(smol_sampler_sample(s, sc, logits, &t, &lp, NULL), SMOL_OK);
        ck_assert_double_eq_tol(lp, log(probs[t]), 1e-5);
    }
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST


/* ---------------------------------------------------------- logit bias --- */

/* Bias enters before everything: -100 bans a token even under greedy, +100
 * forces one, and at temperature 1 the draws follow softmax(logits + bias). */
START_TEST(test_logit_bias)
{
    enum { V = 8 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(i % 3) - 0.5f * (float)i;   /* max at 2 */
    char err[SMOL_ERRLEN] = "";
    struct smol_sampler_params p = plain(0.0f);
    struct smol_sampler *s = make(&p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    int32_t t;
    ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_OK);
    ck_assert_int_eq(t, 2);
    int32_t ban[1] = { 2 }, force[1] = { 7 };
    float minus[1] = { -100.0f }, plus[1] = { 100.0f };
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, ban, minus, 1, err), SMOL_OK);
    ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_OK);
    ck_assert_int_ne(t, 2);
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, force, plus, 1, err), SMOL_OK);
    ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_OK);
    ck_assert_int_eq(t, 7);
    /* bad entries are refused by name and leave the list as it was */
    int32_t out_of_vocab[1] = { V };
    float nan_bias[1] = { NAN }, big[1] = { 100.5f };
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, out_of_vocab, plus, 1, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "vocabulary"), "%s", err);
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, force, nan_bias, 1, err), SMOL_EINVAL);
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, force, big, 1, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "[-100, 100]"), "%s", err);
    ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_OK);
    ck_assert_int_eq(t, 7);
    smol_sampler_free(&s);

    /* distribution at T = 1: chi-square against softmax(l + b) */
    p = plain(1.0f);
    s = make(&p, V);
    int32_t ids[3] = { 0, 5, 0 };
    float b[3] = { 1.5f, 2.0f, 0.25f };              /* id 0 listed twice: +1.75 */
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, ids, b, 3, err), SMOL_OK);
    float lb[V];
    memcpy(lb, l, sizeof lb);
    lb[0] += 1.75f;
    lb[5] += 2.0f;
    double probs[V], wrong[V];
    softmax(lb, V, 1.0, NULL, probs);
    softmax(l, V, 1.0, NULL, wrong);
    long counts[V] = { 0 };
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(smol_sampler_sample(s, sc, l, &t, NULL, err), SMOL_OK);
        counts[t]++;
    }
    ck_assert_double_lt(chi2(counts, probs, V, n), chi2_crit(V - 1));
    ck_assert_double_gt(chi2(counts, wrong, V, n), chi2_crit(V - 1));   /* the unbiased one is rejected */
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* Reported logprobs: log-softmax at T = 1 of logits + bias - penalties, in
 * double here, whatever temperature / top-k / top-p the draw used; the top
 * list is the n best, best first, ties to the lower id. */
START_TEST(test_logprobs_processed)
{
    enum { V = 1000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(4.0 * urand() - 2.0);
    l[17] = l[18] = 3.0f;                           /* a tie at the top */
    l[33] = 1.0f;                                   /* leads with its bias: (1 + 4) / 1.3 */
    l[900] = -INFINITY;
    struct smol_sampler_params p = plain(0.7f);
    p.top_k = 5;
    p.top_p = 0.9f;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    struct smol_sampler *s = make(&p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    char err[SMOL_ERRLEN] = "";
    int32_t ids[2] = { 18, 33 };
    float b[2] = { -0.5f, 4.0f };
    ck_assert_int_eq(smol_sampler_set_logit_bias(s, ids, b, 2, err), SMOL_OK);
    int32_t prompt[3] = { 33, 40, 40 };
    ck_assert_int_eq(smol_sampler_accept(s, prompt, 3, false, err), SMOL_OK);
    static int seen[V], gen[V];
    seen[33] = seen[40] = 1;
    for (int step = 0; step < 6; step++) {
        /* the expected processed logits, from the history as the test keeps it */
        static float x[V];
        memcpy(x, l, sizeof x);
        x[18] += -0.5f;
        x[33] += 4.0f;
        for (int i = 0; i < V; i++) {
            if (seen[i]) x[i] = x[i] > 0.0f ? x[i] / 1.3f : x[i] * 1.3f;
            x[i] -= gen[i] ? 0.5f * (float)gen[i] : 0.0f;
        }
        double m = -INFINITY, z = 0.0;
        for (int i = 0; i < V; i++) if (x[i] > m) m = x[i];
        for (int i = 0; i < V; i++) if (x[i] > -INFINITY) z += exp((double)x[i] - m);
        struct smol_sampler_logprobs lp = { .n_top = step == 5 ? 20 : 3 };
        int32_t t;
        ck_assert_int_eq(smol_sampler_sample_lp(s, sc, l, &t, &lp, err), SMOL_OK);
        ck_assert_double_eq_tol(lp.logprob, (double)x[t] - m - log(z), 1e-5);
        ck_assert_int_eq(lp.n_top, step == 5 ? 20 : 3);
        for (int k = 0; k < lp.n_top; k++) {
            int32_t id = lp.top_id[k];
            ck_assert_double_eq_tol(lp.top_logprob[k], (double)x[id] - m - log(z), 1e-5);
            /* rank: exactly k tokens beat it in (x desc, id asc) */
            int better = 0;
            for (int i = 0; i < V; i++) better += x[i] > x[id] || (x[i] == x[id] && i < id);
            ck_assert_int_eq(better, k);
        }
        seen[t] = 1;
        gen[t]++;
    }
    struct smol_sampler_logprobs lp = { .n_top = 21 };
    int32_t t;
    ck_assert_int_eq(smol_sampler_sample_lp(s, sc, l, &t, &lp, err), SMOL_EINVAL);
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
}
END_TEST

/* ------------------------------------------------- full vocabulary size --- */

START_TEST(test_full_vocab)
{
    enum { V = 128256, N = 100 };
    float *l = malloc(V * sizeof *l);
    ck_assert_ptr_nonnull(l);
    /* a peaked, LLM-like shape: a Gaussian bulk plus a few strong candidates */
    for (int i = 0; i < V; i++) {
        double u1 = urand() + 1e-12, u2 = urand();
        l[i] = (float)(2.5 * sqrt(-2.0 * log(u1)) * cos(6.283185307 * u2));
    }
    for (int i = 0; i < 20; i++) l[(i * 7919) % V] = 12.0f + (float)i * 0.3f;
    /* reference top-p set for the defaults (T 0.6, top_p 0.95) */
    const double T = 0.6;
    double m = -INFINITY, z = 0.0;
    for (int i = 0; i < V; i++) if (l[i] > m) m = l[i];
    for (int i = 0; i < V; i++) z += exp((l[i] - m) / T);
    struct smol_sampler_params p = smol_sampler_defaults();
    p.seed = 99;
    struct smol_sampler *s = make(&p, V);
    struct smol_sampler_scratch *sc = make_scratch(V);
    const struct { const char *name; float flat; int32_t top_k; float temperature; } cfg[] = {
        { "defaults, peaked", 0, 0, 0.6f }, { "defaults, flat", 1, 0, 0.6f },
        { "top_k 40, flat", 1, 40, 0.6f }, { "greedy", 0, 0, 0.0f },
    };
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        if (cfg[c].flat) for (int i = 0; i < V; i++) l[i] = (float)(urand() * 3.0);
        struct smol_sampler_params q = p;
        q.top_k = cfg[c].top_k;
        q.temperature = cfg[c].temperature;
        struct smol_sampler *s2 = make(&q, V);
        static int32_t toks[N];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(smol_sampler_sample(s2, sc, l, &toks[i], NULL, NULL), SMOL_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3) / N;
        printf("sampler %-18s V=%d: %.1f us/sample\n", cfg[c].name, V, us);
        /* peaked case: every drawn token lies inside the reference top-p set,
         * i.e. the mass strictly before it (in sampler order) is < top_p */
        for (int i = 0; c == 0 && i < 20; i++) {
            int32_t t = toks[i];
            double pt = exp((l[t] - m) / T), above = 0.0;
            for (int j = 0; j < V; j++) {
                double pj = exp((l[j] - m) / T);
                if (pj > pt || (pj == pt && j < t)) above += pj;
            }
            ck_assert_msg(above < 0.95 * z, "token %d lies beyond the top-p set", t);
        }
        smol_sampler_free(&s2);
    }
    smol_sampler_scratch_free(&sc);
    smol_sampler_free(&s);
    free(l);
}
END_TEST


/* The backends' batch sampler (smol_sample_row_ref, the CUDA kernel's twin): argmax rules, and
 * the distribution over a fine grid of u equal to the sort-based nucleus (the host sampler's
 * top_p rule) computed in double: the bisection finds the same set. */
static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

START_TEST(test_batch_sampler_ref)
{
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = -1.0f;
    x[7] = x[3] = 2.0f;
    x[5] = NAN;
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 0.0f, 1.0f, 0.5f, NULL), 3);      /* ties: lowest id */
    /* a tiny nucleus keeps every token at the maximum (the threshold is a probability): 3 and 7 */
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 1.0f, 1e-6f, 0.25f, NULL), 3);
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 1.0f, 1e-6f, 0.75f, NULL), 7);
    x[7] = 1.5f;
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 1.0f, 1e-6f, 0.99f, NULL), 3);
    for (int i = 0; i < 64; i++) x[i] = i == 9 ? NAN : -INFINITY;
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 1.0f, 0.9f, 0.5f, NULL), -1);     /* nothing samplable */
    x[11] = 0.0f;
    ck_assert_int_eq(smol_sample_row_ref(x, 64, 1.0f, 0.9f, 0.5f, NULL), 11);
    /* distributions: 40 random logits, temperatures and nuclei */
    uint64_t st = 12345;
    const float temps[] = {0.3f, 0.7f, 1.0f, 1.6f}, tops[] = {1.0f, 0.95f, 0.8f, 0.5f, 0.2f};
    enum { NV = 40, GRID = 20000 };
    for (int ti = 0; ti < 4; ti++)
        for (int pi = 0; pi < 5; pi++) {
            for (int i = 0; i < NV; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (float)((st >> 40) % 4000) / 1000.0f;
            }
            double p[NV], sorted[NV], z = 0, mx = -1e30;
            for (int i = 0; i < NV; i++) mx = x[i] > mx ? x[i] : mx;
            for (int i = 0; i < NV; i++) z += (p[i] = exp((x[i] - mx) / temps[ti]));
            memcpy(sorted, p, sizeof p);
            qsort(sorted, NV, sizeof *sorted, cmp_desc);
            double acc = 0, tau = 0;        /* the smallest prefix reaching top_p, the crossing one included */
            for (int k = 0; k < NV; k++) {
                acc += sorted[k];
                tau = sorted[k];
                if (tops[pi] < 1.0f && acc >= tops[pi] * z) break;
            }
            double kept = 0;
            for (int i = 0; i < NV; i++) kept += p[i] >= tau ? p[i] : 0;
            int count[NV] = {0};
            for (int g = 0; g < GRID; g++) {
                const int t = smol_sample_row_ref(x, NV, temps[ti], tops[pi], (g + 0.5f) / GRID, NULL);
                ck_assert(t >= 0 && t < NV);
                count[t]++;
            }
            for (int i = 0; i < NV; i++) {
                const double want = p[i] >= tau ? p[i] / kept : 0;
                ck_assert_msg(fabs(count[i] / (double)GRID - want) <= 1.0 / GRID + 1e-9,
                              "T %g top_p %g token %d: drawn %g of the time, the nucleus gives %g", temps[ti],
                              tops[pi], i, count[i] / (double)GRID, want);
            }
        }
}
END_TEST

/* The draws the backend sampler is handed: the request's seeded RNG, reproducible; "plain" is
 * exactly temperature + top_p. */
START_TEST(test_uniform_and_plain)
{
    char err[SMOL_ERRLEN];
    struct smol_sampler_params p = smol_sampler_defaults();
    p.seed = 99;
    struct smol_sampler *a, *b;
    ck_assert(smol_sampler_new(&a, &p, 1000, err) == SMOL_OK);
    ck_assert(smol_sampler_new(&b, &p, 1000, err) == SMOL_OK);
    for (int i = 0; i < 100; i++) {
        const float u = smol_sampler_uniform(a);
        ck_assert(u >= 0.0f && u < 1.0f);
        ck_assert(u == smol_sampler_uniform(b));
    }
    ck_assert(smol_sampler_is_plain(a));        /* the model card's defaults: T 0.6, top_p 0.95 */
    int32_t id = 5;
    float bias = 1.0f;
    ck_assert(smol_sampler_set_logit_bias(a, &id, &bias, 1, err) == SMOL_OK);
    ck_assert(!smol_sampler_is_plain(a));
    smol_sampler_free(&a);
    smol_sampler_free(&b);
    const struct { float *f; int32_t *i; float v; } not_plain[] = {
        {&p.repetition_penalty, NULL, 1.1f}, {&p.presence_penalty, NULL, 0.5f}, {&p.frequency_penalty, NULL, 0.5f},
        {&p.min_p, NULL, 0.05f}, {NULL, &p.top_k, 40},
    };
    for (size_t k = 0; k < sizeof not_plain / sizeof *not_plain; k++) {
        struct smol_sampler_params q = p;
        if (not_plain[k].f) *(float *)((char *)&q + ((char *)not_plain[k].f - (char *)&p)) = not_plain[k].v;
        else *(int32_t *)((char *)&q + ((char *)not_plain[k].i - (char *)&p)) = (int32_t)not_plain[k].v;
        ck_assert(smol_sampler_new(&a, &q, 1000, err) == SMOL_OK);
        ck_assert_msg(!smol_sampler_is_plain(a), "setting %zu is not plain", k);
        smol_sampler_free(&a);
    }
}
END_TEST

static Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_bad_params);
    tcase_add_test(tc, test_greedy);
    tcase_add_test(tc, test_temperature_matches_softmax);
    tcase_add_test(tc, test_top_k);
    tcase_add_test(tc, test_top_p_boundary);
    tcase_add_test(tc, test_top_p_large_set);
    tcase_add_test(tc, test_min_p);
    tcase_add_test(tc, test_penalties_exact);
    tcase_add_test(tc, test_penalty_window);
    tcase_add_test(tc, test_penalties_in_sampling);
    tcase_add_test(tc, test_seed_determinism);
    tcase_add_test(tc, test_nonfinite_logits);
    tcase_add_test(tc, test_logprob);
    tcase_add_test(tc, test_full_vocab);
    tcase_add_test(tc, test_logit_bias);
    tcase_add_test(tc, test_logprobs_processed);
    tcase_add_test(tc, test_batch_sampler_ref);
    tcase_add_test(tc, test_uniform_and_plain);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return sampler_suite();
}
