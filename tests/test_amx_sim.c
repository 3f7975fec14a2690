/*
 * test_amx_sim.c - the AMX kernels of kernels/cpu_amx.c run on any x86-64:
 * the file is compiled here with its AVX-512 intrinsics emulated by SIMDe
 * (libsimde-dev, header-only; fmadd, cvtph and cvtsh replaced below by
 * exact scalar equivalents: SIMDe's portable fmadd is not fused) and its
 * tile instructions (ldtilecfg, tileloadd, tilezero, tdpbsud, tdpbssd,
 * tilestored) emulated in C under the configuration the kernel loads: the
 * shapes are checked as the hardware checks them (a tdp whose A, B and C
 * do not agree would fault there; it fails here).
 *
 * What this covers: the kernels' staging of B tiles from the x16 layouts,
 * the order and addresses of their tile loads, stores and dot products,
 * the tile configuration, and their AVX-512 epilogue, against the scalar
 * twin (smol_amx_twin_gemm), bit for bit, on batches of whole 16-token
 * tiles and a rest.  What it cannot cover: the real instructions' encoding
 * and behaviour (test_simd / test_amx variant amx, on an AMX machine).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_layout.h"
#include "kernels/cpu_kernels.h"
#include "kernels/quant_ref.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

/* exact replacements: fused multiply-add, half -> float */
static inline simde__m512 sim_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c)
{
    float x[16], y[16], z[16];
    simde_mm512_storeu_ps(x, a);
    simde_mm512_storeu_ps(y, b);
    simde_mm512_storeu_ps(z, c);
    for (int i = 0; i < 16; i++) z[i] = fmaf(x[i], y[i], z[i]);
    return simde_mm512_loadu_ps(z);
}
static inline simde__m512 sim_cvtph_ps(simde__m256i h)
{
    uint16_t u[16];
    float f[16];
    simde_mm256_storeu_si256((simde__m256i *)u, h);
    for (int i = 0; i < 16; i++) f[i] = smol_half_to_f32(u[i]);
    return simde_mm512_loadu_ps(f);
}
/* and what this SIMDe (0.7.4) lacks or mis-aliases, lane by lane */
static inline simde__m512i sim_madd_epi16(simde__m512i a, simde__m512i b)
{
    int16_t x[32], y[32];
    int32_t z[16];
    simde_mm512_storeu_si512(x, a);
    simde_mm512_storeu_si512(y, b);
    for (int i = 0; i < 16; i++) z[i] = (int32_t)((uint32_t)(x[2 * i] * y[2 * i]) + (uint32_t)(x[2 * i + 1] * y[2 * i + 1]));
    return simde_mm512_loadu_si512(z);
}
static inline simde__m512 sim_cvtepi32_ps(simde__m512i a)
{
    int32_t x[16];
    float f[16];
    simde_mm512_storeu_si512(x, a);
    for (int i = 0; i < 16; i++) f[i] = (float)x[i];
    return simde_mm512_loadu_ps(f);
}
static inline simde__m512i sim_srai_epi32(simde__m512i a, int imm)
{
    int32_t x[16];
    simde_mm512_storeu_si512(x, a);
    for (int i = 0; i < 16; i++) x[i] = x[i] >> imm; /* arithmetic on gcc / clang */
    return simde_mm512_loadu_si512(x);
}
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 sim_madd_epi16
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps sim_cvtepi32_ps
#undef _mm512_srai_epi32
#define _mm512_srai_epi32 sim_srai_epi32
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps sim_fmadd_ps
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps sim_cvtph_ps
#define _cvtsh_ss(h) smol_half_to_f32(h)

/* the tile unit: 8 registers shaped by the last ldtilecfg */
static __thread struct {
    int rows, colsb;
    uint8_t b[16][64];
} tmm[8];
static __thread int configured;
static __thread long n_dp; /* tile products made (the test checks the kernel used the tiles) */

