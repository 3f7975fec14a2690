/*
 * mmvq.h - the q8 decode mat-vec's data layouts and its per-lane dot
 * products, shared by the CUDA kernels (mmvq.cu) and host C: the weights are
 * repacked at upload by the functions here, and tests/test_quant.c checks
 * repacking, activation quantization and every lane dot against the scalar
 * reference decoders on the CPU, where no GPU is needed.
 *
 * Activations ("q8a"): a row of n (a multiple of 32) floats becomes n int8
 * q and, per 32-element block, struct smol_q8a {d, s0, s1}: x ~ d * q with
 * d = amax / 127 kept in float (llama.cpp's q8_1 rounds it to half), s0 and
 * s1 = d * the sum of q over the block's first and second 16 elements (the
 * offset terms of q4_K mins, q6_K's -32 and q4_0's -8 need them per half).
 * q is roundf(x / d), as smol_quantize_q8_0_ref.
 *
 * Weights: q4_K stays in its GGUF blocks (144 bytes: rows stay 16-byte
 * aligned).  q6_K (210 bytes), q8_0 (34), q4_0 (18) and q4_1 (20) blocks are
 * not 4-byte aligned in a row, so the device copy is repacked tensor-wide
 * into sections, block i of the tensor (row r, block k: i = r * nb + k) at
 *   q6_K: [i * 128: q4][N * 128 + i * 64: q2][N * 192 + i * 16: scales][N * 208 + i * 2: d]
 *   q8_0: [i * 32: qs][N * 32 + i * 2: d]
 *   q4_0: [i * 16: qs][N * 16 + i * 2: d]
 *   q4_1: [i * 16: qs][N * 16 + i * 4: d, m]
 * (N blocks in the tensor; the same bytes in all, every section 16-byte
 * aligned).  q4_0 / q4_1 / q8_0 keep their qs bytes.  A q6_K block's 256
 * 6-bit values v (0..63) are regrouped per 32-element sub-block j so that a
 * lane reads 16 + 8 contiguous bytes: q4 byte 16j + b holds v[32j + b] & 15
 * (low nibble) and v[32j + 16 + b] & 15 (high); q2 byte 8j + b holds
 * v[32j + b + 8s] >> 4 in bits 2s..2s+1, s = 0..3.
 *
 * A lane's unit of work is 32 weights ("task" t of a row = elements
 * [32t, 32t + 32) for q8_0 / q4_0 / q4_1 and q6_K; for q4_K the 16 low
 * nibbles of sub-block 2g and the 16 high nibbles of sub-block 2g + 1 at
 * offset 16h, t = 8k + 2g + h), so every type has cols / 32 tasks per row.
 */
#ifndef SMOL_CUDA_MMVQ_H
#define SMOL_CUDA_MMVQ_H

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "../quant.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define SMOL_HD static __host__ __device__ __forceinline__
#else
#define SMOL_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define SMOL_UNROLL _Pragma("unroll")
#else
#define SMOL_UNROLL
#endif

struct smol_q8a {
    float d;    /* scale: x ~ d * q */
    float s0;   /* d * sum(q[0..16)) */
    float s1;   /* d * sum(q[16..32)) */
    float pad;  /* 16 bytes: one vector load */
};

/* ---- weights: which types have a q8 kernel, and the repacking --------------------------- */

static inline int smol_mmvq_type_ok(uint32_t t)
{
    return t == SMOL_TYPE_Q4_K || t == SMOL_TYPE_Q6_K || t == SMOL_TYPE_Q8_0 || t == SMOL_TYPE_Q4_0 ||
           t == SMOL_TYPE_Q4_1;
}

/* 1 if the device copy of a tensor of this type is repacked (layouts above). */
static inline int smol_mmvq_repacked(uint32_t t)
{
    return t == SMOL_TYPE_Q6_K || t == SMOL_TYPE_Q8_0 || t == SMOL_TYPE_Q4_0 || t == SMOL_TYPE_Q4_1;
}

