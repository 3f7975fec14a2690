/*
 * amx_layout.h - the repacked "rows in lanes" weight layouts (x16 groups of
 * 16 rows) shared by the AVX-512 kernels (cpu_avx512.c) and the AMX tile
 * kernels (cpu_amx.c), their portable pack / unpack, and the scalar twin of
 * the AMX kernels (amx_layout.c).
 *
 * Why one layout serves both.  AMX multiplies C[M][N] += A[M][K] . B[K][N]
 * with A a tile of M <= 16 rows of K bytes and B stored "VNNI": K/4 rows of
 * N * 4 bytes, row k4 holding for each column n the bytes B[4k4..4k4+3][n].
 * We make the tokens the rows of A (activation rows as they are: q8_K /
 * q8_0 / q8_1 quants loaded with the row stride, no copy, signed) and the
 * weight rows the columns of B (unsigned or signed quants).  A 64-byte row
 * of an x16 group, "lane r holds 4 consecutive quants of row r", IS a VNNI
 * row of B for 16 weight rows: the AVX-512 decode kernels broadcast a
 * token's 4 activations against it (vpdpbusd), the AMX kernels load 4-16 of
 * them as one B tile (tdpbsud / tdpbssd) after widening the nibbles to bytes.
 * So the weights are repacked once, into one copy, and decode (AVX-512, one
 * token) and prompt processing (AMX, >= 16 tokens) read the same bytes: the
 * RSS stays about the file's size.
 *
 * Integers and floats.  The scales of K-quant sub-blocks multiply integer
 * sub-block dots (q4_K: 8 of 32 values; q6_K: 16 of 16), and a sub-block's
 * quant times its scale does not fit a byte, so every sub-block dot must
 * come out of the tile unit on its own: one tdp per sub-block with K = its
 * size (q4_K: A 16 x 32 bytes, B 8 x 64; q6_K: A 16 x 16, B 4 x 64), its C
 * tile stored and multiplied by the 16 rows' scales in AVX-512 (vpmulld),
 * exactly as the x16 decode kernel does per sub-block.  On Sapphire Rapids a
 * tdp costs the same 16 cycles whatever K (one row of A per cycle), so q4_K
 * runs the tile unit at 1/2 of its peak and q6_K at 1/4 — still 4-8x the
 * int8 rate of vpdpbusd on one core — while the blocks of 32 (q8_0, q4_0,
 * q4_1: one scale per block) use K = 32 too.  Two other layouts were
 * weighed and not taken: weights as A (u8, M = rows) needs the activations
 * re-laid out in VNNI per call and changes nothing for the sub-block
 * problem; folding the scale into B (q * sc split as q * sc_lo + 8 q *
 * sc_hi, each < 256) runs K = 64 at full rate with no per-sub-block epilogue
 * but needs 2 bytes per quant (a second, 3.5x larger copy of the weights),
 * against the goal of RSS <= 0.7x llama.cpp's.  Which of the tile unit or
 * the vpmulld epilogue (port 0) bounds the chosen one is to be measured on
 * the first AMX machine.
 *
 * Per (row, token) the AMX kernels compute the exact integer terms of every
 * block (in any order: they are exact) and then the same float operations,
 * in the same order, as the x16 AVX-512 kernels — so a prompt evaluated in
 * tiles of 16 tokens gives, bit for bit, the logits of the same tokens one
 * at a time, and the scalar twin below (smol_amx_twin_gemm) reproduces the
 * AMX kernels bit for bit: it emulates the same tile loads and dot products
 * on the same staged bytes (smol_amx_stage_*), then runs the same epilogue.
 *
 * q4_0 has no AVX-512 kernel; its x16 layout (like q4_1's, without the mins)
 * is used only by the AMX table, small batches going to the plain-C
 * smol_x16_gemm_q4_0 with the same float epilogue.
 */
