/*
 * mmq_tc.h - the tensor-core GEMM for quantized weights (knob cuda_gemm = mma;
 * kernels/cuda/mmq_tc.cu): what the backend needs to decide and launch it.
 *
 * out[t][r] (=, or += for a residual) dot(weight row r, x[t]) for n > 8
 * tokens (batched decode, prefill).  The weights are read in the layouts
 * the q8 mat-vec uploads (mmvq.h: q4_K in its GGUF blocks, q6_K q8_0 q4_0
 * q4_1 repacked tensor-wide, the backend's w->dev_aux); the activations
 * are rounded once to f16 (smol_f16_from_f32_cuda, round to nearest even)
 * into a scratch buffer the kernel streams from.
 *
 * The data path of a tile row (which bytes, and how they decode) is in
 * this header as __host__ __device__ functions, walked on the CPU by
 * tests/test_quant.c against the reference decoders; the launchers are
 * for CUDA code only.
 *
 * Limits (the launcher returns cudaErrorInvalidValue outside them, the
 * backend then keeps the tiled path): cols a multiple of SMOL_GEMM_BK (the
 * K step), any rows >= 1 and any n >= 1.  The repacked q6_K copy must have
 * SMOL_GEMM_PAD spare bytes after its N * 210 (the kernel reads each
 * block's 2-byte d as an aligned 4-byte word).
 */
#ifndef SMOL_CUDA_MMQ_TC_H
#define SMOL_CUDA_MMQ_TC_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "../quant.h"
#include "mmvq.h"   /* the layouts (smol_mmvq_repack), SMOL_HD, smol_mmvq_h2f, smol_q4k_scale_min */

#define SMOL_GEMM_BK 128   /* K elements per pipeline step: half a K-quant super-block, four 32-blocks */
#define SMOL_GEMM_PAD 16   /* spare bytes after a repacked weight copy */

/* 1 if the GEMM has a decoder for weights of type t (in the mmvq.h layouts) */
static inline int smol_gemm_type_ok(uint32_t t)
{
    return t == SMOL_TYPE_Q4_K || t == SMOL_TYPE_Q6_K || t == SMOL_TYPE_Q8_0 || t == SMOL_TYPE_Q4_0 ||
           t == SMOL_TYPE_Q4_1;
}

/* ---- one row's bytes of one K step, and their decoding: the kernel's data path, shared with
 * the host (tests/test_quant.c walks it against the reference decoders) ---------------------------
 * A row's step k (elements [128k, 128k + 128)) is SMOL_GEMM_NP(t) pieces copied (cp.async) into
 * SMOL_GEMM_RB(t) bytes of shared memory:
 *   q4_K  [0, 16) the block's d, dmin, scales; [16, 80) qs bytes [64h, 64h + 64) (h = k & 1)
 *   q6_K  [0, 64) q4 bytes [64h, +64); [64, 96) q2 bytes [32h, +32); [96, 104) scales [8h, +8);
 *         [104, 108) the aligned word of d's section holding block i's d (at 2 (i & 1))
 *   q8_0  [0, 128) the four blocks' qs; [128, 136) their d
 *   q4_0  [0, 64) qs; [64, 72) d          q4_1  [0, 64) qs; [64, 80) d, m pairs
 * (i = the tensor-wide block index of mmvq.h: row r, block k / 2 (K-quants) or 4k (32-blocks)). */
#define SMOL_GEMM_NP(t) ((t) == SMOL_TYPE_Q6_K ? 8 : (t) == SMOL_TYPE_Q8_0 ? 9 : 5)
#define SMOL_GEMM_RB(t) ((t) == SMOL_TYPE_Q6_K ? 112 : (t) == SMOL_TYPE_Q8_0 ? 144 : 80)

/* Piece p of row r, step k of a weight (N blocks, cols wide): *src = its byte offset in the
 * weight's device copy, *off = in the row's shared bytes; returns its size (16, 8 or 4; src and
 * off are multiples of it). */
