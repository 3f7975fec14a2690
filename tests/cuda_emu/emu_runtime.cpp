/*
 * emu_runtime.cpp - the host side of the CUDA emulator (include/cuda_runtime.h says what it
 * emulates and how): fibers and their scheduler, barriers and warp exchanges, device memory,
 * streams, events, stream capture and graphs, the counters.  x86-64 only (the fiber switch).
 *
 * Fibers: a device thread is a fiber on its own stack (mmap'd, a guard page below), switched
 * by emu_switch (callee-saved registers, MXCSR and the x87 control word) directly to the next
 * runnable fiber of its grid; a fiber is runnable unless it waits for a barrier generation that
 * has not moved.  No runnable fiber while some still wait is a deadlock: reported, the launch
 * fails.  Under AddressSanitizer the switches are announced (start/finish_switch_fiber).
 */
#include "cuda_runtime.h"

#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#error "cuda-emu: the fiber switch is written for x86-64"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
extern "C" void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif

/* ---- the switch ---------------------------------------------------------------------------- */

extern "C" void emu_switch(void **save_sp, void *new_sp);
extern "C" void emu_fiber_start();
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch

    .globl emu_fiber_start
    .hidden emu_fiber_start
    .type emu_fiber_start, @function
emu_fiber_start:
    movq %r12, %rdi
    andq $-16, %rsp
    call emu_fiber_main
    ud2
    .size emu_fiber_start, .-emu_fiber_start
)");

/* ---- state ---------------------------------------------------------------------------------- */

enum { F_RUN = 0, F_WAIT = 1, F_DONE = 2 };
#define STACK_BYTES (256u << 10)
#define GUARD_BYTES 4096u
#define SLOT_BYTES 32

struct emu_warp {
    unsigned gen;           /* barrier generation */
    int arrived;
    unsigned mask;          /* of the barrier in progress */
    unsigned live;          /* lanes not exited */
    uint8_t buf[2][32][SLOT_BYTES];
};

struct emu_block {
    dim3 bid;
    int nthreads, live, arrived;
    unsigned gen;
    std::vector<emu_warp> warps;
    uint8_t *smem;
};

struct fiber_slot {
    emu_fiber f;
    char *stack;            /* lowest usable byte (the guard page below it) */
    unsigned *wait_on;
};

emu_fiber *emu_cur;
float emu_h2f_table[65536];
static struct h2f_init {
    h2f_init()
    {
        for (unsigned u = 0; u < 65536; u++) emu_h2f_table[u] = smol_half_to_f32((uint16_t)u);
    }
} h2f_init_once;
dim3 emu_block_dim, emu_grid_dim;
long emu_n_mma;

static std::vector<fiber_slot> fibers;
static std::vector<emu_block> blocks;
static int n_active;              /* fibers of the running grid */
static void *main_sp;             /* the launching host thread's stack while a grid runs */
static const emu_kernel_run *cur_run;
static int grid_failed;
static size_t cur_smem;
static int cur_index;
#ifdef EMU_ASAN
static void *main_fake;
static const void *main_bottom;
static size_t main_size;
#endif

static cudaError_t sticky = cudaSuccess;   /* a kernel fault: every later call fails */
static cudaError_t last_err = cudaSuccess;
static emu_counters counters;

static cudaError_t set_err(cudaError_t e)
{
    if (e != cudaSuccess) last_err = e;
    return e;
}

/* ---- failures ---------------------------------------------------------------------------- */

static void switch_to_main();

void emu_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (emu_cur && cur_run)
        fprintf(stderr, "cuda-emu: %s: block (%u,%u,%u) thread (%u,%u,%u): %s\n", cur_run->name, emu_cur->bid.x,
                emu_cur->bid.y, emu_cur->bid.z, emu_cur->tid.x, emu_cur->tid.y, emu_cur->tid.z, msg);
    else
        fprintf(stderr, "cuda-emu: %s\n", msg);
    if (emu_cur && cur_run) {
        grid_failed = 1;
        sticky = cudaErrorLaunchFailure;
        emu_cur->state = F_DONE;
        switch_to_main();  /* the grid is abandoned: nothing else of it runs */
    }
    abort();
}

