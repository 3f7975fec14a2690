/*
 * mmvq.cu - the q8 decode mat-vec (knob cuda_matvec = q8): activations
 * quantized once per step to q8a (mmvq.h), weights read once in 16-byte
 * loads that skip L1, integer dot products (dp4a), f32 accumulation.
 *
 * One warp per output row, 4 rows per block of 128 threads.  Lane l takes
 * the row's tasks l, l + 32, ... (32 weights each, mmvq.h), two at a time so
 * that every lane has both tasks' weight loads in flight before it needs
 * them; the activations (a few KB per token, shared by every warp of the
 * SM) are read through L1.  Up to 8 tokens share each weight load (NT, a
 * template parameter: the accumulators stay in registers).  One launch can
 * cover up to three weights of one input width (q, k and v), store or add
 * into its output (a residual: x += W in), or compute the SwiGLU pair
 * silu(gate row) * (up row) of one row in one warp.
 *
 * The scalar twins are mmvq.h's lane functions and smol_mmvq_row_ref, which
 * tests/test_quant.c checks against the reference decoders; test_cuda
 * checks these kernels against a float64 dot of the same data.
 */
#include "common.cuh"
#include "ops_cuda.cuh"
#include "mmvq.h"
#include "ptx.cuh"
#include "mmvq_dot.cuh"

/* ---- activations to q8a -------------------------------------------------------------------- */

/* grid (ceil(blocks / 8), n), 256 threads: a warp per 32-block */
static __global__ void q8a_kernel(const float *x, int cols, int8_t *xq, struct smol_q8a *xs)
{
    const int nb = cols >> 5, bi = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, t = blockIdx.y;
    if (bi >= nb) return;
    const float v = x[(size_t)t * cols + 32 * bi + lane];
    q8a_block(v, xq + (size_t)t * cols + 32 * bi, xs + (size_t)t * nb + bi, lane);
}

/* grid n, NQ_THREADS threads: rmsnorm of row t (the sum of squares in double, as rmsnorm_kernel),
 * then the normalized row (x * inv * w) to q8a, a warp per 32-block, each warp's blocks loaded
 * 4 at a time before the first is used (device run 1: 256 threads walking the blocks one
 * load at a time took 11.7 us a row of 2048, a quarter of the decode step) */
#define NQ_THREADS 512
static __global__ void __launch_bounds__(NQ_THREADS) norm_q8a_kernel(const float *x, const float *w, float eps,
                                                                     int cols, int8_t *xq, struct smol_q8a *xs)
{
    __shared__ double sh[32];
    const int t = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = NQ_THREADS / 32, nb = cols >> 5;
    const float *xr = x + (size_t)t * cols;
    double ss = 0;
    for (int i = threadIdx.x; i < cols; i += NQ_THREADS) ss += (double)xr[i] * xr[i];
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, k);
    if (lane == 0) sh[wid] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        ss = threadIdx.x < nw ? sh[threadIdx.x] : 0.0;
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, k);
        if (threadIdx.x == 0) sh[0] = ss;
    }
    __syncthreads();
    const float inv = (float)(1.0 / sqrt(sh[0] / cols + eps));
    for (int b0 = wid; b0 < nb; b0 += 4 * nw) {
        float v[4], g[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int bi = b0 + k * nw;
            v[k] = bi < nb ? xr[32 * bi + lane] : 0.0f;
            g[k] = bi < nb ? w[32 * bi + lane] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int bi = b0 + k * nw;
            if (bi < nb) q8a_block(v[k] * inv * g[k], xq + (size_t)t * cols + 32 * bi, xs + (size_t)t * nb + bi, lane);
        }
    }
}

cudaError_t smol_q8a_cuda(const float *x, int n, int cols, int8_t *xq, struct smol_q8a *xs, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (cols % 32) return cudaErrorInvalidValue;
    q8a_kernel<<<dim3((cols / 32 + 7) / 8, n), 256, 0, st>>>(x, cols, xq, xs);
    return cudaGetLastError();
}

cudaError_t smol_norm_q8a_cuda(const float *x, const float *w, float eps, int n, int cols, int8_t *xq,
                               struct smol_q8a *xs, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (cols % 32) return cudaErrorInvalidValue;
    norm_q8a_kernel<<<n, NQ_THREADS, 0, st>>>(x, w, eps, cols, xq, xs);
    return cudaGetLastError();
}

struct mv_args {
    struct smol_mv_part p[3];
    int n_parts, mode;
    mv_in in;
};

#define MV_WARPS 4

/* U: tasks per lane in flight; long rows (the down projection's 11008) take 4 (few warps, so
 * more bytes each), the others 2 (fewer registers, more warps).  The kernels below are this
 * body under two register policies. */
