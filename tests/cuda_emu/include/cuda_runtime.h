/*
 * cuda_runtime.h (cuda-emu) - the CUDA runtime and device builtins that kernels/cuda/ and
 * daemon/model/backend_cuda.cu use, emulated on the host: the plugin's own source, its launches
 * rewritten by tests/cuda_emu/cu2cpp.py (kernel<<<g, b, s, st>>>(args) -> emu_launch(...)),
 * compiled by g++ against this header into libsmollm3_cuda_emu.so (`--backend cuda-emu`).
 *
 * Device side: a block runs as fibers, one per thread, switched only at the points where
 * threads meet (__syncthreads, warp collectives: shuffles, ballots, mma.sync, ldmatrix), so
 * code between them runs as one thread's straight-line C++.  Warp collectives check their
 * member mask against the live lanes (a lane that exited before a full-mask shuffle is a kernel
 * bug the device would hang or misread on: reported, the launch fails).  __shared__ is a C++
 * static (one block runs at a time), dynamic shared memory a per-block buffer filled with 0xff
 * (reads before writes show as NaN).  The tensor-core instructions follow the PTX ISA's
 * fragment layouts (smol_emu_ptx.h).
 *
 * Host side (emu_runtime.cpp): device memory is host memory from an allocator that knows every
 * allocation (copies are checked against their kinds, frees of unknown pointers fail), within a
 * device size (SMOL_CUDA_EMU_MEM_MB, default 4096); one device; streams run their work at
 * enqueue, in order; events time the host; stream capture records launches, copies and
 * memsets into a graph replayed by cudaGraphLaunch, and refuses what a real capture refuses
 * (synchronisation, allocation).  Every launch and graph replay is counted (emu_counters).
 */
#ifndef SMOL_CUDA_EMU_RUNTIME_H
#define SMOL_CUDA_EMU_RUNTIME_H

#ifndef SMOL_CUDA_EMU
#define SMOL_CUDA_EMU 1
#endif

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <tuple>
#include <utility>
#include <type_traits>

extern "C" {
#include "kernels/fp16.h"
}

using std::min;
using std::max;

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __shared__ static
#define __constant__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __CUDACC__ 1

/* ---- vector types ---- */
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef dim3 uint3;
#define EMU_VEC2(T, N) struct __attribute__((aligned(2 * sizeof(T)))) N { T x, y; };
#define EMU_VEC4(T, N) struct __attribute__((aligned(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)))) N { T x, y, z, w; };
EMU_VEC2(float, float2) EMU_VEC4(float, float4)
EMU_VEC2(int, int2) EMU_VEC4(int, int4)
EMU_VEC2(unsigned, uint2) EMU_VEC4(unsigned, uint4)
EMU_VEC2(double, double2)
EMU_VEC2(short, short2) EMU_VEC4(short, short4)
EMU_VEC2(unsigned short, ushort2) EMU_VEC4(unsigned short, ushort4)
EMU_VEC4(signed char, char4) EMU_VEC4(unsigned char, uchar4)
#undef EMU_VEC2
#undef EMU_VEC4
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline int2 make_int2(int a, int b) { return {a, b}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static inline char4 make_char4(signed char a, signed char b, signed char c, signed char d) { return {a, b, c, d}; }

/* ---- half and bfloat16 (the bits of kernels/fp16.h: round to nearest even) ---- */
struct __half {
    uint16_t u;
    __half() = default;
    __half(float f) : u(smol_f32_to_half(f)) {}
    operator float() const { return smol_half_to_f32(u); }
};
struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};
struct __nv_bfloat16 {
    uint16_t u;
};
typedef __half half;
/* f16 bits to float by a table (the emulated tensor-core instructions convert many) */
extern float emu_h2f_table[65536];
static inline float emu_h2f(uint16_t u) { return emu_h2f_table[u]; }
static inline float __half2float(__half h) { return smol_half_to_f32(h.u); }
static inline __half __float2half(float f) { __half h; h.u = smol_f32_to_half(f); return h; }
static inline __half __float2half_rn(float f) { return __float2half(f); }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.u = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.u; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
static inline __half2 __float2half2_rn(float a) { return {__float2half(a), __float2half(a)}; }
static inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.u << 16; float f; memcpy(&f, &u, 4); return f; }

