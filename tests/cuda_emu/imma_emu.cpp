/*
 * imma_emu.cpp - the int8 GEMM of kernels/cuda/mmq_tc.cu (cuda_gemm = imma) run on the host,
 * without a GPU: the file as the plugin has it (rewritten by tests/cuda_emu/cu2cpp.py, compiled
 * against the emulated CUDA runtime of tests/cuda_emu/include: build/cuda_emu/obj/kernels/cuda/
 * mmq_tc.o, the object the cuda-emu plugin links) called through its host launcher
 * smol_gemm_imma_cuda on cudaMalloc'd buffers, as daemon/model/backend_cuda.cu calls it (the
 * partials buffer smol_gemm_part_need(n_sm) floats).  The emulator runs a block as 256 fibers
 * with real barriers, ldmatrix .x4 and mma.sync m16n8k32 / m16n8k16 .s8 by the PTX ISA's
 * fragment layouts (smol_emu_ptx.h), cp.async as an immediate copy of its size; dynamic shared
 * memory starts as 0xff bytes in every block (what the kernel reads it must have written).
 * Weights q4_K / q6_K / q8_0 in the device layout (mmvq.h, SMOL_GEMM_PAD spare bytes), q8a
 * activations; six cases a type, the plan (BM, K splits) steered by the SM count given as n_sm:
 *   37 x 9 tokens, BM 64 (a row tail), store;  130 x 70, BM 128 (a row tail, a token tile past
 *   n), residual add;  64 x 17 in 4 K splits (blockIdx.z, summed by split_sum_kernel), store;
 *   200 x 64 in 2 splits, BM 64 (a row tail), add;  64 x 17, BM 64 (rows a whole tile), store;
 *   200 x 64, BM 128 (one whole token tile), add.
 * The launcher splits K only with >= 8 steps (of 128 columns) a split and only on BM 64 grids,
 * so the split cases are 2,048 - 4,352 columns wide (q8_0's last split shorter in both, q4_K /
 * q6_K's in the first); the last two cases are the shapes the earlier test (the kernel's
 * source extracted, blockIdx set by hand) split 3 and 2 ways at 640 / 768 and 384 / 512
 * columns, BM 128 included: plans the launcher never makes.  Each case checks that the
 * launcher ran the plan the case names (kernels and blocks launched, emu_counters).  Without a
 * split, every output must equal smol_imma_row_ref (mmq_imma.h: the same expressions in the
 * same order) bit for bit; with a split, within 1e-6 of it relative to the row's magnitude.
 * What this checks: the launcher's plan, grid and shared-memory opt-in, the kernel's index
 * arithmetic (pieces, stages, unpack, scale tables, fragments, epilogue, zero token rows), the
 * split sum.  What it cannot: the hardware's reading of the fragment layouts (the emulator
 * encodes the PTX ISA's), the placement of the cp.async waits (the copies complete at once
 * here), timing, races (a block's threads take turns between barriers), out-of-bounds accesses
 * (device memory is plain host memory here): those need the device.
 */
#include <cuda_runtime.h>
#include "kernels/cuda/ops_cuda.cuh"
#include "kernels/cuda/mmq_tc.h"
#include "kernels/cuda/mmq_imma.h"
extern "C" {
#include "kernels/quant_ref.h"
}
#include <vector>
#include <random>

#define TC_BN 64  /* tokens per block (mmq_tc.cu) */

/* a runtime call the test itself makes (not the launch under test): failing it ends the test */
static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "imma_emu: %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}

