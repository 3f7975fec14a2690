/*
 * test_simd.c - every SIMD kernel variant against its scalar _ref twin.
 *
 * For each variant this build has (avx2, avxvnni, avx512, amx) and this CPU runs
 * (others print SKIPPED): activation quantizers byte for byte; weight x activation
 * dots and the tiled gemm kernels on random blocks (ref-quantized rows and
 * raw random bytes with sane scales), odd block counts, odd row / token
 * counts and unaligned pointers, within float-reordering tolerance, and
 * exactly when every scale is 1 (then all sums are small integers, so any
 * difference would be an integer error); f32 / f16 dots and axpy; the
 * attention kernels (K rows x G query heads, weighted V sums); the SIMD exp
 * behind silu and softmax.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_layout.h"
#include "kernels/cpu_kernels.h"
#include "kernels/ops_ref.h"
#include "kernels/quant_ref.h"

static const char *variants[] = {"avx2", "avxvnni", "avx512", "amx"};
#define N_VARIANTS 4

/* ------------------------------------------------------------ helpers */

static uint64_t rng = 0x1234567887654321ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float urand(void) { return (rnd() & 0xffffff) / 16777216.0f; } /* [0,1) */
static float nrand(void)
{
    float u = urand() + 1e-7f, v = urand();
    return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v);
}

static const struct smol_cpu_kernels *variant(int i)
{
    const struct smol_cpu_kernels *k = smol_cpu_kernels_variant(variants[i]);
    if (!k) printf("SKIPPED: cpu variant %s (not built for or not supported by this CPU)\n", variants[i]);
    return k;
}

/* random activations: mostly N(0,1) at a random scale, some zero blocks and outliers */
static void fill_act(float *x, int n)
{
    const float s = powf(10.f, urand() * 4 - 2);
    for (int i = 0; i < n; i++) x[i] = nrand() * s;
    if (n >= 512 && rnd() % 2) memset(x + 256, 0, 256 * sizeof *x);
    if (n > 3) x[rnd() % n] *= 30;
}

/* Sets the float scale fields of a weight block to sane random halves (or to
 * 1 when one): random bytes elsewhere are then a valid block. */
static void sane_scales(uint32_t type, uint8_t *blk, int one)
{
    smol_half h = smol_f32_to_half(one ? 1.0f : 1e-3f + urand() * 1e-2f);
    smol_half h2 = smol_f32_to_half(one ? 1.0f : 1e-3f + urand() * 1e-2f);
    switch (type) {
    case SMOL_TYPE_Q4_K: memcpy(blk, &h, 2); memcpy(blk + 2, &h2, 2); break;
    case SMOL_TYPE_Q6_K: memcpy(blk + offsetof(struct block_q6_K, d), &h, 2); break;
    case SMOL_TYPE_Q8_0: memcpy(blk, &h, 2); break;
    case SMOL_TYPE_Q4_1: memcpy(blk, &h, 2); memcpy(blk + 2, &h2, 2); break;
    }
}

/* Activation scales to 1 (exact-integer mode). */
static void unit_act_scales(uint32_t atype, uint8_t *a, int nb)
{
    const struct smol_type_traits *tr = smol_type_traits(atype);
    for (int i = 0; i < nb; i++) {
        uint8_t *blk = a + (size_t)i * tr->type_size;
        if (atype == SMOL_TYPE_Q8_K) { float one = 1; memcpy(blk, &one, 4); }
        else {
            smol_half one = smol_f32_to_half(1.0f);
            memcpy(blk, &one, 2);
            if (atype == SMOL_TYPE_Q8_1) { /* s = d * sum(q) = sum(q) */
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += ((int8_t *)blk)[4 + j];
                smol_half s = smol_f32_to_half((float)sum);
                memcpy(blk + 2, &s, 2);
            }
        }
    }
}

/* Misalignment used for a format's buffers: the natural alignment of its
 * widest scalar field (float d of q8_K, half elsewhere), never 16 or 32, so
 * every vector load is unaligned while struct field access stays defined. */
static size_t skew(uint32_t type) { return type == SMOL_TYPE_Q8_K ? 4 : 2; }

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