/* ---- bit casts and fast math ---- */
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; memcpy(&u, &f, 8); return u; }
static inline float emu_expf(float x) { return expf(x); }
static inline float emu_logf(float x) { return logf(x); }
#define __expf emu_expf
#define __logf emu_logf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline long long __float2ll_rn(float x) { return llrintf(x); }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c)
{
    for (int i = 0; i < 4; i++) c += (unsigned)(uint8_t)(a >> 8 * i) * (unsigned)(uint8_t)(b >> 8 * i);
    return c;
}
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }

/* ---- the fiber a device thread runs on (emu_runtime.cpp) ---- */
struct emu_fiber {
    dim3 tid, bid;          /* threadIdx, blockIdx */
    int lin;                /* linear thread id in its block */
    int state;              /* runnable, waiting at a warp / block barrier, done */
    unsigned wait_gen;
    void *sp;               /* saved stack pointer while switched out */
    unsigned coll_gen;      /* the warp generation of this thread's last warp collective */
    unsigned long blk_serial;   /* unique to its block's run (caches keyed per block) */
    struct emu_block *blk;
};
extern emu_fiber *emu_cur;
extern dim3 emu_block_dim, emu_grid_dim;
#define threadIdx (emu_cur->tid)
#define blockIdx (emu_cur->bid)
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
static const int warpSize = 32;

void emu_syncthreads();
void emu_warp_sync(unsigned mask);
void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *emu_dyn_smem();
void emu_yield();

static inline void __syncthreads() { emu_syncthreads(); }
static inline int __syncthreads_or(int p);
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_warp_sync(mask); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline void __nanosleep(unsigned) { emu_yield(); }
static inline unsigned __activemask() { return 0xffffffffu; }

static inline int emu_lane() { return emu_cur->lin & 31; }
/* the 32 lanes' 8-byte values of one exchange (slots 32 bytes apart) */
const uint8_t *emu_warp_gather(unsigned mask, const void *mine, size_t bytes);
template <class T> static inline T emu_slot(const uint8_t *all, int lane)
{
    T v;
    memcpy(&v, all + 32 * lane, sizeof v);
    return v;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    const uint8_t *s = emu_warp_gather(mask, &v, sizeof v);
    const int l = emu_lane();
    return emu_slot<T>(s, (l & ~(width - 1)) + (src & (width - 1)));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    const uint8_t *s = emu_warp_gather(mask, &v, sizeof v);
    const int l = emu_lane(), d = l ^ m;
    return emu_slot<T>(s, (d & ~(width - 1)) == (l & ~(width - 1)) ? d : l);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    const uint8_t *s = emu_warp_gather(mask, &v, sizeof v);
    const int l = emu_lane(), i = (l & (width - 1)) - (int)d;
    return emu_slot<T>(s, i >= 0 ? l - (int)d : l);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    const uint8_t *s = emu_warp_gather(mask, &v, sizeof v);
    const int l = emu_lane(), i = (l & (width - 1)) + (int)d;
    return emu_slot<T>(s, i < width ? l + (int)d : l);
}
static inline unsigned __ballot_sync(unsigned mask, int p)
{
    const int mine = p != 0;
    const uint8_t *s = emu_warp_gather(mask, &mine, sizeof mine);
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        if ((mask >> i & 1) && emu_slot<int>(s, i)) r |= 1u << i;
    return r;
}
static inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == mask; }

/* ---- atomics (one host thread runs every fiber, switching only where threads meet) ---- */
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> static inline T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
template <class T> static inline T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <class T> static inline T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
static inline unsigned atomicInc(unsigned *p, unsigned lim) { unsigned o = *p; *p = o >= lim ? 0 : o + 1; return o; }

static inline int __syncthreads_or(int p)
{
    static int any;
    __syncthreads();
    if (p) any = 1;
    __syncthreads();
    const int r = any;
    __syncthreads();
    any = 0;
    __syncthreads();
    return r;
}