/* ---- scheduling --------------------------------------------------------------------------- */

static inline int runnable(const fiber_slot &s)
{
    return s.f.state == F_RUN || (s.f.state == F_WAIT && *s.wait_on != s.f.wait_gen);
}

static void do_switch(void **save, fiber_slot *to)
{
#ifdef EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, to ? to->stack : main_bottom, to ? STACK_BYTES : main_size);
    emu_switch(save, to ? to->f.sp : main_sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    emu_switch(save, to ? to->f.sp : main_sp);
#endif
}

static void switch_to_main()
{
    fiber_slot *me = &fibers[cur_index];
    emu_cur = NULL;
    do_switch(&me->f.sp, NULL);
    abort();  /* an abandoned fiber is never resumed */
}

/* from the current fiber to the next runnable one (itself if it is the only one) */
static void schedule()
{
    const int me = cur_index;
    for (int k = 1; k <= n_active; k++) {
        const int i = (me + k) % n_active;
        fiber_slot &s = fibers[i];
        if (!runnable(s)) continue;
        if (i == me) {
            s.f.state = F_RUN;
            return;
        }
        s.f.state = F_RUN;
        cur_index = i;
        emu_cur = &s.f;
        do_switch(&fibers[me].f.sp, &s);
        /* resumed */
        cur_index = me;
        emu_cur = &fibers[me].f;
        return;
    }
    /* nothing runnable */
    int waiting = 0;
    for (int i = 0; i < n_active; i++) waiting += fibers[i].f.state != F_DONE;
    if (waiting) {
        grid_failed = 1;
        sticky = cudaErrorLaunchFailure;
        fprintf(stderr, "cuda-emu: %s: deadlock: %d threads wait at barriers no other thread will reach\n",
                cur_run ? cur_run->name : "?", waiting);
    }
    fiber_slot *self = &fibers[me];
    emu_cur = NULL;
    do_switch(&self->f.sp, NULL);
    /* only the last fiber to finish switches to main and is not resumed */
}

extern "C" __attribute__((used, visibility("hidden"))) void emu_fiber_main(fiber_slot *s)
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &main_bottom, &main_size);
#endif
    cur_run->thunk(cur_run->ctx);
    emu_fiber &f = s->f;
    emu_block *b = f.blk;
    f.state = F_DONE;
    b->live--;
    emu_warp &w = b->warps[f.lin >> 5];
    w.live &= ~(1u << (f.lin & 31));
    if (w.arrived && (w.mask >> (f.lin & 31) & 1))
        emu_fail("exited while other lanes of its warp wait at a collective with it in the mask 0x%08x", w.mask);
    if (b->arrived && b->arrived == b->live) {  /* the others wait at __syncthreads: this was the last */
        b->arrived = 0;
        b->gen++;
    }
    schedule();
    abort();
}

void emu_syncthreads()
{
    emu_block *b = emu_cur->blk;
    const unsigned g = b->gen;
    if (++b->arrived == b->live) {
        b->arrived = 0;
        b->gen++;
        return;
    }
    fiber_slot &s = fibers[cur_index];
    s.f.state = F_WAIT;
    s.f.wait_gen = g;
    s.wait_on = &b->gen;
    schedule();
}

static emu_warp &warp_arrive(unsigned mask, unsigned *gen_at_arrival)
{
    emu_block *b = emu_cur->blk;
    const int lane = emu_cur->lin & 31;
    emu_warp &w = b->warps[emu_cur->lin >> 5];
    if (!(mask >> lane & 1)) emu_fail("a warp collective with mask 0x%08x that leaves out its own lane %d", mask, lane);
    const int wn = (int)(emu_cur->lin >> 5), nt = b->nthreads;
    const unsigned exists = nt >= 32 * (wn + 1) ? 0xffffffffu : (1u << (nt - 32 * wn)) - 1;
    if (mask & ~exists)
        emu_fail("a warp collective with mask 0x%08x in a warp of lanes 0x%08x", mask, exists);
    if (mask & ~w.live)
        emu_fail("a warp collective with mask 0x%08x after lanes 0x%08x of it exited", mask, mask & ~w.live);
    if (w.arrived && w.mask != mask)
        emu_fail("warp collectives with masks 0x%08x and 0x%08x meet at once", w.mask, mask);
    *gen_at_arrival = w.gen;
    w.mask = mask;
    return w;
}

