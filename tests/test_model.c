/*
 * test_model.c - the engine against independent references.
 *
 * References (tests/fixtures/refs, copied from the shared fixtures): llama.cpp
 * outputs and an exact float64 NumPy pass over the same GGUF weights, for the
 * tiny SmolLM3 models fixture-t (F32, Q8_0) and fixture-a (Q4_K_M), prompts
 * of 8, 60 and 297 tokens.  Tolerances come from the spread the fixtures
 * README documents (llama.cpp vs exact: mean |dlogit| 0.03-0.06 on the
 * quantized models, < 2e-5 on F32) and are written next to each test.
 * Measured figures are printed ("stats:" lines) for the closing notes.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>

#include "daemon/model/model.h"
#include "kernels/quant.h"
#include "testrefs.h"

/* SMOL_TEST_QUICK=1 (the sanitizer run) skips the 297-token prompt. */
static int n_prompts(void) { return getenv("SMOL_TEST_QUICK") ? 2 : 3; }

static struct smol_model *open_fixture(const char *file, int kv_f32, int threads)
{
    const char *p = fixture_path(file);
    if (!p) return NULL;
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.kv_f32 = kv_f32;
    set.n_threads = threads;
    set.quiet = 1;
    set.n_ctx = 512;
    char err[SMOL_ERRLEN];
    struct smol_model *m = NULL;
    ck_assert_msg(smol_model_open(&m, p, &set, err) == SMOL_OK, "open %s: %s", file, err);
    return m;
}

#define CLEAR_MARGIN 0.25 /* reference top1-top2 margin above which argmax must agree */

/* The largest |logit difference| between llama.cpp and the exact pass over
 * the ids both top-20 lists hold, all rows of a prompt: how far the
 * fixture's quantization alone moves a logit (0 when the fixture has no
 * llama.cpp reference). */
static double llamacpp_vs_exact_max(json_t *pr, int n)
{
    json_t *lf = json_object_get(json_object_get(pr, "llamacpp"), "files");
    json_t *ef = json_object_get(json_object_get(pr, "exact"), "files");
    if (!lf || !ef) return 0;
    size_t nb;
    int32_t *li = load_ref_bin(json_string_value(json_object_get(lf, "top_ids")), &nb);
    float *ll = load_ref_bin(json_string_value(json_object_get(lf, "top_logits")), &nb);
    int32_t *ei = load_ref_bin(json_string_value(json_object_get(ef, "top_ids")), &nb);
    float *el = load_ref_bin(json_string_value(json_object_get(ef, "top_logits")), &nb);
    double mx = 0;
    for (int r = 0; r < n; r++)
        for (int a = 0; a < TOPK; a++)
            for (int b = 0; b < TOPK; b++)
                if (li[r * TOPK + a] == ei[r * TOPK + b] && fabs((double)ll[r * TOPK + a] - el[r * TOPK + b]) > mx)
                    mx = fabs((double)ll[r * TOPK + a] - el[r * TOPK + b]);
    free(li);
    free(ll);
    free(ei);
    free(el);
    return mx;
}

/* Runs prompt pi of a fixture, all positions, and compares with `which`
 * ("llamacpp" or "exact").  Against the exact pass, a margin is clear only
 * above what quantization alone moves a logit by, as llama.cpp shows on the
 * same file (Q4_K_M p3: 0.33; F32: 1e-5): below that an argmax flip is
 * rounding luck, not a defect (measured: a row of margin 0.29 flips with
 * one float summation order of the AVX-512 kernels and not with another,
 * while both have the same error statistics). */
