/*
 * test_quant.c - the scalar reference tensor formats (kernels/quant_ref.c)
 * against references that share no code with them:
 *
 *   - ggml's own dequantization of rows of fixture-a.Q4_K_M.gguf
 *     (tests/fixtures/refs/fixture-a.Q4_K_M.dequant_samples.{f32,json}),
 *     bit for bit;
 *   - random blocks of every type decoded by the Python gguf package, and
 *     float rows encoded by its numpy quantizers (q4_0..q8_0, f16, bf16) or
 *     by the generator's own float32 port of ggml's K-quant quantizers
 *     (tests/fixtures/quant/, written by gen_quant_vectors.py), bit for bit;
 *   - every vec_dot against a double-precision dot of the dequantized
 *     operands, for odd block counts too;
 *   - properties: q8_K scale and bsums, quantize->dequantize error per
 *     format, and the traits table against the block structs.
 *
 * Fixtures are found relative to the repo root (tests run from there; "../"
 * and "../../" are tried too).  A missing fixture prints SKIPPED and why.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/model/gguf.h"
#include "kernels/quant_ref.h"
#include "kernels/cuda/mmvq.h"
#include "kernels/cuda/mmq_tc.h"
#include "kernels/cuda/mmq_imma.h"

/* ============================================================== helpers */

static int fixture_path(char *out, size_t cap, const char *rel)
{
    static const char *prefixes[] = {"", "../", "../../"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        snprintf(out, cap, "%s%s", prefixes[i], rel);
        FILE *f = fopen(out, "rb");
        if (f) { fclose(f); return 1; }
    }
    return 0;
}

/* Whole file into a malloc'd buffer; NULL if absent. */
static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Number of elements whose float bits differ; reports the first. */
static int count_bit_mismatches(const char *what, const float *got, const float *want, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a = smol_f32_to_bits(got[i]), b = smol_f32_to_bits(want[i]);
        if (a != b && bad++ == 0)
            fprintf(stderr, "%s: element %lld: got %.9g (0x%08x), want %.9g (0x%08x)\n", what,
                    (long long)i, got[i], a, want[i], b);
    }
    return bad;
}

/* xorshift64*: deterministic, no libc rand state. */
struct rng { uint64_t s; };
static uint64_t rng_u64(struct rng *r)
{
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}
static float rng_unit(struct rng *r) { return (float)((rng_u64(r) >> 40) * (1.0 / 16777216.0)); }
static float rng_normal(struct rng *r)
{
    float u1 = rng_unit(r), u2 = rng_unit(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* n floats, N(0,1) scaled per 32-element group by 2^[-6, 4) so blocks differ. */
static void rng_row(struct rng *r, float *x, int64_t n)
{
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = exp2f(-6.0f + 10.0f * rng_unit(r));
        x[i] = scale * rng_normal(r);
    }
}

/* Byte offsets of the half-precision scale fields of each block type. */
static int half_fields(uint32_t type, int off[2])
{
    switch (type) {
    case SMOL_TYPE_Q4_0: case SMOL_TYPE_Q5_0: case SMOL_TYPE_Q8_0: off[0] = 0; return 1;
    case SMOL_TYPE_Q4_1: case SMOL_TYPE_Q5_1: case SMOL_TYPE_Q4_K: case SMOL_TYPE_Q5_K:
        off[0] = 0; off[1] = 2; return 2;
    case SMOL_TYPE_Q6_K: off[0] = (int)offsetof(struct block_q6_K, d); return 1;
    default: return 0;
    }
}

/* Random weight blocks: random bytes, scales replaced by finite halves of
 * magnitude 2^[-12, 0) and random sign. */
static void rng_blocks(struct rng *r, uint32_t type, void *dst, int64_t nblocks)
{
    const struct smol_type_traits *t = smol_type_traits(type);
    uint8_t *p = dst;
    int off[2], nf = half_fields(type, off);
    for (int64_t b = 0; b < nblocks; b++, p += t->type_size) {
        for (int i = 0; i < t->type_size; i++) p[i] = (uint8_t)rng_u64(r);
        for (int k = 0; k < nf; k++) {
            float v = exp2f(-12.0f + 12.0f * rng_unit(r)) * (rng_u64(r) & 1 ? -1.0f : 1.0f);
            smol_half h = smol_f32_to_half(v);
            memcpy(p + off[k], &h, 2);
        }
    }
}

/* ================================================== traits and row sizes */

START_TEST(test_traits_table)
{
    static const struct { uint32_t id; const char *name; int bs; size_t ts; uint32_t vdt; } want[] = {
        {SMOL_TYPE_F32, "f32", 1, 4, SMOL_TYPE_F32},
        {SMOL_TYPE_F16, "f16", 1, 2, SMOL_TYPE_F32},
        {SMOL_TYPE_BF16, "bf16", 1, 2, SMOL_TYPE_F32},
        {SMOL_TYPE_Q4_0, "q4_0", 32, sizeof(struct block_q4_0), SMOL_TYPE_Q8_0},
        {SMOL_TYPE_Q4_1, "q4_1", 32, sizeof(struct block_q4_1), SMOL_TYPE_Q8_1},
        {SMOL_TYPE_Q5_0, "q5_0", 32, sizeof(struct block_q5_0), SMOL_TYPE_Q8_0},
        {SMOL_TYPE_Q5_1, "q5_1", 32, sizeof(struct block_q5_1), SMOL_TYPE_Q8_1},
        {SMOL_TYPE_Q8_0, "q8_0", 32, sizeof(struct block_q8_0), SMOL_TYPE_Q8_0},
        {SMOL_TYPE_Q8_1, "q8_1", 32, sizeof(struct block_q8_1), SMOL_TYPE_Q8_1},
        {SMOL_TYPE_Q4_K, "q4_K", 256, sizeof(struct block_q4_K), SMOL_TYPE_Q8_K},
        {SMOL_TYPE_Q5_K, "q5_K", 256, sizeof(struct block_q5_K), SMOL_TYPE_Q8_K},
        {SMOL_TYPE_Q6_K, "q6_K", 256, sizeof(struct block_q6_K), SMOL_TYPE_Q8_K},
        {SMOL_TYPE_Q8_K, "q8_K", 256, sizeof(struct block_q8_K), SMOL_TYPE_Q8_K},
        {SMOL_TYPE_Q2_K, "q2_K", 256, 84, SMOL_TYPE_Q8_K},
        {SMOL_TYPE_Q3_K, "q3_K", 256, 110, SMOL_TYPE_Q8_K},
    };
    /* ggml's byte sizes, independent of our structs */
    ck_assert_uint_eq(sizeof(struct block_q4_0), 18);
    ck_assert_uint_eq(sizeof(struct block_q4_1), 20);
    ck_assert_uint_eq(sizeof(struct block_q5_0), 22);
    ck_assert_uint_eq(sizeof(struct block_q5_1), 24);
    ck_assert_uint_eq(sizeof(struct block_q8_0), 34);
    ck_assert_uint_eq(sizeof(struct block_q8_1), 36);
    ck_assert_uint_eq(sizeof(struct block_q4_K), 144);
    ck_assert_uint_eq(sizeof(struct block_q5_K), 176);
    ck_assert_uint_eq(sizeof(struct block_q6_K), 210);
    ck_assert_uint_eq(sizeof(struct block_q8_K), 292);

    int named = 0;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct smol_type_traits *t = smol_type_traits(want[i].id);
        ck_assert_msg(t != NULL, "type %u has no traits", want[i].id);
        ck_assert_str_eq(t->name, want[i].name);
        ck_assert_str_eq(smol_type_name(want[i].id), want[i].name);
        ck_assert_int_eq(t->block_size, want[i].bs);
        ck_assert_int_eq(t->type_size, (int)want[i].ts);
        ck_assert_uint_eq(t->vec_dot_type, want[i].vdt);
        ck_assert_uint_eq(smol_row_size(want[i].id, 3 * want[i].bs), 3 * want[i].ts);
        ck_assert_uint_eq(smol_row_size(want[i].id, 0), 0);
        if (want[i].bs > 1) ck_assert_uint_eq(smol_row_size(want[i].id, want[i].bs + 1), 0);
    }
    for (uint32_t id = 0; id < SMOL_TYPE_COUNT + 8; id++) {
        const struct smol_type_traits *t = smol_type_traits(id);
        if (!t) {
            ck_assert_str_eq(smol_type_name(id), "unknown");
            ck_assert_uint_eq(smol_row_size(id, 256), 0);
            continue;
        }
        named++;
        if (!t->supported) continue;
        /* a type we compute with has every kernel, and its activation type
         * has the same block size and a quantizer */
        const struct smol_type_traits *a = smol_type_traits(t->vec_dot_type);
        ck_assert_msg(t->dequant && t->vec_dot && t->quantize, "%s lacks a kernel", t->name);
        ck_assert_msg(a && a->quantize && a->dequant, "%s: bad vec_dot_type", t->name);
        ck_assert_int_eq(a->block_size, t->block_size);
    }
    ck_assert_int_eq(named, (int)(sizeof(want) / sizeof(want[0])));
    ck_assert_uint_eq(smol_row_size(SMOL_TYPE_Q4_K, 512), 288);
    ck_assert_uint_eq(smol_row_size(SMOL_TYPE_Q4_K, 100), 0);
    ck_assert_uint_eq(smol_row_size(SMOL_TYPE_F16, 3), 6);
    ck_assert_uint_eq(smol_row_size(SMOL_TYPE_Q8_0, -32), 0);
}
END_TEST