static void warp_wait(emu_warp &w, unsigned mask, unsigned g)
{
    if (++w.arrived == __builtin_popcount(mask)) {
        w.arrived = 0;
        w.gen++;
        return;
    }
    fiber_slot &s = fibers[cur_index];
    s.f.state = F_WAIT;
    s.f.wait_gen = g;
    s.wait_on = &w.gen;
    schedule();
}

void emu_warp_sync(unsigned mask)
{
    unsigned g;
    emu_warp &w = warp_arrive(mask, &g);
    warp_wait(w, mask, g);
}

const uint8_t *emu_warp_gather(unsigned mask, const void *mine, size_t bytes)
{
    unsigned g;
    emu_warp &w = warp_arrive(mask, &g);
    uint8_t(*buf)[SLOT_BYTES] = w.buf[g & 1];
    memcpy(buf[emu_cur->lin & 31], mine, bytes);
    emu_cur->coll_gen = g;
    warp_wait(w, mask, g);
    return &buf[0][0];
}

void emu_yield()
{
    fiber_slot &s = fibers[cur_index];
    static unsigned never_moves = 0;
    s.f.state = F_WAIT;
    s.f.wait_gen = never_moves + 1;  /* runnable at once: yields to the others first */
    s.wait_on = &never_moves;
    schedule();
}

void *emu_dyn_smem()
{
    return emu_cur->blk->smem;
}

/* ---- running a grid ---------------------------------------------------------------------- */

static void ensure_fibers(size_t n)
{
    while (fibers.size() < n) {
        fiber_slot s;
        memset(&s, 0, sizeof s);
        char *m = (char *)mmap(NULL, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda-emu: cannot map a fiber stack\n");
            abort();
        }
        mprotect(m, GUARD_BYTES, PROT_NONE);
        s.stack = m + GUARD_BYTES;
        fibers.push_back(s);
    }
}

static unsigned long block_serial;
static void init_fiber(fiber_slot &s, emu_block *b, int lin)
{
    if (lin == 0) block_serial++;
    s.f.blk_serial = block_serial;
    const dim3 bd = emu_block_dim;
    s.f.lin = lin;
    s.f.tid = dim3(lin % bd.x, lin / bd.x % bd.y, lin / (bd.x * bd.y));
    s.f.bid = b->bid;
    s.f.state = F_RUN;
    s.f.blk = b;
    s.wait_on = NULL;
#ifdef EMU_ASAN
    /* the frames a finished (or abandoned) fiber left above its last stack pointer never returned
     * (it switched away for good): their redzones would stay poisoned under the next one's frames */
    if (s.f.sp) __asan_unpoison_memory_region(s.f.sp, (size_t)(s.stack + STACK_BYTES - (char *)s.f.sp));
#endif
    uint64_t *sp = (uint64_t *)(s.stack + STACK_BYTES - 64);
    sp -= 8;
    sp[0] = 0x037F00001F80ull;  /* MXCSR 0x1f80 (low 4 bytes), x87 control word 0x037f */
    sp[1] = 0;                 /* r15 */
    sp[2] = 0;                 /* r14 */
    sp[3] = 0;                 /* r13 */
    sp[4] = (uint64_t)&s;      /* r12: emu_fiber_start's argument */
    sp[5] = 0;                 /* rbx */
    sp[6] = 0;                 /* rbp */
    sp[7] = (uint64_t)emu_fiber_start;
    s.f.sp = sp;
}

static void setup_block(emu_block &b, dim3 bid, int nt, uint8_t *smem)
{
    b.bid = bid;
    b.nthreads = b.live = nt;
    b.arrived = 0;
    b.gen = 0;
    const int nw = (nt + 31) / 32;
    b.warps.resize(nw);
    for (int w = 0; w < nw; w++) {
        b.warps[w].gen = 0;
        b.warps[w].arrived = 0;
        b.warps[w].mask = 0;
        b.warps[w].live = nt >= 32 * (w + 1) ? 0xffffffffu : (1u << (nt - 32 * w)) - 1;
    }
    b.smem = smem;
}

