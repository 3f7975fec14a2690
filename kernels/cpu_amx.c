/*
 * cpu_amx.c - the AMX variant: the AVX-512 table (cpu_avx512.c) with the
 * matmuls of repacked weights (q4_K, q6_K, q4_1, q8_0, and q4_0, which only
 * this table repacks) done on the tile unit for every whole tile of 16
 * tokens of a call (prompt chunks, verify steps of speculative decoding,
 * large batches); a call's other tokens, and decode, take the AVX-512 x16
 * kernels (q4_0: smol_x16_gemm_q4_0) on the same bytes.  Layout, design and
 * the scalar twin: amx_layout.h / amx_layout.c.
 *
 * Per (row, token) the integer terms of a block are exact and the float
 * epilogue below makes the x16 kernels' operations in their order, so the
 * AMX tiles and the AVX-512 kernels give the same bits: a token's logits do
 * not depend on the tile it fell in.  test_simd (variant amx) and test_amx
 * check the kernels against the reference and against the scalar twin.
 *
 * Compiled for AVX-512 + AMX only (a target pragma, as cpu_avx512.c), and
 * chosen at run time: cpuid says AMX-TILE and AMX-INT8, XCR0 has the tile
 * state enabled, and Linux grants the process the tile data
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once, in the
 * table's one-time init).  Each thread loads its tile configuration
 * (ldtilecfg) before its first tile op and when a call needs the other
 * shape (K = 32: q4_K, q4_1, q4_0, q8_0; K = 16: q6_K).
 *
 * The tile ops are written as inline asm with a "memory" clobber: GCC 12's
 * intrinsics pass only the address to tileloadd / tilestored, so the
 * compiler would not know the staged bytes are read or the stored C tiles
 * written.
 *
 * Status: compiled and its twin tested everywhere; this kernel itself has
 * not run yet (no AMX machine so far) — test_simd / test_amx say SKIPPED
 * for it where the CPU has no AMX.
 */
#include "cpu_kernels.h"
#include "amx_layout.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <string.h>
#ifndef SMOL_AMX_SIM /* tests/test_amx_sim.c: intrinsics and tile ops emulated */
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* The AVX-512 x16 kernels the AMX ones fall back to (fewer than 16 tokens). */
static smol_gemm_packed_fn fallback[SMOL_TYPE_COUNT];

/* palette 1 tile configuration (64 bytes) */
struct tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
_Static_assert(sizeof(struct tilecfg) == 64, "ldtilecfg reads 64 bytes");

enum { CFG_NONE, CFG_K32, CFG_K16 };

/* tmm0..3: C (16 tokens x 16 rows, int32); tmm4, 5: A (16 tokens x kb
 * bytes); tmm6, 7: B (kb / 4 VNNI rows x 16 rows x 4 bytes) */
static void make_cfg(struct tilecfg *c, int kb)
{
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int t = 0; t < 4; t++) c->rows[t] = 16, c->colsb[t] = 64;
    for (int t = 4; t < 6; t++) c->rows[t] = 16, c->colsb[t] = (uint16_t)kb;
    for (int t = 6; t < 8; t++) c->rows[t] = (uint8_t)(kb / 4), c->colsb[t] = 64;
}

static __thread int cur_cfg = CFG_NONE;

#ifndef SMOL_AMX_SIM
#define TILE_LOADCFG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(const struct tilecfg *)(cfg)))
#define TILE_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)), "r"((long)(stride)) : "memory")
#define TILE_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(base)), "r"((long)(stride)) : "memory")
#define TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
/* C += A (signed bytes) . B (unsigned / signed bytes) */
#define TILE_DPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define TILE_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif

static void amx_cfg(int which)
{
    if (cur_cfg == which) return;
    struct tilecfg c;
    make_cfg(&c, which == CFG_K32 ? 32 : 16);
    TILE_LOADCFG(&c);
    cur_cfg = which;
}

#ifndef SMOL_AMX_SIM
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
#endif
#endif

#define INL static inline __attribute__((always_inline))

/* ------------------------------------------------------------- q4_K
 * Per 16-token tile and group block: the 8 sub-blocks' B tiles widened
 * from the nibbles (smol_amx_stage_q4_K), 8 tdpbsud of K = 32 in two rounds
 * of 4 C tiles, the C tiles stored to D; then, as q4_K_x16_tile: I = sum_j
 * D_j * sc_j (vpmulld), M = sum_j m_j * bsum_j (vpdpwssd), acc = fma(I, d *
 * y.d, acc), acc = fma(M, -dmin * y.d, acc) per token, lanes = rows. */
