/*
 * cpu_avx512.c - the AVX-512 (VL, BW, VNNI) kernel variant, compiled for
 * that target only and chosen at run time:
 *
 *   - the shared 256-bit body (cpu_x86_body.inc) with the fused integer dots
 *     vpdpbusd / vpdpwssd and 32 vector registers, for every entry;
 *   - 512-bit q4_K and q6_K kernels for the formats that carry SmolLM3
 *     Q4_K_M (all but the norms): 64 elements per step, a block's scale
 *     vectors built with vpermw, q4_K mins folded through one vpmaddwd on
 *     the bsums.  Single-token dots (decode) prefetch the weight stream;
 *     8-token tiles serve prompt processing.  On this Zen 5 machine (native
 *     512-bit units) they are 1.3-2x the 256-bit tiles (bench_kernels,
 *     2048 x 2048, one core: q4_K 1 token 19 -> 30 GB/s, 8+ tokens 67 ->
 *     126 GMAC/s; q6_K 25 -> 55 GB/s, 54 -> 125 GMAC/s);
 *   - q4_K repacked with the rows in the vector lanes (q4_K_x16, below),
 *     which the CPU backend uses for every q4_K weight of the model: 1 token
 *     62 GB/s, 8+ tokens ~200 GMAC/s on the same bench;
 *   - q4_1 and q8_0 repacked the same way (q4_1_x16, q8_0_x16: SmolLM2's
 *     Q4_1 layers and its q8_0 output head).  bench_kernels 1536 x 576, one
 *     core of a Zen 4 EPYC (512-bit ops double-pumped): q4_1 1 token 11 ->
 *     61 GB/s, 8+ tokens 28 -> 155 GMAC/s; q8_0 26 -> 75 GB/s, 38 -> 160
 *     GMAC/s against the 256-bit row-major tiles.
 */
#include "cpu_kernels.h"
#include "amx_layout.h" /* the x16 group layouts, shared with cpu_amx.c */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

#define SIMD_SUFFIX avx512
#define SIMD_VNNI 1
#include "cpu_x86_body.inc"

/* ------------------------------------------- 512-bit single-token dots */

/* Decode (one token) is bound by instructions per weight byte, not by the
 * integer units: these versions handle 64 elements per step with 512-bit
 * registers and build all of a block's scale vectors with one vpermw each,
 * about 1.4x fewer instructions per block than the 256-bit tile. */

/* Decode streams the weights from DRAM once; the hardware prefetcher alone
 * leaves the dot waiting on memory, so each block asks for the bytes
 * PF_DIST ahead (rows of a task are contiguous), into L2 (_MM_HINT_T1).
 * Into L1, 4 KB ahead, the wait for memory added to the compute instead of
 * overlapping it (most likely a block's burst of 36-53 line requests filling
 * L1's miss buffers): a one-off A/B harness (2 threads, 32768 x 2048, median
 * of 21, Zen 4 EPYC) put the q4_K_x16 tile at 1.0x for 1 token, 0.71-0.83x
 * for 2-8, q6_K_x16 at 0.58-0.69x for every size; `smollm3 bench --verify 7`
 * on the 3B: a step of 8 positions 2.0-2.7x -> 1.5-1.6x a 1-token step. */
#ifndef PF_DIST
#define PF_DIST 8192
#endif
#define PREFETCH_AHEAD(p, size)                                                              \
    do {                                                                                     \
        const char *pf_ = (const char *)(p) + PF_DIST;                                       \
        for (unsigned o_ = 0; o_ < (size); o_ += 64) _mm_prefetch(pf_ + o_, _MM_HINT_T1);    \
    } while (0)

/* Float order: the single-token dots and the tiles below make the same
 * float operations in the same order per (row, token) — 16 int32 lanes to
 * float, fma by d * y.d, then the mins' 8 lanes by -dmin * y.d, one 16-lane
 * sum at the end — so a prompt evaluated in one batch gives bit for bit the
 * logits of the same tokens evaluated one at a time. */
static inline __m512i scale_words(__m512i sc16, const uint16_t *idx)
{
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(idx), sc16);
}

/* word i of a 64-element step -> scale index: q4_K sub-blocks of 32 */
static uint16_t q4k_idx[4][32];
/* q6_K groups of 16: step (2h + AB) covers scales 8h + 4AB .. +3 */
static uint16_t q6k_idx[4][32];

static void init_idx(void)
{
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 32; i++) {
            q4k_idx[j][i] = (uint16_t)(2 * j + i / 16);
            q6k_idx[j][i] = (uint16_t)(4 * j + i / 8);
        }
}

/* q4_K scales and mins as 16 words (sc0..7, m0..7), decoded in vector
 * registers: the scalar utmp shuffle of ggml stores four dwords that the
 * next vector load cannot forward, a stall on every block.  The 16-byte
 * load reads 4 bytes of qs past the 12 scale bytes (same block). */
static inline __m256i q4k_scales_mins(const uint8_t *scales)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)scales);
    const __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i lo = _mm_and_si128(a, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), _mm_set1_epi32(0x03030303)), 4),
                                     _mm_setr_epi32(0, -1, 0, -1));
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
}