static void sim_ldtilecfg(const void *cfg)
{
    const uint8_t *c = cfg;
    ck_assert_int_eq(c[0], 1); /* palette 1 */
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, 2);
        tmm[t].rows = c[48 + t];
        tmm[t].colsb = colsb;
        ck_assert(tmm[t].rows <= 16 && tmm[t].colsb <= 64);
        memset(tmm[t].b, 0, sizeof tmm[t].b);
    }
    configured = 1;
}
static void sim_load(int t, const void *base, long stride)
{
    ck_assert(configured && tmm[t].rows > 0);
    for (int m = 0; m < tmm[t].rows; m++) memcpy(tmm[t].b[m], (const uint8_t *)base + m * stride, tmm[t].colsb);
}
static void sim_store(int t, void *base, long stride)
{
    ck_assert(configured && tmm[t].rows > 0);
    for (int m = 0; m < tmm[t].rows; m++) memcpy((uint8_t *)base + m * stride, tmm[t].b[m], tmm[t].colsb);
}
static void sim_zero(int t)
{
    ck_assert(configured);
    memset(tmm[t].b, 0, sizeof tmm[t].b);
}
static void sim_dp(int c, int a, int b, int a_signed, int b_signed)
{
    ck_assert(configured);
    ck_assert_msg(tmm[a].rows == tmm[c].rows && tmm[a].colsb / 4 == tmm[b].rows && tmm[b].colsb == tmm[c].colsb &&
                      c != a && c != b && a != b,
                  "tdp tmm%d, tmm%d, tmm%d: shapes %dx%d, %dx%d, %dx%d do not agree", c, a, b, tmm[c].rows,
                  tmm[c].colsb, tmm[a].rows, tmm[a].colsb, tmm[b].rows, tmm[b].colsb);
    for (int m = 0; m < tmm[c].rows; m++)
        for (int n = 0; n < tmm[c].colsb / 4; n++) {
            uint32_t acc;
            memcpy(&acc, &tmm[c].b[m][4 * n], 4);
            for (int k = 0; k < tmm[b].rows; k++)
                for (int i = 0; i < 4; i++) {
                    const int av = a_signed ? (int8_t)tmm[a].b[m][4 * k + i] : tmm[a].b[m][4 * k + i];
                    const int bv = b_signed ? (int8_t)tmm[b].b[k][4 * n + i] : tmm[b].b[k][4 * n + i];
                    acc += (uint32_t)(av * bv);
                }
            memcpy(&tmm[c].b[m][4 * n], &acc, 4);
        }
    n_dp++;
}

#define SMOL_AMX_SIM 1
#define TILE_LOADCFG(cfg) sim_ldtilecfg(cfg)
#define TILE_LOAD(t, base, stride) sim_load(t, base, (long)(stride))
#define TILE_STORE(t, base, stride) sim_store(t, base, (long)(stride))
#define TILE_ZERO(t) sim_zero(t)
#define TILE_DPBSUD(c, a, b) sim_dp(c, a, b, 1, 0)
#define TILE_DPBSSD(c, a, b) sim_dp(c, a, b, 1, 1)
#include "kernels/cpu_amx.c"

/* the rest of a batch (under 16 tokens): the twin, so that a whole result is comparable */
#define TWIN_FALLBACK(T, TYPE)                                                                                 \
    static void twin_##T(int n, const void *p, int rows, const void *a, size_t as, int nt, float *o, size_t os) \
    {                                                                                                          \
        smol_amx_twin_gemm(TYPE, n, p, rows, a, as, nt, o, os, NULL);                                          \
    }
TWIN_FALLBACK(q4_K, SMOL_TYPE_Q4_K)
TWIN_FALLBACK(q6_K, SMOL_TYPE_Q6_K)
TWIN_FALLBACK(q4_1, SMOL_TYPE_Q4_1)
TWIN_FALLBACK(q4_0, SMOL_TYPE_Q4_0)
TWIN_FALLBACK(q8_0, SMOL_TYPE_Q8_0)

static uint64_t rng = 0x51ed270b27d5a3c1ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; }

