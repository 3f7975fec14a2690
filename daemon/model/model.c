/*
 * model.c - load a SmolLM3 / Llama GGUF and run the transformer.
 *
 * Loading converts GGUF conventions once: tensors are found by name, their
 * ne[0] (contiguous) dimension becomes `cols` (n_in) and ne[1] `rows`
 * (n_out); every shape is checked against the hyperparameters, every type
 * against what the kernels support, with a message naming the tensor.
 *
 * forward() is the model, top to bottom:
 *   x = token_embd[ids]
 *   per layer: h = rmsnorm(x) * attn_norm; q, k, v = h Wq, h Wk, h Wv;
 *              RoPE(q, k) unless NoPE; (q8_0 cache: q, k, v times H, kv.h);
 *              store k, v; att = causal GQA attention (q8_0: att times H);
 *              x += att Wo; h = rmsnorm(x) * ffn_norm;
 *              x += (silu(h Wgate) * (h Wup)) Wdown
 *   logits = (rmsnorm(x) * output_norm) token_embd^T   (tied head)
 * RoPE rotates adjacent pairs: the GGUF converter permuted Q/K rows so that
 * this equals Hugging Face's half-split rotation on the original weights.
 */
#include "daemon/model/model.h"
#include "daemon/model/backend_cuda_loader.h"
#include "kernels/ops_ref.h"
#include "kernels/quant_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void smol_model_settings_default(struct smol_model_settings *s)
{
    memset(s, 0, sizeof *s);
    s->max_tokens = 512;
    s->yarn_factor = 2.0f;
    smol_cuda_opts_default(&s->cuda);
}

/* ---- hyperparameters ------------------------------------------------------- */

static enum smol_err get_int(const struct smol_gguf *g, const char *arch, const char *suffix, int *out, int required,
                             int lo, int hi, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v = (uint32_t)*out;
    enum smol_err e = smol_gguf_get_u32(g, key, &v, required, err);
    if (e) return e;
    if ((int64_t)v < lo || (int64_t)v > hi)
        return smol_errf(err, SMOL_EFORMAT, "model: %s = %u is out of range [%d, %d]", key, v, lo, hi);
    *out = (int)v;
    return SMOL_OK;
}

static enum smol_err read_config(struct smol_config *c, const struct smol_gguf *g, char *err)
{
    struct smol_gguf_str a;
    enum smol_err e = smol_gguf_get_str(g, "general.architecture", &a, 1, err);
    if (e) return e;
    if (a.len >= sizeof c->arch_name) return smol_errf(err, SMOL_EUNSUPPORTED, "model: architecture name too long");
    memcpy(c->arch_name, a.ptr, a.len);
    c->arch_name[a.len] = 0;
    if (!strcmp(c->arch_name, "smollm3")) {
        c->arch = SMOL_ARCH_SMOLLM3;
        c->nope_interval = SMOL_SMOLLM3_NOPE_INTERVAL;
    } else if (!strcmp(c->arch_name, "llama")) {
        c->arch = SMOL_ARCH_LLAMA;
        c->nope_interval = 0;
    } else {
        return smol_errf(err, SMOL_EUNSUPPORTED, "model: architecture '%s' is not supported (smollm3, llama)",
                         c->arch_name);
    }
    const char *ar = c->arch_name;
    if ((e = get_int(g, ar, "embedding_length", &c->dim, 1, 1, 1 << 16, err)) ||
        (e = get_int(g, ar, "block_count", &c->n_layers, 1, 1, 1024, err)) ||
        (e = get_int(g, ar, "feed_forward_length", &c->ffn_dim, 1, 1, 1 << 18, err)) ||
        (e = get_int(g, ar, "attention.head_count", &c->n_heads, 1, 1, 1024, err)))
        return e;
    c->n_kv_heads = c->n_heads;
    c->ctx_train = 2048;
    if ((e = get_int(g, ar, "attention.head_count_kv", &c->n_kv_heads, 0, 1, 1024, err)) ||
        (e = get_int(g, ar, "context_length", &c->ctx_train, 0, 1, 1 << 24, err)))
        return e;
    if (c->dim % c->n_heads)
        return smol_errf(err, SMOL_EFORMAT, "model: embedding_length %d is not a multiple of head_count %d", c->dim,
                         c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    if ((e = get_int(g, ar, "attention.key_length", &c->head_dim, 0, 2, 1024, err))) return e;
    int vlen = c->head_dim;
    if ((e = get_int(g, ar, "attention.value_length", &vlen, 0, 2, 1024, err))) return e;
    if (vlen != c->head_dim)
        return smol_errf(err, SMOL_EUNSUPPORTED, "model: value_length %d != key_length %d", vlen, c->head_dim);
    if (c->n_heads % c->n_kv_heads)
        return smol_errf(err, SMOL_EFORMAT, "model: head_count %d is not a multiple of head_count_kv %d", c->n_heads,
                         c->n_kv_heads);
    if (c->n_heads / c->n_kv_heads > 16)
        return smol_errf(err, SMOL_EUNSUPPORTED, "model: more than 16 query heads per KV head");
    if (c->head_dim % 2 || c->head_dim > 512)
        return smol_errf(err, SMOL_EFORMAT, "model: head_dim %d must be even and <= 512", c->head_dim);
    c->rope_dims = c->head_dim;
    if ((e = get_int(g, ar, "rope.dimension_count", &c->rope_dims, 0, 0, c->head_dim, err))) return e;
    if (c->rope_dims % 2) return smol_errf(err, SMOL_EFORMAT, "model: rope.dimension_count must be even");
    c->q_dim = c->n_heads * c->head_dim;
    c->kv_dim = c->n_kv_heads * c->head_dim;
    char key[128];
    c->rope_base = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", ar);
    if ((e = smol_gguf_get_f32(g, key, &c->rope_base, 0, err))) return e;
    c->norm_eps = 1e-5f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", ar);
    if ((e = smol_gguf_get_f32(g, key, &c->norm_eps, 0, err))) return e;
    if (!(c->rope_base > 0 && isfinite(c->rope_base)))
        return smol_errf(err, SMOL_EFORMAT, "model: rope.freq_base must be positive");
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return smol_errf(err, SMOL_EFORMAT, "model: layer_norm_rms_epsilon must be in (0, 1)");
    return SMOL_OK;
}

/* ---- weights ------------------------------------------------------------------ */

static enum smol_err bind(struct smol_weight *w, const struct smol_gguf *g, const char *name, int rows, int cols,
                          int optional, char *err)
{
    const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional) return SMOL_OK;
        return smol_errf(err, SMOL_EFORMAT, "model: missing tensor '%s'", name);
    }
    const struct smol_type_traits *tr = smol_type_traits(t->type);
    if (!tr || !tr->supported || !tr->vec_dot || !tr->dequant)
        return smol_errf(err, SMOL_EUNSUPPORTED, "model: tensor '%s' has type %s, which is not supported "
                         "(f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K)", name, smol_type_name(t->type));
    int want_dims = rows == 1 ? 1 : 2;
    if ((int)t->n_dims != want_dims || t->ne[0] != cols || (want_dims == 2 && t->ne[1] != rows))
        return smol_errf(err, SMOL_EFORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%d, %d]", name,
                         (long long)t->ne[0], (long long)t->ne[1], cols, rows);
    w->name = t->name;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = smol_row_size(t->type, cols);
    w->data = t->data;
    w->file_backed = g->mapped;
    return SMOL_OK;
}

