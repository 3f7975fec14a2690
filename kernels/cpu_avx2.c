/*
 * cpu_avx2.c - the AVX2 + FMA + F16C kernel variant: the body in
 * cpu_x86_body.inc compiled for that target only (per-function target via
 * a pragma), so the rest of the build stays baseline x86-64.  On other
 * architectures this file compiles to an installer that reports "absent".
 */
#include "cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define SIMD_SUFFIX avx2
#define SIMD_VNNI 0
#include "cpu_x86_body.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int smol_cpu_fill_avx2(struct smol_cpu_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
        return 0;
    fill_avx2(k);
    k->name = "cpu-avx2";
    return 1;
}
#else
int smol_cpu_fill_avx2(struct smol_cpu_kernels *k) { (void)k; return 0; }
#endif
