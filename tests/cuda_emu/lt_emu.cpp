/*
 * lt_emu.cpp - the pieces of cuda_gemm = lt on the host emulator: the emulated cublasLtMatmul
 * (emu_cublaslt.cpp) against a float64 product, the bf16 operands of kernels/cuda/lt.cu against
 * the scalar references bit for bit, and the backend's cuBLASLt path (backend_cuda_lt.cu) with
 * weights larger than its slab.  Each case prints one line ending in "ok (...)" or "FAIL (...)".
 *
 *  gemm     cublasLtMatmul of bf16 (and f32) operands, f32 output: "TN" (A transposed, the
 *           backend's layout) and plain "NN" column-major, row-major layouts with B transposed,
 *           leading dimensions wider than the matrices, alpha / beta, beta 0 (C not read: D starts
 *           as NaN) and beta 1 with C = D; every element within 1e-6 of the float64 product of the
 *           same decoded inputs, relative to sum |a||b| + |beta c|.
 *  refuse   what the library refuses, with its status: A and B of different types, a compute type
 *           not emulated, k that does not match, a leading dimension under the rows, an operand
 *           outside device memory, an epilogue, D less aligned than the algorithm was chosen for
 *           (taken once the preference says so); the heuristic returns no algorithm for those.
 *  capture  a matmul recorded in a stream capture runs only when the graph is replayed (twice:
 *           beta 1 adds twice), one kernel node a replay.
 *  dequant  smol_dequant_bf16_cuda for q4_K q5_K q6_K q8_0 q4_0 q4_1 q5_0 q5_1 f16 bf16 rows
 *           (with a row tail for f16) equals smol_dequant_*_ref rounded by smol_f32_to_bf16, as
 *           numbers (q5_0's zeros may come out +0 where the reference has -0); and
 *           smol_bf16_from_f32_cuda equals smol_f32_to_bf16 bit for bit.
 *  backend  smol_lt_matmul: q4_K weights of 100 rows on a 40-row slab (3 GEMMs on row slabs),
 *           two weights sharing one activation rounding, store and add, against float64 over the
 *           bf16-rounded operands; a second call of the same shapes makes no new plan.
 */
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <math.h>
#include "kernels/cuda/ops_cuda.cuh"
#include "daemon/model/backend_cuda_lt.cuh"
extern "C" {
#include "kernels/quant_ref.h"
}
#include <vector>
#include <random>

static std::mt19937 rng(12345);
static float urand() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); }

static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "lt_emu: %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}
static void cs(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "lt_emu: %s: status %d\n", what, (int)s);
        exit(2);
    }
}