/* ---- host runtime ---- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999,
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;
typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9
} cudaFuncAttribute;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocDefault 0x00
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph_exec *cudaGraphExec_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor;
    int l2CacheSize, memoryBusWidth, clockRate, memoryClockRate, cooperativeLaunch, concurrentKernels;
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaMalloc(void **p, size_t n);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeAsync(void *p, cudaStream_t st);
cudaError_t cudaMallocHost(void **p, size_t n);
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t st = 0);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind k, cudaStream_t st = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st = 0);

cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t st);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

cudaError_t emu_func_set_attr(const void *fn, cudaFuncAttribute a, int v);
template <class F> static inline cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute a, int v)
{
    return emu_func_set_attr((const void *)fn, a, v);
}
size_t emu_dyn_smem_limit(const void *fn);

int emu_occupancy(int threads, size_t smem);
template <class F>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F *fn, int threads, size_t smem)
{
    *n = emu_occupancy(threads, smem);
    return cudaSuccess;
}

/* ---- launches ---- */
struct emu_kernel_run {
    const char *name;
    dim3 grid, block;
    size_t smem;
    int cooperative;
    void (*thunk)(void *ctx);    /* one device thread's call of the kernel */
    void *ctx;                   /* owned: freed by free_ctx */
    void (*free_ctx)(void *ctx);
    void *(*copy_ctx)(const void *ctx);
};
cudaError_t emu_submit(cudaStream_t st, emu_kernel_run *r);
/* 1 if [p, p + n) lies inside one device allocation (the emulated libraries check their operands) */
int emu_is_device(const void *p, size_t n);

template <class F, class Tup> struct emu_call {
    F fn;
    Tup args;
};
template <class F, class Tup> static void emu_thunk(void *ctx)
{
    emu_call<F, Tup> *c = (emu_call<F, Tup> *)ctx;
    Tup a = c->args;  /* each thread its own copy of the parameters, as kernel parameters are */
    std::apply(c->fn, a);
}
template <class F, class Tup> static void emu_free(void *ctx) { delete (emu_call<F, Tup> *)ctx; }
template <class F, class Tup> static void *emu_copy(const void *ctx) { return new emu_call<F, Tup>(*(const emu_call<F, Tup> *)ctx); }

/* a launch of k(a...) as one run: cooperative = every block at once */
template <class... P, class... A>
static inline cudaError_t emu_run_of(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st, int coop,
                                     void (*k)(P...), A &&...a)
{
    typedef std::tuple<typename std::decay<P>::type...> Tup;
    typedef void (*F)(P...);
    emu_kernel_run r;
    r.name = name;
    r.grid = grid;
    r.block = block;
    r.smem = smem;
    r.cooperative = coop;
    r.ctx = new emu_call<F, Tup>{k, Tup(std::forward<A>(a)...)};
    r.thunk = emu_thunk<F, Tup>;
    r.free_ctx = emu_free<F, Tup>;
    r.copy_ctx = emu_copy<F, Tup>;
    if (smem > 48 * 1024 && smem > emu_dyn_smem_limit((const void *)k)) r.smem = (size_t)-1;  /* refused at submit */
    return emu_submit(st, &r);
}

/* kernel<<<grid, block, smem, stream>>>(args...) as cu2cpp.py rewrites it */
template <class... P, class... A>
static inline void emu_launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void (*k)(P...),
                              A &&...a)
{
    emu_run_of(name, grid, block, smem, st, 0, k, std::forward<A>(a)...);
}

/* cudaLaunchCooperativeKernel's equivalent: every block of the grid runs at once (their fibers
 * interleave), so grid-wide waits work; the grid must fit the device's co-resident blocks */
template <class... P, class... A>
static inline cudaError_t emu_launch_cooperative(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                                 void (*k)(P...), A &&...a)
{
    return emu_run_of(name, grid, block, smem, st, 1, k, std::forward<A>(a)...);
}

/* ---- what the emulator counted (the plugin's counters and tests read it) ---- */
struct emu_counters {
    long kernels;           /* kernels run: launched from the host or as a replayed graph's nodes */
    long kernels_direct;    /* of which launched from the host */
    long graph_launches;    /* cudaGraphLaunch calls */
    long graph_nodes;       /* nodes run by replays (kernels, copies, memsets) */
    long copies_h2d, copies_d2h, copies_d2d, memsets;
    long syncs;             /* stream / device / event synchronisations */
    long blocks, threads;   /* blocks and device threads run */
    long captures;          /* graphs recorded */
};
extern "C" void emu_get_counters(struct emu_counters *c);
/* text of every recorded graph still alive: its nodes' kernel names, in order (the plan) */
extern "C" size_t emu_graph_plan(char *buf, size_t cap);

#include "smol_emu_ptx.h"

#endif
