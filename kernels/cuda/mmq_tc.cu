/*
 * mmq_tc.cu - the tensor-core GEMM for quantized weights (knob cuda_gemm =
 * mma; declarations and limits in mmq_tc.h).
 *
 * C[t][r] = sum_k W[r][k] X[t][k]: M = weight rows, N = tokens, K = cols.
 * A block of 256 threads (8 warps) owns BM weight rows x 64 tokens
 * (BM = 128: warps 4 x 2 of 32 rows x 32 tokens; BM = 64 for grids that
 * would not fill the device: warps 2 x 4 of 32 x 16) and walks K in steps
 * of 128 (SMOL_GEMM_BK: half a q4_K / q6_K super-block, four 32-blocks):
 *
 *   1. cp.async brings the step's raw weight bytes (smol_gemm_piece,
 *      mmq_tc.h: 16-byte pieces, 8- and 4-byte ones for scales) and its 64 x 128
 *      f16 activations into stage (step & 1) of shared memory, while the
 *      step before is being decoded and multiplied (double buffering);
 *   2. every thread decodes BM * 4 / 256 (row, 32-chunk) pieces of the raw
 *      stage into an f16 weight tile (smol_gemm_decode, mmq_tc.h: the
 *      quant_ref.c float products, then one rounding to f16);
 *   3. each warp runs mma.sync.m16n8k16 (f16 x f16, f32 accumulate) over
 *      the tile, fragments by ldmatrix from rows padded to 272 bytes (no
 *      bank conflicts);
 *   4. the epilogue writes (or adds to) out[t][r] straight from the
 *      accumulators: 8 consecutive rows of a token per 32-byte sector.
 * Tails: rows past the end are clamped on load (valid memory, results
 * dropped), tokens past the end are zero rows never loaded; cols must be a multiple of 128 (the launcher refuses
 * others).  Grids with fewer blocks than the device runs at once split K
 * (blockIdx.z) into partials summed in a fixed order by a second kernel.
 *
 * Knob cuda_gemm_fuse (the *_f32_cuda launchers; not yet run on a device): one launch a mat-mul.
 *   - The activations are read as f32 straight from the caller's buffer: each thread loads its
 *     8-float pieces of step k + 1 into registers beside the weights' cp.async, converts them
 *     (f16, round to nearest even: f16_kernel's rounding) or quantizes each 32-column block to
 *     int8 + scales (imma: q8a_block's arithmetic, 4 lanes a block) after the step's weight
 *     decode, and stores them into the other stage: no f16_kernel / q8a launch, no x16 scratch.
 *   - Split-K without split_sum_kernel: every split writes its partial tile, then
 *     __threadfence and an atomic ticket per output tile; the last split to arrive resets the
 *     ticket (a replayed graph finds it 0) and sums the partials in split order (0, 1, ...),
 *     split_sum_kernel's order and arithmetic, then stores or adds: the same bits as the
 *     default path, whichever block arrives last.
 *
 * Error of the result against the float64 dot of the decoded weights and
 * the f16-rounded activations: each weight is rounded once to f16 (relative
 * error <= 2^-11), products are exact in the f32 accumulators, sums are
 * f32; tests/test_cuda.c (t_gemm_mma) states the bound it checks.
 */
#include "common.cuh"
#include "ops_cuda.cuh"
#include "mmq_tc.h"
#include "mmq_imma.h"
#include "ptx.cuh"

#define TC_THREADS 256
#define TC_BN 64                       /* tokens per block */
#define TC_LDS (SMOL_GEMM_BK + 8)      /* f16 row stride in shared memory: 272 bytes */

static __device__ __forceinline__ uint32_t pack_h2(float a, float b)
{
    const __half2 h = __floats2half2_rn(a, b);
    return *(const uint32_t *)&h;
}

/* the 32 values y to f16 at dst (16-byte aligned) */
static __device__ __forceinline__ void store32(__half *dst, const float y[32])
{
#pragma unroll
    for (int v = 0; v < 4; v++) {
        uint4 u;
        u.x = pack_h2(y[8 * v + 0], y[8 * v + 1]);
        u.y = pack_h2(y[8 * v + 2], y[8 * v + 3]);
        u.z = pack_h2(y[8 * v + 4], y[8 * v + 5]);
        u.w = pack_h2(y[8 * v + 6], y[8 * v + 7]);
        *(uint4 *)(dst + 8 * v) = u;
    }
}

/* ---- the kernel ---------------------------------------------------------------------------------- */

struct gemm_args {
    float *out;             /* [n][rows], or the partials [splits][n][rows] */
    const uint8_t *w;
    const __half *x;        /* [n][cols] */
    const float *x32;       /* F32 kernels: the activations [n][cols] as f32 */
    float *part;            /* tickets != NULL: the partials [splits][n][rows], summed in the kernel */
    unsigned *tickets;      /* one per (row tile, token tile) of a split grid, 0 between launches */
    size_t n_blocks;
    int rows, cols, n, mode, steps_per_split;
};

/* ---- pieces the fused kernels share (knob cuda_gemm_fuse) ------------------------------------------ */