template <class T> static T *upload(const std::vector<T> &v, size_t extra = 0)
{
    T *d;
    ck(cudaMalloc(&d, v.size() * sizeof(T) + extra), "cudaMalloc");
    ck(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return d;
}

static std::mt19937 rng(11);

/* one case: the launcher, given n_sm, must plan BM bm and `splits` K splits; returns 0 when it passes */
static int check(uint32_t t, int rows, int cols, int n, int bm, int splits, int mode, int n_sm)
{
    const struct smol_type_traits *tr = smol_type_traits(t);
    const size_t row_bytes = smol_row_size(t, cols), nb = (size_t)rows * cols / tr->block_size, total = row_bytes * rows;
    std::vector<float> wf((size_t)rows * cols), x((size_t)n * cols);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto &v : wf) v = u(rng);
    for (size_t i = 0; i < x.size(); i++) x[i] = 3 * u(rng) + (i / cols == 1 ? 2.0f : 0.0f);
    std::vector<uint8_t> wq(total), w(total + SMOL_GEMM_PAD, 0);
    for (int r = 0; r < rows; r++) tr->quantize(&wf[(size_t)r * cols], &wq[r * row_bytes], cols);
    if (smol_mmvq_repacked(t)) smol_mmvq_repack(t, w.data(), wq.data(), nb);
    else memcpy(w.data(), wq.data(), total);
    std::vector<int8_t> q((size_t)n * cols);
    std::vector<smol_q8a> s((size_t)n * (cols / 32));
    for (int k = 0; k < n; k++) smol_q8a_quantize_ref(&x[(size_t)k * cols], cols, &q[(size_t)k * cols], &s[(size_t)k * (cols / 32)]);
    std::vector<float> base((size_t)n * rows), out((size_t)n * rows);
    for (auto &v : base) v = u(rng);
    /* on the device as the backend has them: the weight copy (its spare bytes included), q8a
     * activations, the output (the residual for an add), the GEMM's partials buffer (NaN) */
    uint8_t *d_w = upload(w);
    int8_t *d_q = upload(q);
    smol_q8a *d_s = upload(s);
    float *d_out = upload(base), *d_part;
    const size_t part_cap = smol_gemm_part_need(n_sm);
    ck(cudaMalloc(&d_part, part_cap * sizeof(float)), "cudaMalloc part");
    ck(cudaMemset(d_part, 0xff, part_cap * sizeof(float)), "cudaMemset part");
    struct emu_counters c0, c1;
    emu_get_counters(&c0);
    const cudaError_t le = smol_gemm_imma_cuda(d_out, mode, t, d_w, rows, cols, d_q, d_s, n, n_sm, d_part, part_cap, 0);
    const cudaError_t se = cudaDeviceSynchronize();
    emu_get_counters(&c1);
    if (le != cudaSuccess || se != cudaSuccess) {  /* a kernel fault is sticky: no later case could run */
        printf("imma %-4s %4dx%-4d n=%-3d BM %3d splits %d %s: FAIL (smol_gemm_imma_cuda %s, synchronize %s)\n", tr->name,
               rows, cols, n, bm, splits, mode == SMOL_MV_ADD ? "add  " : "store", cudaGetErrorName(le), cudaGetErrorName(se));
        exit(1);
    }
    ck(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost), "download out");
    cudaFree(d_w);
    cudaFree(d_q);
    cudaFree(d_s);
    cudaFree(d_out);
    cudaFree(d_part);
    /* the plan the case names: the GEMM's blocks, then split_sum_kernel's (mmq_tc.cu) */
    const long count = (long)n * rows, gemm_blocks = (long)((rows + bm - 1) / bm) * ((n + TC_BN - 1) / TC_BN) * splits;
    const long want_kernels = splits > 1 ? 2 : 1,
               want_blocks = gemm_blocks + (splits > 1 ? (count / 256 + 1 < 4096 ? count / 256 + 1 : 4096) : 0);
    int bad = 0;
    if (c1.kernels - c0.kernels != want_kernels || c1.blocks - c0.blocks != want_blocks) {
        fprintf(stderr, "  %s %dx%d n=%d n_sm %d: the launcher ran %ld kernels of %ld blocks, the plan (BM %d, %d splits) "
                "%ld of %ld: update the case\n", tr->name, rows, cols, n, n_sm, c1.kernels - c0.kernels, c1.blocks - c0.blocks,
                bm, splits, want_kernels, want_blocks);
        bad++;
    }
    double worst = 0;
    for (int k = 0; k < n; k++)
        for (int r = 0; r < rows; r++) {
            const float dot = smol_imma_row_ref(t, w.data(), nb, r, cols, &q[(size_t)k * cols], &s[(size_t)k * (cols / 32)]);
            const float want = mode == SMOL_MV_ADD ? base[(size_t)k * rows + r] + dot : dot;
            const float got = out[(size_t)k * rows + r];
            double mag = 1e-30;
            for (int c = 0; c < cols; c++) mag += fabs((double)wf[(size_t)r * cols + c] * x[(size_t)k * cols + c]);
            const double e = fabs((double)got - want) / mag;
            if (!(e == e) || (splits == 1 && got != want) || e > 1e-6) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s %dx%d n=%d row %d token %d: kernel %.9g, twin %.9g\n", tr->name, rows, cols, n, r, k,
                            (double)got, (double)want);
            }
            if (e > worst) worst = e;
        }
    printf("imma %-4s %4dx%-4d n=%-3d BM %3d splits %d %s: %s (worst |d| / magnitude %.2g)\n", tr->name, rows, cols, n, bm, splits,
           mode == SMOL_MV_ADD ? "add  " : "store", bad ? "FAIL" : "ok", worst);
    return bad != 0;
}

int main()
{
    setvbuf(stdout, NULL, _IOLBF, 0);  /* each case line next to its diagnostics (stderr) */
    int fails = 0;
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0};
    for (uint32_t t : types) {
        /* q8_0: widths of an odd number of K steps (384 / 128 = 3, ...: 4,224 = 33 steps: 9 + 9 + 9 + 6,
         * 2,176 = 17: 9 + 8); q4_K / q6_K: multiples of 256 (4,352 = 34 steps: 9 + 9 + 9 + 7, 2,048 = 16: 8 + 8) */
        const int q8 = t == SMOL_TYPE_Q8_0;
        const int c1 = q8 ? 384 : 512, c2 = q8 ? 640 : 768, c3 = q8 ? 4224 : 4352, c4 = q8 ? 2176 : 2048;
        /* n_sm: BM 128 needs the row x token blocks >= 2 n_sm; a split needs blocks x splits <= n_sm */
        fails += check(t, 37, c1, 9, 64, 1, SMOL_MV_STORE, 132);
        fails += check(t, 130, c2, 70, 128, 1, SMOL_MV_ADD, 1);
        fails += check(t, 64, c3, 17, 64, 4, SMOL_MV_STORE, 4);
        fails += check(t, 200, c4, 64, 64, 2, SMOL_MV_ADD, 8);
        /* the old test's split shapes, as the launcher plans them (no split: too few K steps) */
        fails += check(t, 64, c2, 17, 64, 1, SMOL_MV_STORE, 132);
        fails += check(t, 200, c1, 64, 128, 1, SMOL_MV_ADD, 1);
    }
    printf("imma_emu: %s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
