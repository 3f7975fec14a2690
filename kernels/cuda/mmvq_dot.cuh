/*
 * mmvq_dot.cuh - the q8 mat-vec's per-lane work, shared by mmvq.cu and the fused layer kernels
 * of layer.cu: loads of one task's weights per type (wtask<T>, the layouts of mmvq.h), its dot
 * with q8a activations (in global memory, or in shared memory with SM = true), a row's sum over
 * its tasks (row_dot, row_dot_glu for the SwiGLU pair, row_dot_any for a run-time type), and
 * the activation quantizer's warp step (q8a_block).
 */
#ifndef SMOL_CUDA_MMVQ_DOT_CUH
#define SMOL_CUDA_MMVQ_DOT_CUH

#include "common.cuh"
#include "ops_cuda.cuh"
#include "mmvq.h"
#include "ptx.cuh"

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

/* ---- loads -------------------------------------------------------------------------------------- */

/* activations: global memory through the read-only path, or shared memory (SM: the fused
 * kernels of layer.cu quantize their input into shared memory) */
template <bool SM = false>
static __device__ __forceinline__ void ld_a16(const int8_t *p, int32_t a[4])
{
    const int4 v = SM ? *(const int4 *)p : __ldg((const int4 *)p);
    a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w;
}
template <bool SM = false>
static __device__ __forceinline__ struct smol_q8a ld_xs(const struct smol_q8a *p)
{
    const float4 v = SM ? *(const float4 *)p : __ldg((const float4 *)p);
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
    template <bool SM = false>
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        /* activations: from k, g, h (mmvq.cu: the code device runs measured), or with SM from t
         * (= 8k + 2g + h for the row's own task: 256k + 64g + 16h = 32t - 16h; the fused FFN passes
         * its slice's local task instead) */
        const int8_t *x = in.xq + (size_t)tok * in.cols + (SM ? 32 * t - 16 * h : 256 * k + 64 * g + 16 * h);
        int32_t lo[4], hi[4];
        ld_a16<SM>(x, lo);
        ld_a16<SM>(x + 32, hi);
        const struct smol_q8a *s = in.xs + (size_t)tok * (in.cols >> 5) + (SM ? t - h : 8 * k + 2 * g);
        return smol_mmvq_q4_K(hdr, q, g, h, lo, hi, ld_xs<SM>(s), ld_xs<SM>(s + 1));
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
    template <bool SM = false>
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16<SM>(x, a);
        ld_a16<SM>(x + 16, a + 4);
        return smol_mmvq_q6_K(L, H, sc0, sc1, d, a, ld_xs<SM>(in.xs + (size_t)tok * (in.cols >> 5) + t));
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
    template <bool SM = false>
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16<SM>(x, a);
        ld_a16<SM>(x + 16, a + 4);
        return smol_mmvq_q8_0(W, d, a, ld_xs<SM>(in.xs + (size_t)tok * (in.cols >> 5) + t));
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
    template <bool SM = false>
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16<SM>(x, a);
        ld_a16<SM>(x + 16, a + 4);
        return smol_mmvq_q4_0(Q, d, a, ld_xs<SM>(in.xs + (size_t)tok * (in.cols >> 5) + t));
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
    template <bool SM = false>
    __device__ __forceinline__ float dot(const mv_in &in, int tok, int t) const
    {
        const int8_t *x = in.xq + (size_t)tok * in.cols + 32 * t;
        int32_t a[8];
        ld_a16<SM>(x, a);
        ld_a16<SM>(x + 16, a + 4);
        return smol_mmvq_q4_1(Q, d, m, a, ld_xs<SM>(in.xs + (size_t)tok * (in.cols >> 5) + t));
    }
};

/* ---- a row ------------------------------------------------------------------------------------ */

/* acc[tok] += this lane's share of row r . x[tok], tok < in.n (<= NT); U tasks' weights loaded
 * before the first is used */
/* KS > 1: the row's tasks split among KS warps, this one taking slice ks (the caller sums the
 * warps' results) */
template <int T, int NT, int U, bool SM = false, int KS = 1>
static __device__ __forceinline__ void row_dot(const struct smol_mv_part &P, int r, const mv_in &in, float acc[NT],
                                               int ks = 0)
{
    const int lane = threadIdx.x & 31, ntask = in.cols >> 5;
    for (int t0 = lane + 32 * U * ks; t0 < ntask; t0 += 32 * U * KS) {
        wtask<T> w[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (t0 + 32 * u < ntask) w[u].load(P.w, P.n_blocks, r, t0 + 32 * u, in.cols);
#pragma unroll
        for (int tok = 0; tok < NT; tok++) {
            if (tok < in.n) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (t0 + 32 * u < ntask) acc[tok] += w[u].template dot<SM>(in, tok, t0 + 32 * u);
            }
        }
    }
}

/* gate and up rows of one type together: both weights' loads in flight at once (device run 1:
 * the two rows one after the other, each waiting for its loads, ran the 3B's 25 MB of gate/up
 * at about half the rate of its head) */
template <int T, int NT, int U, bool SM = false>
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
                        acc[tok] += wg[u].template dot<SM>(in, tok, t0 + 32 * u);
                        up[tok] += wu[u].template dot<SM>(in, tok, t0 + 32 * u);
                    }
            }
        }
    }
}

template <int NT, int U, bool SM = false, int KS = 1>
static __device__ __forceinline__ void row_dot_any(const struct smol_mv_part &P, int r, const mv_in &in, float acc[NT],
                                                   int ks = 0)
{
#pragma unroll
    for (int tok = 0; tok < NT; tok++) acc[tok] = 0.0f;
    switch (P.type) {
    case SMOL_TYPE_Q4_K: row_dot<SMOL_TYPE_Q4_K, NT, U, SM, KS>(P, r, in, acc, ks); break;
    case SMOL_TYPE_Q6_K: row_dot<SMOL_TYPE_Q6_K, NT, U, SM, KS>(P, r, in, acc, ks); break;
    case SMOL_TYPE_Q8_0: row_dot<SMOL_TYPE_Q8_0, NT, U, SM, KS>(P, r, in, acc, ks); break;
    case SMOL_TYPE_Q4_0: row_dot<SMOL_TYPE_Q4_0, NT, U, SM, KS>(P, r, in, acc, ks); break;
    case SMOL_TYPE_Q4_1: row_dot<SMOL_TYPE_Q4_1, NT, U, SM, KS>(P, r, in, acc, ks); break;
    default: break;
    }
#pragma unroll
    for (int tok = 0; tok < NT; tok++) acc[tok] = warp_sum(acc[tok]);
}

#endif