static struct stats run_prompt(struct smol_model *m, json_t *refs, int pi, const char *which, float **logits_out,
                               int *n_out)
{
    json_t *pr = json_array_get(json_object_get(refs, "prompts"), pi);
    int n;
    int32_t *ids = json_ids(json_object_get(pr, "prompt_file_tokens"), &n);
    json_t *files = json_object_get(json_object_get(pr, which), "files");
    size_t nb;
    int32_t *rid = load_ref_bin(json_string_value(json_object_get(files, "top_ids")), &nb);
    ck_assert_int_eq(nb, (size_t)n * TOPK * 4);
    float *rl = load_ref_bin(json_string_value(json_object_get(files, "top_logits")), &nb);
    float *lg = malloc((size_t)n * m->cfg.vocab * sizeof *lg);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    char err[SMOL_ERRLEN];
    ck_assert_msg(smol_model_eval(m, &seq, ids, n, 1, lg, err) == SMOL_OK, "%s", err);
    smol_kv_seq_deinit(&m->kv, &seq);
    double margin = CLEAR_MARGIN;
    if (!strcmp(which, "exact") && llamacpp_vs_exact_max(pr, n) > margin) margin = llamacpp_vs_exact_max(pr, n);
    struct stats s = compare_top(lg, m->cfg.vocab, rid, rl, n, margin);
    if (logits_out) { *logits_out = lg; *n_out = n; } else free(lg);
    free(ids);
    free(rid);
    free(rl);
    return s;
}

/* Tolerances, from the fixtures' own spread (refs.json diagnostics):
 *  - F32 weights, F32 KV: only float32 arithmetic differs; the references
 *    agree with each other to < 2e-5 (measured here: mean 6e-7, max 9e-6).
 *  - F16 KV rounds K and V to 11 bits (measured: mean 1.4e-3, max 6e-3).
 *  - Q8_0 / Q4_K_M: we quantize activations as ggml does (q8_0, q8_K).  On
 *    8 tokens we equal llama.cpp to 1e-7 for Q8_0; on longer prompts
 *    llama.cpp's own batched path departs from its incremental one (mean
 *    0.023 on p3 in its diagnostics), and llama.cpp vs the exact pass is
 *    mean 0.03-0.06 / max 0.55.  The bound: mean |dlogit| over the
 *    top-20 <= 0.1 and argmax agreement >= 0.85 on Q4_K_M.
 *  - argmax must agree wherever the reference margin is clear (>= 0.25). */
struct tol { double mean, max, agree; };

static void check_model(const char *file, const char *base, int kv_f32, const char *which, struct tol t)
{
    struct smol_model *m = open_fixture(file, kv_f32, 2);
    if (!m) { printf("SKIPPED: %s not found\n", file); return; }
    json_t *refs = load_refs(base);
    for (int p = 0; p < n_prompts(); p++) {
        struct stats s = run_prompt(m, refs, p, which, NULL, NULL);
        printf("stats: %s kv=%s p%d vs %s: top-20 mean |d| %.2e max %.2e argmax agree %.3f (%d rows), "
               "%.3f where margin >= %.2f (%d rows)\n", base, kv_f32 ? "f32" : "f16", p + 1, which, s.mean, s.max,
               s.argmax_agree, s.rows, s.clear_agree, s.margin, s.clear_rows);
        if (getenv("SMOL_STATS_ONLY")) continue;
        ck_assert_msg(s.mean <= t.mean, "%s p%d vs %s: mean %.3e > %.3e", base, p + 1, which, s.mean, t.mean);
        ck_assert_msg(s.max <= t.max, "%s p%d vs %s: max %.3e > %.3e", base, p + 1, which, s.max, t.max);
        ck_assert_msg(s.argmax_agree >= t.agree, "%s p%d: argmax agreement %.3f < %.3f", base, p + 1,
                      s.argmax_agree, t.agree);
        ck_assert_msg(s.clear_agree == 1.0, "%s p%d: argmax differs where the margin is clear", base, p + 1);
    }
    json_decref(refs);
    smol_model_close(&m);
}