/* dst = the repacked copy of n_blocks GGUF blocks of a type smol_mmvq_repacked() names (rows *
 * blocks per row), the same number of bytes. */
static inline void smol_mmvq_repack(uint32_t t, uint8_t *dst, const uint8_t *src, size_t n_blocks)
{
    const size_t N = n_blocks;
    if (t == SMOL_TYPE_Q6_K) {
        for (size_t i = 0; i < N; i++) {
            const struct block_q6_K *b = (const struct block_q6_K *)src + i;
            uint8_t v[QK_K];
            for (int e = 0; e < QK_K; e++) {
                const int h = e / 128, r = e % 128, l = r % 32, k4 = r / 32;
                const int lo = (b->ql[64 * h + l + 32 * (k4 & 1)] >> (4 * (k4 >> 1))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * k4)) & 3;
                v[e] = (uint8_t)(lo | hi << 4);
            }
            uint8_t *q4 = dst + i * 128, *q2 = dst + N * 128 + i * 64;
            for (int j = 0; j < 8; j++) {
                for (int x = 0; x < 16; x++)
                    q4[16 * j + x] = (uint8_t)((v[32 * j + x] & 15) | (v[32 * j + 16 + x] & 15) << 4);
                for (int x = 0; x < 8; x++) {
                    uint8_t o = 0;
                    for (int s = 0; s < 4; s++) o |= (uint8_t)((v[32 * j + x + 8 * s] >> 4) << (2 * s));
                    q2[8 * j + x] = o;
                }
            }
            memcpy(dst + N * 192 + i * 16, b->scales, 16);
            memcpy(dst + N * 208 + i * 2, &b->d, 2);
        }
    } else if (t == SMOL_TYPE_Q8_0) {
        for (size_t i = 0; i < N; i++) {
            const struct block_q8_0 *b = (const struct block_q8_0 *)src + i;
            memcpy(dst + i * 32, b->qs, 32);
            memcpy(dst + N * 32 + i * 2, &b->d, 2);
        }
    } else if (t == SMOL_TYPE_Q4_0) {
        for (size_t i = 0; i < N; i++) {
            const struct block_q4_0 *b = (const struct block_q4_0 *)src + i;
            memcpy(dst + i * 16, b->qs, 16);
            memcpy(dst + N * 16 + i * 2, &b->d, 2);
        }
    } else if (t == SMOL_TYPE_Q4_1) {
        for (size_t i = 0; i < N; i++) {
            const struct block_q4_1 *b = (const struct block_q4_1 *)src + i;
            memcpy(dst + i * 16, b->qs, 16);
            memcpy(dst + N * 16 + i * 4, &b->d, 2);
            memcpy(dst + N * 16 + i * 4 + 2, &b->m, 2);
        }
    }
}

/* ---- activations: the scalar reference of the device quantizer ---------------------------- */

static inline void smol_q8a_quantize_ref(const float *x, int n, int8_t *q, struct smol_q8a *s)
{
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 32; j++) {
            const int v = (int)roundf(xb[j] * id);
            q[32 * b + j] = (int8_t)v;
            if (j < 16) s0 += v; else s1 += v;
        }
        s[b].d = d;
        s[b].s0 = d * (float)s0;
        s[b].s1 = d * (float)s1;
        s[b].pad = 0.0f;
    }
}

/* ---- lane dots ------------------------------------------------------------------------------ */

/* c + the sum of the four signed byte products of a and b (dp4a). */
SMOL_HD int smol_dp4a(int a, int b, int c)
{
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}

SMOL_HD float smol_mmvq_h2f(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return smol_half_to_f32(h);
#endif
}

/* byte i (0..11) of a q4_K block's scales, held as the words hdr[1..3] of its first 16 bytes */
SMOL_HD uint32_t smol_q4k_sb(const uint32_t hdr[4], int i)
{
    const uint32_t w = i < 4 ? hdr[1] : i < 8 ? hdr[2] : hdr[3];
    return (w >> (8 * (i & 3))) & 0xFF;
}

