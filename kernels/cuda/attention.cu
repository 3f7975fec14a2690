/*
 * attention.cu - causal GQA attention over the paged KV cache, split-K
 * "flash decoding".
 *
 * Grid (n_split, n_kv_heads, n_tokens), 128 threads.  A block serves the G
 * query heads that share one KV head, so each K/V row of its pages is read
 * once for all of them (the CPU backend's grouping).  Per page (32 slots):
 * the 4 warps score 8 slots each (lanes across head_dim, warp-reduced), one
 * thread per query head folds the 32 scores into its online softmax (max m,
 * sum l, rescale alpha), then every thread accumulates its head_dim / 128
 * output elements of every head from the page's V rows.  With one split the
 * block normalises and writes out; otherwise it writes (o, m, l) and
 * merge_kernel combines the splits.  Prefill uses the same kernel (one
 * block per token and KV head); a tiled prefill kernel that shares K/V
 * tiles across a sequence's query tokens is the next variant (NOTES.md).
 */
#include "common.cuh"
#include "ops_cuda.cuh"

#define ATT_THREADS 128
#define ATT_MAX_G 16    /* query heads per KV head (model.c refuses more) */
#define ATT_MAX_D 4     /* head_dim <= 512 = 4 * ATT_THREADS */
#define ATT_GROUP 8     /* attention_kernel: query heads per walk over the pages (their accumulators in registers) */

/* element d of row r (rows of head_dim elements from base) in the cache's type; q8_0:
 * d(block) * q in float, as smol_kv_scores_q8_0_ref forms it */