static const uint32_t qtypes[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_1};
#define N_QTYPES 4

/* ---------------------------------------------- activation quantizers */

START_TEST(test_quantize_exact)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    const uint32_t types[] = {SMOL_TYPE_Q8_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q8_1};
    for (int ti = 0; ti < 3; ti++) {
        const struct smol_type_traits *tr = smol_type_traits(types[ti]);
        for (int rep = 0; rep < 40; rep++) {
            const int nb = 1 + 2 * (rep % 5), n = nb * tr->block_size;
            float *xb = malloc((n + 1) * sizeof(float));
            const size_t off = (rep & 1) * skew(types[ti]);
            uint8_t *r = malloc(nb * tr->type_size), *s = malloc(nb * tr->type_size + 4);
            float *x = xb + (rep & 1); /* unaligned input on odd reps */
            fill_act(x, n);
            if (rep == 3) /* exact .5 products: x * (127 / 127) */
                for (int i = 0; i < n; i++) x[i] = (float)((int)(rnd() % 255) - 127) + 0.5f * (i % 2) - (i % 64 == 0 ? 0 : 0.0f);
            memset(r, 0, nb * tr->type_size);
            memset(s, 0, nb * tr->type_size + 4);
            k->quantize[types[ti]](x, s + off, n);
            smol_cpu_kernels_ref()->quantize[types[ti]](x, r, n);
            ck_assert_msg(!memcmp(r, s + off, nb * tr->type_size), "%s quantize_%s differs (rep %d, %d blocks)",
                          variants[_i], tr->name, rep, nb);
            free(xb);
            free(r);
            free(s);
        }
    }
}
END_TEST

/* ------------------------------------------------------------- dots */

/* One weight row of nb blocks, raw or ref-quantized, with sane scales. */
static void make_row(uint32_t wt, uint8_t *w, int n, int raw, int one)
{
    const struct smol_type_traits *tr = smol_type_traits(wt);
    const int nb = n / tr->block_size;
    if (raw) {
        for (int i = 0; i < nb * tr->type_size; i++) w[i] = (uint8_t)rnd();
        if (wt == SMOL_TYPE_Q8_0) /* keep weights in ggml's range [-127, 127] */
            for (int i = 0; i < nb; i++)
                for (int j = 0; j < 32; j++)
                    if ((int8_t)w[i * tr->type_size + 2 + j] == -128) w[i * tr->type_size + 2 + j] = 0x81;
        for (int i = 0; i < nb; i++) sane_scales(wt, w + (size_t)i * tr->type_size, one);
    } else {
        float *f = malloc(n * sizeof *f);
        for (int i = 0; i < n; i++) f[i] = nrand() * 0.02f;
        tr->quantize(f, w, n);
        free(f);
        if (one)
            for (int i = 0; i < nb; i++) sane_scales(wt, w + (size_t)i * tr->type_size, 1);
    }
}

START_TEST(test_vec_dot)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const uint32_t wt = qtypes[ti];
        const struct smol_type_traits *tr = smol_type_traits(wt), *at = smol_type_traits(tr->vec_dot_type);
        for (int rep = 0; rep < 60; rep++) {
            const int one = rep % 3 == 2, raw = rep % 2;
            const int nb = 1 + (rep % 7) * (tr->block_size == 256 ? 1 : 3), n = nb * tr->block_size;
            uint8_t *wb = malloc(nb * tr->type_size + 4), *ab = malloc(nb * at->type_size + 4);
            float *x = malloc(n * sizeof *x);
            uint8_t *w = wb + (rep & 1) * skew(wt), *a = ab + ((rep >> 1) & 1) * skew(tr->vec_dot_type);
            make_row(wt, w, n, raw, one);
            fill_act(x, n);
            smol_cpu_kernels_ref()->quantize[tr->vec_dot_type](x, a, n);
            if (one) unit_act_scales(tr->vec_dot_type, a, nb);
            const float r = tr->vec_dot(n, w, a), s = k->vec_dot[wt](n, w, a);
            if (one) ck_assert_msg(r == s, "%s vec_dot %s exact: ref %.9g simd %.9g", variants[_i], tr->name, r, s);
            else {
                const double tol = 2e-6 * abs_dot(wt, w, tr->vec_dot_type, a, n) + 1e-30;
                ck_assert_msg(fabs((double)r - s) <= tol, "%s vec_dot %s: ref %.9g simd %.9g (tol %.3g, %d blocks)",
                              variants[_i], tr->name, r, s, tol, nb);
            }
            free(wb);
            free(ab);
            free(x);
        }
    }
}
END_TEST

