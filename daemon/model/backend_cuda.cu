/*
 * backend_cuda.cu - struct smol_backend on one CUDA device (its kernels in kernels/cuda/): the plugin that
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
 * page tables and positions.  The bytes travel from a pinned staging ring
 * (a chunk per upload, never rewritten before the stream has been waited
 * for), so uploads are asynchronous and can sit in front of a replayed
 * graph.
 *
 * Knobs (struct smol_cuda_opts, backend_cuda_loader.h): matvec = q8 sends
 * decode mat-vecs (<= 8 tokens) of q4_K, q6_K, q8_0, q4_0, q4_1 weights to
 * mmvq.cu (a second, repacked device copy of those weights, w->dev_aux);
 * fuse adds the fused layer steps of backend.h (norm + q/k/v, rope + KV
 * store, mat-vec + residual, the whole FFN); graphs records a decode step
 * (<= 8 tokens, <= SMOL_LOGIT_ROWS rows of logits) once per shape as a CUDA
 * graph and replays it: everything a step varies (ids, positions, page
 * tables, output rows) is read from the slots' fixed device buffers, and
 * attention splits the pages on the device.  A buffer that a record uses
 * being reallocated drops the records (gen).  attn = tiled sends attention
 * with head_dim 128 and an f16 or q8_0 cache to fattn.cu (query tiles of a
 * sequence sharing K/V tiles on tensor cores; split-K with a warp merge).
 * gemm = mma sends mat-muls of
 * more than 8 tokens of those types to mmq_tc.cu (the same w->dev_aux
 * copies, uploaded for it whatever matvec says; activations rounded to f16
 * once into x16) instead of matmul.cu's f16 tiles.  gemm_fuse = on (not yet
 * run on a device) makes each of those mat-muls one launch: the kernel reads
 * the f32 activations and sums its own split-K partials (tickets in gtick).
 * gemm = lt (an A/B knob, not yet run on a device) sends them to cuBLASLt on
 * bf16 weights decoded per mat-mul (backend_cuda_lt.cu).
 *
 * Newer knob values (not yet run on a device; kernels/cuda/NOTES.md, session 6): matvec = q8k
 * splits the rows of weights with few rows among 2-4 warps (mv_launch); fuse = layer runs a
 * decode step's layers in layer.cu's four kernels a layer (the layers op, cu_layers; the residual
 * in fixed point), persistent = on in one cooperative launch; graphs = bucket records decode steps
 * that forward() padded to 2^k rows (b->bucket) once per size, the head of every row and the
 * device sampling inside (step_sample / step_ids), the descriptors uploaded in one copy from the
 * packed slot region (put_step).
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

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/cuda/fattn.cuh"
#include "kernels/cuda/mmq_tc.h"
#include "kernels/cuda/mmq_imma.h"
#include "daemon/model/backend_cuda_lt.cuh"
extern "C" {
#include "daemon/model/backend.h"
#include "daemon/model/kv.h"
#include "daemon/model/backend_cuda_loader.h"
}

static_assert(SMOL_KV_PAGE == SMOL_KV_PAGE_CUDA, "kv page size");

enum { SLOT_IDS, SLOT_POS, SLOT_IDX, SLOT_KV, SLOT_SAMPLE, SLOT_TILES, SLOT_COUNT };

struct slot {
    int32_t *host;      /* shadow of dev */
    int32_t *dev;
    size_t len, cap;    /* int32 elements */
    int packed;         /* host and dev lie in the step's packed region (not freed on their own) */
};

#define STAGE_BYTES (4u << 20)
#define MAX_GRAPHS 16

struct graph {
    int n_tokens, n_out;
    unsigned gen;
    long h2d, d2h;              /* copies recorded in it (counted at each replay) */
    cudaGraphExec_t exec;
};

struct cuda {
    int device;
    cudaStream_t st;
    int n_sm;
    cudaError_t failed;         /* first error, sticky */
    struct smol_cuda_opts opts;
    char *stage;                /* pinned staging of uploads */
    size_t stage_used;
    int8_t *xq;                 /* q8a activations: SMOL_MMVQ_MAX_TOKENS rows of max_cols */
    struct smol_q8a *xs;
    uint16_t *x16;              /* knob gemm = mma: f16 activations, x16_cap halfs */
    size_t x16_cap;
    float *gpart;               /* its split-K partials, gpart_cap floats */
    size_t gpart_cap;
    unsigned *gtick;            /* knob gemm_fuse: a ticket per output tile of a split GEMM, 0 between launches */
    size_t gtick_cap;
    struct smol_lt *lt;         /* knob gemm = lt: cuBLASLt, its plans and bf16 scratch (backend_cuda_lt.cu) */
    size_t lt_wmax;             /* elements of the largest weight it may decode (upload): its slab at reserve */
    struct graph graphs[MAX_GRAPHS];
    int n_graphs, next_graph;
    unsigned gen;               /* bumped when a buffer recorded steps use moves */
    int capturing, capture_broken, cap_tokens, cap_out;
    long cap_h2d, cap_d2h;      /* copies recorded while capturing */
    cudaEvent_t mark_ev[2];
    int mark_n;
    struct slot slot[SLOT_COUNT];
    int32_t *pk_host, *pk_dev;  /* the packed region: slots IDS, POS, IDX, SAMPLE, KV side by side, so
                                   that a bucketed step uploads them in one copy (reserve) */
    int32_t *step_ids_host;     /* pinned: the tokens a recorded step's sampling drew (step_sample) */
    int32_t *sample_build;      /* host: a bucketed step's sampling parameters being built (3 max_tokens) */
    int step_rows;
    int32_t *kv_build;          /* host: descriptor being built (tok pairs + pages) */
    size_t kv_build_cap;
    int32_t *tile_build;        /* host: knob attn = tiled, the step's query tiles (t0, count) being built */
    size_t tile_build_cap;      /* int32 elements */
    float *part;                /* attention split partials */
    size_t part_cap;            /* floats */
    int32_t *sample_out;        /* device [max_tokens] */
    void **weights;             /* uploaded weight copies, freed on destroy */
    int n_weights, cap_weights;
    int max_tokens, max_cols, max_ctx;
    struct smol_cuda_counts counts; /* what counts() reports, but kernels (the emulator's count) */
    /* knob fuse = layer (layer.cu): the residual in fixed point and its copy, q, the attention
     * output as q8a, the merge tickets, RoPE's cos/sin table; made by the first step that needs
     * them (a recorded one is then run plainly once: capture_retry) */
    long long *fx_a, *fx_b;
    float *lq;
    int8_t *laq;
    struct smol_q8a *las;
    int *lcnt;
    float2 *rope_cs;
    struct smol_rope_params rope_key;
    size_t l_dim, l_qdim, l_nkv, rope_ctx;
    int capture_retry;
    /* knob persistent: the layers' arguments on the device (and their host shadow), the grid wait's words */
    struct smol_layer_args *lp_host, *lp_dev;
    int lp_n, lp_valid;
    unsigned *pbar;
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

/* Keeps the first failure and logs it once; returns 1 if e is an error.  While a step is being
 * recorded an error spoils the record instead (step_end then has the step run plainly). */
static int ck(struct cuda *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    if (c->capturing) {
        if (!c->capture_broken)
            fprintf(stderr, "<4>cuda: recording a step: %s: %s (the step runs without a graph)\n", what,
                    cudaGetErrorString(e));
        c->capture_broken = 1;
        cudaGetLastError();
        return 1;
    }
    if (c->failed == cudaSuccess) {
        c->failed = e;
        fprintf(stderr, "<3>cuda: %s: %s (backend disabled: results are NaN from now on)\n", what,
                cudaGetErrorString(e));
    }
    return 1;
}

static void drop_graphs(struct cuda *c)
{
    for (int i = 0; i < c->n_graphs; i++) cudaGraphExecDestroy(c->graphs[i].exec);
    c->n_graphs = c->next_graph = 0;
}

/* a copy issued: counted now, or (recorded) at each replay of its graph */
static void count_copy(struct cuda *c, int to_device)
{
    if (c->capturing) (to_device ? c->cap_h2d : c->cap_d2h)++;
    else (to_device ? c->counts.copies_h2d : c->counts.copies_d2h)++;
}

/* ---- upload slots ------------------------------------------------------------------ */

/* The stream has been waited for: every staged upload has been read. */
static void synced(struct cuda *c) { c->stage_used = 0; }

static void sync(struct cuda *c, const char *what)
{
    c->counts.syncs++;
    ck(c, cudaStreamSynchronize(c->st), what);
    synced(c);
}

/* A pinned copy of data for an asynchronous upload; NULL when it cannot have one (too big, or
 * the ring is full while a step is recorded): the caller copies from pageable memory then. */
static const void *stage(struct cuda *c, const void *data, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (!c->stage || bytes > STAGE_BYTES) return NULL;
    if (c->stage_used + bytes > STAGE_BYTES) {
        if (c->capturing) return NULL;
        sync(c, "upload");
    }
    void *p = c->stage + c->stage_used;
    memcpy(p, data, bytes);
    c->stage_used += bytes;
    return p;
}

static int slot_grow(struct cuda *c, struct slot *s, size_t need)
{
    if (need <= s->cap) return 1;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) cap *= 2;
    int32_t *h = (int32_t *)(s->packed ? malloc(cap * sizeof *h) : realloc(s->host, cap * sizeof *h));
    if (!h) return 0;
    if (s->packed && s->len != (size_t)-1) memcpy(h, s->host, s->len * sizeof *h);
    s->host = h;
    if (s->dev && !s->packed) ck(c, cudaFreeAsync(s->dev, c->st), "free slot");  /* ordered after its last reader */
    s->dev = NULL;
    s->packed = 0;  /* outgrew the packed region: on its own from now on */
    c->gen++;
    if (ck(c, cudaMalloc((void **)&s->dev, cap * sizeof(int32_t)), "alloc slot")) return 0;
    s->cap = cap;
    s->len = (size_t)-1;  /* device content unknown now */
    return 1;
}

