/*
 * test_amx.c - the x16 weight layouts and the AMX kernels' scalar twin
 * (kernels/amx_layout.c), on every machine; the AMX kernels themselves
 * (kernels/cpu_amx.c) against the twin where the CPU has AMX.
 *
 *   - pack / unpack_row give every row back byte for byte (q4_K, q6_K, q4_1,
 *     q4_0, q8_0), and the portable packer writes the same bytes as the
 *     AVX-512 table's packers (where this CPU runs them);
 *   - the twin's sub-block integer dots, as its emulated C tiles hold them,
 *     equal bit for bit the dots computed here straight from the original
 *     blocks (an independent decoding of each block format), for every
 *     (token, row, sub-block);
 *   - the twin's floats equal the reference vec_dot (quant_ref.c) within
 *     float-reordering tolerance: |twin - ref| <= 2e-6 * sum_i |w_i a_i|
 *     (both sum the same exact block integers times float scales, ~1-2
 *     roundings of 2^-24 per block term, in different orders; the bound is
 *     test_simd's), and exactly when every scale is 1;
 *   - the twin does not depend on how tokens fall into tiles (a batch equals
 *     its tokens alone, bit for bit), and equals bit for bit the AVX-512 x16
 *     kernels (same float epilogue: where this CPU runs them) and the plain
 *     q4_0 x16 kernel;
 *   - the AMX kernels (variant amx) equal the twin bit for bit on batches of
 *     16 and 16 + 16 + 3 tokens; where the CPU has no AMX this prints the
 *     allowed SKIPPED line for variant amx.
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

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; }
static float nrand(void)
{
    float u = urand() + 1e-7f, v = urand();
    return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v);
}

static const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q4_1, SMOL_TYPE_Q4_0, SMOL_TYPE_Q8_0};
#define N_TYPES 5

static const struct smol_cpu_kernels *variant(const char *name)
{
    const struct smol_cpu_kernels *k = smol_cpu_kernels_variant(name);
    if (!k) printf("SKIPPED: cpu variant %s (not built for or not supported by this CPU)\n", name);
    return k;
}

/* the half scale fields of a block: sane random values, or 1 */
static void set_scales(uint32_t type, uint8_t *blk, int one)
{
    const smol_half h = smol_f32_to_half(one ? 1.0f : 1e-3f + urand() * 1e-2f);
    const smol_half h2 = smol_f32_to_half(one ? 1.0f : 1e-3f + urand() * 1e-2f);
    switch (type) {
    case SMOL_TYPE_Q4_K: case SMOL_TYPE_Q4_1: memcpy(blk, &h, 2); memcpy(blk + 2, &h2, 2); break;
    case SMOL_TYPE_Q6_K: memcpy(blk + offsetof(struct block_q6_K, d), &h, 2); break;
    default: memcpy(blk, &h, 2); break;
    }
}

/* a weight row: raw random bytes with sane scales (q8_0 kept in [-127,
 * 127]), or the reference quantizer's output; `one`: unit scales */
static void make_row(uint32_t type, uint8_t *w, int n, int raw, int one)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    const int nb = n / tr->block_size;
    if (raw) {
        for (size_t i = 0; i < (size_t)nb * tr->type_size; i++) w[i] = (uint8_t)rnd();
        if (type == SMOL_TYPE_Q8_0)
            for (int i = 0; i < nb; i++)
                for (int j = 0; j < 32; j++)
                    if (w[i * tr->type_size + 2 + j] == 0x80) w[i * tr->type_size + 2 + j] = 0x81;
    } else {
        float *f = malloc(n * sizeof *f);
        for (int i = 0; i < n; i++) f[i] = nrand() * 0.02f;
        tr->quantize(f, w, n);
        free(f);
    }
    if (raw || one)
        for (int i = 0; i < nb; i++) set_scales(type, w + (size_t)i * tr->type_size, one);
}

