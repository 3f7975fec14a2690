/*
 * test_cuda.c - the CUDA backend against the _ref kernels, the CPU backend
 * and the exact float64 references.
 *
 * Without a usable device (no plugin, no driver, no GPU) every test checks
 * that the loader says so with SMOL_EUNSUPPORTED and a reason, prints
 * "SKIPPED: no CUDA device (<reason>)" and passes.  With a device, two
 * cases (CK_RUN_CASE selects one; the device check runs the sanitizers on
 * "ops" and "fattn"):
 *   ops    every op through the backend interface on random data (fresh per
 *          run, outputs poisoned with NaN first) against its _ref twin in
 *          double; the q8 mat-vec (knob cuda_matvec = q8) against a float64
 *          dot of the same q8a activations; the fused steps (cuda_fuse)
 *          against their composition from the plain ops; the tensor-core
 *          GEMM (cuda_gemm = mma) against a float64 dot of the same
 *          f16-rounded activations, the int8 one (cuda_gemm = imma)
 *          against a float64 dot of the same q8a activations; the GEMM in
 *          one launch (cuda_gemm_fuse) bit for bit against the default
 *          GEMM path (the emulator also counts its launches).
 *   fattn  knob cuda_attn = tiled: the tiled attention (f16 and q8_0 KV) on
 *          prompts of 1..300 tokens over prefixes, mixed and decode batches,
 *          against a float64 attention of the cache's own K/V, within the
 *          bound its f16 rounding of Q, P (and q8_0's K, V) implies.
 *   model  for each knob setting: the tracked fixtures' logits against the
 *          exact references, no further from them than the CPU backend's;
 *          models `smollm3 synth` writes at test time (every weight type)
 *          against the CPU backend; greedy tokens equal where the margin is
 *          clear; a recorded step (cuda_graphs) bit for bit the unrecorded;
 *          hf-long's 16K-token prompt (head_dim 128) against transformers
 *          with cuda_attn paged and tiled.
 * Host data reaches device buffers through the interface only: an f32
 * "weight" uploaded, then get_rows.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/model/backend.h"
#include "daemon/model/backend_cuda_loader.h"
#include "daemon/model/model.h"
#include "kernels/ops_ref.h"
#include "kernels/quant_ref.h"
#include "kernels/fp16.h"
#include "kernels/cuda/mmvq.h"
#include "testutil.h"

/* SMOL_TEST_CUDA_EMU=1: every case on the host emulator's build of the same backend (backend
 * "cuda-emu", tests/cuda_emu; the cuda-emu suite) instead of the device's. */
static int on_emu(void) { return getenv("SMOL_TEST_CUDA_EMU") && *getenv("SMOL_TEST_CUDA_EMU") == '1'; }
static const char *cuda_name(void) { return on_emu() ? "cuda-emu" : "cuda"; }
static enum smol_err new_cuda(struct smol_backend **be, const struct smol_cuda_opts *opts, char *err)
{
    return on_emu() ? smol_backend_cuda_emu_new(be, opts, err) : smol_backend_cuda_new(be, 0, opts, err);
}

/* A CUDA backend with the knobs opts (NULL: the defaults), or NULL and a SKIPPED line. */
static struct smol_backend *open_cuda_opts(const struct smol_cuda_opts *opts)
{
    char err[SMOL_ERRLEN] = "";
    struct smol_backend *be = NULL;
    enum smol_err e = new_cuda(&be, opts, err);
    if (e) {
        ck_assert_int_eq(e, SMOL_EUNSUPPORTED);
        ck_assert_msg(err[0] && strstr(err, "cuda"), "loader failed without a reason");
        ck_assert(be == NULL);
        printf("SKIPPED: no CUDA device (%s)\n", err);
        return NULL;
    }
    ck_assert_msg(be->reserve(be, 96, 4096, 4096, err) == SMOL_OK, "%s", err);
    return be;
}

static struct smol_backend *open_cuda(void) { return open_cuda_opts(NULL); }

static unsigned rng = 12345;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *rand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* Device buffer [n][dim] holding host rows: upload as an f32 weight, then get_rows. */
static float *to_dev(struct smol_backend *be, const float *h, int n, int dim)
{
    struct smol_weight *w = calloc(1, sizeof *w);  /* the backend keeps its copy; the struct may leak */
    *w = (struct smol_weight){.name = "test", .type = SMOL_TYPE_F32, .rows = n, .cols = dim,
                              .row_bytes = (size_t)dim * 4, .data = h};
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->upload_weight(be, w, err) == SMOL_OK, "%s", err);
    float *d = be->alloc(be, (size_t)n * dim * 4);
    ck_assert(d);
    int32_t *ids = malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = i;
    be->get_rows(be, d, w, ids, n);
    free(ids);
    return d;
}

static float *from_dev(struct smol_backend *be, const float *d, size_t n)
{
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    be->to_host(be, h, d, n * 4);
    return h;
}

/* ||a - b|| / ||b||, NaN anywhere fails */
static double rel_err(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static double rel_err_f(const float *a, const float *b, size_t n)
{
    double *bd = malloc(n * sizeof *bd);
    for (size_t i = 0; i < n; i++) bd[i] = b[i];
    double r = rel_err(a, bd, n);
    free(bd);
    return r;
}

START_TEST(t_loader)
{
    struct smol_backend *be = open_cuda();
    if (!be) return;
    ck_assert_str_eq(be->name, cuda_name());
    smol_backend_free(&be);
}
END_TEST

START_TEST(t_elementwise)
{
    struct smol_backend *be = open_cuda();
    if (!be) return;
    const int n = 5, dim = 1000;
    float *x = rand_vec((size_t)n * dim, 3), *y = rand_vec((size_t)n * dim, 3), *w = rand_vec(dim, 1);
    float *dx = to_dev(be, x, n, dim), *dy = to_dev(be, y, n, dim), *dout = be->alloc(be, (size_t)n * dim * 4);
    struct smol_weight nw = {.name = "norm", .type = SMOL_TYPE_F32, .rows = 1, .cols = dim, .row_bytes = dim * 4, .data = w};
    char err[SMOL_ERRLEN];
    ck_assert(be->upload_weight(be, &nw, err) == SMOL_OK);
    float *ref = malloc((size_t)n * dim * 4);
    /* rmsnorm */
    be->rmsnorm(be, dout, dx, &nw, n, dim, 1e-5f);
    for (int t = 0; t < n; t++) smol_rmsnorm_ref(ref + t * dim, x + t * dim, w, dim, 1e-5f);
    float *got = from_dev(be, dout, (size_t)n * dim);
    ck_assert_msg(rel_err_f(got, ref, (size_t)n * dim) < 1e-6, "rmsnorm %g", rel_err_f(got, ref, (size_t)n * dim));
    free(got);
    /* silu_mul (odd count: scalar path), add */
    be->silu_mul(be, dx, dy, n * dim - 3);
    memcpy(ref, x, (size_t)n * dim * 4);
    smol_silu_mul_ref(ref, y, n * dim - 3);
    got = from_dev(be, dx, (size_t)n * dim);
    ck_assert_msg(rel_err_f(got, ref, (size_t)n * dim) < 1e-6, "silu_mul");
    free(got);
    be->add(be, dx, dy, n * dim);
    smol_add_ref(ref, y, n * dim);
    got = from_dev(be, dx, (size_t)n * dim);
    ck_assert_msg(rel_err_f(got, ref, (size_t)n * dim) < 1e-6, "add");
    free(got);
    /* hadamard (the q8_0 KV rotation), groups of 64 and 128: the ref's additions, bit for bit, on
     * the same input (dx held the device's silu_mul and add, equal to the CPU's only to 1e-6: the
     * first device run compared the rotations of those two different inputs) */
    be->free(be, dx);
    dx = to_dev(be, ref, n, dim);
    for (int group = 64; group <= 128; group *= 2) {
        be->hadamard(be, dx, 4 * 256, group);
        smol_hadamard_ref(ref, 4 * 256, group);
        got = from_dev(be, dx, 4 * 256);
        ck_assert_msg(!memcmp(got, ref, 4 * 256 * 4), "hadamard %d", group);
        free(got);
    }
    /* gather_rows, out of place and in place */
    int32_t idx[3] = {1, 3, 4};
    be->gather_rows(be, dout, dx, idx, 3, dim);
    got = from_dev(be, dout, (size_t)3 * dim);
    for (int i = 0; i < 3; i++) ck_assert(!memcmp(got + i * dim, ref + idx[i] * dim, dim * 4));
    free(got);
    be->gather_rows(be, dx, dx, idx, 3, dim);
    got = from_dev(be, dx, (size_t)3 * dim);
    for (int i = 0; i < 3; i++) ck_assert(!memcmp(got + i * dim, ref + idx[i] * dim, dim * 4));
    free(got);
    /* rope, plain and YaRN, on 4 heads of 64 with 48 rotated dims */
    struct smol_rope_params rp = {.n_dims = 48, .freq_base = 5e6f, .freq_scale = 1, .attn_factor = 1};
    for (int yarn = 0; yarn < 2; yarn++) {
        if (yarn) {
            rp.freq_scale = 0.5f;
            rp.ext_factor = 1;
            smol_rope_yarn_corr_dims(48, 4096, 5e6f, 32, 1, rp.corr_dims);
        }
        int32_t pos[5] = {0, 1, 77, 4000, 9000};
        float *q = rand_vec(5 * 256, 2), *dq = to_dev(be, q, 5, 256);
        be->rope(be, dq, pos, 5, 4, 64, &rp);
        float cs[64];
        for (int t = 0; t < 5; t++) {
            smol_rope_cache_ref(cs, pos[t], &rp);
            smol_rope_apply_ref(q + t * 256, 4, 64, 48, cs);
        }
        got = from_dev(be, dq, 5 * 256);
        ck_assert_msg(rel_err_f(got, q, 5 * 256) < 1e-6, "rope yarn=%d: %g", yarn, rel_err_f(got, q, 5 * 256));
        free(got);
        free(q);
    }
    free(x); free(y); free(w); free(ref);
    smol_backend_free(&be);
}
END_TEST

/* get_rows and matmul for each weight format, decode and prefill sizes, on the f32 mat-vec (knob
 * cuda_matvec = f32: exact to float rounding; t_matmul_q8 checks the q8 one, the default). */
START_TEST(t_matmul)
{
    static const struct smol_cuda_opts f32 = {.matvec = SMOL_CUDA_MATVEC_F32, .fuse = 0, .graphs = 0};
    struct smol_backend *be = open_cuda_opts(&f32);
    if (!be) return;
    const uint32_t types[] = {SMOL_TYPE_F32, SMOL_TYPE_F16, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K,
                              SMOL_TYPE_Q4_0, SMOL_TYPE_Q5_K, SMOL_TYPE_BF16};
    const int ns[] = {1, 3, 8, 9, 40, 70};
    const int rows = 300, cols = 768;
    char err[SMOL_ERRLEN];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const struct smol_type_traits *tr = smol_type_traits(types[ti]);
        ck_assert(tr && tr->quantize);
        float *wf = rand_vec((size_t)rows * cols, 1);
        size_t rb = smol_row_size(types[ti], cols);
        uint8_t *wq = malloc(rb * rows);
        for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * rb, cols);
        float *wd = malloc((size_t)rows * cols * 4);  /* what the weights decode to: the reference */
        for (int r = 0; r < rows; r++) tr->dequant(wq + r * rb, wd + (size_t)r * cols, cols);
        struct smol_weight w = {.name = tr->name, .type = types[ti], .rows = rows, .cols = cols, .row_bytes = rb, .data = wq};
        ck_assert(be->upload_weight(be, &w, err) == SMOL_OK);
        /* get_rows */
        int32_t ids[4] = {7, 0, 299, 7};
        float *dout = be->alloc(be, (size_t)96 * rows * 4);
        be->get_rows(be, dout, &w, ids, 4);
        float *got = from_dev(be, dout, (size_t)4 * cols);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(rel_err_f(got + i * cols, wd + (size_t)ids[i] * cols, cols) < 1e-7, "get_rows %s", tr->name);
        free(got);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            const int n = ns[k];
            float *x = rand_vec((size_t)n * cols, 1), *dx = to_dev(be, x, n, cols);
            be->matmul(be, dout, &w, dx, n);
            double *ref = malloc((size_t)n * rows * sizeof *ref);
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows; r++) {
                    double s = 0;
                    for (int c = 0; c < cols; c++) s += (double)wd[(size_t)r * cols + c] * x[(size_t)t * cols + c];
                    ref[(size_t)t * rows + r] = s;
                }
            got = from_dev(be, dout, (size_t)n * rows);
            /* f32 decode path: float rounding only; f16 tiles (n > 8): activations rounded to f16 */
            double tol = n <= 8 || types[ti] == SMOL_TYPE_F32 ? 1e-5 : 2e-3;
            double e = rel_err(got, ref, (size_t)n * rows);
            printf("stats: matmul %s n=%d rel err %.2e\n", tr->name, n, e);
            ck_assert_msg(e < tol, "matmul %s n=%d: rel err %g", tr->name, n, e);
            free(got); free(ref); free(x);
            be->free(be, dx);
        }
        be->free(be, dout);
        free(wf); free(wq); free(wd);
    }
    smol_backend_free(&be);
}
END_TEST

/* kv_store + attention + kv_copy_page on both backends, same batch: a decode batch of three
 * sequences at different lengths, then a prefill chunk. */