/* runs the fibers set up in fibers[0, n): returns when all are done or the grid failed */
static void run_fibers(int n)
{
    n_active = n;
    cur_index = 0;
    emu_cur = &fibers[0].f;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&main_fake, fibers[0].stack, STACK_BYTES);
    emu_switch(&main_sp, fibers[0].f.sp);
    __sanitizer_finish_switch_fiber(main_fake, NULL, NULL);
#else
    emu_switch(&main_sp, fibers[0].f.sp);
#endif
    emu_cur = NULL;
}

static int coresident_blocks(const emu_kernel_run *r);

static cudaError_t run_grid(const emu_kernel_run *r)
{
    const int nt = (int)(r->block.x * r->block.y * r->block.z);
    emu_block_dim = r->block;
    emu_grid_dim = r->grid;
    cur_run = r;
    grid_failed = 0;
    const size_t smem = r->smem;
    static std::vector<uint8_t> smem_buf;
    const long nb = (long)r->grid.x * r->grid.y * r->grid.z;
    counters.kernels++;
    counters.blocks += nb;
    counters.threads += nb * nt;
    if (r->cooperative) {
        if (nb > coresident_blocks(r)) {
            cur_run = NULL;
            return set_err(cudaErrorCooperativeLaunchTooLarge);
        }
        ensure_fibers((size_t)nb * nt);
        blocks.resize(nb);
        smem_buf.assign((size_t)nb * ((smem + 15) & ~(size_t)15) + 16, 0xff);
        long i = 0;
        for (unsigned z = 0; z < r->grid.z; z++)
            for (unsigned y = 0; y < r->grid.y; y++)
                for (unsigned x = 0; x < r->grid.x; x++, i++) {
                    setup_block(blocks[i], dim3(x, y, z), nt, smem_buf.data() + i * ((smem + 15) & ~(size_t)15));
                    for (int t = 0; t < nt; t++) init_fiber(fibers[i * nt + t], &blocks[i], t);
                }
        run_fibers((int)(nb * nt));
    } else {
        ensure_fibers((size_t)nt);
        blocks.resize(1);
        if (smem_buf.size() < smem + 16) smem_buf.resize(smem + 16);
        for (unsigned z = 0; z < r->grid.z && !grid_failed; z++)
            for (unsigned y = 0; y < r->grid.y && !grid_failed; y++)
                for (unsigned x = 0; x < r->grid.x && !grid_failed; x++) {
                    if (smem) memset(smem_buf.data(), 0xff, smem);
                    setup_block(blocks[0], dim3(x, y, z), nt, smem_buf.data());
                    for (int t = 0; t < nt; t++) init_fiber(fibers[t], &blocks[0], t);
                    run_fibers(nt);
                }
    }
    cur_run = NULL;
    return grid_failed ? cudaErrorLaunchFailure : cudaSuccess;
}

/* ---- device, memory ---------------------------------------------------------------------- */

static size_t mem_limit()
{
    static size_t lim;
    if (!lim) {
        const char *e = getenv("SMOL_CUDA_EMU_MEM_MB");
        long mb = e && *e ? atol(e) : 4096;
        lim = (size_t)(mb > 0 ? mb : 4096) << 20;
    }
    return lim;
}

static int n_sms()
{
    const char *e = getenv("SMOL_CUDA_EMU_SMS");
    const int n = e && *e ? atoi(e) : 132;
    return n > 0 && n <= 1024 ? n : 132;
}

static std::map<uintptr_t, size_t> dev_allocs, host_allocs;
static size_t dev_used;

/* the allocation holding [p, p + n), or 0 */
static int in_map(const std::map<uintptr_t, size_t> &m, const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return 0;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}
static int is_dev(const void *p, size_t n) { return in_map(dev_allocs, p, n ? n : 1); }
int emu_is_device(const void *p, size_t n) { return is_dev(p, n); }
static int touches_dev(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = dev_allocs.upper_bound(a);
    if (it == dev_allocs.begin()) return 0;
    --it;
    return a >= it->first && a < it->first + it->second;
}

