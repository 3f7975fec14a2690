/*
 * fp16.h - IEEE half and bfloat16 <-> float conversion, scalar reference.
 *
 * Exact for every value (subnormals, inf, NaN).  float -> half rounds to
 * nearest-even, as the F16C instruction (and ggml) does, so the KV cache
 * written by any backend holds the same bits.  Compiles as C and CUDA host
 * code; CUDA kernels use the cuda_fp16 intrinsics instead.
 */
#ifndef SMOL_FP16_H
#define SMOL_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t smol_half;   /* IEEE 754 binary16 bits */
typedef uint16_t smol_bf16;   /* bfloat16 bits */

static inline float smol_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t smol_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float smol_half_to_f32(smol_half h)
{
    /* Shift the half into float position, then rescale: works for normals
     * and subnormals alike (the multiply renormalises), inf/NaN handled apart. */
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t em = h & 0x7fff;
    if (em >= 0x7c00) /* inf or NaN */
        return smol_bits_to_f32(sign | 0x7f800000u | ((uint32_t)(em & 0x03ff) << 13));
    /* 2^112 moves the 5-bit exponent bias (15) to the 8-bit one (127). */
    float f = smol_bits_to_f32(em << 13) * smol_bits_to_f32(0x77800000u);
    return smol_bits_to_f32(sign | smol_f32_to_bits(f));
}

static inline smol_half smol_f32_to_half(float f)
{
    uint32_t x = smol_f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) /* inf / NaN (keep NaN quiet) */
        return (smol_half)(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 | ((x >> 13) & 0x3ff) : 0));
    if (x >= 0x477ff000u) /* rounds to >= 65536: overflow to inf */
        return (smol_half)(sign | 0x7c00);
    if (x < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (x < 0x33000000u) return (smol_half)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (smol_half)(sign | r);
    }
    /* normal: rebias exponent, round mantissa 23 -> 10 bits to nearest-even */
    uint32_t r = x - 0x38000000u;
    uint32_t rem = r & 0x1fff;
    r >>= 13;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (smol_half)(sign | r);
}

static inline float smol_bf16_to_f32(smol_bf16 b) { return smol_bits_to_f32((uint32_t)b << 16); }

static inline smol_bf16 smol_f32_to_bf16(float f)
{
    uint32_t x = smol_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (smol_bf16)((x >> 16) | 0x40); /* quiet NaN */
    return (smol_bf16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
