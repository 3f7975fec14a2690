/*
 * bench_cuda.c - the CUDA backend's mat-vec (be->matmul: out = x W^T) on
 * SmolLM3-3B's shapes, timed with the device's own clock, for each setting of
 * the cuda_matvec knob (f32: f32 activations, a warp per row; q8: activations
 * quantized to q8_1, integer dots).
 *
 *   bench_cuda [--types q4_K,q6_K,q8_0,q4_0] [--shapes q,kv,o,gate_up,down,head]
 *              [--n 1,2,4,8] [--bw GBPS] [--reps 5] [--ms 2] [--l2-mb 50] [--json]
 *
 * Shapes (rows = n_out x cols = n_in): q 2048x2048, kv 512x2048 (k and v),
 * o 2048x2048, gate_up 11008x2048 (gate and up), down 2048x11008, head
 * 128256x2048.  Every listed type, shape and token count n, with both settings:
 * one line each, "µs per call, weight GB/s (rows x row_bytes / time), the
 * fraction of --bw" (a measured device-to-device copy rate, bytes read +
 * written).  --json prints one JSON object per line instead.
 *
 * Method (kernels/cuda/NOTES.md, METHOD.md): weights are random bytes with
 * every block's f16 scales set to small sane values (as `smollm3 synth`
 * fills its tensors), uploaded in as many copies as make the set larger than
 * twice the L2 (--l2-mb) so that consecutive calls read from DRAM as a
 * decode step does (a weight larger than that alone, the head, is one copy).  Warm-up, then K calls
 * (>= the copies, >= --ms of work) between two device marks
 * (smol_backend_cuda_mark: events on the backend's stream); the median of
 * --reps repetitions.  Small shapes are bound by the launch rate, which is
 * part of what a decode step pays.
 *
 * Correctness first, so that a wrong kernel cannot be timed as fast: on each
 * case, outputs poisoned with NaN before the call, then the two settings'
 * outputs compared (relative L2 error, must be < 2e-2), and each setting
 * against a double-precision reference on 64 sampled rows (the _ref
 * dequantizer; f32 < 1e-4, q8 < 2e-2).  Exit status 1 when any check fails.
 *
 * bench_cuda --attn [--kv f16|q8_0]: attention instead (be->attention, knob
 * cuda_attn = paged vs tiled): prefill of 512, 2048 and 8192 tokens, decode
 * at depth 4096 and 16384; see attn_main.
 * --gemm: the mat-muls of more tokens instead (cuda_gemm = tiled, mma and imma,
 * or those --gemm-with names, the first the others are compared with; matvec
 * = q8 in all, so n <= 8 is the q8 mat-vec either way): n = 1, 4, 9,
 * 16, 32, 64, 512, 2048 (--n-gemm LIST) on the layer shapes (--shapes; the
 * head only when named), q4_K and q6_K (--types): µs per call, TFLOP/s
 * (2 rows cols n / time) and the fraction of the dense rate: cublasGemmEx
 * with bf16 operands and f32 compute on the same (rows, n, cols), timed in
 * the same run, where libcublas and libcudart can be dlopened (the product
 * never links them), else the H100's nominal 790 TFLOP/s, said so on the
 * line.  Each case checked first: both settings against a double reference
 * on 64 sampled rows x every token (f16 rounding, or imma's q8
 * activations: < 3e-3; q8 at n <= 8: < 2e-2) and against the first setting.
 *
 * It reaches the GPU only through the backend interface (daemon/model/
 * backend.h, backend_cuda_loader.h): no CUDA headers.  Without a device it
 * prints "SKIPPED: no CUDA device (<reason>)" and exits 0.
 */
#include "daemon/model/backend.h"
#include "daemon/model/kv.h"
#include "daemon/model/backend_cuda_loader.h"
#include "kernels/fp16.h"
#include "kernels/quant.h"
#include "kernels/quant_ref.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 8
#define REF_ROWS 64
#define TOL_Q8_F32 2e-2
#define TOL_F32_REF 1e-4
#define TOL_Q8_REF 2e-2

struct shape { const char *name; int rows, cols; };
static const struct shape shapes_all[] = {
    {"q", 2048, 2048},        {"kv", 512, 2048},     {"o", 2048, 2048},
    {"gate_up", 11008, 2048}, {"down", 2048, 11008}, {"head", 128256, 2048},
};
#define N_SHAPES (int)(sizeof shapes_all / sizeof shapes_all[0])
static const uint32_t types_all[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0};
#define N_TYPES (int)(sizeof types_all / sizeof types_all[0])
static const char *const setting_name[2] = {"f32", "q8"};

/* ---------------------------------------------------------------- random weights */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

static void rand_bytes(uint64_t *s, void *p, size_t n)
{
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t r = rng_next(s); memcpy(b + i, &r, 8); }
    for (uint64_t r = rng_next(s); i < n; i++, r >>= 8) b[i] = (uint8_t)r;
}

/* Random bytes, then each block's scales made sane (weights of std ~0.02, as cli_synth.c). */
static void fill_weights(uint64_t *s, uint32_t type, void *data, size_t bytes)
{
    rand_bytes(s, data, bytes);
    if (type == SMOL_TYPE_Q4_K) {
        struct block_q4_K *b = data;
        const float d = 0.02f / (32 * 4.61f);
        const smol_half hd = smol_f32_to_half(d), hm = smol_f32_to_half(d * 7.5f);
        for (size_t i = 0; i < bytes / sizeof *b; i++) {
            uint64_t r = rng_next(s);
            uint8_t sc[8], mn[8];
            for (int j = 0; j < 8; j++) { sc[j] = (uint8_t)(28 + ((r >> (3 * j)) & 7)); mn[j] = 32; }
            for (int j = 0; j < 4; j++) { b[i].scales[j] = sc[j]; b[i].scales[j + 4] = mn[j]; }
            for (int j = 4; j < 8; j++) {   /* the packing of smol_quantize_q4_K_ref */
                b[i].scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
                b[i].scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                b[i].scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
            }
            b[i].d = hd;
            b[i].dmin = hm;
        }
    } else if (type == SMOL_TYPE_Q6_K) {
        struct block_q6_K *b = data;
        const smol_half hd = smol_f32_to_half(0.02f / (12 * 18.5f));
        for (size_t i = 0; i < bytes / sizeof *b; i++) {
            uint64_t r = rng_next(s);
            for (int j = 0; j < 16; j++) b[i].scales[j] = (int8_t)(8 + ((r >> (4 * j)) & 7));
            b[i].d = hd;
        }
    } else if (type == SMOL_TYPE_Q8_0) {   /* q uniform in -128..127 (std 74) */
        struct block_q8_0 *b = data;
        const smol_half hd = smol_f32_to_half(0.02f / 74);
        for (size_t i = 0; i < bytes / sizeof *b; i++) b[i].d = hd;
    } else if (type == SMOL_TYPE_Q4_0) {   /* q - 8 uniform in -8..7 (std 4.6) */
        struct block_q4_0 *b = data;
        const smol_half hd = smol_f32_to_half(0.02f / 4.61f);
        for (size_t i = 0; i < bytes / sizeof *b; i++) b[i].d = hd;
    }
}