template <int NT, int U, bool JOINT>
static __device__ __forceinline__ void mmvq_rows(const struct mv_args a)
{
    const int lane = threadIdx.x & 31;
    int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    /* the part this warp's row is in (constant indices only: a run-time index into the
     * parameter array would copy it to local memory) */
    const int r0 = a.p[0].rows, r1 = a.n_parts > 1 && a.mode != SMOL_MV_GLU ? a.p[1].rows : 0,
              r2 = a.n_parts > 2 ? a.p[2].rows : 0;
    struct smol_mv_part P;
    if (r < r0) {
        P = a.p[0];
    } else if (r < r0 + r1) {
        P = a.p[1];
        r -= r0;
    } else if (r < r0 + r1 + r2) {
        P = a.p[2];
        r -= r0 + r1;
    } else {
        return;
    }
    float acc[NT];
    /* JOINT: the SwiGLU pair of one type (q4_K or q6_K), its own instance (its registers would
     * cost the other launches occupancy) */
    if (!JOINT) row_dot_any<NT, U>(P, r, a.in, acc);
    if (a.mode == SMOL_MV_GLU) {
        float up[NT];
        if (JOINT) {
#pragma unroll
            for (int tok = 0; tok < NT; tok++) acc[tok] = up[tok] = 0.0f;
            if (a.p[0].type == SMOL_TYPE_Q4_K) row_dot_glu<SMOL_TYPE_Q4_K, NT, U>(a.p[0], a.p[1], r, a.in, acc, up);
            else row_dot_glu<SMOL_TYPE_Q6_K, NT, U>(a.p[0], a.p[1], r, a.in, acc, up);
#pragma unroll
            for (int tok = 0; tok < NT; tok++) {
                acc[tok] = warp_sum(acc[tok]);
                up[tok] = warp_sum(up[tok]);
            }
        } else {
            row_dot_any<NT, U>(a.p[1], r, a.in, up);
        }
#pragma unroll
        for (int tok = 0; tok < NT; tok++) acc[tok] = acc[tok] / (1.0f + expf(-acc[tok])) * up[tok];
    }
#pragma unroll
    for (int tok = 0; tok < NT; tok++) {
        if (lane == tok && tok < a.in.n) {
            float *o = P.out + (size_t)tok * P.rows + r;
            if (a.mode == SMOL_MV_ADD) *o += acc[tok];
            else *o = acc[tok];
        }
    }
}

template <int NT, int U, bool JOINT>
static __global__ void __launch_bounds__(MV_WARPS * 32) mmvq_kernel(const struct mv_args a)
{
    mmvq_rows<NT, U, JOINT>(a);
}

/* NT 4 and 5 at U 2 (not JOINT): under __launch_bounds__ alone ptxas kept them at 96 registers
 * (5 blocks of 128 threads per SM) and spilled to get there (nvcc 13: NT 4 on sm_80 12 bytes,
 * NT 5 on sm_90a 36), or took 104 (NT 5 on sm_80: 4 blocks).  A hard cap of 96 (__maxnreg__:
 * it cannot share a kernel with __launch_bounds__, hence this twin) compiles both spill-free in
 * 94-96 registers on both targets: 5 blocks per SM (sm_80 NT 5: from 4), the weight loads still
 * issued before their first use.  (__launch_bounds__(128, 5) also ends the spills, but ptxas
 * then reschedules the whole kernel into 70 registers, fewer weight loads in flight.)  `a` by
 * value into mmvq_rows: by reference, nvcc reorders the other instances' prologues. */
#define MMVQ_CAP_REGS 96
template <int NT>
static __global__ void __maxnreg__(MMVQ_CAP_REGS) mmvq_kernel_cap(const struct mv_args a)
{
    mmvq_rows<NT, 2, false>(a);
}

/* U 2, not JOINT: the capped twin for NT 4 and 5, the plain kernel otherwise (one instance each) */
template <int NT>
static void mmvq_launch_u2(const struct mv_args &a, int blocks, cudaStream_t st)
{
    if constexpr (NT == 4 || NT == 5) mmvq_kernel_cap<NT><<<blocks, MV_WARPS * 32, 0, st>>>(a);
    else mmvq_kernel<NT, 2, false><<<blocks, MV_WARPS * 32, 0, st>>>(a);
}

/* knob cuda_matvec = q8k: weights of few rows (the 3B's o and down: 2048 rows, where the device
 * holds ~4,200 warps) split each row's tasks among KS warps of a block (MV_WARPS / KS rows a
 * block, warp ks taking tasks lane + 32 U (ks + KS i)); the KS sums are added in order in shared
 * memory by the row's first warp.  Store and add only (the SwiGLU pair has 11008 rows). */