/* n activations quantized to the type's vec_dot_type; `one`: unit scales */
static void make_act(uint32_t atype, uint8_t *a, int n, int one)
{
    float *x = malloc(n * sizeof *x);
    const float s = powf(10.f, urand() * 4 - 2);
    for (int i = 0; i < n; i++) x[i] = nrand() * s;
    if (n > 3) x[rnd() % n] *= 30;
    const struct smol_type_traits *at = smol_type_traits(atype);
    at->quantize(x, a, n);
    free(x);
    if (!one) return;
    for (int i = 0; i < n / at->block_size; i++) {
        uint8_t *blk = a + (size_t)i * at->type_size;
        if (atype == SMOL_TYPE_Q8_K) { const float f1 = 1; memcpy(blk, &f1, 4); continue; }
        const smol_half h1 = smol_f32_to_half(1.0f);
        memcpy(blk, &h1, 2);
        if (atype == SMOL_TYPE_Q8_1) {
            int sum = 0;
            for (int j = 0; j < 32; j++) sum += ((int8_t *)blk)[4 + j];
            const smol_half hs = smol_f32_to_half((float)sum);
            memcpy(blk + 2, &hs, 2);
        }
    }
}

/* element e's integer quant in the weight block format, decoded here from
 * the layouts documented in quant.h (not with the packers' code) */
static int wq(uint32_t type, const uint8_t *row, int e)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    const uint8_t *blk = row + (size_t)(e / tr->block_size) * tr->type_size;
    const int k = e % tr->block_size;
    switch (type) {
    case SMOL_TYPE_Q4_K: {
        const uint8_t b = ((const struct block_q4_K *)blk)->qs[32 * (k / 64) + k % 32];
        return k % 64 < 32 ? b & 0xF : b >> 4;
    }
    case SMOL_TYPE_Q6_K: {
        const struct block_q6_K *x = (const struct block_q6_K *)blk;
        const int h = k / 128, l = k % 32, qu = k % 128 / 32;
        return ((x->ql[64 * h + l + 32 * (qu % 2)] >> (4 * (qu / 2))) & 0xF) | (((x->qh[32 * h + l] >> (2 * qu)) & 3) << 4);
    }
    case SMOL_TYPE_Q4_1: {
        const uint8_t b = ((const struct block_q4_1 *)blk)->qs[k % 16];
        return k < 16 ? b & 0xF : b >> 4;
    }
    case SMOL_TYPE_Q4_0: {
        const uint8_t b = ((const struct block_q4_0 *)blk)->qs[k % 16];
        return (k < 16 ? b & 0xF : b >> 4) - 8;
    }
    default: return ((const struct block_q8_0 *)blk)->qs[k];
    }
}

static int aq(uint32_t atype, const uint8_t *row, int e)
{
    if (atype == SMOL_TYPE_Q8_K) return ((const struct block_q8_K *)row)[e / QK_K].qs[e % QK_K];
    if (atype == SMOL_TYPE_Q8_1) return ((const struct block_q8_1 *)row)[e / 32].qs[e % 32];
    return ((const struct block_q8_0 *)row)[e / 32].qs[e % 32];
}

/* |sum of |w_i * a_i||, the scale of a dot's rounding error */
static double abs_dot(uint32_t wt, const void *w, uint32_t at, const void *a, int n)
{
    float *dw = malloc(n * sizeof *dw), *da = malloc(n * sizeof *da);
    smol_type_traits(wt)->dequant(w, dw, n);
    smol_type_traits(at)->dequant(a, da, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs((double)dw[i] * da[i]);
    free(dw);
    free(da);
    return s;
}

/* one case: rows x n weights (a multiple of 16 rows), ntok activation rows */
struct tcase {
    uint32_t type, atype;
    int n, rows, ntok, one;
    size_t ws, as;
    const struct smol_type_traits *tr, *at;
    uint8_t *w, *a, *packed;
};

static void case_make(struct tcase *c, uint32_t type, int nb, int rows, int ntok, int raw, int one)
{
    memset(c, 0, sizeof *c);
    c->type = type;
    c->tr = smol_type_traits(type);
    c->atype = c->tr->vec_dot_type;
    c->at = smol_type_traits(c->atype);
    c->n = nb * c->tr->block_size;
    c->rows = rows;
    c->ntok = ntok;
    c->one = one;
    c->ws = (size_t)nb * c->tr->type_size + 2 * (rnd() % 2); /* odd strides too */
    c->as = (size_t)nb * c->at->type_size + (c->atype == SMOL_TYPE_Q8_K ? 4 : 2) * (rnd() % 2);
    c->w = malloc(c->ws * rows);
    c->a = malloc(c->as * ntok);
    ck_assert_int_eq(posix_memalign((void **)&c->packed, 64, (size_t)rows * nb * c->tr->type_size), 0);
    for (int r = 0; r < rows; r++) make_row(type, c->w + r * c->ws, c->n, raw, one);
    for (int t = 0; t < ntok; t++) make_act(c->atype, c->a + t * c->as, c->n, one);
    smol_x16_pack(type, c->n, c->w, c->ws, rows, c->packed);
}

static void case_free(struct tcase *c)
{
    free(c->w);
    free(c->a);
    free(c->packed);
}

static const int nbs_k[] = {1, 3, 8}, nbs_32[] = {1, 3, 5, 8, 13};

START_TEST(test_pack_roundtrip)
{
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int rep = 0; rep < 6; rep++) {
            const uint32_t type = types[ti];
            const int nb = smol_type_traits(type)->block_size == QK_K ? nbs_k[rep % 3] : nbs_32[rep % 5];
            struct tcase c;
            case_make(&c, type, nb, 16 * (1 + rep % 3), 1, rep % 2, 0);
            const size_t rb = (size_t)nb * c.tr->type_size;
            uint8_t *row = malloc(rb);
            for (int r = 0; r < c.rows; r++) {
                smol_x16_unpack_row(type, c.n, c.packed, r, row);
                ck_assert_msg(!memcmp(row, c.w + r * c.ws, rb), "%s row %d/%d: unpack(pack) differs", c.tr->name, r,
                              c.rows);
            }
            free(row);
            case_free(&c);
        }
}
END_TEST

