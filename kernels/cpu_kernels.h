/*
 * cpu_kernels.h - the table of CPU kernels the CPU backend calls, chosen
 * once at startup from what the processor supports.  Every entry has a
 * scalar _ref twin in quant_ref.h / ops_ref.h that is the specification;
 * faster variants (AVX2, AVX-512, VNNI) replace entries and are tested
 * against those twins.  SMOL_CPU=ref in the environment forces the scalar
 * table (for tests and for bisecting a numeric difference); SMOL_CPU=avx2,
 * avxvnni, avx512 or amx forces that variant (if the CPU runs it; else a
 * line on stderr says so and the best variant the CPU runs is used).  The
 * automatic choice is the first the CPU runs of amx, avx512, avxvnni
 * (AVX2 with 256-bit VNNI), avx2, ref.  "amx" is the
 * AVX-512 table whose repacked-weight matmuls run on the AMX tile unit for
 * whole tiles of 16 tokens (cpu_amx.c); it is the automatic choice where
 * the CPU and the kernel allow it, decode staying on the AVX-512 kernels.
 */
#ifndef SMOL_CPU_KERNELS_H
#define SMOL_CPU_KERNELS_H

#include "quant_ref.h"
#include "ops_ref.h"

typedef void (*smol_axpy_fn)(int n, float a, const void *x, float *y);
/* out[t * out_stride + r] = dot(w row r, a row t) for r < n_rows, t < n_tok;
 * w rows are w_stride bytes apart, activation rows (vec_dot_type) a_stride. */
typedef void (*smol_gemm_fn)(int n, const void *w, size_t w_stride, int n_rows, const void *a, size_t a_stride,
                             int n_tok, float *out, size_t out_stride);
/* Repacked weights (optional, per type, see struct smol_cpu_kernels). */
typedef void (*smol_pack_fn)(int n, const void *w, size_t w_stride, int n_rows, void *out);
typedef void (*smol_unpack_row_fn)(int n, const void *packed, int row, void *out);
typedef void (*smol_gemm_packed_fn)(int n, const void *packed, int n_rows, const void *a, size_t a_stride, int n_tok,
                                    float *out, size_t out_stride);
/* attention over one KV head's rows (see smol_kv_scores_f16_ref); next: the
 * rows the caller reads after these (prefetched meanwhile), or NULL */
typedef void (*smol_kv_scores_fn)(int hd, const void *k, int n_rows, const float *q, int G, float scale, float *sc,
                                  size_t sc_stride, const void *next);
typedef void (*smol_kv_accum_fn)(int hd, const void *v, int n_rows, const float *p, size_t p_stride, int G,
                                 float *out, const void *next);
typedef void (*smol_silu_mul_fn)(float *gate, const float *up, int n);
typedef void (*smol_softmax_fn)(float *x, int n);

struct smol_cpu_kernels {
    const char *name;                           /* "cpu-ref", "cpu-avx512", ... */
    smol_vec_dot_fn vec_dot[SMOL_TYPE_COUNT];   /* weight row . activation row */
    smol_quantize_fn quantize[SMOL_TYPE_COUNT]; /* f32 activations -> vec_dot_type */
    smol_vec_dot_fn kv_dot[SMOL_TYPE_COUNT];    /* K row (f16/f32) . q (f32) */
    smol_axpy_fn kv_axpy[SMOL_TYPE_COUNT];      /* out += a * V row (f16/f32) */
    smol_kv_scores_fn kv_scores[SMOL_TYPE_COUNT]; /* K rows . G query heads (smol_kv_scores_*_ref) */
    smol_kv_accum_fn kv_accum[SMOL_TYPE_COUNT];   /* G heads += p . V rows (smol_kv_accum_*_ref) */
    smol_gemm_fn gemm[SMOL_TYPE_COUNT];         /* tiled rows x tokens; NULL: loop over vec_dot */
    /* Repacked weights: a weight of a type with pack[] and rows a multiple of
     * pack_rows[] may be repacked once (pack: n_rows rows, w_stride apart,
     * into as many bytes as they had; rows r0 % pack_rows == 0 start at byte
     * r0 * row_bytes of the copy) and multiplied with gemm_packed (n_rows a
     * multiple of pack_rows, from such a row) instead of gemm; unpack_row
     * gives a row back in its original format.  gemm_packed's results do
     * not depend on n_tok or on the other rows: a batch equals its tokens
     * one by one, bit for bit.  Twin: the type's vec_dot_ref per row. */
    int pack_rows[SMOL_TYPE_COUNT];
    smol_pack_fn pack[SMOL_TYPE_COUNT];
    smol_unpack_row_fn unpack_row[SMOL_TYPE_COUNT];
    smol_gemm_packed_fn gemm_packed[SMOL_TYPE_COUNT];
    smol_silu_mul_fn silu_mul;                  /* smol_silu_mul_ref */
    smol_softmax_fn softmax;                    /* smol_softmax_ref */
};

/* The table for this machine (initialised on first call, thread-safe). */
const struct smol_cpu_kernels *smol_cpu_kernels(void);
/* The scalar reference table. */
const struct smol_cpu_kernels *smol_cpu_kernels_ref(void);
/* A named variant ("ref", "avx2", "avxvnni", "avx512", "amx") if this build
 * has it and this CPU runs it, else NULL (for tests and benchmarks). */
const struct smol_cpu_kernels *smol_cpu_kernels_variant(const char *name);
/* Why smol_cpu_kernels() is the table it is, one line: SMOL_CPU's request
 * (and why it could not be met), else the automatic choice and the x86
 * features it was made from (for benchmarks' headers). */
const char *smol_cpu_kernels_why(void);

/* Installers of the SIMD variants (cpu_avx2.c, cpu_avx512.c, cpu_amx.c): override the
 * entries they provide and return 1, or return 0 when the CPU lacks them. */
int smol_cpu_fill_avx2(struct smol_cpu_kernels *k);
/* cpu_avx2.c: on top of the AVX2 table (k must be it), the x8 kernels built
 * for AVX-VNNI, when the CPU has it. */
int smol_cpu_fill_avxvnni(struct smol_cpu_kernels *k);
int smol_cpu_fill_avx512(struct smol_cpu_kernels *k);
/* cpu_amx.c: on top of the AVX-512 table (k must be it), when the CPU has
 * AMX-INT8 and Linux grants the process the tile data (asked here, once). */
int smol_cpu_fill_amx(struct smol_cpu_kernels *k);

#endif