static float vec_dot_q4_K_z(int n, const void *w, const void *a)
{
    const struct block_q4_K *x = w;
    const struct block_q8_K *y = a;
    const int nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i ix0 = _mm512_loadu_si512(q4k_idx[0]), ix1 = _mm512_loadu_si512(q4k_idx[1]);
    const __m512i ix2 = _mm512_loadu_si512(q4k_idx[2]), ix3 = _mm512_loadu_si512(q4k_idx[3]);
    const __m256i mdup_idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        PREFETCH_AHEAD(x + i, sizeof *x);
        const __m256i sm = q4k_scales_mins(x[i].scales); /* words 0..7 scales, 8..15 mins */
        const __m512i sc16 = _mm512_castsi256_si512(sm);
        const __m512i b0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs)));
        const __m512i b1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32)));
        const __m512i b2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 64)));
        const __m512i b3 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 96)));
        __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                         _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srlv_epi16(b0, shift), m4),
                                                              _mm512_loadu_si512(y[i].qs)),
                                         _mm512_permutexvar_epi16(ix0, sc16));
        __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                         _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srlv_epi16(b1, shift), m4),
                                                              _mm512_loadu_si512(y[i].qs + 64)),
                                         _mm512_permutexvar_epi16(ix1, sc16));
        s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srlv_epi16(b2, shift), m4),
                                                          _mm512_loadu_si512(y[i].qs + 128)),
                                 _mm512_permutexvar_epi16(ix2, sc16));
        s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srlv_epi16(b3, shift), m4),
                                                          _mm512_loadu_si512(y[i].qs + 192)),
                                 _mm512_permutexvar_epi16(ix3, sc16));
        const __m256i prod = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums),
                                               _mm256_permutexvar_epi16(mdup_idx, sm));
        const float yd = y[i].d;
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(_cvtsh_ss(x[i].d) * yd), acc);
        acc = _mm512_fmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(prod)), _mm512_set1_ps(-_cvtsh_ss(x[i].dmin) * yd), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float vec_dot_q6_K_z(int n, const void *w, const void *a)
{
    const struct block_q6_K *x = w;
    const struct block_q8_K *y = a;
    const int nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(0x30);
    const __m512i shl_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        PREFETCH_AHEAD(x + i, sizeof *x);
        const __m128i scales8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc256 = _mm256_cvtepi8_epi16(scales8);
        const __m512i sc16 = _mm512_castsi256_si512(sc256);
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)));
            const __m512i qa = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, shl_a), m2));
            const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi16(hb, shr_b), m2));
            const __m512i ya = _mm512_loadu_si512(y[i].qs + 128 * h);
            const __m512i yb = _mm512_loadu_si512(y[i].qs + 128 * h + 64);
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(qa, ya), scale_words(sc16, q6k_idx[2 * h]));
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(qb, yb), scale_words(sc16, q6k_idx[2 * h + 1]));
        }
        const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc256);
        const __m512i tot = _mm512_sub_epi32(_mm512_add_epi32(s0, s1),
                                             _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ------------------------------------------- q4_K repacked: rows in lanes
 *
 * The CPU backend repacks every q4_K weight with rows % 16 == 0 once, at
 * load, into q4_K_x16 groups: 16 rows x 256 columns in the bytes of 16
 * block_q4_K, with the rows in the 16 int32 lanes of a vector.  Lane r of
 * qs[j][p] holds row r's quants of sub-block j at k = 8p..8p+3 (low nibbles)
 * and 8p+4..8p+7 (high nibbles), so one vpdpbusd multiplies 4 quants of 16
 * rows by 4 activations broadcast from memory into each row's own lane: a
 * sub-block is 8 vpdpbusd and one vpmulld by its 16 scales, with no
 * horizontal sums at all.  Against the row-major 8-token tile that is about
 * a third of the instructions (prompt processing ~1.9x); decode streams the
 * same bytes with ~4x fewer instructions per byte.
 *
 * Per (row, token) the float work is the same whatever the batch: per block
 * the exact integers I = sum_j sc_j (q . y)_j and M = sum_j m_j bsum_j, then
 * acc = fma(I, d * y.d, acc) and acc = fma(M, -dmin * y.d, acc), in one
 * lane.  So a token's logits do not depend on which other tokens share its
 * batch (prefill == decode, batched == alone), bit for bit. */
/* struct q4_K_x16: amx_layout.h */

/* n_rows (a multiple of 16) rows of n columns, w_stride apart -> out: the
 * groups in row order, each [n / 256] blocks.  smol_x16_pack_q4_K's bytes
 * with 512-bit moves (test_amx compares the two); the other formats' pack
 * and every unpack_row are the portable ones (amx_layout.h): plain C that
 * runs once per weight at load, or per get_rows row. */
static void pack_q4_K_x16(int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    const int nb = n / QK_K;
    const __m512i lo4 = _mm512_set1_epi32(0x0F0F0F0F), hi4 = _mm512_set1_epi32((int)0xF0F0F0F0u);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int g = 0; g < n_rows / 16; g++)
        for (int r = 0; r < 16; r++) {
            const struct block_q4_K *x = (const struct block_q4_K *)((const uint8_t *)w + (size_t)(16 * g + r) * w_stride);
            struct q4_K_x16 *o = (struct q4_K_x16 *)out + (size_t)g * nb;
            for (int i = 0; i < nb; i++, o++) {
                memcpy(&o->sd[0][r], x[i].scales, 4);
                memcpy(&o->sd[1][r], x[i].scales + 4, 4);
                memcpy(&o->sd[2][r], x[i].scales + 8, 4);
                o->d[r] = x[i].d;
                o->dmin[r] = x[i].dmin;
                /* the 32 dwords X of qs: pair q holds sub-blocks 2q (low
                 * nibbles) and 2q+1 (high); dword (j, p) of the packed row
                 * takes X[8q + 2p] and X[8q + 2p + 1] */
                const __m512i z0 = _mm512_loadu_si512(x[i].qs), z1 = _mm512_loadu_si512(x[i].qs + 64);
                const __m512i e = _mm512_permutex2var_epi32(z0, ev, z1), f = _mm512_permutex2var_epi32(z0, od, z1);
                uint32_t lo[16], hi[16]; /* index 4q + p */
                _mm512_storeu_si512(lo, _mm512_or_si512(_mm512_and_si512(e, lo4), _mm512_slli_epi32(_mm512_and_si512(f, lo4), 4)));
                _mm512_storeu_si512(hi, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(e, 4), lo4), _mm512_and_si512(f, hi4)));
                uint32_t *qd = (uint32_t *)o->qs;
                for (int q = 0; q < 4; q++)
                    for (int p = 0; p < 4; p++) {
                        qd[((2 * q) * 4 + p) * 16 + r] = lo[4 * q + p];
                        qd[((2 * q + 1) * 4 + p) * 16 + r] = hi[4 * q + p];
                    }
            }
        }
}