SMOL_HD int smol_gemm_piece(uint32_t t, int p, size_t N, int r, int k, int cols, size_t *src, int *off)
{
    if (t == SMOL_TYPE_Q4_K) {
        const size_t b = ((size_t)r * (size_t)(cols >> 8) + (size_t)(k >> 1)) * sizeof(struct block_q4_K);
        *src = p == 0 ? b : b + 16 + 64 * (size_t)(k & 1) + 16 * (size_t)(p - 1);
        *off = 16 * p;
        return 16;
    }
    if (t == SMOL_TYPE_Q6_K) {
        const size_t i = (size_t)r * (size_t)(cols >> 8) + (size_t)(k >> 1), h = (size_t)(k & 1);
        if (p < 4) { *src = i * 128 + 64 * h + 16 * (size_t)p; *off = 16 * p; return 16; }
        if (p < 6) { *src = N * 128 + i * 64 + 32 * h + 16 * (size_t)(p - 4); *off = 16 * p; return 16; }
        if (p == 6) { *src = N * 192 + i * 16 + 8 * h; *off = 96; return 8; }
        *src = N * 208 + (i & ~(size_t)1) * 2;  /* reads up to 2 bytes past the tensor: SMOL_GEMM_PAD */
        *off = 104;
        return 4;
    }
    const size_t i = (size_t)r * (size_t)(cols >> 5) + 4 * (size_t)k;
    if (t == SMOL_TYPE_Q8_0) {
        if (p < 8) { *src = i * 32 + 16 * (size_t)p; *off = 16 * p; return 16; }
        *src = N * 32 + i * 2;
        *off = 128;
        return 8;
    }
    *off = 16 * p;  /* q4_0, q4_1 */
    if (p < 4) { *src = i * 16 + 16 * (size_t)p; return 16; }
    if (t == SMOL_TYPE_Q4_0) { *src = N * 16 + i * 2; return 8; }
    *src = N * 16 + i * 4;
    return 16;
}

/* n32 aligned 32-bit words from p (shared memory on the device: 16-byte loads) */
SMOL_HD void smol_gemm_words(const uint8_t *p, uint32_t *w, int n32)
{
#ifdef __CUDA_ARCH__
    for (int m = 0; m < n32; m += 4) {
        const uint4 v = *(const uint4 *)(p + 4 * m);
        w[m] = v.x; w[m + 1] = v.y; w[m + 2] = v.z; w[m + 3] = v.w;
    }
#else
    memcpy(w, p, 4 * (size_t)n32);
#endif
}

SMOL_HD float smol_gemm_h2f(const uint8_t *p)
{
    uint16_t h;
#ifdef __CUDA_ARCH__
    h = *(const uint16_t *)p;
#else
    memcpy(&h, p, 2);
#endif
    return smol_mmvq_h2f(h);
}

/* y = elements [32j, 32j + 32) of step k of row r from its shared bytes s (SMOL_GEMM_RB(t)),
 * as the reference decoders compute them (the same float products) */