#define TC_XIT (TC_BN * (SMOL_GEMM_BK / 8) / TC_THREADS)  /* 8-float activation pieces a thread per step: 4 */

/* the thread's pieces of step k of x32 into registers: piece idx = tid + TC_THREADS i is token
 * idx / 16, floats 8 (idx % 16) of the step (4 consecutive pieces = one 32-column block) */
static __device__ __forceinline__ void x32_load(float4 (&xr)[TC_XIT][2], const float *x32, int cols, int t0, int nt,
                                                int k, int tid)
{
#pragma unroll
    for (int i = 0; i < TC_XIT; i++) {
        const int idx = tid + TC_THREADS * i;
        if (idx < nt * 16) {
            const float4 *src = (const float4 *)(x32 + (size_t)(t0 + (idx >> 4)) * cols + (size_t)k * SMOL_GEMM_BK + 8 * (idx & 15));
            xr[i][0] = __ldg(src);
            xr[i][1] = __ldg(src + 1);
        } else {
            xr[i][0] = xr[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

/* ... as f16 into a stage of Xs ([TC_BN][TC_LDS]): f16_kernel's rounding */
static __device__ __forceinline__ void x32_store_f16(const float4 (&xr)[TC_XIT][2], __half *xs, int nt, int tid)
{
#pragma unroll
    for (int i = 0; i < TC_XIT; i++) {
        const int idx = tid + TC_THREADS * i;
        if (idx < nt * 16) {
            const float4 a = xr[i][0], b = xr[i][1];
            *(uint4 *)(xs + (idx >> 4) * TC_LDS + 8 * (idx & 15)) =
                make_uint4(pack_h2(a.x, a.y), pack_h2(a.z, a.w), pack_h2(b.x, b.y), pack_h2(b.z, b.w));
        }
    }
}

/* Split-K epilogue in the kernel: the block's partial tile is in part[blockIdx.z]; the last split
 * of this (row tile, token tile) to arrive sums all of them in split order and stores / adds
 * (out[t][r], rows x n). */
template <int BM>
static __device__ void split_finish(float *out, const float *part, unsigned *tickets, int rows, int n, int mode,
                                    int r0, int t0)
{
    __shared__ int last;
    __threadfence();  /* this block's partials visible device-wide before its ticket */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *tk = tickets + blockIdx.y * gridDim.x + blockIdx.x;
        last = atomicAdd(tk, 1u) == gridDim.z - 1;
        if (last) *tk = 0u;  /* for the next launch (a replayed graph's too) */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const size_t count = (size_t)n * rows;
    for (int idx = threadIdx.x; idx < BM * TC_BN; idx += TC_THREADS) {
        const int r = r0 + idx % BM, t = t0 + idx / BM;
        if (r >= rows || t >= n) continue;
        const size_t i = (size_t)t * rows + r;
        float v = 0.0f;
        for (unsigned s = 0; s < gridDim.z; s++) v += __ldcg(part + s * count + i);  /* split_sum_kernel's order */
        if (mode == SMOL_MV_ADD) out[i] += v;
        else out[i] = v;
    }
}

template <int T, int BM>
constexpr int smem_bytes()
{
    return BM * TC_LDS * 2 + 2 * TC_BN * TC_LDS * 2 + 2 * BM * SMOL_GEMM_RB(T);
}

template <int T, int BM, bool F32>
static __global__ void __launch_bounds__(TC_THREADS) gemm_kernel(const struct gemm_args a)
{
    constexpr int WM = BM / 32, WN = 8 / WM;      /* warps along rows and tokens */
    constexpr int NT = TC_BN / (8 * WN);          /* n8 tiles per warp: 4 (BM 128) or 2 (BM 64) */
    constexpr int NP = SMOL_GEMM_NP(T), RB = SMOL_GEMM_RB(T);  /* a row's pieces and bytes (mmq_tc.h) */
    extern __shared__ __align__(16) uint8_t smem[];
    __half *Ws = (__half *)smem;                                  /* [BM][TC_LDS] */
    __half *Xs = Ws + BM * TC_LDS;                                /* [2][TC_BN][TC_LDS] */
    uint8_t *Raw = (uint8_t *)(Xs + 2 * TC_BN * TC_LDS);          /* [2][BM][RB] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = (warp % WM) * 32, wn = (warp / WM) * (8 * NT);
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * TC_BN;
    const int nk = a.cols / SMOL_GEMM_BK;
    const int k_begin = blockIdx.z * a.steps_per_split;
    const int k_end = min(nk, k_begin + a.steps_per_split);

    /* a block's tokens past the end: zero rows in both stages, written once and never loaded
     * (clamped loads sent up to 63 copies of the last row's bytes to one L2 line per step: the
     * 16-token GEMM ran 2.4x slower than the 64-token one, device run 3) */
    const int nt = min(TC_BN, a.n - t0);
    if (nt < TC_BN)
        for (int idx = tid; idx < 2 * (TC_BN - nt) * (SMOL_GEMM_BK / 8); idx += TC_THREADS) {
            const int st = idx / ((TC_BN - nt) * (SMOL_GEMM_BK / 8)), rest = idx % ((TC_BN - nt) * (SMOL_GEMM_BK / 8));
            const int tt = nt + (rest >> 4), p = rest & 15;
            *(uint4 *)(Xs + st * TC_BN * TC_LDS + tt * TC_LDS + 8 * p) = make_uint4(0, 0, 0, 0);
        }

    /* stage s <- step k: the raw weight pieces and the activations */
    auto issue = [&](int k, int s) {
        uint8_t *raw = Raw + s * BM * RB;
        for (int idx = tid; idx < BM * NP; idx += TC_THREADS) {
            const int rr = idx / NP, p = idx - rr * NP;
            const int r = min(r0 + rr, a.rows - 1);
            size_t src;
            int off;
            const int bytes = smol_gemm_piece(T, p, a.n_blocks, r, k, a.cols, &src, &off);
            uint8_t *dst = raw + rr * RB + off;
            if (bytes == 16) cp_async<16>(dst, a.w + src);
            else if (bytes == 8) cp_async<8>(dst, a.w + src);
            else cp_async<4>(dst, a.w + src);
        }
        __half *xs = Xs + s * TC_BN * TC_LDS;
        if (!F32)
            for (int idx = tid; idx < nt * (SMOL_GEMM_BK / 8); idx += TC_THREADS) {
                const int tt = idx >> 4, p = idx & 15;
                cp_async<16>(xs + tt * TC_LDS + 8 * p, a.x + (size_t)(t0 + tt) * a.cols + (size_t)k * SMOL_GEMM_BK + 8 * p);
            }
        cp_commit();
    };
    float4 xr[TC_XIT][2];  /* F32: the next step's activations, in flight across this step's decode */

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) acc[i][j][v] = 0.0f;

    if (k_begin < k_end) {
        issue(k_begin, 0);
        if (F32) {
            x32_load(xr, a.x32, a.cols, t0, nt, k_begin, tid);
            x32_store_f16(xr, Xs, nt, tid);
        }
    }
    for (int k = k_begin; k < k_end; k++) {
        const int s = (k - k_begin) & 1;
        if (k + 1 < k_end) {
            issue(k + 1, s ^ 1);
            if (F32) x32_load(xr, a.x32, a.cols, t0, nt, k + 1, tid);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        /* decode: (row, chunk) pieces, a warp's lanes on consecutive rows of one chunk */
        const uint8_t *raw = Raw + s * BM * RB;
#pragma unroll 1
        for (int task = tid; task < BM * 4; task += TC_THREADS) {
            const int rr = task % BM, j = task / BM;
            float y[32];
            smol_gemm_decode(T, raw + rr * RB, min(r0 + rr, a.rows - 1), k, a.cols, j, y);
            store32(Ws + rr * TC_LDS + 32 * j, y);
        }
        /* F32: the next step's activations into the other stage (last read before the barrier
         * that ended the step before; first read after the next step's first barrier) */
        if (F32 && k + 1 < k_end) x32_store_f16(xr, Xs + (s ^ 1) * TC_BN * TC_LDS, nt, tid);
        __syncthreads();
        const __half *xs = Xs + s * TC_BN * TC_LDS;
#pragma unroll
        for (int kk = 0; kk < SMOL_GEMM_BK; kk += 16) {
            uint32_t af[2][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldsm_x4(Ws + (wm + 16 * i + (lane & 15)) * TC_LDS + kk + 8 * (lane >> 4), af[i]);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                uint32_t b[4];
                ldsm_x4(xs + (wn + 8 * j + (lane & 7) + 8 * (lane >> 4)) * TC_LDS + kk + 8 * ((lane >> 3) & 1), b);
                bf[j][0] = b[0];
                bf[j][1] = b[1];
                bf[j + 1][0] = b[2];
                bf[j + 1][1] = b[3];
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) mma16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
        __syncthreads();  /* Ws and this stage are rewritten next */
    }

    /* epilogue: c0 c1 at row g, tokens 2q, 2q + 1; c2 c3 at row g + 8 */
    const int g = lane >> 2, q = lane & 3;
    const bool fin = a.tickets && gridDim.z > 1;  /* split-K summed in this kernel */
    float *out = (fin ? a.part : a.out) + (size_t)blockIdx.z * a.n * a.rows;  /* z > 0 only with partials */
    const int mode = fin ? SMOL_MV_STORE : a.mode;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) {
                const int r = r0 + wm + 16 * i + g + 8 * (v >> 1), t = t0 + wn + 8 * j + 2 * q + (v & 1);
                if (r < a.rows && t < a.n) {
                    float *o = out + (size_t)t * a.rows + r;
                    if (mode == SMOL_MV_ADD) *o += acc[i][j][v];
                    else *o = acc[i][j][v];
                }
            }
    if (fin) split_finish<BM>(a.out, a.part, a.tickets, a.rows, a.n, a.mode, r0, t0);
}

/* out[i] (=, +=) the sum of the splits' partials part[s][i], s in order */
static __global__ void split_sum_kernel(float *out, const float *part, size_t count, int splits, int mode)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++) v += part[(size_t)s * count + i];
        if (mode == SMOL_MV_ADD) out[i] += v;
        else out[i] = v;
    }
}

static __global__ void f16_kernel(__half2 *dst, const float4 *x, size_t count4)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        dst[2 * i] = __floats2half2_rn(v.x, v.y);
        dst[2 * i + 1] = __floats2half2_rn(v.z, v.w);
    }
}

