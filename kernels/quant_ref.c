/*
 * quant_ref.c - scalar reference kernels for every tensor format.
 *
 * These functions are the specification the SIMD and CUDA kernels are tested
 * against, so they follow ggml bit for bit (ggml/src/ggml-quants.c for
 * dequantize_row_* and quantize_row_*_ref, ggml/src/ggml-cpu/quants.c for the
 * ggml_vec_dot_*_generic dot products): the same integer decoding, the same
 * float operations in the same order, so a dequantized weight or an
 * activation block written here has the bits llama.cpp would produce.
 *
 * Where the order of float operations is part of the result it is kept as
 * ggml has it, e.g. the K-quant dots accumulate eight float lanes (element
 * index mod 8) per row and add them up at the end, and q4_1/q5_1 add
 * (dx*dy)*sumi + mx*sy per block.  Floating-point contraction into FMA is
 * switched off below for the same reason: ggml's reference builds and the
 * numpy reference in tests/ round every product.
 *
 * f32/f16/bf16 dots take f32 activations; products are formed exactly in
 * double and summed in double, then rounded once to float (ggml's scalar
 * ggml_vec_dot_f16 also sums in double; it rounds each product to float).
 *
 * The K-quant weight quantizers (importance-weighted fits) are in
 * quantize_k_ref.c.
 * Pure functions: no allocation, no globals, no threads.  Scratch is a few
 * hundred bytes of stack per call.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant_ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "quant_ref_internal.h"

/* ======================================================= float formats */

void smol_dequant_f32_ref(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void smol_dequant_f16_ref(const void *x, float *y, int64_t n)
{
    const smol_half *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = smol_half_to_f32(h[i]);
}

void smol_dequant_bf16_ref(const void *x, float *y, int64_t n)
{
    const smol_bf16 *b = x;
    for (int64_t i = 0; i < n; i++) y[i] = smol_bf16_to_f32(b[i]);
}

float smol_vec_dot_f32_ref(int n, const void *w, const void *a)
{
    const float *x = w, *v = a;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)x[i] * (double)v[i];
    return (float)sum;
}

float smol_vec_dot_f16_ref(int n, const void *w, const void *a)
{
    const smol_half *x = w;
    const float *v = a;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)smol_half_to_f32(x[i]) * (double)v[i];
    return (float)sum;
}

float smol_vec_dot_bf16_ref(int n, const void *w, const void *a)
{
    const smol_bf16 *x = w;
    const float *v = a;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)smol_bf16_to_f32(x[i]) * (double)v[i];
    return (float)sum;
}

void smol_quantize_f32_ref(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void smol_quantize_f16_ref(const float *x, void *y, int64_t n)
{
    smol_half *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = smol_f32_to_half(x[i]);
}

void smol_quantize_bf16_ref(const float *x, void *y, int64_t n)
{
    smol_bf16 *b = y;
    for (int64_t i = 0; i < n; i++) b[i] = smol_f32_to_bf16(x[i]);
}

/* ============================================== 32-element block formats */

void smol_dequant_q4_0_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q4_0 *x = vx;
    const int64_t nb = n / QK4_0;
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = smol_half_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + QK4_0 / 2] = x1 * d;
        }
    }
}

void smol_dequant_q4_1_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q4_1 *x = vx;
    const int64_t nb = n / QK4_1;
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        const float d = smol_half_to_f32(x[i].d);
        const float m = smol_half_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int x0 = x[i].qs[j] & 0x0F;
            const int x1 = x[i].qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + QK4_1 / 2] = x1 * d + m;
        }
    }
}

void smol_dequant_q5_0_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q5_0 *x = vx;
    const int64_t nb = n / QK5_0;
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        const float d = smol_half_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < QK5_0 / 2; j++) {
            const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
            const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
            const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
            const int32_t x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
            y[j] = x0 * d;
            y[j + QK5_0 / 2] = x1 * d;
        }
    }
}

void smol_dequant_q5_1_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q5_1 *x = vx;
    const int64_t nb = n / QK5_1;
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        const float d = smol_half_to_f32(x[i].d);
        const float m = smol_half_to_f32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
            const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
            const int x0 = (x[i].qs[j] & 0x0F) | xh0;
            const int x1 = (x[i].qs[j] >> 4) | xh1;
            y[j] = x0 * d + m;
            y[j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

void smol_dequant_q8_0_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q8_0 *x = vx;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = smol_half_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = x[i].qs[j] * d;
    }
}

