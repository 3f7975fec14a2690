/*
 * test_cuda.c - the CUDA backend against the _ref kernels and the CPU backend.
 *
 * Without a usable device (no plugin, no driver, no GPU) every test checks
 * that the loader says so with SMOL_EUNSUPPORTED and a reason, prints
 * "SKIPPED: no CUDA device (<reason>)" and passes.  With a device: every op
 * through the backend interface on random data (fresh per run, output
 * buffers poisoned with NaN first) against its _ref twin in double, and the
 * fixtures' full logits against the CPU backend with greedy tokens equal.
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
#include "testutil.h"

static struct smol_backend *open_cuda(void)
{
    char err[SMOL_ERRLEN] = "";
    struct smol_backend *be = NULL;
    enum smol_err e = smol_backend_cuda_new(&be, 0, err);
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
    ck_assert_str_eq(be->name, "cuda");
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
    /* hadamard (the q8_0 KV rotation), groups of 64 and 128: the ref's additions, bit for bit */
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

/* get_rows and matmul for each weight format, decode and prefill sizes. */
START_TEST(t_matmul)
{
    struct smol_backend *be = open_cuda();
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
    struct smol_backend *be = open_cuda();
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

START_TEST(t_sample)
{
    struct smol_backend *be = open_cuda();
    if (!be) return;
    const int vocab = 50000, rows = 4;
    float *lg = rand_vec((size_t)rows * vocab, 5);
    lg[3] = 40;                        /* row 0: clear winner */
    lg[vocab + 10] = lg[vocab + 20] = 30; /* row 1: tie keeps the lower id */
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
    free(lg);
    smol_backend_free(&be);
}
END_TEST

/* ---- whole model: CUDA backend vs CPU backend ---------------------------------------------- */

/* Moves an open (CPU) model onto be: weights uploaded, state and KV pool re-made there. */
static void move_to(struct smol_model *m, struct smol_backend *be)
{
    char err[SMOL_ERRLEN];
    struct smol_config *c = &m->cfg;
    struct smol_state *s = &m->s;
    int T = s->max_tokens, pages = m->kv.n_pages;
    uint32_t kv_type = m->kv.type;
    smol_kv_deinit(&m->kv);
    float *bufs[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) m->be->free(m->be, bufs[i]);
    smol_backend_free(&m->be);
    m->be = be;
    struct smol_weight *g[] = {&m->w.tok_embd, &m->w.output_norm, &m->w.output};
    for (int i = 0; i < 3; i++)
        if (g[i]->data && !(i == 2 && c->tied)) ck_assert_msg(be->upload_weight(be, g[i], err) == SMOL_OK, "%s", err);
    if (c->tied) m->w.output.dev = m->w.tok_embd.dev;
    for (int l = 0; l < c->n_layers; l++) {
        struct smol_layer *L = &m->w.layers[l];
        struct smol_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_norm, &L->w_gate,
                                    &L->w_up, &L->w_down};
        for (int i = 0; i < 9; i++) ck_assert_msg(be->upload_weight(be, ws[i], err) == SMOL_OK, "%s", err);
    }
    size_t wide = c->dim > c->q_dim ? c->dim : c->q_dim;
    s->x = be->alloc(be, (size_t)T * c->dim * 4);
    s->xb = be->alloc(be, (size_t)T * wide * 4);
    s->q = be->alloc(be, (size_t)T * c->q_dim * 4);
    s->k = be->alloc(be, (size_t)T * c->kv_dim * 4);
    s->v = be->alloc(be, (size_t)T * c->kv_dim * 4);
    s->att = be->alloc(be, (size_t)T * c->q_dim * 4);
    s->hb = be->alloc(be, (size_t)T * c->ffn_dim * 4);
    s->hb2 = be->alloc(be, (size_t)T * c->ffn_dim * 4);
    s->logits = be->alloc(be, (size_t)SMOL_LOGIT_ROWS * c->vocab * 4);
    int widest = (int)wide > c->ffn_dim ? (int)wide : c->ffn_dim;
    ck_assert(be->reserve(be, T, widest, c->n_ctx, err) == SMOL_OK);
    ck_assert(smol_kv_init(&m->kv, be, c->n_layers, c->n_kv_heads, c->head_dim, kv_type, pages, err) == SMOL_OK);
}

