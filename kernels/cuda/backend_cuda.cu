/*
 * backend_cuda.cu - struct smol_backend on one CUDA device: the plugin that
 * daemon/model/backend_cuda_loader.c dlopens (entry symbol smol_cuda_plugin_v1).
 *
 * Memory: weights are uploaded once in their GGUF block format
 * (upload_weight sets w->dev) and freed with the backend; activations and
 * the KV pool come from alloc (cudaMalloc, zeroed; no managed memory).  All
 * work goes to one stream in order; to_host is the only synchronisation of
 * a step.
 *
 * Host descriptors: ops get token ids, positions, gather indices and the
 * batch's page tables in host memory.  Each kind has an upload slot that
 * keeps a host shadow of what is on the device and copies only when the
 * content changed, so the 36 layers of a step share one upload of the
 * page tables and positions.  Copies are cudaMemcpyAsync from the pageable
 * shadow, which the runtime stages before returning, so the shadow may be
 * rewritten at once.  (A graph-captured decode step would need pinned,
 * double-buffered slots instead: prepared in NOTES.md, not enabled here,
 * because it cannot be tested without a device.)
 *
 * Errors: ops cannot return one (backend.h), so the first CUDA error is
 * kept, logged once, and to_host then fills its output with NaN rather than
 * hand back plausible numbers.  This file calls nothing from libsmollm3: a
 * dlopened plugin cannot see the executable's symbols.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "common.cuh"
#include "ops_cuda.cuh"
extern "C" {
#include "daemon/model/backend.h"
#include "daemon/model/backend_cuda_loader.h"
}

static_assert(SMOL_KV_PAGE == SMOL_KV_PAGE_CUDA, "kv page size");

enum { SLOT_IDS, SLOT_POS, SLOT_IDX, SLOT_KV, SLOT_SAMPLE, SLOT_COUNT };

struct slot {
    int32_t *host;      /* shadow of dev */
    int32_t *dev;
    size_t len, cap;    /* int32 elements */
};

struct cuda {
    int device;
    cudaStream_t st;
    int n_sm;
    cudaError_t failed;         /* first error, sticky */
    struct slot slot[SLOT_COUNT];
    int32_t *kv_build;          /* host: descriptor being built (tok pairs + pages) */
    size_t kv_build_cap;
    float *part;                /* attention split partials */
    size_t part_cap;            /* floats */
    int32_t *sample_out;        /* device [max_tokens] */
    void **weights;             /* uploaded weight copies, freed on destroy */
    int n_weights, cap_weights;
    int max_tokens, max_cols, max_ctx;
};

static struct cuda *C(struct smol_backend *be) { return (struct cuda *)be->impl; }

static enum smol_err errf(char *err, enum smol_err code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, SMOL_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Keeps the first failure and logs it once; returns 1 if e is an error. */
static int ck(struct cuda *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    if (c->failed == cudaSuccess) {
        c->failed = e;
        fprintf(stderr, "<3>cuda: %s: %s (backend disabled: results are NaN from now on)\n", what,
                cudaGetErrorString(e));
    }
    return 1;
}

/* ---- upload slots ------------------------------------------------------------------ */

static int slot_grow(struct cuda *c, struct slot *s, size_t need)
{
    if (need <= s->cap) return 1;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) cap *= 2;
    int32_t *h = (int32_t *)realloc(s->host, cap * sizeof *h);
    if (!h) return 0;
    s->host = h;
    if (s->dev) ck(c, cudaFreeAsync(s->dev, c->st), "free slot");  /* ordered after its last reader */
    s->dev = NULL;
    if (ck(c, cudaMalloc((void **)&s->dev, cap * sizeof(int32_t)), "alloc slot")) return 0;
    s->cap = cap;
    s->len = (size_t)-1;  /* device content unknown now */
    return 1;
}

/* Device copy of data[0..n), copied only if it differs from what the slot holds. */
static const int32_t *slot_put(struct cuda *c, int k, const int32_t *data, size_t n)
{
    struct slot *s = &c->slot[k];
    if (s->len == n && s->host && !memcmp(s->host, data, n * sizeof *data)) return s->dev;
    if (!slot_grow(c, s, n ? n : 1)) return NULL;
    memcpy(s->host, data, n * sizeof *data);
    s->len = n;
    ck(c, cudaMemcpyAsync(s->dev, s->host, n * sizeof *data, cudaMemcpyHostToDevice, c->st), "upload");
    return s->dev;
}