#define ROUND4(DP, D, j0, ybase, ystep, Bbase, Bstep, a_stride)            \
    do {                                                                   \
        TILE_ZERO(0); TILE_ZERO(1); TILE_ZERO(2); TILE_ZERO(3);            \
        TILE_LOAD(4, (ybase) + (j0) * (ystep), a_stride);                  \
        TILE_LOAD(6, (Bbase) + (j0) * (Bstep), 64);                        \
        DP(0, 4, 6);                                                       \
        TILE_LOAD(5, (ybase) + ((j0) + 1) * (ystep), a_stride);            \
        TILE_LOAD(7, (Bbase) + ((j0) + 1) * (Bstep), 64);                  \
        DP(1, 5, 7);                                                       \
        TILE_LOAD(4, (ybase) + ((j0) + 2) * (ystep), a_stride);            \
        TILE_LOAD(6, (Bbase) + ((j0) + 2) * (Bstep), 64);                  \
        DP(2, 4, 6);                                                       \
        TILE_LOAD(5, (ybase) + ((j0) + 3) * (ystep), a_stride);            \
        TILE_LOAD(7, (Bbase) + ((j0) + 3) * (Bstep), 64);                  \
        DP(3, 5, 7);                                                       \
        TILE_STORE(0, D[(j0)], 64); TILE_STORE(1, D[(j0) + 1], 64);        \
        TILE_STORE(2, D[(j0) + 2], 64); TILE_STORE(3, D[(j0) + 3], 64);    \
    } while (0)