static std::set<const emu_stream *> capturing_streams;
static int capture_active() { return !capturing_streams.empty(); }
static void invalidate_captures();

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return set_err(d == 0 ? cudaSuccess : cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0) return set_err(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda-emu (host emulation, sm_90, %d SMs)", n_sms());
    p->totalGlobalMem = mem_limit();
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 232448;
    p->sharedMemPerMultiprocessor = 233472;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = n_sms();
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 50 << 20;
    p->cooperativeLaunch = 1;
    p->concurrentKernels = 1;
    return cudaSuccess;
}

/* blocks of `threads` an SM holds at once: one, unless SMOL_CUDA_EMU_OCC says more (up to what
 * the threads, shared memory and the 32-block limit allow).  A cooperative grid runs as one set of
 * fibers, its waiting blocks spinning: one block an SM keeps that cheap here. */
int emu_occupancy(int threads, size_t smem)
{
    int per = 2048 / (threads > 0 ? threads : 1);
    if (smem) {
        const int by_smem = (int)(233472 / (smem + 1024));
        if (by_smem < per) per = by_smem;
    }
    if (per > 32) per = 32;
    const char *e = getenv("SMOL_CUDA_EMU_OCC");
    const int want = e && *e && atoi(e) > 0 ? atoi(e) : 1;
    return want < per ? want : per;
}

static int coresident_blocks(const emu_kernel_run *r)
{
    return emu_occupancy((int)(r->block.x * r->block.y * r->block.z), r->smem) * n_sms();
}

