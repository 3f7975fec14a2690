/*
 * layer.cu - a decode layer in four kernels (knob cuda_fuse = layer), for steps of at most
 * SMOL_MMVQ_MAX_TOKENS tokens on the q8 mat-vec's weights (mmvq_dot.cuh), head_dim 128 and an
 * f16 or f32 cache:
 *
 *   qkv   rmsnorm(x) * attn_norm quantized to q8a by every block into its shared memory (the
 *         prologue: x is a few KB per token), then a warp per row of [wq; wk; wv], then the
 *         epilogue: RoPE of each (even, odd) row pair from a cos/sin table (the host's double
 *         arithmetic, once per model: no double in a per-token kernel), q to its buffer, k and
 *         v straight into the cache at the token's page and slot;
 *   attn  paged attention, split-K over pages ("flash decoding", attention.cu's attention128
 *         loop); the last split of a (token, KV head) to finish merges all splits (a ticket per
 *         pair, reset by that block: no second launch) and writes the output as q8a;
 *   o     a warp per row of wo on that q8a: x += wo att, and a copy of the new x (xb);
 *   ffn   per block 64 columns of the FFN: rmsnorm(xb) * ffn_norm quantized in the prologue,
 *         the 64 gate and up rows, SwiGLU, the 64 values quantized to q8a (two 32-blocks) in
 *         shared memory, then their share of down: every output row's dot with those 64
 *         columns added to x.  No launch for down: split-K over the FFN's columns.
 *
 * The residual x is kept in fixed point (int64, 2^-32 units) for the whole step, so that the
 * split-K additions of ffn are integer atomics: their sum does not depend on the order the
 * blocks finish in (bit-for-bit repeatable, graphs and runs alike).  2^-32 resolution and
 * +-2^31 range: finer than f32's rounding at every value a residual stream takes.  The first
 * layer's qkv converts the embeddings in; head_norm converts the output rows back (with the
 * final rmsnorm).  Sums of squares are f32 (the op-by-op path's rmsnorm keeps double).
 *
 * A step is then 4 launches a layer and 4 more (embedding, head_norm, the head's q8a and
 * mat-vec): 148 a token for SmolLM3-3B's 36 layers.
 */
#include "common.cuh"
#include "ops_cuda.cuh"
#include "mmvq_dot.cuh"

/* No __launch_bounds__ on these kernels: with them (128 threads) nvcc 13's ptxas held several
 * instances at 72 registers and spilled 8 bytes (tests/gpu/check_spills.sh); unbounded they
 * take what they need, spill-free. */
#define FX_SCALE 4294967296.0f         /* 2^32 */
#define FX_INV (1.0f / 4294967296.0f)
#define LQ_WARPS 4                     /* qkv and o: a warp per row, 4 rows a block */
#define LF_WARPS 8                     /* ffn: 8 warps, 64 columns a block */
#define LF_COLS 64

static __device__ __forceinline__ long long fx_of(float v) { return __float2ll_rn(v * FX_SCALE); }
static __device__ __forceinline__ float fx_val(long long x) { return (float)x * FX_INV; }

/* ---- the prologue: rmsnorm(x) * w to q8a in shared memory ------------------------------------ */

/* rows t < n of x (fixed point, or float xf when given), each normalized and quantized into xq
 * [n][cols] / xs [n][cols / 32]; every warp of the block takes part; ends with a barrier */
static __device__ void norm_q8a_smem(const long long *x, const float *xf, const float *w, float eps, int n, int cols,
                                     int8_t *xq, struct smol_q8a *xs, float *red)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5, nb = cols >> 5;
    for (int t = 0; t < n; t++) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = xf ? xf[(size_t)t * cols + i] : fx_val(x[(size_t)t * cols + i]);
            ss += v * v;
        }
        ss = block_sum(ss, red);
        const float inv = 1.0f / sqrtf(ss / cols + eps);
        for (int bi = wid; bi < nb; bi += nw) {
            const size_t i = (size_t)t * cols + 32 * bi + lane;
            const float v = xf ? xf[i] : fx_val(x[i]);
            q8a_block(v * inv * w[32 * bi + lane], xq + (size_t)t * cols + 32 * bi, xs + (size_t)t * nb + bi, lane);
        }
        __syncthreads();  /* red is reused by the next row */
    }
}

