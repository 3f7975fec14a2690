/*
 * test_backend_cpu.c - the CPU backend's ops, below the model: how a matmul
 * is cut into parts and shared between weights must never show in the
 * numbers.
 *
 *   matmul_n (weights sharing one input, in one call) equals one matmul per
 *   weight bit for bit, for repacked, row-major and f32 weights, and falls
 *   back when the inputs differ; a batch of tokens equals its tokens one by
 *   one bit for bit (decode plans guided parts, prompts fixed ones); and
 *   each output is its row's reference dot within float tolerance.
 *
 *   attention over a paged f16 cache (several pages, GQA groups of 4)
 *   matches a double-precision softmax(q k / sqrt(d)) v, and a token's
 *   output is the same alone as in a batch.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/model/backend.h"
#include "daemon/model/kv.h"
#include "kernels/fp16.h"
#include "kernels/quant_ref.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float nrand(void)
{
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        s += (double)(rng >> 11) / (double)(1ull << 53) - 0.5;
    }
    return (float)(s * 1.7);
}

static struct smol_backend *new_be(int max_tokens, int cols, int ctx)
{
    char err[SMOL_ERRLEN];
    struct smol_backend *be = NULL;
    ck_assert_msg(smol_backend_cpu_new(&be, 2, err) == SMOL_OK, "%s", err);
    ck_assert_msg(be->reserve(be, max_tokens, cols, ctx, err) == SMOL_OK, "%s", err);
    return be;
}

/* a random weight of `type`, quantized from N(0,1) rows, uploaded (repacked where the kernels can) */
static void make_weight(struct smol_backend *be, struct smol_weight *w, uint32_t type, int rows, int cols, float **dq)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    memset(w, 0, sizeof *w);
    w->name = tr->name;
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = smol_row_size(type, cols);
    uint8_t *d = malloc(w->row_bytes * rows);
    float *x = malloc(sizeof(float) * cols);
    *dq = malloc(sizeof(float) * rows * cols);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < cols; i++) x[i] = nrand();
        tr->quantize(x, d + (size_t)r * w->row_bytes, cols);
        tr->dequant(d + (size_t)r * w->row_bytes, *dq + (size_t)r * cols, cols);
    }
    free(x);
    w->data = d;
    char err[SMOL_ERRLEN];
    ck_assert_msg(be->upload_weight(be, w, err) == SMOL_OK, "%s", err);
}

START_TEST(t_matmul_n)
{
    enum { COLS = 512, NT = 5 };
    struct smol_backend *be = new_be(NT, COLS, 64);
    struct smol_weight w[4];
    float *dq[4];
    const uint32_t types[4] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q4_K, SMOL_TYPE_F32};
    const int rows[4] = {272, 96, 100, 40}; /* 100: not whole groups of 16, stays row-major */
    for (int i = 0; i < 4; i++) make_weight(be, &w[i], types[i], rows[i], COLS, &dq[i]);
    float *x = malloc(sizeof(float) * NT * COLS);
    for (int i = 0; i < NT * COLS; i++) x[i] = nrand();
    float *sep[4], *fused[4], *one[4];
    for (int i = 0; i < 4; i++) {
        sep[i] = malloc(sizeof(float) * NT * rows[i]);
        fused[i] = malloc(sizeof(float) * NT * rows[i]);
        one[i] = malloc(sizeof(float) * rows[i]);
    }
    for (int n = 1; n <= NT; n += NT - 1) {
        for (int i = 0; i < 4; i++) be->matmul(be, sep[i], &w[i], x, n);
        /* Q, K, V-like: three weights of one input type */
        be->matmul_n(be, fused, (const struct smol_weight *const[]){&w[0], &w[1], &w[2]}, 3, x, n);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(!memcmp(sep[i], fused[i], sizeof(float) * n * rows[i]), "matmul_n weight %d n %d", i, n);
        /* q8_K and f32 inputs: one call per weight */
        be->matmul_n(be, (float *const[]){fused[0], fused[3]}, (const struct smol_weight *const[]){&w[0], &w[3]}, 2,
                     x, n);
        ck_assert(!memcmp(sep[0], fused[0], sizeof(float) * n * rows[0]));
        ck_assert(!memcmp(sep[3], fused[3], sizeof(float) * n * rows[3]));
        for (int i = 0; i < 4; i++)
            for (int t = 0; t < n; t++) {
                be->matmul(be, one[i], &w[i], x + (size_t)t * COLS, 1);
                ck_assert_msg(!memcmp(one[i], sep[i] + (size_t)t * rows[i], sizeof(float) * rows[i]),
                              "weight %d: token %d of %d differs from the token alone", i, t, n);
                for (int r = 0; r < rows[i]; r++) { /* the dequantized row . x, within activation quantization */
                    double ref = 0, mag = 0;
                    for (int c = 0; c < COLS; c++) {
                        ref += (double)dq[i][(size_t)r * COLS + c] * x[(size_t)t * COLS + c];
                        mag += fabs((double)dq[i][(size_t)r * COLS + c] * x[(size_t)t * COLS + c]);
                    }
                    const double got = sep[i][(size_t)t * rows[i] + r];
                    ck_assert_msg(fabs(got - ref) <= (types[i] == SMOL_TYPE_F32 ? 1e-5 : 2e-2) * mag,
                                  "weight %d row %d token %d: %g vs %g (|.| %g)", i, r, t, got, ref, mag);
                }
            }
    }
    for (int i = 0; i < 4; i++) {
        free(sep[i]); free(fused[i]); free(one[i]); free(dq[i]);
        free((void *)w[i].data);
    }
    free(x);
    smol_backend_free(&be);
}
END_TEST