cudaError_t cudaDeviceSynchronize()
{
    counters.syncs++;
    if (capture_active()) {
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return sticky;
}
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
    *t = mem_limit();
    *f = mem_limit() > dev_used ? mem_limit() - dev_used : 0;
    return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define N(x) case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
        N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
        N(cudaErrorInsufficientDriver) N(cudaErrorNoDevice) N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle)
        N(cudaErrorNotReady) N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchFailure)
        N(cudaErrorCooperativeLaunchTooLarge) N(cudaErrorNotSupported) N(cudaErrorStreamCaptureUnsupported)
        N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureWrongThread) N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cuda-emu: see the line above)";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError()
{
    if (sticky) return sticky;
    const cudaError_t e = last_err;
    last_err = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return sticky ? sticky : last_err; }

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = NULL;
    if (sticky) return sticky;
    if (capture_active()) {  /* a real capture (global / thread-local mode) refuses it */
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    const size_t sz = ((n ? n : 1) + 255) & ~(size_t)255;
    if (dev_used + sz > mem_limit()) return set_err(cudaErrorMemoryAllocation);
    void *m = aligned_alloc(256, sz);
    if (!m) return set_err(cudaErrorMemoryAllocation);
    memset(m, 0xff, sz);  /* device memory is not zeroed: reads before writes show as NaN */
    dev_allocs[(uintptr_t)m] = sz;
    dev_used += sz;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    if (capture_active()) {
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    auto it = dev_allocs.find((uintptr_t)p);
    if (it == dev_allocs.end()) {
        fprintf(stderr, "cuda-emu: cudaFree(%p): not an allocation of cudaMalloc\n", p);
        return set_err(cudaErrorInvalidDevicePointer);
    }
    dev_used -= it->second;
    dev_allocs.erase(it);
    free(p);
    return sticky;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
    const size_t sz = ((n ? n : 1) + 63) & ~(size_t)63;
    void *m = aligned_alloc(64, sz);
    if (!m) return set_err(cudaErrorMemoryAllocation);
    host_allocs[(uintptr_t)m] = sz;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void *p)
{
    if (!p) return cudaSuccess;
    auto it = host_allocs.find((uintptr_t)p);
    if (it == host_allocs.end()) return set_err(cudaErrorInvalidValue);
    host_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

/* ---- streams, capture, graphs ---------------------------------------------------------------- */

enum { N_KERNEL, N_COPY, N_COPY2D, N_SET, N_EVENT, N_FREE };
struct emu_event {
    double t;
    int recorded;
};
struct node {
    int kind;
    emu_kernel_run run;     /* N_KERNEL: owns run.ctx */
    void *dst;
    const void *src;
    size_t n, dpitch, spitch, height;
    int value;
    cudaMemcpyKind k;
    emu_event *ev;
};
struct emu_graph {
    std::vector<node> nodes;
};
struct emu_graph_exec {
    std::vector<node> nodes;
};
struct emu_stream {
    int capturing, invalid;
    emu_graph *cap;
};
static emu_stream legacy_stream;
static std::set<emu_graph_exec *> live_execs;

static emu_stream *S(cudaStream_t st) { return st ? st : &legacy_stream; }

static void invalidate_captures()
{
    for (const emu_stream *s : capturing_streams) ((emu_stream *)s)->invalid = 1;
}

static double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static cudaError_t check_copy(const void *dst, const void *src, size_t n, cudaMemcpyKind k, const char *what)
{
    const int dd = is_dev(dst, n), sd = is_dev(src, n);
    int ok;
    switch (k) {
    case cudaMemcpyHostToDevice: ok = dd && !touches_dev(src); break;
    case cudaMemcpyDeviceToHost: ok = sd && !touches_dev(dst); break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !touches_dev(dst) && !touches_dev(src); break;
    default: ok = (dd || !touches_dev(dst)) && (sd || !touches_dev(src)); break;
    }
    if (!ok) {
        fprintf(stderr, "cuda-emu: %s of %zu bytes from %p%s to %p%s with kind %d: the pointers are not of that kind "
                "(or the range leaves its allocation)\n", what, n, src, sd ? " (device)" : "", dst, dd ? " (device)" : "",
                (int)k);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

static void count_copy(cudaMemcpyKind k)
{
    if (k == cudaMemcpyHostToDevice) counters.copies_h2d++;
    else if (k == cudaMemcpyDeviceToHost) counters.copies_d2h++;
    else counters.copies_d2d++;
}

static void run_node(const node &nd)
{
    switch (nd.kind) {
    case N_KERNEL: run_grid(&nd.run); break;
    case N_COPY: memcpy(nd.dst, nd.src, nd.n); count_copy(nd.k); break;
    case N_COPY2D:
        for (size_t r = 0; r < nd.height; r++)
            memcpy((char *)nd.dst + r * nd.dpitch, (const char *)nd.src + r * nd.spitch, nd.n);
        count_copy(nd.k);
        break;
    case N_SET: memset(nd.dst, nd.value, nd.n); counters.memsets++; break;
    case N_EVENT: nd.ev->t = now_ms(); nd.ev->recorded = 1; break;
    case N_FREE: cudaFree(nd.dst); break;
    }
}

/* runs a stream op now, or records it into the stream's capture */
static cudaError_t enqueue(cudaStream_t st, node &nd)
{
    emu_stream *s = S(st);
    if (sticky) {
        if (nd.kind == N_KERNEL) nd.run.free_ctx(nd.run.ctx);
        return sticky;
    }
    if (s->capturing) {
        if (nd.kind == N_COPY && nd.k != cudaMemcpyDeviceToDevice) {
            const void *host = nd.k == cudaMemcpyHostToDevice ? nd.src : nd.dst;
            if (!in_map(host_allocs, host, nd.n))
                fprintf(stderr, "cuda-emu: note: a captured copy of %zu bytes reads or writes pageable host memory at "
                        "%p: a replay uses that memory as it is then\n", nd.n, host);
        }
        s->cap->nodes.push_back(nd);
        return cudaSuccess;
    }
    if (nd.kind == N_KERNEL) {
        const cudaError_t e = run_grid(&nd.run);
        nd.run.free_ctx(nd.run.ctx);
        return e;
    }
    run_node(nd);
    return cudaSuccess;
}

cudaError_t emu_submit(cudaStream_t st, emu_kernel_run *r)
{
    const long nt = (long)r->block.x * r->block.y * r->block.z;
    cudaError_t e = cudaSuccess;
    if (!r->grid.x || !r->grid.y || !r->grid.z || nt < 1 || nt > 1024 || r->block.z > 64 || r->grid.y > 65535 ||
        r->grid.z > 65535)
        e = cudaErrorInvalidConfiguration;
    else if (r->smem == (size_t)-1 || r->smem > 232448)
        e = cudaErrorInvalidValue;
    if (e) {
        fprintf(stderr, "cuda-emu: launch of %s refused: grid (%u,%u,%u) block (%u,%u,%u) shared %zu: %s\n", r->name,
                r->grid.x, r->grid.y, r->grid.z, r->block.x, r->block.y, r->block.z,
                r->smem == (size_t)-1 ? (size_t)0 : r->smem, cudaGetErrorString(e));
        r->free_ctx(r->ctx);
        return set_err(e);
    }
    node nd = {};
    nd.kind = N_KERNEL;
    nd.run = *r;
    if (!S(st)->capturing) counters.kernels_direct++;
    e = enqueue(st, nd);
    if (e == cudaErrorCooperativeLaunchTooLarge) set_err(e);
    return e;
}

static std::map<const void *, int> smem_attr;
cudaError_t emu_func_set_attr(const void *fn, cudaFuncAttribute a, int v)
{
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 232448) return set_err(cudaErrorInvalidValue);
        smem_attr[fn] = v;
    }
    return cudaSuccess;
}
size_t emu_dyn_smem_limit(const void *fn)
{
    auto it = smem_attr.find(fn);
    return it == smem_attr.end() ? 48 * 1024 : (size_t)it->second;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t st)
{
    if (!n) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, k, "cudaMemcpyAsync");
    if (e) return set_err(e);
    node nd = {};
    nd.kind = N_COPY;
    nd.dst = dst;
    nd.src = src;
    nd.n = n;
    nd.k = k;
    return set_err(enqueue(st, nd));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    if (capture_active()) {
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, 0);
    counters.syncs++;
    return e ? e : sticky;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind k, cudaStream_t st)
{
    if (!width || !height) return cudaSuccess;
    if (width > dpitch || width > spitch) return set_err(cudaErrorInvalidValue);
    cudaError_t e = check_copy(dst, src, dpitch * (height - 1) + width, k, "cudaMemcpy2DAsync");
    if (!e) e = check_copy((const char *)dst + dpitch * (height - 1), (const char *)src + spitch * (height - 1), width,
                           k, "cudaMemcpy2DAsync");
    if (!e) e = check_copy(dst, src, width, k, "cudaMemcpy2DAsync");
    if (e) return set_err(e);
    node nd = {};
    nd.kind = N_COPY2D;
    nd.dst = dst;
    nd.src = src;
    nd.n = width;
    nd.dpitch = dpitch;
    nd.spitch = spitch;
    nd.height = height;
    nd.k = k;
    return set_err(enqueue(st, nd));
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
    if (!n) return cudaSuccess;
    if (!is_dev(p, n)) {
        fprintf(stderr, "cuda-emu: cudaMemset of %zu bytes at %p: not device memory\n", n, p);
        return set_err(cudaErrorInvalidValue);
    }
    node nd = {};
    nd.kind = N_SET;
    nd.dst = p;
    nd.n = n;
    nd.value = v;
    return set_err(enqueue(st, nd));
}
cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (capture_active()) {
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return cudaMemsetAsync(p, v, n, 0);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t st)
{
    if (!p) return cudaSuccess;
    node nd = {};
    nd.kind = N_FREE;
    nd.dst = p;
    if (S(st)->capturing) {  /* freed when the graph runs: not what the backend does; refused */
        S(st)->invalid = 1;
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return set_err(enqueue(st, nd));
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned)
{
    *st = new emu_stream();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    if (st) {
        capturing_streams.erase(st);
        delete st;
    }
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    counters.syncs++;
    if (S(st)->capturing) {
        S(st)->invalid = 1;
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return sticky;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode)
{
    emu_stream *s = S(st);
    if (!st || s->capturing) return set_err(cudaErrorStreamCaptureUnsupported);  /* not the legacy stream */
    s->capturing = 1;
    s->invalid = 0;
    s->cap = new emu_graph();
    capturing_streams.insert(s);
    return sticky;
}

static void free_nodes(std::vector<node> &v)
{
    for (node &n : v)
        if (n.kind == N_KERNEL) n.run.free_ctx(n.run.ctx);
    v.clear();
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g)
{
    emu_stream *s = S(st);
    *g = NULL;
    if (!s->capturing) return set_err(cudaErrorInvalidValue);
    s->capturing = 0;
    capturing_streams.erase(s);
    if (s->invalid) {
        free_nodes(s->cap->nodes);
        delete s->cap;
        s->cap = NULL;
        return set_err(cudaErrorStreamCaptureInvalidated);
    }
    *g = s->cap;
    s->cap = NULL;
    counters.captures++;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long)
{
    if (!g) return set_err(cudaErrorInvalidValue);
    emu_graph_exec *e = new emu_graph_exec();
    for (const node &n : g->nodes) {
        node c = n;
        if (c.kind == N_KERNEL) c.run.ctx = n.run.copy_ctx(n.run.ctx);
        e->nodes.push_back(c);
    }
    live_execs.insert(e);
    *x = e;
    if (getenv("SMOL_CUDA_EMU_PLAN")) {  /* the plan of each graph as it is made */
        int k = 0;
        for (const node &n : e->nodes) k += n.kind == N_KERNEL;
        fprintf(stderr, "cuda-emu: graph recorded: %zu nodes, %d kernels:", e->nodes.size(), k);
        std::vector<std::pair<std::string, int>> runs;  /* consecutive nodes of one name */
        for (const node &n : e->nodes) {
            std::string nm = n.kind == N_KERNEL ? n.run.name : n.kind == N_SET ? "memset" : n.kind == N_EVENT ? "event" : "copy";
            nm = nm.substr(0, nm.find('<'));
            if (!runs.empty() && runs.back().first == nm) runs.back().second++;
            else runs.push_back({nm, 1});
        }
        /* the per-layer repeat shown once: the first runs up to the first name seen again */
        size_t i = 0;
        for (; i < runs.size() && i < 24; i++) fprintf(stderr, " %s%s", runs[i].first.c_str(),
                                                       runs[i].second > 1 ? ("x" + std::to_string(runs[i].second)).c_str() : "");
        if (i < runs.size()) fprintf(stderr, " ... (%zu runs more)", runs.size() - i);
        fprintf(stderr, "\n");
    }
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t st)
{
    if (!x || !live_execs.count(x)) return set_err(cudaErrorInvalidResourceHandle);
    if (sticky) return sticky;
    if (S(st)->capturing) {  /* a graph launched into a capture: not used by the backend */
        S(st)->invalid = 1;
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    counters.graph_launches++;
    for (const node &n : x->nodes) {
        counters.graph_nodes++;
        run_node(n);
        if (sticky) return sticky;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    if (!x) return cudaSuccess;
    if (!live_execs.erase(x)) return set_err(cudaErrorInvalidResourceHandle);
    free_nodes(x->nodes);
    delete x;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    if (!g) return cudaSuccess;
    free_nodes(g->nodes);
    delete g;
    return cudaSuccess;
}

/* ---- events --------------------------------------------------------------------------------- */

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new emu_event();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
    node nd = {};
    nd.kind = N_EVENT;
    nd.ev = e;
    return set_err(enqueue(st, nd));
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    counters.syncs++;
    if (capture_active()) {
        invalidate_captures();
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return e->recorded ? sticky : set_err(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a->recorded || !b->recorded) return set_err(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

/* ---- counters and the plan ------------------------------------------------------------------- */

extern "C" void emu_get_counters(struct emu_counters *c) { *c = counters; }

extern "C" size_t emu_graph_plan(char *buf, size_t cap)
{
    std::string s;
    int gi = 0;
    for (const emu_graph_exec *x : live_execs) {
        int k = 0;
        for (const node &n : x->nodes) k += n.kind == N_KERNEL;
        char head[96];
        snprintf(head, sizeof head, "graph %d: %zu nodes, %d kernels:", gi++, x->nodes.size(), k);
        s += head;
        std::map<std::string, int> by;
        std::vector<std::string> order;
        for (const node &n : x->nodes) {
            std::string nm = n.kind == N_KERNEL ? n.run.name : n.kind == N_SET ? "memset" : n.kind == N_EVENT ? "event" : "copy";
            if (!by[nm]++) order.push_back(nm);
        }
        for (const std::string &nm : order) {
            char one[160];
            snprintf(one, sizeof one, " %s x%d", nm.c_str(), by[nm]);
            s += one;
        }
        s += "\n";
    }
    if (cap) {
        const size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
        memcpy(buf, s.data(), n);
        buf[n] = 0;
    }
    return s.size();
}