static __device__ __forceinline__ float kv_ld(const void *base, size_t r, int d, int hd, int type)
{
    if (type == SMOL_TYPE_Q8_0) {
        const struct block_q8_0 *b = (const struct block_q8_0 *)base + r * (hd / QK8_0) + d / QK8_0;
        return h2f(b->d) * (float)b->qs[d % QK8_0];
    }
    const size_t i = r * hd + d;
    return type == SMOL_TYPE_F16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

static __global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(float *out, const float *q, const void *kc, const void *vc, const int32_t *tok,
                 const int32_t *pages, int n_heads, int n_kv_heads, int head_dim, int kv_type, float scale,
                 int pages_per_split, float *part)
{
    extern __shared__ float sm[];
    const int G = n_heads / n_kv_heads, hd = head_dim;
    const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, n_split = gridDim.x;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    float *qs = sm;                          /* [G][hd] */
    float *sc = qs + G * hd;                 /* [G][32] scores, then probabilities */
    float *st = sc + G * SMOL_KV_PAGE_CUDA;  /* [G][3]: m, l, alpha */

    const int n_pos = tok[2 * t];
    const int32_t *pt = pages + tok[2 * t + 1];
    const int n_pages = (n_pos + SMOL_KV_PAGE_CUDA - 1) / SMOL_KV_PAGE_CUDA;
    const int pps = pages_per_split > 0 ? pages_per_split : (n_pages + n_split - 1) / n_split;
    const int p0 = split * pps;
    const int p1 = min(n_pages, p0 + pps);

    const float *qt = q + (size_t)t * n_heads * hd + (size_t)h * G * hd;
    for (int i = tid; i < G * hd; i += ATT_THREADS) qs[i] = qt[i] * scale;
    if (tid < G) {
        st[3 * tid] = -INFINITY;
        st[3 * tid + 1] = 0.0f;
    }
    __syncthreads();

    /* the heads in groups of ATT_GROUP, each group a whole walk over the pages: a head's
     * arithmetic is its own (scores, softmax state, accumulators), so the walk per group gives
     * the same results as one walk for all G; a group's accumulators (ATT_GROUP x ATT_MAX_D)
     * stay in registers, where all ATT_MAX_G x ATT_MAX_D spilled.  G <= ATT_GROUP (every model
     * served so far) is one walk; a larger G reads its K/V pages once per group. */
    for (int g0 = 0; g0 < G; g0 += ATT_GROUP) {
        const int GG = min(ATT_GROUP, G - g0);  /* heads g0 .. g0 + GG - 1 */
        float *gsc = sc + g0 * SMOL_KV_PAGE_CUDA;
        float *gst = st + 3 * g0;
        const float *gqs = qs + g0 * hd;
        float o[ATT_GROUP][ATT_MAX_D];
#pragma unroll
        for (int g = 0; g < ATT_GROUP; g++)
#pragma unroll
            for (int i = 0; i < ATT_MAX_D; i++) o[g][i] = 0.0f;

        for (int p = p0; p < p1; p++) {
            /* first row (of head_dim elements) of this head in the page */
            const size_t base = ((size_t)pt[p] * n_kv_heads + h) * SMOL_KV_PAGE_CUDA;
            /* scores: warp wid takes slots wid, wid + 4, ... */
            for (int s = wid; s < SMOL_KV_PAGE_CUDA; s += ATT_THREADS / 32) {
                const int pos = p * SMOL_KV_PAGE_CUDA + s;
                float acc[ATT_GROUP];
#pragma unroll
                for (int g = 0; g < ATT_GROUP; g++) acc[g] = 0.0f;
                if (pos < n_pos) {
                    for (int d = lane; d < hd; d += 32) {
                        const float kx = kv_ld(kc, base + s, d, hd, kv_type);
#pragma unroll
                        for (int g = 0; g < ATT_GROUP; g++)
                            if (g < GG) acc[g] += gqs[g * hd + d] * kx;
                    }
                }
#pragma unroll
                for (int g = 0; g < ATT_GROUP; g++) {
                    if (g < GG) {
                        const float v = warp_sum(acc[g]);
                        if (lane == 0) gsc[g * SMOL_KV_PAGE_CUDA + s] = pos < n_pos ? v : -INFINITY;
                    }
                }
            }
            __syncthreads();
            /* online softmax: one thread per query head */
            if (tid < GG) {
                float *r = gsc + tid * SMOL_KV_PAGE_CUDA;
                float mx = gst[3 * tid];
                for (int s = 0; s < SMOL_KV_PAGE_CUDA; s++) mx = fmaxf(mx, r[s]);
                const float alpha = gst[3 * tid] == -INFINITY ? 0.0f : expf(gst[3 * tid] - mx);
                float l = gst[3 * tid + 1] * alpha;
                for (int s = 0; s < SMOL_KV_PAGE_CUDA; s++) {
                    const float e = r[s] == -INFINITY ? 0.0f : expf(r[s] - mx);
                    r[s] = e;
                    l += e;
                }
                gst[3 * tid] = mx;
                gst[3 * tid + 1] = l;
                gst[3 * tid + 2] = alpha;
            }
            __syncthreads();
#pragma unroll
            for (int g = 0; g < ATT_GROUP; g++)
                if (g < GG) {
                    const float a = gst[3 * g + 2];
#pragma unroll
                    for (int i = 0; i < ATT_MAX_D; i++) o[g][i] *= a;
                }
            const int valid = min(SMOL_KV_PAGE_CUDA, n_pos - p * SMOL_KV_PAGE_CUDA);
            for (int s = 0; s < valid; s++) {
#pragma unroll
                for (int i = 0; i < ATT_MAX_D; i++) {
                    const int d = tid + i * ATT_THREADS;
                    if (d < hd) {
                        const float vx = kv_ld(vc, base + s, d, hd, kv_type);
#pragma unroll
                        for (int g = 0; g < ATT_GROUP; g++)
                            if (g < GG) o[g][i] += gsc[g * SMOL_KV_PAGE_CUDA + s] * vx;
                    }
                }
            }
            __syncthreads();
        }

        /* constant indices into o (unrolled): a run-time g would put o in local memory */
#pragma unroll
        for (int g = 0; g < ATT_GROUP; g++) {
            if (g >= GG) break;
            const int head = h * G + g0 + g;
            const float m = gst[3 * g], l = gst[3 * g + 1];
            if (n_split == 1) {
                float *ot = out + (size_t)t * n_heads * hd + (size_t)head * hd;
                const float il = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
                for (int i = 0; i < ATT_MAX_D; i++)
                    if (tid + i * ATT_THREADS < hd) ot[tid + i * ATT_THREADS] = o[g][i] * il;
            } else {
                float *pp = part + (((size_t)t * n_heads + head) * n_split + split) * (hd + 2);
#pragma unroll
                for (int i = 0; i < ATT_MAX_D; i++)
                    if (tid + i * ATT_THREADS < hd) pp[tid + i * ATT_THREADS] = o[g][i];
                if (tid == 0) {
                    pp[hd] = m;
                    pp[hd + 1] = l;
                }
            }
        }
    }
}

/* One block per (head, token): out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.  (Device run 2
 * measured a faster merge, the weights once per split in shared memory, and compute-sanitizer
 * found it reading shared memory out of bounds: this is device run 1's, memcheck-clean.) */
static __global__ void merge_kernel(float *out, const float *part, int n_heads, int head_dim, int n_split)
{
    const int head = blockIdx.x, t = blockIdx.y, hd = head_dim;
    const float *pp = part + ((size_t)t * n_heads + head) * n_split * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pp[s * (hd + 2) + hd]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float m = pp[s * (hd + 2) + hd];
        if (m != -INFINITY) L += expf(m - M) * pp[s * (hd + 2) + hd + 1];
    }
    const float il = L > 0.0f ? 1.0f / L : 0.0f;
    float *ot = out + (size_t)t * n_heads * hd + (size_t)head * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = pp[s * (hd + 2) + hd];
            if (m != -INFINITY) acc += expf(m - M) * pp[s * (hd + 2) + d];
        }
        ot[d] = acc * il;
    }
}

