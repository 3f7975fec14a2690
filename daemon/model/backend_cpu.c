/*
 * backend_cpu.c - the CPU backend: ops of backend.h over host memory, split
 * across a thread pool.
 *
 * Matmul quantizes the activations once per call into the weight type's
 * vec_dot_type (q8_K for the K-quants, as llama.cpp does), then hands out
 * chunks of weight rows to threads; each chunk goes to the kernel table's
 * tiled gemm (kernels/cpu_kernels.h), which decodes a weight block once per
 * tile of 4-8 tokens while the chunk's rows stay hot in L2 (decode: one
 * token, a streaming dot with prefetch).  Formats without a gemm fall back
 * to one vec_dot per (row, token).  Chunks shrink for small matrices so
 * every thread gets several.  SiLU and softmax come from the table too
 * (SIMD exp).
 *
 * Attention streams one sequence's pages once per (token, kv head) task and
 * serves all query heads of the GQA group from it.  No allocation happens
 * after reserve().
 */
#include "daemon/model/backend.h"
#include "daemon/model/kv.h"
#include "daemon/model/threadpool.h"
#include "kernels/quant_ref.h"
#include "kernels/cpu_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DECODE_TOKENS 8 /* up to one kernel tile: weights streamed once per call */

#ifndef ROWS_PER_TASK
#define ROWS_PER_TASK 64
#endif

struct cpu {
    struct smol_pool *pool;
    const struct smol_cpu_kernels *k;
    uint8_t *xq;            /* quantized activations [max_tokens][max_row_bytes] */
    size_t xq_row;          /* bytes per row of xq */
    float *att;             /* per-thread scores: [n_threads][att_stride] */
    int *att_grp;           /* attention's token groups: [max_tokens + 1] */
    size_t att_stride;
    struct mm_part *parts;  /* a matmul's plan: [MAX_MM_PARTS] */
    void **packed;          /* repacked weight copies, freed with the backend */
    int n_packed, cap_packed;
    int max_tokens, max_cols, max_ctx;
};

static struct cpu *C(struct smol_backend *be) { return be->impl; }

/* ---- memory ------------------------------------------------------------ */

static void *cpu_alloc(struct smol_backend *be, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    memset(p, 0, n);
    return p;
}

static void cpu_free(struct smol_backend *be, void *p) { free(p); }
static void cpu_to_host(struct smol_backend *be, void *dst, const void *src, size_t n) { if (dst != src) memcpy(dst, src, n); }
/* Weights of a type the kernel table can repack (q4_K, q6_K, q4_1, q8_0:
 * groups of 16 rows in the AVX-512 table's lanes, of 8 rows in the AVX2 and
 * AVX-VNNI tables'; pack_rows) are copied once into that layout, and their pages of the
 * file mapping are dropped from the process (they stay in the page cache):
 * the copy replaces them, so resident memory stays about the file's size,
 * and peak RSS is that plus one tensor.  A weight shared by two names (tied
 * embeddings) is repacked once. */
static enum smol_err cpu_upload(struct smol_backend *be, struct smol_weight *w, char *err)
{
    struct cpu *c = C(be);
    const uint32_t t = w->type;
    if (w->dev || t >= SMOL_TYPE_COUNT || !c->k->pack[t] || w->rows % c->k->pack_rows[t]) return SMOL_OK;
    const size_t bytes = (size_t)w->rows * w->row_bytes;
    if (c->n_packed == c->cap_packed) {
        int cap = c->cap_packed ? 2 * c->cap_packed : 64;
        void **p = realloc(c->packed, (size_t)cap * sizeof *p);
        if (!p) return smol_errf(err, SMOL_ENOMEM, "cpu backend: out of memory repacking '%s'", w->name);
        c->packed = p;
        c->cap_packed = cap;
    }
    void *p = NULL;
    const size_t huge = 2u << 20; /* transparent huge pages where the system allows them (madvise mode): a
                                   * fault per 2 MiB when the copy is written, fewer TLB misses when read */
    if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes))
        return smol_errf(err, SMOL_ENOMEM, "cpu backend: cannot allocate %zu bytes to repack '%s'", bytes, w->name);
