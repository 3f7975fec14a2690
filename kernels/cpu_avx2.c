/*
 * cpu_avx2.c - the AVX2 + FMA + F16C kernel variants, compiled for that
 * target only (per-function target via a pragma), so the rest of the build
 * stays baseline x86-64:
 *
 *   - avx2: the body in cpu_x86_body.inc, and the repacked x8 weights
 *     (q4_K, q6_K, q4_1, q8_0 with 8 rows in the lanes, x8_layout.h) whose
 *     kernels are cpu_x8_body.inc with vpmaddubsw: every matmul weight of
 *     SmolLM3 Q4_K_M and SmolLM2 Q4_1 is repacked at load and multiplied
 *     by them, decode and prompt alike (llama.cpp's AVX2 build does the
 *     same with its 8-row interleaved Q4_K);
 *   - avxvnni: the same table with the x8 kernels built for AVX-VNNI
 *     (vpdpbusd on 256-bit vectors: Alder Lake and later, Zen 5), chosen
 *     where the CPU has it and not AVX-512.
 *
 * On other architectures this file compiles to installers that report
 * "absent".
 */
#include "cpu_kernels.h"
#include "x8_layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
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

#define X8_SUFFIX avx2
#define X8_VNNI 0
#include "cpu_x8_body.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#undef X8_SUFFIX
#undef X8_VNNI
#define X8_SUFFIX avxvnni
#define X8_VNNI 1
#include "cpu_x8_body.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static int has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

int smol_cpu_fill_avx2(struct smol_cpu_kernels *k)
{
    if (!has_avx2()) return 0;
    fill_avx2(k);
    fill_x8_avx2(k);
    k->name = "cpu-avx2";
    return 1;
}

int smol_cpu_fill_avxvnni(struct smol_cpu_kernels *k)
{
    /* AVX-VNNI: CPUID.(EAX=7, ECX=1):EAX bit 4 (asked directly: older
     * compilers' __builtin_cpu_supports does not know the name); the YMM
     * state it needs is the one AVX2 already needs */
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!has_avx2() || !__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 4))) return 0;
    fill_x8_avxvnni(k);
    k->name = "cpu-avxvnni";
    return 1;
}
#else
int smol_cpu_fill_avx2(struct smol_cpu_kernels *k) { (void)k; return 0; }
int smol_cpu_fill_avxvnni(struct smol_cpu_kernels *k) { (void)k; return 0; }
#endif
