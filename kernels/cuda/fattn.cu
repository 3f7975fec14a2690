/*
 * fattn.cu - tiled ("flash") attention over the paged KV cache, head_dim 128,
 * f16 or q8_0 cache: the knob cuda_attn = tiled (fattn.cuh has the contract).
 *
 * Why: attention.cu serves each query token in its own block, so a prompt of
 * n tokens reads its K/V n times (device run 2: 33% of a 2,048-token
 * prefill's kernel time, and pp2048 slower per token than pp512).  Here a
 * block holds FATTN_ROWS = 64 rows of (query token, query head): 64 / G
 * consecutive tokens of one sequence times the G heads that share KV head h
 * (row r = token r / G, head h * G + r % G), and reads each K/V tile of the
 * sequence once for all of them.
 *
 * Block: 4 warps, 128 threads; warp w owns rows 16w .. 16w + 15 (an m16 tile).
 *   1. Q (times scale, rounded to f16) through shared memory into registers:
 *      the A fragments of the 8 k-steps of head_dim 128 (32 registers).
 *   2. Per K/V tile of FATTN_KEYS = 64 positions (two pages): all 128
 *      threads stage K and V rows as f16 in shared memory ([64][136]: 8
 *      halves of padding make every fragment load below conflict-free), in
 *      two buffers: tile i + 1 is copied (cp.async, f16) while tile i is
 *      computed on; q8_0 rows are loaded and dequantized by the threads
 *      (d * q in f32, rounded to f16).  Positions past the split's end are
 *      stored as zeros (so a masked probability 0 meets a finite V, never
 *      0 * garbage).
 *   3. S = Q K^T: 8 n-tiles of 8 keys x 8 k-steps of mma.sync m16n8k16
 *      (f16 in, f32 accumulate); B fragments are 32-bit loads of K rows.
 *   4. Causal mask per row (row's token sees positions < its tok[2t]) and the
 *      split's end; online softmax in f32: the row max over the quad's lanes
 *      (shuffles), m_new, alpha = e^(m_old - m_new), p = e^(s - m_new), O *=
 *      alpha; l is kept per lane and summed over the quad once at the end.
 *      A row with nothing visible yet keeps m = -inf and uses 0 as its
 *      reference (p = 0, alpha = 0: no inf - inf).
 *   5. O += P V: P's C fragments repacked as f16 A fragments (the layouts
 *      agree: keys 16kk .. 16kk + 15 are n-tiles 2kk and 2kk + 1), V's B
 *      fragments by ldmatrix.x4.trans from the row-major V tile.
 *   6. out = O / l, or with n_split > 1 (O, m, l) to the partials, merged by
 *      fattn_merge_kernel.
 *
 * Precision: Q, K, V and P enter the tensor cores as f16 (11-bit
 * significands), everything else is f32.  The f16 cache already holds K and
 * V as f16 (exact here); q8_0's d * q is rounded once more to f16.  P in
 * [0, 1] rounded to f16 is within 2^-11 relative of the f32 value, so the
 * output (a convex combination of V rows) moves by at most ~2^-11 * max|V|
 * from P, plus Q's rounding (2^-11 relative on each score: |dS| <= 2^-11 *
 * |q| |k| scale).  tests/test_cuda.c checks against a float64 attention.
 *
 * Split-K (long contexts, decode): blockIdx.z = split takes pages
 * [split * pps, (split + 1) * pps) of the tile's context, pps = ceil(pages /
 * n_split) found per tile on the device (so a recorded decode step serves
 * every context).  A split with no positions still writes its partial (m =
 * -inf, l = 0, O = 0): every (token, head, split) partial is written exactly
 * once, which is what the merge reads.
 */
#include "common.cuh"
#include "fattn.cuh"
#include "ptx.cuh"

#define FA_HD 128
#define FA_THREADS 128
#define FA_LD (FA_HD + 8)           /* shared row stride in halves: 272 bytes, a multiple of 16 */
#define FM_WARPS 4                  /* merge: (token, head) rows per block, a warp each */
#define FA_SMEM (4 * FATTN_KEYS * FA_LD * 2)  /* two K and two V tiles of f16: 69,632 bytes */

static_assert(FATTN_ROWS == 16 * (FA_THREADS / 32), "a warp per 16 rows");
static_assert(FATTN_KEYS == FATTN_ROWS, "the Q tile is staged in a K tile's shared memory");
static_assert(FATTN_KEYS % SMOL_KV_PAGE_CUDA == 0 || SMOL_KV_PAGE_CUDA % FATTN_KEYS == 0, "tile and page");