/* ---------------------------------------------------------------- helpers */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ||a - b|| / ||b|| over n floats; a NaN or infinity anywhere gives +inf. */
static double rel_l2(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

/* "a,b,c" -> the indices of names in list; returns the count, -1 on an unknown name. */
static int parse_list(const char *arg, const char *const *names, int n_names, int *out)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; i < n_names; i++)
            if (!strcmp(t, names[i])) k = i;
        if (k < 0 || n >= 16) return -1;
        out[n++] = k;
    }
    return n;
}

/* ---------------------------------------------------------------- the bench */

struct opts {
    int types[16], n_types, shapes[16], n_shapes, ns[16], n_ns;
    double bw, ms, l2_mb;
    int reps, json;
    int gemm, gemm_ns[16], n_gemm, head;  /* --gemm, --n-gemm; head: --shapes named it */
    int gemm_with[16], n_gemm_with;       /* --gemm-with: indices into gemm_names */
};

static const char *const gemm_names[3] = {"tiled", "mma", "imma"};
static const int gemm_values[3] = {SMOL_CUDA_GEMM_TILED, SMOL_CUDA_GEMM_MMA, SMOL_CUDA_GEMM_IMMA};

struct dev {                            /* one backend per setting */
    struct smol_backend *be;
    float *x, *out;                     /* backend memory: [MAX_N][11008], [MAX_N][128256] */
};

static int failures;
static struct smol_weight *kept[3 * 16 * 16];  /* weight structs, freed after the backends */
static int n_kept;

/* One (type, shape): upload, check both settings, time them at each n. */
static void run_case(struct dev *dv, const struct opts *o, uint32_t type, const struct shape *sh, uint64_t *seed)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    const size_t row_bytes = smol_row_size(type, sh->cols), bytes = row_bytes * (size_t)sh->rows;
    const double l2x2 = 2 * o->l2_mb * 1e6;     /* one copy larger than this (the head) is not rotated */
    const int copies = (double)bytes >= l2x2 ? 1 : (int)ceil(l2x2 / (double)bytes) + 1;
    void *host = malloc(bytes);
    float *xh = malloc(sizeof(float) * MAX_N * sh->cols), *oh[2], *wrow = malloc(sizeof(float) * sh->cols);
    double *ref = malloc(sizeof(double) * MAX_N * REF_ROWS), *refall = malloc(sizeof(double) * MAX_N * sh->rows);
    float *got = malloc(sizeof(float) * MAX_N * REF_ROWS);
    oh[0] = malloc(sizeof(float) * MAX_N * sh->rows);
    oh[1] = malloc(sizeof(float) * MAX_N * sh->rows);
    struct smol_weight *w[2] = {calloc(copies, sizeof(struct smol_weight)), calloc(copies, sizeof(struct smol_weight))};
    kept[n_kept++] = w[0];
    kept[n_kept++] = w[1];
    if (!host || !xh || !wrow || !ref || !refall || !got || !oh[0] || !oh[1] || !w[0] || !w[1]) {
        fprintf(stderr, "bench_cuda: out of host memory (%s %s)\n", tr->name, sh->name);
        failures++;
        goto out;
    }
    fill_weights(seed, type, host, bytes);
    for (int i = 0; i < MAX_N * sh->cols; i++) xh[i] = (float)((int64_t)(rng_next(seed) >> 40) - (1 << 23)) / (1 << 23);
    char err[SMOL_ERRLEN];
    for (int k = 0; k < 2; k++) {
        for (int c = 0; c < copies; c++) {
            w[k][c] = (struct smol_weight){.name = "bench", .type = type, .rows = sh->rows, .cols = sh->cols,
                                           .row_bytes = row_bytes, .data = host};
            if (dv[k].be->upload_weight(dv[k].be, &w[k][c], err)) {
                fprintf(stderr, "bench_cuda: %s %s: upload of copy %d: %s\n", tr->name, sh->name, c, err);
                failures++;
                goto out;
            }
        }
        dv[k].be->from_host(dv[k].be, dv[k].x, xh, sizeof(float) * MAX_N * sh->cols);
    }
    /* the reference on REF_ROWS rows spread over the matrix, all MAX_N tokens, in double */
    for (int i = 0; i < REF_ROWS; i++) {
        const int r = (int)((int64_t)i * sh->rows / REF_ROWS);
        tr->dequant((const uint8_t *)host + (size_t)r * row_bytes, wrow, sh->cols);
        for (int t = 0; t < MAX_N; t++) {
            double s = 0;
            for (int j = 0; j < sh->cols; j++) s += (double)wrow[j] * xh[(size_t)t * sh->cols + j];
            ref[t * REF_ROWS + i] = s;
        }
    }
    for (int ni = 0; ni < o->n_ns; ni++) {
        const int n = o->ns[ni];
        /* check: poison, one call per setting, compare */
        double e_ref[2];
        for (int k = 0; k < 2; k++) {
            struct smol_backend *be = dv[k].be;
            for (size_t i = 0; i < (size_t)n * sh->rows; i++) oh[k][i] = NAN;
            be->from_host(be, dv[k].out, oh[k], sizeof(float) * n * sh->rows);
            be->matmul(be, dv[k].out, &w[k][0], dv[k].x, n);
            be->to_host(be, oh[k], dv[k].out, sizeof(float) * n * sh->rows);
            for (int t = 0; t < n; t++)
                for (int i = 0; i < REF_ROWS; i++)
                    got[t * REF_ROWS + i] = oh[k][(size_t)t * sh->rows + (int)((int64_t)i * sh->rows / REF_ROWS)];
            e_ref[k] = rel_l2(got, ref, (size_t)n * REF_ROWS);
        }
        for (size_t i = 0; i < (size_t)n * sh->rows; i++) refall[i] = oh[0][i];
        const double e_x = rel_l2(oh[1], refall, (size_t)n * sh->rows);
        const int ok = e_x < TOL_Q8_F32 && e_ref[0] < TOL_F32_REF && e_ref[1] < TOL_Q8_REF;
        if (!ok) failures++;
        /* time: warm-up (estimates a call), then reps of K calls between two marks */
        for (int k = 0; k < 2; k++) {
            struct smol_backend *be = dv[k].be;
            smol_backend_cuda_mark(be);
            const int warm = copies > 8 ? copies : 8;
            for (int i = 0; i < warm; i++) be->matmul(be, dv[k].out, &w[k][i % copies], dv[k].x, n);
            const double est = smol_backend_cuda_mark(be) / warm;
            int calls = est > 0 ? (int)ceil(o->ms / est) : copies;
            if (calls < copies) calls = copies;
            if (calls < 4) calls = 4;
            if (calls > 200000) calls = 200000;
            double t[64];
            for (int r = 0; r < o->reps; r++) {
                smol_backend_cuda_mark(be);
                for (int i = 0; i < calls; i++) be->matmul(be, dv[k].out, &w[k][i % copies], dv[k].x, n);
                t[r] = smol_backend_cuda_mark(be) / calls;
            }
            const double ms = median(t, o->reps), us = ms * 1e3, gbps = bytes / (ms * 1e-3) / 1e9;
            if (o->json) {
                printf("{\"type\": \"%s\", \"shape\": \"%s\", \"rows\": %d, \"cols\": %d, \"n\": %d, \"matvec\": \"%s\", "
                       "\"us\": %.3f, \"gbps\": %.1f, \"bw_frac\": ", tr->name, sh->name, sh->rows, sh->cols, n,
                       setting_name[k], us, gbps);
                if (o->bw > 0) printf("%.4f", gbps / o->bw); else printf("null");
                printf(", \"weight_bytes\": %zu, \"copies\": %d, \"calls\": %d, \"rel_err_q8_vs_f32\": %.3e, "
                       "\"rel_err_vs_ref\": %.3e, \"ok\": %s}\n", bytes, copies, calls, e_x, e_ref[k],
                       ok ? "true" : "false");
            } else {
                char frac[32] = "";
                if (o->bw > 0) snprintf(frac, sizeof frac, " %5.1f%% of copy", 100 * gbps / o->bw);
                printf("%-5s %-7s %6dx%-5d n=%d %-3s: %9.2f us %7.1f GB/s%s  err q8/f32 %.1e ref %.1e  %s\n", tr->name,
                       sh->name, sh->rows, sh->cols, n, setting_name[k], us, gbps, frac, e_x, e_ref[k],
                       ok ? "ok" : "FAIL");
            }
            fflush(stdout);
        }
    }