#ifdef MADV_HUGEPAGE
    if (bytes >= huge) madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    c->k->pack[t](w->cols, w->data, w->row_bytes, w->rows, p);
    c->packed[c->n_packed++] = p;
    w->dev = p;
    if (w->file_backed) {
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t lo = ((uintptr_t)w->data + pg - 1) / pg * pg, hi = ((uintptr_t)w->data + bytes) / pg * pg;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return SMOL_OK;
}

static enum smol_err cpu_reserve(struct smol_backend *be, int max_tokens, int max_cols, int max_ctx, char *err)
{
    struct cpu *c = C(be);
    if (max_tokens <= c->max_tokens && max_cols <= c->max_cols && max_ctx <= c->max_ctx) return SMOL_OK;
    if (max_tokens < c->max_tokens) max_tokens = c->max_tokens;
    if (max_cols < c->max_cols) max_cols = c->max_cols;
    if (max_ctx < c->max_ctx) max_ctx = c->max_ctx;
    free(c->xq);
    free(c->att);
    free(c->att_grp);
    /* widest activation format is f32 (4 B/elt); q8_K needs 292 B per 256 */
    c->xq_row = ((size_t)max_cols * 4 + 63) / 64 * 64;
    c->att_stride = ((size_t)max_ctx * 16 + 15) / 16 * 16;  /* up to 16 query heads per kv head */
    c->xq = cpu_alloc(be, c->xq_row * (size_t)max_tokens);
    c->att = cpu_alloc(be, c->att_stride * sizeof(float) * (size_t)be->n_threads);
    c->att_grp = malloc(((size_t)max_tokens + 1) * sizeof *c->att_grp);
    if (!c->xq || !c->att || !c->att_grp) return smol_errf(err, SMOL_ENOMEM, "cpu backend: cannot allocate scratch");
    c->max_tokens = max_tokens;
    c->max_cols = max_cols;
    c->max_ctx = max_ctx;
    return SMOL_OK;
}

/* ---- row-wise ops ------------------------------------------------------- */

struct rows_job {
    const struct smol_backend *be;
    float *out;
    const float *x, *y;
    const struct smol_weight *w;
    const struct smol_cpu_kernels *k;
    const int32_t *ids;
    int n, dim;
    float eps;
};

static void get_rows_task(void *a, int t, int th)
{
    struct rows_job *j = a;
    const struct smol_type_traits *tr = smol_type_traits(j->w->type);
    if (j->w->dev) { /* repacked: the row back in its own format first */
        uint8_t row[j->w->row_bytes];
        j->k->unpack_row[j->w->type](j->w->cols, j->w->dev, j->ids[t], row);
        tr->dequant(row, j->out + (size_t)t * j->dim, j->dim);
        return;
    }
    tr->dequant((const uint8_t *)j->w->data + (size_t)j->ids[t] * j->w->row_bytes, j->out + (size_t)t * j->dim,
                j->dim);
}

static void cpu_get_rows(struct smol_backend *be, float *out, const struct smol_weight *w, const int32_t *ids, int n)
{
    struct rows_job j = {.out = out, .w = w, .ids = ids, .n = n, .dim = w->cols, .k = C(be)->k};
    smol_pool_run(C(be)->pool, n, get_rows_task, &j);
}

static void rmsnorm_task(void *a, int t, int th)
{
    struct rows_job *j = a;
    smol_rmsnorm_ref(j->out + (size_t)t * j->dim, j->x + (size_t)t * j->dim, j->w->data, j->dim, j->eps);
}

static void cpu_rmsnorm(struct smol_backend *be, float *out, const float *x, const struct smol_weight *w, int n,
                        int dim, float eps)
{
    struct rows_job j = {.out = out, .x = x, .w = w, .n = n, .dim = dim, .eps = eps};
    smol_pool_run(C(be)->pool, n, rmsnorm_task, &j);
}

#define ELT_CHUNK 16384