/* the AVX-512 table's packers write the bytes of the portable one: q4_K's
 * is its own (512-bit moves), the others are the portable ones, so for them
 * this checks the table's wiring (x16 groups, not another layout) */
START_TEST(test_pack_matches_avx512)
{
    const struct smol_cpu_kernels *k = variant("avx512");
    if (!k) return;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = types[ti];
        if (type == SMOL_TYPE_Q4_0) continue; /* only the AMX table packs q4_0 (the portable packer) */
        ck_assert_ptr_nonnull(k->pack[type]);
        ck_assert_int_eq(k->pack_rows[type], 16);
        for (int rep = 0; rep < 4; rep++) {
            struct tcase c;
            const int nb = smol_type_traits(type)->block_size == QK_K ? nbs_k[rep % 3] : nbs_32[rep % 5];
            case_make(&c, type, nb, 32, 1, rep % 2, 0);
            const size_t bytes = (size_t)c.rows * nb * c.tr->type_size;
            uint8_t *p2 = malloc(bytes);
            k->pack[type](c.n, c.w, c.ws, c.rows, p2);
            ck_assert_msg(!memcmp(p2, c.packed, bytes), "%s: avx512 pack differs from the portable pack", c.tr->name);
            free(p2);
            case_free(&c);
        }
    }
}
END_TEST

/* the twin's integer sub-block dots, bit for bit; its floats against the
 * reference dot; tile grouping does not change a token's bits */
START_TEST(test_twin)
{
    static const int ntoks[] = {1, 3, 16, 19, 35};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int rep = 0; rep < 10; rep++) {
            const uint32_t type = types[ti];
            const int nb = smol_type_traits(type)->block_size == QK_K ? nbs_k[rep % 3] : nbs_32[rep % 5];
            const int one = rep % 5 == 3;
            struct tcase c;
            case_make(&c, type, nb, 16 * (1 + rep % 2), ntoks[rep % 5], rep % 2, one);
            const int sub = smol_amx_sub(type), nsub = c.n / sub;
            const size_t os = c.rows + 5;
            float *out = malloc(sizeof(float) * os * c.ntok), alone[32];
            int32_t *dots = malloc(sizeof(int32_t) * c.ntok * c.rows * nsub);
            smol_amx_twin_gemm(type, c.n, c.packed, c.rows, c.a, c.as, c.ntok, out, os, dots);
            for (int t = 0; t < c.ntok; t++) {
                const uint8_t *ar = c.a + t * c.as;
                for (int r = 0; r < c.rows; r++) {
                    const uint8_t *wr = c.w + r * c.ws;
                    for (int j = 0; j < nsub; j++) {
                        int32_t ref = 0;
                        for (int e = sub * j; e < sub * (j + 1); e++) ref += wq(type, wr, e) * aq(c.atype, ar, e);
                        const int32_t got = dots[((size_t)t * c.rows + r) * nsub + j];
                        ck_assert_msg(got == ref, "%s tok %d row %d sub-block %d: twin %d, blocks %d", c.tr->name, t,
                                      r, j, got, ref);
                    }
                    const float ref = c.tr->vec_dot(c.n, wr, ar), got = out[t * os + r];
                    const double tol = one ? 0 : 2e-6 * abs_dot(type, wr, c.atype, ar, c.n) + 1e-30;
                    ck_assert_msg(fabs((double)ref - got) <= tol, "%s tok %d/%d row %d: ref %.9g twin %.9g (tol %.3g)",
                                  c.tr->name, t, c.ntok, r, ref, got, tol);
                }
                smol_amx_twin_gemm(type, c.n, c.packed, c.rows, ar, c.as, 1, alone, 0, NULL);
                ck_assert_msg(!memcmp(alone, out + t * os, c.rows * sizeof(float)), "%s tok %d/%d: batch and alone differ",
                              c.tr->name, t, c.ntok);
            }
            free(out);
            free(dots);
            case_free(&c);
        }
}
END_TEST

