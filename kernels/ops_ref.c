/* ops_ref.c - scalar reference ops (see ops_ref.h). */
#include "ops_ref.h"
#include "fp16.h"
#include "quant_ref.h"

#include <math.h>

void smol_rmsnorm_ref(float *out, const float *x, const float *w, int dim, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < dim; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / dim + eps));
    for (int i = 0; i < dim; i++) out[i] = x[i] * scale * w[i];
}

void smol_rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                              float dims[2])
{
    /* dimension at which the rotation completes n_rot turns over n_ctx_orig */
    double lo = n_dims * log(n_ctx_orig / (beta_fast * 2 * M_PI)) / (2 * log(freq_base));
    double hi = n_dims * log(n_ctx_orig / (beta_slow * 2 * M_PI)) / (2 * log(freq_base));
    dims[0] = fmaxf(0.0f, floorf((float)lo));
    dims[1] = fminf((float)(n_dims - 1), ceilf((float)hi));
}

void smol_rope_cache_ref(float *cs, int pos, const struct smol_rope_params *rp)
{
    for (int i = 0; i < rp->n_dims / 2; i++) {
        /* angle in double: the exact reference the fixtures use is float64 */
        double theta_extrap = pos * pow((double)rp->freq_base, -2.0 * i / rp->n_dims);
        double theta = rp->freq_scale * theta_extrap;
        double mscale = rp->attn_factor;
        if (rp->ext_factor != 0.0f) {
            double y = (i - rp->corr_dims[0]) / fmax(0.001, rp->corr_dims[1] - rp->corr_dims[0]);
            double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * rp->ext_factor;
            theta = theta * (1 - ramp) + theta_extrap * ramp;
            mscale *= 1.0 + 0.1 * log(1.0 / rp->freq_scale);
        }
        cs[2 * i] = (float)(cos(theta) * mscale);
        cs[2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

void smol_rope_apply_ref(float *x, int n_heads, int head_dim, int n_dims, const float *cs)
{
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_dim;
        for (int i = 0; i < n_dims / 2; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    }
}

void smol_silu_mul_ref(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void smol_add_ref(float *x, const float *y, int n)
{
    for (int i = 0; i < n; i++) x[i] += y[i];
}

void smol_softmax_ref(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void smol_hadamard_ref(float *x, int n, int group)
{
    const float c = 1.0f / sqrtf((float)group);
    for (int g = 0; g < n; g += group) {
        float *v = x + g;
        for (int s = 1; s < group; s *= 2)         /* butterflies: the fast transform, unscaled */
            for (int i = 0; i < group; i += 2 * s)
                for (int j = i; j < i + s; j++) {
                    const float a = v[j], b = v[j + s];
                    v[j] = a + b;
                    v[j + s] = a - b;
                }
        for (int i = 0; i < group; i++) v[i] *= c;
    }
}

void smol_axpy_f32_ref(int n, float a, const void *x, float *y)
{
    const float *v = x;
    for (int i = 0; i < n; i++) y[i] += a * v[i];
}

void smol_axpy_f16_ref(int n, float a, const void *x, float *y)
{
    const smol_half *v = x;
    for (int i = 0; i < n; i++) y[i] += a * smol_half_to_f32(v[i]);
}

void smol_kv_scores_f32_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                            size_t sc_stride, const void *next)
{
    for (int r = 0; r < n_rows; r++)
        for (int g = 0; g < G; g++)
            sc[(size_t)g * sc_stride + r] = scale * smol_vec_dot_f32_ref(hd, (const float *)k + (size_t)r * hd, q + (size_t)g * hd);
}

void smol_kv_scores_f16_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                            size_t sc_stride, const void *next)
{
    for (int r = 0; r < n_rows; r++)
        for (int g = 0; g < G; g++)
            sc[(size_t)g * sc_stride + r] =
                scale * smol_vec_dot_f16_ref(hd, (const smol_half *)k + (size_t)r * hd, q + (size_t)g * hd);
}

void smol_kv_accum_f32_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                           const void *next)
{
    for (int g = 0; g < G; g++)
        for (int r = 0; r < n_rows; r++)
            smol_axpy_f32_ref(hd, p[(size_t)g * p_stride + r], (const float *)v + (size_t)r * hd, out + (size_t)g * hd);
}

void smol_kv_accum_f16_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                           const void *next)
{
    for (int g = 0; g < G; g++)
        for (int r = 0; r < n_rows; r++)
            smol_axpy_f16_ref(hd, p[(size_t)g * p_stride + r], (const smol_half *)v + (size_t)r * hd,
                              out + (size_t)g * hd);
}

/* q8_0 rows: the dequantized element d * q (one float product, as the SIMD
 * versions form it) times q, summed in double in element order */
void smol_kv_scores_q8_0_ref(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                             size_t sc_stride, const void *next)
{
    const struct block_q8_0 *b = k;
    const int nb = hd / QK8_0;
    for (int r = 0; r < n_rows; r++)
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            double sum = 0;
            for (int i = 0; i < hd; i++) {
                const struct block_q8_0 *x = b + (size_t)r * nb + i / QK8_0;
                sum += (double)(smol_half_to_f32(x->d) * (float)x->qs[i % QK8_0]) * qg[i];
            }
            sc[(size_t)g * sc_stride + r] = scale * (float)sum;
        }
}

void smol_kv_accum_q8_0_ref(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G, float *out,
                            const void *next)
{
    const struct block_q8_0 *b = v;
    const int nb = hd / QK8_0;
    for (int g = 0; g < G; g++)
        for (int r = 0; r < n_rows; r++) {
            const float a = p[(size_t)g * p_stride + r];
            for (int i = 0; i < hd; i++) {
                const struct block_q8_0 *x = b + (size_t)r * nb + i / QK8_0;
                out[(size_t)g * hd + i] += a * (smol_half_to_f32(x->d) * (float)x->qs[i % QK8_0]);
            }
        }
}

int32_t smol_sample_row_ref(const float *x, int vocab, float temp, float top_p, float u, double *margin)
{
    int best = -1;
    for (int i = 0; i < vocab; i++)
        if (x[i] == x[i] && (best < 0 ? x[i] > -INFINITY : x[i] > x[best])) best = i;
    if (margin) *margin = 1.0;
    if (!(temp > 0.0f) || best < 0) return best;
    const double it = 1.0 / temp, mx = x[best];
#define P(i) (x[i] == x[i] ? exp(((double)x[i] - mx) * it) : 0.0)
    double z = 0;
    for (int i = 0; i < vocab; i++) z += P(i);
    double lo = 0;
    if (top_p < 1.0f) {
        const double target = (double)top_p * z;
        double hi = 1;
        for (int k = 0; k < 30; k++) {
            const double mid = 0.5 * (lo + hi);
            double m = 0;
            for (int i = 0; i < vocab; i++) {
                const double p = P(i);
                m += p >= mid ? p : 0;
            }
            if (m >= target) lo = mid;
            else hi = mid;
        }
    }
    double total = 0;
    for (int i = 0; i < vocab; i++) {
        const double p = P(i);
        total += p >= lo ? p : 0;
    }
    const double want = (double)u * total;
    double acc = 0;
    int chosen = best;
    for (int i = 0; i < vocab; i++) {
        const double p = P(i);
        if (!(p >= lo && p > 0)) continue;
        chosen = i;
        acc += p;
        if (want < acc) {
            if (margin) {
                const double a = (want - (acc - p)) / total, b = (acc - want) / total;
                *margin = a < b ? a : b;
            }
            break;
        }
    }
#undef P
    return chosen;
}