cudaError_t smol_f16_from_f32_cuda(uint16_t *dst, const float *x, size_t count, cudaStream_t st)
{
    if (!count) return cudaSuccess;
    if (count % 4) return cudaErrorInvalidValue;
    const size_t c4 = count / 4;
    const int blocks = (int)(c4 / 256 + 1 < 4096 ? c4 / 256 + 1 : 4096);
    f16_kernel<<<blocks, 256, 0, st>>>((__half2 *)dst, (const float4 *)x, c4);
    return cudaGetLastError();
}

/* ---- launch ------------------------------------------------------------------------------------- */

/* grid shape: BM 128 unless that leaves the device under two blocks per SM, then BM 64; split K
 * while the blocks are fewer than the SMs can hold at once (two per SM), at least 8 steps a split */
struct plan { int bm, splits, steps; };

static struct plan plan_of(int rows, int cols, int n, int n_sm)
{
    struct plan p;
    const int ty = (n + TC_BN - 1) / TC_BN, nk = cols / SMOL_GEMM_BK;
    p.bm = (long)((rows + 127) / 128) * ty >= 2L * n_sm ? 128 : 64;
    const long blocks = (long)((rows + p.bm - 1) / p.bm) * ty;
    int splits = 1;
    while (blocks * splits * 2 <= 2L * n_sm && nk / (splits * 2) >= 8) splits *= 2;
    p.steps = (nk + splits - 1) / splits;
    p.splits = (nk + p.steps - 1) / p.steps;
    return p;
}