/* gemm: odd row and token counts (tile remainders), padded unaligned strides */
/* ntok activation rows of n values, as apart, ref-quantized to atype from
 * fresh random floats (x: n of scratch); one: unit scales */
static void make_acts(uint32_t atype, uint8_t *a, size_t as, int ntok, float *x, int n, int one)
{
    for (int t = 0; t < ntok; t++) {
        fill_act(x, n);
        smol_cpu_kernels_ref()->quantize[atype](x, a + t * as, n);
        if (one) unit_act_scales(atype, a + t * as, n / smol_type_traits(atype)->block_size);
    }
}

START_TEST(test_gemm)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const uint32_t wt = qtypes[ti];
        const struct smol_type_traits *tr = smol_type_traits(wt), *at = smol_type_traits(tr->vec_dot_type);
        ck_assert_ptr_nonnull(k->gemm[wt]);
        for (int rep = 0; rep < 12; rep++) {
            const int one = rep % 4 == 3;
            const int nb = 1 + rep % 3 * 2, n = nb * tr->block_size, rows = 1 + rep % 7, ntok = 1 + (rep * 7) % 10; /* 1..10: one tile, two (rows outside), more */
            const size_t sw = skew(wt), sa = skew(tr->vec_dot_type);
            const size_t ws = (size_t)nb * tr->type_size + sw * (rep % 3), as = (size_t)nb * at->type_size + sa * (rep % 5);
            uint8_t *wbuf = malloc(ws * rows + sw), *abuf = malloc(as * ntok + sa);
            uint8_t *w = wbuf + sw - 1, *a = abuf + sa - 1; /* w + 1, a + 1: skewed starts */
            float *x = malloc(n * sizeof *x), *out = malloc(sizeof(float) * ntok * (rows + 3));
            for (int r = 0; r < rows; r++) make_row(wt, w + 1 + r * ws, n, rep % 2, one);
            make_acts(tr->vec_dot_type, a + 1, as, ntok, x, n, one);
            k->gemm[wt](n, w + 1, ws, rows, a + 1, as, ntok, out, rows + 3);
            for (int t = 0; t < ntok; t++)
                for (int r = 0; r < rows; r++) {
                    const void *wr = w + 1 + r * ws, *ar = a + 1 + t * as;
                    const float ref = tr->vec_dot(n, wr, ar), got = out[t * (rows + 3) + r];
                    const double tol = one ? 0 : 2e-6 * abs_dot(wt, wr, tr->vec_dot_type, ar, n) + 1e-30;
                    ck_assert_msg(fabs((double)ref - got) <= tol, "%s gemm %s row %d tok %d: ref %.9g simd %.9g",
                                  variants[_i], tr->name, r, t, ref, got);
                }
            free(wbuf);
            free(abuf);
            free(x);
            free(out);
        }
    }
}
END_TEST

/* unpack_row(pack(rows)) gives the rows back byte for byte; gemm_packed
 * equals the reference dot within float-reordering tolerance (exactly with
 * unit scales), and a token's results are the same bits alone, in any
 * batch, and from any group of rows */