START_TEST(t_f32_exact) { check_model("models/fixture-t.F32.gguf", "fixture-t.F32", 1, "exact", (struct tol){1e-5, 1e-4, 1.0}); }
END_TEST
START_TEST(t_f32_llamacpp) { check_model("models/fixture-t.F32.gguf", "fixture-t.F32", 1, "llamacpp", (struct tol){1e-5, 1e-4, 1.0}); }
END_TEST
START_TEST(t_f32_kv16) { check_model("models/fixture-t.F32.gguf", "fixture-t.F32", 0, "exact", (struct tol){3e-3, 2e-2, 0.97}); }
END_TEST
START_TEST(t_q8_llamacpp) { check_model("models/fixture-t.Q8_0.gguf", "fixture-t.Q8_0", 1, "llamacpp", (struct tol){0.03, 0.2, 0.9}); }
END_TEST
START_TEST(t_q8_exact) { check_model("models/fixture-t.Q8_0.gguf", "fixture-t.Q8_0", 0, "exact", (struct tol){0.06, 0.5, 0.85}); }
END_TEST
START_TEST(t_q4km_llamacpp) { check_model("models/fixture-a.Q4_K_M.gguf", "fixture-a.Q4_K_M", 1, "llamacpp", (struct tol){0.05, 0.3, 0.9}); }
END_TEST
START_TEST(t_q4km_exact) { check_model("models/fixture-a.Q4_K_M.gguf", "fixture-a.Q4_K_M", 0, "exact", (struct tol){0.1, 0.6, 0.8}); }
END_TEST

/* Full logit vectors at the last prompt position (llama.cpp). */
START_TEST(t_last_logits)
{
    struct smol_model *m = open_fixture("models/fixture-a.Q4_K_M.gguf", 1, 2);
    if (!m) { printf("SKIPPED: fixture-a not found\n"); return; }
    json_t *refs = load_refs("fixture-a.Q4_K_M");
    int pis[] = {0, 2};
    for (int k = 0; k < n_prompts() - 1; k++) {
        json_t *pr = json_array_get(json_object_get(refs, "prompts"), pis[k]);
        int n;
        int32_t *ids = json_ids(json_object_get(pr, "prompt_file_tokens"), &n);
        size_t nb;
        const char *f = json_string_value(json_object_get(json_object_get(json_object_get(pr, "llamacpp"), "files"),
                                                          "last_logits"));
        float *ref = load_ref_bin(f, &nb);
        ck_assert_int_eq(nb, (size_t)m->cfg.vocab * 4);
        float *lg = malloc((size_t)m->cfg.vocab * 4);
        struct smol_kv_seq seq;
        smol_kv_seq_init(&seq);
        char err[SMOL_ERRLEN];
        ck_assert(smol_model_eval(m, &seq, ids, n, 0, lg, err) == SMOL_OK);
        double sum = 0, mx = 0;
        for (int i = 0; i < m->cfg.vocab; i++) {
            double d = fabs((double)lg[i] - ref[i]);
            sum += d;
            mx = d > mx ? d : mx;
        }
        printf("stats: fixture-a p%d full last logits vs llama.cpp: mean |d| %.2e max %.2e\n", pis[k] + 1,
               sum / m->cfg.vocab, mx);
        ck_assert_msg(sum / m->cfg.vocab <= 0.05 && mx <= 0.3, "last logits off: mean %g max %g",
                      sum / m->cfg.vocab, mx);
        smol_kv_seq_deinit(&m->kv, &seq);
        free(ids); free(ref); free(lg);
    }
    json_decref(refs);
    smol_model_close(&m);
}
END_TEST

/* Greedy tokens equal llama.cpp's while its top1-top2 margin is clear, and
 * the teacher-forced logits along its continuation match (gen_top20). */
