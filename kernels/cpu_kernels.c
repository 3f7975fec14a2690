/*
 * cpu_kernels.c - builds the kernel tables (see cpu_kernels.h): the scalar
 * reference table, then each SIMD variant on top of it (a variant overrides
 * only the entries it implements), and picks the best one the CPU runs
 * (cpuid via __builtin_cpu_supports), unless SMOL_CPU names one.
 */
#include "cpu_kernels.h"
#include "ops_ref.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct smol_cpu_kernels ref_table, avx2_table, avxvnni_table, avx512_table, amx_table, best_table;
static int have_avx2, have_avxvnni, have_avx512, have_amx;
static char why[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fill_ref(struct smol_cpu_kernels *k)
{
    memset(k, 0, sizeof *k);
    k->name = "cpu-ref";
    for (uint32_t t = 0; t < SMOL_TYPE_COUNT; t++) {
        const struct smol_type_traits *tr = smol_type_traits(t);
        if (!tr) continue;
        k->vec_dot[t] = tr->vec_dot;
        k->quantize[t] = tr->quantize;
    }
    k->kv_dot[SMOL_TYPE_F32] = smol_vec_dot_f32_ref;
    k->kv_dot[SMOL_TYPE_F16] = smol_vec_dot_f16_ref;
    k->kv_axpy[SMOL_TYPE_F32] = smol_axpy_f32_ref;
    k->kv_axpy[SMOL_TYPE_F16] = smol_axpy_f16_ref;
    k->kv_scores[SMOL_TYPE_F32] = smol_kv_scores_f32_ref;
    k->kv_scores[SMOL_TYPE_F16] = smol_kv_scores_f16_ref;
    k->kv_accum[SMOL_TYPE_F32] = smol_kv_accum_f32_ref;
    k->kv_accum[SMOL_TYPE_F16] = smol_kv_accum_f16_ref;
    k->kv_scores[SMOL_TYPE_Q8_0] = smol_kv_scores_q8_0_ref;
    k->kv_accum[SMOL_TYPE_Q8_0] = smol_kv_accum_q8_0_ref;
    k->silu_mul = smol_silu_mul_ref;
    k->softmax = smol_softmax_ref;
}

static void init(void)
{
    fill_ref(&ref_table);
    avx2_table = ref_table;
    have_avx2 = smol_cpu_fill_avx2(&avx2_table);
    avxvnni_table = avx2_table;
    have_avxvnni = have_avx2 && smol_cpu_fill_avxvnni(&avxvnni_table);
    avx512_table = have_avx2 ? avx2_table : ref_table;
    have_avx512 = smol_cpu_fill_avx512(&avx512_table);
    amx_table = avx512_table;
    have_amx = have_avx512 && smol_cpu_fill_amx(&amx_table);

    const char *force = getenv("SMOL_CPU");
    if (force && !strcmp(force, "ref")) best_table = ref_table;
    else if (force && !strcmp(force, "avx2") && have_avx2) best_table = avx2_table;
    else if (force && !strcmp(force, "avxvnni") && have_avxvnni) best_table = avxvnni_table;
    else if (force && !strcmp(force, "avx512") && have_avx512) best_table = avx512_table;
    else if (have_amx) best_table = amx_table;
    else if (have_avx512) best_table = avx512_table;
    else if (have_avxvnni) best_table = avxvnni_table;
    else if (have_avx2) best_table = avx2_table;
    else best_table = ref_table;
    const int forced = force && *force, met = forced && (!strcmp(force, "ref") || !strcmp(best_table.name + 4, force));
    const char *refused = forced && strcmp(force, "avx2") && strcmp(force, "avxvnni") && strcmp(force, "avx512") &&
                                  strcmp(force, "amx")
                              ? "not a kernel variant (ref, avx2, avxvnni, avx512, amx)"
                              : "not built for or not supported by this CPU";
    if (forced && !met) fprintf(stderr, "SMOL_CPU=%s: %s; using %s\n", force, refused, best_table.name);
    /* the variants this CPU runs, best first: the automatic choice is the first */
    char runs[64];
    snprintf(runs, sizeof runs, "%s%s%s%s", have_amx ? "amx " : "", have_avx512 ? "avx512 " : "",
             have_avxvnni ? "avxvnni " : "", have_avx2 ? "avx2 " : "");
    if (forced && met) snprintf(why, sizeof why, "SMOL_CPU=%s (this CPU runs: %sref)", force, runs);
    else if (forced) snprintf(why, sizeof why, "SMOL_CPU=%.32s: %s, so the best this CPU runs (%sref)", force, refused, runs);
    else snprintf(why, sizeof why, "automatic: the best this CPU runs (%sref)", runs);
}

const char *smol_cpu_kernels_why(void)
{
    pthread_once(&once, init);
    return why;
}

const struct smol_cpu_kernels *smol_cpu_kernels(void)
{
    pthread_once(&once, init);
    return &best_table;
}

const struct smol_cpu_kernels *smol_cpu_kernels_ref(void)
{
    pthread_once(&once, init);
    return &ref_table;
}

const struct smol_cpu_kernels *smol_cpu_kernels_variant(const char *name)
{
    pthread_once(&once, init);
    if (!strcmp(name, "ref")) return &ref_table;
    if (!strcmp(name, "avx2")) return have_avx2 ? &avx2_table : NULL;
    if (!strcmp(name, "avxvnni")) return have_avxvnni ? &avxvnni_table : NULL;
    if (!strcmp(name, "avx512")) return have_avx512 ? &avx512_table : NULL;
    if (!strcmp(name, "amx")) return have_amx ? &amx_table : NULL;
    return NULL;
}