/* ---- head_dim 128, f16 / f32 cache (SmolLM3): the same function, the page's work in parallel ----
 * Device run 1 measured attention_kernel at 19 us a call on one or two pages: slot after slot,
 * each waiting for its loads, and one thread per head walking the softmax.  Here, per page: each
 * warp loads its 8 slots' K rows at once (a lane 4 consecutive elements) and reduces the G scores
 * of each; a warp per head does the online softmax with a lane per slot; each thread (one element
 * of head_dim) loads its 32 V values at once.  Same partials and merge as attention_kernel. */
template <bool F16>
static __device__ __forceinline__ float4 ld4(const void *base, size_t i)
{
    if (F16) {
        const uint2 u = *(const uint2 *)((const __half *)base + i);
        const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
        return make_float4(a.x, a.y, b.x, b.y);
    }
    return *(const float4 *)((const float *)base + i);
}

template <bool F16>
static __device__ __forceinline__ float ld1(const void *base, size_t i)
{
    return F16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

template <bool F16>
static __global__ void __launch_bounds__(ATT_THREADS)
attention128_kernel(float *out, const float *q, const void *kc, const void *vc, const int32_t *tok,
                    const int32_t *pages, int n_heads, int n_kv_heads, float scale, int pages_per_split, float *part)
{
    constexpr int HD = 128, PS = SMOL_KV_PAGE_CUDA;
    extern __shared__ float sm[];
    const int G = n_heads / n_kv_heads;
    const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, n_split = gridDim.x;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    float *qs = sm;                 /* [G][HD] */
    float *sc = qs + G * HD;        /* [G][PS] scores, then probabilities */
    float *st = sc + G * PS;        /* [G][3]: m, l, alpha */

    const int n_pos = tok[2 * t];
    const int32_t *pt = pages + tok[2 * t + 1];
    const int n_pages = (n_pos + PS - 1) / PS;
    const int pps = pages_per_split > 0 ? pages_per_split : (n_pages + n_split - 1) / n_split;
    const int p0 = split * pps, p1 = min(n_pages, p0 + pps);

    const float *qt = q + (size_t)t * n_heads * HD + (size_t)h * G * HD;
    for (int i = tid; i < G * HD; i += ATT_THREADS) qs[i] = qt[i] * scale;
    if (tid < G) {
        st[3 * tid] = -INFINITY;
        st[3 * tid + 1] = 0.0f;
    }
    float o[ATT_MAX_G];
#pragma unroll
    for (int g = 0; g < ATT_MAX_G; g++) o[g] = 0.0f;
    __syncthreads();

    for (int p = p0; p < p1; p++) {
        const size_t base = ((size_t)pt[p] * n_kv_heads + h) * PS;  /* row of slot 0 */
        float4 kx[8];
#pragma unroll
        for (int j = 0; j < 8; j++) kx[j] = ld4<F16>(kc, (base + 8 * wid + j) * HD + 4 * lane);
#pragma unroll
        for (int g = 0; g < ATT_MAX_G; g++) {
            if (g < G) {
                const float4 qv = *(const float4 *)(qs + g * HD + 4 * lane);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float v = warp_sum(qv.x * kx[j].x + qv.y * kx[j].y + qv.z * kx[j].z + qv.w * kx[j].w);
                    const int s = 8 * wid + j;
                    if (lane == 0) sc[g * PS + s] = p * PS + s < n_pos ? v : -INFINITY;
                }
            }
        }
        __syncthreads();
        for (int g = wid; g < G; g += ATT_THREADS / 32) {
            const float r = sc[g * PS + lane], m_old = st[3 * g];
            const float mx = warp_max(fmaxf(m_old, r));
            const float e = r == -INFINITY ? 0.0f : expf(r - mx);
            const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - mx);
            const float l = warp_sum(e);
            sc[g * PS + lane] = e;
            if (lane == 0) {
                st[3 * g] = mx;
                st[3 * g + 1] = st[3 * g + 1] * alpha + l;
                st[3 * g + 2] = alpha;
            }
        }
        __syncthreads();
        const int valid = min(PS, n_pos - p * PS);
        float vv[PS];
#pragma unroll
        for (int s = 0; s < PS; s++) vv[s] = s < valid ? ld1<F16>(vc, (base + s) * HD + tid) : 0.0f;
#pragma unroll
        for (int g = 0; g < ATT_MAX_G; g++) {
            if (g < G) {
                float a = o[g] * st[3 * g + 2];
#pragma unroll
                for (int s = 0; s < PS; s++) a += sc[g * PS + s] * vv[s];
                o[g] = a;
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int g = 0; g < ATT_MAX_G; g++) {
        if (g >= G) break;
        const int head = h * G + g;
        const float m = st[3 * g], l = st[3 * g + 1];
        if (n_split == 1) {
            const float il = l > 0.0f ? 1.0f / l : 0.0f;
            out[(size_t)t * n_heads * HD + (size_t)head * HD + tid] = o[g] * il;
        } else {
            float *pp = part + (((size_t)t * n_heads + head) * n_split + split) * (HD + 2);
            pp[tid] = o[g];
            if (tid == 0) {
                pp[HD] = m;
                pp[HD + 1] = l;
            }
        }
    }
}

cudaError_t smol_attention_cuda(float *out, const float *q, const void *k_layer, const void *v_layer, int n_tokens,
                                const int32_t *tok, const int32_t *pages, int n_heads, int n_kv_heads,
                                int head_dim, int kv_type, float scale, int n_split, int pages_per_split,
                                float *part, cudaStream_t st)
{
    if (n_tokens <= 0) return cudaSuccess;
    const int G = n_heads / n_kv_heads;
    if (G > ATT_MAX_G || head_dim > ATT_MAX_D * ATT_THREADS || n_split < 1 || pages_per_split < 0 ||
        (kv_type == SMOL_TYPE_Q8_0 && head_dim % QK8_0))
        return cudaErrorInvalidValue;
    const size_t smem = ((size_t)G * head_dim + (size_t)G * SMOL_KV_PAGE_CUDA + 3 * G) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    dim3 grid(n_split, n_kv_heads, n_tokens);
    if (head_dim == 128 && kv_type == SMOL_TYPE_F16)
        attention128_kernel<true><<<grid, ATT_THREADS, smem, st>>>(out, q, k_layer, v_layer, tok, pages, n_heads,
                                                                   n_kv_heads, scale, pages_per_split, part);
    else if (head_dim == 128 && kv_type == SMOL_TYPE_F32)
        attention128_kernel<false><<<grid, ATT_THREADS, smem, st>>>(out, q, k_layer, v_layer, tok, pages, n_heads,
                                                                    n_kv_heads, scale, pages_per_split, part);
    else
        attention_kernel<<<grid, ATT_THREADS, smem, st>>>(out, q, k_layer, v_layer, tok, pages, n_heads, n_kv_heads,
                                                           head_dim, kv_type, scale, pages_per_split, part);
    if (n_split > 1) merge_kernel<<<dim3(n_heads, n_tokens), 128, 0, st>>>(out, part, n_heads, head_dim, n_split);
    return cudaGetLastError();
}
