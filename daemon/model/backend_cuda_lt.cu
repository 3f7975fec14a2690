/*
 * backend_cuda_lt.cu - the cuBLASLt GEMM of the CUDA backend (knob cuda_gemm = lt; the face in
 * backend_cuda_lt.cuh).
 *
 * An A/B against our own GEMMs (mmq_tc.cu): cuBLASLt is NVIDIA's tuned GEMM, shipped with the
 * toolkit, but it knows nothing of GGUF blocks.  So per mat-mul: the weight is decoded to bf16
 * into a scratch buffer (kernels/cuda/lt.cu, common.cuh's dq32: any type the model holds), the
 * activations are rounded to bf16 once (cuBLASLt pairs bf16 with bf16 only), and
 *     D[rows x n] = W_bf16^T[rows x cols] . X_bf16[cols x n]
 * in cuBLAS's column-major terms: our row-major W [rows][cols] is a column-major cols x rows
 * matrix (op T), our row-major x [n][cols] a column-major cols x n one (op N), and out [n][rows]
 * a column-major rows x n one: the "TN" GEMM, no copies.  f32 accumulate and output; the
 * residual-add mode is beta = 1 with C = D.  The extra traffic (writing and reading 2 bytes a
 * weight) is what this knob's A/B measures against the fused decoders.
 *
 * Plans: the matmul descriptor is made once; the layouts and the heuristic's algorithm once per
 * shape (m, n, k, ld of D), kept in a small table (replaced round-robin).  Scratch (the bf16
 * weight slab, the bf16 activations, cuBLASLt's workspace) is allocated at reserve, so a step
 * recorded as a CUDA graph can hold these calls (cuBLASLt is capturable with a workspace given).
 * A weight bigger than the slab (the 3B's 128K-row head) runs as several GEMMs on row slabs,
 * each writing its rows of out (D's leading dimension stays the full row count).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.cuh"
#include "daemon/model/backend_cuda_lt.cuh"

#if defined(SMOL_CUDA_LT) || defined(SMOL_CUDA_EMU)
#include <cublasLt.h>

#define LT_PLANS 64
#define LT_SLAB_ELEMS ((size_t)32 << 20)     /* bf16 weights decoded at once: 64 MiB */
#define LT_WORKSPACE ((size_t)32 << 20)      /* cuBLAS's advice for Hopper */

struct lt_plan {
    int m, n, k, ldd;
    uint32_t align;                     /* D's (and C's) alignment the algorithm was chosen for */
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct smol_lt {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;            /* A^T B, compute 32F, scale 32F */
    cublasLtMatmulPreference_t pref;    /* workspace <= ws_bytes */
    void *ws;
    size_t ws_bytes;
    uint16_t *wbf, *xbf;                /* bf16 weight slab, bf16 activations */
    size_t wbf_cap, xbf_cap;            /* elements */
    struct lt_plan plans[LT_PLANS];
    int n_plans, next;
    long made;
    int logged;
};

static void plan_drop(struct lt_plan *p)
{
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

struct smol_lt *smol_lt_new(char *err, size_t cap)
{
    struct smol_lt *lt = (struct smol_lt *)calloc(1, sizeof *lt);
    if (!lt) {
        snprintf(err, cap, "cuda: out of memory");
        return NULL;
    }
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasStatus_t s = cublasLtCreate(&lt->h);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescCreate(&lt->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&lt->pref);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, cap, "cuda: cuda_gemm = lt: cuBLASLt did not start (status %d)", (int)s);
        smol_lt_free(&lt);
        return NULL;
    }
    return lt;
}

void smol_lt_free(struct smol_lt **ltp)
{
    struct smol_lt *lt = *ltp;
    if (!lt) return;
    for (int i = 0; i < lt->n_plans; i++) plan_drop(&lt->plans[i]);
    if (lt->pref) cublasLtMatmulPreferenceDestroy(lt->pref);
    if (lt->op) cublasLtMatmulDescDestroy(lt->op);
    if (lt->h) cublasLtDestroy(lt->h);
    cudaFree(lt->ws);
    cudaFree(lt->wbf);
    cudaFree(lt->xbf);
    free(lt);
    *ltp = NULL;
}

cudaError_t smol_lt_reserve(struct smol_lt *lt, size_t w_elems, size_t x_elems)
{
    if (w_elems > LT_SLAB_ELEMS) w_elems = LT_SLAB_ELEMS;
    x_elems = (x_elems + 1) & ~(size_t)1;  /* the conversion writes pairs */
    cudaError_t e = cudaSuccess;
    if (!lt->ws) {
        e = cudaMalloc(&lt->ws, LT_WORKSPACE);
        if (e) return e;
        lt->ws_bytes = LT_WORKSPACE;
        const uint64_t wsb = lt->ws_bytes;
        if (cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb))
            return cudaErrorNotSupported;
    }
    if (w_elems > lt->wbf_cap) {
        cudaFree(lt->wbf);
        lt->wbf_cap = 0;
        if ((e = cudaMalloc((void **)&lt->wbf, w_elems * sizeof(uint16_t)))) return e;
        lt->wbf_cap = w_elems;
    }
    if (x_elems > lt->xbf_cap) {
        cudaFree(lt->xbf);
        lt->xbf_cap = 0;
        if ((e = cudaMalloc((void **)&lt->xbf, x_elems * sizeof(uint16_t)))) return e;
        lt->xbf_cap = x_elems;
    }
    return cudaSuccess;
}

