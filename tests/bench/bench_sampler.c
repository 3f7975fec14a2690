/*
 * bench_sampler.c - microseconds per sample on SmolLM3's 128256-token
 * vocabulary, for the shapes of logits that matter: peaked (a confident
 * model: a Gaussian bulk plus a few strong candidates) and flat (the worst
 * case for top-p: the set spans most of the vocabulary).
 *
 * Reports thread CPU time, so other load on the machine does not inflate it.
 *   build/bench/bench_sampler [n_samples]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/text/sampler.h"

#define V 128256

static unsigned long long lcg = 88172645463325252ull;
static double urand(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1.0p-53;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    if (n <= 0) n = 200;
    float *peaked = malloc(V * sizeof *peaked), *flat = malloc(V * sizeof *flat);
    if (!peaked || !flat) return 1;
    for (int i = 0; i < V; i++) {
        double u1 = urand() + 1e-12, u2 = urand();
        peaked[i] = (float)(2.5 * sqrt(-2.0 * log(u1)) * cos(6.283185307 * u2));
        flat[i] = (float)(urand() * 3.0);
    }
    for (int i = 0; i < 20; i++) peaked[(i * 7919) % V] = 12.0f + (float)i * 0.3f;

    struct smol_sampler_scratch *sc;
    char err[SMOL_ERRLEN];
    if (smol_sampler_scratch_new(&sc, V, err)) { fprintf(stderr, "%s\n", err); return 1; }
    struct { const char *name; const float *logits; float temperature, top_p, min_p, rep; int top_k; } cfg[] = {
        { "greedy", peaked, 0.0f, 1.0f, 0.0f, 1.0f, 0 },
        { "defaults (T.6 p.95)", peaked, 0.6f, 0.95f, 0.0f, 1.0f, 0 },
        { "defaults + rep 1.1", peaked, 0.6f, 0.95f, 0.0f, 1.1f, 0 },
        { "T=1 only", peaked, 1.0f, 1.0f, 0.0f, 1.0f, 0 },
        { "min_p 0.05", peaked, 0.6f, 1.0f, 0.05f, 1.0f, 0 },
        { "top_k 40", peaked, 0.6f, 0.95f, 0.0f, 1.0f, 40 },
        { "defaults, flat", flat, 0.6f, 0.95f, 0.0f, 1.0f, 0 },
        { "top_k 40, flat", flat, 0.6f, 0.95f, 0.0f, 1.0f, 40 },
        { "T=1 only, flat", flat, 1.0f, 1.0f, 0.0f, 1.0f, 0 },
    };
    printf("%-22s %10s  (V=%d, %d samples, thread CPU time)\n", "config", "us/sample", V, n);
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        struct smol_sampler_params p = smol_sampler_defaults();
        p.temperature = cfg[c].temperature;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        p.repetition_penalty = cfg[c].rep;
        struct smol_sampler *s;
        if (smol_sampler_new(&s, &p, V, err)) { fprintf(stderr, "%s\n", err); return 1; }
        double t0 = now_us();
        for (int i = 0; i < n; i++) {
            int32_t t;
            if (smol_sampler_sample(s, sc, cfg[c].logits, &t, NULL, err)) { fprintf(stderr, "%s\n", err); return 1; }
        }
        printf("%-22s %10.1f\n", cfg[c].name, (now_us() - t0) / n);
        smol_sampler_free(&s);
    }
    smol_sampler_scratch_free(&sc);
    free(peaked);
    free(flat);
    return 0;
}