static void packed_vs_ref(const struct smol_cpu_kernels *k, const char *vname, uint32_t wt)
{
    const struct smol_type_traits *tr = smol_type_traits(wt), *at = smol_type_traits(tr->vec_dot_type);
    const int pr = k->pack_rows[wt];
    ck_assert_int_gt(pr, 0);
    ck_assert_ptr_nonnull(k->unpack_row[wt]);
    ck_assert_ptr_nonnull(k->gemm_packed[wt]);
    static const int ntoks[] = {1, 5, 8, 9, 17, 16, 35}; /* amx: 16-token tiles and the rest */
    for (int rep = 0; rep < 21; rep++) {
        const int one = rep % 7 == 4;
        const int nb = (int[]){1, 3, 8}[rep % 3], n = nb * tr->block_size, rows = pr * (1 + rep % 3);
        const int ntok = ntoks[rep % 7];
        const size_t sw = skew(wt), ws = (size_t)nb * tr->type_size + sw * (rep % 2);
        const size_t sa = skew(tr->vec_dot_type), as = (size_t)nb * at->type_size + sa * (rep % 2);
        uint8_t *wbuf = malloc(ws * rows + sw), *abuf = malloc(as * ntok + sa), *packed = NULL;
        uint8_t *w = wbuf + sw, *a = abuf + sa;
        ck_assert_int_eq(posix_memalign((void **)&packed, 64, (size_t)rows * tr->type_size * nb), 0);
        uint8_t *row = malloc((size_t)nb * tr->type_size);
        float *x = malloc(n * sizeof *x), *out = malloc(sizeof(float) * ntok * (rows + 3)), one_out[64];
        for (int r = 0; r < rows; r++) make_row(wt, w + r * ws, n, rep % 2, one);
        make_acts(tr->vec_dot_type, a, as, ntok, x, n, one);
        k->pack[wt](n, w, ws, rows, packed);
        for (int r = 0; r < rows; r++) {
            k->unpack_row[wt](n, packed, r, row);
            ck_assert_msg(!memcmp(row, w + r * ws, (size_t)nb * tr->type_size), "%s %s row %d/%d: unpack(pack) differs",
                          vname, tr->name, r, rows);
        }
        k->gemm_packed[wt](n, packed, rows, a, as, ntok, out, rows + 3);
        for (int t = 0; t < ntok; t++) {
            for (int r = 0; r < rows; r++) {
                const void *wr = w + r * ws, *ar = a + t * as;
                const float ref = tr->vec_dot(n, wr, ar), got = out[t * (rows + 3) + r];
                const double tol = one ? 0 : 2e-6 * abs_dot(wt, wr, tr->vec_dot_type, ar, n) + 1e-30;
                ck_assert_msg(fabs((double)ref - got) <= tol, "%s packed %s row %d tok %d/%d: ref %.9g simd %.9g",
                              vname, tr->name, r, t, ntok, ref, got);
            }
            /* alone, and from the last group only */
            k->gemm_packed[wt](n, packed, rows, a + t * as, as, 1, one_out, 0);
            ck_assert_msg(!memcmp(one_out, out + t * (rows + 3), rows * sizeof(float)),
                          "%s packed %s tok %d/%d: batch and alone differ", vname, tr->name, t, ntok);
            k->gemm_packed[wt](n, packed + (size_t)(rows - pr) * nb * tr->type_size, pr, a + t * as, as, 1, one_out, 0);
            ck_assert_msg(!memcmp(one_out, out + t * (rows + 3) + rows - pr, pr * sizeof(float)),
                          "%s packed %s tok %d: last group alone differs", vname, tr->name, t);
        }
        free(wbuf);
        free(abuf);
        free(packed);
        free(row);
        free(x);
        free(out);
    }
}

/* against the scalar twin of the rows-in-lanes kernels (smol_amx_twin_gemm
 * on the x16 packing of the same rows), bit for bit: the x8 kernels (avx2,
 * avxvnni) and the x16 ones (avx512) promise the twin's integer terms and
 * float operations per (row, token).  Row counts that are not whole x16
 * groups are padded for the twin with extra rows. */
