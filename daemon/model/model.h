/*
 * model.h - a SmolLM3 (or Llama-architecture) transformer loaded from GGUF,
 * and its forward pass.
 *
 * Three structs, as llama2.c: the config (hyperparameters, all read from the
 * GGUF), the weights (views into the mmapped file; never copied except small
 * norm vectors that are not f32), and the run state (activation buffers in
 * backend memory, sized once for the largest step).  The model also owns its
 * backend and the paged KV pool; sequences (struct smol_kv_seq) belong to
 * the caller.
 *
 * Legend: dim = hidden size, head_dim = per-head width, q_dim = n_heads *
 * head_dim, kv_dim = n_kv_heads * head_dim, ffn_dim = SwiGLU width,
 * vocab = rows of the (tied) LM head, n = tokens in the step.
 */
#ifndef SMOL_MODEL_H
#define SMOL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/backend.h"
#include "daemon/model/backend_cuda_loader.h"
#include "daemon/model/error.h"
#include "daemon/model/gguf.h"
#include "daemon/model/kv.h"
#include "daemon/model/threadpool.h"  /* the engine samples host rows on a pool of its own */

/* SmolLM3 "NoPE": layer il (0-based) applies no rotary embedding when
 * (il + 1) % 4 == 0, i.e. layers 3, 7, ..., 35 (HF no_rope_layers =
 * [1,1,1,0] x 9).  This is the model's definition; the GGUF has no key for
 * it.  Getting it wrong moves logits by ~0.25 on average. */
#define SMOL_SMOLLM3_NOPE_INTERVAL 4

enum smol_arch { SMOL_ARCH_LLAMA = 0, SMOL_ARCH_SMOLLM3 = 1 };

struct smol_config {
    enum smol_arch arch;
    char arch_name[32];         /* general.architecture */
    int dim;                    /* hidden size (embedding_length) */
    int n_layers;               /* block_count */
    int n_heads, n_kv_heads;    /* attention.head_count(_kv) */
    int head_dim;               /* key_length, else dim / n_heads */
    int q_dim, kv_dim;          /* n_heads * head_dim, n_kv_heads * head_dim */
    int ffn_dim;                /* feed_forward_length */
    int vocab;                  /* token_embd rows */
    int ctx_train;              /* context_length from metadata */
    int n_ctx;                  /* usable context: ctx_train (x YaRN factor), capped by settings */
    float rope_base;            /* rope.freq_base (theta) */
    int rope_dims;              /* rope.dimension_count (<= head_dim) */
    float norm_eps;             /* attention.layer_norm_rms_epsilon */
    int nope_interval;          /* 0: RoPE on every layer; 4: SmolLM3 NoPE rule */
    int tied;                   /* 1: LM head = token_embd (no output.weight) */
};

struct smol_layer {
    struct smol_weight attn_norm;   /* [dim] f32 */
    struct smol_weight wq;          /* (q_dim, dim) */
    struct smol_weight wk;          /* (kv_dim, dim) */
    struct smol_weight wv;          /* (kv_dim, dim) */
    struct smol_weight wo;          /* (dim, q_dim) */
    struct smol_weight ffn_norm;    /* [dim] f32 */
    struct smol_weight w_gate;      /* (ffn_dim, dim) */
    struct smol_weight w_up;        /* (ffn_dim, dim) */
    struct smol_weight w_down;      /* (dim, ffn_dim) */
};

struct smol_weights {
    struct smol_weight tok_embd;    /* (vocab, dim) */
    struct smol_weight output_norm; /* [dim] f32 */
    struct smol_weight output;      /* (vocab, dim): token_embd when tied */
    struct smol_layer *layers;      /* [n_layers] */
    float *owned;                   /* f32 copies of non-f32 norm vectors */
};

/* Activations in backend memory, for up to max_tokens tokens per step. */
struct smol_state {
    int max_tokens;
    float *x;       /* [max_tokens][dim] residual stream */
    float *xb;      /* [max_tokens][max(dim, q_dim)] normed input / projections */
    float *q;       /* [max_tokens][q_dim] */
    float *k, *v;   /* [max_tokens][kv_dim] */
    float *att;     /* [max_tokens][q_dim] attention output */
    float *hb, *hb2;/* [max_tokens][ffn_dim] gate / up */
    float *logits;  /* [logit_rows][vocab] */
    int logit_rows; /* SMOL_LOGIT_ROWS, or the largest bucket (bucketed steps: the head of every row at once) */
};