static void check_greedy(const char *file, const char *base, double tol_mean, double tol_max)
{
    struct smol_model *m = open_fixture(file, 1, 2);
    if (!m) { printf("SKIPPED: %s not found\n", file); return; }
    json_t *refs = load_refs(base);
    char err[SMOL_ERRLEN];
    for (int p = 0; p < n_prompts(); p++) {
        json_t *pr = json_array_get(json_object_get(refs, "prompts"), p);
        json_t *lc = json_object_get(pr, "llamacpp");
        int n, ng;
        int32_t *ids = json_ids(json_object_get(pr, "prompt_file_tokens"), &n);
        int32_t *gen = json_ids(json_object_get(lc, "greedy_32"), &ng);
        json_t *margins = json_object_get(lc, "greedy_margins");
        float *lg = malloc((size_t)m->cfg.vocab * 4);
        struct smol_kv_seq seq;
        smol_kv_seq_init(&seq);
        ck_assert(smol_model_eval(m, &seq, ids, n, 0, lg, err) == SMOL_OK);
        int same = 0, compared = 0;
        for (int s = 0; s < ng; s++) {
            if (json_real_value(json_array_get(margins, s)) < CLEAR_MARGIN) break;
            int am = 0;
            for (int i = 1; i < m->cfg.vocab; i++) if (lg[i] > lg[am]) am = i;
            compared++;
            same += am == gen[s];
            ck_assert_msg(am == gen[s], "%s p%d greedy step %d: %d != llama.cpp %d", base, p + 1, s, am, gen[s]);
            ck_assert(smol_model_eval(m, &seq, &gen[s], 1, 0, lg, err) == SMOL_OK);
        }
        smol_kv_seq_deinit(&m->kv, &seq);
        /* teacher forcing along llama.cpp's continuation: rows 1..31 */
        int32_t *all = malloc((n + ng) * sizeof *all);
        memcpy(all, ids, n * sizeof *all);
        memcpy(all + n, gen, ng * sizeof *all);
        float *lga = malloc((size_t)(n + ng - 1) * m->cfg.vocab * 4);
        smol_kv_seq_init(&seq);
        ck_assert(smol_model_eval(m, &seq, all, n + ng - 1, 1, lga, err) == SMOL_OK);
        smol_kv_seq_deinit(&m->kv, &seq);
        size_t nb;
        int32_t *rid = load_ref_bin(json_string_value(json_object_get(json_object_get(lc, "files"), "gen_top_ids")), &nb);
        float *rl = load_ref_bin(json_string_value(json_object_get(json_object_get(lc, "files"), "gen_top_logits")), &nb);
        struct stats st = compare_top(lga + (size_t)n * m->cfg.vocab, m->cfg.vocab, rid, rl, ng - 1, CLEAR_MARGIN);
        printf("stats: %s p%d greedy: %d/%d clear-margin steps equal; teacher-forced gen top-20 mean |d| %.2e max %.2e\n",
               base, p + 1, same, compared, st.mean, st.max);
        ck_assert_msg(st.mean <= tol_mean && st.max <= tol_max, "teacher-forced logits off: mean %g max %g", st.mean, st.max);
        free(ids); free(gen); free(lg); free(all); free(lga); free(rid); free(rl);
    }
    json_decref(refs);
    smol_model_close(&m);
}
START_TEST(t_greedy_q4km) { check_greedy("models/fixture-a.Q4_K_M.gguf", "fixture-a.Q4_K_M", 0.05, 0.3); }
END_TEST
START_TEST(t_greedy_q8) { check_greedy("models/fixture-t.Q8_0.gguf", "fixture-t.Q8_0", 0.03, 0.2); }
END_TEST
START_TEST(t_greedy_f32) { check_greedy("models/fixture-t.F32.gguf", "fixture-t.F32", 1e-5, 1e-4); }
END_TEST

/* Per-layer trace against the exact float64 pass: tells which layer and
 * stage goes wrong.  Q4_K weights with q8_K activations drift smoothly from
 * the exact pass (measured: 1% relative at layer 0 growing to 2.7% at the
 * output, ffn_out up to 4.2%); a wrong RoPE / NoPE / GQA mapping gives O(1)
 * errors from the stage where it happens. */