/* Slots IDS, POS, IDX, SAMPLE and KV in one region of caps[] elements each (in that order): frees
 * what they held before. */
static const int pk_order[] = {SLOT_IDS, SLOT_POS, SLOT_IDX, SLOT_SAMPLE, SLOT_KV};
static int pack_slots(struct cuda *c, const size_t caps[5])
{
    size_t total = 0;
    for (int i = 0; i < 5; i++) total += (caps[i] + 3) & ~(size_t)3;  /* 16-byte aligned parts */
    int32_t *h = (int32_t *)malloc(total * sizeof *h), *d = NULL;
    if (!h || ck(c, cudaMalloc((void **)&d, total * sizeof *d), "alloc slots")) {
        free(h);
        return 0;
    }
    sync(c, "pack slots");
    for (int k = 0; k < SLOT_COUNT; k++) {
        struct slot *sl = &c->slot[k];
        if (!sl->packed) {
            cudaFree(sl->dev);
            free(sl->host);
        }
        if (k != SLOT_TILES) memset(sl, 0, sizeof *sl);
    }
    cudaFree(c->pk_dev);
    free(c->pk_host);
    c->pk_host = h;
    c->pk_dev = d;
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        struct slot *sl = &c->slot[pk_order[i]];
        sl->host = h + off;
        sl->dev = d + off;
        sl->cap = caps[i];
        sl->len = (size_t)-1;
        sl->packed = 1;
        off += (caps[i] + 3) & ~(size_t)3;
    }
    c->gen++;
    return 1;
}
/* Device copy of data[0..n), copied only if it differs from what the slot holds. */
static const int32_t *slot_put(struct cuda *c, int k, const int32_t *data, size_t n)
{
    struct slot *s = &c->slot[k];
    if (s->len == n && s->host && !memcmp(s->host, data, n * sizeof *data)) return s->dev;
    if (c->capturing) {  /* a recorded step uploads nothing: step_begin did (the record is spoilt) */
        c->capture_broken = 1;
        return s->dev;
    }
    if (!slot_grow(c, s, n ? n : 1)) return NULL;
    memcpy(s->host, data, n * sizeof *data);
    s->len = n;
    const void *src = stage(c, data, n * sizeof *data);
    count_copy(c, 1);
    ck(c, cudaMemcpyAsync(s->dev, src ? src : s->host, n * sizeof *data, cudaMemcpyHostToDevice, c->st), "upload");
    return s->dev;
}

/* The batch's KV descriptor: tok[2t] = pos + 1, tok[2t+1] = page-table offset; then the page
 * tables, one per run of consecutive tokens of the same sequence.  Returns the max pages of a token. */
static const int32_t *kv_build(struct cuda *c, const struct smol_batch *b, int *max_pages, size_t *len)
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
    *len = off;
    return d;
}

static const int32_t *kv_desc(struct cuda *c, const struct smol_batch *b, int *max_pages)
{
    size_t len;
    const int32_t *d = kv_build(c, b, max_pages, &len);
    return d ? slot_put(c, SLOT_KV, d, len) : NULL;
}

/* The step's descriptors (ids, positions, output rows, sampling parameters, KV) into their slots
 * with one copy when they lie in the packed region (a bucketed step: one upload a step), else
 * slot by slot. */
static void put_step(struct cuda *c, const struct smol_batch *b, int *max_pages)
{
    const int n = b->n_tokens, no = b->n_out;
    size_t kv_len = 0;
    const int32_t *kvd = kv_build(c, b, max_pages, &kv_len);
    int32_t *par = NULL;
    if (b->rs && no && (size_t)no <= c->slot[SLOT_SAMPLE].cap / 3 && c->sample_build) {
        par = c->sample_build;  /* no allocation a step */
        for (int r = 0; r < no; r++) {
            memcpy(par + r, &b->rs[r].temp, 4);
            memcpy(par + no + r, &b->rs[r].top_p, 4);
            memcpy(par + 2 * no + r, &b->rs[r].u, 4);
        }
    }
    const int32_t *data[5] = {b->tokens, b->pos, b->out_idx, par, kvd};
    const size_t lens[5] = {(size_t)n, (size_t)n, (size_t)no, par ? 3 * (size_t)no : 0, kv_len};
    int packed = !!kvd && !c->capturing;
    for (int i = 0; i < 5 && packed; i++) {
        const struct slot *sl = &c->slot[pk_order[i]];
        packed = sl->packed && lens[i] <= sl->cap;
    }
    if (packed) {
        size_t lo = (size_t)-1, hi = 0;
        for (int i = 0; i < 5; i++) {
            struct slot *sl = &c->slot[pk_order[i]];
            if (!data[i] || !lens[i] || (sl->len == lens[i] && !memcmp(sl->host, data[i], lens[i] * 4))) continue;
            memcpy(sl->host, data[i], lens[i] * 4);
            sl->len = lens[i];
            const size_t a = (size_t)(sl->host - c->pk_host), z = a + lens[i];
            if (a < lo) lo = a;
            if (z > hi) hi = z;
        }
        if (hi > lo) {
            const void *src = stage(c, c->pk_host + lo, (hi - lo) * 4);
            count_copy(c, 1);
            ck(c, cudaMemcpyAsync(c->pk_dev + lo, src ? src : c->pk_host + lo, (hi - lo) * 4, cudaMemcpyHostToDevice,
                                  c->st), "upload step");
        }
    } else {
        for (int i = 0; i < 5; i++)
            if (data[i] && lens[i]) slot_put(c, pk_order[i], data[i], lens[i]);
    }
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
    sync(c, "alloc");
    return p;
}

static void cu_free(struct smol_backend *be, void *p)
{
    if (!p) return;
    struct cuda *c = C(be);
    sync(c, "sync before free");
    ck(c, cudaFree(p), "free");
}

