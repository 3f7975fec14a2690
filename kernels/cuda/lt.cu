/*
 * lt.cu - the bf16 operands of the cuBLASLt GEMM (knob cuda_gemm = lt, daemon/model/backend_cuda_lt.cu).
 *
 * cuBLASLt multiplies plain matrices; our weights stay in their GGUF blocks.  So each mat-mul of
 * more than 8 tokens first decodes its weight (or a slab of its rows) to bf16 in a scratch
 * buffer, and rounds its activations to bf16 once: cuBLASLt's bf16 GEMM takes A and B of one
 * type (bf16 x f32 is not among its type combinations), with f32 accumulation and f32 output.
 *
 * The decoder is dq32 of common.cuh, the one every other kernel uses: a thread per chunk (32
 * consecutive weights of a row), the chunk written as 64 bytes.  Rounding is to nearest even,
 * as kernels/fp16.h's bf16 (NaN kept quiet); bf16 keeps f32's exponent, so no weight or
 * activation overflows, and its 8-bit mantissa is the whole error this path adds on top of the
 * weights' own quantization.
 */
#include "common.cuh"
#include "ops_cuda.cuh"

static __device__ __forceinline__ uint32_t bf16_bits(float f)
{
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  /* NaN: stays a (quiet) NaN */
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* 32 values to 16 packed words (two bf16 each, the lower address in the low half) */
static __device__ __forceinline__ void pack32(const float y[32], uint32_t p[16])
{
#pragma unroll
    for (int l = 0; l < 16; l++) p[l] = bf16_bits(y[2 * l]) | (bf16_bits(y[2 * l + 1]) << 16);
}

/* out[r][c] = weight (row r0 + r, column c) in bf16, r < rows: a thread per chunk of a row. */
template <int T>
static __global__ void __launch_bounds__(256)
dequant_bf16_kernel(uint16_t *out, const uint8_t *w, size_t row_bytes, int rows, int cols)
{
    const int nc = (cols + 31) / 32;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * nc) return;
    const int r = (int)(i / nc), c = (int)(i % nc);
    float y[32];
    dq32<T>(w + (size_t)r * row_bytes, c, cols, y);
    uint16_t *o = out + (size_t)r * cols + 32 * c;
    if ((cols & 7) == 0 && 32 * c + 32 <= cols) {  /* 16-byte aligned: four 16-byte stores */
        uint32_t p[16];
        pack32(y, p);
        uint4 *o4 = (uint4 *)o;
#pragma unroll
        for (int q = 0; q < 4; q++) o4[q] = make_uint4(p[4 * q], p[4 * q + 1], p[4 * q + 2], p[4 * q + 3]);
    } else {
        for (int l = 0; l < 32 && 32 * c + l < cols; l++) o[l] = (uint16_t)bf16_bits(y[l]);
    }
}

cudaError_t smol_dequant_bf16_cuda(uint16_t *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                                   cudaStream_t st)
{
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const size_t chunks = (size_t)rows * ((cols + 31) / 32);
    const unsigned blocks = (unsigned)((chunks + 255) / 256);
    switch (type) {
#define X(T) case T: dequant_bf16_kernel<T><<<blocks, 256, 0, st>>>(out, (const uint8_t *)w, row_bytes, rows, cols); break;
        SMOL_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

static __global__ void bf16_kernel(uint32_t *dst, const float2 *x, size_t count2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count2; i += (size_t)gridDim.x * blockDim.x) {
        const float2 v = x[i];
        dst[i] = bf16_bits(v.x) | (bf16_bits(v.y) << 16);
    }
}

cudaError_t smol_bf16_from_f32_cuda(uint16_t *dst, const float *x, size_t count, cudaStream_t st)
{
    if (!count) return cudaSuccess;
    if (count % 2) return cudaErrorInvalidValue;
    const size_t c2 = count / 2;
    const int blocks = (int)(c2 / 256 + 1 < 4096 ? c2 / 256 + 1 : 4096);
    bf16_kernel<<<blocks, 256, 0, st>>>((uint32_t *)dst, (const float2 *)x, c2);
    return cudaGetLastError();
}
