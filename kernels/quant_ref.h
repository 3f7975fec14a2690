/*
 * quant_ref.h - scalar reference kernels for every tensor format, and the
 * type-traits table that the rest of the engine uses instead of switches.
 *
 * These are the specification: SIMD (kernels/..._cpu) and CUDA versions are
 * tested against them.  Conventions (as ggml):
 *   dequant:  y[0..n) = decode(x), n a multiple of the block size.
 *   vec_dot:  returns sum_i w[i] * a[i] over n elements, where w is a
 *             weight row in its own format and a is an activation row already
 *             quantized to the weight type's vec_dot_type (traits below).
 *   quantize: encode x[0..n) into y, n a multiple of the block size
 *             (activation formats q8_0, q8_1, q8_K; weight formats as far as
 *             tests and the synthetic-model writer need them).
 * Pure functions: no allocation, no globals, no threads.
 */
#ifndef SMOL_QUANT_REF_H
#define SMOL_QUANT_REF_H

#include <stdint.h>
#include <stddef.h>
#include "quant.h"

typedef void  (*smol_dequant_fn)(const void *x, float *y, int64_t n);
typedef float (*smol_vec_dot_fn)(int n, const void *w, const void *a);
typedef void  (*smol_quantize_fn)(const float *x, void *y, int64_t n);

struct smol_type_traits {
    const char *name;            /* ggml spelling: "q4_K", "f32", ... */
    int block_size;              /* elements per block (1 for float types) */
    int type_size;               /* bytes per block */
    int supported;               /* 1 if the engine computes with it */
    enum smol_type vec_dot_type; /* format the activations are quantized to */
    smol_dequant_fn dequant;     /* scalar reference */
    smol_vec_dot_fn vec_dot;     /* scalar reference */
    smol_quantize_fn quantize;   /* scalar reference, NULL if not provided */
};

/* Traits of a type id; NULL for an id that is not a ggml type we know. */
const struct smol_type_traits *smol_type_traits(uint32_t type);
/* Name of a type id ("q4_K"), or "unknown(<id>)" in a static buffer-free form: "unknown". */
const char *smol_type_name(uint32_t type);
/* Bytes taken by a row of n elements; 0 if n is not a multiple of the block size. */
size_t smol_row_size(uint32_t type, int64_t n);

void  smol_dequant_f32_ref (const void *x, float *y, int64_t n);
void  smol_dequant_f16_ref (const void *x, float *y, int64_t n);
void  smol_dequant_bf16_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q4_0_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q4_1_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q5_0_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q5_1_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q8_0_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q8_1_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q4_K_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q5_K_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q6_K_ref(const void *x, float *y, int64_t n);
void  smol_dequant_q8_K_ref(const void *x, float *y, int64_t n);

/* Weight row (own format) x activation row (vec_dot_type).  f32, f16 and
 * bf16 weights take f32 activations. */
float smol_vec_dot_f32_ref (int n, const void *w, const void *a);
float smol_vec_dot_f16_ref (int n, const void *w, const void *a);
float smol_vec_dot_bf16_ref(int n, const void *w, const void *a);
float smol_vec_dot_q4_0_ref(int n, const void *w, const void *a); /* a: q8_0 */
float smol_vec_dot_q4_1_ref(int n, const void *w, const void *a); /* a: q8_1 */
float smol_vec_dot_q5_0_ref(int n, const void *w, const void *a); /* a: q8_0 */
float smol_vec_dot_q5_1_ref(int n, const void *w, const void *a); /* a: q8_1 */
float smol_vec_dot_q8_0_ref(int n, const void *w, const void *a); /* a: q8_0 */
float smol_vec_dot_q4_K_ref(int n, const void *w, const void *a); /* a: q8_K */
float smol_vec_dot_q5_K_ref(int n, const void *w, const void *a); /* a: q8_K */
float smol_vec_dot_q6_K_ref(int n, const void *w, const void *a); /* a: q8_K */

void  smol_quantize_f32_ref (const float *x, void *y, int64_t n); /* copy */
void  smol_quantize_f16_ref (const float *x, void *y, int64_t n);
void  smol_quantize_bf16_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q8_0_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q8_1_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q8_K_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q4_0_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q4_1_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q5_0_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q5_1_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q4_K_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q5_K_ref(const float *x, void *y, int64_t n);
void  smol_quantize_q6_K_ref(const float *x, void *y, int64_t n);

#endif