static void cu_to_host(struct smol_backend *be, void *dst, const void *src, size_t n)
{
    struct cuda *c = C(be);
    count_copy(c, 0);
    ck(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->st), "copy to host");
    sync(c, "step");
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
    w->dev_aux = NULL;
    if (w->type != SMOL_TYPE_F32 && (size_t)w->rows * w->cols > c->lt_wmax) c->lt_wmax = (size_t)w->rows * w->cols;
    const int mma = c->opts.gemm == SMOL_CUDA_GEMM_MMA || c->opts.gemm == SMOL_CUDA_GEMM_IMMA;
    if ((c->opts.matvec >= SMOL_CUDA_MATVEC_Q8 || mma) && smol_mmvq_type_ok(w->type) && w->rows > 0) {
        if (!smol_mmvq_repacked(w->type)) {
            w->dev_aux = d;
        } else {  /* the q8 mat-vec's layout (mmvq.h), a second copy: the other kernels read GGUF blocks */
            if (c->n_weights == c->cap_weights) {
                void **p = (void **)realloc(c->weights, (size_t)(2 * c->cap_weights) * sizeof *p);
                if (!p) return errf(err, SMOL_ENOMEM, "cuda: out of memory");
                c->weights = p;
                c->cap_weights *= 2;
            }
            const int blk = w->type == SMOL_TYPE_Q6_K ? QK_K : 32;
            uint8_t *h = (uint8_t *)malloc(bytes);
            void *d2 = NULL;
            if (!h) return errf(err, SMOL_ENOMEM, "cuda: out of memory repacking '%s'", w->name ? w->name : "?");
            smol_mmvq_repack(w->type, h, (const uint8_t *)w->data, (size_t)w->rows * (w->cols / blk));
            /* the GEMM reads q6_K's d as aligned 4-byte words: SMOL_GEMM_PAD bytes past the end */
            e = cudaMalloc(&d2, bytes + (mma ? SMOL_GEMM_PAD : 0));
            if (e == cudaSuccess && mma) e = cudaMemset(d2, 0, bytes + SMOL_GEMM_PAD);
            if (e == cudaSuccess) e = cudaMemcpy(d2, h, bytes, cudaMemcpyHostToDevice);
            free(h);
            if (e != cudaSuccess) {
                if (d2) cudaFree(d2);
                cudaGetLastError();
                return errf(err, e == cudaErrorMemoryAllocation ? SMOL_ENOMEM : SMOL_EIO,
                            "cuda: cannot upload the repacked tensor '%s' (%zu bytes): %s", w->name ? w->name : "?",
                            bytes, cudaGetErrorString(e));
            }
            c->weights[c->n_weights++] = d2;
            w->dev_aux = d2;
        }
    }
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
    cu_free(be, c->xq);
    cu_free(be, c->xs);
    drop_graphs(c);  /* they read the buffers being replaced (the stream is idle after cu_free) */
    c->gen++;
    c->part = (float *)cu_alloc(be, part_cap * sizeof(float));
    c->sample_out = (int32_t *)cu_alloc(be, (size_t)max_tokens * sizeof(int32_t));
    const size_t q8rows = SMOL_MMVQ_MAX_TOKENS, q8cols = ((size_t)max_cols + 255) / 256 * 256;
    c->xq = (int8_t *)cu_alloc(be, q8rows * q8cols);
    c->xs = (struct smol_q8a *)cu_alloc(be, q8rows * (q8cols / 32) * sizeof(struct smol_q8a));
    if (!c->part || !c->sample_out || !c->xq || !c->xs)
        return errf(err, SMOL_ENOMEM, "cuda: cannot allocate scratch (%zu MiB)", part_cap * 4 >> 20);
    c->part_cap = part_cap;
    if (c->opts.gemm == SMOL_CUDA_GEMM_MMA || c->opts.gemm == SMOL_CUDA_GEMM_IMMA) {
        /* f16 activations (imma: the q8a ones, 1.5 bytes an element, in the same buffer) and the
         * split-K partials of the GEMM */
        cu_free(be, c->x16);
        cu_free(be, c->gpart);
        cu_free(be, c->gtick);
        c->x16_cap = c->gpart_cap = c->gtick_cap = 0;
        /* gemm_fuse: the GEMM reads f32 activations, no x16 (its grow path in gemm() is not taken) */
        const size_t x16_cap = c->opts.gemm_fuse ? 0 : (size_t)max_tokens * max_cols;
        const size_t gpart_cap = smol_gemm_part_need(c->n_sm);
        const size_t gtick_cap = smol_gemm_tickets_need(c->n_sm);
        c->x16 = (uint16_t *)cu_alloc(be, x16_cap * sizeof(uint16_t));
        c->gpart = (float *)cu_alloc(be, gpart_cap * sizeof(float));
        c->gtick = (unsigned *)cu_alloc(be, gtick_cap * sizeof(unsigned));  /* zeroed by cu_alloc */
        if (!c->x16 || !c->gpart || !c->gtick)
            return errf(err, SMOL_ENOMEM, "cuda: cannot allocate the GEMM's scratch (%zu MiB)", x16_cap * 2 >> 20);
        c->x16_cap = x16_cap;
        c->gpart_cap = gpart_cap;
        c->gtick_cap = gtick_cap;
    }
    if (c->lt) {  /* cuBLASLt's workspace, the bf16 weight slab and activations: never grown later */
        cudaError_t e = smol_lt_reserve(c->lt, c->lt_wmax, (size_t)max_tokens * max_cols);
        if (e) return errf(err, SMOL_ENOMEM, "cuda: cannot allocate cuBLASLt's scratch: %s", cudaGetErrorString(e));
    }
    /* slots sized for a full step so the decode loop never grows them */
    const size_t pages = (size_t)(max_ctx + SMOL_KV_PAGE - 1) / SMOL_KV_PAGE;
    const size_t caps[5] = {(size_t)max_tokens, (size_t)max_tokens, (size_t)max_tokens, 3 * (size_t)max_tokens,
                            2 * (size_t)max_tokens + pages * (max_tokens < 64 ? max_tokens : 64)};
    if (!pack_slots(c, caps)) return errf(err, SMOL_ENOMEM, "cuda: cannot allocate descriptor slots");
    cudaFreeHost(c->step_ids_host);
    c->step_ids_host = NULL;
    free(c->sample_build);
    c->sample_build = (int32_t *)malloc(3 * (size_t)max_tokens * sizeof(int32_t));
    if (!c->sample_build) return errf(err, SMOL_ENOMEM, "cuda: out of memory");
    if (cudaMallocHost((void **)&c->step_ids_host, (size_t)max_tokens * sizeof(int32_t)) != cudaSuccess)
        return errf(err, SMOL_ENOMEM, "cuda: cannot allocate the step's token buffer");
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

/* ---- the q8 mat-vec ----------------------------------------------------------------------------- */

/* 1 if w x for n tokens goes to mmvq.cu */
static int q8_ok(const struct cuda *c, const struct smol_weight *w, int n)
{
    return c->opts.matvec >= SMOL_CUDA_MATVEC_Q8 && n >= 1 && n <= SMOL_MMVQ_MAX_TOKENS && w->dev_aux &&
           w->cols % 32 == 0 && w->cols <= c->max_cols && smol_mmvq_type_ok(w->type);
}

static struct smol_mv_part mv_part(const struct smol_weight *w, float *out)
{
    const int blk = w->type == SMOL_TYPE_Q4_K || w->type == SMOL_TYPE_Q6_K ? QK_K : 32;
    struct smol_mv_part p;
    p.w = (const uint8_t *)w->dev_aux;
    p.out = out;
    p.n_blocks = (size_t)w->rows * (w->cols / blk);
    p.rows = w->rows;
    p.type = (int)w->type;
    return p;
}

/* the q8 mat-vec of parts (knob matvec = q8k: rows split among warps where the weights have few) */
static cudaError_t mv_launch(const struct cuda *c, const struct smol_mv_part *p, int n_p, int mode, int cols, int n)
{
    int rows = 0;
    for (int i = 0; i < n_p; i++) rows += p[i].rows;
    const int ks = c->opts.matvec == SMOL_CUDA_MATVEC_Q8K && mode != SMOL_MV_GLU ? smol_mmvq_split(rows, c->n_sm) : 1;
    return smol_mmvq_cuda_ks(p, n_p, mode, c->xq, c->xs, cols, n, ks, c->st);
}

