/*
 * test_yarn.c - YaRN (`--yarn`) against Hugging Face transformers' own YaRN.
 *
 * tests/fixtures/make_yarn_fixture.py builds, with transformers
 * (rope_parameters rope_type "yarn", factor 2):
 *   hf-yarn   a small SmolLM3 (4 layers, layer 3 NoPE) trained "for" 256
 *             positions (GGUF context_length 256), and transformers' logits at
 *             every position of a 400-token prompt: beyond the window and
 *             inside it, where YaRN changes the low frequencies and scales
 *             cos/sin;
 *   hf-long   a micro model with the real SmolLM3-3B rope (head_dim 128,
 *             theta 5e6, trained 65536), logits at the last 8 positions of a
 *             16K-token prompt;
 *   a rope table of the real model's YaRN at positions up to 131071, from
 *             transformers' inv_freq and attention factor, in float64.
 * Without --yarn the same comparisons fail by orders of magnitude (checked).
 */
#include <check.h>
#include <jansson.h>
#include <math.h>

#include "daemon/model/model.h"
#include "kernels/ops_ref.h"
#include "testutil.h"

static json_t *refs(void)
{
    const char *p = fixture_path("hf/hf-yarn.refs.json");
    ck_assert_msg(p, "tests/fixtures/hf/hf-yarn.refs.json missing");
    json_error_t je;
    json_t *r = json_load_file(p, 0, &je);
    ck_assert_msg(r, "%s", je.text);
    return r;
}

static struct smol_model *open_fixture(const char *gguf, int yarn, int kv_f32, int n_ctx, int max_tokens)
{
    char rel[256];
    snprintf(rel, sizeof rel, "hf/%s", gguf);
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.yarn = yarn;
    set.kv_f32 = kv_f32;
    set.quiet = 1;
    set.n_ctx = n_ctx;
    set.n_threads = 2;
    set.max_tokens = max_tokens;
    char err[SMOL_ERRLEN];
    struct smol_model *m = NULL;
    ck_assert_msg(smol_model_open(&m, fixture_path(rel), &set, err) == SMOL_OK, "%s", err);
    return m;
}

struct diff { double mean, max; int agree, n; };

static struct diff compare(const float *a, const float *b, int rows, int V)
{
    struct diff d = {0, 0, 0, rows};
    for (int t = 0; t < rows; t++) {
        int am = 0, bm = 0;
        for (int v = 0; v < V; v++) {
            double x = fabs((double)a[(size_t)t * V + v] - b[(size_t)t * V + v]);
            d.mean += x;
            d.max = x > d.max ? x : d.max;
            if (a[(size_t)t * V + v] > a[(size_t)t * V + am]) am = v;
            if (b[(size_t)t * V + v] > b[(size_t)t * V + bm]) bm = v;
        }
        d.agree += am == bm;
    }
    d.mean /= (double)rows * V;
    return d;
}

/* hf-yarn: our logits with YaRN at every position of the 400-token prompt,
 * against transformers (tolerance tol_hf) and against transformers with its
 * rope angles in float64 as ours are (tol64): the gap between the two
 * references is transformers' float32 angle error (in the index). */
static void check_hf_yarn(int kv_f32, const double tol_hf[2], const double tol64[2])
{
    json_t *r = refs();
    json_t *pr = json_object_get(r, "prompt");
    struct smol_model *m = open_fixture(json_string_value(json_object_get(r, "gguf")), 1, kv_f32, 0, 512);
    ck_assert_int_eq(m->cfg.ctx_train, 256);
    ck_assert_int_eq(m->cfg.n_ctx, 512); /* the window doubled */
    const int V = m->cfg.vocab, W = 256;
    json_t *ja = json_object_get(pr, "ids");
    const int n = (int)json_array_size(ja);
    ck_assert_int_gt(n, W);
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ja, i));
    char rel[256], err[SMOL_ERRLEN];
    float *lg = malloc((size_t)n * V * 4);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    ck_assert_msg(smol_model_eval(m, &seq, ids, n, 1, lg, err) == SMOL_OK, "%s", err);
    const char *files[2] = {"logits_file", "logits_file_rope64"}, *names[2] = {"transformers", "rope64"};
    const double *tols[2] = {tol_hf, tol64};
    for (int k = 0; k < 2; k++) {
        snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(pr, files[k])));
        size_t nb;
        float *ref = read_file(fixture_path(rel), &nb);
        ck_assert(ref && nb == (size_t)n * V * 4);
        struct diff in = compare(lg, ref, W, V), out = compare(lg + (size_t)W * V, ref + (size_t)W * V, n - W, V);
        printf("stats: yarn hf-yarn kv=%s vs %s: positions 0..%d mean |d| %.2e max %.2e argmax %d/%d; %d..%d "
               "(beyond the trained window) mean %.2e max %.2e argmax %d/%d (tolerance mean %.0e max %.0e)\n",
               kv_f32 ? "f32" : "f16", names[k], W - 1, in.mean, in.max, in.agree, in.n, W, n - 1, out.mean, out.max,
               out.agree, out.n, tols[k][0], tols[k][1]);
        ck_assert_msg(in.mean <= tols[k][0] && in.max <= tols[k][1], "%s inside: mean %g max %g", names[k], in.mean,
                      in.max);
        ck_assert_msg(out.mean <= tols[k][0] && out.max <= tols[k][1], "%s beyond: mean %g max %g", names[k],
                      out.mean, out.max);
        /* argmax where transformers' margin is clear */
        json_t *mg = json_object_get(pr, "margins");
        for (int t = 0; t < n; t++) {
            if (json_real_value(json_array_get(mg, t)) < 0.05) continue;
            int am = 0, rm = 0;
            for (int v = 1; v < V; v++) {
                if (lg[(size_t)t * V + v] > lg[(size_t)t * V + am]) am = v;
                if (ref[(size_t)t * V + v] > ref[(size_t)t * V + rm]) rm = v;
            }
            ck_assert_msg(am == rm, "argmax differs at position %d", t);
        }
        free(ref);
    }
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    free(ids); free(lg);
    json_decref(r);
}