struct smol_model_settings {
    int n_threads;          /* 0 = all CPUs */
    int n_ctx;              /* cap on the context; 0 = metadata */
    int max_tokens;         /* tokens per forward step; 0 = 512 */
    const char *kv_type;    /* KV cache type "f32" | "f16" | "q8_0" (smol_kv_type_parse);
                               NULL = f16, or f32 when kv_f32 */
    int kv_f32;             /* 1: KV cache in f32 (the older switch, an alias of kv_type "f32") */
    size_t kv_budget;       /* bytes for the KV pool; 0 = one full-context sequence */
    int max_tokens_gpu;     /* when > 0 and the backend made is CUDA: max_tokens there */
    size_t kv_budget_gpu;   /* when > 0 and the backend made is CUDA: the KV pool there, halved while
                               it and SMOL_KV_GPU_SPARE bytes beside it cannot be allocated, down to
                               kv_budget (then the error) */
    int yarn;               /* 1: YaRN rope scaling (RoPE layers only) */
    float yarn_factor;      /* 0 = 2 */
    int quiet;              /* no load log */
    const char *backend;    /* "cpu" | "cuda" | "auto"; NULL = "cpu".  auto: CUDA when the
                               plugin finds a usable device, else a log line and the CPU */
    int cuda_device;        /* CUDA device index for "cuda" / "auto" */
    struct smol_cuda_opts cuda; /* the CUDA backend's knobs (smol_cuda_opts_default); the
                               SMOL_CUDA_* environment overrides them when the backend is made */
};

struct smol_model;
/* Called after each traced stage (debugging test): name as llama.cpp's
 * callback names ("Qcur-3", "l_out-7", ...), data [n][width] host floats. */
typedef void (*smol_trace_fn)(void *ctx, const char *name, const float *data, int n, int width);

struct smol_model {
    struct smol_config cfg;
    struct smol_weights w;
    struct smol_state s;
    struct smol_rope_params rope;
    struct smol_gguf *gguf;
    struct smol_backend *be;
    struct smol_cuda_opts cuda; /* the CUDA knobs in effect (settings + environment); meaningful
                                   when be is the CUDA backend (be->name "cuda...") */
    struct smol_kv kv;
    struct smol_layers_args layer_args;         /* the backend's layers op's view of the model */
    /* bucketed steps (CUDA, cuda_graphs = bucket): decode steps padded to 1, 2, 4 ... logit_rows
     * rows with rows on pad_seq (one reserved page), recorded once per size */
    int bucket;
    struct smol_kv_seq pad_seq;
    int32_t *pad_tok, *pad_pos, *pad_idx, *pad_ids;
    struct smol_kv_seq **pad_seqs;
    struct smol_row_sample *pad_rs;
    struct smol_layer_weights *layer_weights;   /* [n_layers], owned */
    smol_trace_fn trace;
    void *trace_ctx;
    float *trace_buf;
};

#define SMOL_KV_GPU_SPARE ((size_t)1 << 30)   /* device memory left beside a fitted KV pool */

void smol_model_settings_default(struct smol_model_settings *s);
enum smol_err smol_model_open(struct smol_model **out, const char *path, const struct smol_model_settings *set,
                              char *err);
void smol_model_close(struct smol_model **m);

/* One step.  Every token's sequence must have positions up to pos reserved
 * (smol_kv_seq_reserve) and the positions of a sequence must continue its
 * n_tokens in order.  Writes logits rows [b->n_out][vocab] (host) for the
 * tokens in b->out_idx, and advances each sequence's n_tokens. */
enum smol_err smol_model_forward(struct smol_model *m, const struct smol_batch *b, float *logits, char *err);

/* What a step does with one output row: sampled by the backend (on = 1) at temperature temp
 * (<= 0: argmax) and nucleus top_p (>= 1: off) with the uniform draw u in [0, 1), by
 * smol_sample_row_ref's rule (kernels/ops_ref.h), or (on = 0) its logits copied to the host. */

/* smol_model_forward where rows with rs[r].on get their token in ids[r] from the backend's
 * sampler instead of logits (their rows of logits are left as they were): on CUDA the device
 * samples them and 4 bytes a row come to the host instead of vocab * 4; on the CPU the same rule
 * runs on the host.  rs and ids are [b->n_out]; rs == NULL is smol_model_forward. */
enum smol_err smol_model_forward_sample(struct smol_model *m, const struct smol_batch *b, float *logits,
                                        const struct smol_row_sample *rs, int32_t *ids, char *err);

/* Convenience for one sequence: appends ids[0..n) at seq->n_tokens, in
 * chunks of max_tokens; writes logits of every position ([n][vocab]) if
 * all, else of the last position only ([vocab]); logits may be NULL. */
enum smol_err smol_model_eval(struct smol_model *m, struct smol_kv_seq *seq, const int32_t *ids, int n, int all,
                              float *logits, char *err);

/* 1 if layer il applies RoPE. */
static inline int smol_layer_has_rope(const struct smol_config *c, int il)
{
    return c->nope_interval == 0 || (il + 1) % c->nope_interval != 0;
}

#endif