static void attention_case(uint32_t type)
{
    struct smol_cuda_opts o;   /* this case checks the paged kernel (attention.cu) to 1e-6; the   */
    smol_cuda_opts_default(&o);/* default attn = prefill would take the tiled one for the 65-token */
    o.attn = SMOL_CUDA_ATTN_PAGED; /* prompt (its f16 bounds: t_fattn_*; device run 4 failed here)  */
    struct smol_backend *be = open_cuda_opts(&o);
    if (!be) return;
    struct smol_backend *cpu = NULL;
    char err[SMOL_ERRLEN];
    ck_assert(smol_backend_cpu_new(&cpu, 2, err) == SMOL_OK);
    const int L = 2, n_kv = 2, hd = 128, n_heads = 8, max_ctx = 1200;
    ck_assert(cpu->reserve(cpu, 96, 4096, max_ctx, err) == SMOL_OK);
    struct smol_kv kc, kg;
    ck_assert(smol_kv_init(&kc, cpu, L, n_kv, hd, type, 128, err) == SMOL_OK);
    ck_assert(smol_kv_init(&kg, be, L, n_kv, hd, type, 128, err) == SMOL_OK);
    const int lens[3] = {5, 700, 33};
    struct smol_kv_seq sc[3], sg[3];
    for (int s = 0; s < 3; s++) {
        smol_kv_seq_init(&sc[s]);
        smol_kv_seq_init(&sg[s]);
    }
    /* fill each sequence with prefill chunks of up to 64 tokens (exercises the prefill path) */
    const int kv_dim = n_kv * hd, q_dim = n_heads * hd;
    float *k = NULL, *v = NULL, *q = NULL;
    for (int s = 0; s < 3; s++) {
        for (int done = 0; done < lens[s]; ) {
            int m = lens[s] - done < 64 ? lens[s] - done : 64;
            ck_assert(smol_kv_seq_reserve(&kc, &sc[s], done, done + m, err) == SMOL_OK);
            ck_assert(smol_kv_seq_reserve(&kg, &sg[s], done, done + m, err) == SMOL_OK);
            int32_t pos[64];
            struct smol_kv_seq *pc[64], *pg[64];
            for (int i = 0; i < m; i++) { pos[i] = done + i; pc[i] = &sc[s]; pg[i] = &sg[s]; }
            struct smol_batch bc = {.n_tokens = m, .pos = pos, .seq = pc}, bg = {.n_tokens = m, .pos = pos, .seq = pg};
            for (int l = 0; l < L; l++) {
                k = rand_vec((size_t)m * kv_dim, 2); v = rand_vec((size_t)m * kv_dim, 2); q = rand_vec((size_t)m * q_dim, 2);
                float *dk = to_dev(be, k, m, kv_dim), *dv = to_dev(be, v, m, kv_dim), *dq = to_dev(be, q, m, q_dim);
                float *ref = malloc((size_t)m * q_dim * 4), *dout = be->alloc(be, (size_t)m * q_dim * 4);
                cpu->kv_store(cpu, &kc, l, k, v, &bc);
                be->kv_store(be, &kg, l, dk, dv, &bg);
                cpu->attention(cpu, ref, q, &kc, l, &bc, n_heads, 0.0884f);
                be->attention(be, dout, dq, &kg, l, &bg, n_heads, 0.0884f);
                float *got = from_dev(be, dout, (size_t)m * q_dim);
                double e = rel_err_f(got, ref, (size_t)m * q_dim);
                ck_assert_msg(e < 1e-5, "attention kv=%s seq %d pos %d..%d layer %d: %g", smol_type_name(type), s,
                              done, done + m, l, e);
                free(got); free(ref); free(k); free(v); free(q);
                be->free(be, dk); be->free(be, dv); be->free(be, dq); be->free(be, dout);
            }
            sc[s].n_tokens = sg[s].n_tokens = done + m;
            done += m;
        }
    }
    /* decode: one token per sequence, one batch; sequence 2 first shares sequence 1's pages
     * (copy-on-write through kv_copy_page on both backends) */
    smol_kv_seq_deinit(&kc, &sc[2]);
    smol_kv_seq_deinit(&kg, &sg[2]);
    ck_assert(smol_kv_seq_share(&kc, &sc[2], &sc[1], 40, err) == SMOL_OK);
    ck_assert(smol_kv_seq_share(&kg, &sg[2], &sg[1], 40, err) == SMOL_OK);
    int32_t pos[3];
    struct smol_kv_seq *pc[3], *pg[3];
    for (int s = 0; s < 3; s++) {
        pos[s] = sc[s].n_tokens;
        ck_assert(smol_kv_seq_reserve(&kc, &sc[s], pos[s], pos[s] + 1, err) == SMOL_OK);
        ck_assert(smol_kv_seq_reserve(&kg, &sg[s], pos[s], pos[s] + 1, err) == SMOL_OK);
        pc[s] = &sc[s];
        pg[s] = &sg[s];
    }
    struct smol_batch bc = {.n_tokens = 3, .pos = pos, .seq = pc}, bg = {.n_tokens = 3, .pos = pos, .seq = pg};
    k = rand_vec(3 * kv_dim, 2); v = rand_vec(3 * kv_dim, 2); q = rand_vec(3 * q_dim, 2);
    float *dk = to_dev(be, k, 3, kv_dim), *dv = to_dev(be, v, 3, kv_dim), *dq = to_dev(be, q, 3, q_dim);
    float ref[3 * 8 * 128];
    float *dout = be->alloc(be, 3 * q_dim * 4);
    cpu->kv_store(cpu, &kc, 1, k, v, &bc);
    be->kv_store(be, &kg, 1, dk, dv, &bg);
    cpu->attention(cpu, ref, q, &kc, 1, &bc, n_heads, 0.0884f);
    be->attention(be, dout, dq, &kg, 1, &bg, n_heads, 0.0884f);
    float *got = from_dev(be, dout, 3 * q_dim);
    double e = rel_err_f(got, ref, 3 * q_dim);
    printf("stats: attention decode kv=%s rel err %.2e\n", smol_type_name(type), e);
    ck_assert_msg(e < 1e-5, "attention decode: %g", e);
    free(got); free(k); free(v); free(q);
    be->free(be, dk); be->free(be, dv); be->free(be, dq); be->free(be, dout);
    for (int s = 0; s < 3; s++) {
        smol_kv_seq_deinit(&kc, &sc[s]);
        smol_kv_seq_deinit(&kg, &sg[s]);
    }
    smol_kv_deinit(&kc);
    smol_kv_deinit(&kg);
    smol_backend_free(&cpu);
    smol_backend_free(&be);
}

START_TEST(t_attention_f16) { attention_case(SMOL_TYPE_F16); }
END_TEST
START_TEST(t_attention_f32) { attention_case(SMOL_TYPE_F32); }
END_TEST
/* q8_0: the device quantizes as the CPU does (same float ops, roundf), so the same bound */
START_TEST(t_attention_q8_0) { attention_case(SMOL_TYPE_Q8_0); }
END_TEST

/* ---- knob cuda_attn = tiled (kernels/cuda/fattn.cu) against a float64 attention ---------------
 * The reference reads the cache back from the device (f16 rows, or q8_0 rows through the
 * reference decoder), so it sees exactly the K/V the kernel reads, and computes the causal GQA
 * attention of the f32 q in double.  What the tiled kernel rounds, and the bound it implies for
 * every output element of a (token, head) row, with u = 2^-11 (f16's unit roundoff), maxV the
 * largest |V| the row sees and delta = u * scale * max_i sum_d |q_d K_id| (twice that for q8_0,
 * whose K is rounded to f16 once more):
 *   - q * scale rounded to f16 (and q8_0's K): every score moves by at most delta, so every
 *     softmax weight by a factor within e^(+-2 delta): |dO| <= expm1(2 delta) maxV;
 *   - P rounded to f16 before P V, normalised by the f32 sum: |dO| <= u maxV;
 *   - q8_0's V rounded to f16: |dO| <= u maxV; f32 sums and __expf (~400 terms, 2^-24 each) are
 *     far inside one more u maxV.
 * So |dO| <= maxV (3u + expm1(2 delta)) + 1e-6.  This is loose for a single element (~0.02 here)
 * but an error of the kernel's own (a mask off by one, a fragment out of place) is larger on the
 * short rows, and the rows' relative L2 must also stay under 5e-3: random rounding of that kind
 * predicts ~6e-4 (u / sqrt(3) from P, about as much from Q). */
struct fa_ref {
    struct smol_backend *be;
    struct smol_kv kv;
    int n_heads;
    float scale;
    double worst;   /* max over elements of |d| / bound */
    double num, den;
};

static void fa_row(const struct smol_kv *kv, const uint8_t *layer, const struct smol_kv_seq *s, int h, int pos,
                   float *out)
{
    const uint8_t *r = layer + (size_t)s->pages[pos / SMOL_KV_PAGE] * kv->page_bytes +
                       ((size_t)h * SMOL_KV_PAGE + pos % SMOL_KV_PAGE) * kv->row_bytes;
    if (kv->type == SMOL_TYPE_Q8_0) {
        smol_dequant_q8_0_ref(r, out, kv->head_dim);
        return;
    }
    for (int d = 0; d < kv->head_dim; d++) {
        smol_half x;
        memcpy(&x, r + 2 * d, 2);
        out[d] = smol_half_to_f32(x);
    }
}

/* One batch: tokens t < n of seqs[t] at pos[t] (their positions reserved here), fresh random
 * k, v, q stored and attended on the device, compared with the float64 attention. */
static void fa_batch(struct fa_ref *f, int n, struct smol_kv_seq **seqs, const int32_t *pos, const char *what)
{
    struct smol_backend *be = f->be;
    struct smol_kv *kv = &f->kv;
    const int hd = kv->head_dim, n_kv = kv->n_kv_heads, G = f->n_heads / n_kv, kv_dim = n_kv * hd,
              q_dim = f->n_heads * hd;
    char err[SMOL_ERRLEN];
    for (int t = 0; t < n; t++)
        ck_assert_msg(smol_kv_seq_reserve(kv, seqs[t], pos[t], pos[t] + 1, err) == SMOL_OK, "%s", err);
    struct smol_batch b = {.n_tokens = n, .pos = pos, .seq = seqs};
    float *k = rand_vec((size_t)n * kv_dim, 2), *v = rand_vec((size_t)n * kv_dim, 2), *q = rand_vec((size_t)n * q_dim, 2);
    float *dk = to_dev(be, k, n, kv_dim), *dv = to_dev(be, v, n, kv_dim), *dq = to_dev(be, q, n, q_dim);
    float *dout = be->alloc(be, (size_t)n * q_dim * 4);
    be->kv_store(be, kv, 0, dk, dv, &b);
    for (int t = 0; t < n; t++)
        if (seqs[t]->n_tokens < pos[t] + 1) seqs[t]->n_tokens = pos[t] + 1;
    be->attention(be, dout, dq, kv, 0, &b, f->n_heads, f->scale);
    float *got = from_dev(be, dout, (size_t)n * q_dim);
    uint8_t *hk = malloc(kv->layer_bytes), *hv = malloc(kv->layer_bytes);
    be->to_host(be, hk, kv->k, kv->layer_bytes);
    be->to_host(be, hv, kv->v, kv->layer_bytes);
    const double u = 1.0 / 2048, kq = kv->type == SMOL_TYPE_Q8_0 ? 2 : 1;
    double worst = 0, num = 0, den = 0;
    float *kr = malloc((size_t)(pos[0] + 1) * hd * 4), *vr = NULL;
    for (int t = 0; t < n; t++) {
        const int np = pos[t] + 1;
        kr = realloc(kr, (size_t)np * hd * 4);
        vr = realloc(vr, (size_t)np * hd * 4);
        for (int h = 0; h < n_kv; h++) {
            double maxv = 0;
            for (int i = 0; i < np; i++) {
                fa_row(kv, hk, seqs[t], h, i, kr + (size_t)i * hd);
                fa_row(kv, hv, seqs[t], h, i, vr + (size_t)i * hd);
                for (int d = 0; d < hd; d++) maxv = fmax(maxv, fabs(vr[(size_t)i * hd + d]));
            }
            for (int g = 0; g < G; g++) {
                const int hq = h * G + g;
                const float *qt = q + (size_t)t * q_dim + (size_t)hq * hd;
                double *s = malloc((size_t)np * sizeof *s), mx = -INFINITY, sabs = 0, l = 0;
                for (int i = 0; i < np; i++) {
                    double acc = 0, aa = 0;
                    for (int d = 0; d < hd; d++) {
                        acc += (double)qt[d] * kr[(size_t)i * hd + d];
                        aa += fabs((double)qt[d] * kr[(size_t)i * hd + d]);
                    }
                    s[i] = acc * f->scale;
                    sabs = fmax(sabs, aa * f->scale);
                    mx = fmax(mx, s[i]);
                }
                for (int i = 0; i < np; i++) l += (s[i] = exp(s[i] - mx));
                const double bound = maxv * (3 * u + expm1(2 * kq * u * sabs)) + 1e-6;
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int i = 0; i < np; i++) o += s[i] * vr[(size_t)i * hd + d];
                    o /= l;
                    const float x = got[(size_t)t * q_dim + (size_t)hq * hd + d];
                    const double e = isfinite(x) ? fabs(x - o) : INFINITY;
                    worst = fmax(worst, e / bound);
                    num += e * e;
                    den += o * o;
                }
                free(s);
            }
        }
    }
    const double rel = sqrt(num / (den > 0 ? den : 1));
    printf("stats: attention tiled kv=%s %s: rel L2 %.2e, worst |d| / bound %.3f\n", smol_type_name(kv->type), what,
           rel, worst);
    ck_assert_msg(worst <= 1.0 && rel < 5e-3, "attention tiled kv=%s %s: rel L2 %.3e, worst |d| / bound %.3f",
                  smol_type_name(kv->type), what, rel, worst);
    f->worst = fmax(f->worst, worst);
    free(kr); free(vr); free(hk); free(hv); free(got); free(k); free(v); free(q);
    be->free(be, dk); be->free(be, dv); be->free(be, dq); be->free(be, dout);
}

/* A prompt of n tokens from position p0 of s, as one batch */
static void fa_chunk(struct fa_ref *f, struct smol_kv_seq *s, int p0, int n, const char *what)
{
    struct smol_kv_seq **seqs = malloc((size_t)n * sizeof *seqs);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    for (int i = 0; i < n; i++) {
        seqs[i] = s;
        pos[i] = p0 + i;
    }
    fa_batch(f, n, seqs, pos, what);
    free(seqs);
    free(pos);
}