/* decode-sized weights: the guided plan covers every row exactly once */
START_TEST(t_matmul_parts)
{
    const int shapes[][2] = {{2048, 256}, {512, 256}, {4096 + 48, 256}, {16, 256}, {11008, 256}};
    struct smol_backend *be = new_be(1, 256, 16);
    float *x = malloc(sizeof(float) * 256);
    for (int i = 0; i < 256; i++) x[i] = nrand();
    for (int s = 0; s < 5; s++) {
        struct smol_weight w;
        float *dq;
        make_weight(be, &w, SMOL_TYPE_Q4_K, shapes[s][0], shapes[s][1], &dq);
        float *out = malloc(sizeof(float) * w.rows);
        for (int r = 0; r < w.rows; r++) out[r] = NAN;
        be->matmul(be, out, &w, x, 1);
        for (int r = 0; r < w.rows; r++) {
            double ref = 0, mag = 0;
            for (int c = 0; c < w.cols; c++) {
                ref += (double)dq[(size_t)r * w.cols + c] * x[c];
                mag += fabs((double)dq[(size_t)r * w.cols + c] * x[c]);
            }
            ck_assert_msg(fabs(out[r] - ref) <= 2e-2 * mag, "rows %d: row %d %g vs %g", w.rows, r, out[r], ref);
        }
        free(out); free(dq); free((void *)w.data);
    }
    free(x);
    smol_backend_free(&be);
}
END_TEST

START_TEST(t_attention)
{
    enum { HD = 128, NH = 16, NKV = 4, LAYERS = 2, NPOS = 77 };
    struct smol_backend *be = new_be(8, NH * HD, NPOS + 1);
    char err[SMOL_ERRLEN];
    struct smol_kv kv;
    ck_assert_msg(smol_kv_init(&kv, be, LAYERS, NKV, HD, SMOL_TYPE_F16, 8, err) == SMOL_OK, "%s", err);
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    ck_assert_msg(smol_kv_seq_reserve(&kv, &seq, 0, NPOS, err) == SMOL_OK, "%s", err);
    smol_half *kh = kv.k, *vh = kv.v;
    for (size_t i = 0; i < kv.layer_bytes * LAYERS / 2; i++) {
        kh[i] = smol_f32_to_half(nrand());
        vh[i] = smol_f32_to_half(nrand());
    }
    seq.n_tokens = NPOS;
    /* a batch of tokens of the sequence, at positions across pages: the
     * first three, then a run of four (a speculative verify step) beside
     * them: groups of up to 4 tokens (16 query heads) share a pass over
     * the rows, a token's own rows past the group's earliest one apart */
    enum { NT = 8 };
    const int32_t toks[NT] = {0}, pos[NT] = {5, 40, NPOS - 1, 62, 63, 64, 65, 66};
    struct smol_kv_seq *seqs[NT] = {&seq, &seq, &seq, &seq, &seq, &seq, &seq, &seq};
    float *q = malloc(sizeof(float) * NT * NH * HD), *out = malloc(sizeof(float) * NT * NH * HD),
          *one = malloc(sizeof(float) * NH * HD);
    for (int i = 0; i < NT * NH * HD; i++) q[i] = nrand();
    const float scale = 1.0f / sqrtf(HD);
    for (int layer = 0; layer < 2 * LAYERS; layer++) {
        const struct smol_batch b = {.n_tokens = layer < LAYERS ? 3 : NT, .tokens = toks, .pos = pos, .seq = seqs};
        be->attention(be, out, q, &kv, layer % LAYERS, &b, NH, scale);
        for (int t = 0; t < b.n_tokens; t++) {
            const struct smol_batch b1 = {.n_tokens = 1, .tokens = toks, .pos = pos + t, .seq = seqs};
            be->attention(be, one, q + (size_t)t * NH * HD, &kv, layer % LAYERS, &b1, NH, scale);
            ck_assert_msg(!memcmp(one, out + (size_t)t * NH * HD, sizeof(float) * NH * HD),
                          "token at %d: alone differs from the batch", pos[t]);
            for (int h = 0; h < NH; h++) {
                const int g = h / (NH / NKV);
                double sc[NPOS], mx = -1e300, sum = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    const smol_half *kr = (const smol_half *)((const uint8_t *)kv.k + layer % LAYERS * kv.layer_bytes +
                                                              (size_t)seq.pages[p / SMOL_KV_PAGE] * kv.page_bytes) +
                                          ((size_t)g * SMOL_KV_PAGE + p % SMOL_KV_PAGE) * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)smol_half_to_f32(kr[i]) * q[((size_t)t * NH + h) * HD + i];
                    sc[p] = d * scale;
                    if (sc[p] > mx) mx = sc[p];
                }
                for (int p = 0; p <= pos[t]; p++) sum += sc[p] = exp(sc[p] - mx);
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int p = 0; p <= pos[t]; p++) {
                        const smol_half *vr = (const smol_half *)((const uint8_t *)kv.v + layer % LAYERS * kv.layer_bytes +
                                                                  (size_t)seq.pages[p / SMOL_KV_PAGE] * kv.page_bytes) +
                                              ((size_t)g * SMOL_KV_PAGE + p % SMOL_KV_PAGE) * HD;
                        o += sc[p] / sum * smol_half_to_f32(vr[i]);
                    }
                    const float got = out[((size_t)t * NH + h) * HD + i];
                    ck_assert_msg(fabs(got - o) <= 1e-5 + 1e-5 * fabs(o), "layer %d pos %d head %d dim %d: %g vs %g",
                                  layer, pos[t], h, i, got, o);
                }
            }
        }
    }
    free(q); free(out); free(one);
    smol_kv_seq_deinit(&kv, &seq);
    smol_kv_deinit(&kv);
    smol_backend_free(&be);
}
END_TEST