/* ggml has no dequantize_row_q8_1 (q8_1 only ever feeds a dot); x = d * q,
 * the same rule as q8_0, and s is not needed. */
void smol_dequant_q8_1_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q8_1 *x = vx;
    const int64_t nb = n / QK8_1;
    for (int64_t i = 0; i < nb; i++, y += QK8_1) {
        const float d = smol_half_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = x[i].qs[j] * d;
    }
}

float smol_vec_dot_q4_0_ref(int n, const void *w, const void *a)
{
    const struct block_q4_0 *x = w;
    const struct block_q8_0 *y = a;
    const int nb = n / QK8_0;
    float sumf = 0;
    for (int ib = 0; ib < nb; ib++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            const int v0 = (x[ib].qs[j] & 0x0F) - 8;
            const int v1 = (x[ib].qs[j] >> 4) - 8;
            sumi0 += v0 * y[ib].qs[j];
            sumi1 += v1 * y[ib].qs[j + QK8_0 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += sumi * smol_half_to_f32(x[ib].d) * smol_half_to_f32(y[ib].d);
    }
    return sumf;
}

float smol_vec_dot_q4_1_ref(int n, const void *w, const void *a)
{
    const struct block_q4_1 *x = w;
    const struct block_q8_1 *y = a;
    const int nb = n / QK8_1;
    float sumf = 0;
    for (int ib = 0; ib < nb; ib++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            const int v0 = x[ib].qs[j] & 0x0F;
            const int v1 = x[ib].qs[j] >> 4;
            sumi0 += v0 * y[ib].qs[j];
            sumi1 += v1 * y[ib].qs[j + QK8_1 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (smol_half_to_f32(x[ib].d) * smol_half_to_f32(y[ib].d)) * sumi
              + smol_half_to_f32(x[ib].m) * smol_half_to_f32(y[ib].s);
    }
    return sumf;
}

float smol_vec_dot_q5_0_ref(int n, const void *w, const void *a)
{
    const struct block_q5_0 *x = w;
    const struct block_q8_0 *y = a;
    const int nb = n / QK8_0;
    float sumf = 0;
    for (int ib = 0; ib < nb; ib++) {
        uint32_t qh;
        memcpy(&qh, x[ib].qh, sizeof(qh));
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
            const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
            const int32_t x0 = ((x[ib].qs[j] & 0x0F) | xh0) - 16;
            const int32_t x1 = ((x[ib].qs[j] >> 4) | xh1) - 16;
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK8_0 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (smol_half_to_f32(x[ib].d) * smol_half_to_f32(y[ib].d)) * sumi;
    }
    return sumf;
}

float smol_vec_dot_q5_1_ref(int n, const void *w, const void *a)
{
    const struct block_q5_1 *x = w;
    const struct block_q8_1 *y = a;
    const int nb = n / QK8_1;
    float sumf = 0;
    for (int ib = 0; ib < nb; ib++) {
        uint32_t qh;
        memcpy(&qh, x[ib].qh, sizeof(qh));
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            const uint8_t xh0 = ((qh >> j) << 4) & 0x10;
            const uint8_t xh1 = (qh >> (j + 12)) & 0x10;
            const int32_t x0 = (x[ib].qs[j] & 0x0F) | xh0;
            const int32_t x1 = (x[ib].qs[j] >> 4) | xh1;
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK8_1 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (smol_half_to_f32(x[ib].d) * smol_half_to_f32(y[ib].d)) * sumi
              + smol_half_to_f32(x[ib].m) * smol_half_to_f32(y[ib].s);
    }
    return sumf;
}

float smol_vec_dot_q8_0_ref(int n, const void *w, const void *a)
{
    const struct block_q8_0 *x = w;
    const struct block_q8_0 *y = a;
    const int nb = n / QK8_0;
    float sumf = 0;
    for (int ib = 0; ib < nb; ib++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sumf += sumi * (smol_half_to_f32(x[ib].d) * smol_half_to_f32(y[ib].d));
    }
    return sumf;
}

/* q4_0 / q5_0: d = -max/8 (-max/16) where max is the element of largest
 * magnitude, so that element maps to the code 0 end exactly. */
void smol_quantize_q4_0_ref(const float *x, void *vy, int64_t n)
{
    struct block_q4_0 *y = vy;
    const int64_t nb = n / QK4_0;
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + QK4_0 / 2] * id;
            const uint8_t xi0 = (uint8_t)imin(15, (int8_t)(x0 + 8.5f));
            const uint8_t xi1 = (uint8_t)imin(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

void smol_quantize_q4_1_ref(const float *x, void *vy, int64_t n)
{
    struct block_q4_1 *y = vy;
    const int64_t nb = n / QK4_1;
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        y[i].m = smol_f32_to_half(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + QK4_1 / 2] - min) * id;
            const uint8_t xi0 = (uint8_t)imin(15, (int8_t)(x0 + 0.5f));
            const uint8_t xi1 = (uint8_t)imin(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

void smol_quantize_q5_0_ref(const float *x, void *vy, int64_t n)
{
    struct block_q5_0 *y = vy;
    const int64_t nb = n / QK5_0;
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + QK5_0 / 2] * id;
            const uint8_t xi0 = (uint8_t)imin(31, (int8_t)(x0 + 16.5f));
            const uint8_t xi1 = (uint8_t)imin(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (xi0 & 0x0F) | (uint8_t)((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

void smol_quantize_q5_1_ref(const float *x, void *vy, int64_t n)
{
    struct block_q5_1 *y = vy;
    const int64_t nb = n / QK5_1;
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        y[i].m = smol_f32_to_half(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + QK5_1 / 2] - min) * id;
            const uint8_t xi0 = (uint8_t)(x0 + 0.5f);
            const uint8_t xi1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (xi0 & 0x0F) | (uint8_t)((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

void smol_quantize_q8_0_ref(const float *x, void *vy, int64_t n)
{
    struct block_q8_0 *y = vy;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* q8_1 also stores s = d * sum(q), rounded to half, for the min term of the
 * q4_1 / q5_1 dots. */
void smol_quantize_q8_1_ref(const float *x, void *vy, int64_t n)
{
    struct block_q8_1 *y = vy;
    const int64_t nb = n / QK8_1;
    for (int64_t i = 0; i < nb; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = smol_f32_to_half(d);
        int sum = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            y[i].qs[j + QK8_1 / 2] = (int8_t)roundf(x[j + QK8_1 / 2] * id);
            sum += y[i].qs[j] + y[i].qs[j + QK8_1 / 2];
        }
        y[i].s = smol_f32_to_half(sum * d);
    }
}

/* ============================================================= K-quants */

/* Element e of a q4_K super-block sits in qs[32*(e/64) + e%32], low nibble
 * when (e/32) is even; its sub-block (scale/min index) is e/32. */
void smol_dequant_q4_K_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q4_K *x = vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = smol_half_to_f32(x[i].d);
        const float min = smol_half_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K / 32; j += 2, q += 32) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* As q4_K; the fifth bit of element e is bit e/32 of qh[e%32]. */
void smol_dequant_q5_K_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q5_K *x = vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = smol_half_to_f32(x[i].d);
        const float min = smol_half_to_f32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K / 32; j += 2, ql += 32) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

/* Each 128-element half uses 64 bytes of ql and 32 of qh: element l + 32k
 * (k = 0..3) takes nibble k/2 of ql[l + 32*(k%2)] and bits 2k..2k+1 of qh[l]. */
void smol_dequant_q6_K_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q6_K *x = vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = smol_half_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < QK_K; h += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void smol_dequant_q8_K_ref(const void *vx, float *y, int64_t n)
{
    const struct block_q8_K *x = vx;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QK_K; j++) *y++ = x[i].d * x[i].qs[j];
}

/* Shared tail of the K-quant dots.  q[0..256) are a block's decoded integer
 * weights, sc[k] the integer scale of its k-th group of `group` elements.
 * Adds sc * q * q8 into eight lanes (element index mod 8), the grouping of
 * ggml's generic kernels, so the float sums below match them bit for bit. */
static inline void k_lane_sums(const int8_t *q, const int8_t *q8, const int *sc, int group, int32_t lanes[8])
{
    for (int l = 0; l < 8; l++) lanes[l] = 0;
    for (int g = 0; g < QK_K / group; g++) {
        int32_t part[8] = {0};
        for (int e = g * group; e < (g + 1) * group; e++) part[e & 7] += q[e] * q8[e];
        for (int l = 0; l < 8; l++) lanes[l] += sc[g] * part[l];
    }
}

/* q4_K / q5_K x q8_K: sum_e (d*sc*q - dmin*m) * a = d*sum(sc*q*a) - dmin *
 * sum_j m_j * sum(a over sub-block j); the second sum comes from the q8_K
 * bsums (16-element partial sums), two per 32-element sub-block. */
static float dot_qk_min(const int8_t *q, const uint8_t *scales, smol_half xd, smol_half xdmin,
                        const struct block_q8_K *yb, float sums[8])
{
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        get_scale_min_k4(j, scales, &s, &m);
        sc[j] = s;
        mn[j] = m;
    }
    int sumi = 0;
    for (int j = 0; j < QK_K / 16; j++) sumi += yb->bsums[j] * mn[j / 2];
    int32_t lanes[8];
    k_lane_sums(q, yb->qs, sc, 32, lanes);
    const float d = smol_half_to_f32(xd) * yb->d;
    for (int l = 0; l < 8; l++) sums[l] += d * lanes[l];
    const float dmin = smol_half_to_f32(xdmin) * yb->d;
    return dmin * sumi;
}

float smol_vec_dot_q4_K_ref(int n, const void *w, const void *a)
{
    const struct block_q4_K *x = w;
    const struct block_q8_K *y = a;
    const int nb = n / QK_K;
    float sums[8] = {0}, sumf = 0;
    int8_t q[QK_K];
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j < QK_K / 64; j++) {
            const uint8_t *q4 = x[i].qs + 32 * j;
            for (int l = 0; l < 32; l++) {
                q[64 * j + l] = (int8_t)(q4[l] & 0xF);
                q[64 * j + 32 + l] = (int8_t)(q4[l] >> 4);
            }
        }
        sumf -= dot_qk_min(q, x[i].scales, x[i].d, x[i].dmin, &y[i], sums);
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

float smol_vec_dot_q5_K_ref(int n, const void *w, const void *a)
{
    const struct block_q5_K *x = w;
    const struct block_q8_K *y = a;
    const int nb = n / QK_K;
    float sums[8] = {0}, sumf = 0;
    int8_t q[QK_K];
    for (int i = 0; i < nb; i++) {
        const uint8_t *hm = x[i].qh;
        for (int j = 0; j < QK_K / 64; j++) {
            const uint8_t *q4 = x[i].qs + 32 * j;
            const uint8_t m1 = (uint8_t)(1u << (2 * j)), m2 = (uint8_t)(2u << (2 * j));
            for (int l = 0; l < 32; l++) {
                q[64 * j + l] = (int8_t)((q4[l] & 0xF) + (hm[l] & m1 ? 16 : 0));
                q[64 * j + 32 + l] = (int8_t)((q4[l] >> 4) + (hm[l] & m2 ? 16 : 0));
            }
        }
        sumf -= dot_qk_min(q, x[i].scales, x[i].d, x[i].dmin, &y[i], sums);
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

float smol_vec_dot_q6_K_ref(int n, const void *w, const void *a)
{
    const struct block_q6_K *x = w;
    const struct block_q8_K *y = a;
    const int nb = n / QK_K;
    float sums[8] = {0}, sumf = 0;
    int8_t q[QK_K];
    int sc[QK_K / 16];
    for (int i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        for (int h = 0; h < QK_K; h += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                q[h + l + 0] = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                q[h + l + 32] = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                q[h + l + 64] = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                q[h + l + 96] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        }
        for (int j = 0; j < QK_K / 16; j++) sc[j] = x[i].scales[j];
        int32_t lanes[8];
        k_lane_sums(q, y[i].qs, sc, 16, lanes);
        const float d = smol_half_to_f32(x[i].d) * y[i].d;
        for (int l = 0; l < 8; l++) sums[l] += d * lanes[l];
    }
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

/* q8_K: the element of largest magnitude, max, maps to -127 (iscale =
 * -127/max, ggml's choice since IQ2_XXS), d = 1/iscale is kept as a float,
 * and bsums[j] = sum of qs[16j..16j+15].  An all-zero block gets d = 0 and
 * zero quants and sums (ggml leaves its bsums unwritten). */
void smol_quantize_q8_K_ref(const float *x, void *vy, int64_t n)
{
    struct block_q8_K *y = vy;
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}