static void fattn_case(uint32_t type)
{
    const char *ev = getenv("SMOL_CUDA_ATTN");  /* it would override the knob this case is about */
    if (ev && strcmp(ev, "tiled")) {
        printf("note: SMOL_CUDA_ATTN=%s cleared: the fattn case runs cuda_attn = tiled\n", ev);
        unsetenv("SMOL_CUDA_ATTN");
    }
    struct smol_cuda_opts o;
    smol_cuda_opts_default(&o);
    o.attn = SMOL_CUDA_ATTN_TILED;
    struct smol_backend *be = open_cuda_opts(&o);
    if (!be) return;
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->reserve(be, 320, 4096, 4096, err) == SMOL_OK, "%s", err);
    /* SmolLM3's attention: 4 query heads per KV head of 128; 2 KV heads */
    struct fa_ref f = {.be = be, .n_heads = 8, .scale = 0.0884f};
    ck_assert(smol_kv_init(&f.kv, be, 1, 2, 128, type, 128, err) == SMOL_OK);
    struct smol_kv_seq a, b, c, d;
    smol_kv_seq_init(&a);
    smol_kv_seq_init(&b);
    smol_kv_seq_init(&c);
    smol_kv_seq_init(&d);
    /* one sequence's prompt in chunks of 7, 1, 65, 300 and 64 tokens (tiles of 16 tokens with
     * tails; every chunk after the first over a prefix already in the cache; pages crossed) */
    fa_chunk(&f, &a, 0, 7, "n_q 7 from 0");
    fa_chunk(&f, &a, 7, 1, "n_q 1 at 7");
    fa_chunk(&f, &a, 8, 65, "n_q 65 at 8");
    /* SMOL_TEST_QUICK (the sanitizer runs): 30 tokens for the 300 and no deep decode */
    const int quick = getenv("SMOL_TEST_QUICK") != NULL, big = quick ? 30 : 300;
    fa_chunk(&f, &a, 73, big, big == 300 ? "n_q 300 at 73" : "n_q 30 at 73");
    fa_chunk(&f, &a, 73 + big, 64, "n_q 64 after it");
    /* a mixed batch: a new prompt of 20 (tiles 16 + 4), a decode row, a 1-token prompt */
    {
        struct smol_kv_seq *s[22];
        int32_t pos[22];
        for (int i = 0; i < 20; i++) { s[i] = &b; pos[i] = i; }
        s[20] = &a; pos[20] = 137 + big;
        s[21] = &c; pos[21] = 0;
        fa_batch(&f, 22, s, pos, "mixed batch (20-token prompt, a decode row, 1-token prompt)");
    }
    /* decode rows of three sequences (one token per tile, split-K over pages) */
    {
        struct smol_kv_seq *s[3] = {&a, &b, &c};
        int32_t pos[3] = {138 + big, 20, 1};
        fa_batch(&f, 3, s, pos, "decode of 3 sequences");
    }
    /* a deep decode: ~2,000 positions written (unchecked chunks), then one token over 63 pages */
    if (!quick) {
        struct smol_kv_seq *s[300];
        int32_t pos[300];
        for (int p0 = 0; p0 < 1980; p0 += 300) {
            const int m = 1980 - p0 < 300 ? 1980 - p0 : 300;
            for (int i = 0; i < m; i++) { s[i] = &d; pos[i] = p0 + i; }
            ck_assert(smol_kv_seq_reserve(&f.kv, &d, p0, p0 + m, err) == SMOL_OK);
            float *k = rand_vec((size_t)m * 256, 2), *v = rand_vec((size_t)m * 256, 2);
            float *dk = to_dev(be, k, m, 256), *dv = to_dev(be, v, m, 256);
            struct smol_batch bt = {.n_tokens = m, .pos = pos, .seq = s};
            be->kv_store(be, &f.kv, 0, dk, dv, &bt);
            d.n_tokens = p0 + m;
            free(k); free(v);
            be->free(be, dk); be->free(be, dv);
        }
        s[0] = &d;
        pos[0] = 1980;
        fa_batch(&f, 1, s, pos, "decode at 1980");
    }
    printf("stats: attention tiled kv=%s worst |d| / bound over all batches %.3f\n", smol_type_name(type), f.worst);
    smol_kv_seq_deinit(&f.kv, &a);
    smol_kv_seq_deinit(&f.kv, &b);
    smol_kv_seq_deinit(&f.kv, &c);
    smol_kv_seq_deinit(&f.kv, &d);
    smol_kv_deinit(&f.kv);
    smol_backend_free(&be);
}

START_TEST(t_fattn_f16) { fattn_case(SMOL_TYPE_F16); }
END_TEST
START_TEST(t_fattn_q8_0) { fattn_case(SMOL_TYPE_Q8_0); }
END_TEST

/* ---- the q8 mat-vec and the fused steps (knobs cuda_matvec = q8, cuda_fuse) ------------------ */

static const struct smol_cuda_opts Q8 = {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 0, .graphs = 0};
static const struct smol_cuda_opts Q8_FUSE = {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0};

/* A random weight of type t, uploaded; *deq = what it decodes to (host, rows x cols). */
static struct smol_weight *rand_weight(struct smol_backend *be, uint32_t t, int rows, int cols, float **deq)
{
    const struct smol_type_traits *tr = smol_type_traits(t);
    float *wf = rand_vec((size_t)rows * cols, 1);
    const size_t rb = smol_row_size(t, cols);
    uint8_t *wq = malloc(rb * rows);  /* kept: upload may read w->data again (it does not free) */
    for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * rb, cols);
    *deq = malloc((size_t)rows * cols * 4);
    for (int r = 0; r < rows; r++) tr->dequant(wq + r * rb, *deq + (size_t)r * cols, cols);
    free(wf);
    struct smol_weight *w = calloc(1, sizeof *w);
    *w = (struct smol_weight){.name = tr->name, .type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wq};
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->upload_weight(be, w, err) == SMOL_OK, "%s", err);
    return w;
}

/* out[t][r] = dot(deq row r, q8a(x[t])) in double: the q8 path's exact function */
static double *q8_ref(const float *deq, int rows, int cols, const float *x, int n)
{
    double *ref = malloc((size_t)n * rows * sizeof *ref);
    int8_t *q = malloc(cols);
    struct smol_q8a *sa = malloc((size_t)cols / 32 * sizeof *sa);
    for (int t = 0; t < n; t++) {
        smol_q8a_quantize_ref(x + (size_t)t * cols, cols, q, sa);
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int c = 0; c < cols; c++) acc += (double)deq[(size_t)r * cols + c] * ((double)sa[c / 32].d * q[c]);
            ref[(size_t)t * rows + r] = acc;
        }
    }
    free(q);
    free(sa);
    return ref;
}

/* matmul and matmul_n of every q8 type, 1..8 tokens (and 9: the tiles), against the float64 dot
 * of the same q8a activations: the device quantizes exactly as smol_q8a_quantize_ref */
/* _i = 0: cuda_matvec = q8; 1: q8k (a row's tasks split among 2 or 4 warps where the weight has
 * few rows: every shape here; 4096 and 8448 columns give every warp of a row tasks) */
static const struct smol_cuda_opts Q8K = {.matvec = SMOL_CUDA_MATVEC_Q8K, .fuse = 0, .graphs = 0};
START_TEST(t_matmul_q8)
{
    struct smol_backend *be = open_cuda_opts(_i ? &Q8K : &Q8);
    if (!be) return;
    char rerr[SMOL_ERRLEN];  /* rows up to 8448 wide take the mat-vec (open_cuda reserved 4096) */
    ck_assert_msg(be->reserve(be, 96, 8448, 4096, rerr) == SMOL_OK, "%s", rerr);
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1};
    const int shapes[][2] = {{300, 768}, {37, 2048}, {37, 4096}, {20, 8448}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int si = 0; si < 4; si++) {
            const int rows = shapes[si][0], cols = shapes[si][1];
            float *deq;
            struct smol_weight *w = rand_weight(be, types[ti], rows, cols, &deq);
            ck_assert_msg(w->dev_aux != NULL, "%s: no q8 copy", w->name);
            float *dout = be->alloc(be, (size_t)9 * rows * 4);
            for (int n = 1; n <= 8; n++) {
                float *x = rand_vec((size_t)n * cols, 2), *dx = to_dev(be, x, n, cols);
                be->matmul(be, dout, w, dx, n);
                double *ref = q8_ref(deq, rows, cols, x, n);
                float *got = from_dev(be, dout, (size_t)n * rows);
                const double e = rel_err(got, ref, (size_t)n * rows);
                if (n == 1 || n == 8)
                    printf("stats: matmul %s %s %dx%d n=%d rel err %.2e\n", _i ? "q8k" : "q8", w->name, rows, cols, n, e);
                ck_assert_msg(e < 1e-5, "matmul q8 %s %dx%d n=%d: rel err %g", w->name, rows, cols, n, e);
                free(got); free(ref); free(x);
                be->free(be, dx);
            }
            be->free(be, dout);
            free(deq);
        }
    /* matmul_n: three weights of one width, mixed types (q, k, v of a Q4_K_M layer), one launch */
    const int cols = 512, rows[3] = {256, 128, 128};
    const uint32_t tq[3] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K};
    struct smol_weight *ws[3];
    float *deq[3], *outs[3];
    for (int i = 0; i < 3; i++) {
        ws[i] = rand_weight(be, tq[i], rows[i], cols, &deq[i]);
        outs[i] = be->alloc(be, (size_t)8 * rows[i] * 4);
    }
    const int n = 5;
    float *x = rand_vec((size_t)n * cols, 1), *dx = to_dev(be, x, n, cols);
    be->matmul_n(be, outs, (const struct smol_weight *const *)ws, 3, dx, n);
    for (int i = 0; i < 3; i++) {
        double *ref = q8_ref(deq[i], rows[i], cols, x, n);
        float *got = from_dev(be, outs[i], (size_t)n * rows[i]);
        ck_assert_msg(rel_err(got, ref, (size_t)n * rows[i]) < 1e-5, "matmul_n part %d: %g", i,
                      rel_err(got, ref, (size_t)n * rows[i]));
        free(got); free(ref); free(deq[i]);
        be->free(be, outs[i]);
    }
    free(x);
    be->free(be, dx);
    smol_backend_free(&be);
}
END_TEST

/* The fused steps against their composition from the plain ops on the same backend (q8 mat-vec
 * both ways): norm_qkv, rope_store (NoPE and RoPE, f16 and f32 caches), matmul_add, ffn. */
START_TEST(t_fused)
{
    struct smol_backend *be = open_cuda_opts(&Q8_FUSE);
    if (!be) return;
    ck_assert(be->norm_qkv && be->rope_store && be->matmul_add && be->ffn);
    const int dim = 256, ffn = 512, n_heads = 4, n_kv = 2, hd = 64, q_dim = n_heads * hd, kv_dim = n_kv * hd;
    float *deq;
    struct smol_weight *wq = rand_weight(be, SMOL_TYPE_Q4_K, q_dim, dim, &deq); free(deq);
    struct smol_weight *wk = rand_weight(be, SMOL_TYPE_Q4_K, kv_dim, dim, &deq); free(deq);
    struct smol_weight *wv = rand_weight(be, SMOL_TYPE_Q6_K, kv_dim, dim, &deq); free(deq);
    struct smol_weight *wo = rand_weight(be, SMOL_TYPE_Q4_K, dim, q_dim, &deq); free(deq);
    struct smol_weight *wg = rand_weight(be, SMOL_TYPE_Q4_K, ffn, dim, &deq); free(deq);
    struct smol_weight *wu = rand_weight(be, SMOL_TYPE_Q8_0, ffn, dim, &deq); free(deq);
    struct smol_weight *wd = rand_weight(be, SMOL_TYPE_Q6_K, dim, ffn, &deq); free(deq);
    float *nwf = rand_vec(dim, 1);
    struct smol_weight nw = {.name = "norm", .type = SMOL_TYPE_F32, .rows = 1, .cols = dim, .row_bytes = dim * 4, .data = nwf};
    char err[SMOL_ERRLEN];
    ck_assert(be->upload_weight(be, &nw, err) == SMOL_OK);
    const int ns[] = {1, 3, 8};
    for (size_t k = 0; k < 3; k++) {
        const int n = ns[k];
        float *x = rand_vec((size_t)n * dim, 2), *dx = to_dev(be, x, n, dim), *dx2 = to_dev(be, x, n, dim);
        float *xb = be->alloc(be, (size_t)n * ffn * 4), *hb = be->alloc(be, (size_t)n * ffn * 4),
              *hb2 = be->alloc(be, (size_t)n * ffn * 4);
        float *a[3], *b[3];
        const int w3[3] = {q_dim, kv_dim, kv_dim};
        for (int i = 0; i < 3; i++) {
            a[i] = be->alloc(be, (size_t)n * w3[i] * 4);
            b[i] = be->alloc(be, (size_t)n * w3[i] * 4);
        }
        /* norm_qkv */
        ck_assert(be->norm_qkv(be, a[0], a[1], a[2], dx, &nw, wq, wk, wv, n, dim, 1e-6f) == 1);
        be->rmsnorm(be, xb, dx, &nw, n, dim, 1e-6f);
        be->matmul_n(be, b, (const struct smol_weight *const[]){wq, wk, wv}, 3, xb, n);
        for (int i = 0; i < 3; i++) {
            float *ga = from_dev(be, a[i], (size_t)n * w3[i]), *gb = from_dev(be, b[i], (size_t)n * w3[i]);
            ck_assert_msg(rel_err_f(ga, gb, (size_t)n * w3[i]) < 1e-5, "norm_qkv n=%d part %d: %g", n, i,
                          rel_err_f(ga, gb, (size_t)n * w3[i]));
            free(ga); free(gb);
        }
        /* matmul_add: x += att wo */
        ck_assert(be->matmul_add(be, dx, wo, a[0], n) == 1);
        be->matmul(be, xb, wo, a[0], n);
        be->add(be, dx2, xb, n * dim);
        float *g1 = from_dev(be, dx, (size_t)n * dim), *g2 = from_dev(be, dx2, (size_t)n * dim);
        ck_assert_msg(rel_err_f(g1, g2, (size_t)n * dim) < 1e-6, "matmul_add n=%d: %g", n, rel_err_f(g1, g2, (size_t)n * dim));
        free(g1); free(g2);
        /* ffn */
        ck_assert(be->ffn(be, dx, &nw, wg, wu, wd, hb, n, dim, 1e-6f) == 1);
        be->rmsnorm(be, xb, dx2, &nw, n, dim, 1e-6f);
        be->matmul_n(be, (float *const[]){hb, hb2}, (const struct smol_weight *const[]){wg, wu}, 2, xb, n);
        be->silu_mul(be, hb, hb2, n * ffn);
        be->matmul(be, xb, wd, hb, n);
        be->add(be, dx2, xb, n * dim);
        g1 = from_dev(be, dx, (size_t)n * dim);
        g2 = from_dev(be, dx2, (size_t)n * dim);
        ck_assert_msg(rel_err_f(g1, g2, (size_t)n * dim) < 1e-5, "ffn n=%d: %g", n, rel_err_f(g1, g2, (size_t)n * dim));
        free(g1); free(g2);
        for (int i = 0; i < 3; i++) { be->free(be, a[i]); be->free(be, b[i]); }
        be->free(be, dx); be->free(be, dx2); be->free(be, xb); be->free(be, hb); be->free(be, hb2);
        free(x);
    }
    /* rope_store vs rope + rope + kv_store: two caches of one backend, a batch of two sequences */
    struct smol_rope_params rp = {.n_dims = hd, .freq_base = 5e6f, .freq_scale = 1, .attn_factor = 1};
    const uint32_t kvt[2] = {SMOL_TYPE_F16, SMOL_TYPE_F32};
    for (int ki = 0; ki < 2; ki++)
        for (int rope = 0; rope < 2; rope++) {
            struct smol_kv ka, kb;
            ck_assert(smol_kv_init(&ka, be, 2, n_kv, hd, kvt[ki], 16, err) == SMOL_OK);
            ck_assert(smol_kv_init(&kb, be, 2, n_kv, hd, kvt[ki], 16, err) == SMOL_OK);
            struct smol_kv_seq sa[2], sb[2];
            int32_t pos[4] = {0, 1, 0, 1};
            struct smol_kv_seq *pa[4], *pb[4];
            for (int i = 0; i < 2; i++) {
                smol_kv_seq_init(&sa[i]);
                smol_kv_seq_init(&sb[i]);
                ck_assert(smol_kv_seq_reserve(&ka, &sa[i], 0, 2, err) == SMOL_OK);
                ck_assert(smol_kv_seq_reserve(&kb, &sb[i], 0, 2, err) == SMOL_OK);
            }
            for (int t = 0; t < 4; t++) { pa[t] = &sa[t / 2]; pb[t] = &sb[t / 2]; }
            struct smol_batch ba = {.n_tokens = 4, .pos = pos, .seq = pa}, bb = {.n_tokens = 4, .pos = pos, .seq = pb};
            float *q = rand_vec(4 * q_dim, 2), *kk = rand_vec(4 * kv_dim, 2), *v = rand_vec(4 * kv_dim, 2);
            float *q1 = to_dev(be, q, 4, q_dim), *q2 = to_dev(be, q, 4, q_dim), *k1 = to_dev(be, kk, 4, kv_dim),
                  *k2 = to_dev(be, kk, 4, kv_dim), *dv = to_dev(be, v, 4, kv_dim);
            ck_assert(be->rope_store(be, q1, k1, dv, rope ? &rp : NULL, &ka, 1, &ba, n_heads) == 1);
            if (rope) {
                be->rope(be, q2, pos, 4, n_heads, hd, &rp);
                be->rope(be, k2, pos, 4, n_kv, hd, &rp);
            }
            be->kv_store(be, &kb, 1, k2, dv, &bb);
            float *ga = from_dev(be, q1, 4 * q_dim), *gb = from_dev(be, q2, 4 * q_dim);
            ck_assert_msg(rel_err_f(ga, gb, 4 * q_dim) < 1e-6, "rope_store q: %g", rel_err_f(ga, gb, 4 * q_dim));
            free(ga); free(gb);
            const size_t bytes = (size_t)ka.layer_bytes * 2;
            uint8_t *c1 = malloc(bytes), *c2 = malloc(bytes);
            for (int kv2 = 0; kv2 < 2; kv2++) {
                be->to_host(be, c1, kv2 ? ka.v : ka.k, bytes);
                be->to_host(be, c2, kv2 ? kb.v : kb.k, bytes);
                ck_assert_msg(!memcmp(c1, c2, bytes), "rope_store %s cache (kv %s, rope %d) differs",
                              kv2 ? "V" : "K", smol_type_name(kvt[ki]), rope);
            }
            free(c1); free(c2); free(q); free(kk); free(v);
            be->free(be, q1); be->free(be, q2); be->free(be, k1); be->free(be, k2); be->free(be, dv);
            for (int i = 0; i < 2; i++) {
                smol_kv_seq_deinit(&ka, &sa[i]);
                smol_kv_seq_deinit(&kb, &sb[i]);
            }
            smol_kv_deinit(&ka);
            smol_kv_deinit(&kb);
        }
    smol_backend_free(&be);
}
END_TEST

