/*
 * ops.cu - the row-wise and element-wise ops of the forward pass on CUDA:
 * embedding lookup, RMSNorm, RoPE, SiLU*mul, residual add, row gather and
 * the KV-cache store.  Each is memory-bound and simple: one pass, coalesced,
 * float4 where the shapes allow.  Twins: kernels/ops_ref.c, backend_cpu.c.
 */
#include "common.cuh"
#include "ops_cuda.cuh"

/* ---- get_rows ------------------------------------------------------------- */

template <int T>
static __global__ void get_rows_kernel(float *out, const uint8_t *w, size_t row_bytes, int cols, const int32_t *ids)
{
    const int t = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x, nc = (cols + 31) / 32;
    if (c >= nc) return;
    float y[32];
    dq32<T>(w + (size_t)ids[t] * row_bytes, c, cols, y);
    float *o = out + (size_t)t * cols + 32 * c;
#pragma unroll
    for (int l = 0; l < 32; l++)
        if (32 * c + l < cols) o[l] = y[l];
}

cudaError_t smol_get_rows_cuda(float *out, uint32_t type, const void *w, size_t row_bytes, int cols,
                               const int32_t *ids, int n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    const int nc = (cols + 31) / 32;
    dim3 grid((nc + 63) / 64, n);
    switch (type) {
#define X(T) case T: get_rows_kernel<T><<<grid, 64, 0, st>>>(out, (const uint8_t *)w, row_bytes, cols, ids); break;
        SMOL_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- rmsnorm ------------------------------------------------------------------ */

/* One block per row; the sum of squares is kept in double, as the reference. */
static __global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int dim, float eps)
{
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * xr[i];
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, k);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        ss = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, k);
        if (threadIdx.x == 0) sh[0] = ss;
    }
    __syncthreads();
    const float inv = (float)(1.0 / sqrt(sh[0] / dim + eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * w[i];
}

cudaError_t smol_rmsnorm_cuda(float *out, const float *x, const float *w, int dim, float eps, int n,
                              cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    rmsnorm_kernel<<<n, 256, 0, st>>>(out, x, w, dim, eps);
    return cudaGetLastError();
}

/* ---- rope ------------------------------------------------------------------------ */

/* cos and sin of pair i at position p, in double as smol_rope_cache_ref (YaRN included) */
static __device__ __forceinline__ void rope_cs(int p, int i, const struct smol_rope_params &rp, float *c, float *s)
{
    const double theta_extrap = p * pow((double)rp.freq_base, -2.0 * i / rp.n_dims);
    double theta = rp.freq_scale * theta_extrap, mscale = rp.attn_factor;
    if (rp.ext_factor != 0.0f) {
        const double y = (i - rp.corr_dims[0]) / fmax(0.001, (double)rp.corr_dims[1] - rp.corr_dims[0]);
        const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * rp.ext_factor;
        theta = theta * (1 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * log(1.0 / rp.freq_scale);
    }
    double sd, cd;
    sincos(theta, &sd, &cd);
    *c = (float)(cd * mscale);
    *s = (float)(sd * mscale);
}

static __device__ __forceinline__ float2 rot2(float2 a, float c, float s)
{
    return make_float2(a.x * c - a.y * s, a.x * s + a.y * c);
}

/* One block per token; thread i computes the angle of pair i and rotates that pair in every head. */
static __global__ void rope_kernel(float *x, const int32_t *pos, int n_heads, int head_dim,
                                   struct smol_rope_params rp)
{
    const int t = blockIdx.x, p = pos[t];
    float *xt = x + (size_t)t * n_heads * head_dim;
    for (int i = threadIdx.x; i < rp.n_dims / 2; i += blockDim.x) {
        float c, s;
        rope_cs(p, i, rp, &c, &s);
        for (int h = 0; h < n_heads; h++) {
            float2 *v = (float2 *)(xt + (size_t)h * head_dim) + i;
            *v = rot2(*v, c, s);
        }
    }
}

cudaError_t smol_rope_cuda(float *x, const int32_t *pos, int n, int n_heads, int head_dim,
                           const struct smol_rope_params *rp, cudaStream_t st)
{
    if (n <= 0 || rp->n_dims <= 0) return cudaSuccess;
    const int th = rp->n_dims / 2 < 128 ? (rp->n_dims / 2 + 31) / 32 * 32 : 128;
    rope_kernel<<<n, th, 0, st>>>(x, pos, n_heads, head_dim, *rp);
    return cudaGetLastError();
}

/* ---- element-wise ------------------------------------------------------------------- */

static __global__ void silu_mul_kernel(float *g, const float *u, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float a = g[i];
        g[i] = a / (1.0f + expf(-a)) * u[i];
    }
}

static __global__ void silu_mul4_kernel(float4 *g, const float4 *u, int n4)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 a = g[i];
        const float4 b = u[i];
        a.x = a.x / (1.0f + expf(-a.x)) * b.x;
        a.y = a.y / (1.0f + expf(-a.y)) * b.y;
        a.z = a.z / (1.0f + expf(-a.z)) * b.z;
        a.w = a.w / (1.0f + expf(-a.w)) * b.w;
        g[i] = a;
    }
}