/* scale and min of sub-block j (get_scale_min_k4) */
SMOL_HD void smol_q4k_scale_min(const uint32_t hdr[4], int j, float *sc, float *m)
{
    if (j < 4) {
        *sc = (float)(smol_q4k_sb(hdr, j) & 63);
        *m = (float)(smol_q4k_sb(hdr, j + 4) & 63);
    } else {
        *sc = (float)((smol_q4k_sb(hdr, j + 4) & 0xF) | ((smol_q4k_sb(hdr, j - 4) >> 6) << 4));
        *m = (float)((smol_q4k_sb(hdr, j + 4) >> 4) | ((smol_q4k_sb(hdr, j) >> 6) << 4));
    }
}

/* q4_K task (g, h) of a block: hdr = its first 16 bytes, q = qs bytes [32g + 16h, +16);
 * alo / ahi = activation bytes [64g + 16h, +16) and [64g + 32 + 16h, +16) of the block's 256;
 * xlo / xhi = the q8a of its 32-blocks 2g and 2g + 1. */
SMOL_HD float smol_mmvq_q4_K(const uint32_t hdr[4], const uint32_t q[4], int g, int h, const int32_t alo[4],
                             const int32_t ahi[4], struct smol_q8a xlo, struct smol_q8a xhi)
{
    int slo = 0, shi = 0;
    SMOL_UNROLL
    for (int m = 0; m < 4; m++) {
        slo = smol_dp4a((int)(q[m] & 0x0F0F0F0Fu), alo[m], slo);
        shi = smol_dp4a((int)((q[m] >> 4) & 0x0F0F0F0Fu), ahi[m], shi);
    }
    float sclo, mlo, schi, mhi;
    smol_q4k_scale_min(hdr, 2 * g, &sclo, &mlo);
    smol_q4k_scale_min(hdr, 2 * g + 1, &schi, &mhi);
    const float d = smol_mmvq_h2f((uint16_t)(hdr[0] & 0xFFFF)), dmin = smol_mmvq_h2f((uint16_t)(hdr[0] >> 16));
    const float plo = h ? xlo.s1 : xlo.s0, phi = h ? xhi.s1 : xhi.s0;
    return d * (sclo * xlo.d * (float)slo + schi * xhi.d * (float)shi) - dmin * (mlo * plo + mhi * phi);
}

/* q6_K task: L = q4 bytes [16j, +16), H = q2 bytes [8j, +8) of the block, sc0 / sc1 its
 * scales 2j, 2j + 1, d its scale; a = the 32 activation bytes, x their q8a. */
SMOL_HD float smol_mmvq_q6_K(const uint32_t L[4], const uint32_t H[2], int sc0, int sc1, float d,
                             const int32_t a[8], struct smol_q8a x)
{
    int s0 = 0, s1 = 0;
    SMOL_UNROLL
    for (int m = 0; m < 8; m++) {
        const uint32_t v = ((L[m & 3] >> (4 * (m >> 2))) & 0x0F0F0F0Fu) |
                           (((H[m & 1] >> (2 * (m >> 1))) & 0x03030303u) << 4);
        if (m < 4) s0 = smol_dp4a((int)v, a[m], s0);
        else s1 = smol_dp4a((int)v, a[m], s1);
    }
    return d * ((float)sc0 * (x.d * (float)s0 - 32.0f * x.s0) + (float)sc1 * (x.d * (float)s1 - 32.0f * x.s1));
}

/* q8_0 task: W = the 32 weight bytes, d their scale. */
SMOL_HD float smol_mmvq_q8_0(const uint32_t W[8], float d, const int32_t a[8], struct smol_q8a x)
{
    int s = 0;
    SMOL_UNROLL
    for (int m = 0; m < 8; m++) s = smol_dp4a((int)W[m], a[m], s);
    return d * x.d * (float)s;
}