/* ---- the tensor-core GEMM (knob cuda_gemm = mma) ---------------------------------------------- */

static const struct smol_cuda_opts MMA = {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0,
                                          .gemm = SMOL_CUDA_GEMM_MMA};

/* ref[t][r] = float64 dot(deq row r, f16(x[t])) for the sampled (t, r): every token and row of
 * small cases; of large ones (above 2^26 multiply-adds per token x row sweep) every 7th token
 * (and the last) and the rows r % 5 == 0, the last 9 and the first 130 (two tiles of 64 and 128
 * rows, a tail): want[t][r] = 1 where sampled. */
static double *gemm_ref(const float *deq, int rows, int cols, const float *x, int n, char **want)
{
    const int big = (double)rows * cols * n > 67108864.0;
    double *ref = calloc((size_t)n * rows, sizeof *ref);
    *want = calloc((size_t)n * rows, 1);
    double *xh = malloc((size_t)cols * sizeof *xh);
    for (int t = 0; t < n; t++) {
        if (big && t % 7 && t != n - 1) continue;
        for (int c = 0; c < cols; c++) xh[c] = smol_half_to_f32(smol_f32_to_half(x[(size_t)t * cols + c]));
        for (int r = 0; r < rows; r++) {
            if (big && r % 5 && r < rows - 9 && r >= 130) continue;
            double acc = 0;
            const float *wr = deq + (size_t)r * cols;
            for (int c = 0; c < cols; c++) acc += (double)wr[c] * xh[c];
            ref[(size_t)t * rows + r] = acc;
            (*want)[(size_t)t * rows + r] = 1;
        }
    }
    free(xh);
    return ref;
}

/* ||got - ref|| / ||ref|| over the sampled entries (base[] added to ref where given); NaN fails */
static double gemm_err(const float *got, const double *ref, const char *want, const float *base, size_t count)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
        if (!want[i]) continue;
        if (!isfinite(got[i])) return INFINITY;
        const double r = ref[i] + (base ? base[i] : 0.0);
        num += (got[i] - r) * (got[i] - r);
        den += r * r;
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* matmul (store) and matmul_add (the residual epilogue, cuda_fuse = on) of q4_K q6_K q8_0 q4_0
 * q4_1 weights for N = 9, 16, 33, 64, 512 tokens: the 3B's shapes (q and o 2048 x 2048, k and v
 * 512 x 2048, down 2048 x 11008 for Q4_K_M's q4_K and q6_K: 86 K steps, split-K at N <= 64;
 * gate/up's 11008 rows take the same row tiles as 2048 and cost the CPU 3 s to quantize), odd row
 * counts (37, 300: tails of both tile heights), cols 384 (three K steps: half a super-block's
 * worth past a whole one, for the 32-blocks).  Bound: the device rounds each weight once to f16
 * (relative error <= 2^-11 = 4.9e-4, about 2e-4 RMS over random values, independent from one
 * weight to the next, so the relative L2 error of the dots is about that too), the products of
 * two f16 are exact in f32, and the f32 sums over K <= 11008 add ~sqrt(K) 2^-24 < 1e-5:
 * 1e-3 (~5x the expected; a wrong nibble, scale or tile offset gives 1e-2 and more).  The
 * reference rounds the activations to f16 as the device does (round to nearest even), so their
 * rounding is not part of the error.  Shapes the GEMM does not take (cols 2080: not a multiple
 * of its K step of 128) go to the tiled path and are held to its bound, 2e-3 (t_matmul's). */
START_TEST(t_gemm_mma)
{
    struct smol_backend *be = open_cuda_opts(&MMA);
    if (!be) return;
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->reserve(be, 512, 11008, 4096, err) == SMOL_OK, "%s", err);
    ck_assert(be->matmul_add);
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1};
    const int ns[] = {9, 16, 33, 64, 512};
    struct shape { int rows, cols, kquant_only, blocks32_only; };
    const struct shape shapes[] = {
        {2048, 2048, 0, 0}, {512, 2048, 0, 0}, {300, 768, 0, 0}, {37, 512, 0, 0},
        {2048, 11008, 1, 0}, {200, 384, 0, 1}, {64, 2080, 0, 1},
    };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int kq = types[ti] == SMOL_TYPE_Q4_K || types[ti] == SMOL_TYPE_Q6_K;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const struct shape sh = shapes[si];
            if ((sh.kquant_only && !kq) || (sh.blocks32_only && kq)) continue;
            const int rows = sh.rows, cols = sh.cols, mma = cols % 128 == 0;
            float *deq;
            struct smol_weight *w = rand_weight(be, types[ti], rows, cols, &deq);
            ck_assert_msg(w->dev_aux != NULL, "%s: no copy in the GEMM's layout", w->name);
            float *dout = be->alloc(be, (size_t)512 * rows * 4);
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                const int n = ns[k];
                float *x = rand_vec((size_t)n * cols, 2), *dx = to_dev(be, x, n, cols);
                char *want;
                double *ref = gemm_ref(deq, rows, cols, x, n, &want);
                const double tol = mma ? 1e-3 : 2e-3;
                be->matmul(be, dout, w, dx, n);
                float *got = from_dev(be, dout, (size_t)n * rows);
                double e = gemm_err(got, ref, want, NULL, (size_t)n * rows);
                printf("stats: gemm %s %s %dx%d n=%d rel err %.2e (bound %.0e)\n", mma ? "mma" : "tiled", w->name,
                       rows, cols, n, e, tol);
                ck_assert_msg(e < tol, "gemm %s %dx%d n=%d: rel err %g", w->name, rows, cols, n, e);
                free(got);
                /* the residual epilogue on the 3B's o / down shapes (and the small ones): x += W in */
                if (mma && (rows == 2048 || rows < 512)) {
                    float *base = rand_vec((size_t)n * rows, 1), *dbase = to_dev(be, base, n, rows);
                    ck_assert_int_eq(be->matmul_add(be, dbase, w, dx, n), 1);
                    got = from_dev(be, dbase, (size_t)n * rows);
                    e = gemm_err(got, ref, want, base, (size_t)n * rows);
                    if (n == 33 || n == 512)
                        printf("stats: gemm add %s %s %dx%d n=%d rel err %.2e\n", mma ? "mma" : "tiled", w->name,
                               rows, cols, n, e);
                    ck_assert_msg(e < tol, "gemm add %s %dx%d n=%d: rel err %g", w->name, rows, cols, n, e);
                    free(got); free(base);
                    be->free(be, dbase);
                }
                free(ref); free(want); free(x);
                be->free(be, dx);
            }
            be->free(be, dout);
            free(deq);
        }
    }
    smol_backend_free(&be);
}
END_TEST

/* ---- the int8 tensor-core GEMM (knob cuda_gemm = imma) ------------------------------------------ */

static const struct smol_cuda_opts IMMA = {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0,
                                           .gemm = SMOL_CUDA_GEMM_IMMA};

/* ref[t][r] = float64 dot(deq row r, the q8a of x[t] (d * q, as the device quantizes:
 * smol_q8a_quantize_ref)), sampled as gemm_ref */
static double *gemm_ref_q8(const float *deq, int rows, int cols, const float *x, int n, char **want)
{
    const int big = (double)rows * cols * n > 67108864.0;
    double *ref = calloc((size_t)n * rows, sizeof *ref);
    *want = calloc((size_t)n * rows, 1);
    int8_t *q = malloc(cols);
    struct smol_q8a *sa = malloc((size_t)cols / 32 * sizeof *sa);
    for (int t = 0; t < n; t++) {
        if (big && t % 7 && t != n - 1) continue;
        smol_q8a_quantize_ref(x + (size_t)t * cols, cols, q, sa);
        for (int r = 0; r < rows; r++) {
            if (big && r % 5 && r < rows - 9 && r >= 130) continue;
            double acc = 0;
            const float *wr = deq + (size_t)r * cols;
            for (int c = 0; c < cols; c++) acc += (double)wr[c] * ((double)sa[c / 32].d * q[c]);
            ref[(size_t)t * rows + r] = acc;
            (*want)[(size_t)t * rows + r] = 1;
        }
    }
    free(q);
    free(sa);
    return ref;
}

/* t_gemm_mma's cases under cuda_gemm = imma.  q4_K, q6_K and q8_0 go to the int8 kernel, held to
 * the float64 dot of the reference-dequantized weights and the same q8a activations (the device
 * quantizes as smol_q8a_quantize_ref): the integer dots are exact, the scales and the f32 sums
 * round (test_quant's twin: ~1e-7 of the terms' magnitude), so 1e-4 (a wrong nibble, scale, min
 * or fragment gives 1e-2 and more).  q4_0 (no int8 decoder) must take the f16 GEMM and meet its
 * bound against f16-rounded activations (1e-3); cols 2080 the tiled path (2e-3).  Then one
 * matmul_n of a q6_K and a q4_0 weight on the same input: the q8a and then the f16 activations
 * share one scratch buffer, written in stream order. */
START_TEST(t_gemm_imma)
{
    struct smol_backend *be = open_cuda_opts(&IMMA);
    if (!be) return;
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->reserve(be, 512, 11008, 4096, err) == SMOL_OK, "%s", err);
    ck_assert(be->matmul_add && be->matmul_n);
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0};
    const int ns[] = {9, 16, 33, 64, 512};
    struct shape { int rows, cols, kquant_only, blocks32_only; };
    const struct shape shapes[] = {
        {2048, 2048, 0, 0}, {512, 2048, 0, 0}, {300, 768, 0, 0}, {37, 512, 0, 0},
        {2048, 11008, 1, 0}, {200, 384, 0, 1}, {64, 2080, 0, 1},
    };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int kq = types[ti] == SMOL_TYPE_Q4_K || types[ti] == SMOL_TYPE_Q6_K;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const struct shape sh = shapes[si];
            if ((sh.kquant_only && !kq) || (sh.blocks32_only && kq)) continue;
            const int rows = sh.rows, cols = sh.cols, tc = cols % 128 == 0;
            const int i8 = tc && types[ti] != SMOL_TYPE_Q4_0;
            const char *path = i8 ? "imma" : tc ? "mma" : "tiled";
            float *deq;
            struct smol_weight *w = rand_weight(be, types[ti], rows, cols, &deq);
            ck_assert_msg(w->dev_aux != NULL, "%s: no copy in the GEMM's layout", w->name);
            float *dout = be->alloc(be, (size_t)512 * rows * 4);
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                const int n = ns[k];
                float *x = rand_vec((size_t)n * cols, 2), *dx = to_dev(be, x, n, cols);
                char *want;
                double *ref = i8 ? gemm_ref_q8(deq, rows, cols, x, n, &want) : gemm_ref(deq, rows, cols, x, n, &want);
                const double tol = i8 ? 1e-4 : tc ? 1e-3 : 2e-3;
                be->matmul(be, dout, w, dx, n);
                float *got = from_dev(be, dout, (size_t)n * rows);
                double e = gemm_err(got, ref, want, NULL, (size_t)n * rows);
                printf("stats: gemm %s %s %dx%d n=%d rel err %.2e (bound %.0e)\n", path, w->name, rows, cols, n, e, tol);
                ck_assert_msg(e < tol, "gemm %s %s %dx%d n=%d: rel err %g", path, w->name, rows, cols, n, e);
                free(got);
                if (tc && (rows == 2048 || rows < 512)) {  /* the residual epilogue */
                    float *base = rand_vec((size_t)n * rows, 1), *dbase = to_dev(be, base, n, rows);
                    ck_assert_int_eq(be->matmul_add(be, dbase, w, dx, n), 1);
                    got = from_dev(be, dbase, (size_t)n * rows);
                    e = gemm_err(got, ref, want, base, (size_t)n * rows);
                    if (n == 33 || n == 512)
                        printf("stats: gemm add %s %s %dx%d n=%d rel err %.2e\n", path, w->name, rows, cols, n, e);
                    ck_assert_msg(e < tol, "gemm add %s %s %dx%d n=%d: rel err %g", path, w->name, rows, cols, n, e);
                    free(got); free(base);
                    be->free(be, dbase);
                }
                free(ref); free(want); free(x);
                be->free(be, dx);
            }
            be->free(be, dout);
            free(deq);
        }
    }
    /* matmul_n: an int8 weight and an f16 one on one input */
    {
        const int n = 33, cols = 768;
        float *deq[2];
        struct smol_weight *ws[2] = {rand_weight(be, SMOL_TYPE_Q6_K, 300, cols, &deq[0]),
                                     rand_weight(be, SMOL_TYPE_Q4_0, 37, cols, &deq[1])};
        float *outs[2] = {be->alloc(be, (size_t)n * 300 * 4), be->alloc(be, (size_t)n * 37 * 4)};
        float *x = rand_vec((size_t)n * cols, 2), *dx = to_dev(be, x, n, cols);
        be->matmul_n(be, outs, (const struct smol_weight *const *)ws, 2, dx, n);
        for (int i = 0; i < 2; i++) {
            char *want;
            const int rows = i ? 37 : 300;
            double *ref = i ? gemm_ref(deq[i], rows, cols, x, n, &want) : gemm_ref_q8(deq[i], rows, cols, x, n, &want);
            float *got = from_dev(be, outs[i], (size_t)n * rows);
            const double e = gemm_err(got, ref, want, NULL, (size_t)n * rows), tol = i ? 1e-3 : 1e-4;
            printf("stats: gemm matmul_n %s %dx%d n=%d rel err %.2e (bound %.0e)\n", i ? "mma q4_0" : "imma q6_K", rows,
                   cols, n, e, tol);
            ck_assert_msg(e < tol, "matmul_n weight %d: rel err %g", i, e);
            free(got); free(ref); free(want); free(deq[i]);
            be->free(be, outs[i]);
        }
        free(x);
        be->free(be, dx);
    }
    smol_backend_free(&be);
}
END_TEST

