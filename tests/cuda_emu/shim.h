/* shim.h - host emulation of the CUDA features kernels/cuda/fattn.cu uses (tests/cuda_emu/fattn_emu.cpp):
 * a block as fibers (ucontext) with real block and warp barriers, warp shuffles, and mma.sync
 * m16n8k16 / ldmatrix .x4 .trans by the PTX ISA fragment layouts (the comments below); up to 256 threads. */
#pragma once
#include <ucontext.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
extern "C" {
#include "kernels/fp16.h"
#include "kernels/quant.h"
}
using std::min; using std::max;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __expf expf
#define SMOL_KV_PAGE_CUDA 32
#define FATTN_ROWS 64
#define FATTN_KEYS 64
#define FATTN_MAX_SPLIT 256
struct __half { uint16_t u; };
struct __half2 { __half x, y; };
static inline __half2 __floats2half2_rn(float a, float b) { __half2 h; h.x.u = smol_f32_to_half(a); h.y.u = smol_f32_to_half(b); return h; }
static inline float h2f(smol_half h) { return smol_half_to_f32(h); }
static inline float hf(__half h) { return smol_half_to_f32(h.u); }
struct float4 { float x, y, z, w; }; struct float2 { float x, y; };
struct uint4 { uint32_t x, y, z, w; }; struct uint2 { uint32_t x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
static inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
struct EmuDim { unsigned x, y, z; };

/* ---- fibers ---- */
#define NT_MAX 256
static ucontext_t sched_ctx;
static ucontext_t fctx[NT_MAX];
static char *fstack[NT_MAX];
static int fstate[NT_MAX];      /* 0 runnable, 1 waiting warp, 2 waiting block, 3 done */
static unsigned fgen[NT_MAX];
static int cur, nthreads;
static int warp_arr[8], block_arr;
static unsigned warp_gen[8], block_gen;
static EmuDim blockIdx, gridDim;
#define threadIdx (EmuDim{(unsigned)cur, 0, 0})
static inline void yield_() { swapcontext(&fctx[cur], &sched_ctx); }
static void warp_barrier()
{
    const int w = cur >> 5;
    const unsigned g = warp_gen[w];
    if (++warp_arr[w] == 32) { warp_arr[w] = 0; warp_gen[w]++; return; }
    fstate[cur] = 1; fgen[cur] = g;
    yield_();
}
static void __syncthreads()
{
    const unsigned g = block_gen;
    if (++block_arr == nthreads) { block_arr = 0; block_gen++; return; }
    fstate[cur] = 2; fgen[cur] = g;
    yield_();
}
static void __syncwarp() { warp_barrier(); }
static float shf[8][32];
static float __shfl_xor_sync(unsigned, float v, int o)
{
    const int w = cur >> 5, l = cur & 31;
    shf[w][l] = v; warp_barrier();
    const float r = shf[w][l ^ o]; warp_barrier();
    return r;
}
static float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o); return v; }
static float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o)); return v; }
static inline float lo_h(uint32_t u) { return smol_half_to_f32((uint16_t)(u & 0xffff)); }
static inline float hi_h(uint32_t u) { return smol_half_to_f32((uint16_t)(u >> 16)); }
struct MmaIn { uint32_t a[4], b0, b1; };
static MmaIn mbuf[8][32];
long n_mma;
/* PTX ISA m16n8k16 .f16 layouts: groupID g = lane >> 2, t = lane & 3.
 * A: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
 * B: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g);  C: c0,c1 = (g, 2t..), c2,c3 = (g+8, 2t..) */
static void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    const int w = cur >> 5, l = cur & 31;
    memcpy(mbuf[w][l].a, a, 16); mbuf[w][l].b0 = b0; mbuf[w][l].b1 = b1;
    warp_barrier();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        const int g = L >> 2, t = L & 3;
        const MmaIn &m = mbuf[w][L];
        A[g][2 * t] = lo_h(m.a[0]); A[g][2 * t + 1] = hi_h(m.a[0]);
        A[g + 8][2 * t] = lo_h(m.a[1]); A[g + 8][2 * t + 1] = hi_h(m.a[1]);
        A[g][2 * t + 8] = lo_h(m.a[2]); A[g][2 * t + 9] = hi_h(m.a[2]);
        A[g + 8][2 * t + 8] = lo_h(m.a[3]); A[g + 8][2 * t + 9] = hi_h(m.a[3]);
        B[2 * t][g] = lo_h(m.b0); B[2 * t + 1][g] = hi_h(m.b0);
        B[2 * t + 8][g] = lo_h(m.b1); B[2 * t + 9][g] = hi_h(m.b1);
    }
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float s = 0;
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        d[i] += s;
    }
    n_mma++;
    warp_barrier();
}
static const __half *lbuf[8][32];
/* ldmatrix .x4 .trans: lanes 8i..8i+7 give the rows of matrix i -> r[i]; lane T holds
 * (row 2 (T % 4), col T / 4) low and (row 2 (T % 4) + 1, col T / 4) high */
static void ldsm_x4_t(uint32_t *r, const __half *p)
{
    const int w = cur >> 5, l = cur & 31;
    lbuf[w][l] = p;
    warp_barrier();
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const __half *r0 = lbuf[w][8 * i + 2 * t], *r1 = lbuf[w][8 * i + 2 * t + 1];
        r[i] = (uint32_t)r0[g].u | ((uint32_t)r1[g].u << 16);
    }
    warp_barrier();
}
/* cp.async: the copy done at once (the kernel's waits and barriers then have nothing to wait for:
 * their placement is not checked here, only what is read from where) */
static inline void cp_async16(void *smem, const void *gmem) { memcpy(smem, gmem, 16); }
static inline void cp_async_commit() {}
static inline void cp_async_wait1() {}
/* runs fn() as nt fibers of one block */
static void (*fiber_fn)();
static void fiber_entry() { fiber_fn(); fstate[cur] = 3; }
static void run_block(int nt, void (*fn)())
{
    nthreads = nt; fiber_fn = fn;
    memset(warp_arr, 0, sizeof warp_arr); block_arr = 0;
    for (int i = 0; i < nt; i++) {
        if (!fstack[i]) fstack[i] = (char *)malloc(1 << 16);
        getcontext(&fctx[i]);
        fctx[i].uc_stack.ss_sp = fstack[i]; fctx[i].uc_stack.ss_size = 1 << 16; fctx[i].uc_link = &sched_ctx;
        makecontext(&fctx[i], fiber_entry, 0);
        fstate[i] = 0;
    }
    long idle = 0;
    for (;;) {
        int alive = 0, ran = 0;
        for (int i = 0; i < nt; i++) {
            if (fstate[i] == 3) continue;
            alive++;
            if (fstate[i] == 1 && warp_gen[i >> 5] == fgen[i]) continue;
            if (fstate[i] == 2 && block_gen == fgen[i]) continue;
            fstate[i] = 0; cur = i; ran++;
            swapcontext(&sched_ctx, &fctx[i]);
        }
        if (!alive) break;
        if (!ran && ++idle > 2) { fprintf(stderr, "DEADLOCK: %d fibers waiting\n", alive); exit(3); }
    }
}
