/*
 * quant_ref_internal.h - small integer helpers shared by the scalar
 * reference kernels (quant_ref.c) and the K-quant quantizers
 * (quantize_k_ref.c).  Static inline, kernels/ only: not a public header.
 */
#ifndef SMOL_QUANT_REF_INTERNAL_H
#define SMOL_QUANT_REF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest (ties to even) by the 1.5*2^23 trick, as ggml: valid for
 * |fval| <= 4194303, which every caller guarantees by construction. */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* Scale and min of sub-block j (0..7) from the 12 packed bytes of a q4_K /
 * q5_K block: j < 4 in the low 6 bits of bytes j and j+4; j >= 4 split into a
 * nibble of byte j+4 and the top two bits of bytes j-4 (scale) and j (min). */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

#endif
