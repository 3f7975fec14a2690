/*
 * test_kvquant.c - the KV cache types: memory per token, and the logits error
 * a q8_0 KV cache adds, held to the spread llama.cpp's own q8_0 KV cache shows.
 *
 * The error: every position's logits over the 512-token prompt of
 * tests/fixtures/kvquant (ids as llama.cpp tokenized prompt.txt), with a q8_0
 * KV cache against an f16 one, on fixture-a (SmolLM3 architecture, Q4_K_M)
 * and SmolLM2-135M-Instruct (Q4_1, build/models, fetched by `make test`).
 * tests/kv_quant_llama.py measured llama.cpp's q8_0-vs-f16 figures on the
 * same models and ids (tests/fixtures/kvquant/figures.json, README "KV cache
 * types"); the tolerances below are those figures with a margin, and the
 * figures this code measured are written next to them.  The llama.cpp
 * figures are read from figures.json too and printed beside ours.  Both
 * engines rotate K and V by a Walsh-Hadamard matrix before quantizing them
 * (kv.h; llama.cpp's attn_rot_k / attn_rot_v): the rotation is checked here
 * too (orthonormal, its own inverse, Sylvester order).
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/model/model.h"
#include "kernels/ops_ref.h"
#include "kernels/quant.h"
#include "testutil.h"

#define SMOLLM2 "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define CHUNK 64

START_TEST(bytes_per_token)
{
    /* SmolLM3-3B: 36 layers, 4 KV heads x 128 */
    ck_assert_uint_eq(smol_kv_bytes_per_token(36, 4, 128, SMOL_TYPE_F32), 147456);
    ck_assert_uint_eq(smol_kv_bytes_per_token(36, 4, 128, SMOL_TYPE_F16), 73728);
    ck_assert_uint_eq(smol_kv_bytes_per_token(36, 4, 128, SMOL_TYPE_Q8_0), 39168); /* 34/64 of f16 */
    ck_assert_uint_eq(smol_kv_row_bytes(128, SMOL_TYPE_Q8_0), 4 * 34);
    ck_assert_uint_eq(smol_kv_row_bytes(48, SMOL_TYPE_Q8_0), 0);  /* not whole blocks */
    ck_assert_uint_eq(smol_kv_row_bytes(64, SMOL_TYPE_Q4_0), 0);  /* not a KV type */
    uint32_t t;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_kv_type_parse("q8_0", &t, err), SMOL_OK);
    ck_assert_uint_eq(t, SMOL_TYPE_Q8_0);
    ck_assert_int_eq(smol_kv_type_parse("f32", &t, err), SMOL_OK);
    ck_assert_uint_eq(t, SMOL_TYPE_F32);
    ck_assert_int_eq(smol_kv_type_parse("q4_0", &t, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "f32, f16 or q8_0"), "%s", err);
    ck_assert_int_eq(smol_kv_type_parse("Q8_0", &t, err), SMOL_EINVAL);
}
END_TEST

/* smol_hadamard_ref: H_4 / 2 in Sylvester order, norms kept, H H = I; the
 * group sizes a cache rotates by */
START_TEST(hadamard)
{
    float x[4] = {1, 0, 0, 0}, e[4] = {0, 0, 1, 0};
    smol_hadamard_ref(x, 4, 4);
    smol_hadamard_ref(e, 4, 4);
    const float c0[4] = {0.5f, 0.5f, 0.5f, 0.5f}, c2[4] = {0.5f, 0.5f, -0.5f, -0.5f};
    ck_assert(!memcmp(x, c0, sizeof x) && !memcmp(e, c2, sizeof e));
    float v[256], w[256];
    srand(3);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 256; i++) {
        v[i] = w[i] = (float)rand() / RAND_MAX - 0.5f + (i == 77 ? 40.0f : 0.0f); /* an outlier channel */
        n0 += (double)v[i] * v[i];
    }
    smol_hadamard_ref(w, 256, 128);
    float amax = 0;
    for (int i = 0; i < 256; i++) {
        n1 += (double)w[i] * w[i];
        if (i < 128 && fabsf(w[i]) > amax) amax = fabsf(w[i]);
    }
    ck_assert_msg(fabs(n1 - n0) < 1e-4 * n0, "norm %g vs %g", n1, n0);
    ck_assert_msg(amax < 40.0f / 8, "the outlier is spread: max %g", amax);   /* 40 / sqrt(128) + noise */
    smol_hadamard_ref(w, 256, 128);
    for (int i = 0; i < 256; i++) ck_assert_msg(fabsf(w[i] - v[i]) < 1e-5f, "H H = I at %d", i);
    int rk, rv;
    smol_kv_rot(128, SMOL_TYPE_Q8_0, &rk, &rv);
    ck_assert(rk == 128 && rv == 64);
    smol_kv_rot(64, SMOL_TYPE_Q8_0, &rk, &rv);
    ck_assert(rk == 64 && rv == 64);
    smol_kv_rot(192, SMOL_TYPE_Q8_0, &rk, &rv);
    ck_assert(rk == 64 && rv == 64);
    smol_kv_rot(96, SMOL_TYPE_Q8_0, &rk, &rv);   /* not whole groups of 64: stored unrotated */
    ck_assert(rk == 0 && rv == 0);
    smol_kv_rot(128, SMOL_TYPE_F16, &rk, &rv);
    ck_assert(rk == 0 && rv == 0);
}
END_TEST