struct trace_ctx { json_t *tensors; const float *ref; int bad; double worst; char worst_name[64]; };

static void on_trace(void *vctx, const char *name, const float *data, int n, int width)
{
    struct trace_ctx *c = vctx;
    size_t i;
    json_t *t;
    json_array_foreach(c->tensors, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name)) continue;
        const float *r = c->ref + json_integer_value(json_object_get(t, "offset_floats"));
        int rw = (int)json_integer_value(json_array_get(json_object_get(t, "shape"), 1));
        ck_assert_int_eq(rw, width);
        double num = 0, den = 0;
        for (int k = 0; k < n * width; k++) {
            num += ((double)data[k] - r[k]) * ((double)data[k] - r[k]);
            den += (double)r[k] * r[k];
        }
        double rel = sqrt(num / (den + 1e-30));
        if (rel > c->worst) { c->worst = rel; snprintf(c->worst_name, sizeof c->worst_name, "%s", name); }
        if (rel > 0.06) {
            printf("trace: %s relative error %.3e\n", name, rel);
            c->bad++;
        }
        return;
    }
}

START_TEST(t_trace)
{
    struct smol_model *m = open_fixture("models/fixture-a.Q4_K_M.gguf", 1, 2);
    if (!m) { printf("SKIPPED: fixture-a not found\n"); return; }
    json_t *refs = load_refs("fixture-a.Q4_K_M");
    json_t *pr = json_array_get(json_object_get(refs, "prompts"), 0);
    json_t *tr = json_object_get(json_object_get(pr, "exact"), "trace");
    size_t nb;
    struct trace_ctx c = {.tensors = json_object_get(tr, "tensors")};
    c.ref = load_ref_bin(json_string_value(json_object_get(tr, "file")), &nb);
    m->trace = on_trace;
    m->trace_ctx = &c;
    int n;
    int32_t *ids = json_ids(json_object_get(pr, "prompt_file_tokens"), &n);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    char err[SMOL_ERRLEN];
    /* all positions wanted so result_norm covers every row, as in the trace */
    float *lg = malloc((size_t)n * m->cfg.vocab * 4);
    ck_assert(smol_model_eval(m, &seq, ids, n, 1, lg, err) == SMOL_OK);
    printf("stats: trace vs exact: worst relative error %.3e at %s\n", c.worst, c.worst_name);
    ck_assert_msg(c.bad == 0, "%d traced stages off by > 6%% relative (worst %s)", c.bad, c.worst_name);
    smol_kv_seq_deinit(&m->kv, &seq);
    free(lg); free(ids); free((void *)c.ref);
    json_decref(refs);
    smol_model_close(&m);
}
END_TEST

/* Prefill of N tokens == N single-token steps (bit for bit on the CPU: the
 * same kernels see the same rows). */
START_TEST(t_prefill_equals_decode)
{
    struct smol_model *m = open_fixture("models/fixture-a.Q4_K_M.gguf", 0, 2);
    if (!m) { printf("SKIPPED: fixture-a not found\n"); return; }
    json_t *refs = load_refs("fixture-a.Q4_K_M");
    int n;
    int32_t *ids = json_ids(json_object_get(json_array_get(json_object_get(refs, "prompts"), 1), "prompt_file_tokens"), &n);
    const int V = m->cfg.vocab;
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    char err[SMOL_ERRLEN];
    struct smol_kv_seq s1, s2;
    smol_kv_seq_init(&s1);
    smol_kv_seq_init(&s2);
    ck_assert(smol_model_eval(m, &s1, ids, n, 1, a, err) == SMOL_OK);
    for (int i = 0; i < n; i++) ck_assert(smol_model_eval(m, &s2, ids + i, 1, 0, b + (size_t)i * V, err) == SMOL_OK);
    double mx = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) mx = fmax(mx, fabs(a[i] - b[i]));
    printf("stats: prefill vs token-by-token (%d tokens): max |d| %.3e\n", n, mx);
    ck_assert_msg(mx <= 1e-5, "prefill differs from decode by %g", mx);
    smol_kv_seq_deinit(&m->kv, &s1);
    smol_kv_seq_deinit(&m->kv, &s2);
    free(a); free(b); free(ids);
    json_decref(refs);
    smol_model_close(&m);
}
END_TEST

