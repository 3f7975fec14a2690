/*
 * matmul.cu - out[t][r] = dot(w row r, x[t]) for weights kept in their GGUF
 * block format on the device.
 *
 * Variant 1 (decode, n <= 8): a warp per weight row, 8 rows per block.  Lane
 * l decodes chunks l, l + 32, ... of the row (32 weights each, dq32 in
 * common.cuh) into registers and dots them with the same 32 columns of up
 * to 8 activation rows (f32, read through L1: a 2048-wide row is 8 KB and
 * every warp of the SM shares it).  The weights are read exactly once, which
 * is the whole cost of a decode step; activations stay f32, so there is no
 * quantisation error beyond the weights' own.
 *
 * Variant 2 (prefill, n > 8): 64 tokens x 64 rows per block, 4 warps of
 * 32 x 32.  Per 64-wide K step every thread decodes one (row, chunk) of the
 * weight tile and converts one (token, chunk) of the activation tile to f16
 * in shared memory; the warps then run 4 x (2 x 2) wmma 16x16x16 f16 mma
 * with f32 accumulators (HMMA on sm_80 and sm_90; a wgmma/TMA variant is the
 * next step, see NOTES.md).  F32 weights keep variant 1 at any n so the f32
 * fixtures stay exact.
 */
#include <mma.h>
#include "common.cuh"
#include "ops_cuda.cuh"

using namespace nvcuda;

/* ---- variant 1: register decode, warp per row ------------------------------------------ */

#define MV_ROWS 8   /* rows (warps) per block */
#define MV_TOK 8    /* activation rows per pass over the weights */

/* No __launch_bounds__: with (MV_ROWS * 32) ptxas held the quantized types to 64 registers
 * (4 blocks of 256 threads per SM) and spilled 20-36 bytes to get there (q4_1 q8_0 q4_K q5_K on
 * sm_80, all of them on sm_90a; nvcc 13); unbounded they take 72-80, spill-free: 3 blocks per SM,
 * what q4_0 q5_0 q5_1 q6_K already had on sm_80.  f32 / f16 / bf16 go 114 -> 123, still 2 blocks.
 * A cap (__maxnreg__ 72 or 80, or a minimum of 3 blocks) spills again: ptxas schedules up to the
 * cap.  This kernel is the f32 decode path (cuda_matvec = f32) and f32 weights, not the default. */
template <int T>
static __global__ void
mv_kernel(float *out, const uint8_t *w, size_t row_bytes, int rows, int cols, const float *x, int n)
{
    const int r = blockIdx.x * MV_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    const uint8_t *wr = w + (size_t)r * row_bytes;
    const int nc = (cols + 31) / 32;
    const bool vec = (cols & 3) == 0;
    for (int t0 = 0; t0 < n; t0 += MV_TOK) {
        float acc[MV_TOK];
#pragma unroll
        for (int t = 0; t < MV_TOK; t++) acc[t] = 0.0f;
        for (int c = lane; c < nc; c += 32) {
            float y[32];
            dq32<T>(wr, c, cols, y);
            const bool full = vec && 32 * c + 32 <= cols;
#pragma unroll
            for (int t = 0; t < MV_TOK; t++) {
                if (t0 + t >= n) break;
                const float *xt = x + (size_t)(t0 + t) * cols + 32 * c;
                float s = 0.0f;
                if (full) {
#pragma unroll
                    for (int l = 0; l < 32; l += 4) {
                        const float4 a = __ldg((const float4 *)(xt + l));
                        s += y[l] * a.x + y[l + 1] * a.y + y[l + 2] * a.z + y[l + 3] * a.w;
                    }
                } else {
#pragma unroll
                    for (int l = 0; l < 32; l++)
                        if (32 * c + l < cols) s += y[l] * xt[l];
                }
                acc[t] += s;
            }
        }
#pragma unroll
        for (int t = 0; t < MV_TOK; t++) {
            const float v = warp_sum(acc[t]);
            if (lane == 0 && t0 + t < n) out[(size_t)(t0 + t) * rows + r] = v;
        }
    }
}