static struct smol_model *open_model(const char *path, const char *kv_type, char *err)
{
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.kv_type = kv_type;
    set.n_threads = 2;
    set.quiet = 1;
    set.n_ctx = 1024;
    struct smol_model *m = NULL;
    return smol_model_open(&m, path, &set, err) == SMOL_OK ? m : NULL;
}

/* a q8_0 pool of a given byte budget holds 64/34 the tokens of an f16 one; a
 * head size that is not whole q8_0 blocks is refused by name */
START_TEST(budget_follows_type)
{
    const char *p = fixture_path("models/fixture-a.Q4_K_M.gguf");
    ck_assert_ptr_nonnull(p);
    char err[SMOL_ERRLEN];
    int pages[2];
    const char *types[2] = {"f16", "q8_0"};
    for (int i = 0; i < 2; i++) {
        struct smol_model_settings set;
        smol_model_settings_default(&set);
        set.kv_type = types[i];
        set.quiet = 1;
        set.n_threads = 1;
        set.kv_budget = 8 << 20;
        struct smol_model *m = NULL;
        ck_assert_msg(smol_model_open(&m, p, &set, err) == SMOL_OK, "%s", err);
        ck_assert_uint_eq(m->kv.type, i ? SMOL_TYPE_Q8_0 : SMOL_TYPE_F16);
        ck_assert_uint_eq(m->kv.page_bytes, (size_t)m->kv.n_kv_heads * SMOL_KV_PAGE * m->kv.row_bytes);
        pages[i] = m->kv.n_pages;
        smol_model_close(&m);
    }
    ck_assert_int_eq(pages[1], (int)((8 << 20) / (smol_kv_bytes_per_token(8, 2, 64, SMOL_TYPE_Q8_0) * SMOL_KV_PAGE)));
    ck_assert_int_ge(pages[1] * 34, pages[0] * 64 - 64);
    /* fixture-t: head size 16 */
    p = fixture_path("models/fixture-t.F32.gguf");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_null(open_model(p, "q8_0", err));
    ck_assert_msg(strstr(err, "head size 16"), "%s", err);
    ck_assert_ptr_null(open_model(p, "q4_1", err));
    ck_assert_msg(strstr(err, "f32, f16 or q8_0"), "%s", err);
}
END_TEST

/* q8_0 pages shared and copied on write: B takes A's first 40 positions (a
 * page and a part) and goes on with other tokens; its logits equal, bit for
 * bit, those of C computing the same tokens alone, and A's next-token logits
 * are unchanged by B's writes. */
START_TEST(q8_0_copy_on_write)
{
    const char *p = fixture_path("models/fixture-a.Q4_K_M.gguf");
    ck_assert_ptr_nonnull(p);
    char err[SMOL_ERRLEN];
    struct smol_model *m = open_model(p, "q8_0", err);
    ck_assert_msg(m, "%s", err);
    const int V = m->cfg.vocab;
    int32_t a[101], b[70];
    for (int i = 0; i < 101; i++) a[i] = 1000 + 37 * i;
    for (int i = 0; i < 70; i++) b[i] = i < 40 ? a[i] : 5000 + 11 * i;
    float *ra = malloc(V * sizeof(float)), *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float)),
          *lc = malloc(V * sizeof(float));
    struct smol_kv_seq sa, sb, sc;
    smol_kv_seq_init(&sa);
    smol_kv_seq_init(&sb);
    smol_kv_seq_init(&sc);
    ck_assert_msg(smol_model_eval(m, &sa, a, 100, 0, NULL, err) == SMOL_OK, "%s", err);
    ck_assert(smol_model_eval(m, &sa, a + 100, 1, 0, ra, err) == SMOL_OK);
    smol_kv_seq_truncate(&m->kv, &sa, 100);
    ck_assert(smol_kv_seq_share(&m->kv, &sb, &sa, 40, err) == SMOL_OK);
    ck_assert_int_eq(m->kv.refcount[sa.pages[1]], 2);
    ck_assert(smol_model_eval(m, &sb, b + 40, 30, 0, lb, err) == SMOL_OK);
    ck_assert_int_ne(sb.pages[1], sa.pages[1]);             /* copied */
    ck_assert_int_eq(sb.pages[0], sa.pages[0]);             /* still shared */
    ck_assert(smol_model_eval(m, &sc, b, 70, 0, lc, err) == SMOL_OK);
    ck_assert(!memcmp(lb, lc, V * sizeof(float)));
    ck_assert(smol_model_eval(m, &sa, a + 100, 1, 0, la, err) == SMOL_OK);
    ck_assert(!memcmp(la, ra, V * sizeof(float)));
    smol_kv_seq_deinit(&m->kv, &sa);
    smol_kv_seq_deinit(&m->kv, &sb);
    smol_kv_seq_deinit(&m->kv, &sc);
    ck_assert_int_eq(m->kv.n_free, m->kv.n_pages);
    smol_model_close(&m);
    free(ra); free(la); free(lb); free(lc);
}
END_TEST