/* parts[i] = ws[i] x (mode) for n tokens of x, one quantization, one launch */
static void mmvq(struct cuda *c, float *const *outs, const struct smol_weight *const *ws, int n_w, int mode,
                 const float *x, int n)
{
    struct smol_mv_part p[3];
    for (int i = 0; i < n_w; i++) p[i] = mv_part(ws[i], outs[i]);
    if (!ck(c, smol_q8a_cuda(x, n, ws[0]->cols, c->xq, c->xs, c->st), "q8a"))
        ck(c, mv_launch(c, p, n_w, mode, ws[0]->cols, n), "mmvq");
}

/* ---- the tensor-core GEMM (knob gemm = mma) ------------------------------------------------------- */

/* 1 if w x for n tokens goes to mmq_tc.cu */
static int gemm_ok(const struct cuda *c, const struct smol_weight *w, int n)
{
    return (c->opts.gemm == SMOL_CUDA_GEMM_MMA || c->opts.gemm == SMOL_CUDA_GEMM_IMMA) && n > SMOL_MMVQ_MAX_TOKENS &&
           w->dev_aux &&
           smol_gemm_type_ok(w->type) && w->cols % SMOL_GEMM_BK == 0 &&
           (w->cols % QK_K == 0 || (w->type != SMOL_TYPE_Q4_K && w->type != SMOL_TYPE_Q6_K));
}

/* outs[i] (mode) ws[i] x for n tokens of x: a launch per weight.  gemm = imma: the weights whose
 * type the int8 GEMM takes read x quantized once to q8a (int8 rows, then their 32-block scales, in
 * the x16 buffer: n * cols * 1.5 bytes); the others (and all under gemm = mma) read x rounded once
 * to f16, written over the q8a after the int8 launches (one stream: in order). */
static void gemm(struct cuda *c, float *const *outs, const struct smol_weight *const *ws, int n_w, int mode,
                 const float *x, int n)
{
    const int imma = c->opts.gemm == SMOL_CUDA_GEMM_IMMA;
    if (c->opts.gemm_fuse) {  /* one launch a weight: x read as f32, split-K summed in the kernel */
        for (int i = 0; i < n_w; i++) {
            const uint8_t *w = (const uint8_t *)ws[i]->dev_aux;
            if (imma && smol_imma_type_ok(ws[i]->type)) {
                if (ck(c, smol_gemm_imma_f32_cuda(outs[i], mode, ws[i]->type, w, ws[i]->rows, ws[i]->cols, x, n, c->n_sm,
                                                  c->gpart, c->gpart_cap, c->gtick, c->gtick_cap, c->st), "gemm imma fused"))
                    return;
            } else if (ck(c, smol_gemm_mma_f32_cuda(outs[i], mode, ws[i]->type, w, ws[i]->rows, ws[i]->cols, x, n, c->n_sm,
                                                    c->gpart, c->gpart_cap, c->gtick, c->gtick_cap, c->st), "gemm mma fused")) {
                return;
            }
        }
        return;
    }
    const size_t need = (size_t)n * ws[0]->cols;
    if (need > c->x16_cap) {  /* more than reserve planned for (a caller past max_tokens): grow */
        sync(c, "free f16 activations");
        cudaFree(c->x16);
        c->x16 = NULL;
        c->x16_cap = 0;
        if (ck(c, cudaMalloc((void **)&c->x16, need * sizeof(uint16_t)), "alloc f16 activations")) return;
        c->x16_cap = need;
    }
    int n_imma = 0;
    for (int i = 0; i < n_w; i++) n_imma += imma && smol_imma_type_ok(ws[i]->type);
    if (n_imma) {
        int8_t *xq = (int8_t *)c->x16;
        struct smol_q8a *xs = (struct smol_q8a *)(xq + need);  /* need: a multiple of 128 (gemm_ok) */
        if (ck(c, smol_q8a_cuda(x, n, ws[0]->cols, xq, xs, c->st), "q8a activations")) return;
        for (int i = 0; i < n_w; i++)
            if (smol_imma_type_ok(ws[i]->type) &&
                ck(c, smol_gemm_imma_cuda(outs[i], mode, ws[i]->type, (const uint8_t *)ws[i]->dev_aux, ws[i]->rows,
                                          ws[i]->cols, xq, xs, n, c->n_sm, c->gpart, c->gpart_cap, c->st),
                   "gemm imma"))
                return;
        if (n_imma == n_w) return;
    }
    if (ck(c, smol_f16_from_f32_cuda(c->x16, x, need, c->st), "f16 activations")) return;
    for (int i = 0; i < n_w; i++)
        if (!imma || !smol_imma_type_ok(ws[i]->type))
            ck(c, smol_gemm_mma_cuda(outs[i], mode, ws[i]->type, (const uint8_t *)ws[i]->dev_aux, ws[i]->rows, ws[i]->cols,
                                 c->x16, n, c->n_sm, c->gpart, c->gpart_cap, c->st), "gemm mma");
}

/* ---- cuBLASLt on bf16 weights (knob gemm = lt) ---------------------------------------------- */

/* 1 if w x for n tokens goes to cuBLASLt */
static int lt_ok(const struct cuda *c, const struct smol_weight *w, int n)
{
    return c->opts.gemm == SMOL_CUDA_GEMM_LT && n > SMOL_MMVQ_MAX_TOKENS && smol_lt_ok(c->lt, w, n);
}

static void cu_matmul(struct smol_backend *be, float *out, const struct smol_weight *w, const float *x, int n)
{
    struct cuda *c = C(be);
    if (q8_ok(c, w, n)) return mmvq(c, &out, &w, 1, SMOL_MV_STORE, x, n);
    if (lt_ok(c, w, n)) {
        c->counts.lt_matmuls++;
        ck(c, smol_lt_matmul(c->lt, &out, &w, 1, 0, x, n, c->st), "gemm lt");
        return;
    }
    if (gemm_ok(c, w, n)) return gemm(c, &out, &w, 1, SMOL_MV_STORE, x, n);
    ck(c, smol_matmul_cuda(out, w->type, w->dev, w->row_bytes, w->rows, w->cols, x, n, c->st), "matmul");
}

static void cu_matmul_n(struct smol_backend *be, float *const *outs, const struct smol_weight *const *ws, int n_w,
                        const float *x, int n)
{
    struct cuda *c = C(be);
    int all = n_w >= 1 && n_w <= 3;
    for (int i = 0; i < n_w && all; i++) all = q8_ok(c, ws[i], n) && ws[i]->cols == ws[0]->cols;
    if (all) return mmvq(c, outs, ws, n_w, SMOL_MV_STORE, x, n);
    all = n_w >= 1;
    for (int i = 0; i < n_w && all; i++) all = lt_ok(c, ws[i], n) && ws[i]->cols == ws[0]->cols;
    if (all) {  /* the activations rounded to bf16 once for all */
        c->counts.lt_matmuls += n_w;
        ck(c, smol_lt_matmul(c->lt, outs, ws, n_w, 0, x, n, c->st), "gemm lt");
        return;
    }
    all = n_w >= 1;
    for (int i = 0; i < n_w && all; i++) all = gemm_ok(c, ws[i], n) && ws[i]->cols == ws[0]->cols;
    if (all) return gemm(c, outs, ws, n_w, SMOL_MV_STORE, x, n);
    for (int i = 0; i < n_w; i++) cu_matmul(be, outs[i], ws[i], x, n);
}

/* ---- fused steps (knob fuse; they need the q8 mat-vec) ------------------------------------------- */

static int cu_norm_qkv(struct smol_backend *be, float *q, float *k, float *v, const float *x,
                       const struct smol_weight *nw, const struct smol_weight *wq, const struct smol_weight *wk,
                       const struct smol_weight *wv, int n, int dim, float eps)
{
    struct cuda *c = C(be);
    if (!c->opts.fuse || !q8_ok(c, wq, n) || !q8_ok(c, wk, n) || !q8_ok(c, wv, n) || wq->cols != dim ||
        wk->cols != dim || wv->cols != dim || nw->type != SMOL_TYPE_F32)
        return 0;
    struct smol_mv_part p[3] = {mv_part(wq, q), mv_part(wk, k), mv_part(wv, v)};
    if (!ck(c, smol_norm_q8a_cuda(x, (const float *)nw->dev, eps, n, dim, c->xq, c->xs, c->st), "norm_q8a"))
        ck(c, mv_launch(c, p, 3, SMOL_MV_STORE, dim, n), "mmvq qkv");
    return 1;
}