out:
    /* the device copies stay until the backend is destroyed (backend.h has no weight free), and
     * so do the weight structs w[] a backend may point to (kept[]); the host bytes were copied */
    free(host);
    free(xh);
    free(wrow);
    free(ref);
    free(refall);
    free(got);
    free(oh[0]);
    free(oh[1]);
}

/* ---------------------------------------------------------------- attention (--attn) */

/* --attn: be->attention on SmolLM3-3B's attention (16 query heads on 4 KV heads of 128, one
 * layer's paged cache), knob cuda_attn = paged and tiled on the same inputs: a prompt of n
 * tokens attending to itself (prefill, causal: n (n + 1) / 2 query-key pairs per head) and one
 * token at depth d (decode: reads d K and V rows per KV head).  Each case checks tiled against
 * paged (relative L2 < 5e-3: paged computes in f32, tiled rounds Q and P to f16; see fattn.cu)
 * before timing, outputs poisoned with NaN; then the median of --reps runs of >= --ms of calls
 * between two device marks.  Prefill: tokens/s = n / time and the attention's TFLOP/s (4 x 16
 * heads x 128 x pairs); decode: the KV bytes read per call / time. */
#define ATT_HEADS 16
#define ATT_KV_HEADS 4
#define ATT_HD 128

struct attn_case { const char *what; int n, depth; };  /* depth 0: prefill of n tokens from position 0 */

static double attn_time(struct smol_backend *be, float *out, const float *q, struct smol_kv *kv,
                        const struct smol_batch *b, const struct opts *o)
{
    const float scale = 1.0f / sqrtf((float)ATT_HD);
    smol_backend_cuda_mark(be);
    be->attention(be, out, q, kv, 0, b, ATT_HEADS, scale);
    const double est = smol_backend_cuda_mark(be);
    int calls = est > 0 ? (int)ceil(o->ms / est) : 4;
    if (calls < 2) calls = 2;
    if (calls > 10000) calls = 10000;
    double t[64];
    for (int r = 0; r < o->reps; r++) {
        smol_backend_cuda_mark(be);
        for (int i = 0; i < calls; i++) be->attention(be, out, q, kv, 0, b, ATT_HEADS, scale);
        t[r] = smol_backend_cuda_mark(be) / calls;
    }
    return median(t, o->reps);
}