/* The batch's KV descriptor: tok[2t] = pos + 1, tok[2t+1] = page-table offset; then the page
 * tables, one per run of consecutive tokens of the same sequence.  Returns the max pages of a token. */
static const int32_t *kv_desc(struct cuda *c, const struct smol_batch *b, int *max_pages)
{
    const int n = b->n_tokens;
    size_t need = 2 * (size_t)n;
    for (int t = 0; t < n; t++)
        if (t == 0 || b->seq[t] != b->seq[t - 1]) need += b->seq[t]->n_pages;
    if (need > c->kv_build_cap) {
        int32_t *p = (int32_t *)realloc(c->kv_build, need * sizeof *p);
        if (!p) return NULL;
        c->kv_build = p;
        c->kv_build_cap = need;
    }
    int32_t *d = c->kv_build;
    size_t off = 2 * (size_t)n, cur = 0;
    *max_pages = 0;
    for (int t = 0; t < n; t++) {
        const struct smol_kv_seq *s = b->seq[t];
        if (t == 0 || s != b->seq[t - 1]) {
            cur = off;
            memcpy(d + off, s->pages, (size_t)s->n_pages * sizeof *d);
            off += s->n_pages;
        }
        d[2 * t] = b->pos[t] + 1;
        d[2 * t + 1] = (int32_t)cur;
        const int np = (b->pos[t] + SMOL_KV_PAGE) / SMOL_KV_PAGE;
        if (np > *max_pages) *max_pages = np;
    }
    return slot_put(c, SLOT_KV, d, off);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void *cu_alloc(struct smol_backend *be, size_t n)
{
    struct cuda *c = C(be);
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 256) != cudaSuccess) {
        cudaGetLastError();  /* an allocation failure is reported by NULL, not made sticky */
        return NULL;
    }
    if (ck(c, cudaMemsetAsync(p, 0, n ? n : 256, c->st), "memset")) return p;
    ck(c, cudaStreamSynchronize(c->st), "alloc");
    return p;
}

static void cu_free(struct smol_backend *be, void *p)
{
    if (!p) return;
    struct cuda *c = C(be);
    ck(c, cudaStreamSynchronize(c->st), "sync before free");
    ck(c, cudaFree(p), "free");
}

static void cu_to_host(struct smol_backend *be, void *dst, const void *src, size_t n)
{
    struct cuda *c = C(be);
    ck(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->st), "copy to host");
    ck(c, cudaStreamSynchronize(c->st), "step");
    if (c->failed != cudaSuccess) {
        float nan = NAN;
        for (size_t i = 0; i + 4 <= n; i += 4) memcpy((char *)dst + i, &nan, 4);
    }
}

static enum smol_err cu_upload(struct smol_backend *be, struct smol_weight *w, char *err)
{
    struct cuda *c = C(be);
    if (!smol_cuda_type_ok(w->type))
        return errf(err, SMOL_EUNSUPPORTED, "cuda: tensor '%s' has type %u, which has no CUDA kernel",
                    w->name ? w->name : "?", w->type);
    if (c->n_weights == c->cap_weights) {
        int cap = c->cap_weights ? 2 * c->cap_weights : 512;
        void **p = (void **)realloc(c->weights, (size_t)cap * sizeof *p);
        if (!p) return errf(err, SMOL_ENOMEM, "cuda: out of memory");
        c->weights = p;
        c->cap_weights = cap;
    }
    const size_t bytes = (size_t)(w->rows > 0 ? w->rows : 1) * w->row_bytes;
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(d, w->data, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        if (d) cudaFree(d);
        cudaGetLastError();
        return errf(err, e == cudaErrorMemoryAllocation ? SMOL_ENOMEM : SMOL_EIO,
                    "cuda: cannot upload tensor '%s' (%zu bytes): %s", w->name ? w->name : "?", bytes,
                    cudaGetErrorString(e));
    }
    c->weights[c->n_weights++] = d;
    w->dev = d;
    return SMOL_OK;
}