static void packed_vs_twin(const struct smol_cpu_kernels *k, const char *vname, uint32_t wt)
{
    const struct smol_type_traits *tr = smol_type_traits(wt), *at = smol_type_traits(tr->vec_dot_type);
    const int pr = k->pack_rows[wt];
    static const int ntoks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}; /* every tile size, tiles and a rest */
    for (int rep = 0; rep < 33; rep++) {
        const int one = rep % 6 == 5;
        const int nb = (int[]){1, 3, 8}[rep % 3], n = nb * tr->block_size, rows = pr * (1 + rep % 5);
        const int rows16 = (rows + 15) / 16 * 16, ntok = ntoks[rep % 11];
        const size_t ws = (size_t)nb * tr->type_size, sa = skew(tr->vec_dot_type);
        const size_t as = (size_t)nb * at->type_size + sa * (rep % 2);
        uint8_t *w = malloc(ws * rows16), *abuf = malloc(as * ntok + sa), *a = abuf + sa * (rep % 2);
        uint8_t *pk = NULL, *pk16 = NULL;
        ck_assert_int_eq(posix_memalign((void **)&pk, 64, ws * rows), 0);
        ck_assert_int_eq(posix_memalign((void **)&pk16, 64, ws * rows16), 0);
        float *x = malloc(n * sizeof *x), *out = malloc(sizeof(float) * ntok * rows),
              *twin = malloc(sizeof(float) * ntok * rows16);
        for (int r = 0; r < rows16; r++) make_row(wt, w + r * ws, n, rep % 2, one);
        make_acts(tr->vec_dot_type, a, as, ntok, x, n, one);
        k->pack[wt](n, w, ws, rows, pk);
        smol_x16_pack(wt, n, w, ws, rows16, pk16);
        k->gemm_packed[wt](n, pk, rows, a, as, ntok, out, rows);
        smol_amx_twin_gemm(wt, n, pk16, rows16, a, as, ntok, twin, rows16, NULL);
        for (int t = 0; t < ntok; t++)
            for (int r = 0; r < rows; r++)
                ck_assert_msg(!memcmp(&out[t * rows + r], &twin[t * rows16 + r], sizeof(float)),
                              "%s packed %s (%d rows, %d blocks) tok %d/%d row %d: %.9g, twin %.9g", vname,
                              tr->name, rows, nb, t, ntok, r, out[t * rows + r], twin[t * rows16 + r]);
        free(w); free(abuf); free(pk); free(pk16); free(x); free(out); free(twin);
    }
}

/* repacked weights, each format a variant repacks: packed_vs_ref, packed_vs_twin */
START_TEST(test_packed)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    int tested = 0;
    for (int ti = 0; ti < N_QTYPES; ti++) {
        if (!k->pack[qtypes[ti]]) continue;
        packed_vs_ref(k, variants[_i], qtypes[ti]);
        packed_vs_twin(k, variants[_i], qtypes[ti]);
        tested++;
    }
    if (!tested) printf("note: %s has no repacked weight formats (nothing to repack)\n", variants[_i]);
}
END_TEST

/* ----------------------------------------------------- float formats */

START_TEST(test_float_dots)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    for (int n = 1; n <= 300; n += 7) {
        float *xb = malloc((n + 1) * 4), *yb = malloc((n + 1) * 4), *o1 = malloc(n * 4), *o2b = malloc((n + 1) * 4);
        smol_half *hb = malloc((n + 1) * 2);
        float *x = xb + (n & 1), *y = yb + 1, *o2 = o2b + (n & 1);
        smol_half *h = hb + 1;
        double ax = 0, ah = 0;
        for (int i = 0; i < n; i++) {
            x[i] = nrand();
            y[i] = nrand();
            h[i] = smol_f32_to_half(nrand());
            ax += fabs((double)x[i] * y[i]);
            ah += fabs((double)smol_half_to_f32(h[i]) * y[i]);
        }
        ck_assert(fabs(smol_vec_dot_f32_ref(n, x, y) - k->vec_dot[SMOL_TYPE_F32](n, x, y)) <= 1e-6 * ax + 1e-30);
        ck_assert(fabs(smol_vec_dot_f16_ref(n, h, y) - k->vec_dot[SMOL_TYPE_F16](n, h, y)) <= 1e-6 * ah + 1e-30);
        ck_assert(fabs(smol_vec_dot_f32_ref(n, x, y) - k->kv_dot[SMOL_TYPE_F32](n, x, y)) <= 1e-6 * ax + 1e-30);
        ck_assert(fabs(smol_vec_dot_f16_ref(n, h, y) - k->kv_dot[SMOL_TYPE_F16](n, h, y)) <= 1e-6 * ah + 1e-30);
        const float a = nrand();
        for (int f16 = 0; f16 < 2; f16++) {
            memcpy(o1, y, n * 4);
            memcpy(o2, y, n * 4);
            (f16 ? smol_axpy_f16_ref : smol_axpy_f32_ref)(n, a, f16 ? (const void *)h : x, o1);
            k->kv_axpy[f16 ? SMOL_TYPE_F16 : SMOL_TYPE_F32](n, a, f16 ? (const void *)h : x, o2);
            for (int i = 0; i < n; i++) /* one fused multiply-add vs a rounded product */
                ck_assert_msg(fabsf(o1[i] - o2[i]) <= 1e-6f * (fabsf(o1[i]) + fabsf(a * x[i]) + 10 * fabsf(a)),
                              "%s axpy f%d n %d i %d: %g vs %g", variants[_i], f16 ? 16 : 32, n, i, o1[i], o2[i]);
        }
        free(xb); free(yb); free(o1); free(o2b); free(hb);
    }
}
END_TEST