static inline __attribute__((always_inline)) void q4_K_x16_tile(int nb, const struct q4_K_x16 *x, const uint8_t *a,
                                                                size_t a_stride, const int NT, float *out,
                                                                size_t out_stride, const int pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m6 = _mm512_set1_epi32(63), m4d = _mm512_set1_epi32(0xF);
    const __m512i m30 = _mm512_set1_epi32(0x30);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q4_K_x16 *b = x + i;
        if (pf) PREFETCH_AHEAD(b, sizeof *b);
        const __m512i D0 = _mm512_load_si512(b->sd[0]), D1 = _mm512_load_si512(b->sd[1]);
        const __m512i D2 = _mm512_load_si512(b->sd[2]);
        __m512i I[8];
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) I[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            /* ggml's get_scale_min_k4, one row per lane */
            const __m512i sc = j < 4 ? _mm512_and_si512(_mm512_srli_epi32(D0, 8 * j), m6)
                                     : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D2, 8 * (j - 4)), m4d),
                                                       _mm512_and_si512(_mm512_srli_epi32(D0, 8 * (j - 4) + 2), m30));
            __m512i W[8];
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m512i P = _mm512_load_si512(b->qs[j][p]);
                W[2 * p] = _mm512_and_si512(P, m4);
                W[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(P, 4), m4);
            }
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int32_t *yq = (const int32_t *)(((const struct block_q8_K *)(a + t * a_stride) + i)->qs + 32 * j);
                __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[0], _mm512_set1_epi32(yq[0]));
                __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[1], _mm512_set1_epi32(yq[1]));
                s0 = _mm512_dpbusd_epi32(s0, W[2], _mm512_set1_epi32(yq[2]));
                s1 = _mm512_dpbusd_epi32(s1, W[3], _mm512_set1_epi32(yq[3]));
                s0 = _mm512_dpbusd_epi32(s0, W[4], _mm512_set1_epi32(yq[4]));
                s1 = _mm512_dpbusd_epi32(s1, W[5], _mm512_set1_epi32(yq[5]));
                s0 = _mm512_dpbusd_epi32(s0, W[6], _mm512_set1_epi32(yq[6]));
                s1 = _mm512_dpbusd_epi32(s1, W[7], _mm512_set1_epi32(yq[7]));
                I[t] = _mm512_add_epi32(I[t], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
            }
        }
        /* M = sum_k m_(k/2) * bsums[k]: each min as an int16 pair against
         * the dword (bsums[2j], bsums[2j+1]) */
        __m512i M[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i m = j < 4 ? _mm512_and_si512(_mm512_srli_epi32(D1, 8 * j), m6)
                                    : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(D2, 8 * (j - 4) + 4), m4d),
                                                      _mm512_and_si512(_mm512_srli_epi32(D1, 8 * (j - 4) + 2), m30));
            const __m512i mm = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int32_t *bs = (const int32_t *)((const struct block_q8_K *)(a + t * a_stride) + i)->bsums;
                M[t] = j ? _mm512_dpwssd_epi32(M[t], mm, _mm512_set1_epi32(bs[j]))
                         : _mm512_madd_epi16(mm, _mm512_set1_epi32(bs[0]));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)b->d));
        const __m512 dmv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)b->dmin));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const __m512 yd = _mm512_set1_ps(((const struct block_q8_K *)(a + t * a_stride) + i)->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[t]), _mm512_mul_ps(dv, yd), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M[t]), _mm512_mul_ps(dmv, _mm512_sub_ps(_mm512_setzero_ps(), yd)), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ------------------------------------------- q6_K repacked: rows in lanes
 *
 * As q4_K_x16, for q6_K: value vector v (k = 4v..4v+3 of 16 rows, one dword
 * per row) is the low nibbles of lo[v / 2] (nibble v % 2) and bits 2(v % 4)
 * of hi[v / 4], so a 16-element sub-block j is vectors 4j..4j+3: four
 * vpdpbusd and one vpmulld by its 16 signed scales.  The quants' offset of
 * 32 comes off once per block: I = sum_j sc_j (q . y)_j - 32 sum_j sc_j
 * bsum_j, then acc = fma(I, d * y.d, acc), in the row's lane.
 *
 * Bytes: 32 x 64 (low nibbles) + 16 x 64 (high bits) + 256 (scales, as
 * pairs (sc[2i], sc[2i+1]) per row) + 32 (d) = 16 block_q6_K = 3360, so
 * every other group block is only 32-byte aligned: unaligned loads. */
/* struct q6_K_x16: amx_layout.h */

