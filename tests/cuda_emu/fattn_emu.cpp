/*
 * fattn_emu.cpp - kernels/cuda/fattn.cu run on the host, without a GPU: the file as the plugin
 * has it (rewritten by tests/cuda_emu/cu2cpp.py, compiled against the emulated CUDA runtime of
 * tests/cuda_emu/include: build/cuda_emu/obj/kernels/cuda/fattn.o, the object the cuda-emu
 * plugin links) called through its host launcher smol_fattn_cuda on cudaMalloc'd buffers, as
 * daemon/model/backend_cuda.cu calls it: the emulator runs each block as 128 fibers with real
 * block and warp barriers, the warp shuffles, and mma.sync m16n8k16 / ldmatrix .x4 .trans by
 * the PTX ISA's fragment layouts (smol_emu_ptx.h), cp.async as an immediate copy; dynamic
 * shared memory starts as 0xff bytes (f16 NaNs) in every block.  Batches of the shapes the
 * backend makes (prompt tiles with tails over prefixes, mixed sequences, decode rows one per
 * tile, splits including empty ones, the merge kernel) on f16 and q8_0 caches with scattered
 * pages, each against a float64 attention of the stored K/V within tests/test_cuda.c's bound
 * (f16 rounding of Q and P, and of q8_0's K and V) and relative L2 < 5e-3; outputs and split
 * partials start as NaN.  What this checks: the launcher's grid and shared-memory opt-in, the
 * kernels' index arithmetic, masking, online softmax, split and merge logic, q8_0 staging, no
 * warp collective with exited lanes, no barrier deadlock.  What it cannot: the hardware's own
 * reading of the fragment layouts (the emulator encodes the PTX ISA's), the placement of the
 * cp.async waits (the copies complete at once here), timing, races (a block's threads take turns
 * between barriers, one block at a time), out-of-bounds accesses (device memory is plain host
 * memory here); those need the device (tests/gpu/check.sh).  The split counts are each case's
 * own (the backend's choice of n_split, from the SM count, is its code, not the launcher's).
 */
#include <cuda_runtime.h>
#include "kernels/cuda/fattn.cuh"
extern "C" {
#include "kernels/quant_ref.h"
}
#include <vector>
#include <random>

/* a runtime call the test itself makes (not the launch under test): failing it ends the test */
static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "fattn_emu: %s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}

static std::mt19937 rng(7);
static float urand() { return std::uniform_real_distribution<float>(-2, 2)(rng); }

/* one layer's cache: [page][kv_head][slot][128] of f16 or q8_0 */
struct Cache {
    int type, n_pages, nkv;
    size_t row_bytes;
    std::vector<uint8_t> k, v;
    void *dk = nullptr, *dv = nullptr;  /* the device copies (upload() once filled) */
    void upload()
    {
        ck(cudaMalloc(&dk, k.size()), "cudaMalloc k");
        ck(cudaMalloc(&dv, v.size()), "cudaMalloc v");
        ck(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice), "upload k");
        ck(cudaMemcpy(dv, v.data(), v.size(), cudaMemcpyHostToDevice), "upload v");
    }
    ~Cache() { cudaFree(dk); cudaFree(dv); }
};
static void put_row(Cache &c, std::vector<uint8_t> &buf, int page, int h, int slot, const float *x)
{
    uint8_t *r = buf.data() + (((size_t)page * c.nkv + h) * 32 + slot) * c.row_bytes;
    if (c.type == SMOL_TYPE_F16) for (int d = 0; d < 128; d++) { smol_half u = smol_f32_to_half(x[d]); memcpy(r + 2 * d, &u, 2); }
    else smol_quantize_q8_0_ref(x, r, 128);
}
static void get_row(const Cache &c, const std::vector<uint8_t> &buf, int page, int h, int slot, float *x)
{
    const uint8_t *r = buf.data() + (((size_t)page * c.nkv + h) * 32 + slot) * c.row_bytes;
    if (c.type == SMOL_TYPE_F16) for (int d = 0; d < 128; d++) { smol_half u; memcpy(&u, r + 2 * d, 2); x[d] = smol_half_to_f32(u); }
    else smol_dequant_q8_0_ref(r, x, 128);
}

struct Seq { std::vector<int32_t> pages; int len; };