/* ========================== ggml's dequantization of the fixture model */

START_TEST(test_dequant_fixture_model)
{
    char gpath[512], jpath[512], fpath[512], err[SMOL_ERRLEN];
    if (!fixture_path(gpath, sizeof gpath, "tests/fixtures/models/fixture-a.Q4_K_M.gguf") ||
        !fixture_path(jpath, sizeof jpath, "tests/fixtures/refs/fixture-a.Q4_K_M.dequant_samples.json") ||
        !fixture_path(fpath, sizeof fpath, "tests/fixtures/refs/fixture-a.Q4_K_M.dequant_samples.f32")) {
        printf("SKIPPED: test_dequant_fixture_model: fixture-a.Q4_K_M model or dequant_samples not found\n");
        return;
    }
    struct smol_gguf *g = NULL;
    ck_assert_msg(smol_gguf_open(&g, gpath, err) == SMOL_OK, "%s", err);
    json_error_t jerr;
    json_t *root = json_load_file(jpath, 0, &jerr);
    ck_assert_msg(root != NULL, "%s: %s", jpath, jerr.text);
    size_t fsize;
    uint8_t *fbytes = read_all(fpath, &fsize);
    const float *ref = (const float *)fbytes;
    const size_t nref = fsize / sizeof(float);

    json_t *entries = json_object_get(root, "entries");
    ck_assert(json_is_array(entries) && json_array_size(entries) > 0);
    size_t i, rows_checked = 0;
    json_t *e;
    float *row = NULL;
    json_array_foreach(entries, i, e) {
        const char *tname = json_string_value(json_object_get(e, "tensor"));
        const char *ttype = json_string_value(json_object_get(e, "ggml_type"));
        const size_t off = (size_t)json_integer_value(json_object_get(e, "offset_floats"));
        json_t *rows = json_object_get(e, "rows");
        ck_assert(tname && ttype);
        const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, tname);
        ck_assert_msg(t != NULL, "tensor %s not in model", tname);
        ck_assert_msg(strcasecmp(smol_type_name(t->type), ttype) == 0, "%s: type %s, json says %s",
                      tname, smol_type_name(t->type), ttype);
        const int64_t ne0 = t->ne[0], nrows = t->ne[1];
        const size_t rs = smol_row_size(t->type, ne0);
        const struct smol_type_traits *tr = smol_type_traits(t->type);
        ck_assert(rs > 0 && tr && tr->dequant);
        row = realloc(row, (size_t)ne0 * sizeof(float));
        const size_t nsel = json_is_array(rows) ? json_array_size(rows) : (size_t)nrows;
        for (size_t k = 0; k < nsel; k++) {
            const int64_t r = json_is_array(rows) ? json_integer_value(json_array_get(rows, k)) : (int64_t)k;
            ck_assert(r >= 0 && r < nrows);
            ck_assert(off + (k + 1) * (size_t)ne0 <= nref);
            tr->dequant((const uint8_t *)t->data + (size_t)r * rs, row, ne0);
            char what[300];
            snprintf(what, sizeof what, "%s row %lld", tname, (long long)r);
            ck_assert_int_eq(count_bit_mismatches(what, row, ref + off + k * (size_t)ne0, ne0), 0);
            rows_checked++;
        }
    }
    ck_assert_uint_ge(rows_checked, 100);
    free(row);
    free(fbytes);
    json_decref(root);
    smol_gguf_close(&g);
}
END_TEST