/* Norm vectors are used as plain f32 arrays, copied (converted) once: read
 * from the mapping at every step they would keep its pages resident (see
 * drop_norm_pages). */
static enum smol_err bind_norm(struct smol_weight *w, const struct smol_gguf *g, const char *name, int dim,
                               float **owned, char *err)
{
    enum smol_err e = bind(w, g, name, 1, dim, 0, err);
    if (e) return e;
    smol_type_traits(w->type)->dequant(w->data, *owned, dim);
    w->data = *owned;
    w->file_backed = 0;
    w->type = SMOL_TYPE_F32;
    w->row_bytes = (size_t)dim * 4;
    *owned += dim;
    return SMOL_OK;
}

static enum smol_err load_weights(struct smol_model *m, char *err)
{
    const struct smol_config *c = &m->cfg;
    const struct smol_gguf *g = m->gguf;
    struct smol_weights *w = &m->w;
    char name[96];
    enum smol_err e;

    const struct smol_gguf_tensor *te = smol_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return smol_errf(err, SMOL_EFORMAT, "model: missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return smol_errf(err, SMOL_EFORMAT, "model: tensor 'token_embd.weight' must be 2-D [dim, vocab]");
    m->cfg.vocab = (int)te->ne[1];
    int vsz = m->cfg.vocab;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", c->arch_name);
    if ((e = smol_gguf_get_u32(g, key, (uint32_t *)&vsz, 0, err))) return e;
    if (vsz != c->vocab)
        return smol_errf(err, SMOL_EFORMAT, "model: %s = %d but token_embd.weight has %d rows", key, vsz, c->vocab);
    const struct smol_gguf_kv *toks = NULL;
    if ((e = smol_gguf_get_arr(g, "tokenizer.ggml.tokens", SMOL_GGUF_STRING, &toks, 0, err))) return e;
    if (toks && toks->arr_n > (uint64_t)c->vocab)
        return smol_errf(err, SMOL_EFORMAT, "model: tokenizer has %llu tokens but token_embd.weight has %d rows",
                         (unsigned long long)toks->arr_n, c->vocab);

    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    w->owned = calloc((size_t)(2 * c->n_layers + 1) * c->dim, sizeof(float));
    if (!w->layers || !w->owned) return smol_errf(err, SMOL_ENOMEM, "model: out of memory");
    float *own = w->owned;

    if ((e = bind(&w->tok_embd, g, "token_embd.weight", c->vocab, c->dim, 0, err)) ||
        (e = bind_norm(&w->output_norm, g, "output_norm.weight", c->dim, &own, err)) ||
        (e = bind(&w->output, g, "output.weight", c->vocab, c->dim, 1, err)))
        return e;
    m->cfg.tied = w->output.data == NULL;
    if (c->tied) w->output = w->tok_embd;

    for (int l = 0; l < c->n_layers; l++) {
        struct smol_layer *L = &w->layers[l];
#define NM(s) (snprintf(name, sizeof name, "blk.%d." s ".weight", l), name)
        if ((e = bind_norm(&L->attn_norm, g, NM("attn_norm"), c->dim, &own, err)) ||
            (e = bind(&L->wq, g, NM("attn_q"), c->q_dim, c->dim, 0, err)) ||
            (e = bind(&L->wk, g, NM("attn_k"), c->kv_dim, c->dim, 0, err)) ||
            (e = bind(&L->wv, g, NM("attn_v"), c->kv_dim, c->dim, 0, err)) ||
            (e = bind(&L->wo, g, NM("attn_output"), c->dim, c->q_dim, 0, err)) ||
            (e = bind_norm(&L->ffn_norm, g, NM("ffn_norm"), c->dim, &own, err)) ||
            (e = bind(&L->w_gate, g, NM("ffn_gate"), c->ffn_dim, c->dim, 0, err)) ||
            (e = bind(&L->w_up, g, NM("ffn_up"), c->ffn_dim, c->dim, 0, err)) ||
            (e = bind(&L->w_down, g, NM("ffn_down"), c->dim, c->ffn_dim, 0, err)))
            return e;
#undef NM
        /* biases would be silently ignored: refuse a file that has them */
        snprintf(name, sizeof name, "blk.%d.attn_q.bias", l);
        if (smol_gguf_find_tensor(g, name))
            return smol_errf(err, SMOL_EUNSUPPORTED, "model: tensor '%s': attention biases are not supported", name);
    }
    return SMOL_OK;
}

/* The file's page cache comes in 2 MiB folios, mapped whole: the few KiB
 * of a norm vector read at load keep 2 MiB of the mapping resident each
 * (~75 MiB for SmolLM3-3B) after the weights around them were copied and
 * dropped.  With the norms copied, those regions are dropped too (a
 * read-only file mapping: whatever is read there again comes back from the
 * page cache). */
static void drop_norm_pages(const struct smol_model *m)
{
    const struct smol_gguf *g = m->gguf;
    if (!g->mapped) return;
    const uintptr_t huge = 2u << 20, lo_map = (uintptr_t)g->base, hi_map = lo_map + g->size;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    char name[96];
    for (int l = -1; l < m->cfg.n_layers; l++)
        for (int k = 0; k < 2; k++) {
            if (l < 0 && k) break;
            if (l < 0) snprintf(name, sizeof name, "output_norm.weight");
            else snprintf(name, sizeof name, "blk.%d.%s.weight", l, k ? "ffn_norm" : "attn_norm");
            const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, name);
            if (!t) continue;
            uintptr_t lo = (uintptr_t)t->data / huge * huge, hi = ((uintptr_t)t->data + t->size + huge - 1) / huge * huge;
            if (lo < lo_map) lo = (lo_map + pg - 1) / pg * pg;
            if (hi > hi_map) hi = hi_map / pg * pg;
            if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
}

static enum smol_err upload_all(struct smol_model *m, char *err)
{
    struct smol_backend *be = m->be;
    struct smol_weights *w = &m->w;
    enum smol_err e;
    if ((e = be->upload_weight(be, &w->tok_embd, err)) || (e = be->upload_weight(be, &w->output_norm, err)))
        return e;
    if (!m->cfg.tied && (e = be->upload_weight(be, &w->output, err))) return e;
    if (m->cfg.tied) {
        w->output.dev = w->tok_embd.dev;
        w->output.dev_aux = w->tok_embd.dev_aux;
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        struct smol_weight *ws[] = {&w->layers[l].attn_norm, &w->layers[l].wq, &w->layers[l].wk,
                                    &w->layers[l].wv, &w->layers[l].wo, &w->layers[l].ffn_norm,
                                    &w->layers[l].w_gate, &w->layers[l].w_up, &w->layers[l].w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if ((e = be->upload_weight(be, ws[i], err))) return e;
    }
    return SMOL_OK;
}

/* ---- run state ------------------------------------------------------------------- */

static enum smol_err alloc_state(struct smol_model *m, int max_tokens, char *err)
{
    const struct smol_config *c = &m->cfg;
    struct smol_backend *be = m->be;
    struct smol_state *s = &m->s;
    size_t T = (size_t)max_tokens, wide = c->dim > c->q_dim ? c->dim : c->q_dim;
    s->max_tokens = max_tokens;
    s->x = be->alloc(be, T * c->dim * 4);
    s->xb = be->alloc(be, T * wide * 4);
    s->q = be->alloc(be, T * c->q_dim * 4);
    s->k = be->alloc(be, T * c->kv_dim * 4);
    s->v = be->alloc(be, T * c->kv_dim * 4);
    s->att = be->alloc(be, T * c->q_dim * 4);
    s->hb = be->alloc(be, T * c->ffn_dim * 4);
    s->hb2 = be->alloc(be, T * c->ffn_dim * 4);
    s->logit_rows = SMOL_LOGIT_ROWS;
    /* bucketed steps: the head of every row of a bucket in the step (up to SMOL_BUCKET_MAX rows) */
    if (!strncmp(be->name, "cuda", 4) && m->cuda.graphs == SMOL_CUDA_GRAPHS_BUCKET && be->step_sample && be->step_ids) {
        s->logit_rows = max_tokens < SMOL_BUCKET_MAX ? max_tokens : SMOL_BUCKET_MAX;
        if (s->logit_rows < SMOL_LOGIT_ROWS) s->logit_rows = SMOL_LOGIT_ROWS;
    }
    s->logits = be->alloc(be, (size_t)s->logit_rows * c->vocab * 4);
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 || !s->logits)
        return smol_errf(err, SMOL_ENOMEM, "model: cannot allocate activations for %d tokens", max_tokens);
    int widest = c->dim > c->q_dim ? c->dim : c->q_dim;
    if (c->ffn_dim > widest) widest = c->ffn_dim;
    return be->reserve(be, max_tokens, widest, c->n_ctx, err);
}

static void free_state(struct smol_model *m)
{
    struct smol_state *s = &m->s;
    float *bufs[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->be->free(m->be, bufs[i]);
    memset(s, 0, sizeof *s);
}

/* ---- open / close --------------------------------------------------------------------- */

static enum smol_err kv_pool(struct smol_model *m, size_t budget, uint32_t kv_type, size_t per_page, char *err)
{
    const struct smol_config *c = &m->cfg;
    size_t pages = budget ? budget / per_page : (size_t)smol_kv_pages_for(c->n_ctx);
    if (pages < 1)
        return smol_errf(err, SMOL_EINVAL, "kv budget %zu bytes is below one page (%zu bytes)", budget, per_page);
    if (pages > (1u << 30)) pages = 1u << 30;
    return smol_kv_init(&m->kv, m->be, c->n_layers, c->n_kv_heads, c->head_dim, kv_type, (int)pages, err);
}

/* The KV pool: set->kv_budget, or on CUDA set->kv_budget_gpu fitted to the device (halved while
 * the pool and SMOL_KV_GPU_SPARE bytes beside it, for the scratch a step allocates later, do not
 * fit; down to kv_budget). */
static enum smol_err kv_open(struct smol_model *m, const struct smol_model_settings *set, int gpu, uint32_t kv_type,
                             size_t per_page, char *err)
{
    if (!gpu || !set->kv_budget_gpu) return kv_pool(m, set->kv_budget, kv_type, per_page, err);
    const struct smol_config *c = &m->cfg;
    size_t got = 0;
    enum smol_err e = smol_kv_init_fit(&m->kv, m->be, c->n_layers, c->n_kv_heads, c->head_dim, kv_type,
                                       set->kv_budget_gpu, set->kv_budget, SMOL_KV_GPU_SPARE, &got, err);
    if (!e && got != set->kv_budget_gpu)
        fprintf(stderr, "<5>kv: %zu MiB fit on the device beside %zu MiB to spare (asked for %zu MiB)\n", got >> 20,
                SMOL_KV_GPU_SPARE >> 20, set->kv_budget_gpu >> 20);
    return e;
}

enum smol_err smol_model_open(struct smol_model **out, const char *path, const struct smol_model_settings *set_in,
                              char *err)
{
    struct smol_model_settings set;
    if (set_in) set = *set_in;
    else smol_model_settings_default(&set);
    if (set.max_tokens <= 0) set.max_tokens = 512;
    if (set.yarn_factor <= 0) set.yarn_factor = 2.0f;
    *out = NULL;
    if (set.n_threads < 0 || set.n_threads > 256)
        return smol_errf(err, SMOL_EINVAL, "threads must be in [1, 256] (0 = all CPUs)");
    if (set.n_ctx < 0) return smol_errf(err, SMOL_EINVAL, "context size must be positive");
    if (set.max_tokens > 65536) return smol_errf(err, SMOL_EINVAL, "batch size must be <= 65536");

    struct smol_model *m = calloc(1, sizeof *m);
    if (!m) return smol_errf(err, SMOL_ENOMEM, "model: out of memory");
    enum smol_err e = smol_gguf_open(&m->gguf, path, err);
    if (!e) e = read_config(&m->cfg, m->gguf, err);
    if (!e) e = load_weights(m, err);
    if (e) goto fail;

    struct smol_config *c = &m->cfg;
    int ctx = c->ctx_train;
    m->rope = (struct smol_rope_params){.n_dims = c->rope_dims, .freq_base = c->rope_base, .freq_scale = 1.0f,
                                        .ext_factor = 0.0f, .attn_factor = 1.0f};
    if (set.yarn) {
        /* YaRN (opt-in): positions beyond the trained context, RoPE layers only.
         * The attention factor 0.1 ln(s) + 1 scales cos/sin (rope_cache_ref). */
        m->rope.freq_scale = 1.0f / set.yarn_factor;
        m->rope.ext_factor = 1.0f;
        smol_rope_yarn_corr_dims(c->rope_dims, c->ctx_train, c->rope_base, 32.0f, 1.0f, m->rope.corr_dims);
        ctx = (int)(c->ctx_train * set.yarn_factor);
    }
    c->n_ctx = set.n_ctx && set.n_ctx < ctx ? set.n_ctx : ctx;

    const char *bk = set.backend && *set.backend ? set.backend : "cpu";
    if (strcmp(bk, "cpu") && strcmp(bk, "cuda") && strcmp(bk, "auto") && strcmp(bk, "cuda-emu")) {
        e = smol_errf(err, SMOL_EINVAL, "backend must be cpu, cuda, cuda-emu or auto (got '%s')", bk);
        goto fail;
    }
    m->cuda = set.cuda;
    if (strcmp(bk, "cpu")) {
        char why[SMOL_ERRLEN];
        /* the knobs in effect (the loader applies the environment the same way), kept to
         * report them; a bad SMOL_CUDA_* value is a configuration error, not a missing
         * device: it fails "auto" too */
        if ((e = smol_cuda_opts_from_env(&m->cuda, err))) goto fail;
        const int emu = !strcmp(bk, "cuda-emu");  /* the CUDA backend on the host emulator (tests/cuda_emu) */
        if ((e = emu ? smol_backend_cuda_emu_new(&m->be, &m->cuda, why)
                     : smol_backend_cuda_new(&m->be, set.cuda_device, &m->cuda, why))) {
            if (strcmp(bk, "auto")) {
                memcpy(err, why, SMOL_ERRLEN);
                goto fail;
            }
            /* even when quiet: operators need it; a machine without a GPU or its driver is the
             * common case, said plainly (CUDA's own words for it are "driver version is insufficient") */
            if (strstr(why, "no NVIDIA GPU/driver found")) fprintf(stderr, "<5>no NVIDIA GPU/driver found: using the CPU backend\n");
            else fprintf(stderr, "<5>%s; using the CPU backend\n", why);
            e = SMOL_OK;
        }
    }
    if (!m->be && (e = smol_backend_cpu_new(&m->be, set.n_threads, err))) goto fail;
    const int gpu = !strncmp(m->be->name, "cuda", 4);
    if (gpu && set.max_tokens_gpu > 0) set.max_tokens = set.max_tokens_gpu < 65536 ? set.max_tokens_gpu : 65536;
    if ((e = upload_all(m, err))) goto fail;
    drop_norm_pages(m);
    int max_tokens = set.max_tokens < c->n_ctx ? set.max_tokens : c->n_ctx;
    if ((e = alloc_state(m, max_tokens, err))) goto fail;

    uint32_t kv_type = set.kv_f32 ? SMOL_TYPE_F32 : SMOL_TYPE_F16;
    if (set.kv_type && (e = smol_kv_type_parse(set.kv_type, &kv_type, err))) goto fail;
    if (!smol_kv_row_bytes(c->head_dim, kv_type)) {
        e = smol_errf(err, SMOL_EINVAL, "kv type %s cannot hold head size %d (q8_0 needs a multiple of 32)",
                      smol_type_name(kv_type), c->head_dim);
        goto fail;
    }
    size_t per_page = smol_kv_bytes_per_token(c->n_layers, c->n_kv_heads, c->head_dim, kv_type) * SMOL_KV_PAGE;
    if ((e = kv_open(m, &set, gpu, kv_type, per_page, err))) goto fail;
    if (m->s.logit_rows > SMOL_LOGIT_ROWS) {  /* bucketed steps: the padding rows' sequence and arrays */
        const size_t R = (size_t)m->s.logit_rows;
        m->pad_tok = calloc(R, sizeof *m->pad_tok);
        m->pad_pos = calloc(R, sizeof *m->pad_pos);
        m->pad_idx = calloc(R, sizeof *m->pad_idx);
        m->pad_ids = calloc(R, sizeof *m->pad_ids);
        m->pad_seqs = calloc(R, sizeof *m->pad_seqs);
        m->pad_rs = calloc(R, sizeof *m->pad_rs);
        smol_kv_seq_init(&m->pad_seq);
        if (!m->pad_tok || !m->pad_pos || !m->pad_idx || !m->pad_ids || !m->pad_seqs || !m->pad_rs ||
            (e = smol_kv_seq_reserve(&m->kv, &m->pad_seq, 0, 1, err))) {
            if (!e) e = smol_errf(err, SMOL_ENOMEM, "model: out of memory");
            goto fail;
        }
        m->bucket = 1;
    }
    size_t pages = (size_t)m->kv.n_pages;
    if (m->be->layers) {  /* the fused layers' view of the model */
        m->layer_weights = calloc((size_t)c->n_layers, sizeof *m->layer_weights);
        if (!m->layer_weights) {
            e = smol_errf(err, SMOL_ENOMEM, "model: out of memory");
            goto fail;
        }
        for (int l = 0; l < c->n_layers; l++) {
            const struct smol_layer *L = &m->w.layers[l];
            m->layer_weights[l] = (struct smol_layer_weights){&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_norm,
                                                              &L->w_gate, &L->w_up, &L->w_down, smol_layer_has_rope(c, l)};
        }
        m->layer_args = (struct smol_layers_args){c->n_layers, c->dim, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn_dim,
                                                  c->norm_eps, 1.0f / sqrtf((float)c->head_dim), &m->rope,
                                                  m->layer_weights, &m->w.output_norm, &m->kv};
    }
    if (!set.quiet) {
        char knobs[160] = "", desc[128];
        if (!strncmp(m->be->name, "cuda", 4)) {
            smol_cuda_opts_describe(&m->cuda, desc, sizeof desc);
            snprintf(knobs, sizeof knobs, " (%s)", desc);
        }
        fprintf(stderr, "<6>model: %s, %d layers, dim %d, heads %d/%d x %d, ffn %d, vocab %d, ctx %d%s; "
                "backend %s x%d%s; kv %s %d pages (%.1f MiB)\n", c->arch_name, c->n_layers, c->dim, c->n_heads,
                c->n_kv_heads, c->head_dim, c->ffn_dim, c->vocab, c->n_ctx, set.yarn ? " (YaRN)" : "",
                m->be->name, m->be->n_threads, knobs, smol_type_name(kv_type), (int)pages,
                pages * per_page / 1048576.0);
    }
    *out = m;
    return SMOL_OK;
fail:
    smol_model_close(&m);
    return e;
}

void smol_model_close(struct smol_model **mp)
{
    if (!mp || !*mp) return;
    struct smol_model *m = *mp;
    if (m->be) {
        if (m->kv.n_pages) {
            smol_kv_seq_deinit(&m->kv, &m->pad_seq);
            smol_kv_deinit(&m->kv);
        }
        free_state(m);
        smol_backend_free(&m->be);
    }
    free(m->w.layers);
    free(m->layer_weights);
    free(m->pad_tok);
    free(m->pad_pos);
    free(m->pad_idx);
    free(m->pad_ids);
    free(m->pad_seqs);
    free(m->pad_rs);
    free(m->w.owned);
    free(m->trace_buf);
    smol_gguf_close(&m->gguf);
    free(m);
    *mp = NULL;
}

/* ---- forward ------------------------------------------------------------------------------ */

static void trace(struct smol_model *m, const char *stage, int layer, const float *x, int n, int width)
{
    if (!m->trace) return;
    char name[64];
    if (layer >= 0) snprintf(name, sizeof name, "%s-%d", stage, layer);
    else snprintf(name, sizeof name, "%s", stage);
    if (!m->trace_buf) m->trace_buf = malloc((size_t)m->s.max_tokens * m->cfg.ffn_dim * 4 + (size_t)m->s.max_tokens * m->cfg.q_dim * 4);
    m->be->to_host(m->be, m->trace_buf, x, (size_t)n * width * 4);
    m->trace(m->trace_ctx, name, m->trace_buf, n, width);
}

static enum smol_err check_batch(const struct smol_model *m, const struct smol_batch *b, char *err)
{
    const struct smol_config *c = &m->cfg;
    if (b->n_tokens < 1 || b->n_tokens > m->s.max_tokens)
        return smol_errf(err, SMOL_EINVAL, "forward: %d tokens in a step (1..%d)", b->n_tokens, m->s.max_tokens);
    if (b->n_out < 0 || b->n_out > b->n_tokens) return smol_errf(err, SMOL_EINVAL, "forward: bad n_out");
    for (int i = 0; i < b->n_out; i++)
        if (b->out_idx[i] < 0 || b->out_idx[i] >= b->n_tokens || (i && b->out_idx[i] <= b->out_idx[i - 1]))
            return smol_errf(err, SMOL_EINVAL, "forward: out_idx must be ascending batch indices");
    for (int t = 0; t < b->n_tokens; t++) {
        const struct smol_kv_seq *s = b->seq[t];
        int pos = b->pos[t];
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return smol_errf(err, SMOL_EINVAL, "token id %d is out of range (vocabulary has %d tokens)", b->tokens[t],
                             c->vocab);
        if (pos < 0 || pos >= c->n_ctx)
            return smol_errf(err, SMOL_ECONTEXT, "position %d is beyond the context of %d tokens", pos, c->n_ctx);
        int before = 0;
        for (int u = 0; u < t; u++) before += b->seq[u] == s;
        if (pos != s->n_tokens + before)
            return smol_errf(err, SMOL_EINVAL, "forward: position %d does not continue its sequence (%d + %d)", pos,
                             s->n_tokens, before);
        if (pos / SMOL_KV_PAGE >= s->n_pages || m->kv.refcount[s->pages[pos / SMOL_KV_PAGE]] != 1)
            return smol_errf(err, SMOL_EINTERNAL, "forward: position %d of its sequence is not reserved", pos);
    }
    return SMOL_OK;
}

/* weights that read the same input, in one backend call where it has one */
static void matmuls(struct smol_backend *be, float *const *outs, const struct smol_weight *const *ws, int n_w,
                    const float *x, int n)
{
    if (be->matmul_n) {
        be->matmul_n(be, outs, ws, n_w, x, n);
        return;
    }
    for (int i = 0; i < n_w; i++) be->matmul(be, outs[i], ws[i], x, n);
}

/* One layer.  Where the backend has a fused step it is used, except while tracing (the traced
 * stages are the unfused ops' buffers) and for the q8_0 cache's rotations. */
static void layer(struct smol_model *m, const struct smol_batch *b, int l)
{
    const struct smol_config *c = &m->cfg;
    const struct smol_layer *L = &m->w.layers[l];
    struct smol_state *s = &m->s;
    struct smol_backend *be = m->be;
    const int n = b->n_tokens, fuse = !m->trace;
    const float scale = 1.0f / sqrtf((float)c->head_dim);

    if (!(fuse && be->norm_qkv &&
          be->norm_qkv(be, s->q, s->k, s->v, s->x, &L->attn_norm, &L->wq, &L->wk, &L->wv, n, c->dim, c->norm_eps))) {
        be->rmsnorm(be, s->xb, s->x, &L->attn_norm, n, c->dim, c->norm_eps);
        trace(m, "attn_norm", l, s->xb, n, c->dim);
        matmuls(be, (float *const[]){s->q, s->k, s->v}, (const struct smol_weight *const[]){&L->wq, &L->wk, &L->wv},
                3, s->xb, n);
    }
    const int rope = smol_layer_has_rope(c, l);
    if (!(fuse && !m->kv.rot_k && be->rope_store &&
          be->rope_store(be, s->q, s->k, s->v, rope ? &m->rope : NULL, &m->kv, l, b, c->n_heads))) {
        if (rope) {
            be->rope(be, s->q, b->pos, n, c->n_heads, c->head_dim, &m->rope);
            be->rope(be, s->k, b->pos, n, c->n_kv_heads, c->head_dim, &m->rope);
        }
        trace(m, "Qcur", l, s->q, n, c->q_dim);
        trace(m, "Kcur", l, s->k, n, c->kv_dim);
        trace(m, "Vcur", l, s->v, n, c->kv_dim);
        if (m->kv.rot_k) { /* a q8_0 cache holds rotated K and V (kv.h) */
            be->hadamard(be, s->q, n * c->q_dim, m->kv.rot_k);
            be->hadamard(be, s->k, n * c->kv_dim, m->kv.rot_k);
            be->hadamard(be, s->v, n * c->kv_dim, m->kv.rot_v);
        }
        be->kv_store(be, &m->kv, l, s->k, s->v, b);
    }
    be->attention(be, s->att, s->q, &m->kv, l, b, c->n_heads, scale);
    trace(m, "kqv_out", l, s->att, n, c->q_dim);
    if (m->kv.rot_v) be->hadamard(be, s->att, n * c->q_dim, m->kv.rot_v);
    if (!(fuse && be->matmul_add && be->matmul_add(be, s->x, &L->wo, s->att, n))) {
        be->matmul(be, s->xb, &L->wo, s->att, n);
        trace(m, "attn_out", l, s->xb, n, c->dim);
        be->add(be, s->x, s->xb, n * c->dim);
    }
    trace(m, "ffn_inp", l, s->x, n, c->dim);
    if (!(fuse && be->ffn &&
          be->ffn(be, s->x, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down, s->hb, n, c->dim, c->norm_eps))) {
        be->rmsnorm(be, s->xb, s->x, &L->ffn_norm, n, c->dim, c->norm_eps);
        trace(m, "ffn_norm", l, s->xb, n, c->dim);
        matmuls(be, (float *const[]){s->hb, s->hb2}, (const struct smol_weight *const[]){&L->w_gate, &L->w_up}, 2,
                s->xb, n);
        be->silu_mul(be, s->hb, s->hb2, n * c->ffn_dim);
        be->matmul(be, s->xb, &L->w_down, s->hb, n);
        trace(m, "ffn_out", l, s->xb, n, c->dim);
        be->add(be, s->x, s->xb, n * c->dim);
    }
    trace(m, "l_out", l, s->x, n, c->dim);
}

/* The device work of a step up to the first SMOL_LOGIT_ROWS rows of logits in s->logits. */
static void step_ops(struct smol_model *m, const struct smol_batch *b)
{
    const struct smol_config *c = &m->cfg;
    const struct smol_weights *w = &m->w;
    struct smol_state *s = &m->s;
    struct smol_backend *be = m->be;
    const int n = b->n_tokens;
    be->get_rows(be, s->x, &w->tok_embd, b->tokens, n);
    trace(m, "inp_embd", -1, s->x, n, c->dim);
    if (!m->trace && be->layers && m->layer_args.layers && be->layers(be, &m->layer_args, b, s->x, s->xb)) {
        if (b->n_out == 0) return;
    } else {
        for (int l = 0; l < c->n_layers; l++) layer(m, b, l);
        if (b->n_out == 0) return;
        be->gather_rows(be, s->xb, s->x, b->out_idx, b->n_out, c->dim);
        be->rmsnorm(be, s->xb, s->xb, &w->output_norm, b->n_out, c->dim, c->norm_eps);
    }
    trace(m, "result_norm", -1, s->xb, b->n_out, c->dim);
    be->matmul(be, s->logits, &w->output, s->xb, b->n_out < s->logit_rows ? b->n_out : s->logit_rows);
}

enum smol_err smol_model_forward(struct smol_model *m, const struct smol_batch *b, float *logits, char *err)
{
    return smol_model_forward_sample(m, b, logits, NULL, NULL, err);
}

/* Rows [r0, r0 + n) of the head's chunk at dev (n <= SMOL_LOGIT_ROWS): the sampled ones' tokens to
 * ids, the others' logits to the host. */
static enum smol_err chunk_out(struct smol_model *m, const float *dev, int r0, int n, float *logits,
                               const struct smol_row_sample *rs, int32_t *ids, char *err)
{
    const int V = m->cfg.vocab;
    struct smol_backend *be = m->be;
    const int on_cuda = !strncmp(be->name, "cuda", 4);
    for (int a = 0, z; a < n; a = z) {
        const int on = rs && rs[r0 + a].on;
        for (z = a + 1; z < n && (rs && rs[r0 + z].on) == on; z++) {}
        if (!on) {
            be->to_host(be, logits + (size_t)(r0 + a) * V, dev + (size_t)a * V, (size_t)(z - a) * V * 4);
        } else if (on_cuda) {
            float temp[SMOL_BUCKET_MAX], top_p[SMOL_BUCKET_MAX], u[SMOL_BUCKET_MAX];
            for (int r = a; r < z; r++) temp[r - a] = rs[r0 + r].temp, top_p[r - a] = rs[r0 + r].top_p, u[r - a] = rs[r0 + r].u;
            enum smol_err e = smol_backend_cuda_sample(be, dev + (size_t)a * V, z - a, V, temp, top_p, u, ids + r0 + a, err);
            if (e) return e;
        } else {                /* the CPU backend's logits are host memory */
            for (int r = a; r < z; r++) {
                const struct smol_row_sample *x = &rs[r0 + r];
                ids[r0 + r] = smol_sample_row_ref(dev + (size_t)r * V, V, x->temp, x->top_p, x->u, NULL);
            }
        }
    }
    for (int r = 0; rs && r < n; r++)
        if (rs[r0 + r].on && (ids[r0 + r] < 0 || ids[r0 + r] >= V))
            return smol_errf(err, SMOL_EINVAL, "sampling: no samplable logit in row %d", r0 + r);
    return SMOL_OK;
}

/* The bucket a step is padded to (bucketed steps on): a decode step, every row its own sequence's
 * next token and every row out, at most logit_rows rows -> the power of two >= its rows; else 0. */
static int bucket_of(const struct smol_model *m, const struct smol_batch *b)
{
    if (!m->bucket || m->trace || b->n_out != b->n_tokens || b->n_tokens > m->s.logit_rows) return 0;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->out_idx[t] != t || b->pos[t] != b->seq[t]->n_tokens) return 0;
    int B = 1;
    while (B < b->n_tokens) B *= 2;
    return B <= m->s.logit_rows && B <= m->s.max_tokens ? B : 0;
}

/* A decode step padded to B rows (its rows first, then token 0 at position 0 of pad_seq, whose
 * K/V land in its one page and whose logits are dropped): the backend records it once per B
 * with the head of every row and the device sampling inside, so a replay is one upload, one
 * launch and one download.  Rows with rs[r].on get their token in ids[r]; the others' logits
 * come to logits[r] (rs NULL: every row's). */
static enum smol_err bucket_step(struct smol_model *m, const struct smol_batch *b, int B, float *logits,
                                 const struct smol_row_sample *rs, int32_t *ids, char *err)
{
    struct smol_backend *be = m->be;
    struct smol_state *s = &m->s;
    const int n = b->n_tokens, V = m->cfg.vocab;
    for (int t = 0; t < B; t++) {
        const int real = t < n;
        m->pad_tok[t] = real ? b->tokens[t] : 0;
        m->pad_pos[t] = real ? b->pos[t] : 0;
        m->pad_seqs[t] = real ? b->seq[t] : &m->pad_seq;
        m->pad_idx[t] = t;
        m->pad_rs[t] = real && rs ? rs[t] : (struct smol_row_sample){0, 0.0f, 1.0f, 0.0f};
    }
    const struct smol_batch pb = {.n_tokens = B, .tokens = m->pad_tok, .pos = m->pad_pos, .seq = m->pad_seqs,
                                  .n_out = B, .out_idx = m->pad_idx, .rs = m->pad_rs, .bucket = 1};
    const int st = be->step_begin(be, &pb);
    if (st != SMOL_STEP_REPLAYED) {
        step_ops(m, &pb);
        be->step_sample(be, s->logits, B, V);
    }
    if (st == SMOL_STEP_CAPTURE && be->step_end(be)) {
        step_ops(m, &pb);
        be->step_sample(be, s->logits, B, V);
    }
    for (int t = 0; t < n; t++)
        if (b->pos[t] + 1 > b->seq[t]->n_tokens) b->seq[t]->n_tokens = b->pos[t] + 1;
    enum smol_err e = be->step_ids(be, m->pad_ids, B, err);
    if (e) return e;
    for (int a = 0, z; a < n; a = z) {  /* the rows not sampled: their logits, a run at a time */
        const int on = rs && rs[a].on;
        for (z = a + 1; z < n && (rs && rs[z].on) == on; z++) {}
        if (on)
            for (int r = a; r < z; r++) ids[r] = m->pad_ids[r];
        else if (logits)
            be->to_host(be, logits + (size_t)a * V, s->logits + (size_t)a * V, (size_t)(z - a) * V * 4);
    }
    for (int r = 0; rs && r < n; r++)
        if (rs[r].on && (ids[r] < 0 || ids[r] >= V))
            return smol_errf(err, SMOL_EINVAL, "sampling: no samplable logit in row %d", r);
    return SMOL_OK;
}

enum smol_err smol_model_forward_sample(struct smol_model *m, const struct smol_batch *b, float *logits,
                                        const struct smol_row_sample *rs, int32_t *ids, char *err)
{
    enum smol_err e = check_batch(m, b, err);
    if (e) return e;
    const struct smol_config *c = &m->cfg;
    struct smol_state *s = &m->s;
    struct smol_backend *be = m->be;

    const int B = bucket_of(m, b);
    if (B) return bucket_step(m, b, B, logits, rs, ids, err);
    /* a backend that records steps (CUDA graphs) may replay this one */
    const int st = be->step_begin && !m->trace ? be->step_begin(be, b) : SMOL_STEP_RUN;
    if (st != SMOL_STEP_REPLAYED) step_ops(m, b);
    if (st == SMOL_STEP_CAPTURE && be->step_end(be)) step_ops(m, b);
    /* the advance is committed before the head's rows are read: K/V of every token are stored */
    for (int t = 0; t < b->n_tokens; t++)
        if (b->pos[t] + 1 > b->seq[t]->n_tokens) b->seq[t]->n_tokens = b->pos[t] + 1;

    for (int r = 0; r < b->n_out; r += s->logit_rows) {
        int rows = b->n_out - r < s->logit_rows ? b->n_out - r : s->logit_rows;
        if (r) be->matmul(be, s->logits, &m->w.output, s->xb + (size_t)r * c->dim, rows);
        if ((e = chunk_out(m, s->logits, r, rows, logits, rs, ids, err))) return e;
    }
    return SMOL_OK;
}

enum smol_err smol_model_eval(struct smol_model *m, struct smol_kv_seq *seq, const int32_t *ids, int n, int all,
                              float *logits, char *err)
{
    const int T = m->s.max_tokens;
    if (n < 1) return smol_errf(err, SMOL_EINVAL, "eval: no tokens");
    if ((int64_t)seq->n_tokens + n > m->cfg.n_ctx)
        return smol_errf(err, SMOL_ECONTEXT, "%d tokens do not fit the context of %d (%d already used)", n,
                         m->cfg.n_ctx, seq->n_tokens);
    int32_t *pos = malloc((size_t)T * sizeof *pos), *idx = malloc((size_t)T * sizeof *idx);
    struct smol_kv_seq **seqs = malloc((size_t)T * sizeof *seqs);
    enum smol_err e = SMOL_OK;
    if (!pos || !idx || !seqs) {
        e = smol_errf(err, SMOL_ENOMEM, "eval: out of memory");
        goto out;
    }
    for (int done = 0; done < n && !e; ) {
        int k = n - done < T ? n - done : T;
        int start = seq->n_tokens;
        if ((e = smol_kv_seq_reserve(&m->kv, seq, start, start + k, err))) break;
        int n_out = 0;
        for (int i = 0; i < k; i++) {
            pos[i] = start + i;
            seqs[i] = seq;
            if (all || done + i == n - 1) idx[n_out++] = i;
        }
        struct smol_batch b = {.n_tokens = k, .tokens = ids + done, .pos = pos, .seq = seqs, .n_out = logits ? n_out : 0,
                               .out_idx = idx};
        float *dst = !logits ? NULL : all ? logits + (size_t)done * m->cfg.vocab : logits;
        e = smol_model_forward(m, &b, dst, err);
        done += k;
    }
out:
    free(pos);
    free(idx);
    free(seqs);
    return e;
}
