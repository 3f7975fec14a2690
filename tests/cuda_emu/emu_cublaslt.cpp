/*
 * emu_cublaslt.cpp - cuBLASLt on the host emulator (include/cublasLt.h says which subset): the
 * descriptors as plain structs, the heuristic as one algorithm, cublasLtMatmul as a reference
 * GEMM run as one kernel of one thread on the stream (emu_submit), so that a stream capture
 * records it as a node and a graph replay runs it again, reading its operands as they are then.
 *
 * The reference: every element of A, B (and C) decoded exactly (bf16 and f16 are subsets of
 * f32), products accumulated in double, D = alpha * op(A) op(B) + beta * C rounded once to
 * D's type; C is not read when beta is 0, as the library does not (fresh emulated memory is
 * NaN, so a GEMM that read it would show).  Operands are checked to lie inside device
 * allocations (every byte a layout spans), as the emulated runtime checks copies.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "cuda_runtime.h"
#include "cublasLt.h"

struct cublasLtContext { int magic; };
struct emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t pointer_mode, trans_a, trans_b, epilogue;
};
struct emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order, batch;
};
struct emu_lt_pref {
    uint64_t max_ws;
    uint32_t align[4];  /* minimum alignment of A, B, C, D the algorithm may assume (bytes) */
};

#define LT_MAGIC 0x4c54656d
#define ALGO_MAGIC 0x656d752d4c54ull

