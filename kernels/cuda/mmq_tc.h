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
 * Limits (the launcher returns cudaErrorInvalidValue outside them, the
 * backend then keeps the tiled path): cols a multiple of SMOL_GEMM_BK (the
 * K step), any rows >= 1 and any n >= 1.  The repacked q6_K copy must have
 * SMOL_GEMM_PAD spare bytes after its N * 210 (the kernel reads each
 * block's 2-byte d as an aligned 4-byte word).
 */
#ifndef SMOL_CUDA_MMQ_TC_H
#define SMOL_CUDA_MMQ_TC_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stddef.h>
#include "../quant.h"

#define SMOL_GEMM_BK 128   /* K elements per pipeline step: half a K-quant super-block, four 32-blocks */
#define SMOL_GEMM_PAD 16   /* spare bytes after a repacked weight copy */

/* 1 if the GEMM has a decoder for weights of type t (in the mmvq.h layouts) */
static inline int smol_gemm_type_ok(uint32_t t)
{
    return t == SMOL_TYPE_Q4_K || t == SMOL_TYPE_Q6_K || t == SMOL_TYPE_Q8_0 || t == SMOL_TYPE_Q4_0 ||
           t == SMOL_TYPE_Q4_1;
}

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

#endif