static __global__ void add_kernel(float *x, const float *y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] += y[i];
}

static __global__ void add4_kernel(float4 *x, const float4 *y, int n4)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 a = x[i];
        const float4 b = y[i];
        a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
        x[i] = a;
    }
}

static int grid_for(long n) { long g = (n + 255) / 256; return (int)(g < 4096 ? (g > 0 ? g : 1) : 4096); }
static int aligned16(const void *a, const void *b) { return (((uintptr_t)a | (uintptr_t)b) & 15) == 0; }

cudaError_t smol_silu_mul_cuda(float *gate, const float *up, int n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (n % 4 == 0 && aligned16(gate, up))
        silu_mul4_kernel<<<grid_for(n / 4), 256, 0, st>>>((float4 *)gate, (const float4 *)up, n / 4);
    else
        silu_mul_kernel<<<grid_for(n), 256, 0, st>>>(gate, up, n);
    return cudaGetLastError();
}

cudaError_t smol_add_cuda(float *x, const float *y, int n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (n % 4 == 0 && aligned16(x, y))
        add4_kernel<<<grid_for(n / 4), 256, 0, st>>>((float4 *)x, (const float4 *)y, n / 4);
    else
        add_kernel<<<grid_for(n), 256, 0, st>>>(x, y, n);
    return cudaGetLastError();
}

static __global__ void gather_kernel(float *out, const float *x, const int32_t *idx, int dim)
{
    const float *src = x + (size_t)idx[blockIdx.y] * dim;
    float *dst = out + (size_t)blockIdx.y * dim;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

cudaError_t smol_gather_rows_cuda(float *out, const float *x, const int32_t *idx, int n, int dim, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    dim3 grid((dim + 255) / 256 < 64 ? (dim + 255) / 256 : 64, n);
    gather_kernel<<<grid, 256, 0, st>>>(out, x, idx, dim);
    return cudaGetLastError();
}

/* ---- Hadamard rotation ------------------------------------------------------------------ */

/* A block per group, group / 2 threads: the butterflies of smol_hadamard_ref in shared memory,
 * one pair per thread and stage (the pairs of a stage are disjoint), the same additions in the
 * same order, then the scale. */
static __global__ void hadamard_kernel(float *x, int group)
{
    extern __shared__ float hv[];
    float *p = x + (size_t)blockIdx.x * group;
    const int t = threadIdx.x, half = group / 2;
    hv[t] = p[t];
    hv[t + half] = p[t + half];
    __syncthreads();
    for (int s = 1; s < group; s *= 2) {
        const int j = t / s * 2 * s + t % s;
        const float a = hv[j], b = hv[j + s];
        hv[j] = a + b;
        hv[j + s] = a - b;
        __syncthreads();
    }
    const float c = 1.0f / sqrtf((float)group);
    p[t] = hv[t] * c;
    p[t + half] = hv[t + half] * c;
}

cudaError_t smol_hadamard_cuda(float *x, int n, int group, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (group < 2 || group > 1024 || (group & (group - 1)) || n % group) return cudaErrorInvalidValue;
    hadamard_kernel<<<n / group, group / 2, group * sizeof(float), st>>>(x, group);
    return cudaGetLastError();
}

/* ---- KV store --------------------------------------------------------------------------- */

/* Thread per element of k[t] (and the same element of v[t]); f16 rounds to nearest even, the
 * bits smol_f32_to_half writes.  q8_0: a warp is one 32-element block of a row (kv_dim and
 * head_dim are multiples of 32, so blocks never straddle warps or rows): amax by shuffles,
 * d = amax / 127, q = roundf(x / d) as smol_quantize_q8_0_ref, lane 0 writes d. */
static __device__ __forceinline__ void store_q8_0(void *c, size_t row, int d, float x)
{
    const float amax = warp_max(fabsf(x));
    const float dq = amax / 127.0f, id = dq != 0.0f ? 1.0f / dq : 0.0f;
    struct block_q8_0 *b = (struct block_q8_0 *)((char *)c + row) + d / QK8_0;
    b->qs[d % QK8_0] = (int8_t)roundf(x * id);
    if (d % QK8_0 == 0) b->d = __half_as_ushort(__float2half_rn(dq));
}

static __global__ void kv_store_kernel(void *kc, void *vc, const float *k, const float *v, const int32_t *tok,
                                       const int32_t *pages, int n_kv_heads, int head_dim, int kv_type)
{
    const int t = blockIdx.y, kv_dim = n_kv_heads * head_dim;
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= kv_dim) return;
    const int pos = tok[2 * t] - 1, page = pages[tok[2 * t + 1] + pos / SMOL_KV_PAGE_CUDA], slot = pos % SMOL_KV_PAGE_CUDA;
    const int h = e / head_dim, d = e % head_dim;
    const size_t row = ((size_t)page * n_kv_heads + h) * SMOL_KV_PAGE_CUDA + slot;
    const size_t at = row * head_dim + d;
    const float kx = k[(size_t)t * kv_dim + e], vx = v[(size_t)t * kv_dim + e];
    if (kv_type == SMOL_TYPE_Q8_0) {
        const size_t rb = (size_t)head_dim / QK8_0 * sizeof(struct block_q8_0);
        store_q8_0(kc, row * rb, d, kx);
        store_q8_0(vc, row * rb, d, vx);
    } else if (kv_type == SMOL_TYPE_F16) {
        ((__half *)kc)[at] = __float2half_rn(kx);
        ((__half *)vc)[at] = __float2half_rn(vx);
    } else {
        ((float *)kc)[at] = kx;
        ((float *)vc)[at] = vx;
    }
}