/* ---- the GEMM in one launch (knob cuda_gemm_fuse) -------------------------------------------------- */

/* The same random weight uploaded to two backends (deq as rand_weight) */
static void rand_weight2(struct smol_backend *be[2], uint32_t t, int rows, int cols, float **deq,
                         struct smol_weight *w[2])
{
    const struct smol_type_traits *tr = smol_type_traits(t);
    float *wf = rand_vec((size_t)rows * cols, 1);
    const size_t rb = smol_row_size(t, cols);
    uint8_t *wq = malloc(rb * rows);  /* kept: upload may read w->data again */
    for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * rb, cols);
    *deq = malloc((size_t)rows * cols * 4);
    for (int r = 0; r < rows; r++) tr->dequant(wq + r * rb, *deq + (size_t)r * cols, cols);
    free(wf);
    for (int i = 0; i < 2; i++) {
        char err[SMOL_ERRLEN];
        w[i] = calloc(1, sizeof *w[i]);
        *w[i] = (struct smol_weight){.name = tr->name, .type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wq};
        ck_assert_msg(be[i]->upload_weight(be[i], w[i], err) == SMOL_OK, "%s", err);
    }
}

static long kernels_of(struct smol_backend *be)
{
    struct smol_cuda_counts k;
    ck_assert_int_eq(smol_backend_cuda_counts(be, &k), SMOL_OK);
    return k.kernels;
}

/* cuda_gemm_fuse = on against the default path (the same cuda_gemm, fuse off) and the float64
 * reference, _i = 0: mma, 1: imma.  q4_K, q6_K and q8_0 weights of 40 rows (one row tile of 64
 * with a tail) x 4096 cols (32 K steps): the grid is so small that K splits in 4 (8 steps each:
 * split-K is on, its partials summed by the last split of each tile); n = 16, 40 (an odd tail of
 * the token tile) and 200 (four token tiles, the last of 8); store and, for n = 16 and 40, the
 * residual add (matmul_add), whose launch follows a store of the same shape: a ticket not reset by
 * the launch before would leave that tile unsummed.  Then 40 x 512 (4 K steps: no split).  Held to:
 * the default path bit for bit (the same f16 rounding or q8a arithmetic, the same mma order, the
 * splits summed in the same order), t_gemm_mma's / t_gemm_imma's bounds against float64 (1e-3 f16,
 * 1e-4 int8), and the launches (the emulator's counter): the fused mat-mul is 1 kernel where the
 * default is 2 (conversion + GEMM) or 3 (+ split sum). */
START_TEST(t_gemm_fuse)
{
    const int imma = _i == 1;
    const struct smol_cuda_opts o[2] = {
        {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .gemm = imma ? SMOL_CUDA_GEMM_IMMA : SMOL_CUDA_GEMM_MMA},
        {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .gemm = imma ? SMOL_CUDA_GEMM_IMMA : SMOL_CUDA_GEMM_MMA, .gemm_fuse = 1}};
    struct smol_backend *be[2] = {open_cuda_opts(&o[0]), NULL};
    if (!be[0]) return;
    be[1] = open_cuda_opts(&o[1]);
    ck_assert(be[1] && be[0]->matmul_add && be[1]->matmul_add);
    char err[SMOL_ERRLEN];
    for (int i = 0; i < 2; i++) ck_assert_msg(be[i]->reserve(be[i], 256, 4096, 4096, err) == SMOL_OK, "%s", err);
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0};
    const char *kind = imma ? "imma" : "mma";
    const double tol = imma ? 1e-4 : 1e-3;
    struct run { int rows, cols, n, add, split; };
    const struct run runs[] = {{40, 4096, 16, 1, 1}, {40, 4096, 40, 1, 1}, {40, 4096, 200, 0, 1}, {40, 512, 40, 0, 0}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
            const struct run ru = runs[ri];
            float *deq;
            struct smol_weight *w[2];
            rand_weight2(be, types[ti], ru.rows, ru.cols, &deq, w);
            float *x = rand_vec((size_t)ru.n * ru.cols, 2);
            char *want;
            double *ref = imma ? gemm_ref_q8(deq, ru.rows, ru.cols, x, ru.n, &want)
                               : gemm_ref(deq, ru.rows, ru.cols, x, ru.n, &want);
            float *base = rand_vec((size_t)ru.n * ru.rows, 1);
            float *got[2][2] = {{NULL, NULL}, {NULL, NULL}};
            long launches[2];
            for (int i = 0; i < 2; i++) {
                float *dx = to_dev(be[i], x, ru.n, ru.cols), *dout = be[i]->alloc(be[i], (size_t)ru.n * ru.rows * 4);
                const long k0 = kernels_of(be[i]);
                be[i]->matmul(be[i], dout, w[i], dx, ru.n);
                launches[i] = kernels_of(be[i]) - k0;
                got[i][0] = from_dev(be[i], dout, (size_t)ru.n * ru.rows);
                if (ru.add) {
                    float *dbase = to_dev(be[i], base, ru.n, ru.rows);
                    ck_assert_int_eq(be[i]->matmul_add(be[i], dbase, w[i], dx, ru.n), 1);
                    got[i][1] = from_dev(be[i], dbase, (size_t)ru.n * ru.rows);
                    be[i]->free(be[i], dbase);
                }
                be[i]->free(be[i], dx);
                be[i]->free(be[i], dout);
            }
            const size_t count = (size_t)ru.n * ru.rows;
            for (int m = 0; m <= ru.add; m++) {
                const double e = gemm_err(got[1][m], ref, want, m ? base : NULL, count);
                size_t diff = 0;
                for (size_t j = 0; j < count; j++) diff += memcmp(&got[0][m][j], &got[1][m][j], 4) != 0;
                printf("stats: gemm fuse %s %s %s %dx%d n=%d: rel err %.2e (bound %.0e), %zu of %zu differ from the "
                       "default path; launches %ld (default %ld)\n", kind, m ? "add" : "store", w[1]->name, ru.rows,
                       ru.cols, ru.n, e, tol, diff, count, launches[1], launches[0]);
                ck_assert_msg(e < tol, "gemm fuse %s %s %s n=%d: rel err %g", kind, m ? "add" : "store", w[1]->name, ru.n, e);
                ck_assert_msg(diff == 0, "gemm fuse %s %s %s n=%d: %zu values differ from the default path", kind,
                              m ? "add" : "store", w[1]->name, ru.n, diff);
            }
            if (launches[0] >= 0) {  /* the emulator counts; the device build says -1 */
                ck_assert_msg(launches[1] == 1, "gemm fuse %s: %ld launches for one mat-mul", kind, launches[1]);
                ck_assert_msg(launches[0] == (ru.split ? 3 : 2), "default %s: %ld launches (split %d)", kind, launches[0],
                              ru.split);
            }
            for (int i = 0; i < 2; i++) free(got[i][0]), free(got[i][1]);
            free(deq); free(x); free(ref); free(want); free(base);
        }
    smol_backend_free(&be[1]);
    smol_backend_free(&be[0]);
}
END_TEST

START_TEST(t_sample)
{
    struct smol_backend *be = open_cuda();
    if (!be) return;
    const int vocab = 50000, rows = 4;
    float *lg = rand_vec((size_t)rows * vocab, 5);
    lg[3] = 40;                        /* row 0: clear winner */
    lg[vocab + 10] = lg[vocab + 20] = 30; /* row 1: tie keeps the lower id */
    lg[2 * vocab + 12345] = 6;         /* row 2: a single largest logit (frand's 65,536 values tie
                                          at the top of 50,000 draws often: the nucleus would hold
                                          both, and u = 0.99 picks the second) */
    float *d = to_dev(be, lg, rows, vocab);
    float temp[4] = {0, 0, 1, 0.7f}, top_p[4] = {1, 1, 1e-6f, 0.9f}, u[4] = {0.5f, 0.5f, 0.99f, 0.3f};
    int32_t out[4] = {-1, -1, -1, -1};
    char err[SMOL_ERRLEN];
    ck_assert_msg(smol_backend_cuda_sample(be, d, rows, vocab, temp, top_p, u, out, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(out[0], 3);
    ck_assert_int_eq(out[1], 10);
    int am = 0;
    for (int i = 1; i < vocab; i++) if (lg[2 * vocab + i] > lg[2 * vocab + am]) am = i;
    ck_assert_int_eq(out[2], am);      /* a tiny nucleus is the argmax */
    ck_assert(out[3] >= 0 && out[3] < vocab);
    /* against the reference twin (smol_sample_row_ref, what the CPU backend runs): 32 rows at
     * assorted temperatures, nuclei and draws; a row may differ only where u * kept mass lands
     * within float rounding of a boundary (the twin sums in double) */
    enum { R = 32 };
    float *lg2 = rand_vec((size_t)R * vocab, 6);
    float t2[R], p2[R], u2[R];
    int32_t o2[R];
    for (int r = 0; r < R; r++) {
        t2[r] = (float[]){0.0f, 0.3f, 0.7f, 1.0f, 1.5f}[r % 5];
        p2[r] = (float[]){1.0f, 0.95f, 0.8f, 0.5f}[r % 4];
        u2[r] = (r * 0.618034f) - (int)(r * 0.618034f);
    }
    float *d2 = to_dev(be, lg2, R, vocab);
    ck_assert_msg(smol_backend_cuda_sample(be, d2, R, vocab, t2, p2, u2, o2, err) == SMOL_OK, "%s", err);
    int differ = 0;
    for (int r = 0; r < R; r++) {
        double margin;
        const int32_t want = smol_sample_row_ref(lg2 + (size_t)r * vocab, vocab, t2[r], p2[r], u2[r], &margin);
        if (o2[r] != want) {
            differ++;
            ck_assert_msg(margin < 1e-4, "row %d (T %g, top_p %g, u %g): device %d, reference %d, %.3g from a boundary",
                          r, t2[r], p2[r], u2[r], o2[r], want, margin);
        }
    }
    ck_assert_msg(differ <= 1, "%d of %d rows differ from the reference at boundaries", differ, R);
    be->free(be, d2);
    free(lg2);
    free(lg);
    smol_backend_free(&be);
}
END_TEST

/* ---- whole model: both backends against the exact references ------------------------------- */
/*
 * The CPU backend quantizes activations to 8 bits inside the quantized
 * mat-muls, as llama.cpp does (q8_0 / q8_1 / q8_K); CUDA's prefill tiles
 * round them to f16, its f32 mat-vec keeps f32, its q8 mat-vec quantizes
 * them to blocks of 32 with float scales.  So CUDA - CPU is mostly the
 * CPU's own error.  The tracked fixtures have exact float64 references
 * (tests/fixtures/refs): both backends are measured against them and CUDA
 * must be no worse than the CPU.  The models smollm3 synth writes at test
 * time (fixture geometry, one per weight type: a device run needs no large
 * files) have no exact reference: there CUDA is compared with the CPU
 * within what the CPU's activation quantization alone moves the logits.
 * A model's CPU side runs once; its CUDA side once per knob setting.
 */
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include "testrefs.h"

/* The knob settings every CUDA model case runs under.  The environment's SMOL_CUDA_* would
 * override them (smol_backend_cuda_new); the model cases clear it so that the table runs. */
static const struct smol_cuda_opts knobs_device[] = {
    {.matvec = SMOL_CUDA_MATVEC_F32, .fuse = 0, .graphs = 0},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 0, .graphs = 0},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 1},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .attn = SMOL_CUDA_ATTN_TILED},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 1, .attn = SMOL_CUDA_ATTN_TILED},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 1, .gemm = SMOL_CUDA_GEMM_MMA},
    /* the defaults since device run 3 (smol_cuda_opts_default), and their graph twin */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 1, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    /* the int8 GEMM (not yet run on a device) */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .gemm = SMOL_CUDA_GEMM_IMMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    /* bucketed graphs (batched decode steps padded, head and sampling inside; not yet run on a
     * device), twin of the defaults' graphs = off row above */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    /* a layer in four kernels (layer.cu; not yet run on a device), and its graph twin */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = 0, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    /* the persistent one-launch decode step (not yet run on a device) */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL,
     .persistent = 1},
    /* cuBLASLt on bf16 weights decoded per mat-mul (an A/B knob; not yet run on a device; a plugin
     * built without cuBLASLt refuses it: a note) */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .gemm = SMOL_CUDA_GEMM_LT, .attn = SMOL_CUDA_ATTN_PREFILL},
};
/* On the emulator (SMOL_TEST_CUDA_EMU=1, the cuda-emu suite): the defaults and the newer paths,
 * each with its graph twin (the others ran on devices; the emulator is ~10^4 times slower) */