#ifndef SMOL_AMX_LAYOUT_H
#define SMOL_AMX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* struct q4_K_x16, q6_K_x16, q4_1_x16, q4_0_x16, q8_0_x16 and
 * smol_x16_pack_<type>, smol_x16_unpack_row_<type>: lanes_layout.inc with
 * 16 lanes.  Their B tiles (smol_amx_stage_*): q4_K sub-block j = 8 VNNI
 * rows, row 2p = the low nibbles of qs[j][p], row 2p+1 the high ones; q6_K
 * sub-block j (16 values) = the 4 VNNI rows v = 4j..4j+3 (values 0..63);
 * q4_1 / q4_0: rows p = the low nibbles, 4 + p = the high nibbles of qs[p]
 * (q4_0: minus 8, signed); q8_0 (tdpbssd): the group block's bytes ^ 0x80. */
#define LANES 16
#define LANES_T(t) t##_x16
#define LANES_FN(f) smol_x16_##f
#include "lanes_layout.inc"
#undef LANES
#undef LANES_T
#undef LANES_FN

/* The portable pack / unpack_row above by type (the specification of the
 * bytes; cpu_avx512.c's vectorized q4_K packer must give the same bytes). */
void smol_x16_pack(uint32_t type, int n, const void *w, size_t w_stride, int n_rows, void *out);
void smol_x16_unpack_row(uint32_t type, int n, const void *packed, int row, void *out);
/* whether `type` has an x16 layout (q4_K, q6_K, q4_1, q4_0, q8_0) */
int smol_x16_has(uint32_t type);

/* q4_0 x16 against q8_0 activations in plain C, with the AMX kernel's float
 * epilogue (the AMX table's q4_0 path for batches under 16 tokens). */
void smol_x16_gemm_q4_0(int n, const void *packed, int n_rows, const void *a, size_t a_stride, int n_tok,
                        float *out, size_t out_stride);

/* ---- the AMX kernels' staged B tiles (the widening the kernels do with
 * AVX-512 before each tile load; q8_0's are the group block's bytes ^ 0x80) */
void smol_amx_stage_q4_K(const struct q4_K_x16 *b, int j, uint8_t B[8][64]);  /* sub-block j, u8 0..15 */
void smol_amx_stage_q6_K(const struct q6_K_x16 *b, int j, uint8_t B[4][64]);  /* sub-block j, u8 0..63 */
void smol_amx_stage_q4_1(const struct q4_1_x16 *b, uint8_t B[8][64]);         /* u8 0..15 */
void smol_amx_stage_q4_0(const struct q4_0_x16 *b, uint8_t B[8][64]);         /* s8 -8..7 */
void smol_amx_stage_q8_0(const struct q8_0_x16 *b, uint8_t B[8][64]);         /* s8 */

/* Sub-block size of the integer dots the tiles produce (32, q6_K 16). */
int smol_amx_sub(uint32_t type);

/* The scalar twin of the AMX gemm (cpu_amx.c): out[t * out_stride + r] for
 * the n_rows packed rows at `packed` (a group boundary) and n_tok activation
 * rows (the type's vec_dot_type) a_stride apart, computed by emulating, on
 * the same bytes, the tile loads (tileloadd), dot products (tdpbsud for
 * unsigned weights, tdpbssd for signed: q8_0, q4_0) and stores the kernel
 * makes, tokens in tiles of 16 rows of A, then the kernel's float epilogue.
 * dots: NULL, or [n_tok][n_rows][n / smol_amx_sub(type)] int32 receiving the
 * sub-block dots as the C tiles held them (q4_K: sum of q * y, q 0..15, per
 * 32 values; q6_K: q 0..63 per 16; q4_1: q 0..15; q4_0: (q - 8); q8_0: q). */
void smol_amx_twin_gemm(uint32_t type, int n, const void *packed, int n_rows, const void *a, size_t a_stride,
                        int n_tok, float *out, size_t out_stride, int32_t *dots);

#endif
