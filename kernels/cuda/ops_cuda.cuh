/*
 * ops_cuda.cuh - the CUDA twins of the forward-pass ops (host launchers).
 *
 * Each function mirrors its CPU/_ref twin's name with _cuda, the same
 * leading arguments in the same order, and trailing launch context (row
 * count where the _ref works on one row, device descriptors, the stream).
 * All pointers are device memory unless marked "host".  Launchers only
 * enqueue work on the stream: no allocation, no synchronisation, no
 * logging.  They return the launch status (cudaGetLastError) so callers can
 * keep a sticky error.
 *
 * KV layout (daemon/model/kv.h): cache[layer][page][kv_head][slot][head_dim],
 * f16 or f32; the launchers get one layer's base.  Batch descriptors are
 * device int32 arrays built by the backend:
 *     tok[2t] = n_pos of token t (its position + 1), tok[2t+1] = offset of
 *     its sequence's page table in pages[].
 */
#ifndef SMOL_OPS_CUDA_CUH
#define SMOL_OPS_CUDA_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stddef.h>
#include "../ops_ref.h"
#include "mmvq.h"

/* out[i] = dequant(row ids[i]) of a (rows x cols) weight of `type`, i < n (smol_dequant_*_ref per row). */
cudaError_t smol_get_rows_cuda(float *out, uint32_t type, const void *w, size_t row_bytes, int cols,
                               const int32_t *ids, int n, cudaStream_t st);

/* out[t][r] = dot(w row r, x[t]), t < n, r < rows.  n <= 8: one pass over the weights decoding
 * blocks to registers (decode); n > 8: tiles decoded to f16 in shared memory, tensor-core mma
 * with f32 accumulation (prefill). */
cudaError_t smol_matmul_cuda(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                             const float *x, int n, cudaStream_t st);
/* Numbered variants, kept callable for the test harness and benchmarks. */
cudaError_t smol_matmul_cuda_1(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                               const float *x, int n, cudaStream_t st);  /* register decode, any n */
cudaError_t smol_matmul_cuda_2(float *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                               const float *x, int n, cudaStream_t st);  /* f16 wmma tiles, any n */

/* ---- the bf16 operands of the cuBLASLt GEMM (lt.cu; knob cuda_gemm = lt) ---- */
/* out[r][c] (row-major, rows x cols bf16 bits) = weight rows [0, rows) of `type` from w (row_bytes
 * apart), decoded by dq32 and rounded to nearest even (smol_f32_to_bf16 of kernels/fp16.h). */
cudaError_t smol_dequant_bf16_cuda(uint16_t *out, uint32_t type, const void *w, size_t row_bytes, int rows, int cols,
                                   cudaStream_t st);
/* dst[i] = bf16 of x[i], i < count (even) */
cudaError_t smol_bf16_from_f32_cuda(uint16_t *dst, const float *x, size_t count, cudaStream_t st);

/* ---- the q8 mat-vec (mmvq.cu; layouts in mmvq.h) ---- */
#define SMOL_MMVQ_MAX_TOKENS 8
enum { SMOL_MV_STORE = 0, SMOL_MV_ADD = 1, SMOL_MV_GLU = 2 };
/* One weight of a launch: w its device copy in the q8 layout (mmvq.h: q4_K as in GGUF, the others
 * repacked), n_blocks its block count, out[tok][rows] where the results go. */
struct smol_mv_part {
    const uint8_t *w;
    float *out;
    size_t n_blocks;
    int rows, type;
};
/* x[n][cols] (cols a multiple of 32) to q8a: xq[n][cols], xs[n][cols / 32] */
cudaError_t smol_q8a_cuda(const float *x, int n, int cols, int8_t *xq, struct smol_q8a *xs, cudaStream_t st);
/* the same of rmsnorm(x) * w (smol_rmsnorm_ref's function) */
cudaError_t smol_norm_q8a_cuda(const float *x, const float *w, float eps, int n, int cols, int8_t *xq,
                               struct smol_q8a *xs, cudaStream_t st);