static void model_case(const char *file)
{
    struct smol_backend *be = open_cuda();
    if (!be) return;
    const char *p = fixture_path(file);
    if (!p) {
        printf("SKIPPED: %s not found\n", file);
        smol_backend_free(&be);
        return;
    }
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.quiet = 1;
    set.n_ctx = 512;
    set.max_tokens = 64;
    char err[SMOL_ERRLEN];
    struct smol_model *mc = NULL, *mg = NULL;
    ck_assert_msg(smol_model_open(&mc, p, &set, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_model_open(&mg, p, &set, err) == SMOL_OK, "%s", err);
    move_to(mg, be);
    const int V = mc->cfg.vocab, n = 150;  /* > max_tokens: three prefill chunks */
    int32_t ids[150];
    for (int i = 0; i < n; i++) ids[i] = (i * 7919 + 13) % V;
    float *lc = malloc((size_t)n * V * 4), *lg = malloc((size_t)n * V * 4);
    struct smol_kv_seq sc, sg;
    smol_kv_seq_init(&sc);
    smol_kv_seq_init(&sg);
    ck_assert(smol_model_eval(mc, &sc, ids, n, 1, lc, err) == SMOL_OK);
    ck_assert_msg(smol_model_eval(mg, &sg, ids, n, 1, lg, err) == SMOL_OK, "%s", err);
    double e = rel_err_f(lg, lc, (size_t)n * V);
    printf("stats: %s prefill logits cuda vs cpu rel err %.2e\n", file, e);
    ck_assert_msg(e < 2e-2, "%s: prefill logits rel err %g", file, e);
    /* greedy 24 steps: identical tokens */
    int32_t tc = 0, tg = 0;
    for (int step = 0; step < 24; step++) {
        const float *a = step ? lc : lc + (size_t)(n - 1) * V, *b = step ? lg : lg + (size_t)(n - 1) * V;
        tc = 0; tg = 0;
        for (int i = 1; i < V; i++) {
            if (a[i] > a[tc]) tc = i;
            if (b[i] > b[tg]) tg = i;
        }
        ck_assert_msg(tc == tg, "%s greedy step %d: cuda %d != cpu %d", file, step, tg, tc);
        ck_assert(smol_model_eval(mc, &sc, &tc, 1, 0, lc, err) == SMOL_OK);
        ck_assert(smol_model_eval(mg, &sg, &tg, 1, 0, lg, err) == SMOL_OK);
    }
    smol_kv_seq_deinit(&mc->kv, &sc);
    smol_kv_seq_deinit(&mg->kv, &sg);
    free(lc);
    free(lg);
    smol_model_close(&mc);
    smol_model_close(&mg);
}

START_TEST(t_model_f32) { model_case("models/fixture-t.F32.gguf"); }
END_TEST
START_TEST(t_model_q8) { model_case("models/fixture-t.Q8_0.gguf"); }
END_TEST
START_TEST(t_model_q4km) { model_case("models/fixture-a.Q4_K_M.gguf"); }
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, t_loader);
    tcase_add_test(tc, t_elementwise);
    tcase_add_test(tc, t_matmul);
    tcase_add_test(tc, t_attention_f16);
    tcase_add_test(tc, t_attention_f32);
    tcase_add_test(tc, t_attention_q8_0);
    tcase_add_test(tc, t_sample);
    tcase_add_test(tc, t_model_f32);
    tcase_add_test(tc, t_model_q8);
    tcase_add_test(tc, t_model_q4km);
    suite_add_tcase(s, tc);
    return s;
}

void test_init(SRunner *sr)
{
    srunner_set_fork_status(sr, CK_NOFORK);  /* one CUDA context per process */
}