static __device__ __forceinline__ uint32_t pack_h2(float a, float b)
{
    const __half2 h = __floats2half2_rn(a, b);  /* .x (a) in the low half: the lower column */
    return *(const uint32_t *)&h;
}

static __device__ __forceinline__ uint32_t lds32(const __half *p) { return *(const uint32_t *)p; }

/* Rows j < FATTN_KEYS of dst = positions k0 + j of KV head h of the sequence with page table pt,
 * as f16; zeros where k0 + j >= k_end.  Bounds: a cache row is read only for a position below
 * k_end, which is at most the tile's context (<= 32 x its page table's entries).  f16 rows are
 * copied with cp.async (complete after the caller's cp_wait<1> and a barrier); q8_0 rows are
 * loaded, dequantized and stored by the thread (complete after a barrier). */
template <int KV>
static __device__ __forceinline__ void stage_rows(__half (*dst)[FA_LD], const void *cache, const int32_t *pt,
                                                  int n_kv_heads, int h, int k0, int k_end, int tid)
{
    if (KV == SMOL_TYPE_F16) {
        constexpr int CH = FA_HD / 8;  /* 16-byte chunks per row */
#pragma unroll
        for (int it = 0; it < FATTN_KEYS * CH / FA_THREADS; it++) {
            const int idx = it * FA_THREADS + tid, j = idx / CH, c = idx % CH, pos = k0 + j;
            if (pos < k_end) {
                const size_t row = ((size_t)pt[pos / SMOL_KV_PAGE_CUDA] * n_kv_heads + h) * SMOL_KV_PAGE_CUDA +
                                   pos % SMOL_KV_PAGE_CUDA;
                cp_async<16>(&dst[j][8 * c], (const uint4 *)((const __half *)cache + row * FA_HD) + c);
            } else {
                *(uint4 *)&dst[j][8 * c] = make_uint4(0, 0, 0, 0);
            }
        }
    } else {  /* q8_0: a row is FA_HD / 32 blocks of 34 bytes; a thread takes one block (32 values) */
        constexpr int BPR = FA_HD / QK8_0;
#pragma unroll
        for (int it = 0; it < FATTN_KEYS * BPR / FA_THREADS; it++) {
            const int idx = it * FA_THREADS + tid, j = idx / BPR, b = idx % BPR, pos = k0 + j;
            uint32_t wv[16];
#pragma unroll
            for (int i = 0; i < 16; i++) wv[i] = 0;
            if (pos < k_end) {
                const size_t row = ((size_t)pt[pos / SMOL_KV_PAGE_CUDA] * n_kv_heads + h) * SMOL_KV_PAGE_CUDA +
                                   pos % SMOL_KV_PAGE_CUDA;
                const struct block_q8_0 *blk = (const struct block_q8_0 *)cache + row * BPR + b;
                const float d = h2f(blk->d);
                /* blocks are 34 bytes from a cudaMalloc'd, 8-byte-multiple-per-row base: qs (offset 2) is
                 * 2-byte aligned, so it is read as 16 pairs */
                const uint16_t *qs = (const uint16_t *)blk->qs;
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    const uint16_t u = qs[i];
                    wv[i] = pack_h2(d * (float)(int8_t)(u & 0xff), d * (float)(int8_t)(u >> 8));
                }
            }
#pragma unroll
            for (int k = 0; k < 4; k++)
                *(uint4 *)&dst[j][QK8_0 * b + 8 * k] = make_uint4(wv[4 * k], wv[4 * k + 1], wv[4 * k + 2], wv[4 * k + 3]);
        }
    }
}