/* NoPE: with one token repeated, every position sees identical values (V is
 * the same everywhere, so attention returns it whatever the scores), hence
 * the hidden state is position-independent.  Then Kcur of a NoPE layer is
 * identical across positions, while RoPE layers rotate it. */
struct nope_ctx { int n_layers; double spread[64]; };

static void on_nope(void *vctx, const char *name, const float *data, int n, int width)
{
    struct nope_ctx *c = vctx;
    int l;
    if (sscanf(name, "Kcur-%d", &l) != 1) return;
    double mx = 0;
    for (int t = 1; t < n; t++)
        for (int i = 0; i < width; i++) mx = fmax(mx, fabs(data[(size_t)t * width + i] - data[i]));
    c->spread[l] = mx;
}

START_TEST(t_nope_layers)
{
    struct smol_model *m = open_fixture("models/fixture-a.Q4_K_M.gguf", 1, 1);
    if (!m) { printf("SKIPPED: fixture-a not found\n"); return; }
    ck_assert_int_eq(m->cfg.nope_interval, 4);
    struct nope_ctx c = {.n_layers = m->cfg.n_layers};
    m->trace = on_nope;
    m->trace_ctx = &c;
    int32_t ids[16];
    for (int i = 0; i < 16; i++) ids[i] = 9906;
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    char err[SMOL_ERRLEN];
    ck_assert(smol_model_eval(m, &seq, ids, 16, 0, NULL, err) == SMOL_OK);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        int nope = (l + 1) % 4 == 0;
        ck_assert_int_eq(smol_layer_has_rope(&m->cfg, l), !nope);
        if (nope) ck_assert_msg(c.spread[l] < 1e-4, "NoPE layer %d: K varies with position (%g)", l, c.spread[l]);
        else ck_assert_msg(c.spread[l] > 1e-2, "RoPE layer %d: K does not vary with position (%g)", l, c.spread[l]);
    }
    smol_kv_seq_deinit(&m->kv, &seq);
    smol_model_close(&m);
}
END_TEST

/* YaRN cos/sin against Hugging Face's formulation (inv_freq blend and
 * attention factor), computed independently here in double. */