static inline __attribute__((always_inline)) void q6_K_x16_tile(int nb, const struct q6_K_x16 *x, const uint8_t *a,
                                                                size_t a_stride, const int NT, float *out,
                                                                size_t out_stride, const int pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q6_K_x16 *b = x + i;
        if (pf) PREFETCH_AHEAD(b, sizeof *b);
        __m512i I[8];
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) I[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int j = 0; j < 16; j++) {
            const __m512i P = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)b->sc[j / 2]));
            const __m512i sc = j % 2 ? _mm512_srai_epi32(P, 16) : _mm512_srai_epi32(_mm512_slli_epi32(P, 16), 16);
            const __m512i L0 = _mm512_loadu_si512(b->lo[2 * j]), L1 = _mm512_loadu_si512(b->lo[2 * j + 1]);
            const __m512i H = _mm512_loadu_si512(b->hi[j]);
            const __m512i V0 = _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
            const __m512i V1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4),
                                               _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
            const __m512i V2 = _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(H, m30));
            const __m512i V3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4),
                                               _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int32_t *yq = (const int32_t *)(((const struct block_q8_K *)(a + t * a_stride) + i)->qs + 16 * j);
                __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), V0, _mm512_set1_epi32(yq[0]));
                __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), V1, _mm512_set1_epi32(yq[1]));
                s0 = _mm512_dpbusd_epi32(s0, V2, _mm512_set1_epi32(yq[2]));
                s1 = _mm512_dpbusd_epi32(s1, V3, _mm512_set1_epi32(yq[3]));
                I[t] = _mm512_add_epi32(I[t], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
            }
        }
        /* S = sum_j sc_j bsum_j: scale pairs against the bsums dword pairs */
        __m512i S[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i P = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)b->sc[k]));
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int32_t *bs = (const int32_t *)((const struct block_q8_K *)(a + t * a_stride) + i)->bsums;
                S[t] = k ? _mm512_dpwssd_epi32(S[t], P, _mm512_set1_epi32(bs[k])) : _mm512_madd_epi16(P, _mm512_set1_epi32(bs[0]));
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const __m512 yd = _mm512_set1_ps(((const struct block_q8_K *)(a + t * a_stride) + i)->d);
            const __m512i tot = _mm512_sub_epi32(I[t], _mm512_slli_epi32(S[t], 5));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dv, yd), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* out[t * out_stride + r] for the n_rows (a multiple of 16) packed rows
 * starting at `packed` (a group boundary) and n_tok q8_K rows: tiles of 8
 * tokens outside, groups inside (a task's groups stay in L2). */
#define DEFINE_GEMM_PACKED(T)                                                                                   \
    static void gemm_packed_##T##_x16(int n, const void *packed, int n_rows, const void *a, size_t a_stride,    \
                                      int n_tok, float *out, size_t out_stride)                                 \
    {                                                                                                           \
        const int nb = n / QK_K, ng = n_rows / 16;                                                              \
        const int pf = n_tok <= 8; /* one tile: the rows stream from memory once, ask for them ahead */         \
        const struct T##_x16 *x = packed;                                                                       \
        for (int t0 = 0; t0 < n_tok; t0 += 8) {                                                                 \
            const uint8_t *at = (const uint8_t *)a + (size_t)t0 * a_stride;                                     \
            const int nt = n_tok - t0 < 8 ? n_tok - t0 : 8;                                                     \
            for (int g = 0; g < ng; g++) {                                                                      \
                const struct T##_x16 *xg = x + (size_t)g * nb;                                                  \
                float *o = out + (size_t)t0 * out_stride + 16 * g;                                              \
                switch (nt) {                                                                                   \
                case 8: T##_x16_tile(nb, xg, at, a_stride, 8, o, out_stride, pf); break;                            \
                case 7: T##_x16_tile(nb, xg, at, a_stride, 7, o, out_stride, pf); break;                            \
                case 6: T##_x16_tile(nb, xg, at, a_stride, 6, o, out_stride, pf); break;                            \
                case 5: T##_x16_tile(nb, xg, at, a_stride, 5, o, out_stride, pf); break;                            \
                case 4: T##_x16_tile(nb, xg, at, a_stride, 4, o, out_stride, pf); break;                            \
                case 3: T##_x16_tile(nb, xg, at, a_stride, 3, o, out_stride, pf); break;                            \
                case 2: T##_x16_tile(nb, xg, at, a_stride, 2, o, out_stride, pf); break;                            \
                default: T##_x16_tile(nb, xg, at, a_stride, 1, o, out_stride, pf); break;                           \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_GEMM_PACKED(q4_K)
DEFINE_GEMM_PACKED(q6_K)

/* ------------------------------ q4_1 and q8_0 repacked: rows in lanes
 *
 * The same idea for the formats with blocks of 32 (SmolLM2 Q4_1: q4_1
 * layers, a q8_0 output head): a group block holds 16 rows x 32 columns in
 * the bytes of 16 blocks, the rows in the 16 int32 lanes.  Dword p of lane
 * r is row r's quant bytes 4p..4p+3, as they were: for q4_1 the low
 * nibbles are elements 4p..4p+3 and the high nibbles 16+4p..16+4p+3, so a
 * block is 4 loads, 8 masks / shifts and 8 vpdpbusd per token, each with 4
 * activations broadcast from memory; q8_0 is 8 dwords stored as q + 128
 * (q ^ 0x80, so that vpdpbusd's unsigned operand holds them) and the
 * token's -128 * sum(y) starts the integer sum.  The per-block float work
 * is one vector of 16 rows per token (d * y.d, and for q4_1 m * y.s), not
 * a scalar per (row, token) as in the row-major tile: an 8-position verify
 * step reads the weights once and costs ~1/5 of the instructions.
 *
 * Per (row, token) the operations are the same whatever the batch: the
 * exact integer I of the block (its order of addition does not matter),
 * then q4_1: acc += fma(I, d * y.d, m * y.s); q8_0: acc = fma(I, d * y.d,
 * acc), block after block in one lane.  The activations' half scales are
 * turned to float (exactly) once per tile by the gemm, [block][token]. */
/* struct q4_1_x16: amx_layout.h */
/* struct q8_0_x16: amx_layout.h */

/* a token's block terms for the tile: q4_1 {y.d, y.s}, q8_0 {y.d, -128 * sum(y.qs) as int bits} */
struct act32 {
    float d;
    union { float s; int32_t c; };
};

/* the tile's activation terms, act[TZ * i + t] for block i, token t < nt */
static void act32_q4_1(int nb, const uint8_t *a, size_t a_stride, int nt, struct act32 *act)
{
    for (int t = 0; t < nt; t++) {
        const struct block_q8_1 *y = (const struct block_q8_1 *)(a + t * a_stride);
        for (int i = 0; i < nb; i++) {
            act[8 * i + t].d = _cvtsh_ss(y[i].d);
            act[8 * i + t].s = _cvtsh_ss(y[i].s);
        }
    }
}

static void act32_q8_0(int nb, const uint8_t *a, size_t a_stride, int nt, struct act32 *act)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < nt; t++) {
        const struct block_q8_0 *y = (const struct block_q8_0 *)(a + t * a_stride);
        for (int i = 0; i < nb; i++) {
            /* sum(q + 128) by vpsadbw, 4 partial sums of 8 bytes */
            const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[i].qs), flip),
                                              _mm256_setzero_si256());
            const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            const int sum = _mm_cvtsi128_si32(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h))) - 32 * 128;
            act[8 * i + t].d = _cvtsh_ss(y[i].d);
            act[8 * i + t].c = -128 * sum;
        }
    }
}