static void silu_task(void *a, int t, int th)
{
    struct rows_job *j = a;
    size_t off = (size_t)t * ELT_CHUNK;
    int len = j->n - (int)off < ELT_CHUNK ? j->n - (int)off : ELT_CHUNK;
    j->k->silu_mul(j->out + off, j->x + off, len);
}

static void cpu_silu_mul(struct smol_backend *be, float *gate, const float *up, int n)
{
    struct rows_job j = {.out = gate, .x = up, .n = n, .k = C(be)->k};
    smol_pool_run(C(be)->pool, (n + ELT_CHUNK - 1) / ELT_CHUNK, silu_task, &j);
}

/* ELT_CHUNK is a power of two: chunks hold whole groups */
static void hadamard_task(void *a, int t, int th)
{
    struct rows_job *j = a;
    size_t off = (size_t)t * ELT_CHUNK;
    int len = j->n - (int)off < ELT_CHUNK ? j->n - (int)off : ELT_CHUNK;
    smol_hadamard_ref(j->out + off, len, j->dim);
}

static void cpu_hadamard(struct smol_backend *be, float *x, int n, int group)
{
    SMOL_ASSERT(group > 0 && group <= ELT_CHUNK && !(group & (group - 1)) && n % group == 0);
    struct rows_job j = {.out = x, .n = n, .dim = group};
    smol_pool_run(C(be)->pool, (n + ELT_CHUNK - 1) / ELT_CHUNK, hadamard_task, &j);
}

static void cpu_add(struct smol_backend *be, float *x, const float *y, int n) { smol_add_ref(x, y, n); }

static void cpu_gather_rows(struct smol_backend *be, float *out, const float *x, const int32_t *idx, int n, int dim)
{
    for (int i = 0; i < n; i++)
        if (out + (size_t)i * dim != x + (size_t)idx[i] * dim)
            memmove(out + (size_t)i * dim, x + (size_t)idx[i] * dim, (size_t)dim * sizeof *out);
}

/* ---- matmul -------------------------------------------------------------- */

/* A matmul call is cut into parts (a weight, a range of its rows) that the
 * pool hands out in order.  One call may carry several weights that read the
 * same input (Q, K, V; gate, up): the activations are quantized once and the
 * threads meet once instead of after each weight. */
struct mm_part { int w, r0, r1; };

#define MAX_MM_WEIGHTS 4
#define MAX_MM_PARTS 4096

struct mm_job {
    struct cpu *c;
    float *const *out;
    const struct smol_weight *const *w;
    const float *x;
    const uint8_t *xq;
    size_t xq_row;
    int n;
    smol_quantize_fn quant;
};

static void quant_task(void *a, int t, int th)
{
    struct mm_job *j = a;
    j->quant(j->x + (size_t)t * j->w[0]->cols, j->c->xq + (size_t)t * j->xq_row, j->w[0]->cols);
}

static void mm_task(void *a, int task, int th)
{
    struct mm_job *j = a;
    const struct mm_part *pt = &j->c->parts[task];
    const struct smol_weight *w = j->w[pt->w];
    const int r0 = pt->r0, nr = pt->r1 - pt->r0;
    float *out = j->out[pt->w] + r0;
    const smol_vec_dot_fn dot = j->c->k->vec_dot[w->type];
    const smol_gemm_fn gemm = j->c->k->gemm[w->type];
    if (w->dev) { /* repacked: r0 and nr are whole groups (plan_parts) */
        j->c->k->gemm_packed[w->type](w->cols, (const uint8_t *)w->dev + (size_t)r0 * w->row_bytes, nr, j->xq,
                                      j->xq_row, j->n, out, (size_t)w->rows);
        return;
    }
    const uint8_t *wd = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    if (gemm) {
        gemm(w->cols, wd, w->row_bytes, nr, j->xq, j->xq_row, j->n, out, (size_t)w->rows);
        return;
    }
    for (int t = 0; t < j->n; t++) {
        const void *xt = j->xq + (size_t)t * j->xq_row;
        float *o = out + (size_t)t * w->rows;
        for (int r = 0; r < nr; r++) o[r] = dot(w->cols, wd + (size_t)r * w->row_bytes, xt);
    }
}