template <class T> static T *upload(const std::vector<T> &v)
{
    T *d;
    ck(cudaMalloc((void **)&d, v.size() * sizeof(T)), "cudaMalloc");
    ck(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return d;
}
template <class T> static std::vector<T> download(const T *d, size_t n)
{
    std::vector<T> v(n);
    ck(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return v;
}

/* ---- gemm: the emulated cublasLtMatmul against float64 --------------------------------------- */

struct mat {
    int rows, cols, ld, order;  /* order: CUBLASLT_ORDER_COL / ROW */
    size_t at(int i, int j) const { return order == CUBLASLT_ORDER_COL ? i + (size_t)j * ld : (size_t)i * ld + j; }
    size_t size() const { return order == CUBLASLT_ORDER_COL ? (size_t)ld * cols : (size_t)ld * rows; }
};

static cublasLtMatrixLayout_t layout(cudaDataType t, const mat &m)
{
    cublasLtMatrixLayout_t l;
    cs(cublasLtMatrixLayoutCreate(&l, t, m.rows, m.cols, m.ld), "layout");
    if (m.order != CUBLASLT_ORDER_COL) {
        const int32_t o = m.order;
        cs(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof o), "order");
    }
    return l;
}

/* D (m x n) = alpha op(A) op(B) + beta C with C = D, A and B of type ab (bf16 or f32) */
static int gemm_case(const char *name, cudaDataType ab, int ta, int tb, int order, int m, int n, int k, float alpha,
                     float beta, cublasLtHandle_t h)
{
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    const int pad = 5;  /* leading dimensions wider than the matrices */
    const mat A = {ar, ac, (order == CUBLASLT_ORDER_COL ? ar : ac) + pad, order};
    const mat B = {br, bc, (order == CUBLASLT_ORDER_COL ? br : bc) + pad + 2, order};
    const mat D = {m, n, (order == CUBLASLT_ORDER_COL ? m : n) + pad + 1, order};
    /* the inputs as the GEMM reads them: bf16 bits (or f32), decoded exactly for the reference */
    std::vector<float> af(A.size()), bf(B.size()), base(D.size());
    std::vector<uint16_t> a16(A.size()), b16(B.size());
    for (size_t i = 0; i < af.size(); i++) a16[i] = smol_f32_to_bf16(urand()), af[i] = ab == CUDA_R_16BF ? smol_bf16_to_f32(a16[i]) : urand();
    for (size_t i = 0; i < bf.size(); i++) b16[i] = smol_f32_to_bf16(urand()), bf[i] = ab == CUDA_R_16BF ? smol_bf16_to_f32(b16[i]) : urand();
    for (float &v : base) v = urand();
    void *dA = ab == CUDA_R_16BF ? (void *)upload(a16) : (void *)upload(af);
    void *dB = ab == CUDA_R_16BF ? (void *)upload(b16) : (void *)upload(bf);
    float *dD;
    ck(cudaMalloc((void **)&dD, D.size() * sizeof(float)), "cudaMalloc");  /* fresh: NaN bytes */
    if (beta != 0.0f) ck(cudaMemcpy(dD, base.data(), base.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");

    cublasLtMatmulDesc_t op;
    cs(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const int32_t t1 = ta, t2 = tb;
    cs(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof t1), "transa");
    cs(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof t2), "transb");
    cublasLtMatrixLayout_t la = layout(ab, A), lb = layout(ab, B), ld = layout(CUDA_R_32F, D);
    cublasLtMatmulPreference_t pref;
    cs(cublasLtMatmulPreferenceCreate(&pref), "pref");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cs(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found), "heuristic");
    cs(cublasLtMatmul(h, op, &alpha, dA, la, dB, lb, &beta, dD, ld, dD, ld, &res.algo, NULL, 0, NULL), "matmul");
    const std::vector<float> got = download(dD, D.size());

    int bad = 0;
    double worst = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0, mag = 1e-30;
            for (int p = 0; p < k; p++) {
                const double x = af[ta == CUBLAS_OP_N ? A.at(i, p) : A.at(p, i)], y = bf[tb == CUBLAS_OP_N ? B.at(p, j) : B.at(j, p)];
                s += x * y;
                mag += fabs(x * y);
            }
            double want = alpha * s;
            if (beta != 0.0f) want += beta * base[D.at(i, j)], mag += fabs(beta * base[D.at(i, j)]);
            const double e = fabs(got[D.at(i, j)] - want) / mag;
            if (!(e <= 1e-6) && bad++ < 3)
                fprintf(stderr, "  %s (%d, %d): got %.9g want %.9g\n", name, i, j, (double)got[D.at(i, j)], want);
            if (e > worst || e != e) worst = e;
        }
    printf("gemm %-34s %3dx%-3d k %-3d alpha %.1f beta %.0f: %s (worst |d| / magnitude %.2g)\n", name, m, n, k,
           (double)alpha, (double)beta, bad ? "FAIL" : "ok", worst);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dD);
    return bad != 0;
}

/* ---- refuse: the statuses of what the emulation (and the library) does not take ---------------- */