static const struct smol_cuda_opts knobs_emu[] = {
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 1, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = 0, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL},
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = SMOL_CUDA_FUSE_LAYER, .graphs = SMOL_CUDA_GRAPHS_BUCKET, .gemm = SMOL_CUDA_GEMM_MMA, .attn = SMOL_CUDA_ATTN_PREFILL,
     .persistent = 1},
    /* cuda_gemm = lt: the prefill's mat-muls on cuBLASLt (the emulator's: a float64 reference GEMM) */
    {.matvec = SMOL_CUDA_MATVEC_Q8, .fuse = 1, .graphs = 0, .gemm = SMOL_CUDA_GEMM_LT, .attn = SMOL_CUDA_ATTN_PREFILL},
};
static const struct smol_cuda_opts *knobs = knobs_device;
static int N_KNOBS = (int)(sizeof knobs_device / sizeof knobs_device[0]);


/* The setting a graphs = 1 setting replays (same mat-vec and fusion, no graph): its decode
 * logits must be bit-identical to that one's, the graph launching the same kernels.  -1 if none. */
static int graph_twin(int k)
{
    for (int j = 0; j < N_KNOBS; j++)
        if (knobs[k].graphs && !knobs[j].graphs && knobs[j].matvec == knobs[k].matvec && knobs[j].fuse == knobs[k].fuse &&
            knobs[j].attn == knobs[k].attn && knobs[j].gemm == knobs[k].gemm && knobs[j].persistent == knobs[k].persistent)
            return j;
    return -1;
}

static int is_graph_twin(int k)
{
    for (int j = 0; j < N_KNOBS; j++)
        if (graph_twin(j) == k) return 1;
    return 0;
}

#define N_GREEDY 24        /* greedy decode steps from the last prompt position (at most) */
/* the steps run: N_GREEDY, 4 on the emulator */
static int n_greedy(void) { return on_emu() ? 4 : N_GREEDY; }
#define SYNTH_TOKENS 150   /* the synthesized models' prompt: > 2 x MODEL_CHUNK, three prefill chunks */
#define MODEL_CHUNK 64     /* max_tokens: the longer prompts run as several prefill chunks */

/* Bounds that depend on whether the CPU backend quantizes a model's activations (any matrix
 * of a type whose vec_dot_type is not f32) or keeps them f32 (f32, f16, bf16 weights):
 *  - greedy tokens are compared where the CPU's top1-top2 margin is at least greedy_margin:
 *    with f32 activations the backends differ by float rounding and f16-KV rounding (~1e-3),
 *    so 0.05 is clear of ties; the CPU's q8 activations move logits by mean |d| 0.025-0.037
 *    (measured on the synthesized models of every quantized type against f32 activations over
 *    the same dequantized weights) and flipped the argmax at margins up to 0.15 there (q4_K_m:
 *    6 of 150 prompt positions with margins 0.05-0.15), so 0.25, the margin
 *    tests/fixtures/README.md calls clear for a q8-activation engine;
 *  - CUDA vs CPU logits, relative L2 over every position compared: the same measurement gives
 *    the CPU's q8 activations alone 2.0e-2 (q8_0, q4_0, q4_1) to 3.0e-2 (q4_K_m, q5_K, q6_K:
 *    q8_K blocks of 256), and fixture A's CPU logits are 3.7e-2 from its exact reference (p3,
 *    last position); CUDA's own rounding adds ~1e-3 in the prefill tiles (f16 activations)
 *    and, with the q8 mat-vec, an independent ~2e-2 at decode steps (sqrt-sum up to ~4.2e-2):
 *    bound 6e-2, where an op gone wrong gives 0.2 and more (a wrong RoPE or NoPE layer moves
 *    fixture A's logits by mean 0.25 to 1.1).  f32 activations (float and f16-KV rounding,
 *    ~5e-4): 1e-2. */
struct model_bounds { double greedy_margin, rel_l2; };

static struct model_bounds bounds_of(const struct smol_model *m)
{
    int q8 = smol_type_traits(m->w.tok_embd.type)->vec_dot_type != SMOL_TYPE_F32;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const struct smol_layer *L = &m->w.layers[l];
        const struct smol_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) q8 |= smol_type_traits(ws[i]->type)->vec_dot_type != SMOL_TYPE_F32;
    }
    return q8 ? (struct model_bounds){0.25, 6e-2} : (struct model_bounds){0.05, 1e-2};
}

static int argmax_margin(const float *x, int n, float *margin)
{
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[a]) { b = a; a = i; }
        else if (b < 0 || x[i] > x[b]) b = i;
    }
    if (margin) *margin = b < 0 ? INFINITY : x[a] - x[b];
    return a;
}

/* A model on the CPU (cuda NULL) or on CUDA with those knobs; kv_type NULL: f16. */
static struct smol_model *open_model_kv(const char *path, const struct smol_cuda_opts *cuda, const char *kv_type)
{
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.quiet = 1;
    set.kv_type = kv_type;
    set.n_ctx = 512;
    set.max_tokens = MODEL_CHUNK;
    if (cuda) {
        set.backend = cuda_name();
        set.cuda = *cuda;
    }
    char err[SMOL_ERRLEN];
    struct smol_model *m = NULL;
    ck_assert_msg(smol_model_open(&m, path, &set, err) == SMOL_OK, "open %s on %s: %s", path, cuda ? "cuda" : "cpu",
                  err);
    if (cuda) {
        ck_assert_msg(!strncmp(m->be->name, "cuda", 4), "%s: backend %s, not cuda", path, m->be->name);
        ck_assert_msg(!memcmp(&m->cuda, cuda, sizeof *cuda), "%s: the knobs in effect are not the table's", path);
    }
    return m;
}

static struct smol_model *open_model(const char *path, const struct smol_cuda_opts *cuda)
{
    return open_model_kv(path, cuda, NULL);
}

/* One prompt: its ids, the exact reference where there is one, and the CPU's results that every
 * CUDA setting is held to. */
struct prompt_case {
    int n;                      /* prompt tokens */
    int32_t *ids;               /* [n] */
    int32_t *ref_ids;           /* exact top-20 ids [n][TOPK] (tracked fixtures), else NULL */
    float *ref_logits;          /* exact top-20 logits [n][TOPK] */
    struct stats cpu;           /* the CPU vs the exact reference */
    float *cpu_logits;          /* [n][vocab] the CPU's prefill (kept where there is no reference) */
    int32_t tok[N_GREEDY];      /* the CPU's greedy tokens: tok[s] = argmax of step s's logits
                                   (s = 0: the last prompt position) */
    float margin[N_GREEDY];     /* the CPU's top1 - top2 at step s */
    float *cpu_dec;             /* [N_GREEDY][vocab] the CPU's logits after feeding tok[s] */
    float *twin_dec;            /* [N_GREEDY][vocab] the graph twin setting's (CUDA) */
    int twin_k1;                /* 1 + the setting twin_dec is of (0: none) */
};

/* Decodes N_GREEDY steps after a prefill whose last logits row is row0: at step s, am[s] =
 * argmax (margin[s] its top1 - top2 when margin is given), then tok[s] is fed (pick: tok[s] =
 * am[s], the greedy choice; else the given tokens, so that both backends continue on the same
 * sequence) and the logits it gives go to dec[s]. */
static void decode_steps(struct smol_model *m, struct smol_kv_seq *seq, const float *row0, int32_t *tok, int pick,
                         int32_t *am, float *margin, float *dec)
{
    const int V = m->cfg.vocab;
    char err[SMOL_ERRLEN];
    const float *cur = row0;
    for (int s = 0; s < n_greedy(); s++) {
        am[s] = argmax_margin(cur, V, margin ? &margin[s] : NULL);
        if (pick) tok[s] = am[s];
        ck_assert_msg(smol_model_eval(m, seq, &tok[s], 1, 0, dec + (size_t)s * V, err) == SMOL_OK, "%s", err);
        cur = dec + (size_t)s * V;
    }
}

/* Prefill of prompt pc on m, all positions: logits [n][vocab] (free them). */
static float *prefill(struct smol_model *m, const struct prompt_case *pc, struct smol_kv_seq *seq)
{
    float *lg = malloc((size_t)pc->n * m->cfg.vocab * sizeof *lg);
    ck_assert(lg);
    char err[SMOL_ERRLEN];
    smol_kv_seq_init(seq);
    ck_assert_msg(smol_model_eval(m, seq, pc->ids, pc->n, 1, lg, err) == SMOL_OK, "%s", err);
    return lg;
}

/* The CPU side of a model: every prompt's stats (or logits), greedy tokens and decode logits. */
static int cpu_head_dim;  /* the head_dim of the model cpu_side last opened */

static struct model_bounds cpu_side(const char *path, struct prompt_case *pcs, int np, int *vocab)
{
    struct smol_model *m = open_model(path, NULL);
    const int V = *vocab = m->cfg.vocab;
    cpu_head_dim = m->cfg.head_dim;
    struct model_bounds b = bounds_of(m);
    for (int p = 0; p < np; p++) {
        struct prompt_case *pc = &pcs[p];
        struct smol_kv_seq seq;
        float *lg = prefill(m, pc, &seq);
        if (pc->ref_ids) pc->cpu = compare_top(lg, V, pc->ref_ids, pc->ref_logits, pc->n, INFINITY);
        pc->cpu_dec = malloc((size_t)N_GREEDY * V * sizeof(float));
        int32_t am[N_GREEDY];
        decode_steps(m, &seq, lg + (size_t)(pc->n - 1) * V, pc->tok, 1, am, pc->margin, pc->cpu_dec);
        smol_kv_seq_deinit(&m->kv, &seq);
        if (pc->ref_ids) free(lg);
        else pc->cpu_logits = lg;
    }
    smol_model_close(&m);
    return b;
}

/* What one CUDA setting measured on a model, over all its prompts. */
struct cuda_tally {
    double cpu_sum, cuda_sum;   /* sum of |dlogit| over the exact top-20 of every row */
    int cpu_agree, cuda_agree;  /* rows whose argmax is the exact reference's */
    int rows;
    double pre_num, pre_den;    /* squared norms: (cuda - cpu) and cpu, prefill (no reference) */
    double dec_num, dec_den;    /* the same at the decode steps */
    int greedy_cmp, greedy_eq;  /* greedy steps compared (cpu margin clear) / equal */
    char greedy_miss[160];      /* the first clear step that differs */
    int graph_diff;             /* prompts whose decode logits differ from the graph twin's */
    int graph_cmp;              /* prompts compared with it */
};

static void tally_l2(const float *a, const float *b, size_t n, double *num, double *den)
{
    for (size_t i = 0; i < n; i++) {
        const double d = isfinite(a[i]) ? (double)a[i] - b[i] : INFINITY;
        *num += d * d;
        *den += (double)b[i] * b[i];
    }
}

/* Prompt p of a model on CUDA (m, knob setting k) against its CPU side, into t. */
/* 1 if setting k runs the greedy decode steps after its prefill: on the emulator, cuda_gemm = lt
 * does not (its GEMM takes > 8-token steps only; the decode steps would repeat the default row's
 * mat-vec path at ~1 s a step of the 128K head) */
static int decodes(int k) { return !(on_emu() && knobs[k].gemm == SMOL_CUDA_GEMM_LT); }

static void cuda_prompt(struct smol_model *m, const char *name, int k, struct prompt_case *pc, int p,
                        struct model_bounds b, struct cuda_tally *t)
{
    const int V = m->cfg.vocab;
    struct smol_kv_seq seq;
    float *lg = prefill(m, pc, &seq);
    if (pc->ref_ids) {
        const struct stats s = compare_top(lg, V, pc->ref_ids, pc->ref_logits, pc->n, INFINITY);
        char desc[128];
        smol_cuda_opts_describe(&knobs[k], desc, sizeof desc);
        printf("stats: %s [%s] p%d vs exact (%d rows): cpu mean |d| %.3e argmax %.3f, cuda mean |d| %.3e argmax %.3f\n",
               name, desc, p + 1, pc->n, pc->cpu.mean, pc->cpu.argmax_agree, s.mean, s.argmax_agree);
        t->cpu_sum += pc->cpu.mean * pc->n * TOPK;
        t->cuda_sum += s.mean * pc->n * TOPK;
        t->cpu_agree += (int)lround(pc->cpu.argmax_agree * pc->n);
        t->cuda_agree += (int)lround(s.argmax_agree * pc->n);
        t->rows += pc->n;
    } else tally_l2(lg, pc->cpu_logits, (size_t)pc->n * V, &t->pre_num, &t->pre_den);
    if (!decodes(k)) {
        smol_kv_seq_deinit(&m->kv, &seq);
        free(lg);
        return;
    }
    float *dec = malloc((size_t)N_GREEDY * V * sizeof *dec);
    int32_t am[N_GREEDY];
    decode_steps(m, &seq, lg + (size_t)(pc->n - 1) * V, pc->tok, 0, am, NULL, dec);
    smol_kv_seq_deinit(&m->kv, &seq);
    free(lg);
    for (int s = 0; s < n_greedy(); s++) {
        if (pc->margin[s] < b.greedy_margin) continue;  /* tie-ish: rounding may flip it */
        t->greedy_cmp++;
        t->greedy_eq += am[s] == pc->tok[s];
        if (am[s] != pc->tok[s] && !t->greedy_miss[0])
            snprintf(t->greedy_miss, sizeof t->greedy_miss, "p%d step %d: cuda %d != cpu %d (cpu margin %.3f)", p + 1,
                     s, am[s], pc->tok[s], pc->margin[s]);
    }
    tally_l2(dec, pc->cpu_dec, (size_t)n_greedy() * V, &t->dec_num, &t->dec_den);
    if (graph_twin(k) >= 0 && pc->twin_k1 == graph_twin(k) + 1) {  /* its twin ran (the emulator skips some) */
        t->graph_cmp++;
        t->graph_diff += memcmp(dec, pc->twin_dec, (size_t)n_greedy() * V * sizeof *dec) != 0;
    }
    if (is_graph_twin(k)) {
        free(pc->twin_dec);
        pc->twin_dec = dec;
        pc->twin_k1 = k + 1;
    } else free(dec);
}

/* Runs model path on CUDA with knob setting k against the CPU side pcs[0..np): prints what it
 * measured ("stats:" lines, labelled name and the setting), then asserts. */