SMOL_HD void smol_gemm_decode(uint32_t t, const uint8_t *s, int r, int k, int cols, int j, float y[32])
{
    if (t == SMOL_TYPE_Q4_K) {  /* chunk j of this half = sub-block 4h + j */
        uint32_t hdr[4], w[8];
        smol_gemm_words(s, hdr, 4);
        smol_gemm_words(s + 16 + 32 * (j >> 1), w, 8);
        float sc, mn;
        smol_q4k_scale_min(hdr, 4 * (k & 1) + j, &sc, &mn);
        const float d1 = smol_gemm_h2f(s) * sc, m1 = smol_gemm_h2f(s + 2) * mn;
        const int sh = 4 * (j & 1);
        SMOL_UNROLL
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)((w[l >> 2] >> (8 * (l & 3) + sh)) & 0xF) - m1;
    } else if (t == SMOL_TYPE_Q6_K) {
        const size_t i = (size_t)r * (size_t)(cols >> 8) + (size_t)(k >> 1);
        const float d = smol_gemm_h2f(s + 104 + 2 * (int)(i & 1));
        const int8_t *sc = (const int8_t *)(s + 96) + 2 * j;
        const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
        uint32_t L[4], H[2];
        smol_gemm_words(s + 16 * j, L, 4);
#ifdef __CUDA_ARCH__
        {
            const uint2 v = *(const uint2 *)(s + 64 + 8 * j);
            H[0] = v.x; H[1] = v.y;
        }
#else
        memcpy(H, s + 64 + 8 * j, 8);
#endif
        SMOL_UNROLL
        for (int l = 0; l < 32; l++) {
            const int b = l & 15;  /* q4 byte b: element b in its low nibble, b + 16 in its high */
            const int lo = (int)(L[b >> 2] >> (8 * (b & 3) + 4 * (l >> 4))) & 0xF;
            const int e = l & 7, s2 = l >> 3;  /* q2 byte e, bits 2 s2 */
            const int hi = (int)(H[e >> 2] >> (8 * (e & 3) + 2 * s2)) & 3;
            y[l] = (l < 16 ? d0 : d1) * (float)((lo | hi << 4) - 32);
        }
    } else if (t == SMOL_TYPE_Q8_0) {
        const float d = smol_gemm_h2f(s + 128 + 2 * j);
        uint32_t w[8];
        smol_gemm_words(s + 32 * j, w, 8);
        SMOL_UNROLL
        for (int l = 0; l < 32; l++) y[l] = d * (float)(int8_t)(w[l >> 2] >> (8 * (l & 3)));
    } else {  /* q4_0: d (q - 8); q4_1: d q + m */
        const int q40 = t == SMOL_TYPE_Q4_0;
        const float d = q40 ? smol_gemm_h2f(s + 64 + 2 * j) : smol_gemm_h2f(s + 64 + 4 * j);
        const float m = q40 ? 0.0f : smol_gemm_h2f(s + 66 + 4 * j);
        uint32_t w[4];
        smol_gemm_words(s + 16 * j, w, 4);
        SMOL_UNROLL
        for (int l = 0; l < 16; l++) {
            const int b = (int)(w[l >> 2] >> (8 * (l & 3))) & 0xFF;
            if (q40) {
                y[l] = d * (float)((b & 0xF) - 8);
                y[l + 16] = d * (float)((b >> 4) - 8);
            } else {
                y[l] = d * (float)(b & 0xF) + m;
                y[l + 16] = d * (float)(b >> 4) + m;
            }
        }
    }
}

#ifdef __CUDACC__
#include <cuda_runtime.h>

/* dst[i] = f16(x[i]) (round to nearest even, as smol_f32_to_half), i < count (a multiple of 4) */
cudaError_t smol_f16_from_f32_cuda(uint16_t *dst, const float *x, size_t count, cudaStream_t st);

/* Floats of the split-K partials buffer the launcher uses at most, any shape, on n_sm SMs. */
size_t smol_gemm_part_need(int n_sm);

/* out[t][r] = (mode SMOL_MV_STORE) or += (SMOL_MV_ADD) dot(row r of w, x16[t]) for t < n, r < rows.
 * w: the weight in the mmvq.h layout (n_blocks = rows * cols / block size); x16: [n][cols] f16.
 * n_sm: the device's multiprocessor count (grid sizing).  part / part_cap (floats): scratch for
 * split-K on grids too small to fill the device (NULL / 0: none); the splits are summed in a
 * fixed order, so a result is the same bit for bit from run to run (not across n: the split
 * count follows the grid, which follows n). */
cudaError_t smol_gemm_mma_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                               const uint16_t *x16, int n, int n_sm, float *part, size_t part_cap, cudaStream_t st);

/* Knob cuda_gemm_fuse (not yet run on a device): the same mat-mul in one launch.  x: [n][cols]
 * f32, rounded to f16 as smol_f16_from_f32_cuda does while the kernel stages it; split-K summed by
 * the last split of each output tile in the order split_sum_kernel sums (the same bits as
 * smol_gemm_mma_cuda of the rounded x).  tickets: n_tickets (>= smol_gemm_tickets_need) words that
 * are 0 before the launch and 0 after it (each tile's last split resets its own). */
cudaError_t smol_gemm_mma_f32_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                   const float *x, int n, int n_sm, float *part, size_t part_cap, unsigned *tickets,
                                   size_t n_tickets, cudaStream_t st);

/* Tickets the fused launchers use at most on n_sm SMs (a split grid has at most n_sm tiles). */
size_t smol_gemm_tickets_need(int n_sm);
#endif

#endif
