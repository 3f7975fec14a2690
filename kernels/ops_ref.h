/*
 * ops_ref.h - scalar reference versions of the non-matmul ops of the
 * forward pass.  Pure functions on raw float arrays; the CPU backend calls
 * them per row (or its SIMD twins), the CUDA kernels are tested against them.
 */
#ifndef SMOL_OPS_REF_H
#define SMOL_OPS_REF_H

#include <stddef.h>
#include <stdint.h>

/* RoPE parameters, fixed per model (and per setting: YaRN is opt-in). */
struct smol_rope_params {
    int n_dims;          /* rotated dimensions per head (<= head_dim), even */
    float freq_base;     /* theta, 5e6 for SmolLM3 */
    float freq_scale;    /* 1 / YaRN factor; 1 = plain RoPE */
    float ext_factor;    /* YaRN ramp mix: 0 off, 1 on */
    float attn_factor;   /* multiplier on cos/sin before YaRN's own mscale */
    float corr_dims[2];  /* YaRN correction range, from smol_rope_yarn_corr_dims */
};

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; the sum of squares is kept
 * in double so long rows lose nothing. */
void smol_rmsnorm_ref(float *out, const float *x, const float *w, int dim, float eps);

/* Fills cs[2i] = cos, cs[2i+1] = sin of the rotation angle of pair i at
 * position pos, i in [0, n_dims/2), with YaRN when ext_factor != 0. */
void smol_rope_cache_ref(float *cs, int pos, const struct smol_rope_params *rp);

/* Rotates adjacent pairs (x[2i], x[2i+1]) of each of n_heads heads of
 * head_dim floats ("NORM" mode, the GGUF convention) by the angles in cs.
 * Dimensions >= rp->n_dims are left alone. */
void smol_rope_apply_ref(float *x, int n_heads, int head_dim, int n_dims, const float *cs);

/* YaRN correction dims as ggml_rope_yarn_corr_dims (beta_fast 32, beta_slow 1). */
void smol_rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                              float dims[2]);

/* gate[i] = silu(gate[i]) * up[i] */
void smol_silu_mul_ref(float *gate, const float *up, int n);

/* x[i] += y[i] */
void smol_add_ref(float *x, const float *y, int n);

/* In-place softmax of x[0..n); returns nothing, max-subtracted, sum in double. */
void smol_softmax_ref(float *x, int n);
/* x[0, n) in place, each run of `group` elements (a power of two dividing n)
 * times the orthonormal Walsh-Hadamard matrix of that size, H = H^T = H^-1
 * (Sylvester order: H_2s = [H_s H_s; H_s -H_s] / sqrt 2, llama.cpp's
 * ggml_gen_hadamard).  The q8_0 KV cache stores rotated K and V rows. */
void smol_hadamard_ref(float *x, int n, int group);

/* y[i] += a * x[i] for x stored as f32 / f16 (attention's weighted sum of V). */
void smol_axpy_f32_ref(int n, float a, const void *x, float *y);
void smol_axpy_f16_ref(int n, float a, const void *x, float *y);

/* Attention over n_rows consecutive rows of one KV head (hd elements each,
 * f32 / f16) for the G query heads that share it (q: G rows of hd floats):
 *   scores: sc[g * sc_stride + r] = scale * dot(k row r, q row g)
 *   accum:  out[g * hd + i] += sum over r, in order, of p[g * p_stride + r] * v row r [i]
 * The result for one query head does not depend on G or on the others.
 * next (rows read after these, for SIMD versions to prefetch) is ignored. */
void smol_kv_scores_f32_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                            size_t sc_stride, const void *next);
void smol_kv_scores_f16_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                            size_t sc_stride, const void *next);
void smol_kv_accum_f32_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                           const void *next);
void smol_kv_accum_f16_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                           const void *next);
/* The same over q8_0 rows (hd a multiple of 32: hd / 32 blocks of struct
 * block_q8_0 per row, element i = d(block i/32) * qs[i % 32]), as llama.cpp's
 * q8_0 KV cache: half the bytes of f16 (34 per 32 elements). */
void smol_kv_scores_q8_0_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                             size_t sc_stride, const void *next);
void smol_kv_accum_q8_0_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                            const void *next);

/* Token sampling as the backends' batch sampler does it (kernels/cuda/sample.cu is tested against
 * this; the CPU backend runs it): for a row of logits x[vocab],
 *   - temp <= 0 (or no finite maximum): the argmax, lowest id on ties, never NaN; -1 if no logit is
 *     samplable (all NaN / -inf);
 *   - else p_i = exp((x_i - max) / temp) (NaN and -inf: 0), Z = sum p_i; with top_p < 1 the
 *     nucleus threshold tau is the largest value whose mass sum_{p_i >= tau} p_i still reaches
 *     top_p * Z, found by 30 bisection steps of [0, 1] (the argmax has p = 1); the token is the
 *     one at u * (kept mass) in the cumulative kept mass in id order (u in [0, 1)).
 * Sums in double here (the device's are float): ids agree unless u * kept lands within float
 * rounding of a boundary.  *margin (may be NULL) receives that distance, relative to the kept
 * mass, for tests to tell such a row from a disagreement. */
int32_t smol_sample_row_ref(const float *x, int vocab, float temp, float top_p, float u, double *margin);

#endif