static void amx_q4_K(int nb, const struct q4_K_x16 *x, const uint8_t *at, size_t a_stride, float *out,
                     size_t out_stride)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m6 = _mm512_set1_epi32(63), m4d = _mm512_set1_epi32(0xF);
    const __m512i m30 = _mm512_set1_epi32(0x30);
    __m512 acc[16];
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q4_K_x16 *b = x + i;
        _Alignas(64) uint8_t B[8][8][64];
        _Alignas(64) int32_t D[8][16][16];
        for (int j = 0; j < 8; j++)
            for (int p = 0; p < 4; p++) {
                const __m512i P = _mm512_loadu_si512(b->qs[j][p]);
                _mm512_store_si512(B[j][2 * p], _mm512_and_si512(P, m4));
                _mm512_store_si512(B[j][2 * p + 1], _mm512_and_si512(_mm512_srli_epi16(P, 4), m4));
            }
        const int8_t *yq = ((const struct block_q8_K *)at + i)->qs;
        ROUND4(TILE_DPBSUD, D, 0, yq, 32, &B[0][0][0], 512, a_stride);
        ROUND4(TILE_DPBSUD, D, 4, yq, 32, &B[0][0][0], 512, a_stride);
        const __m512i D0 = _mm512_loadu_si512(b->sd[0]), D1 = _mm512_loadu_si512(b->sd[1]);
        const __m512i D2 = _mm512_loadu_si512(b->sd[2]);
        __m512i sc[8], mm[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = j < 4 ? _mm512_and_si512(_mm512_srli_epi32(D0, 8 * j), m6)
                          : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D2, 8 * (j - 4)), m4d),
                                            _mm512_and_si512(_mm512_srli_epi32(D0, 8 * (j - 4) + 2), m30));
            const __m512i m = j < 4 ? _mm512_and_si512(_mm512_srli_epi32(D1, 8 * j), m6)
                                    : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D2, 8 * (j - 4) + 4), m4d),
                                                      _mm512_and_si512(_mm512_srli_epi32(D1, 8 * (j - 4) + 2), m30));
            mm[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
        const __m512 dmv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->dmin));
        for (int t = 0; t < 16; t++) {
            const struct block_q8_K *y = (const struct block_q8_K *)(at + t * a_stride) + i;
            const int32_t *bs = (const int32_t *)y->bsums;
            __m512i I = _mm512_mullo_epi32(_mm512_load_si512(D[0][t]), sc[0]);
            __m512i M = _mm512_madd_epi16(mm[0], _mm512_set1_epi32(bs[0]));
            for (int j = 1; j < 8; j++) {
                I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(D[j][t]), sc[j]));
                M = _mm512_dpwssd_epi32(M, mm[j], _mm512_set1_epi32(bs[j]));
            }
            const __m512 yd = _mm512_set1_ps(y->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dv, yd), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmv, _mm512_sub_ps(_mm512_setzero_ps(), yd)), acc[t]);
        }
    }
    for (int t = 0; t < 16; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ------------------------------------------------------------- q6_K
 * 16 sub-blocks of 16: B tiles of 4 VNNI rows (values 0..63, widened as in
 * q6_K_x16_tile), 16 tdpbsud of K = 16 in four rounds; then I = sum_j D_j *
 * sc_j, S = sum_j sc_j bsum_j, acc = fma(I - 32 S, d * y.d, acc). */
static void amx_q6_K(int nb, const struct q6_K_x16 *x, const uint8_t *at, size_t a_stride, float *out,
                     size_t out_stride)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[16];
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q6_K_x16 *b = x + i;
        _Alignas(64) uint8_t B[16][4][64];
        _Alignas(64) int32_t D[16][16][16];
        for (int j = 0; j < 16; j++) {
            const __m512i L0 = _mm512_loadu_si512(b->lo[2 * j]), L1 = _mm512_loadu_si512(b->lo[2 * j + 1]);
            const __m512i H = _mm512_loadu_si512(b->hi[j]);
            _mm512_store_si512(B[j][0], _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30)));
            _mm512_store_si512(B[j][1], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4),
                                                        _mm512_and_si512(_mm512_slli_epi16(H, 2), m30)));
            _mm512_store_si512(B[j][2], _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(H, m30)));
            _mm512_store_si512(B[j][3], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4),
                                                        _mm512_and_si512(_mm512_srli_epi16(H, 2), m30)));
        }
        const int8_t *yq = ((const struct block_q8_K *)at + i)->qs;
        ROUND4(TILE_DPBSUD, D, 0, yq, 16, &B[0][0][0], 256, a_stride);
        ROUND4(TILE_DPBSUD, D, 4, yq, 16, &B[0][0][0], 256, a_stride);
        ROUND4(TILE_DPBSUD, D, 8, yq, 16, &B[0][0][0], 256, a_stride);
        ROUND4(TILE_DPBSUD, D, 12, yq, 16, &B[0][0][0], 256, a_stride);
        __m512i P[8], sc[16];
        for (int k = 0; k < 8; k++) {
            P[k] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)b->sc[k]));
            sc[2 * k] = _mm512_srai_epi32(_mm512_slli_epi32(P[k], 16), 16);
            sc[2 * k + 1] = _mm512_srai_epi32(P[k], 16);
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
        for (int t = 0; t < 16; t++) {
            const struct block_q8_K *y = (const struct block_q8_K *)(at + t * a_stride) + i;
            const int32_t *bs = (const int32_t *)y->bsums;
            __m512i I = _mm512_mullo_epi32(_mm512_load_si512(D[0][t]), sc[0]);
            for (int j = 1; j < 16; j++) I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(D[j][t]), sc[j]));
            __m512i S = _mm512_madd_epi16(P[0], _mm512_set1_epi32(bs[0]));
            for (int k = 1; k < 8; k++) S = _mm512_dpwssd_epi32(S, P[k], _mm512_set1_epi32(bs[k]));
            const __m512i tot = _mm512_sub_epi32(I, _mm512_slli_epi32(S, 5));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dv, _mm512_set1_ps(y->d)), acc[t]);
        }
    }
    for (int t = 0; t < 16; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ------------------------------------------------ q4_1, q4_0, q8_0
 * Blocks of 32, one scale each: one tdp of K = 32 per group block (q4_1:
 * tdpbsud on nibbles 0..15; q4_0: tdpbssd on nibbles - 8; q8_0: tdpbssd on
 * the quants, the stored q + 128 flipped back), four blocks per round; then
 * per block, in order, the x16 epilogue of the type. */
INL void stage32(uint32_t type, const void *blk, uint8_t B[8][64])
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    if (type == SMOL_TYPE_Q8_0) {
        const struct q8_0_x16 *b = blk;
        const __m512i f = _mm512_set1_epi8((char)0x80);
        for (int p = 0; p < 8; p++) _mm512_store_si512(B[p], _mm512_xor_si512(_mm512_loadu_si512(b->qs[p]), f));
        return;
    }
    const uint32_t(*qs)[16] = type == SMOL_TYPE_Q4_1 ? ((const struct q4_1_x16 *)blk)->qs : ((const struct q4_0_x16 *)blk)->qs;
    const __m512i off = _mm512_set1_epi8(type == SMOL_TYPE_Q4_0 ? 8 : 0);
    for (int p = 0; p < 4; p++) {
        const __m512i P = _mm512_loadu_si512(qs[p]);
        _mm512_store_si512(B[p], _mm512_sub_epi8(_mm512_and_si512(P, m4), off));
        _mm512_store_si512(B[4 + p], _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(P, 4), m4), off));
    }
}