static void cuda_side(const char *path, const char *name, int k, struct prompt_case *pcs, int np, int V,
                      struct model_bounds b)
{
    char desc[128];
    smol_cuda_opts_describe(&knobs[k], desc, sizeof desc);
    /* the emulator's time (make test): q4_K_m's model runs every setting; the others the new paths
     * once and the defaults without their exact-shape graph twin (the bucket row replays it too) */
    if (on_emu() && strstr(name, "q4_K_m") == NULL && knobs[k].graphs == 1) {
        printf("note: %s [%s] not run on the emulator (synth q4_K_m runs it)\n", name, desc);
        return;
    }
    if (on_emu() && strstr(name, "synth q8_0") && (knobs[k].fuse == SMOL_CUDA_FUSE_LAYER) != (knobs[k].graphs == SMOL_CUDA_GRAPHS_BUCKET && !knobs[k].persistent)) {
        printf("note: %s [%s] not run on the emulator (synth q4_K_m runs it)\n", name, desc);
        return;
    }
    if ((knobs[k].fuse == SMOL_CUDA_FUSE_LAYER || knobs[k].persistent) && cpu_head_dim != 128) {
        printf("note: %s [%s] not run: head_dim %d takes the op-by-op path under cuda_fuse = layer\n", name, desc,
               cpu_head_dim);
        return;
    }
    if (knobs[k].attn != SMOL_CUDA_ATTN_PAGED && cpu_head_dim != 128 && !on_emu()) {  /* the same kernels as paged:
                                                                                    no new check (the device table has them) */
        printf("note: %s [%s] not run: head_dim %d takes the paged kernels under cuda_attn = %s\n", name, desc,
               cpu_head_dim, knobs[k].attn == SMOL_CUDA_ATTN_TILED ? "tiled" : "prefill");
        return;
    }
    const char *only = getenv("SMOL_TEST_CUDA_ROWS");  /* a developer's filter: the settings whose description has it */
    if (only && !strstr(desc, only)) return;
    if (knobs[k].gemm == SMOL_CUDA_GEMM_LT) {  /* a device plugin built without cuBLASLt refuses it */
        struct smol_backend *be = NULL;
        char err[SMOL_ERRLEN];
        if (new_cuda(&be, &knobs[k], err) != SMOL_OK && strstr(err, "built with cuBLASLt")) {
            printf("note: %s [%s] not in this build: %s\n", name, desc, err);
            return;
        }
        smol_backend_free(&be);
    }
    struct smol_model *m = open_model(path, &knobs[k]);
    ck_assert_int_eq(m->cfg.vocab, V);
    struct cuda_tally t = {0};
    for (int p = 0; p < np; p++) cuda_prompt(m, name, k, &pcs[p], p, b, &t);
    struct smol_cuda_counts cnt;
    ck_assert_int_eq(smol_backend_cuda_counts(m->be, &cnt), SMOL_OK);
    smol_model_close(&m);
    /* the GEMM the setting names ran: cuBLASLt took the prefill's mat-muls under lt, none elsewhere */
    if (knobs[k].gemm == SMOL_CUDA_GEMM_LT) printf("stats: %s [%s] %ld mat-muls on cuBLASLt\n", name, desc, cnt.lt_matmuls);
    ck_assert_msg((knobs[k].gemm == SMOL_CUDA_GEMM_LT) == (cnt.lt_matmuls > 0), "%s [%s]: %ld mat-muls on cuBLASLt",
                  name, desc, cnt.lt_matmuls);

    const double dec_rel = sqrt(t.dec_num / (t.dec_den > 0 ? t.dec_den : 1));
    const double pre_rel = sqrt(t.pre_num / (t.pre_den > 0 ? t.pre_den : 1));
    const double cpu_mean = t.rows ? t.cpu_sum / (t.rows * TOPK) : 0;
    const double cuda_mean = t.rows ? t.cuda_sum / (t.rows * TOPK) : 0;
    if (t.rows)
        printf("stats: %s [%s] all prompts vs exact (%d rows): cpu mean |d| %.3e argmax %d, cuda mean |d| %.3e "
               "argmax %d\n", name, desc, t.rows, cpu_mean, t.cpu_agree, cuda_mean, t.cuda_agree);
    else printf("stats: %s [%s] prefill vs cpu rel L2 %.3e (bound %.0e)\n", name, desc, pre_rel, b.rel_l2);
    if (!decodes(k)) printf("note: %s [%s] decode steps not run on the emulator (<= 8 tokens: the default's path)\n", name, desc);
    else printf("stats: %s [%s] decode vs cpu rel L2 %.3e (bound %.0e); greedy %d/%d steps equal where the cpu margin "
           ">= %.2f%s\n", name, desc, dec_rel, b.rel_l2, t.greedy_eq, t.greedy_cmp, b.greedy_margin,
           !t.graph_cmp ? "" : t.graph_diff ? "; decode logits DIFFER from graphs=off" :
                                                   "; decode logits bit-identical to graphs=off");

    if (t.rows) {
        /* CUDA no worse than the CPU against the exact reference, over all prompts' rows
         * together (p1's 8 rows alone would make the mean too noisy for the slack).  The 5%
         * slack is for independent rounding of equally accurate paths: CUDA's q8 mat-vec on
         * <= 8-token steps (p1 under matvec=q8) against the CPU's q8 activations, both f16 KV
         * caches.  Most rows are prefill tiles with f16 activations, which should be well
         * under the CPU's q8 error; on f32 weights both are at float rounding (+1e-6). */
        ck_assert_msg(cuda_mean <= cpu_mean * 1.05 + 1e-6, "%s [%s]: cuda mean |d| %.3e > cpu %.3e vs exact", name,
                      desc, cuda_mean, cpu_mean);
        ck_assert_msg(t.cuda_agree >= t.cpu_agree - 1, "%s [%s]: cuda argmax agrees on %d rows, cpu on %d", name,
                      desc, t.cuda_agree, t.cpu_agree);
    } else
        ck_assert_msg(pre_rel < b.rel_l2, "%s [%s]: prefill logits rel L2 %.3e vs cpu (bound %.0e)", name, desc,
                      pre_rel, b.rel_l2);
    ck_assert_msg(!t.greedy_miss[0], "%s [%s] greedy %s", name, desc, t.greedy_miss);
    ck_assert_msg(dec_rel < b.rel_l2, "%s [%s]: decode logits rel L2 %.3e vs cpu (bound %.0e)", name, desc, dec_rel,
                  b.rel_l2);
    ck_assert_msg(!t.graph_diff, "%s [%s]: decode logits of %d prompt(s) differ from the same steps without the graph "
                  "(it replays the same kernels)", name, desc, t.graph_diff);
}

static void free_prompts(struct prompt_case *pcs, int np)
{
    for (int p = 0; p < np; p++) {
        free(pcs[p].ids);
        free(pcs[p].ref_ids);
        free(pcs[p].ref_logits);
        free(pcs[p].cpu_logits);
        free(pcs[p].cpu_dec);
        free(pcs[p].twin_dec);
    }
}

/* 1 if a CUDA device is there; else a SKIPPED line (open_cuda's) */
static int have_cuda(void)
{
    struct smol_backend *be = open_cuda();
    if (!be) return 0;
    smol_backend_free(&be);
    return 1;
}

/* SMOL_TEST_QUICK=1: the tracked fixtures' first 2 prompts (the 297-token p3 is the CPU's long pole) */
static int n_ref_prompts(void) { return getenv("SMOL_TEST_QUICK") ? 2 : 3; }

/* A tracked fixture: its refs' prompts on both backends against the exact reference. */
static void tracked_case(const char *file, const char *base)
{
    if (!have_cuda()) return;
    const char *path = fixture_path(file);
    if (!path) {  /* the large fixtures may be set aside when the tree travels to a device */
        printf("SKIPPED: %s not found\n", file);
        return;
    }
    json_t *refs = load_refs(base);
    const int np = n_ref_prompts();
    struct prompt_case pcs[3] = {{0}};
    for (int p = 0; p < np; p++) {
        json_t *pr = json_array_get(json_object_get(refs, "prompts"), p);
        pcs[p].ids = json_ids(json_object_get(pr, "prompt_file_tokens"), &pcs[p].n);
        json_t *files = json_object_get(json_object_get(pr, "exact"), "files");
        size_t nb;
        pcs[p].ref_ids = load_ref_bin(json_string_value(json_object_get(files, "top_ids")), &nb);
        ck_assert_int_eq(nb, (size_t)pcs[p].n * TOPK * 4);
        pcs[p].ref_logits = load_ref_bin(json_string_value(json_object_get(files, "top_logits")), &nb);
        ck_assert_int_eq(nb, (size_t)pcs[p].n * TOPK * 4);
    }
    json_decref(refs);
    int V;
    const struct model_bounds b = cpu_side(path, pcs, np, &V);
    for (int k = 0; k < N_KNOBS; k++) cuda_side(path, base, k, pcs, np, V, b);
    free_prompts(pcs, np);
}

START_TEST(t_model_f32) { tracked_case("models/fixture-t.F32.gguf", "fixture-t.F32"); }
END_TEST
START_TEST(t_model_q8) { tracked_case("models/fixture-t.Q8_0.gguf", "fixture-t.Q8_0"); }
END_TEST
START_TEST(t_model_q4km) { tracked_case("models/fixture-a.Q4_K_M.gguf", "fixture-a.Q4_K_M"); }
END_TEST

/* hf-long (tests/fixtures/hf, test_yarn.c's t_yarn_16k): the real SmolLM3-3B rope and head_dim
 * 128 (2 query heads on 1 KV head) on a 2-layer micro model; with --yarn, the logits at the last
 * 8 positions of a 16,384-token prompt against transformers with float64 angles, then 4 greedy
 * tokens against transformers' (margins 0.12 .. 2.9).  On CUDA with the default f16 cache, for
 * cuda_attn = paged and tiled: the tiled kernel's long-context check against an outside
 * reference (prefill chunks of 512 tokens over prefixes up to 15.9K positions, tiles of 32
 * tokens, splits; decode at depth 16K with 256 splits, recorded as a graph).  Bounds: both
 * within test_yarn.c's f16-KV tolerance (mean 1.5e-2, max 0.25) with every argmax and greedy
 * token equal; tiled, which rounds Q and P to f16 as the cache rounds K and V, at most twice
 * paged's mean and max distance (+ 1e-3 / 1e-2). */
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

START_TEST(t_model_long)
{
    if (!have_cuda()) return;
    const char *rp = fixture_path("hf/hf-yarn.refs.json");
    if (!rp) {
        printf("SKIPPED: tests/fixtures/hf/hf-yarn.refs.json not found\n");
        return;
    }
    json_error_t je;
    json_t *r = json_load_file(rp, 0, &je);
    ck_assert_msg(r, "%s", je.text);
    json_t *lg = json_object_get(r, "long"), *ck = json_object_get(json_object_get(lg, "checks"), "p16k");
    char rel[256], err[SMOL_ERRLEN];
    snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(lg, "gguf")));
    const char *path = fixture_path(rel);
    ck_assert_msg(path && ck, "hf-long fixture or its checks missing");
    const int n = (int)json_integer_value(json_object_get(ck, "n_tokens")), last = 8, n_gen = 4;
    snprintf(rel, sizeof rel, "hf/%s", json_string_value(json_object_get(ck, "last_logits_file_rope64")));
    size_t nb;
    float *ref = read_file(fixture_path(rel), &nb);
    ck_assert(ref);
    json_t *gids = json_object_get(ck, "gen_ids_rope64");
    ck_assert_int_eq(json_array_size(gids), n_gen);
    int32_t *ids = long_ids(n);
    double mean[2] = {0, 0}, mx[2] = {0, 0};
    for (int a = 0; a < 2; a++) {
        struct smol_model_settings set;
        smol_model_settings_default(&set);
        set.quiet = 1;
        set.yarn = 1;
        set.n_ctx = n + n_gen + 1;
        set.max_tokens = 512;
        set.backend = cuda_name();
        smol_cuda_opts_default(&set.cuda);
        set.cuda.attn = a ? SMOL_CUDA_ATTN_TILED : SMOL_CUDA_ATTN_PAGED;
        struct smol_model *m = NULL;
        ck_assert_msg(smol_model_open(&m, path, &set, err) == SMOL_OK, "%s", err);
        ck_assert_int_eq(m->cfg.head_dim, 128);
        const int V = m->cfg.vocab;
        ck_assert(nb == (size_t)last * V * 4);
        float *out = malloc((size_t)last * V * 4), *row = malloc((size_t)V * 4);
        struct smol_kv_seq seq;
        smol_kv_seq_init(&seq);
        ck_assert_msg(smol_model_eval(m, &seq, ids, n - last, 0, NULL, err) == SMOL_OK, "%s", err);
        ck_assert_msg(smol_model_eval(m, &seq, ids + n - last, last, 1, out, err) == SMOL_OK, "%s", err);
        int agree = 0;
        for (int t = 0; t < last; t++) {
            int am = 0, rm = 0;
            for (int v = 0; v < V; v++) {
                const double d = isfinite(out[(size_t)t * V + v]) ? fabs((double)out[(size_t)t * V + v] - ref[(size_t)t * V + v])
                                                                   : INFINITY;
                mean[a] += d;
                mx[a] = fmax(mx[a], d);
                if (out[(size_t)t * V + v] > out[(size_t)t * V + am]) am = v;
                if (ref[(size_t)t * V + v] > ref[(size_t)t * V + rm]) rm = v;
            }
            agree += am == rm;
        }
        mean[a] /= (double)last * V;
        /* greedy from the last prompt position, fed back one token at a time (decode steps) */
        memcpy(row, out + (size_t)(last - 1) * V, (size_t)V * 4);
        int greedy = 0, first_miss = -1;
        for (int s = 0; s < n_gen; s++) {
            int32_t tk = argmax_margin(row, V, NULL);
            if (tk == (int32_t)json_integer_value(json_array_get(gids, s))) greedy++;
            else if (first_miss < 0) first_miss = s;
            tk = (int32_t)json_integer_value(json_array_get(gids, s));  /* continue on transformers' tokens */
            ck_assert_msg(smol_model_eval(m, &seq, &tk, 1, 0, row, err) == SMOL_OK, "%s", err);
        }
        printf("stats: hf-long cuda attn=%s %d tokens (yarn), positions %d..%d vs rope64: mean |d| %.2e max %.2e "
               "argmax %d/%d; greedy %d/%d\n", a ? "tiled" : "paged", n, n - last, n - 1, mean[a], mx[a], agree, last,
               greedy, n_gen);
        ck_assert_msg(mean[a] <= 1.5e-2 && mx[a] <= 0.25 && agree == last && greedy == n_gen,
                      "hf-long attn=%s: mean %g max %g argmax %d/%d greedy %d/%d (first miss at step %d)",
                      a ? "tiled" : "paged", mean[a], mx[a], agree, last, greedy, n_gen, first_miss);
        smol_kv_seq_deinit(&m->kv, &seq);
        smol_model_close(&m);
        free(out);
        free(row);
    }
    ck_assert_msg(mean[1] <= 2 * mean[0] + 1e-3 && mx[1] <= 2 * mx[0] + 1e-2,
                  "hf-long: tiled (mean %g max %g) further from rope64 than twice paged (mean %g max %g)", mean[1],
                  mx[1], mean[0], mx[0]);
    free(ids);
    free(ref);
    json_decref(r);
}
END_TEST

