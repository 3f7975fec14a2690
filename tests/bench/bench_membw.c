/*
 * bench_membw.c - read bandwidth of this machine with N threads, the
 * ceiling for decoding (every weight byte is read once per token).
 *
 *   bench_membw [-t THREADS] [-m MIB] [-r READS]   default 2 threads, 1024 MiB, 16
 *
 * Each thread streams its own part of a buffer much larger than the caches
 * (transparent huge pages asked for, as a ceiling should be) in three ways:
 * 256-bit loads with the hardware prefetchers alone, and 512-bit loads (where
 * the CPU has AVX-512) with software prefetch 1 KiB and 4 KiB ahead, as the
 * decode kernels do; 64-bit loads without AVX2.  A pass reads the buffer
 * READS times (~0.3 s): on a shared machine a single 20 ms read catches
 * bursts of up to 90 GB/s that no decode of a few seconds ever sees, so the
 * ceiling is a sustained rate.  The best pass of any method
 * is the machine's read bandwidth, printed as "read bandwidth: X GB/s", and
 * with --json as {"read_gbs": X} on the last line.  MEMBW_VERBOSE=1 in the
 * environment prints every pass (on a shared machine they spread widely).
 */
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}

#define DEFINE_SUM_PF(DIST)                                                                          \
    __attribute__((target("avx512f"))) static uint64_t sum_pf##DIST(const uint8_t *p, size_t n)     \
    {                                                                                                \
        __m512i a0 = _mm512_setzero_si512(), a1 = a0;                                                \
        for (size_t i = 0; i + 128 <= n; i += 128) {                                                 \
            _mm_prefetch((const char *)p + i + DIST, _MM_HINT_T0);                                   \
            _mm_prefetch((const char *)p + i + DIST + 64, _MM_HINT_T0);                              \
            a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));                                     \
            a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));                                \
        }                                                                                            \
        a0 = _mm512_xor_si512(a0, a1);                                                               \
        return (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(a0));                              \
    }
DEFINE_SUM_PF(1024)
DEFINE_SUM_PF(4096)
#endif

static uint64_t sum_plain(const uint8_t *p, size_t n)
{
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) { a0 ^= q[i]; a1 ^= q[i + 1]; a2 ^= q[i + 2]; a3 ^= q[i + 3]; }
    return a0 ^ a1 ^ a2 ^ a3;
}

struct arg { const uint8_t *p; size_t n; uint64_t out; pthread_barrier_t *bar; int method, reads; };
static int use_avx2, use_avx512;

static uint64_t read_once(const struct arg *a)
{
#if defined(__x86_64__)
    if (a->method == 1 && use_avx512) return sum_pf1024(a->p, a->n);
    if (a->method == 2 && use_avx512) return sum_pf4096(a->p, a->n);
    if (use_avx2) return sum_avx2(a->p, a->n);
#endif
    return sum_plain(a->p, a->n);
}

static void *reader(void *v)
{
    struct arg *a = v;
    pthread_barrier_wait(a->bar);
    for (int r = 0; r < a->reads; r++) a->out ^= read_once(a);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 2, json = 0, reads = 16;
    size_t mib = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else { fprintf(stderr, "usage: bench_membw [-t THREADS] [-m MIB] [-r READS] [--json]\n"); return 2; }
    }
    if (threads < 1 || threads > 256 || mib < 64 || reads < 1 || reads > 1000) { fprintf(stderr, "bench_membw: bad arguments\n"); return 2; }
#if defined(__x86_64__)
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2");
    use_avx512 = __builtin_cpu_supports("avx512f");
#endif
    const size_t n = mib << 20, part = n / threads / 128 * 128;
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, 64, n)) { fprintf(stderr, "bench_membw: out of memory\n"); return 1; }
#ifdef MADV_HUGEPAGE
    madvise(buf, n, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < n; i += 4096) buf[i] = (uint8_t)i; /* fault every page in */
    memset(buf, 1, n);
    double best = 0;
    uint64_t sink = 0;
    const int passes = 9;
    for (int pass = 0; pass < passes; pass++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
        pthread_t th[256];
        struct arg args[256];
        for (int t = 0; t < threads; t++) {
            args[t] = (struct arg){buf + (size_t)t * part, part, 0, &bar, pass % 3, reads};
            pthread_create(&th[t], NULL, reader, &args[t]);
        }
        pthread_barrier_wait(&bar);
        double t0 = now();
        for (int t = 0; t < threads; t++) { pthread_join(th[t], NULL); sink ^= args[t].out; }
        double gbs = part * (double)threads * reads / (now() - t0) / 1e9;
        if (getenv("MEMBW_VERBOSE")) fprintf(stderr, "pass %d method %d: %.2f GB/s\n", pass, pass % 3, gbs);
        if (gbs > best) best = gbs;
        pthread_barrier_destroy(&bar);
    }
    printf("read bandwidth: %.2f GB/s (%d threads, %zu MiB read %d times a pass, best of %d passes, 3 methods; checksum %llx)\n",
           best, threads, mib, reads, passes, (unsigned long long)(sink & 0xff));
    if (json) printf("{\"read_gbs\": %.3f}\n", best);
    free(buf);
    return 0;
}