/* K splits only where the blocks are fewer than n_sm (BM 64 then) and their count times the
 * splits stays <= 2 n_sm, so splits * n * rows <= 2 n_sm * TC_BN * 64 */
size_t smol_gemm_part_need(int n_sm)
{
    return (size_t)2 * (n_sm > 0 ? n_sm : 1) * TC_BN * 64;
}

template <int T, int BM, bool F32>
static cudaError_t launch(const struct gemm_args &a, dim3 grid, cudaStream_t st)
{
    constexpr int bytes = smem_bytes<T, BM>();
    static bool set;  /* the engine thread only; setting it twice is harmless */
    if (!set) {
        const cudaError_t e = cudaFuncSetAttribute(gemm_kernel<T, BM, F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (e != cudaSuccess) return e;
        set = true;
    }
    gemm_kernel<T, BM, F32><<<grid, TC_THREADS, bytes, st>>>(a);
    return cudaGetLastError();
}

template <int T>
static cudaError_t launch_bm(int bm, const struct gemm_args &a, dim3 grid, cudaStream_t st)
{
    if (a.x32) return bm == 128 ? launch<T, 128, true>(a, grid, st) : launch<T, 64, true>(a, grid, st);
    return bm == 128 ? launch<T, 128, false>(a, grid, st) : launch<T, 64, false>(a, grid, st);
}

/* the grid of a mat-mul: plan_of, less the split where the partials (or, for the fused path, the
 * tickets: one per tile) do not fit */
static struct plan plan_fit(int rows, int cols, int n, int n_sm, const float *part, size_t part_cap,
                            const unsigned *tickets, size_t n_tickets)
{
    struct plan p = plan_of(rows, cols, n, n_sm > 0 ? n_sm : 1);
    const size_t tiles = (size_t)((rows + p.bm - 1) / p.bm) * (size_t)((n + TC_BN - 1) / TC_BN);
    if (p.splits > 1 && (!part || (size_t)p.splits * n * rows > part_cap || (tickets && tiles > n_tickets))) {
        p.splits = 1;
        p.steps = cols / SMOL_GEMM_BK;
    }
    return p;
}

size_t smol_gemm_tickets_need(int n_sm)
{
    return (size_t)(n_sm > 0 ? n_sm : 1);  /* plan_of splits only grids of <= n_sm tiles */
}

/* x16 (f16, split_sum_kernel for split-K) or x32 (f32, converted in the kernel, split-K summed
 * there with tickets) */
static cudaError_t gemm_mma(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                            const uint16_t *x16, const float *x32, int n, int n_sm, float *part, size_t part_cap,
                            unsigned *tickets, size_t n_tickets, cudaStream_t st)
{
    if (n <= 0 || rows <= 0) return cudaSuccess;
    if (!smol_gemm_type_ok(type) || cols <= 0 || cols % SMOL_GEMM_BK ||
        ((type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K) && cols % QK_K) ||
        (mode != SMOL_MV_STORE && mode != SMOL_MV_ADD) || (x32 && !tickets))
        return cudaErrorInvalidValue;
    const struct plan p = plan_fit(rows, cols, n, n_sm, part, part_cap, tickets, n_tickets);
    struct gemm_args a;
    a.out = p.splits > 1 && !x32 ? part : out;
    a.w = w;
    a.x = (const __half *)x16;
    a.x32 = x32;
    a.part = part;
    a.tickets = x32 ? tickets : NULL;
    a.n_blocks = (size_t)rows * (cols / (type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K ? QK_K : 32));
    a.rows = rows;
    a.cols = cols;
    a.n = n;
    a.mode = p.splits > 1 && !x32 ? SMOL_MV_STORE : mode;
    a.steps_per_split = p.steps;
    const dim3 grid((rows + p.bm - 1) / p.bm, (n + TC_BN - 1) / TC_BN, p.splits);
    cudaError_t e;
    switch (type) {
    case SMOL_TYPE_Q4_K: e = launch_bm<SMOL_TYPE_Q4_K>(p.bm, a, grid, st); break;
    case SMOL_TYPE_Q6_K: e = launch_bm<SMOL_TYPE_Q6_K>(p.bm, a, grid, st); break;
    case SMOL_TYPE_Q8_0: e = launch_bm<SMOL_TYPE_Q8_0>(p.bm, a, grid, st); break;
    case SMOL_TYPE_Q4_0: e = launch_bm<SMOL_TYPE_Q4_0>(p.bm, a, grid, st); break;
    default: e = launch_bm<SMOL_TYPE_Q4_1>(p.bm, a, grid, st); break;
    }
    if (e != cudaSuccess || p.splits == 1 || x32) return e;
    const size_t count = (size_t)n * rows;
    const int blocks = (int)(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
    split_sum_kernel<<<blocks, 256, 0, st>>>(out, part, count, p.splits, mode);
    return cudaGetLastError();
}

cudaError_t smol_gemm_mma_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                               const uint16_t *x16, int n, int n_sm, float *part, size_t part_cap, cudaStream_t st)
{
    return gemm_mma(out, mode, type, w, rows, cols, x16, NULL, n, n_sm, part, part_cap, NULL, 0, st);
}

cudaError_t smol_gemm_mma_f32_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                   const float *x, int n, int n_sm, float *part, size_t part_cap, unsigned *tickets,
                                   size_t n_tickets, cudaStream_t st)
{
    return gemm_mma(out, mode, type, w, rows, cols, NULL, x, n, n_sm, part, part_cap, tickets, n_tickets, st);
}