/* ---- qkv ----------------------------------------------------------------------------------- */

/* virtual block vb of nvb (the kernel's blockIdx.x of gridDim.x; the persistent kernel's loop) */
template <int NT>
static __device__ void qkv_body(const struct smol_layer_args &a, int vb, int nvb, uint8_t *lsm, float *red)
{
    int8_t *xq = (int8_t *)lsm;                                                  /* [NT][dim] */
    struct smol_q8a *xs = (struct smol_q8a *)(lsm + NT * a.dim);                /* [NT][dim / 32] */
    float *res = (float *)(xs + NT * (a.dim >> 5));                              /* [LQ_WARPS][NT] */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, n = a.n;
    norm_q8a_smem(a.xa, a.x0, a.attn_norm, a.eps, n, a.dim, xq, xs, red);
    if (a.x0)  /* the first layer: the embeddings into the fixed-point residual, a share per block */
        for (int i = vb * blockDim.x + threadIdx.x; i < n * a.dim; i += nvb * blockDim.x)
            a.xa[i] = fx_of(a.x0[i]);

    /* a warp per row of [wq; wk; wv] (rows per part are multiples of LQ_WARPS: a block is in one part) */
    int r = vb * LQ_WARPS + wid;
    struct smol_mv_part P;
    int part;
    if (r < a.wq.rows) { P = a.wq; part = 0; }
    else if (r < a.wq.rows + a.wk.rows) { P = a.wk; r -= a.wq.rows; part = 1; }
    else { P = a.wv; r -= a.wq.rows + a.wk.rows; part = 2; }
    const mv_in in = {xq, xs, a.dim, n};
    float acc[NT];
    row_dot_any<NT, 2, true>(P, r, in, acc);
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < NT; t++) res[wid * NT + t] = acc[t];
    __syncthreads();

    /* the epilogue: thread (pair, token) of the block's two row pairs */
    const int hd = a.head_dim;
    const int row0 = (vb * LQ_WARPS + 2 * (threadIdx.x & 1)) - (part == 0 ? 0 : part == 1 ? a.wq.rows : a.wq.rows + a.wk.rows);
    const int t = threadIdx.x >> 1;
    if (t >= n) return;
    float x0 = res[(2 * (threadIdx.x & 1)) * NT + t], x1 = res[(2 * (threadIdx.x & 1) + 1) * NT + t];
    const int pos = a.tok[2 * t] - 1, d = row0 % hd, i = d / 2;
    if (part < 2 && a.rope_cs && i < a.rope_pairs) {
        const float2 cs = a.rope_cs[(size_t)pos * a.rope_pairs + i];
        const float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
        x0 = y0;
        x1 = y1;
    }
    if (part == 0) {
        float *q = a.q + (size_t)t * a.wq.rows + row0;
        q[0] = x0;
        q[1] = x1;
        return;
    }
    const int page = a.pages[a.tok[2 * t + 1] + pos / SMOL_KV_PAGE_CUDA], slot = pos % SMOL_KV_PAGE_CUDA;
    const int h = row0 / hd;
    const size_t at = (((size_t)page * a.n_kv_heads + h) * SMOL_KV_PAGE_CUDA + slot) * hd + d;
    void *c = part == 1 ? a.kc : a.vc;
    if (a.kv_type == SMOL_TYPE_F16) *(__half2 *)((__half *)c + at) = __floats2half2_rn(x0, x1);
    else *(float2 *)((float *)c + at) = make_float2(x0, x1);
}


template <int NT>
static __global__ void layer_qkv_kernel(const struct smol_layer_args a)
{
    extern __shared__ __align__(16) uint8_t lsm[];
    __shared__ float red[33];
    qkv_body<NT>(a, blockIdx.x, gridDim.x, lsm, red);
}

/* ---- attention --------------------------------------------------------------------------------- */