/* A q4_K and a q6_K row of the fixture dotted with q8_K activations: our
 * vec_dot against a double dot of ggml's own dequantized row. */
START_TEST(test_vec_dot_fixture_model)
{
    char gpath[512], fpath[512], err[SMOL_ERRLEN];
    if (!fixture_path(gpath, sizeof gpath, "tests/fixtures/models/fixture-a.Q4_K_M.gguf") ||
        !fixture_path(fpath, sizeof fpath, "tests/fixtures/refs/fixture-a.Q4_K_M.dequant_samples.f32")) {
        printf("SKIPPED: test_vec_dot_fixture_model: fixture-a.Q4_K_M model or dequant_samples not found\n");
        return;
    }
    struct smol_gguf *g = NULL;
    ck_assert_msg(smol_gguf_open(&g, gpath, err) == SMOL_OK, "%s", err);
    size_t fsize;
    uint8_t *fbytes = read_all(fpath, &fsize);
    const float *ref = (const float *)fbytes;
    /* (tensor, row, offset of that row in the samples file): see the .json */
    static const struct { const char *name; int row; size_t off; } cases[] = {
        {"blk.0.attn_k.weight", 5, 5 * 256}, {"blk.0.attn_v.weight", 77, 32768 + 77 * 256},
        {"blk.0.ffn_down.weight", 1, 65536 + 768},
    };
    struct rng r = {0x5eed0001};
    float x[768], xa[768];
    struct block_q8_K a[3];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, cases[c].name);
        ck_assert_ptr_nonnull(t);
        const int n = (int)t->ne[0];
        ck_assert(cases[c].off + (size_t)n <= fsize / 4);
        const struct smol_type_traits *tr = smol_type_traits(t->type);
        rng_row(&r, x, n);
        smol_quantize_q8_K_ref(x, a, n);
        smol_dequant_q8_K_ref(a, xa, n);
        double want = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            want += (double)ref[cases[c].off + i] * xa[i];
            mag += fabs((double)ref[cases[c].off + i] * xa[i]);
        }
        const float got = tr->vec_dot(n, (const uint8_t *)t->data + (size_t)cases[c].row * smol_row_size(t->type, n), a);
        ck_assert_msg(fabs(got - want) <= 1e-5 * mag, "%s: got %.9g want %.9g (mag %.3g)", cases[c].name,
                      got, want, mag);
    }
    free(fbytes);
    smol_gguf_close(&g);
}
END_TEST

/* ============================ Python gguf reference vectors (bit exact) */

static const uint32_t dequant_types[] = {
    SMOL_TYPE_F32, SMOL_TYPE_F16, SMOL_TYPE_BF16, SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1, SMOL_TYPE_Q5_0,
    SMOL_TYPE_Q5_1, SMOL_TYPE_Q8_0, SMOL_TYPE_Q8_1, SMOL_TYPE_Q4_K, SMOL_TYPE_Q5_K, SMOL_TYPE_Q6_K,
    SMOL_TYPE_Q8_K,
};
static const uint32_t quant_types[] = {
    SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1, SMOL_TYPE_Q5_0, SMOL_TYPE_Q5_1, SMOL_TYPE_Q8_0, SMOL_TYPE_F16, SMOL_TYPE_BF16,
    SMOL_TYPE_Q4_K, SMOL_TYPE_Q5_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_K,
};

/* Opens tests/fixtures/quant/<kind>_<name>.bin, checks its header; NULL
 * (after printing SKIPPED) when absent. */
static uint8_t *load_vectors(const char *kind, const char *magic, uint32_t type, uint32_t *n, uint32_t *nbytes)
{
    char rel[256], path[512], lname[16];
    const char *name = smol_type_name(type);
    size_t k = 0;
    for (; name[k] && k < sizeof(lname) - 1; k++)
        lname[k] = name[k] >= 'A' && name[k] <= 'Z' ? (char)(name[k] - 'A' + 'a') : name[k];
    lname[k] = 0;
    snprintf(rel, sizeof rel, "tests/fixtures/quant/%s_%s.bin", kind, lname);
    if (!fixture_path(path, sizeof path, rel)) {
        printf("SKIPPED: %s %s: %s not found (run tests/fixtures/gen_quant_vectors.py)\n", kind, name, rel);
        return NULL;
    }
    size_t size;
    uint8_t *buf = read_all(path, &size);
    ck_assert_uint_ge(size, 16);
    ck_assert_msg(memcmp(buf, magic, 4) == 0, "%s: bad magic", path);
    uint32_t hdr[3];
    memcpy(hdr, buf + 4, sizeof hdr);
    ck_assert_uint_eq(hdr[0], type);
    *n = hdr[1];
    *nbytes = hdr[2];
    ck_assert_uint_gt(*n, 0);
    ck_assert_uint_eq(smol_row_size(type, *n), *nbytes);
    ck_assert_uint_eq(size, 16 + (size_t)*nbytes + (size_t)*n * 4);
    return buf;
}

