/*
 * x8_layout.h - the repacked "rows in lanes" weight layouts for 256-bit
 * vectors (x8 groups of 8 rows), used by the AVX2 and AVX-VNNI tables
 * (cpu_x8_body.inc, compiled by cpu_avx2.c), and their portable pack /
 * unpack, the specification of the bytes.
 *
 * Each is the x16 layout of amx_layout.h with 8 lanes instead of 16: a
 * 32-byte row of a group block holds one dword per weight row, "lane r
 * holds 4 consecutive quants of row r", so a token's 4 activations,
 * broadcast into every lane, meet 8 rows at once (vpmaddubsw / vpdpbusd)
 * and the integer dots of the 8 rows come out in the 8 int32 lanes with no
 * horizontal sums.  A group block keeps the bytes of its 8 blocks, so the
 * repacked copy replaces the file's pages and the RSS stays the file's
 * size.  8 rows, not 16: AVX2 has 16 vector registers, a sub-block's 8
 * unpacked quant vectors take half of them, and groups of 8 split the
 * rows of a matrix among threads as finely as the row-major kernels do.
 *
 * Per (row, token) the kernels compute the exact integer terms of every
 * block and then the float operations of the x16 kernels, in the same
 * order, in the row's lane: so an x8 product equals, bit for bit, the x16
 * product of the same rows (AVX-512, and its scalar twin
 * smol_amx_twin_gemm in amx_layout.c, which test_simd uses as the x8
 * kernels' twin), and a token's results do not depend on the batch.
 */
#ifndef SMOL_X8_LAYOUT_H
#define SMOL_X8_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* struct q4_K_x8, q6_K_x8, q4_1_x8, q8_0_x8 and smol_x8_pack_<type>,
 * smol_x8_unpack_row_<type>: lanes_layout.inc with 8 lanes */
#define LANES 8
#define LANES_T(t) t##_x8
#define LANES_FN(f) smol_x8_##f
#include "lanes_layout.inc"
#undef LANES
#undef LANES_T
#undef LANES_FN

/* whether `type` has an x8 layout (q4_K, q6_K, q4_1, q8_0) */
int smol_x8_has(uint32_t type);

#endif