/* ==== the int8 GEMM (knob cuda_gemm = imma; data path in mmq_imma.h) ====================================
 *
 * The f16 kernel's block shape, K steps, raw weight pieces, zero token rows, split-K and epilogue;
 * what differs: the activations arrive as q8a (int8 rows and their 32-block scales, cp.async'd
 * beside the weights), each thread unpacks BM * 4 / 256 (row, chunk) pieces of the raw stage to
 * int8 (smol_imma_unpack) and their float scales (smol_imma_scales) into shared memory, and per
 * 32-element chunk each warp runs mma.sync m16n8k32 s8 (q6_K: two m16n8k16, a scale per 16) into
 * int32 fragments that are scaled into the f32 accumulators right away (smol_imma_fma, for q4_K
 * also smol_imma_min): per (row, token) the order and expressions of smol_imma_row_ref.
 * Fragments: an int8 m16n8k32 A / B / C fragment holds the same bytes in the same lanes as an f16
 * m16n8k16 one, so the f16 kernel's ldmatrix addressing serves, in bytes; tile rows are padded to
 * 144 bytes (36 words: ldmatrix, unpack stores and cp.async writes conflict-free). */

struct imma_args {
    float *out;                    /* [n][rows], or the partials [splits][n][rows] */
    const uint8_t *w;
    const int8_t *xq;              /* [n][cols] */
    const struct smol_q8a *xs;     /* [n][cols / 32] */
    const float *x32;              /* F32 kernels: the activations [n][cols] as f32, quantized here */
    float *part;                   /* tickets != NULL: the partials, summed in the kernel (gemm_args) */
    unsigned *tickets;
    size_t n_blocks;
    int rows, cols, n, mode, steps_per_split;
};

/* int8 tile [BM][LDS], chunk scales [4][BM] float2, activations [2][TC_BN][LDS] int8, their q8a
 * [2][4][TC_BN], raw weight stages [2][BM][RB] */
template <int T, int BM>
constexpr int imma_smem_bytes()
{
    return BM * SMOL_IMMA_LDS + 4 * BM * 8 + 2 * TC_BN * SMOL_IMMA_LDS + 2 * 4 * TC_BN * 16 + 2 * BM * SMOL_GEMM_RB(T);
}

/* F32: the thread's pieces (x32_load) quantized to q8a into a stage: 4 lanes a 32-column block
 * (piece idx % 4 = its quarter), q8a_block's arithmetic (amax over the block, d = amax / 127,
 * q = roundf(x / d), s0 / s1 = d * the sums of q over each half): int8 rows [TC_BN][LDS] at xq,
 * their q8a at xc [4][TC_BN].  Every thread calls it (shuffles; pieces past nt * 16 are whole
 * quads and store nothing). */