START_TEST(test_dequant_python)
{
    const uint32_t type = dequant_types[_i];
    uint32_t n, nbytes;
    uint8_t *buf = load_vectors("dequant", "SQD1", type, &n, &nbytes);
    if (!buf) return;
    float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    memcpy(want, buf + 16 + nbytes, (size_t)n * 4);
    memset(got, 0xAB, (size_t)n * 4);
    smol_type_traits(type)->dequant(buf + 16, got, n);
    ck_assert_int_eq(count_bit_mismatches(smol_type_name(type), got, want, n), 0);
    free(got);
    free(want);
    free(buf);
}
END_TEST

START_TEST(test_quant_python)
{
    const uint32_t type = quant_types[_i];
    uint32_t n, nbytes;
    uint8_t *buf = load_vectors("quant", "SQQ1", type, &n, &nbytes);
    if (!buf) return;
    float *x = malloc((size_t)n * 4);
    uint8_t *got = malloc(nbytes);
    memcpy(x, buf + 16, (size_t)n * 4);
    memset(got, 0xAB, nbytes);
    smol_type_traits(type)->quantize(x, got, n);
    const uint8_t *want = buf + 16 + (size_t)n * 4;
    const int ts = smol_type_traits(type)->type_size;
    int bad = 0;
    for (uint32_t i = 0; i < nbytes; i++) {
        if (got[i] != want[i] && bad++ == 0)
            fprintf(stderr, "%s: block %u byte %u: got 0x%02x want 0x%02x\n", smol_type_name(type),
                    i / ts, i % ts, got[i], want[i]);
    }
    ck_assert_int_eq(bad, 0);
    free(got);
    free(x);
    free(buf);
}
END_TEST

/* ========================================================= dot products */

static const uint32_t weight_types[] = {
    SMOL_TYPE_F32, SMOL_TYPE_F16, SMOL_TYPE_BF16, SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1, SMOL_TYPE_Q5_0,
    SMOL_TYPE_Q5_1, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_K, SMOL_TYPE_Q5_K, SMOL_TYPE_Q6_K,
};

/* Reference: sum_i w_i a_i in double over the dequantized operands.  q8_1
 * activations carry s = d * sum(q) rounded to half, which the q4_1 / q5_1
 * dots use for the min term (m * s); the reference uses that same s, so it
 * adds m * (s - d * sum(q)) per block.  *mag = sum |w_i a_i| (+ |m s|). */
static double ref_dot(uint32_t wtype, const void *w, const float *wf, const void *a, const float *af, int n,
                      double *mag)
{
    double sum = 0, m = 0;
    for (int i = 0; i < n; i++) {
        sum += (double)wf[i] * af[i];
        m += fabs((double)wf[i] * af[i]);
    }
    if (smol_type_traits(wtype)->vec_dot_type == SMOL_TYPE_Q8_1) {
        const struct block_q8_1 *ab = a;
        for (int b = 0; b < n / QK8_1; b++) {
            const smol_half mh = wtype == SMOL_TYPE_Q4_1 ? ((const struct block_q4_1 *)w)[b].m
                                                         : ((const struct block_q5_1 *)w)[b].m;
            double da_sum = 0;
            for (int j = 0; j < QK8_1; j++) da_sum += af[b * QK8_1 + j];
            const double mb = smol_half_to_f32(mh), s = smol_half_to_f32(ab[b].s);
            sum += mb * (s - da_sum);
            m += fabs(mb * s);
        }
    }
    *mag = m;
    return sum;
}

START_TEST(test_vec_dot)
{
    const uint32_t wtype = weight_types[_i];
    const struct smol_type_traits *wt = smol_type_traits(wtype);
    const struct smol_type_traits *at = smol_type_traits(wt->vec_dot_type);
    const int bs = wt->block_size == 1 ? 32 : wt->block_size;
    static const int nblocks[] = {1, 3, 7, 13};
    enum { MAXN = 13 * 256 };
    float *x = malloc(MAXN * 4), *wf = malloc(MAXN * 4), *af = malloc(MAXN * 4);
    uint8_t *w = malloc(smol_row_size(wtype, MAXN)), *a = malloc(smol_row_size(wt->vec_dot_type, MAXN));
    struct rng r = {0x9e3779b97f4a7c15ULL ^ wtype};
    for (size_t k = 0; k < sizeof(nblocks) / sizeof(nblocks[0]); k++) {
        const int n = nblocks[k] * bs;
        for (int mode = 0; mode < 2; mode++) {
            /* mode 0: weights quantized from random floats; mode 1: random
             * block bytes (every code and scale pattern) */
            if (mode == 0 || wt->block_size == 1) {
                rng_row(&r, x, n);
                wt->quantize(x, w, n);
            } else {
                rng_blocks(&r, wtype, w, n / bs);
            }
            rng_row(&r, x, n);
            at->quantize(x, a, n);
            wt->dequant(w, wf, n);
            at->dequant(a, af, n);
            double mag;
            const double want = ref_dot(wtype, w, wf, a, af, n, &mag);
            const float got = wt->vec_dot(n, w, a);
            ck_assert_msg(mag > 0, "%s: degenerate operands", wt->name);
            ck_assert_msg(fabs((double)got - want) <= 1e-5 * mag,
                          "%s n=%d mode %d: got %.9g want %.9g (|err| %.3g, mag %.3g)", wt->name, n, mode,
                          got, want, fabs(got - want), mag);
        }
    }
    free(x); free(wf); free(af); free(w); free(a);
}
END_TEST

/* ==================================================== activation formats */