/* rows a part is made of: a repacked weight's groups, else 4 */
static int row_unit(const struct cpu *c, const struct smol_weight *w)
{
    return w->dev ? c->k->pack_rows[w->type] : 4;
}

/* Prompt: parts of ROWS_PER_TASK rows (a token tile's activations stay in L1
 * across them; 64 rows of 2048 q4_K are 72 KiB of L2, and every part reads
 * all tokens' activations once: pp512 66 -> 70 tokens/s against 16 rows),
 * halved for small matrices so every thread gets several.
 *
 * Decode streams the weights once, and what costs is a thread left waiting
 * at the end of a call, or a prefetch stream broken: parts are guided, each
 * a 1/(2 threads) share of the rows still unplanned (the first ones long and
 * contiguous, the last ones ~32 KiB), so the threads finish within a
 * microsecond or so of each other. */
static int plan_parts(struct cpu *c, const struct smol_weight *const *ws, int n_w, int n, int n_threads)
{
    struct mm_part *p = c->parts;
    int np = 0;
    if (n <= DECODE_TOKENS) {
        long left = 0;
        for (int i = 0; i < n_w; i++) left += ws[i]->rows;
        for (int i = 0; i < n_w; i++) {
            const struct smol_weight *w = ws[i];
            const int unit = row_unit(c, w);
            int min_rows = (int)((32768 + w->row_bytes - 1) / w->row_bytes);
            min_rows = (min_rows + unit - 1) / unit * unit;
            const int last = np + (MAX_MM_PARTS - np) / (n_w - i) - 1; /* never reached for real shapes */
            for (int r = 0; r < w->rows;) {
                long want = (left + 2 * n_threads - 1) / (2 * n_threads);
                int rows = want < min_rows ? min_rows : (int)((want + unit - 1) / unit * unit);
                if (rows > w->rows - r || np == last) rows = w->rows - r;
                p[np++] = (struct mm_part){i, r, r + rows};
                r += rows;
                left -= rows;
            }
        }
        return np;
    }
    for (int i = 0; i < n_w; i++) {
        const struct smol_weight *w = ws[i];
        const int unit = row_unit(c, w);
        int rpt = ROWS_PER_TASK;
        while (rpt > unit && w->rows / rpt < 8 * n_threads) rpt /= 2;
        rpt = rpt / unit * unit;
        if (rpt < unit) rpt = unit;
        while ((w->rows + rpt - 1) / rpt > (MAX_MM_PARTS - np) / (n_w - i)) rpt *= 2; /* never for real shapes */
        for (int r = 0; r < w->rows; r += rpt) p[np++] = (struct mm_part){i, r, r + rpt < w->rows ? r + rpt : w->rows};
    }
    return np;
}

static void cpu_matmul_n(struct smol_backend *be, float *const *outs, const struct smol_weight *const *ws, int n_w,
                         const float *x, int n)
{
    struct cpu *c = C(be);
    const struct smol_type_traits *tr = smol_type_traits(ws[0]->type);
    SMOL_ASSERT(n_w >= 1 && n_w <= MAX_MM_WEIGHTS && tr && tr->supported && n <= c->max_tokens &&
                ws[0]->cols <= c->max_cols);
    for (int i = 1; i < n_w; i++)
        if (ws[i]->cols != ws[0]->cols || smol_type_traits(ws[i]->type)->vec_dot_type != tr->vec_dot_type) {
            for (int k = 0; k < n_w; k++) cpu_matmul_n(be, outs + k, ws + k, 1, x, n); /* inputs differ */
            return;
        }
    struct mm_job j = {.c = c, .out = outs, .w = ws, .x = x, .n = n};
    if (tr->vec_dot_type == SMOL_TYPE_F32) {
        j.xq = (const uint8_t *)x;
        j.xq_row = (size_t)ws[0]->cols * sizeof(float);
    } else {
        j.xq = c->xq;
        j.xq_row = smol_row_size(tr->vec_dot_type, ws[0]->cols);
        j.quant = c->k->quantize[tr->vec_dot_type];
        smol_pool_run(c->pool, n, quant_task, &j);
    }
    smol_pool_run(c->pool, plan_parts(c, ws, n_w, n, be->n_threads), mm_task, &j);
}