static int refuse_cases(cublasLtHandle_t h)
{
    int fails = 0;
    auto expect = [&](const char *what, cublasStatus_t got, cublasStatus_t want) {
        const int ok = got == want;
        printf("refuse %-46s status %2d (want %2d): %s\n", what, (int)got, (int)want, ok ? "ok (the library's status)" : "FAIL (another status)");
        fails += !ok;
    };
    cublasLtMatmulDesc_t op = NULL, op16 = NULL;
    expect("compute type 16F", cublasLtMatmulDescCreate(&op16, CUBLAS_COMPUTE_16F, CUDA_R_16F), CUBLAS_STATUS_NOT_SUPPORTED);
    cs(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const int32_t epi = 2;  /* CUBLASLT_EPILOGUE_RELU */
    expect("epilogue relu", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
           CUBLAS_STATUS_NOT_SUPPORTED);
    const int64_t wide = 1;
    expect("attribute of the wrong size", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
           CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulPreference_t pref;
    cs(cublasLtMatmulPreferenceCreate(&pref), "pref");
    std::vector<uint16_t> z16(64 * 64, 0);
    std::vector<float> z32(64 * 64, 0.0f);
    uint16_t *a = upload(z16);
    float *b = upload(z32), *d = upload(z32);
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatrixLayout_t a16, b32, b16, d32, bk, dlow;
    cs(cublasLtMatrixLayoutCreate(&a16, CUDA_R_16BF, 8, 8, 8), "layout");
    cs(cublasLtMatrixLayoutCreate(&b32, CUDA_R_32F, 8, 8, 8), "layout");
    cs(cublasLtMatrixLayoutCreate(&b16, CUDA_R_16BF, 8, 8, 8), "layout");
    cs(cublasLtMatrixLayoutCreate(&d32, CUDA_R_32F, 8, 8, 8), "layout");
    cs(cublasLtMatrixLayoutCreate(&bk, CUDA_R_16BF, 9, 8, 9), "layout");
    cs(cublasLtMatrixLayoutCreate(&dlow, CUDA_R_32F, 8, 8, 4), "layout");
    cublasLtMatmulHeuristicResult_t res;
    int found = 7;
    expect("heuristic: A bf16 with B f32", cublasLtMatmulAlgoGetHeuristic(h, op, a16, b32, d32, d32, pref, 1, &res, &found),
           CUBLAS_STATUS_NOT_SUPPORTED);
    expect("heuristic: no algorithm given back", found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS,
           CUBLAS_STATUS_NOT_SUPPORTED);
    expect("matmul: A bf16 with B f32", cublasLtMatmul(h, op, &one, a, a16, b, b32, &zero, d, d32, d, d32, NULL, NULL, 0, NULL),
           CUBLAS_STATUS_NOT_SUPPORTED);
    expect("matmul: k of A 8, of B 9", cublasLtMatmul(h, op, &one, a, a16, a, bk, &zero, d, d32, d, d32, NULL, NULL, 0, NULL),
           CUBLAS_STATUS_INVALID_VALUE);
    expect("matmul: ld 4 under 8 rows", cublasLtMatmul(h, op, &one, a, a16, a, b16, &zero, d, dlow, d, dlow, NULL, NULL, 0, NULL),
           CUBLAS_STATUS_INVALID_VALUE);
    expect("matmul: A in host memory", cublasLtMatmul(h, op, &one, z16.data(), a16, a, b16, &zero, d, d32, d, d32, NULL, NULL, 0, NULL),
           CUBLAS_STATUS_INVALID_VALUE);
    expect("matmul: the same, all taken", cublasLtMatmul(h, op, &one, a, a16, a, b16, &zero, d, d32, d, d32, NULL, NULL, 0, NULL),
           CUBLAS_STATUS_SUCCESS);
    /* D 4 bytes into its allocation: an algorithm chosen for 256-byte alignment (the default) is
     * refused; one chosen with MIN_ALIGNMENT_D_BYTES = 4 (and C) takes it */
    cs(cublasLtMatmulAlgoGetHeuristic(h, op, a16, b16, d32, d32, pref, 1, &res, &found), "heuristic");
    expect("matmul: D 4-byte aligned, algorithm for 256",
           cublasLtMatmul(h, op, &one, a, a16, a, b16, &zero, d + 1, d32, d + 1, d32, &res.algo, NULL, 0, NULL),
           CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t four = 4;
    cs(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &four, sizeof four), "align");
    cs(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &four, sizeof four), "align");
    cs(cublasLtMatmulAlgoGetHeuristic(h, op, a16, b16, d32, d32, pref, 1, &res, &found), "heuristic");
    expect("matmul: D 4-byte aligned, algorithm for 4",
           cublasLtMatmul(h, op, &one, a, a16, a, b16, &zero, d + 1, d32, d + 1, d32, &res.algo, NULL, 0, NULL),
           CUBLAS_STATUS_SUCCESS);
    for (cublasLtMatrixLayout_t l : {a16, b32, b16, d32, bk, dlow}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return fails;
}

/* ---- capture: recorded, then replayed ----------------------------------------------------------- */

static int capture_case(cublasLtHandle_t h)
{
    const int m = 24, n = 16, k = 40;
    std::vector<uint16_t> a(k * m), b(k * n);
    std::vector<float> base(m * n);
    for (auto &v : a) v = smol_f32_to_bf16(urand());
    for (auto &v : b) v = smol_f32_to_bf16(urand());
    for (auto &v : base) v = urand();
    uint16_t *da = upload(a), *db = upload(b);
    float *dd = upload(base);
    cublasLtMatmulDesc_t op;
    cs(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const int32_t t = CUBLAS_OP_T;
    cs(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "transa");
    cublasLtMatrixLayout_t la, lb, ld;
    cs(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k), "layout");
    cs(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k), "layout");
    cs(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m), "layout");
    cudaStream_t st;
    ck(cudaStreamCreate(&st), "stream");
    const float one = 1.0f;
    ck(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "begin capture");
    cs(cublasLtMatmul(h, op, &one, da, la, db, lb, &one, dd, ld, dd, ld, NULL, NULL, 0, st), "matmul in capture");
    cudaGraph_t g;
    ck(cudaStreamEndCapture(st, &g), "end capture");
    const std::vector<float> before = download(dd, base.size());
    int bad = memcmp(before.data(), base.data(), base.size() * sizeof(float)) != 0;  /* nothing ran yet */
    cudaGraphExec_t x;
    ck(cudaGraphInstantiate(&x, g, 0), "instantiate");
    emu_counters c0, c1;
    emu_get_counters(&c0);
    ck(cudaGraphLaunch(x, st), "replay");
    ck(cudaGraphLaunch(x, st), "replay");
    ck(cudaStreamSynchronize(st), "sync");
    emu_get_counters(&c1);
    const std::vector<float> got = download(dd, base.size());
    double worst = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0, mag = fabs(base[i + j * m]) + 1e-30;
            for (int p = 0; p < k; p++) {
                const double v = (double)smol_bf16_to_f32(a[p + i * k]) * smol_bf16_to_f32(b[p + j * k]);
                s += v;
                mag += 2 * fabs(v);
            }
            const double e = fabs(got[i + j * m] - (base[i + j * m] + 2 * s)) / mag;
            if (!(e <= 2e-6)) bad++;
            if (e > worst || e != e) worst = e;
        }
    const long nodes = c1.graph_nodes - c0.graph_nodes, kernels = c1.kernels - c0.kernels;
    bad += nodes != 2 || kernels != 2;
    printf("capture cublasLtMatmul recorded, replayed twice (beta 1): %ld nodes, %ld kernels run: %s (worst %.2g)\n",
           nodes, kernels, bad ? "FAIL" : "ok", worst);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    return bad != 0;
}