START_TEST(test_quantize_q8_K)
{
    enum { NB = 5, N = NB * QK_K };
    static float x[N];
    static struct block_q8_K y[NB];
    struct rng r = {12345};
    rng_row(&r, x, N);
    memset(x, 0, QK_K * sizeof(float));          /* block 0: all zero */
    for (int i = QK_K; i < 2 * QK_K; i++) x[i] = fabsf(x[i]);
    x[QK_K + 17] = 1000.0f;                       /* block 1: positive max */
    x[2 * QK_K + 200] = -1000.0f;                 /* block 2: negative max */
    memset(y, 0x5A, sizeof y);
    smol_quantize_q8_K_ref(x, y, N);

    ck_assert(y[0].d == 0.0f);
    for (int j = 0; j < QK_K; j++) ck_assert_int_eq(y[0].qs[j], 0);
    for (int j = 0; j < QK_K / 16; j++) ck_assert_int_eq(y[0].bsums[j], 0);
    for (int b = 1; b < NB; b++) {
        const float *xb = x + b * QK_K;
        int imax = 0;
        for (int j = 1; j < QK_K; j++) if (fabsf(xb[j]) > fabsf(xb[imax])) imax = j;
        const float iscale = -127.f / xb[imax];
        ck_assert_msg(y[b].d == 1 / iscale, "block %d: d %.9g, want %.9g", b, y[b].d, 1 / iscale);
        ck_assert_int_eq(y[b].qs[imax], -127);    /* the largest maps to -127 (sign flipped) */
        for (int j = 0; j < QK_K; j++) {
            ck_assert_int_ge(y[b].qs[j], -127);
            ck_assert_msg(fabsf(xb[j] - y[b].d * y[b].qs[j]) <= 0.5f * fabsf(y[b].d) * 1.0001f,
                          "block %d elem %d: %g vs %d * %g", b, j, xb[j], y[b].qs[j], y[b].d);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int k = 0; k < 16; k++) s += y[b].qs[16 * j + k];
            ck_assert_msg(y[b].bsums[j] == s, "block %d bsums[%d] = %d, want %d", b, j, y[b].bsums[j], s);
        }
    }
    ck_assert(y[1].d < 0 && y[2].d > 0);
}
END_TEST

START_TEST(test_quantize_q8_0_q8_1)
{
    enum { NB = 9, N = NB * 32 };
    float x[N], y0[N], y1[N];
    struct block_q8_0 q0[NB];
    struct block_q8_1 q1[NB];
    struct rng r = {777};
    rng_row(&r, x, N);
    memset(x + 64, 0, 32 * sizeof(float));
    smol_quantize_q8_0_ref(x, q0, N);
    smol_quantize_q8_1_ref(x, q1, N);
    smol_dequant_q8_0_ref(q0, y0, N);
    smol_dequant_q8_1_ref(q1, y1, N);
    ck_assert_int_eq(count_bit_mismatches("q8_1 vs q8_0", y1, y0, N), 0);
    for (int b = 0; b < NB; b++) {
        int sum = 0, qmax = 0;
        float xmax = 0;
        for (int j = 0; j < 32; j++) {
            ck_assert_int_eq(q0[b].qs[j], q1[b].qs[j]);
            sum += q1[b].qs[j];
            if (abs(q1[b].qs[j]) > qmax) qmax = abs(q1[b].qs[j]);
            if (fabsf(x[32 * b + j]) > xmax) xmax = fabsf(x[32 * b + j]);
        }
        /* d = max|x| / 127; s = d * sum(q) from the float d, then both rounded */
        ck_assert_uint_eq(q0[b].d, q1[b].d);
        ck_assert_uint_eq(q1[b].d, smol_f32_to_half(xmax / 127));
        ck_assert_uint_eq(q1[b].s, smol_f32_to_half(sum * (xmax / 127)));
        ck_assert_int_eq(qmax, b == 2 ? 0 : 127);
    }
}
END_TEST

/* ================================================ quantize -> dequantize */

/* Bounds on the round-trip error of N(0,1) data scaled per 32 elements:
 * rms error over rms(x) (about 1.3x what the format achieves here), and the
 * worst element error over its block's max |x|, from the format where it has
 * a closed form: half a step (max/127, max/8 and max/16 when the code range
 * clips the positive end, range/15, range/31) plus the half rounding of the
 * scale; 1.5x measured for the K-quants, whose scales are fitted. */
static const struct { uint32_t type; double rel_rms, rel_max; } roundtrip[] = {
    {SMOL_TYPE_F32, 0.0, 0.0},
    {SMOL_TYPE_F16, 3e-4, 4.9e-4},   /* 2^-11 */
    {SMOL_TYPE_BF16, 2.5e-3, 3.91e-3}, /* 2^-8 */
    {SMOL_TYPE_Q4_0, 0.12, 0.13},
    {SMOL_TYPE_Q4_1, 0.10, 0.07},
    {SMOL_TYPE_Q5_0, 0.055, 0.065},
    {SMOL_TYPE_Q5_1, 0.05, 0.034},
    {SMOL_TYPE_Q8_0, 0.007, 0.0045},
    {SMOL_TYPE_Q8_1, 0.007, 0.0045},
    {SMOL_TYPE_Q4_K, 0.10, 0.10},
    {SMOL_TYPE_Q5_K, 0.05, 0.05},
    {SMOL_TYPE_Q6_K, 0.025, 0.025},
    {SMOL_TYPE_Q8_K, 0.015, 0.00395}, /* 0.5/127, d kept as f32 */
};

START_TEST(test_roundtrip_error)
{
    const uint32_t type = roundtrip[_i].type;
    const struct smol_type_traits *t = smol_type_traits(type);
    enum { N = 16 * 256 };
    static float x[N], y[N];
    uint8_t *q = malloc(smol_row_size(type, N));
    struct rng r = {4242 + type};
    rng_row(&r, x, N);
    t->quantize(x, q, N);
    t->dequant(q, y, N);
    double se = 0, sx = 0, worst = 0;
    const int bs = t->block_size == 1 ? 32 : t->block_size;
    for (int b = 0; b < N / bs; b++) {
        double amax = 0, emax = 0;
        for (int j = b * bs; j < (b + 1) * bs; j++) {
            const double e = fabs((double)y[j] - x[j]);
            se += e * e;
            sx += (double)x[j] * x[j];
            if (fabs(x[j]) > amax) amax = fabs(x[j]);
            if (e > emax) emax = e;
        }
        if (emax / amax > worst) worst = emax / amax;
    }
    const double rel_rms = sqrt(se / sx);
    if (getenv("QUANT_PRINT_ERR")) printf("%s rms %.4g max %.4g\n", t->name, rel_rms, worst);
    ck_assert_msg(rel_rms <= roundtrip[_i].rel_rms && worst <= roundtrip[_i].rel_max,
                  "%s: rms err %.4g (bound %.4g), max err / block amax %.4g (bound %.4g)", t->name, rel_rms,
                  roundtrip[_i].rel_rms, worst, roundtrip[_i].rel_max);
    free(q);
}
END_TEST