/* the block's integer sum for one token: 8 vpdpbusd of W against the
 * token's 8 activation dwords yq, from s0; two chains when few tokens give
 * the other chains to overlap (the sum is exact either way) */
static inline __attribute__((always_inline)) __m512i dot8_x16(const __m512i *W, const int32_t *yq, __m512i s0,
                                                              const int NT)
{
    if (NT < 3) {
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[1], _mm512_set1_epi32(yq[1]));
        s0 = _mm512_dpbusd_epi32(s0, W[0], _mm512_set1_epi32(yq[0]));
        s0 = _mm512_dpbusd_epi32(s0, W[2], _mm512_set1_epi32(yq[2]));
        s1 = _mm512_dpbusd_epi32(s1, W[3], _mm512_set1_epi32(yq[3]));
        s0 = _mm512_dpbusd_epi32(s0, W[4], _mm512_set1_epi32(yq[4]));
        s1 = _mm512_dpbusd_epi32(s1, W[5], _mm512_set1_epi32(yq[5]));
        s0 = _mm512_dpbusd_epi32(s0, W[6], _mm512_set1_epi32(yq[6]));
        s1 = _mm512_dpbusd_epi32(s1, W[7], _mm512_set1_epi32(yq[7]));
        return _mm512_add_epi32(s0, s1);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) s0 = _mm512_dpbusd_epi32(s0, W[k], _mm512_set1_epi32(yq[k]));
    return s0;
}

/* 16 rows (the group's blocks x[nb]) x NT tokens -> out[t * out_stride + r] */
static inline __attribute__((always_inline)) void q4_1_x16_tile(int nb, const struct q4_1_x16 *x, const uint8_t *a,
                                                                size_t a_stride, const int NT, const struct act32 *act,
                                                                float *out, size_t out_stride, const int pf)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q4_1_x16 *b = x + i;
        if (pf) PREFETCH_AHEAD(b, sizeof *b);
        __m512i W[8];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m512i P = _mm512_loadu_si512(b->qs[p]);
            W[p] = _mm512_and_si512(P, m4);
            W[4 + p] = _mm512_and_si512(_mm512_srli_epi16(P, 4), m4);
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->m));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const int32_t *yq = (const int32_t *)((const struct block_q8_1 *)(a + t * a_stride) + i)->qs;
            const __m512i I = dot8_x16(W, yq, _mm512_setzero_si512(), NT);
            const struct act32 *y = act + 8 * i + t;
            acc[t] = _mm512_add_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dv, _mm512_set1_ps(y->d)),
                                                           _mm512_mul_ps(mv, _mm512_set1_ps(y->s))));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

static inline __attribute__((always_inline)) void q8_0_x16_tile(int nb, const struct q8_0_x16 *x, const uint8_t *a,
                                                                size_t a_stride, const int NT, const struct act32 *act,
                                                                float *out, size_t out_stride, const int pf)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct q8_0_x16 *b = x + i;
        if (pf) PREFETCH_AHEAD(b, sizeof *b);
        __m512i W[8];
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) W[p] = _mm512_loadu_si512(b->qs[p]);
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const int32_t *yq = (const int32_t *)((const struct block_q8_0 *)(a + t * a_stride) + i)->qs;
            const struct act32 *y = act + 8 * i + t;
            const __m512i I = dot8_x16(W, yq, _mm512_set1_epi32(y->c), NT);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dv, _mm512_set1_ps(y->d)), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* As DEFINE_GEMM_PACKED, with the tile's activation terms made first. */