static cublasStatus_t refuse(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cublasStatus_t refuse(cublasStatus_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: cublasLt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (status %d)\n", (int)s);
    va_end(ap);
    return s;
}

/* ---- handle, descriptors ---------------------------------------------------------------------- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasLtContext{LT_MAGIC};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h || h->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul desc: compute type %d with scale type %d not emulated",
                      (int)compute, (int)scale);
    *d = new emu_lt_desc{compute, scale, CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

/* every attribute the subset has is an int32 */
static cublasStatus_t get_i32(const void *buf, size_t size, int32_t *v)
{
    if (!buf || size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(v, buf, sizeof *v);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    int32_t v;
    if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (get_i32(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (v < CUBLAS_OP_N || v > CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->trans_a : d->trans_b) = v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        if (v != CUBLASLT_POINTER_MODE_HOST)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul desc: pointer mode %d not emulated", (int)v);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (v != CUBLASLT_EPILOGUE_DEFAULT)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul desc: epilogue %d not emulated", (int)v);
        return CUBLAS_STATUS_SUCCESS;
    default:
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul desc: attribute %d not emulated", (int)attr);
    }
}

static int type_ok(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }
static size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (!type_ok(type)) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout: data type %d not emulated", (int)type);
    *l = new emu_lt_layout{type, rows, cols, ld, CUBLASLT_ORDER_COL, 1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    int32_t v;
    if (!l) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (attr == CUBLASLT_MATRIX_LAYOUT_ORDER) {
        if (get_i32(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
        if (v != CUBLASLT_ORDER_COL && v != CUBLASLT_ORDER_ROW)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout: order %d not emulated", (int)v);
        l->order = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
        if (get_i32(buf, size, &v)) return CUBLAS_STATUS_INVALID_VALUE;
        if (v != 1) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout: batch count %d not emulated", (int)v);
        return CUBLAS_STATUS_SUCCESS;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout: attribute %d not emulated", (int)attr);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = new emu_lt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    if (!p) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        uint32_t v;
        if (!buf || size != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (!v || (v & (v - 1)) || v > 256) return CUBLAS_STATUS_INVALID_VALUE;
        p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference: attribute %d not emulated", (int)attr);
    if (!buf || size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->max_ws, buf, sizeof p->max_ws);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the problem ------------------------------------------------------------------------------ */

/* (i, j) of a layout: its element offset */
static inline size_t at(const emu_lt_layout *l, uint64_t i, uint64_t j)
{
    return l->order == CUBLASLT_ORDER_COL ? i + j * (size_t)l->ld : i * (size_t)l->ld + j;
}

/* bytes a layout spans: up to its last element */
static size_t span(const emu_lt_layout *l)
{
    return (at(l, l->rows - 1, l->cols - 1) + 1) * type_bytes(l->type);
}

/* m, n, k of op(A) op(B) against C and D, or the status the library gives */
static cublasStatus_t check(cublasLtHandle_t h, const emu_lt_desc *op, const emu_lt_layout *a, const emu_lt_layout *b,
                            const emu_lt_layout *c, const emu_lt_layout *d, uint64_t *m, uint64_t *n, uint64_t *k)
{
    if (!h || h->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
    const emu_lt_layout *ls[4] = {a, b, c, d};
    for (const emu_lt_layout *l : ls) {
        if (!l->rows || !l->cols) return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: an empty matrix (%ld x %ld)",
                                                (long)l->rows, (long)l->cols);
        if (l->ld < (int64_t)(l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: leading dimension %ld under the matrix's %ld",
                          (long)l->ld, (long)(l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols));
    }
    if (a->type != b->type || (d->type != CUDA_R_32F && d->type != a->type) || c->type != d->type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul: A type %d, B type %d, C type %d, D type %d (A and B of one type, C = D of f32 or A's)",
                      (int)a->type, (int)b->type, (int)c->type, (int)d->type);
    *m = op->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
    *k = op->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t kb = op->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
    *n = op->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
    if (kb != *k) return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: op(A) has k %ld, op(B) %ld", (long)*k, (long)kb);
    if (d->rows != *m || d->cols != *n || c->rows != *m || c->cols != *n)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: D (and C) must be %ld x %ld", (long)*m, (long)*n);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    uint64_t m, n, k;
    if (!returned || !results || requested < 1 || !pref) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    const cublasStatus_t s = check(h, op, a, b, c, d, &m, &n, &k);
    if (s) return s;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    results[0].algo.data[1] = m;
    results[0].algo.data[2] = n;
    results[0].algo.data[3] = k;
    for (int i = 0; i < 4; i++) results[0].algo.data[4 + i] = pref->align[i];  /* what the algorithm assumes */
    results[0].workspaceSize = 0;  /* the reference needs none */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the reference GEMM, one kernel on the stream --------------------------------------------- */

struct gemm_job {
    float alpha, beta;
    uint64_t m, n, k;
    int ta, tb;
    emu_lt_layout a, b, c, d;
    const void *A, *B, *C;
    void *D;
};

static inline double load(const emu_lt_layout *l, const void *p, size_t i)
{
    if (l->type == CUDA_R_32F) return ((const float *)p)[i];
    const uint16_t u = ((const uint16_t *)p)[i];
    return l->type == CUDA_R_16BF ? smol_bf16_to_f32(u) : smol_half_to_f32(u);
}

static inline void store(const emu_lt_layout *l, void *p, size_t i, double v)
{
    if (l->type == CUDA_R_32F) ((float *)p)[i] = (float)v;
    else if (l->type == CUDA_R_16BF) ((uint16_t *)p)[i] = smol_f32_to_bf16((float)v);
    else ((uint16_t *)p)[i] = smol_f32_to_half((float)v);
}

/* op(B) decoded once (n columns of k), then a row of op(A) at a time; the dot in double with four
 * partial sums (the emulated prefill's head is ~2 G products: a single chain would be slow) */
static void gemm_thunk(void *ctx)
{
    const gemm_job *j = (const gemm_job *)ctx;
    const size_t k = j->k;
    std::vector<float> bt(j->n * k), ar(k);  /* bf16 / f16 / f32 values are exact in float */
    for (uint64_t col = 0; col < j->n; col++)
        for (uint64_t p = 0; p < k; p++)
            bt[col * k + p] = (float)load(&j->b, j->B, j->tb == CUBLAS_OP_N ? at(&j->b, p, col) : at(&j->b, col, p));
    for (uint64_t row = 0; row < j->m; row++) {
        for (uint64_t p = 0; p < k; p++)
            ar[p] = (float)load(&j->a, j->A, j->ta == CUBLAS_OP_N ? at(&j->a, row, p) : at(&j->a, p, row));
        for (uint64_t col = 0; col < j->n; col++) {
            const float *b = &bt[col * k];
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            size_t p = 0;
            for (; p + 4 <= k; p += 4) {
                s0 += (double)ar[p] * b[p];
                s1 += (double)ar[p + 1] * b[p + 1];
                s2 += (double)ar[p + 2] * b[p + 2];
                s3 += (double)ar[p + 3] * b[p + 3];
            }
            for (; p < k; p++) s0 += (double)ar[p] * b[p];
            double v = (double)j->alpha * ((s0 + s1) + (s2 + s3));
            if (j->beta != 0.0f) v += (double)j->beta * load(&j->c, j->C, at(&j->c, row, col));
            store(&j->d, j->D, at(&j->d, row, col), v);
        }
    }
}
static void gemm_free(void *ctx) { delete (gemm_job *)ctx; }
static void *gemm_copy(const void *ctx) { return new gemm_job(*(const gemm_job *)ctx); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream)
{
    uint64_t m, n, k;
    cublasStatus_t s = check(h, op, a, b, c, d, &m, &n, &k);
    if (s) return s;
    if (!alpha || !beta || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo && algo->data[0] != ALGO_MAGIC)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: an algorithm the heuristic did not give");
    if (workspace_bytes && !emu_is_device(workspace, workspace_bytes))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: workspace of %ld bytes not in device memory",
                      (long)workspace_bytes);
    gemm_job j;
    memcpy(&j.alpha, alpha, sizeof j.alpha);  /* pointer mode host: read now, as the library reads them */
    memcpy(&j.beta, beta, sizeof j.beta);
    if (j.beta != 0.0f && !C) return CUBLAS_STATUS_INVALID_VALUE;
    if (C == D && (c->order != d->order || c->ld != d->ld))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: C in place of D needs D's layout (ld %ld vs %ld)",
                      (long)c->ld, (long)d->ld);
    const struct { const void *p; const emu_lt_layout *l; const char *name; } ops[4] = {
        {A, a, "A"}, {B, b, "B"}, {j.beta != 0.0f ? C : NULL, c, "C"}, {D, d, "D"}};
    for (int i = 0; i < 4; i++) {
        const auto &o = ops[i];
        if (o.p && !emu_is_device(o.p, span(o.l)))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: matrix %s (%ld bytes) is not in one device allocation",
                          o.name, (long)span(o.l));
        /* the algorithm's alignment: the heuristic's preference (256 bytes without an algorithm) */
        const uint64_t al = algo ? algo->data[4 + i] : 256;
        if (o.p && (uintptr_t)o.p % al)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: matrix %s at %p is not %lu-byte aligned (the algorithm "
                          "assumes it: lower the preference's MIN_ALIGNMENT)", o.name, o.p, (unsigned long)al);
    }
    j.m = m, j.n = n, j.k = k;
    j.ta = op->trans_a, j.tb = op->trans_b;
    j.a = *a, j.b = *b, j.c = *c, j.d = *d;
    j.A = A, j.B = B, j.C = C, j.D = D;
    emu_kernel_run r;
    r.name = "cublasLtMatmul";
    r.grid = dim3(1, 1, 1);
    r.block = dim3(1, 1, 1);
    r.smem = 0;
    r.cooperative = 0;
    r.thunk = gemm_thunk;
    r.ctx = new gemm_job(j);
    r.free_ctx = gemm_free;
    r.copy_ctx = gemm_copy;
    return emu_submit(stream, &r) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