static int attn_main(const struct opts *o, uint32_t kv_type)
{
    static const struct attn_case cases[] = {
        {"prefill", 512, 0}, {"prefill", 2048, 0}, {"prefill", 8192, 0}, {"decode", 1, 4096}, {"decode", 1, 16384},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]), max_n = 8192, max_ctx = 16384 + 64;
    const int kv_dim = ATT_KV_HEADS * ATT_HD, q_dim = ATT_HEADS * ATT_HD;
    static const char *const knob[2] = {"paged", "tiled"};
    struct smol_backend *be[2] = {NULL, NULL};
    struct smol_kv kv[2];
    float *dq[2] = {0}, *dout[2] = {0}, *dk[2] = {0}, *dv[2] = {0};
    int made_kv[2] = {0, 0}, rc = 1;
    char err[SMOL_ERRLEN];
    float *hq = malloc(sizeof(float) * (size_t)max_n * q_dim), *hk = malloc(sizeof(float) * (size_t)max_n * kv_dim);
    float *hv = malloc(sizeof(float) * (size_t)max_n * kv_dim), *ho[2];
    ho[0] = malloc(sizeof(float) * (size_t)max_n * q_dim);
    ho[1] = malloc(sizeof(float) * (size_t)max_n * q_dim);
    int32_t *pos = malloc(sizeof(int32_t) * max_n);
    struct smol_kv_seq **seqs = malloc(sizeof *seqs * max_n);
    if (!hq || !hk || !hv || !ho[0] || !ho[1] || !pos || !seqs) { fprintf(stderr, "bench_cuda: out of memory\n"); goto out; }
    for (int k = 0; k < 2; k++) {
        struct smol_cuda_opts co;
        smol_cuda_opts_default(&co);
        co.attn = k ? SMOL_CUDA_ATTN_TILED : SMOL_CUDA_ATTN_PAGED;
        enum smol_err e = smol_backend_cuda_new(&be[k], 0, &co, err);
        if (e == SMOL_EUNSUPPORTED) {
            printf("SKIPPED: no CUDA device (%s)\n", err);
            rc = 0;
            goto out;
        }
        if (e || be[k]->reserve(be[k], max_n, q_dim, max_ctx, err)) { fprintf(stderr, "bench_cuda: %s\n", err); goto out; }
        if (smol_kv_init(&kv[k], be[k], 1, ATT_KV_HEADS, ATT_HD, kv_type, (max_ctx + 31) / 32 + 2, err)) {
            fprintf(stderr, "bench_cuda: %s\n", err);
            goto out;
        }
        made_kv[k] = 1;
        dq[k] = be[k]->alloc(be[k], sizeof(float) * (size_t)max_n * q_dim);
        dout[k] = be[k]->alloc(be[k], sizeof(float) * (size_t)max_n * q_dim);
        dk[k] = be[k]->alloc(be[k], sizeof(float) * (size_t)max_n * kv_dim);
        dv[k] = be[k]->alloc(be[k], sizeof(float) * (size_t)max_n * kv_dim);
        if (!dq[k] || !dout[k] || !dk[k] || !dv[k]) { fprintf(stderr, "bench_cuda: cannot allocate\n"); goto out; }
    }
    if (!o->json)
        printf("bench_cuda --attn: be->attention, 16 heads on 4 KV heads x 128, kv %s, cuda_attn paged vs tiled, "
               "median of %d x >= %.1f ms\n", smol_type_name(kv_type), o->reps, o->ms);
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (int ci = 0; ci < n_cases; ci++) {
        const struct attn_case *c = &cases[ci];
        const int ctx = c->depth ? c->depth + 1 : c->n;     /* positions written */
        double ms[2], e = INFINITY;
        for (int k = 0; k < 2; k++) {
            struct smol_kv_seq seq;
            smol_kv_seq_init(&seq);
            if (smol_kv_seq_reserve(&kv[k], &seq, 0, ctx, err)) { fprintf(stderr, "bench_cuda: %s\n", err); goto out; }
            /* the context's K/V, written in batches of up to max_n positions (the same bytes for both knobs) */
            uint64_t s = seed;
            for (int p0 = 0; p0 < ctx; p0 += max_n) {
                const int m = ctx - p0 < max_n ? ctx - p0 : max_n;
                for (size_t i = 0; i < (size_t)m * kv_dim; i++) {
                    hk[i] = (float)((int64_t)(rng_next(&s) >> 40) - (1 << 23)) / (1 << 22);
                    hv[i] = (float)((int64_t)(rng_next(&s) >> 40) - (1 << 23)) / (1 << 22);
                }
                for (int i = 0; i < m; i++) { pos[i] = p0 + i; seqs[i] = &seq; }
                be[k]->from_host(be[k], dk[k], hk, sizeof(float) * (size_t)m * kv_dim);
                be[k]->from_host(be[k], dv[k], hv, sizeof(float) * (size_t)m * kv_dim);
                struct smol_batch b = {.n_tokens = m, .pos = pos, .seq = seqs};
                be[k]->kv_store(be[k], &kv[k], 0, dk[k], dv[k], &b);
            }
            seq.n_tokens = ctx;
            const int n = c->n;
            for (size_t i = 0; i < (size_t)n * q_dim; i++) hq[i] = (float)((int64_t)(rng_next(&s) >> 40) - (1 << 23)) / (1 << 22);
            for (int i = 0; i < n; i++) { pos[i] = ctx - n + i; seqs[i] = &seq; }
            be[k]->from_host(be[k], dq[k], hq, sizeof(float) * (size_t)n * q_dim);
            for (size_t i = 0; i < (size_t)n * q_dim; i++) ho[k][i] = NAN;
            be[k]->from_host(be[k], dout[k], ho[k], sizeof(float) * (size_t)n * q_dim);
            struct smol_batch b = {.n_tokens = n, .pos = pos, .seq = seqs};
            be[k]->attention(be[k], dout[k], dq[k], &kv[k], 0, &b, ATT_HEADS, 1.0f / sqrtf((float)ATT_HD));
            be[k]->to_host(be[k], ho[k], dout[k], sizeof(float) * (size_t)n * q_dim);
            ms[k] = attn_time(be[k], dout[k], dq[k], &kv[k], &b, o);
            smol_kv_seq_deinit(&kv[k], &seq);
        }
        seed = rng_next(&seed);
        {
            const size_t cnt = (size_t)c->n * q_dim;
            double *ref = malloc(sizeof(double) * cnt);
            if (ref) {
                for (size_t i = 0; i < cnt; i++) ref[i] = ho[0][i];
                e = rel_l2(ho[1], ref, cnt);
                free(ref);
            }
        }
        const int ok = e < 5e-3;
        if (!ok) failures++;
        const double pairs = c->depth ? (double)(c->depth + 1) : 0.5 * c->n * (c->n + 1.0);
        const double flop = 4.0 * ATT_HEADS * ATT_HD * pairs;
        const double kv_bytes = (double)(c->depth + 1) * ATT_KV_HEADS * smol_kv_row_bytes(ATT_HD, kv_type) * 2;
        if (o->json) {
            printf("{\"attn\": \"%s\", \"n\": %d, \"depth\": %d, \"kv\": \"%s\"", c->what, c->n, c->depth,
                   smol_type_name(kv_type));
            for (int k = 0; k < 2; k++) printf(", \"%s_us\": %.3f", knob[k], ms[k] * 1e3);
            printf(", \"tflops\": [%.3f, %.3f]", flop / (ms[0] * 1e-3) / 1e12, flop / (ms[1] * 1e-3) / 1e12);
            if (c->depth) printf(", \"kv_gbps\": [%.1f, %.1f]", kv_bytes / (ms[0] * 1e-3) / 1e9, kv_bytes / (ms[1] * 1e-3) / 1e9);
            printf(", \"rel_err_tiled_vs_paged\": %.3e, \"ok\": %s}\n", e, ok ? "true" : "false");
        } else {
            printf("%-7s n=%-5d depth=%-5d kv=%-4s paged %10.1f us  tiled %10.1f us  (%.2fx)", c->what, c->n, c->depth,
                   smol_type_name(kv_type), ms[0] * 1e3, ms[1] * 1e3, ms[0] / ms[1]);
            if (c->depth)
                printf("  KV %.0f / %.0f GB/s", kv_bytes / (ms[0] * 1e-3) / 1e9, kv_bytes / (ms[1] * 1e-3) / 1e9);
            else
                printf("  %.1f / %.1f TFLOP/s", flop / (ms[0] * 1e-3) / 1e12, flop / (ms[1] * 1e-3) / 1e12);
            printf("  err %.1e  %s\n", e, ok ? "ok" : "FAIL");
        }
        fflush(stdout);
    }
    if (!o->json) printf("bench_cuda --attn: %s\n", failures ? "FAILED checks (see FAIL lines)" : "all checks passed");
    rc = failures ? 1 : 0;
