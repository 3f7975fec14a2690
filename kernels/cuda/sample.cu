/*
 * sample.cu - token sampling on the device, so a decode step moves 4 bytes
 * per sequence to the host instead of vocab * 4 (512 KB for 128K tokens).
 *
 * One block of 1024 threads per row.  argmax keeps the lowest id on ties
 * and never picks NaN (sampler.c's rule).  top_p: p_i = exp((x_i - max) /
 * temp); the nucleus threshold tau (the largest tau whose mass
 * sum_{p_i >= tau} p_i still reaches top_p * Z) is found by 30 bisection
 * steps instead of a sort; the token is then found by a block prefix sum
 * in id order, at u * (kept mass).  Equal to the sort-based nucleus up to
 * probabilities within 2^-30 of the threshold.
 */
#include "common.cuh"
#include "ops_cuda.cuh"

#define SAMPLE_THREADS 1024

struct vi { float v; int i; };

static __device__ __forceinline__ struct vi vi_better(struct vi a, struct vi b)
{
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

static __device__ int row_argmax(const float *x, int vocab, float *sh_v, int *sh_i)
{
    struct vi best = {-INFINITY, -1};
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x[i];
        if (v == v && (best.i < 0 ? v > -INFINITY : v > best.v)) best = (struct vi){v, i};
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        struct vi other = {__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
        best = vi_better(best, other);
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) { sh_v[wid] = best.v; sh_i[wid] = best.i; }
    __syncthreads();
    if (wid == 0) {
        best = lane < (int)(blockDim.x >> 5) ? (struct vi){sh_v[lane], sh_i[lane]} : (struct vi){-INFINITY, -1};
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            struct vi other = {__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
            best = vi_better(best, other);
        }
        if (lane == 0) sh_i[32] = best.i;
    }
    __syncthreads();
    return sh_i[32];
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) argmax_kernel(const float *logits, int vocab, int32_t *out)
{
    __shared__ float sh_v[32];
    __shared__ int sh_i[33];
    const int id = row_argmax(logits + (size_t)blockIdx.x * vocab, vocab, sh_v, sh_i);
    if (threadIdx.x == 0) out[blockIdx.x] = id;
}

static __global__ void __launch_bounds__(SAMPLE_THREADS)
top_p_kernel(const float *logits, int vocab, const float *temp, const float *top_p, const float *u, int32_t *out)
{
    __shared__ float sh[33];
    __shared__ float sh_v[32];
    __shared__ int sh_i[33];
    const int r = blockIdx.x;
    const float *x = logits + (size_t)r * vocab;
    const int best = row_argmax(x, vocab, sh_v, sh_i);
    if (!(temp[r] > 0.0f) || best < 0) {
        if (threadIdx.x == 0) out[r] = best;
        return;
    }
    const float it = 1.0f / temp[r], mx = x[best];
    /* p_i in (0, 1], the argmax has 1; NaN / -inf count as 0 */
#define P(i) (x[i] == x[i] ? expf((x[i] - mx) * it) : 0.0f)
    float z = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += P(i);
    z = block_sum(z, sh);
    float lo = 0.0f;
    if (top_p[r] < 1.0f) {
        const float target = top_p[r] * z;
        float hi = 1.0f;
        for (int it2 = 0; it2 < 30; it2++) {
            const float mid = 0.5f * (lo + hi);
            float m = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
                const float p = P(i);
                m += p >= mid ? p : 0.0f;
            }
            m = block_sum(m, sh);
            if (m >= target) lo = mid;
            else hi = mid;
        }
    }
    /* kept mass per thread over a contiguous id range, then a block scan */
    const int per = (vocab + blockDim.x - 1) / blockDim.x;
    const int b0 = threadIdx.x * per, b1 = min(vocab, b0 + per);
    float mine = 0.0f;
    for (int i = b0; i < b1; i++) {
        const float p = P(i);
        mine += p >= lo ? p : 0.0f;
    }
    const float total = block_sum(mine, sh);
    const float want = u[r] * total;
    /* exclusive prefix of `mine` over threads: warp scan, then warp totals */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float inc = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float v = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += v;
    }
    __syncthreads();
    if (lane == 31) sh[wid] = inc;
    __syncthreads();
    float before = 0.0f;
    for (int k = 0; k < wid; k++) before += sh[k];
    const float ex = before + inc - mine;
    __shared__ int pick;
    if (threadIdx.x == 0) pick = best;
    __syncthreads();
    if (mine > 0.0f && want >= ex && want < ex + mine) {
        float acc = ex;
        int chosen = -1;
        for (int i = b0; i < b1; i++) {
            const float p = P(i);
            if (p >= lo && p > 0.0f) {
                chosen = i;
                acc += p;
                if (want < acc) break;
            }
        }
        if (chosen >= 0) pick = chosen;  /* one thread's range holds want (ties at edges: any writer is valid) */
    }
#undef P
    __syncthreads();
    if (threadIdx.x == 0) out[r] = pick;
}

cudaError_t smol_sample_argmax_cuda(const float *logits, int vocab, int n_rows, int32_t *out, cudaStream_t st)
{
    if (n_rows <= 0) return cudaSuccess;
    argmax_kernel<<<n_rows, SAMPLE_THREADS, 0, st>>>(logits, vocab, out);
    return cudaGetLastError();
}

cudaError_t smol_sample_top_p_cuda(const float *logits, int vocab, int n_rows, const float *temp,
                                   const float *top_p, const float *u, int32_t *out, cudaStream_t st)
{
    if (n_rows <= 0) return cudaSuccess;
    top_p_kernel<<<n_rows, SAMPLE_THREADS, 0, st>>>(logits, vocab, temp, top_p, u, out);
    return cudaGetLastError();
}