static enum smol_err cu_reserve(struct smol_backend *be, int max_tokens, int max_cols, int max_ctx, char *err)
{
    struct cuda *c = C(be);
    if (max_tokens <= c->max_tokens && max_cols <= c->max_cols && max_ctx <= c->max_ctx) return SMOL_OK;
    if (max_tokens < c->max_tokens) max_tokens = c->max_tokens;
    if (max_cols < c->max_cols) max_cols = c->max_cols;
    if (max_ctx < c->max_ctx) max_ctx = c->max_ctx;
    /* attention partials: up to max(max_tokens, 4 * n_sm) (token, split) pairs of every head's
     * head_dim + 2 floats; q_dim <= max_cols and heads <= q_dim / 2 */
    const size_t pairs = (size_t)(max_tokens > 4 * c->n_sm ? max_tokens : 4 * c->n_sm);
    const size_t part_cap = pairs * ((size_t)max_cols + (size_t)max_cols);
    cu_free(be, c->part);
    cu_free(be, c->sample_out);
    c->part = (float *)cu_alloc(be, part_cap * sizeof(float));
    c->sample_out = (int32_t *)cu_alloc(be, (size_t)max_tokens * sizeof(int32_t));
    if (!c->part || !c->sample_out) return errf(err, SMOL_ENOMEM, "cuda: cannot allocate scratch (%zu MiB)",
                                                part_cap * 4 >> 20);
    c->part_cap = part_cap;
    /* slots sized for a full step so the decode loop never grows them */
    const size_t pages = (size_t)(max_ctx + SMOL_KV_PAGE - 1) / SMOL_KV_PAGE;
    if (!slot_grow(c, &c->slot[SLOT_IDS], max_tokens) || !slot_grow(c, &c->slot[SLOT_POS], max_tokens) ||
        !slot_grow(c, &c->slot[SLOT_IDX], max_tokens) || !slot_grow(c, &c->slot[SLOT_SAMPLE], 3 * (size_t)max_tokens) ||
        !slot_grow(c, &c->slot[SLOT_KV], 2 * (size_t)max_tokens + pages * (max_tokens < 64 ? max_tokens : 64)))
        return errf(err, SMOL_ENOMEM, "cuda: cannot allocate descriptor slots");
    c->max_tokens = max_tokens;
    c->max_cols = max_cols;
    c->max_ctx = max_ctx;
    return SMOL_OK;
}

/* ---- ops ------------------------------------------------------------------------------------ */

static void cu_get_rows(struct smol_backend *be, float *out, const struct smol_weight *w, const int32_t *ids, int n)
{
    struct cuda *c = C(be);
    const int32_t *d = slot_put(c, SLOT_IDS, ids, n);
    if (d) ck(c, smol_get_rows_cuda(out, w->type, w->dev, w->row_bytes, w->cols, d, n, c->st), "get_rows");
}

static void cu_rmsnorm(struct smol_backend *be, float *out, const float *x, const struct smol_weight *w, int n,
                       int dim, float eps)
{
    struct cuda *c = C(be);
    ck(c, smol_rmsnorm_cuda(out, x, (const float *)w->dev, dim, eps, n, c->st), "rmsnorm");
}

static void cu_matmul(struct smol_backend *be, float *out, const struct smol_weight *w, const float *x, int n)
{
    struct cuda *c = C(be);
    ck(c, smol_matmul_cuda(out, w->type, w->dev, w->row_bytes, w->rows, w->cols, x, n, c->st), "matmul");
}

static void cu_rope(struct smol_backend *be, float *x, const int32_t *pos, int n, int n_heads, int head_dim,
                    const struct smol_rope_params *rp)
{
    struct cuda *c = C(be);
    const int32_t *d = slot_put(c, SLOT_POS, pos, n);
    if (d) ck(c, smol_rope_cuda(x, d, n, n_heads, head_dim, rp, c->st), "rope");
}

static void cu_kv_store(struct smol_backend *be, struct smol_kv *kv, int layer, const float *k, const float *v,
                        const struct smol_batch *b)
{
    struct cuda *c = C(be);
    int max_pages;
    const int32_t *d = kv_desc(c, b, &max_pages);
    if (!d) return (void)ck(c, cudaErrorMemoryAllocation, "kv descriptor");
    ck(c, smol_kv_store_cuda((char *)kv->k + layer * kv->layer_bytes, (char *)kv->v + layer * kv->layer_bytes, k, v,
                             b->n_tokens, d, d, kv->n_kv_heads, kv->head_dim, (int)kv->type, c->st),
       "kv_store");
}