static void cpu_matmul(struct smol_backend *be, float *out, const struct smol_weight *w, const float *x, int n)
{
    cpu_matmul_n(be, &out, &w, 1, x, n);
}

/* ---- rope ---------------------------------------------------------------- */

struct rope_job {
    float *x;
    const int32_t *pos;
    int n_heads, head_dim;
    const struct smol_rope_params *rp;
};

static void rope_task(void *a, int t, int th)
{
    struct rope_job *j = a;
    float cs[512];
    SMOL_ASSERT(j->rp->n_dims <= 512);
    smol_rope_cache_ref(cs, j->pos[t], j->rp);
    smol_rope_apply_ref(j->x + (size_t)t * j->n_heads * j->head_dim, j->n_heads, j->head_dim, j->rp->n_dims, cs);
}

static void cpu_rope(struct smol_backend *be, float *x, const int32_t *pos, int n, int n_heads, int head_dim,
                     const struct smol_rope_params *rp)
{
    struct rope_job j = {x, pos, n_heads, head_dim, rp};
    smol_pool_run(C(be)->pool, n, rope_task, &j);
}

/* ---- KV cache -------------------------------------------------------------- */

static inline uint8_t *kv_at(const struct smol_kv *kv, void *base, int layer, int page, int head, int slot)
{
    return (uint8_t *)base + layer * kv->layer_bytes + (size_t)page * kv->page_bytes +
           ((size_t)head * SMOL_KV_PAGE + slot) * kv->row_bytes;
}

/* q8_0 rows are quantized as activations are (the table's quantizer, byte
 * for byte smol_quantize_q8_0_ref: d = amax / 127, q = round(x / d)) */
static void store_row(const struct smol_cpu_kernels *k, const struct smol_kv *kv, uint8_t *dst, const float *src)
{
    if (kv->type == SMOL_TYPE_F32) memcpy(dst, src, (size_t)kv->head_dim * 4);
    else if (kv->type == SMOL_TYPE_Q8_0) k->quantize[SMOL_TYPE_Q8_0](src, dst, kv->head_dim);
    else {
        smol_half *h = (smol_half *)dst;
        for (int i = 0; i < kv->head_dim; i++) h[i] = smol_f32_to_half(src[i]);
    }
}

static void cpu_kv_store(struct smol_backend *be, struct smol_kv *kv, int layer, const float *k, const float *v,
                         const struct smol_batch *b)
{
    const int kv_dim = kv->n_kv_heads * kv->head_dim;
    const struct smol_cpu_kernels *k_ = C(be)->k;
    for (int t = 0; t < b->n_tokens; t++) {
        const struct smol_kv_seq *s = b->seq[t];
        int pos = b->pos[t], page = s->pages[pos / SMOL_KV_PAGE], slot = pos % SMOL_KV_PAGE;
        for (int h = 0; h < kv->n_kv_heads; h++) {
            store_row(k_, kv, kv_at(kv, kv->k, layer, page, h, slot), k + (size_t)t * kv_dim + h * kv->head_dim);
            store_row(k_, kv, kv_at(kv, kv->v, layer, page, h, slot), v + (size_t)t * kv_dim + h * kv->head_dim);
        }
    }
}

static void cpu_kv_copy_page(struct smol_backend *be, struct smol_kv *kv, int dst, int src)
{
    for (int l = 0; l < kv->n_layers; l++) {
        memcpy(kv_at(kv, kv->k, l, dst, 0, 0), kv_at(kv, kv->k, l, src, 0, 0), kv->page_bytes);
        memcpy(kv_at(kv, kv->v, l, dst, 0, 0), kv_at(kv, kv->v, l, src, 0, 0), kv->page_bytes);
    }
}

/* ---- attention ------------------------------------------------------------- */