template <int KV>
static __global__ void __launch_bounds__(FA_THREADS)
fattn_kernel(float *out, const float *q, const void *kc, const void *vc, const int32_t *tok, const int32_t *pages,
             const int32_t *tiles, int n_tokens, int n_heads, int n_kv_heads, float scale, float *part)
{
    /* two buffers of a K and a V tile (FA_SMEM bytes, dynamic): tile i + 1 is copied in while tile i
     * is computed on; the Q tile is staged in buffer 1's K first */
    extern __shared__ __align__(16) __half fa_sm[];
    typedef __half row_t[FA_LD];
    row_t *const sm_rows = (row_t *)fa_sm;  /* buffer b: K at rows 2b x 64, V at (2b + 1) x 64 */
#define FA_K(b) (sm_rows + (b) * 2 * FATTN_KEYS)
#define FA_V(b) (sm_rows + ((b) * 2 + 1) * FATTN_KEYS)
    const int G = n_heads / n_kv_heads;
    const int tile = blockIdx.x, h = blockIdx.y, split = blockIdx.z, n_split = gridDim.z;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;

    /* the tile's tokens [t0, t0 + nt), clamped into the batch and the block's rows (a bad
     * descriptor serves fewer tokens; it never reads or writes outside the buffers) */
    int t0 = tile, nt = 1;
    if (tiles) {
        t0 = tiles[2 * tile];
        nt = tiles[2 * tile + 1];
    }
    if (t0 < 0 || t0 >= n_tokens) return;  /* block-uniform, before any barrier */
    nt = min(nt, min(FATTN_ROWS / G, n_tokens - t0));
    if (nt <= 0) return;
    const int n_rows = nt * G;
    const int32_t *pt = pages + tok[2 * t0 + 1];
    int kv_end = 0;
    for (int i = 0; i < nt; i++) kv_end = max(kv_end, tok[2 * (t0 + i)]);
    const int n_pages = (kv_end + SMOL_KV_PAGE_CUDA - 1) / SMOL_KV_PAGE_CUDA;
    const int pps = (n_pages + n_split - 1) / n_split;
    const int k_begin = min(kv_end, split * pps * SMOL_KV_PAGE_CUDA);
    const int k_end = min(kv_end, (split + 1) * pps * SMOL_KV_PAGE_CUDA);

    /* this lane's two rows (C fragment rows gid and gid + 8 of its warp's m16 tile) */
    const int rA = 16 * w + gid, rB = rA + 8;
    const int npA = rA < n_rows ? tok[2 * (t0 + rA / G)] : 0;  /* positions the row sees */
    const int npB = rB < n_rows ? tok[2 * (t0 + rB / G)] : 0;

    /* the first K/V tile on its way while Q is staged */
    const int n_kt = k_end > k_begin ? (k_end - k_begin + FATTN_KEYS - 1) / FATTN_KEYS : 0;
    if (n_kt > 0) {
        stage_rows<KV>(FA_K(0), kc, pt, n_kv_heads, h, k_begin, k_end, tid);
        stage_rows<KV>(FA_V(0), vc, pt, n_kv_heads, h, k_begin, k_end, tid);
    }
    cp_commit();

    /* 1. Q tile: row r = token t0 + r / G, head h * G + r % G (the G heads are adjacent in q) */
    for (int idx = tid; idx < FATTN_ROWS * (FA_HD / 4); idx += FA_THREADS) {
        const int r = idx / (FA_HD / 4), c = idx % (FA_HD / 4);
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n_rows)
            v = *(const float4 *)(q + ((size_t)(t0 + r / G) * n_heads + (size_t)h * G + r % G) * FA_HD + 4 * c);
        *(uint2 *)&FA_K(1)[r][4 * c] = make_uint2(pack_h2(v.x * scale, v.y * scale), pack_h2(v.z * scale, v.w * scale));
    }
    __syncthreads();
    uint32_t qa[FA_HD / 16][4];
#pragma unroll
    for (int ks = 0; ks < FA_HD / 16; ks++) {
        qa[ks][0] = lds32(&FA_K(1)[rA][16 * ks + 2 * tig]);
        qa[ks][1] = lds32(&FA_K(1)[rB][16 * ks + 2 * tig]);
        qa[ks][2] = lds32(&FA_K(1)[rA][16 * ks + 8 + 2 * tig]);
        qa[ks][3] = lds32(&FA_K(1)[rB][16 * ks + 8 + 2 * tig]);
    }

    float o[FA_HD / 8][4];
