/*
 * fattn.cuh - tiled ("flash") attention over the paged KV cache (fattn.cu),
 * the CUDA backend's knob cuda_attn = tiled.
 *
 * The same function as smol_attention_cuda (ops_cuda.cuh): out[t] = causal
 * GQA attention of q[t] over positions [0, tok[2t]) of its sequence, same
 * arguments, same output layout, same split partials layout.  Here a block
 * owns a tile of consecutive query tokens of one sequence and the G query
 * heads of one KV head (FATTN_ROWS rows of (token, head), token-major), walks
 * that sequence's K/V in tiles of FATTN_KEYS positions staged in shared
 * memory as f16 (q8_0 rows dequantized on the way in), and computes QK^T and
 * PV with mma.sync m16n8k16 (f16 inputs, f32 accumulation) and an online
 * softmax in f32.  Only head_dim 128 with an f16 or q8_0 cache
 * (smol_fattn_ok); the backend takes smol_attention_cuda otherwise.
 *
 * Tiles: tiles[2i] = first batch token of tile i, tiles[2i+1] = its token
 * count (1..smol_fattn_tile_tokens(G)); the tokens of a tile are consecutive
 * in the batch and of one sequence (one page table: equal tok[2t+1]).
 * tiles NULL: tile i is token i alone (n_tiles = n_tokens; what a recorded
 * decode step uses, as it uploads nothing).  Every token must lie in exactly
 * one tile.
 *
 * Split-K: n_split (1..FATTN_MAX_SPLIT) blocks per (tile, KV head) each take
 * ceil(tile pages / n_split) pages of the tile's context (found on the
 * device: one launch serves any context); with n_split > 1 each writes
 * (unnormalised o, m, l) per (token, head, split) to part, n_tokens *
 * n_heads * n_split * (head_dim + 2) floats, and a merge kernel (one warp per
 * (token, head)) combines them.
 */
#ifndef SMOL_FATTN_CUH
#define SMOL_FATTN_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include "../quant.h"

#define FATTN_ROWS 64       /* (token, head) rows of a block: 4 warps x 16 */
#define FATTN_KEYS 64       /* positions per K/V tile (two pages) */
#define FATTN_MAX_SPLIT 256 /* splits per (tile, KV head): the merge's static shared array */

/* query tokens per tile for G query heads per KV head: FATTN_ROWS / G */
static inline int smol_fattn_tile_tokens(int G) { return FATTN_ROWS / G; }

cudaError_t smol_fattn_cuda(float *out, const float *q, const void *k_layer, const void *v_layer, int n_tokens,
                            const int32_t *tok, const int32_t *pages, const int32_t *tiles, int n_tiles, int n_heads,
                            int n_kv_heads, int head_dim, int kv_type, float scale, int n_split, float *part,
                            cudaStream_t st);

/* 1 when the tiled kernel serves this geometry: head_dim 128, kv_type f16 or q8_0, 1 <= G <= 16 */
static inline int smol_fattn_ok(int head_dim, int kv_type, int n_heads, int n_kv_heads)
{
    return head_dim == 128 && (kv_type == SMOL_TYPE_F16 || kv_type == SMOL_TYPE_Q8_0) && n_kv_heads > 0 &&
           n_heads % n_kv_heads == 0 && n_heads / n_kv_heads >= 1 && n_heads / n_kv_heads <= 16;
}

#endif