static int cu_rope_store(struct smol_backend *be, float *q, float *k, const float *v, const struct smol_rope_params *rp,
                         struct smol_kv *kv, int layer, const struct smol_batch *b, int n_heads)
{
    struct cuda *c = C(be);
    if (!c->opts.fuse || (kv->type != SMOL_TYPE_F16 && kv->type != SMOL_TYPE_F32)) return 0;
    int max_pages;
    const int32_t *d = kv_desc(c, b, &max_pages);
    if (!d) return 0;
    ck(c, smol_rope_store_cuda(q, k, v, (char *)kv->k + layer * kv->layer_bytes, (char *)kv->v + layer * kv->layer_bytes,
                               b->n_tokens, d, d, n_heads, kv->n_kv_heads, kv->head_dim, (int)kv->type, rp, c->st),
       "rope_store");
    return 1;
}

static int cu_matmul_add(struct smol_backend *be, float *x, const struct smol_weight *w, const float *in, int n)
{
    struct cuda *c = C(be);
    if (c->opts.fuse && lt_ok(c, w, n)) {  /* the residual added by cuBLASLt's beta = 1 */
        c->counts.lt_matmuls++;
        ck(c, smol_lt_matmul(c->lt, &x, &w, 1, 1, in, n, c->st), "gemm lt add");
        return 1;
    }
    if (c->opts.fuse && gemm_ok(c, w, n)) {  /* the residual added in the GEMM's epilogue */
        gemm(c, &x, &w, 1, SMOL_MV_ADD, in, n);
        return 1;
    }
    if (!c->opts.fuse || !q8_ok(c, w, n)) return 0;
    mmvq(c, &x, &w, 1, SMOL_MV_ADD, in, n);
    return 1;
}

static int cu_ffn(struct smol_backend *be, float *x, const struct smol_weight *nw, const struct smol_weight *wg,
                  const struct smol_weight *wu, const struct smol_weight *wd, float *hb, int n, int dim, float eps)
{
    struct cuda *c = C(be);
    if (!c->opts.fuse || !q8_ok(c, wg, n) || !q8_ok(c, wu, n) || !q8_ok(c, wd, n) || wg->rows != wu->rows ||
        wg->cols != dim || wu->cols != dim || wd->cols != wg->rows || wd->rows != dim || nw->type != SMOL_TYPE_F32)
        return 0;
    struct smol_mv_part gu[2] = {mv_part(wg, hb), mv_part(wu, hb)}, dn = mv_part(wd, x);
    if (!ck(c, smol_norm_q8a_cuda(x, (const float *)nw->dev, eps, n, dim, c->xq, c->xs, c->st), "norm_q8a") &&
        !ck(c, smol_mmvq_cuda(gu, 2, SMOL_MV_GLU, c->xq, c->xs, dim, n, c->st), "mmvq gate/up") &&
        !ck(c, smol_q8a_cuda(hb, n, wd->cols, c->xq, c->xs, c->st), "q8a"))
        ck(c, mv_launch(c, &dn, 1, SMOL_MV_ADD, wd->cols, n), "mmvq down");
    return 1;
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

/* Knob attn = tiled (fattn.cu).  Tiles: runs of consecutive tokens of one sequence (one page table
 * in the KV descriptor), cut every smol_fattn_tile_tokens(G) tokens, uploaded as (t0, count)
 * pairs; when every tile would be one token (decode rows of distinct sequences), and in a
 * recorded step (which uploads nothing), tiles is NULL: one token per tile.  Splits so that
 * tiles x KV heads x splits fills the GPU twice, within FATTN_MAX_SPLIT and the partials buffer;
 * the kernel divides each tile's pages among them on the device. */
static void cu_fattn(struct cuda *c, float *out, const float *q, const struct smol_kv *kv, int layer,
                     const struct smol_batch *b, int n_heads, float scale, const int32_t *d, int max_pages)
{
    const int n = b->n_tokens, per = smol_fattn_tile_tokens(n_heads / kv->n_kv_heads);
    int n_tiles = 0;
    for (int t = 0, e; t < n; t = e, n_tiles++)
        for (e = t + 1; e < n && e - t < per && b->seq[e] == b->seq[t];) e++;
    const int32_t *tiles = NULL;
    if (c->capturing || n_tiles == n) {
        n_tiles = n;
    } else {
        if ((size_t)2 * n_tiles > c->tile_build_cap) {
            int32_t *p = (int32_t *)realloc(c->tile_build, (size_t)2 * n_tiles * sizeof *p);
            if (!p) return (void)ck(c, cudaErrorMemoryAllocation, "attention tiles");
            c->tile_build = p;
            c->tile_build_cap = (size_t)2 * n_tiles;
        }
        int i = 0;
        for (int t = 0, e; t < n; t = e, i++) {
            for (e = t + 1; e < n && e - t < per && b->seq[e] == b->seq[t];) e++;
            c->tile_build[2 * i] = t;
            c->tile_build[2 * i + 1] = e - t;
        }
        tiles = slot_put(c, SLOT_TILES, c->tile_build, (size_t)2 * n_tiles);
        if (!tiles) return (void)ck(c, cudaErrorMemoryAllocation, "attention tiles");
    }
    const int blocks = n_tiles * kv->n_kv_heads;
    int n_split = (2 * c->n_sm + blocks - 1) / blocks;
    const int ctx_pages = (c->max_ctx + SMOL_KV_PAGE - 1) / SMOL_KV_PAGE;
    if (n_split > (c->capturing ? ctx_pages : max_pages)) n_split = c->capturing ? ctx_pages : max_pages;
    if (n_split > FATTN_MAX_SPLIT) n_split = FATTN_MAX_SPLIT;
    const size_t per_split = (size_t)n * n_heads * (kv->head_dim + 2);
    while (n_split > 1 && per_split * n_split > c->part_cap) n_split--;
    if (n_split < 1) n_split = 1;
    ck(c, smol_fattn_cuda(out, q, (const char *)kv->k + layer * kv->layer_bytes,
                          (const char *)kv->v + layer * kv->layer_bytes, n, d, d, tiles, n_tiles, n_heads,
                          kv->n_kv_heads, kv->head_dim, (int)kv->type, scale, n_split, c->part, c->st),
       "attention (tiled)");
}

/* The paged attention's splits of a step of n tokens: tokens x KV heads x splits fill the device
 * twice, within the partials buffer; *pps = pages per split, or 0 while recording (a recorded
 * step serves every context: the pages are split on the device among a fixed count). */
static int paged_splits(const struct cuda *c, int n, int n_heads, int n_kv_heads, int head_dim, int max_pages, int *pps)
{
    const int blocks = n * n_kv_heads;
    int n_split = (2 * c->n_sm + blocks - 1) / blocks;
    const int ctx_pages = (c->max_ctx + SMOL_KV_PAGE - 1) / SMOL_KV_PAGE;
    if (n_split > (c->capturing ? ctx_pages : max_pages)) n_split = c->capturing ? ctx_pages : max_pages;
    const size_t per = (size_t)n * n_heads * (head_dim + 2);
    while (n_split > 1 && per * n_split > c->part_cap) n_split--;
    if (n_split < 1) n_split = 1;
    *pps = 0;
    if (!c->capturing) {
        *pps = (max_pages + n_split - 1) / n_split;
        n_split = (max_pages + *pps - 1) / *pps;
    }
    return n_split;
}

/* Knob attn = prefill: the tiled kernels for a step of more tokens than the mat-vec takes where
 * some sequence has several query tokens (its tokens are contiguous); the paged ones for decode
 * rows, where they are faster (device run 3), and for every step of <= SMOL_MMVQ_MAX_TOKENS: those
 * are the steps CUDA graphs record and replay for any batch of their size, so a replay and a
 * launch from the host take the same kernels (test_cuda's graph twins, bit for bit). */
static int multi_query(const struct cuda *c, const struct smol_batch *b)
{
    if (c->capturing || b->n_tokens <= SMOL_MMVQ_MAX_TOKENS) return 0;
    for (int t = 1; t < b->n_tokens; t++)
        if (b->seq[t] == b->seq[t - 1]) return 1;
    return 0;
}

static void cu_attention(struct smol_backend *be, float *out, const float *q, const struct smol_kv *kv, int layer,
                         const struct smol_batch *b, int n_heads, float scale)
{
    struct cuda *c = C(be);
    int max_pages;
    const int32_t *d = kv_desc(c, b, &max_pages);
    if (!d) return (void)ck(c, cudaErrorMemoryAllocation, "kv descriptor");
    if ((c->opts.attn == SMOL_CUDA_ATTN_TILED || (c->opts.attn == SMOL_CUDA_ATTN_PREFILL && multi_query(c, b))) &&
        smol_fattn_ok(kv->head_dim, (int)kv->type, n_heads, kv->n_kv_heads))
        return cu_fattn(c, out, q, kv, layer, b, n_heads, scale, d, max_pages);
    /* splits so that tokens x kv heads x splits fills the GPU twice, within the partials buffer */
    const int n = b->n_tokens;
    int pps;
    const int n_split = paged_splits(c, n, n_heads, kv->n_kv_heads, kv->head_dim, max_pages, &pps);
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
    count_copy(c, 1);
    ck(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->st), "copy from host");
    sync(c, "copy from host");
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
    count_copy(c, 0);
    ck(c, cudaMemcpyAsync(out, c->sample_out, (size_t)n_rows * sizeof *out, cudaMemcpyDeviceToHost, c->st), "sample");
    sync(c, "sample");
    if (c->failed != cudaSuccess)
        return errf(err, SMOL_EINTERNAL, "cuda: %s", cudaGetErrorString(c->failed));
    return SMOL_OK;
}