/* =================================== the CUDA q8 mat-vec's host twins */

/* kernels/cuda/mmvq.h on the CPU: the device's repacked layouts and lane dots, walked task by
 * task as a warp's lanes walk them, must give the dot of the reference-dequantized weights
 * with the q8a activations (d * q) to float rounding, for every type and row; the q8a
 * quantizer must round each element to its nearest level. */
static const uint32_t mmvq_types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0, SMOL_TYPE_Q4_1};

START_TEST(test_mmvq_host)
{
    const uint32_t t = mmvq_types[_i];
    const struct smol_type_traits *tr = smol_type_traits(t);
    const int rows = 7, cols = 768;
    ck_assert(smol_mmvq_type_ok(t));
    unsigned seed = 99 + _i;
    float *wf = malloc((size_t)rows * cols * 4), *wd = malloc((size_t)rows * cols * 4), *x = malloc(cols * 4);
    for (int i = 0; i < rows * cols; i++) wf[i] = (float)((rand_r(&seed) % 2001) - 1000) / 1000.0f;
    for (int i = 0; i < cols; i++) x[i] = (float)((rand_r(&seed) % 2001) - 1000) / 250.0f * (i % 7 == 0 ? 3 : 1);
    const size_t rb = smol_row_size(t, cols), nb = (size_t)rows * cols / tr->block_size;
    uint8_t *wq = malloc(rb * rows), *wr = malloc(rb * rows);
    for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * rb, cols);
    for (int r = 0; r < rows; r++) tr->dequant(wq + r * rb, wd + (size_t)r * cols, cols);
    if (smol_mmvq_repacked(t)) smol_mmvq_repack(t, wr, wq, nb);
    else memcpy(wr, wq, rb * rows);
    int8_t q[768];
    struct smol_q8a sa[768 / 32];
    smol_q8a_quantize_ref(x, cols, q, sa);
    for (int b = 0; b < cols / 32; b++) {
        int s0 = 0, s1 = 0;
        for (int j = 0; j < 32; j++) {
            const float e = x[32 * b + j] - sa[b].d * q[32 * b + j];
            ck_assert_msg(fabsf(e) <= 0.5f * sa[b].d * 1.0001f, "q8a block %d element %d off by %g (d %g)", b, j, e,
                          sa[b].d);
            if (j < 16) s0 += q[32 * b + j]; else s1 += q[32 * b + j];
        }
        ck_assert(sa[b].s0 == sa[b].d * (float)s0 && sa[b].s1 == sa[b].d * (float)s1);
    }
    for (int r = 0; r < rows; r++) {
        double ref = 0, mag = 0;
        for (int c = 0; c < cols; c++) {
            const double v = (double)wd[(size_t)r * cols + c] * ((double)sa[c / 32].d * q[c]);
            ref += v;
            mag += fabs(v);
        }
        const float got = smol_mmvq_row_ref(t, wr, nb, r, cols, q, sa);
        ck_assert_msg(fabs(got - ref) <= 1e-5 * mag + 1e-6, "%s row %d: lanes %.7g, reference %.7g", tr->name, r,
                      (double)got, ref);
    }
    free(wf); free(wd); free(x); free(wq); free(wr);
}
END_TEST

/* kernels/cuda/mmq_tc.h on the CPU: the tensor-core GEMM's tile rows.  For every row and K step
 * of a weight in the device layout (mmvq.h, plus SMOL_GEMM_PAD bytes), the pieces the kernel
 * copies with cp.async are aligned to their size (a cp.async requirement), stay inside the copy,
 * fill the row's shared bytes without overlap, and decode (the kernel's own smol_gemm_decode,
 * from bytes poisoned where no piece wrote) to the reference dequantization of those 128
 * elements, to float rounding. */
START_TEST(test_gemm_host)
{
    const uint32_t t = mmvq_types[_i];
    const struct smol_type_traits *tr = smol_type_traits(t);
    const int kq = t == SMOL_TYPE_Q4_K || t == SMOL_TYPE_Q6_K;
    const int widths[2] = {768, kq ? 512 : 384};   /* 384: an odd number of 128-steps of 32-blocks */
    ck_assert(smol_gemm_type_ok(t));
    for (int wi = 0; wi < 2; wi++) {
        const int rows = 5, cols = widths[wi], np = SMOL_GEMM_NP(t), rb = SMOL_GEMM_RB(t);
        unsigned seed = 7 + _i + 31 * wi;
        float *wf = malloc((size_t)rows * cols * 4), *wd = malloc((size_t)rows * cols * 4);
        for (int i = 0; i < rows * cols; i++) wf[i] = (float)((rand_r(&seed) % 2001) - 1000) / 1000.0f;
        const size_t row_bytes = smol_row_size(t, cols), nb = (size_t)rows * cols / tr->block_size;
        const size_t total = row_bytes * rows;
        uint8_t *wq = malloc(total), *w = calloc(1, total + SMOL_GEMM_PAD);
        for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * row_bytes, cols);
        for (int r = 0; r < rows; r++) tr->dequant(wq + r * row_bytes, wd + (size_t)r * cols, cols);
        if (smol_mmvq_repacked(t)) smol_mmvq_repack(t, w, wq, nb);
        else memcpy(w, wq, total);
        ck_assert_int_le(rb, 144);
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < cols / SMOL_GEMM_BK; k++) {
                uint8_t raw[144], used[144] = {0};
                memset(raw, 0xA5, sizeof raw);
                for (int p = 0; p < np; p++) {
                    size_t src;
                    int off;
                    const int bytes = smol_gemm_piece(t, p, nb, r, k, cols, &src, &off);
                    ck_assert_msg(bytes == 16 || bytes == 8 || bytes == 4, "%s piece %d: %d bytes", tr->name, p, bytes);
                    ck_assert_msg(src % bytes == 0 && off % bytes == 0, "%s row %d step %d piece %d: src %zu off %d "
                                  "not aligned to %d", tr->name, r, k, p, src, off, bytes);
                    ck_assert_msg(src + bytes <= total + SMOL_GEMM_PAD && off + bytes <= rb, "%s piece %d out of bounds",
                                  tr->name, p);
                    for (int b = 0; b < bytes; b++) {
                        ck_assert_msg(!used[off + b], "%s piece %d overlaps another at byte %d", tr->name, p, off + b);
                        used[off + b] = 1;
                    }
                    memcpy(raw + off, w + src, bytes);
                }
                for (int j = 0; j < 4; j++) {
                    float y[32];
                    smol_gemm_decode(t, raw, r, k, cols, j, y);
                    for (int l = 0; l < 32; l++) {
                        const float ref = wd[(size_t)r * cols + SMOL_GEMM_BK * k + 32 * j + l];
                        ck_assert_msg(fabsf(y[l] - ref) <= 1e-6f * (fabsf(ref) + 1.0f), "%s %dx%d row %d step %d "
                                      "element %d: tile %.8g, reference %.8g", tr->name, rows, cols, r, k,
                                      32 * j + l, (double)y[l], (double)ref);
                    }
                }
            }
        free(wf); free(wd); free(wq); free(w);
    }
}
END_TEST