out:
    for (int k = 0; k < 2; k++) {
        if (!be[k]) continue;
        be[k]->free(be[k], dq[k]);
        be[k]->free(be[k], dout[k]);
        be[k]->free(be[k], dk[k]);
        be[k]->free(be[k], dv[k]);
        if (made_kv[k]) smol_kv_deinit(&kv[k]);
        smol_backend_free(&be[k]);
    }
    free(hq); free(hk); free(hv); free(ho[0]); free(ho[1]); free(pos); free(seqs);
    return rc;
}

/* ---------------------------------------------------------------- --gemm */

/* The dense reference: cublasGemmEx through dlopen (no link-time dependency), timed with the
 * runtime's events on the legacy stream.  Types and constants as cublas_api.h / library_types.h. */
struct dense {
    void *cublas;       /* cublasHandle_t */
    int (*gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                   const void *, void *, int, int, int, int);
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*memset_)(void *, int, size_t);
    int (*ev_create)(void **);
    int (*ev_record)(void *, void *);
    int (*ev_sync)(void *);
    int (*ev_elapsed)(float *, void *, void *);
    char why[160];      /* why there is none */
};

static int dense_open(struct dense *d)
{
    memset(d, 0, sizeof *d);
    void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    if (!rt) rt = dlopen("/usr/local/cuda/lib64/libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    void *bl = dlopen("libcublas.so", RTLD_NOW | RTLD_GLOBAL);
    if (!bl) bl = dlopen("/usr/local/cuda/lib64/libcublas.so", RTLD_NOW | RTLD_GLOBAL);
    if (!rt || !bl) {
        snprintf(d->why, sizeof d->why, "no %s", !rt ? "libcudart" : "libcublas");
        return 0;
    }
    int (*create)(void **) = (int (*)(void **))dlsym(bl, "cublasCreate_v2");
    *(void **)&d->gemm_ex = dlsym(bl, "cublasGemmEx");
    *(void **)&d->malloc_ = dlsym(rt, "cudaMalloc");
    *(void **)&d->free_ = dlsym(rt, "cudaFree");
    *(void **)&d->memset_ = dlsym(rt, "cudaMemset");
    *(void **)&d->ev_create = dlsym(rt, "cudaEventCreate");
    *(void **)&d->ev_record = dlsym(rt, "cudaEventRecord");
    *(void **)&d->ev_sync = dlsym(rt, "cudaEventSynchronize");
    *(void **)&d->ev_elapsed = dlsym(rt, "cudaEventElapsedTime");
    if (!create || !d->gemm_ex || !d->malloc_ || !d->free_ || !d->memset_ || !d->ev_create || !d->ev_record ||
        !d->ev_sync || !d->ev_elapsed || create(&d->cublas)) {
        snprintf(d->why, sizeof d->why, "cublas/cudart symbols or cublasCreate failed");
        d->cublas = NULL;
        return 0;
    }
    return 1;
}

/* ms per bf16 GEMM C[n][rows] = X[n][cols] W[rows][cols]^T (f32 compute), median of reps; -1 on error */
static double dense_ms(struct dense *d, int rows, int cols, int n, int reps)
{
    enum { OP_N = 0, OP_T = 1, R_16BF = 14, COMPUTE_32F = 68, ALGO_DEFAULT = -1 };
    void *a = NULL, *b = NULL, *c = NULL, *e0 = NULL, *e1 = NULL;
    double res = -1;
    if (d->malloc_(&a, (size_t)rows * cols * 2) || d->malloc_(&b, (size_t)n * cols * 2) ||
        d->malloc_(&c, (size_t)n * rows * 2) || d->ev_create(&e0) || d->ev_create(&e1))
        goto out;
    d->memset_(a, 0, (size_t)rows * cols * 2);
    d->memset_(b, 0, (size_t)n * cols * 2);
    const float one = 1, zero = 0;
    /* column-major: C (rows x n) = W^T' ... W is [rows][cols] row-major = cols x rows column-major */
    for (int i = 0; i < 3; i++)
        if (d->gemm_ex(d->cublas, OP_T, OP_N, rows, n, cols, &one, a, R_16BF, cols, b, R_16BF, cols, &zero, c, R_16BF,
                       rows, COMPUTE_32F, ALGO_DEFAULT))
            goto out;
    double t[64];
    const int calls = 10;
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        d->ev_record(e0, NULL);
        for (int i = 0; i < calls; i++)
            d->gemm_ex(d->cublas, OP_T, OP_N, rows, n, cols, &one, a, R_16BF, cols, b, R_16BF, cols, &zero, c, R_16BF,
                       rows, COMPUTE_32F, ALGO_DEFAULT);
        d->ev_record(e1, NULL);
        d->ev_sync(e1);
        d->ev_elapsed(&ms, e0, e1);
        t[r] = ms / calls;
    }
    res = median(t, reps);
out:
    if (a) d->free_(a);
    if (b) d->free_(b);
    if (c) d->free_(c);
    return res;
}