template <bool F16>
static __device__ __forceinline__ float4 lat_ld4(const void *base, size_t i)
{
    if (F16) {
        const uint2 u = *(const uint2 *)((const __half *)base + i);
        const float2 x = __half22float2(*(const __half2 *)&u.x), y = __half22float2(*(const __half2 *)&u.y);
        return make_float4(x.x, x.y, y.x, y.y);
    }
    return *(const float4 *)((const float *)base + i);
}
template <bool F16>
static __device__ __forceinline__ float lat_ld1(const void *base, size_t i)
{
    return F16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

#define LA_MAX_G 16

/* grid (n_split, n_kv_heads, n), 128 threads (= head_dim): attention128_kernel's loop over the
 * split's pages; then, with one split, the output; with several, the partials, and the last
 * split to finish merges them.  Output: q8a of the attention rows (a.aq / a.as). */
template <bool F16>
static __device__ void attn_body(const struct smol_layer_args &a, int split, int h, int t, float *asm_, int *last_)
{
    constexpr int HD = 128, PS = SMOL_KV_PAGE_CUDA;
    const int G = a.n_heads / a.n_kv_heads;
    const int n_split = a.n_split;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    float *qs = asm_;               /* [G][HD] */
    float *sc = qs + G * HD;        /* [G][PS] */
    float *st = sc + G * PS;        /* [G][3]: m, l, alpha */
    int &last = *last_;

    const int n_pos = a.tok[2 * t];
    const int32_t *pt = a.pages + a.tok[2 * t + 1];
    const int n_pages = (n_pos + PS - 1) / PS;
    const int pps = a.pps > 0 ? a.pps : (n_pages + n_split - 1) / n_split;
    const int p0 = split * pps, p1 = min(n_pages, p0 + pps);
    const void *kc = a.kc, *vc = a.vc;

    const float *qt = a.q + (size_t)t * a.n_heads * HD + (size_t)h * G * HD;
    for (int i = tid; i < G * HD; i += 128) qs[i] = qt[i] * a.scale;
    if (tid < G) {
        st[3 * tid] = -INFINITY;
        st[3 * tid + 1] = 0.0f;
    }
    float o[LA_MAX_G];
#pragma unroll
    for (int g = 0; g < LA_MAX_G; g++) o[g] = 0.0f;
    __syncthreads();

    for (int p = p0; p < p1; p++) {
        const size_t base = ((size_t)pt[p] * a.n_kv_heads + h) * PS;
        float4 kx[8];
#pragma unroll
        for (int j = 0; j < 8; j++) kx[j] = lat_ld4<F16>(kc, (base + 8 * wid + j) * HD + 4 * lane);
#pragma unroll
        for (int g = 0; g < LA_MAX_G; g++) {
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
        for (int g = wid; g < G; g += 4) {
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
        for (int s = 0; s < PS; s++) vv[s] = s < valid ? lat_ld1<F16>(vc, (base + s) * HD + tid) : 0.0f;
#pragma unroll
        for (int g = 0; g < LA_MAX_G; g++) {
            if (g < G) {
                float acc = o[g] * st[3 * g + 2];
#pragma unroll
                for (int s = 0; s < PS; s++) acc += sc[g * PS + s] * vv[s];
                o[g] = acc;
            }
        }
        __syncthreads();
    }

    const int q_dim = a.n_heads * HD;
    if (n_split == 1) {
#pragma unroll
        for (int g = 0; g < LA_MAX_G; g++) {
            if (g >= G) break;
            const int head = h * G + g;
            const float l = st[3 * g + 1], v = o[g] * (l > 0.0f ? 1.0f / l : 0.0f);
            const size_t e = (size_t)t * q_dim + (size_t)head * HD;
            q8a_block(v, a.aq + e + 32 * wid, a.as + e / 32 + wid, lane);
        }
        return;
    }
    for (int g = 0; g < G; g++) {
        const int head = h * G + g;
        float *pp = a.part + (((size_t)t * a.n_heads + head) * n_split + split) * (HD + 2);
        pp[tid] = o[g];
        if (tid == 0) {
            pp[HD] = st[3 * g];
            pp[HD + 1] = st[3 * g + 1];
        }
    }
    /* the last split of (t, h) to finish merges: partials visible device-wide first */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        int *cnt = a.cnt + (size_t)t * a.n_kv_heads + h;
        const int ticket = atomicAdd(cnt, 1);
        last = ticket == n_split - 1;
        if (last) *cnt = 0;  /* for the next launch (a replayed graph's too) */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int g = 0; g < G; g++) {
        const int head = h * G + g;
        const float *pp = a.part + ((size_t)t * a.n_heads + head) * n_split * (HD + 2);
        float M = -INFINITY;
        for (int s = 0; s < n_split; s++) M = fmaxf(M, __ldcg(pp + s * (HD + 2) + HD));
        float L = 0.0f, acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = __ldcg(pp + s * (HD + 2) + HD);
            if (m == -INFINITY) continue;
            const float w = expf(m - M);
            L += w * __ldcg(pp + s * (HD + 2) + HD + 1);
            acc += w * __ldcg(pp + s * (HD + 2) + tid);
        }
        const float v = acc * (L > 0.0f ? 1.0f / L : 0.0f);
        const size_t e = (size_t)t * q_dim + (size_t)head * HD;
        q8a_block(v, a.aq + e + 32 * wid, a.as + e / 32 + wid, lane);
    }
}


template <bool F16>
static __global__ void layer_attn_kernel(const struct smol_layer_args a)
{
    extern __shared__ float asm_[];
    __shared__ int last;
    attn_body<F16>(a, blockIdx.x, blockIdx.y, blockIdx.z, asm_, &last);
}

/* ---- o ------------------------------------------------------------------------------------------ */

template <int NT>
static __device__ void o_body(const struct smol_layer_args &a, int vb)
{
    const int lane = threadIdx.x & 31, r = vb * LQ_WARPS + (threadIdx.x >> 5);
    if (r >= a.wo.rows) return;
    const mv_in in = {a.aq, a.as, a.n_heads * a.head_dim, a.n};
    float acc[NT];
    row_dot_any<NT, 2, false>(a.wo, r, in, acc);
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (lane == t && t < a.n) {
            const size_t i = (size_t)t * a.dim + r;
            const long long v = a.xa[i] + fx_of(acc[t]);
            a.xa[i] = v;
            a.xb[i] = v;
        }
}


template <int NT>
static __global__ void layer_o_kernel(const struct smol_layer_args a)
{
    o_body<NT>(a, blockIdx.x);
}

/* ---- ffn ---------------------------------------------------------------------------------------- */

/* nw warps (8: the kernel; 4: the persistent kernel's blocks) */
template <int NT>
static __device__ void ffn_body(const struct smol_layer_args &a, int vb, uint8_t *lsm, float *red)
{
    int8_t *xq = (int8_t *)lsm;                                           /* [NT][dim] */
    struct smol_q8a *xs = (struct smol_q8a *)(lsm + NT * a.dim);         /* [NT][dim / 32] */
    int8_t *hq = (int8_t *)(xs + NT * (a.dim >> 5));                      /* [NT][64] */
    struct smol_q8a *hs = (struct smol_q8a *)(hq + NT * LF_COLS);         /* [NT][2] */
    float *hv = (float *)(hs + NT * 2);                                   /* [NT][64] */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5, n = a.n, c0 = vb * LF_COLS;
    norm_q8a_smem(a.xb, NULL, a.ffn_norm, a.eps, n, a.dim, xq, xs, red);

    /* gate and up rows c0 .. c0 + 63: 8 a warp */
    const mv_in in = {xq, xs, a.dim, n};
    for (int j = wid; j < LF_COLS; j += nw) {
        float g[NT], u[NT];
        if (a.wg.type == a.wu.type && (a.wg.type == SMOL_TYPE_Q4_K || a.wg.type == SMOL_TYPE_Q6_K)) {
#pragma unroll
            for (int t = 0; t < NT; t++) g[t] = u[t] = 0.0f;
            if (a.wg.type == SMOL_TYPE_Q4_K) row_dot_glu<SMOL_TYPE_Q4_K, NT, 2, true>(a.wg, a.wu, c0 + j, in, g, u);
            else row_dot_glu<SMOL_TYPE_Q6_K, NT, 2, true>(a.wg, a.wu, c0 + j, in, g, u);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                g[t] = warp_sum(g[t]);
                u[t] = warp_sum(u[t]);
            }
        } else {
            row_dot_any<NT, 2, true>(a.wg, c0 + j, in, g);
            row_dot_any<NT, 2, true>(a.wu, c0 + j, in, u);
        }
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < n) hv[t * LF_COLS + j] = g[t] / (1.0f + expf(-g[t])) * u[t];
    }
    __syncthreads();
    /* the 64 values of each token as two q8a blocks: warp (t, half) */
    for (int w = wid; w < 2 * n; w += nw) {
        const int t = w >> 1, hb = w & 1;
        q8a_block(hv[t * LF_COLS + 32 * hb + lane], hq + t * LF_COLS + 32 * hb, hs + 2 * t + hb, lane);
    }
    __syncthreads();

    /* down: rows o of wd, their two tasks over columns c0 .. c0 + 63 (tasks 2b, 2b + 1 of every
     * type's layout, mmvq.h): lane = 2 (row in the warp's 16) + task; the pair's sum to x */
    const mv_in hin = {hq, hs, LF_COLS, n};
    const int tl = lane & 1, tg = 2 * vb + tl;
    for (int o0 = 16 * wid; o0 < a.dim; o0 += 16 * nw) {
        const int o = o0 + (lane >> 1);
        float p[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) p[t] = 0.0f;
        if (o < a.dim) {
            switch (a.wd.type) {
#define DOWN(T) case T: { wtask<T> w; w.load(a.wd.w, a.wd.n_blocks, o, tg, a.ffn); \
                    for (int t = 0; t < NT; t++) if (t < n) p[t] = w.template dot<true>(hin, t, tl); } break;
                DOWN(SMOL_TYPE_Q4_K) DOWN(SMOL_TYPE_Q6_K) DOWN(SMOL_TYPE_Q8_0) DOWN(SMOL_TYPE_Q4_0) DOWN(SMOL_TYPE_Q4_1)
#undef DOWN
            default: break;
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) p[t] += __shfl_xor_sync(0xffffffffu, p[t], 1);
        if (!tl && o < a.dim)
            for (int t = 0; t < n; t++)
                atomicAdd((unsigned long long *)&a.xa[(size_t)t * a.dim + o], (unsigned long long)fx_of(p[t]));
    }
    __syncthreads();  /* hq, hv are the next virtual block's */
}