/* ---- dequant: lt.cu's bf16 operands bit for bit ------------------------------------------------- */

/* rows x cols of `type` quantized from random values (float types: their own rounding) */
static std::vector<uint8_t> quantized(uint32_t type, int rows, int cols, size_t *row_bytes)
{
    const struct smol_type_traits *tr = smol_type_traits(type);
    *row_bytes = type == SMOL_TYPE_F16 || type == SMOL_TYPE_BF16 ? (size_t)cols * 2 : smol_row_size(type, cols);
    std::vector<uint8_t> q(*row_bytes * rows);
    std::vector<float> f(cols);
    for (int r = 0; r < rows; r++) {
        for (float &v : f) v = urand() * 2.0f;
        tr->quantize(f.data(), &q[r * *row_bytes], cols);
    }
    return q;
}

static int dequant_case(uint32_t type, int rows, int cols)
{
    size_t rb;
    const std::vector<uint8_t> q = quantized(type, rows, cols, &rb);
    uint8_t *dq = upload(q);
    uint16_t *out;
    ck(cudaMalloc((void **)&out, (size_t)rows * cols * 2), "cudaMalloc");
    ck(smol_dequant_bf16_cuda(out, type, dq, rb, rows, cols, NULL), "dequant");
    const std::vector<uint16_t> got = download(out, (size_t)rows * cols);
    std::vector<float> ref(cols);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        smol_type_traits(type)->dequant(&q[r * rb], ref.data(), cols);
        for (int c = 0; c < cols; c++)
            /* as numbers: dq32 adds q5_0's zero minimum, so its -0 reads +0 (the same product) */
            if (smol_bf16_to_f32(got[(size_t)r * cols + c]) != smol_bf16_to_f32(smol_f32_to_bf16(ref[c])) && bad++ < 3)
                fprintf(stderr, "  dequant %s (%d, %d): %04x want %04x\n", smol_type_name(type), r, c,
                        got[(size_t)r * cols + c], smol_f32_to_bf16(ref[c]));
        }
    printf("dequant %-5s %3dx%-4d to bf16 against smol_dequant_%s_ref: %s (%d differ)\n", smol_type_name(type), rows, cols,
           smol_type_name(type), bad ? "FAIL" : "ok", bad);
    cudaFree(dq);
    cudaFree(out);
    return bad != 0;
}

