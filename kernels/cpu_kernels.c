/* cpu_kernels.c - builds the kernel tables (see cpu_kernels.h). */
#include "cpu_kernels.h"
#include "ops_ref.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct smol_cpu_kernels ref_table, best_table;
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
}

static void init(void)
{
    fill_ref(&ref_table);
    best_table = ref_table;
    const char *force = getenv("SMOL_CPU");
    if (force && !strcmp(force, "ref")) return;
    /* SIMD variants install themselves here (CPU-speed work). */
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