template <int NT>
static __global__ void layer_ffn_kernel(const struct smol_layer_args a)
{
    extern __shared__ __align__(16) uint8_t lsm[];
    __shared__ float red[33];
    ffn_body<NT>(a, blockIdx.x, lsm, red);
}

/* ---- the head's input ---------------------------------------------------------------------------- */

/* output row i: out[i] = rmsnorm(x[idx[i]]) * w, x in fixed point */
static __device__ void head_norm_body(float *out, const long long *x, const int32_t *idx, const float *w, float eps,
                                      int dim, int i, float *red)
{
    const long long *xr = x + (size_t)idx[i] * dim;
    float ss = 0.0f;
    for (int e = threadIdx.x; e < dim; e += blockDim.x) {
        const float v = fx_val(xr[e]);
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / dim + eps);
    for (int e = threadIdx.x; e < dim; e += blockDim.x) out[(size_t)i * dim + e] = fx_val(xr[e]) * inv * w[e];
}

/* a block per output row */
static __global__ void __launch_bounds__(256) head_norm_kernel(float *out, const long long *x, const int32_t *idx,
                                                               const float *w, float eps, int dim)
{
    __shared__ float red[33];
    head_norm_body(out, x, idx, w, eps, dim, blockIdx.x, red);
}

/* ---- the persistent kernel (knob cuda_persistent = on) -------------------------------------------- */