/* Attention: a task is one KV head of a group of consecutive batch tokens
 * of the same sequence (a speculative verify step, a prompt chunk), up to
 * 16 query heads in all (the scratch's rows): their G heads each are served
 * by one pass over the sequence's K and V rows instead of one pass per
 * token.  Rows every token of the group sees are done for all of them at
 * once, the few past the earliest token's position token by token: each
 * (query, row) score and each output's row-ordered sum are computed as for
 * the token alone, bit for bit (a token's logits do not depend on its
 * batch). */
struct att_job {
    struct cpu *c;
    float *out;
    const float *q;
    const struct smol_kv *kv;
    const struct smol_batch *b;
    const int *grp;     /* group i: batch tokens [grp[i], grp[i + 1]) */
    int layer, n_heads, group;
    float scale;
};

#define ATT_MAX_Q 16        /* query heads of one task (the scratch holds 16 rows of scores) */
#define ATT_MAX_HD 256

/* One pass over a group's K rows (values 0: scores sc[NQ][n_max] of the
 * queries qb) or V rows (1: ob += sc . V).  A page holds SMOL_KV_PAGE
 * consecutive rows of each head: a kernel call per page serves the group's
 * query heads for rows < n_min, then each token's own rows past n_min. */
static void att_pass(const struct att_job *j, int kvh, int t0, int T, int n_min, int n_max, int values,
                     const float *qb, float *sc, float *ob)
{
    const struct smol_kv *kv = j->kv;
    const struct smol_kv_seq *s = j->b->seq[t0];
    const struct smol_cpu_kernels *k = j->c->k;
    void *base = values ? kv->v : kv->k;
    const int hd = kv->head_dim, G = j->group;
    const size_t st = (size_t)n_max;
    for (int p = 0; p < n_max; p += SMOL_KV_PAGE) {
        const int rows = n_max - p < SMOL_KV_PAGE ? n_max - p : SMOL_KV_PAGE;
        const int shared = n_min - p < 0 ? 0 : n_min - p < rows ? n_min - p : rows;
        const int page = s->pages[p / SMOL_KV_PAGE];
        const void *next = p + SMOL_KV_PAGE < n_max ? kv_at(kv, base, j->layer, s->pages[p / SMOL_KV_PAGE + 1], kvh, 0) : NULL;
        for (int t = -1; t < T; t++) { /* -1: the group's shared rows, then token t's own */
            const int n = t < 0 ? 0 : j->b->pos[t0 + t] + 1;
            const int r0 = t < 0 ? 0 : shared, nr = t < 0 ? shared : (n < p + rows ? n : p + rows) - (p + shared);
            const int nq = t < 0 ? T * G : G, q0 = t < 0 ? 0 : t * G;
            if (nr <= 0) continue;
            const void *kvr = kv_at(kv, base, j->layer, page, kvh, r0);
            if (values)
                k->kv_accum[kv->type](hd, kvr, nr, sc + q0 * st + p + r0, st, nq, ob + (size_t)q0 * hd, t < 0 ? next : NULL);
            else
                k->kv_scores[kv->type](hd, kvr, nr, qb + (size_t)q0 * hd, nq, j->scale, sc + q0 * st + p + r0, st,
                                       t < 0 ? next : NULL);
        }
    }
}

static void att_task(void *a, int task, int th)
{
    struct att_job *j = a;
    const struct smol_kv *kv = j->kv;
    const int hd = kv->head_dim, kvh = task % kv->n_kv_heads, gi = task / kv->n_kv_heads;
    const int t0 = j->grp[gi], T = j->grp[gi + 1] - t0, G = j->group;
    const struct smol_cpu_kernels *k = j->c->k;
    float qb[ATT_MAX_Q * ATT_MAX_HD], ob[ATT_MAX_Q * ATT_MAX_HD];
    if (T <= 0) return;     /* (never: a group has a token; says so to -Wmaybe-uninitialized) */
    int n_min = j->b->pos[t0] + 1, n_max = n_min;
    for (int t = 0; t < T; t++) {
        const int n = j->b->pos[t0 + t] + 1;
        if (n < n_min) n_min = n;
        if (n > n_max) n_max = n;
        memcpy(qb + (size_t)t * G * hd, j->q + (size_t)(t0 + t) * j->n_heads * hd + (size_t)kvh * G * hd,
               (size_t)G * hd * sizeof *qb);
    }
    float *sc = j->c->att + (size_t)th * j->c->att_stride;   /* [T * G][n_max] */
    att_pass(j, kvh, t0, T, n_min, n_max, 0, qb, sc, NULL);
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++) k->softmax(sc + (size_t)(t * G + g) * n_max, j->b->pos[t0 + t] + 1);
    memset(ob, 0, (size_t)T * G * hd * sizeof *ob);
    att_pass(j, kvh, t0, T, n_min, n_max, 1, qb, sc, ob);
    for (int t = 0; t < T; t++)
        memcpy(j->out + (size_t)(t0 + t) * j->n_heads * hd + (size_t)kvh * G * hd, ob + (size_t)t * G * hd,
               (size_t)G * hd * sizeof *ob);
}