/* f32 KV: float32 math, angles in double.  Tolerances: about 3x the
 * measured figures (see the stats lines; daemon/README.md, "YaRN"). */
START_TEST(t_yarn_hf_f32) { check_hf_yarn(1, (const double[]){6e-5, 1.5e-3}, (const double[]){3e-5, 5e-4}); }
END_TEST
/* the default f16 KV rounds K/V */
START_TEST(t_yarn_hf_kv16) { check_hf_yarn(0, (const double[]){1.5e-2, 0.25}, (const double[]){1.5e-2, 0.25}); }
END_TEST

/* Without --yarn: the window stays 256 (position 256 is refused), and the
 * logits inside it are transformers' plain RoPE, not its YaRN: the comparison
 * above would fail. */
START_TEST(t_yarn_off_differs)
{
    json_t *r = refs();
    json_t *pr = json_object_get(r, "prompt");
    struct smol_model *m = open_fixture(json_string_value(json_object_get(r, "gguf")), 0, 1, 0, 512);
    ck_assert_int_eq(m->cfg.n_ctx, 256);
    const int V = m->cfg.vocab;
    json_t *ja = json_object_get(pr, "ids");
    int32_t ids[257];
    for (int i = 0; i < 257; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ja, i));
    char rel[256], err[SMOL_ERRLEN];
    snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(pr, "logits_file")));
    float *ref = read_file(fixture_path(rel), NULL);
    ck_assert(ref);
    float *lg = malloc((size_t)256 * V * 4);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    ck_assert_int_eq(smol_model_eval(m, &seq, ids, 257, 1, NULL, err), SMOL_ECONTEXT);
    ck_assert_msg(smol_model_eval(m, &seq, ids, 256, 1, lg, err) == SMOL_OK, "%s", err);
    struct diff d = compare(lg, ref, 256, V);
    printf("stats: yarn hf-yarn without --yarn vs transformers' YaRN, positions 0..255: mean |d| %.2e max %.2e "
           "argmax %d/256\n", d.mean, d.max, d.agree);
    ck_assert_msg(d.mean > 0.1 && d.max > 1, "without YaRN the logits match transformers' YaRN: mean %g", d.mean);
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    free(ref); free(lg);
    json_decref(r);
}
END_TEST

/* hf-long: the real rope (head_dim 128, theta 5e6, trained 65536).  With
 * --yarn 131072 positions are addressable; the backend's rotation at
 * positions up to 131071, with the parameters the model derived from its own
 * GGUF, against the float64 table built from transformers' YaRN. */
