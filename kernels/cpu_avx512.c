/*
 * cpu_avx512.c - the AVX-512 (VL, BW, VNNI) kernel variant: the body in
 * cpu_x86_body.inc with the fused integer dots vpdpbusd / vpdpwssd and 32
 * vector registers.  Compiled for that target only; chosen at run time.
 */
#include "cpu_kernels.h"

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
    k->name = "cpu-avx512";
    return 1;
}
#else
int smol_cpu_fill_avx512(struct smol_cpu_kernels *k) { (void)k; return 0; }
#endif