static void cu_attention(struct smol_backend *be, float *out, const float *q, const struct smol_kv *kv, int layer,
                         const struct smol_batch *b, int n_heads, float scale)
{
    struct cuda *c = C(be);
    int max_pages;
    const int32_t *d = kv_desc(c, b, &max_pages);
    if (!d) return (void)ck(c, cudaErrorMemoryAllocation, "kv descriptor");
    /* splits so that tokens x kv heads x splits fills the GPU twice, within the partials buffer */
    const int n = b->n_tokens, blocks = n * kv->n_kv_heads;
    int n_split = (2 * c->n_sm + blocks - 1) / blocks;
    if (n_split > max_pages) n_split = max_pages;
    const size_t per = (size_t)n * n_heads * (kv->head_dim + 2);
    while (n_split > 1 && per * n_split > c->part_cap) n_split--;
    if (n_split < 1) n_split = 1;
    const int pps = (max_pages + n_split - 1) / n_split;
    n_split = (max_pages + pps - 1) / pps;
    /* page table entries are at d + tok[2t+1]: the tables follow the 2n token pairs in the slot */
    ck(c, smol_attention_cuda(out, q, (const char *)kv->k + layer * kv->layer_bytes,
                              (const char *)kv->v + layer * kv->layer_bytes, n, d, d, n_heads, kv->n_kv_heads,
                              kv->head_dim, (int)kv->type, scale, n_split, pps, c->part, c->st),
       "attention");
}

static void cu_hadamard(struct smol_backend *be, float *x, int n, int group)
{
    ck(C(be), smol_hadamard_cuda(x, n, group, C(be)->st), "hadamard");
}

static void cu_silu_mul(struct smol_backend *be, float *gate, const float *up, int n)
{
    ck(C(be), smol_silu_mul_cuda(gate, up, n, C(be)->st), "silu_mul");
}

static void cu_add(struct smol_backend *be, float *x, const float *y, int n)
{
    ck(C(be), smol_add_cuda(x, y, n, C(be)->st), "add");
}

static void cu_gather_rows(struct smol_backend *be, float *out, const float *x, const int32_t *idx, int n, int dim)
{
    struct cuda *c = C(be);
    const size_t row = (size_t)dim * sizeof(float);
    const int overlap = n > 0 && out < x + (size_t)dim * (idx[n - 1] + 1) && x < out + (size_t)dim * n;
    if (overlap) {  /* in place: ascending idx[i] >= i, so row by row in order never reads a written row */
        for (int i = 0; i < n; i++)
            if (idx[i] != i || out != x)
                ck(c, cudaMemcpyAsync(out + (size_t)i * dim, x + (size_t)idx[i] * dim, row, cudaMemcpyDeviceToDevice,
                                      c->st), "gather_rows");
        return;
    }
    const int32_t *d = slot_put(c, SLOT_IDX, idx, n);
    if (d) ck(c, smol_gather_rows_cuda(out, x, d, n, dim, c->st), "gather_rows");
}

static void cu_from_host(struct smol_backend *be, void *dst, const void *src, size_t n)
{
    struct cuda *c = C(be);
    ck(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->st), "copy from host");
    ck(c, cudaStreamSynchronize(c->st), "copy from host");
}

static void cu_kv_copy_page(struct smol_backend *be, struct smol_kv *kv, int dst, int src)
{
    struct cuda *c = C(be);
    /* one 2D copy per cache: n_layers rows of page_bytes, layer_bytes apart */
    for (int kvi = 0; kvi < 2; kvi++) {
        char *base = (char *)(kvi ? kv->v : kv->k);
        ck(c, cudaMemcpy2DAsync(base + (size_t)dst * kv->page_bytes, kv->layer_bytes, base + (size_t)src * kv->page_bytes,
                                kv->layer_bytes, kv->page_bytes, kv->n_layers, cudaMemcpyDeviceToDevice, c->st),
           "kv_copy_page");
    }
}

