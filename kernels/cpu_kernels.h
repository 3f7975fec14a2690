/*
 * cpu_kernels.h - the table of CPU kernels the CPU backend calls, chosen
 * once at startup from what the processor supports.  Every entry has a
 * scalar _ref twin in quant_ref.h / ops_ref.h that is the specification;
 * faster variants (AVX2, AVX-512, VNNI) replace entries and are tested
 * against those twins.  SMOL_CPU=ref in the environment forces the scalar
 * table (for tests and for bisecting a numeric difference).
 */
#ifndef SMOL_CPU_KERNELS_H
#define SMOL_CPU_KERNELS_H

#include "quant_ref.h"

typedef void (*smol_axpy_fn)(int n, float a, const void *x, float *y);

struct smol_cpu_kernels {
    const char *name;                           /* "cpu-ref", "cpu-avx512", ... */
    smol_vec_dot_fn vec_dot[SMOL_TYPE_COUNT];   /* weight row . activation row */
    smol_quantize_fn quantize[SMOL_TYPE_COUNT]; /* f32 activations -> vec_dot_type */
    smol_vec_dot_fn kv_dot[SMOL_TYPE_COUNT];    /* K row (f16/f32) . q (f32) */
    smol_axpy_fn kv_axpy[SMOL_TYPE_COUNT];      /* out += a * V row (f16/f32) */
};

/* The table for this machine (initialised on first call, thread-safe). */
const struct smol_cpu_kernels *smol_cpu_kernels(void);
/* The scalar reference table. */
const struct smol_cpu_kernels *smol_cpu_kernels_ref(void);

#endif
