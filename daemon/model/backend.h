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
#include "kernels/ops_ref.h"

struct smol_kv;         /* kv.h: the paged cache the attention ops read and write (by pointer only:
                           kv.c allocates its pages through this interface) */
struct smol_kv_seq;

struct smol_weight {
    const char *name;           /* GGUF tensor name (owned by the GGUF reader) */
    uint32_t type;              /* enum smol_type */
    int rows, cols;             /* n_out, n_in */
    size_t row_bytes;           /* bytes per row in its format */
    const void *data;           /* host pointer (into the mmap, or owned f32 copy) */
    void *dev;                  /* backend copy: device memory, or the CPU's repacked rows (NULL: use data) */
    void *dev_aux;              /* a second backend copy in another layout (CUDA: the q8 mat-vec's), or NULL */
    int file_backed;            /* data lies in a read-only file mapping: its pages may be dropped after a copy */
};

/* One layer's weights, for a backend that runs whole layers itself (the layers op). */
struct smol_layer_weights {
    const struct smol_weight *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    int rope;                   /* 0: a NoPE layer */
};

/* What the layers op needs of the model (model.c fills it once). */
struct smol_layers_args {
    int n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim;
    float eps, scale;
    const struct smol_rope_params *rope;
    const struct smol_layer_weights *layers;    /* [n_layers] */
    const struct smol_weight *output_norm;
    struct smol_kv *kv;
};

/* A row's sampling on the backend: on = 1 for a row whose token the backend draws (temperature
 * temp, <= 0: argmax; nucleus top_p; uniform u in [0, 1)). */
struct smol_row_sample {
    int on;
    float temp, top_p, u;
};

/* One engine step: tokens of one or more sequences, each at its position. */
struct smol_batch {
    int n_tokens;
    const int32_t *tokens;              /* [n_tokens] */
    const int32_t *pos;                 /* [n_tokens] position within its sequence */
    struct smol_kv_seq *const *seq;     /* [n_tokens] the token's sequence */
    int n_out;                          /* tokens whose logits are wanted */
    const int32_t *out_idx;             /* [n_out] batch indices, ascending */
    const struct smol_row_sample *rs;   /* [n_out] sampling of the rows (step_sample), or NULL */
    int bucket;                         /* 1: a decode step padded to a bucket size by forward() (rows
                                           n_out == n_tokens, the padding rows on a scratch sequence):
                                           a backend may record it once per size (CUDA graphs) */
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

    /* Optional fused steps of a layer.  Each returns 1 when it did the work, 0 when it did
     * nothing (NULL, or 0: forward() composes the same function from the ops above).  A backend
     * fuses only what it computes as the composition does, up to rounding. */
    /* q, k, v = (rmsnorm(x) * nw) . {wq, wk, wv}^T, n rows of dim; x unchanged */
    int (*norm_qkv)(struct smol_backend *be, float *q, float *k, float *v, const float *x,
                    const struct smol_weight *nw, const struct smol_weight *wq, const struct smol_weight *wk,
                    const struct smol_weight *wv, int n, int dim, float eps);
    /* rope(q), rope(k) at b->pos (rp NULL: none, a NoPE layer), then kv_store(k, v) */
    int (*rope_store)(struct smol_backend *be, float *q, float *k, const float *v, const struct smol_rope_params *rp,
                      struct smol_kv *kv, int layer, const struct smol_batch *b, int n_heads);
    /* x += in . w^T, n rows */
    int (*matmul_add)(struct smol_backend *be, float *x, const struct smol_weight *w, const float *in, int n);
    /* x += (silu(h wg^T) * (h wu^T)) wd^T, h = rmsnorm(x) * nw; hb: scratch [n][ffn] */
    int (*ffn)(struct smol_backend *be, float *x, const struct smol_weight *nw, const struct smol_weight *wg,
               const struct smol_weight *wu, const struct smol_weight *wd, float *hb, int n, int dim, float eps);

    /* Optional: every layer of a step and the head's input in the backend's own fused kernels
     * (CUDA: knob cuda_fuse = layer).  x holds the step's embeddings (b->n_tokens rows of
     * a->dim) and is scratch afterwards; on return xb[i] = rmsnorm(x after the last layer,
     * row b->out_idx[i]) * output_norm for i < b->n_out.  1 when it did that, 0 when it did
     * nothing (forward() then runs the layers op by op). */
    int (*layers)(struct smol_backend *be, const struct smol_layers_args *a, const struct smol_batch *b, float *x,
                  float *xb);

    /* Optional recording of a step (CUDA graphs).  forward() calls step_begin before the step's
     * first op: SMOL_STEP_RUN = run the ops as usual; SMOL_STEP_CAPTURE = run them, they are
     * being recorded, then call step_end, which replays the record (0) or says that the
     * recording failed and nothing ran (-1: run the ops again, plainly); SMOL_STEP_REPLAYED =
     * the backend ran this step's recorded ops itself: call none.  The ops recorded are those
     * from the embedding lookup to the first SMOL_LOGIT_ROWS rows of logits (model.h). */
    int (*step_begin)(struct smol_backend *be, const struct smol_batch *b);
    int (*step_end)(struct smol_backend *be);
    /* Optional sampling as part of a step (recorded with it; CUDA: knob cuda_graphs = bucket):
     * rows [0, n_rows) of logits (backend memory) drawn with the rows' b->rs that step_begin
     * received; step_ids then waits for the step and gives the tokens (host). */
    void (*step_sample)(struct smol_backend *be, const float *logits, int n_rows, int vocab);
    enum smol_err (*step_ids)(struct smol_backend *be, int32_t *ids, int n_rows, char *err);
};

/* rows of logits a step computes per head mat-vec (model.h's state holds that many) */
#define SMOL_LOGIT_ROWS 32
/* the largest bucket of a bucketed step (rows; cuda_graphs = bucket) */
#define SMOL_BUCKET_MAX 256

enum { SMOL_STEP_RUN = 0, SMOL_STEP_CAPTURE = 1, SMOL_STEP_REPLAYED = 2 };

/* The CPU backend (backend_cpu.c). n_threads 0 = all online CPUs. */
enum smol_err smol_backend_cpu_new(struct smol_backend **out, int n_threads, char *err);
void smol_backend_free(struct smol_backend **be);

#endif