int smol_lt_ok(const struct smol_lt *lt, const struct smol_weight *w, int n)
{
    return lt && w->dev && w->rows > 0 && w->cols > 0 && w->cols % 2 == 0 && w->type != SMOL_TYPE_F32 &&
           smol_cuda_type_ok(w->type) &&
           (size_t)n * w->cols <= lt->xbf_cap && (size_t)w->cols <= lt->wbf_cap;
}

/* the largest power of two <= 256 that divides p's address: cuBLASLt's algorithms assume 256-byte
 * aligned operands unless the preference says less (A and B are our scratch: 256) */
static uint32_t align_of(const void *p)
{
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

/* the plan of D[m x n] (leading dimension ldd, at an address aligned to align) = A^T[m x k] B[k x n]:
 * made once, then found */
static const struct lt_plan *plan_get(struct smol_lt *lt, int m, int n, int k, int ldd, uint32_t align,
                                      cublasStatus_t *st)
{
    for (int i = 0; i < lt->n_plans; i++) {
        const struct lt_plan *p = &lt->plans[i];
        if (p->m == m && p->n == n && p->k == k && p->ldd == ldd && p->align == align) return p;
    }
    struct lt_plan p;
    memset(&p, 0, sizeof p);
    p.m = m, p.n = n, p.k = k, p.ldd = ldd, p.align = align;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k);
    if (!s) s = cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldd);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    if (!s) s = cublasLtMatmulAlgoGetHeuristic(lt->h, lt->op, p.a, p.b, p.d, p.d, lt->pref, 1, &res, &found);
    if (!s && (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)) s = CUBLAS_STATUS_NOT_SUPPORTED;
    *st = s;
    if (s) {
        plan_drop(&p);
        return NULL;
    }
    p.algo = res.algo;
    lt->made++;
    struct lt_plan *slot;
    if (lt->n_plans < LT_PLANS) slot = &lt->plans[lt->n_plans++];
    else {
        slot = &lt->plans[lt->next];
        lt->next = (lt->next + 1) % LT_PLANS;
        plan_drop(slot);
    }
    *slot = p;
    return slot;
}

static cudaError_t lt_fail(struct smol_lt *lt, cublasStatus_t s, const char *what, int m, int n, int k)
{
    if (!lt->logged++)
        fprintf(stderr, "<3>cuda: cuda_gemm = lt: %s of %d x %d x %d: cuBLASLt status %d\n", what, m, n, k, (int)s);
    return cudaErrorNotSupported;
}

cudaError_t smol_lt_matmul(struct smol_lt *lt, float *const *outs, const struct smol_weight *const *ws, int n_w,
                           int add, const float *x, int n, cudaStream_t st)
{
    const int k = ws[0]->cols;
    cudaError_t e = smol_bf16_from_f32_cuda(lt->xbf, x, (size_t)n * k, st);
    const float alpha = 1.0f, beta = add ? 1.0f : 0.0f;
    for (int i = 0; i < n_w && !e; i++) {
        const struct smol_weight *w = ws[i];
        /* rows a slab: what the scratch holds, in multiples of 64 where it holds more (D's rows
         * then start 256-byte aligned past the first slab as at it) */
        size_t fit = lt->wbf_cap / (size_t)k;
        if (fit > 64) fit -= fit % 64;
        const int slab = (int)(fit < (size_t)w->rows ? fit : (size_t)w->rows);
        for (int r0 = 0; r0 < w->rows && !e; r0 += slab) {
            const int m = w->rows - r0 < slab ? w->rows - r0 : slab;
            e = smol_dequant_bf16_cuda(lt->wbf, w->type, (const uint8_t *)w->dev + (size_t)r0 * w->row_bytes,
                                       w->row_bytes, m, k, st);
            if (e) break;
            cublasStatus_t s;
            float *d = outs[i] + r0;
            const struct lt_plan *p = plan_get(lt, m, n, k, w->rows, align_of(d), &s);
            if (!p) return lt_fail(lt, s, "no algorithm", m, n, k);
            s = cublasLtMatmul(lt->h, lt->op, &alpha, lt->wbf, p->a, lt->xbf, p->b, &beta, d, p->d, d, p->d, &p->algo,
                               lt->ws, lt->ws_bytes, st);
            if (s) return lt_fail(lt, s, "cublasLtMatmul", m, n, k);
        }
    }
    return e;
}

long smol_lt_plans_made(const struct smol_lt *lt) { return lt ? lt->made : 0; }

#else /* a toolkit without cuBLASLt: the knob is refused */

struct smol_lt *smol_lt_new(char *err, size_t cap)
{
    snprintf(err, cap, "cuda: cuda_gemm = lt must be built with cuBLASLt: this plugin was built where the CUDA "
             "toolkit had no cublasLt.h / libcublasLt.so (the Makefile's CUBLASLT_HOME)");
    return NULL;
}
void smol_lt_free(struct smol_lt **lt) { *lt = NULL; }
cudaError_t smol_lt_reserve(struct smol_lt *, size_t, size_t) { return cudaErrorNotSupported; }
int smol_lt_ok(const struct smol_lt *, const struct smol_weight *, int) { return 0; }
cudaError_t smol_lt_matmul(struct smol_lt *, float *const *, const struct smol_weight *const *, int, int, const float *,
                           int, cudaStream_t)
{
    return cudaErrorNotSupported;
}
long smol_lt_plans_made(const struct smol_lt *) { return 0; }

#endif