#define DEFINE_GEMM_PACKED_32(T)                                                                                \
    static void gemm_packed_##T##_x16(int n, const void *packed, int n_rows, const void *a, size_t a_stride,    \
                                      int n_tok, float *out, size_t out_stride)                                 \
    {                                                                                                           \
        const int nb = n / 32, ng = n_rows / 16;                                                                \
        const int pf = n_tok <= 8;                                                                              \
        const struct T##_x16 *x = packed;                                                                       \
        struct act32 act[(size_t)nb * 8];                                                                       \
        for (int t0 = 0; t0 < n_tok; t0 += 8) {                                                                 \
            const uint8_t *at = (const uint8_t *)a + (size_t)t0 * a_stride;                                     \
            const int nt = n_tok - t0 < 8 ? n_tok - t0 : 8;                                                     \
            act32_##T(nb, at, a_stride, nt, act);                                                               \
            for (int g = 0; g < ng; g++) {                                                                      \
                const struct T##_x16 *xg = x + (size_t)g * nb;                                                  \
                float *o = out + (size_t)t0 * out_stride + 16 * g;                                              \
                switch (nt) {                                                                                   \
                case 8: T##_x16_tile(nb, xg, at, a_stride, 8, act, o, out_stride, pf); break;                   \
                case 7: T##_x16_tile(nb, xg, at, a_stride, 7, act, o, out_stride, pf); break;                   \
                case 6: T##_x16_tile(nb, xg, at, a_stride, 6, act, o, out_stride, pf); break;                   \
                case 5: T##_x16_tile(nb, xg, at, a_stride, 5, act, o, out_stride, pf); break;                   \
                case 4: T##_x16_tile(nb, xg, at, a_stride, 4, act, o, out_stride, pf); break;                   \
                case 3: T##_x16_tile(nb, xg, at, a_stride, 3, act, o, out_stride, pf); break;                   \
                case 2: T##_x16_tile(nb, xg, at, a_stride, 2, act, o, out_stride, pf); break;                   \
                default: T##_x16_tile(nb, xg, at, a_stride, 1, act, o, out_stride, pf); break;                  \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_GEMM_PACKED_32(q4_1)
DEFINE_GEMM_PACKED_32(q8_0)

/* Row-major tiles of up to 8 tokens (q6_K prompt processing, and q4_K
 * weights that are not repacked).  Per weight block the unpacked quants and scale vectors are built once and used for every token
 * of the tile; what remains per (token, block) is the integer dot itself
 * (vpmaddubsw + vpdpwssd per 64 elements) and three float operations: the
 * tile's d * y.d (and -dmin * y.d) products are made for all tokens with one
 * vector multiply from ydT, the tile's block scales transposed [block][8]
 * by the gemm, and broadcast from memory into the fma.  16 int32 lanes go
 * to float as they are (no fold to 8): the rounding differs from the
 * reference by the order of the sums only, as every SIMD variant's does. */
#define TZ 8

static inline __attribute__((always_inline)) void q4_K_tile_z(int nb, const struct block_q4_K *x, const uint8_t *a,
                                                              size_t a_stride, const int NT, const float *ydT,
                                                              float *res)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m256i mdup_idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m512 acc[TZ];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i sm = q4k_scales_mins(x[i].scales);
        const __m512i sc16 = _mm512_castsi256_si512(sm);
        /* each min twice: madd with the 16 bsums gives the 8 sub-block terms */
        const __m256i mdup = _mm256_permutexvar_epi16(mdup_idx, sm);
        const __m256 yd = _mm256_loadu_ps(ydT + TZ * i);
        float dy[TZ], mdy[TZ];
        _mm256_storeu_ps(dy, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d)), yd));
        _mm256_storeu_ps(mdy, _mm256_mul_ps(_mm256_set1_ps(-_cvtsh_ss(x[i].dmin)), yd));
        __m512i s[TZ];
        for (int j = 0; j < 4; j++) {
            const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j)));
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(b, shift), m4);
            const __m512i c = scale_words(sc16, q4k_idx[j]);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int8_t *yq = ((const struct block_q8_K *)(a + t * a_stride) + i)->qs;
                const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(yq + 64 * j));
                s[t] = j ? _mm512_dpwssd_epi32(s[t], p, c) : _mm512_madd_epi16(p, c);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const struct block_q8_K *y = (const struct block_q8_K *)(a + t * a_stride) + i;
            const __m256i prod = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mdup);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_set1_ps(dy[t]), acc[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(prod)), _mm512_set1_ps(mdy[t]), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) res[t] = _mm512_reduce_add_ps(acc[t]);
}

static inline __attribute__((always_inline)) void q6_K_tile_z(int nb, const struct block_q6_K *x, const uint8_t *a,
                                                              size_t a_stride, const int NT, const float *ydT,
                                                              float *res)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(0x30);
    const __m512i shl_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512 acc[TZ];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i sc256 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc16 = _mm512_castsi256_si512(sc256);
        float dy[TZ];
        _mm256_storeu_ps(dy, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d)), _mm256_loadu_ps(ydT + TZ * i)));
        __m512i s[TZ];
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)));
            const __m512i qa = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, shl_a), m2));
            const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi16(hb, shr_b), m2));
            const __m512i ca = scale_words(sc16, q6k_idx[2 * h]), cb = scale_words(sc16, q6k_idx[2 * h + 1]);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const int8_t *yq = ((const struct block_q8_K *)(a + t * a_stride) + i)->qs + 128 * h;
                const __m512i pa = _mm512_maddubs_epi16(qa, _mm512_loadu_si512(yq));
                s[t] = h ? _mm512_dpwssd_epi32(s[t], pa, ca) : _mm512_madd_epi16(pa, ca);
                s[t] = _mm512_dpwssd_epi32(s[t], _mm512_maddubs_epi16(qb, _mm512_loadu_si512(yq + 64)), cb);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const struct block_q8_K *y = (const struct block_q8_K *)(a + t * a_stride) + i;
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), sc256);
            const __m512i tot = _mm512_sub_epi32(s[t], _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_set1_ps(dy[t]), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) res[t] = _mm512_reduce_add_ps(acc[t]);
}

/* gemm: tiles of 8 tokens over the task's rows (a tile's activations stay
 * in L1/L2 while the rows stream); single-token calls (decode) take the
 * prefetching dots above, row by row. */
