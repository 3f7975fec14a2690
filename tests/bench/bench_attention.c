/*
 * bench_attention.c - decode attention of the CPU backend over a long
 * context: one token's query against DEPTH cached positions in every layer
 * (SmolLM3-3B's geometry: 16 query heads, 4 KV heads of 128; cache type
 * f16, or -k q8_0 / f32),
 * through the backend op the engine calls.  Prints the time per token and
 * the rate at which it reads the cache (K and V of all layers, GB/s) — to
 * hold against bench_membw's figure.  Best of 5 passes (a shared machine).
 *
 *   bench_attention [-t THREADS] [-d DEPTH] [-l LAYERS] [-k f16|q8_0|f32]    default 2, 4096, 36, f16
 */
#include "daemon/model/backend.h"
#include "daemon/model/kv.h"
#include "kernels/fp16.h"
#include "kernels/quant_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 2, depth = 4096, layers = 36;
    const char *kv_name = "f16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-l") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kv_name = argv[++i];
        else { fprintf(stderr, "usage: bench_attention [-t THREADS] [-d DEPTH] [-l LAYERS] [-k f16|q8_0|f32]\n"); return 2; }
    }
    if (threads < 1 || depth < 1 || layers < 1 || depth > (1 << 20)) { fprintf(stderr, "bench_attention: bad arguments\n"); return 2; }
    const int n_heads = 16, n_kv = 4, hd = 128, n_pos = depth + 1;
    char err[SMOL_ERRLEN];
    uint32_t type;
    if (smol_kv_type_parse(kv_name, &type, err)) { fprintf(stderr, "bench_attention: %s\n", err); return 2; }
    struct smol_backend *be = NULL;
    struct smol_kv kv;
    struct smol_kv_seq seq;
    if (smol_backend_cpu_new(&be, threads, err) || be->reserve(be, 1, n_heads * hd, n_pos, err) ||
        smol_kv_init(&kv, be, layers, n_kv, hd, type, smol_kv_pages_for(n_pos), err)) {
        fprintf(stderr, "bench_attention: %s\n", err);
        return 1;
    }
    smol_kv_seq_init(&seq);
    if (smol_kv_seq_reserve(&kv, &seq, 0, n_pos, err)) { fprintf(stderr, "bench_attention: %s\n", err); return 1; }
    /* random keys and values in [-1, 1), written through the whole cache (pages resident), row by row
     * in the cache's type */
    uint32_t x = 12345;
    const size_t n_rows = kv.layer_bytes * layers / kv.row_bytes;
    float kr[128], vr[128];
    for (size_t r = 0; r < n_rows; r++) {
        for (int i = 0; i < hd; i++) {
            x = x * 1664525u + 1013904223u;
            kr[i] = (float)(x >> 8) / (1 << 23) - 1.0f;
            vr[i] = (float)(x & 0xffff) / 32768.0f - 1.0f;
        }
        char *kd = (char *)kv.k + r * kv.row_bytes, *vd = (char *)kv.v + r * kv.row_bytes;
        if (type == SMOL_TYPE_Q8_0) {
            smol_quantize_q8_0_ref(kr, kd, hd);
            smol_quantize_q8_0_ref(vr, vd, hd);
        } else if (type == SMOL_TYPE_F16) {
            for (int i = 0; i < hd; i++) {
                ((smol_half *)kd)[i] = smol_f32_to_half(kr[i]);
                ((smol_half *)vd)[i] = smol_f32_to_half(vr[i]);
            }
        } else {
            memcpy(kd, kr, sizeof kr);
            memcpy(vd, vr, sizeof vr);
        }
    }
    float *q = malloc(sizeof(float) * n_heads * hd), *out = malloc(sizeof(float) * n_heads * hd);
    for (int i = 0; i < n_heads * hd; i++) q[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1;
    const int32_t tok = 0, pos = depth;
    struct smol_kv_seq *sp = &seq;
    const struct smol_batch b = {.n_tokens = 1, .tokens = &tok, .pos = &pos, .seq = &sp};
    double best = 1e30, check = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now();
        for (int l = 0; l < layers; l++) be->attention(be, out, q, &kv, l, &b, n_heads, 1.0f / sqrtf((float)hd));
        double t = now() - t0;
        if (t < best) best = t;
        for (int i = 0; i < n_heads * hd; i++) check += out[i];
    }
    const double bytes = 2.0 * n_pos * n_kv * kv.row_bytes * layers;
    printf("decode attention: depth %d, %d layers, %d threads (%s), kv %s: %.3f ms per token, cache read %.2f GB/s "
           "(%.1f MB; checksum %.3g)\n",
           depth, layers, be->n_threads, be->name, kv_name, best * 1e3, bytes / best / 1e9, bytes / 1e6, check);
    smol_kv_seq_deinit(&kv, &seq);
    smol_kv_deinit(&kv);
    smol_backend_free(&be);
    free(q);
    free(out);
    return 0;
}