/* ------------------------------------------------------------ attention */

/* element i of row r of a KV block of rows in type t (f32, f16, q8_0), as the _ref reads it */
static float kv_elem(uint32_t t, const void *rows, int hd, int r, int i)
{
    if (t == SMOL_TYPE_F32) return ((const float *)rows)[(size_t)r * hd + i];
    if (t == SMOL_TYPE_F16) return smol_half_to_f32(((const smol_half *)rows)[(size_t)r * hd + i]);
    const struct block_q8_0 *b = (const struct block_q8_0 *)rows + (size_t)r * (hd / QK8_0) + i / QK8_0;
    return smol_half_to_f32(b->d) * (float)b->qs[i % QK8_0];
}

/* kv_scores / kv_accum against their _ref twins: f32, f16 and q8_0 rows
 * (q8_0: head sizes that are multiples of 32, rows quantized by the _ref
 * quantizer, one block of each row all zero), head sizes with and without a
 * SIMD path (128, 64, 96, 40, 12, 32), G of 1..8 including groups that are
 * not a multiple of 4, 1..33 rows; and a head's results computed with G
 * heads equal, bit for bit, those computed alone (prefill and decode group
 * heads the same way, but the kernels promise it). */
START_TEST(test_attention)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    const int hds[] = {128, 64, 96, 40, 12, 32}, Gs[] = {1, 3, 4, 5, 8}, rows_[] = {1, 7, 32, 33};
    const uint32_t types[] = {SMOL_TYPE_F32, SMOL_TYPE_F16, SMOL_TYPE_Q8_0};
    const smol_kv_scores_fn scores_ref[] = {smol_kv_scores_f32_ref, smol_kv_scores_f16_ref, smol_kv_scores_q8_0_ref};
    const smol_kv_accum_fn accum_ref[] = {smol_kv_accum_f32_ref, smol_kv_accum_f16_ref, smol_kv_accum_q8_0_ref};
    int q8_cases = 0;
    for (int hi = 0; hi < 6; hi++)
        for (int gi = 0; gi < 5; gi++)
            for (int ri = 0; ri < 4; ri++)
                for (int ti = 0; ti < 3; ti++) {
                    const int hd = hds[hi], G = Gs[gi], R = rows_[ri];
                    const uint32_t t = types[ti];
                    if (t == SMOL_TYPE_Q8_0 && hd % QK8_0) continue; /* smol_kv_init refuses it */
                    q8_cases += t == SMOL_TYPE_Q8_0;
                    const char *tn = smol_type_name(t);
                    const size_t rb = t == SMOL_TYPE_Q8_0 ? (size_t)hd / QK8_0 * sizeof(struct block_q8_0)
                                                          : (size_t)hd * (t == SMOL_TYPE_F16 ? 2 : 4);
                    const size_t stride = (size_t)R + 3;
                    uint8_t *kv = malloc((size_t)R * rb + 2);
                    void *rows = kv + 2 * (R & 1); /* unaligned when R is odd */
                    float *q = malloc(sizeof(float) * G * hd), *sc1 = malloc(sizeof(float) * G * stride),
                          *sc2 = malloc(sizeof(float) * G * stride), *sc3 = malloc(sizeof(float) * stride),
                          *o1 = malloc(sizeof(float) * G * hd), *o2 = malloc(sizeof(float) * G * hd),
                          *o3 = malloc(sizeof(float) * hd), *x = malloc(sizeof(float) * hd);
                    double *mag = calloc((size_t)G * hd, sizeof(double));
                    for (int r = 0; r < R; r++) {
                        for (int i = 0; i < hd; i++) x[i] = nrand();
                        if (t == SMOL_TYPE_F32) memcpy((char *)rows + r * rb, x, rb);
                        else if (t == SMOL_TYPE_F16)
                            for (int i = 0; i < hd; i++) ((smol_half *)rows)[(size_t)r * hd + i] = smol_f32_to_half(x[i]);
                        else {
                            if (r % 3 == 1) memset(x + QK8_0 * (r % (hd / QK8_0)), 0, QK8_0 * sizeof *x); /* d = 0 */
                            smol_quantize_q8_0_ref(x, (char *)rows + r * rb, hd);
                        }
                    }
                    for (int i = 0; i < G * hd; i++) q[i] = nrand();
                    const float scale = 0.088f;
                    scores_ref[ti](hd, rows, R, q, G, scale, sc1, stride, NULL);
                    k->kv_scores[t](hd, rows, R, q, G, scale, sc2, stride, rows);
                    for (int g = 0; g < G; g++)
                        for (int r = 0; r < R; r++) {
                            double a = 0;
                            for (int i = 0; i < hd; i++) a += fabs(kv_elem(t, rows, hd, r, i) * q[g * hd + i]);
                            ck_assert_msg(fabs(sc1[g * stride + r] - sc2[g * stride + r]) <= 1e-6 * a * scale + 1e-30,
                                          "%s kv_scores %s hd %d G %d rows %d (%d, %d): %g vs %g", variants[_i],
                                          tn, hd, G, R, g, r, sc1[g * stride + r], sc2[g * stride + r]);
                        }
                    for (int g = 0; g < G; g++) { /* alone */
                        k->kv_scores[t](hd, rows, R, q + g * hd, 1, scale, sc3, stride, NULL);
                        ck_assert(!memcmp(sc3, sc2 + g * stride, (size_t)R * sizeof(float)));
                    }
                    /* weights as a softmax would give; out starts non-zero (accumulation across pages) */
                    for (int i = 0; i < G * (int)stride; i++) sc1[i] = urand();
                    for (int i = 0; i < G * hd; i++) o1[i] = o2[i] = nrand();
                    for (int g = 0; g < G; g++)
                        for (int i = 0; i < hd; i++) {
                            mag[g * hd + i] = fabs(o1[g * hd + i]);
                            for (int r = 0; r < R; r++)
                                mag[g * hd + i] += fabs(sc1[g * stride + r] * kv_elem(t, rows, hd, r, i));
                        }
                    accum_ref[ti](hd, rows, R, sc1, stride, G, o1, NULL);
                    memcpy(o3, o2, sizeof(float) * hd); /* head 0's start, for the alone check */
                    k->kv_accum[t](hd, rows, R, sc1, stride, G, o2, rows);
                    for (int i = 0; i < G * hd; i++) /* per term: a fused multiply-add vs a rounded product */
                        ck_assert_msg(fabs(o1[i] - o2[i]) <= 2e-7 * R * mag[i] + 1e-30,
                                      "%s kv_accum %s hd %d G %d rows %d i %d: %g vs %g", variants[_i], tn,
                                      hd, G, R, i, o1[i], o2[i]);
                    k->kv_accum[t](hd, rows, R, sc1, stride, 1, o3, NULL);
                    ck_assert(!memcmp(o3, o2, sizeof(float) * hd));
                    free(kv); free(q); free(sc1); free(sc2); free(sc3); free(o1); free(o2); free(o3); free(x); free(mag);
                }
    ck_assert_int_eq(q8_cases, 4 * 5 * 4); /* hd 128, 64, 96, 32 */
}
END_TEST