/* ---- whole layers (knob fuse = layer, layer.cu) ------------------------------------------------ */

/* cos and sin of pair i at position p: the arithmetic of ops.cu's rope_cs (double, YaRN), on the host */
static void rope_cs_host(int p, int i, const struct smol_rope_params *rp, float *c, float *s)
{
    const double theta_extrap = p * pow((double)rp->freq_base, -2.0 * i / rp->n_dims);
    double theta = rp->freq_scale * theta_extrap, mscale = rp->attn_factor;
    if (rp->ext_factor != 0.0f) {
        const double y = (i - rp->corr_dims[0]) / fmax(0.001, (double)rp->corr_dims[1] - rp->corr_dims[0]);
        const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * rp->ext_factor;
        theta = theta * (1 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * log(1.0 / rp->freq_scale);
    }
    *c = (float)(cos(theta) * mscale);
    *s = (float)(sin(theta) * mscale);
}

/* the layers' buffers for dim / q_dim / kv heads; 0 when they cannot be made now (while
 * recording: the step is then run plainly once, capture_retry) */
static int layer_buffers(struct cuda *c, const struct smol_layers_args *a)
{
    const size_t T = SMOL_MMVQ_MAX_TOKENS, dim = a->dim, qd = (size_t)a->n_heads * a->head_dim, nkv = a->n_kv_heads;
    const int pairs = a->rope->n_dims / 2;
    const int fresh_rope = !c->rope_cs || c->rope_ctx < (size_t)c->max_ctx || memcmp(&c->rope_key, a->rope, sizeof *a->rope);
    if (c->fx_a && c->l_dim >= dim && c->l_qdim >= qd && c->l_nkv >= nkv && !fresh_rope) return 1;
    if (c->capturing) {
        c->capture_broken = c->capture_retry = 1;
        return 0;
    }
    sync(c, "layer buffers");
    cudaFree(c->fx_a); cudaFree(c->fx_b); cudaFree(c->lq); cudaFree(c->laq); cudaFree(c->las); cudaFree(c->lcnt);
    cudaFree(c->rope_cs);
    c->fx_a = c->fx_b = NULL;
    c->lq = NULL;
    c->laq = NULL;
    c->las = NULL;
    c->lcnt = NULL;
    c->rope_cs = NULL;
    drop_graphs(c);
    c->gen++;
    const size_t ctx = (size_t)(c->max_ctx > 0 ? c->max_ctx : 1);
    float2 *h = (float2 *)malloc(ctx * (pairs > 0 ? pairs : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t p = 0; p < ctx; p++)
        for (int i = 0; i < pairs; i++) rope_cs_host((int)p, i, a->rope, &h[p * pairs + i].x, &h[p * pairs + i].y);
    cudaError_t e = cudaMalloc((void **)&c->fx_a, T * dim * 8);
    if (!e) e = cudaMalloc((void **)&c->fx_b, T * dim * 8);
    if (!e) e = cudaMalloc((void **)&c->lq, T * qd * 4);
    if (!e) e = cudaMalloc((void **)&c->laq, T * qd);
    if (!e) e = cudaMalloc((void **)&c->las, T * (qd / 32) * sizeof(struct smol_q8a));
    if (!e) e = cudaMalloc((void **)&c->lcnt, T * nkv * sizeof(int));
    if (!e) e = cudaMemset(c->lcnt, 0, T * nkv * sizeof(int));
    if (!e) e = cudaMalloc((void **)&c->rope_cs, ctx * (pairs > 0 ? pairs : 1) * sizeof(float2));
    if (!e) e = cudaMemcpy(c->rope_cs, h, ctx * pairs * sizeof(float2), cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) {
        ck(c, e, "layer buffers");
        return 0;
    }
    c->l_dim = dim;
    c->l_qdim = qd;
    c->l_nkv = nkv;
    c->rope_ctx = ctx;
    c->rope_key = *a->rope;
    return 1;
}

static int cu_layers(struct smol_backend *be, const struct smol_layers_args *a, const struct smol_batch *b, float *x,
                     float *xb)
{
    struct cuda *c = C(be);
    const struct smol_kv *kv = a->kv;
    const int n = b->n_tokens;
    if ((c->opts.fuse != SMOL_CUDA_FUSE_LAYER && !c->opts.persistent) || n > SMOL_MMVQ_MAX_TOKENS ||
        c->failed != cudaSuccess ||
        kv->rot_k || kv->rot_v ||
        !smol_layer_ok(a->dim, a->n_heads, a->n_kv_heads, a->head_dim, a->ffn_dim, (int)kv->type) ||
        a->output_norm->type != SMOL_TYPE_F32)
        return 0;
    for (int l = 0; l < a->n_layers; l++) {
        const struct smol_layer_weights *L = &a->layers[l];
        const struct smol_weight *ws[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
        for (int i = 0; i < 7; i++)
            if (!q8_ok(c, ws[i], n) && !(i == 6 && ws[i]->dev_aux && smol_mmvq_type_ok(ws[i]->type))) return 0;
        if (L->attn_norm->type != SMOL_TYPE_F32 || L->ffn_norm->type != SMOL_TYPE_F32) return 0;
    }
    if (!layer_buffers(c, a)) return c->capturing;  /* while recording: spoilt, step_end runs it plainly */
    int max_pages;
    const int32_t *d = kv_desc(c, b, &max_pages);
    if (!d) return 0;
    int pps;
    const int n_split = paged_splits(c, n, a->n_heads, kv->n_kv_heads, a->head_dim, max_pages, &pps);
    struct smol_layer_args la;
    memset(&la, 0, sizeof la);
    la.n = n;
    la.tok = d;
    la.pages = d;
    la.xa = c->fx_a;
    la.xb = c->fx_b;
    la.dim = a->dim;
    la.n_heads = a->n_heads;
    la.n_kv_heads = a->n_kv_heads;
    la.head_dim = a->head_dim;
    la.ffn = a->ffn_dim;
    la.eps = a->eps;
    la.scale = a->scale;
    la.q = c->lq;
    la.kv_type = (int)kv->type;
    la.rope_pairs = a->rope->n_dims / 2;
    la.part = c->part;
    la.cnt = c->lcnt;
    la.n_split = n_split;
    la.pps = pps;
    la.aq = c->laq;
    la.as = c->las;
    const int persist = c->opts.persistent;
    if (persist && c->lp_n < a->n_layers) {  /* the arguments' home on the device, made outside a record */
        if (c->capturing) {
            c->capture_broken = c->capture_retry = 1;
            return 1;
        }
        sync(c, "persistent args");
        cudaFree(c->lp_dev);
        free(c->lp_host);
        c->lp_dev = NULL;
        c->lp_n = c->lp_valid = 0;
        c->lp_host = (struct smol_layer_args *)calloc((size_t)a->n_layers, sizeof *c->lp_host);
        if (!c->lp_host || ck(c, cudaMalloc((void **)&c->lp_dev, (size_t)a->n_layers * sizeof *c->lp_dev), "persistent args"))
            return 0;
        if (!c->pbar && (ck(c, cudaMalloc((void **)&c->pbar, 2 * sizeof(unsigned)), "grid wait") ||
                         ck(c, cudaMemset(c->pbar, 0, 2 * sizeof(unsigned)), "grid wait")))
            return 0;
        c->lp_n = a->n_layers;
        drop_graphs(c);
        c->gen++;
    }
    int changed = 0;
    for (int l = 0; l < a->n_layers; l++) {
        const struct smol_layer_weights *L = &a->layers[l];
        la.x0 = l == 0 ? x : NULL;
        la.attn_norm = (const float *)L->attn_norm->dev;
        la.ffn_norm = (const float *)L->ffn_norm->dev;
        la.wq = mv_part(L->wq, NULL);
        la.wk = mv_part(L->wk, NULL);
        la.wv = mv_part(L->wv, NULL);
        la.wo = mv_part(L->wo, NULL);
        la.wg = mv_part(L->w_gate, NULL);
        la.wu = mv_part(L->w_up, NULL);
        la.wd = mv_part(L->w_down, NULL);
        la.kc = (char *)kv->k + l * kv->layer_bytes;
        la.vc = (char *)kv->v + l * kv->layer_bytes;
        la.rope_cs = L->rope && la.rope_pairs > 0 ? c->rope_cs : NULL;
        if (persist) {  /* the step's fields come with the launch: the stored ones do not vary */
            struct smol_layer_args st = la;
            st.n = st.n_split = st.pps = 0;
            st.tok = st.pages = NULL;
            if (!c->lp_valid || memcmp(&c->lp_host[l], &st, sizeof st)) {
                c->lp_host[l] = st;
                changed = 1;
            }
            continue;
        }
        if (ck(c, smol_layer_cuda(&la, c->st), "layer")) return 1;
    }
    if (persist) {
        if (changed) {  /* weights, buffers or the cache moved: the device copy again (not while recording) */
            if (c->capturing) {
                c->capture_broken = c->capture_retry = 1;
                c->lp_valid = 0;
                return 1;
            }
            count_copy(c, 1);
            if (ck(c, cudaMemcpy(c->lp_dev, c->lp_host, (size_t)a->n_layers * sizeof *c->lp_dev, cudaMemcpyHostToDevice),
                   "persistent args"))
                return 1;
            c->lp_valid = 1;
        }
        const int32_t *idx = b->n_out ? slot_put(c, SLOT_IDX, b->out_idx, b->n_out) : NULL;
        struct smol_persist_args pa;
        memset(&pa, 0, sizeof pa);
        pa.layers = c->lp_dev;
        pa.n_layers = a->n_layers;
        pa.n = n;
        pa.n_split = n_split;
        pa.pps = pps;
        pa.n_out = b->n_out;
        pa.dim = a->dim;
        pa.tok = d;
        pa.pages = d;
        pa.idx = idx;
        pa.bar = c->pbar;
        pa.xb = xb;
        pa.x = c->fx_a;
        pa.out_norm = (const float *)a->output_norm->dev;
        pa.eps = a->eps;
        const int f16 = kv->type == SMOL_TYPE_F16;
        const size_t smem = smol_persist_smem(n, a->dim, a->n_heads, a->n_kv_heads);
        const int grid = smol_persist_grid(n, f16, smem, c->n_sm);
        if (grid < 1) return 0;
        ck(c, smol_persist_cuda(&pa, grid, f16, smem, c->st), "persistent step");
        return 1;
    }
    if (b->n_out) {
        const int32_t *idx = slot_put(c, SLOT_IDX, b->out_idx, b->n_out);
        if (idx)
            ck(c, smol_head_norm_cuda(xb, c->fx_a, idx, b->n_out, (const float *)a->output_norm->dev, a->eps, a->dim,
                                      c->st), "head norm");
    }
    return 1;
}

/* ---- sampling within a step (knob graphs = bucket) ------------------------------------------------ */

/* The step's rows of logits sampled on the device with the parameters step_begin uploaded (slot
 * SAMPLE: temp, top_p, u of each row), the tokens copied to pinned host memory: recorded with
 * the step, so a replay samples and copies too.  step_ids reads them after the step. */
static void cu_step_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab)
{
    struct cuda *c = C(be);
    const struct slot *sl = &c->slot[SLOT_SAMPLE];
    if (n_rows < 1 || n_rows > c->max_tokens || sl->len != 3 * (size_t)n_rows) {
        ck(c, cudaErrorInvalidValue, "step sample");
        return;
    }
    const float *df = (const float *)sl->dev;
    ck(c, smol_sample_top_p_cuda(logits, vocab, n_rows, df, df + n_rows, df + 2 * n_rows, c->sample_out, c->st),
       "step sample");
    count_copy(c, 0);
    ck(c, cudaMemcpyAsync(c->step_ids_host, c->sample_out, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                          c->st), "step sample");
    c->step_rows = n_rows;
}

static enum smol_err cu_step_ids(struct smol_backend *be, int32_t *ids, int n_rows, char *err)
{
    struct cuda *c = C(be);
    sync(c, "step ids");
    if (c->failed != cudaSuccess) return errf(err, SMOL_EINTERNAL, "cuda: %s", cudaGetErrorString(c->failed));
    if (n_rows > c->step_rows) return errf(err, SMOL_EINVAL, "cuda: %d rows asked of a step that sampled %d", n_rows,
                                           c->step_rows);
    memcpy(ids, c->step_ids_host, (size_t)n_rows * sizeof *ids);
    return SMOL_OK;
}

/* ---- recorded steps (knob graphs) -------------------------------------------------------------- */

/* Uploads the step's descriptors (ids, positions, page tables, output rows) into the slots, so
 * that every op of the step finds them there; then replays a record of this shape, or records. */
static int cu_step_begin(struct smol_backend *be, const struct smol_batch *b)
{
    struct cuda *c = C(be);
    if (c->failed != cudaSuccess) return SMOL_STEP_RUN;
    int max_pages;
    put_step(c, b, &max_pages);
    /* graphs = on: decode steps of <= 8 tokens, one graph per (tokens, rows); graphs = bucket:
     * also every step the model padded to a bucket (b->bucket: decode rows, all rows out) */
    const int bucket = c->opts.graphs == SMOL_CUDA_GRAPHS_BUCKET && b->bucket && b->n_tokens <= c->max_tokens;
    if (!c->opts.graphs || (!bucket && (b->n_tokens > SMOL_MMVQ_MAX_TOKENS || b->n_out > SMOL_LOGIT_ROWS)) ||
        c->failed != cudaSuccess)
        return SMOL_STEP_RUN;
    for (int i = 0; i < c->n_graphs; i++) {
        struct graph *g = &c->graphs[i];
        if (g->n_tokens == b->n_tokens && g->n_out == b->n_out && g->gen == c->gen) {
            c->counts.graph_launches++;
            if (bucket) c->step_rows = b->n_out;
            c->counts.copies_h2d += g->h2d;
            c->counts.copies_d2h += g->d2h;
            ck(c, cudaGraphLaunch(g->exec, c->st), "graph launch");
            return SMOL_STEP_REPLAYED;
        }
    }
    if (ck(c, cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal), "begin capture")) return SMOL_STEP_RUN;
    c->capturing = 1;
    c->capture_broken = 0;
    c->capture_retry = 0;
    c->cap_h2d = c->cap_d2h = 0;
    c->cap_tokens = b->n_tokens;
    c->cap_out = b->n_out;
    return SMOL_STEP_CAPTURE;
}

/* Ends a record: keeps and launches it (0), or -1 when it failed: nothing ran, and graphs are
 * turned off for this backend (a step that cannot be recorded once will not be later). */
static int cu_step_end(struct smol_backend *be)
{
    struct cuda *c = C(be);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    c->capturing = 0;
    cudaGraphExec_t x = NULL;
    if (e == cudaSuccess && !c->capture_broken) e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (c->capture_broken && c->capture_retry && e == cudaSuccess) {  /* buffers made while recording: once more */
        c->capture_retry = 0;
        cudaGetLastError();
        if (x) cudaGraphExecDestroy(x);
        return -1;
    }
    if (e != cudaSuccess || c->capture_broken) {
        cudaGetLastError();
        fprintf(stderr, "<4>cuda: a decode step could not be recorded (%s): graphs off\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "an op needed the host");
        c->opts.graphs = 0;
        if (x) cudaGraphExecDestroy(x);
        return -1;
    }
    struct graph *slot;
    if (c->n_graphs < MAX_GRAPHS) {
        slot = &c->graphs[c->n_graphs++];
    } else {
        slot = &c->graphs[c->next_graph];
        c->next_graph = (c->next_graph + 1) % MAX_GRAPHS;
        cudaGraphExecDestroy(slot->exec);
    }
    slot->n_tokens = c->cap_tokens;
    slot->n_out = c->cap_out;
    slot->gen = c->gen;
    slot->h2d = c->cap_h2d;
    slot->d2h = c->cap_d2h;
    slot->exec = x;
    c->counts.graph_launches++;
    c->counts.copies_h2d += slot->h2d;
    c->counts.copies_d2h += slot->d2h;
    ck(c, cudaGraphLaunch(x, c->st), "graph launch");
    return 0;
}

static double cu_mark(struct smol_backend *be)
{
    struct cuda *c = C(be);
    for (int i = 0; i < 2; i++)
        if (!c->mark_ev[i] && ck(c, cudaEventCreate(&c->mark_ev[i]), "event")) return -1;
    cudaEvent_t cur = c->mark_ev[c->mark_n & 1], prev = c->mark_ev[(c->mark_n + 1) & 1];
    ck(c, cudaEventRecord(cur, c->st), "event");
    ck(c, cudaEventSynchronize(cur), "event");
    synced(c);
    float ms = 0.0f;
    if (c->mark_n++ > 0) ck(c, cudaEventElapsedTime(&ms, prev, cur), "event");
    return c->failed == cudaSuccess ? ms : -1;
}

static void cu_counts(struct smol_backend *be, struct smol_cuda_counts *out)
{
    *out = C(be)->counts;
#ifdef SMOL_CUDA_EMU
    struct emu_counters e;
    emu_get_counters(&e);
    out->kernels = e.kernels;
#else
    out->kernels = -1;  /* the device build does not count its kernels (a replay's nodes run unseen) */
#endif
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */

static void cu_destroy(struct smol_backend *be)
{
    struct cuda *c = C(be);
    cudaStreamSynchronize(c->st);
    drop_graphs(c);
    for (int i = 0; i < 2; i++)
        if (c->mark_ev[i]) cudaEventDestroy(c->mark_ev[i]);
    cudaFree(c->xq);
    cudaFree(c->xs);
    cudaFree(c->x16);
    cudaFree(c->gpart);
    cudaFree(c->gtick);
    smol_lt_free(&c->lt);
    cudaFreeHost(c->stage);
    for (int i = 0; i < c->n_weights; i++) cudaFree(c->weights[i]);
    for (int k = 0; k < SLOT_COUNT; k++)
        if (!c->slot[k].packed) {
            cudaFree(c->slot[k].dev);
            free(c->slot[k].host);
        }
    cudaFree(c->pk_dev);
    free(c->pk_host);
    cudaFreeHost(c->step_ids_host);
    free(c->sample_build);
    cudaFree(c->part);
    cudaFree(c->sample_out);
    cudaFree(c->fx_a);
    cudaFree(c->fx_b);
    cudaFree(c->lq);
    cudaFree(c->laq);
    cudaFree(c->las);
    cudaFree(c->lcnt);
    cudaFree(c->rope_cs);
    cudaFree(c->lp_dev);
    cudaFree(c->pbar);
    free(c->lp_host);
    cudaStreamDestroy(c->st);
    free(c->weights);
    free(c->kv_build);
    free(c->tile_build);
    free(c);
    free(be);
}

static enum smol_err cu_new(struct smol_backend **out, int device, const struct smol_cuda_opts *opts, char *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        /* no device, or no driver at all (CUDA words that "driver version is insufficient") */
        if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
            return errf(err, SMOL_EUNSUPPORTED, "cuda: no NVIDIA GPU/driver found (cudaGetDeviceCount: %s)",
                        cudaGetErrorString(e));
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
    struct smol_lt *lt = NULL;
    if (opts && opts->gemm == SMOL_CUDA_GEMM_LT) {  /* refused where the plugin has no cuBLASLt */
        char msg[256];
        if (!(lt = smol_lt_new(msg, sizeof msg))) return errf(err, SMOL_EUNSUPPORTED, "%s", msg);
    }
    struct smol_backend *be = (struct smol_backend *)calloc(1, sizeof *be);
    struct cuda *c = (struct cuda *)calloc(1, sizeof *c);
    if (!be || !c || (e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess) {
        free(be);
        free(c);
        smol_lt_free(&lt);
        return errf(err, SMOL_ENOMEM, "cuda: cannot create the backend%s%s", e ? ": " : "",
                    e ? cudaGetErrorString(e) : "");
    }
    c->device = device;
    c->n_sm = prop.multiProcessorCount;
    if (opts) c->opts = *opts;
    c->lt = lt;
    if (cudaMallocHost((void **)&c->stage, STAGE_BYTES) != cudaSuccess) {  /* uploads from pageable memory then */
        cudaGetLastError();
        c->stage = NULL;
    }
#ifdef SMOL_CUDA_EMU
    be->name = "cuda-emu";
#else
    be->name = "cuda";
#endif
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
    be->matmul_n = cu_matmul_n;
    be->norm_qkv = cu_norm_qkv;
    be->rope_store = cu_rope_store;
    be->matmul_add = cu_matmul_add;
    be->ffn = cu_ffn;
    be->layers = cu_layers;
    be->step_sample = cu_step_sample;
    be->step_ids = cu_step_ids;
    be->step_begin = cu_step_begin;
    be->step_end = cu_step_end;
    fprintf(stderr, "<6>cuda: device %d: %s, sm_%d%d, %d SMs, %.1f GiB; matvec=%s fuse=%s graphs=%s gemm=%s%s attn=%s\n",
            device, prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0,
            c->opts.matvec == SMOL_CUDA_MATVEC_Q8K ? "q8k" : c->opts.matvec == SMOL_CUDA_MATVEC_Q8 ? "q8" : "f32",
            c->opts.fuse == SMOL_CUDA_FUSE_LAYER ? "layer" : c->opts.fuse ? "on" : "off",
            c->opts.graphs == SMOL_CUDA_GRAPHS_BUCKET ? "bucket" : c->opts.graphs ? "on" : "off",
            c->opts.gemm == SMOL_CUDA_GEMM_LT ? "lt" : c->opts.gemm == SMOL_CUDA_GEMM_IMMA ? "imma" :
            c->opts.gemm == SMOL_CUDA_GEMM_MMA ? "mma" : "tiled",
            c->opts.gemm_fuse ? " gemm_fuse=on" : "", c->opts.attn == SMOL_CUDA_ATTN_TILED ? "tiled" : c->opts.attn == SMOL_CUDA_ATTN_PREFILL ? "prefill" : "paged");
    *out = be;
    return SMOL_OK;
}

static const struct smol_cuda_plugin the_plugin = {SMOL_CUDA_PLUGIN_ABI, cu_new, cu_sample, cu_mark, cu_counts};

extern "C" __attribute__((visibility("default"))) const struct smol_cuda_plugin *smol_cuda_plugin_v1(void)
{
    return &the_plugin;
}