/* For n <= SMOL_MMVQ_MAX_TOKENS tokens of q8a input (width cols): SMOL_MV_STORE / ADD: for each
 * part, out[tok][r] = (or +=) dot(row r, x[tok]), up to 3 parts in one launch; SMOL_MV_GLU: two
 * parts (gate, up) of equal rows, parts[0].out[tok][r] = silu(gate r . x) * (up r . x). */
cudaError_t smol_mmvq_cuda(const struct smol_mv_part *parts, int n_parts, int mode, const int8_t *xq,
                           const struct smol_q8a *xs, int cols, int n, cudaStream_t st);
/* The same with each row's tasks split among ks (1, 2 or 4) warps (knob cuda_matvec = q8k; not
 * for SMOL_MV_GLU); smol_mmvq_split picks ks for a weight of `rows` rows on n_sm SMs. */
cudaError_t smol_mmvq_cuda_ks(const struct smol_mv_part *parts, int n_parts, int mode, const int8_t *xq,
                              const struct smol_q8a *xs, int cols, int n, int ks, cudaStream_t st);
int smol_mmvq_split(int rows, int n_sm);

/* ---- a decode layer in four kernels (layer.cu, knob cuda_fuse = layer) ---- */
struct smol_layer_args {
    int n;                          /* tokens of the step (1..SMOL_MMVQ_MAX_TOKENS) */
    const int32_t *tok, *pages;     /* the KV descriptor (as smol_attention_cuda's) */
    const float *x0;                /* the first layer: the embeddings [n][dim] (float); else NULL */
    long long *xa, *xb;             /* the residual [n][dim] in fixed point (2^-32), its copy after attention */
    int dim, n_heads, n_kv_heads, head_dim, ffn;
    float eps, scale;
    const float *attn_norm, *ffn_norm;
    struct smol_mv_part wq, wk, wv, wo, wg, wu, wd;   /* q8 layouts (mmvq.h); .out unused */
    float *q;                       /* [n][n_heads * head_dim] */
    void *kc, *vc;                  /* this layer's caches */
    int kv_type;                    /* SMOL_TYPE_F16 or SMOL_TYPE_F32 */
    const float2 *rope_cs;          /* [position][rope_pairs] cos, sin; NULL: a NoPE layer */
    int rope_pairs;
    float *part;                    /* attention partials: n * n_heads * n_split * (head_dim + 2) */
    int *cnt;                       /* [n][n_kv_heads] merge tickets, zero between launches */
    int n_split, pps;               /* attention splits, pages per split (0: found on the device) */
    int8_t *aq;                     /* the attention output as q8a: [n][n_heads * head_dim] */
    struct smol_q8a *as;            /* [n][n_heads * head_dim / 32] */
};
/* 1 if the shapes have the fused path */
int smol_layer_ok(int dim, int n_heads, int n_kv_heads, int head_dim, int ffn, int kv_type);
/* the layer's four launches: qkv, attention, o, ffn */
cudaError_t smol_layer_cuda(const struct smol_layer_args *a, cudaStream_t st);
/* The persistent kernel (knob cuda_persistent = on): every layer's four bodies in one
 * cooperative launch with grid-wide waits between them, then the head's input.  layers: the
 * layers' smol_layer_args in device memory (their step fields n, tok, pages, n_split, pps are
 * taken from here). */
struct smol_persist_args {
    const struct smol_layer_args *layers;
    int n_layers, n, n_split, pps, n_out, dim;
    const int32_t *tok, *pages, *idx;
    unsigned *bar;                  /* 2 words, zero before the first launch */
    float *xb;                      /* out: [n_out][dim] */
    const long long *x;             /* the residual (layers[0].xa) */
    const float *out_norm;
    float eps;
};
size_t smol_persist_smem(int n, int dim, int n_heads, int n_kv_heads);
/* its grid: co-resident blocks on n_sm SMs (0: it cannot run) */
int smol_persist_grid(int n, int f16, size_t smem, int n_sm);
cudaError_t smol_persist_cuda(const struct smol_persist_args *p, int grid, int f16, size_t smem, cudaStream_t st);