/* q4_0 (mn == NULL: x = d (q - 8)) and q4_1 (x = d q + mn) tasks: Q = the 16 qs bytes. */
SMOL_HD int smol_mmvq_q4_sum(const uint32_t Q[4], const int32_t a[8])
{
    int s = 0;
    SMOL_UNROLL
    for (int m = 0; m < 4; m++) {
        s = smol_dp4a((int)(Q[m] & 0x0F0F0F0Fu), a[m], s);
        s = smol_dp4a((int)((Q[m] >> 4) & 0x0F0F0F0Fu), a[4 + m], s);
    }
    return s;
}

SMOL_HD float smol_mmvq_q4_0(const uint32_t Q[4], float d, const int32_t a[8], struct smol_q8a x)
{
    return d * (x.d * (float)smol_mmvq_q4_sum(Q, a) - 8.0f * (x.s0 + x.s1));
}

SMOL_HD float smol_mmvq_q4_1(const uint32_t Q[4], float d, float mn, const int32_t a[8], struct smol_q8a x)
{
    return d * x.d * (float)smol_mmvq_q4_sum(Q, a) + mn * (x.s0 + x.s1);
}

/* The reference walk of one row (host, tests): task by task with the functions above, from a
 * repacked (or q4_K) tensor `w` of n_blocks blocks, row r of cols; q, s = the row's q8a. */
static inline float smol_mmvq_row_ref(uint32_t t, const uint8_t *w, size_t n_blocks, int r, int cols,
                                      const int8_t *q, const struct smol_q8a *s)
{
    const size_t N = n_blocks;
    float acc = 0.0f;
    for (int task = 0; task < cols / 32; task++) {
        int32_t a[8];
        uint32_t u[8];
        if (t == SMOL_TYPE_Q4_K) {
            const int k = task >> 3, g = (task & 7) >> 1, h = task & 1;
            const uint8_t *b = w + ((size_t)r * (cols / QK_K) + k) * sizeof(struct block_q4_K);
            uint32_t hdr[4];
            int32_t alo[4], ahi[4];
            memcpy(hdr, b, 16);
            memcpy(u, b + 16 + 32 * g + 16 * h, 16);
            memcpy(alo, q + 256 * k + 64 * g + 16 * h, 16);
            memcpy(ahi, q + 256 * k + 64 * g + 32 + 16 * h, 16);
            acc += smol_mmvq_q4_K(hdr, u, g, h, alo, ahi, s[8 * k + 2 * g], s[8 * k + 2 * g + 1]);
            continue;
        }
        memcpy(a, q + 32 * task, 32);
        if (t == SMOL_TYPE_Q6_K) {
            const size_t i = (size_t)r * (cols / QK_K) + task / 8;
            const int j = task & 7;
            uint32_t H[2];
            uint16_t dh;
            memcpy(u, w + i * 128 + 16 * j, 16);
            memcpy(H, w + N * 128 + i * 64 + 8 * j, 8);
            const int8_t *sc = (const int8_t *)(w + N * 192 + i * 16);
            memcpy(&dh, w + N * 208 + i * 2, 2);
            acc += smol_mmvq_q6_K(u, H, sc[2 * j], sc[2 * j + 1], smol_mmvq_h2f(dh), a, s[task]);
        } else {
            const size_t i = (size_t)r * (cols / 32) + task;
            uint16_t dh[2];
            if (t == SMOL_TYPE_Q8_0) {
                memcpy(u, w + i * 32, 32);
                memcpy(dh, w + N * 32 + i * 2, 2);
                acc += smol_mmvq_q8_0(u, smol_mmvq_h2f(dh[0]), a, s[task]);
            } else if (t == SMOL_TYPE_Q4_0) {
                memcpy(u, w + i * 16, 16);
                memcpy(dh, w + N * 16 + i * 2, 2);
                acc += smol_mmvq_q4_0(u, smol_mmvq_h2f(dh[0]), a, s[task]);
            } else {
                memcpy(u, w + i * 16, 16);
                memcpy(dh, w + N * 16 + i * 4, 4);
                acc += smol_mmvq_q4_1(u, smol_mmvq_h2f(dh[0]), smol_mmvq_h2f(dh[1]), a, s[task]);
            }
        }
    }
    return acc;
}

#endif