#pragma unroll
    for (int i = 0; i < FA_HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mA = -INFINITY, mB = -INFINITY, lA = 0.0f, lB = 0.0f;
    const bool active = 16 * w < n_rows;  /* warp-uniform: a warp of padding rows only helps stage */

    /* Tile it is in buffer it & 1.  Per iteration: (a) a barrier: every thread is done with the
     * other buffer (the previous tile, or the Q fragments); tile it + 1 is issued into it, its own
     * commit group (empty at the end); (b) wait for all but that newest group, i.e. tile it, and
     * a barrier, so that every thread's copies and zero stores of tile it are visible. */
    for (int it = 0; it < n_kt; it++) {
        const int k0 = k_begin + it * FATTN_KEYS;
        row_t *const Ks = FA_K(it & 1), *const Vs = FA_V(it & 1);
        __syncthreads();
        if (it + 1 < n_kt) {
            stage_rows<KV>(FA_K((it + 1) & 1), kc, pt, n_kv_heads, h, k0 + FATTN_KEYS, k_end, tid);
            stage_rows<KV>(FA_V((it + 1) & 1), vc, pt, n_kv_heads, h, k0 + FATTN_KEYS, k_end, tid);
        }
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        if (active) {
            /* 3. S = Q K^T (16 rows x 64 keys per warp) */
            float s[FATTN_KEYS / 8][4];
#pragma unroll
            for (int j = 0; j < FATTN_KEYS / 8; j++) {
                s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < FA_HD / 16; ks++)
                    mma16816(s[j], qa[ks], lds32(&Ks[8 * j + gid][16 * ks + 2 * tig]),
                             lds32(&Ks[8 * j + gid][16 * ks + 8 + 2 * tig]));
            }
            /* 4. mask and online softmax */
            float mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
            for (int j = 0; j < FATTN_KEYS / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = k0 + 8 * j + 2 * tig + e;
                    s[j][e] = key < npA && key < k_end ? s[j][e] : -INFINITY;
                    s[j][2 + e] = key < npB && key < k_end ? s[j][2 + e] : -INFINITY;
                    mxA = fmaxf(mxA, s[j][e]);
                    mxB = fmaxf(mxB, s[j][2 + e]);
                }
            mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 1));
            mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 2));
            mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 1));
            mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 2));
            const float mnA = fmaxf(mA, mxA), mnB = fmaxf(mB, mxB);
            const float uA = mnA == -INFINITY ? 0.0f : mnA, uB = mnB == -INFINITY ? 0.0f : mnB;
            const float aA = __expf(mA - uA), aB = __expf(mB - uB);  /* m = -inf: e^-inf = 0 */
            mA = mnA;
            mB = mnB;
            lA *= aA;
            lB *= aB;
#pragma unroll
            for (int j = 0; j < FATTN_KEYS / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    s[j][e] = __expf(s[j][e] - uA);
                    s[j][2 + e] = __expf(s[j][2 + e] - uB);
                    lA += s[j][e];
                    lB += s[j][2 + e];
                }
#pragma unroll
            for (int i = 0; i < FA_HD / 8; i++) {
                o[i][0] *= aA;
                o[i][1] *= aA;
                o[i][2] *= aB;
                o[i][3] *= aB;
            }
            /* 5. O += P V */
#pragma unroll
            for (int kk = 0; kk < FATTN_KEYS / 16; kk++) {
                const uint32_t pa[4] = {pack_h2(s[2 * kk][0], s[2 * kk][1]), pack_h2(s[2 * kk][2], s[2 * kk][3]),
                                        pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int nd = 0; nd < FA_HD / 16; nd++) {
                    uint32_t b[4];
                    ldsm_x4_t(&Vs[16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)][16 * nd + 8 * (lane >> 4)], b);
                    mma16816(o[2 * nd], pa, b[0], b[1]);
                    mma16816(o[2 * nd + 1], pa, b[2], b[3]);
                }
            }
        }
    }

#undef FA_K
#undef FA_V
    lA += __shfl_xor_sync(0xffffffffu, lA, 1);
    lA += __shfl_xor_sync(0xffffffffu, lA, 2);
    lB += __shfl_xor_sync(0xffffffffu, lB, 1);
    lB += __shfl_xor_sync(0xffffffffu, lB, 2);

    /* 6. rows rA, rB (when they are real rows): token t0 + r / G, head h * G + r % G */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? rB : rA;
        if (r >= n_rows) continue;
        const float m = half ? mB : mA, l = half ? lB : lA;
        const size_t th = (size_t)(t0 + r / G) * n_heads + (size_t)h * G + r % G;  /* token * n_heads + head */
        if (n_split == 1) {
            const float il = l > 0.0f ? 1.0f / l : 0.0f;
            float *ot = out + th * FA_HD;
#pragma unroll
            for (int i = 0; i < FA_HD / 8; i++)
                *(float2 *)(ot + 8 * i + 2 * tig) = make_float2(o[i][2 * half] * il, o[i][2 * half + 1] * il);
        } else {
            float *pp = part + (th * n_split + split) * (FA_HD + 2);  /* even offset: float2-aligned */
#pragma unroll
            for (int i = 0; i < FA_HD / 8; i++)
                *(float2 *)(pp + 8 * i + 2 * tig) = make_float2(o[i][2 * half], o[i][2 * half + 1]);
            if (tig == 0) {
                pp[FA_HD] = m;
                pp[FA_HD + 1] = l;
            }
        }
    }
}