static enum smol_err cu_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab, const float *temp,
                               const float *top_p, const float *u, int32_t *out, char *err)
{
    struct cuda *c = C(be);
    if (n_rows < 1 || n_rows > c->max_tokens) return errf(err, SMOL_EINVAL, "cuda: sample %d rows", n_rows);
    int32_t *par = (int32_t *)malloc(3 * (size_t)n_rows * sizeof *par);
    if (!par) return errf(err, SMOL_ENOMEM, "cuda: out of memory");
    memcpy(par, temp, (size_t)n_rows * 4);
    memcpy(par + n_rows, top_p, (size_t)n_rows * 4);
    memcpy(par + 2 * n_rows, u, (size_t)n_rows * 4);
    const int32_t *d = slot_put(c, SLOT_SAMPLE, par, 3 * (size_t)n_rows);
    free(par);
    if (!d) return errf(err, SMOL_ENOMEM, "cuda: out of memory");
    const float *df = (const float *)d;
    ck(c, smol_sample_top_p_cuda(logits, vocab, n_rows, df, df + n_rows, df + 2 * n_rows, c->sample_out, c->st),
       "sample");
    ck(c, cudaMemcpyAsync(out, c->sample_out, (size_t)n_rows * sizeof *out, cudaMemcpyDeviceToHost, c->st), "sample");
    ck(c, cudaStreamSynchronize(c->st), "sample");
    if (c->failed != cudaSuccess)
        return errf(err, SMOL_EINTERNAL, "cuda: %s", cudaGetErrorString(c->failed));
    return SMOL_OK;
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */

static void cu_destroy(struct smol_backend *be)
{
    struct cuda *c = C(be);
    cudaStreamSynchronize(c->st);
    for (int i = 0; i < c->n_weights; i++) cudaFree(c->weights[i]);
    for (int k = 0; k < SLOT_COUNT; k++) {
        cudaFree(c->slot[k].dev);
        free(c->slot[k].host);
    }
    cudaFree(c->part);
    cudaFree(c->sample_out);
    cudaStreamDestroy(c->st);
    free(c->weights);
    free(c->kv_build);
    free(c);
    free(be);
}

static enum smol_err cu_new(struct smol_backend **out, int device, char *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return errf(err, SMOL_EUNSUPPORTED, "cuda: no usable device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    }
    if (device < 0 || device >= count)
        return errf(err, SMOL_EUNSUPPORTED, "cuda: no usable device (device %d of %d)", device, count);
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return errf(err, SMOL_EUNSUPPORTED, "cuda: no usable device (device %d: %s)", device, cudaGetErrorString(e));
    if (prop.major < 8)
        return errf(err, SMOL_EUNSUPPORTED, "cuda: no usable device (%s is sm_%d%d; the plugin needs sm_80 or newer)",
                    prop.name, prop.major, prop.minor);
    struct smol_backend *be = (struct smol_backend *)calloc(1, sizeof *be);
    struct cuda *c = (struct cuda *)calloc(1, sizeof *c);
    if (!be || !c || (e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess) {
        free(be);
        free(c);
        return errf(err, SMOL_ENOMEM, "cuda: cannot create the backend%s%s", e ? ": " : "",
                    e ? cudaGetErrorString(e) : "");
    }
    c->device = device;
    c->n_sm = prop.multiProcessorCount;
    be->name = "cuda";
    be->impl = c;
    be->n_threads = 1;
    be->destroy = cu_destroy;
    be->reserve = cu_reserve;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->to_host = cu_to_host;
    be->from_host = cu_from_host;
    be->upload_weight = cu_upload;
    be->get_rows = cu_get_rows;
    be->rmsnorm = cu_rmsnorm;
    be->matmul = cu_matmul;
    be->rope = cu_rope;
    be->hadamard = cu_hadamard;
    be->kv_store = cu_kv_store;
    be->attention = cu_attention;
    be->silu_mul = cu_silu_mul;
    be->add = cu_add;
    be->gather_rows = cu_gather_rows;
    be->kv_copy_page = cu_kv_copy_page;
    fprintf(stderr, "<6>cuda: device %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", device, prop.name, prop.major, prop.minor,
            prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
    *out = be;
    return SMOL_OK;
}

static const struct smol_cuda_plugin the_plugin = {SMOL_CUDA_PLUGIN_ABI, cu_new, cu_sample};

extern "C" __attribute__((visibility("default"))) const struct smol_cuda_plugin *smol_cuda_plugin_v1(void)
{
    return &the_plugin;
}
