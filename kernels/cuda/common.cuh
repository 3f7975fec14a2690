/*
 * common.cuh - device helpers shared by the CUDA kernels: block decoders
 * ("dq32": 32 consecutive weights of a row to registers), reductions.
 *
 * Every weight format the engine supports is decoded here from the block
 * layouts of kernels/quant.h (the one definition shared with C), following
 * the scalar _ref decoders in kernels/quant_ref.c element for element.  The
 * unit of work is a "chunk": elements [32c, 32c + 32) of a row.  A chunk
 * never straddles two blocks (every block size is 32 or 256), so decoding
 * needs no carry between lanes.  Float rows may end mid-chunk: the tail
 * reads as zero.
 */
#ifndef SMOL_CUDA_COMMON_CUH
#define SMOL_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "../quant.h"

#define SMOL_WARP 32
/* positions per KV page: SMOL_KV_PAGE of daemon/model/kv.h (daemon/model/backend_cuda.cu asserts they agree) */
#define SMOL_KV_PAGE_CUDA 32

static __device__ __forceinline__ float h2f(smol_half h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float ld_h2f(const uint8_t *p)
{
    return h2f((smol_half)(p[0] | (p[1] << 8)));  /* 2-byte fields sit at odd offsets in q6_K rows */
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result. */
static __device__ float block_sum(float v, float *sh /* >= 33 floats */)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    v = warp_sum(v);
    return v;
}

static __device__ float block_max(float v, float *sh)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    v = warp_max(v);
    return v;
}