static __device__ __forceinline__ void x32_store_q8a(const float4 (&xr)[TC_XIT][2], uint8_t *xq, struct smol_q8a *xc,
                                                     int nt, int tid)
{
#pragma unroll
    for (int i = 0; i < TC_XIT; i++) {
        const int idx = tid + TC_THREADS * i, tt = idx >> 4, j = (idx >> 2) & 3, sub = idx & 3;
        const float v[8] = {xr[i][0].x, xr[i][0].y, xr[i][0].z, xr[i][0].w, xr[i][1].x, xr[i][1].y, xr[i][1].z, xr[i][1].w};
        float amax = 0.0f;
#pragma unroll
        for (int l = 0; l < 8; l++) amax = fmaxf(amax, fabsf(v[l]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int p = 0;
        uint32_t w[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 8; l++) {
            const int iv = (int)roundf(v[l] * id);
            p += iv;
            w[l >> 2] |= (uint32_t)(iv & 0xff) << (8 * (l & 3));
        }
        p += __shfl_xor_sync(0xffffffffu, p, 1);               /* quarters 0 + 1: the first half's sum */
        const int p1 = __shfl_xor_sync(0xffffffffu, p, 2);     /* at quarter 0: the second half's */
        if (idx < nt * 16) {
            *(uint2 *)(xq + tt * SMOL_IMMA_LDS + 32 * j + 8 * sub) = make_uint2(w[0], w[1]);
            if (sub == 0) *(float4 *)(xc + j * TC_BN + tt) = make_float4(d, d * (float)p, d * (float)p1, 0.0f);
        }
    }
}

template <int T, int BM, bool F32>
static __global__ void __launch_bounds__(TC_THREADS) imma_kernel(const struct imma_args a)
{
    constexpr int WM = BM / 32, WN = 8 / WM;
    constexpr int NT = TC_BN / (8 * WN);
    constexpr int NP = SMOL_GEMM_NP(T), RB = SMOL_GEMM_RB(T), LDS = SMOL_IMMA_LDS;
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *Ws = smem;                                                /* [BM][LDS] int8 */
    float2 *Sw = (float2 *)(Ws + BM * LDS);                            /* [4][BM] */
    uint8_t *Xs = (uint8_t *)(Sw + 4 * BM);                            /* [2][TC_BN][LDS] int8 */
    struct smol_q8a *Xc = (struct smol_q8a *)(Xs + 2 * TC_BN * LDS);   /* [2][4][TC_BN] */
    uint8_t *Raw = (uint8_t *)(Xc + 2 * 4 * TC_BN);                    /* [2][BM][RB] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = (warp % WM) * 32, wn = (warp / WM) * (8 * NT);
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * TC_BN;
    const int nk = a.cols / SMOL_GEMM_BK, nb32 = a.cols >> 5;
    const int k_begin = blockIdx.z * a.steps_per_split;
    const int k_end = min(nk, k_begin + a.steps_per_split);

    /* tokens past the end: zero rows and zero scales in both stages, never loaded (as the f16 kernel) */
    const int nt = min(TC_BN, a.n - t0);
    if (nt < TC_BN) {
        for (int idx = tid; idx < 2 * (TC_BN - nt) * (LDS / 16); idx += TC_THREADS) {
            const int st = idx / ((TC_BN - nt) * (LDS / 16)), rest = idx % ((TC_BN - nt) * (LDS / 16));
            const int tt = nt + rest / (LDS / 16), p = rest % (LDS / 16);
            *(uint4 *)(Xs + st * TC_BN * LDS + tt * LDS + 16 * p) = make_uint4(0, 0, 0, 0);
        }
        for (int idx = tid; idx < 2 * 4 * (TC_BN - nt); idx += TC_THREADS) {
            const int sj = idx / (TC_BN - nt), tt = nt + idx % (TC_BN - nt);
            *(uint4 *)(Xc + sj * TC_BN + tt) = make_uint4(0, 0, 0, 0);
        }
    }

    auto issue = [&](int k, int s) {
        uint8_t *raw = Raw + s * BM * RB;
        for (int idx = tid; idx < BM * NP; idx += TC_THREADS) {
            const int rr = idx / NP, p = idx - rr * NP;
            const int r = min(r0 + rr, a.rows - 1);
            size_t src;
            int off;
            const int bytes = smol_gemm_piece(T, p, a.n_blocks, r, k, a.cols, &src, &off);
            uint8_t *dst = raw + rr * RB + off;
            if (bytes == 16) cp_async<16>(dst, a.w + src);
            else if (bytes == 8) cp_async<8>(dst, a.w + src);
            else cp_async<4>(dst, a.w + src);
        }
        if (!F32) {
            uint8_t *xs = Xs + s * TC_BN * LDS;
            for (int idx = tid; idx < nt * (SMOL_GEMM_BK / 16); idx += TC_THREADS) {
                const int tt = idx >> 3, p = idx & 7;
                cp_async<16>(xs + tt * LDS + 16 * p, a.xq + (size_t)(t0 + tt) * a.cols + (size_t)k * SMOL_GEMM_BK + 16 * p);
            }
            struct smol_q8a *xc = Xc + s * 4 * TC_BN;
            for (int idx = tid; idx < nt * 4; idx += TC_THREADS) {
                const int tt = idx >> 2, j = idx & 3;
                cp_async<16>(xc + j * TC_BN + tt, a.xs + (size_t)(t0 + tt) * nb32 + 4 * k + j);
            }
        }
        cp_commit();
    };
    float4 xr[TC_XIT][2];  /* F32: the next step's activations, in flight across this step's unpack */

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) acc[i][j][v] = 0.0f;

    const int g = lane >> 2, q = lane & 3;
    if (k_begin < k_end) {
        issue(k_begin, 0);
        if (F32) {
            x32_load(xr, a.x32, a.cols, t0, nt, k_begin, tid);
            x32_store_q8a(xr, Xs, Xc, nt, tid);
        }
    }
    for (int k = k_begin; k < k_end; k++) {
        const int s = (k - k_begin) & 1;
        if (k + 1 < k_end) {
            issue(k + 1, s ^ 1);
            if (F32) x32_load(xr, a.x32, a.cols, t0, nt, k + 1, tid);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        /* unpack: (row, chunk) pieces, a warp's lanes on consecutive rows of one chunk */
        const uint8_t *raw = Raw + s * BM * RB;
#pragma unroll 1
        for (int task = tid; task < BM * 4; task += TC_THREADS) {
            const int rr = task % BM, j = task / BM;
            uint32_t wv[8];
            float sc[2], mn;
            smol_imma_unpack(T, raw + rr * RB, j, wv);
            smol_imma_scales(T, raw + rr * RB, min(r0 + rr, a.rows - 1), k, a.cols, j, sc, &mn);
            *(uint4 *)(Ws + rr * LDS + 32 * j) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
            *(uint4 *)(Ws + rr * LDS + 32 * j + 16) = make_uint4(wv[4], wv[5], wv[6], wv[7]);
            Sw[j * BM + rr] = T == SMOL_TYPE_Q6_K ? make_float2(sc[0], sc[1]) : make_float2(sc[0], mn);
        }
        /* F32: the next step's activations, quantized, into the other stage (as the f16 kernel) */
        if (F32 && k + 1 < k_end) x32_store_q8a(xr, Xs + (s ^ 1) * TC_BN * LDS, Xc + (s ^ 1) * 4 * TC_BN, nt, tid);
        __syncthreads();
        const uint8_t *xs = Xs + s * TC_BN * LDS;
        const struct smol_q8a *xc = Xc + s * 4 * TC_BN;
#pragma unroll 1
        for (int j = 0; j < 4; j++) {
            uint32_t bf[NT][2];
#pragma unroll
            for (int jj = 0; jj < NT; jj += 2) {
                uint32_t b[4];
                ldsm_x4(xs + (wn + 8 * jj + (lane & 7) + 8 * (lane >> 4)) * LDS + 32 * j + 16 * ((lane >> 3) & 1), b);
                bf[jj][0] = b[0];
                bf[jj][1] = b[1];
                bf[jj + 1][0] = b[2];
                bf[jj + 1][1] = b[3];
            }
            float xd[NT][2], xm[NT][2];  /* the tokens' d and (q4_K) d * their sum */
#pragma unroll
            for (int jj = 0; jj < NT; jj++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float4 v = *(const float4 *)(xc + j * TC_BN + wn + 8 * jj + 2 * q + e);
                    xd[jj][e] = v.x;
                    xm[jj][e] = v.y + v.z;
                }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t af[4];
                ldsm_x4(Ws + (wm + 16 * i + (lane & 15)) * LDS + 32 * j + 16 * (lane >> 4), af);
                const float2 sr[2] = {Sw[j * BM + wm + 16 * i + g], Sw[j * BM + wm + 16 * i + g + 8]};
                if (T == SMOL_TYPE_Q6_K) {
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int jj = 0; jj < NT; jj++) {
                            int c[4];
                            imma16816(c, af[2 * h], af[2 * h + 1], bf[jj][h]);
#pragma unroll
                            for (int v = 0; v < 4; v++)
                                acc[i][jj][v] = smol_imma_fma(acc[i][jj][v], h ? sr[v >> 1].y : sr[v >> 1].x,
                                                              xd[jj][v & 1], c[v]);
                        }
                } else {
#pragma unroll
                    for (int jj = 0; jj < NT; jj++) {
                        int c[4];
                        imma16832(c, af, bf[jj][0], bf[jj][1]);
#pragma unroll
                        for (int v = 0; v < 4; v++) {
                            acc[i][jj][v] = smol_imma_fma(acc[i][jj][v], sr[v >> 1].x, xd[jj][v & 1], c[v]);
                            if (T == SMOL_TYPE_Q4_K) acc[i][jj][v] = smol_imma_min(acc[i][jj][v], sr[v >> 1].y, xm[jj][v & 1]);
                        }
                    }
                }
            }
        }
        __syncthreads();  /* Ws, Sw and this stage are rewritten next */
    }

    const bool fin = a.tickets && gridDim.z > 1;  /* split-K summed in this kernel */
    float *out = (fin ? a.part : a.out) + (size_t)blockIdx.z * a.n * a.rows;
    const int mode = fin ? SMOL_MV_STORE : a.mode;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) {
                const int r = r0 + wm + 16 * i + g + 8 * (v >> 1), t = t0 + wn + 8 * j + 2 * q + (v & 1);
                if (r < a.rows && t < a.n) {
                    float *o = out + (size_t)t * a.rows + r;
                    if (mode == SMOL_MV_ADD) *o += acc[i][j][v];
                    else *o = acc[i][j][v];
                }
            }
    if (fin) split_finish<BM>(a.out, a.part, a.tickets, a.rows, a.n, a.mode, r0, t0);
}