/* every block of the (co-resident, cooperative) grid here before any goes on: an arrival count
 * and a generation in device memory (bar[0], bar[1]; the count is 0 again after each wait) */
static __device__ void grid_sync(unsigned *bar)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g) __nanosleep(64);
        }
        __threadfence();
    }
    __syncthreads();
}

/* The whole step in one launch: for each layer the four kernels' bodies, each over its virtual
 * blocks in a grid-stride loop, a grid-wide wait between them; then the head's input.  128
 * threads a block (the ffn body runs its 64 columns with 4 warps).  Shared memory: the largest
 * body's, after red (33 floats) and the merge flag. */
template <int NT, bool F16>
static __global__ void layer_persist_kernel(const struct smol_persist_args p)
{
    extern __shared__ __align__(16) uint8_t psm[];
    float *red = (float *)psm;
    int *last = (int *)(psm + 160);
    uint8_t *body = psm + 256;
    for (int l = 0; l < p.n_layers; l++) {
        struct smol_layer_args a = p.layers[l];
        a.n = p.n;
        a.tok = p.tok;
        a.pages = p.pages;
        a.n_split = p.n_split;
        a.pps = p.pps;
        const int nq = (a.wq.rows + a.wk.rows + a.wv.rows) / LQ_WARPS;
        for (int vb = blockIdx.x; vb < nq; vb += gridDim.x) {
            qkv_body<NT>(a, vb, nq, body, red);
            __syncthreads();
        }
        grid_sync(p.bar);
        const int na = a.n_split * a.n_kv_heads * a.n;
        for (int v = blockIdx.x; v < na; v += gridDim.x) {
            attn_body<F16>(a, v % a.n_split, (v / a.n_split) % a.n_kv_heads, v / (a.n_split * a.n_kv_heads), (float *)body,
                           last);
            __syncthreads();
        }
        grid_sync(p.bar);
        const int no = (a.wo.rows + LQ_WARPS - 1) / LQ_WARPS;
        for (int vb = blockIdx.x; vb < no; vb += gridDim.x) o_body<NT>(a, vb);
        grid_sync(p.bar);
        const int nf = a.ffn / LF_COLS;
        for (int vb = blockIdx.x; vb < nf; vb += gridDim.x) ffn_body<NT>(a, vb, body, red);
        grid_sync(p.bar);
    }
    for (int i = blockIdx.x; i < p.n_out; i += gridDim.x) {
        head_norm_body(p.xb, p.x, p.idx, p.out_norm, p.eps, p.dim, i, red);
        __syncthreads();
    }
}

