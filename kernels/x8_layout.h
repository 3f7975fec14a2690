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

/* q4_K: lane r of qs[j][p] = row r's quants of sub-block j at k = 8p..8p+3
 * (low nibbles) and 8p+4..8p+7 (high nibbles); sd = the 12 packed scale
 * bytes as 3 dwords per row. */
struct q4_K_x8 {
    uint8_t qs[8][4][32];   /* [sub-block j][pair p][lane r: 4 bytes] */
    uint32_t sd[3][8];      /* row r's 12 packed scale bytes as 3 dwords */
    smol_half d[8], dmin[8];
};
SMOL_STATIC_ASSERT(sizeof(struct q4_K_x8) == 8 * sizeof(struct block_q4_K), "q4_K_x8 keeps the bytes of 8 rows");

/* q6_K: value vector v (k = 4v..4v+3 of 8 rows, one dword per row) is the
 * nibble v % 2 of lo[v / 2] and bits 2 (v % 4) of hi[v / 4]; sub-block j
 * (16 values) is vectors 4j..4j+3. */
struct q6_K_x8 {
    uint8_t lo[32][32];     /* [v / 2][lane r: 4 bytes], nibble v % 2 */
    uint8_t hi[16][32];     /* [v / 4][lane r: 4 bytes], bits 2 (v % 4) */
    int8_t sc[8][8][2];     /* [pair i][row r]: scales 2i, 2i+1 */
    smol_half d[8];
};
SMOL_STATIC_ASSERT(sizeof(struct q6_K_x8) == 8 * sizeof(struct block_q6_K), "q6_K_x8 keeps the bytes of 8 rows");

/* q4_1: dword p of lane r = row r's qs[4p..4p+3] as stored (low nibbles:
 * elements 4p..4p+3, high: 16 + 4p..). */
struct q4_1_x8 {
    uint32_t qs[4][8];      /* [dword p][lane r] */
    smol_half d[8], m[8];
};
SMOL_STATIC_ASSERT(sizeof(struct q4_1_x8) == 8 * sizeof(struct block_q4_1), "q4_1_x8 keeps the bytes of 8 rows");

/* q8_0: dword p of lane r = row r's qs[4p..4p+3] ^ 0x80 each (q + 128, the
 * unsigned operand of vpdpbusd / vpmaddubsw). */
struct q8_0_x8 {
    uint32_t qs[8][8];      /* [dword p][lane r]: row r's qs[4p..4p+3] ^ 0x80 each */
    smol_half d[8];
};
SMOL_STATIC_ASSERT(sizeof(struct q8_0_x8) == 8 * sizeof(struct block_q8_0), "q8_0_x8 keeps the bytes of 8 rows");

/* whether `type` has an x8 layout (q4_K, q6_K, q4_1, q8_0) */
int smol_x8_has(uint32_t type);

/* Pack: n_rows (a multiple of 8) rows of n columns, w_stride apart -> out,
 * the groups in row order, each [n / block] group blocks (row r0, r0 % 8 ==
 * 0, starts at byte r0 * row_bytes); unpack_row: row `row` back in its
 * format.  The kernel table's pack / unpack_row signatures. */
void smol_x8_pack_q4_K(int n, const void *w, size_t w_stride, int n_rows, void *out);
void smol_x8_unpack_row_q4_K(int n, const void *packed, int row, void *out);
void smol_x8_pack_q6_K(int n, const void *w, size_t w_stride, int n_rows, void *out);
void smol_x8_unpack_row_q6_K(int n, const void *packed, int row, void *out);
void smol_x8_pack_q4_1(int n, const void *w, size_t w_stride, int n_rows, void *out);
void smol_x8_unpack_row_q4_1(int n, const void *packed, int row, void *out);
void smol_x8_pack_q8_0(int n, const void *w, size_t w_stride, int n_rows, void *out);
void smol_x8_unpack_row_q8_0(int n, const void *packed, int row, void *out);

#endif