/* kernels/cuda/mmq_imma.h on the CPU: the int8 GEMM's tile rows.  For every row, K step and
 * 32-element chunk of a q4_K / q6_K / q8_0 weight in the device layout, the int8 values the
 * kernel hands the mma (smol_imma_unpack, from the cp.async pieces of mmq_tc.h) equal the
 * integers of the GGUF block as quant_ref.c reads them (q6_K less 32), the chunk's scales times
 * them give the reference dequantization, the integer dots (smol_imma_isum: what the mma's
 * int32 accumulators hold) equal a plain scalar loop over those integers and the q8a bytes, bit
 * for bit, and the (row, token) twin (smol_imma_row_ref: the kernel's order and expressions) is
 * the float64 dot of the reference-dequantized weights and the dequantized activations (d * q)
 * to f32 rounding: err <= 2^-24 * (4 per chunk + 4) * (the magnitudes of every term the kernel
 * adds: scaled integer dots, q4_K min terms; plus sum |w x| for the reference's own rounding). */
static const uint32_t imma_types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0};

/* integer e of a row of GGUF blocks as quant_ref.c's decoders read it (q6_K: minus 32) */
static int imma_ref_int(uint32_t t, const uint8_t *row, int e)
{
    if (t == SMOL_TYPE_Q4_K) {
        const struct block_q4_K *b = (const struct block_q4_K *)row + e / QK_K;
        const int el = e % QK_K;
        return (b->qs[32 * (el / 64) + el % 32] >> (4 * ((el % 64) / 32))) & 0xF;
    }
    if (t == SMOL_TYPE_Q6_K) {
        const struct block_q6_K *b = (const struct block_q6_K *)row + e / QK_K;
        const int el = e % QK_K, h = el / 128, kq = (el % 128) / 32, l = el % 32;
        const int lo = (b->ql[64 * h + l + 32 * (kq & 1)] >> (4 * (kq >> 1))) & 0xF;
        const int hi = (b->qh[32 * h + l] >> (2 * kq)) & 3;
        return (lo | hi << 4) - 32;
    }
    return ((const struct block_q8_0 *)row + e / 32)->qs[e % 32];
}