#define DEFINE_GEMM_Z(T)                                                                                        \
    static void gemm_##T##_z(int n, const void *w, size_t w_stride, int n_rows, const void *a, size_t a_stride, \
                             int n_tok, float *out, size_t out_stride)                                          \
    {                                                                                                           \
        if (n_tok == 1) {                                                                                       \
            for (int r = 0; r < n_rows; r++) out[r] = vec_dot_##T##_z(n, (const uint8_t *)w + (size_t)r * w_stride, a); \
            return;                                                                                             \
        }                                                                                                       \
        const int nb = n / QK_K;                                                                                \
        float res[TZ], ydT[(size_t)nb * TZ];                                                                    \
        for (int t0 = 0; t0 < n_tok; t0 += TZ) {                                                                \
            const uint8_t *at = (const uint8_t *)a + (size_t)t0 * a_stride;                                     \
            const int nt = n_tok - t0 < TZ ? n_tok - t0 : TZ;                                                   \
            for (int i = 0; i < nb; i++)                                                                        \
                for (int t = 0; t < TZ; t++)                                                                    \
                    ydT[TZ * i + t] = t < nt ? ((const struct block_q8_K *)(at + t * a_stride))[i].d : 0.0f;    \
            for (int r = 0; r < n_rows; r++) {                                                                  \
                const struct block_##T *wr = (const struct block_##T *)((const uint8_t *)w + (size_t)r * w_stride); \
                switch (nt) {                                                                                   \
                case 8: T##_tile_z(nb, wr, at, a_stride, 8, ydT, res); break;                                   \
                case 7: T##_tile_z(nb, wr, at, a_stride, 7, ydT, res); break;                                   \
                case 6: T##_tile_z(nb, wr, at, a_stride, 6, ydT, res); break;                                   \
                case 5: T##_tile_z(nb, wr, at, a_stride, 5, ydT, res); break;                                   \
                case 4: T##_tile_z(nb, wr, at, a_stride, 4, ydT, res); break;                                   \
                case 3: T##_tile_z(nb, wr, at, a_stride, 3, ydT, res); break;                                   \
                case 2: T##_tile_z(nb, wr, at, a_stride, 2, ydT, res); break;                                   \
                default: T##_tile_z(nb, wr, at, a_stride, 1, ydT, res); break;                                  \
                }                                                                                               \
                for (int t = 0; t < nt; t++) out[(size_t)(t0 + t) * out_stride + r] = res[t];                   \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_GEMM_Z(q4_K)
DEFINE_GEMM_Z(q6_K)

/* Attention with 512-bit registers (the shared body's kernels are 256-bit):
 * the same loops as kv_scores / kv_accum there, 16 floats per step.  A
 * head's score: one 16-lane accumulator over the row in order, folded to 8
 * lanes and summed by the 4 heads' hadd tree; its weighted sum: every
 * output element adds its rows' terms in row order.  hd a multiple of 16
 * (scores) or 64 (accum), else the shared 256-bit kernel. */
static inline __attribute__((always_inline)) __m512 load16_f32(const char *row, int i)
{
    return _mm512_loadu_ps((const float *)row + i);
}
static inline __attribute__((always_inline)) __m512 load16_f16(const char *row, int i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const smol_half *)row + i)));
}
/* q8_0 elements [i, i + 16) of a row (i % 16 == 0: one block's half): d * q in float, as the _ref */
static inline __attribute__((always_inline)) __m512 load16_q8_0(const char *row, int i)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)row + i / QK8_0;
    const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + i % QK8_0))));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), x);
}
static inline __attribute__((always_inline)) __m256 fold8(__m512 a)
{
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
}

#define DEFINE_KV_SCORES_Z(T, ROWB, AL)                                                                              \
    static void kv_scores_##T##_z(int hd, const void *k, int n_rows, const float *q, int G, float scale,      \
                                  float *sc, size_t sc_stride, const void *next)                              \
    {                                                                                                         \
        if (hd % 16 || hd % (AL)) { kv_scores_##T##_avx512(hd, k, n_rows, q, G, scale, sc, sc_stride, next); return; } \
        const size_t rb = ROWB(hd);                                                                           \
        for (int g0 = 0; g0 < G; g0 += 4) {                                                                   \
            const int ng = G - g0 < 4 ? G - g0 : 4;                                                           \
            const float *q0 = q + (size_t)g0 * hd, *q1 = q0 + (size_t)(ng > 1) * hd,                          \
                        *q2 = q0 + (size_t)(ng > 2 ? 2 : ng - 1) * hd, *q3 = q0 + (size_t)(ng - 1) * hd;      \
            for (int r = 0; r < n_rows; r++) {                                                                \
                const char *kr = (const char *)k + (size_t)r * rb;                                              \
                if (next && g0 == 0) {                                                                        \
                    const char *pf = (const char *)next + (size_t)r * rb;                      \
                    for (size_t o = 0; o < rb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);      \
                }                                                                                             \
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                   \
                for (int i = 0; i < hd; i += 16) {                                                            \
                    const __m512 kv = load16_##T(kr, i);                                                     \
                    a0 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q0 + i), a0);                                    \
                    a1 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q1 + i), a1);                                    \
                    a2 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q2 + i), a2);                                    \
                    a3 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q3 + i), a3);                                    \
                }                                                                                             \
                const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(fold8(a0), fold8(a1)),                         \
                                                _mm256_hadd_ps(fold8(a2), fold8(a3)));                        \
                float o[4];                                                                                   \
                _mm_storeu_ps(o, _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)), \
                                            _mm_set1_ps(scale)));                                             \
                for (int g = 0; g < ng; g++) sc[(size_t)(g0 + g) * sc_stride + r] = o[g];                     \
            }                                                                                                 \
        }                                                                                                     \
    }