/* ------------------------------------------------ silu and softmax */

START_TEST(test_silu_softmax)
{
    const struct smol_cpu_kernels *k = variant(_i);
    if (!k) return;
    for (int n = 1; n <= 1000; n += 37) {
        float *g1 = malloc(n * 4), *g2 = malloc(n * 4), *up = malloc(n * 4);
        for (int i = 0; i < n; i++) {
            g1[i] = g2[i] = nrand() * (i % 5 ? 3 : 40);
            up[i] = nrand();
        }
        smol_silu_mul_ref(g1, up, n);
        k->silu_mul(g2, up, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabsf(g1[i] - g2[i]) <= 4e-7f * fabsf(g1[i]) + 1e-37f, "%s silu n %d i %d: %g vs %g",
                          variants[_i], n, i, g1[i], g2[i]);
        for (int i = 0; i < n; i++) g1[i] = g2[i] = nrand() * (i % 3 ? 2 : 30);
        smol_softmax_ref(g1, n);
        k->softmax(g2, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabsf(g1[i] - g2[i]) <= 1e-6f * g1[i] + 1e-37f, "%s softmax n %d i %d: %g vs %g",
                          variants[_i], n, i, g1[i], g2[i]);
        free(g1); free(g2); free(up);
    }
    /* exp's range ends: underflow to 0, large arguments */
    float e[16] = {-200, -104, -88, -87.3f, -50, -1e-8f, 0, 1e-8f, 1, 10, 50, 80, 88, -1000, -INFINITY, 0.5f};
    float u[16], ref[16];
    for (int i = 0; i < 16; i++) { u[i] = 1; ref[i] = e[i]; }
    smol_silu_mul_ref(ref, u, 16);
    k->silu_mul(e, u, 16);
    for (int i = 0; i < 16; i++)
        ck_assert_msg(fabsf(ref[i] - e[i]) <= 4e-7f * fabsf(ref[i]) + 1e-37f || (isnan(ref[i]) && isnan(e[i])),
                      "%s silu edge %d: %g vs %g", variants[_i], i, ref[i], e[i]);
}
END_TEST

