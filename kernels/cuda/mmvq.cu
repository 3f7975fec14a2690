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

/* ---- activations to q8a -------------------------------------------------------------------- */

/* v = element `lane` of a 32-block: writes its q and (lane 0) the block's q8a */
static __device__ __forceinline__ void q8a_block(float v, int8_t *q, struct smol_q8a *s, int lane)
{
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const int iv = (int)roundf(v * id);
    q[lane] = (int8_t)iv;
    int p = iv;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);  /* sums of lanes 0-15, 16-31 */
    const int p1 = __shfl_sync(0xffffffffu, p, 16);
    if (lane == 0) *(float4 *)s = make_float4(d, d * (float)p, d * (float)p1, 0.0f);
}

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

/* ---- loads -------------------------------------------------------------------------------------- */

static __device__ __forceinline__ void ld_a16(const int8_t *p, int32_t a[4])
{
    const int4 v = __ldg((const int4 *)p);
    a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w;
}
static __device__ __forceinline__ struct smol_q8a ld_xs(const struct smol_q8a *p)
{
    const float4 v = __ldg((const float4 *)p);
    struct smol_q8a s;
    s.d = v.x; s.s0 = v.y; s.s1 = v.z; s.pad = 0.0f;
    return s;
}

/* ---- one task's weights, per type --------------------------------------------------------------- */

struct mv_in {
    const int8_t *xq;               /* [n][cols] */
    const struct smol_q8a *xs;      /* [n][cols / 32] */
    int cols, n;
};

template <int T> struct wtask;

template <> struct wtask<SMOL_TYPE_Q4_K> {
    uint32_t hdr[4], q[4];
    int k, g, h;
    __device__ __forceinline__ void load(const uint8_t *w, size_t N, int r, int t, int cols)
    {
        k = t >> 3; g = (t >> 1) & 3; h = t & 1;
        const uint8_t *b = w + ((size_t)r * (cols >> 8) + k) * sizeof(struct block_q4_K);
        ld_w16(b, hdr);
        ld_w16(b + 16 + 32 * g + 16 * h, q);
    }
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 256 * k + 64 * g + 16 * h;
        int32_t lo[4], hi[4];
        ld_a16(x, lo);
        ld_a16(x + 32, hi);
        const struct smol_q8a *s = in.xs + (size_t)tok * (in.cols >> 5) + 8 * k + 2 * g;
        return smol_mmvq_q4_K(hdr, q, g, h, lo, hi, ld_xs(s), ld_xs(s + 1));
    }
};

template <> struct wtask<SMOL_TYPE_Q6_K> {
    uint32_t L[4], H[2];
    int sc0, sc1;
    float d;
    __device__ __forceinline__ void load(const uint8_t *w, size_t N, int r, int t, int cols)
    {
        const size_t i = (size_t)r * (cols >> 8) + (t >> 3);
        const int j = t & 7;
        ld_w16(w + i * 128 + 16 * j, L);
        ld_w8(w + N * 128 + i * 64 + 8 * j, H);
        const uint32_t sc = ld_w2(w + N * 192 + i * 16 + 2 * j);
        sc0 = (int8_t)(sc & 0xFF);
        sc1 = (int8_t)(sc >> 8);
        d = smol_mmvq_h2f((uint16_t)ld_w2(w + N * 208 + i * 2));
    }
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16(x, a);
        ld_a16(x + 16, a + 4);
        return smol_mmvq_q6_K(L, H, sc0, sc1, d, a, ld_xs(in.xs + (size_t)tok * (in.cols >> 5) + t));
    }
};

template <> struct wtask<SMOL_TYPE_Q8_0> {
    uint32_t W[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *w, size_t N, int r, int t, int cols)
    {
        const size_t i = (size_t)r * (cols >> 5) + t;
        ld_w16(w + i * 32, W);
        ld_w16(w + i * 32 + 16, W + 4);
        d = smol_mmvq_h2f((uint16_t)ld_w2(w + N * 32 + i * 2));
    }
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16(x, a);
        ld_a16(x + 16, a + 4);
        return smol_mmvq_q8_0(W, d, a, ld_xs(in.xs + (size_t)tok * (in.cols >> 5) + t));
    }
};

