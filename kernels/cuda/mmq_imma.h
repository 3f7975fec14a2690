/*
 * mmq_imma.h - the int8 tensor-core GEMM (knob cuda_gemm = imma; the kernel
 * is in kernels/cuda/mmq_tc.cu beside the f16 one, whose K steps, cp.async
 * pieces and grid plan it shares): the data path of a tile row as
 * __host__ __device__ functions, walked on the CPU by tests/test_quant.c
 * (test_imma_host) against the reference decoders and a scalar integer loop.
 *
 * out[t][r] (=, +=) dot(weight row r, x[t]) for n > 8 tokens, the weights in
 * the mmvq.h layouts (q4_K GGUF blocks, q6_K / q8_0 repacked; w->dev_aux),
 * the activations quantized once per mat-mul to q8a (mmvq.h: int8 q, and per
 * 32-block d, s0, s1; smol_q8a_cuda), as llama.cpp's MMQ does with q8_1:
 *
 *   1. a K step (SMOL_GEMM_BK = 128 elements, four 32-element chunks) of a
 *      row arrives in shared memory as the f16 GEMM's raw pieces
 *      (smol_gemm_piece, mmq_tc.h);
 *   2. smol_imma_unpack turns chunk j into 32 int8 values (q4_K: the nibble
 *      0..15; q6_K: the 6-bit value - 32, -32..31; q8_0: its qs) in an int8
 *      tile, and smol_imma_scales gives the chunk's float scales (q4_K:
 *      d * sc and dmin * m of its sub-block; q6_K: d * sc of each 16-element
 *      half; q8_0: d) - the factors quant_ref.c's dequantization uses;
 *   3. mma.sync m16n8k32 s8 x s8 -> s32 over each chunk (q6_K: two m16n8k16,
 *      one per half, its scales being per 16) gives the integer dot isum of
 *      a (row, token) per chunk (half), exactly (|isum| <= 32 * 128 * 128);
 *   4. acc (f32) = smol_imma_fma(acc, sc, x.d, isum), then for q4_K
 *      smol_imma_min(acc, dmin * m, x.s0 + x.s1):
 *        sum_l (sc q_l - m) (x.d a_l) = sc x.d isum - m (x.d sum_l a_l).
 *
 * Error against the float64 dot of the reference-dequantized weights and
 * the dequantized activations (d * q): the scale products sc * x.d and the
 * f32 accumulation (two roundings per chunk), and the reference's own
 * rounding of each weight to f32; no f16 anywhere.
 */
#ifndef SMOL_CUDA_MMQ_IMMA_H
#define SMOL_CUDA_MMQ_IMMA_H

#include "mmq_tc.h"

#define SMOL_IMMA_LDS (SMOL_GEMM_BK + 16)  /* int8 tile row stride in shared memory: 144 bytes */

/* 1 if the int8 GEMM takes weights of type t; the others go to the f16 one (mmq_tc.h) */
static inline int smol_imma_type_ok(uint32_t t)
{
    return t == SMOL_TYPE_Q4_K || t == SMOL_TYPE_Q6_K || t == SMOL_TYPE_Q8_0;
}

/* w = chunk j (elements [32j, 32j + 32) of a K step) of a row from its raw shared bytes s
 * (SMOL_GEMM_RB(t), mmq_tc.h), as int8: element 4m + b in byte b of word m. */
SMOL_HD void smol_imma_unpack(uint32_t t, const uint8_t *s, int j, uint32_t w[8])
{
    if (t == SMOL_TYPE_Q4_K) {  /* chunk j of this half = sub-block 4h + j: nibble (j & 1) of qs [32 (j >> 1), +32) */
        uint32_t u[8];
        smol_gemm_words(s + 16 + 32 * (j >> 1), u, 8);
        const int sh = 4 * (j & 1);
        SMOL_UNROLL
        for (int m = 0; m < 8; m++) w[m] = (u[m] >> sh) & 0x0F0F0F0Fu;
    } else if (t == SMOL_TYPE_Q6_K) {  /* q4 bytes [16j, +16), q2 bytes [8j, +8): mmvq.h's regrouping */
        uint32_t L[4], H[2];
        smol_gemm_words(s + 16 * j, L, 4);
#ifdef __CUDA_ARCH__
        {
            const uint2 v = *(const uint2 *)(s + 64 + 8 * j);
            H[0] = v.x;
            H[1] = v.y;
        }
#else
        memcpy(H, s + 64 + 8 * j, 8);
#endif
        SMOL_UNROLL
        for (int m = 0; m < 8; m++) {
            const uint32_t v = ((L[m & 3] >> (4 * (m >> 2))) & 0x0F0F0F0Fu) |
                               (((H[m & 1] >> (2 * (m >> 1))) & 0x03030303u) << 4);
            /* each byte v (0..63) to v - 32 as a two's complement byte, without borrows between bytes */
            w[m] = ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
        }
    } else {  /* q8_0: the qs of 32-block j of the step */
        smol_gemm_words(s + 32 * j, w, 8);
    }
}

/* The float factors of chunk j of row r's step k from its raw bytes s: sc[0] / sc[1] multiply the
 * integer dots of elements [0, 16) / [16, 32) (equal but for q6_K), *mn the activations' sum
 * (q4_K's dmin * m; 0 otherwise).  The same products as the reference decoders. */