/* one kernel against the twin on a case, bit for bit */
static void same_as_twin(const char *what, smol_gemm_packed_fn fn, struct tcase *c)
{
    const size_t os = c->rows + 3;
    float *o1 = malloc(sizeof(float) * os * c->ntok), *o2 = malloc(sizeof(float) * os * c->ntok);
    smol_amx_twin_gemm(c->type, c->n, c->packed, c->rows, c->a, c->as, c->ntok, o1, os, NULL);
    fn(c->n, c->packed, c->rows, c->a, c->as, c->ntok, o2, os);
    for (int t = 0; t < c->ntok; t++)
        for (int r = 0; r < c->rows; r++)
            ck_assert_msg(!memcmp(&o1[t * os + r], &o2[t * os + r], sizeof(float)),
                          "%s %s tok %d/%d row %d: twin %.9g kernel %.9g", what, c->tr->name, t, c->ntok, r,
                          o1[t * os + r], o2[t * os + r]);
    free(o1);
    free(o2);
}

/* the plain q4_0 x16 kernel (every machine) and the AVX-512 x16 kernels
 * (where they run) make the twin's float operations: same bits */
START_TEST(test_x16_kernels_match_twin)
{
    for (int rep = 0; rep < 6; rep++) {
        struct tcase c;
        case_make(&c, SMOL_TYPE_Q4_0, nbs_32[rep % 5], 32, 1 + rep * 3, rep % 2, rep == 5);
        same_as_twin("plain x16", smol_x16_gemm_q4_0, &c);
        case_free(&c);
    }
    const struct smol_cpu_kernels *k = variant("avx512");
    if (!k) return;
    for (int ti = 0; ti < N_TYPES; ti++) {
        if (types[ti] == SMOL_TYPE_Q4_0) continue;
        for (int rep = 0; rep < 6; rep++) {
            struct tcase c;
            const int nb = smol_type_traits(types[ti])->block_size == QK_K ? nbs_k[rep % 3] : nbs_32[rep % 5];
            case_make(&c, types[ti], nb, 32, (int[]){1, 5, 8, 9, 17, 35}[rep], rep % 2, rep == 5);
            same_as_twin("avx512 x16", k->gemm_packed[types[ti]], &c);
            case_free(&c);
        }
    }
}
END_TEST

/* the AMX kernels against their twin (whole tiles, and tiles + rest) */
START_TEST(test_amx_kernels)
{
    const struct smol_cpu_kernels *k = variant("amx");
    if (!k) return;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = types[ti];
        ck_assert_int_eq(k->pack_rows[type], 16);
        for (int rep = 0; rep < 8; rep++) {
            struct tcase c;
            const int nb = smol_type_traits(type)->block_size == QK_K ? nbs_k[rep % 3] : nbs_32[rep % 5];
            case_make(&c, type, nb, 16 * (1 + rep % 3), (int[]){16, 35, 32, 17}[rep % 4], rep % 2, rep == 7);
            /* the table's packer: the bytes the backend will hand the kernel */
            k->pack[type](c.n, c.w, c.ws, c.rows, c.packed);
            same_as_twin("amx", k->gemm_packed[type], &c);
            case_free(&c);
        }
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("amx");
    TCase *tc = tcase_create("layout");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pack_roundtrip);
    tcase_add_test(tc, test_pack_matches_avx512);
    tcase_add_test(tc, test_twin);
    tcase_add_test(tc, test_x16_kernels_match_twin);
    tcase_add_test(tc, test_amx_kernels);
    suite_add_tcase(s, tc);
    return s;
}
