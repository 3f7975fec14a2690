/*
 * ptx.cuh - the PTX instructions the kernels use by inline assembly, written once: tensor-core
 * mma.sync (f16 and int8), ldmatrix, cp.async and the weight loads that skip L1.  Under the host
 * emulator (SMOL_CUDA_EMU, tests/cuda_emu) the same functions come from smol_emu_ptx.h, which
 * emulates each by the PTX ISA's fragment layouts (written out there).
 */
#ifndef SMOL_CUDA_PTX_CUH
#define SMOL_CUDA_PTX_CUH

#include <stdint.h>

#ifndef SMOL_CUDA_EMU

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* d[0..3] += A (16x16, row) * B (16x8, col); f16 in, f32 accumulate */
static __device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c = A (16x32 s8, row) * B (32x8 s8, col), int32 */
static __device__ __forceinline__ void imma16832(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %10, %10, %10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

/* c = A (16x16 s8, row) * B (16x8 s8, col), int32 */
static __device__ __forceinline__ void imma16816(int c[4], uint32_t a0, uint32_t a1, uint32_t b0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%7, %7, %7, %7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* four 8x8 b16 matrices from shared memory: lanes 8i .. 8i + 7 give the row addresses of matrix i */
static __device__ __forceinline__ void ldsm_x4(const void *p, uint32_t r[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* the same, transposed: lane T holds (row 2 (T % 4), col T / 4) and (row 2 (T % 4) + 1, col T / 4) */
static __device__ __forceinline__ void ldsm_x4_t(const void *p, uint32_t r[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* B (4, 8 or 16) bytes global -> shared, asynchronous (sm_80+), in the current commit group */
template <int B>
static __device__ __forceinline__ void cp_async(void *dst, const void *src)
{
    if (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(B));
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* waits until at most N commit groups (the most recent) are pending */
template <int N>
static __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* weights: read once, so they bypass L1 (the activations stay there) */
static __device__ __forceinline__ void ld_w16(const void *p, uint32_t v[4])
{
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "l"(p));
}
static __device__ __forceinline__ void ld_w8(const void *p, uint32_t v[2])
{
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v[0]), "=r"(v[1]) : "l"(p));
}
static __device__ __forceinline__ uint32_t ld_w4(const void *p)
{
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
static __device__ __forceinline__ uint32_t ld_w2(const void *p)
{
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

#else
#include "smol_emu_ptx.h"
#endif

#endif