/* raw random blocks with sane half scales (q8_0 quants kept in [-127, 127]) */
static void make_rows(uint32_t type, uint8_t *w, size_t bytes)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    for (size_t o = 0; o < bytes; o += tr->type_size) {
        uint8_t *blk = w + o;
        const smol_half h = smol_f32_to_half(1e-3f + urand() * 1e-2f), h2 = smol_f32_to_half(1e-3f + urand() * 1e-2f);
        if (type == SMOL_TYPE_Q6_K) memcpy(blk + offsetof(struct block_q6_K, d), &h, 2);
        else {
            memcpy(blk, &h, 2);
            if (type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q4_1) memcpy(blk + 2, &h2, 2);
        }
        if (type == SMOL_TYPE_Q8_0)
            for (int j = 0; j < 32; j++)
                if (blk[2 + j] == 0x80) blk[2 + j] = 0x81;
    }
}

START_TEST(test_amx_kernels_simulated)
{
    static const struct {
        uint32_t type;
        smol_gemm_packed_fn amx, twin;
    } ks[] = {{SMOL_TYPE_Q4_K, gemm_amx_q4_K, twin_q4_K},
              {SMOL_TYPE_Q6_K, gemm_amx_q6_K, twin_q6_K},
              {SMOL_TYPE_Q4_1, gemm_amx_q4_1, twin_q4_1},
              {SMOL_TYPE_Q4_0, gemm_amx_q4_0, twin_q4_0},
              {SMOL_TYPE_Q8_0, gemm_amx_q8_0, twin_q8_0}};
    for (int ki = 0; ki < 5; ki++) {
        const uint32_t type = ks[ki].type;
        fallback[type] = ks[ki].twin;
        const struct smol_type_traits *tr = smol_type_traits(type), *at = smol_type_traits(tr->vec_dot_type);
        for (int rep = 0; rep < 4; rep++) {
            const int nb = tr->block_size == QK_K ? (int[]){1, 2, 3, 1}[rep] : (int[]){1, 5, 8, 3}[rep];
            const int n = nb * tr->block_size, rows = 16 * (1 + rep % 2), ntok = (int[]){16, 19, 32, 16}[rep];
            const size_t as = (size_t)nb * at->type_size + 4 * (rep % 2), os = rows + 3;
            uint8_t *w = malloc((size_t)rows * nb * tr->type_size), *a = malloc(as * ntok), *packed = NULL;
            ck_assert_int_eq(posix_memalign((void **)&packed, 64, (size_t)rows * nb * tr->type_size), 0);
            float *x = malloc(sizeof(float) * n), *o1 = malloc(sizeof(float) * os * ntok), *o2 = malloc(sizeof(float) * os * ntok);
            make_rows(type, w, (size_t)rows * nb * tr->type_size);
            for (int t = 0; t < ntok; t++) {
                for (int i = 0; i < n; i++) x[i] = (urand() - 0.5f) * (1 + (i % 37 == 0) * 20);
                at->quantize(x, a + t * as, n);
            }
            smol_x16_pack(type, n, w, (size_t)nb * tr->type_size, rows, packed);
            smol_amx_twin_gemm(type, n, packed, rows, a, as, ntok, o1, os, NULL);
            const long dp0 = n_dp;
            ks[ki].amx(n, packed, rows, a, as, ntok, o2, os);
            ck_assert_int_gt(n_dp - dp0, 0);
            for (int t = 0; t < ntok; t++)
                for (int r = 0; r < rows; r++)
                    ck_assert_msg(!memcmp(&o1[t * os + r], &o2[t * os + r], sizeof(float)),
                                  "%s tok %d/%d row %d: twin %.9g simulated amx %.9g", tr->name, t, ntok, r,
                                  o1[t * os + r], o2[t * os + r]);
            free(w);
            free(a);
            free(packed);
            free(x);
            free(o1);
            free(o2);
        }
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("amx_sim");
    TCase *tc = tcase_create("simulated");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_amx_kernels_simulated);
    suite_add_tcase(s, tc);
    return s;
}
#else
START_TEST(test_not_built)
{
    printf("SKIPPED: cpu variant amx (not built for or not supported by this CPU)\n");
    ck_assert_ptr_null(smol_cpu_kernels_variant("amx"));
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("amx_sim");
    TCase *tc = tcase_create("simulated");
    tcase_add_test(tc, test_not_built);
    suite_add_tcase(s, tc);
    return s;
}
#endif