START_TEST(test_dispatch)
{
    const struct smol_cpu_kernels *k = smol_cpu_kernels(), *r = smol_cpu_kernels_ref();
    ck_assert_ptr_nonnull(k);
    ck_assert_str_eq(r->name, "cpu-ref");
    ck_assert_ptr_null(smol_cpu_kernels_variant("nonsense"));
    printf("cpu kernels in use: %s: %s\n", k->name, smol_cpu_kernels_why());
    /* the reason names the request or the automatic choice, and what the CPU runs */
    const char *env = getenv("SMOL_CPU"), *why = smol_cpu_kernels_why();
    ck_assert_ptr_nonnull(strstr(why, env && *env ? "SMOL_CPU=" : "automatic: "));
    ck_assert_ptr_nonnull(strstr(why, "ref)"));
    /* the 256-bit tables repack the four formats into x8 groups; avxvnni is avx2's table otherwise */
    const struct smol_cpu_kernels *a2 = smol_cpu_kernels_variant("avx2"), *vn = smol_cpu_kernels_variant("avxvnni");
    if (a2) ck_assert_ptr_nonnull(strstr(why, "avx2 "));
    if (vn) ck_assert_ptr_nonnull(strstr(why, "avxvnni "));
    for (int ti = 0; ti < N_QTYPES; ti++) {
        if (a2) ck_assert_int_eq(a2->pack_rows[qtypes[ti]], 8);
        if (vn) {
            ck_assert_int_eq(vn->pack_rows[qtypes[ti]], 8);
            ck_assert_ptr_eq(vn->gemm[qtypes[ti]], a2->gemm[qtypes[ti]]);
            ck_assert_ptr_ne(vn->gemm_packed[qtypes[ti]], a2->gemm_packed[qtypes[ti]]);
        }
    }
    if (vn) ck_assert_str_eq(vn->name, "cpu-avxvnni");
    for (uint32_t t = 0; t < SMOL_TYPE_COUNT; t++) {
        const struct smol_type_traits *tr = smol_type_traits(t);
        if (tr && tr->supported) ck_assert_ptr_nonnull(k->vec_dot[t]);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("simd");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dispatch);
    tcase_add_loop_test(tc, test_quantize_exact, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_vec_dot, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_gemm, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_packed, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_float_dots, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_attention, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_silu_softmax, 0, N_VARIANTS);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return suite();
}