START_TEST(test_imma_host)
{
    const uint32_t t = imma_types[_i];
    const struct smol_type_traits *tr = smol_type_traits(t);
    const int kq = t != SMOL_TYPE_Q8_0;
    const int widths[2] = {768, kq ? 512 : 384};
    enum { NTOK = 3 };
    ck_assert(smol_imma_type_ok(t) && smol_gemm_type_ok(t));
    ck_assert(!smol_imma_type_ok(SMOL_TYPE_Q4_0) && !smol_imma_type_ok(SMOL_TYPE_Q4_1));
    double worst = 0;
    for (int wi = 0; wi < 2; wi++) {
        const int rows = 5, cols = widths[wi];
        unsigned seed = 1234 + 17 * _i + 101 * wi;
        float *wf = malloc((size_t)rows * cols * 4), *wd = malloc((size_t)rows * cols * 4);
        float *x = malloc((size_t)NTOK * cols * 4);
        int8_t *q = malloc((size_t)NTOK * cols);
        struct smol_q8a *sa = malloc((size_t)NTOK * (cols / 32) * sizeof *sa);
        for (int i = 0; i < rows * cols; i++)  /* some rows all positive: q4_K's mins at work */
            wf[i] = (float)((rand_r(&seed) % 2001) - (i / cols == 1 ? 0 : 1000)) / 1000.0f;
        for (int i = 0; i < NTOK * cols; i++)  /* token 2 all negative: sums far from 0 */
            x[i] = (float)((rand_r(&seed) % 2001) - (i / cols == 2 ? 2001 : 1000)) / 250.0f * (i % 7 == 0 ? 3 : 1);
        const size_t row_bytes = smol_row_size(t, cols), nb = (size_t)rows * cols / tr->block_size;
        const size_t total = row_bytes * rows;
        uint8_t *wq = malloc(total), *w = calloc(1, total + SMOL_GEMM_PAD);
        for (int r = 0; r < rows; r++) tr->quantize(wf + (size_t)r * cols, wq + r * row_bytes, cols);
        for (int r = 0; r < rows; r++) tr->dequant(wq + r * row_bytes, wd + (size_t)r * cols, cols);
        if (smol_mmvq_repacked(t)) smol_mmvq_repack(t, w, wq, nb);
        else memcpy(w, wq, total);
        for (int tk = 0; tk < NTOK; tk++)
            smol_q8a_quantize_ref(x + (size_t)tk * cols, cols, q + (size_t)tk * cols, sa + (size_t)tk * (cols / 32));
        for (int r = 0; r < rows; r++) {
            const uint8_t *grow = wq + r * row_bytes;
            for (int k = 0; k < cols / SMOL_GEMM_BK; k++) {
                uint8_t raw[144];
                memset(raw, 0xA5, sizeof raw);
                for (int p = 0; p < SMOL_GEMM_NP(t); p++) {
                    size_t src;
                    int off;
                    const int bytes = smol_gemm_piece(t, p, nb, r, k, cols, &src, &off);
                    memcpy(raw + off, w + src, (size_t)bytes);
                }
                for (int j = 0; j < 4; j++) {
                    const int e0 = SMOL_GEMM_BK * k + 32 * j;
                    uint32_t wv[8];
                    float sc[2], mn;
                    smol_imma_unpack(t, raw, j, wv);
                    smol_imma_scales(t, raw, r, k, cols, j, sc, &mn);
                    int qi[32];
                    for (int l = 0; l < 32; l++) {
                        qi[l] = imma_ref_int(t, grow, e0 + l);
                        const int got = (int8_t)(wv[l / 4] >> (8 * (l % 4)));
                        ck_assert_msg(got == qi[l], "%s row %d step %d chunk %d element %d: int8 %d, block %d", tr->name,
                                      r, k, j, l, got, qi[l]);
                        const float y = sc[l / 16] * (float)qi[l] - mn, ref = wd[(size_t)r * cols + e0 + l];
                        ck_assert_msg(fabsf(y - ref) <= 1e-6f * (fabsf(ref) + 1.0f), "%s row %d element %d: scales give "
                                      "%.8g, reference %.8g", tr->name, r, e0 + l, (double)y, (double)ref);
                    }
                    for (int tk = 0; tk < NTOK; tk++) {
                        int32_t a[8];
                        const int8_t *qa = q + (size_t)tk * cols + e0;
                        memcpy(a, qa, 32);
                        int s0 = 0, s1 = 0;
                        for (int l = 0; l < 16; l++) s0 += qi[l] * qa[l];
                        for (int l = 16; l < 32; l++) s1 += qi[l] * qa[l];
                        ck_assert_int_eq(smol_imma_isum(wv, a, 0, 4), s0);
                        ck_assert_int_eq(smol_imma_isum(wv, a, 4, 8), s1);
                        ck_assert_int_eq(smol_imma_isum(wv, a, 0, 8), s0 + s1);
                    }
                }
            }
            for (int tk = 0; tk < NTOK; tk++) {
                const int8_t *qt = q + (size_t)tk * cols;
                const struct smol_q8a *st = sa + (size_t)tk * (cols / 32);
                double ref = 0, mag = 0;
                for (int c = 0; c < cols; c++) {
                    const double v = (double)wd[(size_t)r * cols + c] * ((double)st[c / 32].d * qt[c]);
                    ref += v;
                    mag += fabs(v);  /* the reference's rounding of each weight to f32 */
                }
                /* the magnitudes of the twin's own terms, in float64 */
                double terms = 0;
                for (int k = 0; k < cols / SMOL_GEMM_BK; k++) {
                    uint8_t raw[144];
                    for (int p = 0; p < SMOL_GEMM_NP(t); p++) {
                        size_t src;
                        int off;
                        const int bytes = smol_gemm_piece(t, p, nb, r, k, cols, &src, &off);
                        memcpy(raw + off, w + src, (size_t)bytes);
                    }
                    for (int j = 0; j < 4; j++) {
                        uint32_t wv[8];
                        int32_t a[8];
                        float sc[2], mn;
                        const struct smol_q8a xs = st[4 * k + j];
                        smol_imma_unpack(t, raw, j, wv);
                        smol_imma_scales(t, raw, r, k, cols, j, sc, &mn);
                        memcpy(a, qt + SMOL_GEMM_BK * k + 32 * j, 32);
                        terms += fabs((double)sc[0] * xs.d * smol_imma_isum(wv, a, 0, 4)) +
                                 fabs((double)sc[1] * xs.d * smol_imma_isum(wv, a, 4, 8)) +
                                 fabs((double)mn * ((double)xs.s0 + xs.s1));
                    }
                }
                const float got = smol_imma_row_ref(t, w, nb, r, cols, qt, st);
                const double bound = ldexp(1.0, -24) * (4.0 * (cols / 32) + 4.0) * (terms + mag);
                const double err = fabs((double)got - ref);
                if (terms > 0 && err / terms > worst) worst = err / terms;
                ck_assert_msg(err <= bound, "%s %dx%d row %d token %d: twin %.9g, float64 %.9g (err %.3g, bound %.3g)",
                              tr->name, rows, cols, r, tk, (double)got, ref, err, bound);
            }
        }
        free(wf); free(wd); free(x); free(q); free(sa); free(wq); free(w);
    }
    if (getenv("QUANT_PRINT_ERR")) printf("imma %s: worst |twin - float64| / sum|terms| %.3g\n", tr->name, worst);
}
END_TEST

/* ================================================================ suite */

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("ref");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_traits_table);
    tcase_add_test(tc, test_dequant_fixture_model);
    tcase_add_test(tc, test_vec_dot_fixture_model);
    tcase_add_loop_test(tc, test_dequant_python, 0, (int)(sizeof(dequant_types) / sizeof(dequant_types[0])));
    tcase_add_loop_test(tc, test_quant_python, 0, (int)(sizeof(quant_types) / sizeof(quant_types[0])));
    tcase_add_loop_test(tc, test_vec_dot, 0, (int)(sizeof(weight_types) / sizeof(weight_types[0])));
    tcase_add_test(tc, test_quantize_q8_K);
    tcase_add_test(tc, test_quantize_q8_0_q8_1);
    tcase_add_loop_test(tc, test_roundtrip_error, 0, (int)(sizeof(roundtrip) / sizeof(roundtrip[0])));
    tcase_add_loop_test(tc, test_mmvq_host, 0, (int)(sizeof(mmvq_types) / sizeof(mmvq_types[0])));
    tcase_add_loop_test(tc, test_gemm_host, 0, (int)(sizeof(mmvq_types) / sizeof(mmvq_types[0])));
    tcase_add_loop_test(tc, test_imma_host, 0, (int)(sizeof(imma_types) / sizeof(imma_types[0])));
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return quant_suite();
}
