/*
 * imma_emu.cpp - the int8 GEMM of kernels/cuda/mmq_tc.cu (cuda_gemm = imma) run on the host,
 * without a GPU: its kernel's source (extracted by run.sh, the two mma inline-asm helpers left
 * out) compiled against shim.h (a block as 256 fibers with real barriers) and the emulations
 * below: ldmatrix .x4 (not transposed) and mma.sync m16n8k32 / m16n8k16 .s8 by the PTX ISA's
 * fragment layouts, cp.async as an immediate copy of its size.  Weights q4_K / q6_K / q8_0 in
 * the device layout (mmvq.h, SMOL_GEMM_PAD spare bytes), q8a activations; both row tiles (BM 64
 * and 128) with row tails, token tiles with a tail past n, K split into blocks (blockIdx.z) and
 * summed in order as split_sum_kernel does, store and residual add.  Without a split, every
 * output must equal smol_imma_row_ref (mmq_imma.h: the same expressions in the same order) bit
 * for bit; with a split, within 1e-6 of it relative to the row's magnitude.  What this checks:
 * the kernel's index arithmetic (pieces, stages, unpack, scale tables, fragments, epilogue,
 * zero token rows).  What it cannot: the hardware's reading of the fragment layouts (encoded
 * here from the PTX ISA), timing, races, memory errors: those need the device.
 */
#include "imma_emu.inc"
extern "C" {
#include "kernels/quant_ref.h"
}
#include <vector>
#include <random>

/* ---- the emulated warp collectives the int8 kernel uses ---- */
static const void *lb8[8][32];
/* ldmatrix .x4 (b16, not transposed): lanes 8i..8i+7 give the rows of matrix i; lane T gets
 * 32-bit word T % 4 of row T / 4 of matrix i in r[i] */
static void ldsm_x4(const void *p, uint32_t r[4])
{
    const int w = cur >> 5, l = cur & 31;
    lb8[w][l] = p;
    warp_barrier();
    for (int i = 0; i < 4; i++) memcpy(&r[i], (const uint8_t *)lb8[w][8 * i + (l >> 2)] + 4 * (l & 3), 4);
    warp_barrier();
}
struct IIn { uint32_t a[4], b0, b1; };
static IIn ibuf[8][32];
static inline int sb(uint32_t u, int b) { return (int8_t)(u >> (8 * b)); }
/* PTX ISA m16n8k32 .s8: g = lane >> 2, t = lane & 3; A a[0] = (g, 4t..4t+3), a[1] = (g+8, 4t..),
 * a[2] = (g, 16+4t..), a[3] = (g+8, 16+4t..); B b0 = (k 4t..4t+3, n g), b1 = (k 16+4t.., n g);
 * C c0, c1 = (g, 2t, 2t+1), c2, c3 = (g+8, ..).  m16n8k16 .s8: a0 = (g, 4t..), a1 = (g+8, 4t..),
 * b0 = (k 4t.., n g); C the same. */