static int convert_case()
{
    const size_t n = 1000;
    std::vector<float> x(n);
    for (float &v : x) v = urand() * 100.0f;
    x[3] = NAN;
    x[4] = INFINITY;
    x[5] = -0.0f;
    float *dx = upload(x);
    uint16_t *d;
    ck(cudaMalloc((void **)&d, n * 2), "cudaMalloc");
    ck(smol_bf16_from_f32_cuda(d, dx, n, NULL), "convert");
    const std::vector<uint16_t> got = download(d, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != smol_f32_to_bf16(x[i]);
    printf("convert %zu f32 (NaN, inf, -0 among them) to bf16 against smol_f32_to_bf16: %s (%d differ)\n", n,
           bad ? "FAIL" : "ok", bad);
    cudaFree(dx);
    cudaFree(d);
    return bad != 0;
}

/* ---- backend: smol_lt_matmul on row slabs ------------------------------------------------------ */

static int backend_case()
{
    const int rows = 100, cols = 256, n = 19;
    char err[256];
    struct smol_lt *lt = smol_lt_new(err, sizeof err);
    if (!lt) {
        printf("backend smol_lt_new: FAIL (%s)\n", err);
        return 1;
    }
    ck(smol_lt_reserve(lt, 40 * cols, (size_t)n * cols), "reserve");  /* a slab of 40 rows: 40 + 40 + 20 */
    size_t rb;
    std::vector<uint8_t> q[2] = {quantized(SMOL_TYPE_Q4_K, rows, cols, &rb), quantized(SMOL_TYPE_Q4_K, rows, cols, &rb)};
    struct smol_weight w[2];
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].type = SMOL_TYPE_Q4_K, w[i].rows = rows, w[i].cols = cols, w[i].row_bytes = rb;
        w[i].dev = upload(q[i]);
    }
    std::vector<float> x((size_t)n * cols), base((size_t)n * rows);
    for (float &v : x) v = urand();
    for (float &v : base) v = urand();
    float *dx = upload(x), *o0, *o1 = upload(base);
    ck(cudaMalloc((void **)&o0, base.size() * 4), "cudaMalloc");
    int bad = 0;
    double worst = 0;
    long plans[2];
    for (int pass = 0; pass < 2; pass++) {
        ck(cudaMemcpy(o1, base.data(), base.size() * 4, cudaMemcpyHostToDevice), "upload");
        const struct smol_weight *ws[2] = {&w[0], &w[1]};
        float *outs[2] = {o0, o1};
        ck(smol_lt_matmul(lt, outs, ws, 1, 0, dx, n, NULL), "lt store");
        ck(smol_lt_matmul(lt, outs + 1, ws + 1, 1, 1, dx, n, NULL), "lt add");
        plans[pass] = smol_lt_plans_made(lt);
        ck(smol_lt_matmul(lt, outs, ws, 2, 0, dx, n, NULL), "lt two weights");  /* o1 stored over */
        const std::vector<float> g0 = download(o0, base.size()), g1 = download(o1, base.size());
        std::vector<float> wf(cols);
        for (int i = 0; i < 2; i++)
            for (int r = 0; r < rows; r++) {
                smol_dequant_q4_K_ref(&q[i][r * rb], wf.data(), cols);
                for (int t = 0; t < n; t++) {
                    double s = 0, mag = 1e-30;
                    for (int c = 0; c < cols; c++) {
                        const double v = (double)smol_bf16_to_f32(smol_f32_to_bf16(wf[c])) *
                                         smol_bf16_to_f32(smol_f32_to_bf16(x[(size_t)t * cols + c]));
                        s += v;
                        mag += fabs(v);
                    }
                    const double e = fabs((i ? g1 : g0)[(size_t)t * rows + r] - s) / mag;
                    if (!(e <= 1e-6)) bad++;
                    if (e > worst || e != e) worst = e;
                }
            }
    }
    /* the add: o1 = base + W1 x, checked before the two-weight call overwrote it */
    ck(cudaMemcpy(o1, base.data(), base.size() * 4, cudaMemcpyHostToDevice), "upload");
    const struct smol_weight *w1 = &w[1];
    ck(smol_lt_matmul(lt, &o1, &w1, 1, 1, dx, n, NULL), "lt add");
    ck(smol_lt_matmul(lt, &o0, &w1, 1, 0, dx, n, NULL), "lt store");
    const std::vector<float> ga = download(o1, base.size()), gs = download(o0, base.size());
    int bad_add = 0;
    for (size_t i = 0; i < base.size(); i++)
        bad_add += !(fabs(ga[i] - (base[i] + gs[i])) <= 1e-6 * (fabs(base[i]) + fabs(gs[i])) + 1e-6);
    const int replanned = plans[1] != plans[0];
    printf("backend smol_lt_matmul q4_K %dx%d n=%d on 40-row slabs, store / add / two weights: %s "
           "(worst %.2g, add %d differ, %ld plans, %s)\n", rows, cols, n, bad || bad_add || replanned ? "FAIL" : "ok",
           worst, bad_add, plans[1], replanned ? "planned again" : "kept");
    smol_lt_free(&lt);
    for (int i = 0; i < 2; i++) cudaFree(w[i].dev);
    cudaFree(dx);
    cudaFree(o0);
    cudaFree(o1);
    return bad || bad_add || replanned;
}