/* smol_kv_init_fit on a backend whose memory holds cap bytes (a device's, in miniature): the
 * largest halving of the budget whose pool and the spare bytes beside it fit; the floor last,
 * without the spare; ENOMEM when even the floor does not fit. */
static size_t fit_cap, fit_used;
static struct { void *p; size_t n; } fit_live[8];
static void *(*fit_real_alloc)(struct smol_backend *, size_t);
static void (*fit_real_free)(struct smol_backend *, void *);
static void *fit_alloc(struct smol_backend *be, size_t n)
{
    if (fit_used + n > fit_cap) return NULL;
    for (int i = 0; i < 8; i++)
        if (!fit_live[i].p) {
            void *p = fit_real_alloc(be, n);
            if (!p) return NULL;
            fit_live[i].p = p;
            fit_live[i].n = n;
            fit_used += n;
            return p;
        }
    return NULL;
}
static void fit_free(struct smol_backend *be, void *p)
{
    for (int i = 0; i < 8; i++)
        if (p && fit_live[i].p == p) {
            fit_used -= fit_live[i].n;
            fit_live[i].p = NULL;
        }
    fit_real_free(be, p);
}

START_TEST(t_kv_init_fit)
{
    struct smol_backend *be = NULL;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_backend_cpu_new(&be, 1, err), SMOL_OK);
    fit_real_alloc = be->alloc;
    fit_real_free = be->free;
    be->alloc = fit_alloc;
    be->free = fit_free;
    const int L = 2, H = 2, D = 64;
    const size_t page = smol_kv_bytes_per_token(L, H, D, SMOL_TYPE_F16) * SMOL_KV_PAGE;
    /* want 64 pages, floor 4, spare 8: capacity -> pages the pool gets (0: ENOMEM) */
    const struct { size_t cap, pages; } cases[] = {
        {1000, 64}, {72, 64}, {71, 32}, {40, 32}, {39, 16}, {24, 16}, {23, 8}, {16, 8}, {15, 4}, {4, 4}, {3, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct smol_kv kv;
        size_t got = 0;
        fit_cap = cases[i].cap * page;
        fit_used = 0;
        enum smol_err e = smol_kv_init_fit(&kv, be, L, H, D, SMOL_TYPE_F16, 64 * page, 4 * page, 8 * page, &got, err);
        if (!cases[i].pages) {
            ck_assert_int_eq(e, SMOL_ENOMEM);
            ck_assert_uint_eq(fit_used, 0);     /* nothing left allocated */
            continue;
        }
        ck_assert_msg(e == SMOL_OK, "cap %zu pages: %s", cases[i].cap, err);
        ck_assert_msg(kv.n_pages == (int)cases[i].pages && got == cases[i].pages * page,
                      "cap %zu pages: got %d pages, want %zu", cases[i].cap, kv.n_pages, cases[i].pages);
        ck_assert_uint_eq(fit_used, cases[i].pages * page);   /* the probe was freed */
        smol_kv_deinit(&kv);
        ck_assert_uint_eq(fit_used, 0);
    }
    be->alloc = fit_real_alloc;
    be->free = fit_real_free;
    smol_backend_free(&be);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, t_matmul_n);
    tcase_add_test(tc, t_matmul_parts);
    tcase_add_test(tc, t_attention);
    tcase_add_test(tc, t_kv_init_fit);
    suite_add_tcase(s, tc);
    return s;
}