template <int T, int BM, bool F32>
static cudaError_t launch_imma(const struct imma_args &a, dim3 grid, cudaStream_t st)
{
    constexpr int bytes = imma_smem_bytes<T, BM>();
    static bool set;
    if (!set) {
        const cudaError_t e = cudaFuncSetAttribute(imma_kernel<T, BM, F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (e != cudaSuccess) return e;
        set = true;
    }
    imma_kernel<T, BM, F32><<<grid, TC_THREADS, bytes, st>>>(a);
    return cudaGetLastError();
}

template <int T>
static cudaError_t launch_imma_bm(int bm, const struct imma_args &a, dim3 grid, cudaStream_t st)
{
    if (a.x32) return bm == 128 ? launch_imma<T, 128, true>(a, grid, st) : launch_imma<T, 64, true>(a, grid, st);
    return bm == 128 ? launch_imma<T, 128, false>(a, grid, st) : launch_imma<T, 64, false>(a, grid, st);
}

/* q8a activations (xq, xs; split_sum_kernel for split-K) or x32 (quantized in the kernel, split-K
 * summed there with tickets) */
static cudaError_t gemm_imma(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                             const int8_t *xq, const struct smol_q8a *xs, const float *x32, int n, int n_sm,
                             float *part, size_t part_cap, unsigned *tickets, size_t n_tickets, cudaStream_t st)
{
    if (n <= 0 || rows <= 0) return cudaSuccess;
    if (!smol_imma_type_ok(type) || cols <= 0 || cols % SMOL_GEMM_BK ||
        ((type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K) && cols % QK_K) ||
        (mode != SMOL_MV_STORE && mode != SMOL_MV_ADD) || (x32 && !tickets))
        return cudaErrorInvalidValue;
    const struct plan p = plan_fit(rows, cols, n, n_sm, part, part_cap, tickets, n_tickets);
    struct imma_args a;
    a.out = p.splits > 1 && !x32 ? part : out;
    a.w = w;
    a.xq = xq;
    a.xs = xs;
    a.x32 = x32;
    a.part = part;
    a.tickets = x32 ? tickets : NULL;
    a.n_blocks = (size_t)rows * (cols / (type == SMOL_TYPE_Q8_0 ? 32 : QK_K));
    a.rows = rows;
    a.cols = cols;
    a.n = n;
    a.mode = p.splits > 1 && !x32 ? SMOL_MV_STORE : mode;
    a.steps_per_split = p.steps;
    const dim3 grid((rows + p.bm - 1) / p.bm, (n + TC_BN - 1) / TC_BN, p.splits);
    cudaError_t e;
    switch (type) {
    case SMOL_TYPE_Q4_K: e = launch_imma_bm<SMOL_TYPE_Q4_K>(p.bm, a, grid, st); break;
    case SMOL_TYPE_Q6_K: e = launch_imma_bm<SMOL_TYPE_Q6_K>(p.bm, a, grid, st); break;
    default: e = launch_imma_bm<SMOL_TYPE_Q8_0>(p.bm, a, grid, st); break;
    }
    if (e != cudaSuccess || p.splits == 1 || x32) return e;
    const size_t count = (size_t)n * rows;
    const int blocks = (int)(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
    split_sum_kernel<<<blocks, 256, 0, st>>>(out, part, count, p.splits, mode);
    return cudaGetLastError();
}

cudaError_t smol_gemm_imma_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                const int8_t *xq, const struct smol_q8a *xs, int n, int n_sm, float *part,
                                size_t part_cap, cudaStream_t st)
{
    return gemm_imma(out, mode, type, w, rows, cols, xq, xs, NULL, n, n_sm, part, part_cap, NULL, 0, st);
}

cudaError_t smol_gemm_imma_f32_cuda(float *out, int mode, uint32_t type, const uint8_t *w, int rows, int cols,
                                    const float *x, int n, int n_sm, float *part, size_t part_cap, unsigned *tickets,
                                    size_t n_tickets, cudaStream_t st)
{
    return gemm_imma(out, mode, type, w, rows, cols, NULL, NULL, x, n, n_sm, part, part_cap, tickets, n_tickets, st);
}