struct kv_err { double mean_abs, rms, max_abs, mean_kl, top1; };

static int32_t *read_ids(const char *name, int *n)
{
    char rel[256];
    snprintf(rel, sizeof rel, "kvquant/%s.ids", name);
    const char *p = fixture_path(rel);
    ck_assert_msg(p, "missing tests/fixtures/%s", rel);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    int32_t *ids = malloc(4096 * sizeof *ids);
    int k = 0;
    while (k < 4096 && fscanf(f, "%d", &ids[k]) == 1) k++;
    fclose(f);
    *n = k;
    return ids;
}

/* llama.cpp's figure for a model from figures.json */
static double llama_figure(const char *name, const char *key)
{
    const char *p = fixture_path("kvquant/figures.json");
    ck_assert_ptr_nonnull(p);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j, "figures.json: %s", je.text);
    json_t *v = json_object_get(json_object_get(json_object_get(json_object_get(j, "models"), name),
                                                "llama_cpp_q8_0_vs_f16"), key);
    ck_assert_msg(json_is_number(v), "figures.json: no %s for %s", key, name);
    double x = json_number_value(v);
    json_decref(j);
    return x;
}

static struct kv_err measure(const char *path, const char *name)
{
    char err[SMOL_ERRLEN];
    int n;
    int32_t *ids = read_ids(name, &n);
    ck_assert_int_eq(n, 512);
    struct smol_model *a = open_model(path, "f16", err), *b;
    ck_assert_msg(a, "%s", err);
    ck_assert_msg((b = open_model(path, "q8_0", err)), "%s", err);
    ck_assert_uint_eq(b->kv.type, SMOL_TYPE_Q8_0);
    const int V = a->cfg.vocab;
    float *la = malloc((size_t)CHUNK * V * sizeof *la), *lb = malloc((size_t)CHUNK * V * sizeof *lb);
    struct smol_kv_seq sa, sb;
    smol_kv_seq_init(&sa);
    smol_kv_seq_init(&sb);
    double sum = 0, sq = 0, mx = 0, kl = 0;
    int agree = 0;
    for (int off = 0; off < n; off += CHUNK) {
        const int c = n - off < CHUNK ? n - off : CHUNK;
        ck_assert_msg(smol_model_eval(a, &sa, ids + off, c, 1, la, err) == SMOL_OK, "%s", err);
        ck_assert_msg(smol_model_eval(b, &sb, ids + off, c, 1, lb, err) == SMOL_OK, "%s", err);
        for (int t = 0; t < c; t++) {
            const float *x = la + (size_t)t * V, *y = lb + (size_t)t * V;
            int ax = 0, ay = 0;
            double mxx = x[0], mxy = y[0];
            for (int i = 0; i < V; i++) {
                const double d = fabs((double)x[i] - y[i]);
                sum += d;
                sq += d * d;
                if (d > mx) mx = d;
                if (x[i] > x[ax]) ax = i;
                if (y[i] > y[ay]) ay = i;
                if (x[i] > mxx) mxx = x[i];
                if (y[i] > mxy) mxy = y[i];
            }
            agree += ax == ay;
            double zx = 0, zy = 0;
            for (int i = 0; i < V; i++) {
                zx += exp(x[i] - mxx);
                zy += exp(y[i] - mxy);
            }
            double k = 0;
            for (int i = 0; i < V; i++) {
                const double lpx = x[i] - mxx - log(zx), lpy = y[i] - mxy - log(zy);
                k += exp(lpx) * (lpx - lpy);
            }
            kl += k;
        }
    }
    struct kv_err e = {sum / ((double)n * V), sqrt(sq / ((double)n * V)), mx, kl / n, (double)agree / n};
    printf("stats: %s q8_0 KV vs f16 KV, %d positions: mean |dlogit| %.4f (llama.cpp %.4f), RMS %.4f (%.4f), "
           "max %.3f (%.3f), mean KL %.2e (%.2e), top-1 agree %.1f%% (%.1f%%)\n", name, n, e.mean_abs,
           llama_figure(name, "mean_abs"), e.rms, llama_figure(name, "rms"), e.max_abs, llama_figure(name, "max_abs"),
           e.mean_kl, llama_figure(name, "mean_kl"), 100 * e.top1, 100 * llama_figure(name, "top1_agree"));
    smol_kv_seq_deinit(&a->kv, &sa);
    smol_kv_seq_deinit(&b->kv, &sb);
    smol_model_close(&a);
    smol_model_close(&b);
    free(la);
    free(lb);
    free(ids);
    return e;
}