/* ---- synthesized models: `smollm3 synth --preset fixture --type T`, written when the model
 * tcase starts (in parallel: the K-quants' reference quantizers take seconds) and removed at
 * its end.  No exact reference exists for them: CUDA is held to the CPU within model_bounds. */

static const char *const synth_types[] = {"q4_K_m", "q8_0", "q4_0", "q4_1", "q6_K", "q5_K", "f16"};
#define N_SYNTH ((int)(sizeof synth_types / sizeof synth_types[0]))
static char synth_dir[64];              /* the models' directory; "" when none was made */
static char synth_err[N_SYNTH][512];    /* why model i is missing; "" when it was written */

static void synth_path(char *buf, size_t cap, int i, const char *ext)
{
    snprintf(buf, cap, "%s/synth-%s.%s", synth_dir, synth_types[i], ext);
}

static void synthesize(void)
{
    const char *tool = tool_path("smollm3");
    strcpy(synth_dir, "/tmp/smol-test-cuda-XXXXXX");
    if (!tool || !mkdtemp(synth_dir)) {
        for (int i = 0; i < N_SYNTH; i++)
            snprintf(synth_err[i], sizeof synth_err[i], "%s", tool ? "mkdtemp failed" :
                     "smollm3 not found beside this test (<dir of test_cuda>/../bin/smollm3, or $SMOL_BIN_DIR)");
        synth_dir[0] = 0;
        return;
    }
    pid_t pid[N_SYNTH];
    const int n_synth = on_emu() ? 2 : N_SYNTH;  /* the emulator runs q4_K_m and q8_0 */
    for (int i = 0; i < N_SYNTH; i++) pid[i] = -1;
    for (int i = 0; i < n_synth; i++) {
        char out[128], log[128];
        synth_path(out, sizeof out, i, "gguf");
        synth_path(log, sizeof log, i, "log");
        char *argv[] = {(char *)tool, "synth", "--preset", "fixture", "--type", (char *)synth_types[i], "-o", out,
                        NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        if (posix_spawn(&pid[i], tool, &fa, NULL, argv, environ)) {
            pid[i] = -1;
            snprintf(synth_err[i], sizeof synth_err[i], "cannot run %s", tool);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    for (int i = 0; i < n_synth; i++) {
        int st = 0;
        if (pid[i] < 0 || waitpid(pid[i], &st, 0) < 0 || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) continue;
        char log[128];
        synth_path(log, sizeof log, i, "log");
        char *text = read_file(log, NULL);
        snprintf(synth_err[i], sizeof synth_err[i], "%s synth --type %s failed (status %d): %.300s", tool,
                 synth_types[i], st, text ? text : "");
        free(text);
    }
}

/* The model tcase's setup (once): clears the knob environment, and where a device is there
 * (elsewhere every case SKIPs at once) writes the synthesized models. */
static void model_setup(void)
{
    if (on_emu()) {
        knobs = knobs_emu;
        N_KNOBS = (int)(sizeof knobs_emu / sizeof knobs_emu[0]);
    }
    static const char *const vars[] = {"SMOL_CUDA_MATVEC", "SMOL_CUDA_FUSE", "SMOL_CUDA_GRAPHS", "SMOL_CUDA_GEMM",
                                       "SMOL_CUDA_ATTN", "SMOL_CUDA_PERSISTENT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) {
            printf("note: %s=%s cleared: the model cases run every setting of their table\n", vars[i], getenv(vars[i]));
            unsetenv(vars[i]);
        }
    struct smol_backend *be = NULL;
    char err[SMOL_ERRLEN];
    if (new_cuda(&be, NULL, err)) return;
    smol_backend_free(&be);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    synthesize();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("stats: synthesized %d models in %.1f s\n", N_SYNTH,
           t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}

static void model_teardown(void)
{
    if (!synth_dir[0]) return;
    for (int i = 0; i < N_SYNTH; i++) {
        char p[128];
        synth_path(p, sizeof p, i, "gguf");
        unlink(p);
        synth_path(p, sizeof p, i, "log");
        unlink(p);
    }
    rmdir(synth_dir);
    synth_dir[0] = 0;
}

/* Synthesized model _i: a SYNTH_TOKENS-token prompt, then N_GREEDY greedy steps. */
START_TEST(t_model_synth)
{
    if (!have_cuda()) return;
    ck_assert_msg(synth_dir[0] && !synth_err[_i][0], "synth %s: %s", synth_types[_i], synth_err[_i]);
    char path[128], name[64];
    synth_path(path, sizeof path, _i, "gguf");
    snprintf(name, sizeof name, "synth %s", synth_types[_i]);
    const int n_tok = on_emu() ? 70 : SYNTH_TOKENS;  /* the emulator: a 64-token chunk, then 6 (a decode-sized step) */
    struct prompt_case pc = {.n = n_tok};
    pc.ids = malloc(n_tok * sizeof *pc.ids);
    for (int i = 0; i < n_tok; i++) pc.ids[i] = (i * 7919 + 13) % 128256;  /* the fixtures' vocabulary */
    int V;
    const struct model_bounds b = cpu_side(path, &pc, 1, &V);
    for (int k = 0; k < N_KNOBS; k++) cuda_side(path, name, k, &pc, 1, V, b);
    free_prompts(&pc, 1);
}
END_TEST

/* Batched decode of mixed lengths over scattered pages (_i = 0: f16 cache, 1: q8_0): on the
 * synthesized q4_K_m model (head_dim 128), three sequences with prompts of 5, 23 and 41 tokens,
 * prefilled in turns of at most 8 tokens so that their pages interleave in the pool, then
 * BATCH_STEPS steps decoding all three in one batch (rows at three positions).  Every knob
 * setting's logits of those steps against the CPU's doing the same (relative L2 within the
 * model's bound, the argmax equal where the CPU's margin is clear), and a setting with graphs
 * bit for bit its twin without. */
#define BATCH_SEQS 3
#define BATCH_STEPS 4
static void batch_run(const char *path, const struct smol_cuda_opts *knob, const char *kv_type, float *out)
{
    static const int lens[BATCH_SEQS] = {5, 23, 41};
    struct smol_model *m = open_model_kv(path, knob, kv_type);
    const int V = m->cfg.vocab;
    char err[SMOL_ERRLEN];
    struct smol_kv_seq seqs[BATCH_SEQS];
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 7919 + 101) % 128256;
    for (int q = 0; q < BATCH_SEQS; q++) smol_kv_seq_init(&seqs[q]);
    for (int off = 0; off < 41; off += 8)
        for (int q = 0; q < BATCH_SEQS; q++) {
            const int k = lens[q] - off < 8 ? lens[q] - off : 8;
            if (k > 0) ck_assert_msg(smol_model_eval(m, &seqs[q], ids + off + q, k, 0, NULL, err) == SMOL_OK, "%s", err);
        }
    int32_t tok[BATCH_SEQS], pos[BATCH_SEQS], idx[BATCH_SEQS];
    struct smol_kv_seq *sp[BATCH_SEQS];
    for (int s = 0; s < BATCH_STEPS; s++) {
        for (int q = 0; q < BATCH_SEQS; q++) {
            pos[q] = seqs[q].n_tokens;
            tok[q] = ids[(7 * s + 3 * q) % 64];
            idx[q] = q;
            sp[q] = &seqs[q];
            ck_assert_msg(smol_kv_seq_reserve(&m->kv, &seqs[q], pos[q], pos[q] + 1, err) == SMOL_OK, "%s", err);
        }
        const struct smol_batch b = {.n_tokens = BATCH_SEQS, .tokens = tok, .pos = pos, .seq = sp, .n_out = BATCH_SEQS,
                                     .out_idx = idx};
        ck_assert_msg(smol_model_forward(m, &b, out + (size_t)s * BATCH_SEQS * V, err) == SMOL_OK, "%s", err);
    }
    for (int q = 0; q < BATCH_SEQS; q++) smol_kv_seq_deinit(&m->kv, &seqs[q]);
    smol_model_close(&m);
}

START_TEST(t_model_batch)
{
    if (!have_cuda()) return;
    ck_assert_msg(synth_dir[0] && !synth_err[0][0], "synth %s: %s", synth_types[0], synth_err[0]);
    char path[128];
    synth_path(path, sizeof path, 0, "gguf");
    const char *kv_type = _i ? "q8_0" : NULL;
    struct smol_model *m = open_model_kv(path, NULL, kv_type);
    const int V = m->cfg.vocab;
    const struct model_bounds bd = bounds_of(m);
    smol_model_close(&m);
    const size_t per = (size_t)BATCH_STEPS * BATCH_SEQS * V;
    float *cpu = malloc(per * sizeof *cpu), *got = malloc(per * sizeof *got), *twin = malloc(per * sizeof *twin);
    ck_assert(cpu && got && twin);
    batch_run(path, NULL, kv_type, cpu);
    int have_twin = 0;
    for (int k = 0; k < N_KNOBS; k++) {
        char desc[128];
        smol_cuda_opts_describe(&knobs[k], desc, sizeof desc);
        if (kv_type && (knobs[k].fuse == SMOL_CUDA_FUSE_LAYER || knobs[k].persistent)) {
            printf("note: batch kv %s [%s] not run: the q8_0 cache takes the op-by-op path there\n", kv_type, desc);
            continue;
        }
        if (knobs[k].gemm == SMOL_CUDA_GEMM_LT) {  /* steps of <= 8 tokens here: lt's GEMM is not on this path */
            printf("note: batch [%s] not run: every step here has <= 8 tokens (the mat-vec's)\n", desc);
            continue;
        }
        if (getenv("SMOL_TEST_CUDA_ROWS") && !strstr(desc, getenv("SMOL_TEST_CUDA_ROWS"))) continue;
        batch_run(path, &knobs[k], kv_type, got);
        double num = 0, den = 0;
        tally_l2(got, cpu, per, &num, &den);
        const double rel = sqrt(num / (den > 0 ? den : 1));
        int cmp = 0, eq = 0;
        for (size_t r = 0; r < (size_t)BATCH_STEPS * BATCH_SEQS; r++) {
            float margin;
            const int a = argmax_margin(cpu + r * V, V, &margin);
            if (margin < bd.greedy_margin) continue;
            cmp++;
            eq += argmax_margin(got + r * V, V, NULL) == a;
        }
        const int twin_diff = graph_twin(k) >= 0 && have_twin ? memcmp(got, twin, per * sizeof *got) != 0 : -1;
        printf("stats: batch %s kv %s [%s] %d seqs x %d steps vs cpu rel L2 %.3e (bound %.0e), argmax %d/%d%s\n",
               synth_types[0], kv_type ? kv_type : "f16", desc, BATCH_SEQS, BATCH_STEPS, rel, bd.rel_l2, eq, cmp,
               twin_diff < 0 ? "" : twin_diff ? "; DIFFERS from graphs=off" : "; bit-identical to graphs=off");
        ck_assert_msg(rel < bd.rel_l2, "batch [%s] kv %s: rel L2 %.3e vs cpu", desc, kv_type ? kv_type : "f16", rel);
        ck_assert_msg(eq == cmp, "batch [%s]: argmax %d of %d clear rows", desc, eq, cmp);
        ck_assert_msg(twin_diff <= 0, "batch [%s]: logits differ from the same steps without the graph", desc);
        if (is_graph_twin(k)) {
            memcpy(twin, got, per * sizeof *got);
            have_twin = 1;
        }
    }
    free(cpu);
    free(got);
    free(twin);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("cuda");
    /* CK_RUN_CASE=ops / model selects one (a device script runs compute-sanitizer on ops) */
    /* the cuda-emu suite's cases (SMOL_TEST_CUDA_EMU=1), sized for the emulator: three cases of
     * about equal time (CK_RUN_CASE=emu / emu_synth / emu_batch), which the suite runs side by side
     * (the emulator runs on one core) */
    TCase *emu = tcase_create("emu");
    tcase_set_timeout(emu, 3600);
    tcase_add_unchecked_fixture(emu, model_setup, model_teardown);
    tcase_add_test(emu, t_loader);
    tcase_add_test(emu, t_attention_f16);
    tcase_add_test(emu, t_attention_q8_0);
    tcase_add_test(emu, t_sample);
    tcase_add_loop_test(emu, t_matmul_q8, 0, 2);
    tcase_add_loop_test(emu, t_gemm_fuse, 0, 2);
    tcase_add_test(emu, t_model_q4km);
    suite_add_tcase(s, emu);
    TCase *emu_synth = tcase_create("emu_synth");
    tcase_set_timeout(emu_synth, 3600);
    tcase_add_unchecked_fixture(emu_synth, model_setup, model_teardown);
    tcase_add_loop_test(emu_synth, t_model_synth, 0, 2);
    suite_add_tcase(s, emu_synth);
    TCase *emu_batch = tcase_create("emu_batch");
    tcase_set_timeout(emu_batch, 3600);
    tcase_add_unchecked_fixture(emu_batch, model_setup, model_teardown);
    tcase_add_loop_test(emu_batch, t_model_batch, 0, 2);
    suite_add_tcase(s, emu_batch);
    TCase *ops = tcase_create("ops");
    tcase_set_timeout(ops, 300);
    tcase_add_test(ops, t_loader);
    tcase_add_test(ops, t_elementwise);
    tcase_add_test(ops, t_matmul);
    tcase_add_test(ops, t_attention_f16);
    tcase_add_test(ops, t_attention_f32);
    tcase_add_test(ops, t_attention_q8_0);
    tcase_add_loop_test(ops, t_matmul_q8, 0, 2);
    tcase_add_test(ops, t_fused);
    tcase_add_test(ops, t_gemm_mma);
    tcase_add_test(ops, t_gemm_imma);
    tcase_add_loop_test(ops, t_gemm_fuse, 0, 2);
    tcase_add_test(ops, t_sample);
    suite_add_tcase(s, ops);
    TCase *fattn = tcase_create("fattn");  /* knob cuda_attn = tiled; its own case for the sanitizer run */
    tcase_set_timeout(fattn, 300);
    tcase_add_test(fattn, t_fattn_f16);
    tcase_add_test(fattn, t_fattn_q8_0);
    suite_add_tcase(s, fattn);
    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 600);
    tcase_add_unchecked_fixture(model, model_setup, model_teardown);
    tcase_add_test(model, t_model_f32);
    tcase_add_test(model, t_model_q8);
    tcase_add_test(model, t_model_q4km);
    tcase_add_test(model, t_model_long);
    tcase_add_loop_test(model, t_model_synth, 0, N_SYNTH);
    tcase_add_loop_test(model, t_model_batch, 0, 2);
    suite_add_tcase(s, model);
    return s;
}

void test_init(SRunner *sr)
{
    srunner_set_fork_status(sr, CK_NOFORK);  /* one CUDA context per process */
}