int main()
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fails = 0;
    cublasLtHandle_t h;
    cs(cublasLtCreate(&h), "create");
    fails += gemm_case("TN bf16 (the backend's)", CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_ORDER_COL, 37, 19, 72, 1.0f, 0.0f, h);
    fails += gemm_case("TN bf16, C = D", CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_ORDER_COL, 37, 19, 72, 1.0f, 1.0f, h);
    fails += gemm_case("NN bf16", CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_ORDER_COL, 21, 33, 50, 1.0f, 0.0f, h);
    fails += gemm_case("NN bf16, alpha 0.5, C = D", CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_ORDER_COL, 21, 33, 50, 0.5f, 1.0f, h);
    fails += gemm_case("NT bf16 row-major, C = D", CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_ORDER_ROW, 18, 11, 64, 1.0f, 1.0f, h);
    fails += gemm_case("TN f32 row-major", CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_ORDER_ROW, 9, 14, 30, 1.0f, 0.0f, h);
    fails += refuse_cases(h);
    fails += capture_case(h);
    cublasLtDestroy(h);
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q5_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0,
                              SMOL_TYPE_Q4_1, SMOL_TYPE_Q5_0, SMOL_TYPE_Q5_1, SMOL_TYPE_BF16};
    for (uint32_t t : types) fails += dequant_case(t, 5, 512);
    fails += dequant_case(SMOL_TYPE_F16, 3, 100);  /* a row of 3 whole chunks and a tail of 4 */
    fails += convert_case();
    fails += backend_case();
    printf("lt_emu: %s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