/* a batch: tokens (seq, pos); runs the kernel as the backend would, compares with float64 */
static int check(Cache &c, std::vector<Seq> &seqs, const std::vector<std::pair<int, int>> &toks, int n_split, bool use_tiles,
                 const char *what, int nh = 8)
{
    const int n = (int)toks.size(), nkv = c.nkv, G = nh / nkv, hd = 128;
    /* descriptor: tok pairs then page tables per run */
    std::vector<int32_t> desc(2 * n);
    int cur_off = 0;
    for (int t = 0; t < n; t++) {
        if (t == 0 || toks[t].first != toks[t - 1].first) {
            cur_off = (int)desc.size();
            for (int32_t p : seqs[toks[t].first].pages) desc.push_back(p);
        }
        desc[2 * t] = toks[t].second + 1;
        desc[2 * t + 1] = cur_off;
    }
    std::vector<int32_t> tiles;
    const int per = FATTN_ROWS / G;
    for (int t = 0, e; t < n; t = e) {
        for (e = t + 1; e < n && e - t < per && toks[e].first == toks[t].first;) e++;
        tiles.push_back(t); tiles.push_back(e - t);
    }
    const int n_tiles = use_tiles ? (int)tiles.size() / 2 : n;
    std::vector<float> q((size_t)n * nh * hd), out((size_t)n * nh * hd);
    for (auto &x : q) x = urand();
    /* the launch as the backend's cu_fattn makes it: descriptor (tok and pages one buffer), tiles,
     * q on the device; out and the partials NaN until written */
    float *d_out, *d_part = nullptr, *d_q;
    int32_t *d_desc, *d_tiles = nullptr;
    const size_t out_bytes = out.size() * sizeof(float), part_bytes = (size_t)n * nh * n_split * (hd + 2) * sizeof(float);
    ck(cudaMalloc(&d_out, out_bytes), "cudaMalloc out");
    ck(cudaMalloc(&d_q, q.size() * sizeof(float)), "cudaMalloc q");
    ck(cudaMalloc(&d_desc, desc.size() * sizeof(int32_t)), "cudaMalloc desc");
    ck(cudaMemset(d_out, 0xff, out_bytes), "cudaMemset out");
    if (n_split > 1) {
        ck(cudaMalloc(&d_part, part_bytes), "cudaMalloc part");
        ck(cudaMemset(d_part, 0xff, part_bytes), "cudaMemset part");
    }
    if (use_tiles) {
        ck(cudaMalloc(&d_tiles, tiles.size() * sizeof(int32_t)), "cudaMalloc tiles");
        ck(cudaMemcpy(d_tiles, tiles.data(), tiles.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload tiles");
    }
    ck(cudaMemcpy(d_q, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice), "upload q");
    ck(cudaMemcpy(d_desc, desc.data(), desc.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload desc");
    const cudaError_t le = smol_fattn_cuda(d_out, d_q, c.dk, c.dv, n, d_desc, d_desc, d_tiles, n_tiles, nh, nkv, hd, c.type,
                                           0.0884f, n_split, d_part, 0);
    const cudaError_t se = cudaDeviceSynchronize();
    if (le != cudaSuccess || se != cudaSuccess) {  /* a kernel fault is sticky: no later case could run */
        printf("%-58s G=%-2d kv=%s split=%d: smol_fattn_cuda %s, synchronize %s  FAIL\n", what, G,
               c.type == SMOL_TYPE_F16 ? "f16" : "q8_0", n_split, cudaGetErrorName(le), cudaGetErrorName(se));
        exit(1);
    }
    ck(cudaMemcpy(out.data(), d_out, out_bytes, cudaMemcpyDeviceToHost), "download out");
    cudaFree(d_out);
    cudaFree(d_q);
    cudaFree(d_desc);
    cudaFree(d_part);
    cudaFree(d_tiles);
    /* float64 reference */
    double num = 0, den = 0, worst = 0; const double u = 1.0 / 2048, kq = c.type == SMOL_TYPE_Q8_0 ? 2 : 1;
    std::vector<float> kr, vr;
    for (int t = 0; t < n; t++) {
        const Seq &s = seqs[toks[t].first];
        const int np = toks[t].second + 1;
        kr.resize((size_t)np * hd); vr.resize((size_t)np * hd);
        for (int h = 0; h < nkv; h++) {
            double maxv = 0;
            for (int i = 0; i < np; i++) {
                get_row(c, c.k, s.pages[i / 32], h, i % 32, &kr[(size_t)i * hd]);
                get_row(c, c.v, s.pages[i / 32], h, i % 32, &vr[(size_t)i * hd]);
                for (int d = 0; d < hd; d++) maxv = fmax(maxv, fabs(vr[(size_t)i * hd + d]));
            }
            for (int g = 0; g < G; g++) {
                const int hq = h * G + g;
                const float *qt = &q[((size_t)t * nh + hq) * hd];
                std::vector<double> sc(np); double mx = -INFINITY, sabs = 0, l = 0;
                for (int i = 0; i < np; i++) {
                    double a = 0, aa = 0;
                    for (int d = 0; d < hd; d++) { a += (double)qt[d] * kr[(size_t)i * hd + d]; aa += fabs((double)qt[d] * kr[(size_t)i * hd + d]); }
                    sc[i] = a * 0.0884f; sabs = fmax(sabs, aa * 0.0884f); mx = fmax(mx, sc[i]);
                }
                for (int i = 0; i < np; i++) l += (sc[i] = exp(sc[i] - mx));
                const double bound = maxv * (3 * u + expm1(2 * kq * u * sabs)) + 1e-6;
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int i = 0; i < np; i++) o += sc[i] * vr[(size_t)i * hd + d];
                    o /= l;
                    const float x = out[((size_t)t * nh + hq) * hd + d];
                    const double e = std::isfinite(x) ? fabs(x - o) : INFINITY;
                    worst = fmax(worst, e / bound); num += e * e; den += o * o;
                }
            }
        }
    }
    const double rel = sqrt(num / den);
    const int ok = worst <= 1 && rel < 5e-3;
    printf("%-58s G=%-2d kv=%s split=%d tiles=%s: rel L2 %.2e worst/bound %.3f  %s\n", what, G, c.type == SMOL_TYPE_F16 ? "f16" : "q8_0",
           n_split, use_tiles ? "desc" : "1/token", rel, worst, ok ? "ok" : "FAIL");
    return ok;
}

int main()
{
    setvbuf(stdout, NULL, _IOLBF, 0);  /* each case line next to its diagnostics (stderr) */
    int fails = 0;
    for (int type : {SMOL_TYPE_F16, SMOL_TYPE_Q8_0}) {
        Cache c; c.type = type; c.n_pages = 40; c.nkv = 2; c.row_bytes = type == SMOL_TYPE_F16 ? 256 : 136;
        c.k.assign((size_t)c.n_pages * c.nkv * 32 * c.row_bytes, 0); c.v = c.k;
        /* two sequences with scattered pages, filled with random K/V */
        std::vector<Seq> seqs(3);
        std::vector<int> perm(c.n_pages); for (int i = 0; i < c.n_pages; i++) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        int pi = 0;
        const int lens[3] = {200, 40, 3};
        for (int s = 0; s < 3; s++) {
            for (int p = 0; p < (lens[s] + 31) / 32; p++) seqs[s].pages.push_back(perm[pi++]);
            seqs[s].len = lens[s];
            float x[128];
            for (int i = 0; i < lens[s]; i++)
                for (int h = 0; h < c.nkv; h++) {
                    for (auto &e : x) e = urand();
                    put_row(c, c.k, seqs[s].pages[i / 32], h, i % 32, x);
                    for (auto &e : x) e = urand();
                    put_row(c, c.v, seqs[s].pages[i / 32], h, i % 32, x);
                }
        }
        c.upload();
        std::vector<std::pair<int, int>> b;
        for (int i = 0; i < 7; i++) b.push_back({0, i});
        fails += !check(c, seqs, b, 1, true, "seq0 prompt 0..6");
        b.clear(); for (int i = 8; i < 73; i++) b.push_back({0, i});
        fails += !check(c, seqs, b, 1, true, "seq0 prompt 8..72 (65: tiles 16 x 4 + 1)");
        fails += !check(c, seqs, b, 3, true, "same, 3 splits");
        b.clear(); for (int i = 0; i < 20; i++) b.push_back({1, i}); b.push_back({0, 199}); b.push_back({2, 0});
        fails += !check(c, seqs, b, 2, true, "mixed: seq1 0..19, seq0 @199, seq2 @0");
        b.clear(); b.push_back({0, 199}); b.push_back({1, 39}); b.push_back({2, 2});
        fails += !check(c, seqs, b, 5, false, "decode x3 @199 @39 @2");
        b.clear(); b.push_back({0, 150});
        fails += !check(c, seqs, b, 7, false, "decode @150 (5 pages, 7 splits: 2 empty)");
        b.clear(); for (int i = 130; i < 200; i++) b.push_back({0, i});
        fails += !check(c, seqs, b, 1, true, "seq0 prompt 130..199 over a 130 prefix");
    }
    /* other GQA groups (G = 2: the synthesized test models, 32 tokens a tile; G = 16: 4 a tile) on
     * one KV head, and a decode at depth 2,000 with FATTN_MAX_SPLIT splits (most of them empty) */
    {
        Cache c; c.type = SMOL_TYPE_F16; c.n_pages = 64; c.nkv = 1; c.row_bytes = 256;
        c.k.assign((size_t)c.n_pages * c.nkv * 32 * c.row_bytes, 0); c.v = c.k;
        std::vector<Seq> seqs(1);
        std::vector<int> perm(c.n_pages);
        for (int i = 0; i < c.n_pages; i++) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        seqs[0].len = 2000;
        for (int p = 0; p < 63; p++) seqs[0].pages.push_back(perm[p]);
        float x[128];
        for (int i = 0; i < 2000; i++) {
            for (auto &e : x) e = urand();
            put_row(c, c.k, seqs[0].pages[i / 32], 0, i % 32, x);
            for (auto &e : x) e = urand();
            put_row(c, c.v, seqs[0].pages[i / 32], 0, i % 32, x);
        }
        c.upload();
        std::vector<std::pair<int, int>> b;
        for (int i = 60; i < 130; i++) b.push_back({0, i});
        fails += !check(c, seqs, b, 1, true, "prompt 60..129 (G 2: tiles 32 + 32 + 6)", 2);
        fails += !check(c, seqs, b, 2, true, "prompt 60..129 (G 16: tiles of 4), 2 splits", 16);
        b.clear();
        b.push_back({0, 1999});
        fails += !check(c, seqs, b, FATTN_MAX_SPLIT, false, "decode @1999, FATTN_MAX_SPLIT splits", 2);
    }
    printf("mma calls %ld; %s\n", emu_n_mma, fails ? "FAILURES" : "all ok");
    return fails != 0;
}