template <int NT, int U, int KS>
static __global__ void __launch_bounds__(MV_WARPS * 32) mmvq_ks_kernel(const struct mv_args a)
{
    __shared__ float red[MV_WARPS][NT];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, ks = w % KS;
    int r = blockIdx.x * (MV_WARPS / KS) + w / KS;
    const int r0 = a.p[0].rows, r1 = a.n_parts > 1 ? a.p[1].rows : 0, r2 = a.n_parts > 2 ? a.p[2].rows : 0;
    struct smol_mv_part P = a.p[0];
    int valid = 1;
    if (r < r0) {
        P = a.p[0];
    } else if (r < r0 + r1) {
        P = a.p[1];
        r -= r0;
    } else if (r < r0 + r1 + r2) {
        P = a.p[2];
        r -= r0 + r1;
    } else {
        valid = 0;
    }
    float acc[NT];
#pragma unroll
    for (int tok = 0; tok < NT; tok++) acc[tok] = 0.0f;
    if (valid) row_dot_any<NT, U, false, KS>(P, r, a.in, acc, ks);
    if (lane == 0)
#pragma unroll
        for (int tok = 0; tok < NT; tok++) red[w][tok] = acc[tok];
    __syncthreads();
    if (!valid || ks) return;
#pragma unroll
    for (int tok = 0; tok < NT; tok++) {
        float sum = red[w][tok];
#pragma unroll
        for (int j = 1; j < KS; j++) sum += red[w + j][tok];
        if (lane == tok && tok < a.in.n) {
            float *o = P.out + (size_t)tok * P.rows + r;
            if (a.mode == SMOL_MV_ADD) *o += sum;
            else *o = sum;
        }
    }
}

int smol_mmvq_split(int rows, int n_sm)
{
    const int want = 32 * (n_sm > 0 ? n_sm : 1);  /* half the warps an SM holds, on every SM */
    return rows >= want ? 1 : 2 * rows >= want ? 2 : 4;
}

cudaError_t smol_mmvq_cuda_ks(const struct smol_mv_part *parts, int n_parts, int mode, const int8_t *xq,
                              const struct smol_q8a *xs, int cols, int n, int ks, cudaStream_t st)
{
    if (ks <= 1 || mode == SMOL_MV_GLU) return smol_mmvq_cuda(parts, n_parts, mode, xq, xs, cols, n, st);
    if (n <= 0) return cudaSuccess;
    if (n > SMOL_MMVQ_MAX_TOKENS || n_parts < 1 || n_parts > 3 || cols % 32 || (ks != 2 && ks != 4))
        return cudaErrorInvalidValue;
    struct mv_args a;
    memset(&a, 0, sizeof a);
    int rows = 0;
    for (int i = 0; i < n_parts; i++) {
        if (!smol_mmvq_type_ok(parts[i].type) ||
            ((parts[i].type == SMOL_TYPE_Q4_K || parts[i].type == SMOL_TYPE_Q6_K) && cols % 256))
            return cudaErrorInvalidValue;
        a.p[i] = parts[i];
        rows += parts[i].rows;
    }
    a.n_parts = n_parts;
    a.mode = mode;
    a.in.xq = xq;
    a.in.xs = xs;
    a.in.cols = cols;
    a.in.n = n;
    if (rows <= 0) return cudaSuccess;
    const int per = MV_WARPS / ks, blocks = (rows + per - 1) / per, long_rows = cols >= 8192;
    switch (n * 8 + ks * 2 + long_rows) {
#define K(NT, KS) case NT * 8 + KS * 2: mmvq_ks_kernel<NT, 2, KS><<<blocks, MV_WARPS * 32, 0, st>>>(a); break; \
                  case NT * 8 + KS * 2 + 1: mmvq_ks_kernel<NT, 4, KS><<<blocks, MV_WARPS * 32, 0, st>>>(a); break;
#define X(NT) K(NT, 2) K(NT, 4)
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
#undef K
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t smol_mmvq_cuda(const struct smol_mv_part *parts, int n_parts, int mode, const int8_t *xq,
                           const struct smol_q8a *xs, int cols, int n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (n > SMOL_MMVQ_MAX_TOKENS || n_parts < 1 || n_parts > 3 || cols % 256 && cols % 32 ||
        (mode == SMOL_MV_GLU && (n_parts != 2 || parts[0].rows != parts[1].rows)))
        return cudaErrorInvalidValue;
    struct mv_args a;
    memset(&a, 0, sizeof a);
    int rows = 0;
    for (int i = 0; i < n_parts; i++) {
        if (!smol_mmvq_type_ok(parts[i].type) || (parts[i].type == SMOL_TYPE_Q4_K || parts[i].type == SMOL_TYPE_Q6_K) && cols % 256)
            return cudaErrorInvalidValue;
        a.p[i] = parts[i];
        rows += parts[i].rows;
    }
    if (mode == SMOL_MV_GLU) rows = parts[0].rows;
    a.n_parts = n_parts;
    a.mode = mode;
    a.in.xq = xq;
    a.in.xs = xs;
    a.in.cols = cols;
    a.in.n = n;
    if (rows <= 0) return cudaSuccess;
    const int blocks = (rows + MV_WARPS - 1) / MV_WARPS;
    const int long_rows = cols >= 8192;
    const int joint = mode == SMOL_MV_GLU && parts[0].type == parts[1].type &&
                      (parts[0].type == SMOL_TYPE_Q4_K || parts[0].type == SMOL_TYPE_Q6_K);
    switch (n) {
#define X(NT) case NT: if (joint) mmvq_kernel<NT, 2, true><<<blocks, MV_WARPS * 32, 0, st>>>(a); \
                       else if (long_rows) mmvq_kernel<NT, 4, false><<<blocks, MV_WARPS * 32, 0, st>>>(a); \
                       else mmvq_launch_u2<NT>(a, blocks, st); break;
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