START_TEST(t_yarn_rope)
{
    const int dim = 128, orig = 65536;
    const double base = 5e6, factor = 2.0;
    struct smol_rope_params rp = {.n_dims = dim, .freq_base = (float)base, .freq_scale = (float)(1 / factor),
                                  .ext_factor = 1, .attn_factor = 1};
    smol_rope_yarn_corr_dims(dim, orig, (float)base, 32, 1, rp.corr_dims);
    /* HF: find_correction_dim(num_rot) = dim * ln(orig / (num_rot 2 pi)) / (2 ln base) */
    double lo = floor(dim * log(orig / (32 * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(dim * log(orig / (1 * 2 * M_PI)) / (2 * log(base)));
    lo = fmax(lo, 0); hi = fmin(hi, dim - 1);
    if (lo == hi) hi += 0.001;
    float cs[256];
    for (int pos = 0; pos < 70000; pos += 9999) {
        smol_rope_cache_ref(cs, pos, &rp);
        for (int i = 0; i < dim / 2; i++) {
            double pf = pow(base, 2.0 * i / dim);
            double ramp = fmin(1, fmax(0, (i - lo) / (hi - lo)));
            double extrap_factor = 1 - ramp;
            double inv = (1 / (factor * pf)) * (1 - extrap_factor) + (1 / pf) * extrap_factor;
            double af = 0.1 * log(factor) + 1;
            ck_assert_msg(fabs(cs[2 * i] - cos(pos * inv) * af) < 2e-4 && fabs(cs[2 * i + 1] - sin(pos * inv) * af) < 2e-4,
                          "yarn pos %d pair %d: %f vs %f", pos, i, cs[2 * i], cos(pos * inv) * af);
        }
    }
}
END_TEST

/* Prefix sharing and copy-on-write: a sequence that shares a prefix gives the
 * same logits as computing it from scratch, also after the original writes
 * over the shared page. */
START_TEST(t_kv_share_cow)
{
    struct smol_model *m = open_fixture("models/fixture-t.F32.gguf", 1, 2);
    if (!m) { printf("SKIPPED: fixture-t not found\n"); return; }
    const int V = m->cfg.vocab, n = 70, k = 45;
    int32_t ids[70], alt[70];
    for (int i = 0; i < n; i++) { ids[i] = (i * 7919) % 5000 + 100; alt[i] = (i * 104729) % 5000 + 200; }
    float *ref = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    char err[SMOL_ERRLEN];
    struct smol_kv_seq a, b, c;
    smol_kv_seq_init(&a); smol_kv_seq_init(&b); smol_kv_seq_init(&c);
    ck_assert(smol_model_eval(m, &c, ids, n, 0, ref, err) == SMOL_OK);      /* from scratch */
    ck_assert(smol_model_eval(m, &a, ids, n, 0, got, err) == SMOL_OK);
    int free_before = m->kv.n_free;
    ck_assert(smol_kv_seq_share(&m->kv, &b, &a, k, err) == SMOL_OK);
    ck_assert_int_eq(m->kv.n_free, free_before);                          /* shared, not copied */
    smol_kv_seq_truncate(&m->kv, &a, k - 10);                               /* a rewrites inside shared pages */
    ck_assert(smol_model_eval(m, &a, alt, 20, 0, got, err) == SMOL_OK);
    ck_assert(smol_model_eval(m, &b, ids + k, n - k, 0, got, err) == SMOL_OK);
    for (int i = 0; i < V; i++) ck_assert_msg(fabsf(got[i] - ref[i]) < 1e-5, "logit %d differs after share", i);
    smol_kv_seq_deinit(&m->kv, &a); smol_kv_seq_deinit(&m->kv, &b); smol_kv_seq_deinit(&m->kv, &c);
    ck_assert_int_eq(m->kv.n_free, m->kv.n_pages);                         /* nothing leaked */
    free(ref); free(got);
    smol_model_close(&m);
}
END_TEST

/* Bad input: each a clear error, never a crash. */
START_TEST(t_bad_input)
{
    struct smol_model *m = open_fixture("models/fixture-t.Q8_0.gguf", 0, 1);
    if (!m) { printf("SKIPPED: fixture-t not found\n"); return; }
    char err[SMOL_ERRLEN];
    struct smol_kv_seq s;
    smol_kv_seq_init(&s);
    int32_t bad = m->cfg.vocab;
    ck_assert_int_eq(smol_model_eval(m, &s, &bad, 1, 0, NULL, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "out of range"), "%s", err);
    int32_t neg = -1;
    ck_assert_int_eq(smol_model_eval(m, &s, &neg, 1, 0, NULL, err), SMOL_EINVAL);
    int32_t *many = calloc(600, sizeof *many);
    ck_assert_int_eq(smol_model_eval(m, &s, many, 600, 0, NULL, err), SMOL_ECONTEXT); /* n_ctx 512 */
    free(many);
    smol_kv_seq_deinit(&m->kv, &s);
    smol_model_close(&m);

    struct smol_model *x = NULL;
    ck_assert_int_eq(smol_model_open(&x, "/nonexistent/model.gguf", NULL, err), SMOL_EIO);
    ck_assert(x == NULL);
    ck_assert_msg(strstr(err, "/nonexistent/model.gguf"), "%s", err);
}
END_TEST

/* Writes a patched copy of a fixture: the bytes of `find` (first match
 * after the header) replaced by `repl` at offset `delta` from the match. */
static const char *patched(const char *fixture, const char *find, int delta, const void *repl, size_t n)
{
    static char path[256];
    size_t sz = 0;
    char *d = read_file(fixture_path(fixture), &sz);
    ck_assert(d);
    char *p = memmem(d, sz, find, strlen(find));
    ck_assert_msg(p, "pattern %s not in %s", find, fixture);
    memcpy(p + strlen(find) + delta, repl, n);
    snprintf(path, sizeof path, "/tmp/smol-test-%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    fwrite(d, 1, sz, f);
    fclose(f);
    free(d);
    return path;
}

START_TEST(t_bad_models)
{
    if (!fixture_path("models/fixture-a.Q4_K_M.gguf")) { printf("SKIPPED: fixture-a not found\n"); return; }
    char err[SMOL_ERRLEN];
    struct smol_model *m = NULL;
    /* tensor info: name, u32 n_dims, u64 ne[2], u32 type -> q2_K (known, unsupported) */
    uint32_t q2k = SMOL_TYPE_Q2_K;
    const char *p = patched("models/fixture-a.Q4_K_M.gguf", "blk.0.attn_q.weight", 4 + 16, &q2k, 4);
    ck_assert_int_eq(smol_model_open(&m, p, NULL, err), SMOL_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "blk.0.attn_q.weight") && strstr(err, "q2_K"), "%s", err);
    /* head_count 3 does not divide 256 */
    uint32_t three = 3;
    p = patched("models/fixture-a.Q4_K_M.gguf", "smollm3.attention.head_count", 4, &three, 4);
    ck_assert_int_eq(smol_model_open(&m, p, NULL, err), SMOL_EFORMAT);
    ck_assert_msg(strstr(err, "head_count"), "%s", err);
    /* architecture renamed */
    p = patched("models/fixture-a.Q4_K_M.gguf", "general.architecture", 4 + 8, "gemma3x", 7);
    ck_assert_int_eq(smol_model_open(&m, p, NULL, err), SMOL_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "gemma3x"), "%s", err);
    /* truncated file */
    size_t sz = 0;
    char *d = read_file(fixture_path("models/fixture-a.Q4_K_M.gguf"), &sz);
    char trunc[] = "/tmp/smol-trunc-XXXXXX";
    int fd = mkstemp(trunc);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "wb");
    fwrite(d, 1, sz / 2, f);
    fclose(f);
    free(d);
    ck_assert_int_eq(smol_model_open(&m, trunc, NULL, err), SMOL_EFORMAT);
    ck_assert_msg(strstr(err, "tensor '"), "%s", err);
    ck_assert(m == NULL);
    unlink(trunc);
    unlink(p);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, t_f32_exact);
    tcase_add_test(tc, t_f32_llamacpp);
    tcase_add_test(tc, t_f32_kv16);
    tcase_add_test(tc, t_q8_llamacpp);
    tcase_add_test(tc, t_q8_exact);
    tcase_add_test(tc, t_q4km_llamacpp);
    tcase_add_test(tc, t_q4km_exact);
    tcase_add_test(tc, t_last_logits);
    tcase_add_test(tc, t_greedy_q4km);
    tcase_add_test(tc, t_greedy_q8);
    tcase_add_test(tc, t_greedy_f32);
    tcase_add_test(tc, t_trace);
    tcase_add_test(tc, t_prefill_equals_decode);
    tcase_add_test(tc, t_nope_layers);
    tcase_add_test(tc, t_yarn_rope);
    tcase_add_test(tc, t_kv_share_cow);
    tcase_add_test(tc, t_bad_input);
    tcase_add_test(tc, t_bad_models);
    suite_add_tcase(s, tc);
    return s;
}