cudaError_t smol_matmul_cuda_1(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                               const float *x, int n, cudaStream_t st)
{
    if (n <= 0 || rows <= 0) return cudaSuccess;
    const int blocks = (rows + MV_ROWS - 1) / MV_ROWS;
    switch (type) {
#define X(T) case T: mv_kernel<T><<<blocks, MV_ROWS * 32, 0, st>>>(out, (const uint8_t *)w, row_bytes, rows, cols, x, n); break;
        SMOL_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- variant 2: f16 tiles in shared memory, wmma ----------------------------------------- */

#define MM_BT 64    /* tokens per block */
#define MM_BR 64    /* weight rows per block */
#define MM_BK 64    /* K per step: two 32-wide chunks */
#define MM_LD (MM_BK + 8)
#define MM_LDC (MM_BR + 4)

template <int T>
static __global__ void __launch_bounds__(128)
mm_kernel(float *out, const uint8_t *w, size_t row_bytes, int rows, int cols, const float *x, int n)
{
    __shared__ __align__(32) __half Ws[MM_BR][MM_LD];
    __shared__ __align__(32) __half Xs[MM_BT][MM_LD];
    __shared__ __align__(32) float Cs[MM_BT][MM_LDC];
    const int r0 = blockIdx.x * MM_BR, t0 = blockIdx.y * MM_BT, tid = threadIdx.x, warp = tid >> 5;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    const int my = tid & 63, hk = tid >> 6;
    const int nc = (cols + 31) / 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int c0 = 0; c0 < nc; c0 += 2) {
        const int c = c0 + hk;
        float y[32];
        if (r0 + my < rows && c < nc) {
            dq32<T>(w + (size_t)(r0 + my) * row_bytes, c, cols, y);
        } else {
#pragma unroll
            for (int l = 0; l < 32; l++) y[l] = 0.0f;
        }
#pragma unroll
        for (int l = 0; l < 32; l += 2) *(__half2 *)&Ws[my][32 * hk + l] = __floats2half2_rn(y[l], y[l + 1]);
        if (t0 + my < n && c < nc) {
            const float *xt = x + (size_t)(t0 + my) * cols + 32 * c;
#pragma unroll
            for (int l = 0; l < 32; l++) y[l] = 32 * c + l < cols ? xt[l] : 0.0f;
        } else {
#pragma unroll
            for (int l = 0; l < 32; l++) y[l] = 0.0f;
        }
#pragma unroll
        for (int l = 0; l < 32; l += 2) *(__half2 *)&Xs[my][32 * hk + l] = __floats2half2_rn(y[l], y[l + 1]);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &Xs[wm + 16 * i][kk], MM_LD);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &Ws[wn + 16 * j][kk], MM_LD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&Cs[wm + 16 * i][wn + 16 * j], acc[i][j], MM_LDC, wmma::mem_row_major);
    __syncthreads();
    for (int i = tid; i < MM_BT * MM_BR; i += 128) {
        const int tt = i / MM_BR, rr = i % MM_BR;
        if (t0 + tt < n && r0 + rr < rows) out[(size_t)(t0 + tt) * rows + r0 + rr] = Cs[tt][rr];
    }
}

cudaError_t smol_matmul_cuda_2(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                               const float *x, int n, cudaStream_t st)
{
    if (n <= 0 || rows <= 0) return cudaSuccess;
    dim3 grid((rows + MM_BR - 1) / MM_BR, (n + MM_BT - 1) / MM_BT);
    switch (type) {
#define X(T) case T: mm_kernel<T><<<grid, 128, 0, st>>>(out, (const uint8_t *)w, row_bytes, rows, cols, x, n); break;
        SMOL_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t smol_matmul_cuda(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                             const float *x, int n, cudaStream_t st)
{
    if (n <= MV_TOK || type == SMOL_TYPE_F32) return smol_matmul_cuda_1(out, type, w, row_bytes, rows, cols, x, n, st);
    return smol_matmul_cuda_2(out, type, w, row_bytes, rows, cols, x, n, st);
}
