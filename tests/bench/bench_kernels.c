/*
 * bench_kernels.c - single-thread timing of the matmul kernels of every CPU
 * variant on one weight matrix (rows x cols) against 1..N tokens: time per
 * call, weight GB/s and integer GMAC/s, best of several runs, counted in
 * process CPU time as well as wall time (this machine is shared).
 *
 *   bench_kernels [rows cols [VARIANT...]]   default 2048 x 2048, q4_K, q6_K, q8_0, q4_1;
 *                                           variants ref avx2 avxvnni avx512 (all)
 *   bench_kernels --which    the table the CPU backend uses here and why (one line:
 *                            "cpu-avx2: SMOL_CPU=avx2 (...)"), for make bench's header
 */
#include "kernels/cpu_kernels.h"
#include "kernels/quant_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--which")) {
        printf("%s: %s\n", smol_cpu_kernels()->name, smol_cpu_kernels_why());
        return 0;
    }
    const int rows = argc > 2 ? atoi(argv[1]) : 2048, cols = argc > 2 ? atoi(argv[2]) : 2048;
    if (rows <= 0 || cols <= 0) {
        fprintf(stderr, "usage: bench_kernels [rows cols [VARIANT...]] | --which\n");
        return 2;
    }
    const uint32_t types[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_1};
    const char *all[] = {"ref", "avx2", "avxvnni", "avx512"}, **variants = all;
    int n_var = 4;
    if (argc > 3) {
        variants = (const char **)argv + 3;
        n_var = argc - 3;
    }
    const int toks[] = {1, 4, 8, 16, 64};
    float *x = malloc(sizeof(float) * cols * 64), *out = malloc(sizeof(float) * rows * 64);
    for (int i = 0; i < cols * 64; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1;
    for (int ti = 0; ti < 4; ti++) {
        const struct smol_type_traits *tr = smol_type_traits(types[ti]), *at = smol_type_traits(tr->vec_dot_type);
        if (cols % tr->block_size) { printf("%-5s: %d columns are not whole blocks, skipped\n", tr->name, cols); continue; }
        const size_t wrow = smol_row_size(types[ti], cols), arow = smol_row_size(tr->vec_dot_type, cols);
        uint8_t *w = malloc(wrow * rows), *a = malloc(arow * 64);
        for (size_t i = 0; i < wrow * rows; i++) w[i] = (uint8_t)(i * 7 + (i >> 9));
        for (int r = 0; r < rows; r++) tr->quantize(x, w + r * wrow, cols); /* sane blocks */
        for (int t = 0; t < 64; t++) at->quantize(x + (size_t)t * cols, a + t * arow, cols);
        for (int vi = 0; vi < n_var; vi++) {
            const struct smol_cpu_kernels *k = smol_cpu_kernels_variant(variants[vi]);
            if (!k) { printf("%-6s %-5s SKIPPED (not supported)\n", variants[vi], tr->name); continue; }
            for (int q = 0; q < 5; q++) {
                const int nt = toks[q];
                const int is_ref = !strcmp(variants[vi], "ref");
                if (is_ref && nt > 4) continue;
                double best_w = 1e9, best_c = 1e9;
                for (int rep = 0; rep < (is_ref ? 2 : 7); rep++) {
                    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
                    if (k->gemm[types[ti]]) k->gemm[types[ti]](cols, w, wrow, rows, a, arow, nt, out, rows);
                    else
                        for (int t = 0; t < nt; t++)
                            for (int r = 0; r < rows; r++) out[t * rows + r] = k->vec_dot[types[ti]](cols, w + r * wrow, a + t * arow);
                    double dw = now(CLOCK_MONOTONIC) - w0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                    if (dw < best_w) best_w = dw;
                    if (dc < best_c) best_c = dc;
                }
                printf("%-6s %-5s %4dx%-5d tok %2d: %8.3f ms (cpu %8.3f ms) %6.2f GB/s weights  %6.2f GMAC/s\n",
                       variants[vi], tr->name, rows, cols, nt, best_w * 1e3, best_c * 1e3, wrow * rows / best_c / 1e9,
                       (double)rows * cols * nt / best_c / 1e9);
            }
            /* repacked weights, as the CPU backend multiplies them: tasks of 64 rows */
            if (k->pack[types[ti]] && rows % 64 == 0) {
                void *pk = NULL;
                if (posix_memalign(&pk, 64, wrow * rows)) return 1;
                k->pack[types[ti]](cols, w, wrow, rows, pk);
                for (int q = 0; q < 5; q++) {
                    const int nt = toks[q];
                    double best_w = 1e9, best_c = 1e9;
                    for (int rep = 0; rep < 7; rep++) {
                        double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
                        for (int r0 = 0; r0 < rows; r0 += 64)
                            k->gemm_packed[types[ti]](cols, (const uint8_t *)pk + (size_t)r0 * wrow, 64, a, arow, nt,
                                                      out + r0, rows);
                        double dw = now(CLOCK_MONOTONIC) - w0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                        if (dw < best_w) best_w = dw;
                        if (dc < best_c) best_c = dc;
                    }
                    printf("%-6s %-5s %4dx%-5d tok %2d: %8.3f ms (cpu %8.3f ms) %6.2f GB/s weights  %6.2f GMAC/s  (repacked)\n",
                           variants[vi], tr->name, rows, cols, nt, best_w * 1e3, best_c * 1e3,
                           wrow * rows / best_c / 1e9, (double)rows * cols * nt / best_c / 1e9);
                }
                free(pk);
            }
        }
        free(w);
        free(a);
    }
    free(x);
    free(out);
    return 0;
}
