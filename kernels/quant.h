/*
 * quant.h - tensor element types and quantization block layouts.
 *
 * One definition of every block, shared by the C kernels and the CUDA
 * kernels (this header compiles as C11 and as CUDA C++).  Layouts and type
 * ids are ggml's, bit for bit, because GGUF files store these blocks
 * verbatim; the names keep ggml's spelling (q4_K, not q4k) so that a search
 * for the reference implementation finds it.  Size asserts pin each layout.
 *
 * A "row" of a weight matrix is n_in consecutive elements, stored as
 * n_in / block_size blocks.  K-quants use super-blocks of QK_K = 256.
 */
#ifndef SMOL_QUANT_H
#define SMOL_QUANT_H

#include <stdint.h>
#include <stddef.h>
#include "fp16.h"

#ifdef __cplusplus
#define SMOL_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define SMOL_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* GGML type ids as stored in GGUF tensor infos.  Gaps are types we refuse. */
enum smol_type {
    SMOL_TYPE_F32  = 0,
    SMOL_TYPE_F16  = 1,
    SMOL_TYPE_Q4_0 = 2,
    SMOL_TYPE_Q4_1 = 3,
    SMOL_TYPE_Q5_0 = 6,
    SMOL_TYPE_Q5_1 = 7,
    SMOL_TYPE_Q8_0 = 8,
    SMOL_TYPE_Q8_1 = 9,   /* activation format for q4_1 / q5_1 */
    SMOL_TYPE_Q2_K = 10,  /* recognised by name only: refused at load */
    SMOL_TYPE_Q3_K = 11,  /* idem */
    SMOL_TYPE_Q4_K = 12,
    SMOL_TYPE_Q5_K = 13,
    SMOL_TYPE_Q6_K = 14,
    SMOL_TYPE_Q8_K = 15,  /* activation format for the K-quants */
    SMOL_TYPE_BF16 = 30,
    SMOL_TYPE_COUNT = 40  /* upper bound of the id space we name */
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* q4_0: 4-bit, one scale; x = d * (q - 8) */
struct block_q4_0 {
    smol_half d;
    uint8_t qs[QK4_0 / 2];          /* low nibbles: elements 0..15, high: 16..31 */
};
SMOL_STATIC_ASSERT(sizeof(struct block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");

/* q4_1: 4-bit with min; x = d * q + m */
struct block_q4_1 {
    smol_half d;
    smol_half m;
    uint8_t qs[QK4_1 / 2];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");

/* q5_0: 5-bit, fifth bits in qh; x = d * (q - 16) */
struct block_q5_0 {
    smol_half d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");

/* q5_1: 5-bit with min; x = d * q + m */
struct block_q5_1 {
    smol_half d;
    smol_half m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");

/* q8_0: 8-bit, one scale; x = d * q */
struct block_q8_0 {
    smol_half d;
    int8_t qs[QK8_0];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q8_0) == 2 + QK8_0, "block_q8_0 size");

/* q8_1: 8-bit with s = d * sum(q) (activation side of q4_1 / q5_1 dots) */
struct block_q8_1 {
    smol_half d;
    smol_half s;
    int8_t qs[QK8_1];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q8_1) == 4 + QK8_1, "block_q8_1 size");

/* q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in scales[12];
 * x = d * sc * q - dmin * m */
struct block_q4_K {
    smol_half d;
    smol_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q4_K) == 4 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");

/* q5_K: as q4_K plus a fifth bit per element in qh */
struct block_q5_K {
    smol_half d;
    smol_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q5_K) == 4 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, "block_q5_K size");

/* q6_K: 16 sub-blocks of 16, 8-bit scales; x = d * sc * (q - 32) */
struct block_q6_K {
    uint8_t ql[QK_K / 2];           /* low 4 bits */
    uint8_t qh[QK_K / 4];           /* high 2 bits */
    int8_t scales[QK_K / 16];
    smol_half d;
};
SMOL_STATIC_ASSERT(sizeof(struct block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "block_q6_K size");

/* q8_K: activation format of the K-quant dots; bsums[i] = sum of qs[16i..16i+15] */
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
SMOL_STATIC_ASSERT(sizeof(struct block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");

#endif