#define GEMM_MAX_N 2048

/* One (type, shape) of --gemm: every setting checked at every n, then timed. */
static void run_gemm(struct dev *dv, const struct opts *o, uint32_t type, const struct shape *sh, uint64_t *seed,
                     struct dense *dn)
{
    const int nd = o->n_gemm_with;
    const struct smol_type_traits *tr = smol_type_traits(type);
    const size_t row_bytes = smol_row_size(type, sh->cols), bytes = row_bytes * (size_t)sh->rows;
    int nmax = 0;
    for (int i = 0; i < o->n_gemm; i++) nmax = o->gemm_ns[i] > nmax ? o->gemm_ns[i] : nmax;
    void *host = malloc(bytes);
    float *xh = malloc(sizeof(float) * nmax * sh->cols), *wrow = malloc(sizeof(float) * sh->cols);
    float *oh[3] = {NULL, NULL, NULL};
    for (int k = 0; k < nd; k++) oh[k] = malloc(sizeof(float) * nmax * sh->rows);
    double *ref = malloc(sizeof(double) * nmax * REF_ROWS), *other = malloc(sizeof(double) * nmax * sh->rows);
    float *got = malloc(sizeof(float) * nmax * REF_ROWS);
    float *wd = malloc(sizeof(float) * REF_ROWS * sh->cols);
    struct smol_weight *w[3] = {NULL, NULL, NULL};
    float *x[3] = {NULL, NULL, NULL}, *out[3] = {NULL, NULL, NULL};
    int have_all = 1;
    for (int k = 0; k < nd; k++) {
        kept[n_kept++] = w[k] = calloc(1, sizeof(struct smol_weight));
        have_all &= oh[k] && w[k];
    }
    char err[SMOL_ERRLEN];
    if (!host || !xh || !wrow || !have_all || !ref || !other || !got || !wd) {
        fprintf(stderr, "bench_cuda: out of host memory (%s %s)\n", tr->name, sh->name);
        failures++;
        goto out;
    }
    fill_weights(seed, type, host, bytes);
    for (size_t i = 0; i < (size_t)nmax * sh->cols; i++)
        xh[i] = (float)((int64_t)(rng_next(seed) >> 40) - (1 << 23)) / (1 << 23);
    for (int i = 0; i < REF_ROWS; i++)
        tr->dequant((const uint8_t *)host + (size_t)((int64_t)i * sh->rows / REF_ROWS) * row_bytes,
                    wd + (size_t)i * sh->cols, sh->cols);
    for (int k = 0; k < nd; k++) {
        struct smol_backend *be = dv[k].be;
        *w[k] = (struct smol_weight){.name = "bench", .type = type, .rows = sh->rows, .cols = sh->cols,
                                     .row_bytes = row_bytes, .data = host};
        x[k] = be->alloc(be, sizeof(float) * nmax * sh->cols);
        out[k] = be->alloc(be, sizeof(float) * nmax * sh->rows);
        if (!x[k] || !out[k] || be->upload_weight(be, w[k], err)) {
            fprintf(stderr, "bench_cuda: %s %s: device memory\n", tr->name, sh->name);
            failures++;
            goto out;
        }
        be->from_host(be, x[k], xh, sizeof(float) * nmax * sh->cols);
    }
    for (int ni = 0; ni < o->n_gemm; ni++) {
        const int n = o->gemm_ns[ni];
        /* the reference: 64 rows x n tokens in double over the f32 activations */
        for (int t = 0; t < n; t++)
            for (int i = 0; i < REF_ROWS; i++) {
                double acc = 0;
                for (int j = 0; j < sh->cols; j++) acc += (double)wd[(size_t)i * sh->cols + j] * xh[(size_t)t * sh->cols + j];
                ref[t * REF_ROWS + i] = acc;
            }
        double e_ref[3], e_x[3] = {0, 0, 0};
        for (int k = 0; k < nd; k++) {
            struct smol_backend *be = dv[k].be;
            for (size_t i = 0; i < (size_t)n * sh->rows; i++) oh[k][i] = NAN;
            be->from_host(be, out[k], oh[k], sizeof(float) * n * sh->rows);
            be->matmul(be, out[k], w[k], x[k], n);
            be->to_host(be, oh[k], out[k], sizeof(float) * n * sh->rows);
            for (int t = 0; t < n; t++)
                for (int i = 0; i < REF_ROWS; i++)
                    got[t * REF_ROWS + i] = oh[k][(size_t)t * sh->rows + (int)((int64_t)i * sh->rows / REF_ROWS)];
            e_ref[k] = rel_l2(got, ref, (size_t)n * REF_ROWS);
        }
        for (size_t i = 0; i < (size_t)n * sh->rows; i++) other[i] = oh[0][i];
        const double tol = n <= MAX_N ? TOL_Q8_REF : 3e-3;
        int ok = 1;
        for (int k = 0; k < nd; k++) {
            if (k) e_x[k] = rel_l2(oh[k], other, (size_t)n * sh->rows);
            ok &= e_ref[k] < tol && e_x[k] < 2 * tol;
        }
        if (!ok) failures++;
        const double flop = 2.0 * sh->rows * sh->cols * n;
        double dense = -1;
        if (dn->cublas) dense = dense_ms(dn, sh->rows, sh->cols, n, o->reps);
        const double dense_tflops = dense > 0 ? flop / (dense * 1e-3) / 1e12 : 790.0;
        for (int k = 0; k < nd; k++) {
            struct smol_backend *be = dv[k].be;
            const char *gname = gemm_names[o->gemm_with[k]], *first = gemm_names[o->gemm_with[0]];
            smol_backend_cuda_mark(be);
            for (int i = 0; i < 3; i++) be->matmul(be, out[k], w[k], x[k], n);
            const double est = smol_backend_cuda_mark(be) / 3;
            int calls = est > 0 ? (int)ceil(o->ms / est) : 4;
            if (calls < 4) calls = 4;
            if (calls > 100000) calls = 100000;
            double t[64];
            for (int r = 0; r < o->reps; r++) {
                smol_backend_cuda_mark(be);
                for (int i = 0; i < calls; i++) be->matmul(be, out[k], w[k], x[k], n);
                t[r] = smol_backend_cuda_mark(be) / calls;
            }
            const double ms = median(t, o->reps), tflops = flop / (ms * 1e-3) / 1e12;
            if (o->json)
                printf("{\"gemm\": \"%s\", \"type\": \"%s\", \"shape\": \"%s\", \"rows\": %d, \"cols\": %d, \"n\": %d, "
                       "\"us\": %.3f, \"tflops\": %.2f, \"dense_tflops\": %.1f, \"dense\": \"%s\", \"dense_frac\": %.4f, "
                       "\"rel_err_vs_ref\": %.3e, \"vs\": \"%s\", \"rel_err_vs\": %.3e, \"ok\": %s}\n", gname,
                       tr->name, sh->name, sh->rows, sh->cols, n, ms * 1e3, tflops, dense_tflops,
                       dense > 0 ? "cublas bf16" : "nominal H100", tflops / dense_tflops, e_ref[k], first, e_x[k],
                       ok ? "true" : "false");
            else
                printf("gemm %-5s %-5s %-7s %6dx%-5d n=%-4d: %9.2f us %7.2f TFLOP/s  %5.1f%% of %s %.0f  err ref %.1e "
                       "vs %s %.1e  %s\n", gname, tr->name, sh->name, sh->rows, sh->cols, n, ms * 1e3, tflops,
                       100 * tflops / dense_tflops, dense > 0 ? "cublas bf16" : "nominal", dense_tflops, e_ref[k], first,
                       e_x[k], ok ? "ok" : "FAIL");
            fflush(stdout);
        }
    }
out:
    for (int k = 0; k < nd; k++) {
        if (x[k]) dv[k].be->free(dv[k].be, x[k]);
        if (out[k]) dv[k].be->free(dv[k].be, out[k]);
        free(oh[k]);
    }
    free(host); free(xh); free(wrow); free(ref); free(other); free(got); free(wd);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_cuda [--types q4_K,q6_K,q8_0,q4_0] [--shapes q,kv,o,gate_up,down,head] [--n 1,2,4,8]\n"
               "                  [--bw GBPS] [--reps R] [--ms MS] [--l2-mb MB] [--json]\n"
               "       bench_cuda --attn [--kv f16|q8_0] [--reps R] [--ms MS] [--json]\n"
               "       bench_cuda --gemm [--types q4_K,q6_K] [--shapes q,kv,o,gate_up,down] [--n-gemm 1,4,9,16,32,64,512,2048]\n"
               "                  [--gemm-with tiled,mma,imma] [--reps R] [--ms MS] [--json]\n");
}