template <> struct wtask<SMOL_TYPE_Q4_0> {
    uint32_t Q[4];
    float d;
    __device__ __forceinline__ void load(const uint8_t *w, size_t N, int r, int t, int cols)
    {
        const size_t i = (size_t)r * (cols >> 5) + t;
        ld_w16(w + i * 16, Q);
        d = smol_mmvq_h2f((uint16_t)ld_w2(w + N * 16 + i * 2));
    }
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16(x, a);
        ld_a16(x + 16, a + 4);
        return smol_mmvq_q4_0(Q, d, a, ld_xs(in.xs + (size_t)tok * (in.cols >> 5) + t));
    }
};

template <> struct wtask<SMOL_TYPE_Q4_1> {
    uint32_t Q[4];
    float d, m;
    __device__ __forceinline__ void load(const uint8_t *w, size_t N, int r, int t, int cols)
    {
        const size_t i = (size_t)r * (cols >> 5) + t;
        ld_w16(w + i * 16, Q);
        const uint32_t dm = ld_w4(w + N * 16 + i * 4);
        d = smol_mmvq_h2f((uint16_t)(dm & 0xFFFF));
        m = smol_mmvq_h2f((uint16_t)(dm >> 16));
    }
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16(x, a);
        ld_a16(x + 16, a + 4);
        return smol_mmvq_q4_1(Q, d, m, a, ld_xs(in.xs + (size_t)tok * (in.cols >> 5) + t));
    }
};

/* ---- a row ------------------------------------------------------------------------------------ */

/* acc[tok] += this lane's share of row r . x[tok], tok < in.n (<= NT); U tasks' weights loaded
 * before the first is used */
template <int T, int NT, int U>
static __device__ __forceinline__ void row_dot(const struct smol_mv_part &P, int r, const mv_in &in, float acc[NT])
{
    const int lane = threadIdx.x & 31, ntask = in.cols >> 5;
    for (int t0 = lane; t0 < ntask; t0 += 32 * U) {
        wtask<T> w[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (t0 + 32 * u < ntask) w[u].load(P.w, P.n_blocks, r, t0 + 32 * u, in.cols);
#pragma unroll
        for (int tok = 0; tok < NT; tok++) {
            if (tok < in.n) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (t0 + 32 * u < ntask) acc[tok] += w[u].dot(in, tok, t0 + 32 * u);
            }
        }
    }
}

/* gate and up rows of one type together: both weights' loads in flight at once (device run 1:
 * the two rows one after the other, each waiting for its loads, ran the 3B's 25 MB of gate/up
 * at about half the rate of its head) */
template <int T, int NT, int U>
static __device__ __forceinline__ void row_dot_glu(const struct smol_mv_part &G, const struct smol_mv_part &Up, int r,
                                                   const mv_in &in, float acc[NT], float up[NT])
{
    const int lane = threadIdx.x & 31, ntask = in.cols >> 5;
    for (int t0 = lane; t0 < ntask; t0 += 32 * U) {
        wtask<T> wg[U], wu[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (t0 + 32 * u < ntask) {
                wg[u].load(G.w, G.n_blocks, r, t0 + 32 * u, in.cols);
                wu[u].load(Up.w, Up.n_blocks, r, t0 + 32 * u, in.cols);
            }
#pragma unroll
        for (int tok = 0; tok < NT; tok++) {
            if (tok < in.n) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (t0 + 32 * u < ntask) {
                        acc[tok] += wg[u].dot(in, tok, t0 + 32 * u);
                        up[tok] += wu[u].dot(in, tok, t0 + 32 * u);
                    }
            }
        }
    }
}

template <int NT, int U>
static __device__ __forceinline__ void row_dot_any(const struct smol_mv_part &P, int r, const mv_in &in, float acc[NT])
{
#pragma unroll
    for (int tok = 0; tok < NT; tok++) acc[tok] = 0.0f;
    switch (P.type) {
    case SMOL_TYPE_Q4_K: row_dot<SMOL_TYPE_Q4_K, NT, U>(P, r, in, acc); break;
    case SMOL_TYPE_Q6_K: row_dot<SMOL_TYPE_Q6_K, NT, U>(P, r, in, acc); break;
    case SMOL_TYPE_Q8_0: row_dot<SMOL_TYPE_Q8_0, NT, U>(P, r, in, acc); break;
    case SMOL_TYPE_Q4_0: row_dot<SMOL_TYPE_Q4_0, NT, U>(P, r, in, acc); break;
    case SMOL_TYPE_Q4_1: row_dot<SMOL_TYPE_Q4_1, NT, U>(P, r, in, acc); break;
    default: break;
    }
#pragma unroll
    for (int tok = 0; tok < NT; tok++) acc[tok] = warp_sum(acc[tok]);
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