static void cpu_attention(struct smol_backend *be, float *out, const float *q, const struct smol_kv *kv, int layer,
                          const struct smol_batch *b, int n_heads, float scale)
{
    struct cpu *c = C(be);
    struct att_job j = {c, out, q, kv, b, c->att_grp, layer, n_heads, n_heads / kv->n_kv_heads, scale};
    SMOL_ASSERT(j.group <= ATT_MAX_Q && kv->head_dim <= ATT_MAX_HD && b->n_tokens <= c->max_tokens);
    const int tmax = ATT_MAX_Q / j.group;
    int n_grp = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        SMOL_ASSERT(b->pos[t] < c->max_ctx);
        if (!t || b->seq[t] != b->seq[t - 1] || t - c->att_grp[n_grp - 1] == tmax) c->att_grp[n_grp++] = t;
    }
    c->att_grp[n_grp] = b->n_tokens;
    smol_pool_run(c->pool, n_grp * kv->n_kv_heads, att_task, &j);
}

/* ---- lifecycle --------------------------------------------------------------- */

static void cpu_destroy(struct smol_backend *be)
{
    struct cpu *c = C(be);
    smol_pool_free(&c->pool);
    free(c->xq);
    free(c->att);
    free(c->att_grp);
    for (int i = 0; i < c->n_packed; i++) free(c->packed[i]);
    free(c->packed);
    free(c->parts);
    free(c);
    free(be);
}

enum smol_err smol_backend_cpu_new(struct smol_backend **out, int n_threads, char *err)
{
    *out = NULL;
    struct smol_backend *be = calloc(1, sizeof *be);
    struct cpu *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return smol_errf(err, SMOL_ENOMEM, "cpu backend: out of memory");
    }
    enum smol_err e = smol_pool_new(&c->pool, n_threads, err);
    if (e) {
        free(be);
        free(c);
        return e;
    }
    c->parts = calloc(MAX_MM_PARTS, sizeof *c->parts);
    if (!c->parts) {
        smol_pool_free(&c->pool);
        free(be);
        free(c);
        return smol_errf(err, SMOL_ENOMEM, "cpu backend: out of memory");
    }
    c->k = smol_cpu_kernels();
    *be = (struct smol_backend){
        .name = c->k->name, .impl = c, .n_threads = smol_pool_threads(c->pool),
        .destroy = cpu_destroy, .reserve = cpu_reserve, .alloc = cpu_alloc, .free = cpu_free,
        .to_host = cpu_to_host, .from_host = cpu_to_host, .upload_weight = cpu_upload, .get_rows = cpu_get_rows,
        .rmsnorm = cpu_rmsnorm, .matmul = cpu_matmul, .matmul_n = cpu_matmul_n, .rope = cpu_rope, .hadamard = cpu_hadamard, .kv_store = cpu_kv_store,
        .attention = cpu_attention, .silu_mul = cpu_silu_mul, .add = cpu_add,
        .gather_rows = cpu_gather_rows, .kv_copy_page = cpu_kv_copy_page,
    };
    *out = be;
    return SMOL_OK;
}

void smol_backend_free(struct smol_backend **be)
{
    if (!be || !*be) return;
    (*be)->destroy(*be);
    *be = NULL;
}