START_TEST(t_yarn_128k_positions)
{
    json_t *r = refs();
    json_t *lg = json_object_get(r, "long"), *tab = json_object_get(r, "rope_table_smollm3_3b");
    const char *gguf = json_string_value(json_object_get(lg, "gguf"));
    struct smol_model *m = open_fixture(gguf, 0, 0, 0, 64);
    ck_assert_int_eq(m->cfg.n_ctx, 65536);
    smol_model_close(&m);
    m = open_fixture(gguf, 1, 0, 0, 64);
    ck_assert_int_eq(m->cfg.ctx_train, 65536);
    ck_assert_int_eq(m->cfg.head_dim, 128);
    ck_assert_int_eq(m->cfg.n_ctx, 131072);
    ck_assert_int_eq(m->cfg.rope_dims, (int)json_integer_value(json_object_get(tab, "head_dim")));
    ck_assert(m->cfg.rope_base == (float)json_real_value(json_object_get(tab, "rope_theta")));
    json_t *rows = json_object_get(tab, "rows");
    const int n = (int)json_array_size(rows), hd = 128;
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(rows, n - 1), "pos")), 131071);
    /* one head per position: x = (1, 0) in every pair, so the rotated pair is (cos, sin) */
    float *x = NULL;
    int32_t *pos = malloc(n * sizeof *pos);
    float *host = malloc((size_t)n * hd * 4);
    for (int t = 0; t < n; t++) {
        pos[t] = (int32_t)json_integer_value(json_object_get(json_array_get(rows, t), "pos"));
        for (int i = 0; i < hd; i++) host[(size_t)t * hd + i] = i % 2 == 0;
    }
    struct smol_backend *be = m->be;
    x = be->alloc(be, (size_t)n * hd * 4);
    ck_assert(x);
    be->from_host(be, x, host, (size_t)n * hd * 4);
    be->rope(be, x, pos, n, 1, hd, &m->rope);
    be->to_host(be, host, x, (size_t)n * hd * 4);
    double mx = 0;
    for (int t = 0; t < n; t++) {
        json_t *row = json_array_get(rows, t);
        json_t *c = json_object_get(row, "cos"), *s = json_object_get(row, "sin");
        for (int i = 0; i < hd / 2; i++) {
            double dc = fabs(host[(size_t)t * hd + 2 * i] - json_real_value(json_array_get(c, i)));
            double ds = fabs(host[(size_t)t * hd + 2 * i + 1] - json_real_value(json_array_get(s, i)));
            mx = fmax(mx, fmax(dc, ds));
        }
    }
    printf("stats: yarn rope at positions up to 131071 (head_dim 128, theta 5e6, trained 65536) vs float64 "
           "transformers YaRN: max |d| %.2e (transformers' own float32 angles: %.2e)\n", mx,
           json_real_value(json_object_get(tab, "transformers_float32_cos_error_at_these_positions")));
    ck_assert_msg(mx < 1e-5, "rope table off by %g", mx);
    be->free(be, x);
    free(pos); free(host);
    smol_model_close(&m);
    json_decref(r);
}
END_TEST

/* the prompt of hf-long (make_yarn_fixture.long_ids) */
static int32_t *long_ids(int n)
{
    int32_t *ids = malloc(n * sizeof *ids);
    uint64_t x = 19;
    for (int i = 0; i < n; i++) {
        x = (1103515245u * x + 12345u) % (1u << 31);
        ids[i] = (int32_t)((x >> 16) % 504);
    }
    return ids;
}

/* 16K positions end to end with --yarn: the last 8 positions of a
 * 16384-token prompt vs transformers (sdpa, float32), and vs transformers
 * with float64 angles: at 16K transformers' own float32 angles move its
 * logits by mean 1.2e-3 / max 1e-2, so the tight check is the second. */
START_TEST(t_yarn_16k)
{
    json_t *r = refs();
    json_t *lg = json_object_get(r, "long");
    json_t *ck = json_object_get(json_object_get(lg, "checks"), "p16k");
    ck_assert(ck);
    const int n = (int)json_integer_value(json_object_get(ck, "n_tokens")), last = 8;
    struct smol_model *m = open_fixture(json_string_value(json_object_get(lg, "gguf")), 1, 1, n, 512);
    const int V = m->cfg.vocab;
    char rel[256], err[SMOL_ERRLEN];
    int32_t *ids = long_ids(n);
    float *out = malloc((size_t)last * V * 4);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    ck_assert_msg(smol_model_eval(m, &seq, ids, n - last, 0, NULL, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_model_eval(m, &seq, ids + n - last, last, 1, out, err) == SMOL_OK, "%s", err);
    const char *files[2] = {"last_logits_file", "last_logits_file_rope64"}, *names[2] = {"transformers", "rope64"};
    const double tol[2][2] = {{4e-3, 3e-2}, {1e-4, 1e-3}};
    for (int k = 0; k < 2; k++) {
        snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(ck, files[k])));
        size_t nb;
        float *ref = read_file(fixture_path(rel), &nb);
        ck_assert(ref && nb == (size_t)last * V * 4);
        struct diff d = compare(out, ref, last, V);
        printf("stats: yarn hf-long %d tokens, positions %d..%d vs %s: mean |d| %.2e max %.2e argmax %d/%d "
               "(tolerance mean %.0e max %.0e)\n", n, n - last, n - 1, names[k], d.mean, d.max, d.agree, last,
               tol[k][0], tol[k][1]);
        ck_assert_msg(d.mean <= tol[k][0] && d.max <= tol[k][1], "16K vs %s: mean %g max %g", names[k], d.mean, d.max);
        ck_assert_int_eq(d.agree, last);
        free(ref);
    }
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
    free(ids); free(out);
    json_decref(r);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("yarn");
    TCase *tc = tcase_create("transformers");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, t_yarn_hf_f32);
    tcase_add_test(tc, t_yarn_hf_kv16);
    tcase_add_test(tc, t_yarn_off_differs);
    tcase_add_test(tc, t_yarn_128k_positions);
    /* a 16K-token prefill: minutes under the sanitizers; the sanitizer run
     * (SMOL_TEST_QUICK) leaves it to make test */
    if (!getenv("SMOL_TEST_QUICK")) tcase_add_test(tc, t_yarn_16k);
    suite_add_tcase(s, tc);
    return s;
}