#define BLK32(DP, c, ta, tb, ii)                                                          \
    do {                                                                                  \
        TILE_ZERO(c);                                                                     \
        TILE_LOAD(ta, ybase + (size_t)(ii) * ystep, a_stride);                            \
        TILE_LOAD(tb, B[c], 64);                                                          \
        DP(c, ta, tb);                                                                    \
        TILE_STORE(c, D[c], 64);                                                          \
    } while (0)

INL void amx_blk32(const uint32_t type, int nb, const uint8_t *x, size_t xsz, const uint8_t *at, size_t a_stride,
                   float *out, size_t out_stride)
{
    __m512 acc[16];
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    const size_t ystep = type == SMOL_TYPE_Q4_1 ? sizeof(struct block_q8_1) : sizeof(struct block_q8_0);
    const uint8_t *ybase = at + (type == SMOL_TYPE_Q4_1 ? offsetof(struct block_q8_1, qs) : offsetof(struct block_q8_0, qs));
    for (int i0 = 0; i0 < nb; i0 += 4) {
        const int cnt = nb - i0 < 4 ? nb - i0 : 4;
        _Alignas(64) uint8_t B[4][8][64];
        _Alignas(64) int32_t D[4][16][16];
        for (int c = 0; c < cnt; c++) stage32(type, x + (size_t)(i0 + c) * xsz, B[c]);
        if (type == SMOL_TYPE_Q4_1) {
            BLK32(TILE_DPBSUD, 0, 4, 6, i0);
            if (cnt > 1) BLK32(TILE_DPBSUD, 1, 5, 7, i0 + 1);
            if (cnt > 2) BLK32(TILE_DPBSUD, 2, 4, 6, i0 + 2);
            if (cnt > 3) BLK32(TILE_DPBSUD, 3, 5, 7, i0 + 3);
        } else {
            BLK32(TILE_DPBSSD, 0, 4, 6, i0);
            if (cnt > 1) BLK32(TILE_DPBSSD, 1, 5, 7, i0 + 1);
            if (cnt > 2) BLK32(TILE_DPBSSD, 2, 4, 6, i0 + 2);
            if (cnt > 3) BLK32(TILE_DPBSSD, 3, 5, 7, i0 + 3);
        }
        for (int c = 0; c < cnt; c++) {
            const int i = i0 + c;
            const uint8_t *blk = x + (size_t)i * xsz;
            if (type == SMOL_TYPE_Q4_1) {
                const struct q4_1_x16 *b = (const struct q4_1_x16 *)blk;
                const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
                const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->m));
                for (int t = 0; t < 16; t++) {
                    const struct block_q8_1 *y = (const struct block_q8_1 *)(at + t * a_stride) + i;
                    acc[t] = _mm512_add_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(D[c][t])),
                                                                   _mm512_mul_ps(dv, _mm512_set1_ps(_cvtsh_ss(y->d))),
                                                                   _mm512_mul_ps(mv, _mm512_set1_ps(_cvtsh_ss(y->s)))));
                }
            } else {
                const smol_half *d = type == SMOL_TYPE_Q8_0 ? ((const struct q8_0_x16 *)blk)->d : ((const struct q4_0_x16 *)blk)->d;
                const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
                for (int t = 0; t < 16; t++) {
                    const struct block_q8_0 *y = (const struct block_q8_0 *)(at + t * a_stride) + i;
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(D[c][t])),
                                             _mm512_mul_ps(dv, _mm512_set1_ps(_cvtsh_ss(y->d))), acc[t]);
                }
            }
        }
    }
    for (int t = 0; t < 16; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ------------------------------------------------------------ gemms */

/* whole tiles of 16 tokens on the tile unit (token tiles outside, groups
 * inside: a tile's activations stay in L1 / L2 while the groups stream),
 * the rest to the type's x16 kernel */
#define DEFINE_GEMM_AMX(T, CFG, BS, CALL)                                                                        \
    static void gemm_amx_##T(int n, const void *packed, int n_rows, const void *a, size_t a_stride, int n_tok,  \
                             float *out, size_t out_stride)                                                      \
    {                                                                                                            \
        const int n16 = n_tok / 16 * 16, nb = n / (BS), ng = n_rows / 16;                                        \
        if (n16) {                                                                                               \
            amx_cfg(CFG);                                                                                        \
            for (int t0 = 0; t0 < n16; t0 += 16) {                                                               \
                const uint8_t *at = (const uint8_t *)a + (size_t)t0 * a_stride;                                  \
                for (int g = 0; g < ng; g++) {                                                                   \
                    const struct T##_x16 *xg = (const struct T##_x16 *)packed + (size_t)g * nb;                  \
                    float *o = out + (size_t)t0 * out_stride + 16 * g;                                           \
                    CALL;                                                                                        \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        if (n_tok > n16)                                                                                         \
            fallback[SMOL_TYPE_##BIG_##T](n, packed, n_rows, (const uint8_t *)a + (size_t)n16 * a_stride,         \
                                           a_stride, n_tok - n16, out + (size_t)n16 * out_stride, out_stride);   \
    }
#define SMOL_TYPE_BIG_q4_K SMOL_TYPE_Q4_K
#define SMOL_TYPE_BIG_q6_K SMOL_TYPE_Q6_K
#define SMOL_TYPE_BIG_q4_1 SMOL_TYPE_Q4_1
#define SMOL_TYPE_BIG_q4_0 SMOL_TYPE_Q4_0
#define SMOL_TYPE_BIG_q8_0 SMOL_TYPE_Q8_0

DEFINE_GEMM_AMX(q4_K, CFG_K32, QK_K, amx_q4_K(nb, xg, at, a_stride, o, out_stride))
DEFINE_GEMM_AMX(q6_K, CFG_K16, QK_K, amx_q6_K(nb, xg, at, a_stride, o, out_stride))
DEFINE_GEMM_AMX(q4_1, CFG_K32, 32, amx_blk32(SMOL_TYPE_Q4_1, nb, (const uint8_t *)xg, sizeof *xg, at, a_stride, o, out_stride))
DEFINE_GEMM_AMX(q4_0, CFG_K32, 32, amx_blk32(SMOL_TYPE_Q4_0, nb, (const uint8_t *)xg, sizeof *xg, at, a_stride, o, out_stride))
DEFINE_GEMM_AMX(q8_0, CFG_K32, 32, amx_blk32(SMOL_TYPE_Q8_0, nb, (const uint8_t *)xg, sizeof *xg, at, a_stride, o, out_stride))

#ifndef SMOL_AMX_SIM
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* AMX-TILE and AMX-INT8 in cpuid, the tile state enabled by the OS (XCR0
 * bits 17, 18), and the tile data granted to this process by Linux. */
static int amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE: xgetbv allowed */
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return 0; /* AMX-TILE, AMX-INT8 */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int smol_cpu_fill_amx(struct smol_cpu_kernels *k)
{
    static const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q4_1, SMOL_TYPE_Q8_0};
    for (int i = 0; i < 4; i++)
        if (!k->gemm_packed[types[i]] || k->pack_rows[types[i]] != 16) return 0; /* not the AVX-512 table */
    if (!amx_usable()) return 0;
    for (int i = 0; i < 4; i++) fallback[types[i]] = k->gemm_packed[types[i]];
    fallback[SMOL_TYPE_Q4_0] = smol_x16_gemm_q4_0;
    k->gemm_packed[SMOL_TYPE_Q4_K] = gemm_amx_q4_K;
    k->gemm_packed[SMOL_TYPE_Q6_K] = gemm_amx_q6_K;
    k->gemm_packed[SMOL_TYPE_Q4_1] = gemm_amx_q4_1;
    k->gemm_packed[SMOL_TYPE_Q8_0] = gemm_amx_q8_0;
    k->pack_rows[SMOL_TYPE_Q4_0] = 16;
    k->pack[SMOL_TYPE_Q4_0] = smol_x16_pack_q4_0;
    k->unpack_row[SMOL_TYPE_Q4_0] = smol_x16_unpack_row_q4_0;
    k->gemm_packed[SMOL_TYPE_Q4_0] = gemm_amx_q4_0;
    k->name = "cpu-amx";
    return 1;
}
#endif /* SMOL_AMX_SIM */
#else
int smol_cpu_fill_amx(struct smol_cpu_kernels *k) { (void)k; return 0; }
#endif