static void imma_emu(int c[4], int K, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    const int w = cur >> 5, l = cur & 31;
    memcpy(ibuf[w][l].a, a, K == 32 ? 16 : 8);
    ibuf[w][l].b0 = b0;
    ibuf[w][l].b1 = b1;
    warp_barrier();
    int A[16][32], B[32][8];
    for (int L = 0; L < 32; L++) {
        const int g = L >> 2, t = L & 3;
        const IIn &m = ibuf[w][L];
        for (int b = 0; b < 4; b++) {
            A[g][4 * t + b] = sb(m.a[0], b);
            A[g + 8][4 * t + b] = sb(m.a[1], b);
            B[4 * t + b][g] = sb(m.b0, b);
            if (K == 32) {
                A[g][16 + 4 * t + b] = sb(m.a[2], b);
                A[g + 8][16 + 4 * t + b] = sb(m.a[3], b);
                B[16 + 4 * t + b][g] = sb(m.b1, b);
            }
        }
    }
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        int s = 0;
        for (int k = 0; k < K; k++) s += A[row][k] * B[k][col];
        c[i] = s;
    }
    warp_barrier();
}
static void imma16832(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { imma_emu(c, 32, a, b0, b1); }
static void imma16816(int c[4], uint32_t a0, uint32_t a1, uint32_t b0)
{
    const uint32_t a[2] = {a0, a1};
    imma_emu(c, 16, a, b0, 0);
}

#include "imma_kernel.inc"

static imma_args A_args;
static int A_type, A_bm;
static void run_kernel()
{
    if (A_type == SMOL_TYPE_Q4_K) A_bm == 128 ? imma_kernel<SMOL_TYPE_Q4_K, 128>(A_args) : imma_kernel<SMOL_TYPE_Q4_K, 64>(A_args);
    else if (A_type == SMOL_TYPE_Q6_K) A_bm == 128 ? imma_kernel<SMOL_TYPE_Q6_K, 128>(A_args) : imma_kernel<SMOL_TYPE_Q6_K, 64>(A_args);
    else A_bm == 128 ? imma_kernel<SMOL_TYPE_Q8_0, 128>(A_args) : imma_kernel<SMOL_TYPE_Q8_0, 64>(A_args);
}

static std::mt19937 rng(11);

/* one case: returns 0 when it passes */
static int check(uint32_t t, int rows, int cols, int n, int bm, int splits, int mode)
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
    const int nk = cols / SMOL_GEMM_BK, steps = (nk + splits - 1) / splits;
    const int nz = (nk + steps - 1) / steps;
    std::vector<float> base((size_t)n * rows), out, part((size_t)nz * n * rows, NAN);
    for (auto &v : base) v = u(rng);
    out = base;
    A_args.out = splits > 1 ? part.data() : out.data();
    A_args.w = w.data();
    A_args.xq = q.data();
    A_args.xs = s.data();
    A_args.n_blocks = nb;
    A_args.rows = rows;
    A_args.cols = cols;
    A_args.n = n;
    A_args.mode = splits > 1 ? SMOL_MV_STORE : mode;
    A_args.steps_per_split = steps;
    A_type = (int)t;
    A_bm = bm;
    gridDim = EmuDim{(unsigned)((rows + bm - 1) / bm), (unsigned)((n + TC_BN - 1) / TC_BN), (unsigned)nz};
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned by = 0; by < gridDim.y; by++)
            for (unsigned bx = 0; bx < gridDim.x; bx++) {
                blockIdx = EmuDim{bx, by, z};
                memset(imma_smem, 0xA5, sizeof imma_smem);  /* poison: what the kernel reads it wrote */
                run_block(TC_THREADS, run_kernel);
            }
    if (splits > 1)  /* split_sum_kernel */
        for (size_t i = 0; i < (size_t)n * rows; i++) {
            float v = 0.0f;
            for (int z = 0; z < nz; z++) v += part[(size_t)z * n * rows + i];
            out[i] = mode == SMOL_MV_ADD ? out[i] + v : v;
        }
    int bad = 0;
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
    printf("imma %-4s %4dx%-4d n=%-3d BM %3d splits %d %s: %s (worst |d| / magnitude %.2g)\n", tr->name, rows, cols, n, bm, nz,
           mode == SMOL_MV_ADD ? "add  " : "store", bad ? "FAIL" : "ok", worst);
    return bad != 0;
}

int main()
{
    int fails = 0;
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0};
    for (uint32_t t : types) {
        const int c1 = t == SMOL_TYPE_Q8_0 ? 384 : 512, c2 = t == SMOL_TYPE_Q8_0 ? 640 : 768;
        fails += check(t, 37, c1, 9, 64, 1, SMOL_MV_STORE);
        fails += check(t, 130, c2, 70, 128, 1, SMOL_MV_ADD);
        fails += check(t, 64, c2, 17, 64, 3, SMOL_MV_STORE);
        fails += check(t, 200, c1, 64, 128, 2, SMOL_MV_ADD);
    }
    printf("imma_emu: %s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