SMOL_HD void smol_imma_scales(uint32_t t, const uint8_t *s, int r, int k, int cols, int j, float sc[2], float *mn)
{
    if (t == SMOL_TYPE_Q4_K) {
        uint32_t hdr[4];
        smol_gemm_words(s, hdr, 4);
        float a, m;
        smol_q4k_scale_min(hdr, 4 * (k & 1) + j, &a, &m);
        sc[0] = sc[1] = smol_gemm_h2f(s) * a;
        *mn = smol_gemm_h2f(s + 2) * m;
    } else if (t == SMOL_TYPE_Q6_K) {
        const size_t i = (size_t)r * (size_t)(cols >> 8) + (size_t)(k >> 1);
        const float d = smol_gemm_h2f(s + 104 + 2 * (int)(i & 1));
        const int8_t *q = (const int8_t *)(s + 96) + 2 * j;
        sc[0] = d * (float)q[0];
        sc[1] = d * (float)q[1];
        *mn = 0.0f;
    } else {
        sc[0] = sc[1] = smol_gemm_h2f(s + 128 + 2 * j);
        *mn = 0.0f;
    }
}

/* the integer dot of words [m0, m1) of w and a (4 signed bytes each): an mma's int32 result */
SMOL_HD int smol_imma_isum(const uint32_t w[8], const int32_t a[8], int m0, int m1)
{
    int s = 0;
    for (int m = m0; m < m1; m++) s = smol_dp4a((int)w[m], a[m], s);
    return s;
}

/* acc + (weight scale * activation scale) * integer dot: the kernel's and the twin's one expression */
SMOL_HD float smol_imma_fma(float acc, float sc, float xd, int isum)
{
    return fmaf(sc * xd, (float)isum, acc);
}

/* acc - min factor * the chunk's activation sum (q4_K; xsum = x.s0 + x.s1) */
SMOL_HD float smol_imma_min(float acc, float mn, float xsum)
{
    return fmaf(-mn, xsum, acc);
}

/* The twin of one (row, token) output on the host (tests): the K steps and chunks in the kernel's
 * order from a weight w in the device layout (n_blocks blocks, SMOL_GEMM_PAD spare bytes), the
 * token's q8a q (cols int8) and s (cols / 32). */
static inline float smol_imma_row_ref(uint32_t t, const uint8_t *w, size_t n_blocks, int r, int cols, const int8_t *q,
                                      const struct smol_q8a *s)
{
    float acc = 0.0f;
    for (int k = 0; k < cols / SMOL_GEMM_BK; k++) {
        uint8_t raw[144];
        for (int p = 0; p < SMOL_GEMM_NP(t); p++) {
            size_t src;
            int off;
            const int bytes = smol_gemm_piece(t, p, n_blocks, r, k, cols, &src, &off);
            memcpy(raw + off, w + src, (size_t)bytes);
        }
        for (int j = 0; j < 4; j++) {
            uint32_t wv[8];
            int32_t a[8];
            float sc[2], mn;
            const struct smol_q8a x = s[4 * k + j];
            smol_imma_unpack(t, raw, j, wv);
            smol_imma_scales(t, raw, r, k, cols, j, sc, &mn);
            memcpy(a, q + SMOL_GEMM_BK * k + 32 * j, 32);
            if (t == SMOL_TYPE_Q6_K) {
                acc = smol_imma_fma(acc, sc[0], x.d, smol_imma_isum(wv, a, 0, 4));
                acc = smol_imma_fma(acc, sc[1], x.d, smol_imma_isum(wv, a, 4, 8));
            } else {
                acc = smol_imma_fma(acc, sc[0], x.d, smol_imma_isum(wv, a, 0, 8));
                if (t == SMOL_TYPE_Q4_K) acc = smol_imma_min(acc, mn, x.s0 + x.s1);
            }
        }
    }
    return acc;
}

#ifdef __CUDACC__
#include <cuda_runtime.h>

/* out[t][r] = (mode SMOL_MV_STORE) or += (SMOL_MV_ADD) dot(row r of w, x[t]) for t < n, r < rows,
 * x[t] given as q8a: xq [n][cols] int8, xs [n][cols / 32] (smol_q8a_cuda).  w, n_sm, part,
 * part_cap as smol_gemm_mma_cuda (mmq_tc.h); types smol_imma_type_ok, cols a multiple of 256 (q4_K,
 * q6_K) or 128 (q8_0), else cudaErrorInvalidValue. */
cudaError_t smol_gemm_imma_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                const int8_t *xq, const struct smol_q8a *xs, int n, int n_sm, float *part,
                                size_t part_cap, cudaStream_t st);

/* Knob cuda_gemm_fuse: the same in one launch from f32 activations x [n][cols], quantized to q8a
 * in the kernel with smol_q8a_cuda's arithmetic (the same bits as smol_gemm_imma_cuda after it);
 * tickets as smol_gemm_mma_f32_cuda (mmq_tc.h). */
cudaError_t smol_gemm_imma_f32_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                    const float *x, int n, int n_sm, float *part, size_t part_cap, unsigned *tickets,
                                    size_t n_tickets, cudaStream_t st);
#endif

#endif