/* Scale and min of sub-block j of a q4_K / q5_K block (get_scale_min_k4 in quant_ref.c). */
static __device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, float *sc, float *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* y[0..32) = elements [32c, 32c+32) of a row in format T; cols only matters for float rows. */
template <int T>
static __device__ __forceinline__ void dq32(const uint8_t *row, int c, int cols, float y[32])
{
    if (T == SMOL_TYPE_F32) {
        const float *r = (const float *)row + 32 * c;
#pragma unroll
        for (int l = 0; l < 32; l++) y[l] = 32 * c + l < cols ? r[l] : 0.0f;
    } else if (T == SMOL_TYPE_F16) {
        const smol_half *r = (const smol_half *)row + 32 * c;
#pragma unroll
        for (int l = 0; l < 32; l++) y[l] = 32 * c + l < cols ? h2f(r[l]) : 0.0f;
    } else if (T == SMOL_TYPE_BF16) {
        const uint16_t *r = (const uint16_t *)row + 32 * c;
#pragma unroll
        for (int l = 0; l < 32; l++) y[l] = 32 * c + l < cols ? __uint_as_float((uint32_t)r[l] << 16) : 0.0f;
    } else if (T == SMOL_TYPE_Q8_0) {
        const uint8_t *b = row + (size_t)c * sizeof(struct block_q8_0);
        const float d = ld_h2f(b);
        const int8_t *qs = (const int8_t *)(b + 2);
#pragma unroll
        for (int l = 0; l < 32; l++) y[l] = d * qs[l];
    } else if (T == SMOL_TYPE_Q4_0) {
        const uint8_t *b = row + (size_t)c * sizeof(struct block_q4_0);
        const float d = ld_h2f(b);
#pragma unroll
        for (int l = 0; l < 16; l++) {
            y[l] = d * ((b[2 + l] & 0xF) - 8);
            y[l + 16] = d * ((b[2 + l] >> 4) - 8);
        }
    } else if (T == SMOL_TYPE_Q4_1) {
        const uint8_t *b = row + (size_t)c * sizeof(struct block_q4_1);
        const float d = ld_h2f(b), m = ld_h2f(b + 2);
#pragma unroll
        for (int l = 0; l < 16; l++) {
            y[l] = d * (b[4 + l] & 0xF) + m;
            y[l + 16] = d * (b[4 + l] >> 4) + m;
        }
    } else if (T == SMOL_TYPE_Q5_0 || T == SMOL_TYPE_Q5_1) {
        const int off = T == SMOL_TYPE_Q5_0 ? 2 : 4;
        const uint8_t *b = row + (size_t)c * (T == SMOL_TYPE_Q5_0 ? sizeof(struct block_q5_0) : sizeof(struct block_q5_1));
        const float d = ld_h2f(b), m = T == SMOL_TYPE_Q5_1 ? ld_h2f(b + 2) : 0.0f;
        const uint32_t qh = b[off] | (b[off + 1] << 8) | (b[off + 2] << 16) | ((uint32_t)b[off + 3] << 24);
        const uint8_t *qs = b + off + 4;
        const int bias = T == SMOL_TYPE_Q5_0 ? 16 : 0;
#pragma unroll
        for (int l = 0; l < 16; l++) {
            y[l] = d * (int)(((qs[l] & 0xF) | (((qh >> l) & 1) << 4)) - bias) + m;
            y[l + 16] = d * (int)(((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) - bias) + m;
        }
    } else if (T == SMOL_TYPE_Q4_K || T == SMOL_TYPE_Q5_K) {
        const size_t bs = T == SMOL_TYPE_Q4_K ? sizeof(struct block_q4_K) : sizeof(struct block_q5_K);
        const uint8_t *b = row + (size_t)(c >> 3) * bs;
        const int j = c & 7;
        float sc, mn;
        scale_min_k4(j, b + 4, &sc, &mn);
        const float d = ld_h2f(b) * sc, m = ld_h2f(b + 2) * mn;
        const uint8_t *qs = b + 4 + K_SCALE_SIZE + (T == SMOL_TYPE_Q5_K ? QK_K / 8 : 0) + 32 * (j >> 1);
        const int sh = (j & 1) * 4;
        if (T == SMOL_TYPE_Q4_K) {
            /* qs of a q4_K block start 16 bytes in: two 16-byte loads per chunk */
            const uint4 *q4 = (const uint4 *)qs;
            uint32_t w[8];
            uint4 a = q4[0], e = q4[1];
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = e.x; w[5] = e.y; w[6] = e.z; w[7] = e.w;
#pragma unroll
            for (int l = 0; l < 32; l++) y[l] = d * (float)((w[l >> 2] >> (8 * (l & 3) + sh)) & 0xF) - m;
        } else {
            const uint8_t *qh = b + 4 + K_SCALE_SIZE;
#pragma unroll
            for (int l = 0; l < 32; l++) y[l] = d * (float)(((qs[l] >> sh) & 0xF) + (((qh[l] >> j) & 1) << 4)) - m;
        }
    } else if (T == SMOL_TYPE_Q6_K) {
        const uint8_t *b = row + (size_t)(c >> 3) * sizeof(struct block_q6_K);
        const int j = c & 7, h = j >> 2, k = j & 3;
        const uint8_t *ql = b + 64 * h + 32 * (k & 1);
        const uint8_t *qh = b + QK_K / 2 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + QK_K / 2 + QK_K / 4) + 8 * h + 2 * k;
        const float d = ld_h2f(b + QK_K / 2 + QK_K / 4 + QK_K / 16);
        const float d0 = d * sc[0], d1 = d * sc[1];
        const int nsh = (k >> 1) * 4, hsh = 2 * k;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = (((ql[l] >> nsh) & 0xF) | (((qh[l] >> hsh) & 3) << 4)) - 32;
            y[l] = (l < 16 ? d0 : d1) * q;
        }
    }
}

/* Calls F.template operator()<T>() for a run-time type id; returns 0 if the type has no decoder. */
#define SMOL_CUDA_TYPES(X) X(SMOL_TYPE_F32) X(SMOL_TYPE_F16) X(SMOL_TYPE_BF16) X(SMOL_TYPE_Q8_0) \
    X(SMOL_TYPE_Q4_0) X(SMOL_TYPE_Q4_1) X(SMOL_TYPE_Q5_0) X(SMOL_TYPE_Q5_1) X(SMOL_TYPE_Q4_K) \
    X(SMOL_TYPE_Q5_K) X(SMOL_TYPE_Q6_K)

static inline int smol_cuda_type_ok(uint32_t t)
{
#define X(T) if (t == T) return 1;
    SMOL_CUDA_TYPES(X)
#undef X
    return 0;
}

#endif