/* out[i] = rmsnorm(x[idx[i]]) * w for i < n_out, x in fixed point (the last layer's xa) */
cudaError_t smol_head_norm_cuda(float *out, const long long *x, const int32_t *idx, int n_out, const float *w, float eps,
                                int dim, cudaStream_t st);

/* smol_rmsnorm_ref over n rows of dim; out may equal x. */
cudaError_t smol_rmsnorm_cuda(float *out, const float *x, const float *w, int dim, float eps, int n,
                              cudaStream_t st);

/* smol_rope_cache_ref + smol_rope_apply_ref for n tokens of n_heads x head_dim at pos[t] (device). */
cudaError_t smol_rope_cuda(float *x, const int32_t *pos, int n, int n_heads, int head_dim,
                           const struct smol_rope_params *rp /* host */, cudaStream_t st);

/* rope (rp NULL: none) of q and k as smol_rope_cuda, then k and v stored as smol_kv_store_cuda
 * (f16 or f32 caches), in one launch. */
cudaError_t smol_rope_store_cuda(float *q, float *k, const float *v, void *k_layer, void *v_layer, int n_tokens,
                                 const int32_t *tok, const int32_t *pages, int n_heads, int n_kv_heads, int head_dim,
                                 int kv_type, const struct smol_rope_params *rp, cudaStream_t st);

cudaError_t smol_silu_mul_cuda(float *gate, const float *up, int n, cudaStream_t st);
cudaError_t smol_add_cuda(float *x, const float *y, int n, cudaStream_t st);

/* smol_hadamard_ref: x[0, n) in place, each run of group (a power of two, 2..1024) elements
 * times the orthonormal Walsh-Hadamard matrix (the q8_0 KV cache's rotation). */
cudaError_t smol_hadamard_cuda(float *x, int n, int group, cudaStream_t st);

/* out[i] = x[idx[i]], rows of dim; out must not overlap x (the backend handles in-place). */
cudaError_t smol_gather_rows_cuda(float *out, const float *x, const int32_t *idx, int n, int dim, cudaStream_t st);

/* Writes k[t], v[t] (n_kv_heads x head_dim) at position tok[2t] - 1 of their sequences, as
 * kv_type: SMOL_TYPE_F32, SMOL_TYPE_F16 or SMOL_TYPE_Q8_0 (rows of head_dim / 32 blocks,
 * quantized as smol_quantize_q8_0_ref; head_dim a multiple of 32). */
cudaError_t smol_kv_store_cuda(void *k_layer, void *v_layer, const float *k, const float *v, int n_tokens,
                               const int32_t *tok, const int32_t *pages, int n_kv_heads, int head_dim, int kv_type,
                               cudaStream_t st);

/* out[t] = causal GQA attention of q[t] over positions [0, tok[2t]) of its sequence.
 * Split-K over pages ("flash decoding"): n_split blocks per (token, kv head) each keep an online
 * softmax over pages_per_split pages (0: ceil(a token's pages / n_split), found on the device, so
 * that one launch serves any context: a recorded step); a second kernel merges them.  part holds
 * n_tokens * n_heads * n_split * (head_dim + 2) floats when n_split > 1. */
cudaError_t smol_attention_cuda(float *out, const float *q, const void *k_layer, const void *v_layer, int n_tokens,
                                const int32_t *tok, const int32_t *pages, int n_heads, int n_kv_heads,
                                int head_dim, int kv_type, float scale, int n_split, int pages_per_split,
                                float *part, cudaStream_t st);

/* Sampling on the device, one block per row of logits [n_rows][vocab].
 * argmax: ties keep the lower id, NaN never wins (as sampler.c).
 * top_p: softmax(logits / temp[r]) restricted to the nucleus of mass top_p[r] (found by bisection
 * on the probability threshold), sampled with the uniform u[r] in [0, 1); temp[r] <= 0 = argmax. */
cudaError_t smol_sample_argmax_cuda(const float *logits, int vocab, int n_rows, int32_t *out, cudaStream_t st);
cudaError_t smol_sample_top_p_cuda(const float *logits, int vocab, int n_rows, const float *temp,
                                   const float *top_p, const float *u, int32_t *out, cudaStream_t st);

#endif
