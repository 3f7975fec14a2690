/*
 * backend.h - the compute backend interface: a table of function pointers
 * chosen at startup (CPU now; CUDA as a plugin).  forward() in model.c is
 * written against these ops only and never knows where it runs.
 *
 * Buffers passed to ops ("backend memory") come from be->alloc: host memory
 * for the CPU backend, device memory for CUDA.  Weights are described by
 * struct smol_weight with the host (mmapped) pointer and, after
 * upload_weight, a backend-side copy.  Batch descriptors (ids, positions,
 * sequences) are host memory; a device backend copies what it needs.
 *
 * Shapes use the engine's convention: a weight is (rows = n_out, cols = n_in),
 * activations are row-major [n_tokens][width].
 */
#ifndef SMOL_BACKEND_H
#define SMOL_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"
#include "daemon/model/kv.h"
#include "kernels/ops_ref.h"

struct smol_weight {
    const char *name;           /* GGUF tensor name (owned by the GGUF reader) */
    uint32_t type;              /* enum smol_type */
    int rows, cols;             /* n_out, n_in */
    size_t row_bytes;           /* bytes per row in its format */
    const void *data;           /* host pointer (into the mmap, or owned f32 copy) */
    void *dev;                  /* backend copy: device memory, or the CPU's repacked rows (NULL: use data) */
    int file_backed;            /* data lies in a read-only file mapping: its pages may be dropped after a copy */
};

/* One engine step: tokens of one or more sequences, each at its position. */
struct smol_batch {
    int n_tokens;
    const int32_t *tokens;              /* [n_tokens] */
    const int32_t *pos;                 /* [n_tokens] position within its sequence */
    struct smol_kv_seq *const *seq;     /* [n_tokens] the token's sequence */
    int n_out;                          /* tokens whose logits are wanted */
    const int32_t *out_idx;             /* [n_out] batch indices, ascending */
};

struct smol_backend {
    const char *name;
    void *impl;
    int n_threads;

    void (*destroy)(struct smol_backend *be);
    /* Scratch sized for the largest step: tokens per step, widest row, longest context. */
    enum smol_err (*reserve)(struct smol_backend *be, int max_tokens, int max_cols, int max_ctx, char *err);
    void *(*alloc)(struct smol_backend *be, size_t bytes);  /* zeroed; NULL on failure */
    void (*free)(struct smol_backend *be, void *p);
    void (*to_host)(struct smol_backend *be, void *dst, const void *src, size_t bytes);
    /* host -> backend memory (KV pages read back from disk); NULL: not supported */
    void (*from_host)(struct smol_backend *be, void *dst, const void *src, size_t bytes);
    enum smol_err (*upload_weight)(struct smol_backend *be, struct smol_weight *w, char *err);

    /* out[i] = dequant(w row ids[i]), i < n */
    void (*get_rows)(struct smol_backend *be, float *out, const struct smol_weight *w, const int32_t *ids, int n);
    /* out[t] = rmsnorm(x[t]) * w, t < n, rows of dim */
    void (*rmsnorm)(struct smol_backend *be, float *out, const float *x, const struct smol_weight *w, int n,
                    int dim, float eps);
    /* out[t][r] = dot(w row r, x[t]), t < n, r < w->rows */
    void (*matmul)(struct smol_backend *be, float *out, const struct smol_weight *w, const float *x, int n);
    /* optional (NULL: matmul each): outs[i] = x ws[i]^T, i < n_w <= 4, weights of one input width; a
     * backend may share the quantized input and the threads' meeting among them */
    void (*matmul_n)(struct smol_backend *be, float *const *outs, const struct smol_weight *const *ws, int n_w,
                     const float *x, int n);
    /* rotate x[t] (n_heads x head_dim) at position pos[t] */
    void (*rope)(struct smol_backend *be, float *x, const int32_t *pos, int n, int n_heads, int head_dim,
                 const struct smol_rope_params *rp);
    /* x[0, n) in place, each run of `group` elements times the orthonormal Walsh-Hadamard
     * matrix (smol_hadamard_ref; the q8_0 KV cache's rotation) */
    void (*hadamard)(struct smol_backend *be, float *x, int n, int group);
    /* write k[t], v[t] (kv_dim each) into the cache at (seq[t], pos[t]) for one layer */
    void (*kv_store)(struct smol_backend *be, struct smol_kv *kv, int layer, const float *k, const float *v,
                     const struct smol_batch *b);
    /* out[t] = causal GQA attention of q[t] over seq[t]'s positions [0, pos[t]] */
    void (*attention)(struct smol_backend *be, float *out, const float *q, const struct smol_kv *kv, int layer,
                      const struct smol_batch *b, int n_heads, float scale);
    void (*silu_mul)(struct smol_backend *be, float *gate, const float *up, int n);
    void (*add)(struct smol_backend *be, float *x, const float *y, int n);
    /* out[i] = x[idx[i]], rows of dim */
    void (*gather_rows)(struct smol_backend *be, float *out, const float *x, const int32_t *idx, int n, int dim);
    /* copy page src to page dst, all layers, K and V */
    void (*kv_copy_page)(struct smol_backend *be, struct smol_kv *kv, int dst, int src);
};

/* The CPU backend (backend_cpu.c). n_threads 0 = all online CPUs. */
enum smol_err smol_backend_cpu_new(struct smol_backend **out, int n_threads, char *err);
void smol_backend_free(struct smol_backend **be);

#endif