/* ---- launchers ------------------------------------------------------------------------------------- */

int smol_layer_ok(int dim, int n_heads, int n_kv_heads, int head_dim, int ffn, int kv_type)
{
    return head_dim == 128 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= LA_MAX_G && dim % 256 == 0 &&
           ffn % LF_COLS == 0 && (kv_type == SMOL_TYPE_F16 || kv_type == SMOL_TYPE_F32);
}

size_t smol_layer_qkv_smem(int n, int dim) { return (size_t)n * dim + (size_t)n * (dim / 32) * 16 + LQ_WARPS * 8 * 4; }
size_t smol_layer_ffn_smem(int n, int dim)
{
    return (size_t)n * dim + (size_t)n * (dim / 32) * 16 + (size_t)n * LF_COLS + (size_t)n * 2 * 16 + (size_t)n * LF_COLS * 4;
}

cudaError_t smol_layer_cuda(const struct smol_layer_args *a, cudaStream_t st)
{
    const int n = a->n;
    if (n < 1 || n > SMOL_MMVQ_MAX_TOKENS) return cudaErrorInvalidValue;
    static int attr_done;
    if (!attr_done) {  /* the largest shared memory any instance asks for (dim <= 8192) */
        const int big = 8 * 8192 + 8 * 256 * 16 + 8 * 64 * 6 + 1024;
#define ATTR(NT) cudaFuncSetAttribute(layer_qkv_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, big); \
                 cudaFuncSetAttribute(layer_ffn_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
        ATTR(1) ATTR(2) ATTR(3) ATTR(4) ATTR(5) ATTR(6) ATTR(7) ATTR(8)
#undef ATTR
        attr_done = 1;
    }
    const int qkv_rows = a->wq.rows + a->wk.rows + a->wv.rows;
    const size_t smq = smol_layer_qkv_smem(n, a->dim), smf = smol_layer_ffn_smem(n, a->dim);
    const int G = a->n_heads / a->n_kv_heads;
    const size_t sma = ((size_t)G * 128 + (size_t)G * SMOL_KV_PAGE_CUDA + 3 * G) * sizeof(float);
    const dim3 ga(a->n_split, a->n_kv_heads, n);
    switch (n) {
#define X(NT) case NT: \
        layer_qkv_kernel<NT><<<qkv_rows / LQ_WARPS, LQ_WARPS * 32, smq, st>>>(*a); \
        if (a->kv_type == SMOL_TYPE_F16) layer_attn_kernel<true><<<ga, 128, sma, st>>>(*a); \
        else layer_attn_kernel<false><<<ga, 128, sma, st>>>(*a); \
        layer_o_kernel<NT><<<(a->wo.rows + LQ_WARPS - 1) / LQ_WARPS, LQ_WARPS * 32, 0, st>>>(*a); \
        layer_ffn_kernel<NT><<<a->ffn / LF_COLS, LF_WARPS * 32, smf, st>>>(*a); \
        break;
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

size_t smol_persist_smem(int n, int dim, int n_heads, int n_kv_heads)
{
    const int G = n_heads / n_kv_heads;
    const size_t att = ((size_t)G * 128 + (size_t)G * SMOL_KV_PAGE_CUDA + 3 * G) * sizeof(float);
    size_t m = smol_layer_qkv_smem(n, dim), f = smol_layer_ffn_smem(n, dim);
    if (f > m) m = f;
    if (att > m) m = att;
    return 256 + m;
}

template <int NT, bool F16>
static cudaError_t persist_launch(const struct smol_persist_args *p, int grid, size_t smem, cudaStream_t st)
{
#ifdef SMOL_CUDA_EMU
    return emu_launch_cooperative("layer_persist_kernel", dim3(grid), dim3(128), smem, st, layer_persist_kernel<NT, F16>, *p);
#else
    void *args[] = {(void *)p};
    return cudaLaunchCooperativeKernel((const void *)layer_persist_kernel<NT, F16>, dim3(grid), dim3(128), args, smem, st);
#endif
}

/* blocks of 128 threads the device holds at once for the persistent kernel (its grid) */
int smol_persist_grid(int n, int f16, size_t smem, int n_sm)
{
    int per = 0;
    cudaError_t e = cudaSuccess;
    switch (n * 2 + !!f16) {
#define X(NT) case NT * 2: e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, layer_persist_kernel<NT, false>, 128, smem); break; \
              case NT * 2 + 1: e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, layer_persist_kernel<NT, true>, 128, smem); break;
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
    default: return 0;
    }
    if (e != cudaSuccess || per < 1) {
        cudaGetLastError();
        return 0;
    }
    return per * n_sm;
}

cudaError_t smol_persist_cuda(const struct smol_persist_args *p, int grid, int f16, size_t smem, cudaStream_t st)
{
    if (p->n < 1 || p->n > SMOL_MMVQ_MAX_TOKENS || grid < 1) return cudaErrorInvalidValue;
    static int attr_done;
    if (!attr_done) {
#define X(NT) cudaFuncSetAttribute(layer_persist_kernel<NT, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024); \
              cudaFuncSetAttribute(layer_persist_kernel<NT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
        attr_done = 1;
    }
    switch (p->n * 2 + !!f16) {
#define X(NT) case NT * 2: return persist_launch<NT, false>(p, grid, smem, st); \
              case NT * 2 + 1: return persist_launch<NT, true>(p, grid, smem, st);
        X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#undef X
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t smol_head_norm_cuda(float *out, const long long *x, const int32_t *idx, int n_out, const float *w, float eps,
                                int dim, cudaStream_t st)
{
    if (n_out <= 0) return cudaSuccess;
    head_norm_kernel<<<n_out, 256, 0, st>>>(out, x, idx, w, eps, dim);
    return cudaGetLastError();
}