/* llama.cpp (figures.json): mean |d| 0.0666, RMS 0.0842, max 0.625, mean KL 3.54e-3, top-1 86.3%.
 * Measured here (AVX-512; AVX2): mean |d| 0.0639 (0.0642), RMS 0.0807 (0.0811), max 0.539
 * (0.579), mean KL 3.26e-3 (3.29e-3), top-1 88.1% (85.2%).
 * Tolerance: llama.cpp's figures (mean, RMS, KL within them; top-1 within 3 points). */
START_TEST(error_fixture_a)
{
    const char *p = fixture_path("models/fixture-a.Q4_K_M.gguf");
    ck_assert_ptr_nonnull(p);
    struct kv_err e = measure(p, "fixture-a");
    ck_assert_msg(e.mean_abs <= 0.0666, "mean |dlogit| %g", e.mean_abs);
    ck_assert_msg(e.rms <= 0.0842, "RMS %g", e.rms);
    ck_assert_msg(e.max_abs <= 0.625, "max |dlogit| %g", e.max_abs);
    ck_assert_msg(e.mean_kl <= 3.54e-3, "mean KL %g", e.mean_kl);
    ck_assert_msg(e.top1 >= 0.863 - 0.03, "top-1 agreement %g", e.top1);
    ck_assert_msg(e.mean_abs > 0, "q8_0 and f16 logits are identical: the q8_0 cache is not in use");
}
END_TEST

/* llama.cpp (figures.json): mean |d| 0.1783, RMS 0.2313, max 1.832, mean KL 3.99e-3, top-1 96.9%.
 * Measured here (AVX-512; AVX2): mean |d| 0.1744 (0.1762), RMS 0.2241 (0.2263), max 1.941
 * (1.703), mean KL 3.97e-3 (3.72e-3), top-1 96.3% (97.7%).  Without the Hadamard rotation
 * it was 0.1919 (0.2025), 0.2667 (0.2765), 6.45 (5.02), 4.79e-3 (4.69e-3): one outlier
 * channel of K sets the scale of its block.  This model is that sensitive: f16 KV
 * against f32 KV alone gives mean |d| 0.166 and KL 3.95e-3, and a relative 1e-7 change
 * of K about 0.16 and 3.5e-3 (the logits' floor of chaos), so the figures move by a few
 * percent with the kernels' rounding (AVX-512 against AVX2 above).
 * Tolerance: 1.05 x llama.cpp's mean and RMS, 1.08 x its KL, 2 x its max, top-1 within 3
 * points: the unrotated cache fails every one but top-1. */
START_TEST(error_smollm2)
{
    if (access(SMOLLM2, R_OK)) {
        printf("SKIPPED: kv q8_0 error on SmolLM2: " SMOLLM2 " not found (run tests/get_smollm2.sh)\n");
        return;
    }
    struct kv_err e = measure(SMOLLM2, "SmolLM2-135M");
    ck_assert_msg(e.mean_abs <= 1.05 * 0.1783, "mean |dlogit| %g", e.mean_abs);
    ck_assert_msg(e.rms <= 1.05 * 0.2313, "RMS %g", e.rms);
    ck_assert_msg(e.max_abs <= 2 * 1.832, "max |dlogit| %g", e.max_abs);
    ck_assert_msg(e.mean_kl <= 1.08 * 3.99e-3, "mean KL %g", e.mean_kl);
    ck_assert_msg(e.top1 >= 0.969 - 0.03, "top-1 agreement %g", e.top1);
    ck_assert_msg(e.mean_abs > 0, "q8_0 and f16 logits are identical: the q8_0 cache is not in use");
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("kvquant");
    TCase *tc = tcase_create("kvquant");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bytes_per_token);
    tcase_add_test(tc, hadamard);
    tcase_add_test(tc, budget_follows_type);
    tcase_add_test(tc, q8_0_copy_on_write);
    tcase_add_test(tc, error_fixture_a);
    tcase_add_test(tc, error_smollm2);
    suite_add_tcase(s, tc);
    return s;
}