cudaError_t smol_kv_store_cuda(void *k_layer, void *v_layer, const float *k, const float *v, int n_tokens,
                               const int32_t *tok, const int32_t *pages, int n_kv_heads, int head_dim, int kv_type,
                               cudaStream_t st)
{
    if (n_tokens <= 0) return cudaSuccess;
    if (kv_type == SMOL_TYPE_Q8_0 && head_dim % QK8_0) return cudaErrorInvalidValue;
    dim3 grid((n_kv_heads * head_dim + 127) / 128, n_tokens);
    kv_store_kernel<<<grid, 128, 0, st>>>(k_layer, v_layer, k, v, tok, pages, n_kv_heads, head_dim, kv_type);
    return cudaGetLastError();
}

/* ---- RoPE + KV store in one launch (knob cuda_fuse) --------------------------------------- */

/* One block per token: the angles of its position once (shared memory), q's pairs rotated in
 * place, k's pairs rotated, written back and stored with v into the cache (f16 or f32: the q8_0
 * cache rotates by Hadamard between the two and keeps the separate ops).  The arithmetic is
 * rope_kernel's and kv_store_kernel's. */
static __global__ void rope_store_kernel(float *q, float *k, const float *v, void *kc, void *vc, const int32_t *tok,
                                         const int32_t *pages, int n_heads, int n_kv_heads, int head_dim,
                                         int kv_type, struct smol_rope_params rp, int rope)
{
    __shared__ float2 cs[256];
    const int t = blockIdx.x, p = tok[2 * t] - 1, half = head_dim / 2, nr = rope ? rp.n_dims / 2 : 0;
    for (int i = threadIdx.x; i < nr; i += blockDim.x) {
        float c, s;
        rope_cs(p, i, rp, &c, &s);
        cs[i] = make_float2(c, s);
    }
    __syncthreads();
    float2 *qt = (float2 *)(q + (size_t)t * n_heads * head_dim);
    for (int e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
        const int i = e % half;
        if (i < nr) qt[e] = rot2(qt[e], cs[i].x, cs[i].y);
    }
    const int kv_dim = n_kv_heads * head_dim;
    const int page = pages[tok[2 * t + 1] + p / SMOL_KV_PAGE_CUDA], slot = p % SMOL_KV_PAGE_CUDA;
    float2 *kt = (float2 *)(k + (size_t)t * kv_dim);
    const float2 *vt = (const float2 *)(v + (size_t)t * kv_dim);
    for (int e = threadIdx.x; e < n_kv_heads * half; e += blockDim.x) {
        const int h = e / half, i = e % half;
        float2 kx = kt[e];
        if (i < nr) {
            kx = rot2(kx, cs[i].x, cs[i].y);
            kt[e] = kx;
        }
        const float2 vx = vt[e];
        const size_t at = (((size_t)page * n_kv_heads + h) * SMOL_KV_PAGE_CUDA + slot) * head_dim + 2 * i;
        if (kv_type == SMOL_TYPE_F16) {
            *(__half2 *)((__half *)kc + at) = __floats2half2_rn(kx.x, kx.y);
            *(__half2 *)((__half *)vc + at) = __floats2half2_rn(vx.x, vx.y);
        } else {
            *(float2 *)((float *)kc + at) = kx;
            *(float2 *)((float *)vc + at) = vx;
        }
    }
}

cudaError_t smol_rope_store_cuda(float *q, float *k, const float *v, void *k_layer, void *v_layer, int n_tokens,
                                 const int32_t *tok, const int32_t *pages, int n_heads, int n_kv_heads, int head_dim,
                                 int kv_type, const struct smol_rope_params *rp, cudaStream_t st)
{
    if (n_tokens <= 0) return cudaSuccess;
    if ((kv_type != SMOL_TYPE_F16 && kv_type != SMOL_TYPE_F32) || head_dim % 2 || head_dim > 512 ||
        (rp && (rp->n_dims > head_dim || rp->n_dims % 2)))
        return cudaErrorInvalidValue;
    const struct smol_rope_params none = {};
    rope_store_kernel<<<n_tokens, 256, 0, st>>>(q, k, v, k_layer, v_layer, tok, pages, n_heads, n_kv_heads, head_dim,
                                                kv_type, rp ? *rp : none, rp != NULL && rp->n_dims > 0);
    return cudaGetLastError();
}