int main(int argc, char **argv)
{
    struct opts o = {.n_types = N_TYPES, .n_shapes = N_SHAPES, .n_ns = 4, .ms = 2, .l2_mb = 50, .reps = 5,
                     .gemm_with = {0, 1, 2}, .n_gemm_with = 3};
    for (int i = 0; i < N_TYPES; i++) o.types[i] = i;
    for (int i = 0; i < N_SHAPES; i++) o.shapes[i] = i;
    const int ns_default[] = {1, 2, 4, 8};
    int attn = 0;
    uint32_t attn_kv = SMOL_TYPE_F16;
    memcpy(o.ns, ns_default, sizeof ns_default);
    const char *type_names[N_TYPES], *shape_names[N_SHAPES];
    const char *const n_names[MAX_N] = {"1", "2", "3", "4", "5", "6", "7", "8"};
    for (int i = 0; i < N_TYPES; i++) type_names[i] = smol_type_name(types_all[i]);
    for (int i = 0; i < N_SHAPES; i++) shape_names[i] = shapes_all[i].name;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--attn")) attn = 1;
        else if (!strcmp(a, "--gemm")) o.gemm = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!v) bad = 1;
        else if (!strcmp(a, "--types")) bad = (o.n_types = parse_list(v, type_names, N_TYPES, o.types)) <= 0, i++;
        else if (!strcmp(a, "--shapes")) bad = (o.n_shapes = parse_list(v, shape_names, N_SHAPES, o.shapes)) <= 0, i++, o.head = 1;
        else if (!strcmp(a, "--gemm-with"))
            bad = (o.n_gemm_with = parse_list(v, gemm_names, 3, o.gemm_with)) <= 0 || o.n_gemm_with > 3, i++;
        else if (!strcmp(a, "--n-gemm")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o.n_gemm = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && !bad; t = strtok_r(NULL, ",", &save)) {
                const int k = atoi(t);
                if (k < 1 || k > GEMM_MAX_N || o.n_gemm >= 16) bad = 1;
                else o.gemm_ns[o.n_gemm++] = k;
            }
            bad |= o.n_gemm == 0;
            i++;
        }
        else if (!strcmp(a, "--n")) {
            bad = (o.n_ns = parse_list(v, n_names, MAX_N, o.ns)) <= 0, i++;
            for (int k = 0; k < o.n_ns; k++) o.ns[k]++;          /* index -> count */
        }
        else if (!strcmp(a, "--kv")) {
            bad = strcmp(v, "f16") && strcmp(v, "q8_0"), i++;
            attn_kv = strcmp(v, "q8_0") ? SMOL_TYPE_F16 : SMOL_TYPE_Q8_0;
        }
        else if (!strcmp(a, "--bw")) bad = !((o.bw = atof(v)) > 0), i++;
        else if (!strcmp(a, "--ms")) bad = !((o.ms = atof(v)) > 0), i++;
        else if (!strcmp(a, "--l2-mb")) bad = !((o.l2_mb = atof(v)) > 0), i++;
        else if (!strcmp(a, "--reps")) bad = (o.reps = atoi(v)) < 1 || o.reps > 64, i++;
        else bad = 1;
        if (bad) {
            fprintf(stderr, "bench_cuda: bad or unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    /* the settings are this program's to choose: the environment would override both */
    unsetenv("SMOL_CUDA_MATVEC");
    unsetenv("SMOL_CUDA_FUSE");
    unsetenv("SMOL_CUDA_GRAPHS");
    unsetenv("SMOL_CUDA_ATTN");
    unsetenv("SMOL_CUDA_GEMM");
    if (o.gemm && !o.n_gemm) {
        const int d[] = {1, 4, 9, 16, 32, 64, 512, 2048};
        memcpy(o.gemm_ns, d, sizeof d);
        o.n_gemm = 8;
    }
    if (attn) return attn_main(&o, attn_kv);

    struct dev dv[3] = {{0}};
    const int n_dev = o.gemm ? o.n_gemm_with : 2;
    char err[SMOL_ERRLEN];
    int rc = 1;
    for (int k = 0; k < n_dev; k++) {
        struct smol_cuda_opts co;
        smol_cuda_opts_default(&co);
        co.matvec = k ? SMOL_CUDA_MATVEC_Q8 : SMOL_CUDA_MATVEC_F32;
        if (o.gemm) {  /* q8 mat-vec in both: the knob under test is gemm */
            co.matvec = SMOL_CUDA_MATVEC_Q8;
            co.gemm = gemm_values[o.gemm_with[k]];
        }
        enum smol_err e = smol_backend_cuda_new(&dv[k].be, 0, &co, err);
        if (e == SMOL_EUNSUPPORTED) {
            printf("SKIPPED: no CUDA device (%s)\n", err);
            rc = 0;
            goto out;
        }
        if (e) { fprintf(stderr, "bench_cuda: %s\n", err); goto out; }
        struct smol_backend *be = dv[k].be;
        if (!be->from_host || smol_backend_cuda_mark(be) < 0) {
            fprintf(stderr, "bench_cuda: the backend has no from_host or mark\n");
            goto out;
        }
        if (be->reserve(be, o.gemm ? GEMM_MAX_N : MAX_N, 11008, 256, err)) {
            fprintf(stderr, "bench_cuda: reserve: %s\n", err);
            goto out;
        }
        dv[k].x = be->alloc(be, sizeof(float) * MAX_N * 11008);
        dv[k].out = be->alloc(be, sizeof(float) * MAX_N * 128256);
        if (!dv[k].x || !dv[k].out) { fprintf(stderr, "bench_cuda: cannot allocate activations\n"); goto out; }
    }
    if (o.gemm) {
        struct dense dn;
        const int have = dense_open(&dn);
        if (!o.json)
            printf("bench_cuda --gemm: be->matmul, settings cuda_gemm=%s%s%s%s%s (matvec=q8), median of %d; dense rate: "
                   "%s%s\n", gemm_names[o.gemm_with[0]], o.n_gemm_with > 1 ? "|" : "",
                   o.n_gemm_with > 1 ? gemm_names[o.gemm_with[1]] : "", o.n_gemm_with > 2 ? "|" : "",
                   o.n_gemm_with > 2 ? gemm_names[o.gemm_with[2]] : "", o.reps,
                   have ? "cublasGemmEx bf16 (f32 compute) at each shape, this run" :
                   "nominal H100 790 TFLOP/s, not measured: ", have ? "" : dn.why);
        uint64_t gseed = 0x9e3779b97f4a7c15ull;
        for (int ti = 0; ti < o.n_types; ti++) {
            const uint32_t t = types_all[o.types[ti]];
            if (o.n_types == N_TYPES && t != SMOL_TYPE_Q4_K && t != SMOL_TYPE_Q6_K) continue;  /* default: Q4_K_M's */
            for (int si = 0; si < o.n_shapes; si++) {
                const struct shape *sh = &shapes_all[o.shapes[si]];
                if (!strcmp(sh->name, "head") && !o.head) continue;
                run_gemm(dv, &o, t, sh, &gseed, &dn);
            }
        }
        if (!o.json) printf("bench_cuda: %s\n", failures ? "FAILED checks (see FAIL lines)" : "all checks passed");
        rc = failures ? 1 : 0;
        goto out;
    }
    if (!o.json)
        printf("bench_cuda: be->matmul, settings cuda_matvec=f32|q8, weight sets > %.0f MB (head: one copy), "
               "median of %d x >= %.1f ms%s\n", 2 * o.l2_mb, o.reps, o.ms, o.bw > 0 ? "" : " (no --bw given)");
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int ti = 0; ti < o.n_types; ti++)
        for (int si = 0; si < o.n_shapes; si++) run_case(dv, &o, types_all[o.types[ti]], &shapes_all[o.shapes[si]], &seed);
    if (!o.json) printf("bench_cuda: %s\n", failures ? "FAILED checks (see FAIL lines)" : "all checks passed");
    rc = failures ? 1 : 0;
out:
    for (int k = 0; k < 3; k++) {
        if (!dv[k].be) continue;
        dv[k].be->free(dv[k].be, dv[k].x);
        dv[k].be->free(dv[k].be, dv[k].out);
        smol_backend_free(&dv[k].be);
    }
    for (int i = 0; i < n_kept; i++) free(kept[i]);
    return rc;
}
