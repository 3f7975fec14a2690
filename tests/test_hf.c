/*
 * test_hf.c - the engine against Hugging Face transformers.
 *
 * tests/fixtures/make_hf_fixture.py builds a small random
 * SmolLM3ForCausalLM (8 layers, so layers 3 and 7 are NoPE; GQA 4/2), writes
 * it as GGUF with the gguf package, Q/K rows permuted as llama.cpp's
 * converter does, and stores transformers' float32 logits for three prompts
 * and a greedy continuation.  This is independent of llama.cpp: it checks
 * the converter convention (adjacent-pair RoPE on permuted rows), NoPE and
 * tied embeddings against the model's reference implementation.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>

#include "daemon/model/model.h"
#include "testutil.h"

static void check_variant(const char *variant, int kv_f32, double tol_mean, double tol_max)
{
    const char *idx = fixture_path("hf/hf-tiny.refs.json");
    if (!idx) { printf("SKIPPED: tests/fixtures/hf missing\n"); return; }
    json_error_t je;
    json_t *refs = json_load_file(idx, 0, &je);
    ck_assert_msg(refs, "%s", je.text);
    json_t *mv = json_object_get(json_object_get(refs, "models"), variant);
    char rel[256];
    snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(mv, "gguf")));
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.kv_f32 = kv_f32;
    set.quiet = 1;
    set.n_ctx = 512;
    set.n_threads = 2;
    char err[SMOL_ERRLEN];
    struct smol_model *m = NULL;
    ck_assert_msg(smol_model_open(&m, fixture_path(rel), &set, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(m->cfg.nope_interval, 4);
    ck_assert(m->cfg.tied);
    const int V = m->cfg.vocab;
    const char *pn[] = {"p1", "p2", "p3"};
    for (int p = 0; p < 3; p++) {
        json_t *pr = json_object_get(json_object_get(refs, "prompts"), pn[p]);
        json_t *pm = json_object_get(json_object_get(mv, "prompts"), pn[p]);
        json_t *ja = json_object_get(pr, "ids");
        int n = (int)json_array_size(ja);
        int32_t *ids = malloc(n * sizeof *ids);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ja, i));
        snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(pm, "logits_file")));
        size_t nb;
        float *ref = read_file(fixture_path(rel), &nb);
        ck_assert(ref && nb == (size_t)n * V * 4);
        float *lg = malloc((size_t)n * V * 4);
        struct smol_kv_seq seq;
        smol_kv_seq_init(&seq);
        ck_assert_msg(smol_model_eval(m, &seq, ids, n, 1, lg, err) == SMOL_OK, "%s", err);
        double sum = 0, mx = 0;
        int agree = 0, clear = 0, clear_agree = 0;
        json_t *margins = json_object_get(pm, "margins");
        for (int t = 0; t < n; t++) {
            int am = 0, ra = 0;
            for (int v = 0; v < V; v++) {
                double d = fabs((double)lg[(size_t)t * V + v] - ref[(size_t)t * V + v]);
                sum += d;
                mx = d > mx ? d : mx;
                if (lg[(size_t)t * V + v] > lg[(size_t)t * V + am]) am = v;
                if (ref[(size_t)t * V + v] > ref[(size_t)t * V + ra]) ra = v;
            }
            agree += am == ra;
            if (json_real_value(json_array_get(margins, t)) >= 0.1) { clear++; clear_agree += am == ra; }
        }
        printf("stats: hf %s kv=%s %s (%d tokens): full-vocab mean |d| %.2e max %.2e, argmax %d/%d (clear %d/%d)\n",
               variant, kv_f32 ? "f32" : "f16", pn[p], n, sum / ((double)n * V), mx, agree, n, clear_agree, clear);
        ck_assert_msg(sum / ((double)n * V) <= tol_mean && mx <= tol_max, "%s %s: mean %g max %g", variant, pn[p],
                      sum / ((double)n * V), mx);
        ck_assert_msg(clear_agree == clear, "%s %s: argmax differs at a clear margin", variant, pn[p]);
        /* greedy continuation while transformers' margins are clear */
        json_t *gen = json_object_get(pm, "gen_ids"), *gm = json_object_get(pm, "gen_margins");
        float *last = malloc((size_t)V * 4);
        memcpy(last, lg + (size_t)(n - 1) * V, (size_t)V * 4);
        int steps = 0;
        for (size_t s = 0; s < json_array_size(gen); s++) {
            if (json_real_value(json_array_get(gm, s)) < 0.1) break;
            int am = 0;
            for (int v = 1; v < V; v++) if (last[v] > last[am]) am = v;
            ck_assert_msg(am == json_integer_value(json_array_get(gen, s)), "%s %s greedy step %zu", variant, pn[p], s);
            int32_t t = am;
            ck_assert(smol_model_eval(m, &seq, &t, 1, 0, last, err) == SMOL_OK);
            steps++;
        }
        printf("stats: hf %s %s greedy: %d steps equal before the first margin < 0.1\n", variant, pn[p], steps);
        smol_kv_seq_deinit(&m->kv, &seq);
        free(ids); free(ref); free(lg); free(last);
    }
    smol_model_close(&m);
    json_decref(refs);
}

/* F32: transformers float32 vs our float32 with an f32 KV cache. */
START_TEST(t_hf_f32) { check_variant("F32", 1, 1e-5, 2e-4); }
END_TEST
/* The default f16 KV cache rounds K/V. */
START_TEST(t_hf_f32_kv16) { check_variant("F32", 0, 2e-3, 2e-2); }
END_TEST
/* Q8_0: reference on the dequantized weights; we quantize activations to
 * q8_0 as llama.cpp does, which alone moves logits by mean ~0.03 (the same
 * spread llama.cpp shows against the exact pass on the shared fixtures). */
START_TEST(t_hf_q8) { check_variant("Q8_0", 0, 0.06, 0.4); }
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("hf");
    TCase *tc = tcase_create("transformers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_hf_f32);
    tcase_add_test(tc, t_hf_f32_kv16);
    tcase_add_test(tc, t_hf_q8);
    suite_add_tcase(s, tc);
    return s;
}