#define DEFINE_KV_ACCUM_Z(T, ROWB, AL)                                                                               \
    static void kv_accum_##T##_z(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G,   \
                                 float *out, const void *next)                                                \
    {                                                                                                         \
        if (hd % 64 || hd % (AL)) { kv_accum_##T##_avx512(hd, v, n_rows, p, p_stride, G, out, next); return; } \
        const size_t rb = ROWB(hd);                                                                           \
        float junk[4][64]; /* a missing head's block: fixed trip counts keep acc in registers */              \
        for (int g0 = 0; g0 < G; g0 += 4) {                                                                   \
            const int ng = G - g0 < 4 ? G - g0 : 4;                                                           \
            const float *pg[4];                                                                               \
            for (int g = 0; g < 4; g++) pg[g] = p + (size_t)(g0 + (g < ng ? g : ng - 1)) * p_stride;         \
            for (int i = 0; i < hd; i += 64) {                                                                \
                float *og[4];                                                                                 \
                for (int g = 0; g < 4; g++) og[g] = g < ng ? out + (size_t)(g0 + g) * hd + i : junk[g];      \
                __m512 acc[4][4];                                                                             \
                _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)                                           \
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                                       \
                        acc[g][c] = g < ng ? _mm512_loadu_ps(og[g] + 16 * c) : _mm512_setzero_ps();           \
                for (int r = 0; r < n_rows; r++) {                                                            \
                    const char *vr = (const char *)v + (size_t)r * rb;                                      \
                    if (next && g0 == 0 && i == 0) {                                                          \
                        const char *pf = (const char *)next + (size_t)r * rb;                  \
                        for (size_t o = 0; o < rb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);  \
                    }                                                                                         \
                    __m512 w[4];                                                                              \
                    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) w[g] = _mm512_set1_ps(pg[g][r]);      \
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                     \
                        const __m512 x = load16_##T(vr, i + 16 * c);                                             \
                        _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)                                   \
                            acc[g][c] = _mm512_fmadd_ps(w[g], x, acc[g][c]);                                  \
                    }                                                                                         \
                }                                                                                             \
                _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)                                           \
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                                       \
                        _mm512_storeu_ps(og[g] + 16 * c, acc[g][c]);                                          \
            }                                                                                                 \
        }                                                                                                     \
    }

#define ROWB_F32_Z(hd) ((size_t)(hd) * 4)
#define ROWB_F16_Z(hd) ((size_t)(hd) * 2)
#define ROWB_Q8_0_Z(hd) ((size_t)(hd) / QK8_0 * sizeof(struct block_q8_0))
DEFINE_KV_SCORES_Z(f32, ROWB_F32_Z, 1)
DEFINE_KV_SCORES_Z(f16, ROWB_F16_Z, 1)
DEFINE_KV_SCORES_Z(q8_0, ROWB_Q8_0_Z, QK8_0)
DEFINE_KV_ACCUM_Z(f32, ROWB_F32_Z, 1)
DEFINE_KV_ACCUM_Z(f16, ROWB_F16_Z, 1)
DEFINE_KV_ACCUM_Z(q8_0, ROWB_Q8_0_Z, QK8_0)

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int smol_cpu_fill_avx512(struct smol_cpu_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c") ||
        !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512vnni"))
        return 0;
    fill_avx512(k);
    init_idx();
    k->vec_dot[SMOL_TYPE_Q4_K] = vec_dot_q4_K_z;
    k->vec_dot[SMOL_TYPE_Q6_K] = vec_dot_q6_K_z;
    k->gemm[SMOL_TYPE_Q4_K] = gemm_q4_K_z;
    k->gemm[SMOL_TYPE_Q6_K] = gemm_q6_K_z;
    k->pack_rows[SMOL_TYPE_Q4_K] = 16;
    k->pack[SMOL_TYPE_Q4_K] = pack_q4_K_x16;
    k->unpack_row[SMOL_TYPE_Q4_K] = smol_x16_unpack_row_q4_K;
    k->gemm_packed[SMOL_TYPE_Q4_K] = gemm_packed_q4_K_x16;
    k->pack_rows[SMOL_TYPE_Q6_K] = 16;
    k->pack[SMOL_TYPE_Q6_K] = smol_x16_pack_q6_K;
    k->unpack_row[SMOL_TYPE_Q6_K] = smol_x16_unpack_row_q6_K;
    k->gemm_packed[SMOL_TYPE_Q6_K] = gemm_packed_q6_K_x16;
    k->pack_rows[SMOL_TYPE_Q4_1] = 16;
    k->pack[SMOL_TYPE_Q4_1] = smol_x16_pack_q4_1;
    k->unpack_row[SMOL_TYPE_Q4_1] = smol_x16_unpack_row_q4_1;
    k->gemm_packed[SMOL_TYPE_Q4_1] = gemm_packed_q4_1_x16;
    k->pack_rows[SMOL_TYPE_Q8_0] = 16;
    k->pack[SMOL_TYPE_Q8_0] = smol_x16_pack_q8_0;
    k->unpack_row[SMOL_TYPE_Q8_0] = smol_x16_unpack_row_q8_0;
    k->gemm_packed[SMOL_TYPE_Q8_0] = gemm_packed_q8_0_x16;
    k->kv_scores[SMOL_TYPE_F32] = kv_scores_f32_z;
    k->kv_scores[SMOL_TYPE_F16] = kv_scores_f16_z;
    k->kv_accum[SMOL_TYPE_F32] = kv_accum_f32_z;
    k->kv_accum[SMOL_TYPE_F16] = kv_accum_f16_z;
    k->kv_scores[SMOL_TYPE_Q8_0] = kv_scores_q8_0_z;
    k->kv_accum[SMOL_TYPE_Q8_0] = kv_accum_q8_0_z;
    k->name = "cpu-avx512";
    return 1;
}
#else
int smol_cpu_fill_avx512(struct smol_cpu_kernels *k) { (void)k; return 0; }
#endif