/* out[row] = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s for row = token * n_heads + head < n_rows,
 * one warp per row.
 * Bounds, by construction: warp w < FM_WARPS and split s < n_split <= FATTN_MAX_SPLIT (the
 * launcher refuses more) index wsh[FM_WARPS][FATTN_MAX_SPLIT]; a warp whose row is >= n_rows
 * returns as a whole before touching memory (no block barrier follows, only __syncwarp); part
 * is read at row * n_split * (hd + 2) + s * (hd + 2) + [0, hd + 2), inside the n_rows * n_split
 * * (hd + 2) floats the caller provides; out at row * hd + d, d < hd. */
static __global__ void __launch_bounds__(FM_WARPS * 32)
fattn_merge_kernel(float *out, const float *part, int n_rows, int head_dim, int n_split)
{
    __shared__ float wsh[FM_WARPS][FATTN_MAX_SPLIT];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int row = blockIdx.x * FM_WARPS + w;
    if (row >= n_rows) return;
    const int hd = head_dim, stride = hd + 2;
    const float *pp = part + (size_t)row * n_split * stride;
    float M = -INFINITY;
    for (int s = lane; s < n_split; s += 32) M = fmaxf(M, pp[(size_t)s * stride + hd]);
    M = warp_max(M);
    float L = 0.0f;
    for (int s = lane; s < n_split; s += 32) {
        const float m = pp[(size_t)s * stride + hd];
        const float wt = m == -INFINITY ? 0.0f : expf(m - M);
        wsh[w][s] = wt;
        L += wt * pp[(size_t)s * stride + hd + 1];
    }
    L = warp_sum(L);
    __syncwarp();
    const float il = L > 0.0f ? 1.0f / L : 0.0f;
    float *ot = out + (size_t)row * hd;
    for (int d = lane; d < hd; d += 32) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) acc += wsh[w][s] * pp[(size_t)s * stride + d];
        ot[d] = acc * il;
    }
}

cudaError_t smol_fattn_cuda(float *out, const float *q, const void *k_layer, const void *v_layer, int n_tokens,
                            const int32_t *tok, const int32_t *pages, const int32_t *tiles, int n_tiles, int n_heads,
                            int n_kv_heads, int head_dim, int kv_type, float scale, int n_split, float *part,
                            cudaStream_t st)
{
    if (n_tokens <= 0) return cudaSuccess;
    if (!smol_fattn_ok(head_dim, kv_type, n_heads, n_kv_heads) || n_split < 1 || n_split > FATTN_MAX_SPLIT ||
        n_tiles < 1 || n_tiles > n_tokens || (!tiles && n_tiles != n_tokens) || (n_split > 1 && !part) ||
        n_kv_heads > 65535)
        return cudaErrorInvalidValue;
    static int smem_set[2];  /* the opt-in beyond 48 KB, once per instance (the engine thread) */
    const int ki = kv_type == SMOL_TYPE_F16 ? 0 : 1;
    if (!smem_set[ki]) {
        const cudaError_t e = ki ? cudaFuncSetAttribute(fattn_kernel<SMOL_TYPE_Q8_0>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, FA_SMEM)
                                 : cudaFuncSetAttribute(fattn_kernel<SMOL_TYPE_F16>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, FA_SMEM);
        if (e != cudaSuccess) return e;
        smem_set[ki] = 1;
    }
    const dim3 grid(n_tiles, n_kv_heads, n_split);
    if (kv_type == SMOL_TYPE_F16)
        fattn_kernel<SMOL_TYPE_F16><<<grid, FA_THREADS, FA_SMEM, st>>>(out, q, k_layer, v_layer, tok, pages, tiles, n_tokens,
                                                                 n_heads, n_kv_heads, scale, part);
    else
        fattn_kernel<SMOL_TYPE_Q8_0><<<grid, FA_THREADS, FA_SMEM, st>>>(out, q, k_layer, v_layer, tok, pages, tiles,
                                                                  n_tokens, n_heads, n_kv_heads, scale, part);
    if (n_split > 1) {
        const int rows = n_tokens * n_heads;
        fattn_merge_kernel<<<(rows + FM_WARPS - 1) / FM_WARPS, FM_WARPS * 32, 0, st>>>(out, part, rows, head_dim,
                                                                                      n_split);
    }
    return cudaGetLastError();
}
